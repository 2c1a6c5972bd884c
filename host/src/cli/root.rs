//! Which directory is the workspace when `-C` is not given: the nearest ancestor of the
//! current directory holding `.git`, `kiln.toml` or `.kiln` (as git, cargo and uv walk up to
//! their root), else the current directory. Workspace paths on the command line are then
//! relative to the current directory, as git's are.

use std::path::{Component, Path, PathBuf};

/// What marks a workspace root, in the order they are looked for in each directory.
pub(crate) const ROOT_MARKERS: &[&str] = &[".git", "kiln.toml", ".kiln"];

/// The workspace for the (canonical) current directory `cwd`: the nearest ancestor (itself
/// included) holding a [`ROOT_MARKERS`] entry, with the marker; else `cwd` and `None`.
pub(crate) fn discover(cwd: &Path) -> (PathBuf, Option<&'static str>) {
    for dir in cwd.ancestors() {
        for m in ROOT_MARKERS {
            if dir.join(m).symlink_metadata().is_ok() {
                return (dir.to_path_buf(), Some(m));
            }
        }
    }
    (cwd.to_path_buf(), None)
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
