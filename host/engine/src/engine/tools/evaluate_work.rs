//! `evaluate_work`: a separate reviewer's structured feedback (score 0-10, strengths,
//! improvements, suggestions) on files (default: the files this run changed).

use super::caps::cap;
use super::handler::{Ctx, Kind, ToolHandler, def, parse_args};
use super::schema::{schema_of, undescribed};
use super::settings::ToolSettings;
use crate::edit::Workspace;
use crate::engine::run::AskError;
use crate::engine::tool_names::EVALUATE_WORK;
use crate::llm::{ChatRequest, Message, ToolDef};
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::Deserialize;
use serde_json::{Value, json};

/// The `evaluate_work` handler (listed in `registry.rs`).
pub(crate) struct EvaluateWork;

/// An `evaluate_work` call's arguments (and, derived from them, the schema the model is shown).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields, transform = undescribed)]
struct Args {
    /// Files to review; none: the files this run changed.
    #[serde(default)]
    paths: Vec<String>,
    /// What to judge by.
    criteria: Option<String>,
}

impl ToolHandler for EvaluateWork {
    fn name(&self) -> &'static str {
        EVALUATE_WORK
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        def(
            EVALUATE_WORK,
            "Ask a separate reviewer for structured feedback (score 0-10, strengths, improvements, suggestions) on files (default: the files changed in this run) or on the work so far.",
            schema_of::<Args>(),
        )
    }

    fn kind(&self) -> Kind {
        Kind::Other
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            let a: Args = match parse_args(EVALUATE_WORK, args) {
                Ok(a) => a,
                Err(o) => return o,
            };
            let paths = if a.paths.is_empty() {
                cx.changed.files.clone()
            } else {
                a.paths
            };
            let material = material(cx.ws, &paths);
            let criteria = a
                .criteria
                .as_deref()
                .unwrap_or("correctness, clarity, completeness");
            let req = ChatRequest {
                system: Some("You are a strict code reviewer. Reply with one JSON object only: {\"score\": 0-10, \"strengths\": [..], \"improvements\": [..], \"suggestions\": [..]}.".into()),
                messages: vec![Message::User { text: format!("Criteria: {criteria}\n\n{material}") }],
                tools: vec![],
                max_tokens: None,
            };
            match tokio::time::timeout(cx.settings.timeout, cx.run.ask(0, &req, false)).await {
                Err(_) => ToolOutcome::Failed("evaluate_work timed out".into()),
                Ok(Err(AskError::Cancelled)) => ToolOutcome::Failed("cancelled".into()),
                Ok(Err(AskError::Budget(e))) => ToolOutcome::Failed(e.to_string()),
                Ok(Err(AskError::Model(e))) => {
                    ToolOutcome::Failed(format!("the reviewer call failed: {e}"))
                }
                Ok(Ok(r)) => ToolOutcome::Ok(feedback(r.text.trim())),
            }
        })
    }
}

/// The files as the reviewer is shown them (each capped at 32 KiB).
fn material(ws: &Workspace, paths: &[String]) -> String {
    let mut material = String::new();
    for p in paths {
        match ws.read(p) {
            Ok(Some(t)) => material.push_str(&format!("{p}\n```\n{}\n```\n", cap(&t, 32 * 1024))),
            Ok(None) => material.push_str(&format!("{p}: (deleted in this run)\n")),
            Err(_) => material.push_str(&format!("{p}: (cannot be read)\n")),
        }
    }
    if material.is_empty() {
        material.push_str("(no files were named and none has been changed yet)\n");
    }
    material
}

/// The reviewer's JSON object when it gave one with a score, else its text as `feedback`.
fn feedback(text: &str) -> String {
    let json_part = text
        .find('{')
        .and_then(|s| text.rfind('}').map(|e| &text[s..=e]));
    match json_part.and_then(|j| serde_json::from_str::<Value>(j).ok()) {
        Some(fb) if fb.get("score").is_some() => fb.to_string(),
        _ => json!({ "feedback": text }).to_string(),
    }
}
