//! `kiln batch`: run a task file on this machine (`run`: an SQLite store in a batch
//! directory, N tasks at once), enqueue it for a fleet (`submit`), and read a batch's state
//! and results (`status`, `results`) from either store.
// Writes outside the workspace: the batch directory: kiln's state directory, or the --dir the user names.
#![allow(clippy::disallowed_methods)]

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use super::worker_cmd::{self, LeaseArgs, QueueArgs};
use crate::batch::worker::{self, WorkerOptions};
use crate::batch::{Budgets, Counts, task};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub(crate) enum BatchCommand {
    /// Run a task file here, N tasks at once; a rerun skips tasks already finished.
    Run(Box<RunArgs>),
    /// Enqueue a task file in a shared store for `kiln worker`s; prints the batch id.
    Submit(SubmitArgs),
    /// Tasks per state (queued, running, success, failed, error, dead) and what was spent.
    Status(StatusArgs),
    /// Each task's result: one JSON object per line with --json.
    Results(StatusArgs),
}

/// Per-task and per-batch budgets.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct BudgetFlags {
    /// Each task stops (reason `budget`) before a request taking its cost past USD (passed
    /// to each task as --max-cost unless the task sets its own).
    #[arg(long, value_name = "USD")]
    max_cost: Option<f64>,
    /// Each task stops before a request taking its tokens past N (--max-tokens).
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// No new task is started once the batch's tasks together have cost USD.
    #[arg(long, value_name = "USD")]
    batch_max_cost: Option<f64>,
    /// No new task is started once the batch's tasks together have used N tokens.
    #[arg(long, value_name = "N")]
    batch_max_tokens: Option<u64>,
}

