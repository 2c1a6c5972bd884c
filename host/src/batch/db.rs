//! The few database operations the queue needs (statements with `?N` parameters, rows of
//! plain values, begin/commit), with an SQLite implementation. The queue's SQL is written once
//! for SQLite and PostgreSQL; only the claim's locking clause and the `BEGIN` differ.

use std::path::{Path, PathBuf};

/// A parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(String),
}

impl Val {
    /// The integer, if this is one (a float is truncated, NULL is `None`).
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Real(f) => Some(*f as i64),
            _ => None,
        }
    }
    /// The float, if this is a number.
    pub fn real(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Real(f) => Some(*f),
            _ => None,
        }
    }
    /// The text, if this is text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl From<&str> for Val {
    fn from(s: &str) -> Val {
        Val::Text(s.to_string())
    }
}
impl From<String> for Val {
    fn from(s: String) -> Val {
        Val::Text(s)
    }
}
impl From<i64> for Val {
    fn from(i: i64) -> Val {
        Val::Int(i)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}
impl From<f64> for Val {
    fn from(f: f64) -> Val {
        Val::Real(f)
    }
}

/// Which SQL dialect a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: `BEGIN IMMEDIATE` takes the write lock, so a claim is atomic without row locks.
    Sqlite,
    /// PostgreSQL: the claim's subquery locks its row with `FOR UPDATE SKIP LOCKED`.
    Postgres,
}

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

/// A connection the queue can use.
pub trait Db: Send {
    /// Its dialect.
    fn dialect(&self) -> Dialect;
    /// Run a statement; the number of rows changed.
    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, DbError>;
    /// Run a query (or a statement with `RETURNING`); every row.
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, DbError>;
    /// Run several statements without parameters (schema, `BEGIN`, `COMMIT`).
    fn batch(&mut self, sql: &str) -> Result<(), DbError>;
}

/// An SQLite file.
pub struct SqliteDb {
    conn: rusqlite::Connection,
    path: PathBuf,
}

impl SqliteDb {
    /// Open (creating) the database file, WAL, with a busy timeout.
    pub fn open(path: &Path) -> Result<SqliteDb, DbError> {
        let what = path.display().to_string();
        let err = |e: rusqlite::Error| sqlite_error(&what, e);
        let conn = rusqlite::Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        Ok(SqliteDb {
            conn,
            path: path.to_path_buf(),
        })
    }
}

fn sqlite_error(what: &str, e: rusqlite::Error) -> DbError {
    let transient = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    DbError {
        what: what.to_string(),
        message: e.to_string(),
        transient,
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value};
        Ok(ToSqlOutput::Owned(match self {
            Val::Null => Value::Null,
            Val::Int(i) => Value::Integer(*i),
            Val::Real(f) => Value::Real(*f),
            Val::Text(s) => Value::Text(s.clone()),
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

impl Db for SqliteDb {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, DbError> {
        let what = self.path.display().to_string();
        self.conn
            .execute(sql, rusqlite::params_from_iter(params.iter()))
            .map(|n| n as u64)
            .map_err(|e| sqlite_error(&what, e))
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, DbError> {
        let what = self.path.display().to_string();
        let err = |e| sqlite_error(&what, e);
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

    fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        let what = self.path.display().to_string();
        self.conn
            .execute_batch(sql)
            .map_err(|e| sqlite_error(&what, e))
    }
}

/// A PostgreSQL database, through the store's reconnecting connection (a call after the
/// server went away reconnects).
pub struct PgDb {
    conn: crate::store::postgres::PgConn,
}

impl PgDb {
    /// Connect.
    pub fn connect(url: &crate::store::PgUrl) -> Result<PgDb, DbError> {
        crate::store::postgres::PgConn::connect(url)
            .map(|conn| PgDb { conn })
            .map_err(|e| pg_error(url.to_string(), e))
    }

    fn what(&self) -> String {
        self.conn.describe()
    }
}

fn pg_error(what: String, e: crate::store::StoreError) -> DbError {
    DbError {
        what,
        transient: e.is_unreachable(),
        message: e.to_string(),
    }
}

/// `?N` placeholders as PostgreSQL's `$N`.
fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::Type;
        match self {
            Val::Null => Ok(postgres::types::IsNull::Yes),
            Val::Int(i) if *ty == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            Val::Int(i) if *ty == Type::FLOAT8 => (*i as f64).to_sql(ty, out),
            Val::Int(i) => i.to_sql(ty, out),
            Val::Real(f) => f.to_sql(ty, out),
            Val::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn from_pg(row: &postgres::Row, i: usize) -> Val {
    use postgres::types::Type;
    let ty = row.columns()[i].type_().clone();
    let v = if ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)
            .ok()
            .flatten()
            .map(Val::Int)
    } else if ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)
            .ok()
            .flatten()
            .map(|n| Val::Int(n.into()))
    } else if ty == Type::FLOAT8 {
        row.try_get::<_, Option<f64>>(i)
            .ok()
            .flatten()
            .map(Val::Real)
    } else {
        row.try_get::<_, Option<String>>(i)
            .ok()
            .flatten()
            .map(Val::Text)
    };
    v.unwrap_or(Val::Null)
}

impl Db for PgDb {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, DbError> {
        let (sql, params) = (pg_sql(sql), params.to_vec());
        let what = self.what();
        self.conn
            .with(move |c| {
                let p: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|v| v as _).collect();
                c.execute(sql.as_str(), &p)
            })
            .map_err(|e| pg_error(what, e))
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, DbError> {
        let (sql, params) = (pg_sql(sql), params.to_vec());
        let what = self.what();
        self.conn
            .with(move |c| {
                let p: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|v| v as _).collect();
                let rows = c.query(sql.as_str(), &p)?;
                Ok(rows
                    .iter()
                    .map(|r| (0..r.len()).map(|i| from_pg(r, i)).collect())
                    .collect())
            })
            .map_err(|e| pg_error(what, e))
    }

    fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        let sql = sql.to_string();
        let what = self.what();
        self.conn
            .with(move |c| c.batch_execute(&sql))
            .map_err(|e| pg_error(what, e))
    }
}
