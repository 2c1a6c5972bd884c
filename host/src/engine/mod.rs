//! The loops, as policies over one run core (`run`: lifecycle, events, the ask-the-model step,
//! cancellation) and one tool dispatcher (`tools`), emitting one typed event stream.

pub mod agent;
pub mod budget;
pub mod events;
pub mod fix;
pub(crate) mod history;
pub mod model;
pub mod outcome;
pub mod resume;
pub mod review;
pub mod run;
pub mod tools;

pub use events::Event;
pub use fix::{FixOptions, compile_loop_tool, run_fix};
pub use model::{ModelSource, Replay};
pub use outcome::{AgentResult, FixOutcome, LoopStatus, StopReason};
