//! `kiln tool call`: run one tool call from the command line under the same grants an agent
//! would have.

use super::{Ctx, Outcome, print_json};
use crate::plugin::{Plugin, PluginKind};
use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum ToolCommand {
    /// Call a tool: `kiln tool call read_file --args '{"path":"src/main.rs"}'`. Name it
    /// `PLUGIN.TOOL` when two plugins offer the same tool.
    Call {
        /// Tool name, or `PLUGIN.TOOL`.
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Print `{"ok": ..., "result"|"error": ...}` on stdout.
        #[arg(long)]
        json: bool,
    },
    /// List every tool of every tool plugin.
    List {
        /// One JSON object per tool, one per line.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], cmd: ToolCommand) -> anyhow::Result<Outcome> {
    let reg = ctx.registry(extra).await?;
    let tool_plugins: Vec<&Plugin> = reg
        .all()
        .iter()
        .filter(|p| p.kind == PluginKind::Tool)
        .collect();
    match cmd {
        ToolCommand::List { json } => {
            let catalog = crate::engine::agent::tool_catalog(&reg).await?;
            if json {
                for t in &catalog {
                    print_json(&serde_json::to_value(t)?);
                }
                return Ok(Outcome::Success);
            }
            let width = catalog.iter().map(|t| t.name.len()).max().unwrap_or(0);
            let from = |t: &crate::engine::agent::ToolEntry| {
                t.plugin
                    .as_deref()
                    .map_or("host (built-in)".to_string(), |p| format!("plugin {p}"))
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
        ToolCommand::Call { tool, args, json } => {
            let parsed: Value = serde_json::from_str(&args)
                .with_context(|| format!("--args is not valid JSON: {args}"))?;
            anyhow::ensure!(
                parsed.is_object(),
                "--args must be a JSON object, got {args}"
            );
            let (plugin_name, tool_name) = match tool.split_once('.') {
                Some((p, t)) => (Some(p), t),
                None => (None, tool.as_str()),
            };
            let mut candidates = Vec::new();
            for p in &tool_plugins {
                if plugin_name.is_some_and(|n| n != p.name) {
                    continue;
                }
                if p.tool_list().await?.iter().any(|t| t.name == tool_name) {
                    candidates.push(*p);
                }
            }
            let plugin = match candidates.as_slice() {
                [one] => *one,
                [] => {
                    // A plugin named but absent (or skipped because it failed to load) says why.
                    if let Some(p) = plugin_name {
                        reg.get(p, Some(PluginKind::Tool))?;
                    }
                    anyhow::bail!("no tool named `{tool}`; see `kiln tool list`")
                }
                many => anyhow::bail!(
                    "tool `{tool_name}` is offered by several plugins ({}); name it as PLUGIN.{tool_name}",
                    many.iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let args_text = parsed.to_string();
            match plugin.tool_call(tool_name, &args_text).await {
                Ok(Ok(result)) => {
                    if json {
                        let value =
                            serde_json::from_str::<Value>(&result).unwrap_or(Value::String(result));
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
    }
}
