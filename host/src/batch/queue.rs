//! The work queue in the store: batches and their tasks, claimed with a lease that a
//! heartbeat renews, completed (or given back) only by the holder of the current attempt.
//!
//! A claim is one `UPDATE … WHERE (batch, id) = (SELECT … LIMIT 1 [FOR UPDATE SKIP LOCKED])
//! RETURNING …`: on PostgreSQL the row lock with `SKIP LOCKED` lets many workers claim at once
//! without waiting on each other or taking the same task; on SQLite the statement runs inside
//! `BEGIN IMMEDIATE`, which holds the database's one write lock. A task whose lease expired is
//! claimable again with `attempts + 1`; one that has used `max_attempts` becomes `dead` instead.
//! Heartbeats, results and releases carry `(attempt, worker)` and change nothing once another
//! attempt holds the task: a worker presumed dead cannot overwrite a newer attempt.

use super::db::{Db, DbError, Val};
use super::task::{Task, check_id};
use crate::store::conn::transaction;

/// The batch tables, in SQL both SQLite and PostgreSQL accept.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kiln_batches (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    task_max_cost DOUBLE PRECISION,
    task_max_tokens BIGINT,
    max_cost DOUBLE PRECISION,
    max_tokens BIGINT,
    spent_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
    spent_tokens BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS kiln_batch_tasks (
    batch TEXT NOT NULL REFERENCES kiln_batches(id),
    id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    worker TEXT,
    lease_until BIGINT,
    started_at BIGINT,
    finished_at BIGINT,
    cost_usd DOUBLE PRECISION,
    tokens BIGINT,
    result TEXT,
    PRIMARY KEY (batch, id)
);
CREATE INDEX IF NOT EXISTS kiln_batch_tasks_claim ON kiln_batch_tasks (status, lease_until);
";

/// The advisory lock that serialises creating the batch tables on PostgreSQL.
const SCHEMA_LOCK: i64 = 0x6b69_6c6e_6261;

/// Task states: waiting, held by a worker, and the four ends.
pub const STATUSES: &[&str] = &["queued", "running", "success", "failed", "error", "dead"];

/// What a batch may spend: per task (passed to each task as `--max-cost`/`--max-tokens`)
/// and in total (no task is claimed once the total is spent).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budgets {
    /// Per task, USD.
    pub task_max_cost: Option<f64>,
    /// Per task, tokens.
    pub task_max_tokens: Option<u64>,
    /// The whole batch, USD.
    pub max_cost: Option<f64>,
    /// The whole batch, tokens.
    pub max_tokens: Option<u64>,
}

/// A task a worker holds.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Its batch.
    pub batch: String,
    /// The task.
    pub task: Task,
    /// This attempt's number (1 for the first): the fence of every later write.
    pub attempt: i64,
    /// The worker holding it.
    pub worker: String,
    /// The batch's per-task budget.
    pub budgets: Budgets,
}

/// A task that used its attempts: batch, id, attempts made.
pub type DeadTask = (String, String, i64);

/// A task refused when claimed (its row is not a valid task): batch, id, why. It ends
/// `error` with that reason as its result, and is never run.
pub type RefusedTask = (String, String, String);

/// What a claim found: the task claimed (if any), tasks that used their attempts, and rows
/// refused as not valid tasks.
pub type Claimed = (Option<Claim>, Vec<DeadTask>, Vec<RefusedTask>);

/// What the store said to a result.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// Recorded.
    Accepted,
    /// Refused: the task is no longer this attempt's (its lease expired and another attempt
    /// took it, or it ended).
    Rejected {
        /// The task's attempt count now.
        attempts: i64,
        /// Its status now.
        status: String,
    },
}

