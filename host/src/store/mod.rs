//! Persistence: an SQLite file in the workspace (`.kiln/kiln.db`, WAL) holding loops,
//! iterations, edits, LLM calls and events. The schema carries a version (`user_version`) and is
//! migrated forward on open. Writes are transactional; very large outputs are stored capped
//! (head and tail kept, with a marker saying how much was cut), never dropped silently.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The current schema version.
pub const SCHEMA_VERSION: i64 = 2;
/// Largest text stored per output column.
pub const MAX_STORED_TEXT: usize = 256 * 1024;

/// Store errors name the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database {path}: {source}")]
    Sql {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The `.kiln` directory could not be created.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another loop is running on this workspace.
    #[error(
        "loop {id} is already running on this workspace (pid {pid}, started {}); wait for it or stop it first",
        human_time(*started, now_ms())
    )]
    Overlap {
        /// Its id.
        id: i64,
        /// Its process.
        pid: i64,
        /// When it started (unix ms).
        started: i64,
    },
    /// The database was written by a newer kiln.
    #[error(
        "database {path} has schema version {found}, newer than this kiln's {supported}; upgrade kiln"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// Ours.
        supported: i64,
    },
    /// No such loop.
    #[error("no loop with id {0} in this workspace; see `kiln history`")]
    NoLoop(i64),
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
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Keep `text` under `max` bytes: head and tail with a marker in between.
pub fn cap_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let head_len = max / 4;
    let tail_len = max - head_len;
    let h = text.floor_char_boundary(head_len);
    let t = text.ceil_char_boundary(text.len() - tail_len);
    format!(
        "{}\n[... kiln: {} bytes omitted ...]\n{}",
        &text[..h],
        t - h,
        &text[t..]
    )
}

pub use crate::clock::now_ms;

/// Unix milliseconds as UTC, `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_text(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// A moment for a person: `2026-11-23 11:09:32 UTC, 4 min ago` (`now` in unix ms too).
pub fn human_time(ms: i64, now: i64) -> String {
    let when = utc_text(ms).replace('T', " ").replace('Z', " UTC");
    let ago = (now - ms) / 1000;
    let age = match ago {
        i64::MIN..=-1 => return when,
        0..=59 => format!("{ago} s ago"),
        60..=3599 => format!("{} min ago", ago / 60),
        3600..=86_399 => format!("{} h {} min ago", ago / 3600, ago / 60 % 60),
        _ => format!("{} days ago", ago / 86_400),
    };
    format!("{when}, {age}")
}

/// A loop as listed by `kiln history`.
#[derive(Debug, Clone, Serialize)]
pub struct LoopRow {
    /// Id.
    pub id: i64,
    /// `fix`.
    pub kind: String,
    /// Workspace.
    pub project: String,
    /// Runner plugin.
    pub runner: String,
    /// Target files.
    pub targets: Vec<String>,
    /// Edit format.
    pub format: String,
    /// Model (or `replay`).
    pub model: String,
    /// `running`, `success`, `failed`, `blocked`.
    pub status: String,
    /// Why it ended.
    pub stop_reason: Option<String>,
    /// Iteration ceiling.
    pub max_iters: i64,
    /// Iterations run.
    pub iters: i64,
    /// One-line summary.
    pub summary: Option<String>,
    /// Last error text.
    pub last_error: Option<String>,
    /// Start, unix ms.
    pub started_at: i64,
    /// End, unix ms.
    pub ended_at: Option<i64>,
    /// Token totals by class.
    pub tokens: crate::llm::Usage,
}

/// An iteration row.
#[derive(Debug, Clone, Serialize, Default)]
pub struct IterationRow {
    /// 0 is the initial run, before any LLM call.
    pub n: i64,
    /// Runner exit code.
    pub exit_code: i64,
    /// Runner verdict.
    pub ok: bool,
    /// Captured stdout (capped).
    pub stdout: String,
    /// Captured stderr (capped).
    pub stderr: String,
    /// Diagnostics as JSON.
    pub diagnostics: serde_json::Value,
    /// Normalised error fingerprint.
    pub fingerprint: String,
    /// What the LLM said it did (first lines of its answer).
    pub llm_summary: Option<String>,
    /// Runner time.
    pub runner_ms: i64,
    /// LLM time.
    pub llm_ms: i64,
    /// Tokens of this iteration's LLM calls.
    pub tokens_input: i64,
    /// Output tokens.
    pub tokens_output: i64,
    /// Edits applied.
    pub edits_applied: i64,
}

