//! What the history tools (`get_loops`, `get_loop_detail`, in `tools/history.rs`) answer:
//! earlier loops and agent runs of this project, from the store.

use crate::store::Store;
use kiln_protocol::outcome::ToolOutcome;
use serde_json::json;

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
