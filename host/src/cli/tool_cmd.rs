//! `kiln tool call`: run one tool call from the command line under the same grants an agent
//! would have (its test command, given, configured or detected, granted to `run_cmd`), its
//! arguments checked against the tool's schema first.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::engine::tools::plugin_call::PLUGIN_FAILED;
use crate::engine::tools::{Answer, Imp, ToolSettings, Toolbox};
use crate::plugin::{PluginKind, Registry};
use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub(crate) enum ToolCommand {
    /// Call a tool: `kiln tool call read_file --args '{"path":"src/main.rs"}'`, by the name
    /// `kiln tool list` and the agent give it: `PLUGIN__TOOL` when two plugins offer the same
    /// tool, `SERVER__TOOL` for a tool of an MCP server of `[mcp.servers]` (the old
    /// `PLUGIN.TOOL` and `SERVER.TOOL` still work, with a note).
    Call {
        /// Tool name, as `kiln tool list` shows it.
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Print `{"ok": ..., "result"|"error": ...}` on stdout.
        #[arg(long)]
        json: bool,
        /// The command `run_cmd` may run, as for `kiln agent`. Default: `[agent]
        /// test_command`, else detected (Cargo.toml: `cargo test`, package.json: `npm test
        /// --silent`, pyproject.toml: `pytest -q`).
        #[arg(long, value_name = "CMD")]
        test_command: Option<String>,
    },
    /// List every tool of every tool plugin.
    List {
        /// One JSON object per tool, one per line.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], cmd: ToolCommand) -> anyhow::Result<Outcome> {
    match cmd {
        ToolCommand::List { json } => list(ctx, &ctx.registry(extra).await?, json).await,
        ToolCommand::Call {
            tool,
            args,
            json,
            test_command,
        } => {
            // The grants `kiln agent` would have: its test command (given, configured or
            // detected) granted to `run_cmd`.
            let mut config = ctx.config.clone();
            if let Some((cmd, _)) =
                super::settings::agent_test_command(ctx, test_command.as_ref(), &config)
            {
                crate::config::grant_test_command(&mut config, &cmd)?;
            }
            let ctx = ctx.with_config(config);
            let reg = ctx.registry(extra).await?;
            call(&ctx, &reg, &tool, &args, json).await
        }
    }
}

/// `kiln tool list`: every tool of every tool plugin, MCP server and the host.
async fn list(ctx: &Ctx, reg: &Registry, json: bool) -> anyhow::Result<Outcome> {
    // MCP servers are started to list their tools; one that fails is reported, not fatal.
    let (external, errors) =
        crate::mcp::ExternalTools::start_each(&ctx.config.mcp.servers, &ctx.workspace).await;
    for e in &errors {
        eprintln!("warning: {e}");
    }
    let catalog = crate::engine::tools::tool_catalog_with(reg, &external).await;
    external.shutdown().await;
    let catalog = catalog?;
    if json {
        for t in &catalog {
            print_json(&serde_json::to_value(t)?);
        }
        return Ok(Outcome::Success);
    }
    let width = catalog.iter().map(|t| t.name.len()).max().unwrap_or(0);
    let from = |t: &crate::engine::tools::ToolEntry| match (&t.plugin, &t.mcp_server) {
        (Some(p), _) => format!("plugin {p}"),
        (None, Some(s)) => format!("mcp server {s} (external, not sandboxed)"),
        (None, None) => "host (built-in)".to_string(),
    };
    let from_width = catalog.iter().map(|t| from(t).len()).max().unwrap_or(0);
    for t in &catalog {
        let first = t.description.lines().next().unwrap_or("");
        println!(
            "{}",
            crate::terminal::printable(&format!(
                "{:<width$}  {:<from_width$}  {first}",
                t.name,
                from(t)
            ))
        );
    }
    Ok(Outcome::Success)
}

/// `kiln tool call TOOL --args JSON`: one call through the agent's tool table, under the name
/// the agent and `kiln tool list` give the tool (`PLUGIN.TOOL` and `SERVER.TOOL`, the old
/// names, still work, with a note on stderr).
async fn call(
    ctx: &Ctx,
    reg: &Registry,
    tool: &str,
    args: &str,
    json: bool,
) -> anyhow::Result<Outcome> {
    let parsed: Value =
        serde_json::from_str(args).with_context(|| format!("--args is not valid JSON: {args}"))?;
    anyhow::ensure!(
        parsed.is_object(),
        "--args must be a JSON object, got {args}"
    );
    // The one MCP server the name points into, if any, is started for the call.
    let servers = &ctx.config.mcp.servers;
    let server = servers.iter().find(|(n, _)| {
        tool.starts_with(&crate::mcp::wire_name(n, ""))
            || tool.split_once('.').is_some_and(|(s, _)| s == n.as_str())
    });
    let one = server
        .map(|(n, c)| std::iter::once((n.clone(), c.clone())).collect())
        .unwrap_or_default();
    let external = crate::mcp::ExternalTools::start(&one, &ctx.workspace).await?;
    let settings = ToolSettings {
        // As before the table: a call from the command line runs until it ends.
        timeout: Duration::MAX,
        protected: ctx.config.protected(),
        external: external.clone(),
        ..Default::default()
    };
    let answer = call_in_table(ctx, reg, &settings, tool, &parsed).await;
    external.shutdown().await;
    let (called, answer) = answer?;
    report(&called, answer, json)
}

/// A call as made: the tool's name in the table, where it comes from (`{"plugin": ..}`,
/// `{"mcp_server": ..}` or nothing for a built-in) and its owner's name for it.
struct Called {
    name: String,
    from: Value,
    own: String,
}

/// Resolve `tool` in the table (an old dotted name with a note) and call it.
async fn call_in_table(
    ctx: &Ctx,
    reg: &Registry,
    settings: &ToolSettings,
    tool: &str,
    args: &Value,
) -> anyhow::Result<(Called, Answer)> {
    let table = Toolbox::served(reg, settings, &[]).await?;
    let name = match table.get(tool) {
        Some(_) => tool.to_string(),
        // `PLUGIN__TOOL` for a tool no other plugin shares (the table calls it `TOOL`).
        None if let Some(n) = namespaced(&table, tool) => n,
        None => {
            let name = old_name(ctx, reg, &table, tool)?;
            eprintln!(
                "note: `{tool}` is the old name of `{name}`; call it `{name}`, as `kiln tool list` and the agent name it (the old names will go)"
            );
            name
        }
    };
    let Some(t) = table.get(&name) else {
        anyhow::bail!("no tool named `{name}`; see `kiln tool list`");
    };
    // Checked before the call, as the model's calls are described to it: wrong arguments are
    // named here, not somewhere inside the tool.
    crate::engine::tools::args_check::check(tool, &t.def.parameters, args)?;
    let ws = crate::edit::Workspace::open(&ctx.workspace)?;
    let answer = table
        .call_bare(&name, &args.to_string(), settings, &ws, None)
        .await
        .with_context(|| format!("no tool named `{name}`"))?;
    let (from, own) = match &t.imp {
        Imp::Plugin(p, own) => (json!({ "plugin": p.name }), own.clone()),
        Imp::AstRefactor(p) => (
            json!({ "plugin": p.name }),
            crate::edit::refactor::TOOL.to_string(),
        ),
        Imp::External(s, own) => (json!({ "mcp_server": s.name }), own.clone()),
        Imp::Builtin(_) => (json!({}), name.clone()),
    };
    Ok((Called { name, from, own }, answer))
}

/// The table's name for `PLUGIN__TOOL` when that plugin offers that tool.
fn namespaced(table: &Toolbox<'_>, tool: &str) -> Option<String> {
    let (plugin, own) = tool.split_once("__")?;
    table.tools.iter().find_map(|t| match &t.imp {
        Imp::Plugin(p, n) if p.name == plugin && n == own => Some(t.def.name.clone()),
        _ => None,
    })
}

/// The table's name for `tool`, a name the table does not have: an old `PLUGIN.TOOL` or
/// `SERVER.TOOL` name, else an error that says what there is.
fn old_name(ctx: &Ctx, reg: &Registry, table: &Toolbox<'_>, tool: &str) -> anyhow::Result<String> {
    let (owner, own) = match tool.split_once('.') {
        Some((o, t)) => (Some(o), t),
        None => (None, tool),
    };
    let matches: Vec<&str> = table
        .tools
        .iter()
        .filter(|t| match (&t.imp, owner) {
            (Imp::Plugin(p, n), Some(o)) => p.name == o && n == own,
            (Imp::AstRefactor(p), Some(o)) => p.name == o && own == crate::edit::refactor::TOOL,
            (Imp::External(s, n), Some(o)) => s.name == o && n == own,
            (Imp::Plugin(_, n), None) => n == own,
            _ => false,
        })
        .map(|t| t.def.name.as_str())
        .collect();
    match (matches.as_slice(), owner) {
        ([one], _) => return Ok(one.to_string()),
        ([], _) => {}
        (several, _) => anyhow::bail!(
            "tool `{own}` is offered by several plugins; call it by one of its names: {}",
            several.join(", ")
        ),
    }
    match owner {
        Some(s) if ctx.config.mcp.servers.contains_key(s) => {
            let known = table.tools.iter().filter_map(|t| match &t.imp {
                Imp::External(server, n) if server.name == s => Some(n.as_str()),
                _ => None,
            });
            anyhow::bail!(
                "MCP server `{s}` has no tool named `{own}`{}; see `kiln tool list`",
                crate::suggest::hint(own, known)
            )
        }
        // A plugin named but absent (or skipped because it failed to load) says why.
        Some(p) => {
            reg.get(p, Some(PluginKind::Tool))?;
        }
        None if crate::engine::tools::is_builtin(tool) => anyhow::bail!(
            "`{tool}` is a built-in tool that needs an agent run (a model, the store): `kiln agent` offers it"
        ),
        None => {}
    }
    anyhow::bail!(
        "no tool named `{tool}`{}; see `kiln tool list`",
        crate::suggest::hint(tool, table.tools.iter().map(|t| t.def.name.as_str()))
    )
}

/// Print a call's answer (`{"ok": ..., "result"|"error": ...}` with `--json`): success,
/// failure (the tool's error), or an error of kiln's when the plugin failed rather than
/// answered.
fn report(called: &Called, a: Answer, json: bool) -> anyhow::Result<Outcome> {
    let text = a.outcome.text().to_string();
    let mut out = called.from.clone();
    out["tool"] = json!(called.own);
    if !a.outcome.is_error() {
        if json {
            out["ok"] = json!(true);
            out["result"] = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            print_json(&out);
        } else {
            println!("{}", crate::terminal::printable(&text));
        }
        return Ok(Outcome::Success);
    }
    let kind = a.error_kind.unwrap_or("tool-error");
    // A plugin's own error is `kind: message`; the message alone goes in the JSON.
    let message = text
        .strip_prefix(kind)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(&text)
        .to_string();
    if json {
        out["ok"] = json!(false);
        out["error"] = json!({ "kind": kind, "message": message });
        print_json(&out);
    }
    if kind == PLUGIN_FAILED {
        if json {
            return Err(anyhow::Error::new(Printed(text)));
        }
        anyhow::bail!(text);
    }
    if !json {
        eprintln!("{}: {}", called.name, crate::terminal::printable(&text));
    }
    Ok(Outcome::Failure)
}

/// An error `kiln tool call --json` has already printed as its JSON answer (stderr still gets
/// the message).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Printed(String);

/// The JSON answer of `kiln tool call --json` for an error that stopped it before or instead
/// of a tool's answer (a usage, configuration or plugin error; exit 2), so a script reading
/// stdout always gets one object: `{"ok": false, "tool": TOOL, "error": {"kind": "usage",
/// "message": ...}}`. Nothing for an error already printed.
pub(crate) fn print_error(tool: Option<&str>, e: &anyhow::Error, message: &str) {
    if e.downcast_ref::<Printed>().is_some() {
        return;
    }
    print_usage_error(tool, message);
}

/// [`print_error`] for an error of the command line itself.
pub(crate) fn print_usage_error(tool: Option<&str>, message: &str) {
    let mut out = json!({ "ok": false, "error": { "kind": "usage", "message": message } });
    if let Some(t) = tool {
        out["tool"] = json!(t);
    }
    print_json(&out);
}

/// `kiln tool call ... --json` as the command line asks for it, before clap parsed it (a
/// usage error): the tool named, if any.
pub(crate) fn json_call_in(args: &[String]) -> Option<Option<String>> {
    let at = args
        .windows(2)
        .position(|w| w[0] == "tool" && w[1] == "call")?;
    let rest = &args[at + 2..];
    if !rest.iter().any(|a| a == "--json") {
        return None;
    }
    let mut tool = None;
    let mut skip = false;
    for a in rest {
        if skip {
            skip = false;
        } else if a == "--args" || a == "--test-command" {
            skip = true;
        } else if !a.starts_with('-') {
            tool = Some(a.clone());
            break;
        }
    }
    Some(tool)
}
