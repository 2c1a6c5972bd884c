//! `compile_loop`: the fix loop as a tool, for the agent and for `kiln mcp`. Both build the
//! nested loop here ([`plan`]: the `command` runner with the caller's build command, the
//! caller's edit format, the call's targets, spec and language) and read its result here
//! ([`outcome`]); only where the events go and how cancellation arrives differ.

pub use super::fix_host::{CompileLoopPlan, CompileLoopSetup};
use super::handler::{Bare, Ctx, Kind, ToolHandler};
use super::schema::schema_of;
use super::settings::ToolSettings;
use crate::engine::defaults::{COMPILE_RUNNER, RUNNER_CMD_SETTING};
use crate::engine::events::Event;
use crate::engine::fix_options::{FixError, FixOptions, FixPlugins};
use crate::engine::tool_names::COMPILE_LOOP;
use crate::llm::ToolDef;
use crate::plugin::{PluginError, PluginKind, Registry};
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::{FixOutcome, ToolOutcome};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The `compile_loop` tool definition an agent or an MCP client is given.
pub fn compile_loop_tool() -> ToolDef {
    ToolDef {
        name: COMPILE_LOOP.into(),
        description: "Run an autonomous compile-and-fix loop on target files until the build/check passes or a stop reason is reached. Give either target_file or target_files, not both; give neither to fix the whole project (the build's diagnostics name the files; any file that is not protected may change).".into(),
        parameters: schema_of::<CompileLoopArgs>(),
    }
}

/// A `compile_loop` call's arguments (and, derived from them, the schema the caller is shown).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CompileLoopArgs {
    /// What the code should do or what to fix (the fix loop's task prompt).
    #[schemars(required, description = "What the code should do / what to fix")]
    pub spec: Option<String>,
    /// One file to fix.
    #[schemars(description = "One file to fix (workspace-relative)")]
    pub target_file: Option<String>,
    /// Several files to fix (multi-file formats only).
    #[schemars(
        length(min = 1),
        description = "Several files to fix (multi-file formats only)"
    )]
    pub target_files: Option<Vec<String>>,
    /// The language, as a hint in the system prompt.
    #[schemars(description = "Language hint")]
    pub lang: Option<String>,
}

impl CompileLoopArgs {
    /// The target files: `target_file` or `target_files`, not both; neither: none, the whole
    /// project (the fix loop's project mode).
    pub fn targets(&self) -> Result<Vec<String>, CompileLoopError> {
        match (&self.target_file, &self.target_files) {
            (Some(_), Some(_)) => Err(CompileLoopError::BothTargets),
            (Some(f), None) => Ok(vec![f.clone()]),
            (None, Some(fs)) if fs.is_empty() => Err(CompileLoopError::NoTargets),
            (None, Some(fs)) => Ok(fs.clone()),
            (None, None) => Ok(Vec::new()),
        }
    }
}

/// Why a `compile_loop` call could not start its loop.
#[derive(Debug, thiserror::Error)]
pub enum CompileLoopError {
    /// Both target forms were given.
    #[error("give target_file or target_files, not both")]
    BothTargets,
    /// Neither target form was given.
    #[error(
        "target_files is empty: name at least one file, or leave it out to fix the whole project"
    )]
    NoTargets,
    /// The arguments do not have the tool's shape.
    #[error("compile_loop: invalid arguments: {0}")]
    Arguments(#[from] serde_json::Error),
    /// The runner or the edit format is not loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// Build the nested loop a `compile_loop` call asks for.
pub fn plan<'r>(
    registry: &'r Registry,
    args: &Value,
    setup: CompileLoopSetup,
) -> Result<CompileLoopPlan<'r>, CompileLoopError> {
    let a: CompileLoopArgs = serde_json::from_value(args.clone())?;
    let targets = a.targets()?;
    let multi_file = a.target_files.is_some();
    let runner = registry.get(COMPILE_RUNNER, Some(PluginKind::Runner))?;
    let format = registry.get(&setup.format, Some(PluginKind::EditFormat))?;
    let mut runner_settings = BTreeMap::new();
    runner_settings.insert(RUNNER_CMD_SETTING.to_string(), setup.cmd);
    let fix = FixOptions {
        targets,
        multi_file,
        prompt: a.spec.or(setup.base.prompt.clone()),
        lang: a.lang,
        runner_settings,
        ..setup.base
    };
    Ok(CompileLoopPlan {
        fix,
        runner,
        format,
    })
}

