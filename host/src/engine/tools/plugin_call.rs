//! A plugin tool call under a deadline, as a tool outcome (the agent and `kiln mcp`): a
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
    match tokio::time::timeout(timeout, p.tool_call_writing(name, args, writes)).await {
        Err(_) => ToolOutcome::Failed(format!(
            "tool `{name}` timed out after {} s",
            timeout.as_secs_f64()
        )),
        Ok(Ok(Ok(out))) => ToolOutcome::Ok(out),
        Ok(Ok(Err(e @ PluginCallError::Denied(_)))) => {
            ToolOutcome::Refused(crate::plugin::describe_call_error(&e))
        }
        Ok(Ok(Err(e))) => ToolOutcome::Failed(crate::plugin::describe_call_error(&e)),
        // A plugin bug (trap, deadline, memory): reported to the model, which can go on.
        Ok(Err(e)) => ToolOutcome::Failed(e.to_string()),
    }
}