/// How many tasks of a batch are in each state.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Counts {
    /// Waiting.
    pub queued: u64,
    /// Held by a worker.
    pub running: u64,
    /// Ended with exit 0.
    pub success: u64,
    /// Ended without success (exit 1).
    pub failed: u64,
    /// Could not run (checkout, configuration, transport: exit 2).
    pub error: u64,
    /// Its workers kept dying: `max_attempts` used.
    pub dead: u64,
    /// Money and tokens spent so far.
    pub spent_cost: f64,
    /// Tokens.
    pub spent_tokens: u64,
    /// The batch's budget is spent: its queued tasks will not be claimed (`"cost"` or
    /// `"tokens"`, the cap reached).
    pub budget_spent: Option<String>,
}

impl Counts {
    /// All tasks.
    pub fn total(&self) -> u64 {
        self.queued + self.running + self.finished()
    }
    /// Tasks that ended.
    pub fn finished(&self) -> u64 {
        self.success + self.failed + self.error + self.dead
    }
}

/// The queue over one connection.
pub struct Queue {
    db: Box<dyn Db>,
}

/// A result row of `kiln batch results`.
#[derive(Debug, Clone)]
pub struct ResultRow {
    /// Task id.
    pub id: String,
    /// Status.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The worker holding it (while running) or that ran it.
    pub worker: Option<String>,
    /// The recorded result (JSON), once ended.
    pub result: Option<serde_json::Value>,
}

fn now() -> i64 {
    crate::clock::now_ms()
}

impl Queue {
    /// Use `db`, creating the batch tables when missing (workers starting together: one
    /// creates them, the others wait for it).
    pub fn new(mut db: Box<dyn Db>) -> Result<Queue, DbError> {
        transaction(db.as_mut(), |db| {
            db.lock(&SCHEMA_LOCK.into())?;
            Ok::<_, DbError>(db.batch(SCHEMA)?)
        })?;
        Ok(Queue { db })
    }

