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

use super::{EditError, Workspace, describe_type, journal};
use crate::path::Protected;
use cap_std::fs::Dir;
use std::ffi::CString;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Component, Path, PathBuf};

/// A workspace root through which paths are resolved beneath it, following no link.
pub(in crate::edit) struct Beneath {
    root: Dir,
}

/// `openat(dir, name, flags, mode)` as an owned `File`.
fn openat(dir: &Dir, name: &str, flags: i32, mode: u32) -> std::io::Result<std::fs::File> {
    let c = CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the fd returned is owned by the
    // File built from it.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// The normal components of a workspace-relative path (`.` dropped; `..` and absolute paths
/// refused).
fn components(rel: &str) -> std::io::Result<Vec<String>> {
    crate::path::check_relative(rel)
        .map_err(|why| std::io::Error::new(ErrorKind::InvalidInput, format!("the path {why}")))?;
    Ok(Path::new(rel)
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect())
}

fn link_refused(shown: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "{shown} is a symbolic link; kiln writes real files only, never through a link (it could lead outside the workspace or to a protected path)"
    ))
}

impl Beneath {
    /// The workspace at `root` (the root itself may be reached through links: it is the
    /// user's choice).
    pub(in crate::edit) fn open(root: &Path) -> std::io::Result<Beneath> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(root)?;
        Ok(Beneath {
            root: Dir::from_std_file(f),
        })
    }

    /// Open directory `name` in `parent` without following a link; when it is missing and
    /// `create`, make it first (mode 0777 less the umask, as `mkdir` does).
    fn step(parent: &Dir, name: &str, shown: &str, create: bool) -> std::io::Result<Dir> {
        for attempt in 0..2 {
            match openat(parent, name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(f) => return Ok(Dir::from_std_file(f)),
                Err(e) if e.kind() == ErrorKind::NotFound && create && attempt == 0 => {
                    match parent.create_dir(name) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => {
                    let is_link = parent
                        .symlink_metadata(name)
                        .is_ok_and(|m| m.file_type().is_symlink());
                    if is_link {
                        return Err(link_refused(shown));
                    }
                    if e.raw_os_error() == Some(libc::ENOTDIR) {
                        return Err(std::io::Error::other(format!("{shown} is not a directory")));
                    }
                    return Err(e);
                }
            }
        }
        Err(std::io::Error::from(ErrorKind::NotFound))
    }

    /// Walk `parts` from the root, each a real directory.
    fn walk(&self, parts: &[String], create: bool) -> std::io::Result<Dir> {
        let mut dir = self.root.try_clone()?;
        let mut shown = String::new();
        for p in parts {
            if !shown.is_empty() {
                shown.push('/');
            }
            shown.push_str(p);
            dir = Self::step(&dir, p, &shown, create)?;
        }
        Ok(dir)
    }

    /// The directory holding `rel` (walked without following links, created when `create`)
    /// and `rel`'s last component.
    fn parent(&self, rel: &str, create: bool) -> std::io::Result<(Dir, String)> {
        let mut parts = components(rel)?;
        let Some(name) = parts.pop() else {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "the path names the workspace root",
            ));
        };
        Ok((self.walk(&parts, create)?, name))
    }

    /// The directory `rel` (`None`: the root), every component a real directory.
    pub(in crate::edit) fn dir_at(&self, rel: Option<&Path>) -> std::io::Result<Dir> {
        match rel {
            None => self.root.try_clone(),
            Some(p) => self.walk(&components(&p.to_string_lossy())?, false),
        }
    }

    /// What `rel` is, not following a link at any component; `None` when it does not exist.
    pub(in crate::edit) fn file_type(
        &self,
        rel: &str,
    ) -> std::io::Result<Option<cap_std::fs::FileType>> {
        let (dir, name) = match self.parent(rel, false) {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match dir.symlink_metadata(&name) {
            Ok(m) => Ok(Some(m.file_type())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The bytes of the regular file `rel` (never a FIFO, device or link).
    pub(in crate::edit) fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let (dir, name) = self.parent(rel, false)?;
        let mut f = openat(
            &dir,
            &name,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )?;
        let t = f.metadata()?.file_type();
        if !t.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Create the new file `rel` for writing (never replacing anything), its parent
    /// directories made when missing.
    pub(in crate::edit) fn create_new(&self, rel: &str) -> std::io::Result<std::fs::File> {
        let (dir, name) = self.parent(rel, true)?;
        openat(
            &dir,
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o666,
        )
    }

    /// Rename `from` onto `to`, both in the workspace; `to`, when present, must be a regular
    /// file or a link (replaced, never followed).
    pub(in crate::edit) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (fdir, fname) = self.parent(from, false)?;
        self.rename_from(&fdir, &fname, to)
    }

    /// Rename `name` in `src` (a directory anywhere: kiln's state directory) onto `to`.
    pub(in crate::edit) fn rename_from(
        &self,
        src: &Dir,
        name: &str,
        to: &str,
    ) -> std::io::Result<()> {
        let (tdir, tname) = self.parent(to, true)?;
        match tdir.symlink_metadata(&tname) {
            Ok(m) if !(m.is_file() || m.file_type().is_symlink()) => {
                return Err(std::io::Error::other(format!(
                    "{to} is {}, not a regular file",
                    describe_type(&m.file_type())
                )));
            }
            _ => {}
        }
        src.rename(name, &tdir, &tname)
    }

    /// Remove the regular file `rel` (or a link there: the name, never what it points to).
    pub(in crate::edit) fn remove_file(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        let m = dir.symlink_metadata(&name)?;
        if !(m.is_file() || m.file_type().is_symlink()) {
            return Err(std::io::Error::other(format!(
                "{rel} is {}, not a regular file",
                describe_type(&m.file_type())
            )));
        }
        dir.remove_file(&name)
    }

    /// Remove the empty directory `rel`.
    pub(in crate::edit) fn remove_dir(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        dir.remove_dir(&name)
    }

    /// Create the directory `rel` (its parent must exist).
    pub(in crate::edit) fn create_dir(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        dir.create_dir(&name)
    }

    /// Hard-link the regular file `rel` as `name` in `dst` (never a link's target).
    pub(in crate::edit) fn hard_link_to(
        &self,
        rel: &str,
        dst: &Dir,
        name: &str,
    ) -> std::io::Result<()> {
        let (dir, src) = self.parent(rel, false)?;
        if !dir.symlink_metadata(&src)?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        dir.hard_link(&src, dst, name)
    }

    /// The mode bits of the regular file `rel`, when it is one.
    pub(in crate::edit) fn mode(&self, rel: &str) -> Option<u32> {
        use cap_std::fs::PermissionsExt;
        let (dir, name) = self.parent(rel, false).ok()?;
        let m = dir.symlink_metadata(&name).ok()?;
        m.is_file().then(|| m.permissions().mode())
    }

    /// Open `rel` for appending (created when missing): a regular file, never a link.
    fn open_append(&self, rel: &str) -> std::io::Result<std::fs::File> {
        let (dir, name) = self.parent(rel, false)?;
        let f = openat(
            &dir,
            &name,
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK | libc::O_NOCTTY,
            0o666,
        )
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                link_refused(rel)
            } else {
                e
            }
        })?;
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other(format!(
                "{rel} is not a regular file"
            )));
        }
        Ok(f)
    }
}

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
        self.refuse_real(rel)
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

    /// Write kiln's own artifact `.kiln/<rel>` whole (a temporary file, fsync'd, renamed):
    /// the one privileged write below `.kiln/`. No link followed at any component.
    pub fn write_artifact(&self, rel: &str, text: &str) -> Result<(), EditError> {
        use std::io::Write;
        let full = format!(".kiln/{rel}");
        let io = |e: std::io::Error| EditError::Io {
            path: full.clone(),
            message: super::describe_io(&e),
        };
        // No link at any directory component (the walk holds it); a link or file at the
        // final name is replaced by the rename, never followed.
        components(rel).map_err(io)?;
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
            message: super::describe_io(&e),
        })
    }
}

/// The journal directory of the workspace at `root` in kiln's state directory
/// ([`crate::state_dir`]); `None` when it does not exist and `create` is false.
pub(in crate::edit) fn journal_dir(root: &Path, create: bool) -> Result<Option<Dir>, EditError> {
    let state_err = |e: crate::state_dir::StateDirError| EditError::Io {
        path: "kiln's state directory".into(),
        message: e.to_string(),
    };
    let state = match crate::state_dir::WorkspaceState::open(root, create) {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        // Nowhere to look, so nothing kiln wrote there to recover.
        Err(crate::state_dir::StateDirError::NoHome) if !create => return Ok(None),
        Err(e) => return Err(state_err(e)),
    };
    state.subdir("journal", create).map_err(state_err)
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
