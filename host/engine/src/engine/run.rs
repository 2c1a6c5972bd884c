//! The run core every loop shares: the run context ([`RunCtx`]: everything a run borrows from
//! its caller), a run's lifecycle in the store (begin, finish), its numbered
//! event stream (stored and sent to the caller), the one "ask the model" step (streaming text,
//! retries shown as they happen, cancellation, every call recorded, tokens counted, the budget
//! checked before each request), and
//! cancellation. The fix loop, the agent and the execute/review loop are policies on top.

use super::events::Event;
use super::model::ModelSource;
use super::resume::{Resumed, Stored};
use crate::llm::{ChatRequest, ChatResponse, Delta, LlmError, Usage};
use crate::plugin::Registry;
use crate::store::{NewLoop, Store, StoreError};
use crate::task_spec::TaskSpec;
use kiln_protocol::outcome::StopReason;
use std::path::Path;
use tokio::sync::watch;

/// The run context: everything a run (of any loop kind) borrows from its caller, passed
/// explicitly instead of kept in process-wide state. A nested run (a loop's phase, an agent's
/// `compile_loop`) gets one borrowed from its parent's ([`Run::split`], [`Run::nested`]).
pub struct RunCtx<'a> {
    /// Workspace root.
    pub workspace: &'a Path,
    /// Where the run, its model calls and its tool calls are recorded.
    pub store: &'a mut Store,
    /// Receives every event of the run as it happens.
    pub events: &'a mut (dyn FnMut(&Event) + Send),
    /// The model (live or replayed) with its budget; its token counter spans nested runs.
    pub model: &'a mut ModelSource,
    /// Loaded plugins (runners, edit formats, tool plugins).
    pub plugins: &'a Registry,
    /// Becomes true when the run is to stop (Ctrl-C, a client's cancellation).
    pub cancel: watch::Receiver<bool>,
    /// The task (typed, without endpoints or secrets) recorded with the run (its `run.task`
    /// event) so it can be resumed; nested runs record it too.
    pub task: Option<&'a TaskSpec>,
    /// A resumed run: the stored answers and tool results served before anything new.
    pub resumed: Option<&'a mut Resumed>,
    /// Undo's recording of the workspace for this run (and the runs nested in it).
    pub undo: &'a crate::undo::Recording,
}

/// Why an ask produced no answer.
#[derive(Debug)]
pub enum AskError {
    /// The run was cancelled while the model was answering.
    Cancelled,
    /// The transport or the model failed (already recorded in the store).
    Model(LlmError),
    /// The request would pass the budget: it was not sent.
    Budget(super::budget::BudgetExceeded),
}

/// One run of a loop: its row in the store, its events, its model.
pub struct Run<'a> {
    /// The run's id in the store.
    pub id: i64,
    /// Workspace root.
    pub workspace: &'a Path,
    /// The model (live or replayed), with its token counter and budget.
    pub model: &'a mut ModelSource,
    /// Where the run is recorded.
    pub store: &'a mut Store,
    /// Loaded plugins.
    pub plugins: &'a Registry,
    cancel: watch::Receiver<bool>,
    task: Option<&'a TaskSpec>,
    resumed: Option<&'a mut Resumed>,
    undo: &'a crate::undo::Recording,
    on_event: &'a mut (dyn FnMut(&Event) + Send),
    seq: u64,
    spent_at_start: Usage,
    log: Option<std::fs::File>,
}