impl BudgetFlags {
    fn budgets(&self) -> anyhow::Result<Budgets> {
        for (flag, v) in [
            ("--max-cost", self.max_cost),
            ("--batch-max-cost", self.batch_max_cost),
        ] {
            if let Some(c) = v
                && !(c.is_finite() && c >= 0.0)
            {
                anyhow::bail!("{flag} {c} is not an amount; give USD (a number, 0 or more)");
            }
        }
        Ok(Budgets {
            task_max_cost: self.max_cost,
            task_max_tokens: self.max_tokens,
            max_cost: self.batch_max_cost,
            max_tokens: self.batch_max_tokens,
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The task file: JSONL, one task per line.
    tasks: PathBuf,
    /// Tasks at once.
    #[arg(long, short = 'j', default_value_t = 2)]
    jobs: usize,
    /// Results as JSON lines on stdout at the end (as `kiln batch results --json`).
    #[arg(long)]
    json: bool,
    /// Keep each finished task's checkout (default: removed once its result and diff are
    /// recorded, with kiln's state for it).
    #[arg(long)]
    keep_checkouts: bool,
    /// The batch directory: its SQLite store and the tasks' checkouts (default
    /// `batches/` in kiln's state directory for the workspace).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The batch id (default: the task file's name without extension).
    #[arg(long, value_name = "ID")]
    batch: Option<String>,
    /// Attempts before a task whose run keeps dying is `dead`.
    #[arg(long, default_value_t = 3)]
    max_attempts: i64,
    #[command(flatten)]
    budget: BudgetFlags,
    #[command(flatten)]
    lease: LeaseArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The task file: JSONL, one task per line.
    tasks: PathBuf,
    /// The batch id (default: the task file's name without extension).
    #[arg(long, value_name = "ID")]
    batch: Option<String>,
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    budget: BudgetFlags,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The batch (default: the newest).
    batch: Option<String>,
    #[command(flatten)]
    queue: QueueArgs,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Keep showing the status until every task has ended (status only).
    #[arg(long)]
    watch: bool,
}

pub(crate) async fn run(ctx: &Ctx, yes: bool, cmd: BatchCommand) -> anyhow::Result<Outcome> {
    match cmd {
        BatchCommand::Run(a) => run_local(ctx, yes, *a).await,
        BatchCommand::Submit(a) => submit(ctx, a).await,
        BatchCommand::Status(a) => status(ctx, a).await,
        BatchCommand::Results(a) => results(ctx, a).await,
    }
}

/// The batch id: `--batch`, else the task file's stem made of id characters.
fn batch_id(given: Option<&str>, tasks: &Path) -> anyhow::Result<String> {
    let id = match given {
        Some(b) => b.to_string(),
        None => tasks
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    };
    if id.is_empty()
        || id.starts_with('.')
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        anyhow::bail!("batch id `{id}`: use letters, digits, `-`, `_` or `.` (--batch ID)");
    }
    Ok(id)
}

/// Parse the task file; a relative local `repo` is taken relative to the file's directory
/// (and must stay below it). Returns the tasks and that directory.
fn read_tasks(path: &Path) -> anyhow::Result<(Vec<task::Task>, PathBuf)> {
    let mut tasks = task::parse_file(path)?;
    let base = path
        .canonicalize()
        .with_context(|| format!("task file {}", path.display()))?;
    let base = base.parent().unwrap_or(Path::new("/")).to_path_buf();
    for t in &mut tasks {
        if let Ok(task::Repo::Local(p)) = task::classify_repo(&t.repo)
            && !p.is_absolute()
        {
            t.repo = base.join(p).to_string_lossy().into_owned();
        }
    }
    Ok((tasks, base))
}

/// For a local run: every task's plugins installed here and its local repository allowed
/// (under the task file's directory or `[batch] local_repos`), said before any task runs.
fn check_here(
    path: &Path,
    tasks: &[task::Task],
    exec: &crate::batch::exec::ExecSettings,
) -> anyhow::Result<()> {
    for t in tasks {
        let fail = |why: String| anyhow::anyhow!("{}: task {}: {why}", path.display(), t.id);
        t.spec
            .check_allowed(&exec.allowed)
            .map_err(|e| fail(e.to_string()))?;
        if let Ok(task::Repo::Local(p)) = task::classify_repo(&t.repo) {
            task::allowed_local(p, &exec.local_repos)
                .map_err(|why| fail(format!("repo: {why}")))?;
        }
    }
    Ok(())
}

async fn run_local(ctx: &Ctx, yes: bool, a: RunArgs) -> anyhow::Result<Outcome> {
    if a.jobs == 0 {
        anyhow::bail!("--jobs must be 1 or more");
    }
    let (tasks, base) = read_tasks(&a.tasks)?;
    let batch = batch_id(a.batch.as_deref(), &a.tasks)?;
    let dir = worker_cmd::batch_dir(ctx, a.dir.as_deref(), true)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create batch directory {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let _lock = worker_cmd::lock_dir(&dir)?;
    let (queue, store) = worker_cmd::open_local(&dir)?;
    // Naming the task file consents to copying directories beside it, nothing else.
    let mut exec = worker_cmd::exec_settings(ctx, &dir.join("work"), store, yes, &[base])?;
    exec.keep_checkouts = a.keep_checkouts;
    check_here(&a.tasks, &tasks, &exec)?;
    let budgets = a.budget.budgets()?;
    let (added, finished) = {
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        let added = q.submit(&batch, &tasks, &budgets)?;
        q.set_budgets(&batch, &budgets)?;
        // This run holds the directory's lock: a task still `running` was left by a run that
        // was killed, and is claimed again at once.
        q.expire_leases(&batch)?;
        (added, q.counts(&batch)?.finished())
    };
    if !ctx.quiet {
        eprintln!(
            "batch {batch}: {} tasks ({added} new, {finished} already finished), {} at once; store {}",
            tasks.len(),
            a.jobs,
            dir.join("kiln.db").display()
        );
    }
    let opts = WorkerOptions {
        batch: Some(batch.clone()),
        jobs: a.jobs,
        once: true,
        max_attempts: a.max_attempts,
        worker_id: worker::worker_id(),
        ..a.lease.options()?
    };
    let (interrupted, _) =
        worker_cmd::drive(queue.clone(), exec, opts, ctx.quiet, Some(&batch)).await;
    let rows = {
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        q.results(&batch)?
    };
    print_results(&rows, a.json);
    let counts = queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .counts(&batch)?;
    if !ctx.quiet {
        eprintln!("{}", summary_line(&batch, &counts, &budgets));
    }
    Ok(if interrupted {
        Outcome::Interrupted
    } else if counts.success == counts.total() {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

async fn submit(ctx: &Ctx, a: SubmitArgs) -> anyhow::Result<Outcome> {
    let (tasks, _) = read_tasks(&a.tasks)?;
    let batch = batch_id(a.batch.as_deref(), &a.tasks)?;
    let (queue, _) = a.queue.open(ctx)?;
    let budgets = a.budget.budgets()?;
    let added = queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .submit(&batch, &tasks, &budgets)?;
    if !ctx.quiet {
        eprintln!(
            "batch {batch}: {added} tasks enqueued, {} already there",
            tasks.len() as u64 - added
        );
    }
    println!("{batch}");
    Ok(Outcome::Success)
}

/// The batch named, else the newest in the store.
fn which_batch(q: &mut crate::batch::Queue, given: Option<String>) -> anyhow::Result<String> {
    match given {
        Some(b) if q.has_batch(&b)? => Ok(b),
        Some(b) => anyhow::bail!("no batch `{b}` in this store; see `kiln batch status`"),
        None => q
            .latest_batch()?
            .ok_or_else(|| anyhow::anyhow!("no batch in this store yet; see `kiln batch submit`")),
    }
}

async fn status(ctx: &Ctx, a: StatusArgs) -> anyhow::Result<Outcome> {
    let (queue, _) = a.queue.open_existing(ctx)?;
    let batch = which_batch(
        &mut queue.lock().unwrap_or_else(|p| p.into_inner()),
        a.batch,
    )?;
    loop {
        let counts = queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .counts(&batch)?;
        if a.json {
            let mut v = serde_json::to_value(&counts)?;
            v["batch"] = batch.clone().into();
            v["total"] = counts.total().into();
            print_json(&v);
        } else {
            println!("{}", status_line(&batch, &counts));
        }
        // Nothing more can happen once nothing runs and what is queued will not be claimed.
        let settled = counts.running == 0 && (counts.queued == 0 || counts.budget_spent.is_some());
        if !a.watch || settled {
            return Ok(Outcome::Success);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(Outcome::Interrupted),
        }
    }
}

async fn results(ctx: &Ctx, a: StatusArgs) -> anyhow::Result<Outcome> {
    let (queue, _) = a.queue.open_existing(ctx)?;
    let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
    let batch = which_batch(&mut q, a.batch)?;
    print_results(&q.results(&batch)?, a.json);
    Ok(Outcome::Success)
}

fn status_line(batch: &str, c: &Counts) -> String {
    let line = status_counts(batch, c);
    match &c.budget_spent {
        Some(cap) => format!(
            "{line}\n{batch}: the batch's {cap} budget is spent: {} will not run (raise --batch-max-{cap} and run or submit it again)",
            crate::terminal::count(c.queued as usize, "queued task", "queued tasks"),
        ),
        None => line,
    }
}

fn status_counts(batch: &str, c: &Counts) -> String {
    format!(
        "{batch}: {} tasks: {} queued, {} running, {} success, {} failed, {} error, {} dead; {} tokens{}",
        c.total(),
        c.queued,
        c.running,
        c.success,
        c.failed,
        c.error,
        c.dead,
        c.spent_tokens,
        if c.spent_cost > 0.0 {
            format!(", {}", crate::llm::pricing::format_usd(c.spent_cost))
        } else {
            String::new()
        }
    )
}

fn summary_line(batch: &str, c: &Counts, b: &Budgets) -> String {
    let mut s = status_line(batch, c);
    let spent = b.max_cost.is_some_and(|m| c.spent_cost >= m)
        || b.max_tokens.is_some_and(|m| c.spent_tokens >= m);
    if spent && c.queued > 0 {
        s.push_str(&format!(
            "\nthe batch's budget is spent: {} tasks were not started (raise --batch-max-cost/--batch-max-tokens and run again)",
            c.queued
        ));
    }
    s
}

/// One JSON object per task, or a table for a person.
fn print_results(rows: &[crate::batch::queue::ResultRow], json: bool) {
    for r in rows {
        let res = r.result.clone().unwrap_or(serde_json::Value::Null);
        if json {
            let mut v = if res.is_object() {
                res
            } else {
                serde_json::json!({"id": r.id})
            };
            v["id"] = r.id.clone().into();
            v["status"] = r.status.clone().into();
            v["attempts"] = r.attempts.into();
            if v.get("worker").is_none() {
                v["worker"] = r.worker.clone().into();
            }
            print_json(&v);
        } else {
            let tokens = res["tokens"]["input"].as_u64().unwrap_or(0)
                + res["tokens"]["output"].as_u64().unwrap_or(0);
            println!(
                "{:<24} {:<8} attempts {} exit {} {:<12} loop {} tokens {} {} {:.1}s",
                crate::terminal::printable(&r.id),
                r.status,
                r.attempts,
                res["exit_code"]
                    .as_i64()
                    .map_or("-".into(), |c| c.to_string()),
                res["stop_reason"].as_str().unwrap_or("-"),
                res["loop_id"]
                    .as_i64()
                    .map_or("-".into(), |c| c.to_string()),
                tokens,
                res["cost_usd"]
                    .as_f64()
                    .map(crate::llm::pricing::format_usd)
                    .unwrap_or_default(),
                res["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
            );
        }
    }
}
