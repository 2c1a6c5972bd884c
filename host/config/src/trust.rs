//! Trust records: which workspace `kiln.toml` the user has trusted (`kiln trust`), kept by
//! content hash in the user's state directory, with the workspace files its trusted settings
//! name (a server's script, a hook, a plugin's component), pinned by content: trust is given
//! to what runs, not to a file name a program of a run or a model's edit could fill later.

use crate::files::{sha256_hex, user_config_path, user_state_dir};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Whether the workspace's `kiln.toml` applied whole. Like direnv and mise, a file kiln has not
/// seen, or that changed since the user ran `kiln trust`, applies only an allowlist of fields
/// that can neither widen access nor raise limits or cost (each field's rule, written beside
/// it in the schema, see [`crate::narrowing::Narrow`]: limits that lower the effective value,
/// `[sandbox]` protections, `[fix]` prompt/format/max_iters that lower, a few `[llm]` sampling
/// settings, lowered `[llm]` limits and a lowered `[budget]`) until it is trusted again;
/// every other field is ignored and named in the warning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Trust {
    /// No workspace kiln.toml, or nothing in it needs trust.
    #[default]
    NotNeeded,
    /// Its content is the one the user trusted.
    Trusted,
    /// Applied because of `--yes` / `KILN_YES=1`.
    Assumed,
    /// Not trusted: these settings were ignored.
    Untrusted {
        /// The workspace's kiln.toml.
        path: PathBuf,
        /// The settings that were ignored (`plugins.x.exec`, `agent.hooks`, ...).
        ignored: Vec<String>,
        /// Lines added (`+ ...`) and removed (`- ...`) since the trusted version; empty when
        /// the file was never trusted.
        changed: Vec<String>,
        /// A trust record an older kiln kept beside the user's configuration: no longer read.
        stale_record: Option<PathBuf>,
    },
}

