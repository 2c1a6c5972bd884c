//! Each loop command's settings, resolved in one place from its flags and the configuration.
//! The layers, weakest first: kiln's defaults, the user's configuration file, the workspace's
//! kiln.toml (both merged by [`Config::load`]), the environment, then the command's flags.
//! A command's `run` takes the settings resolved here and only runs them; the order in which
//! each resolver reads its inputs is the order in which their errors are reported.

use super::args::{AgentArgs, FixArgs, LoopArgs, McpArgs};
use super::common::{BudgetArgs, ModelPlan};
use super::ctx::Ctx;
use super::event_log::{EventLog, env_flag, open_log_file};
use crate::config::{Config, ExecGrant};
use crate::engine::agent::AgentOptions;
use crate::engine::review::{LoopOptions, REVIEW_COMMANDS, load_task};
use crate::engine::{FixOptions, ModelSource};
use anyhow::Context;
use std::path::Path;
use std::time::Duration;

// The edit format when neither a flag nor `[fix] format` names one.
pub(crate) use crate::engine::defaults::DEFAULT_FORMAT;

/// A per-tool deadline given in seconds (at least a millisecond).
fn tool_timeout(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.001))
}

/// `--test-command`, else `[agent] test_command`, granted to `run_cmd` (and the `command`
/// runner) in `config`.
fn granted_test_command(
    given: &Option<String>,
    config: &mut Config,
) -> anyhow::Result<Option<String>> {
    let cmd = given.clone().or(config.agent.test_command.clone());
    if let Some(cmd) = &cmd {
        crate::config::grant_test_command(config, cmd)?;
    }
    Ok(cmd)
}

/// `kiln fix`, resolved.
pub(crate) struct FixSettings {
    /// The configuration with what naming the runner consents to.
    pub config: Config,
    pub model: ModelPlan,
    /// `--max-cost`/`--max-tokens`, applied when the model is opened.
    pub budget: BudgetArgs,
    /// The runner plugin's name.
    pub runner: String,
    /// The edit format's name (flag, `[fix] format`, else search-replace).
    pub format: String,
    /// The loop's options; `whole_file_format` is set once the format is loaded.
    pub options: FixOptions,
    pub json: bool,
}

impl FixSettings {
    pub fn resolve(ctx: &Ctx, args: FixArgs) -> anyhow::Result<FixSettings> {
        // A missing API key is reported before anything runs or loads.
        let model = ModelPlan::resolve(
            args.replay.as_deref(),
            args.replay_loop,
            &args.llm,
            &ctx.config,
        )?;
        // No --file/--files: project mode, the whole workspace.
        let targets = ctx.workspace_paths(args.runner.named_targets());
        let mut config = ctx.config.clone();
        let chosen = args.runner.choose(&mut config, &ctx.workspace)?;
        if let Some(how) = &chosen.detected
            && !ctx.quiet
            && !args.json
        {
            eprintln!("kiln: {how}");
        }
        let runner_settings = chosen.settings;
        // Project mode with no runner named, configured or detected: nothing to run.
        anyhow::ensure!(
            !(targets.is_empty()
                && chosen.runner == "command"
                && !runner_settings.contains_key("cmd")),
            super::detect::no_runner(&ctx.workspace)
        );
        let timeout_s = super::runner_args::deadline_s(&config, &chosen.runner);
        let prompt = match &args.prompt_file {
            _ if args.prompt_text.is_some() => args.prompt_text.clone(),
            Some(p) => Some(super::prompt_file::read(
                &ctx.workspace,
                p,
                "--prompt-file",
            )?),
            None => config.fix.prompt.clone(),
        };
        let format = args
            .format
            .or(config.fix.format.clone())
            .unwrap_or_else(|| DEFAULT_FORMAT.into());
        let options = FixOptions {
            targets,
            multi_file: !args.runner.files.is_empty(),
            max_iters: args.max_iters.or(config.fix.max_iters).unwrap_or(5),
            system: args.system,
            lang: args.lang,
            prompt,
            runner_settings,
            protected: config.protected(),
            tool_rounds: args.tool_rounds,
            max_files: args.max_files,
            timeout_s,
            allow_check_edits: args.allow_check_edits,
            ..Default::default()
        };
        anyhow::ensure!(options.max_files > 0, "--max-files must be at least 1");
        Ok(FixSettings {
            config,
            model,
            budget: args.budget,
            runner: chosen.runner,
            format,
            options,
            json: args.json,
        })
    }
}

