//! What a confined program created that its view could not hold read-only: a `.git` or
//! `kiln.toml` where none existed when the call began (the view protects those that existed).
//! A planted `.git` with an `fsmonitor` or hooks would run outside the sandbox in the user's
//! next `git status`. Removed after the call, named; the call is refused. The only workspace
//! writes kiln makes outside its writer, and only of what the call itself made.
// Writes outside the workspace: removes a .git or kiln.toml a confined program created during its call, nothing else.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

/// Of `now` (the protected paths of `workspace` after a call), the `.git` and `kiln.toml`
/// that are not among `before` (a program of the call made them): each removed, without
/// following a link, and returned workspace-relative. (`.kiln` holds only what kiln writes for
/// people, nothing it trusts, and kiln itself may create it while a program runs: it is left.)
pub(crate) fn remove_new(workspace: &Path, before: &[PathBuf], now: Vec<PathBuf>) -> Vec<String> {
    let mut planted = Vec::new();
    for p in now {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if before.contains(&p) || !matches!(name, ".git" | "kiln.toml") {
            continue;
        }
        let removed = match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
            Ok(_) => std::fs::remove_file(&p),
            Err(e) => Err(e),
        };
        let rel = p.strip_prefix(workspace).unwrap_or(&p);
        let rel = kiln_protocol::terminal::printable(&rel.to_string_lossy()).into_owned();
        planted.push(match removed {
            Ok(()) => format!("`{rel}`"),
            Err(e) => format!("`{rel}` (which could not be removed: {e}; remove it yourself)"),
        });
    }
    planted.sort();
    planted
}
