//! The store's errors: each names the database (a file, or a URL without its password) and,
//! where one exists, the fix.

use kiln_protocol::clock::{human_time, now_ms};
use std::path::PathBuf;

/// Store errors name the database (a file, or a URL without its password).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database {path}: {source}")]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// PostgreSQL answered with an error.
    #[error("database {store}: {message}")]
    Postgres {
        /// The URL, password redacted.
        store: String,
        /// The server's or client's message (with any password removed).
        message: String,
    },
    /// The database server cannot be reached (refused, closed, shutting down): the call's
    /// transaction did not commit (unless the connection was lost during the commit itself);
    /// a later call reconnects.
    #[error("the store {store} is unreachable: {message}")]
    Unreachable {
        /// The URL, password redacted.
        store: String,
        /// Why (with any password removed).
        message: String,
    },
    /// `--store`, `KILN_STORE` or `[store] url` is not a store kiln can use.
    #[error("store URL {url}: {why}")]
    BadUrl {
        /// The URL as given, password redacted.
        url: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// The `.kiln` directory could not be created.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Another loop is running on this workspace.
    #[error(
        "loop {id} is already running on this workspace (pid {pid}, started {}); wait for it or stop it first",
        human_time(*started, now_ms())
    )]
    Overlap {
        /// The running loop's id.
        id: i64,
        /// The process running it.
        pid: i64,
        /// When it started (unix ms).
        started: i64,
    },
    /// The database was written by a newer kiln.
    #[error(
        "database {store} has schema version {found}, newer than this kiln's {supported}; upgrade kiln"
    )]
    TooNew {
        /// The database (file or redacted URL).
        store: String,
        /// The version found in the database.
        found: i64,
        /// The newest version this kiln knows.
        supported: i64,
    },
    /// No such loop (or, for [`crate::Store::loop_detail`], none of this project).
    #[error("no loop with id {0} in this store; see `kiln history`")]
    NoLoop(i64),
    /// kiln's state directory for the workspace, where its default store lives, cannot be
    /// used.
    #[error(transparent)]
    State(#[from] kiln_state::StateDirError),
    /// A row names a run kind this kiln does not know (a newer kiln wrote it).
    #[error("loop {id} has kind `{kind}`, unknown to this kiln; upgrade kiln")]
    UnknownKind {
        /// The loop.
        id: i64,
        /// The kind as stored.
        kind: String,
    },
    /// kiln's own state would be written through a symlink (or into something that is not a
    /// directory or regular file), possibly outside the workspace.
    #[error(
        "refusing to use {path}: {why}; kiln keeps its state only in a real `.kiln` directory inside the workspace (remove it and run again)"
    )]
    NotReal {
        /// The path at fault.
        path: PathBuf,
        /// What it is instead.
        why: &'static str,
    },
    /// A log file could not be opened or written.
    #[error("cannot open log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The database could not be reached: retrying later may succeed.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. })
    }

    /// The same call may succeed later: the server could not be reached, or the database
    /// was busy or locked by another writer for longer than the busy timeout.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unreachable { .. } => true,
            StoreError::Sql { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            _ => false,
        }
    }
}
