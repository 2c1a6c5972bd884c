//! kiln's integration tests: one binary, real components compiled from source, the real
//! `kiln` executable, real compilers.
// Tests set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

mod mock_llm;
mod pg;
mod support;

mod agent;
mod agent_cli;
mod agent_policy;
mod batch;
mod budget;
mod check_guard;
mod cli;
mod confine;
mod edit;
mod escapes;
mod feedback;
mod first_hour;
mod first_run;
mod fix;
mod fs_search;
mod hardening;
mod journal;
mod kernel;
mod kiln_state;
mod languages;
mod layers;
mod llm;
mod loop_attacks;
mod mcp;
mod project;
mod refactor;
mod refusals;
mod report;
mod resume;
mod review_loop;
mod runner;
mod runtime;
mod sandbox;
mod secrets;
mod snapshot;
mod store;
mod task_spec;
mod toolchains;
mod trust;
mod undo;
mod undo_exact;
mod undo_git;
mod undo_hostile;
mod undo_ignored;
mod view;
mod writer;