impl<'a> Run<'a> {
    /// Open the run's row (refused while another loop runs on the workspace, unless `new`
    /// names it as the parent).
    pub fn begin(ctx: RunCtx<'a>, new: &NewLoop) -> Result<Run<'a>, StoreError> {
        let RunCtx {
            workspace,
            store,
            events: on_event,
            model,
            plugins,
            cancel,
            task,
            resumed,
            undo,
        } = ctx;
        let id = store.begin_loop(new)?;
        crate::undo::begin(undo, workspace, id);
        if let Some(spec) = task {
            super::resume::on_begin(store, id, spec);
        }
        Ok(Run {
            id,
            workspace,
            spent_at_start: model.spent(),
            model,
            store,
            plugins,
            cancel,
            task,
            resumed,
            undo,
            on_event,
            seq: 0,
            log: None,
        })
    }

    /// Undo's recording for this run.
    pub fn undo(&self) -> &crate::undo::Recording {
        self.undo
    }

    /// Append every answer's raw text to `log` (see `store::open_log`).
    pub fn log_answers(&mut self, log: std::fs::File) {
        self.log = Some(log);
    }

    /// Number, store and send an event. A store that cannot take it only loses the row.
    pub fn emit(&mut self, e: Event) {
        self.seq += 1;
        record(self.store, self.id, self.seq, &e);
        if may_follow_change(&e) {
            crate::undo::checkpoint(self.undo);
        }
        (self.on_event)(&e);
    }

    /// A receiver that says when the run is cancelled (for `tokio::select!` next to work that
    /// borrows the run).
    pub fn cancel_signal(&self) -> watch::Receiver<bool> {
        self.cancel.clone()
    }

    /// The user asked to stop.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Tokens of every model request since the run began (nested runs included).
    pub fn usage(&self) -> Usage {
        let now = self.model.spent();
        Usage {
            input: now.input - self.spent_at_start.input,
            cached_input: now.cached_input - self.spent_at_start.cached_input,
            cache_write: now.cache_write - self.spent_at_start.cache_write,
            output: now.output - self.spent_at_start.output,
            reasoning: now.reasoning - self.spent_at_start.reasoning,
        }
    }

    /// Ask the model once. Text deltas go to the caller as `text.delta` events when
    /// `live_text` (not stored: the whole answer is, with the call); retries are shown and
    /// stored as they happen. Every call, failed ones too, is recorded under `step`.
    pub async fn ask(
        &mut self,
        step: u32,
        req: &ChatRequest,
        live_text: bool,
    ) -> Result<ChatResponse, AskError> {
        if let Err(e) = self.model.check_budget(req) {
            self.emit(Event::Error {
                message: e.to_string(),
            });
            return Err(AskError::Budget(e));
        }
        let mut cancel = self.cancel.clone();
        let Run {
            id,
            model,
            store,
            on_event,
            seq,
            resumed,
            ..
        } = self;
        // A resumed run: the answers the model already gave, before any new request.
        let stored = resumed.as_deref_mut().and_then(Resumed::next_answer);
        let mut sink = |d: Delta| {
            let e = match d {
                Delta::Text(text) if live_text => Event::TextDelta { text },
                Delta::Text(_) => return,
                other => match Event::from_retry(&other) {
                    Some(e) => e,
                    None => return,
                },
            };
            *seq += 1;
            record(store, *id, *seq, &e);
            on_event(&e);
        };
        let resp = tokio::select! {
            r = async {
                match stored {
                    Some(answer) => Ok(model.served(answer)),
                    None => model.complete_streaming(req, &mut sink).await,
                }
            } => r,
            _ = cancelled(&mut cancel) => return Err(AskError::Cancelled),
        };
        let label = self.model.label();
        match resp {
            Ok(r) => {
                let _ = self
                    .store
                    .record_llm_call(self.id, step as i64, &label, Ok(&r));
                if let Some(log) = &mut self.log {
                    use std::io::Write;
                    // A log that cannot be written only loses the log.
                    let _ = writeln!(
                        log,
                        "=== loop {} iteration {step} at {} ===\n{}",
                        self.id,
                        crate::clock::now_ms(),
                        r.text
                    );
                }
                Ok(r)
            }
            Err(e) => {
                let _ =
                    self.store
                        .record_llm_call(self.id, step as i64, &label, Err(&e.to_string()));
                Err(AskError::Model(e))
            }
        }
    }

    /// Close the run's row with its status, reason and summary.
    pub fn finish(
        &mut self,
        reason: StopReason,
        summary: &str,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        crate::undo::finish(self.undo, self.id);
        self.store
            .finish_loop(self.id, reason.status(), reason, summary, error)
    }

    /// Borrow everything for a nested run whose events go to this run's caller (not to this
    /// run's stream in the store: the nested run stores its own).
    pub fn split(&mut self) -> RunCtx<'_> {
        RunCtx {
            workspace: self.workspace,
            store: self.store,
            events: &mut *self.on_event,
            model: self.model,
            plugins: self.plugins,
            cancel: self.cancel.clone(),
            task: self.task,
            resumed: self.resumed.as_deref_mut(),
            undo: self.undo,
        }
    }

    /// Borrow the model and the store for a nested run (a compile_loop called by an agent),
    /// whose events go to `on_event` and whose cancellation follows this run's.
    pub fn nested<'b>(&'b mut self, on_event: &'b mut (dyn FnMut(&Event) + Send)) -> RunCtx<'b> {
        RunCtx {
            workspace: self.workspace,
            store: self.store,
            events: on_event,
            model: self.model,
            plugins: self.plugins,
            cancel: self.cancel.clone(),
            task: self.task,
            resumed: self.resumed.as_deref_mut(),
            undo: self.undo,
        }
    }

    /// The stored result of each call (by name and arguments, first match), when the run
    /// resumes one that stored them.
    pub(crate) fn take_stored(&mut self, calls: &[crate::llm::ToolCall]) -> Vec<Option<Stored>> {
        match self.resumed.as_deref_mut() {
            Some(r) => r.take_results(calls),
            None => calls.iter().map(|_| None).collect(),
        }
    }
}

/// The store recorder: event `seq` of run `id` in the store, by its type (every event but
/// streamed model text, whose whole answer is stored with its call). A store that cannot take
/// it only loses the row.
fn record(store: &mut Store, id: i64, seq: u64, e: &Event) {
    if matches!(e, Event::TextDelta { .. }) {
        return;
    }
    let v = e.to_json(seq, crate::clock::now_ms());
    let _ = store.record_event(id, seq, e.name(), &v);
}

/// Whether `e` may follow a change to the workspace (an applied edit, a runner's result, a
/// tool call, a turn, an iteration, a review round or phase): undo's record is brought up to
/// date then.
fn may_follow_change(e: &Event) -> bool {
    matches!(
        e,
        Event::EditApplied { .. }
            | Event::RunnerFinished { .. }
            | Event::LoopIteration { .. }
            | Event::ToolEnd { .. }
            | Event::TurnEnd { .. }
            | Event::RoundEnd { .. }
            | Event::PhaseStart { .. }
    )
}

/// Resolves once `rx` says the run is cancelled (Ctrl-C).
pub async fn cancelled(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
