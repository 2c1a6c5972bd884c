//! Loop kinds. A loop kind is a type implementing [`LoopKind`]: what it is called, how its run
//! is recorded, whether an interrupted run can be resumed, and how it runs in a [`RunCtx`]
//! (the store, the event stream, the model with its budget, the plugins, cancellation), as
//! codex's `SessionTask` is. Each kind is registered once, in [`KINDS`], which the command
//! line reads (which commands resume, what a run's kind is called).
//!
//! The kinds today: [`Fix`] (`kiln fix`), [`Agent`] (`kiln agent`) and [`ExecuteReview`]
//! (`kiln loop`). Their policies live in `fix`, `agent` and `review`; the run core they share
//! in `run`.

use super::agent::{AgentError, AgentOptions, run_agent};
use super::fix::{FixError, FixOptions, FixPlugins, run_fix};
use super::review::{LoopError, LoopOptions, run_loop};
use super::run::RunCtx;
use crate::llm::Message;
use crate::store::RunKind;
use kiln_protocol::outcome::{AgentResult, FixOutcome, LoopRunResult};
use std::future::Future;

/// A kind of loop: a type holding what one run of it is to do.
pub trait LoopKind {
    /// Its name: the command (`kiln NAME`) and the kind of its runs in `kiln history`.
    const NAME: &'static str;
    /// How its top-level run is recorded in the store.
    const RUN_KIND: RunKind;
    /// Whether an interrupted run can be resumed (`kiln NAME --resume ID`).
    const RESUMABLE: bool;
    /// What a run that started returns: every end, a failure of the model or a plugin
    /// included, is an output with its stop reason.
    type Output;
    /// Why the run could not start, or a failure of the host.
    type Error: std::error::Error;
    /// Run to its end in `ctx`.
    fn run(self, ctx: RunCtx<'_>)
    -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

/// What the command line knows of a loop kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    /// [`LoopKind::NAME`].
    pub name: &'static str,
    /// [`LoopKind::RUN_KIND`].
    pub run_kind: RunKind,
    /// [`LoopKind::RESUMABLE`].
    pub resumable: bool,
}

const fn info<K: LoopKind>() -> KindInfo {
    KindInfo {
        name: K::NAME,
        run_kind: K::RUN_KIND,
        resumable: K::RESUMABLE,
    }
}

/// Every loop kind, registered once.
pub const KINDS: &[KindInfo] = &[
    info::<Fix<'static>>(),
    info::<Agent<'static>>(),
    info::<ExecuteReview<'static>>(),
];

/// The registered kind called `name`.
pub fn kind_named(name: &str) -> Option<&'static KindInfo> {
    KINDS.iter().find(|k| k.name == name)
}

/// `kiln fix`: the compile-and-fix loop over target files (or the whole project).
pub struct Fix<'a> {
    /// What to run.
    pub opts: &'a FixOptions,
    /// The runner, edit format and (project mode) tool plugin it drives.
    pub plugins: FixPlugins<'a>,
}

impl LoopKind for Fix<'_> {
    const NAME: &'static str = "fix";
    const RUN_KIND: RunKind = RunKind::Fix;
    const RESUMABLE: bool = false;
    type Output = FixOutcome;
    type Error = FixError;

    fn run(self, ctx: RunCtx<'_>) -> impl Future<Output = Result<FixOutcome, FixError>> + Send {
        run_fix(self.opts, self.plugins, ctx)
    }
}

/// `kiln agent`: one task, continuing a conversation.
pub struct Agent<'a> {
    /// The task.
    pub task: &'a str,
    /// The conversation so far (interactive mode keeps it).
    pub history: Vec<Message>,
    /// What to run.
    pub opts: &'a AgentOptions,
}

impl LoopKind for Agent<'_> {
    const NAME: &'static str = "agent";
    const RUN_KIND: RunKind = RunKind::Agent;
    const RESUMABLE: bool = true;
    type Output = AgentResult;
    type Error = AgentError;

    fn run(self, ctx: RunCtx<'_>) -> impl Future<Output = Result<AgentResult, AgentError>> + Send {
        run_agent(self.task, self.history, self.opts, ctx)
    }
}

/// `kiln loop`: the execute/review loop over a task file.
pub struct ExecuteReview<'a> {
    /// What to run.
    pub opts: &'a LoopOptions,
}

impl LoopKind for ExecuteReview<'_> {
    const NAME: &'static str = "loop";
    const RUN_KIND: RunKind = RunKind::Loop;
    const RESUMABLE: bool = true;
    type Output = LoopRunResult;
    type Error = LoopError;

    fn run(self, ctx: RunCtx<'_>) -> impl Future<Output = Result<LoopRunResult, LoopError>> + Send {
        run_loop(self.opts, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_registered_once_under_the_name_its_runs_are_recorded_as() {
        for k in KINDS {
            assert_eq!(KINDS.iter().filter(|o| o.name == k.name).count(), 1);
            assert_eq!(k.run_kind.as_str(), k.name);
            assert_eq!(kind_named(k.name), Some(k));
        }
        let resumable: Vec<_> = KINDS
            .iter()
            .filter(|k| k.resumable)
            .map(|k| k.name)
            .collect();
        assert_eq!(resumable, ["agent", "loop"]);
    }
}
