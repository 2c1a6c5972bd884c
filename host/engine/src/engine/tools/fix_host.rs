//! What a `compile_loop` call outside a run needs from its caller (`kiln mcp`): the loop's
//! setup and a place to run it (a model, a store, progress, cancellation). The table's
//! `compile_loop` parses the call and plans the loop; the host runs it. Inside a run, the
//! loop that offers the tool gives the fix loop to run ([`RunFix`]).

use crate::engine::fix_options::{FixError, FixOptions, FixPlugins};
use crate::engine::run::RunCtx;
use crate::plugin::Plugin;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::{FixOutcome, ToolOutcome};

/// The fix loop a `compile_loop` call inside a run starts (`engine::fix::run_fix`, boxed),
/// given by the loop that offers the tool, so the tool table does not name the loop it runs
/// (the fix loop itself uses the table).
pub type RunFix = for<'a> fn(
    &'a FixOptions,
    FixPlugins<'a>,
    RunCtx<'a>,
) -> BoxFuture<'a, Result<FixOutcome, FixError>>;

/// What the caller decides beyond the call's arguments.
pub struct CompileLoopSetup {
    /// The build command the `command` runner runs.
    pub cmd: String,
    /// The edit format the nested loop's model answers in.
    pub format: String,
    /// The rest of the loop's options (iteration ceiling, default task prompt, protected
    /// paths, parent run); targets, prompt, language and runner settings come from the call.
    pub base: FixOptions,
}

/// A nested fix loop, ready to run.
pub struct CompileLoopPlan<'r> {
    /// The loop's options.
    pub fix: FixOptions,
    /// The `command` runner.
    pub runner: &'r Plugin,
    /// The edit format.
    pub format: &'r Plugin,
}

/// Runs the fix loops of `compile_loop` calls made outside a run.
pub trait FixHost: Sync {
    /// The build command and loop options, or why there are none (told to the caller).
    fn setup(&self) -> Result<CompileLoopSetup, String>;

    /// Run the planned loop; its result as the tool's outcome (see `compile_loop::outcome`).
    fn run<'a>(&'a self, plan: CompileLoopPlan<'a>) -> BoxFuture<'a, ToolOutcome>;
}
