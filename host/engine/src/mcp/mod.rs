//! MCP servers used by `kiln agent` (`[mcp.servers.NAME]` in kiln.toml): each is started over
//! stdio only when a command needs it, with the workspace as its directory and only the host
//! variables its `env` names, and its tools are offered to the model as `NAME__tool` (shown as
//! `NAME.tool`). These servers run outside kiln's sandbox. (`kiln mcp`, kiln as an MCP server,
//! lives in `cli::mcp_cmd`.)

use crate::config::McpServerConfig;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation,
};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a server may take to start and answer `initialize` and `tools/list`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest tool name the model APIs accept (OpenAI: 64, `^[a-zA-Z0-9_-]+$`).
const MAX_WIRE_NAME: usize = 64;

/// One tool of an MCP server, as offered to the model.
#[derive(Debug, Clone)]
pub struct ExternalTool {
    /// The name the model calls: `SERVER__tool` (characters outside `[A-Za-z0-9_-]` become `_`).
    pub name: String,
    /// The server's own name for it.
    pub tool: String,
    /// Its description, as the server gives it.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
    /// The server says it only reads (`readOnlyHint`); a hint, not a guarantee.
    pub read_only: bool,
}

/// A running MCP server and its tools.
pub struct ExternalServer {
    /// `NAME` of `[mcp.servers.NAME]`.
    pub name: String,
    /// Its tools, as offered to the model.
    pub tools: Vec<ExternalTool>,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ClientConfig>>>,
}

impl std::fmt::Debug for ExternalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalServer")
            .field("name", &self.name)
            .field("tools", &self.tools.len())
            .finish()
    }
}

/// The MCP servers a command started (none by default).
#[derive(Debug, Clone, Default)]
pub struct ExternalTools {
    /// The servers, in configuration order.
    pub servers: Vec<Arc<ExternalServer>>,
    /// Tools that could not be offered (a name the model APIs would refuse), for a warning.
    pub skipped: Vec<String>,
}

/// What a server answered to a tool call: its text for the model, and whether the server (or
/// the call to it) reported an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    /// The answer's content blocks as text, one per line.
    pub text: String,
    /// The server flagged the result as an error, or the call failed.
    pub is_error: bool,
}

impl CallOutput {
    fn error(text: String) -> CallOutput {
        CallOutput {
            text,
            is_error: true,
        }
    }
}

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
#[error("MCP server `{name}` ({command}): {problem}")]
pub struct McpError {
    /// The server's name.
    pub name: String,
    /// Its command line.
    pub command: String,
    /// What went wrong.
    pub problem: McpProblem,
}

/// What went wrong when a server was started.
#[derive(Debug, thiserror::Error)]
pub enum McpProblem {
    /// A bare program name is not on the host's PATH.
    #[error("`{0}` was not found on PATH")]
    NotOnPath(String),
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The resolved program.
        program: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The server did not complete `initialize`.
    #[error("initialize failed: {0} (see .kiln/logs/mcp-{1}.log)")]
    Initialize(String, String),
    /// The server did not answer `tools/list`.
    #[error("tools/list failed: {0} (see .kiln/logs/mcp-{1}.log)")]
    ToolsList(String, String),
    /// The server took longer than the start timeout.
    #[error(
        "did not answer initialize and tools/list within {secs} s (see .kiln/logs/mcp-{name}.log)"
    )]
    Timeout {
        /// The start timeout, in seconds.
        secs: u64,
        /// The server's name (its log file).
        name: String,
    },
}

/// The wire name of `tool` of server `server`: `server__tool`, with every character the model
/// APIs refuse replaced by `_`.
pub fn wire_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl ExternalTools {
    /// Start every configured server (in parallel) and list its tools; the first failure
    /// stops the others and is returned.
    pub async fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        workspace: &Path,
    ) -> Result<ExternalTools, McpError> {
        let (out, mut errors) = Self::start_each(servers, workspace).await;
        if !errors.is_empty() {
            out.shutdown().await;
            return Err(errors.remove(0));
        }
        Ok(out)
    }

    /// Start every configured server (in parallel); those that fail are returned beside the
    /// others.
    pub async fn start_each(
        servers: &BTreeMap<String, McpServerConfig>,
        workspace: &Path,
    ) -> (ExternalTools, Vec<McpError>) {
        let started = futures_util::future::join_all(
            servers
                .iter()
                .map(|(name, cfg)| ExternalServer::start(name, cfg, workspace)),
        )
        .await;
        let mut out = ExternalTools::default();
        let mut errors = Vec::new();
        for s in started {
            match s {
                Ok((server, skipped)) => {
                    out.servers.push(Arc::new(server));
                    out.skipped.extend(skipped);
                }
                Err(e) => errors.push(e),
            }
        }
        (out, errors)
    }

    /// Every tool of every server, with its server.
    pub fn tools(&self) -> impl Iterator<Item = (&Arc<ExternalServer>, &ExternalTool)> {
        self.servers
            .iter()
            .flat_map(|s| s.tools.iter().map(move |t| (s, t)))
    }

    /// Stop every server (close its stdin, then SIGTERM, then kill).
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

