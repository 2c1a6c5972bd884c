//! What can go wrong reading configuration; each error names the file at fault.

use std::path::PathBuf;

/// Errors reading configuration; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The configuration file that could not be read.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("invalid configuration in {path}: {message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message (line, column, field).
        message: String,
    },
    /// A value is well-formed TOML but not allowed.
    #[error("invalid configuration in {path}: {message}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
    /// A command-line flag that names a program (`--cmd`, `--test-command`) names none.
    #[error("{flag} is empty")]
    EmptyCommand {
        /// The flag, as the user typed it.
        flag: &'static str,
    },
}
