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
        let path = p.path.display();
        out.push(match p.reach {
            Reach::ReadOnly if p.in_workspace => format!(
                "wrote a read-only path of the workspace: {path} (the program reported \"{}\"; kiln keeps `.git`, `.kiln`, `kiln.toml` and `[sandbox] protect` read-only to programs, and the whole workspace while a review runs); no grant changes that",
                p.error
            ),
            // Readable but refused; or refused where nothing exists (no read fails with
            // "Permission denied" on a missing file: it was being made).
            Reach::ReadOnly | Reach::Outside
                if p.reach == Reach::ReadOnly || (p.error != MISSING && !p.path.exists()) =>
            {
                format!(
                    "wrote outside the workspace: {path} (the program reported \"{}\"; kiln's sandbox lets programs write only the workspace, their temp dir and granted paths); use the temp dir (`TMPDIR`) or {}",
                    p.error,
                    grant("`write` for it")
                )
            }
            Reach::Outside if p.error != MISSING => format!(
                "refused outside the workspace: {path} (the program reported \"{}\"; kiln's sandbox lets programs read only the workspace, the system, their temp dir and granted paths); use the temp dir (`TMPDIR`) or {}",
                p.error,
                grant("`read` or `write` for it")
            ),
            _ => format!(
                "outside the program's view: {path} (the program reported \"{}\"; kiln's sandbox shows programs only the workspace, the system, their temp dir and granted paths); use the temp dir (`TMPDIR`) or {}",
                p.error,
                grant("`read` or `write` for it")
            ),
        });
    }
    out
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
