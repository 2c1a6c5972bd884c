//! `kiln history [show ID]`: what happened in earlier loops, from the workspace's store.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::engine::tools::result_text;
use crate::store::{IterationRow, LoopDetail, Store};
use clap::{Args, Subcommand};

/// `println!` for what the store recorded from plugins, programs and the model: control
/// characters and escape sequences are shown, not obeyed.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", crate::terminal::printable(&format!($($arg)*)))
    };
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(subcommand)]
    show: Option<HistoryCommand>,
    /// JSON output (one object per loop per line, or one object for `show`).
    #[arg(long, global = true)]
    json: bool,
    /// How many loops to list.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

#[derive(Debug, Subcommand)]
enum HistoryCommand {
    /// Every iteration of one loop with its edits and output.
    Show {
        /// Loop id.
        id: i64,
    },
}

pub(crate) async fn run(ctx: &Ctx, args: HistoryArgs) -> anyhow::Result<Outcome> {
    // Reading history creates nothing: no store in kiln's state directory yet means no loops
    // yet. (A `.kiln/kiln.db` of an earlier kiln is never read: programs could write it.)
    if ctx.store.is_none() && !crate::store::default_exists(&ctx.workspace) {
        if let Ok(path) = crate::store::default_path(&ctx.workspace)
            && let Some(notice) = crate::store::legacy_notice(&ctx.workspace, &path)
        {
            eprintln!("kiln: note: {notice}");
        }
        if let Some(HistoryCommand::Show { id }) = args.show {
            anyhow::bail!(
                "no loop {id}: nothing is recorded in {} yet",
                ctx.workspace.display()
            );
        }
        if !args.json {
            eprintln!("no loops recorded in {} yet", ctx.workspace.display());
        }
        return Ok(Outcome::Success);
    }
    let store = ctx.open_store()?;
    match args.show {
        None => list(ctx, &store, args.limit, args.json)?,
        Some(HistoryCommand::Show { id }) => show(&store, id, args.json)?,
    }
    Ok(Outcome::Success)
}

/// `kiln history`: the latest `limit` loops, one line (or JSON object) each.
fn list(ctx: &Ctx, store: &Store, limit: usize, json: bool) -> anyhow::Result<()> {
    // A shared store (`--store`) holds many workspaces' runs: list them all, with their project.
    let rows = if store.is_shared() {
        store.all_loops(limit)?
    } else {
        store.loops(limit)?
    };
    if rows.is_empty() && !json {
        eprintln!("no loops recorded in {} yet", ctx.workspace.display());
    }
    // A shared store's rows carry their project (workspace) as a second column.
    let shared = store.is_shared();
    if !rows.is_empty() && !json {
        say!(
            "{:>4}  {}{:<12} {:<17} {:<17} {:<9} {:<20}  {}  {}",
            "ID",
            if shared { "PROJECT  " } else { "" },
            "KIND",
            "STATUS",
            "STOP",
            "ITERS",
            "STARTED (UTC)",
            "TARGETS",
            "SUMMARY"
        );
    }
    for r in rows {
        // `kiln undo` records itself on the run (`run.undone`).
        let undone = !store.events(r.id, Some("run.undone"))?.is_empty();
        if json {
            let mut v = serde_json::to_value(&r)?;
            v["undone"] = undone.into();
            print_json(&v);
        } else {
            let project = if shared {
                format!("{}  ", r.project)
            } else {
                String::new()
            };
            let status = if undone {
                format!("{} (undone)", r.status)
            } else {
                r.status.clone()
            };
            say!(
                "{:>4}  {project}{:<12} {:<17} {:<17} {:<9} {:<20}  {}  {}",
                r.id,
                r.kind,
                status,
                r.stop_reason.as_deref().unwrap_or("-"),
                format!("{}/{}", r.iters, r.max_iters),
                crate::clock::utc_text(r.started_at),
                if r.targets.is_empty() && r.kind == crate::store::RunKind::Fix {
                    "(project)".to_string()
                } else if r.targets.is_empty() {
                    "-".to_string()
                } else {
                    r.targets.join(",")
                },
                // One line per run: the summary's first line (`show` has all of it).
                r.summary
                    .as_deref()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
    }
    Ok(())
}

/// `kiln history show ID`: one loop with its tool calls and every iteration.
fn show(store: &Store, id: i64, json: bool) -> anyhow::Result<()> {
    // The user's own question: any project's run of a shared store (the listing shows them).
    let d = store.any_loop_detail(id)?;
    if json {
        let mut v = serde_json::to_value(&d)?;
        v["tool_calls"] = serde_json::to_value(store.tool_calls(id)?)?;
        print_json(&v);
        return Ok(());
    }
    let r = &d.row;
    say!(
        "loop {}: {} ({}) runner {} format {} model {}",
        r.id,
        r.status,
        r.stop_reason.as_deref().unwrap_or("running"),
        r.runner,
        r.format,
        r.model
    );
    if r.targets.is_empty() && r.kind == crate::store::RunKind::Fix {
        say!("targets: the whole project");
    } else {
        say!("targets: {}", r.targets.join(", "));
    }
    say!(
        "tokens: input {} (cached {}), output {}",
        r.tokens.input,
        r.tokens.cached_input,
        r.tokens.output
    );
    if let Some(s) = &r.summary {
        say!("summary: {s}");
    }
    for (_, _, e) in store.events(r.id, Some("run.undone"))? {
        say!(
            "undone: {} by `kiln undo`{}",
            crate::clock::utc_text(e["at"].as_i64().unwrap_or(0)),
            if e["forced"].as_bool() == Some(true) {
                " --force"
            } else {
                ""
            }
        );
    }
    if matches!(
        r.kind.as_str(),
        "agent" | "mcp" | "loop-execute" | "loop-review"
    ) {
        for c in store.tool_calls(r.id)? {
            say!(
                "   turn {} {} {} {} ({} ms): {}",
                c.turn,
                if result_text::failed(c.is_error, &c.result) {
                    "✗"
                } else {
                    "✓"
                },
                c.name,
                c.arguments.chars().take(100).collect::<String>(),
                c.duration_ms,
                result_text::preview(&c.result)
                    .chars()
                    .take(120)
                    .collect::<String>()
            );
        }
    }
    for it in &d.iterations {
        print_iteration(&d, it);
    }
    Ok(())
}

/// One iteration of `kiln history show`: its outcome, the model's summary, its edits and its
/// first diagnostics.
fn print_iteration(d: &LoopDetail, it: &IterationRow) {
    say!(
        "\n-- iteration {}: {} (exit {}), {} applied, runner {} ms, llm {} ms",
        it.n,
        if it.ok { "passed" } else { "failed" },
        it.exit_code,
        crate::terminal::count(it.edits_applied as usize, "edit", "edits"),
        it.runner_ms,
        it.llm_ms
    );
    if let Some(s) = &it.llm_summary {
        say!("   model: {s}");
    }
    for e in d.edits.iter().filter(|e| e.iteration == it.n) {
        say!(
            "   edit {} {} {}{}",
            e.status,
            e.kind,
            e.path,
            e.error
                .as_deref()
                .map(|x| format!(": {}", x.lines().next().unwrap_or("")))
                .unwrap_or_default()
        );
    }
    for diag in it.diagnostics.as_array().into_iter().flatten().take(10) {
        say!(
            "   {}:{}:{}: {}: {}",
            diag["file"].as_str().unwrap_or(""),
            diag["line"],
            diag["column"],
            diag["severity"].as_str().unwrap_or(""),
            diag["message"].as_str().unwrap_or("")
        );
    }
}
