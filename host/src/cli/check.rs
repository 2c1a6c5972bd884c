//! `kiln check`: run a runner once over target files and show its diagnostics (the first step
//! of every fix-loop iteration).

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use super::runner_args::{RunnerArgs, deadline_s};
use crate::plugin::{PluginKind, Severity};
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    runner: RunnerArgs,
    /// One JSON object with the run result on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: CheckArgs) -> anyhow::Result<Outcome> {
    // No --file/--files: the whole project, as `kiln fix` without them.
    let targets = ctx.workspace_paths(args.runner.named_targets());
    let root = cap_std::fs::Dir::open_ambient_dir(&ctx.workspace, cap_std::ambient_authority())
        .with_context(|| format!("cannot open the workspace {}", ctx.workspace.display()))?;
    crate::path::target_arguments(&root, &targets)?;
    let mut config = ctx.config.clone();
    let chosen = args.runner.choose(&mut config, &ctx.workspace)?;
    let settings = chosen.settings;
    let ctx2 = ctx.with_config(config);
    let reg = ctx2
        .registry_for(extra, crate::plugin::Needed::Only(&[&chosen.runner]))
        .await?;
    let runner = reg.get(&chosen.runner, Some(PluginKind::Runner))?;
    if !args.json && !ctx.quiet {
        if let Some(line) = ctx.root_banner() {
            super::output::err_line(&line);
        }
        let what = if targets.is_empty() {
            "the project".to_string()
        } else {
            targets.join(", ")
        };
        match &chosen.detected {
            Some(how) => eprintln!("checking {what} with {how}…"),
            None => eprintln!("checking {what} with runner `{}`…", runner.name),
        }
    }
    let secs = deadline_s(&ctx2.config, &chosen.runner);
    let start = std::time::Instant::now();
    let run = runner.runner_run(&targets, &settings);
    let result = if args.json || ctx.quiet {
        run.await
    } else {
        with_progress(run).await
    };
    let result = match result {
        // The runner ran out of the check's time before it could answer (a program killed at
        // the deadline left it no time to read the output): a check that timed out, named by
        // the settings that set its time (they override `[plugins.NAME] timeout_ms`).
        Err(crate::plugin::PluginError::Deadline { .. }) => {
            let why = format!(
                "the check (runner `{}`) ran out of time{} and was stopped before the runner could answer; give it longer with --timeout SECONDS or `[fix] timeout` in your user config or a trusted kiln.toml",
                runner.name,
                secs.map(|s| format!(" after {s} s")).unwrap_or_default()
            );
            if args.json {
                print_json(&json!({
                    "ok": false, "exit_code": -1, "duration_ms": start.elapsed().as_millis() as u64,
                    "truncated": false, "timed_out": true, "diagnostics": [], "stdout": "", "stderr": "",
                    "error": why,
                }));
            }
            eprintln!("failed: {}", crate::terminal::printable(&why));
            return Ok(Outcome::Failure);
        }
        other => other?,
    };
    let r = match result {
        Ok(r) => r,
        Err(e) => anyhow::bail!(
            "runner `{}`: {}",
            runner.name,
            crate::plugin::describe_call_error(&e)
        ),
    };
    if args.json {
        print_json(&json!({
            "ok": r.ok, "exit_code": r.exit_code, "duration_ms": r.duration_ms, "truncated": r.truncated,
            "timed_out": r.timed_out, "diagnostics": r.diagnostics.iter().map(crate::plugin::diagnostic_json).collect::<Vec<_>>(), "stdout": r.stdout, "stderr": r.stderr,
        }));
    } else {
        print_result(&r, ctx.quiet);
    }
    Ok(if r.ok {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// Await a check, showing the time elapsed: a spinner on a terminal, else a line at 10 s,
/// 30 s, 60 s and then every minute.
async fn with_progress<F: std::future::Future>(run: F) -> F::Output {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        let spinner = super::event_log::Spinner::start();
        let out = run.await;
        spinner.stop();
        return out;
    }
    let start = tokio::time::Instant::now();
    tokio::pin!(run);
    let mut n = 0u64;
    loop {
        let after = match n {
            0 => 10,
            1 => 30,
            k => 60 * (k - 1),
        };
        tokio::select! {
            out = &mut run => return out,
            _ = tokio::time::sleep_until(start + std::time::Duration::from_secs(after)) => {
                eprintln!("still checking… {after} s");
                n += 1;
            }
        }
    }
}

/// A run's diagnostics for a person (its output when it failed without any), then a summary
/// line on stderr.
/// The diagnostics on stdout, then the verdict on stderr (with `quiet`, only a failing one).
fn print_result(r: &crate::plugin::RunResult, quiet: bool) {
    for d in &r.diagnostics {
        if crate::plugin::is_sandbox_note(d) {
            println!(
                "{}",
                crate::terminal::printable(&format!("note: {}", d.message))
            );
            continue;
        }
        let sev = crate::plugin::severity_name(d.severity);
        let code = d
            .code
            .as_deref()
            .map(|c| format!("[{c}]"))
            .unwrap_or_default();
        println!(
            "{}",
            crate::terminal::printable(&format!(
                "{}:{}:{}: {sev}{code}: {}",
                d.file, d.line, d.column, d.message
            ))
        );
    }
    if r.diagnostics.iter().all(crate::plugin::is_sandbox_note) && !r.ok {
        print!(
            "{}{}",
            crate::terminal::printable(&r.stdout),
            crate::terminal::printable(&r.stderr)
        );
    }
    use crate::terminal::count;
    let errors = r
        .diagnostics
        .iter()
        .filter(|d| matches!(d.severity, Severity::Error))
        .count();
    if quiet && r.ok {
        return;
    }
    let mut tests: Vec<&str> = Vec::new();
    for t in r.diagnostics.iter().filter_map(crate::plugin::test_name) {
        if !tests.contains(&t) {
            tests.push(t);
        }
    }
    let tests = if tests.is_empty() {
        String::new()
    } else {
        format!(
            ", failing {}: {}",
            if tests.len() == 1 { "test" } else { "tests" },
            tests.join(", ")
        )
    };
    eprintln!(
        "{}",
        crate::terminal::printable(&format!(
            "{} (exit {}, {} ms, {}, {}{tests}{})",
            if r.ok { "passed" } else { "failed" },
            r.exit_code,
            r.duration_ms,
            count(r.diagnostics.len(), "diagnostic", "diagnostics"),
            count(errors, "error", "errors"),
            if r.timed_out { ", timed out" } else { "" }
        ))
    );
}
