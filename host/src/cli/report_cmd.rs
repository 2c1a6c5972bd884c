//! `kiln report ID --html FILE`: one run from the workspace's store as a self-contained HTML
//! page ([`crate::report`]): its timeline of iterations or turns, each with the runner's
//! diagnostics, the model's summary, the diffs, the tool calls and the tokens and cost; the
//! stop reason last. The page loads nothing (no script, a `default-src 'none'` policy).

use super::{Ctx, Outcome};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run (its id in `kiln history`).
    id: i64,
    /// Write the page to FILE (replaced when it exists).
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
}

pub(crate) async fn run(ctx: &Ctx, args: ReportArgs) -> anyhow::Result<Outcome> {
    if ctx.store.is_none() && std::fs::symlink_metadata(ctx.workspace.join(".kiln")).is_err() {
        anyhow::bail!(
            "no run {}: nothing is recorded in {} yet",
            args.id,
            ctx.workspace.display()
        );
    }
    let store = ctx.open_store()?;
    let report = crate::report::gather(&store, args.id, &ctx.config.pricing)?;
    let page = crate::report::html::render(&report);
    let written = crate::edit::writer::write_output(
        &ctx.workspace,
        &args.html,
        &page,
        &ctx.config.protected(),
    )?;
    if !ctx.quiet {
        eprintln!(
            "report of run {} ({} {}s) written to {}",
            args.id,
            report.steps.len(),
            report.step_word,
            written.display()
        );
    }
    Ok(Outcome::Success)
}
