//! The PostgreSQL engine: a database many workspaces and machines share (`--store
//! postgres://…`), through one reconnecting connection with typed errors ([`PgConn`]). The
//! synchronous `postgres` client drives its own small tokio runtime and must not be called
//! on a thread inside kiln's: every call (and the client's drop) runs on a scoped thread of
//! its own when it is on such a thread. A connection that is gone turns into
//! [`StoreError::Unreachable`] and the next call reconnects. Messages never carry the URL's
//! password ([`PgUrl::scrub`]). A transaction's writers meet at advisory locks
//! ([`Conn::lock`]) and a claim skips rows others hold (`FOR UPDATE SKIP LOCKED`); the schema
//! version lives in the `kiln_schema` table.

use super::conn::{ColumnType, Conn, Val};
use super::error::StoreError;
use super::location::PgUrl;
use ::postgres::types::Type;
use ::postgres::{Client, NoTls};
use std::time::Duration;

/// How long a connection attempt may take before the store counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One reconnecting PostgreSQL connection with typed errors.
pub struct PgConn {
    url: PgUrl,
    config: ::postgres::Config,
    client: Option<Client>,
    /// A transaction is open on `client`: a statement that finds the connection gone is not
    /// made again on a fresh one (the transaction went with it).
    in_tx: bool,
}

/// Run `f` off kiln's tokio runtime: directly on a plain thread, else on a scoped thread.
fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl PgConn {
    /// Connect to `url` (failing with [`StoreError::Unreachable`] when the server cannot be
    /// reached).
    pub fn connect(url: &PgUrl) -> Result<PgConn, StoreError> {
        let mut config = url.config()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("kiln");
        let mut conn = PgConn {
            url: url.clone(),
            config,
            client: None,
            in_tx: false,
        };
        conn.with(|_| Ok(()))?;
        Ok(conn)
    }

    /// The URL, password redacted.
    pub fn describe(&self) -> String {
        self.url.to_string()
    }

    /// Run `f` with the client, connecting first when there is no live connection. A failure
    /// that leaves the connection gone is [`StoreError::Unreachable`] (and the next call
    /// reconnects); any other is [`StoreError::Postgres`].
    ///
    /// A connection made earlier can be found closed only by using it (the synchronous client
    /// drives its socket only during calls): when the server restarted since, the first
    /// statement fails ("connection closed", or the notice the old backend left: "terminating
    /// connection due to administrator command") without that backend, long gone, having run
    /// it. So a call on such a connection that finds it gone is made once more, on a fresh
    /// connection. (A restart in the very middle of a statement could then run it twice: the
    /// queue's claims and results are fenced by attempt, and a run's rows are its own.)
    pub fn with<R: Send>(
        &mut self,
        f: impl Fn(&mut Client) -> Result<R, ::postgres::Error> + Send,
    ) -> Result<R, StoreError> {
        // (Inside a transaction only its `BEGIN` is made again: a later statement that finds
        // the connection gone fails, and the transaction is gone with it.)
        let PgConn {
            url,
            config,
            client,
            in_tx,
        } = self;
        off_runtime(move || {
            let mut tries = 0;
            loop {
                tries += 1;
                if client.as_ref().is_none_or(Client::is_closed) && *in_tx {
                    *client = None;
                    *in_tx = false;
                    return Err(StoreError::Unreachable {
                        store: url.to_string(),
                        message: "the connection was lost inside a transaction".into(),
                    });
                }
                if client.as_ref().is_some_and(Client::is_closed) {
                    *client = None;
                }
                let reused = client.is_some();
                if client.is_none() {
                    // Refused, timed out or shutting down: unreachable (worth retrying). An
                    // answer such as a wrong password or a missing database is not.
                    let c = config.connect(NoTls).map_err(|e| {
                        url_error(url, &e, e.code().is_none() || connection_lost(&e))
                    })?;
                    *client = Some(c);
                }
                let c = client.as_mut().expect("connected above");
                match f(c) {
                    Ok(r) => return Ok(r),
                    Err(e) => {
                        let gone = c.is_closed() || connection_lost(&e);
                        let retry = gone && reused && tries == 1 && !*in_tx;
                        if gone {
                            *client = None;
                            *in_tx = false;
                        }
                        if retry {
                            continue;
                        }
                        return Err(url_error(url, &e, gone));
                    }
                }
            }
        })
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        // The client's drop closes the connection through its runtime: off kiln's too.
        let client = self.client.take();
        off_runtime(move || drop(client));
    }
}

