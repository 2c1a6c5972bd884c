//! A plugin tool call under a deadline, as a tool outcome (every caller of the tool table): a
//! plugin's `denied` error is a refusal, its other errors and a trap are failures.

use crate::plugin::{Plugin, PluginCallError};
use kiln_protocol::outcome::ToolOutcome;
use std::time::Duration;

/// One plugin tool call, the programs it starts writing where the plugin's grant says.
pub async fn plugin_call(p: &Plugin, name: &str, args: &str, timeout: Duration) -> ToolOutcome {
    plugin_call_writing(p, name, args, timeout, p.effective.writes).await
}

/// [`plugin_call`] with the programs it starts writing only where `writes` says.
pub(crate) async fn plugin_call_writing(
    p: &Plugin,
    name: &str,
    args: &str,
    timeout: Duration,
    writes: crate::plugin::confine::Writes,
) -> ToolOutcome {
    plugin_answer(p, name, args, timeout, writes).await.0
}

/// What a plugin that failed a call says (besides the text), for `kiln tool call --json`.
pub const PLUGIN_FAILED: &str = "plugin-error";

/// [`plugin_call_writing`] with, for a call that did not work, its kind: the plugin's own
/// error's (`denied`, `not-found`, ...), `timed-out`, or [`PLUGIN_FAILED`] for a plugin that
/// failed (trap, deadline, memory) rather than answered.
pub(crate) async fn plugin_answer(
    p: &Plugin,
    name: &str,
    args: &str,
    timeout: Duration,
    writes: crate::plugin::confine::Writes,
) -> (ToolOutcome, Option<&'static str>) {
    // A built-in's first call compiles it (once per machine): not the tool's time. A failure
    // to compile comes back from the call itself.
    let _ = p.link().await;
    match tokio::time::timeout(timeout, p.tool_call_writing(name, args, writes)).await {
        Err(_) => (
            ToolOutcome::Failed(format!(
                "tool `{name}` timed out after {} s",
                timeout.as_secs_f64()
            )),
            Some("timed-out"),
        ),
        Ok(Ok(Ok(out))) => (ToolOutcome::Ok(out), None),
        Ok(Ok(Err(e))) => {
            let kind = crate::plugin::call_error_parts(&e).0;
            let text = crate::plugin::describe_call_error(&e);
            let outcome = if matches!(e, PluginCallError::Denied(_)) {
                ToolOutcome::Refused(text)
            } else {
                ToolOutcome::Failed(text)
            };
            (outcome, Some(kind))
        }
        // A plugin bug (trap, deadline, memory): reported to the model, which can go on.
        Ok(Err(e)) => (ToolOutcome::Failed(e.to_string()), Some(PLUGIN_FAILED)),
    }
}
