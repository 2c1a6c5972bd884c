//! What kiln's sandbox refused a failed check, said to the person (and the model) as notes
//! that name what was refused and how to allow it. The facts come from `kiln-sandbox`'s
//! [`Refusals`]: sockets the kernel reported refusing, and paths the program reported refused
//! where kiln's rules refuse them.

use super::confine::refused::MISSING;
use super::confine::{Reach, Refusals};
use super::{Diagnostic, Severity};

/// The code of kiln's sandbox notes among a check's diagnostics.
pub const SANDBOX_CODE: &str = "sandbox";

/// How to get a runner's dependencies before kiln runs it without network.
fn fetch_hint(runner: &str) -> &'static str {
    match runner {
        "cargo" => "fetch dependencies first (`cargo fetch`)",
        "go" => "fetch dependencies first (`go mod download`)",
        "node" | "tsc" => "install dependencies first (`npm install`)",
        "pytest" => {
            "install dependencies first (`pip install` into the project's virtual environment)"
        }
        _ => "fetch what it downloads before running kiln",
    }
}

/// The notes for what the sandbox refused the programs of plugin `plugin`, or of a program
/// kiln runs on its own account (`None`: a hook, which nothing can grant more); empty when
/// nothing was refused.
pub fn messages(plugin: Option<&str>, refused: &Refusals) -> Vec<String> {
    let runner = plugin.unwrap_or("");
    let grant = |what: &str| match plugin {
        Some(p) => {
            format!("grant {what} under `[plugins.{p}]` (your user config or a trusted kiln.toml)")
        }
        None => "a hook gets no grant".to_string(),
    };
    let mut out = Vec::new();
    // Netlink sockets reach the kernel, not the network: programs open them to list
    // interfaces (name resolution does), and a refusal there is rarely why they failed.
    let sockets: Vec<_> = refused
        .sockets
        .iter()
        .filter(|a| a.family_name() != "AF_NETLINK")
        .collect();
    if !sockets.is_empty() {
        let mut families: Vec<(String, usize)> = Vec::new();
        for a in &sockets {
            let name = a.family_name();
            match families.iter_mut().find(|(n, _)| *n == name) {
                Some((_, k)) => *k += 1,
                None => families.push((name, 1)),
            }
        }
        let what = families
            .iter()
            .map(|(n, k)| {
                if *k > 1 {
                    format!("{n} ×{k}")
                } else {
                    n.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.push(format!(
            "no network for programs: kiln's sandbox refused {} ({what}, as the kernel reported); {}, or {}",
            kiln_protocol::terminal::count(sockets.len(), "network socket", "network sockets"),
            grant("`net = true`"),
            fetch_hint(runner)
        ));
    }
    for p in &refused.paths {
        let path = shown(&p.path);
        let error = p.error;
        // What to do instead: the temp dir, and a grant unless the path is one no grant should
        // cover (a hook gets none anyway).
        let instead = |what: &str| match (plugin, no_grant(&p.path)) {
            (Some(_), Some(why)) => {
                format!("use the temp dir (`TMPDIR`); kiln advises no grant there: {why}")
            }
            _ => format!("use the temp dir (`TMPDIR`) or {}", grant(what)),
        };
        out.push(match p.reach {
            Reach::ReadOnly if p.in_workspace => format!(
                "the program reported a refused write to a read-only path of the workspace: {path} (\"{error}\"); kiln keeps `.git`, `.kiln`, `kiln.toml` and `[sandbox] protect` read-only to programs, and the whole workspace while a review runs; no grant changes that"
            ),
            // Readable but refused; or refused where nothing exists (no read fails with
            // "Permission denied" on a missing file: it was being made).
            Reach::ReadOnly | Reach::Outside
                if p.reach == Reach::ReadOnly || (p.error != MISSING && !p.path.exists()) =>
            {
                format!(
                    "the program reported a refused write outside the workspace: {path} (\"{error}\"); kiln's sandbox lets programs write only the workspace, their temp dir and granted paths; {}",
                    instead("`write` for it")
                )
            }
            Reach::Outside if p.error != MISSING => format!(
                "the program reported a refused path outside the workspace: {path} (\"{error}\"); kiln's sandbox lets programs read only the workspace, the system, their temp dir and granted paths; {}",
                instead("`read` or `write` for it")
            ),
            _ => format!(
                "the program reported a missing path outside its view: {path} (\"{error}\"); kiln's sandbox shows programs only the workspace, the system, their temp dir and granted paths; {}",
                instead("`read` or `write` for it")
            ),
        });
    }
    out
}

/// `path` as a note shows it: every control character (tabs too) and bidirectional override
/// written as a visible escape, so a path a program printed cannot restyle or rewrite the line.
fn shown(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    kiln_protocol::terminal::printable(&text).replace('\t', "\\u{9}")
}

/// System directories: a program has no business writing them, and no grant is advised for
/// a path in, or holding, one.
const SYSTEM: &[&str] = &[
    "/etc",
    "/root",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var/lib",
    "/var/spool",
];

/// Paths under the user's home that hold secrets (keys, tokens, credentials), or code that
/// their shell, desktop or tools run (startup files, `PATH` directories, tool configuration
/// that names programs, build caches their next unconfined build trusts): a grant there would
/// hand a program the user's keys or their next session.
const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".gitconfig",
    ".config/git",
    ".config/gh",
    ".config/gcloud",
    ".pypirc",
    ".npmrc",
    ".yarnrc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".cargo/config",
    ".cargo/config.toml",
    ".cargo/bin",
    ".local/bin",
    "bin",
    "go/bin",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".config/autostart",
    ".config/systemd",
    ".config/environment.d",
    ".pam_environment",
    ".xprofile",
    ".xinitrc",
    ".vimrc",
    ".config/nvim",
    ".emacs",
    ".emacs.d",
    ".cache/go-build",
    ".cache/pip",
];

/// Why kiln advises no grant for `path` (as written, and with its links resolved): it is,
/// lies in or holds a system directory, a secret or startup file of the user's home, or one
/// of kiln's own directories; `None` when a grant is fine to advise.
fn no_grant(path: &std::path::Path) -> Option<String> {
    use std::path::Path;
    let forms = [path.to_path_buf(), kiln_state::resolve(path)];
    let covers = |dir: &Path| {
        forms
            .iter()
            .any(|p| p.starts_with(dir) || dir.starts_with(p))
    };
    if let Some(d) = SYSTEM.iter().map(Path::new).find(|d| covers(d)) {
        return Some(format!("{} is the system's", d.display()));
    }
    if let Some(home) = kiln_env::env().home().map(Path::to_path_buf)
        && home.is_absolute()
    {
        for h in [home.clone(), kiln_state::resolve(&home)] {
            if let Some(rel) = HOME_SECRETS.iter().find(|rel| covers(&h.join(rel))) {
                return Some(format!(
                    "~/{rel} holds secrets, or code your shell or tools run"
                ));
            }
        }
    }
    super::kiln_dirs::kiln_dirs(None)
        .into_iter()
        .find(|d| covers(&d.path) || covers(&kiln_state::resolve(&d.path)))
        .map(|d| format!("it is, or holds, {}", d.what))
}

/// [`messages`] as notes that lead a check's diagnostics.
pub fn diagnostics(runner: &str, refused: &Refusals) -> Vec<Diagnostic> {
    messages(Some(runner), refused)
        .into_iter()
        .map(|message| Diagnostic {
            file: String::new(),
            line: 0,
            column: 0,
            severity: Severity::Note,
            code: Some(SANDBOX_CODE.into()),
            message,
        })
        .collect()
}

/// Whether `d` is one of kiln's sandbox notes (not the tool's own diagnostic).
pub fn is_sandbox_note(d: &Diagnostic) -> bool {
    d.file.is_empty() && d.code.as_deref() == Some(SANDBOX_CODE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::RefusedPath;
    use std::path::PathBuf;

    fn note(path: &str, reach: Reach) -> String {
        let refused = Refusals {
            sockets: Vec::new(),
            paths: vec![RefusedPath {
                path: PathBuf::from(path),
                reach,
                error: "Permission denied",
                in_workspace: false,
            }],
        };
        messages(Some("command"), &refused).remove(0)
    }

    #[test]
    fn a_path_note_is_the_programs_report_and_never_advises_a_grant_on_secrets() {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        for path in [
            "/root/.ssh/authorized_keys".to_string(),
            format!("{home}/.ssh/authorized_keys"),
            format!("{home}/.bashrc"),
            format!("{home}/.config"),
            "/etc/cron.d/x".into(),
            "/usr/local/bin/x".into(),
            "/".into(),
        ] {
            for reach in [Reach::Outside, Reach::ReadOnly] {
                let n = note(&path, reach);
                assert!(n.starts_with("the program reported "), "{n}");
                assert!(n.contains("kiln advises no grant there"), "{n}");
                assert!(!n.contains("grant `"), "{n}");
            }
        }
        // Elsewhere the grant is advised, for the plugin that ran the program.
        let n = note("/opt/kiln-refusal-test/cache", Reach::Outside);
        assert!(
            n.starts_with(
                "the program reported a refused write outside the workspace: /opt/kiln-refusal-test/cache (\"Permission denied\")"
            ),
            "{n}"
        );
        assert!(
            n.contains("grant `write` for it under `[plugins.command]`"),
            "{n}"
        );
    }

    #[test]
    fn control_characters_in_a_path_are_escaped() {
        let n = note("/opt/a\u{1b}[2Kb\tc\rd", Reach::Outside);
        assert!(n.contains("/opt/a\\u{1b}[2Kb\\u{9}c\\u{d}d"), "{n}");
        assert!(!n.chars().any(|c| c.is_control()), "{n:?}");
    }
}
