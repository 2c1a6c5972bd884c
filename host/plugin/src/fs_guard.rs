//! The write guard of plugins' `wasi:filesystem`: kiln's own host of `wasi:filesystem/types`,
//! linked over wasmtime-wasi's (linker shadowing), which passes every function on to
//! wasmtime-wasi's implementation and, before one that creates, changes, removes or renames
//! an entry, refuses it with `not-permitted` when the entry is protected (`.git`, `.kiln` or
//! `kiln.toml` at any depth, `[sandbox] protect`: [`Protected::why`]).
//!
//! A grant is checked when it is made ([`super::Effective::check_protected`]), but a granted
//! directory may hold a nested repository (`sub/.git`), or a link leading into one, so each
//! write is checked where it happens. A descriptor knows no path, so the guard asks the
//! kernel: the real path of the directory descriptor (`/proc/self/fd/N`), of the parent
//! directory the guest's path names (opened `O_PATH`, links followed as the operation would
//! follow them), and of the final link when the operation follows it. That real path, made
//! relative to the workspace, is what is checked. Whatever cannot be resolved (a dangling
//! link, a path outside the workspace, no `/proc`) is refused: the guard fails closed.
//! Every call on a read-only preopen passes (wasmtime-wasi refuses its writes anyway).
//!
//! Reads are checked once, where content can first be reached: a descriptor `open-at` gives
//! is kept only when its real path (asked of the kernel, as above) lies in no `.git` directory
//! at any depth. git's own files can hold credentials (a remote URL with a token, the auth
//! header `actions/checkout` keeps in `.git/config`), and a repository can commit a link
//! (`docs -> .git`) that no check of the path the plugin names would see. Only
//! `.git/info/exclude`, git's local ignore list, is opened (a search honours it). Names and
//! `stat`s of entries stay visible; their content does not.

use kiln_config::path::{Protected, in_git_dir};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::FsPerms;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, HostDescriptor, HostDirectoryEntryStream,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};

/// What one plugin may not write: fixed when the plugin is loaded, shared by its calls.
#[derive(Debug)]
pub struct WritePolicy {
    /// The workspace's real path (`None`: unknown, so every write is refused).
    root: Option<PathBuf>,
    /// The protected paths.
    protected: Protected,
}

impl WritePolicy {
    /// The policy of a plugin whose workspace is open as `root`.
    pub fn new(root: &cap_std::fs::Dir, protected: Protected) -> WritePolicy {
        WritePolicy {
            root: fd_path(root.as_raw_fd()),
            protected,
        }
    }
}

/// The guard of one call: the plugin's [`WritePolicy`] and what it refused.
pub struct FsGuard {
    policy: Arc<WritePolicy>,
    refused: Mutex<Refused>,
}

/// What one call was refused.
#[derive(Default)]
struct Refused {
    /// How many.
    count: usize,
    /// The first: what was refused (`a write to`, `to open`), the path (workspace-relative,
    /// or as the guest named it) and why.
    first: Option<(&'static str, String, String)>,
}

impl FsGuard {
    /// A fresh guard for one call.
    pub fn new(policy: Arc<WritePolicy>) -> FsGuard {
        FsGuard {
            policy,
            refused: Mutex::new(Refused::default()),
        }
    }

