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
    ignore_in_git(&dir)?;
    Ok(dir)
}

/// What kiln keeps in `.kiln/.gitignore`.
pub const KILN_GITIGNORE: &str = "# Created by kiln: its store holds prompts and answers.\n*\n";

/// Whether a `.kiln/.gitignore` text ignores everything below `.kiln/`: at least one line is
/// `*` and every other line is blank or a comment (a `!` line would bring files back).
pub fn ignores_everything(text: &str) -> bool {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    !lines.is_empty() && lines.iter().all(|l| *l == "*")
}

/// Make sure `.kiln/.gitignore` ignores everything ([`ignores_everything`]), as uv does for
/// `.venv`, so `git add -A` never commits kiln's logs and artifacts (prompts, answers, tool
/// output). `.kiln/` is kiln's: a missing file is created, and one a repository ships that
/// does not ignore everything (or is a link) is replaced by kiln's (written beside it and
/// renamed over it, following no link). A `.gitignore` deepest in the tree wins over every
/// other ignore source, so this holds whatever else the repository says.
pub(super) fn ignore_in_git(kiln: &Path) -> Result<(), StoreError> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let file = kiln.join(".gitignore");
    let current = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&file)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
        .and_then(|mut f| {
            let mut t = String::new();
            f.read_to_string(&mut t).ok().map(|_| t)
        });
    if current.as_deref().is_some_and(ignores_everything) {
        return Ok(());
    }
    let err = |source| StoreError::Dir {
        path: file.clone(),
        source,
    };
    let tmp = kiln.join(format!(".gitignore.kiln-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(KILN_GITIGNORE.as_bytes()).map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, &file).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
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
