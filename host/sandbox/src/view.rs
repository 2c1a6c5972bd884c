//! The world a program sees: a root built for each call out of nothing, in a mount namespace
//! of its own. What is not put in does not exist: there is no rule to forget.
//!
//! [`Layout`] is what the view holds (built in kiln from a [`crate::Policy`], before the
//! spawn); [`View`] is the same as a list of steps with every path already a C string, which
//! the program's process walks between fork and exec ([`View::build`]) with system calls only.
//!
//! The steps are those of `bwrap`: a tmpfs becomes the root with the old root below it at
//! `/oldroot`; every path of the view is bind-mounted from there into `/newroot` (read-only
//! ones remounted read-only, keeping the flags the kernel locks); `/proc` is a new procfs of the
//! call's PID namespace, `/dev` a tmpfs with the usual device nodes, `/etc` a tmpfs holding only
//! [`ETC`]; the old root is detached and `/newroot` becomes `/`, itself read-only.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What programs may read of `/etc`: name resolution, users and groups (never `shadow` or
/// `gshadow`), the dynamic linker's cache, certificates (never `ssl/private`), time zone and
/// the settings of common toolchains. Nothing that holds a secret: no SSH host keys, no
/// `sudoers`, no credentials of a package manager.
pub const ETC: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "hostname",
    "resolv.conf",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust/extracted",
    "localtime",
    "timezone",
    "os-release",
    "lsb-release",
    "debian_version",
    "locale.alias",
    "locale.conf",
    "mime.types",
    "magic",
    "inputrc",
    "profile",
    "bash.bashrc",
    "gitconfig",
    "gitattributes",
    "pip.conf",
    "python3",
    "perl",
    "java-17-openjdk",
    "java-21-openjdk",
    "fonts",
];

/// Device nodes of the view's `/dev` (bound from the host's).
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// How a path of the host appears in the view.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mount {
    /// The host path `src` (resolved), read-only or read-write; `id` is the device and inode it
    /// had when the layout was made.
    Bind {
        src: PathBuf,
        rw: bool,
        dir: bool,
        id: (u64, u64),
    },
    /// An empty tmpfs (`/etc`, `/dev` before they are filled, `/dev/shm`).
    Tmpfs,
    /// The call's own procfs.
    Proc,
    /// A symbolic link with this target.
    Symlink(PathBuf),
    /// A path of the view's own `/proc` bound over itself read-only (`/proc/sys` and the
    /// like: host-wide settings a root program could otherwise change).
    SelfReadOnly,
}

/// What a program may do at a path, by kiln's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// It may write there.
    Writable,
    /// It may read there, not write.
    ReadOnly,
    /// Nothing there exists for it (outside its view, or outside Landlock's rules).
    Outside,
}

/// What one call's view holds, keyed by the path the program sees. Ordered by path, so a
/// directory comes before what is mounted below it.
#[derive(Debug, Default, Clone)]
pub struct Layout {
    mounts: BTreeMap<PathBuf, Mount>,
    /// Tmpfs directories made read-only once filled.
    sealed: BTreeSet<PathBuf>,
    /// Paths bound read-only by [`Layout::protect`]: nothing later makes them writable.
    protected: BTreeSet<PathBuf>,
}

/// Why a path cannot go into a view.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A path of the view is not absolute, or has `..`.
    #[error("`{}` is not an absolute, normalised path", .0.display())]
    NotAbsolute(PathBuf),
    /// A path holds a NUL byte.
    #[error("`{}` holds a NUL byte", .0.display())]
    Nul(PathBuf),
}

impl Layout {
    /// Bind `host` (resolved through its links) at `at`, read-only unless `rw`. A path that
    /// does not exist on the host is left out (there is nothing to see there). An earlier entry
    /// at the same place is replaced only by a read-write one (grants widen a toolchain path),
    /// unless `force` (protected paths go read-only over everything).
    pub fn bind(&mut self, host: &Path, at: &Path, rw: bool) {
        self.put(host, at, rw, false);
    }

    /// Bind `host` at the same place read-only, over whatever is there (a protected path
    /// inside a writable tree).
    pub fn protect(&mut self, host: &Path) {
        self.put(host, host, false, true);
    }

    /// Bind the file `host` at `at` read-only, over whatever is there (a file the view shows
    /// with other content than the host's).
    pub fn cover(&mut self, host: &Path, at: &Path) {
        self.put(host, at, false, true);
    }

