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
use anyhow::bail;

/// What may be given with `--resume` (the clap ids of the loop commands' own options): what is
/// shown, where logs go, and which model answers (the person resuming chooses these, as for
/// any run). Global options (`-q`, `-v`, `-C`, ...) may always be given.
const RESUME_ALLOWS: &[&str] = &[
    "resume",
    "json",
    "no_console_log",
    "file_log",
    "log_file",
    "log_path",
    "provider",
    "base_url",
    "model",
    "max_reply_bytes",
];

/// Refuse a parsed `--resume` command line (`matches` of `cli`, a command that resumes) that
/// also sets what the resumed run takes from its record (`--max-steps`, a task, ...), naming
/// what to leave out as it was given. Other command lines pass as they are.
pub(crate) fn check_matches(cli: &clap::Command, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let Some((name, sub)) = matches.subcommand() else {
        return Ok(());
    };
    if !crate::engine::kind::kind_named(name).is_some_and(|k| k.resumable) {
        return Ok(());
    }
    let Some(id) = sub.try_get_one::<i64>("resume").ok().flatten() else {
        return Ok(());
    };
    let mut cli = cli.clone();
    cli.build();
    let Some(command) = cli.find_subcommand(name) else {
        return Ok(());
    };
    let mut others: Vec<(usize, String)> = Vec::new();
    for arg in command.get_arguments() {
        let key = arg.get_id().as_str();
        if arg.is_global_set()
            || RESUME_ALLOWS.contains(&key)
            || sub.value_source(key) != Some(clap::parser::ValueSource::CommandLine)
        {
            continue;
        }
        let at = sub.index_of(key).unwrap_or(usize::MAX);
        let mut given: Vec<String> = Vec::new();
        if !arg.is_positional() {
            given.push(match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => format!("-{}", arg.get_short().unwrap_or('?')),
            });
        }
        if arg.get_action().takes_values() {
            let raw = sub.get_raw(key).into_iter().flatten();
            given.extend(raw.map(|v| v.to_string_lossy().into_owned()));
        }
        others.push((at, given.join(" ")));
    }
    others.sort();
    if !others.is_empty() {
        let others: Vec<String> = others.into_iter().map(|(_, g)| g).collect();
        bail!(
            "--resume continues run {id} with the task it was started with; leave out {} (model, log and output options may be given)",
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
            changed
                .iter()
                .map(|p| crate::terminal::path(p).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
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

#[cfg(test)]
mod tests {
    fn check(line: &[&str]) -> Result<(), String> {
        let cmd = <super::super::Cli as clap::CommandFactory>::command();
        let m = cmd
            .clone()
            .try_get_matches_from(line)
            .map_err(|e| e.to_string())?;
        super::check_matches(&cmd, &m).map_err(|e| e.to_string())
    }

    #[test]
    fn a_resume_refuses_the_options_its_record_sets_as_they_were_given() {
        let ok = [
            &[
                "kiln", "agent", "--resume", "4", "--json", "-q", "--model", "m",
            ][..],
            &[
                "kiln",
                "-C",
                "/tmp",
                "agent",
                "--resume",
                "4",
                "--log-file",
                "x.log",
            ],
            &["kiln", "loop", "--resume", "4", "--base-url", "http://h/v1"],
            &["kiln", "agent", "-m", "3", "-p", "no resume: anything goes"],
        ];
        for line in ok {
            assert_eq!(check(line), Ok(()), "{line:?}");
        }
        let e = check(&[
            "kiln",
            "agent",
            "--resume",
            "4",
            "-m",
            "3",
            "--sequential",
            "fix it",
        ])
        .unwrap_err();
        assert!(
            e.contains("continues run 4 with the task it was started with; leave out --max-steps 3 --sequential fix it"),
            "{e}"
        );
        let e = check(&["kiln", "loop", "--json", "--resume", "4", "--loops", "2"]).unwrap_err();
        assert!(e.contains("leave out --loops 2 ("), "{e}");
        let e = check(&["kiln", "agent", "--resume", "x"]).unwrap_err();
        assert!(
            e.contains("--resume takes a run id (see `kiln history`), not `x`"),
            "{e}"
        );
    }
}
