//! Tool dispatch shared by every tool-using loop: the table of tools a model is offered (tool
//! plugins, the host's built-ins, MCP servers' tools), the before/after hooks (run for every
//! call, batches included), read-only calls in parallel, per-call timeouts, cancellation, and
//! the record of each call in the store and the event stream.
//!
//! Each built-in tool is one file here that holds its argument type, schema, kind and
//! handler (a `ToolHandler`, in `handler.rs`); `registry.rs` lists them. Every call ends in a
//! typed [`ToolOutcome`](kiln_protocol::outcome::ToolOutcome): ok, failed, or refused.
//!
//! This table is kiln's one tool surface: `kiln mcp` and `kiln tool call` serve it
//! ([`Toolbox::served`], `Toolbox::call_bare`) under its names, and argument schemas are
//! derived from the types the handlers deserialize (`schema.rs`).

mod apply_edit;
pub mod args_check;
mod caps;
mod catalog;
pub mod compile_loop;
mod dispatch;
mod edits;
mod evaluate_work;
mod final_answer;
pub mod fix_host;
mod generate_patch;
pub(crate) mod handler;
mod history;
mod hooks;
pub(crate) mod loop_stop;
pub mod plugin_call;
mod registry;
pub(crate) mod replayed;
pub mod result_text;
pub(crate) mod schema;
mod settings;
pub mod submit_review;
mod table;
mod write_file;
mod write_patch;

pub(crate) use caps::{Changes, cap};
pub use catalog::{ToolEntry, tool_catalog, tool_catalog_with};
pub use compile_loop::compile_loop_tool;
pub use dispatch::Answer;
pub use dispatch::MAX_CALLS_PER_TURN;
pub(crate) use dispatch::{CallResult, Turn, over_cap};
pub(crate) use final_answer::FinalAnswerArgs;
pub use handler::Kind;
pub(crate) use hooks::run_hook;
pub use plugin_call::plugin_call;
pub use registry::is_builtin;
pub use settings::ToolSettings;
pub use table::{Imp, Toolbox};