    fn put(&mut self, host: &Path, at: &Path, rw: bool, force: bool) {
        let Ok(src) = std::fs::canonicalize(host) else {
            return;
        };
        let Ok(meta) = std::fs::metadata(&src) else {
            return;
        };
        if !meta.is_dir() && !meta.is_file() && !is_device(&meta) {
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let m = Mount::Bind {
            src,
            rw,
            dir: meta.is_dir(),
            id: (meta.dev(), meta.ino()),
        };
        let at = normalize(at);
        if force {
            self.protected.insert(at.clone());
        } else if self.protected.contains(&at) {
            return;
        }
        match self.mounts.get(&at) {
            Some(Mount::Bind { rw: true, .. }) if !force => {}
            Some(Mount::Bind { rw: false, .. }) if !force && !rw => {}
            _ => {
                self.mounts.insert(at, m);
            }
        }
    }

    /// A fresh tmpfs at `at`; `sealed`: read-only once what is mounted below it is in place.
    pub fn tmpfs(&mut self, at: &Path, sealed: bool) {
        let at = normalize(at);
        if sealed {
            self.sealed.insert(at.clone());
        }
        self.mounts.insert(at, Mount::Tmpfs);
    }

    /// The call's own `/proc`, with `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq` and
    /// `/proc/bus` read-only.
    pub fn proc(&mut self, at: &Path) {
        let at = normalize(at);
        for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
            self.mounts.insert(at.join(sub), Mount::SelfReadOnly);
        }
        self.mounts.insert(at, Mount::Proc);
    }

    /// A symbolic link at `at` pointing to `target`.
    pub fn symlink(&mut self, target: &Path, at: &Path) {
        self.mounts
            .insert(normalize(at), Mount::Symlink(target.to_path_buf()));
    }

    /// What the program may do at `path` (absolute, as it sees it) by the view's rules: the
    /// mount that holds it decides, through the view's own links.
    pub fn reach(&self, path: &Path) -> Reach {
        let mut p = lexical(path);
        // A bounded number of the view's links (`/bin -> usr/bin`).
        for _ in 0..8 {
            let Some((at, m)) = p
                .ancestors()
                .find_map(|a| self.mounts.get_key_value(a))
                .map(|(at, m)| (at.clone(), m))
            else {
                return Reach::Outside;
            };
            return match m {
                Mount::Bind { rw: true, .. } | Mount::Proc => Reach::Writable,
                Mount::Tmpfs if !self.sealed.contains(&at) => Reach::Writable,
                Mount::Bind { rw: false, .. } | Mount::SelfReadOnly | Mount::Tmpfs => {
                    Reach::ReadOnly
                }
                Mount::Symlink(target) => {
                    let rest = p.strip_prefix(&at).unwrap_or(Path::new("")).to_path_buf();
                    let base = at.parent().unwrap_or(Path::new("/")).join(target);
                    p = lexical(&base.join(rest));
                    continue;
                }
            };
        }
        Reach::Outside
    }

    /// The paths of the view and what each is, for `kiln plugin inspect` and tests.
    pub fn describe(&self) -> Vec<(PathBuf, String)> {
        self.mounts
            .iter()
            .map(|(at, m)| {
                let what = match m {
                    Mount::Bind { src, rw, .. } => format!(
                        "{} {}",
                        if *rw { "read-write" } else { "read-only" },
                        src.display()
                    ),
                    Mount::Tmpfs => "tmpfs".into(),
                    Mount::Proc => "proc".into(),
                    Mount::Symlink(t) => format!("-> {}", t.display()),
                    Mount::SelfReadOnly => "read-only".into(),
                };
                (at.clone(), what)
            })
            .collect()
    }