/// `kiln agent`, resolved.
pub(crate) struct AgentSettings {
    /// The configuration with the test command granted.
    pub config: Config,
    /// The model, opened and capped by the budget.
    pub model: ModelSource,
    /// The test command (given, configured or detected, with `--test-args`).
    pub test_command: Option<String>,
    /// Where the test command came from when not given on the command line.
    pub test_source: Option<String>,
    /// The agent's options; `external` is filled once the MCP servers are started.
    pub options: AgentOptions,
    /// Where the event lines go.
    pub log: EventLog,
    /// The one task (`--prompt` or TASK); `None`: tasks come from stdin.
    pub prompt: Option<String>,
    pub json: bool,
}

impl AgentSettings {
    pub fn resolve(ctx: &Ctx, args: AgentArgs) -> anyhow::Result<AgentSettings> {
        let mut config = ctx.config.clone();
        let extra_args = match &args.test_args {
            Some(list) => test_args(list)?,
            None => Vec::new(),
        };
        // Then the model: a missing API key is reported before anything runs or loads.
        let model = ModelPlan::resolve(args.replay.as_deref(), None, &args.llm, &config)?
            .open_capped(None, &args.budget, &config)?;
        let (test_command, test_source) = test_command_for(ctx, &args, &config, &extra_args)?;
        if let Some(cmd) = &test_command {
            crate::config::grant_test_command(&mut config, cmd)?;
        }
        let system_prompt = match &args.system_file {
            _ if args.system_text.is_some() => args.system_text.clone(),
            Some(p) => Some(super::prompt_file::read(
                &ctx.workspace,
                p,
                "--system-file",
            )?),
            None => None,
        };
        let log = event_log_for(ctx, &args, &config)?;
        let options = AgentOptions {
            max_steps: args.max_steps,
            max_writes: args.max_writes,
            max_commands: args.max_commands,
            max_repeats: args.max_repeats,
            sequential: args.sequential,
            tool_timeout: tool_timeout(args.tool_timeout),
            manual: args.manual,
            context_chars: args.context_chars,
            system: args.system,
            system_prompt,
            hooks: config.agent.hooks.clone().unwrap_or_default(),
            default_format: args.format,
            compile_cmd: test_command.clone(),
            protected: config.protected(),
            require_confinement: config.sandbox.require_confinement == Some(true),
            ..Default::default()
        };
        Ok(AgentSettings {
            config,
            model,
            test_command,
            test_source,
            options,
            log,
            prompt: args.prompt.or(args.task),
            json: args.json,
        })
    }
}

/// Project files that imply a test command when none is given, in order of preference.
const DETECTED_TESTS: &[(&str, &str)] = &[
    ("Cargo.toml", "cargo test"),
    ("package.json", "npm test --silent"),
    ("pyproject.toml", "pytest -q"),
];

/// The test command implied by the workspace's project files, with the file that implied it.
fn detect_test_command(workspace: &Path) -> Option<(&'static str, &'static str)> {
    DETECTED_TESTS
        .iter()
        .find(|(file, _)| workspace.join(file).is_file())
        .map(|(file, cmd)| (*cmd, *file))
}

/// The agent's test command (`given`, else `[agent] test_command`, else detected) and where it
/// came from when not given; shared by `kiln agent` and `kiln tool call`.
pub(crate) fn agent_test_command(
    ctx: &Ctx,
    given: Option<&String>,
    config: &Config,
) -> Option<(String, Option<String>)> {
    match (given, &config.agent.test_command) {
        (Some(c), _) => Some((c.clone(), None)),
        (None, Some(c)) => Some((c.clone(), Some("[agent] test_command".to_string()))),
        (None, None) => detect_test_command(&ctx.workspace)
            .map(|(cmd, file)| (cmd.to_string(), Some(format!("detected from {file}")))),
    }
}

