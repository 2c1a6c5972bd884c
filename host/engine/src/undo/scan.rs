//! Reading the workspace for undo: a walk of its regular files with their `stat` keys, and
//! the content of one file. Read-only: nothing here writes anything.
//!
//! The walk skips what a run's undo should never restore and what would make it costly on a
//! big repository: `.git/`, `.kiln/`, `node_modules/`, every directory holding a
//! `CACHEDIR.TAG` (cargo's `target/`, and every cache that follows that convention), what git
//! ignores when the workspace is in a git repository (`.gitignore` files, `.git/info/exclude`
//! and the user's global excludes, by git's own rules: build products such as
//! `__pycache__/*.pyc`) and kiln's state directory when it lies inside the workspace. Symbolic
//! links, FIFOs, sockets and device nodes are listed apart ([`Listing::others`]), never
//! followed nor read: undo deletes those a run created.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Files larger than this are not backed up, and never read by undo (its checks, preview and
/// read-back, the report's diffs): undo names them, with their size.
pub const MAX_FILE: u64 = 16 << 20;
/// A walk stops after this many files (and the run's record says it is partial).
pub const MAX_FILES: usize = 200_000;

/// What `stat` says about a file: when any of it differs, its content is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatKey {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Permission bits (`st_mode & 0o7777`); 0 in a cache written before kiln kept them.
    #[serde(default)]
    pub mode: u32,
}

impl StatKey {
    pub(super) fn of(m: &std::fs::Metadata) -> StatKey {
        StatKey {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
            mode: m.mode() & 0o7777,
        }
    }
}

/// The regular files of a workspace (workspace-relative, `/`-separated) with their stat keys.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every regular file found.
    pub files: BTreeMap<String, StatKey>,
    /// Every directory the walk entered (`""`: the walk's start), for change notification.
    pub dirs: Vec<String>,
    /// Everything else it found (never followed nor entered): symbolic links, FIFOs, sockets,
    /// device nodes.
    pub others: BTreeMap<String, Kind>,
    /// True when the walk stopped at [`MAX_FILES`].
    pub truncated: bool,
}

/// Walk `root`.
pub fn walk(root: &Path) -> Listing {
    if root.join("CACHEDIR.TAG").is_file() {
        return Listing::default();
    }
    walk_from(root, "", None)
}

/// Walk the directory `rel` of the workspace at `root` (its files and directories below it,
/// `depth` levels deep at most), by the rules of [`walk`]: the ignore files of the
/// directories above it apply too. `rel` itself is not checked against them.
pub fn walk_from(root: &Path, rel: &str, depth: Option<usize>) -> Listing {
    let mut out = Listing::default();
    let skip_state = crate::state_dir::inside(root).map(|s| root.join(s));
    let start = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let mut b = ignore::WalkBuilder::new(&start);
    // Git's rules only (no `.ignore`, hidden files kept), and only inside a git repository.
    b.standard_filters(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .parents(true)
        .require_git(true)
        .follow_links(false)
        .max_depth(depth)
        .filter_entry(move |e| {
            if e.depth() == 0 || !e.file_type().is_some_and(|t| t.is_dir()) {
                return true;
            }
            !skipped_dir(e.path(), skip_state.as_deref())
        });
    for e in b.build().flatten() {
        let Ok(sub) = e.path().strip_prefix(root) else {
            continue;
        };
        let name: Vec<String> = sub
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let name = name.join("/");
        if e.file_type().is_some_and(|t| t.is_dir()) {
            out.dirs.push(name);
            continue;
        }
        if e.depth() == 0 {
            continue;
        }
        if out.files.len() + out.others.len() >= MAX_FILES {
            out.truncated = true;
            return out;
        }
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        match Kind::of(&meta.file_type()) {
            Kind::File => {
                out.files.insert(name, StatKey::of(&meta));
            }
            Kind::Dir => {}
            k => {
                out.others.insert(name, k);
            }
        }
    }
    out
}

/// A directory the walk never enters: `.git`, `.kiln`, `node_modules`, kiln's state
/// directory (`state`, when inside the workspace), one holding a `CACHEDIR.TAG`.
pub(super) fn skipped_dir(path: &Path, state: Option<&Path>) -> bool {
    let name = path.file_name().unwrap_or_default();
    name == ".git"
        || name == ".kiln"
        || name == "node_modules"
        || state == Some(path)
        || path.join("CACHEDIR.TAG").is_file()
}

/// The files of `listing` that are this process's own standard output or error (a shell's
/// `kiln fix ... > out 2> err` inside the workspace), found by device and inode of file
/// descriptors 1 and 2: what kiln itself writes there is not the run's change.
pub fn own_outputs(root: &Path, listing: &Listing) -> Vec<String> {
    let mut ids = Vec::new();
    for fd in [1, 2] {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into the buffer we own; a closed descriptor only fails.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
        if ok && st.st_mode & libc::S_IFMT == libc::S_IFREG {
            ids.push((st.st_dev, st.st_ino));
        }
    }
    if ids.is_empty() {
        return Vec::new();
    }
    listing
        .files
        .iter()
        .filter(|(_, s)| ids.iter().any(|(_, ino)| *ino == s.ino))
        .filter(|(rel, _)| {
            root.join(rel)
                .symlink_metadata()
                .is_ok_and(|m| ids.contains(&(m.dev(), m.ino())))
        })
        .map(|(rel, _)| rel.clone())
        .collect()
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// A block or character device node.
    Device,
}

impl Kind {
    /// The kind of an entry of type `t`.
    pub fn of(t: &std::fs::FileType) -> Kind {
        use std::os::unix::fs::FileTypeExt;
        if t.is_file() {
            Kind::File
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_symlink() {
            Kind::Link
        } else if t.is_fifo() {
            Kind::Fifo
        } else if t.is_socket() {
            Kind::Socket
        } else {
            Kind::Device
        }
    }

    /// `a symbolic link`, `a FIFO`, ... (for messages).
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Link => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Device => "a device node",
        }
    }
}

