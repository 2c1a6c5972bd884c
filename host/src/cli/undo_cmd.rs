//! `kiln undo [ID] [--dry-run] [--force] [--json]`: put back every file a fix, agent or loop
//! run changed (the latest run by default), from the pre-images kiln keeps in its state
//! directory ([`crate::undo`]), and record in the store that the run was undone.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::undo::restore::{self, Action};
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct UndoArgs {
    /// The run to undo (its id in `kiln history`); the latest run by default.
    id: Option<i64>,
    /// Show the diff of what undo would write, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also put back files changed since the run by someone else (their changes are lost).
    #[arg(long)]
    force: bool,
    /// JSON output: one object with every file and what undo did (or would do) with it.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(ctx: &Ctx, args: UndoArgs) -> anyhow::Result<Outcome> {
    let root = &ctx.workspace;
    let plan = match args.id {
        Some(id) => restore::plan(root, id)?,
        None => match restore::killed_before_start(root)? {
            Some((rec, start)) => restore::plan_pending(root, &rec, &start)?,
            None => restore::plan(root, restore::latest(root)?)?,
        },
    };
    let id = plan.id;
    let conflicts: Vec<String> = plan.conflicts().iter().map(|i| i.path.clone()).collect();
    if args.dry_run {
        let diff = plan.diff(args.force, !args.json);
        if args.json {
            let mut v = serde_json::to_value(&plan)?;
            v["diff"] = diff.into();
            v["dry_run"] = true.into();
            print_json(&v);
        } else {
            show_diff(&diff);
            describe(&plan, false, root);
        }
        // The code the undo itself would exit with: 1 when something would not go back.
        let complete = plan.complete(args.force);
        if !complete && !args.json {
            eprintln!(
                "{} would not be undone whole: see the files above{}",
                name(&plan),
                if args.force {
                    ""
                } else {
                    " (--force puts back more)"
                }
            );
        }
        return Ok(if complete {
            Outcome::Success
        } else {
            Outcome::Failure
        });
    }
    if !conflicts.is_empty() && !args.force {
        if args.json {
            let mut v = serde_json::to_value(&plan)?;
            v["refused"] = conflicts.clone().into();
            print_json(&v);
        }
        eprintln!(
            "error: run {id} not undone: {} changed since the run (by someone else, or by a program after kiln last looked); nothing was written. Look with `kiln undo {id} --dry-run --force`, or put them back anyway with --force:",
            crate::terminal::count(conflicts.len(), "file", "files")
        );
        for c in &conflicts {
            eprintln!("  {}", crate::terminal::path(c));
        }
        return Ok(Outcome::Failure);
    }
    let applied = restore::apply(root, &plan, &ctx.config.protected(), args.force)?;
    let written = &applied.put_back;
    if plan.pending.is_none() && applied.not_restored.is_empty() {
        record(ctx, id, written, args.force);
    }
    if args.json {
        let mut v = serde_json::to_value(&plan)?;
        v["undone"] = written.clone().into();
        v["not_restored"] = applied
            .not_restored
            .iter()
            .map(|(p, why)| serde_json::json!({ "path": p, "why": why }))
            .collect::<Vec<_>>()
            .into();
        print_json(&v);
    } else {
        describe(&plan, true, root);
        eprintln!(
            "{} undone: {} put back",
            name(&plan),
            crate::terminal::count(written.len(), "file", "files")
        );
    }
    if applied.not_restored.is_empty() {
        return Ok(Outcome::Success);
    }
    eprintln!(
        "error: {} of {} could not be put back:",
        crate::terminal::count(applied.not_restored.len(), "file", "files"),
        name(&plan)
    );
    for (p, why) in &applied.not_restored {
        eprintln!(
            "  {}: {}",
            crate::terminal::path(p),
            crate::terminal::escape_path(why)
        );
    }
    eprintln!(
        "{} is not marked undone: run `kiln undo{}` again once those files are dealt with (or with --force)",
        name(&plan),
        if plan.pending.is_none() {
            format!(" {}", plan.id)
        } else {
            String::new()
        }
    );
    Ok(Outcome::Failure)
}

/// How messages name the run of `plan`.
fn name(plan: &restore::Plan) -> String {
    match plan.pending {
        Some(pid) => format!("the run killed before it had an id (process {pid})"),
        None => format!("run {}", plan.id),
    }
}

/// A `run.undone` event on the run, so `kiln history show` says it was undone. A store that
/// cannot take it only loses the row (the undo itself is recorded in the state directory).
fn record(ctx: &Ctx, id: i64, files: &[String], forced: bool) {
    let Ok(mut store) = ctx.open_store() else {
        return;
    };
    let seq = store.event_count(id).unwrap_or(0) + 1;
    let payload = serde_json::json!({
        "type": "run.undone",
        "files": files,
        "forced": forced,
        "at": crate::clock::now_ms(),
    });
    if let Err(e) = store.record_event(id, seq as u64, "run.undone", &payload) {
        eprintln!("warning: the undo of run {id} is not recorded in the store: {e}");
    }
}

fn show_diff(diff: &str) {
    let text = crate::terminal::printable(diff);
    if crate::terminal::colors_on_stdout() {
        println!("{}", crate::terminal::color_diff(&text));
    } else {
        print!("{text}");
    }
}

/// One line per file on stderr: what undo did (or would do).
fn describe(plan: &restore::Plan, done: bool, root: &std::path::Path) {
    if !plan.finished {
        eprintln!(
            "note: {} did not finish (killed): every file that differs from what it found at its start is taken as its change",
            name(plan)
        );
    }
    for i in &plan.files {
        let what = match (i.action, done) {
            (Action::Restore, true) => "restored",
            (Action::Restore, false) => "would restore",
            (Action::Delete, true) => "deleted (the run created it)",
            (Action::Delete, false) => "would delete (the run created it)",
            (Action::AsBefore, _) => "already as before the run",
            (Action::ChangedSince, _) => "changed since the run",
            (Action::Blocked, _) => "cannot be put back without --force",
            (Action::Cannot, _) => "cannot be put back",
        };
        let is = i.now_is.map(|k| format!(" ({k})")).unwrap_or_default();
        let why = i
            .why
            .as_deref()
            .map(|w| format!(": {}", crate::terminal::escape_path(w)))
            .unwrap_or_default();
        let path = crate::terminal::path(&i.path);
        eprintln!("  {path}: {what}{is}{why}");
        if let Some(n) = i.size {
            eprintln!("    too large to keep/compare: {path}, {n} bytes (never read)");
        }
    }
    if !plan.not_covered.is_empty() {
        eprintln!(
            "note: {} not backed up (too large to keep/compare, over 16 MiB, or past the file limit); changes to them are not undone:",
            crate::terminal::count(plan.not_covered.len(), "file was", "files were")
        );
        for p in &plan.not_covered {
            // Its size now, by a stat that follows no link.
            let size = match crate::undo::scan::now(root, p) {
                crate::undo::scan::Now::File(s) => format!(", {} bytes", s.size),
                _ => String::new(),
            };
            eprintln!("  {}{size}", crate::terminal::path(p));
        }
    }
}