/// `--test-args`: comma-separated words, each allowed to `run_cmd` exactly as written, so
/// none may contain whitespace (run_cmd splits on it) or a glob character (the exec allowlist
/// would read it as a pattern).
fn test_args(list: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for a in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if a.chars()
            .any(|c| c.is_whitespace() || matches!(c, '*' | '?'))
        {
            anyhow::bail!(
                "--test-args: `{a}` contains whitespace or a glob character (`*`, `?`); each argument must be one plain word, allowed exactly as written"
            );
        }
        out.push(a.to_string());
    }
    Ok(out)
}

/// The test command (given, configured or detected; with `--test-args` appended) and where it
/// came from, when not given on the command line.
fn test_command_for(
    ctx: &Ctx,
    args: &AgentArgs,
    config: &Config,
    extra_args: &[String],
) -> anyhow::Result<(Option<String>, Option<String>)> {
    let (test_command, test_source) =
        match agent_test_command(ctx, args.test_command.as_ref(), config) {
            Some((c, src)) => (Some(c), src),
            None => (None, None),
        };
    let test_command = match test_command {
        Some(c) if !extra_args.is_empty() => Some(format!("{} {}", c.trim(), extra_args.join(" "))),
        Some(c) => Some(c),
        None if !extra_args.is_empty() => {
            anyhow::bail!(
                "--test-args needs a test command: pass --test-command (none was configured or detected)"
            )
        }
        None => None,
    };
    Ok((test_command, test_source))
}

/// Where the agent's event lines go: stderr unless --json (whose events go to stdout) or
/// turned off, and the log file when asked for (flags over the `AGENT_*` variables).
fn event_log_for(ctx: &Ctx, args: &AgentArgs, config: &Config) -> anyhow::Result<EventLog> {
    let console =
        !ctx.quiet && !args.no_console_log && env_flag("AGENT_CONSOLE_LOGGING") != Some(false);
    let log_path = args
        .log_file
        .clone()
        .or_else(|| kiln_env::env().agent_log_file().map(Path::to_path_buf));
    let file_log =
        args.file_log || args.log_file.is_some() || env_flag("AGENT_FILE_LOGGING") == Some(true);
    let log_file = if file_log {
        Some(open_log_file(
            &ctx.workspace,
            log_path.as_deref(),
            "agent.log",
            &config.protected(),
        )?)
    } else {
        None
    };
    Ok(EventLog::new(console && !args.json, log_file))
}

/// `kiln loop`, resolved.
pub(crate) struct LoopSettings {
    /// The configuration with the test command, the task's programs and the review commands
    /// granted to the shell plugin.
    pub config: Config,
    /// The model, opened and capped by the budget.
    pub model: ModelSource,
    pub options: LoopOptions,
    pub json: bool,
}

impl LoopSettings {
    pub fn resolve(ctx: &Ctx, args: LoopArgs) -> anyhow::Result<LoopSettings> {
        let given = args
            .task
            .as_deref()
            .context("name the task file with --task FILE")?;
        let task_file = task_path(ctx, given)?;
        let ws = crate::edit::Workspace::open(&ctx.workspace)?;
        let task = load_task(&ws, &task_file)?;
        for w in &task.warnings {
            eprintln!("warning: {task_file}: {}", crate::terminal::printable(w));
        }
        let mut config = ctx.config.clone();
        granted_test_command(&args.test_command, &mut config)?;
        // What run_cmd may run in the execution phase: what the configuration grants the shell
        // plugin by name, and the task's `bash` list (consent: the user named the task file).
        let shell = config.plugins.entry("shell".into()).or_default();
        let granted: Vec<String> = shell
            .exec
            .iter()
            .flatten()
            .map(|g| g.program.clone())
            .filter(|p| !p.contains(['*', '?', '[']))
            .collect();
        for program in task.bash.iter().map(String::as_str).chain(REVIEW_COMMANDS) {
            shell.exec.get_or_insert_with(Vec::new).push(ExecGrant {
                program: program.to_string(),
                args: vec!["*".into()],
            });
        }
        let model = ModelPlan::resolve(args.replay.as_deref(), None, &args.llm, &config)?
            .open_capped(None, &args.budget, &config)?;
        let options = LoopOptions {
            task_file,
            loops: args.loops.max(1),
            iterations: args.iterations.max(1),
            agent: AgentOptions {
                tool_timeout: tool_timeout(args.tool_timeout),
                hooks: config.agent.hooks.clone().unwrap_or_default(),
                default_format: args.format,
                protected: config.protected(),
                require_confinement: config.sandbox.require_confinement == Some(true),
                ..Default::default()
            },
            granted_commands: granted,
            log_path: args.log_path,
            stop_on_blocker: args.stop_on_blocker,
        };
        Ok(LoopSettings {
            config,
            model,
            options,
            json: args.json,
        })
    }
}

