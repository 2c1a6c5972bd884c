//! `kiln agent`: the think-act-observe agent over sandboxed tool plugins, for one task
//! (`--prompt`) or interactively (tasks read from stdin, one per line, conversation kept).

use super::event_log::{EventLog, env_flag, open_log_file};
use super::llm_cmd::LlmArgs;
use super::{Ctx, Outcome, print_json};
use crate::engine::agent::{AgentDeps, AgentOptions, run_agent};
use crate::engine::{Event, ModelSource, Replay};
use crate::llm::LlmClient;
use crate::llm::pricing::format_usd;
use crate::terminal::count;
use anyhow::Context;
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The task. Without it (or --prompt), tasks are read from stdin, one per line
    /// (interactive mode).
    #[arg(value_name = "TASK", conflicts_with = "prompt")]
    task: Option<String>,
    /// The task, as an option (instead of TASK).
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Turn cap.
    #[arg(short = 'm', long, default_value_t = 20)]
    max_steps: u32,
    /// write_patch cap.
    #[arg(short = 'w', long, default_value_t = 10)]
    max_writes: u32,
    /// run_cmd cap.
    #[arg(short = 'c', long, default_value_t = 20)]
    max_commands: u32,
    /// Identical calls allowed before stopping with `repeated_call`.
    #[arg(long, default_value_t = 3)]
    max_repeats: u32,
    /// Run every tool call in order (no parallel read-only calls).
    #[arg(long)]
    sequential: bool,
    /// Per-tool timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    tool_timeout: f64,
    /// Manual mode for models without tool calling: the model answers with JSON decisions.
    #[arg(long)]
    manual: bool,
    /// The command `run_cmd` may run (and `compile_loop` builds with), e.g. "cargo test".
    /// Default: `[agent] test_command`, else detected (Cargo.toml: `cargo test`,
    /// package.json: `npm test --silent`, pyproject.toml: `pytest -q`).
    #[arg(long, value_name = "CMD")]
    test_command: Option<String>,
    /// Arguments added to the test command, comma-separated (`--test-command npm
    /// --test-args test,run` allows `npm test run`).
    #[arg(long, value_name = "A,B,...", allow_hyphen_values = true)]
    test_args: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = "search-replace")]
    format: String,
    /// Conversation size (characters) that triggers compaction.
    #[arg(long, default_value_t = 400_000)]
    context_chars: usize,
    /// Extra text appended to kiln's system prompt.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// A file whose text replaces kiln's system prompt (--system is still appended).
    #[arg(long, value_name = "PATH")]
    system_file: Option<PathBuf>,
    /// Do not print the event lines on stderr (also AGENT_CONSOLE_LOGGING=false); the answer
    /// and the final summary line are still printed.
    #[arg(long)]
    no_console_log: bool,
    /// Append the event lines, timestamped, to a log file (also AGENT_FILE_LOGGING=true).
    #[arg(long)]
    file_log: bool,
    /// The log file; implies --file-log (also AGENT_LOG_FILE; default .kiln/logs/agent.log).
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `agent.result`, with `cost_usd`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    llm: LlmArgs,
    #[command(flatten)]
    budget: super::common::BudgetArgs,
}

/// Project files that imply a test command when none is given, in order of preference.
const DETECTED_TESTS: &[(&str, &str)] = &[
    ("Cargo.toml", "cargo test"),
    ("package.json", "npm test --silent"),
    ("pyproject.toml", "pytest -q"),
];

