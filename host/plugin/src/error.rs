//! Errors: [`PluginError`] (loading or calling a plugin went wrong) and the one-line
//! descriptions of a plugin's own expected errors ([`PluginCallError`]).

use super::{PluginCallError, PluginKind};
use std::path::PathBuf;

/// Everything that can go wrong loading or calling a plugin. Each message names the plugin
/// or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Read {
        /// The component file that could not be read.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Not WebAssembly at all.
    #[error("{0} is not a WebAssembly component (no `\\0asm` header)")]
    NotWasm(String),
    /// A core module instead of a component.
    #[error(
        "{0} is a core WebAssembly module, not a component: build it with `--target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule(String),
    /// wasmtime refused the bytes.
    #[error("{source_name} is not a valid component: {message}")]
    Invalid {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// wasmtime's reason.
        message: String,
    },
    /// A component, but of no kiln world.
    #[error(
        "{source_name} does not implement a kiln plugin world: it exports [{exports}], but a kiln plugin exports kiln:plugin/runner, kiln:plugin/edit-format or kiln:plugin/tool"
    )]
    WrongWorld {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// What it exports instead.
        exports: String,
    },
    /// Built for another contract version.
    #[error(
        "{source_name} was built for the kiln:plugin contract {found}, but this kiln supports {supported}; rebuild the plugin against kiln:plugin@{supported} (kiln-guest {supported})"
    )]
    IncompatibleContract {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// The component's contract version.
        found: String,
        /// This host's version.
        supported: String,
    },
    /// Imports the host does not provide (or may not give this kind).
    #[error("{source_name} cannot be linked: {message}")]
    Link {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// What is missing.
        message: String,
    },
    /// The plugin trapped (a bug in the plugin).
    #[error("plugin `{plugin}` crashed (trap): {message}")]
    Trap {
        /// Plugin name.
        plugin: String,
        /// The trap and the plugin's last stderr lines.
        message: String,
    },
    /// The call ran past its deadline.
    #[error(
        "plugin `{plugin}` was stopped after its deadline of {ms} ms (raise it with `[plugins.{plugin}] timeout_ms` in your user config or a trusted kiln.toml)"
    )]
    Deadline {
        /// Plugin name.
        plugin: String,
        /// The deadline it ran past, in milliseconds.
        ms: u32,
    },
    /// The instance tried to grow memory past its limit.
    #[error(
        "plugin `{plugin}` was stopped: it exceeded its memory limit of {mib} MiB (raise it with `[plugins.{plugin}] memory_mib` in your user config or a trusted kiln.toml)"
    )]
    Memory {
        /// Plugin name.
        plugin: String,
        /// The memory limit it reached, in MiB.
        mib: u32,
    },
    /// Returned more than the output cap.
    #[error(
        "plugin `{plugin}`: output limit exceeded ({}{bytes} > {cap} bytes; raise it with `[plugins.{plugin}] output_bytes` in your user config or a trusted kiln.toml)",
        if *.more { "more than " } else { "" }
    )]
    OutputCap {
        /// Plugin name.
        plugin: String,
        /// Returned size (a lower bound when `more`).
        bytes: usize,
        /// The output cap, in bytes.
        cap: u32,
        /// The plugin tried to pass even more than `bytes` to the host, which stopped copying.
        more: bool,
    },
    /// The manifest is unusable.
    #[error("{source_name} has an invalid manifest: {message}")]
    Manifest {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// A call for another kind.
    #[error("plugin `{plugin}` is a {actual} plugin, not a {expected} plugin")]
    WrongKind {
        /// Plugin name.
        plugin: String,
        /// The kind the plugin is.
        actual: PluginKind,
        /// The kind needed.
        expected: PluginKind,
    },
    /// No such plugin.
    #[error("no {kind} named `{name}`{hint}; plugins: {known}")]
    NotFound {
        /// What was looked for.
        kind: String,
        /// The plugin name that was looked up.
        name: String,
        /// ` (did you mean `x`?)` or empty.
        hint: String,
        /// The names there are: the loaded plugins and every built-in.
        known: String,
    },
    /// A user plugin took a built-in's name without saying so.
    #[error(
        "{source_name} is named `{name}` like a built-in plugin; to replace the built-in, add `replaces = \"{name}\"` under [plugins.{name}] in kiln.toml (it then gets only what kiln.toml grants it, none of the built-in's defaults)"
    )]
    ShadowsBuiltin {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// The built-in's name it takes.
        name: String,
    },
    /// `replaces` is wrong.
    #[error("{source_name}: {message}")]
    Replaces {
        /// The component (its file, or `built-in` and its name).
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// Two configured user plugins have the same name.
    #[error("two plugins are named `{name}`: {first} and {second}")]
    Duplicate {
        /// The name both plugins declare.
        name: String,
        /// The one loaded.
        first: String,
        /// The one refused.
        second: String,
    },
    /// A configured plugin that failed to load was asked for.
    #[error("plugin `{name}` is not available: {message}")]
    Unavailable {
        /// The name asked for.
        name: String,
        /// Why it could not be loaded.
        message: String,
    },
    /// The sandbox could not be set up (a granted path could not be opened).
    #[error("plugin `{plugin}`: cannot set up its sandbox: {message}")]
    Sandbox {
        /// Plugin name.
        plugin: String,
        /// What went wrong.
        message: String,
    },
    /// The engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
}

/// A plugin's expected error as its WIT case name and message (`("denied", "...")`).
pub fn call_error_parts(e: &PluginCallError) -> (&'static str, &str) {
    match e {
        PluginCallError::Denied(m) => ("denied", m),
        PluginCallError::NotFound(m) => ("not-found", m),
        PluginCallError::InvalidInput(m) => ("invalid-input", m),
        PluginCallError::TimedOut(m) => ("timed-out", m),
        PluginCallError::Failed(m) => ("failed", m),
    }
}

/// A plugin's expected error as one line: `denied: ...`.
pub fn describe_call_error(e: &PluginCallError) -> String {
    let (kind, message) = call_error_parts(e);
    format!("{kind}: {message}")
}