/// The task file as a workspace-relative path: a relative path is taken inside the workspace
/// (`kiln -C W loop --task T` reads W/T, as `fix --file` does); a file outside the workspace
/// (through `..`, an absolute path or a symbolic link) is refused.
pub(super) fn task_path(ctx: &Ctx, given: &Path) -> anyhow::Result<String> {
    let workspace = &ctx.workspace;
    // Relative to the current directory inside the workspace, as `--file` is (the root with
    // `-C DIR`, where `cwd_in_workspace` is empty).
    let abs = workspace.join(&ctx.cwd_in_workspace).join(given);
    let real = abs
        .canonicalize()
        .with_context(|| format!("task file {} does not exist", given.display()))?;
    let rel = real.strip_prefix(workspace).map_err(|_| {
        anyhow::anyhow!(
            "task file {} is outside the workspace {}; kiln loop works only on a task file inside it",
            given.display(),
            workspace.display()
        )
    })?;
    Ok(rel.to_string_lossy().into_owned())
}

/// `kiln mcp`, resolved (the model is resolved once the plugins are loaded, and its absence
/// is an error of compile_loop only).
pub(crate) struct McpSettings {
    /// The configuration with the build command granted.
    pub config: Config,
    /// The build command compile_loop runs.
    pub compile_cmd: Option<String>,
    /// The edit format of apply_edit and compile_loop (flag, `[fix] format`, else
    /// search-replace).
    pub format: String,
    pub tool_timeout: Duration,
    /// `--http`: the loopback address to serve on instead of stdio.
    pub http: Option<std::net::SocketAddr>,
}

impl McpSettings {
    pub fn resolve(ctx: &Ctx, args: &McpArgs) -> anyhow::Result<McpSettings> {
        if let Some(addr) = args.http {
            anyhow::ensure!(
                addr.ip().is_loopback(),
                "kiln mcp --http serves only a loopback address (127.0.0.1, ::1): it has no authentication; got {addr}"
            );
        }
        let mut config = ctx.config.clone();
        let compile_cmd = granted_test_command(&args.test_command, &mut config)?;
        let format = args
            .format
            .clone()
            .or(config.fix.format.clone())
            .unwrap_or_else(|| DEFAULT_FORMAT.into());
        Ok(McpSettings {
            config,
            compile_cmd,
            format,
            tool_timeout: tool_timeout(args.tool_timeout),
            http: args.http,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::llm_args::LlmArgs;
    use super::*;

    #[test]
    fn test_args_are_plain_words() {
        assert_eq!(test_args(" run, -x ,").unwrap(), ["run", "-x"]);
        for bad in ["a b", "*", "te?t"] {
            let e = test_args(bad).unwrap_err().to_string();
            assert!(e.contains("one plain word"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_first_project_file_found_implies_the_test_command() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(detect_test_command(dir.path()), None);
        std::fs::write(dir.path().join("pyproject.toml"), "").unwrap();
        assert_eq!(
            detect_test_command(dir.path()),
            Some(("pytest -q", "pyproject.toml"))
        );
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        assert_eq!(
            detect_test_command(dir.path()),
            Some(("cargo test", "Cargo.toml"))
        );
    }

    #[test]
    fn a_replay_needs_no_key_and_a_file_wins_over_a_loop() {
        let config = Config::default();
        let llm = LlmArgs {
            base_url: Some("https://api.openai.com/v1".into()),
            model: Some("m".into()),
            ..Default::default()
        };
        let plan = ModelPlan::resolve(Some(Path::new("r.jsonl")), Some(3), &llm, &config);
        assert!(matches!(plan, Ok(ModelPlan::ReplayFile(p)) if p == Path::new("r.jsonl")));
        let plan = ModelPlan::resolve(None, Some(3), &llm, &config);
        assert!(matches!(plan, Ok(ModelPlan::ReplayLoop(3))));
    }
}
