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
    /// Runner plugin: `cargo`, `pytest`, `go`, `tsc`, `node`, `make`, `command`, or a user
    /// plugin. Without it (and without --cmd), `[fix] runner`/`cmd`, else the runner the
    /// project's files imply (Cargo.toml, pyproject.toml, package.json, go.mod, Makefile, ...).
    #[arg(long)]
    pub runner: Option<String>,
    /// For the `command` runner: the command to run (`{file}`/`{files}` are replaced by the
    /// targets). Naming it here grants the runner that program.
    #[arg(long)]
    pub cmd: Option<String>,
    /// Run `--cmd` through `sh -c` (for `&&`, `|`, `;`, redirections, `VAR=x cmd`); the
    /// runner is then granted `sh`.
    #[arg(long, requires = "cmd")]
    pub shell: bool,
    /// The runner's deadline per check: seconds, or with a unit (`90s`, `10m`, `1h`)
    /// (default: `[fix] timeout`, else 10 minutes). In `kiln fix`, a check that runs out of
    /// time stops the loop (`timeout`).
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<u32>,
    /// The runner's mode: `cargo` check (default), build or test; `go` test (default), build
    /// or vet; `node` npm (default, `npm test`) or node (`node --test`); `make` make (default)
    /// or cmake.
    #[arg(long)]
    pub mode: Option<String>,
    /// One target file.
    #[arg(long, conflicts_with = "files")]
    pub file: Option<String>,
    /// Several target files.
    #[arg(long, num_args = 1..)]
    pub files: Vec<String>,
}

/// The runner a command runs, its settings, and how it was chosen when no flag named it.
#[derive(Debug)]
pub(crate) struct ChosenRunner {
    pub runner: String,
    pub settings: BTreeMap<String, String>,
    /// `runner `go` (go test -json ./..., detected from go.mod)` when detected.
    pub detected: Option<String>,
}

impl RunnerArgs {
    /// The targets named, `--file` or `--files`; none: project mode.
    pub fn named_targets(&self) -> Vec<String> {
        self.file
            .iter()
            .cloned()
            .chain(self.files.iter().cloned())
            .collect()
    }

    /// Pick the runner (`--runner`, else `command` with `--cmd`, else `[fix] runner`/`cmd`,
    /// else the one the project at `workspace` implies, else `command`), grant what naming
    /// it consents to, and return it with its settings.
    pub fn choose(
        &self,
        config: &mut crate::config::Config,
        workspace: &std::path::Path,
    ) -> anyhow::Result<ChosenRunner> {
        let cmd = self.cmd.clone().or_else(|| {
            // `[fix] cmd` belongs to the command runner (named or implied).
            match (&self.runner, &config.fix.runner) {
                (Some(r), _) | (None, Some(r)) if r != "command" => None,
                _ => config.fix.cmd.clone(),
            }
        });
        let cmd = match cmd {
            Some(c) if self.shell => Some(through_sh(&c)),
            Some(c) => {
                if let Some(what) = shell_syntax(&c) {
                    anyhow::bail!(
                        "--cmd `{}` uses shell syntax ({what}), but no shell runs it; use `sh -c '…'`, or pass --shell to run it through `sh -c`",
                        crate::terminal::printable(&c)
                    );
                }
                Some(c)
            }
            None => None,
        };
        let mut settings = BTreeMap::new();
        let mut detected = None;
        let runner = match (&self.runner, &self.cmd, &config.fix.runner, &cmd) {
            (Some(r), _, _, _) => r.clone(),
            (None, Some(_), _, _) => "command".to_string(),
            (None, None, Some(r), _) => r.clone(),
            (None, None, None, Some(_)) => "command".to_string(),
            (None, None, None, None) => match super::detect::detect_runner(workspace) {
                Some(d) => {
                    for (k, v) in &d.settings {
                        settings.insert(k.to_string(), v.to_string());
                    }
                    detected = Some(format!(
                        "runner `{}` ({}, detected from {})",
                        d.runner, d.command, d.file
                    ));
                    d.runner.to_string()
                }
                None if cmd.is_none() && self.named_targets().is_empty() => {
                    anyhow::bail!(super::detect::no_runner(workspace))
                }
                None => "command".to_string(),
            },
        };
        crate::config::grant_runner_consent(config, &runner, cmd.as_deref(), Some(workspace))?;
        // The runner's deadline: --timeout, `[fix] timeout`, a deadline the user granted the
        // plugin (`[plugins.NAME] timeout_ms`), else 10 minutes.
        let fix_timeout = config.fix.timeout;
        let grant = config.plugins.entry(runner.clone()).or_default();
        let secs = self
            .timeout
            .or(fix_timeout)
            .or(grant.timeout_ms.map(|ms| ms.div_ceil(1000)))
            .unwrap_or(crate::config::DEFAULT_RUNNER_TIMEOUT_S);
        grant.timeout_ms = Some(secs.saturating_mul(1000));
        if let Some(cmd) = &cmd {
            settings.insert("cmd".to_string(), cmd.clone());
        }
        if let Some(mode) = &self.mode {
            settings.insert("mode".to_string(), mode.clone());
        }
        Ok(ChosenRunner {
            runner,
            settings,
            detected,
        })
    }
}

