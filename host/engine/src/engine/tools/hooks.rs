//! The hooks around tool calls and model calls (`[agent.hooks]`): each is a command run on
//! the same confined path as every program kiln runs, with a JSON input on stdin. The
//! before-tool hook may deny a call or rewrite its arguments.

use super::settings::ToolSettings;
use crate::llm::ToolCall;
use kiln_protocol::outcome::ToolOutcome;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// How long a hook may run.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a hook's output is kept.
const HOOK_OUTPUT: usize = 1 << 20;

/// What a hook did.
#[derive(Debug, Clone, Default)]
pub(crate) struct HookRun {
    /// It exited with status 0 (a hook that is not set counts as passing).
    pub ok: bool,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr, or why it did not run to its end.
    pub stderr: String,
}

/// The before-tool hook's verdict on one call: the arguments to use (maybe rewritten), or the
/// refusal the model is shown.
pub(crate) async fn before_tool(
    s: &ToolSettings,
    workspace: &Path,
    c: &ToolCall,
) -> Result<String, ToolOutcome> {
    let Some(h) = &s.hooks.before_tool else {
        return Ok(c.arguments.clone());
    };
    let input = json!({ "tool": c.name, "arguments": serde_json::from_str::<Value>(&c.arguments).unwrap_or(Value::Null) });
    let hook = run_hook(h, &input, workspace, s.require_confinement).await;
    let decision: Value = serde_json::from_str(hook.stdout.trim()).unwrap_or(Value::Null);
    if !hook.ok || decision["decision"] == "deny" {
        let reason = decision["reason"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| hook.stderr.trim().to_string());
        return Err(ToolOutcome::Refused(format!(
            "denied by the before-tool hook: {}",
            if reason.is_empty() {
                "no reason given".into()
            } else {
                reason
            }
        )));
    }
    Ok(match decision.get("arguments").filter(|a| a.is_object()) {
        Some(new_args) => new_args.to_string(),
        None => c.arguments.clone(),
    })
}

/// Run a hook command with `input` on stdin. A hook runs on the same confined path as every
/// program kiln runs (`plugin::run_host_program`): it reads the workspace and the system,
/// writes the workspace, has no network and only `PATH` and `HOME`, and whatever it starts
/// ends with it.
pub(crate) async fn run_hook(
    cmd: &str,
    input: &Value,
    workspace: &Path,
    require_confinement: bool,
) -> HookRun {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    if words.is_empty() {
        return HookRun {
            ok: true,
            ..Default::default()
        };
    }
    let stdin = Some(input.to_string().into_bytes());
    let failed = |stderr: String| HookRun {
        ok: false,
        stdout: String::new(),
        stderr,
    };
    match crate::plugin::run_host_program(
        &words,
        stdin,
        workspace,
        HOOK_TIMEOUT,
        HOOK_OUTPUT,
        require_confinement,
    )
    .await
    {
        Ok(f) if f.timed_out => failed(format!("hook `{cmd}` did not finish in 30 s")),
        Ok(f) => {
            let ok = f.exit_code == Some(0);
            let mut stderr = String::from_utf8_lossy(&f.stderr).into_owned();
            // A failed hook says what kiln's sandbox refused it (hooks get no grant).
            if !ok {
                for note in crate::plugin::refusal_messages(None, &f.refused) {
                    stderr.push_str(&format!("\nkiln: {note}"));
                }
            }
            HookRun {
                ok,
                stdout: String::from_utf8_lossy(&f.stdout).into_owned(),
                stderr,
            }
        }
        Err(e) => failed(format!("hook `{cmd}` could not be started: {e}")),
    }
}
