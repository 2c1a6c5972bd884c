//! `kiln worker`: claim tasks from a shared store and run them, N at once, until stopped (or,
//! with `--once`, until nothing is left to claim); plus what `kiln batch` shares with it:
//! opening the queue, the lease flags, and driving a worker with progress on stderr.
// Writes outside the workspace: the batch directory and a worker's scratch: kiln's state directory, or the --dir/--scratch the user names.
#![allow(clippy::disallowed_methods)]

use super::ctx::{Ctx, Outcome};
use crate::batch::exec::ExecSettings;
use crate::batch::worker::{self, Report, SharedQueue, WorkerOptions};
use crate::batch::{Counts, Queue};
use crate::store::StoreUrl;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the queue is.
#[derive(Debug, Clone, Args)]
pub(crate) struct QueueArgs {
    /// A local batch directory (its SQLite store; default: `batches/` in kiln's state directory
    /// for the workspace, `$XDG_STATE_HOME/kiln/workspaces/…`).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl QueueArgs {
    /// Open the queue these flags name: `--dir`, else the configured store (`--store`,
    /// `KILN_STORE`, `[store] url`), else the workspace's batch directory in kiln's state directory. Also returns the
    /// store URL the tasks record their runs in (the same database).
    pub fn open(&self, ctx: &Ctx) -> anyhow::Result<(SharedQueue, String)> {
        self.open_or_create(ctx, true)
    }

    /// [`QueueArgs::open`] for reading only: a local batch directory that does not exist is
    /// an error, not created.
    pub fn open_existing(&self, ctx: &Ctx) -> anyhow::Result<(SharedQueue, String)> {
        self.open_or_create(ctx, false)
    }

    fn open_or_create(&self, ctx: &Ctx, create: bool) -> anyhow::Result<(SharedQueue, String)> {
        let (queue, url) = self.open_queue(ctx, create)?;
        migrate_store(&url)?;
        Ok((queue, url))
    }

    fn open_queue(&self, ctx: &Ctx, create: bool) -> anyhow::Result<(SharedQueue, String)> {
        match (&self.dir, &ctx.store) {
            (None, Some(url)) => {
                let url = url.absolute()?;
                let q = Queue::new(crate::batch::db::open(&url)?)?;
                Ok((Arc::new(Mutex::new(q)), url.secret_url()))
            }
            _ => {
                let dir = self.local_dir(ctx, create)?;
                if !create && !dir.join("kiln.db").is_file() {
                    anyhow::bail!(
                        "no batch in {}; run `kiln batch run`, or name the queue with --dir DIR or --store URL",
                        dir.display()
                    );
                }
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create batch directory {}", dir.display()))?;
                open_local(&dir.canonicalize()?)
            }
        }
    }

    /// The local batch directory ([`batch_dir`]); created when `create`.
    fn local_dir(&self, ctx: &Ctx, create: bool) -> anyhow::Result<PathBuf> {
        batch_dir(ctx, self.dir.as_deref(), create)
    }

    /// The default place for checkouts: the batch directory's `work/` for a local queue, else
    /// `kiln/worker` in the user's state directory.
    fn scratch(&self, ctx: &Ctx) -> anyhow::Result<PathBuf> {
        if self.dir.is_none() && ctx.store.is_some() {
            return Ok(crate::state_dir::base()?.join("worker"));
        }
        Ok(self.local_dir(ctx, true)?.join("work"))
    }
}

/// Lease timing (short values make tests fast).
#[derive(Debug, Clone, Args)]
pub(crate) struct LeaseArgs {
    /// Seconds a claim holds without a heartbeat; after that, another worker may take the
    /// task (attempt + 1).
    #[arg(long, value_name = "SECS", env = "KILN_LEASE", default_value_t = 60.0)]
    lease: f64,
    /// Seconds between heartbeats (default: a third of the lease).
    #[arg(long, value_name = "SECS", env = "KILN_HEARTBEAT")]
    heartbeat: Option<f64>,
    /// Seconds an idle worker waits before looking for work again.
    #[arg(long, value_name = "SECS", env = "KILN_POLL", default_value_t = 2.0)]
    poll: f64,
}