/// What a path holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Now {
    /// Nothing.
    Absent,
    /// A regular file with this stat key.
    File(StatKey),
    /// Something else: a directory, a link, a FIFO, a socket, a device node.
    Other(Kind),
    /// A component on the way, `at` (workspace-relative), is not a directory: a symbolic link
    /// (never followed), or a file of another kind.
    Blocked {
        /// The component.
        at: String,
        /// What it is.
        kind: Kind,
    },
}

/// What `root/rel` is, following no symbolic link at any component (a link on the way is
/// [`Now::Blocked`], one at the end [`Now::Other`]).
pub fn now(root: &Path, rel: &str) -> Now {
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    match open_beneath(root, rel, flags) {
        Ok(f) => match f.metadata() {
            Ok(m) if m.is_file() => Now::File(StatKey::of(&m)),
            Ok(m) => Now::Other(Kind::of(&m.file_type())),
            Err(_) => Now::Absent,
        },
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Now::Absent,
        // A link on the way (ELOOP), a file where a directory was (ENOTDIR), a link seen by
        // the checked walk: which component, by `lstat`s that follow nothing.
        Err(_) => blocker(root, rel),
    }
}

/// The first component of `rel` (short of its last) that is not a directory.
fn blocker(root: &Path, rel: &str) -> Now {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut at = String::new();
    let mut path = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            at.push('/');
        }
        at.push_str(part);
        path.push(part);
        let Ok(m) = path.symlink_metadata() else {
            return Now::Absent;
        };
        let kind = Kind::of(&m.file_type());
        if i + 1 == parts.len() {
            return match kind {
                Kind::File => Now::File(StatKey::of(&m)),
                k => Now::Other(k),
            };
        }
        if kind != Kind::Dir {
            return Now::Blocked { at, kind };
        }
    }
    Now::Absent
}

/// Why a file was not read: it is over [`MAX_FILE`] (its size and modification time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, ns since the epoch.
    pub mtime_ns: i64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "too large to keep/compare: {} bytes", self.size)
    }
}

impl std::error::Error for TooLarge {}

/// The [`TooLarge`] inside `e`, when [`read`] refused a file for its size.
pub fn too_large(e: &std::io::Error) -> Option<TooLarge> {
    e.get_ref()?.downcast_ref::<TooLarge>().copied()
}

/// The content of the regular file `root/rel`, opened non-blocking (a FIFO swapped in cannot
/// stall) with no symbolic link followed at any component: a program of the run may have put
/// `d -> /etc` where `d/` was, and undo's preview, its checks and the report must then say the
/// file is gone, never show what the link reaches. Never more than [`MAX_FILE`] bytes: a
/// larger file (a sparse 20 GB one a program made costs nothing to make) is refused with
/// [`TooLarge`] before any of it is read.
pub fn read(root: &Path, rel: &str) -> std::io::Result<Vec<u8>> {
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    let f = open_beneath(root, rel, flags)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let large = |size| {
        std::io::Error::other(TooLarge {
            size,
            mtime_ns: StatKey::of(&m).mtime_ns,
        })
    };
    if m.len() > MAX_FILE {
        return Err(large(m.len()));
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    // One byte more than the bound tells a file that grew while it was read.
    f.take(MAX_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE {
        return Err(large(buf.len() as u64));
    }
    Ok(buf)
}

/// `root/rel` opened with `flags` by `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; where
/// the call is missing or refused, after checking that no component is a link.
fn open_beneath(root: &Path, rel: &str, flags: i32) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    let dir = std::fs::File::open(root)?;
    let path = std::ffi::CString::new(rel).map_err(std::io::Error::other)?;
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: openat2 reads the live `how` and `path` and returns a new descriptor we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just returned, owned by nothing else.
        return Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) });
    }
    let err = std::io::Error::last_os_error();
    // ENOSYS: a kernel before 5.6; EPERM: a seccomp profile (a container's) that refuses
    // the call. Anything else is the answer.
    if !matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        return Err(err);
    }
    let mut at = root.to_path_buf();
    let parts: Vec<_> = Path::new(rel).components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        // The last component may be a link only when it is opened as one (`O_PATH`).
        let last_as_link = i + 1 == parts.len() && flags & libc::O_PATH != 0;
        if !last_as_link && at.symlink_metadata()?.file_type().is_symlink() {
            return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
        }
    }
    let c = std::ffi::CString::new(root.join(rel).into_os_string().into_encoded_bytes())
        .map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NOFOLLOW) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// SHA-256 of `bytes`, hex.
pub fn hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
