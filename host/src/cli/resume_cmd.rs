//! `kiln agent --resume ID` and `kiln loop --resume ID`: the run's recorded task (its
//! `run.task` event, a [`TaskSpec`]) is read back from the store, checked as any task from
//! data is (the store is written by the programs a run starts, so it is not trusted), and its
//! fields are put on the command's options one by one; never a command line parsed again.
//! Model settings (provider, endpoint, model), logs, output and the workspace's trust come
//! from the person resuming, as for any run. Before that kiln checks that the run can be
//! resumed (an agent or loop run that did not succeed, whose workspace holds exactly what the
//! run left: [`crate::undo::unaccounted`]) and loads the run's stored answers and tool
//! results, which the command hands to the run as a [`Resumed`] value in its `RunCtx`.

use super::ctx::Ctx;
use crate::engine::resume::Resumed;
use crate::task_spec::{Allowed, Kind, TaskSpec};
use anyhow::{Context, bail};
use std::ffi::OsString;

/// Global options that take a value (skipped when looking for the subcommand).
const VALUED_GLOBALS: &[&str] = &["-C", "--workspace", "--plugin", "--store"];

/// Options that may be given with `--resume`: what is shown, where logs go, and which model
/// answers (the person resuming chooses these, as for any run).
const RESUME_FLAGS: &[&str] = &[
    "--json",
    "-q",
    "--quiet",
    "-v",
    "--verbose",
    "--no-console-log",
    "--file-log",
];

/// Options with a value that may be given with `--resume`.
const RESUME_VALUED: &[&str] = &[
    "--provider",
    "--base-url",
    "--model",
    "--max-reply-bytes",
    "--log-file",
    "--log-path",
];

/// Refuse a `--resume` command line that also sets what the resumed run takes from its
/// record (`--max-steps`, a task, ...). Other command lines pass as they are.
pub(crate) fn check_line(argv: &[OsString]) -> anyhow::Result<()> {
    let text: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut i = 1;
    while i < text.len() && text[i].starts_with('-') {
        i += if VALUED_GLOBALS.contains(&text[i].as_str()) {
            2
        } else {
            1
        };
    }
    let resumable = |c: &String| crate::engine::kind::kind_named(c).is_some_and(|k| k.resumable);
    if !text.get(i).is_some_and(resumable) {
        return Ok(());
    }
    let rest = &text[i + 1..];
    let Some(at) = rest
        .iter()
        .position(|a| a == "--resume" || a.starts_with("--resume="))
    else {
        return Ok(());
    };
    let value = if rest[at] == "--resume" {
        rest.get(at + 1).cloned().unwrap_or_default()
    } else {
        rest[at]["--resume=".len()..].to_string()
    };
    value
        .parse::<i64>()
        .with_context(|| format!("--resume takes a run id (see `kiln history`), not `{value}`"))?;
    let mut others = Vec::new();
    let mut j = 0;
    while j < rest.len() {
        let a = &rest[j];
        if j == at {
            j += if a == "--resume" { 2 } else { 1 };
            continue;
        }
        if RESUME_FLAGS.contains(&a.as_str())
            || RESUME_VALUED
                .iter()
                .any(|f| a.strip_prefix(f).is_some_and(|r| r.starts_with('=')))
        {
            j += 1;
        } else if RESUME_VALUED.contains(&a.as_str()) {
            j += 2;
        } else {
            others.push(a.as_str());
            j += 1;
        }
    }
    if !others.is_empty() {
        bail!(
            "--resume continues run {value} with the task it was started with; leave out {} (model, log and output options may be given)",
            others.join(" ")
        );
    }
    Ok(())
}

/// Check that run `id` can be resumed as a `kind` run and return what the resumed run serves
/// and the task it was started with, checked.
pub(crate) fn prepare(ctx: &Ctx, kind: Kind, id: i64) -> anyhow::Result<Resumed> {
    let command = kind.name();
    let mut store = ctx.open_store()?;
    let row = store.loop_detail(id)?.row;
    if row.kind != command {
        bail!(
            "run {id} is a `{}` run; resume it with `kiln {} --resume {id}`",
            row.kind,
            if row.kind == "loop" { "loop" } else { "agent" }
        );
    }
    if row.status == "success" {
        bail!("run {id} finished successfully: there is nothing to resume");
    }
    let Some(value) = crate::engine::resume::recorded(&store, id)? else {
        if crate::engine::resume::has_old_invocation(&store, id)? {
            bail!(
                "run {id} was recorded by an older kiln as a command line, which a resume no longer reads: start it again"
            );
        }
        bail!("run {id} has no recorded task, so it cannot be resumed");
    };
    // The store is written by the programs the run started: its record is data, checked as
    // any task is, and holds no option but the task's own.
    let refuse = |why: String| {
        anyhow::anyhow!(
            "run {id} cannot be resumed: its recorded task {why}; a resume takes only a valid task from the store: start a new run instead"
        )
    };
    let spec = TaskSpec::from_json(value).map_err(|e| refuse(format!("is not valid ({e})")))?;
    spec.check_allowed(&Allowed::from_config(&ctx.config))
        .map_err(|e| refuse(format!("is not valid here ({e})")))?;
    if spec.kind != kind {
        return Err(refuse(format!("is a {} task", spec.kind.name())));
    }
    if kind == Kind::Agent && spec.prompt.is_none() {
        bail!(
            "run {id} took its tasks from standard input (interactive mode): it cannot be resumed"
        );
    }
    let changed = crate::undo::unaccounted(&ctx.workspace, id).map_err(|e| {
        anyhow::anyhow!("cannot tell whether the workspace changed since run {id}: {e}")
    })?;
    if !changed.is_empty() {
        bail!(
            "run {id} cannot be resumed: the workspace changed since it stopped in a way the run cannot account for ({}). Put them back (`kiln undo` of the runs since, or by hand) and resume again",
            changed.join(", ")
        );
    }
    let mut runs = vec![id];
    if kind == Kind::Loop {
        runs.extend(phase_runs(&store, id, &row)?);
        runs.sort_unstable();
    }
    let resumed = Resumed::load(&store, &runs, spec)?;
    let served = resumed.served();
    let note = serde_json::json!({"type": "run.resume_started", "at": crate::clock::now_ms()});
    let seq = store.event_count(id).unwrap_or(0) + 1;
    let _ = store.record_event(id, seq as u64, "run.resume_started", &note);
    eprintln!(
        "resuming run {id}: {} and {} are replayed from the store, then the model is asked again",
        crate::terminal::count(served.answers, "answer", "answers"),
        crate::terminal::count(served.results, "tool result", "tool results")
    );
    Ok(resumed)
}

/// The runs of a loop's phases: runs of their own, begun while it ran (one loop at a time per
/// workspace).
fn phase_runs(
    store: &crate::store::Store,
    id: i64,
    row: &crate::store::LoopRow,
) -> anyhow::Result<Vec<i64>> {
    let end = row.ended_at.unwrap_or(i64::MAX);
    Ok(store
        .loops(10_000)?
        .into_iter()
        .filter(|r| {
            matches!(
                r.kind,
                crate::store::RunKind::LoopExecute | crate::store::RunKind::LoopReview
            ) && r.started_at >= row.started_at
        })
        .filter(|r| r.started_at <= end && r.id > id)
        .map(|r| r.id)
        .collect())
}
