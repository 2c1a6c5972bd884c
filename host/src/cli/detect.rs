//! Which runner to use when none is named (`kiln fix` in project mode without `--runner` or
//! `--cmd`). Issue 33 item 3 fills this in; until then no runner is detected and the user
//! is asked to name one.

use std::path::Path;

/// A runner chosen from the project's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DetectedRunner {
    /// The runner plugin's name (`cargo`, `command`, ...).
    pub runner: String,
    /// For the `command` runner: the command it runs.
    pub cmd: Option<String>,
    /// For the `cargo` runner: its mode.
    pub mode: Option<String>,
    /// What it was detected from (`Cargo.toml`), for the banner.
    pub from: String,
}

/// The runner the project at `root` implies, if any.
pub(crate) fn detect_runner(_root: &Path) -> Option<DetectedRunner> {
    None
}

/// What is said when no runner is named and none is detected.
pub(crate) const NAME_A_RUNNER: &str = "no runner named: name a runner with --runner or --cmd (for example `--runner cargo --mode test` or `--cmd \"pytest -q\"`)";
