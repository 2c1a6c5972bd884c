//! The tool table as `kiln tool list` shows it: every tool an agent would be offered.

use super::handler::Kind;
use super::settings::ToolSettings;
use super::table::{Imp, Toolbox};
use crate::plugin::{PluginError, Registry};
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
