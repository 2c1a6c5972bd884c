//! Git's ignore rules as they were at a run's start. What undo leaves out as git-ignored is
//! judged by these, never by the rules the run left: a run that writes a `.gitignore` naming
//! its own new file (or changes one) must not hide that file from undo. The snapshot keeps the
//! text of every `.gitignore` it found (in the workspace and in the directories above it up to
//! the repository's root) in the run's record; when the `.gitignore` files now differ from
//! those, a second walk by the start's rules finds what the changed rules hide
//! ([`RulesAtStart::reveal`]), and undo records and deletes those files as the run's own.
//!
//! `.git/info/exclude` and the user's global excludes are applied as they are now (nothing a
//! run may write). Read-only: nothing here writes anything.

use super::scan::{self, Kind, Listing, StatKey};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name of git's per-directory ignore file.
const GITIGNORE: &str = ".gitignore";

/// The `.gitignore` texts of the workspace at `root` as a snapshot finds them: key the
/// directory relative to `root` (`""`: the root; `..`, `../..`: the directories above it, up
/// to the repository's root), value the file's text. Empty outside a git repository.
pub fn texts(root: &Path, listing: &Listing) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if repo_root(root).is_none() {
        return out;
    }
    for rel in listing.dirs.iter() {
        if let Some(text) = read_rule_file(root, rel) {
            out.insert(rel.clone(), text);
        }
    }
    // The directories above the workspace, up to the repository's root.
    let mut up = String::new();
    for dir in root.ancestors().skip(1) {
        up = if up.is_empty() {
            "..".into()
        } else {
            format!("{up}/..")
        };
        if let Ok(text) = std::fs::read_to_string(dir.join(GITIGNORE)) {
            out.insert(up.clone(), text);
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    out
}

/// The text of `root/dir/.gitignore`, a regular file (no link followed): `None` when there is
/// none.
fn read_rule_file(root: &Path, dir: &str) -> Option<String> {
    let rel = if dir.is_empty() {
        GITIGNORE.to_string()
    } else {
        format!("{dir}/{GITIGNORE}")
    };
    let bytes = scan::read(root, &rel).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The directory holding the `.git` of the repository `root` lies in, if any.
fn repo_root(root: &Path) -> Option<PathBuf> {
    root.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// Whether the `.gitignore` files of the workspace (walked: `listing`) differ from `texts`,
/// the start's: one created, changed or deleted in a directory the walk entered (a directory
/// now ignored as a whole can only be so by a changed `.gitignore` above it).
pub fn changed(root: &Path, listing: &Listing, texts: &BTreeMap<String, String>) -> bool {
    let in_repo = repo_root(root).is_some();
    let dirs: std::collections::HashSet<&str> = listing.dirs.iter().map(String::as_str).collect();
    listing.dirs.iter().any(|d| {
        let now = if in_repo {
            read_rule_file(root, d)
        } else {
            None
        };
        now.as_ref() != texts.get(d)
    }) || texts
        .keys()
        .any(|d| !above(d) && !dirs.contains(d.as_str()))
}

/// Whether the key `dir` of [`texts`] names a directory above the workspace (`..`,
/// `../..`), not one of its own (such as `..data`).
fn above(dir: &str) -> bool {
    dir.split('/').all(|p| p == "..")
}

/// The start's rules, ready to match.
pub struct RulesAtStart {
    root: PathBuf,
    /// Matchers by directory (absolute), deepest first when looked up.
    by_dir: BTreeMap<PathBuf, Gitignore>,
    in_repo: bool,
}

impl RulesAtStart {
    /// The rules of `texts` (see [`texts`]) for the workspace at `root`.
    pub fn new(root: &Path, texts: &BTreeMap<String, String>) -> RulesAtStart {
        let mut by_dir = BTreeMap::new();
        for (dir, text) in texts {
            let abs = if above(dir) {
                let n = dir.split('/').count();
                match root.ancestors().nth(n) {
                    Some(d) => d.to_path_buf(),
                    None => continue,
                }
            } else if dir.is_empty() {
                root.to_path_buf()
            } else {
                root.join(dir)
            };
            let mut b = GitignoreBuilder::new(&abs);
            for line in text.lines() {
                // A line git would not take is left out, as git leaves it out.
                let _ = b.add_line(None, line);
            }
            if let Ok(g) = b.build() {
                by_dir.insert(abs, g);
            }
        }
        RulesAtStart {
            root: root.to_path_buf(),
            in_repo: repo_root(root).is_some(),
            by_dir,
        }
    }

    /// Whether `path` (absolute, below the workspace) is ignored by the start's `.gitignore`
    /// files: the deepest one that says anything decides, as git decides. Its directories
    /// are not looked at (see [`RulesAtStart::ignored_or_below`]).
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        if !self.in_repo {
            return false;
        }
        for dir in path.ancestors().skip(1) {
            if let Some(g) = self.by_dir.get(dir) {
                let m = g.matched(path, is_dir);
                if m.is_ignore() {
                    return true;
                }
                if m.is_whitelist() {
                    return false;
                }
            }
        }
        false
    }

    /// Whether undo would leave out `rel` (workspace-relative), a path that does not exist:
    /// it, or a directory on its way, is ignored by the start's `.gitignore` files or is a
    /// directory undo never enters (`.git`, `.kiln`, `node_modules`, one holding a
    /// `CACHEDIR.TAG`).
    pub fn ignored_or_below(&self, rel: &str) -> bool {
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        let mut path = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            path.push(part);
            let last = i + 1 == parts.len();
            if !last && scan::skipped_dir(&path, None) {
                return true;
            }
            if self.ignored(&path, !last) {
                return true;
            }
        }
        false
    }

    /// Add to `listing` (a walk by today's rules) the regular files and other entries that
    /// today's rules hide and the start's do not, changed at or after `since_ns` (ns since the
    /// epoch: a file left as it was before the run is never taken for the run's).
    pub fn reveal(&self, listing: &mut Listing, since_ns: i64) {
        let root = self.root.clone();
        let skip_state = crate::state_dir::inside(&root).map(|s| root.join(s));
        let mut b = ignore::WalkBuilder::new(&root);
        b.standard_filters(false)
            .git_ignore(false)
            .git_exclude(true)
            .git_global(true)
            .parents(false)
            .require_git(true)
            .follow_links(false);
        let rules = RulesAtStart {
            root: self.root.clone(),
            by_dir: self.by_dir.clone(),
            in_repo: self.in_repo,
        };
        b.filter_entry(move |e| {
            if e.depth() == 0 {
                return true;
            }
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            if is_dir && scan::skipped_dir(e.path(), skip_state.as_deref()) {
                return false;
            }
            !rules.ignored(e.path(), is_dir)
        });
        for (seen, e) in b.build().flatten().enumerate() {
            // Bounded as the first walk is (past it, the record is partial already).
            if seen > scan::MAX_FILES
                || listing.files.len() + listing.others.len() >= scan::MAX_FILES
            {
                listing.truncated = true;
                return;
            }
            if e.depth() == 0 || e.file_type().is_some_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(sub) = e.path().strip_prefix(&root) else {
                continue;
            };
            let name: Vec<String> = sub
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let name = name.join("/");
            if listing.files.contains_key(&name) || listing.others.contains_key(&name) {
                continue;
            }
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            let stat = StatKey::of(&meta);
            if stat.ctime_ns.max(stat.mtime_ns) < since_ns {
                continue;
            }
            match Kind::of(&meta.file_type()) {
                Kind::File => {
                    listing.files.insert(name, stat);
                }
                Kind::Dir => {}
                k => {
                    listing.others.insert(name, k);
                }
            }
        }
    }
}

/// `listing` (a walk of the workspace at `root` by today's rules) with what the start's rules
/// (`texts`; `None`: a record from before kiln kept them, left as it is) do not hide and
/// today's do, changed at or after `since_ns`.
pub fn at_start(
    root: &Path,
    listing: &mut Listing,
    texts: Option<&BTreeMap<String, String>>,
    since_ns: i64,
) {
    if let Some(texts) = texts
        && changed(root, listing, texts)
    {
        RulesAtStart::new(root, texts).reveal(listing, since_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start's rules decide, not the ones written since: a `.gitignore` added or changed
    /// later is noticed, and the walk by the start's rules shows what it hides (changed
    /// since), never what the start's rules ignored.
    #[test]
    fn the_rules_at_the_start_decide_what_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n.env\n").unwrap();
        std::fs::create_dir_all(root.join("..data")).unwrap();
        std::fs::write(root.join(".env"), "old\n").unwrap();
        let listing = scan::walk(root);
        let texts = texts(root, &listing);
        assert_eq!(texts.get(""), Some(&"build/\n.env\n".to_string()));
        let rules = RulesAtStart::new(root, &texts);
        for ignored in [".env", "build/run.sh", "node_modules/x.js", ".git/hooks/x"] {
            assert!(rules.ignored_or_below(ignored), "{ignored}");
        }
        for kept in ["payload.sh", "src/a.c", "..data/x", "a/.env.example"] {
            assert!(!rules.ignored_or_below(kept), "{kept}");
        }
        assert!(!changed(root, &scan::walk(root), &texts));

        std::fs::write(root.join(".gitignore"), "build/\n.env\npayload.sh\n").unwrap();
        std::fs::write(root.join("payload.sh"), "x\n").unwrap();
        std::fs::write(root.join(".env"), "new\n").unwrap();
        let mut now = scan::walk(root);
        assert!(!now.files.contains_key("payload.sh"));
        assert!(changed(root, &now, &texts));
        rules.reveal(&mut now, 0);
        assert!(now.files.contains_key("payload.sh"));
        assert!(!now.files.contains_key(".env"), "ignored at the start");
    }
}
