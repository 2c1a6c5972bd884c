//! kiln-protocol: the shared domain types of kiln, the leaf of its crate graph. It owns what
//! every layer speaks: run kinds and statuses, stop reasons and loop results ([`outcome`]),
//! messages, tool calls and token usage ([`chat`]), edit results ([`edit`]), wall-clock
//! time as kiln records it ([`clock`]) and text made safe to show a person ([`terminal`]).
//!
//! It is pure data: it must never import another kiln crate but kiln-env (the environment,
//! read once), nor do I/O beyond reading the
//! clock; no wasmtime, no HTTP, no database.

pub mod chat;
pub mod clock;
pub mod edit;
pub mod outcome;
pub mod terminal;