/// The test command implied by the workspace's project files, with the file that implied it.
fn detect_test_command(workspace: &std::path::Path) -> Option<(&'static str, &'static str)> {
    DETECTED_TESTS
        .iter()
        .find(|(file, _)| workspace.join(file).is_file())
        .map(|(file, cmd)| (*cmd, *file))
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
    config: &crate::config::Config,
    extra_args: &[String],
) -> anyhow::Result<(Option<String>, Option<String>)> {
    let (test_command, test_source) = match (&args.test_command, &config.agent.test_command) {
        (Some(c), _) => (Some(c.clone()), None),
        (None, Some(c)) => (Some(c.clone()), Some("[agent] test_command".to_string())),
        (None, None) => match detect_test_command(&ctx.workspace) {
            Some((cmd, file)) => (Some(cmd.to_string()), Some(format!("detected from {file}"))),
            None => (None, None),
        },
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

/// Where the event lines go: stderr unless --json (whose events go to stdout) or turned off,
/// and the log file when asked for (flags or `AGENT_*` variables).
fn event_log_for(
    ctx: &Ctx,
    args: &AgentArgs,
    config: &crate::config::Config,
) -> anyhow::Result<EventLog> {
    let console =
        !ctx.quiet && !args.no_console_log && env_flag("AGENT_CONSOLE_LOGGING") != Some(false);
    let log_path = args.log_file.clone().or_else(|| {
        std::env::var_os("AGENT_LOG_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
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

/// The start line: model, test command and its origin, caps.
fn banner(
    model: &str,
    test_command: &Option<String>,
    test_source: &Option<String>,
    args: &AgentArgs,
) -> String {
    format!(
        "kiln agent: model `{model}`; {}; at most {}, {}, {}",
        match (test_command, test_source) {
            (Some(c), Some(src)) => format!("test command `{c}` ({src})"),
            (Some(c), None) => format!("test command `{c}`"),
            (None, _) =>
                "no test command (run_cmd runs only what [plugins.shell] exec allows)".into(),
        },
        count(args.max_steps as usize, "step", "steps"),
        count(args.max_writes as usize, "write", "writes"),
        count(args.max_commands as usize, "command", "commands"),
    )
}

/// The agent's options from the flags and the configuration.
fn agent_options(
    args: &AgentArgs,
    config: &crate::config::Config,
    test_command: Option<String>,
    base_system: Option<String>,
    external: &crate::mcp::ExternalTools,
) -> AgentOptions {
    AgentOptions {
        max_steps: args.max_steps,
        max_writes: args.max_writes,
        max_commands: args.max_commands,
        max_repeats: args.max_repeats,
        sequential: args.sequential,
        tool_timeout: Duration::from_secs_f64(args.tool_timeout.max(0.001)),
        manual: args.manual,
        context_chars: args.context_chars,
        system: args.system.clone(),
        system_prompt: base_system,
        hooks: config.agent.hooks.clone().unwrap_or_default(),
        default_format: args.format.clone(),
        compile_cmd: test_command,
        protected: config.protected(),
        require_confinement: config.sandbox.require_confinement == Some(true),
        external: external.clone(),
        ..Default::default()
    }
}

/// The line that ends a run: stop reason, turns, calls, tokens, cost when known.
fn summary_line(result: &crate::engine::AgentResult, cost: Option<f64>) -> String {
    format!(
        "[{}] {}, {}, tokens in {} / out {}{}",
        result.stop_reason,
        count(result.turns as usize, "turn", "turns"),
        count(result.tool_calls.len(), "tool call", "tool calls"),
        result.usage.input + result.usage.cached_input,
        result.usage.output,
        cost.map(|c| format!(", cost {}", format_usd(c)))
            .unwrap_or_default()
    )
}

/// The next task of an interactive session (`None`: end of input, `exit` or `quit`).
fn next_task(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Option<String> {
    loop {
        if std::io::stderr().is_terminal() {
            eprint!("kiln> ");
            let _ = std::io::stderr().flush();
        }
        match lines.next() {
            Some(Ok(l)) if l.trim().is_empty() => continue,
            Some(Ok(l)) if l.trim() == "exit" || l.trim() == "quit" => return None,
            Some(Ok(l)) => return Some(l),
            _ => return None,
        }
    }
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: AgentArgs) -> anyhow::Result<Outcome> {
    let mut config = ctx.config.clone();
    let extra_args = match &args.test_args {
        Some(list) => test_args(list)?,
        None => Vec::new(),
    };
    // Then the model: a missing API key is reported before anything runs or loads.
    let mut model = match &args.replay {
        Some(file) => {
            ModelSource::replay(Replay::from_jsonl(file).map_err(|e| anyhow::anyhow!(e))?)
        }
        None => ModelSource::live(LlmClient::new(args.llm.settings_with_key(&config)?)?),
    };
    args.budget.apply(&config, &mut model)?;
    let (test_command, test_source) = test_command_for(ctx, &args, &config, &extra_args)?;
    if let Some(cmd) = &test_command {
        crate::config::grant_test_command(&mut config, cmd).map_err(|e| anyhow::anyhow!(e))?;
    }
    let base_system = match &args.system_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --system-file {}", p.display()))?,
        ),
        None => None,
    };
    let mut log = event_log_for(ctx, &args, &config)?;
    log.line(&banner(&model.label(), &test_command, &test_source, &args));
    let ctx2 = ctx.with_config(config.clone());
    let registry = ctx2.registry(extra).await?;
    let mut store = ctx.open_store()?;
    // MCP servers of `[mcp.servers]` (outside the sandbox), started now that they are needed.
    let external = crate::mcp::ExternalTools::start(&config.mcp.servers, &ctx.workspace).await?;
    for t in &external.skipped {
        eprintln!(
            "warning: MCP tool `{t}` is not offered: its name would be refused by the model APIs or repeats another"
        );
    }
    let opts = agent_options(&args, &config, test_command.clone(), base_system, &external);
    let model_name = model.label();
    let cost_of = |usage: &crate::llm::Usage| {
        crate::llm::pricing::cost_usd(&model_name, usage, &config.pricing)
    };
    let prompt = args.prompt.clone().or(args.task.clone());
    let json = args.json;
    let interactive = prompt.is_none();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut history = Vec::new();
    let mut last_ok = true;
    let mut last_stop = crate::engine::StopReason::Success;
    loop {
        let task = match &prompt {
            Some(p) => p.clone(),
            None => match next_task(&mut lines) {
                Some(t) => t,
                None => break,
            },
        };
        let (rx, ctrl_c) = super::common::ctrl_c_watch();
        let mut seq = 0u64;
        let mut on_event = |e: &Event| {
            seq += 1;
            if json {
                let mut v = e.to_json(seq, crate::clock::now_ms());
                if let (Event::AgentResult(r), serde_json::Value::Object(m)) = (e, &mut v) {
                    m.insert("cost_usd".into(), cost_of(&r.usage).into());
                }
                print_json(&v);
            }
            log.event(e);
        };
        let result = run_agent(
            &task,
            history.clone(),
            &opts,
            AgentDeps {
                workspace: &ctx.workspace,
                registry: &registry,
                model: &mut model,
                store: &mut store,
                cancel: rx,
                on_event: &mut on_event,
            },
        )
        .await;
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                external.shutdown().await;
                return Err(e.into());
            }
        };
        ctrl_c.abort();
        log.end_text();
        let summary = summary_line(&result, cost_of(&result.usage));
        if !json {
            println!("{}", crate::terminal::printable(result.content.trim()));
            log.always(&summary);
        } else {
            log.line(&summary);
        }
        last_ok = result.success;
        let stop = result.stop_reason;
        history = result.messages;
        last_stop = stop;
        if !interactive || stop == crate::engine::StopReason::Cancelled {
            break;
        }
    }
    external.shutdown().await;
    Ok(super::common::outcome_of(last_stop, last_ok))
}
