//! What a built-in plugin declares, known without compiling it: its kind, contract version,
//! manifest (name, version, the capabilities it requests) and what its describe functions
//! answer (a runner's info, an edit format's info and both instruction texts, a tool plugin's
//! tools with their schemas). Each built-in keeps it in `plugins/<name>/declared.json`, which
//! the build script embeds beside the component; `host/plugin/tests/declared.rs` compiles every
//! built-in, calls the real functions and fails when a file differs from what they answer
//! (`KILN_BLESS_DECLARED=1` rewrites the files).
//!
//! So `kiln plugin list`, `kiln tool list` and the agent's tool table are answered from it, and
//! a built-in is compiled only when one of its other functions is called (see
//! [`crate::Plugin`]). The data is part of kiln's own source, embedded in its binary: nothing a
//! plugin or a workspace controls feeds it, and what a plugin may do is still the manifest
//! declared here intersected with the grant, enforced by the host.

use super::{FormatInfo, Manifest, PluginKind, RunnerInfo, ToolSpec};
use serde::{Deserialize, Serialize};

/// What a built-in declares (the content of its `declared.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The world it implements.
    pub kind: PluginKind,
    /// The `kiln:plugin` contract version its exports name.
    pub contract: String,
    /// What `get-manifest` returns.
    pub manifest: Manifest,
    /// A runner's `describe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerInfo>,
    /// An edit format's `describe` and `instructions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DeclaredFormat>,
    /// A tool plugin's `list-tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSpec>>,
}

/// What an edit format declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredFormat {
    /// `describe`.
    pub info: FormatInfo,
    /// `instructions(false)`.
    pub instructions_one_file: String,
    /// `instructions(true)`.
    pub instructions_multi_file: String,
}

impl Declared {
    /// The declared data of the built-in with file stem `stem`, when it has a `declared.json`
    /// that parses (one that does not is caught by the test; the built-in is then compiled to
    /// be described, as a user plugin is).
    pub fn of_builtin(stem: &str) -> Option<Declared> {
        let text = super::builtin::DECLARED
            .iter()
            .find(|(s, _)| *s == stem)
            .map(|(_, t)| *t)?;
        serde_json::from_str(text).ok()
    }

    /// What `plugin` answers now: its real functions called, never the declared data (for the
    /// test that keeps the files equal to the components).
    pub async fn live(plugin: &super::Plugin) -> Result<Declared, super::PluginError> {
        let mut d = Declared {
            kind: plugin.kind,
            contract: plugin.contract.clone(),
            manifest: plugin.call_get_manifest().await?,
            runner: None,
            format: None,
            tools: None,
        };
        match plugin.kind {
            PluginKind::Runner => d.runner = Some(plugin.call_runner_describe().await?),
            PluginKind::EditFormat => {
                d.format = Some(DeclaredFormat {
                    info: plugin.call_format_describe().await?,
                    instructions_one_file: plugin.call_format_instructions(false).await?,
                    instructions_multi_file: plugin.call_format_instructions(true).await?,
                })
            }
            PluginKind::Tool => d.tools = Some(plugin.call_tool_list().await?),
        }
        Ok(d)
    }

    /// The file's text: pretty JSON and a final newline.
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("declared data serializes");
        s.push('\n');
        s
    }
}
