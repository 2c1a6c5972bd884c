//! kiln's files in the workspace: the `.kiln` directory (created with a `.gitignore`, refused
//! when it or anything in it is a symlink) and the log files under `.kiln/logs/`. Only
//! outputs meant for people live there: the store itself is in kiln's state directory.
// Writes outside the workspace: kiln's logs in .kiln/logs, opened without following links (the store is in kiln's state directory).
#![allow(clippy::disallowed_methods)]

use super::error::StoreError;
use std::path::{Path, PathBuf};

/// What `path` is when it is not what kiln may use: a symlink or some other non-regular entry.
pub(super) fn refuse_unreal(path: &Path, want_dir: bool) -> Result<bool, StoreError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(StoreError::Dir {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let t = meta.file_type();
    let why = if t.is_symlink() {
        "it is a symbolic link"
    } else if want_dir && !t.is_dir() {
        "it is not a directory"
    } else if !want_dir && !t.is_file() {
        "it is not a regular file"
    } else {
        return Ok(true);
    };
    Err(StoreError::NotReal {
        path: path.to_path_buf(),
        why,
    })
}

/// `<workspace>/.kiln`, created when missing, refused when it is a symlink or not a directory.
/// The workspace path itself is canonicalised, so no link in it can redirect the store.
pub(super) fn kiln_dir(workspace: &Path) -> Result<PathBuf, StoreError> {
    let root = workspace.canonicalize().map_err(|source| StoreError::Dir {
        path: workspace.to_path_buf(),
        source,
    })?;
    let dir = root.join(".kiln");
    if !refuse_unreal(&dir, true)? {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // Created by a concurrent kiln: check it again below.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(StoreError::Dir {
                    path: dir.clone(),
                    source,
                });
            }
        }
        refuse_unreal(&dir, true)?;
    }
    ignore_in_git(&dir);
    Ok(dir)
}

/// Give `.kiln/` a `.gitignore` holding `*` (as uv does for `.venv`), so `git add -A` never
/// commits the store, which holds prompts and answers. Created exclusively, following no
/// link; an existing file (the user's own) is left as it is, and a failure only means git may
/// show the directory.
fn ignore_in_git(kiln: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(kiln.join(".gitignore"))
    {
        let _ = f.write_all(b"# Created by kiln: its store holds prompts and answers.\n*\n");
    }
}

/// Open (creating) a log file `<workspace>/.kiln/logs/<name>` for appending, following no
/// symlink: a symlinked `.kiln`, `logs` or log file is refused, naming it, so kiln's logs
/// cannot be redirected outside the workspace.
pub fn open_log(workspace: &Path, name: &str) -> Result<std::fs::File, StoreError> {
    use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
    use std::os::unix::fs::OpenOptionsExt as _;
    let kiln = kiln_dir(workspace)?;
    let logs = kiln.join("logs");
    let log_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Log { path, source }
    };
    // `.kiln` opened without following a link: everything below is resolved beneath it.
    let kdir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&kiln)
        .map_err(log_err(&kiln))?;
    let kdir = Dir::from_std_file(kdir);
    if !refuse_unreal(&logs, true)? {
        match kdir.create_dir("logs") {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(log_err(&logs)(e)),
        }
        refuse_unreal(&logs, true)?;
    }
    let ldir = kdir.open_dir("logs").map_err(log_err(&logs))?;
    let file = logs.join(name);
    refuse_unreal(&file, false)?;
    let f = ldir
        .open_with(
            name,
            OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK),
        )
        .map_err(log_err(&file))?;
    let f = f.into_std();
    // Opened without following a link; a FIFO or device planted there is refused too.
    if !f.metadata().map_err(log_err(&file))?.is_file() {
        return Err(StoreError::NotReal {
            path: file,
            why: "it is not a regular file",
        });
    }
    Ok(f)
}
