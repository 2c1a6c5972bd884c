//! `kiln report ID --html FILE`: one run from the workspace's store as a self-contained HTML
//! page ([`crate::report`]): its timeline of iterations or turns, each with the runner's
//! diagnostics, the model's summary, the diffs, the tool calls and the tokens and cost; the
//! stop reason last. The page loads nothing (no script, a `default-src 'none'` policy).
//! `kiln report --batch ID --html FILE`: a batch's table of tasks (status, attempts, cost),
//! each linking to its last run's page, written beside FILE.

use super::ctx::{Ctx, Outcome};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run (its id in `kiln history`).
    #[arg(required_unless_present = "batch", conflicts_with = "batch")]
    id: Option<i64>,
    /// Write the page to FILE (replaced when it exists).
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
    /// A batch instead of a run (`kiln batch status` names them): its tasks in a table, each
    /// task's last run as a page of its own beside FILE (`FILE-STEM-TASK.html`).
    #[arg(long, value_name = "BATCH")]
    batch: Option<String>,
    #[command(flatten)]
    queue: super::worker_cmd::QueueArgs,
}

pub(crate) async fn run(ctx: &Ctx, args: ReportArgs) -> anyhow::Result<Outcome> {
    let id = match (&args.batch, args.id) {
        (Some(batch), _) => return batch_report(ctx, batch, &args),
        (None, Some(id)) => id,
        (None, None) => anyhow::bail!("name a run (its id in `kiln history`) or --batch ID"),
    };
    if ctx.store.is_none() && !crate::store::default_exists(&ctx.workspace) {
        anyhow::bail!(
            "no run {}: nothing is recorded in {} yet",
            id,
            ctx.workspace.display()
        );
    }
    let store = ctx.open_store()?;
    let mut report = crate::report::gather(&store, id, &ctx.config.pricing)?;
    crate::report::program_changes(&mut report, &ctx.workspace);
    let page = crate::report::html::render(&report);
    let written = crate::edit::writer::write_output(
        &ctx.workspace,
        &args.html,
        &page,
        &ctx.config.protected(),
    )?;
    if !ctx.quiet {
        let (steps, word) = report.count();
        eprintln!(
            "report of run {id} ({steps} {}) written to {}",
            if steps == 1 {
                word.trim_end_matches('s')
            } else {
                word
            },
            written.display()
        );
    }
    Ok(Outcome::Success)
}

/// The batch page and one page per task that recorded a run.
fn batch_report(ctx: &Ctx, batch: &str, args: &ReportArgs) -> anyhow::Result<Outcome> {
    let (queue, url) = args.queue.open_existing(ctx)?;
    let (rows, budget) = {
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        if !q.has_batch(batch)? {
            anyhow::bail!(
                "no batch `{batch}` in this queue (`kiln batch status` lists the newest)"
            );
        }
        (q.results(batch)?, q.budgets(batch)?.max_cost)
    };
    let store_url: crate::store::StoreUrl = url.parse()?;
    let store = crate::store::Store::open_url(Some(&store_url), &ctx.workspace)?;
    let stem = args
        .html
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "batch".into());
    let dir = args.html.parent().unwrap_or(std::path::Path::new(""));
    let protected = ctx.config.protected();
    let mut tasks = Vec::with_capacity(rows.len());
    for r in rows {
        let result = r.result.as_ref();
        let mut run = result.and_then(|v| v["loop_id"].as_i64());
        // An id comes back from the store, which anyone with access to the database may have
        // edited: checked again by the task-id rule before it names a file.
        if run.is_some() && crate::batch::task::check_id(&r.id).is_err() {
            eprintln!(
                "kiln: warning: the stored task id `{}` is not a task id (letters, digits, `-`, `_`, `.`, not starting with `.`); its run's page is not written",
                crate::terminal::printable(&r.id)
            );
            run = None;
        }
        let report = match run {
            Some(run) => {
                // Task ids are letters, digits, `-`, `_` and `.` (checked above): safe in a
                // file name.
                let file = format!("{stem}-{}.html", r.id);
                let page = crate::report::html::render(&crate::report::gather(
                    &store,
                    run,
                    &ctx.config.pricing,
                )?);
                crate::edit::writer::write_output(
                    &ctx.workspace,
                    &dir.join(&file),
                    &page,
                    &protected,
                )?;
                Some((run, file))
            }
            None => None,
        };
        tasks.push(crate::report::batch::BatchTask {
            name: r.id,
            status: r.status,
            attempts: u32::try_from(r.attempts).unwrap_or(0),
            cost: result.and_then(|v| v["cost_usd"].as_f64()),
            report,
        });
    }
    let page = crate::report::batch::render(batch, &tasks, budget);
    let written = crate::edit::writer::write_output(&ctx.workspace, &args.html, &page, &protected)?;
    if !ctx.quiet {
        eprintln!(
            "report of batch {batch} ({}) written to {}",
            crate::terminal::count(tasks.len(), "task", "tasks"),
            written.display()
        );
    }
    Ok(Outcome::Success)
}
