//! The one writer: every file kiln writes, moves or removes in a workspace on anyone's behalf
//! (model edits and their Move-to destinations, `ast_refactor`, `generate_patch`, `write_file`,
//! MCP `apply_edit`, recovery of an interrupted apply, loop artifacts, logs placed in the
//! workspace) goes through [`Writer`], and through the [`Beneath`] handle it holds.
//!
//! [`Beneath`] is the only way to a writable workspace file. It resolves every path itself,
//! one component at a time, each directory opened with `O_NOFOLLOW | O_DIRECTORY` relative to
//! the one before, so the kernel refuses a symbolic link at any component (cap-std alone
//! follows a link that stays inside the workspace: `g -> .git` would lead into `.git/`). The
//! last component is never followed either: files are created with `O_CREAT | O_EXCL |
//! O_NOFOLLOW`, read with `O_NOFOLLOW`, and renames and removals act on the name itself. Only
//! regular files are read, replaced or removed.
//!
//! [`Writer`] adds policy on top: workspace-relative paths only, no protected path
//! (`kiln.toml`, `.kiln/`, `.git/` at any depth, `[sandbox] protect`), and, in a fix loop,
//! only the loop's targets (Move-to destinations and removals included). kiln's own artifacts
//! under `.kiln/` go through one explicit privileged method ([`Writer::write_artifact`]).
//! Outside this module nothing obtains a writable handle on a workspace file; the
//! integration test `writer::only_the_writer_writes_the_workspace` scans the sources for it.

use super::beneath::{Beneath, components};
use super::error::{EditError, describe_io, describe_type};
use super::journal::{self, journal_dir};
use super::workspace::Workspace;
use crate::path::Protected;
use std::path::{Component, Path, PathBuf};

/// The one writer of a workspace, with its policy: protected paths, and the targets of a fix
/// loop (empty: any file that is not protected).
pub struct Writer<'w> {
    ws: &'w Workspace,
    protected: &'w Protected,
    targets: &'w [String],
}

