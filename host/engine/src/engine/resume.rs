//! Resuming a cancelled or crashed agent or loop run (`kiln agent --resume ID`, `kiln loop
//! --resume ID`). The resumed run drives the same policy again from its start, with the same
//! task (the [`TaskSpec`] the first part was started with, recorded as its `run.task` event;
//! never a command line, never an endpoint or a credential), but every answer the model already gave is served from the store
//! instead of asked again (`Resumed::next_answer`, in `Run::ask`), and every
//! tool call that already ran returns its stored result instead of running again
//! (`tools::replayed::act`).
//! So the conversation is the one the first part had; the turn, write and command caps count
//! the replayed calls; the replayed answers' tokens count in the run's totals and against its
//! budget. Once the stored answers run out the run goes on live, from where the first part
//! stopped (a tool call the first part started but never finished runs then).
//!
//! Nothing here is process-wide: what a resume serves is a [`Resumed`] value the command
//! builds ([`Resumed::load`]) and hands to the run in its [`super::run::RunCtx`]; a loop's
//! phases borrow it in turn (answers and results are served in the order they were recorded).
//! The task a run records (`run.task`, so it can be resumed) is passed the same way.

use crate::llm::{ChatResponse, ToolCall};
use crate::store::{Store, StoreError};
use crate::task_spec::TaskSpec;
use std::collections::VecDeque;

/// A stored tool call's result.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The tool's name as the model called it.
    pub name: String,
    /// Its arguments (JSON text).
    pub arguments: String,
    /// What it returned (or its error).
    pub result: String,
    /// It failed.
    pub is_error: bool,
    /// Wall time of the call, in ms.
    pub ms: u64,
}

/// A resumed run, passed explicitly to the run ([`super::run::RunCtx::resumed`]): what the
/// interrupted run's model answered and its tools returned, served before anything new, and
/// the task it was started with.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The model's answers, in the order they were given.
    pub answers: VecDeque<ChatResponse>,
    /// The tool calls' results, in the order they were recorded.
    pub results: VecDeque<Stored>,
    /// The task the run was started with (checked by the caller).
    pub spec: TaskSpec,
}

/// What a resume serves from the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Model answers.
    pub answers: usize,
    /// Tool results.
    pub results: usize,
}

/// Record `spec` on run `id` (the run's event 0): the task (typed, without endpoints or
/// secrets) the run does, so it can be resumed.
pub(crate) fn on_begin(store: &mut Store, id: i64, spec: &TaskSpec) {
    let v = serde_json::json!({ "type": "run.task", "task": spec });
    let _ = store.record_event(id, 0, "run.task", &v);
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

impl Resumed {
    /// The answers and tool results of `runs` (in the order they were recorded), to be served
    /// before the model is asked, for a run of task `spec`. Failed requests are skipped: they
    /// gave no answer.
    pub fn load(store: &Store, runs: &[i64], spec: TaskSpec) -> Result<Resumed, StoreError> {
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
        Ok(Resumed {
            answers,
            results,
            spec,
        })
    }

    /// How many answers and tool results are left to serve.
    pub fn served(&self) -> Served {
        Served {
            answers: self.answers.len(),
            results: self.results.len(),
        }
    }

    /// The next stored answer, while there is one. When they run out the stored tool results
    /// left are dropped too: from then on every call runs.
    pub(crate) fn next_answer(&mut self) -> Option<ChatResponse> {
        let next = self.answers.pop_front();
        if next.is_none() {
            self.results.clear();
        }
        next
    }

    /// The stored result of each call (by name and arguments, first match).
    pub(crate) fn take_results(&mut self, calls: &[ToolCall]) -> Vec<Option<Stored>> {
        calls
            .iter()
            .map(|c| {
                let at = self
                    .results
                    .iter()
                    .position(|s| s.name == c.name && s.arguments == c.arguments)?;
                self.results.remove(at)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_spec::Kind;

    fn stored(name: &str, args: &str) -> Stored {
        Stored {
            name: name.into(),
            arguments: args.into(),
            result: format!("{name} {args}"),
            is_error: false,
            ms: 1,
        }
    }

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn results_are_served_by_name_and_arguments_until_the_answers_run_out() {
        let mut r = Resumed {
            answers: VecDeque::from([ChatResponse {
                text: "one".into(),
                ..Default::default()
            }]),
            results: VecDeque::from([stored("read", "{}"), stored("read", "{\"a\":1}")]),
            spec: TaskSpec::new(Kind::Agent),
        };
        assert_eq!(
            r.served(),
            Served {
                answers: 1,
                results: 2
            }
        );
        assert_eq!(r.next_answer().map(|a| a.text).as_deref(), Some("one"));
        let got = r.take_results(&[call("read", "{\"a\":1}"), call("write", "{}")]);
        assert_eq!(
            got[0].as_ref().map(|s| s.result.as_str()),
            Some("read {\"a\":1}")
        );
        assert!(got[1].is_none());
        // Out of answers: the results left are dropped, every later call runs.
        assert!(r.next_answer().is_none());
        assert!(r.take_results(&[call("read", "{}")])[0].is_none());
    }
}
