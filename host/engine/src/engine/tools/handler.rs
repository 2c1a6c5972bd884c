//! The shape of a built-in tool: a [`ToolHandler`] says its name, its schema, its kind and
//! how it runs; [`Ctx`] is what a call may use (the plugins, the settings, the workspace, the
//! run, the run's record of writes), [`Bare`] what a call outside a run may use. Each built-in lives in its own file next to this one and
//! is listed once in `registry.rs`.

use super::caps::Changes;
use super::fix_host::FixHost;
use super::settings::ToolSettings;
use crate::edit::Workspace;
use crate::engine::run::Run;
use crate::llm::ToolDef;
use crate::plugin::Registry;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What a call may do, for caps, repeats and parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only reads (may run in parallel with other reads).
    Read,
    /// Changes the workspace through the host's edit path (counts against the write cap).
    Write,
    /// Runs a program (counts against the command cap).
    Exec,
    /// Anything else (a reviewer call, the final answer).
    Other,
}

/// What one call of a built-in tool may use.
pub struct Ctx<'c, 'a> {
    /// The loaded plugins (edit formats, runners).
    pub registry: &'c Registry,
    /// How the run's tools are offered and run.
    pub settings: &'c ToolSettings,
    /// The workspace, opened once for the run.
    pub ws: &'c Workspace,
    /// The run: its model, store, events and cancellation.
    pub run: &'c mut Run<'a>,
    /// The files the run's calls wrote; a tool that writes adds its files.
    pub changed: &'c mut Changes,
}

/// What a call outside a run may use (`kiln mcp`, `kiln tool call`): no run; a caller that
/// can run fix loops says so with `fix_host`.
pub struct Bare<'c> {
    /// The loaded plugins (edit formats, runners).
    pub registry: &'c Registry,
    /// How the tools are offered and run.
    pub settings: &'c ToolSettings,
    /// The workspace.
    pub ws: &'c Workspace,
    /// Where `compile_loop` runs its loop (`kiln mcp`); `None`: nowhere.
    pub fix_host: Option<&'c dyn FixHost>,
}

/// A built-in tool.
pub trait ToolHandler: Sync {
    /// The name the model calls.
    fn name(&self) -> &'static str;

    /// The description and argument schema the model is shown.
    fn def(&self, settings: &ToolSettings) -> ToolDef;

    /// What a call may do (caps, repeats, parallelism).
    fn kind(&self) -> Kind;

    /// Offered only to a loop that names it in `ToolSettings::only`.
    fn opt_in(&self) -> bool {
        false
    }

    /// Offered at all under these settings (`compile_loop` needs a build command).
    fn offered(&self, _settings: &ToolSettings) -> bool {
        true
    }

    /// Run one call with its arguments (JSON text, already checked to be valid JSON).
    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome>;

    /// It runs outside a run too ([`ToolHandler::handle_bare`] answers), so `kiln mcp` and
    /// `kiln tool call` serve it.
    fn bare(&self) -> bool {
        false
    }

    /// Run one call outside a run: its outcome and the files it wrote. `None`: the tool needs
    /// a run (a model, the store, the run's record of writes).
    fn handle_bare<'c>(
        &'c self,
        _cx: Bare<'c>,
        _args: &'c str,
    ) -> Option<BoxFuture<'c, (ToolOutcome, Vec<String>)>> {
        None
    }
}

/// A tool's definition from its parts.
pub(crate) fn def(name: &str, description: &str, parameters: Value) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: description.into(),
        parameters,
    }
}

/// A call's arguments as the tool's own type; a mismatch is a failed call that names the
/// tool and what is wrong.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: &str) -> Result<T, ToolOutcome> {
    serde_json::from_str(args)
        .map_err(|e| ToolOutcome::Failed(format!("{tool}: invalid arguments: {e}")))
}
