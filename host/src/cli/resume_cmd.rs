//! `kiln agent --resume ID` and `kiln loop --resume ID`: before the command line is parsed,
//! a resume is turned into the command line run ID was started with (its `run.invocation`
//! event), once kiln has checked that the run can be resumed (an agent or loop run that did
//! not succeed, whose workspace holds exactly what the run left: [`crate::undo::unaccounted`])
//! and told the engine to serve the run's stored answers and tool results first
//! ([`crate::engine::resume`]). Every other command line is recorded as it is, so the runs it
//! starts can be resumed later.

use anyhow::{Context, bail};
use std::ffi::OsString;
use std::path::PathBuf;

/// Global options that take a value (skipped when looking for the subcommand).
const VALUED_GLOBALS: &[&str] = &["-C", "--workspace", "--plugin", "--store"];

/// Options that may be given with `--resume` (they change only what is shown).
const OUTPUT_FLAGS: &[&str] = &["--json", "-q", "--quiet", "-v", "--verbose"];

/// The command line to parse: `argv` itself, or for a resume the one the run was started
/// with (its workspace given as this one's).
pub(crate) fn rewrite(argv: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let text: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some((command, id)) = resume_of(&text)? else {
        // The store URL carries credentials: it is never recorded (a resume names it again).
        crate::engine::resume::set_invocation(without_valued(&text, "--store"));
        return Ok(argv);
    };
    let workspace = match workspace_of(&text) {
        Some(w) => w,
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .with_context(|| format!("workspace {} does not exist", workspace.display()))?;
    let store = value_of(&text, "--store")
        .or_else(|| std::env::var("KILN_STORE").ok().filter(|v| !v.is_empty()));
    let stored = check(&workspace, store.as_deref(), &command, id)?;
    let mut out: Vec<String> = vec![text[0].clone(), "--workspace".into()];
    out.push(workspace.to_string_lossy().into_owned());
    if let Some(url) = value_of(&text, "--store") {
        out.extend(["--store".to_string(), url]);
    }
    let rest = without_valued(&without_workspace(&stored[1..]), "--store");
    recorded_line_is_safe(&rest, &command, id)?;
    out.extend(rest);
    // Output options given now (`--json`, `-q`, `-v`) apply to the resumed part too.
    for a in &text[1..] {
        if OUTPUT_FLAGS.contains(&a.as_str()) && !out.contains(a) {
            out.push(a.clone());
        }
    }
    crate::engine::resume::set_invocation(without_valued(&out, "--store"));
    Ok(out.into_iter().map(OsString::from).collect())
}

/// `(agent|loop, ID)` when the command line asks to resume.
fn resume_of(argv: &[String]) -> anyhow::Result<Option<(String, i64)>> {
    let mut i = 1;
    while i < argv.len() && argv[i].starts_with('-') {
        i += if VALUED_GLOBALS.contains(&argv[i].as_str()) {
            2
        } else {
            1
        };
    }
    let Some(command) = argv.get(i).filter(|c| *c == "agent" || *c == "loop") else {
        return Ok(None);
    };
    let rest = &argv[i + 1..];
    let mut id = None;
    for (j, a) in rest.iter().enumerate() {
        let value = if a == "--resume" {
            rest.get(j + 1).cloned()
        } else if let Some(v) = a.strip_prefix("--resume=") {
            Some(v.to_string())
        } else {
            continue;
        };
        let v = value.unwrap_or_default();
        id =
            Some(v.parse::<i64>().with_context(|| {
                format!("--resume takes a run id (see `kiln history`), not `{v}`")
            })?);
        let others: Vec<&String> = rest
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != j && !(a == "--resume" && *k == j + 1))
            .map(|(_, x)| x)
            .filter(|x| !OUTPUT_FLAGS.contains(&x.as_str()))
            .collect();
        if !others.is_empty() {
            bail!(
                "--resume continues run {v} with the options it was started with; leave out {}",
                others
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    Ok(id.map(|id| (command.clone(), id)))
}

/// The workspace a command line names (`-C DIR`, `--workspace DIR`, `--workspace=DIR`; the
/// last one given).
fn workspace_of(argv: &[String]) -> Option<PathBuf> {
    value_of_any(argv, &["-C", "--workspace"]).map(PathBuf::from)
}

/// The value of option `name` (`name VALUE` or `name=VALUE`), the last one given.
fn value_of(argv: &[String], name: &str) -> Option<String> {
    value_of_any(argv, &[name])
}

/// The value of the last of `names` given (`NAME VALUE` or `NAME=VALUE`).
fn value_of_any(argv: &[String], names: &[&str]) -> Option<String> {
    let mut found = None;
    for (i, a) in argv.iter().enumerate() {
        for name in names {
            if a == name {
                found = argv.get(i + 1).cloned();
            } else if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                found = Some(v.to_string());
            }
        }
    }
    found
}

/// `argv` without option `name` and its value.
fn without_valued(argv: &[String], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in argv {
        if skip {
            skip = false;
        } else if a == name {
            skip = true;
        } else if !a.strip_prefix(name).is_some_and(|r| r.starts_with('=')) {
            out.push(a.clone());
        }
    }
    out
}

fn without_workspace(argv: &[String]) -> Vec<String> {
    without_valued(&without_valued(argv, "-C"), "--workspace")
}

/// Check that run `id` can be resumed by `command`, start serving its answers, and return
/// the command line it was started with.
fn check(
    workspace: &std::path::Path,
    store_url: Option<&str>,
    command: &str,
    id: i64,
) -> anyhow::Result<Vec<String>> {
    // An edit the run left half-done when it was killed is finished first (as every
    // command touching the workspace does), so the comparison below sees whole files.
    match crate::edit::journal::recover_workspace(workspace) {
        Ok(report) => report
            .messages()
            .iter()
            .for_each(|m| eprintln!("warning: {m}")),
        Err(e) => eprintln!("warning: cannot check for an interrupted edit: {e}"),
    }
    let url = store_url
        .map(str::parse::<crate::store::StoreUrl>)
        .transpose()?;
    let mut store = crate::store::Store::open_url(url.as_ref(), workspace)?;
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
    let Some(argv) = crate::engine::resume::invocation(&store, id)? else {
        bail!(
            "run {id} has no recorded command line (it was started by an older kiln), so it cannot be resumed"
        );
    };
    let has_task = argv
        .iter()
        .any(|a| a == "-p" || a == "--prompt" || a == "--task")
        || command == "loop";
    if !has_task {
        bail!(
            "run {id} took its tasks from standard input (interactive mode): it cannot be resumed"
        );
    }
    let changed = crate::undo::unaccounted(workspace, id).map_err(|e| {
        anyhow::anyhow!("cannot tell whether the workspace changed since run {id}: {e}")
    })?;
    if !changed.is_empty() {
        bail!(
            "run {id} cannot be resumed: the workspace changed since it stopped in a way the run cannot account for ({}). Put them back (`kiln undo` of the runs since, or by hand) and resume again",
            changed.join(", ")
        );
    }
    let mut runs = vec![id];
    if command == "loop" {
        runs.extend(phase_runs(&store, id, &row)?);
        runs.sort_unstable();
    }
    let served = crate::engine::resume::start(&store, &runs)?;
    let note = serde_json::json!({"type": "run.resume_started", "at": crate::clock::now_ms()});
    let seq = store.event_count(id).unwrap_or(0) + 1;
    let _ = store.record_event(id, seq as u64, "run.resume_started", &note);
    eprintln!(
        "resuming run {id}: {} and {} are replayed from the store, then the model is asked again",
        crate::terminal::count(served.answers, "answer", "answers"),
        crate::terminal::count(served.results, "tool result", "tool results")
    );
    Ok(argv)
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

/// The recorded command line lives in the store, which programs the run started could write:
/// it is taken only when it is a `kiln COMMAND` line, parsed as kiln parses it, that chooses
/// none of what only the person running kiln may choose (`-C`, `--plugin`, `--yes`, `--store`).
fn recorded_line_is_safe(rest: &[String], command: &str, id: i64) -> anyhow::Result<()> {
    let why = match crate::cli::chosen_globals(rest) {
        Ok((Some(sub), chosen)) if sub == command && chosen.is_empty() => return Ok(()),
        Ok((Some(sub), _)) if sub != command => format!("is a `kiln {sub}` command"),
        Ok((None, _)) => "names no command".to_string(),
        Ok((_, chosen)) => format!("sets {}", chosen.join(", ")),
        Err(e) => format!(
            "does not parse ({})",
            e.to_string()
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
        ),
    };
    bail!(
        "run {id} cannot be resumed: its recorded command line {why}, which a resume never takes from the store; start a new run instead"
    )
}
