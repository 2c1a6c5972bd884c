//! The history tools offered to the model (`get_loops`, `get_loop_detail`): earlier loops and
//! agent runs of this project, answered from the store.

use super::tool_names::{GET_LOOP_DETAIL, GET_LOOPS};
use crate::llm::ToolDef;
use crate::store::Store;
use kiln_protocol::outcome::ToolOutcome;
use serde_json::json;

/// `get_loops` takes no arguments (any it is given are ignored).
#[derive(schemars::JsonSchema)]
#[schemars(extend("properties" = {}))]
struct NoArgs {}

/// A `get_loop_detail` call's arguments (and, derived from them, the schema the model is shown).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[schemars(transform = super::tools::schema::undescribed)]
pub(crate) struct DetailArgs {
    /// The loop's id in the store.
    pub id: i64,
}

/// `get_loops`: earlier loops and agent runs of this project (the fix loop's model and the
/// agent are offered it).
pub(crate) fn get_loops_def() -> ToolDef {
    ToolDef {
        name: GET_LOOPS.into(),
        description: "List earlier fix loops and agent runs on this project (id, kind, status, stop reason, summary).".into(),
        parameters: super::tools::schema::schema_of::<NoArgs>(),
    }
}

/// `get_loop_detail`: one earlier loop's iterations, errors and edits.
pub(crate) fn get_loop_detail_def() -> ToolDef {
    ToolDef {
        name: GET_LOOP_DETAIL.into(),
        description: "Show one earlier loop: its iterations, errors and edits.".into(),
        parameters: super::tools::schema::schema_of::<DetailArgs>(),
    }
}

/// Both history tools, as the fix loop offers them.
pub(crate) fn tool_defs() -> Vec<ToolDef> {
    vec![get_loops_def(), get_loop_detail_def()]
}

/// Answer a history tool call by name (the fix loop's model calls them).
pub(crate) fn answer(store: &Store, current: i64, name: &str, args: &str) -> ToolOutcome {
    if name == GET_LOOPS {
        return loops(store, current);
    }
    match serde_json::from_str::<DetailArgs>(args) {
        Ok(a) => loop_detail(store, a.id),
        Err(_) => ToolOutcome::Failed("`id` (integer) is required".into()),
    }
}

/// The last 20 loops of the project, `current` left out.
pub(crate) fn loops(store: &Store, current: i64) -> ToolOutcome {
    match store.loops(20) {
        Ok(rows) => {
            let v: Vec<_> = rows
                .iter()
                .filter(|r| r.id != current)
                .map(|r| json!({ "id": r.id, "kind": r.kind, "status": r.status, "stop_reason": r.stop_reason, "targets": r.targets, "iters": r.iters, "summary": r.summary }))
                .collect();
            ToolOutcome::Ok(serde_json::to_string(&v).unwrap_or_default())
        }
        Err(e) => ToolOutcome::Failed(e.to_string()),
    }
}

/// One loop's iterations (stderr cut to its tail) and edits.
pub(crate) fn loop_detail(store: &Store, id: i64) -> ToolOutcome {
    match store.loop_detail(id) {
        Ok(d) => {
            let its: Vec<_> = d
                .iterations
                .iter()
                .map(|i| json!({ "n": i.n, "ok": i.ok, "exit_code": i.exit_code, "diagnostics": i.diagnostics, "summary": i.llm_summary, "stderr_tail": tail(&i.stderr, 1500) }))
                .collect();
            let edits: Vec<_> = d.edits.iter().map(|e| json!({ "iteration": e.iteration, "path": e.path, "status": e.status, "error": e.error })).collect();
            ToolOutcome::Ok(json!({ "id": id, "status": d.row.status, "stop_reason": d.row.stop_reason, "iterations": its, "edits": edits }).to_string())
        }
        Err(e) => ToolOutcome::Failed(e.to_string()),
    }
}

/// The last `budget` bytes of `s` (on a character boundary), with a marker for what is left
/// out.
pub(crate) fn tail(s: &str, budget: usize) -> String {
    if s.len() <= budget {
        return s.to_string();
    }
    let start = s.ceil_char_boundary(s.len() - budget);
    format!("[... {} earlier bytes omitted ...]\n{}", start, &s[start..])
}

#[cfg(test)]
mod store_tests;
