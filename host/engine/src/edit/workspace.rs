//! A workspace opened for editing: reads through a cap-std `Dir` rooted at it, and the
//! [`Beneath`] handle its one writer ([`super::writer::Writer`]) writes through.

use super::beneath::Beneath;
use super::error::{EditError, describe_io, describe_type};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::path::{Path, PathBuf};

/// A workspace opened for editing.
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
    pub(super) beneath: Beneath,
    /// kiln's state directory, workspace-relative, when it lies inside the workspace.
    pub(super) state_inside: Option<PathBuf>,
}

impl Workspace {
    /// Open `root`.
    pub fn open(root: &Path) -> Result<Workspace, EditError> {
        let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(|source| {
            EditError::Workspace {
                path: root.to_path_buf(),
                source,
            }
        })?;
        let beneath = Beneath::open(root).map_err(|source| EditError::Workspace {
            path: root.to_path_buf(),
            source,
        })?;
        Ok(Workspace {
            root: root.to_path_buf(),
            dir,
            beneath,
            state_inside: crate::state_dir::inside(root),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace as a cap-std directory, for reading: it never leaves this module, so
    /// the only way to write the workspace is the [`writer::Writer`].
    pub(super) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Check files named by a model or a user before they become program arguments
    /// ([`crate::path::target_arguments`]).
    pub fn target_arguments(
        &self,
        targets: &[String],
    ) -> Result<Vec<String>, crate::path::TargetError> {
        crate::path::target_arguments(&self.dir, targets)
    }

    /// Read a file as text; `None` when it does not exist. Paths leaving the workspace
    /// (`..`, absolute, symlinks out) are refused, and so is anything that is not a regular
    /// file: it is opened non-blocking and checked before a byte is read, so a FIFO (or a
    /// device) planted in the workspace cannot make kiln wait forever.
    pub fn read(&self, rel: &str) -> Result<Option<String>, EditError> {
        use cap_std::fs::{OpenOptions, OpenOptionsExt};
        use std::io::Read;
        use std::os::fd::AsRawFd;
        check_path(rel)?;
        let io = |e: std::io::Error| EditError::Io {
            path: rel.into(),
            message: describe_io(&e),
        };
        let mut file = match self.dir.open_with(
            rel,
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY),
        ) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        // By where it really is: a link of any name (`docs -> .git`) leads into git's files,
        // which can hold credentials and are never read into a prompt.
        if crate::path::opened_in_git_dir(file.as_raw_fd(), self.dir.as_raw_fd()) {
            return Err(EditError::Io {
                path: rel.into(),
                message:
                    "leads inside `.git` (or is a hard link to `.git/config`): git's own files (they can hold credentials) are not read"
                        .into(),
            });
        }
        let file_type = file.metadata().map_err(io)?.file_type();
        if !file_type.is_file() {
            return Err(EditError::Io {
                path: rel.into(),
                message: format!(
                    "is {}, not a regular file; only regular files are read or edited",
                    describe_type(&file_type)
                ),
            });
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| EditError::NotText {
                path: rel.into(),
                looks_like: looks_like(e.as_bytes()),
            })
    }

    /// The size of a regular file, when it is one (links are not followed).
    pub fn size(&self, rel: &str) -> Option<u64> {
        let m = self.dir.symlink_metadata(rel).ok()?;
        m.is_file().then(|| m.len())
    }
}

fn check_path(rel: &str) -> Result<(), EditError> {
    crate::path::check_relative(rel).map_err(|why| EditError::Io {
        path: rel.into(),
        message: format!("the path {why}"),
    })
}

/// A guess at what non-UTF-8 bytes are, for the message.
fn looks_like(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        "it looks like UTF-16"
    } else if bytes.contains(&0) {
        "it looks like a binary file"
    } else if bytes.iter().any(|b| (0x80..0xA0).contains(b)) {
        "it looks like Windows-1252"
    } else {
        "it looks like Latin-1 (ISO-8859-1)"
    }
}
