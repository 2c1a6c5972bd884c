//! `kiln tool call`: run one tool call from the command line under the same grants an agent
//! would have (its test command, given, configured or detected, granted to `run_cmd`), its
//! arguments checked against the tool's schema first.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::plugin::{Plugin, PluginKind, Registry};
use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum ToolCommand {
    /// Call a tool: `kiln tool call read_file --args '{"path":"src/main.rs"}'`. Name it
    /// `PLUGIN.TOOL` when two plugins offer the same tool, `SERVER.TOOL` for a tool of an MCP
    /// server of `[mcp.servers]`.
    Call {
        /// Tool name, or `PLUGIN.TOOL`.
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

/// `kiln tool call TOOL --args JSON`.
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
    let (plugin_name, tool_name) = match tool.split_once('.') {
        Some((p, t)) => (Some(p), t),
        None => (None, tool),
    };
    if let Some(server) = plugin_name.and_then(|p| ctx.config.mcp.servers.get_key_value(p)) {
        return call_external(ctx, server, tool_name, &parsed, json).await;
    }
    let (plugin, schema) = find_plugin(reg, tool, plugin_name, tool_name).await?;
    // Checked before the call, as the model's calls are described to it: wrong arguments are
    // named here, not somewhere inside the tool.
    if let Ok(schema) = serde_json::from_str::<Value>(&schema) {
        crate::engine::tools::args_check::check(tool, &schema, &parsed)?;
    }
    let args_text = parsed.to_string();
    match plugin.tool_call(tool_name, &args_text).await {
        Ok(Ok(result)) => {
            if json {
                let value = serde_json::from_str::<Value>(&result).unwrap_or(Value::String(result));
                print_json(
                    &json!({ "ok": true, "plugin": plugin.name, "tool": tool_name, "result": value }),
                );
            } else {
                println!("{}", crate::terminal::printable(&result));
            }
            Ok(Outcome::Success)
        }
        Ok(Err(err)) => {
            if json {
                let (kind, message) = crate::plugin::call_error_parts(&err);
                print_json(
                    &json!({ "ok": false, "plugin": plugin.name, "tool": tool_name, "error": { "kind": kind, "message": message } }),
                );
            } else {
                eprintln!(
                    "{}.{tool_name}: {}",
                    plugin.name,
                    crate::terminal::printable(&crate::plugin::describe_call_error(&err))
                );
            }
            Ok(Outcome::Failure)
        }
        Err(host_err) => {
            if json {
                print_json(
                    &json!({ "ok": false, "plugin": plugin.name, "tool": tool_name, "error": { "kind": "plugin-error", "message": host_err.to_string() } }),
                );
            }
            Err(host_err.into())
        }
    }
}

/// The one tool plugin offering `tool_name` (only `plugin_name`, when given) and the tool's
/// argument schema; `tool` is the name as the user wrote it.
async fn find_plugin<'r>(
    reg: &'r Registry,
    tool: &str,
    plugin_name: Option<&str>,
    tool_name: &str,
) -> anyhow::Result<(&'r Plugin, String)> {
    let mut candidates = Vec::new();
    let mut known = Vec::new();
    for p in reg.all().iter().filter(|p| p.kind == PluginKind::Tool) {
        if plugin_name.is_some_and(|n| n != p.name) {
            continue;
        }
        for t in p.tool_list().await? {
            if t.name == tool_name {
                candidates.push((p, t.schema));
            } else {
                known.push(t.name);
            }
        }
    }
    match candidates.len() {
        1 => Ok(candidates.remove(0)),
        0 => {
            // A plugin named but absent (or skipped because it failed to load) says why.
            if let Some(p) = plugin_name {
                reg.get(p, Some(PluginKind::Tool))?;
            }
            anyhow::bail!(
                "no tool named `{tool}`{}; see `kiln tool list`",
                crate::suggest::hint(tool_name, known.iter().map(String::as_str))
            )
        }
        _ => anyhow::bail!(
            "tool `{tool_name}` is offered by several plugins ({}); name it as PLUGIN.{tool_name}",
            candidates
                .iter()
                .map(|(p, _)| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `kiln tool call SERVER.TOOL`: start that one MCP server, call the tool, stop the server.
async fn call_external(
    ctx: &Ctx,
    (name, cfg): (&String, &crate::config::McpServerConfig),
    tool: &str,
    args: &Value,
    json: bool,
) -> anyhow::Result<Outcome> {
    let one = std::iter::once((name.clone(), cfg.clone())).collect();
    let external = crate::mcp::ExternalTools::start(&one, &ctx.workspace).await?;
    let server = &external.servers[0];
    let found = server.tools.iter().find(|t| t.tool == tool);
    let checked = found.map(|t| {
        crate::engine::tools::args_check::check(&format!("{name}.{tool}"), &t.parameters, args)
    });
    let outcome = match &checked {
        Some(Ok(())) => {
            let out = server.call(tool, args).await;
            Some((out.text, out.is_error))
        }
        _ => None,
    };
    let hint = crate::suggest::hint(tool, server.tools.iter().map(|t| t.tool.as_str()));
    external.shutdown().await;
    let Some((text, is_error)) = outcome else {
        if let Some(Err(e)) = checked {
            return Err(e.into());
        }
        anyhow::bail!("MCP server `{name}` has no tool named `{tool}`{hint}; see `kiln tool list`");
    };
    if json {
        if is_error {
            print_json(
                &json!({ "ok": false, "mcp_server": name, "tool": tool, "error": { "kind": "tool-error", "message": text } }),
            );
        } else {
            let value = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            print_json(&json!({ "ok": true, "mcp_server": name, "tool": tool, "result": value }));
        }
    } else if is_error {
        eprintln!("{name}.{tool}: {text}");
    } else {
        println!("{text}");
    }
    Ok(if is_error {
        Outcome::Failure
    } else {
        Outcome::Success
    })
}
