//! The loops, as state machines over the plugin runtime, the LLM transport and the store,
//! emitting one typed event stream.

pub mod agent;
pub mod events;
pub mod fix;
pub mod model;

pub use events::Event;
pub use fix::{FixOptions, FixOutcome, compile_loop_tool, run_fix};
pub use model::{ModelSource, Replay};
