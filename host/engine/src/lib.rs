//! kiln-engine: what a run does. It owns the loops (`engine`: fix, agent and execute/review as
//! policies over one run core and its `RunCtx`, the agent's tool table that `kiln mcp` and
//! `kiln tool call` adapt), the one writer of workspace files and its journal (`edit`), undo
//! (`undo`), the MCP client for configured servers (`mcp`) and the batch task line
//! (`task_spec`).
//!
//! It stands on kiln-plugin (the components it calls), kiln-store (where runs are recorded),
//! kiln-llm (the model), kiln-config and kiln-protocol. It must never import the CLI, the batch
//! fleet or the HTML report (crate `kiln`): those drive and read runs, a run never calls them.
//! The modules below still name the crates under them by their old paths (`crate::plugin`,
//! `crate::store`, ...), re-exported here, as crate `kiln` does.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod edit;
pub mod engine;
pub mod mcp;
pub mod task_spec;
pub mod undo;

pub use kiln_config as config;
pub use kiln_config::{path, suggest};
pub use kiln_llm as llm;
pub use kiln_plugin as plugin;
pub use kiln_protocol as protocol;
pub use kiln_protocol::{clock, terminal};
pub use kiln_state as state_dir;
pub use kiln_store as store;