impl LeaseArgs {
    /// Worker options with these timings (the rest defaulted).
    pub fn options(&self) -> anyhow::Result<WorkerOptions> {
        let secs = |flag: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(anyhow::anyhow!(
                    "{flag} {v}: give a number of seconds above 0"
                ))
            }
        };
        let lease = secs("--lease", self.lease)?;
        let heartbeat = match self.heartbeat {
            Some(h) => secs("--heartbeat", h)?,
            None => lease / 3,
        };
        if heartbeat >= lease {
            anyhow::bail!(
                "--heartbeat must be shorter than --lease, or the lease lapses between beats"
            );
        }
        Ok(WorkerOptions {
            batch: None,
            jobs: 1,
            once: false,
            lease,
            heartbeat,
            max_attempts: 3,
            poll: secs("--poll", self.poll)?,
            worker_id: String::new(),
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Tasks at once.
    #[arg(long, short = 'j', default_value_t = 1)]
    jobs: usize,
    /// Exit when nothing is left to claim (and this worker's tasks are done).
    #[arg(long)]
    once: bool,
    /// Keep each finished task's checkout (default: removed once its result and diff are
    /// recorded, with kiln's state for it).
    #[arg(long)]
    keep_checkouts: bool,
    /// Seconds to wait for an unreachable store at start-up before giving up (default: wait
    /// as long as it takes, as every later reconnect does).
    #[arg(long, value_name = "SECS")]
    connect_timeout: Option<f64>,
    /// Attempts before a task whose workers keep dying is `dead`.
    #[arg(long, default_value_t = 3)]
    max_attempts: i64,
    /// Only this batch.
    #[arg(long, value_name = "ID")]
    batch: Option<String>,
    /// Where checkouts go (default: the batch directory's `work/` for a local queue, else
    /// `kiln/worker` in the user's state directory).
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    lease: LeaseArgs,
}

pub(crate) async fn run(ctx: &Ctx, yes: bool, a: WorkerArgs) -> anyhow::Result<Outcome> {
    if a.jobs == 0 {
        anyhow::bail!("--jobs must be 1 or more");
    }
    let (queue, store) = open_waiting(ctx, &a.queue, a.connect_timeout).await?;
    let scratch = match &a.scratch {
        Some(s) => s.clone(),
        None => a.queue.scratch(ctx)?,
    };
    let mut exec = exec_settings(ctx, &scratch, store, yes, &[])?;
    exec.keep_checkouts = a.keep_checkouts;
    let opts = WorkerOptions {
        batch: a.batch.clone(),
        jobs: a.jobs,
        once: a.once,
        max_attempts: a.max_attempts,
        worker_id: worker::worker_id(),
        ..a.lease.options()?
    };
    if !ctx.quiet {
        eprintln!(
            "worker {} started: {} at once, lease {:.1}s, heartbeat {:.1}s",
            opts.worker_id,
            opts.jobs,
            opts.lease.as_secs_f64(),
            opts.heartbeat.as_secs_f64()
        );
    }
    let (interrupted, gave_up) = drive(queue, exec, opts, ctx.quiet, None).await;
    Ok(if interrupted {
        Outcome::Interrupted
    } else if gave_up {
        Outcome::Failure
    } else {
        Outcome::Success
    })
}

/// Create or migrate the store's own tables now, before any task's kiln opens it: many
/// children opening a new SQLite store at once would race to create them.
/// Open the queue, waiting for a store that cannot be reached yet (a worker started before
/// its database): retried with backoff (0.2 s doubling to 5 s), saying so, until
/// `timeout` seconds have passed (forever without one). Any other error ends it at once.
async fn open_waiting(
    ctx: &Ctx,
    queue: &QueueArgs,
    timeout: Option<f64>,
) -> anyhow::Result<(SharedQueue, String)> {
    let deadline = match timeout {
        Some(t) if t.is_finite() && t >= 0.0 => Some(Instant::now() + Duration::from_secs_f64(t)),
        Some(t) => anyhow::bail!("--connect-timeout {t}: give a number of seconds, 0 or more"),
        None => None,
    };
    let mut wait = Duration::from_millis(200);
    loop {
        let e = match queue.open(ctx) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let unreachable = e.chain().any(|c| {
            c.downcast_ref::<crate::batch::db::DbError>()
                .is_some_and(|d| d.transient)
                || c.downcast_ref::<crate::store::StoreError>()
                    .is_some_and(|s| s.is_transient())
        });
        if !unreachable || deadline.is_some_and(|d| Instant::now() + wait > d) {
            return Err(e.context(match timeout {
                Some(t) if unreachable => {
                    format!("the store stayed unreachable for {t} s (--connect-timeout)")
                }
                _ => "cannot open the batch queue".to_string(),
            }));
        }
        if !ctx.quiet || wait == Duration::from_millis(200) {
            eprintln!(
                "warning: store unreachable at start-up: {}; retrying in {:.1}s",
                crate::terminal::printable(&format!("{e:#}")),
                wait.as_secs_f64()
            );
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

fn migrate_store(url: &str) -> anyhow::Result<()> {
    let url: StoreUrl = url.parse()?;
    crate::store::Store::open_project(&url, "kiln batch")?;
    Ok(())
}

/// Open the SQLite store of a local batch directory (`<dir>/kiln.db`: the queue and every
/// task's runs); returns it with its URL.
pub(crate) fn open_local(dir: &Path) -> anyhow::Result<(SharedQueue, String)> {
    let file = dir.join("kiln.db");
    let db = crate::batch::db::open(&StoreUrl::Sqlite(file.clone()))?;
    let url = format!("sqlite:{}", file.display());
    migrate_store(&url)?;
    Ok((Arc::new(Mutex::new(Queue::new(db)?)), url))
}

/// Hold `<dir>/lock` exclusively for as long as the returned file lives: one `kiln batch run`
/// per directory.
pub(crate) fn lock_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        anyhow::bail!(
            "another `kiln batch run` is using {}; wait for it, or give another --dir",
            dir.display()
        );
    }
    Ok(f)
}

/// How tasks run here: this executable, checkouts under `scratch`, the plugins and budget
/// of the user's configuration, local repositories under `[batch] local_repos` and `roots`.
pub(crate) fn exec_settings(
    ctx: &Ctx,
    scratch: &Path,
    store: String,
    yes: bool,
    roots: &[PathBuf],
) -> anyhow::Result<ExecSettings> {
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("cannot create scratch directory {}", scratch.display()))?;
    let mut local_repos = Vec::new();
    for r in &ctx.config.batch.local_repos {
        let path = match r.strip_prefix("~/") {
            Some(rest) => kiln_env::env()
                .home()
                .context("[batch] local_repos: HOME is not set")?
                .join(rest),
            None => PathBuf::from(r),
        };
        if !path.is_absolute() {
            anyhow::bail!("[batch] local_repos: `{r}` must be an absolute path or start with `~/`");
        }
        match path.canonicalize() {
            Ok(p) => local_repos.push(p),
            Err(e) => eprintln!("warning: [batch] local_repos: {}: {e}", path.display()),
        }
    }
    local_repos.extend(roots.iter().filter_map(|r| r.canonicalize().ok()));
    Ok(ExecSettings {
        kiln: std::env::current_exe().context("cannot find the kiln executable")?,
        scratch: scratch.canonicalize()?,
        store: Some(store),
        yes,
        allowed: crate::task_spec::Allowed::from_config(&ctx.config),
        local_repos,
        keep_checkouts: false,
    })
}

/// Run a worker with Ctrl-C handling and its reports on stderr (with a progress line per
/// ended task when `batch` is given); returns whether it was interrupted, and whether it
/// stopped claiming because its own checkouts kept failing.
pub(crate) async fn drive(
    queue: SharedQueue,
    exec: ExecSettings,
    opts: WorkerOptions,
    quiet: bool,
    batch: Option<&str>,
) -> (bool, bool) {
    let (cancel, ctrl_c) = super::common::ctrl_c_watch();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let jobs = opts.jobs as u64;
    let work = tokio::spawn(worker::run(queue.clone(), exec, opts, cancel, tx));
    let started = Instant::now();
    let mut finished_here = 0u64;
    let mut gave_up = false;
    while let Some(r) = rx.recv().await {
        gave_up |= matches!(r, Report::GaveUp(_));
        if matches!(r, Report::Finished(_)) {
            finished_here += 1;
        }
        let quiet_ok = matches!(
            r,
            Report::Rejected { .. }
                | Report::LeaseLost(_)
                | Report::StoreDown { .. }
                | Report::Requeued(..)
                | Report::Refused { .. }
                | Report::WorkerFault { .. }
                | Report::GaveUp(_)
        );
        if quiet && !quiet_ok {
            continue;
        }
        let text = match (&r, batch) {
            (Report::Claimed(c), None) => Some(format!(
                "claimed {}/{} (attempt {})",
                c.batch, c.task.id, c.attempt
            )),
            _ => report_text(&r),
        };
        let Some(mut text) = text else {
            continue;
        };
        if let (Report::Finished(_), Some(b)) = (&r, batch)
            && let Some(c) = counts(&queue, b).await
        {
            text = format!("{text} {}", progress_line(&c, started, finished_here, jobs));
        }
        eprintln!("{text}");
    }
    let interrupted = work.await.unwrap_or(true);
    ctrl_c.abort();
    (interrupted, gave_up)
}

async fn counts(queue: &SharedQueue, batch: &str) -> Option<Counts> {
    let (q, b) = (queue.clone(), batch.to_string());
    tokio::task::spawn_blocking(move || q.lock().unwrap_or_else(|p| p.into_inner()).counts(&b).ok())
        .await
        .ok()
        .flatten()
}

/// A local batch directory: `given` (`--dir`), else `batches/` in kiln's state directory for
/// the workspace (outside it, so nothing a repository ships can stand in for it); created
/// when `create`.
pub(crate) fn batch_dir(ctx: &Ctx, given: Option<&Path>, create: bool) -> anyhow::Result<PathBuf> {
    use crate::state_dir::{Identity, WorkspaceState};
    if let Some(dir) = given {
        return Ok(dir.to_path_buf());
    }
    Ok(match WorkspaceState::open(&ctx.workspace, create)? {
        Some(state) => {
            state.subdir("batches", create)?;
            state.path().join("batches")
        }
        None => crate::state_dir::base()?
            .join("workspaces")
            .join(Identity::of(&ctx.workspace)?.key())
            .join("batches"),
    })
}

/// The progress line after a task ends: done, running, failed and an ETA.
pub(crate) fn progress_line(c: &Counts, started: Instant, finished_here: u64, jobs: u64) -> String {
    let left = c.queued + c.running;
    let eta = if finished_here > 0 && left > 0 {
        let per = started.elapsed().as_secs_f64() / finished_here as f64;
        let _ = jobs;
        format!(", ETA {:.0}s", per * left as f64)
    } else {
        String::new()
    };
    format!(
        "[{}/{} done, {} running, {} failed{eta}]",
        c.finished(),
        c.total(),
        c.running,
        c.failed + c.error + c.dead
    )
}

/// How a worker's reports read on stderr.
pub(crate) fn report_text(r: &Report) -> Option<String> {
    Some(match r {
        Report::Claimed(_) => return None,
        Report::Finished(t) => format!(
            "{} {} (attempt {}) in {:.1}s{}",
            t.id,
            t.status,
            t.attempts,
            t.duration_ms as f64 / 1000.0,
            t.error
                .as_deref()
                .map(|e| format!(": {}", crate::terminal::printable(e)))
                .unwrap_or_default()
        ),
        Report::Rejected {
            claim,
            attempts,
            status,
        } => format!(
            "warning: {}/{} attempt {}: result rejected (fenced): the task is at attempt {attempts} ({status}) now; this worker's lease had expired and another worker took it over",
            claim.batch, claim.task.id, claim.attempt
        ),
        Report::LeaseLost(c) => format!(
            "warning: {}/{} attempt {}: lease lost (heartbeat rejected: another worker took the task over); stopping its run",
            c.batch, c.task.id, c.attempt
        ),
        Report::Dead {
            batch,
            id,
            attempts,
        } => format!(
            "{batch}/{id} is dead: its worker went away in each of its {} (--max-attempts)",
            crate::terminal::count(*attempts as usize, "attempt", "attempts")
        ),
        Report::Refused { batch, id, why } => format!(
            "error: {}/{}: {}",
            crate::terminal::printable(batch),
            crate::terminal::printable(id),
            crate::terminal::printable(why)
        ),
        Report::Released(c) => format!(
            "{}/{} given back (interrupted); it will be claimed again",
            c.batch, c.task.id
        ),
        Report::StoreDown {
            doing,
            error,
            retry_in,
        } => format!(
            "warning: store unreachable while {doing}: {}; retrying in {:.1}s",
            crate::terminal::printable(error),
            retry_in.as_secs_f64()
        ),
        Report::Requeued(c, why) => format!(
            "warning: {}/{} attempt {}: its run lost the store ({}); given back to run again",
            c.batch,
            c.task.id,
            c.attempt,
            crate::terminal::printable(why)
        ),
        Report::StoreBack(doing) => format!("store reachable again ({doing})"),
        Report::WorkerFault {
            claim,
            why,
            retry_in,
        } => format!(
            "warning: {}/{} given back, attempts unchanged: {}; claiming again in {:.1}s",
            claim.batch,
            claim.task.id,
            crate::terminal::printable(why),
            retry_in.as_secs_f64()
        ),
        Report::GaveUp(why) => format!(
            "error: this worker stops claiming tasks: {} checkouts in a row failed for its own reasons (last: {}); free its scratch directory or point --scratch elsewhere",
            crate::batch::worker::MAX_WORKER_FAULTS,
            crate::terminal::printable(why)
        ),
    })
}
