//! The calls a host makes on a [`Plugin`], one method per function of its world (runner,
//! edit format, tool), each on a fresh instance under the plugin's deadline and checked against
//! its output cap.

use super::Effective;
use super::confine::Writes;
use super::instance::Pre;
use super::{
    AppliedFile, ApplyFailure, FileEdit, FormatInfo, Manifest, ParseError, Plugin, PluginCallError,
    PluginError, PluginKind, RunRequest, RunResult, Severity, ToolSpec, bindings::runner,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Run one call on a fresh instance, under the deadline, mapping traps to `PluginError`.
macro_rules! invoke {
    ($self:ident, $variant:ident, $getter:ident, |$g:ident, $store:ident| $call:expr) => {
        invoke!(
            $self,
            $variant,
            $getter,
            $self.effective.clone(),
            |$g, $store| $call
        )
    };
    ($self:ident, $variant:ident, $getter:ident, $effective:expr, |$g:ident, $store:ident| $call:expr) => {{
        if $self.kind != PluginKind::$variant {
            return Err($self.wrong_kind(PluginKind::$variant));
        }
        let Pre::$variant(pre) = $self.pre().await? else {
            return Err($self.wrong_kind(PluginKind::$variant));
        };
        let (mut store, stderr) = $self.new_store($effective)?;
        let limit = Duration::from_millis($self.effective.limits.timeout_ms as u64)
            + Duration::from_millis(250);
        let res = tokio::time::timeout(limit, async {
            let inst = pre.instantiate_async(&mut store).await?;
            let $g = inst.$getter();
            let $store = &mut store;
            $call.await
        })
        .await;
        $self.finish(res, &store, &stderr)
    }};
}

/// [`invoke!`] returning also what the sandbox refused the call's programs.
macro_rules! invoke_refused {
    ($self:ident, $variant:ident, $getter:ident, $effective:expr, |$g:ident, $store:ident| $call:expr) => {{
        if $self.kind != PluginKind::$variant {
            return Err($self.wrong_kind(PluginKind::$variant));
        }
        let Pre::$variant(pre) = $self.pre().await? else {
            return Err($self.wrong_kind(PluginKind::$variant));
        };
        let (mut store, stderr) = $self.new_store($effective)?;
        let limit = Duration::from_millis($self.effective.limits.timeout_ms as u64)
            + Duration::from_millis(250);
        let res = tokio::time::timeout(limit, async {
            let inst = pre.instantiate_async(&mut store).await?;
            let $g = inst.$getter();
            let $store = &mut store;
            $call.await
        })
        .await;
        let refused = store.data_mut().take_refused();
        ($self.finish(res, &store, &stderr), refused)
    }};
}

impl Plugin {
    /// The plugin's manifest, whatever its kind: a built-in's declared one (nothing compiled),
    /// else the component's answer.
    pub async fn get_manifest(&self) -> Result<Manifest, PluginError> {
        match &self.declared {
            Some(d) => Ok(d.manifest.clone()),
            None => self.call_get_manifest().await,
        }
    }

    /// The component's `get-manifest`, called.
    pub(crate) async fn call_get_manifest(&self) -> Result<Manifest, PluginError> {
        match self.kind {
            PluginKind::Runner => invoke!(self, Runner, kiln_plugin_runner, |g, s| g
                .call_get_manifest(s)),
            PluginKind::EditFormat => invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
                .call_get_manifest(s)),
            PluginKind::Tool => {
                invoke!(self, Tool, kiln_plugin_tool, |g, s| g.call_get_manifest(s))
            }
        }
    }

    /// Runner: describe (a built-in's declared answer, nothing compiled).
    pub async fn runner_describe(
        &self,
    ) -> Result<runner::exports::kiln::plugin::runner::RunnerInfo, PluginError> {
        if let Some(info) = self.declared.as_ref().and_then(|d| d.runner.clone()) {
            return Ok(info);
        }
        self.call_runner_describe().await
    }

    /// The runner's `describe`, called.
    pub(crate) async fn call_runner_describe(
        &self,
    ) -> Result<runner::exports::kiln::plugin::runner::RunnerInfo, PluginError> {
        invoke!(self, Runner, kiln_plugin_runner, |g, s| g.call_describe(s))
    }

    /// Runner: run a check. `settings` from the command line override `kiln.toml`.
    pub async fn runner_run(
        &self,
        targets: &[String],
        extra_settings: &BTreeMap<String, String>,
    ) -> Result<Result<RunResult, PluginCallError>, PluginError> {
        let mut settings = self.settings.clone();
        settings.extend(extra_settings.iter().map(|(k, v)| (k.clone(), v.clone())));
        // Targets often come from a model: each must be an existing regular file inside the
        // workspace, and is passed in a form no program reads as an option (`./-x`, `./@f`).
        let targets = match kiln_config::path::target_arguments(&self.root, targets) {
            Ok(t) => t,
            Err(e) => return Ok(Err(PluginCallError::InvalidInput(e.to_string()))),
        };
        let req = RunRequest {
            targets,
            settings: settings.into_iter().collect(),
        };
        let (out, refused) = invoke_refused!(
            self,
            Runner,
            kiln_plugin_runner,
            self.effective.clone(),
            |g, s| g.call_run(s, &req)
        );
        let mut out = out?;
        if let Ok(r) = &mut out {
            self.cap(r.stdout.len() + r.stderr.len())?;
            // A tool that builds a file twice (cargo: the library and its tests) reports its
            // errors twice: each is shown, counted and told to the model once.
            let mut seen = std::collections::HashSet::new();
            r.diagnostics.retain(|d| {
                seen.insert((
                    d.file.clone(),
                    d.line,
                    d.column,
                    crate::severity_name(d.severity),
                    d.code.clone(),
                    d.message.clone(),
                ))
            });
            // A check that failed with no error of the tool's own says what kiln's sandbox
            // refused it, first (see `refusal`): that may be why. Beside the tool's errors it
            // would only distract (npm asks the registry for updates on every run).
            if !r.ok
                && !r
                    .diagnostics
                    .iter()
                    .any(|d| matches!(d.severity, Severity::Error))
            {
                let notes = super::refusal::diagnostics(&self.name, &refused);
                r.diagnostics.splice(0..0, notes);
            }
        }
        Ok(out)
    }

    /// Edit format: describe (a built-in's declared answer, nothing compiled).
    pub async fn format_describe(&self) -> Result<FormatInfo, PluginError> {
        if let Some(f) = self.declared.as_ref().and_then(|d| d.format.as_ref()) {
            return Ok(f.info.clone());
        }
        self.call_format_describe().await
    }

    /// The edit format's `describe`, called.
    pub(crate) async fn call_format_describe(&self) -> Result<FormatInfo, PluginError> {
        invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
            .call_describe(s))
    }

    /// Edit format: the prompt fragment (a built-in's declared text, nothing compiled).
    pub async fn format_instructions(&self, multi_file: bool) -> Result<String, PluginError> {
        if let Some(f) = self.declared.as_ref().and_then(|d| d.format.as_ref()) {
            return Ok(if multi_file {
                f.instructions_multi_file.clone()
            } else {
                f.instructions_one_file.clone()
            });
        }
        self.call_format_instructions(multi_file).await
    }

    /// The edit format's `instructions`, called.
    pub(crate) async fn call_format_instructions(
        &self,
        multi_file: bool,
    ) -> Result<String, PluginError> {
        let out = invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
            .call_instructions(s, multi_file))?;
        self.cap(out.len())?;
        Ok(out)
    }

    /// Edit format: parse a response.
    pub async fn format_parse(
        &self,
        response: &str,
        targets: &[String],
    ) -> Result<Result<Vec<FileEdit>, Vec<ParseError>>, PluginError> {
        let out = invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
            .call_parse(s, response, targets))?;
        if let Ok(edits) = &out {
            self.cap(edits.iter().map(|e| e.search.len() + e.replace.len()).sum())?;
        }
        Ok(out)
    }

    /// Edit format: apply one file's edits.
    pub async fn format_apply(
        &self,
        path: &str,
        text: Option<&str>,
        edits: &[FileEdit],
    ) -> Result<Result<AppliedFile, ApplyFailure>, PluginError> {
        let out = invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
            .call_apply(s, path, text, edits))?;
        if let Ok(a) = &out {
            self.cap(a.text.as_ref().map_or(0, String::len))?;
        }
        Ok(out)
    }

    /// Tool: the tools offered (a built-in's declared list, nothing compiled).
    pub async fn tool_list(&self) -> Result<Vec<ToolSpec>, PluginError> {
        if let Some(tools) = self.declared.as_ref().and_then(|d| d.tools.clone()) {
            return Ok(tools);
        }
        self.call_tool_list().await
    }

    /// The tool plugin's `list-tools`, called.
    pub(crate) async fn call_tool_list(&self) -> Result<Vec<ToolSpec>, PluginError> {
        invoke!(self, Tool, kiln_plugin_tool, |g, s| g.call_list_tools(s))
    }

    /// Tool: call one tool with JSON arguments.
    pub async fn tool_call(
        &self,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, PluginCallError>, PluginError> {
        self.tool_call_writing(name, arguments, self.effective.writes)
            .await
    }

    /// Tool: call one tool, the programs it starts writing only where `writes` says (the
    /// review phase: [`Writes::Nowhere`]). It can only narrow: a plugin whose grant writes
    /// nowhere stays so.
    pub async fn tool_call_writing(
        &self,
        name: &str,
        arguments: &str,
        writes: Writes,
    ) -> Result<Result<String, PluginCallError>, PluginError> {
        let effective =
            if writes == self.effective.writes || self.effective.writes == Writes::Nowhere {
                self.effective.clone()
            } else {
                Arc::new(Effective {
                    writes,
                    ..(*self.effective).clone()
                })
            };
        let (out, refused) = invoke_refused!(self, Tool, kiln_plugin_tool, effective, |g, s| g
            .call_call(s, name, arguments));
        let mut out = out?;
        if let Ok(text) = &mut out {
            self.cap(text.len())?;
            // A JSON object result (the shell tool's) carries what the sandbox refused its
            // programs, for the model and the person (see `refusal`).
            let notes = super::refusal::messages(Some(&self.name), &refused);
            if !notes.is_empty()
                && let Ok(serde_json::Value::Object(mut o)) = serde_json::from_str(text)
            {
                o.insert("sandbox".into(), notes.into());
                *text = serde_json::Value::Object(o).to_string();
            }
        }
        Ok(out)
    }
}
