//! What a [`Policy`] puts in a call's world: the [`Layout`] of its view, and the paths of the
//! Landlock rules that hold beside it (or alone, where the kernel builds no view).

use std::path::{Path, PathBuf};

use crate::paths::{SYSTEM_READ, toolchain_roots};
use crate::policy::{Policy, Writes};
use crate::view::{DEV_NODES, ETC, Layout};

/// System directories bound read-only into every view (a link such as `/bin -> usr/bin` is
/// kept as a link), and processor and cgroup information (how many jobs a build may run):
/// [`SYSTEM_READ`] but `/etc` and `/proc`, which the view makes its own.
fn system_dirs() -> impl Iterator<Item = &'static Path> {
    SYSTEM_READ
        .iter()
        .filter(|d| **d != "/etc" && **d != "/proc")
        .map(Path::new)
}

/// The view of one call. `tmp` is the call's temp dir on the host: its `tmp/` becomes `/tmp`,
/// its `home/` the program's `HOME`.
pub fn layout(policy: &Policy<'_>, tmp: &Path) -> Layout {
    let mut l = Layout::default();
    for p in system_dirs() {
        match std::fs::read_link(p) {
            Ok(target) => l.symlink(&target, p),
            Err(_) => l.bind(p, p, false),
        }
    }
    l.tmpfs(Path::new("/etc"), true);
    for name in ETC {
        let p = Path::new("/etc").join(name);
        l.bind(&p, &p, false);
    }
    l.tmpfs(Path::new("/dev"), true);
    for n in DEV_NODES {
        let p = Path::new("/dev").join(n);
        l.bind(&p, &p, true);
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        l.symlink(Path::new(target), &Path::new("/dev").join(link));
    }
    l.tmpfs(Path::new("/dev/shm"), false);
    l.proc(Path::new("/proc"));
    let writable = policy.writes == Writes::WorkspaceAndGrants;
    l.bind(&tmp.join("tmp"), Path::new("/tmp"), writable);
    if let Some(home) = policy.home.filter(|h| usable_home(h)) {
        l.bind(&tmp.join("home"), home, writable);
    }
    for root in toolchain_roots(policy.program, policy.path, policy.workspace, policy.home) {
        l.bind(&root, &root, false);
    }
    if policy.net {
        // Name resolution where /etc/resolv.conf links to systemd-resolved's stub file.
        let p = Path::new("/run/systemd/resolve");
        l.bind(p, p, false);
    }
    for r in policy.read {
        l.bind(r, r, false);
    }
    for w in policy.write {
        l.bind(w, w, writable);
    }
    l.bind(policy.workspace, policy.workspace, writable);
    for p in policy.protect {
        // Every directory between the workspace and a protected path is pinned (bound over
        // itself): a mount point cannot be renamed, so the protected path cannot be moved away
        // with its parent and a writable one put in its place.
        for a in p.ancestors().skip(1) {
            if a == policy.workspace || !a.starts_with(policy.workspace) {
                break;
            }
            l.bind(a, a, writable);
        }
        l.protect(p);
        // A call that writes nowhere only inspects (the review phase, a fix's look-around):
        // git's directories are hidden behind an empty read-only directory, so no program,
        // by name or by recursion (`grep -r token .`, `rg -uu`), reads the credentials
        // `.git/config` can hold.
        if policy.writes == Writes::Nowhere && is_git_dir(p) {
            l.tmpfs(p, true);
        }
    }
    for (i, (at, _)) in policy.shown.iter().enumerate() {
        l.cover(&shown_file(tmp, i), at);
    }
    l
}

/// A git directory the protected-path walk found: a `.git` directory at any depth, or the
/// directory a `.git` file or link names (it holds `HEAD` and `objects`).
fn is_git_dir(p: &Path) -> bool {
    let named = p.file_name().is_some_and(|n| n == ".git");
    let dir = std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    dir && (named || (p.join("HEAD").is_file() && p.join("objects").is_dir()))
}

/// Where the call's temp dir `tmp` keeps the content of the `i`th of [`Policy::shown`] (beside
/// the view's `/tmp` and `HOME`, never inside them).
pub fn shown_file(tmp: &Path, i: usize) -> PathBuf {
    tmp.join("shown").join(i.to_string())
}

/// A `HOME` an empty directory can stand for: absolute, and not `/` or a system directory.
fn usable_home(home: &Path) -> bool {
    home.is_absolute()
        && home.parent().is_some()
        && !system_dirs()
            .chain(["/etc", "/dev", "/proc", "/sys", "/tmp"].map(Path::new))
            .any(|s| s.starts_with(home) || home.starts_with(s))
}

/// The paths of the call's Landlock rules: those it may read, those it may write. In a view the
/// view holds reads (the child adds a read rule for its root), so only writes are listed.
pub fn landlock_paths(
    policy: &Policy<'_>,
    tmp: &Path,
    in_view: bool,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut read: Vec<PathBuf> = Vec::new();
    if !in_view {
        read.extend(SYSTEM_READ.iter().map(PathBuf::from));
        read.extend(policy.read.iter().cloned());
        read.extend(toolchain_roots(
            policy.program,
            policy.path,
            policy.workspace,
            policy.home,
        ));
        if policy.net {
            read.push("/run/systemd/resolve".into());
        }
    }
    let mut write = Vec::new();
    match policy.writes {
        Writes::WorkspaceAndGrants => {
            write.push(policy.workspace.to_path_buf());
            if in_view {
                // Landlock follows the view's mounts: the rules go on the roots of the binds.
                write.push(tmp.join("tmp"));
                write.push(tmp.join("home"));
            } else {
                write.push(tmp.to_path_buf());
            }
            write.extend(policy.write.iter().cloned());
        }
        Writes::Nowhere => {
            read.push(policy.workspace.to_path_buf());
            read.push(tmp.to_path_buf());
        }
    }
    (read, write)
}
