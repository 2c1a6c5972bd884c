//! One connection abstraction for every table kiln keeps in a database: the run store's and
//! the batch queue's. SQL is written once, with `?N` placeholders and plain values ([`Val`]);
//! what differs between engines sits in the few [`Conn`] methods below that each engine's file
//! implements: the placeholders, the column types of the migrations, how a transaction takes
//! the write lock, advisory locks, the claim's row-locking clause and where the schema version
//! is kept.

use super::error::StoreError;

/// A parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// SQL NULL.
    Null,
    /// An integer (also a boolean: 0 or 1).
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
impl From<&String> for Val {
    fn from(s: &String) -> Val {
        Val::Text(s.clone())
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
impl From<u64> for Val {
    fn from(i: u64) -> Val {
        Val::Int(i as i64)
    }
}
impl From<bool> for Val {
    fn from(b: bool) -> Val {
        Val::Int(b.into())
    }
}
impl From<f64> for Val {
    fn from(f: f64) -> Val {
        Val::Real(f)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

/// A column type the migrations name, which each engine spells its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// The table's integer key, assigned on insert (`{id}` in a migration).
    Id,
    /// A 64-bit integer (`{int}`).
    Int,
    /// A boolean (`{bool}`), read back as 0 or 1.
    Bool,
}

/// A connection to one database. Every method but [`Conn::begin`]/[`Conn::commit`] is one
/// statement (or batch) on its own, or a step of the transaction begun.
pub trait Conn: Send {
    /// The database, for messages: a file path, or a URL without its password.
    fn describe(&self) -> String;
    /// Run a statement (`?N` placeholders); the number of rows changed.
    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, StoreError>;
    /// Run a query (or a statement with `RETURNING`); every row.
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, StoreError>;
    /// Run several statements without parameters (a migration).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;
    /// Begin a transaction that will write: once begun, the writes of others wait or are
    /// locked out as [`Conn::lock`] and [`Conn::skip_locked`] say.
    fn begin(&mut self) -> Result<(), StoreError>;
    /// Commit the transaction begun.
    fn commit(&mut self) -> Result<(), StoreError>;
    /// Roll the transaction begun back (nothing when the connection is gone: so is it).
    fn rollback(&mut self);
    /// Inside a transaction, wait for the lock named `key` (an integer or a text) until the
    /// transaction ends. An engine whose [`Conn::begin`] already locks out every other
    /// writer needs nothing more.
    fn lock(&mut self, key: &Val) -> Result<(), StoreError>;
    /// The clause a claim's subquery ends with so that concurrent claims skip each other's
    /// row (none where the transaction holds the only write lock).
    fn skip_locked(&self) -> &'static str;
    /// How this engine spells a column type of the migrations.
    fn column_type(&self, t: ColumnType) -> &'static str;
    /// The schema version recorded in the database (0 for a new one).
    fn schema_version(&mut self) -> Result<i64, StoreError>;
    /// Record the schema version (inside the migration's transaction).
    fn set_schema_version(&mut self, v: i64) -> Result<(), StoreError>;
}

/// Run `f` in a transaction of `conn`: committed when it returns `Ok`, rolled back otherwise.
pub fn transaction<T, E: From<StoreError>>(
    conn: &mut dyn Conn,
    f: impl FnOnce(&mut dyn Conn) -> Result<T, E>,
) -> Result<T, E> {
    conn.begin()?;
    match f(conn) {
        Ok(v) => {
            conn.commit()?;
            Ok(v)
        }
        Err(e) => {
            conn.rollback();
            Err(e)
        }
    }
}
