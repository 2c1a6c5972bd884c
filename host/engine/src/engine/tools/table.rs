//! The table of tools a run offers: the tool plugins' tools (namespaced `plugin__tool` on a
//! collision), the host's built-ins, and MCP servers' tools, filtered by the run's settings.

use super::handler::{Kind, ToolHandler};
use super::registry::{BUILTINS, is_builtin};
use super::settings::ToolSettings;
use crate::edit;
use crate::engine::tool_names::RUN_CMD;
use crate::llm::ToolDef;
use crate::plugin::{Plugin, PluginError, PluginKind, Registry};
use serde_json::json;

/// Who implements a tool.
pub enum Imp<'a> {
    /// A tool plugin's tool, by the plugin's own name for it.
    Plugin(&'a Plugin, String),
    /// `ast_refactor`: the ast-refactor plugin computes, the host applies (edit::refactor).
    AstRefactor(&'a Plugin),
    /// One of the host's built-ins.
    Builtin(&'static dyn ToolHandler),
    /// An MCP server's tool, by the server's own name for it.
    External(std::sync::Arc<crate::mcp::ExternalServer>, String),
}

/// One tool as offered.
pub struct Tool<'a> {
    /// The name, description and schema the model is shown.
    pub def: ToolDef,
    /// What a call may do.
    pub kind: Kind,
    /// Who runs it.
    pub imp: Imp<'a>,
}

/// The tools of one run.
pub struct Toolbox<'r> {
    /// Every tool offered, in the order the model is shown them.
    pub tools: Vec<Tool<'r>>,
    /// The plugins the built-ins use (edit formats, runners).
    pub registry: &'r Registry,
}

impl<'r> Toolbox<'r> {
    /// The table: plugin tools (namespaced on a collision), the built-ins, MCP tools.
    pub async fn new(registry: &'r Registry, s: &ToolSettings) -> Result<Self, PluginError> {
        let mut tools = plugin_table(registry).await?;
        tools.extend(builtins(s));
        for (server, t) in s.external.tools() {
            if tools.iter().any(|o| o.def.name == t.name) {
                continue;
            }
            tools.push(Tool {
                def: ToolDef {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                },
                kind: if t.read_only { Kind::Read } else { Kind::Exec },
                imp: Imp::External(server.clone(), t.tool.clone()),
            });
        }
        match &s.only {
            Some(only) => tools.retain(|t| only.contains(&t.def.name)),
            None => tools.retain(|t| !matches!(t.imp, Imp::Builtin(b) if b.opt_in())),
        }
        Ok(Toolbox { tools, registry })
    }

    /// The table an adapter outside a run serves (`kiln mcp`, `kiln tool call`): the plugin
    /// tools and the MCP servers' tools as the agent has them, and of the built-ins those that
    /// run outside a run ([`ToolHandler::bare`]) and `also` (opt-in ones included), named as
    /// the agent names them.
    pub async fn served(
        registry: &'r Registry,
        s: &ToolSettings,
        also: &[&str],
    ) -> Result<Self, PluginError> {
        let mut table = Toolbox::new(registry, s).await?;
        table.tools.retain(|t| !matches!(t.imp, Imp::Builtin(_)));
        let at = table
            .tools
            .iter()
            .position(|t| matches!(t.imp, Imp::External(..)))
            .unwrap_or(table.tools.len());
        let named = super::registry::BUILTINS
            .iter()
            .filter(|b| (b.bare() && b.offered(s)) || also.contains(&b.name()))
            .map(|&b| Tool {
                def: b.def(s),
                kind: b.kind(),
                imp: Imp::Builtin(b),
            });
        table.tools.splice(at..at, named);
        Ok(table)
    }

    /// A restricted view of the table, for a loop with a tool set of its own (the fix loop):
    /// the built-ins named in `builtins`, in that order (opt-in ones included), then, from
    /// `reads`, those of the plugin's read-only tools it names, under the names the table
    /// gives them (`plugin__tool` on a collision) and in the plugin's order. Only the
    /// plugin's tools are listed, not every tool plugin's.
    pub async fn view(
        registry: &'r Registry,
        s: &ToolSettings,
        builtins: &[&str],
        reads: Option<(&Plugin, &[&str])>,
    ) -> Result<Self, PluginError> {
        let mut tools: Vec<Tool<'r>> = builtins
            .iter()
            .filter_map(|&name| BUILTINS.iter().find(|b| b.name() == name))
            .filter(|b| b.offered(s))
            .map(|&b| Tool {
                def: b.def(s),
                kind: b.kind(),
                imp: Imp::Builtin(b),
            })
            .collect();
        if let Some((plugin, names)) = reads {
            let table = plugin_table(registry).await?;
            tools.extend(table.into_iter().filter(|t| {
                t.kind == Kind::Read
                    && matches!(&t.imp, Imp::Plugin(p, n) if p.name == plugin.name && names.contains(&n.as_str()))
            }));
        }
        Ok(Toolbox { tools, registry })
    }

    /// The schemas offered to the model.
    pub fn defs(&self) -> Vec<ToolDef> {
        self.tools.iter().map(|t| t.def.clone()).collect()
    }

    /// A tool by the name the model calls.
    pub fn get(&self, name: &str) -> Option<&Tool<'r>> {
        self.tools.iter().find(|t| t.def.name == name)
    }

    /// The call's kind (`None` for a tool that does not exist).
    pub fn kind(&self, name: &str) -> Option<Kind> {
        self.get(name).map(|t| t.kind)
    }

    /// A read-only plugin call, which may run in parallel with its neighbours.
    pub fn parallel_ok(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|t| t.kind == Kind::Read && matches!(t.imp, Imp::Plugin(..)))
    }
}

/// The tool plugins' tools, namespaced where two plugins (or a plugin and a built-in) share
/// a name.
async fn plugin_table(registry: &Registry) -> Result<Vec<Tool<'_>>, PluginError> {
    let mut plugin_tools = Vec::new();
    for p in registry.all().iter().filter(|p| p.kind == PluginKind::Tool) {
        for t in p.tool_list().await? {
            plugin_tools.push((p, t));
        }
    }
    let mut out = Vec::new();
    for (p, t) in &plugin_tools {
        let collides = plugin_tools
            .iter()
            .filter(|(_, o)| o.name == t.name)
            .count()
            > 1
            || is_builtin(&t.name);
        let name = if collides {
            format!("{}__{}", p.name, t.name)
        } else {
            t.name.clone()
        };
        let kind = if t.name == RUN_CMD {
            Kind::Exec
        } else if t.read_only {
            Kind::Read
        } else {
            Kind::Other
        };
        let schema = serde_json::from_str(&t.schema).unwrap_or_else(|_| json!({"type": "object"}));
        let (kind, imp) = if p.name == edit::refactor::PLUGIN && t.name == edit::refactor::TOOL {
            (Kind::Write, Imp::AstRefactor(p))
        } else {
            (kind, Imp::Plugin(p, t.name.clone()))
        };
        out.push(Tool {
            def: ToolDef {
                name,
                description: t.description.clone(),
                parameters: schema,
            },
            kind,
            imp,
        });
    }
    Ok(out)
}

/// The built-ins offered under these settings.
fn builtins<'r>(s: &ToolSettings) -> Vec<Tool<'r>> {
    BUILTINS
        .iter()
        .filter(|b| b.offered(s))
        .map(|&b| Tool {
            def: b.def(s),
            kind: b.kind(),
            imp: Imp::Builtin(b),
        })
        .collect()
}