    /// What the call was refused, as one line for the user (`None`: nothing).
    pub fn refusals(&self) -> Option<String> {
        let r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let (what, path, why) = r.first.as_ref()?;
        let more = match r.count {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        Some(format!(
            "kiln refused {what} `{}`{more}: {why}",
            kiln_protocol::terminal::printable(path)
        ))
    }

    fn refuse(&self, path: String, why: String) -> FsError {
        self.refuse_as("a write to", path, why)
    }

    fn refuse_as(&self, what: &'static str, path: String, why: String) -> FsError {
        let mut r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        r.count += 1;
        if r.first.is_none() {
            r.first = Some((what, path, why));
        }
        ErrorCode::NotPermitted.into()
    }

    /// Refuse to keep the descriptor `fd` a guest just opened when its real path lies in a
    /// `.git` directory (or cannot be known); `named` is the path the guest gave.
    fn check_read(&self, fd: RawFd, named: &str) -> FsResult<()> {
        let Some(real) = fd_path(fd) else {
            return Err(self.refuse_as(
                "to open",
                named.to_string(),
                "kiln cannot tell where it leads, so it is not read".into(),
            ));
        };
        // Inside the workspace the path below it is what counts (the workspace may itself sit
        // below a directory of any name); outside it (another granted directory), the whole.
        let shown = match self.rel(&real) {
            Some(rel) => rel,
            None => real.to_string_lossy().into_owned(),
        };
        if let Some(root) = self.policy.root.as_deref()
            && kiln_config::path::links_git_config(fd, root)
        {
            return Err(self.refuse_as(
                "to open",
                shown,
                "it is a hard link to `.git/config`; git's own files can hold credentials, and no plugin reads them".into(),
            ));
        }
        if !in_git_dir(&shown) {
            return Ok(());
        }
        let via = if shown == named.trim_start_matches("./") {
            String::new()
        } else {
            format!(" (named `{}`)", kiln_protocol::terminal::printable(named))
        };
        Err(self.refuse_as(
            "to open",
            shown,
            format!(
                "it lies inside `.git`{via}; git's own files can hold credentials, and no plugin reads them"
            ),
        ))
    }

    /// Refuse unless `rel` (a workspace-relative real path, `None`: unknown) may be written;
    /// `shown` names it when it is unknown.
    fn check(&self, rel: Option<String>, shown: &str) -> FsResult<()> {
        let Some(rel) = rel else {
            return Err(self.refuse(
                shown.to_string(),
                "kiln cannot tell where in the workspace it leads, so it is not written".into(),
            ));
        };
        match self.policy.protected.why(&rel) {
            Some(why) => Err(self.refuse(rel, format!("it is protected ({why})"))),
            None => Ok(()),
        }
    }

    /// The workspace-relative form of the real path `real`.
    fn rel(&self, real: &Path) -> Option<String> {
        let rel = real.strip_prefix(self.policy.root.as_deref()?).ok()?;
        rel.to_str().map(str::to_string)
    }

    /// Refuse a change to the entry `path` of directory `dir` when it is protected; `follow`:
    /// the operation follows a link at the end of `path`.
    fn check_entry(&self, dir: RawFd, path: &str, follow: bool) -> FsResult<()> {
        self.check(self.entry(dir, path, follow), path)
    }

    /// Refuse a change through the open descriptor `fd` when what it is open on is protected.
    fn check_open(&self, fd: RawFd) -> FsResult<()> {
        self.check(fd_path(fd).and_then(|p| self.rel(&p)), "an open file")
    }

    /// Where the entry `path` of directory `dir` is, workspace-relative: its parent resolved
    /// by the kernel (links followed, as every operation follows them there), then its name,
    /// or where the link there leads when `follow`.
    fn entry(&self, dir: RawFd, path: &str, follow: bool) -> Option<String> {
        if path.starts_with('/') {
            return None;
        }
        let trimmed = path.trim_end_matches('/');
        let (parent, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        if matches!(name, "" | "." | "..") {
            let whole = if trimmed.is_empty() { "." } else { trimmed };
            let fd = open_path(dir, whole, true)?;
            return self.rel(&fd_path(fd.as_raw_fd())?);
        }
        let opened;
        let pdir = if parent.is_empty() {
            dir
        } else {
            opened = open_path(dir, parent, true)?;
            opened.as_raw_fd()
        };
        if follow && is_symlink(pdir, name)? {
            // Where the link leads; a dangling one (which a create would follow) is refused.
            let fd = open_path(pdir, name, false)?;
            return self.rel(&fd_path(fd.as_raw_fd())?);
        }
        let parent_rel = self.rel(&fd_path(pdir)?)?;
        Some(if parent_rel.is_empty() {
            name.to_string()
        } else {
            format!("{parent_rel}/{name}")
        })
    }
}

/// The real path of the open descriptor `fd`.
fn fd_path(fd: RawFd) -> Option<PathBuf> {
    kiln_config::path::real_path(fd)
}

/// `openat(dir, path, O_PATH)`, links followed (a directory when `dir_only`).
fn open_path(dir: RawFd, path: &str, dir_only: bool) -> Option<OwnedFd> {
    let c = CString::new(path).ok()?;
    let flags = libc::O_PATH | libc::O_CLOEXEC | if dir_only { libc::O_DIRECTORY } else { 0 };
    // SAFETY: a NUL-terminated path and a directory descriptor the caller holds open; the
    // descriptor returned is owned by the OwnedFd built from it.
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags) };
    // SAFETY: a fresh descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `name` in `dir` is a symbolic link (`Some(false)` when it does not exist).
fn is_symlink(dir: RawFd, name: &str) -> Option<bool> {
    let c = CString::new(name).ok()?;
    // SAFETY: an all-zero stat is valid; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid directory descriptor, a NUL-terminated name and a stat to fill.
    let rc = unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return (std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT))
            .then_some(false);
    }
    Some(st.st_mode & libc::S_IFMT == libc::S_IFLNK)
}

