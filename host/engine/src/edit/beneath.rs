//! [`Beneath`]: a workspace root through which every path is resolved one component at a
//! time, each directory opened with `O_NOFOLLOW | O_DIRECTORY` relative to the one before, so
//! no symbolic link is followed at any component. Only the one writer
//! ([`super::writer::Writer`]) and its journal hold one; see `writer.rs` for the whole policy.

use super::error::describe_type;
use cap_std::fs::Dir;
use std::ffi::CString;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Component, Path};

/// A workspace root through which paths are resolved beneath it, following no link.
pub(super) struct Beneath {
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
pub(super) fn components(rel: &str) -> std::io::Result<Vec<String>> {
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
    pub(super) fn open(root: &Path) -> std::io::Result<Beneath> {
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
    pub(super) fn dir_at(&self, rel: Option<&Path>) -> std::io::Result<Dir> {
        match rel {
            None => self.root.try_clone(),
            Some(p) => self.walk(&components(&p.to_string_lossy())?, false),
        }
    }

    /// What `rel` is, not following a link at any component; `None` when it does not exist.
    pub(super) fn file_type(&self, rel: &str) -> std::io::Result<Option<cap_std::fs::FileType>> {
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
    pub(super) fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
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
    pub(super) fn create_new(&self, rel: &str) -> std::io::Result<std::fs::File> {
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
    pub(super) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (fdir, fname) = self.parent(from, false)?;
        self.rename_from(&fdir, &fname, to)
    }

    /// Rename `name` in `src` (a directory anywhere: kiln's state directory) onto `to`.
    pub(super) fn rename_from(&self, src: &Dir, name: &str, to: &str) -> std::io::Result<()> {
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
    pub(super) fn remove_file(&self, rel: &str) -> std::io::Result<()> {
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

    /// Remove the entry `rel` whatever it is but a directory (a regular file, a symbolic link,
    /// a FIFO, a socket, a device node): the name is unlinked, never followed.
    pub(super) fn remove_entry(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        let m = dir.symlink_metadata(&name)?;
        if m.is_dir() {
            return Err(std::io::Error::other(format!("{rel} is a directory")));
        }
        dir.remove_file(&name)
    }

    /// Remove the empty directory `rel`.
    pub(super) fn remove_dir(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        dir.remove_dir(&name)
    }

    /// Create the directory `rel` (its parent must exist).
    pub(super) fn create_dir(&self, rel: &str) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        dir.create_dir(&name)
    }

    /// Hard-link the regular file `rel` as `name` in `dst` (never a link's target).
    pub(super) fn hard_link_to(&self, rel: &str, dst: &Dir, name: &str) -> std::io::Result<()> {
        let (dir, src) = self.parent(rel, false)?;
        if !dir.symlink_metadata(&src)?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        dir.hard_link(&src, dst, name)
    }

    /// The mode bits of the regular file `rel`, when it is one.
    pub(super) fn mode(&self, rel: &str) -> Option<u32> {
        use cap_std::fs::PermissionsExt;
        let (dir, name) = self.parent(rel, false).ok()?;
        let m = dir.symlink_metadata(&name).ok()?;
        m.is_file().then(|| m.permissions().mode())
    }

    /// Open `rel` for appending (created when missing): a regular file, never a link.
    pub(super) fn open_append(&self, rel: &str) -> std::io::Result<std::fs::File> {
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
