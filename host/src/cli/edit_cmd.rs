//! `kiln edit parse | apply`: run an edit format over an LLM response read from stdin.

use super::ctx::{Ctx, Outcome};
use super::output::print_json;
use crate::edit::{self, ApplyOptions, EditError, EditReport, Workspace};
use crate::plugin::{Plugin, PluginKind};
use anyhow::Context;
use clap::Subcommand;
use serde_json::json;
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum EditCommand {
    /// Parse a response (stdin) and print the edits it contains, or its parse errors.
    Parse {
        /// Edit format (search-replace, udiff, whole, apply-patch, or a plugin).
        #[arg(long, default_value = crate::engine::defaults::DEFAULT_FORMAT)]
        format: String,
        /// The files the LLM may change (workspace-relative).
        #[arg(long, num_args = 1..)]
        files: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Apply a response (stdin) to the workspace: every edit or none. Exit 0 when all applied,
    /// 1 when an edit was refused (nothing is written).
    Apply {
        /// Edit format.
        #[arg(long, default_value = crate::engine::defaults::DEFAULT_FORMAT)]
        format: String,
        /// The files the LLM may change (workspace-relative).
        #[arg(long, num_args = 1..)]
        files: Vec<String>,
        /// Validate and report without writing.
        #[arg(long)]
        dry_run: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("cannot read the response from stdin (is it UTF-8?)")?;
    Ok(s)
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], cmd: EditCommand) -> anyhow::Result<Outcome> {
    let format = match &cmd {
        EditCommand::Parse { format, .. } | EditCommand::Apply { format, .. } => format.clone(),
    };
    let reg = ctx
        .registry_for(extra, crate::plugin::Needed::Only(&[&format]))
        .await?;
    match cmd {
        EditCommand::Parse {
            format,
            files,
            json,
        } => {
            let plugin = reg.get(&format, Some(PluginKind::EditFormat))?;
            parse(plugin, &files, json).await
        }
        EditCommand::Apply {
            format,
            files,
            dry_run,
            json,
        } => {
            let plugin = reg.get(&format, Some(PluginKind::EditFormat))?;
            apply(ctx, plugin, &files, dry_run, json).await
        }
    }
}

/// `kiln edit parse`: the edits in the response on stdin, or its parse errors.
async fn parse(plugin: &Plugin, files: &[String], json: bool) -> anyhow::Result<Outcome> {
    let response = read_stdin()?;
    match edit::parse(plugin, &response, files).await? {
        Ok(edits) => {
            let rows: Vec<_> = edits
                .iter()
                .map(|e| json!({ "path": e.path, "kind": edit::kind_name(e.kind), "search": e.search, "replace": e.replace, "new_path": e.new_path }))
                .collect();
            if json {
                print_json(&json!({ "ok": true, "format": plugin.name, "edits": rows }));
            } else {
                for (i, e) in edits.iter().enumerate() {
                    println!(
                        "edit {} {} {}{}",
                        i + 1,
                        edit::kind_name(e.kind),
                        e.path,
                        e.new_path
                            .as_deref()
                            .map(|d| format!(" -> {d}"))
                            .unwrap_or_default()
                    );
                    for (label, text) in [("search", &e.search), ("replace", &e.replace)] {
                        if !text.is_empty() {
                            println!("  {label}:");
                            for l in text.lines() {
                                println!("    | {}", crate::terminal::printable(l));
                            }
                        }
                    }
                }
            }
            Ok(Outcome::Success)
        }
        Err(problems) => {
            if json {
                print_json(&json!({ "ok": false, "format": plugin.name, "errors": problems }));
            } else {
                for p in &problems {
                    eprintln!(
                        "parse error{}: {}",
                        p.at(),
                        crate::terminal::printable(&p.message)
                    );
                }
            }
            Ok(Outcome::Failure)
        }
    }
}

/// `kiln edit apply`: apply the response on stdin to the workspace, all files or none.
async fn apply(
    ctx: &Ctx,
    plugin: &Plugin,
    files: &[String],
    dry_run: bool,
    json: bool,
) -> anyhow::Result<Outcome> {
    let response = read_stdin()?;
    let ws = Workspace::open(&ctx.workspace)?;
    if !dry_run {
        // Ctrl-C exits, but never in the middle of writing the files.
        edit::journal::exit_on_interrupt();
    }
    let opts = ApplyOptions {
        dry_run,
        protected: ctx.config.protected(),
        ..Default::default()
    };
    let report = match edit::apply_response(plugin, &ws, &response, files, &opts).await {
        Ok(r) => r,
        // The plugin or the workspace failing is an error (exit 2); a file that cannot
        // be read or written refuses the edit like any other (exit 1, nothing written).
        Err(e @ (EditError::Plugin(_) | EditError::Workspace { .. })) => {
            return Err(e.into());
        }
        Err(e) => {
            // A file that cannot be read or written (a read-only file system, permissions)
            // is the file system's fault, not the response's: said once, as such.
            let fs_fault = matches!(e, EditError::Io { .. });
            if json {
                print_json(&json!({ "ok": false, "error": e.to_string() }));
            } else if fs_fault {
                eprintln!(
                    "nothing written: {} (the file system refused it; the response itself was not judged)",
                    crate::terminal::printable(&e.to_string())
                );
            } else {
                println!("refused: {}", crate::terminal::printable(&e.to_string()));
                eprintln!("nothing written: the response does not apply");
            }
            return Ok(Outcome::Failure);
        }
    };
    if json {
        print_json(&serde_json::to_value(&report)?);
    } else {
        render(&report);
    }
    Ok(if report.ok {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

fn render(r: &EditReport) {
    for p in &r.parse_errors {
        println!(
            "parse error{}: {}",
            p.at(),
            crate::terminal::printable(&p.message)
        );
    }
    for e in &r.edits {
        let tier = e
            .tier
            .as_deref()
            .map(|t| format!(" (tier: {t})"))
            .unwrap_or_default();
        let dest = e
            .new_path
            .as_deref()
            .map(|d| format!(" -> {d}"))
            .unwrap_or_default();
        println!(
            "{}",
            crate::terminal::printable(&format!(
                "{:<15} {} {}{dest}{tier}",
                e.status, e.kind, e.path
            ))
        );
        if let Some(err) = &e.error {
            for l in err.lines() {
                println!("    {}", crate::terminal::printable(l));
            }
        }
    }
    use crate::terminal::count;
    if r.ok {
        if r.dry_run {
            eprintln!(
                "dry run: {} would apply; nothing written",
                count(r.edits.len(), "edit", "edits")
            );
        } else {
            eprintln!(
                "{} applied; {} written, {} deleted",
                count(r.edits.len(), "edit", "edits"),
                count(r.written.len(), "file", "files"),
                r.deleted.len()
            );
        }
    } else {
        eprintln!("nothing written: the response does not apply");
    }
}
