//! A worker: up to N tasks at once, each claimed with a lease that a heartbeat renews while
//! its child runs, then completed fenced by attempt. Store errors (a database that went away)
//! are retried with backoff and reported, so no claim or result is lost; Ctrl-C kills the
//! children and gives their tasks back. Used by `kiln worker` and by `kiln batch run` (a
//! worker on the batch's own SQLite store).

use super::db::DbError;
use super::exec::{self, Ended, ExecSettings, TaskResult, cancelled};
use super::queue::{Claim, Completion, Queue};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The queue shared by a worker's slots (calls run on blocking threads).
pub type SharedQueue = Arc<Mutex<Queue>>;

/// How a worker claims and holds tasks.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Only this batch (default: any).
    pub batch: Option<String>,
    /// Tasks at once.
    pub jobs: usize,
    /// Exit once nothing is claimable and this worker's tasks are done.
    pub once: bool,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// How often a held task's lease is renewed.
    pub heartbeat: Duration,
    /// Attempts before a task whose workers keep dying is `dead`.
    pub max_attempts: i64,
    /// How long an idle worker waits before looking again.
    pub poll: Duration,
    /// This worker's name in the store: `host:pid:nonce`.
    pub worker_id: String,
}

/// What a worker tells its user.
#[derive(Debug)]
pub enum Report {
    /// A task was claimed.
    Claimed(Box<Claim>),
    /// A task ended and its result was recorded.
    Finished(Box<TaskResult>),
    /// A result was refused: another attempt holds the task now.
    Rejected {
        /// The attempt whose result it was.
        claim: Box<Claim>,
        /// The task's attempts now.
        attempts: i64,
        /// Its status now.
        status: String,
    },
    /// A heartbeat was refused: the lease expired and another attempt took the task; its
    /// child is stopped.
    LeaseLost(Box<Claim>),
    /// A task used its attempts.
    Dead {
        /// Batch.
        batch: String,
        /// Task.
        id: String,
        /// Attempts made.
        attempts: i64,
    },
    /// A claimed queue row was not a valid task: it ended `error` without running.
    Refused {
        /// Batch.
        batch: String,
        /// Task.
        id: String,
        /// Why.
        why: String,
    },
    /// A task was given back (Ctrl-C).
    Released(Box<Claim>),
    /// A task's run failed because the store went away; it was given back to run again.
    Requeued(Box<Claim>, String),
    /// The store failed; the operation is retried after `retry_in`.
    StoreDown {
        /// What the worker was doing.
        doing: &'static str,
        /// The error.
        error: String,
        /// The wait before the next try.
        retry_in: Duration,
    },
    /// The store answers again.
    StoreBack(&'static str),
    /// A checkout failed for this worker's own reason; the task was given back with its
    /// attempts unchanged and the worker waits `retry_in` before claiming again.
    WorkerFault {
        /// The task given back.
        claim: Box<Claim>,
        /// Why.
        why: String,
        /// The wait before the next claim.
        retry_in: Duration,
    },
    /// After [`MAX_WORKER_FAULTS`] such failures in a row the worker claims nothing more.
    GaveUp(String),
}

/// Checkouts in a row that may fail for the worker's own reasons before it stops claiming.
pub const MAX_WORKER_FAULTS: u32 = 3;

/// A name for this worker, unique across machines and restarts.
pub fn worker_id() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into our buffer.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "host".into()
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}:{}:{nanos:08x}", std::process::id())
}

/// Everything a slot needs.
#[derive(Clone)]
struct Shared {
    queue: SharedQueue,
    exec: ExecSettings,
    opts: WorkerOptions,
    cancel: watch::Receiver<bool>,
    report: mpsc::UnboundedSender<Report>,
    /// Checkouts that failed in a row for this worker's own reasons, and the last reason.
    faults: Arc<Mutex<(u32, String)>>,
}

impl Shared {
    fn say(&self, r: Report) {
        let _ = self.report.send(r);
    }

