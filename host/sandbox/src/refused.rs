//! What kiln's confinement refused a call, for the person to be told: the sockets the kernel
//! reported ([`crate::notify`]), and the paths the program's own output says it was refused
//! where kiln's rules give it no such access.
//!
//! A path is named only when both hold: the program printed the system's error text for it
//! (`Permission denied`, `Read-only file system`, `Operation not permitted`, or `No such file or
//! directory` for a path that exists on the host), and kiln's rules for the call (its view, or
//! its Landlock paths without one) leave that path read-only or outside the program's reach.
//! So the sentence is a fact of kiln's rules, not a guess from the output alone. (The kernel's
//! audit log, which would report Landlock's denials itself, is usually not readable by kiln.)

use crate::notify::Attempt;
use crate::view::Reach;
use std::path::{Path, PathBuf};

/// What the confinement refused a call.
#[derive(Debug, Default, Clone)]
pub struct Refusals {
    /// The sockets (and io_urings) the kernel refused, as the listener saw them.
    pub sockets: Vec<Attempt>,
    /// The paths the program reported refused, where kiln's rules refuse them.
    pub paths: Vec<RefusedPath>,
}

impl Refusals {
    /// Nothing was refused (that kiln can tell).
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty() && self.paths.is_empty()
    }
}

/// A path the program was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedPath {
    /// The path, as the program named it.
    pub path: PathBuf,
    /// What kiln's rules give the program there.
    pub reach: Reach,
    /// The error text the program printed for it.
    pub error: &'static str,
    /// The path is inside the workspace (a protected path, or the review phase's read-only
    /// workspace).
    pub in_workspace: bool,
}

/// The error texts of the system (glibc's `strerror`) that a refusal leaves.
const DENIED: &[&str] = &[
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
];
/// The error text of a path that does not exist.
pub const MISSING: &str = "No such file or directory";

/// At most this many paths are named.
const MAX_PATHS: usize = 8;

/// The paths of `output` that the program reported refused and that `reach` (kiln's rules for
/// the call) does not let it write. The path of an error is the word right before its text
/// (`touch: cannot touch '/usr/x': Read-only file system`), else the first path after it on the
/// line (`EACCES: permission denied, open '/usr/x'`).
pub fn paths_in(output: &str, reach: &dyn Fn(&Path) -> Reach) -> Vec<RefusedPath> {
    let mut found: Vec<RefusedPath> = Vec::new();
    for line in output.lines() {
        let lower = line.to_ascii_lowercase();
        let hit = DENIED
            .iter()
            .chain([&MISSING])
            .find_map(|e| lower.find(&e.to_ascii_lowercase()).map(|at| (*e, at)));
        let Some((error, at)) = hit else { continue };
        let (before, after) = (&line[..at], &line[at + error.len()..]);
        let Some(path) = words(before)
            .last()
            .filter(|w| w.starts_with('/'))
            .or_else(|| words(after).find(|w| w.starts_with('/')))
        else {
            continue;
        };
        let path = PathBuf::from(path);
        let r = reach(&path);
        let refused = match (r, error) {
            (Reach::Writable, _) => false,
            // Missing in the program's world, present in the user's: kiln's view hid it.
            (Reach::Outside, MISSING) => path.parent().is_some_and(Path::exists),
            (Reach::ReadOnly, MISSING) => false,
            _ => true,
        };
        if refused && !found.iter().any(|f| f.path == path) && found.len() < MAX_PATHS {
            found.push(RefusedPath {
                path,
                reach: r,
                error,
                in_workspace: false,
            });
        }
    }
    found
}

/// The words of `text`, quotes and separators taken off.
fn words(text: &str) -> impl DoubleEndedIterator<Item = &str> {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '\'' | '"' | '`' | '‘' | '’' | '(' | ')' | '<' | '>' | '[' | ']'
            )
    })
    .map(|w| w.trim_end_matches([':', ',', ';']))
    .filter(|w| w.len() > 1)
}

/// `path` by Landlock's lists (where the kernel builds no view): under a write root it is
/// writable, under a read root read-only, else out of reach.
pub fn by_lists(path: &Path, read: &[PathBuf], write: &[PathBuf]) -> Reach {
    if write.iter().any(|w| path.starts_with(w)) {
        Reach::Writable
    } else if read.iter().any(|r| path.starts_with(r)) {
        Reach::ReadOnly
    } else {
        Reach::Outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(p: &Path) -> Reach {
        by_lists(p, &[PathBuf::from("/usr")], &[PathBuf::from("/ws")])
    }

    #[test]
    fn a_path_is_named_only_where_the_output_and_kiln_s_rules_agree() {
        let out = "touch: cannot touch '/usr/x': Read-only file system\n\
                   cc: error: /ws/y: Permission denied\n\
                   /usr/bin/ld: cannot open output file /opt/z: Permission denied\n\
                   note: /usr/share/doc is fine\n\
                   cat: /nonexistent-kiln-dir/a: No such file or directory\n\
                   Error: EACCES: permission denied, open '/etc/q'\n";
        let found = paths_in(out, &reach);
        let names: Vec<_> = found.iter().map(|f| f.path.display().to_string()).collect();
        // /ws is writable (the refusal is not kiln's), /usr/share/doc has no error, and a
        // missing path whose parent does not exist on the host was not hidden by kiln.
        assert_eq!(names, ["/usr/x", "/opt/z", "/etc/q"], "{found:?}");
        assert_eq!(found[0].reach, Reach::ReadOnly);
        assert_eq!(found[0].error, "Read-only file system");
        assert_eq!(found[1].reach, Reach::Outside);
        assert_eq!(found[2].error, "Permission denied");
    }
}
