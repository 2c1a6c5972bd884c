//! `kiln gc`: show and free what kiln's state directory keeps beyond its retention limits
//! (`[gc]` in the user's configuration; see [`crate::gc`]). Every fix, agent and loop run
//! already prunes its own workspace when it ends; this also removes the state of workspaces
//! that no longer exist.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Show what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(ctx: &Ctx, args: GcArgs) -> anyhow::Result<Outcome> {
    let base = crate::state_dir::base()?;
    let limits = crate::gc::Limits::of(&ctx.config.gc);
    let r = crate::gc::collect(&base, limits, crate::clock::now_ms(), args.dry_run)?;
    if args.json {
        print_json(&serde_json::to_value(&r)?);
        return Ok(Outcome::Success);
    }
    let verb = if r.dry_run { "would free" } else { "freed" };
    for w in &r.workspaces {
        println!(
            "{} {}: {} (its workspace {} no longer exists)",
            verb,
            w.state.display(),
            mib(w.bytes),
            w.workspace.display()
        );
    }
    for (ws, ids) in &r.runs {
        println!(
            "{} {}: undo records of {}",
            verb,
            ws.display(),
            crate::terminal::count(ids.len(), "run", "runs")
        );
    }
    for (state, why) in &r.skipped {
        eprintln!("kiln gc: left {} alone: {why}", state.display());
    }
    println!(
        "{verb} {} in all ({} workspace state{}, {} pre-image{}); kiln's state now holds {} (keeping {} runs per workspace, {} days)",
        mib(r.freed_bytes),
        r.workspaces.len(),
        if r.workspaces.len() == 1 { "" } else { "s" },
        r.objects,
        if r.objects == 1 { "" } else { "s" },
        mib(r.kept_bytes),
        limits.keep_runs,
        limits.max_age_days,
    );
    Ok(Outcome::Success)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
