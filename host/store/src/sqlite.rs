//! The SQLite engine: one database file (WAL, foreign keys on, a busy timeout), the default
//! store of a workspace and of a local batch. The file and its companions are refused when
//! they are symlinks or not regular files; the schema version lives in `PRAGMA user_version`.
//! A transaction is `BEGIN IMMEDIATE`: it holds the database's one write lock, so locks and
//! claims need nothing more.

use super::conn::{ColumnType, Conn, Val};
use super::error::StoreError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// An SQLite database file.
pub struct SqliteConn {
    conn: Connection,
    path: PathBuf,
}

impl SqliteConn {
    /// Open (creating) a database file, waiting up to `busy` for another writer. The file
    /// and SQLite's companions (`-wal`, `-shm`, `-journal`) must be regular files or absent,
    /// and no symlink is followed on the way.
    pub fn open(path: &Path, busy: std::time::Duration) -> Result<SqliteConn, StoreError> {
        let sql = |source| StoreError::Sql {
            path: path.to_path_buf(),
            source,
        };
        let mut real = path.to_path_buf();
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            if let Ok(p) = parent.canonicalize() {
                real = p.join(name);
            }
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut f = real.clone().into_os_string();
            f.push(suffix);
            super::files::refuse_unreal(Path::new(&f), false)?;
        }
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&real, flags).map_err(sql)?;
        conn.busy_timeout(busy).map_err(sql)?;
        for (pragma, value) in [
            ("journal_mode", "WAL"),
            ("synchronous", "NORMAL"),
            ("foreign_keys", "ON"),
        ] {
            conn.pragma_update(None, pragma, value).map_err(sql)?;
        }
        Ok(SqliteConn {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Null => ValueRef::Null,
            Val::Int(i) => ValueRef::Integer(*i),
            Val::Real(f) => ValueRef::Real(*f),
            Val::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> Val {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Real(f) => Val::Real(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => Val::Text(String::from_utf8_lossy(t).into()),
    }
}

impl Conn for SqliteConn {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, StoreError> {
        self.conn
            .execute(sql, rusqlite::params_from_iter(params.iter()))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let mut st = self.conn.prepare(sql).map_err(err)?;
        let n = st.column_count();
        let mut rows = st
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(err)? {
            let mut r = Vec::with_capacity(n);
            for i in 0..n {
                r.push(from_sqlite(row.get_ref(i).map_err(err)?));
            }
            out.push(r);
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn.execute_batch(sql).map_err(|e| self.err(e))
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        self.batch("BEGIN IMMEDIATE")
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.batch("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    fn lock(&mut self, _key: &Val) -> Result<(), StoreError> {
        Ok(())
    }

    fn skip_locked(&self) -> &'static str {
        ""
    }

    fn column_type(&self, t: ColumnType) -> &'static str {
        match t {
            ColumnType::Id => "INTEGER PRIMARY KEY",
            ColumnType::Int | ColumnType::Bool => "INTEGER",
        }
    }

    fn schema_version(&mut self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    fn set_schema_version(&mut self, v: i64) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "user_version", v)
            .map_err(|e| self.err(e))
    }
}
