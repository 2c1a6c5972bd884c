//! Which directory is the workspace when `-C` is not given: the nearest ancestor of the
//! current directory holding `.git`, `kiln.toml` or `.kiln` (as git, cargo and uv walk up to
//! their root), else the current directory. Workspace paths on the command line are then
//! relative to the current directory, as git's are.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// What marks a workspace root, in the order they are looked for in each directory.
pub(crate) const ROOT_MARKERS: &[&str] = &[".git", "kiln.toml", ".kiln"];

/// The workspace for the (canonical) current directory `cwd`: the nearest ancestor (itself
/// included) holding a [`ROOT_MARKERS`] entry, with the marker; else `cwd` and `None`.
pub(crate) fn discover(cwd: &Path) -> (PathBuf, Option<&'static str>) {
    discover_below(cwd, |dir| {
        crate::plugin::kiln_dirs::refuse_workspace_here(dir, None).is_some()
    })
}

/// [`discover`], never climbing to a directory `refused` refuses as a workspace (`$HOME`, `/`,
/// one holding kiln's own directories): the `.kiln` kiln left in `~`, or a dotfiles `.git`
/// there, must not make `~` the workspace of every directory below it.
pub(crate) fn discover_below(
    cwd: &Path,
    refused: impl Fn(&Path) -> bool,
) -> (PathBuf, Option<&'static str>) {
    for dir in cwd.ancestors() {
        // Not above a directory someone else may plant a marker in: one owned by another
        // user (root's are fine), or writable by all (`/tmp`). A `kiln.toml` another user left
        // in `/tmp` must not make `/tmp` every project's workspace.
        if dir != cwd && (!trusted_dir(dir) || refused(dir)) {
            break;
        }
        for m in ROOT_MARKERS {
            if let Ok(meta) = dir.join(m).symlink_metadata()
                && owned_by_us_or_root(meta.uid())
            {
                return (dir.to_path_buf(), Some(m));
            }
        }
    }
    (cwd.to_path_buf(), None)
}

/// A directory only its owner (this user or root) may add entries to.
fn trusted_dir(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| owned_by_us_or_root(m.uid()) && m.mode() & 0o002 == 0)
}

fn owned_by_us_or_root(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// A file of the user's named on the command line (`--replay`, `--prompt-file`, ...), for a
/// message: as given and, when relative, the file it names in the current directory (where it
/// is taken from, `-C DIR` or not).
pub(crate) fn user_file(given: &Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) if given.is_relative() => format!(
            "{} (in the current directory: {})",
            given.display(),
            cwd.join(given).display()
        ),
        _ => given.display().to_string(),
    }
}

/// A path given on the command line, relative to `cwd_in_workspace` (the current directory
/// relative to the root), as a workspace-relative path. `..` is resolved by name; a path
/// that leads above the root keeps its leading `..` so that the usual check refuses it.
/// Absolute paths are left as given.
pub(crate) fn from_cwd(cwd_in_workspace: &Path, given: &str) -> String {
    if cwd_in_workspace.as_os_str().is_empty() || Path::new(given).is_absolute() {
        return given.to_string();
    }
    let mut out: Vec<String> = Vec::new();
    let mut above = 0usize;
    for c in cwd_in_workspace.join(given).components() {
        match c {
            Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
            Component::ParentDir if out.pop().is_none() => above += 1,
            _ => {}
        }
    }
    let mut parts = vec!["..".to_string(); above];
    parts.extend(out);
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_stops_below_a_directory_anyone_may_write() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let shared = t.path().join("shared");
        let deep = shared.join("proj/src");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(shared.join("kiln.toml"), "").unwrap();
        let shared = shared.canonicalize().unwrap();
        let deep = deep.canonicalize().unwrap();
        // Only its owner may add entries: its kiln.toml marks the root.
        assert_eq!(discover(&deep), (shared.clone(), Some("kiln.toml")));
        // Writable by all (as /tmp is): a kiln.toml there is anyone's, and is not followed.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(discover(&deep), (deep.clone(), None));
        // A marker of the project itself, below it, still is.
        std::fs::create_dir(shared.join("proj/.git")).unwrap();
        assert_eq!(discover(&deep), (shared.join("proj"), Some(".git")));
    }

    #[test]
    fn the_walk_stops_below_a_refused_directory() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().canonicalize().unwrap().join("home");
        let deep = home.join("Downloads/proj");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir(home.join(".kiln")).unwrap();
        let refused = |d: &Path| d == home;
        assert_eq!(discover_below(&deep, refused), (deep.clone(), None));
        // Started there, it is what the caller then refuses.
        assert_eq!(
            discover_below(&home, refused),
            (home.clone(), Some(".kiln"))
        );
        // A project's own marker below it still counts.
        std::fs::create_dir(home.join("Downloads/.git")).unwrap();
        assert_eq!(
            discover_below(&deep, refused),
            (home.join("Downloads"), Some(".git"))
        );
    }

    #[test]
    fn command_line_paths_are_relative_to_the_current_directory() {
        let src = Path::new("src");
        assert_eq!(from_cwd(src, "../main.c"), "main.c");
        assert_eq!(from_cwd(src, "lib.c"), "src/lib.c");
        assert_eq!(from_cwd(src, "./a/../b.c"), "src/b.c");
        assert_eq!(from_cwd(src, "../../x"), "../x");
        assert_eq!(from_cwd(Path::new(""), "../x"), "../x");
        assert_eq!(from_cwd(src, "/etc/passwd"), "/etc/passwd");
    }
}