/// The program to start: a bare name is looked up on the host's PATH (the server itself gets
/// no PATH unless its `env` names it); a path with `/` is relative to the workspace.
fn resolve_program(command: &str, workspace: &Path) -> Result<PathBuf, McpProblem> {
    if command.contains('/') {
        return Ok(workspace.join(command));
    }
    let path = kiln_env::env().path().unwrap_or_default();
    std::env::split_paths(path)
        .map(|d| d.join(command))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| McpProblem::NotOnPath(command.to_string()))
}

/// The server's process, in the workspace, with only the host variables its `env` names and
/// its stderr in `.kiln/logs/mcp-NAME.log` (opened as kiln's other logs are: no link followed),
/// never on kiln's stdout or the terminal's event stream.
fn spawn(
    name: &str,
    cfg: &McpServerConfig,
    workspace: &Path,
) -> Result<rmcp::transport::TokioChildProcess, McpProblem> {
    let program = resolve_program(&cfg.command, workspace)?;
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&cfg.args)
        .current_dir(workspace)
        .env_clear()
        .kill_on_drop(true);
    for var in &cfg.env {
        if let Some(v) = kiln_env::env().var_os(var) {
            cmd.env(var, v);
        }
    }
    let stderr = crate::store::open_log(workspace, &format!("mcp-{name}.log"))
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::null());
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(stderr)
        .spawn()
        .map_err(|source| McpProblem::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    Ok(transport)
}

/// The listed tools as offered (`SERVER__tool`), and those whose wire name the model APIs
/// would refuse or that collide.
fn offered_tools(name: &str, listed: Vec<rmcp::model::Tool>) -> (Vec<ExternalTool>, Vec<String>) {
    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    for t in listed {
        let wire = wire_name(name, &t.name);
        if wire.len() > MAX_WIRE_NAME || tools.iter().any(|o: &ExternalTool| o.name == wire) {
            skipped.push(format!("{name}.{}", t.name));
            continue;
        }
        tools.push(ExternalTool {
            name: wire,
            tool: t.name.to_string(),
            description: t.description.as_deref().unwrap_or("").to_string(),
            parameters: Value::Object((*t.input_schema).clone()),
            read_only: t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
        });
    }
    (tools, skipped)
}

impl ExternalServer {
    async fn start(
        name: &str,
        cfg: &McpServerConfig,
        workspace: &Path,
    ) -> Result<(ExternalServer, Vec<String>), McpError> {
        let err = |problem: McpProblem| McpError {
            name: name.to_string(),
            command: std::iter::once(cfg.command.as_str())
                .chain(cfg.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            problem,
        };
        let transport = spawn(name, cfg, workspace).map_err(err)?;
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("kiln", env!("CARGO_PKG_VERSION")),
        );
        let log = || name.to_string();
        let (service, listed) = tokio::time::timeout(START_TIMEOUT, async {
            let service = client
                .serve(transport)
                .await
                .map_err(|e| McpProblem::Initialize(e.to_string(), log()))?;
            let tools = service
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| McpProblem::ToolsList(e.to_string(), log()))?;
            Ok::<_, McpProblem>((service, tools))
        })
        .await
        .map_err(|_| {
            err(McpProblem::Timeout {
                secs: START_TIMEOUT.as_secs(),
                name: log(),
            })
        })?
        .map_err(err)?;
        let (tools, skipped) = offered_tools(name, listed);
        Ok((
            ExternalServer {
                name: name.to_string(),
                tools,
                peer: service.peer().clone(),
                service: tokio::sync::Mutex::new(Some(service)),
            },
            skipped,
        ))
    }

    /// Call `tool` (the server's own name) with `arguments`: the text for the model, failed
    /// when the server says it is an error. Dropping the future cancels the request on the
    /// server.
    pub async fn call(&self, tool: &str, arguments: &Value) -> CallOutput {
        let args = match arguments {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            _ => return CallOutput::error("arguments must be a JSON object".into()),
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = args;
        match self.peer.call_tool(params).await {
            Ok(r) => {
                let mut parts: Vec<String> = r.content.iter().map(content_text).collect();
                if parts.is_empty()
                    && let Some(s) = &r.structured_content
                {
                    parts.push(s.to_string());
                }
                CallOutput {
                    text: parts.join("\n"),
                    is_error: r.is_error.unwrap_or(false),
                }
            }
            Err(e) => CallOutput::error(format!(
                "MCP server `{}` failed on `{tool}`: {e}",
                self.name
            )),
        }
    }

    async fn shutdown(&self) {
        if let Some(mut s) = self.service.lock().await.take() {
            let _ = s.close_with_timeout(Duration::from_secs(10)).await;
        }
    }
}

/// A content block as text for the model.
fn content_text(c: &ContentBlock) -> String {
    match c {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image: {}]", i.mime_type),
        ContentBlock::Audio(a) => format!("[audio: {}]", a.mime_type),
        other => serde_json::to_value(other)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| json!({"type": "unsupported"}).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_what_the_model_apis_accept() {
        assert_eq!(wire_name("notes", "add_note"), "notes__add_note");
        assert_eq!(wire_name("gh", "repo.list/all"), "gh__repo_list_all");
        assert!(
            wire_name("a-b", "c")
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }
}
