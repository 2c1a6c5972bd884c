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
/// line (`EACCES: permission denied, open '/usr/x'`). A quoted path is taken whole, spaces
/// included, and so is an unquoted one whose directory has spaces and exists on the host. Each
/// path is normalised (`.` and `//` dropped, `..` taken off what precedes it) before it is
/// judged: `/tmp/../etc/x` is `/etc/x`.
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
        let Some(path) = path_before(before).or_else(|| path_after(after)) else {
            continue;
        };
        let path = normalize(Path::new(path));
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

/// `path` with `.` dropped, `..` taken off the part before it (never above the root) and
/// repeated separators made one; no link is followed.
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if out.file_name().is_some() {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The quotes a path may be put in, as (opening, closing).
const QUOTES: &[(char, char)] = &[
    ('\'', '\''),
    ('"', '"'),
    ('`', '\''),
    ('`', '`'),
    ('‘', '’'),
    ('“', '”'),
];

/// Separators a tool prints between a path and the error that follows it.
const TRAILING: &[char] = &[':', ',', ';', ' ', '\t', ')', ']'];

/// The path right before an error's text: the quoted one that ends there, else the last word
/// starting with `/` (with the words after it, when the whole is a path whose directory,
/// spaces included, exists on the host: an unquoted path with spaces).
fn path_before(before: &str) -> Option<&str> {
    let text = before.trim_end_matches(TRAILING);
    if let Some(close) = text.chars().last()
        && let Some(p) = QUOTES
            .iter()
            .filter(|(_, c)| *c == close)
            .filter_map(|(open, _)| {
                let inner = &text[..text.len() - close.len_utf8()];
                inner.rfind(*open).map(|at| &inner[at + open.len_utf8()..])
            })
            .filter(|p| p.starts_with('/'))
            .min_by_key(|p| p.len())
    {
        return Some(p);
    }
    let word = words(text).rev().find(|w| w.starts_with('/'))?;
    // Where the word starts in `text` (words are slices of it).
    let start = word.as_ptr() as usize - text.as_ptr() as usize;
    let span = &text[start..];
    // Only a directory with a space that exists: `/opt/q is not writable` stays `/opt/q`.
    if span != word
        && let Some(dir) = Path::new(span).parent()
        && dir.as_os_str().len() > word.len()
        && dir.is_dir()
    {
        return Some(span);
    }
    Some(word)
}

/// The first path after an error's text: the first quoted one, else the first word starting
/// with `/`.
fn path_after(after: &str) -> Option<&str> {
    for (i, c) in after.char_indices() {
        if let Some((_, close)) = QUOTES.iter().find(|(o, _)| *o == c) {
            let rest = &after[i + c.len_utf8()..];
            if rest.starts_with('/')
                && let Some(end) = rest.find(*close)
            {
                return Some(&rest[..end]);
            }
        }
    }
    words(after).find(|w| w.starts_with('/'))
}

/// The words of `text`, quotes and separators taken off.
fn words(text: &str) -> impl DoubleEndedIterator<Item = &str> {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '\'' | '"' | '`' | '‘' | '’' | '“' | '”' | '(' | ')' | '<' | '>' | '[' | ']'
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

    #[test]
    fn paths_are_normalised_and_kept_whole_with_their_spaces() {
        let t = tempfile::tempdir().unwrap();
        let spaced = t.path().join("my dir");
        std::fs::create_dir(&spaced).unwrap();
        let out = format!(
            "touch: cannot touch '/tmp/../etc//shadow': Permission denied\n\
             touch: cannot touch '/opt/two words/x': Read-only file system\n\
             ld: cannot open output file {}/z: Permission denied\n\
             error: /opt/q is not writable: Permission denied\n\
             open(\"/srv/./a b/c\"): Operation not permitted\n\
             cp: cannot create regular file ‘/opt/curly one’: Permission denied\n",
            spaced.display()
        );
        let names: Vec<_> = paths_in(&out, &reach)
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "/etc/shadow".to_string(),
                "/opt/two words/x".into(),
                format!("{}/z", spaced.display()),
                // Unquoted, and "/opt/q is not" is no directory: the one word.
                "/opt/q".into(),
                "/srv/a b/c".into(),
                "/opt/curly one".into(),
            ]
        );
        assert_eq!(normalize(Path::new("/a/../../b//c/.")), Path::new("/b/c"));
    }
}
