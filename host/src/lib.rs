//! kiln: a host for autonomous coding loops whose runners, edit formats and tools are
//! sandboxed WebAssembly components.

pub mod batch;
pub mod cli;
pub mod config;
pub mod edit;
pub mod engine;
#[path = "../llm/src/lib.rs"]
pub mod llm;
pub mod mcp;
pub mod path;
pub mod plugin;
pub mod report;
pub mod state_dir;
pub mod store;
pub mod suggest;
pub mod task_spec;
#[path = "../protocol/src/terminal.rs"]
pub mod terminal;
pub mod undo;

pub use kiln_protocol as protocol;
pub use kiln_protocol::clock;