/// The connection is gone or the server is going away: the call may succeed later.
fn connection_lost(e: &::postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        }
        None => {
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                if s.is::<std::io::Error>() {
                    return true;
                }
                source = s.source();
            }
            false
        }
    }
}

fn url_error(url: &PgUrl, e: &::postgres::Error, gone: bool) -> StoreError {
    let mut message = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    let store = url.to_string();
    let message = url.scrub(&message);
    if gone {
        StoreError::Unreachable { store, message }
    } else {
        StoreError::Postgres { store, message }
    }
}

impl postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Null => Ok(postgres::types::IsNull::Yes),
            Val::Int(i) if *ty == Type::BOOL => (*i != 0).to_sql(ty, out),
            Val::Int(i) if *ty == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            Val::Int(i) if *ty == Type::FLOAT8 => (*i as f64).to_sql(ty, out),
            Val::Int(i) => i.to_sql(ty, out),
            Val::Real(f) => f.to_sql(ty, out),
            Val::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn from_pg(row: &postgres::Row, i: usize) -> Val {
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
    } else if ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)
            .ok()
            .flatten()
            .map(|b| Val::Int(b.into()))
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

fn params(p: &[Val]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    p.iter().map(|v| v as _).collect()
}

impl Conn for PgConn {
    fn describe(&self) -> String {
        self.url.to_string()
    }

    fn execute(&mut self, sql: &str, p: &[Val]) -> Result<u64, StoreError> {
        let sql = pg_sql(sql);
        self.with(|c| c.execute(sql.as_str(), &params(p)))
    }

    fn query(&mut self, sql: &str, p: &[Val]) -> Result<Vec<Vec<Val>>, StoreError> {
        let sql = pg_sql(sql);
        self.with(|c| {
            let rows = c.query(sql.as_str(), &params(p))?;
            Ok(rows
                .iter()
                .map(|r| (0..r.len()).map(|i| from_pg(r, i)).collect())
                .collect())
        })
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.batch_execute(sql))
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        self.batch("BEGIN")?;
        self.in_tx = true;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        let done = self.batch("COMMIT");
        self.in_tx = false;
        done
    }

    fn rollback(&mut self) {
        if self.in_tx && self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            let _ = self.batch("ROLLBACK");
        }
        self.in_tx = false;
    }

    fn lock(&mut self, key: &Val) -> Result<(), StoreError> {
        let sql = match key {
            Val::Text(_) => "SELECT pg_advisory_xact_lock(hashtext(?1))",
            _ => "SELECT pg_advisory_xact_lock(?1)",
        };
        self.query(sql, std::slice::from_ref(key)).map(drop)
    }

    fn skip_locked(&self) -> &'static str {
        " FOR UPDATE OF t SKIP LOCKED"
    }

    fn column_type(&self, t: ColumnType) -> &'static str {
        match t {
            ColumnType::Id => "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
            ColumnType::Int => "BIGINT",
            ColumnType::Bool => "BOOLEAN",
        }
    }

    fn schema_version(&mut self) -> Result<i64, StoreError> {
        self.batch("CREATE TABLE IF NOT EXISTS kiln_schema (version BIGINT NOT NULL)")?;
        let rows = self.query("SELECT version FROM kiln_schema", &[])?;
        if let Some(v) = rows.first().and_then(|r| r[0].int()) {
            return Ok(v);
        }
        self.execute("INSERT INTO kiln_schema (version) VALUES (0)", &[])?;
        Ok(0)
    }

    fn set_schema_version(&mut self, v: i64) -> Result<(), StoreError> {
        self.execute("UPDATE kiln_schema SET version = ?1", &[v.into()])
            .map(drop)
    }
}
