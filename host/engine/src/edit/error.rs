//! The failures of the edit machinery itself ([`EditError`]) and how an I/O failure or a file
//! that is not regular is described in them.

use crate::plugin::PluginError;
use std::path::PathBuf;

/// Errors of the edit machinery itself (not an edit the LLM got wrong: those are reported in
/// the [`EditReport`]).
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The workspace could not be opened.
    #[error("cannot open workspace {path}: {source}")]
    Workspace {
        /// The workspace directory that could not be opened.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file is not UTF-8 text (kiln edits text only).
    #[error(
        "{path} is not UTF-8 text ({looks_like}); kiln edits UTF-8 files only. Convert it first (for example `iconv -f {} -t UTF-8`), or leave it out",
        if looks_like.contains("UTF-16") { "UTF-16" } else { "LATIN1" }
    )]
    NotText {
        /// Workspace-relative path.
        path: String,
        /// What the bytes most likely are.
        looks_like: &'static str,
    },
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// Workspace-relative path.
        path: String,
        /// What failed.
        message: String,
    },
    /// The edit-format plugin failed (trap, deadline, ...).
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

pub(crate) fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            format!("permission denied or outside the workspace ({e})")
        }
        _ => e.to_string(),
    }
}

/// What a non-regular file is, for messages.
pub(crate) fn describe_type(t: &cap_std::fs::FileType) -> &'static str {
    use cap_std::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}
