//! The queue's database: the store's connection abstraction ([`crate::store::conn`]: one
//! `Conn` for SQLite and PostgreSQL, statements with `?N` parameters, rows of plain values),
//! and the queue's error, which says whether a call is worth retrying.

use crate::store::StoreError;
pub use crate::store::conn::{Conn as Db, Val};

/// A database error, with whether it is worth retrying (the server went away, a lock).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct DbError {
    /// The database (a file, or a URL without its password).
    pub what: String,
    /// What went wrong.
    pub message: String,
    /// A connection or lock error: the same call may succeed later.
    pub transient: bool,
}

impl From<StoreError> for DbError {
    fn from(e: StoreError) -> DbError {
        let transient = e.is_transient();
        match e {
            StoreError::Sql { path, source } => DbError {
                what: path.display().to_string(),
                message: source.to_string(),
                transient,
            },
            StoreError::Postgres { ref store, .. } | StoreError::Unreachable { ref store, .. } => {
                DbError {
                    what: store.clone(),
                    message: e.to_string(),
                    transient,
                }
            }
            other => DbError {
                what: "store".into(),
                message: other.to_string(),
                transient,
            },
        }
    }
}

/// Open the queue's database `url` names (an SQLite file waits up to 10 s for a writer: many
/// workers may share it).
pub fn open(url: &crate::store::StoreUrl) -> Result<Box<dyn Db>, DbError> {
    Ok(url.open(std::time::Duration::from_secs(10))?)
}