/// The nested loop's end as the tool's result: its outcome as JSON (an error when it did not
/// succeed), or why it could not start.
pub fn outcome(r: &Result<FixOutcome, FixError>) -> ToolOutcome {
    match r {
        Ok(o) => ToolOutcome::from_flag(serde_json::to_string(o).unwrap_or_default(), !o.ok),
        Err(e) => ToolOutcome::Failed(e.to_string()),
    }
}

/// The tool, as the agent offers it (when the run has a build command).
pub(crate) struct CompileLoop;

impl ToolHandler for CompileLoop {
    fn name(&self) -> &'static str {
        COMPILE_LOOP
    }

    fn def(&self, _: &ToolSettings) -> ToolDef {
        compile_loop_tool()
    }

    fn kind(&self) -> Kind {
        Kind::Write
    }

    fn offered(&self, s: &ToolSettings) -> bool {
        s.compile_cmd.is_some()
    }

    fn handle<'c, 'a>(&'c self, cx: Ctx<'c, 'a>, args: &'c str) -> BoxFuture<'c, ToolOutcome> {
        Box::pin(async move {
            let s = cx.settings;
            let v: Value = serde_json::from_str(args).unwrap_or(Value::Null);
            let setup = CompileLoopSetup {
                cmd: s.compile_cmd.clone().unwrap_or_default(),
                format: s.default_format.clone(),
                base: FixOptions {
                    parent: Some(cx.run.id),
                    protected: s.protected.clone(),
                    ..Default::default()
                },
            };
            let p = match plan(cx.registry, &v, setup) {
                Ok(p) => p,
                Err(e) => return ToolOutcome::Failed(e.to_string()),
            };
            // The nested loop's own events are in the store under its id, not in this stream.
            let mut quiet = |_: &Event| {};
            let nested = cx.run.nested(&mut quiet);
            let plugins = FixPlugins {
                runner: p.runner,
                format: p.format,
                tools: None,
            };
            let Some(run_fix) = s.fix_loop else {
                return ToolOutcome::Failed(
                    "compile_loop: this loop runs no nested fix loop".into(),
                );
            };
            let r = run_fix(&p.fix, plugins, nested).await;
            if let Ok(o) = &r {
                cx.changed.note(written(o, cx.run.workspace));
            }
            outcome(&r)
        })
    }

    fn handle_bare<'c>(
        &'c self,
        cx: Bare<'c>,
        args: &'c str,
    ) -> Option<BoxFuture<'c, (ToolOutcome, Vec<String>)>> {
        let host = cx.fix_host?;
        Some(Box::pin(async move {
            let setup = match host.setup() {
                Ok(s) => s,
                Err(why) => return (ToolOutcome::Failed(why), Vec::new()),
            };
            let v: Value = serde_json::from_str(args).unwrap_or(Value::Null);
            match plan(cx.registry, &v, setup) {
                Ok(p) => (host.run(p).await, Vec::new()),
                Err(e) => (ToolOutcome::Failed(e.to_string()), Vec::new()),
            }
        }))
    }
}

/// The files a nested loop wrote, workspace-relative.
fn written(o: &FixOutcome, workspace: &std::path::Path) -> Vec<String> {
    let root = workspace.to_string_lossy().into_owned();
    o.modified_files
        .iter()
        .flatten()
        .chain(o.artifact_path.iter().filter(|_| o.iters > 0))
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap_or(p)
                .trim_start_matches('/')
                .to_string()
        })
        .collect()
}
