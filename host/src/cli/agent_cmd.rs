//! `kiln agent`: the think-act-observe agent over sandboxed tool plugins, for one task
//! (`--prompt`) or interactively (tasks read from stdin, one per line, conversation kept).

use super::args::AgentArgs;
use super::common::{EventSink, ctrl_c_watch, outcome_of};
use super::ctx::{Ctx, Outcome};
use super::settings::AgentSettings;
use crate::engine::kind::{Agent, LoopKind};
use crate::engine::resume::Resumed;
use crate::engine::run::RunCtx;
use crate::engine::{AgentResult, Event, StopReason};
use crate::llm::pricing::format_usd;
use crate::llm::{Message, Usage};
use crate::mcp::ExternalTools;
use crate::plugin::Registry;
use crate::store::Store;
use crate::task_spec::TaskSpec;
use crate::terminal::count;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

/// The start line: model, test command and its origin, caps.
fn banner(s: &AgentSettings) -> String {
    let o = &s.options;
    format!(
        "kiln agent: model `{}`; {}; at most {}, {}, {}",
        s.model.label(),
        match (&s.test_command, &s.test_source) {
            (Some(c), Some(src)) => format!("test command `{c}` ({src})"),
            (Some(c), None) => format!("test command `{c}`"),
            (None, _) =>
                "no test command (run_cmd runs only what [plugins.shell] exec allows)".into(),
        },
        count(o.max_steps as usize, "step", "steps"),
        count(o.max_writes as usize, "write", "writes"),
        count(o.max_commands as usize, "command", "commands"),
    )
}

/// The line that ends a run: stop reason, turns, calls, tokens, cost when known.
fn summary_line(result: &AgentResult, cost: Option<f64>) -> String {
    format!(
        "[{}] {}, {}, tokens in {} / out {}{}",
        result.stop_reason,
        count(result.turns as usize, "turn", "turns"),
        count(result.tool_calls.len(), "tool call", "tool calls"),
        result.usage.prompt(),
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

pub(crate) async fn run(
    ctx: &Ctx,
    extra: &[PathBuf],
    mut args: AgentArgs,
) -> anyhow::Result<Outcome> {
    let mut resumed = None;
    if let Some(id) = args.resume {
        let r = super::resume_cmd::prepare(ctx, crate::task_spec::Kind::Agent, id)?;
        super::task_cmd::apply_agent(&mut args, &r.spec);
        resumed = Some(r);
    }
    // `--system-file` is read once, by the prompt-file rule; the record keeps its text.
    if args.system_text.is_none()
        && let Some(p) = args.system_file.take()
    {
        args.system_text = Some(super::prompt_file::read(
            &ctx.workspace,
            &p,
            "--system-file",
        )?);
    }
    let record = super::task_cmd::spec_of_agent(&args);
    let run = Recorded {
        task: &record,
        resumed: resumed.as_mut(),
    };
    let mut s = AgentSettings::resolve(ctx, args)?;
    s.log.line(&banner(&s));
    let registry = ctx.with_config(s.config.clone()).registry(extra).await?;
    let mut store = ctx.open_store()?;
    // MCP servers of `[mcp.servers]` (outside the sandbox), started now that they are needed.
    let external = ExternalTools::start(&s.config.mcp.servers, &ctx.workspace).await?;
    for t in &external.skipped {
        eprintln!(
            "warning: MCP tool `{t}` is not offered: its name would be refused by the model APIs or repeats another"
        );
    }
    s.options.external = external.clone();
    let result = session(ctx, &mut s, &registry, &mut store, run).await;
    external.shutdown().await;
    let (stop, ok) = result?;
    Ok(outcome_of(stop, ok))
}

/// What every run of the session records as its task, and the run it resumes.
struct Recorded<'a> {
    task: &'a TaskSpec,
    resumed: Option<&'a mut Resumed>,
}

/// One task (`--prompt` or TASK), or tasks read from stdin until its end, each continuing the
/// conversation; the last task's stop reason and whether it succeeded.
async fn session(
    ctx: &Ctx,
    s: &mut AgentSettings,
    registry: &Registry,
    store: &mut Store,
    mut run: Recorded<'_>,
) -> anyhow::Result<(StopReason, bool)> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut history = Vec::new();
    let mut last = (StopReason::Success, true);
    loop {
        let task = match &s.prompt {
            Some(p) => p.clone(),
            None => match next_task(&mut lines) {
                Some(t) => t,
                None => break,
            },
        };
        let result = run_task(ctx, s, registry, store, &mut run, &task, history).await?;
        last = (result.stop_reason, result.success);
        history = result.messages;
        if s.prompt.is_some() || result.stop_reason == StopReason::Cancelled {
            break;
        }
    }
    Ok(last)
}

/// One task: the agent run with its events shown, then its answer and summary line.
async fn run_task(
    ctx: &Ctx,
    s: &mut AgentSettings,
    registry: &Registry,
    store: &mut Store,
    run: &mut Recorded<'_>,
    task: &str,
    history: Vec<Message>,
) -> anyhow::Result<AgentResult> {
    let model_name = s.model.label();
    let pricing = s.config.pricing.clone();
    let cost_of = move |usage: &Usage| crate::llm::pricing::cost_usd(&model_name, usage, &pricing);
    let (cancel, ctrl_c) = ctrl_c_watch();
    let cost = cost_of.clone();
    let mut sink = EventSink::new(s.json, &mut s.log).extending(move |e, m| {
        if let Event::AgentResult(r) = e {
            m.insert("cost_usd".into(), cost(&r.usage).into());
        }
    });
    let mut on_event = |e: &Event| sink.event(e);
    let agent = Agent {
        task,
        history,
        opts: &s.options,
    };
    let result = agent
        .run(RunCtx {
            workspace: &ctx.workspace,
            store,
            events: &mut on_event,
            model: &mut s.model,
            plugins: registry,
            cancel,
            task: Some(run.task),
            resumed: run.resumed.as_deref_mut(),
            undo: &ctx.undo,
        })
        .await;
    ctrl_c.abort();
    drop(sink);
    let result = result?;
    s.log.end_text();
    let summary = summary_line(&result, cost_of(&result.usage));
    if !s.json {
        // Printed once: not again on a terminal that just showed it streamed (on stderr);
        // always when stdout goes elsewhere (a pipe, a file), where it is the command's data.
        let on_screen = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        if !(on_screen && s.log.showed(&result.content)) {
            super::output::out_line(&crate::terminal::printable(result.content.trim()));
        }
    }
    if s.json || ctx.quiet {
        s.log.line(&summary);
    } else {
        s.log.always(&summary);
    }
    Ok(result)
}