    /// One queue call on a blocking thread.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Queue) -> Result<T, DbError> + Send + 'static,
    ) -> Result<T, DbError> {
        let q = self.queue.clone();
        tokio::task::spawn_blocking(move || {
            let mut g = q.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut g)
        })
        .await
        .unwrap_or_else(|e| {
            Err(DbError {
                what: "queue".into(),
                message: e.to_string(),
                transient: false,
            })
        })
    }

    /// A queue call retried with backoff (0.2 s doubling to 5 s) until it succeeds, saying
    /// so; `None` when cancelled while waiting (and `stop_on_cancel`).
    async fn retry<T: Send + 'static>(
        &self,
        doing: &'static str,
        stop_on_cancel: bool,
        f: impl Fn(&mut Queue) -> Result<T, DbError> + Send + Sync + Clone + 'static,
    ) -> Option<T> {
        let mut wait = Duration::from_millis(200);
        let mut failed = false;
        let mut cancel = self.cancel.clone();
        loop {
            let g = f.clone();
            match self.call(move |q| g(q)).await {
                Ok(v) => {
                    if failed {
                        self.say(Report::StoreBack(doing));
                    }
                    return Some(v);
                }
                Err(e) => {
                    failed = true;
                    self.say(Report::StoreDown {
                        doing,
                        error: e.to_string(),
                        retry_in: wait,
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = cancelled(&mut cancel), if stop_on_cancel => return None,
                    }
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

impl Shared {
    /// Whether tasks of this worker's scope may still need running (see [`Queue::pending`]).
    async fn pending(&self) -> bool {
        let batch = self.opts.batch.clone();
        self.retry("counting pending tasks", true, move |q| {
            q.pending(batch.as_deref())
        })
        .await
        .is_some_and(|n| n > 0)
    }
}

/// Run a worker until `--once` finds nothing more to do or `cancel` turns true. Returns
/// whether it was interrupted.
pub async fn run(
    queue: SharedQueue,
    exec: ExecSettings,
    opts: WorkerOptions,
    cancel: watch::Receiver<bool>,
    report: mpsc::UnboundedSender<Report>,
) -> bool {
    let sh = Shared {
        queue,
        exec,
        opts,
        cancel,
        report,
        faults: Arc::default(),
    };
    let mut slots = tokio::task::JoinSet::new();
    let mut cancel = sh.cancel.clone();
    let mut gave_up = false;
    loop {
        let mut idle = false;
        let (faults, why) = sh.faults.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if faults >= MAX_WORKER_FAULTS && !gave_up {
            gave_up = true;
            sh.say(Report::GaveUp(why));
        }
        while slots.len() < sh.opts.jobs && !*cancel.borrow() && !gave_up {
            let (batch, worker) = (sh.opts.batch.clone(), sh.opts.worker_id.clone());
            let (lease, max) = (sh.opts.lease.as_millis() as i64, sh.opts.max_attempts);
            let Some((claim, dead, refused)) = sh
                .retry("claiming a task", true, move |q| {
                    q.claim(batch.as_deref(), &worker, lease, max)
                })
                .await
            else {
                break;
            };
            for (batch, id, attempts) in dead {
                sh.say(Report::Dead {
                    batch,
                    id,
                    attempts,
                });
            }
            for (batch, id, why) in refused {
                sh.say(Report::Refused { batch, id, why });
            }
            match claim {
                Some(c) => {
                    sh.say(Report::Claimed(Box::new(c.clone())));
                    slots.spawn(slot(sh.clone(), c));
                }
                None => {
                    idle = true;
                    break;
                }
            }
        }
        if *cancel.borrow()
            || (gave_up && slots.is_empty())
            || (idle && slots.is_empty() && sh.opts.once && !sh.pending().await)
        {
            break;
        }
        tokio::select! {
            Some(_) = slots.join_next(), if !slots.is_empty() => {}
            _ = tokio::time::sleep(sh.opts.poll), if idle || slots.is_empty() => {}
            _ = cancel.changed() => {}
        }
    }
    while slots.join_next().await.is_some() {}
    *cancel.borrow()
}

/// Hold one claimed task: run it, renewing the lease, then record its result (or give it
/// back when cancelled). A task claimed again after its worker died first closes that
/// worker's run, which would otherwise stay `running` in the store forever.
async fn slot(sh: Shared, c: Claim) {
    if c.attempt > 1 {
        let cl = c.clone();
        let _ = sh
            .retry("closing a lost worker's run", true, move |q| {
                q.close_lost_runs(&cl, crate::clock::now_ms())
            })
            .await;
    }
    let (kill_tx, kill_rx) = watch::channel(false);
    let run = exec::run_task(&sh.exec, &c, kill_rx);
    tokio::pin!(run);
    let mut tick = tokio::time::interval(sh.opts.heartbeat);
    tick.tick().await;
    let mut cancel = sh.cancel.clone();
    let (mut lost, mut stopping) = (false, false);
    let ended = loop {
        tokio::select! {
            biased;
            e = &mut run => break e,
            _ = cancelled(&mut cancel), if !stopping => {
                stopping = true;
                let _ = kill_tx.send(true);
            }
            _ = tick.tick(), if !lost => {
                let (cl, lease) = (c.clone(), sh.opts.lease.as_millis() as i64);
                match sh.call(move |q| q.heartbeat(&cl, lease)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        lost = true;
                        sh.say(Report::LeaseLost(Box::new(c.clone())));
                        let _ = kill_tx.send(true);
                    }
                    Err(e) => sh.say(Report::StoreDown {
                        doing: "renewing a lease",
                        error: e.to_string(),
                        retry_in: sh.opts.heartbeat,
                    }),
                }
            }
        }
    };
    match ended {
        Ended::Done(res) => {
            *sh.faults.lock().unwrap_or_else(|p| p.into_inner()) = (0, String::new());
            record(&sh, &c, res).await
        }
        Ended::WorkerFault(why) if !lost => {
            let n = {
                let mut f = sh.faults.lock().unwrap_or_else(|p| p.into_inner());
                *f = (f.0 + 1, why.clone());
                f.0
            };
            give_back(&sh, &c, false).await;
            // Back off before claiming again, doubling with each fault in a row, so a broken
            // worker does not claim faster than the healthy ones.
            let wait = (sh.opts.poll * 2u32.pow(n.min(6))).min(Duration::from_secs(30));
            sh.say(Report::WorkerFault {
                claim: Box::new(c.clone()),
                why,
                retry_in: wait,
            });
            if n < MAX_WORKER_FAULTS {
                let mut cancel = sh.cancel.clone();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = cancelled(&mut cancel) => {}
                }
            }
        }
        Ended::Cancelled if !lost => {
            if give_back(&sh, &c, false).await {
                sh.say(Report::Released(Box::new(c.clone())));
            }
        }
        Ended::StoreLost(why) if !lost => {
            if give_back(&sh, &c, true).await {
                sh.say(Report::Requeued(Box::new(c.clone()), why));
            }
        }
        Ended::Cancelled | Ended::StoreLost(_) | Ended::WorkerFault(_) => {}
    }
}

/// Give a held task back (fenced by attempt), retrying while the store is away.
async fn give_back(sh: &Shared, c: &Claim, counted: bool) -> bool {
    let cl = c.clone();
    sh.retry("giving a task back", true, move |q| q.release(&cl, counted))
        .await
        == Some(true)
}

/// Record a result, fenced by attempt, retrying while the store is away (until Ctrl-C: the
/// lease then runs out and the task runs again, so nothing is lost).
async fn record(sh: &Shared, c: &Claim, res: Box<TaskResult>) {
    let value = serde_json::to_value(&*res).expect("results serialize");
    let (cl, status, cost, tokens) = (
        c.clone(),
        res.status.clone(),
        res.cost_usd,
        res.tokens.total(),
    );
    let done = sh
        .retry("recording a result", true, move |q| {
            q.complete(&cl, &status, cost, tokens, &value)
        })
        .await;
    match done {
        Some(Completion::Accepted) => sh.say(Report::Finished(res)),
        Some(Completion::Rejected { attempts, status }) => sh.say(Report::Rejected {
            claim: Box::new(c.clone()),
            attempts,
            status,
        }),
        None => {}
    }
}