/// `--timeout`: seconds, or a number with `s`, `m` or `h`; at least one second.
fn parse_timeout(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let mult = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => {
            return Err(format!(
                "`{s}`: give seconds, or a number with s, m or h (90s, 10m)"
            ));
        }
    };
    let n: u32 = num
        .parse()
        .map_err(|_| format!("`{s}`: give seconds, or a number with s, m or h (90s, 10m)"))?;
    match n.checked_mul(mult) {
        Some(v) if v > 0 && v <= u32::MAX / 1000 => Ok(v),
        _ => Err(format!(
            "`{s}`: between 1 second and {} seconds",
            u32::MAX / 1000
        )),
    }
}

/// The runner's deadline (seconds) that [`RunnerArgs::consent`] granted `runner`.
pub fn deadline_s(config: &crate::config::Config, runner: &str) -> Option<u32> {
    config
        .plugins
        .get(runner)
        .and_then(|p| p.timeout_ms)
        .map(|ms| ms.div_ceil(1000))
}

/// `cmd` as one `sh -c` argument, double-quoted the way the `command` runner splits words.
/// The targets never become shell text: `{file}` and `{files}` in it turn into `"$1"` and
/// `"$@"`, and the targets follow as `sh`'s own arguments (one word each), so a file named
/// `x;touch y` or `$(...)` stays a name.
fn through_sh(cmd: &str) -> String {
    let script = cmd.replace("{files}", "\"$@\"").replace("{file}", "\"$1\"");
    let quoted = script.replace('\\', "\\\\").replace('"', "\\\"");
    format!("sh -c \"{quoted}\" kiln-sh {{files}}")
}

/// The shell syntax a command uses outside quotes, if any: what a shell would read as
/// `&&`, `||`, a pipe, `;`, a redirection, a background `&`, a substitution, or a leading
/// `VAR=value` assignment. The `command` runner runs no shell: it would pass them on as
/// arguments.
fn shell_syntax(cmd: &str) -> Option<&'static str> {
    let first = cmd.split_whitespace().next().unwrap_or("");
    if let Some((name, _)) = first.split_once('=')
        && !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Some("a `VAR=value` assignment");
    }
    let mut quote: Option<char> = None;
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => {
                chars.next();
            }
            (None, '&') if chars.peek() == Some(&'&') => return Some("`&&`"),
            (None, '|') if chars.peek() == Some(&'|') => return Some("`||`"),
            (None, '|') => return Some("a pipe `|`"),
            (None, ';') => return Some("`;`"),
            (None, '&') => return Some("`&`"),
            (None, '>' | '<') => return Some("a redirection"),
            (None, '`') => return Some("a command substitution"),
            (None, '\n' | '\r') => return Some("a line break"),
            (None, '$') if chars.peek() == Some(&'(') => return Some("a command substitution"),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_syntax_outside_quotes_is_found() {
        for c in [
            "gcc a.c && ./a.out",
            "make || true",
            "cat x | grep y",
            "make; make test",
            "gcc a.c > log",
            "gcc a.c 2>&1",
            "CC=clang make",
            "echo $(date)",
            "sleep 1 &",
        ] {
            assert!(shell_syntax(c).is_some(), "{c}");
        }
        for c in [
            "gcc -fsyntax-only {files}",
            "python3 -c \"print(1); print(2)\"",
            "grep 'a|b' x",
            "cargo test -- --nocapture",
            "gcc -DX=1 a.c",
        ] {
            assert_eq!(shell_syntax(c), None, "{c}");
        }
        assert_eq!(
            through_sh("gcc a.c && echo \"ok\""),
            "sh -c \"gcc a.c && echo \\\"ok\\\"\" kiln-sh {files}"
        );
        // The targets are sh's arguments, never text of its script.
        assert_eq!(
            through_sh("cat {file} && wc -l {files}"),
            "sh -c \"cat \\\"$1\\\" && wc -l \\\"$@\\\"\" kiln-sh {files}"
        );
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