/// An edit row.
#[derive(Debug, Clone, Serialize)]
pub struct EditRow {
    /// Iteration.
    pub iteration: i64,
    /// Path.
    pub path: String,
    /// Kind.
    pub kind: String,
    /// Status.
    pub status: String,
    /// Tier.
    pub tier: Option<String>,
    /// Failure class.
    pub failure: Option<String>,
    /// Error text.
    pub error: Option<String>,
}

/// An LLM call row.
#[derive(Debug, Clone, Serialize)]
pub struct LlmCallRow {
    /// Iteration.
    pub iteration: i64,
    /// Model.
    pub model: String,
    /// Latency.
    pub latency_ms: i64,
    /// Usage.
    pub tokens: crate::llm::Usage,
    /// The raw answer text.
    pub response: String,
    /// Tool calls as JSON.
    pub tool_calls: serde_json::Value,
    /// Error, if the call failed.
    pub error: Option<String>,
}

/// Everything about one loop.
#[derive(Debug, Clone, Serialize)]
pub struct LoopDetail {
    /// The loop.
    #[serde(flatten)]
    pub row: LoopRow,
    /// Its iterations.
    pub iterations: Vec<IterationRow>,
    /// Its edits.
    pub edits: Vec<EditRow>,
    /// Its LLM calls.
    pub llm_calls: Vec<LlmCallRow>,
}

/// What a new loop is.
#[derive(Debug, Clone)]
pub struct NewLoop {
    /// `fix`.
    pub kind: String,
    /// Runner.
    pub runner: String,
    /// Targets.
    pub targets: Vec<String>,
    /// Format.
    pub format: String,
    /// Model.
    pub model: String,
    /// Iteration ceiling.
    pub max_iters: i64,
    /// The loop that starts this one (an agent's `compile_loop`): not an overlap.
    pub parent: Option<i64>,
}

/// The store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    project: String,
}