    /// The steps that build this view, with `cwd` (a path of the view) entered last. The
    /// program's process opens every source by a path with no symbolic link in it and mounts
    /// it by its descriptor: a link swapped in after the layout was made cannot redirect a
    /// mount (the step fails instead).
    pub fn compile(&self, cwd: &Path) -> Result<View, LayoutError> {
        let new = |p: &Path| cstr(&Path::new(NEWROOT).join(rel(p)?));
        let mut ops = Vec::new();
        let mut made: BTreeSet<PathBuf> = BTreeSet::new();
        for (at, m) in &self.mounts {
            // Every directory above the mount point (ignoring those that exist: they lie in
            // a tmpfs made here, or in a bound tree where the host has them).
            let mut parents: Vec<&Path> = at.ancestors().skip(1).collect();
            parents.reverse();
            for p in parents.into_iter().filter(|p| *p != Path::new("/")) {
                if made.insert(p.to_path_buf()) {
                    ops.push(Op::Dir(place(p)?));
                }
            }
            match m {
                Mount::Bind { src, rw, dir, id } => {
                    ops.push(if *dir {
                        Op::Dir(place(at)?)
                    } else {
                        Op::File(place(at)?)
                    });
                    ops.push(Op::Bind {
                        src: cstr(&Path::new(OLDROOT).join(rel(src)?))?,
                        dst: new(at)?,
                        rw: *rw,
                        id: *id,
                    });
                }
                Mount::Tmpfs => {
                    ops.push(Op::Dir(place(at)?));
                    ops.push(Op::Tmpfs(new(at)?));
                }
                Mount::Proc => {
                    ops.push(Op::Dir(place(at)?));
                    ops.push(Op::Proc(new(at)?));
                }
                Mount::Symlink(t) => ops.push(Op::Symlink {
                    target: cstr(t)?,
                    link: place(at)?,
                }),
                Mount::SelfReadOnly => ops.push(Op::SelfReadOnly(new(at)?)),
            }
            made.insert(at.clone());
        }
        for s in &self.sealed {
            ops.push(Op::Seal(new(s)?));
        }
        ops.push(Op::Seal(cstr(Path::new(NEWROOT))?));
        Ok(View {
            ops,
            cwd: cstr(cwd)?,
        })
    }
}

fn is_device(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_char_device()
}

/// `p` without `.` components (`..` is kept, and refused by [`rel`]).
/// `p` with `.` and `..` resolved by name (as the program's path would be, when nothing on
/// the way is a link of its own).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

fn normalize(p: &Path) -> PathBuf {
    p.components().filter(|c| *c != Component::CurDir).collect()
}

/// `p` relative to `/`: only absolute paths without `..` are taken.
fn rel(p: &Path) -> Result<&Path, LayoutError> {
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(LayoutError::NotAbsolute(p.to_path_buf()));
    }
    Ok(p.strip_prefix("/").unwrap_or(p))
}

/// A path of the new root, split so the program's process can make it by its parent's
/// descriptor (no link on the way is followed).
fn place(p: &Path) -> Result<Place, LayoutError> {
    let full = Path::new(NEWROOT).join(rel(p)?);
    let parent = full.parent().unwrap_or(Path::new(NEWROOT));
    let name = full
        .file_name()
        .ok_or_else(|| LayoutError::NotAbsolute(p.to_path_buf()))?;
    Ok(Place {
        parent: cstr(parent)?,
        name: cstr(Path::new(name))?,
    })
}

/// A directory entry to make: its parent directory and its name.
#[derive(Debug)]
struct Place {
    parent: CString,
    name: CString,
}

fn cstr(p: &Path) -> Result<CString, LayoutError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| LayoutError::Nul(p.to_path_buf()))
}

/// Where the tmpfs that carries the two roots is mounted (in the call's own mount namespace;
/// the host's `/tmp` is untouched and stays reachable below `/oldroot`).
const BASE: &std::ffi::CStr = c"/tmp";
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";

/// One step of building a view.
#[derive(Debug)]
enum Op {
    /// A directory (an existing one is fine).
    Dir(Place),
    /// An empty regular file to mount a file on (an existing one is fine).
    File(Place),
    /// A bind mount of the file that had device and inode `id` when the layout was made;
    /// read-only ones are remounted so.
    Bind {
        src: CString,
        dst: CString,
        rw: bool,
        id: (u64, u64),
    },
    /// A tmpfs.
    Tmpfs(CString),
    /// A procfs of the caller's PID namespace.
    Proc(CString),
    /// A symbolic link.
    Symlink { target: CString, link: Place },
    /// Remount read-only.
    Seal(CString),
    /// Bind a path of the new `/proc` over itself, read-only.
    SelfReadOnly(CString),
}

/// The steps that build one call's view, walked by the program's process.
#[derive(Debug)]
pub struct View {
    ops: Vec<Op>,
    cwd: CString,
}

