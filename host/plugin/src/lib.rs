//! kiln-plugin, the plugin runtime: one wasmtime `Engine` per process (component model, async, epoch
//! interruption), components compiled once and cached on disk, one linked `InstancePre` per
//! plugin and a fresh `Store` per call, with a wall-clock deadline, a memory limit and output
//! caps. A trap or a deadline is reported with the plugin's name; the runtime keeps working.
//!
//! Files, one job each: `runtime` (engine, compile, check, link), `contract` (contract version,
//! world, manifest name), `kind` (plugin kind and source), `instance` (the loaded plugin and its
//! per-call store), `calls` (one method per world function), `error` (what can go wrong),
//! `diagnostic` (severity names and JSON); `bindings`, `host_impl`, `capability`, `exec` (a
//! program run in the world `kiln-sandbox` builds for it), `cache`, `registry` and `builtin` as
//! before; `fs_guard` (protected paths held on every `wasi:filesystem` write); `refusal` (what
//! the sandbox refused a failed check, as notes naming how to allow it); `declared` (what a
//! built-in declares, so it is listed and described without being compiled); `warm` (the
//! background warmer of the compile cache). `confine` is the `kiln-sandbox` crate.
//!
//! It owns everything about running a component; the built-in components are embedded here by
//! its build script. It depends on the leaf crates only (`kiln-protocol`, `kiln-config`,
//! `kiln-state`, `kiln-sandbox`) and must never import the engine, the store, the LLM client,
//! the edit writer or the CLI: loops call plugins, plugins never call back into a loop.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod bindings;
pub mod builtin;
pub mod cache;
mod calls;
pub mod capability;
pub use kiln_sandbox as confine;
mod contract;
mod declared;
mod diagnostic;
mod error;
mod exec;
mod fs_guard;
pub mod git_config;
mod host_impl;
mod instance;
pub mod kiln_dirs;
mod kind;
mod planted;
mod refusal;
mod registry;
mod runtime;
pub mod warm;

pub use bindings::types::Error as PluginCallError;
pub use bindings::types::{Diagnostic, Manifest, Severity};
pub use capability::Effective;
pub use contract::{CONTRACT_VERSION, contract_compatible};
pub use declared::{Declared, DeclaredFormat};
pub use diagnostic::{TEST_FAILURE, diagnostic_json, diagnostic_line, severity_name, test_name};
pub use error::{PluginError, call_error_parts, describe_call_error};
pub use exec::{
    Finished, HostProgramError, Reach, confinement, resolve_program, run_confined, run_host_program,
};
pub use host_impl::{PLUGIN_LOG_TARGET, State};
pub use instance::{HeldInstance, Plugin};
pub use kind::{PluginKind, Source};
pub use refusal::{is_sandbox_note, messages as refusal_messages};
pub use registry::{Needed, Registry};
pub use runtime::{Checked, LoadInfo, Runtime};

pub use bindings::edit_format::exports::kiln::plugin::edit_format::{
    AppliedFile, ApplyFailure, EditKind, EditOutcome, EditStatus, FailureKind, FileEdit,
    FormatInfo, ParseError,
};
pub use bindings::runner::exports::kiln::plugin::runner::{RunRequest, RunResult, RunnerInfo};
pub use bindings::tool::exports::kiln::plugin::tool::ToolSpec;
