//! kiln: a host for autonomous coding loops whose runners, edit formats and tools are
//! sandboxed WebAssembly components.
//!
//! This crate is the top of the graph: the CLI (`cli`), the batch fleet that drives many runs
//! (`batch`), the HTML report that reads them back (`report`) and the retention of kiln's
//! state (`gc`). It re-exports the crates below under the names the code has always used
//! (`kiln::engine`, `kiln::plugin`, `kiln::store`, ...). Nothing imports it; `anyhow` is used
//! only in `cli`, every other error is typed.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod batch;
pub mod cli;
pub mod gc;
pub mod report;

pub use kiln_config as config;
pub use kiln_config::{path, suggest};
pub use kiln_engine::{edit, engine, mcp, task_spec, undo};
pub use kiln_llm as llm;
pub use kiln_plugin as plugin;
pub use kiln_protocol as protocol;
pub use kiln_protocol::{clock, terminal};
pub use kiln_state as state_dir;
pub use kiln_store as store;
