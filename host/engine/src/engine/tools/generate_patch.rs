//! `generate_patch`: a separate model call writes the change. It is shown the files and the
//! instruction and answers with an edit, which kiln dry-runs (one failed attempt is fed back)
//! and then applies (`apply`, default true) or returns unapplied.

use super::edits::{edit_outcome, format};
use super::handler::{Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::{edit_format, schema_of, undescribed};
use super::settings::ToolSettings;
use crate::edit::{self, ApplyOptions, Workspace};
use crate::engine::run::{AskError, Run};
use crate::engine::tool_names::GENERATE_PATCH;
use crate::llm::{ChatRequest, Message, ToolDef};
use crate::plugin::Plugin;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The `generate_patch` handler (listed in `registry.rs`).
pub(crate) struct GeneratePatch;

/// A `generate_patch` call's arguments (and, derived from them, the schema the model is shown).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = undescribed,
    extend("required" = ["instruction", "paths"])
)]
struct Args {
    instruction: String,
    /// Missing reads as none, which the call refuses with its own message.
    #[serde(default)]
    #[schemars(length(min = 1))]
    paths: Vec<String>,
    #[serde(default)]
    #[schemars(schema_with = "edit_format")]
    format: Option<String>,
    /// Write the edit (default), or only return it.
    apply: Option<bool>,
}

impl ToolHandler for GeneratePatch {
    fn name(&self) -> &'static str {
        GENERATE_PATCH
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            GENERATE_PATCH,
            "Have a separate model call write the change: it is shown the files and the instruction and answers with an edit, which kiln checks (one failed attempt is fed back) and then applies (`apply`, default true) or returns unapplied.",
            schema_of::<Args>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Write
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            match generate(cx, args).await {
                Ok(o) | Err(o) => o,
            }
        })
    }
}

/// Ask for the edit (twice at most), then apply it or return it.
async fn generate(cx: Ctx<'_, '_>, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let a: Args = parse_args(GENERATE_PATCH, args)?;
    if a.paths.is_empty() {
        return Err(ToolOutcome::Failed(
            "`paths` (one or more files) is required".into(),
        ));
    }
    let s = cx.settings;
    let fmt = format(
        cx.registry,
        a.format.as_deref().unwrap_or(&s.default_format),
    )?;
    let instructions = fmt
        .format_instructions(a.paths.len() > 1)
        .await
        .map_err(|e| ToolOutcome::Failed(e.to_string()))?;
    let (files, shown) =
        show_files(cx.ws, &a.paths).map_err(|e| ToolOutcome::Failed(e.to_string()))?;
    let mut req = ChatRequest {
        system: Some(format!(
            "You write code changes. Answer only with the edit, in this format:\n\n{instructions}"
        )),
        messages: vec![Message::User {
            text: format!("## Instruction\n{}\n\n## Files\n{files}", a.instruction),
        }],
        tools: vec![],
        max_tokens: None,
    };
    let opts = ApplyOptions {
        dry_run: true,
        shown,
        protected: s.protected.clone(),
        ..Default::default()
    };
    let (answer, attempt) =
        checked_answer(cx.run, s, fmt, cx.ws, &a.paths, &opts, &mut req).await?;
    if a.apply == Some(false) {
        return Ok(ToolOutcome::Ok(
            json!({ "applied": false, "format": fmt.name, "patch": answer, "attempts": attempt })
                .to_string(),
        ));
    }
    let apply = ApplyOptions {
        dry_run: false,
        ..opts
    };
    // A built-in format's first use compiles it: not the tool's time.
    let _ = fmt.link().await;
    let fut = edit::apply_response(fmt, cx.ws, &answer, &a.paths, &apply);
    let r = tokio::time::timeout(s.timeout, fut).await;
    match edit_outcome(GENERATE_PATCH, r, s.timeout, cx.changed) {
        ToolOutcome::Ok(text) => Ok(ToolOutcome::Ok(
            json!({ "applied": true, "format": fmt.name, "patch": answer, "attempts": attempt, "report": serde_json::from_str::<Value>(&text).unwrap_or(Value::Null) }).to_string(),
        )),
        refused_or_failed => Err(refused_or_failed),
    }
}

/// The model's edit that passes the dry run, and on which attempt (a failed first attempt is
/// fed back once).
async fn checked_answer(
    run: &mut Run<'_>,
    s: &ToolSettings,
    fmt: &Plugin,
    ws: &Workspace,
    paths: &[String],
    opts: &ApplyOptions,
    req: &mut ChatRequest,
) -> Result<(String, u32), ToolOutcome> {
    for attempt in 1..=2 {
        let answer = match tokio::time::timeout(s.timeout, run.ask(0, req, false)).await {
            Err(_) => return Err(ToolOutcome::Failed("generate_patch timed out".into())),
            Ok(Err(AskError::Cancelled)) => return Err(ToolOutcome::Failed("cancelled".into())),
            Ok(Err(AskError::Budget(e))) => return Err(ToolOutcome::Failed(e.to_string())),
            Ok(Err(AskError::Model(e))) => {
                return Err(ToolOutcome::Failed(format!("the model call failed: {e}")));
            }
            Ok(Ok(r)) => r.text,
        };
        let report = edit::apply_response(fmt, ws, &answer, paths, opts)
            .await
            .map_err(|e| ToolOutcome::Failed(e.to_string()))?;
        if report.ok {
            return Ok((answer, attempt));
        }
        let why = report.feedback().unwrap_or_else(|| "no edit found".into());
        if attempt == 2 {
            return Err(ToolOutcome::Failed(format!(
                "the generated edit did not apply after one retry:\n{why}\n\nThe edit:\n{answer}"
            )));
        }
        req.messages.push(Message::Assistant {
            text: answer,
            tool_calls: vec![],
        });
        req.messages.push(Message::User {
            text: format!("That edit does not apply:\n{why}\nAnswer again with an edit that applies to the files as shown."),
        });
    }
    unreachable!("two attempts end by returning")
}

/// The files as a prompt shows them, with the fingerprints of exactly that text (the stale
/// check's reference).
fn show_files(
    ws: &Workspace,
    paths: &[String],
) -> Result<(String, BTreeMap<String, String>), edit::EditError> {
    let mut shown = BTreeMap::new();
    let mut files = String::new();
    for p in paths {
        match ws.read(p)? {
            Some(t) => {
                shown.insert(p.clone(), edit::fingerprint(&t));
                files.push_str(&format!(
                    "{p}\n```\n{t}{}```\n\n",
                    if t.ends_with('\n') { "" } else { "\n" }
                ));
            }
            None => files.push_str(&format!("{p} does not exist yet.\n\n")),
        }
    }
    Ok((files, shown))
}