const SCHEMA_V1: &str = "
CREATE TABLE loops (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    project TEXT NOT NULL,
    runner TEXT NOT NULL,
    targets TEXT NOT NULL,
    format TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    max_iters INTEGER NOT NULL,
    iters INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    last_error TEXT,
    pid INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    tokens_input INTEGER NOT NULL DEFAULT 0,
    tokens_cached_input INTEGER NOT NULL DEFAULT 0,
    tokens_cache_write INTEGER NOT NULL DEFAULT 0,
    tokens_output INTEGER NOT NULL DEFAULT 0,
    tokens_reasoning INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX loops_status ON loops(project, status);
CREATE TABLE iterations (
    id INTEGER PRIMARY KEY,
    loop_id INTEGER NOT NULL REFERENCES loops(id),
    n INTEGER NOT NULL,
    exit_code INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    stdout TEXT NOT NULL,
    stderr TEXT NOT NULL,
    diagnostics TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    llm_summary TEXT,
    runner_ms INTEGER NOT NULL,
    llm_ms INTEGER NOT NULL,
    tokens_input INTEGER NOT NULL,
    tokens_output INTEGER NOT NULL,
    edits_applied INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE edits (
    id INTEGER PRIMARY KEY,
    loop_id INTEGER NOT NULL REFERENCES loops(id),
    iteration INTEGER NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    tier TEXT,
    failure TEXT,
    error TEXT
);
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    loop_id INTEGER NOT NULL REFERENCES loops(id),
    iteration INTEGER NOT NULL,
    model TEXT NOT NULL,
    latency_ms INTEGER NOT NULL,
    tokens_input INTEGER NOT NULL,
    tokens_cached_input INTEGER NOT NULL,
    tokens_cache_write INTEGER NOT NULL,
    tokens_output INTEGER NOT NULL,
    tokens_reasoning INTEGER NOT NULL,
    response TEXT NOT NULL,
    tool_calls TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    loop_id INTEGER NOT NULL REFERENCES loops(id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
";

/// Version 2: agent tool calls, with their full (uncapped up to the store cap) results.
const SCHEMA_V2: &str = "
CREATE TABLE tool_calls (
    id INTEGER PRIMARY KEY,
    loop_id INTEGER NOT NULL REFERENCES loops(id),
    turn INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    result TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
";

/// A recorded agent tool call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallRow {
    /// Turn.
    pub turn: i64,
    /// Tool name.
    pub name: String,
    /// Arguments (JSON text).
    pub arguments: String,
    /// Full result text (store-capped).
    pub result: String,
    /// The call failed.
    pub is_error: bool,
    /// Duration.
    pub duration_ms: i64,
}

fn pid_alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// What `path` is when it is not what kiln may use: a symlink or some other non-regular entry.
fn refuse_unreal(path: &Path, want_dir: bool) -> Result<bool, StoreError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(StoreError::Dir {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let t = meta.file_type();
    let why = if t.is_symlink() {
        "it is a symbolic link"
    } else if want_dir && !t.is_dir() {
        "it is not a directory"
    } else if !want_dir && !t.is_file() {
        "it is not a regular file"
    } else {
        return Ok(true);
    };
    Err(StoreError::NotReal {
        path: path.to_path_buf(),
        why,
    })
}

/// `<workspace>/.kiln`, created when missing, refused when it is a symlink or not a directory.
/// The workspace path itself is canonicalised, so no link in it can redirect the store.
fn kiln_dir(workspace: &Path) -> Result<PathBuf, StoreError> {
    let root = workspace.canonicalize().map_err(|source| StoreError::Dir {
        path: workspace.to_path_buf(),
        source,
    })?;
    let dir = root.join(".kiln");
    if !refuse_unreal(&dir, true)? {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // Created by a concurrent kiln: check it again below.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(StoreError::Dir {
                    path: dir.clone(),
                    source,
                });
            }
        }
        refuse_unreal(&dir, true)?;
    }
    ignore_in_git(&dir);
    Ok(dir)
}

/// Give `.kiln/` a `.gitignore` holding `*` (as uv does for `.venv`), so `git add -A` never
/// commits the store, which holds prompts and answers. Created exclusively, following no
/// link; an existing file (the user's own) is left as it is, and a failure only means git may
/// show the directory.
fn ignore_in_git(kiln: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(kiln.join(".gitignore"))
    {
        let _ = f.write_all(b"# Created by kiln: its store holds prompts and answers.\n*\n");
    }
}

/// Open (creating) a log file `<workspace>/.kiln/logs/<name>` for appending, following no
/// symlink: a symlinked `.kiln`, `logs` or log file is refused, naming it, so kiln's logs
/// cannot be redirected outside the workspace.
pub fn open_log(workspace: &Path, name: &str) -> Result<std::fs::File, StoreError> {
    use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
    use std::os::unix::fs::OpenOptionsExt as _;
    let kiln = kiln_dir(workspace)?;
    let logs = kiln.join("logs");
    let log_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Log { path, source }
    };
    // `.kiln` opened without following a link: everything below is resolved beneath it.
    let kdir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&kiln)
        .map_err(log_err(&kiln))?;
    let kdir = Dir::from_std_file(kdir);
    if !refuse_unreal(&logs, true)? {
        match kdir.create_dir("logs") {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(log_err(&logs)(e)),
        }
        refuse_unreal(&logs, true)?;
    }
    let ldir = kdir.open_dir("logs").map_err(log_err(&logs))?;
    let file = logs.join(name);
    refuse_unreal(&file, false)?;
    let f = ldir
        .open_with(
            name,
            OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK),
        )
        .map_err(log_err(&file))?;
    let f = f.into_std();
    // Opened without following a link; a FIFO or device planted there is refused too.
    if !f.metadata().map_err(log_err(&file))?.is_file() {
        return Err(StoreError::NotReal {
            path: file,
            why: "it is not a regular file",
        });
    }
    Ok(f)
}

