//! `kiln agent`: the think-act-observe agent over sandboxed tool plugins, for one task
//! (`--prompt`) or interactively (tasks read from stdin, one per line, conversation kept).

use super::llm_cmd::LlmArgs;
use super::{Ctx, Outcome, print_json};
use crate::engine::agent::{AgentDeps, AgentOptions, run_agent};
use crate::engine::{Event, ModelSource, Replay};
use crate::llm::LlmClient;
use crate::store::Store;
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The task. Without it, tasks are read from stdin, one per line (interactive mode).
    #[arg(long)]
    prompt: Option<String>,
    /// Turn cap.
    #[arg(long, default_value_t = 20)]
    max_steps: u32,
    /// write_patch cap.
    #[arg(long, default_value_t = 10)]
    max_writes: u32,
    /// run_cmd cap.
    #[arg(long, default_value_t = 20)]
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
    #[arg(long)]
    test_command: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = "search-replace")]
    format: String,
    /// Conversation size (characters) that triggers compaction.
    #[arg(long, default_value_t = 400_000)]
    context_chars: usize,
    /// Extra system prompt.
    #[arg(long)]
    system: Option<String>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `agent.result`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    llm: LlmArgs,
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: AgentArgs) -> anyhow::Result<Outcome> {
    let mut config = ctx.config.clone();
    let test_command = args
        .test_command
        .clone()
        .or(config.agent.test_command.clone());
    if let Some(cmd) = &test_command {
        crate::config::grant_test_command(&mut config, cmd).map_err(|e| anyhow::anyhow!(e))?;
    }
    let mut model = match &args.replay {
        Some(file) => {
            ModelSource::replay(Replay::from_jsonl(file).map_err(|e| anyhow::anyhow!(e))?)
        }
        None => ModelSource::live(LlmClient::new(args.llm.settings(&config)?)?),
    };
    let ctx2 = ctx.with_config(config.clone());
    let registry = ctx2.registry(extra).await?;
    let mut store = Store::open(&ctx.workspace)?;
    // MCP servers of `[mcp.servers]` (outside the sandbox), started now that they are needed.
    let external = crate::mcp::ExternalTools::start(&config.mcp.servers, &ctx.workspace).await?;
    for t in &external.skipped {
        eprintln!(
            "warning: MCP tool `{t}` is not offered: its name would be refused by the model APIs or repeats another"
        );
    }
    let opts = AgentOptions {
        max_steps: args.max_steps,
        max_writes: args.max_writes,
        max_commands: args.max_commands,
        max_repeats: args.max_repeats,
        sequential: args.sequential,
        tool_timeout: Duration::from_secs_f64(args.tool_timeout.max(0.001)),
        manual: args.manual,
        context_chars: args.context_chars,
        system: args.system.clone(),
        hooks: config.agent.hooks.clone().unwrap_or_default(),
        default_format: args.format.clone(),
        compile_cmd: test_command.clone(),
        protected: config.protected(),
        external: external.clone(),
        ..Default::default()
    };
    let json = args.json;
    let interactive = args.prompt.is_none();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut history = Vec::new();
    let mut last_ok = true;
    let mut errored = false;
    loop {
        let task = match &args.prompt {
            Some(p) => p.clone(),
            None => {
                if std::io::stderr().is_terminal() {
                    eprint!("kiln> ");
                    let _ = std::io::stderr().flush();
                }
                match lines.next() {
                    Some(Ok(l)) if l.trim().is_empty() => continue,
                    Some(Ok(l)) if l.trim() == "exit" || l.trim() == "quit" => break,
                    Some(Ok(l)) => l,
                    _ => break,
                }
            }
        };
        let (tx, rx) = tokio::sync::watch::channel(false);
        let ctrl_c = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tx.send(true);
            }
        });
        let mut seq = 0u64;
        let mut on_event = |e: &Event| {
            seq += 1;
            if json {
                print_json(&e.to_json(seq, crate::store::now_ms()));
            } else if let Event::TextDelta { text } = e {
                eprint!("{}", crate::terminal::printable(text));
            } else if let Some(line) = e.human() {
                eprintln!("{line}");
            }
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
        if !json {
            println!("{}", crate::terminal::printable(result.content.trim()));
            eprintln!(
                "[{}] {} turn(s), {} tool call(s), tokens in {} / out {}",
                result.stop_reason,
                result.turns,
                result.tool_calls.len(),
                result.usage.input + result.usage.cached_input,
                result.usage.output
            );
        }
        last_ok = result.success;
        let stop = result.stop_reason;
        history = result.messages;
        if !interactive || stop == crate::engine::StopReason::Cancelled {
            errored = stop == crate::engine::StopReason::Error;
            break;
        }
    }
    external.shutdown().await;
    Ok(if errored {
        Outcome::Error
    } else if last_ok {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}
