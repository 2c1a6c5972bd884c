//! What a fix loop is asked to do: its options, the plugins it drives, and the error that
//! keeps it from starting. A leaf below the fix loop (`fix.rs`) and the tool that runs one
//! (`tools/compile_loop.rs`), so the tool table need not name the loop.

use super::error::{HostError, from_host_errors};
use crate::plugin::Plugin;
use std::collections::BTreeMap;

/// What to fix and how.
#[derive(Debug, Clone)]
pub struct FixOptions {
    /// Workspace-relative target files. Empty: project mode, the whole workspace (the
    /// diagnostics name the first files; any file that is not protected may change, at most
    /// `max_files` per answer, in the multi-file format).
    pub targets: Vec<String>,
    /// Multi-file mode (`--files`, `target_files`, even with one file): the model is taught
    /// the multi-file format and the result names `modified_files`; otherwise (`--file`,
    /// `target_file`) the one target's `artifact_path`.
    pub multi_file: bool,
    /// Iteration ceiling (default 5).
    pub max_iters: u32,
    /// Extra system prompt text.
    pub system: Option<String>,
    /// The language, named in the system prompt (`fixing rust code`).
    pub lang: Option<String>,
    /// The project's prompt (task description).
    pub prompt: Option<String>,
    /// Runner settings (`cmd`, `mode`, ...).
    pub runner_settings: BTreeMap<String, String>,
    /// Characters of runner output shown to the model (the tail is kept).
    pub output_budget: usize,
    /// The loop that started this one (an agent), exempt from the overlap guard.
    pub parent: Option<i64>,
    /// Files longer than this many lines are shown as windows around the diagnostics.
    pub window_threshold: usize,
    /// Paths no edit may touch (`[sandbox] protect` on top of kiln's own files).
    pub protected: crate::path::Protected,
    /// Project mode: rounds of read-only tool calls (`read_files`, `search_repo`,
    /// `list_dir`) the model may make within one iteration before it answers (seed 001's
    /// `toolMaxIterations`; default 5).
    pub tool_rounds: usize,
    /// Project mode: files one answer may change (default 10); an answer over it is refused
    /// whole.
    pub max_files: usize,
    /// The runner's deadline per check (seconds), named when a check runs out of time.
    pub timeout_s: Option<u32>,
    /// The model may change what decides success: the files that define the check
    /// ([`super::check_files`]) and the failing tests (`kiln fix --allow-check-edits`). Off,
    /// such an edit is refused and the model told why; a file the user names as a target
    /// is the model's to change either way.
    pub allow_check_edits: bool,
}

impl Default for FixOptions {
    fn default() -> Self {
        FixOptions {
            targets: Vec::new(),
            multi_file: false,
            max_iters: 5,
            system: None,
            lang: None,
            prompt: None,
            runner_settings: BTreeMap::new(),
            output_budget: 8 * 1024,
            parent: None,
            window_threshold: 600,
            protected: crate::path::Protected::default(),
            tool_rounds: 5,
            max_files: 10,
            timeout_s: None,
            allow_check_edits: false,
        }
    }
}

impl FixOptions {
    /// Project mode: no target named, the whole workspace.
    pub fn project(&self) -> bool {
        self.targets.is_empty()
    }

    /// The answer is in the multi-file format.
    pub(crate) fn multi(&self) -> bool {
        self.multi_file || self.targets.len() > 1 || self.project()
    }
}

/// Errors that prevent a loop from starting (bad input, a running loop, the store).
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    /// The options cannot run: no targets, a target that is not text or too big for the
    /// format, a runner that refuses its settings.
    #[error("{0}")]
    Usage(String),
    /// The store, a plugin or the workspace failed.
    #[error(transparent)]
    Host(#[from] HostError),
}

from_host_errors!(FixError);

/// The plugins the loop drives, chosen by the caller from the run's registry
/// (`RunCtx::plugins`).
pub struct FixPlugins<'a> {
    /// The runner plugin that checks the targets.
    pub runner: &'a Plugin,
    /// The edit format the model answers in (a whole-file format is shown files whole).
    pub format: &'a Plugin,
    /// Project mode: the tool plugin (`fs`) whose read-only tools the model may call.
    pub tools: Option<&'a Plugin>,
}
