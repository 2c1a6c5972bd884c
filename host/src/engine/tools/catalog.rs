//! The tool table as other commands see it: every tool an agent would be offered (for
//! `kiln tool list`) and the tool plugins' tools as named for `kiln mcp`.

use super::handler::Kind;
use super::settings::ToolSettings;
use super::table::{Imp, Toolbox};
use crate::llm::ToolDef;
use crate::plugin::{Plugin, PluginError, Registry};
use serde::Serialize;

/// One tool as the agent offers it to the model (for `kiln tool list`).
#[derive(Debug, Clone, Serialize)]
pub struct ToolEntry {
    /// The name the model calls (namespaced `plugin__tool` on a collision).
    pub name: String,
    /// The plugin that implements it; `None` for the host's built-in tools.
    pub plugin: Option<String>,
    /// Description shown to the model.
    pub description: String,
    /// It only reads (may run in parallel with other reads).
    pub read_only: bool,
    /// The MCP server that implements it (`[mcp.servers.NAME]`): external, not sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
}

/// Every tool an agent would be offered with `registry` (plugin tools and the host's
/// built-ins, `compile_loop` included), for `kiln tool list`.
pub async fn tool_catalog(registry: &Registry) -> Result<Vec<ToolEntry>, PluginError> {
    tool_catalog_with(registry, &crate::mcp::ExternalTools::default()).await
}

/// [`tool_catalog`] plus the tools of running MCP servers.
pub async fn tool_catalog_with(
    registry: &Registry,
    external: &crate::mcp::ExternalTools,
) -> Result<Vec<ToolEntry>, PluginError> {
    let settings = ToolSettings {
        compile_cmd: Some(String::new()),
        external: external.clone(),
        ..Default::default()
    };
    Ok(Toolbox::new(registry, &settings)
        .await?
        .tools
        .into_iter()
        .map(|t| ToolEntry {
            name: t.def.name,
            plugin: match &t.imp {
                Imp::Plugin(p, _) | Imp::AstRefactor(p) => Some(p.name.clone()),
                _ => None,
            },
            description: t.def.description,
            read_only: matches!(t.kind, Kind::Read),
            mcp_server: match &t.imp {
                Imp::External(s, _) => Some(s.name.clone()),
                _ => None,
            },
        })
        .collect())
}

/// One tool of a tool plugin, named as the agent offers it.
pub struct PluginTool<'a> {
    /// Name, description and argument schema as the model sees them (`plugin__tool` on a
    /// collision).
    pub def: ToolDef,
    /// The plugin that implements it.
    pub plugin: &'a Plugin,
    /// The plugin's own name for the tool.
    pub tool: String,
    /// It only reads (may run in parallel with other reads).
    pub read_only: bool,
}

/// The tool plugins' tools exactly as an agent is offered them (for `kiln mcp`).
pub async fn plugin_tools(registry: &Registry) -> Result<Vec<PluginTool<'_>>, PluginError> {
    Ok(Toolbox::new(registry, &ToolSettings::default())
        .await?
        .tools
        .into_iter()
        .filter_map(|t| match t.imp {
            Imp::Plugin(plugin, tool) => Some(PluginTool {
                def: t.def,
                plugin,
                tool,
                read_only: t.kind == Kind::Read,
            }),
            _ => None,
        })
        .collect())
}