/// The step of [`View::build`] that failed, for the message kiln shows.
#[derive(Debug, Clone, Copy)]
pub struct Failed {
    /// What was being done.
    pub step: &'static str,
    /// The system's error number.
    pub errno: i32,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `mount(2)` with C strings (null for absent arguments).
///
/// # Safety
/// The pointers are null or point at live NUL-terminated strings.
unsafe fn mount(
    src: *const libc::c_char,
    dst: *const libc::c_char,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_char,
) -> bool {
    // SAFETY: see above.
    unsafe { libc::mount(src, dst, fstype, flags, data.cast()) == 0 }
}

/// The mount flags the kernel locks on a mount inherited into a user namespace, which a
/// remount must keep (read from the mount itself).
///
/// # Safety
/// `path` is a live NUL-terminated string.
unsafe fn locked_flags(path: &CString) -> libc::c_ulong {
    // SAFETY: statvfs writes into the zeroed stack value.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
            return 0;
        }
        let f = st.f_flag;
        let mut out = 0;
        for (st_flag, ms_flag) in [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if f & st_flag != 0 {
                out |= ms_flag;
            }
        }
        out
    }
}

/// Open `path` as a location only, refusing any symbolic link on the way (`openat2` with
/// `RESOLVE_NO_SYMLINKS`, Linux 5.6; before it, no link as the last component). -1 on failure.
///
/// # Safety
/// System calls only, on a live NUL-terminated path.
unsafe fn open_source(path: &CString) -> libc::c_int {
    // SAFETY: as this function.
    unsafe { open_nofollow(path, 0) }
}

/// [`open_source`] with `extra` open flags (`O_DIRECTORY`).
///
/// # Safety
/// System calls only, on a live NUL-terminated path.
unsafe fn open_nofollow(path: &CString, extra: libc::c_int) -> libc::c_int {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | extra) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: openat2 reads the live `how` and path.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        ) as libc::c_int;
        if fd < 0 && errno() == libc::ENOSYS {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW | extra,
            )
        } else {
            fd
        }
    }
}

/// `/oldroot/proc/self/fd/<fd>` in `buf`, NUL-terminated (the host's procfs, where the
/// descriptor's magic link names exactly the opened file).
fn fd_path(fd: libc::c_int, buf: &mut [u8; 64]) -> *const libc::c_char {
    const PREFIX: &[u8] = b"/oldroot/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    buf.as_ptr().cast()
}

/// Make the mount at `path` (and, `recursive`, every mount below it) read-only, without
/// set-user-ID or devices (`mount_setattr`, Linux 5.12; before it, a remount of the top one
/// keeping the flags the kernel locks).
///
/// # Safety
/// System calls only, on a live NUL-terminated path.
unsafe fn read_only(path: &CString, recursive: bool) -> bool {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the system calls read the live `attr`, path and stack buffer; the descriptor is
    // closed before returning.
    unsafe {
        let fd = open_nofollow(path, 0);
        if fd < 0 {
            return false;
        }
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 },
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        let ok = if rc == 0 {
            true
        } else if errno() != libc::ENOSYS {
            false
        } else {
            let mut buf = [0u8; 64];
            let by_fd = fd_path(fd, &mut buf);
            let flags = libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | locked_flags(path);
            mount(
                std::ptr::null(),
                by_fd,
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        };
        libc::close(fd);
        ok
    }
}

/// Run `f` with the `/proc/self/fd` name of `path` opened with no link on the way (a mount
/// target), then close it. `false` when it cannot be opened or `f` fails.
///
/// # Safety
/// System calls only, on a live NUL-terminated path.
unsafe fn by_target(path: &CString, f: impl FnOnce(*const libc::c_char) -> bool) -> bool {
    // SAFETY: as this function; the descriptor is closed before returning.
    unsafe {
        let fd = open_nofollow(path, 0);
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 64];
        let ok = f(fd_path(fd, &mut buf));
        let e = errno();
        libc::close(fd);
        *libc::__errno_location() = e;
        ok
    }
}

/// Run `f` with a descriptor of `place`'s parent directory, opened with no link on the way.
///
/// # Safety
/// System calls only, on live NUL-terminated strings.
unsafe fn in_parent(place: &Place, f: impl FnOnce(libc::c_int) -> bool) -> bool {
    // SAFETY: as this function; the descriptor is closed before returning.
    unsafe {
        let fd = open_nofollow(&place.parent, libc::O_DIRECTORY);
        if fd < 0 {
            return false;
        }
        let ok = f(fd);
        let e = errno();
        libc::close(fd);
        *libc::__errno_location() = e;
        ok
    }
}