/// The raw descriptor of `d` and whether its preopen is writable.
fn raw(d: &Descriptor) -> (RawFd, bool) {
    match d {
        Descriptor::File(f) => (f.file.as_raw_fd(), f.perms != FsPerms::ReadOnly),
        Descriptor::Dir(d) => (d.dir.as_raw_fd(), d.perms != FsPerms::ReadOnly),
    }
}

/// The `HasData` of the guarded `wasi:filesystem/types`.
pub struct GuardedFilesystem;

impl HasData for GuardedFilesystem {
    type Data<'a> = Guarded<'a>;
}

/// wasmtime-wasi's filesystem view of a store, with the call's guard.
pub struct Guarded<'a> {
    /// wasmtime-wasi's view, every function's implementation.
    pub inner: WasiFilesystemCtxView<'a>,
    /// The call's guard.
    pub guard: Arc<FsGuard>,
}

impl Guarded<'_> {
    /// The raw descriptor of `fd` when it belongs to a writable preopen (`None`: read-only,
    /// or not a descriptor: wasmtime-wasi answers those itself).
    fn writable(&self, fd: &Resource<types::Descriptor>) -> Option<RawFd> {
        let d = self.inner.table.get(fd).ok()?;
        let (raw, writable) = raw(d);
        writable.then_some(raw)
    }

    /// Refuse a change to entry `path` of directory `fd` when it is protected.
    fn entry(&self, fd: &Resource<types::Descriptor>, path: &str, follow: bool) -> FsResult<()> {
        match self.writable(fd) {
            Some(dir) => self.guard.check_entry(dir, path, follow),
            None => Ok(()),
        }
    }

    /// Refuse a change through `fd` when what it is open on is protected.
    fn open(&self, fd: &Resource<types::Descriptor>) -> FsResult<()> {
        match self.writable(fd) {
            Some(raw) => self.guard.check_open(raw),
            None => Ok(()),
        }
    }
}

impl types::Host for Guarded<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.inner, err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.inner, err)
    }
}

