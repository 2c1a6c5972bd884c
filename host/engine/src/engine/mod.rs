//! The loops, as policies over one run core (`run`: the run context, lifecycle, events, the
//! ask-the-model step, cancellation) and one tool dispatcher (`tools`), emitting one typed
//! event stream. Each loop kind is a type implementing `kind::LoopKind`, registered in
//! `kind::KINDS`.

pub mod agent;
pub mod budget;
pub mod check_files;
pub mod command_policy;
pub mod defaults;
pub mod error;
pub mod events;
pub mod fix;
mod fix_options;
pub(crate) mod history;
pub mod kind;
pub mod model;
pub mod resume;
pub mod review;
pub mod run;
pub mod tool_names;
pub mod tools;

pub use events::Event;
pub use fix::{FixOptions, run_fix};
pub use kiln_protocol::outcome;
pub use model::{ModelSource, Replay};
pub use outcome::{AgentResult, FixOutcome, LoopStatus, StopReason};
pub use tools::compile_loop_tool;
