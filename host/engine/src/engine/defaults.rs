//! The names of the plugins kiln uses when nothing else is chosen, written once for the
//! loops, `kiln mcp` and the tools (the CLI's flags default to the same names).

/// The edit format used when neither a flag nor the configuration names one.
pub const DEFAULT_FORMAT: &str = "search-replace";

/// The edit format that answers with whole files (then a fix prompt shows files whole, never
/// as windows, and `write_file` writes through it).
pub const WHOLE_FORMAT: &str = "whole";

/// The edit formats kiln ships, as offered in the tools' argument schemas.
pub const BUNDLED_FORMATS: [&str; 4] = [DEFAULT_FORMAT, "udiff", WHOLE_FORMAT, "apply-patch"];

/// The runner `compile_loop` runs its build command with.
pub const COMPILE_RUNNER: &str = "command";

/// The runner setting that holds the build command.
pub const RUNNER_CMD_SETTING: &str = "cmd";