impl Trust {
    /// The message for a person, when something was ignored.
    pub fn warning(&self) -> Option<String> {
        let Trust::Untrusted {
            path,
            ignored,
            changed,
            stale_record,
        } = self
        else {
            return None;
        };
        let mut m = if changed.is_empty() {
            format!(
                "{} is not trusted yet: kiln applies only fields that cannot widen access or raise limits or cost, and ignores {}.",
                path.display(),
                ignored.join(", ")
            )
        } else {
            format!(
                "{} changed since you trusted it; until you trust it again kiln applies only fields that cannot widen access or raise limits or cost, and ignores {}. Changed lines:\n{}",
                path.display(),
                ignored.join(", "),
                changed
                    .iter()
                    .map(|l| format!("  {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        };
        m.push_str(
            "\nReview it, then run `kiln trust` (or pass --yes / KILN_YES=1 to apply it for one run, e.g. in CI).",
        );
        if let Some(old) = stale_record {
            m.push_str(&format!(
                "\nNote: {} is a trust record of an older kiln; trust records now live in the user's state directory and the old one is not read.",
                old.display()
            ));
        }
        Some(m)
    }
}

/// Where trusted copies of workspace `kiln.toml` files are kept: `trust/` in kiln's state
/// directory (`$XDG_STATE_HOME/kiln/trust`, else `~/.local/state/kiln/trust`), one file per
/// workspace keyed by the hash of its canonical path.
pub fn trust_dir() -> Option<PathBuf> {
    user_state_dir().map(|d| d.join("trust"))
}

/// The key of `workspace`: the hash of its canonical path.
pub(crate) fn workspace_key(workspace: &Path) -> String {
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    sha256_hex(canonical.as_os_str().as_encoded_bytes())[..32].to_string()
}

/// The file holding the trusted copy of `workspace`'s kiln.toml.
pub(crate) fn trust_file(workspace: &Path) -> Option<PathBuf> {
    trust_dir().map(|d| d.join(format!("{}.toml", workspace_key(workspace))))
}

/// Where kiln kept the record before (`trusted/` beside the user's configuration file); such
/// a record is no longer read, only mentioned.
pub(crate) fn old_trust_file(workspace: &Path) -> Option<PathBuf> {
    let key = &sha256_hex(workspace.as_os_str().as_encoded_bytes())[..32];
    user_config_path()
        .and_then(|p| p.parent().map(|d| d.join("trusted")))
        .map(|d| d.join(format!("{key}.toml")))
}

pub(crate) fn trusted_copy(workspace: &Path) -> Option<String> {
    std::fs::read_to_string(trust_file(workspace)?).ok()
}

/// Lines removed (`- `) and added (`+ `) between two versions, in order of appearance; a line
/// that may hold a secret is shown without its value (`redact`).
pub(crate) fn line_changes(old: &str, new: &str) -> Vec<String> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out: Vec<String> = old_lines
        .iter()
        .filter(|l| !new_lines.contains(l))
        .map(|l| format!("- {}", crate::redact::line(l)))
        .collect();
    out.extend(
        new_lines
            .iter()
            .filter(|l| !old_lines.contains(l))
            .map(|l| format!("+ {}", crate::redact::line(l))),
    );
    out
}

/// The files the workspace's trust-needing settings name, by workspace-relative path, each
/// with its pin: `sha256:<hex>` of a regular file's content, `link:<target>` of a symbolic
/// link. A setting "needs trust" when an untrusted file may not set it (`ignored`, as the
/// narrowing names them: `mcp.servers.notes`, `agent.hooks`, `plugins.x.path`, ...); every
/// string under it, and each word of it, that names an entry of the workspace is pinned.
pub(crate) fn named_files(
    workspace: &Path,
    text: &str,
    ignored: &[String],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(value) = text.parse::<toml::Table>() else {
        return out;
    };
    let keys: Vec<&str> = ignored
        .iter()
        .map(|i| i.split(" (").next().unwrap_or(i).trim())
        .collect();
    let mut strings = Vec::new();
    collect_strings("", &toml::Value::Table(value), &keys, &mut strings);
    for s in strings {
        let words = s.split_whitespace().map(str::to_string);
        for candidate in std::iter::once(s.clone()).chain(words) {
            if let Some((rel, pin)) = pin_of(workspace, &candidate) {
                out.insert(rel, pin);
            }
        }
    }
    out
}

/// Every string under a key in `keys` (dotted paths; a key's sub-keys are under it).
fn collect_strings(path: &str, v: &toml::Value, keys: &[&str], out: &mut Vec<String>) {
    let under = |p: &str| {
        keys.iter()
            .any(|k| p == *k || p.starts_with(&format!("{k}.")))
    };
    match v {
        toml::Value::String(s) if under(path) => out.push(s.clone()),
        toml::Value::Array(items) => items
            .iter()
            .for_each(|i| collect_strings(path, i, keys, out)),
        toml::Value::Table(t) => t.iter().for_each(|(k, v)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            collect_strings(&p, v, keys, out)
        }),
        _ => {}
    }
}

/// The pin of `candidate` when it names an entry of the workspace (relative, or absolute
/// inside it): its workspace-relative path and `sha256:`/`link:`; `None` for anything else
/// (an option, a URL, a directory, a program on `PATH`, a path leaving the workspace).
fn pin_of(workspace: &Path, candidate: &str) -> Option<(String, String)> {
    let c = candidate.trim();
    if c.is_empty() || c.starts_with('-') || c.contains("://") || c.len() > 4096 {
        return None;
    }
    let rel = match Path::new(c).strip_prefix(workspace) {
        Ok(r) => r.to_string_lossy().into_owned(),
        Err(_) if c.starts_with('/') => return None,
        Err(_) => c.trim_start_matches("./").to_string(),
    };
    crate::path::check_relative(&rel).ok()?;
    let full = workspace.join(&rel);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    let pin = if meta.file_type().is_symlink() {
        format!("link:{}", std::fs::read_link(&full).ok()?.display())
    } else if meta.is_file() {
        format!("sha256:{}", sha256_hex(&std::fs::read(&full).ok()?))
    } else {
        return None;
    };
    Some((rel, pin))
}

/// The file holding the pins of `workspace`'s trusted files, beside its trusted copy.
pub(crate) fn pins_file(workspace: &Path) -> Option<PathBuf> {
    trust_dir().map(|d| d.join(format!("{}.files.toml", workspace_key(workspace))))
}

/// The pins recorded when the user trusted the file (`None`: no record, as an older kiln
/// trusted without one).
pub(crate) fn recorded_pins(workspace: &Path) -> Option<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(pins_file(workspace)?).ok()?;
    toml::from_str(&text).ok()
}

/// What differs between the pins recorded and those now, one line each for a person (empty:
/// the same). No record at all counts as a difference only when something is named now.
pub(crate) fn pin_changes(
    recorded: Option<&BTreeMap<String, String>>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    let Some(recorded) = recorded else {
        return now
            .keys()
            .map(|p| format!("~ {p} (a file it names; not pinned when it was trusted)"))
            .collect();
    };
    let mut out = Vec::new();
    for (path, pin) in now {
        match recorded.get(path) {
            Some(old) if old == pin => {}
            Some(_) => out.push(format!(
                "~ {path} (a file it names) changed since you trusted it"
            )),
            None => out.push(format!(
                "~ {path} (a file it names) was not there when you trusted it"
            )),
        }
    }
    for path in recorded.keys().filter(|p| !now.contains_key(*p)) {
        out.push(format!(
            "~ {path} (a file it names) is gone or no longer a file"
        ));
    }
    out
}
