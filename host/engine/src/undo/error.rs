//! Why undo's record or an undo failed.

use std::path::PathBuf;

/// Why undo's record or an undo failed.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    /// kiln's state directory cannot be used.
    #[error(transparent)]
    State(#[from] crate::state_dir::StateDirError),
    /// A file in it could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No record for the run.
    #[error(
        "run {0} has no undo record in kiln's state directory (it ran before kiln kept them, ran inside another run, or was not a fix, agent or loop run)"
    )]
    NoRecord(i64),
    /// No run recorded at all.
    #[error("no run of this workspace has an undo record yet")]
    NoRuns,
    /// The run is still running.
    #[error("run {0} is still running (process {1}); stop it first")]
    Running(i64, u32),
    /// The run was undone already.
    #[error("run {0} was undone already")]
    AlreadyUndone(i64),
    /// Writing the workspace failed.
    #[error(transparent)]
    Edit(#[from] crate::edit::EditError),
}
