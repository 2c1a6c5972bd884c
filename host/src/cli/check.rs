//! `kiln check`: run a runner once over target files and show its diagnostics (the first step
//! of every fix-loop iteration).

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::plugin::{PluginKind, Severity};
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which runner, with what, over which files: shared by `kiln check` and `kiln fix`.
#[derive(Debug, Args)]
pub(crate) struct RunnerArgs {
    /// Runner plugin: `command`, `cargo`, or a user plugin.
    #[arg(long, default_value = "command")]
    pub runner: String,
    /// For the `command` runner: the command to run (`{file}`/`{files}` are replaced by the
    /// targets). Naming it here grants the runner that program.
    #[arg(long)]
    pub cmd: Option<String>,
    /// For the `cargo` runner: `check` (default), `build` or `test`.
    #[arg(long)]
    pub mode: Option<String>,
    /// One target file.
    #[arg(long, conflicts_with = "files")]
    pub file: Option<String>,
    /// Several target files.
    #[arg(long, num_args = 1..)]
    pub files: Vec<String>,
}

impl RunnerArgs {
    /// The targets, `--file` or `--files`; at least one.
    pub fn targets(&self) -> anyhow::Result<Vec<String>> {
        let targets: Vec<String> = self
            .file
            .iter()
            .cloned()
            .chain(self.files.iter().cloned())
            .collect();
        anyhow::ensure!(
            !targets.is_empty(),
            "name the files with --file F or --files F..."
        );
        Ok(targets)
    }

    /// Grant what naming the runner consents to; return the runner settings from the flags.
    pub fn consent(
        &self,
        config: &mut crate::config::Config,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        crate::config::grant_runner_consent(config, &self.runner, self.cmd.as_deref())?;
        let mut settings = BTreeMap::new();
        if let Some(cmd) = &self.cmd {
            settings.insert("cmd".to_string(), cmd.clone());
        }
        if let Some(mode) = &self.mode {
            settings.insert("mode".to_string(), mode.clone());
        }
        Ok(settings)
    }
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    runner: RunnerArgs,
    /// One JSON object with the run result on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: CheckArgs) -> anyhow::Result<Outcome> {
    let targets = args.runner.targets()?;
    let root = cap_std::fs::Dir::open_ambient_dir(&ctx.workspace, cap_std::ambient_authority())
        .with_context(|| format!("cannot open the workspace {}", ctx.workspace.display()))?;
    crate::path::target_arguments(&root, &targets)?;
    let mut config = ctx.config.clone();
    let settings = args.runner.consent(&mut config)?;
    let ctx2 = ctx.with_config(config);
    let reg = ctx2
        .registry_for(extra, crate::plugin::Needed::Only(&[&args.runner.runner]))
        .await?;
    let runner = reg.get(&args.runner.runner, Some(PluginKind::Runner))?;
    if !args.json && !ctx.quiet {
        eprintln!(
            "checking {} with runner `{}`…",
            targets.join(", "),
            runner.name
        );
    }
    let result = runner.runner_run(&targets, &settings).await?;
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

/// A run's diagnostics for a person (its output when it failed without any), then a summary
/// line on stderr.
/// The diagnostics on stdout, then the verdict on stderr (with `quiet`, only a failing one).
fn print_result(r: &crate::plugin::RunResult, quiet: bool) {
    for d in &r.diagnostics {
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
    if r.diagnostics.is_empty() && !r.ok {
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
    eprintln!(
        "{} (exit {}, {} ms, {}, {}{})",
        if r.ok { "passed" } else { "failed" },
        r.exit_code,
        r.duration_ms,
        count(r.diagnostics.len(), "diagnostic", "diagnostics"),
        count(errors, "error", "errors"),
        if r.timed_out { ", timed out" } else { "" }
    );
}