impl HostDescriptor for Guarded<'_> {
    async fn advise(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.inner, fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.inner, fd).await
    }

    async fn get_flags(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.inner, fd).await
    }

    async fn get_type(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorType> {
        HostDescriptor::get_type(&mut self.inner, fd).await
    }

    async fn set_size(
        &mut self,
        fd: Resource<types::Descriptor>,
        size: types::Filesize,
    ) -> FsResult<()> {
        self.open(&fd)?;
        HostDescriptor::set_size(&mut self.inner, fd, size).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<types::Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        self.open(&fd)?;
        HostDescriptor::set_times(&mut self.inner, fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<types::Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.inner, fd, len, offset).await
    }

    async fn write(
        &mut self,
        fd: Resource<types::Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        self.open(&fd)?;
        HostDescriptor::write(&mut self.inner, fd, buf, offset).await
    }

    async fn read_directory(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<types::DirectoryEntryStream>> {
        HostDescriptor::read_directory(&mut self.inner, fd).await
    }

    async fn sync(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.inner, fd).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.entry(&fd, &path, false)?;
        HostDescriptor::create_directory_at(&mut self.inner, fd, path).await
    }

    async fn stat(&mut self, fd: Resource<types::Descriptor>) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat(&mut self.inner, fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat_at(&mut self.inner, fd, path_flags, path).await
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        let follow = path_flags.contains(types::PathFlags::SYMLINK_FOLLOW);
        self.entry(&fd, &path, follow)?;
        HostDescriptor::set_times_at(&mut self.inner, fd, path_flags, path, atim, mtim).await
    }

    async fn link_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path_flags: types::PathFlags,
        old_path: String,
        new_descriptor: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        // A new name for a protected file would let it be written under that name.
        self.entry(&fd, &old_path, false)?;
        self.entry(&new_descriptor, &new_path, false)?;
        HostDescriptor::link_at(
            &mut self.inner,
            fd,
            old_path_flags,
            old_path,
            new_descriptor,
            new_path,
        )
        .await
    }

    async fn open_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        oflags: types::OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<types::Descriptor>> {
        let writes = oflags.intersects(types::OpenFlags::CREATE | types::OpenFlags::TRUNCATE)
            || flags.contains(types::DescriptorFlags::WRITE);
        if writes {
            let follow = path_flags.contains(types::PathFlags::SYMLINK_FOLLOW);
            self.entry(&fd, &path, follow)?;
        }
        let named = path.clone();
        let opened =
            HostDescriptor::open_at(&mut self.inner, fd, path_flags, path, oflags, flags).await?;
        // A descriptor the table does not hold has no real path: refused (`-1`).
        let fd = self.inner.table.get(&opened).map_or(-1, |d| raw(d).0);
        let checked = self.guard.check_read(fd, &named);
        match checked {
            Ok(()) => Ok(opened),
            Err(e) => {
                HostDescriptor::drop(&mut self.inner, opened).map_err(FsError::trap)?;
                Err(e)
            }
        }
    }

    fn drop(&mut self, fd: Resource<types::Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.inner, fd)
    }

    async fn readlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<String> {
        HostDescriptor::readlink_at(&mut self.inner, fd, path).await
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.entry(&fd, &path, false)?;
        HostDescriptor::remove_directory_at(&mut self.inner, fd, path).await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path: String,
        new_fd: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.entry(&fd, &old_path, false)?;
        self.entry(&new_fd, &new_path, false)?;
        HostDescriptor::rename_at(&mut self.inner, fd, old_path, new_fd, new_path).await
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        src_path: String,
        dest_path: String,
    ) -> FsResult<()> {
        self.entry(&fd, &dest_path, false)?;
        HostDescriptor::symlink_at(&mut self.inner, fd, src_path, dest_path).await
    }

    async fn unlink_file_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.entry(&fd, &path, false)?;
        HostDescriptor::unlink_file_at(&mut self.inner, fd, path).await
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        HostDescriptor::read_via_stream(&mut self.inner, fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        self.open(&fd)?;
        HostDescriptor::write_via_stream(&mut self.inner, fd, offset)
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        self.open(&fd)?;
        HostDescriptor::append_via_stream(&mut self.inner, fd)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<types::Descriptor>,
        b: Resource<types::Descriptor>,
    ) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.inner, a, b).await
    }

    async fn metadata_hash(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash(&mut self.inner, fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash_at(&mut self.inner, fd, path_flags, path).await
    }
}

impl HostDirectoryEntryStream for Guarded<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        HostDirectoryEntryStream::read_directory_entry(&mut self.inner, stream).await
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.inner, stream)
    }
}

/// Link the guarded `wasi:filesystem/types` over wasmtime-wasi's (added before), for every
/// store whose data `get` gives a [`Guarded`] view of.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> Guarded<'_>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let r = types::add_to_linker::<T, GuardedFilesystem>(linker, get);
    linker.allow_shadowing(false);
    r
}

#[cfg(test)]
mod tests;
