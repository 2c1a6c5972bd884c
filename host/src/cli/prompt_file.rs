//! Files whose text goes to the model (`kiln fix --prompt-file`, `kiln agent --system-file`):
//! one rule for all of them, judged by where the kernel really opens them. A path that lies
//! inside the workspace (by name, or by its directory's real path) is read through the
//! workspace handle, as `kiln loop --task` is: a link leading out of the workspace or into
//! `.git` is refused, and so is anything but a regular file. A path outside the workspace that
//! the user typed is read, unless its real path lies under `/proc`, `/sys` or `/dev` (kiln's
//! own environment, devices) or in a `.git` directory.

use anyhow::Context;
use std::path::{Component, Path, PathBuf};

/// Where no prompt is ever read from (by real path).
const NEVER_READ: &[&str] = &["/proc", "/sys", "/dev"];

/// The text of the file `given` (relative to the current directory) named by `flag`.
pub(crate) fn read(workspace: &Path, given: &Path, flag: &str) -> anyhow::Result<String> {
    let shown = crate::terminal::printable(&super::root::user_file(given)).into_owned();
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    let abs = lexical(&cwd.join(given));
    match inside(workspace, &abs) {
        Some(rel) => {
            let ws = crate::edit::Workspace::open(workspace)?;
            match ws.read(&rel) {
                Ok(Some(text)) => Ok(text),
                Ok(None) => anyhow::bail!("cannot read {flag} {shown}: it does not exist"),
                Err(e) => anyhow::bail!(
                    "cannot read {flag} {shown}: {e} (a file inside the workspace is read only \
                     beneath it: no link leading out of it or into `.git`)"
                ),
            }
        }
        None => {
            read_outside(&abs).map_err(|why| anyhow::anyhow!("cannot read {flag} {shown}: {why}"))
        }
    }
}

/// `p` with `.` and `..` resolved by name.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The workspace-relative path of `abs` when it lies inside the workspace by name or when its
/// directory does by real path (a directory link from elsewhere into the workspace).
fn inside(workspace: &Path, abs: &Path) -> Option<String> {
    let rel = |p: &Path| {
        p.strip_prefix(workspace)
            .ok()
            .map(|r| r.to_string_lossy().into_owned())
    };
    if let Some(r) = rel(abs) {
        return Some(r);
    }
    let parent = abs.parent()?.canonicalize().ok()?;
    let name = abs.file_name()?;
    rel(&parent.join(name))
}

/// Read a file outside the workspace: opened without blocking, judged by its real path, a
/// regular file only.
fn read_outside(abs: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(abs)
        .map_err(|e| e.to_string())?;
    let real = crate::path::real_path(file.as_raw_fd())
        .ok_or("its real path cannot be known, so it is not read")?;
    if NEVER_READ.iter().any(|d| real.starts_with(d)) {
        return Err(format!(
            "it is (or leads to) {}: /proc, /sys and /dev are never read into a prompt",
            crate::terminal::printable(&real.to_string_lossy())
        ));
    }
    if crate::path::in_git_dir(&real.to_string_lossy()) {
        return Err(
            "it leads inside `.git`: git's own files (they can hold credentials) are not read"
                .into(),
        );
    }
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".into())
}
