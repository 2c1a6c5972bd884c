//! Resuming a cancelled or crashed agent or loop run (`kiln agent --resume ID`, `kiln loop
//! --resume ID`). The resumed run drives the same policy again from its start, with the same
//! task (the [`TaskSpec`] the first part was started with, recorded as its `run.task` event;
//! never a command line, never an endpoint or a credential), but every answer the model already gave is served from the store
//! instead of asked again ([`next_answer`], through [`super::model::ModelSource`]), and every
//! tool call that already ran returns its stored result instead of running again
//! (`tools::replayed::act`).
//! So the conversation is the one the first part had; the turn, write and command caps count
//! the replayed calls; the replayed answers' tokens count in the run's totals and against its
//! budget. Once the stored answers run out the run goes on live, from where the first part
//! stopped (a tool call the first part started but never finished runs then).
//!
//! The state is process-wide: a command resumes one run (an agent, or a loop with its
//! phases, whose answers and results are served in the order they were recorded).

use crate::llm::{ChatResponse, ToolCall};
use crate::store::{Store, StoreError};
use crate::task_spec::TaskSpec;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A stored tool call's result.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub name: String,
    pub arguments: String,
    pub result: String,
    pub is_error: bool,
    pub ms: u64,
}

#[derive(Default)]
struct Replaying {
    answers: VecDeque<ChatResponse>,
    results: VecDeque<Stored>,
}

static REPLAYING: Mutex<Option<Replaying>> = Mutex::new(None);
static RECORD: Mutex<Option<TaskSpec>> = Mutex::new(None);

/// What a resume serves from the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Model answers.
    pub answers: usize,
    /// Tool results.
    pub results: usize,
}

/// The task (typed, without endpoints or secrets) this process's runs do, recorded with each
/// run so it can be resumed.
pub fn set_record(spec: TaskSpec) {
    *RECORD.lock().unwrap_or_else(|e| e.into_inner()) = Some(spec);
}

/// Record the task on run `id` (the run's event 0), when one was set.
pub fn on_begin(store: &mut Store, id: i64) {
    let spec = RECORD.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(spec) = spec {
        let v = serde_json::json!({ "type": "run.task", "task": spec });
        let _ = store.record_event(id, 0, "run.task", &v);
    }
}

/// What run `id` recorded as its task, as stored (to be checked by the caller: the store is
/// data a run's programs could have written).
pub fn recorded(store: &Store, id: i64) -> Result<Option<serde_json::Value>, StoreError> {
    Ok(store
        .events(id, Some("run.task"))?
        .into_iter()
        .next()
        .map(|(_, _, v)| v["task"].clone()))
}

/// Whether run `id` recorded a command line (kiln before typed records), which is never read.
pub fn has_old_invocation(store: &Store, id: i64) -> Result<bool, StoreError> {
    Ok(!store.events(id, Some("run.invocation"))?.is_empty())
}

/// Serve the answers and tool results of `runs` (in the order they were recorded) before
/// asking the model. Failed requests are skipped: they gave no answer.
pub fn start(store: &Store, runs: &[i64]) -> Result<Served, StoreError> {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for &id in runs {
        calls.extend(store.loop_detail(id)?.llm_calls);
        results.extend(store.tool_calls(id)?);
    }
    let answers: VecDeque<ChatResponse> = calls
        .into_iter()
        .filter(|c| c.error.is_none())
        .map(|c| ChatResponse {
            text: c.response,
            tool_calls: serde_json::from_value(c.tool_calls).unwrap_or_default(),
            usage: c.tokens,
            ..Default::default()
        })
        .collect();
    let results: VecDeque<Stored> = results
        .into_iter()
        .map(|t| Stored {
            name: t.name,
            arguments: t.arguments,
            result: t.result,
            is_error: t.is_error,
            ms: t.duration_ms.max(0) as u64,
        })
        .collect();
    let served = Served {
        answers: answers.len(),
        results: results.len(),
    };
    *REPLAYING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Replaying { answers, results });
    Ok(served)
}

/// The next stored answer, while there is one. When they run out the stored tool results
/// left are dropped too: from then on every call runs.
pub fn next_answer() -> Option<ChatResponse> {
    let mut g = REPLAYING.lock().unwrap_or_else(|e| e.into_inner());
    let r = g.as_mut()?;
    match r.answers.pop_front() {
        Some(a) => Some(a),
        None => {
            *g = None;
            None
        }
    }
}

/// The stored result of each call (by name and arguments, first match), when replaying.
pub(crate) fn take_results(calls: &[ToolCall]) -> Vec<Option<Stored>> {
    let mut g = REPLAYING.lock().unwrap_or_else(|e| e.into_inner());
    calls
        .iter()
        .map(|c| {
            let r = g.as_mut()?;
            let at = r
                .results
                .iter()
                .position(|s| s.name == c.name && s.arguments == c.arguments)?;
            r.results.remove(at)
        })
        .collect()
}