    /// Run `f` in a transaction: committed when it returns `Ok`, rolled back otherwise.
    fn transaction<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Db) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        transaction(self.db.as_mut(), f)
    }

    /// Enqueue `tasks` in `batch` (created with `budgets` if new); tasks whose id the batch
    /// already holds with the same spec are left as they are (a rerun skips them). A task
    /// whose id the batch holds with another spec (the line was edited) is refused, naming
    /// it: its recorded result would be reported as the new line's. Returns how many were
    /// added.
    pub fn submit(
        &mut self,
        batch: &str,
        tasks: &[Task],
        budgets: &Budgets,
    ) -> Result<u64, DbError> {
        check_id(batch).map_err(|why| DbError {
            what: "batch".into(),
            message: format!("batch id {why}"),
            transient: false,
        })?;
        for task in tasks {
            if let Some((field, why)) = task.problem() {
                return Err(DbError {
                    what: "task".into(),
                    message: format!("task {}: {field}: {why}", task.id),
                    transient: false,
                });
            }
        }
        let t = now();
        self.transaction(|db| {
            db.execute(
                "INSERT INTO kiln_batches (id, created_at, task_max_cost, task_max_tokens, max_cost, max_tokens) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                &[
                    batch.into(),
                    t.into(),
                    budgets.task_max_cost.into(),
                    budgets.task_max_tokens.map(|n| n as i64).into(),
                    budgets.max_cost.into(),
                    budgets.max_tokens.map(|n| n as i64).into(),
                ],
            )?;
            let mut changed = Vec::new();
            for task in tasks {
                let rows = db.query(
                    "SELECT spec FROM kiln_batch_tasks WHERE batch = ?1 AND id = ?2",
                    &[batch.into(), task.id.as_str().into()],
                )?;
                let Some(recorded) = rows.first().and_then(|r| r[0].text()) else {
                    continue;
                };
                let recorded: Option<Task> = serde_json::from_str(recorded).ok();
                let same = recorded.is_some_and(|r| {
                    serde_json::to_value(&r).ok() == serde_json::to_value(task).ok()
                });
                if !same {
                    changed.push(task.id.as_str());
                }
            }
            if !changed.is_empty() {
                return Err(DbError {
                    what: "task file".into(),
                    message: format!(
                        "batch {batch} already holds {} {} with another spec than the task file's (the line was edited since): its recorded result is not this line's; to run the tasks as written, give the batch a new id (`--batch NEW`) or the edited tasks new ids",
                        if changed.len() == 1 { "task" } else { "tasks" },
                        changed.join(", ")
                    ),
                    transient: false,
                });
            }
            let mut added = 0;
            for (seq, task) in tasks.iter().enumerate() {
                let spec = serde_json::to_string(task).expect("tasks serialize");
                added += db.execute(
                    "INSERT INTO kiln_batch_tasks (batch, id, seq, spec, status) VALUES (?1, ?2, ?3, ?4, 'queued') ON CONFLICT (batch, id) DO NOTHING",
                    &[batch.into(), task.id.as_str().into(), (seq as i64).into(), spec.into()],
                )?;
            }
            Ok(added)
        })
    }

    /// Set a batch's budgets (a local rerun with other flags).
    pub fn set_budgets(&mut self, batch: &str, b: &Budgets) -> Result<(), DbError> {
        self.db.execute(
            "UPDATE kiln_batches SET task_max_cost = ?2, task_max_tokens = ?3, max_cost = ?4, max_tokens = ?5 WHERE id = ?1",
            &[
                batch.into(),
                b.task_max_cost.into(),
                b.task_max_tokens.map(|n| n as i64).into(),
                b.max_cost.into(),
                b.max_tokens.map(|n| n as i64).into(),
            ],
        )?;
        Ok(())
    }

    /// Claim the next task (of `batch`, or of any batch), holding it for `lease_ms`. A task
    /// whose lease expired after `max_attempts` attempts is marked `dead` and reported in the
    /// second value. Batches whose budget is spent are skipped.
    ///
    /// The row is checked again as a task ([`Task::from_row`], the batch id as a path
    /// component): a row edited in the database is not trusted. One that is not a valid task
    /// ends `error`, reported in the third value, and the next is claimed.
    pub fn claim(
        &mut self,
        batch: Option<&str>,
        worker: &str,
        lease_ms: i64,
        max_attempts: i64,
    ) -> Result<Claimed, DbError> {
        let lock = self.db.skip_locked();
        let sql = format!(
            "UPDATE kiln_batch_tasks SET
                status = CASE WHEN attempts >= CAST(?4 AS BIGINT) THEN 'dead' ELSE 'running' END,
                attempts = CASE WHEN attempts >= CAST(?4 AS BIGINT) THEN attempts ELSE attempts + 1 END,
                worker = CASE WHEN attempts >= CAST(?4 AS BIGINT) THEN NULL ELSE CAST(?2 AS TEXT) END,
                lease_until = CASE WHEN attempts >= CAST(?4 AS BIGINT) THEN NULL
                    ELSE CAST(?1 AS BIGINT) + CAST(?3 AS BIGINT) END,
                finished_at = CASE WHEN attempts >= CAST(?4 AS BIGINT) THEN CAST(?1 AS BIGINT) ELSE NULL END,
                started_at = CAST(?1 AS BIGINT)
             WHERE (batch, id) = (
                SELECT t.batch, t.id FROM kiln_batch_tasks t JOIN kiln_batches b ON b.id = t.batch
                WHERE (t.status = 'queued' OR (t.status = 'running' AND t.lease_until < CAST(?1 AS BIGINT)))
                  AND (CAST(?5 AS TEXT) IS NULL OR t.batch = CAST(?5 AS TEXT))
                  AND (b.max_cost IS NULL OR b.spent_cost < b.max_cost)
                  AND (b.max_tokens IS NULL OR b.spent_tokens < b.max_tokens)
                ORDER BY b.created_at, t.batch, t.seq LIMIT 1{lock})
             RETURNING batch, id, spec, attempts, status"
        );
        let params = [
            now().into(),
            worker.into(),
            lease_ms.into(),
            max_attempts.into(),
            batch.into(),
        ];
        let (mut dead, mut refused) = (Vec::new(), Vec::new());
        // A dead or refused task is reported and the next one claimed, until a claim or
        // nothing.
        loop {
            let rows = self.transaction(|db| Ok(db.query(&sql, &params)?))?;
            let Some(row) = rows.into_iter().next() else {
                return Ok((None, dead, refused));
            };
            let b = row[0].text().unwrap_or_default().to_string();
            let id = row[1].text().unwrap_or_default().to_string();
            let attempts = row[3].int().unwrap_or(0);
            if row[4].text() == Some("dead") {
                dead.push((b, id, attempts));
                continue;
            }
            let checked = check_id(&b)
                .map_err(|why| format!("batch: {why}"))
                .and_then(|_| {
                    Task::from_row(row[2].text().unwrap_or("")).map_err(|e| e.to_string())
                })
                .and_then(|t| {
                    if t.id == id {
                        Ok(t)
                    } else {
                        Err(format!("id: the row's task says `{}`", t.id))
                    }
                });
            let task = match checked {
                Ok(t) => t,
                Err(why) => {
                    let why = format!(
                        "refused when claimed, not run: the queue row is not a valid task: {why}"
                    );
                    self.refuse(&b, &id, attempts, worker, &why)?;
                    refused.push((b, id, why));
                    continue;
                }
            };
            let budgets = self.budgets(&b)?;
            return Ok((
                Some(Claim {
                    batch: b,
                    task,
                    attempt: attempts,
                    worker: worker.to_string(),
                    budgets,
                }),
                dead,
                refused,
            ));
        }
    }

    /// End a claimed row that is not a valid task: `error`, with `why` as its result.
    fn refuse(
        &mut self,
        batch: &str,
        id: &str,
        attempt: i64,
        worker: &str,
        why: &str,
    ) -> Result<(), DbError> {
        let result = serde_json::json!({
            "batch": batch, "id": id, "status": "error", "attempts": attempt,
            "error": why, "worker": worker,
        });
        self.db.execute(
            "UPDATE kiln_batch_tasks SET status = 'error', result = ?5, finished_at = ?6, lease_until = NULL
             WHERE batch = ?1 AND id = ?2 AND attempts = ?3 AND worker = ?4 AND status = 'running'",
            &[
                batch.into(),
                id.into(),
                attempt.into(),
                worker.into(),
                result.to_string().into(),
                now().into(),
            ],
        )?;
        Ok(())
    }

    /// A batch's budgets.
    pub fn budgets(&mut self, batch: &str) -> Result<Budgets, DbError> {
        let rows = self.db.query(
            "SELECT task_max_cost, task_max_tokens, max_cost, max_tokens FROM kiln_batches WHERE id = ?1",
            &[batch.into()],
        )?;
        Ok(rows
            .first()
            .map(|r| Budgets {
                task_max_cost: r[0].real(),
                task_max_tokens: r[1].int().map(|n| n as u64),
                max_cost: r[2].real(),
                max_tokens: r[3].int().map(|n| n as u64),
            })
            .unwrap_or_default())
    }

    /// Renew the lease of a held task; `false` when this attempt no longer holds it.
    pub fn heartbeat(&mut self, c: &Claim, lease_ms: i64) -> Result<bool, DbError> {
        let n = self.db.execute(
            "UPDATE kiln_batch_tasks SET lease_until = ?5 WHERE batch = ?1 AND id = ?2 AND attempts = ?3 AND worker = ?4 AND status = 'running'",
            &[
                c.batch.as_str().into(),
                c.task.id.as_str().into(),
                c.attempt.into(),
                c.worker.as_str().into(),
                (now() + lease_ms).into(),
            ],
        )?;
        Ok(n == 1)
    }

    /// Record the result of a held task (status one of the ends), fenced by attempt: refused,
    /// changing nothing, when another attempt holds it now or it ended.
    pub fn complete(
        &mut self,
        c: &Claim,
        status: &str,
        cost: Option<f64>,
        tokens: u64,
        result: &serde_json::Value,
    ) -> Result<Completion, DbError> {
        let t = now();
        let key: [Val; 4] = [
            c.batch.as_str().into(),
            c.task.id.as_str().into(),
            c.attempt.into(),
            c.worker.as_str().into(),
        ];
        let done = self.transaction(|db| {
            let mut p = key.to_vec();
            p.extend([
                status.into(),
                cost.into(),
                (tokens as i64).into(),
                result.to_string().into(),
                t.into(),
            ]);
            let n = db.execute(
                "UPDATE kiln_batch_tasks SET status = ?5, cost_usd = ?6, tokens = ?7, result = ?8, finished_at = ?9, lease_until = NULL
                 WHERE batch = ?1 AND id = ?2 AND attempts = ?3 AND worker = ?4 AND status = 'running'",
                &p,
            )?;
            if n == 1 {
                db.execute(
                    "UPDATE kiln_batches SET spent_cost = spent_cost + ?2, spent_tokens = spent_tokens + ?3 WHERE id = ?1",
                    &[c.batch.as_str().into(), cost.unwrap_or(0.0).into(), (tokens as i64).into()],
                )?;
            }
            Ok(n == 1)
        })?;
        if done {
            return Ok(Completion::Accepted);
        }
        let rows = self.db.query(
            "SELECT attempts, status, worker, result FROM kiln_batch_tasks WHERE batch = ?1 AND id = ?2",
            &key[..2],
        )?;
        let Some(r) = rows.first() else {
            return Ok(Completion::Rejected {
                attempts: 0,
                status: "missing".into(),
            });
        };
        let (attempts, now_status) = (r[0].int().unwrap_or(0), r[1].text().unwrap_or(""));
        // This very result, committed by an earlier try whose answer was lost with the
        // connection: recorded, not refused.
        if attempts == c.attempt
            && r[2].text() == Some(c.worker.as_str())
            && now_status == status
            && r[3].text() == Some(result.to_string().as_str())
        {
            return Ok(Completion::Accepted);
        }
        Ok(Completion::Rejected {
            attempts,
            status: now_status.to_string(),
        })
    }

    /// Close the runs of `c`'s earlier attempts that are still `running` in the store (their
    /// worker died: its lease ran out and `c` took the task over) as `cancelled`, "worker
    /// lost". Fenced by attempt: only attempts before `c`'s, found by the directory each ran
    /// in (`…/<batch>/<task>/attempt-<n>/checkout`). Returns how many were closed.
    pub fn close_lost_runs(&mut self, c: &Claim, now_ms: i64) -> Result<u64, DbError> {
        if c.attempt <= 1 {
            return Ok(0);
        }
        let rows = self.db.query(
            "SELECT id, project FROM loops WHERE status = 'running'",
            &[],
        )?;
        let earlier: Vec<String> = (1..c.attempt)
            .map(|n| format!("/{}/{}/attempt-{n}/checkout", c.batch, c.task.id))
            .collect();
        let mut closed = 0;
        for row in rows {
            let (Some(Val::Int(id)), Some(Val::Text(project))) = (row.first(), row.get(1)) else {
                continue;
            };
            let ours = earlier.iter().any(|tag| {
                project.find(tag.as_str()).is_some_and(|at| {
                    matches!(project.as_bytes().get(at + tag.len()), None | Some(b'/'))
                })
            });
            if !ours {
                continue;
            }
            closed += self.db.execute(
                "UPDATE loops SET status = 'failed', stop_reason = 'cancelled', summary = ?2, ended_at = ?3
                 WHERE id = ?1 AND status = 'running'",
                &[
                    (*id).into(),
                    format!(
                        "worker lost: its lease ran out and attempt {} took the task over",
                        c.attempt
                    )
                    .into(),
                    now_ms.into(),
                ],
            )?;
        }
        Ok(closed)
    }

    /// Give a held task back: queued again; this attempt not counted (Ctrl-C) or counted (a
    /// run that lost the store: the attempt was made, and a task that keeps losing it ends
    /// `dead` after `--max-attempts` instead of coming back forever).
    pub fn release(&mut self, c: &Claim, counted: bool) -> Result<bool, DbError> {
        let n = self.db.execute(
            "UPDATE kiln_batch_tasks SET status = 'queued', attempts = attempts - ?5, worker = NULL, lease_until = NULL
             WHERE batch = ?1 AND id = ?2 AND attempts = ?3 AND worker = ?4 AND status = 'running'",
            &[
                c.batch.as_str().into(),
                c.task.id.as_str().into(),
                c.attempt.into(),
                c.worker.as_str().into(),
                i64::from(!counted).into(),
            ],
        )?;
        Ok(n == 1)
    }

    /// End the leases of a batch's running tasks now (a local run whose previous run was
    /// killed: nobody else holds them), so they are claimed again at once.
    pub fn expire_leases(&mut self, batch: &str) -> Result<u64, DbError> {
        Ok(self.db.execute(
            "UPDATE kiln_batch_tasks SET lease_until = 0 WHERE batch = ?1 AND status = 'running'",
            &[batch.into()],
        )?)
    }

    /// Tasks not ended that may still run (of `batch`, or of all): running ones, and queued
    /// ones of batches whose budget is not spent. A `--once` worker waits for these, since a
    /// running task's worker may die and leave it to be claimed again.
    pub fn pending(&mut self, batch: Option<&str>) -> Result<u64, DbError> {
        let rows = self.db.query(
            "SELECT COUNT(*) FROM kiln_batch_tasks t JOIN kiln_batches b ON b.id = t.batch
             WHERE (CAST(?1 AS TEXT) IS NULL OR t.batch = CAST(?1 AS TEXT))
               AND (t.status = 'running' OR (t.status = 'queued'
                    AND (b.max_cost IS NULL OR b.spent_cost < b.max_cost)
                    AND (b.max_tokens IS NULL OR b.spent_tokens < b.max_tokens)))",
            &[batch.into()],
        )?;
        Ok(rows.first().and_then(|r| r[0].int()).unwrap_or(0) as u64)
    }

    /// Tasks per state, and what the batch spent.
    pub fn counts(&mut self, batch: &str) -> Result<Counts, DbError> {
        let rows = self.db.query(
            "SELECT status, COUNT(*) FROM kiln_batch_tasks WHERE batch = ?1 GROUP BY status",
            &[batch.into()],
        )?;
        let mut c = Counts::default();
        for r in rows {
            let n = r[1].int().unwrap_or(0) as u64;
            match r[0].text().unwrap_or("") {
                "queued" => c.queued = n,
                "running" => c.running = n,
                "success" => c.success = n,
                "failed" => c.failed = n,
                "error" => c.error = n,
                "dead" => c.dead = n,
                _ => {}
            }
        }
        let spent = self.db.query(
            "SELECT spent_cost, spent_tokens, max_cost, max_tokens FROM kiln_batches WHERE id = ?1",
            &[batch.into()],
        )?;
        if let Some(r) = spent.first() {
            c.spent_cost = r[0].real().unwrap_or(0.0);
            c.spent_tokens = r[1].int().unwrap_or(0) as u64;
            // The claim's own test (`claim`): a cap reached stops every claim of the batch.
            c.budget_spent = if r[2].real().is_some_and(|max| c.spent_cost >= max) {
                Some("cost".into())
            } else if r[3].int().is_some_and(|max| c.spent_tokens as i64 >= max) {
                Some("tokens".into())
            } else {
                None
            };
        }
        Ok(c)
    }

    /// Whether the batch exists.
    pub fn has_batch(&mut self, batch: &str) -> Result<bool, DbError> {
        Ok(!self
            .db
            .query("SELECT id FROM kiln_batches WHERE id = ?1", &[batch.into()])?
            .is_empty())
    }

    /// The most recently created batch.
    pub fn latest_batch(&mut self) -> Result<Option<String>, DbError> {
        let rows = self.db.query(
            "SELECT id FROM kiln_batches ORDER BY created_at DESC, id DESC LIMIT 1",
            &[],
        )?;
        Ok(rows.first().and_then(|r| r[0].text().map(str::to_string)))
    }

    /// Every task of a batch, in task-file order.
    pub fn results(&mut self, batch: &str) -> Result<Vec<ResultRow>, DbError> {
        let rows = self.db.query(
            "SELECT id, status, attempts, worker, result FROM kiln_batch_tasks WHERE batch = ?1 ORDER BY seq",
            &[batch.into()],
        )?;
        Ok(rows
            .into_iter()
            .map(|r| ResultRow {
                id: r[0].text().unwrap_or("").to_string(),
                status: r[1].text().unwrap_or("").to_string(),
                attempts: r[2].int().unwrap_or(0),
                worker: r[3].text().map(str::to_string),
                result: r[4].text().and_then(|t| serde_json::from_str(t).ok()),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn queue(dir: &std::path::Path) -> Queue {
        let url = crate::store::StoreUrl::Sqlite(dir.join("q.db"));
        Queue::new(crate::batch::db::open(&url).unwrap()).unwrap()
    }

    fn fix_spec() -> crate::task_spec::TaskSpec {
        let mut s = crate::task_spec::TaskSpec::new(crate::task_spec::Kind::Fix);
        s.targets = vec!["a.c".into()];
        s
    }

    fn tasks(n: usize) -> Vec<Task> {
        (0..n)
            .map(|i| Task {
                id: format!("t{i}"),
                repo: ".".into(),
                rev: None,
                dir: None,
                spec: fix_spec(),
            })
            .collect()
    }

    #[test]
    fn submit_is_idempotent_and_claims_go_in_order() {
        let d = tempfile::tempdir().unwrap();
        let mut q = queue(d.path());
        assert_eq!(q.submit("b", &tasks(3), &Budgets::default()).unwrap(), 3);
        assert_eq!(q.submit("b", &tasks(4), &Budgets::default()).unwrap(), 1);
        let (c, _, _) = q.claim(Some("b"), "w1", 60_000, 3).unwrap();
        let c = c.unwrap();
        assert_eq!((c.task.id.as_str(), c.attempt), ("t0", 1));
        assert_eq!(q.counts("b").unwrap().running, 1);
        assert_eq!(q.counts("b").unwrap().queued, 3);
    }

    /// A row edited in the database to carry what only the worker chooses, or an id that
    /// would leave the scratch directory, is refused when claimed and ends `error`; the next
    /// task is claimed instead.
    #[test]
    fn an_edited_row_is_refused_at_claim() {
        let d = tempfile::tempdir().unwrap();
        let mut q = queue(d.path());
        q.submit("b", &tasks(4), &Budgets::default()).unwrap();
        for (id, spec) in [
            (
                "t0",
                r#"{"id":"t0","repo":".","kind":"fix","targets":["a.c"],"yes":true}"#,
            ),
            (
                "t1",
                r#"{"id":"t1","repo":".","args":["fix","--yes","--file","a.c"]}"#,
            ),
            (
                "t2",
                r#"{"id":"../../x","repo":".","kind":"fix","targets":["a.c"]}"#,
            ),
        ] {
            q.db.execute(
                "UPDATE kiln_batch_tasks SET spec = ?2 WHERE id = ?1",
                &[id.into(), spec.into()],
            )
            .unwrap();
        }
        let (c, _, refused) = q.claim(None, "w", 60_000, 3).unwrap();
        assert_eq!(c.unwrap().task.id, "t3");
        let fields: Vec<(&str, bool)> = refused
            .iter()
            .map(|(_, id, why)| (id.as_str(), why.contains("not a valid task")))
            .collect();
        assert_eq!(
            fields,
            [("t0", true), ("t1", true), ("t2", true)],
            "{refused:?}"
        );
        assert!(refused[0].2.contains("yes"), "{}", refused[0].2);
        assert!(refused[1].2.contains("args"), "{}", refused[1].2);
        assert_eq!(q.counts("b").unwrap().error, 3);
        let rows = q.results("b").unwrap();
        assert!(
            rows[0].result.as_ref().unwrap()["error"]
                .as_str()
                .unwrap()
                .contains("yes")
        );
    }

    #[test]
    fn expired_lease_is_reclaimed_and_the_old_attempt_is_fenced() {
        let d = tempfile::tempdir().unwrap();
        let mut q = queue(d.path());
        q.submit("b", &tasks(1), &Budgets::default()).unwrap();
        let old = q.claim(None, "w1", -1, 3).unwrap().0.unwrap();
        let new = q.claim(None, "w2", 60_000, 3).unwrap().0.unwrap();
        assert_eq!((new.task.id.as_str(), new.attempt), ("t0", 2));
        assert!(!q.heartbeat(&old, 60_000).unwrap());
        let late = q
            .complete(&old, "success", None, 0, &serde_json::json!({}))
            .unwrap();
        assert_eq!(
            late,
            Completion::Rejected {
                attempts: 2,
                status: "running".into()
            }
        );
        assert!(q.heartbeat(&new, 60_000).unwrap());
        let ok = q
            .complete(&new, "success", Some(0.5), 10, &serde_json::json!({"x": 1}))
            .unwrap();
        assert_eq!(ok, Completion::Accepted);
        let c = q.counts("b").unwrap();
        assert_eq!((c.success, c.spent_tokens), (1, 10));
        // Ended: a second result is refused too.
        assert!(matches!(
            q.complete(&new, "failed", None, 0, &serde_json::json!({}))
                .unwrap(),
            Completion::Rejected { .. }
        ));
    }

    #[test]
    fn max_attempts_makes_a_task_dead_and_release_gives_it_back() {
        let d = tempfile::tempdir().unwrap();
        let mut q = queue(d.path());
        q.submit("b", &tasks(2), &Budgets::default()).unwrap();
        let a = q.claim(None, "w", -1, 1).unwrap().0.unwrap();
        assert_eq!(a.task.id, "t0");
        // t0's lease expired after its one allowed attempt: dead; t1 is claimed instead.
        let (c, dead, _) = q.claim(None, "w", 60_000, 1).unwrap();
        assert_eq!(dead, vec![("b".to_string(), "t0".to_string(), 1)]);
        let c = c.unwrap();
        assert_eq!(c.task.id, "t1");
        assert!(q.release(&c, false).unwrap());
        let again = q.claim(None, "w2", 60_000, 1).unwrap().0.unwrap();
        assert_eq!((again.task.id.as_str(), again.attempt), ("t1", 1));
        assert_eq!(q.counts("b").unwrap().dead, 1);
        // Given back after losing the store, the attempt counts: the next claim is attempt
        // 2, and with 2 allowed the one after that makes it dead, never an endless requeue.
        assert!(q.release(&again, true).unwrap());
        let third = q.claim(None, "w3", 60_000, 2).unwrap().0.unwrap();
        assert_eq!((third.task.id.as_str(), third.attempt), ("t1", 2));
        assert!(q.release(&third, true).unwrap());
        let (none, dead, _) = q.claim(None, "w4", 60_000, 2).unwrap();
        assert!(none.is_none());
        assert_eq!(dead, vec![("b".to_string(), "t1".to_string(), 2)]);
    }

    #[test]
    fn a_spent_batch_budget_stops_claims() {
        let d = tempfile::tempdir().unwrap();
        let mut q = queue(d.path());
        let b = Budgets {
            max_tokens: Some(100),
            ..Default::default()
        };
        q.submit("b", &tasks(3), &b).unwrap();
        let c = q.claim(None, "w", 60_000, 3).unwrap().0.unwrap();
        q.complete(&c, "success", None, 150, &serde_json::json!({}))
            .unwrap();
        assert!(q.claim(None, "w", 60_000, 3).unwrap().0.is_none());
        assert_eq!(q.counts("b").unwrap().queued, 2);
    }
}
