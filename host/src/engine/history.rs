//! The history tools offered to the model (`get_loops`, `get_loop_detail`): earlier loops and
//! agent runs of this project, answered from the store.

use crate::llm::ToolDef;
use crate::store::Store;
use serde_json::json;

/// `get_loops` and `get_loop_detail`: earlier loops and agent runs of this project, offered to
/// the fix loop's model and to the agent; answered by [`history_tool`].
pub(crate) fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "get_loops".into(),
            description: "List earlier fix loops and agent runs on this project (id, kind, status, stop reason, summary).".into(),
            parameters: json!({ "type": "object", "properties": {} }),
        },
        ToolDef {
            name: "get_loop_detail".into(),
            description: "Show one earlier loop: its iterations, errors and edits.".into(),
            parameters: json!({ "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] }),
        },
    ]
}

/// Answer a history tool call (`current` is left out of `get_loops`); `(text, is_error)`.
pub(crate) fn answer(store: &Store, current: i64, name: &str, args: &str) -> (String, bool) {
    match name {
        "get_loops" => match store.loops(20) {
            Ok(rows) => {
                let v: Vec<_> = rows
                    .iter()
                    .filter(|r| r.id != current)
                    .map(|r| json!({ "id": r.id, "kind": r.kind, "status": r.status, "stop_reason": r.stop_reason, "targets": r.targets, "iters": r.iters, "summary": r.summary }))
                    .collect();
                (serde_json::to_string(&v).unwrap_or_default(), false)
            }
            Err(e) => (e.to_string(), true),
        },
        _ => {
            let id = serde_json::from_str::<serde_json::Value>(args)
                .ok()
                .and_then(|v| v["id"].as_i64());
            let Some(id) = id else {
                return ("`id` (integer) is required".into(), true);
            };
            match store.loop_detail(id) {
                Ok(d) => {
                    let its: Vec<_> = d
                        .iterations
                        .iter()
                        .map(|i| json!({ "n": i.n, "ok": i.ok, "exit_code": i.exit_code, "diagnostics": i.diagnostics, "summary": i.llm_summary, "stderr_tail": tail(&i.stderr, 1500) }))
                        .collect();
                    let edits: Vec<_> = d.edits.iter().map(|e| json!({ "iteration": e.iteration, "path": e.path, "status": e.status, "error": e.error })).collect();
                    (json!({ "id": id, "status": d.row.status, "stop_reason": d.row.stop_reason, "iterations": its, "edits": edits }).to_string(), false)
                }
                Err(e) => (e.to_string(), true),
            }
        }
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
