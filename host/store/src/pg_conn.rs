//! One reconnecting PostgreSQL connection with typed errors ([`PgConn`]), shared by the store's
//! PostgreSQL backend and the batch queue. The synchronous `postgres` client drives its own
//! small tokio runtime, so every call (and the client's drop) runs on a scoped thread of its
//! own when it is on a thread inside kiln's runtime.

use super::error::StoreError;
use super::location::PgUrl;
use ::postgres::{Client, NoTls};
use std::time::Duration;

/// How long a connection attempt may take before the store counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One reconnecting PostgreSQL connection with typed errors.
pub struct PgConn {
    url: PgUrl,
    config: ::postgres::Config,
    client: Option<Client>,
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
        let PgConn {
            url,
            config,
            client,
        } = self;
        off_runtime(move || {
            let mut tries = 0;
            loop {
                tries += 1;
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
                        if gone {
                            *client = None;
                        }
                        if gone && reused && tries == 1 {
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