impl<'w> Writer<'w> {
    /// A writer for `ws` refusing `protected` paths and, unless `targets` is empty, every path
    /// that is not one of `targets`.
    pub fn new(ws: &'w Workspace, protected: &'w Protected, targets: &'w [String]) -> Writer<'w> {
        Writer {
            ws,
            protected,
            targets,
        }
    }

    /// Why `rel` may not be written, moved or removed: not workspace-relative, protected, not
    /// a target, a symbolic link at some component, or not a regular file. `None` when it
    /// may be created, replaced or removed.
    pub fn refuse(&self, rel: &str) -> Option<String> {
        self.refuse_policy(rel).or_else(|| self.refuse_real(rel))
    }

    /// Why `rel` may not be touched whatever it is: not workspace-relative, protected, in
    /// kiln's state directory, not a target.
    fn refuse_policy(&self, rel: &str) -> Option<String> {
        if let Err(why) = crate::path::check_relative(rel) {
            return Some(format!("the path {why}"));
        }
        if let Some(why) = self.protected.why(rel) {
            return Some(format!(
                "{rel} is protected ({why}); edits may not touch it"
            ));
        }
        if let Some(state) = &self.ws.state_inside
            && !state.as_os_str().is_empty()
            && crate::path::normalize(rel).starts_with(state)
        {
            return Some(format!(
                "{rel} is protected (it is in kiln's own state directory); edits may not touch it"
            ));
        }
        if !self.targets.is_empty() && !self.is_target(rel) {
            return Some(format!(
                "{rel} is not a file this loop may change (its files: {})",
                self.targets.join(", ")
            ));
        }
        None
    }

    fn is_target(&self, rel: &str) -> bool {
        let norm = crate::path::normalize(rel);
        self.targets
            .iter()
            .any(|t| crate::path::normalize(t) == norm)
    }

    /// Why `rel` is not a real file kiln may replace: a link at some component, or not a
    /// regular file.
    fn refuse_real(&self, rel: &str) -> Option<String> {
        let parts = components(rel).ok()?;
        let mut prefix = String::new();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                prefix.push('/');
            }
            prefix.push_str(part);
            let t = match self.ws.beneath.file_type(&prefix) {
                Ok(Some(t)) => t,
                Ok(None) => return None,
                Err(e) => return Some(format!("{rel}: {e}")),
            };
            if t.is_symlink() {
                return Some(format!(
                    "{prefix} is a symbolic link; edits go to real files only, never through a link (it could lead outside the workspace or to a protected path)"
                ));
            }
            if i + 1 == parts.len() && !t.is_file() {
                return Some(format!(
                    "{prefix} is {}, not a regular file; only regular files are read or edited",
                    describe_type(&t)
                ));
            }
        }
        None
    }

    /// Commit `changes` all or none, under the journal in kiln's state directory; every path
    /// written or removed is checked first ([`Writer::refuse`]).
    pub(crate) fn commit(&self, changes: &[journal::Change<'_>]) -> Result<(), EditError> {
        for c in changes {
            let (journal::Change::Write { path, .. } | journal::Change::Remove { path, .. }) = *c;
            if let Some(message) = self.refuse(path) {
                return Err(EditError::Io {
                    path: path.into(),
                    message,
                });
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let state = journal_dir(self.ws.root(), true)?.ok_or_else(|| EditError::Io {
            path: "kiln's state directory".into(),
            message: "cannot be created".into(),
        })?;
        journal::commit(&self.ws.beneath, &state, changes)
    }

    /// Remove the entry `rel`, whatever it is but a directory (a symbolic link, a FIFO, a
    /// socket, a device node, a regular file), unlinking the name without following it or
    /// reading it: undo's removal of what a run created that no journal holds, and of what
    /// stands where a file goes back. No link on the way; protected paths refused. Not under
    /// the journal: what it removes is gone whatever follows.
    pub fn remove_entry(&self, rel: &str) -> Result<(), EditError> {
        if let Some(message) = self.refuse_policy(rel) {
            return Err(EditError::Io {
                path: rel.into(),
                message,
            });
        }
        self.ws
            .beneath
            .remove_entry(rel)
            .map_err(|e| EditError::Io {
                path: rel.into(),
                message: describe_io(&e),
            })
    }

    /// Write kiln's own artifact `.kiln/<rel>` whole (a temporary file, fsync'd, renamed):
    /// the one privileged write below `.kiln/`. No link followed at any component.
    pub fn write_artifact(&self, rel: &str, text: &str) -> Result<(), EditError> {
        use std::io::Write;
        let full = format!(".kiln/{rel}");
        let io = |e: std::io::Error| EditError::Io {
            path: full.clone(),
            message: describe_io(&e),
        };
        // No link at any directory component (the walk holds it); a link or file at the
        // final name is replaced by the rename, never followed.
        components(rel).map_err(io)?;
        // `.kiln/` is ignored by git whatever the repository ships in it: kiln's artifacts
        // hold tool output and answers (`crate::store::ignores_everything`).
        let ignored = self
            .ws
            .beneath
            .read(".kiln/.gitignore")
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .is_some_and(|t| crate::store::ignores_everything(&t));
        if !ignored && rel != ".gitignore" {
            self.write_artifact(".gitignore", crate::store::KILN_GITIGNORE)?;
        }
        let name = Path::new(&full)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = match Path::new(&full).parent() {
            Some(p) => p.join(format!(
                ".{name}{}{}",
                journal::TEMP_MARK,
                std::process::id()
            )),
            None => PathBuf::from(&name),
        };
        let tmp = tmp.to_string_lossy().into_owned();
        // A leftover (or planted) file of that name is removed, never followed.
        let _ = self.ws.beneath.remove_file(&tmp);
        let mut f = self.ws.beneath.create_new(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        self.ws.beneath.rename(&tmp, &full).map_err(io)
    }

    /// Open the workspace file `rel` for appending (a log): not protected, no link at any
    /// component, a regular file.
    pub fn open_append(&self, rel: &str) -> Result<std::fs::File, EditError> {
        if let Some(message) = self.refuse(rel) {
            return Err(EditError::Io {
                path: rel.into(),
                message,
            });
        }
        self.ws.beneath.open_append(rel).map_err(|e| EditError::Io {
            path: rel.into(),
            message: describe_io(&e),
        })
    }
}

/// Open a log file for appending, as `--log-path` / `--log-file` name it (relative to the
/// current directory). Inside the workspace it goes through the [`Writer`] (never through a
/// link, never a protected file; `.kiln/logs/<name>` is kiln's own log directory); outside,
/// the file is the user's to name, opened without following a link at its end.
pub fn open_log(
    workspace: &Path,
    path: &Path,
    protected: &Protected,
) -> Result<(PathBuf, std::fs::File), EditError> {
    let io = |p: &Path, e: std::io::Error| journal::io_err(p.display().to_string(), &e);
    let abs = user_path(path)?;
    let root = workspace.canonicalize().map_err(|e| io(workspace, e))?;
    // The log's directory, resolved (the user's own path may pass through links up to the
    // workspace); what lies inside the workspace is the writer's.
    let inside = abs
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .map(|p| p.join(abs.file_name().unwrap_or_default()))
        .and_then(|p| p.strip_prefix(&root).ok().map(Path::to_path_buf))
        .or_else(|| abs.strip_prefix(workspace).ok().map(Path::to_path_buf))
        .or_else(|| abs.strip_prefix(&root).ok().map(Path::to_path_buf));
    if let Some(rel) = inside {
        let parts: Vec<_> = rel.components().collect();
        if parts.len() == 3 && rel.starts_with(".kiln/logs") {
            let name = parts[2].as_os_str().to_string_lossy().into_owned();
            let f = crate::store::open_log(workspace, &name).map_err(|e| EditError::Io {
                path: abs.display().to_string(),
                message: e.to_string(),
            })?;
            return Ok((abs, f));
        }
        let ws = Workspace::open(workspace)?;
        let f = Writer::new(&ws, protected, &[]).open_append(&rel.to_string_lossy())?;
        return Ok((abs, f));
    }
    let parent = abs.parent().unwrap_or(Path::new("/"));
    let dir = Beneath::open(parent).map_err(|e| io(parent, e))?;
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let f = dir.open_append(&name).map_err(|e| io(&abs, e))?;
    Ok((abs, f))
}

/// A path the user named on the command line, absolute (against the current directory) and
/// with `.`/`..` resolved lexically.
fn user_path(path: &Path) -> Result<PathBuf, EditError> {
    if path.is_absolute() {
        return Ok(lexical(path));
    }
    let cwd =
        std::env::current_dir().map_err(|e| journal::io_err(path.display().to_string(), &e))?;
    Ok(lexical(&cwd.join(path)))
}

/// Write a file the user names on the command line (a report) whole, replacing it: inside
/// the workspace through the [`Writer`] and its journal (never a protected path, never through
/// a link); outside, a temporary file beside it renamed into place, no link followed at its
/// end. Returns the absolute path written.
pub fn write_output(
    workspace: &Path,
    path: &Path,
    text: &str,
    protected: &Protected,
) -> Result<PathBuf, EditError> {
    use std::io::Write;
    let io = |p: &Path, e: std::io::Error| journal::io_err(p.display().to_string(), &e);
    let abs = user_path(path)?;
    let root = workspace.canonicalize().map_err(|e| io(workspace, e))?;
    let parent = abs.parent().unwrap_or(Path::new("/"));
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let resolved = parent.canonicalize().map_err(|e| io(parent, e))?;
    if let Ok(rel) = resolved.join(&name).strip_prefix(&root) {
        let rel = rel.to_string_lossy().into_owned();
        let ws = Workspace::open(workspace)?;
        let before = ws.read(&rel).ok().flatten();
        Writer::new(&ws, protected, &[]).commit(&[journal::Change::Write {
            path: &rel,
            text,
            before: before.as_deref(),
            mode: None,
        }])?;
        return Ok(abs);
    }
    let dir = Beneath::open(&resolved).map_err(|e| io(parent, e))?;
    let tmp = format!(".{name}{}{}", journal::TEMP_MARK, std::process::id());
    let _ = dir.remove_file(&tmp);
    let mut f = dir.create_new(&tmp).map_err(|e| io(&abs, e))?;
    f.write_all(text.as_bytes()).map_err(|e| io(&abs, e))?;
    f.sync_all().map_err(|e| io(&abs, e))?;
    drop(f);
    dir.rename(&tmp, &name).map_err(|e| io(&abs, e))?;
    Ok(abs)
}

/// `path` with `.` and `..` resolved lexically (no link is followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

impl Workspace {
    /// Why `rel` may not be written by an edit: a protected path, a path through a symbolic
    /// link (`src -> .git` would write `.git/` under another name), or something that is not a
    /// regular file. `None` when it may be created or replaced. The [`Writer`]'s check.
    pub fn refuse_write(&self, rel: &str, protected: &crate::path::Protected) -> Option<String> {
        Writer::new(self, protected, &[]).refuse(rel)
    }

    /// The one writer of this workspace, refusing `protected` paths and, unless `targets` is
    /// empty, every path that is not a target.
    pub fn writer<'w>(
        &'w self,
        protected: &'w crate::path::Protected,
        targets: &'w [String],
    ) -> Writer<'w> {
        Writer::new(self, protected, targets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_link_is_followed_at_any_component() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join("real.txt"), "real\n").unwrap();
        std::os::unix::fs::symlink(".git", root.join("g")).unwrap();
        std::os::unix::fs::symlink("real.txt", root.join("l.txt")).unwrap();
        let b = Beneath::open(root).unwrap();
        let err = b.create_new("g/hooks/pre-commit").unwrap_err();
        assert!(err.to_string().contains("g is a symbolic link"), "{err}");
        assert!(b.create_new("l.txt").is_err());
        assert!(b.read("l.txt").is_err());
        assert!(b.rename("real.txt", "g/hooks/x").is_err());
        assert!(b.open_append("l.txt").is_err());
        assert!(!root.join(".git/hooks/pre-commit").exists());
        assert!(!root.join(".git/hooks/x").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("real.txt")).unwrap(),
            "real\n"
        );
        // New directories are made on the way, for real.
        b.create_new("new/dir/f.txt").unwrap();
        assert!(root.join("new/dir/f.txt").is_file());
    }

    #[test]
    fn the_writer_refuses_protected_paths_non_targets_and_links() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("a.txt"), "a\n").unwrap();
        std::os::unix::fs::symlink("a.txt", t.path().join("l.txt")).unwrap();
        let ws = Workspace::open(t.path()).unwrap();
        let protected = Protected::new(&["*.pem".into()]);
        let targets = ["./a.txt".to_string()];
        let w = Writer::new(&ws, &protected, &targets);
        assert_eq!(w.refuse("a.txt"), None);
        let why = w.refuse(".envrc").unwrap();
        assert!(
            why.contains(".envrc is not a file this loop may change"),
            "{why}"
        );
        let any = Writer::new(&ws, &protected, &[]);
        assert_eq!(any.refuse("new/b.txt"), None);
        for (path, says) in [
            ("kiln.toml", "protected"),
            ("x/.git/config", "protected"),
            ("k.pem", "protected"),
            ("l.txt", "symbolic link"),
            ("../x", ".."),
        ] {
            let why = any.refuse(path).unwrap_or_default();
            assert!(why.contains(says), "{path}: {why}");
        }
    }
}
