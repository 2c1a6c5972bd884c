//! Trust records: which workspace `kiln.toml` the user has trusted (`kiln trust`), kept by
//! content hash in the user's state directory.

use crate::files::{sha256_hex, user_config_path, user_state_dir};
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

/// Lines removed (`- `) and added (`+ `) between two versions, in order of appearance.
pub(crate) fn line_changes(old: &str, new: &str) -> Vec<String> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out: Vec<String> = old_lines
        .iter()
        .filter(|l| !new_lines.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        new_lines
            .iter()
            .filter(|l| !old_lines.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}