impl Store {
    /// Open (creating and migrating) `<workspace>/.kiln/kiln.db`. A `.kiln` or database file
    /// that is a symlink is refused (the store must not be redirected outside the workspace).
    pub fn open(workspace: &Path) -> Result<Store, StoreError> {
        let dir = kiln_dir(workspace)?;
        Store::open_file(&dir.join("kiln.db"), &workspace.to_string_lossy())
    }

    /// Open a database file for a project. The file and SQLite's companions (`-wal`, `-shm`,
    /// `-journal`) must be regular files or absent, and no symlink is followed on the way.
    pub fn open_file(path: &Path, project: &str) -> Result<Store, StoreError> {
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
            refuse_unreal(Path::new(&f), false)?;
        }
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&real, flags).map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
            project: project.to_string(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let tx = self.conn.transaction().map_err(|e| StoreError::Sql {
            path: self.path.clone(),
            source: e,
        })?;
        if version < 1 {
            tx.execute_batch(SCHEMA_V1).map_err(|e| StoreError::Sql {
                path: self.path.clone(),
                source: e,
            })?;
        }
        if version < 2 {
            tx.execute_batch(SCHEMA_V2).map_err(|e| StoreError::Sql {
                path: self.path.clone(),
                source: e,
            })?;
        }
        // Later versions add their steps here, each `if version < N { ... }`.
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(|e| StoreError::Sql {
                path: self.path.clone(),
                source: e,
            })?;
        tx.commit().map_err(|e| StoreError::Sql {
            path: self.path.clone(),
            source: e,
        })
    }

    /// Start a loop, refusing when another live loop runs on this workspace. A `running` loop
    /// whose process is gone (a crash) is closed as `failed`/`error` first.
    pub fn begin_loop(&mut self, new: &NewLoop) -> Result<i64, StoreError> {
        let path = self.path.clone();
        let project = self.project.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let running: Vec<(i64, i64, i64)> = {
            let mut st = tx.prepare("SELECT id, pid, started_at FROM loops WHERE project = ?1 AND status = 'running'").map_err(sql)?;
            st.query_map(params![project], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(sql)?
                .collect::<Result<_, _>>()
                .map_err(sql)?
        };
        for (id, pid, started) in running {
            if Some(id) == new.parent {
                continue;
            }
            if pid_alive(pid) {
                return Err(StoreError::Overlap { id, pid, started });
            }
            tx.execute(
                "UPDATE loops SET status = 'failed', stop_reason = 'error', last_error = 'the process running this loop ended without finishing it', ended_at = ?2 WHERE id = ?1",
                params![id, now_ms()],
            )
            .map_err(sql)?;
        }
        tx.execute(
            "INSERT INTO loops (kind, project, runner, targets, format, model, status, max_iters, pid, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, ?8, ?9)",
            params![new.kind, project, new.runner, serde_json::to_string(&new.targets).unwrap_or_default(), new.format, new.model, new.max_iters, std::process::id() as i64, now_ms()],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(sql)?;
        Ok(id)
    }

    /// Record one iteration with its edits, in one transaction.
    pub fn record_iteration(
        &mut self,
        loop_id: i64,
        it: &IterationRow,
        edits: &[crate::edit::EditResult],
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO iterations (loop_id, n, exit_code, ok, stdout, stderr, diagnostics, fingerprint, llm_summary, runner_ms, llm_ms, tokens_input, tokens_output, edits_applied, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                loop_id, it.n, it.exit_code, it.ok, cap_text(&it.stdout, MAX_STORED_TEXT), cap_text(&it.stderr, MAX_STORED_TEXT),
                it.diagnostics.to_string(), it.fingerprint, it.llm_summary, it.runner_ms, it.llm_ms, it.tokens_input, it.tokens_output,
                it.edits_applied, now_ms()
            ],
        )
        .map_err(sql)?;
        for e in edits {
            tx.execute(
                "INSERT INTO edits (loop_id, iteration, path, kind, status, tier, failure, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![loop_id, it.n, e.path, e.kind, e.status, e.tier, e.failure, e.error.as_deref().map(|s| cap_text(s, MAX_STORED_TEXT))],
            )
            .map_err(sql)?;
        }
        tx.execute(
            "UPDATE loops SET iters = MAX(iters, ?2) WHERE id = ?1",
            params![loop_id, it.n],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Set a loop's token totals to `u` (a loop whose model calls are recorded under its
    /// nested runs: the execute/review loop's row carries the sum of its rounds).
    pub fn set_loop_tokens(
        &mut self,
        loop_id: i64,
        u: &crate::llm::Usage,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE loops SET tokens_input = ?2, tokens_cached_input = ?3, tokens_cache_write = ?4, tokens_output = ?5, tokens_reasoning = ?6 WHERE id = ?1",
                params![loop_id, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Record one LLM call and add its tokens to the loop's totals.
    pub fn record_llm_call(
        &mut self,
        loop_id: i64,
        iteration: i64,
        model: &str,
        r: Result<&crate::llm::ChatResponse, &str>,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let (latency, u, text, calls, error) = match r {
            Ok(resp) => (
                resp.latency.as_millis() as i64,
                resp.usage,
                resp.text.as_str(),
                serde_json::to_string(&resp.tool_calls).unwrap_or_default(),
                None,
            ),
            Err(e) => (
                0,
                crate::llm::Usage::default(),
                "",
                "[]".to_string(),
                Some(e),
            ),
        };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO llm_calls (loop_id, iteration, model, latency_ms, tokens_input, tokens_cached_input, tokens_cache_write, tokens_output, tokens_reasoning, response, tool_calls, error, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![loop_id, iteration, model, latency, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64, cap_text(text, MAX_STORED_TEXT), calls, error, now_ms()],
        )
        .map_err(sql)?;
        tx.execute(
            "UPDATE loops SET tokens_input = tokens_input + ?2, tokens_cached_input = tokens_cached_input + ?3, tokens_cache_write = tokens_cache_write + ?4,
             tokens_output = tokens_output + ?5, tokens_reasoning = tokens_reasoning + ?6 WHERE id = ?1",
            params![loop_id, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Record an event.
    pub fn record_event(
        &mut self,
        loop_id: i64,
        seq: u64,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO events (loop_id, seq, type, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![loop_id, seq as i64, kind, payload.to_string(), now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// A loop's stored events in order, each `(seq, type, payload)`; only those of type
    /// `kind` when given.
    pub fn events(
        &self,
        loop_id: i64,
        kind: Option<&str>,
    ) -> Result<Vec<(i64, String, serde_json::Value)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, type, payload FROM events WHERE loop_id = ?1 AND (?2 IS NULL OR type = ?2) ORDER BY seq, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![loop_id, kind], |r| {
                let payload: String = r.get(2)?;
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                ))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Close a loop.
    pub fn finish_loop(
        &mut self,
        loop_id: i64,
        status: &str,
        stop_reason: &str,
        summary: &str,
        last_error: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE loops SET status = ?2, stop_reason = ?3, summary = ?4, last_error = ?5, ended_at = ?6 WHERE id = ?1",
                params![loop_id, status, stop_reason, summary, last_error.map(|s| cap_text(s, MAX_STORED_TEXT)), now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LoopRow> {
        let targets: String = r.get(4)?;
        Ok(LoopRow {
            id: r.get(0)?,
            kind: r.get(1)?,
            project: r.get(2)?,
            runner: r.get(3)?,
            targets: serde_json::from_str(&targets).unwrap_or_default(),
            format: r.get(5)?,
            model: r.get(6)?,
            status: r.get(7)?,
            stop_reason: r.get(8)?,
            max_iters: r.get(9)?,
            iters: r.get(10)?,
            summary: r.get(11)?,
            last_error: r.get(12)?,
            started_at: r.get(13)?,
            ended_at: r.get(14)?,
            tokens: crate::llm::Usage {
                input: r.get::<_, i64>(15)? as u64,
                cached_input: r.get::<_, i64>(16)? as u64,
                cache_write: r.get::<_, i64>(17)? as u64,
                output: r.get::<_, i64>(18)? as u64,
                reasoning: r.get::<_, i64>(19)? as u64,
            },
        })
    }

    const LOOP_COLUMNS: &'static str = "id, kind, project, runner, targets, format, model, status, stop_reason, max_iters, iters, summary, last_error, started_at, ended_at, tokens_input, tokens_cached_input, tokens_cache_write, tokens_output, tokens_reasoning";

    /// The most recent loops of this project, newest first.
    pub fn loops(&self, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        let q = format!(
            "SELECT {} FROM loops WHERE project = ?1 ORDER BY id DESC LIMIT ?2",
            Self::LOOP_COLUMNS
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![self.project, limit as i64], Self::row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// One loop with its iterations, edits and LLM calls.
    pub fn loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        let q = format!("SELECT {} FROM loops WHERE id = ?1", Self::LOOP_COLUMNS);
        let row = self
            .conn
            .query_row(&q, params![id], Self::row)
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NoLoop(id))?;
        let mut st = self
            .conn
            .prepare("SELECT n, exit_code, ok, stdout, stderr, diagnostics, fingerprint, llm_summary, runner_ms, llm_ms, tokens_input, tokens_output, edits_applied FROM iterations WHERE loop_id = ?1 ORDER BY n")
            .map_err(|e| self.err(e))?;
        let iterations = st
            .query_map(params![id], |r| {
                let d: String = r.get(5)?;
                Ok(IterationRow {
                    n: r.get(0)?,
                    exit_code: r.get(1)?,
                    ok: r.get(2)?,
                    stdout: r.get(3)?,
                    stderr: r.get(4)?,
                    diagnostics: serde_json::from_str(&d).unwrap_or_default(),
                    fingerprint: r.get(6)?,
                    llm_summary: r.get(7)?,
                    runner_ms: r.get(8)?,
                    llm_ms: r.get(9)?,
                    tokens_input: r.get(10)?,
                    tokens_output: r.get(11)?,
                    edits_applied: r.get(12)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let mut st = self.conn.prepare("SELECT iteration, path, kind, status, tier, failure, error FROM edits WHERE loop_id = ?1 ORDER BY id").map_err(|e| self.err(e))?;
        let edits = st
            .query_map(params![id], |r| {
                Ok(EditRow {
                    iteration: r.get(0)?,
                    path: r.get(1)?,
                    kind: r.get(2)?,
                    status: r.get(3)?,
                    tier: r.get(4)?,
                    failure: r.get(5)?,
                    error: r.get(6)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let mut st = self
            .conn
            .prepare("SELECT iteration, model, latency_ms, tokens_input, tokens_cached_input, tokens_cache_write, tokens_output, tokens_reasoning, response, tool_calls, error FROM llm_calls WHERE loop_id = ?1 ORDER BY id")
            .map_err(|e| self.err(e))?;
        let llm_calls = st
            .query_map(params![id], |r| {
                let calls: String = r.get(9)?;
                Ok(LlmCallRow {
                    iteration: r.get(0)?,
                    model: r.get(1)?,
                    latency_ms: r.get(2)?,
                    tokens: crate::llm::Usage {
                        input: r.get::<_, i64>(3)? as u64,
                        cached_input: r.get::<_, i64>(4)? as u64,
                        cache_write: r.get::<_, i64>(5)? as u64,
                        output: r.get::<_, i64>(6)? as u64,
                        reasoning: r.get::<_, i64>(7)? as u64,
                    },
                    response: r.get(8)?,
                    tool_calls: serde_json::from_str(&calls).unwrap_or_default(),
                    error: r.get(10)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        Ok(LoopDetail {
            row,
            iterations,
            edits,
            llm_calls,
        })
    }

    /// Record one agent tool call.
    #[allow(clippy::too_many_arguments)]
    pub fn record_tool_call(
        &mut self,
        loop_id: i64,
        turn: i64,
        call_id: &str,
        name: &str,
        arguments: &str,
        result: &str,
        is_error: bool,
        duration_ms: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO tool_calls (loop_id, turn, call_id, name, arguments, result, is_error, duration_ms, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![loop_id, turn, call_id, name, cap_text(arguments, MAX_STORED_TEXT), cap_text(result, MAX_STORED_TEXT), is_error, duration_ms, now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// An agent run's tool calls, in order.
    pub fn tool_calls(&self, loop_id: i64) -> Result<Vec<ToolCallRow>, StoreError> {
        let mut st = self.conn.prepare("SELECT turn, name, arguments, result, is_error, duration_ms FROM tool_calls WHERE loop_id = ?1 ORDER BY id").map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![loop_id], |r| {
                Ok(ToolCallRow {
                    turn: r.get(0)?,
                    name: r.get(1)?,
                    arguments: r.get(2)?,
                    result: r.get(3)?,
                    is_error: r.get(4)?,
                    duration_ms: r.get(5)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Set a loop's iteration count (agent turns).
    pub fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE loops SET iters = ?2 WHERE id = ?1",
                params![loop_id, iters],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Start a session that records tool calls made on behalf of another program (a `kiln mcp`
    /// connection): status `serving` until [`Store::finish_loop`]. It is not a loop, so it
    /// neither waits for running loops nor makes a later loop wait.
    pub fn begin_session(&mut self, new: &NewLoop) -> Result<i64, StoreError> {
        self.conn
            .execute(
                "INSERT INTO loops (kind, project, runner, targets, format, model, status, max_iters, pid, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'serving', ?7, ?8, ?9)",
                params![new.kind, self.project, new.runner, serde_json::to_string(&new.targets).unwrap_or_default(), new.format, new.model, new.max_iters, std::process::id() as i64, now_ms()],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Number of events recorded for a loop.
    pub fn event_count(&self, loop_id: i64) -> Result<i64, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM events WHERE loop_id = ?1",
                params![loop_id],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_as_dates_and_ages() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_795_778_972_000), "2026-11-27T11:29:32Z");
        let t = 1_795_778_972_000;
        assert_eq!(
            human_time(t, t + 125_000),
            "2026-11-27 11:29:32 UTC, 2 min ago"
        );
        assert_eq!(human_time(t, t + 5_000), "2026-11-27 11:29:32 UTC, 5 s ago");
        let e = StoreError::Overlap {
            id: 3,
            pid: 42,
            started: now_ms() - 90_000,
        }
        .to_string();
        assert!(e.contains(" UTC, 1 min ago)"), "{e}");
    }

    #[test]
    fn cap_keeps_head_and_tail_and_says_so() {
        let t = "a".repeat(1000) + &"z".repeat(1000);
        let c = cap_text(&t, 400);
        assert!(c.starts_with("aaa") && c.ends_with("zzz"));
        assert!(c.contains("bytes omitted"));
        assert_eq!(cap_text("short", 400), "short");
    }

    #[test]
    fn schema_is_versioned_and_a_newer_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("k.db");
        drop(Store::open_file(&db, "p").unwrap());
        let conn = Connection::open(&db).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        assert!(matches!(
            Store::open_file(&db, "p"),
            Err(StoreError::TooNew { found: 99, .. })
        ));
    }

    #[test]
    fn a_version_1_database_is_migrated_forward() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("k.db");
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        drop(conn);
        let s = Store::open_file(&db, "p").unwrap();
        assert!(s.tool_calls(1).unwrap().is_empty(), "the v2 table exists");
        let v: i64 = s
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 2);
    }

    #[test]
    fn a_crashed_running_loop_is_closed_not_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_file(&dir.path().join("k.db"), "p").unwrap();
        let new = NewLoop {
            kind: "fix".into(),
            runner: "r".into(),
            targets: vec!["a".into()],
            format: "f".into(),
            model: "m".into(),
            max_iters: 5,
            parent: None,
        };
        let first = s.begin_loop(&new).unwrap();
        // Pretend it belonged to a process that is gone.
        s.conn
            .execute(
                "UPDATE loops SET pid = 999999999 WHERE id = ?1",
                params![first],
            )
            .unwrap();
        let second = s.begin_loop(&new).unwrap();
        let rows = s.loops(10).unwrap();
        assert_eq!(
            rows.iter().find(|r| r.id == first).unwrap().status,
            "failed"
        );
        assert_eq!(
            rows.iter().find(|r| r.id == second).unwrap().status,
            "running"
        );
    }
}