impl View {
    /// Build the view and enter it, then enter the cwd. In the program's process (inside the
    /// call's mount, user and PID namespaces), between fork and exec.
    ///
    /// # Safety
    /// System calls only, on memory this value owns; allocates nothing.
    pub unsafe fn build(&self) -> Result<(), Failed> {
        let fail = |step| Failed {
            step,
            errno: errno(),
        };
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: system calls on the NUL-terminated strings this view owns and on constants.
        unsafe {
            // Nothing done here propagates back to the host's mounts.
            if !mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null,
            ) {
                return Err(fail("making the mounts private"));
            }
            if !mount(
                c"tmpfs".as_ptr(),
                BASE.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755".as_ptr(),
            ) {
                return Err(fail("mounting the view's tmpfs"));
            }
            if libc::chdir(BASE.as_ptr()) != 0
                || libc::mkdir(c"newroot".as_ptr(), 0o755) != 0
                || libc::mkdir(c"oldroot".as_ptr(), 0o755) != 0
            {
                return Err(fail("making the view's roots"));
            }
            if !mount(
                c"newroot".as_ptr(),
                c"newroot".as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                null,
            ) {
                return Err(fail("mounting the new root"));
            }
            if libc::syscall(libc::SYS_pivot_root, BASE.as_ptr(), c"oldroot".as_ptr()) != 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                return Err(fail("moving the host's root below the view"));
            }
            for op in &self.ops {
                self.step(op)?;
            }
            // Read-only binds, now that nothing more is mounted below them (one at a time: a
            // writable path inside a read-only one stays writable).
            for op in &self.ops {
                if let Op::Bind { dst, rw: false, .. } = op
                    && !read_only(dst, false)
                {
                    return Err(fail("making a path of the view read-only"));
                }
            }
            if libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH) != 0 {
                return Err(fail("detaching the host's root"));
            }
            if libc::chdir(c"/newroot".as_ptr()) != 0
                || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
                || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                return Err(fail("entering the view"));
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                return Err(fail("entering the working directory"));
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`View::build`].
    unsafe fn step(&self, op: &Op) -> Result<(), Failed> {
        let fail = |step| Failed {
            step,
            errno: errno(),
        };
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: system calls on NUL-terminated strings owned by `op`; every path of the new
        // root is reached with no link on the way (a program of another call could have put one
        // in the workspace), and every mount lands on the opened place itself.
        unsafe {
            match op {
                Op::Dir(p) => {
                    let made = in_parent(p, |dir| {
                        libc::mkdirat(dir, p.name.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
                    });
                    if !made {
                        return Err(fail("making a directory of the view"));
                    }
                }
                Op::File(p) => {
                    let made = in_parent(p, |dir| {
                        let fd = libc::openat(
                            dir,
                            p.name.as_ptr(),
                            libc::O_WRONLY
                                | libc::O_CREAT
                                | libc::O_EXCL
                                | libc::O_CLOEXEC
                                | libc::O_NOFOLLOW,
                            0o644,
                        );
                        if fd >= 0 {
                            libc::close(fd);
                        }
                        fd >= 0 || errno() == libc::EEXIST
                    });
                    if !made {
                        return Err(fail("making a file of the view"));
                    }
                }
                Op::Bind { src, dst, rw, id } => {
                    let fd = open_source(src);
                    if fd < 0 {
                        return Err(fail("opening a path for the view (a link on the way?)"));
                    }
                    // The very file kiln found: a path renamed or replaced since (a protected
                    // `.git` swapped for a decoy while the layout was made) fails the call.
                    let mut st: libc::stat = std::mem::zeroed();
                    if libc::fstat(fd, &mut st) != 0 || (st.st_dev as u64, st.st_ino as u64) != *id
                    {
                        libc::close(fd);
                        return Err(Failed {
                            step: "binding a path into the view: it changed since kiln looked",
                            errno: libc::ESTALE,
                        });
                    }
                    let mut buf = [0u8; 64];
                    let by_fd = fd_path(fd, &mut buf);
                    let mut with_children = false;
                    let ok = by_target(dst, |target| {
                        if mount(by_fd, target, null, libc::MS_BIND, null) {
                            return true;
                        }
                        if errno() != libc::EINVAL {
                            return false;
                        }
                        // In a user namespace a mount with mounts below it can only be bound
                        // with them (they are locked to it); they are made read-only with it,
                        // at once.
                        with_children = true;
                        mount(by_fd, target, null, libc::MS_BIND | libc::MS_REC, null)
                    });
                    let e = errno();
                    libc::close(fd);
                    if !ok {
                        return Err(Failed {
                            step: "bind-mounting a path into the view (a link on the way?)",
                            errno: e,
                        });
                    }
                    // Otherwise read-only comes once every mount point below is made.
                    if !*rw && with_children && !read_only(dst, true) {
                        return Err(fail("making a path of the view read-only"));
                    }
                }
                Op::Tmpfs(p) => {
                    let ok = by_target(p, |target| {
                        mount(
                            c"tmpfs".as_ptr(),
                            target,
                            c"tmpfs".as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV,
                            c"mode=0755".as_ptr(),
                        )
                    });
                    if !ok {
                        return Err(fail("mounting a tmpfs in the view"));
                    }
                }
                Op::Proc(p) => {
                    let ok = by_target(p, |target| {
                        mount(
                            c"proc".as_ptr(),
                            target,
                            c"proc".as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            null,
                        )
                    });
                    if !ok {
                        return Err(fail("mounting the call's /proc"));
                    }
                }
                Op::SelfReadOnly(p) => {
                    let ok = by_target(p, |target| {
                        mount(target, target, null, libc::MS_BIND | libc::MS_REC, null)
                    });
                    // A kernel without that entry has nothing to protect there.
                    if ok && !read_only(p, true) {
                        return Err(fail("making /proc/sys read-only"));
                    }
                }
                Op::Symlink { target, link } => {
                    let made = in_parent(link, |dir| {
                        libc::symlinkat(target.as_ptr(), dir, link.name.as_ptr()) == 0
                            || errno() == libc::EEXIST
                    });
                    if !made {
                        return Err(fail("making a link of the view"));
                    }
                }
                Op::Seal(p) => {
                    // The tmpfs only: what is mounted below it keeps its own access.
                    if !read_only(p, false) {
                        return Err(fail("sealing a directory of the view"));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_follows_the_mount_that_holds_a_path_and_the_view_s_links() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("usr/bin")).unwrap();
        let mut l = Layout::default();
        l.bind(&ws, &ws, true);
        l.protect(&ws.join(".git"));
        l.bind(&dir.path().join("usr"), Path::new("/usr"), false);
        l.symlink(Path::new("usr/bin"), Path::new("/bin"));
        l.tmpfs(Path::new("/etc"), true);
        l.tmpfs(Path::new("/dev/shm"), false);
        assert_eq!(l.reach(&ws.join("src/a.rs")), Reach::Writable);
        assert_eq!(l.reach(&ws.join(".git/config")), Reach::ReadOnly);
        assert_eq!(l.reach(&ws.join("x/../.git/hooks")), Reach::ReadOnly);
        assert_eq!(l.reach(Path::new("/usr/lib/x")), Reach::ReadOnly);
        assert_eq!(l.reach(Path::new("/bin/cc")), Reach::ReadOnly);
        assert_eq!(l.reach(Path::new("/etc/shadow")), Reach::ReadOnly);
        assert_eq!(l.reach(Path::new("/dev/shm/x")), Reach::Writable);
        assert_eq!(l.reach(Path::new("/home/me/x")), Reach::Outside);
        assert_eq!(l.reach(&dir.path().join("other")), Reach::Outside);
    }

    #[test]
    fn a_layout_orders_parents_first_and_keeps_protection_on_top() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        let mut l = Layout::default();
        l.bind(&ws.join(".git"), &ws.join(".git"), true);
        l.bind(&ws, &ws, true);
        l.protect(&ws.join(".git"));
        l.bind(&ws.join(".git"), &ws.join(".git"), true);
        l.bind(&dir.path().join("missing"), Path::new("/x"), false);
        let d = l.describe();
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].0 == ws && d[0].1.starts_with("read-write"), "{d:?}");
        assert!(
            d[1].0 == ws.join(".git") && d[1].1.starts_with("read-only"),
            "a protected path stays read-only: {d:?}"
        );
        let v = l.compile(&ws).unwrap();
        // The parents of the workspace are made before it is bound.
        let first_bind = v
            .ops
            .iter()
            .position(|o| matches!(o, Op::Bind { .. }))
            .unwrap();
        assert!(first_bind > 1);
        assert!(matches!(v.ops.last(), Some(Op::Seal(_))));
        let mut buf = [0u8; 64];
        let p = fd_path(1234, &mut buf);
        // SAFETY: fd_path wrote a NUL-terminated string into `buf`.
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(s.to_str().unwrap(), "/oldroot/proc/self/fd/1234");
        let mut bad = Layout::default();
        bad.tmpfs(Path::new("/a/../b"), false);
        assert!(bad.compile(Path::new("/")).is_err());
    }
}
