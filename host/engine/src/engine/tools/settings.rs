//! How a run's tools are offered and run: timeouts, hooks, the default edit format, the
//! compile command, protected paths, MCP servers' tools, the tool filter and the command
//! allowlist.

use crate::config::Hooks;
use crate::engine::defaults::DEFAULT_FORMAT;
use std::time::Duration;

/// How tools are offered and run.
#[derive(Debug, Clone)]
pub struct ToolSettings {
    /// Run every call in order (no parallel read-only calls).
    pub sequential: bool,
    /// How long one call may take before it is reported to the model as timed out.
    pub timeout: Duration,
    /// Commands run before and after each tool call (`[agent.hooks]`).
    pub hooks: Hooks,
    /// Default edit format of `write_patch`, `generate_patch` and `compile_loop`.
    pub default_format: String,
    /// `compile_loop`'s runner command (the `command` runner); the tool is offered only
    /// when this is set.
    pub compile_cmd: Option<String>,
    /// Paths no edit may touch (`[sandbox] protect` on top of kiln's own files).
    pub protected: crate::path::Protected,
    /// Tools of MCP servers (`[mcp.servers]`), offered as `SERVER__tool`; they run outside
    /// the sandbox. Read-only ones (by the server's hint) count as reads, the others against
    /// the command cap.
    pub external: crate::mcp::ExternalTools,
    /// Offer only these tools (by name); `write_file` and `submit_review` are offered only
    /// when named here.
    pub only: Option<Vec<String>>,
    /// Programs `run_cmd` may run in this loop, checked by the host before the plugin's own
    /// grant (the review phase's narrow list); `None`: the grant alone decides.
    pub command_allowlist: Option<Vec<String>>,
    /// Where the programs `run_cmd` starts may write (the review phase: nowhere).
    pub program_writes: crate::plugin::confine::Writes,
    /// Refuse to run hooks the kernel cannot fully confine (`[sandbox] require_confinement`).
    pub require_confinement: bool,
    /// The fix loop `compile_loop` runs inside a run (the agent gives `engine::fix`'s);
    /// `None`: the call fails saying so.
    pub fix_loop: Option<super::fix_host::RunFix>,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            sequential: false,
            timeout: Duration::from_secs(30),
            hooks: Hooks::default(),
            default_format: DEFAULT_FORMAT.into(),
            compile_cmd: None,
            protected: crate::path::Protected::default(),
            external: crate::mcp::ExternalTools::default(),
            only: None,
            command_allowlist: None,
            program_writes: crate::plugin::confine::Writes::default(),
            require_confinement: false,
            fix_loop: None,
        }
    }
}
