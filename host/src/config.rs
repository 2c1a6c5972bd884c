//! Configuration files: the user-level file (`$XDG_CONFIG_HOME/kiln/config.toml`, else
//! `~/.config/kiln/config.toml`) and the workspace's `kiln.toml`, layered in that order.
//! Owns parsing, validation (unknown fields are errors that name the file) and merging; the
//! meaning of a grant lives in `plugin::capability`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors reading configuration; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("invalid configuration in {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (line, column, field).
        message: String,
    },
    /// A value is well-formed TOML but not allowed.
    #[error("invalid configuration in {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
}

/// Filesystem access in a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

/// A filesystem grant: `"src"` (read) or `{ path = "src", access = "read-write" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FsGrant {
    /// Read access to a path.
    Path(String),
    /// Explicit access.
    Full {
        /// Workspace-relative path.
        path: String,
        /// Access granted.
        #[serde(default = "default_access")]
        access: Access,
    },
}

fn default_access() -> Access {
    Access::Read
}

impl FsGrant {
    /// The path and access of this grant.
    pub fn parts(&self) -> (&str, Access) {
        match self {
            FsGrant::Path(p) => (p, Access::Read),
            FsGrant::Full { path, access } => (path, *access),
        }
    }
}

/// An exec grant: a program and argument glob patterns (see the `exec` WIT interface).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecGrant {
    /// Program name or glob.
    pub program: String,
    /// Argument patterns; the last applies to all remaining arguments.
    #[serde(default)]
    pub args: Vec<String>,
}

/// `[plugins.NAME]`: what the user grants one plugin, and where a user plugin is loaded from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// A `.wasm` component to load (relative to the file that names it). Not for built-ins.
    pub path: Option<PathBuf>,
    /// Filesystem grants.
    pub fs: Option<Vec<FsGrant>>,
    /// Exec grants.
    pub exec: Option<Vec<ExecGrant>>,
    /// Environment variable names passed to programs the plugin runs.
    pub env: Option<Vec<String>>,
    /// Memory limit per instance in MiB.
    pub memory_mib: Option<u32>,
    /// Deadline per call in milliseconds.
    pub timeout_ms: Option<u32>,
    /// Cap on returned and captured output in bytes.
    pub output_bytes: Option<u32>,
    /// Plugin-specific settings passed to runners.
    pub settings: Option<BTreeMap<String, String>>,
    /// Paths outside the workspace that programs this plugin runs may write (absolute, or
    /// starting with `~/`), for example a build tool's cache. Enforced with Landlock.
    pub write: Option<Vec<String>>,
    /// Paths outside the workspace that programs this plugin runs may read (absolute, or
    /// starting with `~/`), besides the system and toolchain directories. Enforced with Landlock.
    pub read: Option<Vec<String>>,
    /// Programs this plugin runs may use the network (TCP). Default: no.
    pub net: Option<bool>,
    /// A user plugin may take a built-in's name only when it says so: `replaces = "NAME"`.
    pub replaces: Option<String>,
}

impl PluginConfig {
    /// Layer `over` on top of `self`: every field `over` sets wins.
    fn merge(&mut self, over: PluginConfig) {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            path,
            fs,
            exec,
            env,
            memory_mib,
            timeout_ms,
            output_bytes,
            write,
            read,
            net,
            replaces
        );
        if let Some(s) = over.settings {
            self.settings.get_or_insert_with(BTreeMap::new).extend(s);
        }
    }
}

/// One configuration file as written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    plugins: BTreeMap<String, PluginConfig>,
    #[serde(default)]
    llm: Option<crate::llm::LlmConfig>,
    #[serde(default)]
    fix: Option<FixConfig>,
    #[serde(default)]
    agent: Option<AgentConfig>,
    #[serde(default)]
    sandbox: Option<SandboxConfig>,
    #[serde(default)]
    mcp: Option<McpConfig>,
    /// `[pricing."MODEL"]`: USD per million tokens, for the cost kiln reports.
    #[serde(default)]
    pricing: Option<BTreeMap<String, crate::llm::pricing::Price>>,
}

/// `[mcp]`: MCP servers whose tools `kiln agent` offers to the model. They run outside kiln's
/// sandbox, so a workspace `kiln.toml` applies them only once trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// `[mcp.servers.NAME]`, by name (letters, digits, `-`, `_`; the model sees `NAME__tool`).
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// `[mcp.servers.NAME]`: one MCP server started over stdio when a command needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program (found on the host's PATH, or a path relative to the workspace).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Names of host environment variables passed to it; nothing else is inherited.
    #[serde(default)]
    pub env: Vec<String>,
}

/// `[sandbox]`: protections that hold for every plugin, edit and tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Extra protected path globs (workspace-relative), on top of `kiln.toml`, `.kiln/`, `.git/`.
    pub protect: Option<Vec<String>>,
    /// Refuse to run programs when Landlock confinement is not available (default: warn once).
    pub require_confinement: Option<bool>,
}

/// Hook commands (`[agent.hooks]` in kiln.toml). Each gets a JSON object on stdin.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Before each tool call: `{"tool","arguments"}` in; `{"decision":"allow"|"deny","reason",
    /// "arguments"}` out (rewritten arguments optional). A non-zero exit denies.
    pub before_tool: Option<String>,
    /// After each tool call: `{"tool","arguments","result","is_error"}` in.
    pub after_tool: Option<String>,
    /// Before each model call: `{"turn","messages"}` in (count of messages).
    pub before_llm: Option<String>,
    /// After each model call: `{"turn","text","tool_calls"}` in.
    pub after_llm: Option<String>,
}

/// `[agent]`: defaults for `kiln agent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The command `run_cmd` may run (like `--test-command`).
    pub test_command: Option<String>,
    /// Hook commands.
    pub hooks: Option<Hooks>,
}

/// `[fix]`: defaults for `kiln fix` in this project.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixConfig {
    /// The project prompt: what the code should do, conventions to keep.
    pub prompt: Option<String>,
    /// Default edit format.
    pub format: Option<String>,
    /// Default iteration ceiling.
    pub max_iters: Option<u32>,
}

/// The merged configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Per-plugin grants and settings, by plugin name.
    pub plugins: BTreeMap<String, PluginConfig>,
    /// `[llm]`, merged.
    pub llm: crate::llm::LlmConfig,
    /// `[fix]`, merged.
    pub fix: FixConfig,
    /// `[agent]`, merged.
    pub agent: AgentConfig,
    /// `[sandbox]`, merged (protect globs accumulate; a layer can only add protection).
    pub sandbox: SandboxConfig,
    /// `[mcp]`, merged (a later file's server of the same name replaces the earlier one).
    pub mcp: McpConfig,
    /// `[pricing]`, by model name (a later file's entry for the same model wins).
    pub pricing: BTreeMap<String, crate::llm::pricing::Price>,
    /// The files that were read, lowest precedence first.
    pub sources: Vec<PathBuf>,
    /// Whether the workspace's kiln.toml was applied whole (see [`Trust`]).
    pub trust: Trust,
}

/// Whether the workspace's `kiln.toml` may apply what widens access: plugin grants (`fs`,
/// `exec`, `env`, `write`, `net`, `replaces`), hooks, the agent's test command, MCP servers
/// (`[mcp.servers]`, which run outside the sandbox) and where the API key is sent (`[llm] base_url`, `api_key`, `api_key_env`). Like direnv and mise, a file
/// kiln has not seen, or that changed since the user ran `kiln trust`, applies only what
/// narrows (limits, protections, prompts, model settings) until it is trusted again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Trust {
    /// No workspace kiln.toml, or nothing in it needs trust.
    #[default]
    NotNeeded,
    /// Its content is the one the user trusted.
    Trusted,
    /// Applied because of `--yes` / `KILN_YES=1`.
    Assumed,
    /// Not trusted: these settings were ignored.
    Untrusted {
        /// The file.
        path: PathBuf,
        /// The settings that were ignored (`plugins.x.exec`, `agent.hooks`, ...).
        ignored: Vec<String>,
        /// Lines added (`+ ...`) and removed (`- ...`) since the trusted version; empty when
        /// the file was never trusted.
        changed: Vec<String>,
    },
}

impl Trust {
    /// The message for a person, when something was ignored.
    pub fn warning(&self) -> Option<String> {
        let Trust::Untrusted {
            path,
            ignored,
            changed,
        } = self
        else {
            return None;
        };
        let mut m = if changed.is_empty() {
            format!(
                "{} is not trusted yet: kiln ignores what it grants ({}).",
                path.display(),
                ignored.join(", ")
            )
        } else {
            format!(
                "{} changed since you trusted it; kiln ignores what it grants ({}) until you trust it again. Changed lines:\n{}",
                path.display(),
                ignored.join(", "),
                changed
                    .iter()
                    .map(|l| format!("  {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        };
        m.push_str(
            "\nReview it, then run `kiln trust` (or pass --yes / KILN_YES=1 to apply it for one run, e.g. in CI).",
        );
        Some(m)
    }
}

impl Config {
    /// Load the user file (if any) then `<workspace>/kiln.toml` (if any). The workspace file
    /// applies whole only when trusted (`kiln trust`) or when `assume_trust` (`--yes`).
    pub fn load(workspace: &Path, assume_trust: bool) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(user) = user_config_path()
            && user.is_file()
        {
            config.layer_file(&user)?;
        }
        let ws_file = workspace.join("kiln.toml");
        if ws_file.is_file() {
            let text = read_text(&ws_file)?;
            let trusted_text = trusted_copy(workspace);
            let recorded = trusted_text.as_deref() == Some(text.as_str());
            let trusted = assume_trust || recorded;
            let ignored = config.layer_text(&ws_file, &text, trusted)?;
            config.trust = if ignored.is_empty() {
                Trust::NotNeeded
            } else if trusted {
                if !recorded {
                    Trust::Assumed
                } else {
                    Trust::Trusted
                }
            } else {
                Trust::Untrusted {
                    path: ws_file.clone(),
                    ignored,
                    changed: trusted_text
                        .map(|old| line_changes(&old, &text))
                        .unwrap_or_default(),
                }
            };
        }
        Ok(config)
    }

    /// Merge one (trusted) file on top of what is loaded.
    pub fn layer_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = read_text(path)?;
        self.layer_text(path, &text, true).map(|_| ())
    }

    /// Merge one file's text; when not `trusted`, what widens access is dropped and its
    /// settings' names are returned (what trusting the file would apply is returned either way).
    fn layer_text(
        &mut self,
        path: &Path,
        text: &str,
        trusted: bool,
    ) -> Result<Vec<String>, ConfigError> {
        let mut file: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let ignored = file.needs_trust();
        if !trusted {
            file.drop_what_needs_trust();
        }
        let base = path.parent().unwrap_or(Path::new("."));
        for (name, mut pc) in file.plugins {
            validate(path, &name, &pc)?;
            if let Some(p) = &pc.path
                && p.is_relative()
            {
                pc.path = Some(base.join(p));
            }
            self.plugins.entry(name).or_default().merge(pc);
        }
        if let Some(llm) = file.llm {
            self.llm.merge(llm);
        }
        if let Some(agent) = file.agent {
            if agent.test_command.is_some() {
                self.agent.test_command = agent.test_command;
            }
            if agent.hooks.is_some() {
                self.agent.hooks = agent.hooks;
            }
        }
        if let Some(sandbox) = file.sandbox {
            if let Some(globs) = sandbox.protect {
                for g in &globs {
                    crate::path::check_relative(g.trim_end_matches('/')).map_err(|why| {
                        ConfigError::Invalid {
                            path: path.to_path_buf(),
                            message: format!("sandbox.protect: `{g}` {why}"),
                        }
                    })?;
                }
                self.sandbox
                    .protect
                    .get_or_insert_with(Vec::new)
                    .extend(globs);
            }
            if sandbox.require_confinement == Some(true) {
                self.sandbox.require_confinement = Some(true);
            }
        }
        if let Some(mcp) = file.mcp {
            for (name, server) in mcp.servers {
                validate_mcp_server(path, &name, &server)?;
                self.mcp.servers.insert(name, server);
            }
        }
        for (model, price) in file.pricing.unwrap_or_default() {
            if model.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: "pricing: a model name may not be empty".into(),
                });
            }
            if let Some((field, value)) = price.invalid_field() {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: format!(
                        "pricing.\"{model}\".{field}: {value} is not a price; give USD per million tokens (a number, 0 or more)"
                    ),
                });
            }
            self.pricing.insert(model, price);
        }
        if let Some(fix) = file.fix {
            if fix.prompt.is_some() {
                self.fix.prompt = fix.prompt;
            }
            if fix.format.is_some() {
                self.fix.format = fix.format;
            }
            if fix.max_iters.is_some() {
                self.fix.max_iters = fix.max_iters;
            }
        }
        self.sources.push(path.to_path_buf());
        Ok(ignored)
    }

    /// kiln's own files plus `[sandbox] protect`.
    pub fn protected(&self) -> crate::path::Protected {
        crate::path::Protected::new(self.sandbox.protect.as_deref().unwrap_or_default())
    }

    /// The configuration of plugin `name` (empty: nothing granted).
    pub fn plugin(&self, name: &str) -> PluginConfig {
        self.plugins.get(name).cloned().unwrap_or_default()
    }
}

impl File {
    /// The settings of this file that widen access (see [`Trust`]).
    fn needs_trust(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, pc) in &self.plugins {
            let fields = [
                ("fs", pc.fs.is_some()),
                ("exec", pc.exec.is_some()),
                ("env", pc.env.is_some()),
                ("write", pc.write.is_some()),
                ("read", pc.read.is_some()),
                ("net", pc.net.is_some()),
                ("replaces", pc.replaces.is_some()),
            ];
            out.extend(
                fields
                    .iter()
                    .filter(|(_, set)| *set)
                    .map(|(f, _)| format!("plugins.{name}.{f}")),
            );
        }
        if let Some(agent) = &self.agent {
            if agent.hooks.is_some() {
                out.push("agent.hooks".into());
            }
            if agent.test_command.is_some() {
                out.push("agent.test_command".into());
            }
        }
        if let Some(mcp) = &self.mcp {
            out.extend(mcp.servers.keys().map(|name| format!("mcp.servers.{name}")));
        }
        if let Some(llm) = &self.llm {
            let fields = [
                ("base_url", llm.base_url.is_some()),
                ("api_key", llm.api_key.is_some()),
                ("api_key_env", llm.api_key_env.is_some()),
            ];
            out.extend(
                fields
                    .iter()
                    .filter(|(_, set)| *set)
                    .map(|(f, _)| format!("llm.{f}")),
            );
        }
        out
    }

    fn drop_what_needs_trust(&mut self) {
        for pc in self.plugins.values_mut() {
            pc.fs = None;
            pc.exec = None;
            pc.env = None;
            pc.write = None;
            pc.read = None;
            pc.net = None;
            pc.replaces = None;
        }
        if let Some(agent) = &mut self.agent {
            agent.hooks = None;
            agent.test_command = None;
        }
        self.mcp = None;
        if let Some(llm) = &mut self.llm {
            llm.base_url = None;
            llm.api_key = None;
            llm.api_key_env = None;
        }
    }
}

fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Where trusted copies of workspace `kiln.toml` files are kept: `trusted/` beside the user's
/// configuration file, outside every workspace.
pub fn trust_dir() -> Option<PathBuf> {
    user_config_path().and_then(|p| p.parent().map(|d| d.join("trusted")))
}

/// The file holding the trusted copy of `workspace`'s kiln.toml.
fn trust_file(workspace: &Path) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let key = hex::encode(&Sha256::digest(workspace.as_os_str().as_encoded_bytes())[..16]);
    trust_dir().map(|d| d.join(format!("{key}.toml")))
}

fn trusted_copy(workspace: &Path) -> Option<String> {
    std::fs::read_to_string(trust_file(workspace)?).ok()
}

/// Record the current `kiln.toml` of `workspace` as trusted; returns the trusted file's path.
pub fn trust_workspace(workspace: &Path) -> Result<PathBuf, ConfigError> {
    let ws_file = workspace.join("kiln.toml");
    let text = read_text(&ws_file)?;
    // Refuse to trust a file that does not load.
    Config::default().layer_text(&ws_file, &text, true)?;
    let dest = trust_file(workspace).ok_or_else(|| ConfigError::Invalid {
        path: ws_file.clone(),
        message: "no home or configuration directory to keep the trust record in (set HOME or XDG_CONFIG_HOME)".into(),
    })?;
    let write = || -> std::io::Result<()> {
        let dir = dest.parent().expect("trust file has a parent");
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".trust-{}.tmp", std::process::id()));
        std::fs::write(&tmp, &text)?;
        std::fs::rename(&tmp, &dest)
    };
    write().map_err(|source| ConfigError::Read {
        path: dest.clone(),
        source,
    })?;
    Ok(dest)
}

/// Lines removed (`- `) and added (`+ `) between two versions, in order of appearance.
fn line_changes(old: &str, new: &str) -> Vec<String> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out: Vec<String> = old_lines
        .iter()
        .filter(|l| !new_lines.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        new_lines
            .iter()
            .filter(|l| !old_lines.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

fn validate(path: &Path, name: &str, pc: &PluginConfig) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    for g in pc.fs.iter().flatten() {
        let (p, _) = g.parts();
        if let Err(why) = crate::path::check_relative(p) {
            return Err(invalid(format!("plugins.{name}.fs: `{p}` {why}")));
        }
    }
    for g in pc.exec.iter().flatten() {
        if g.program.is_empty() {
            return Err(invalid(format!(
                "plugins.{name}.exec: `program` may not be empty"
            )));
        }
    }
    for w in pc.write.iter().flatten() {
        if !(w.starts_with('/') || w.starts_with("~/")) {
            return Err(invalid(format!(
                "plugins.{name}.write: `{w}` must be an absolute path or start with `~/` (the workspace is always writable)"
            )));
        }
    }
    for r in pc.read.iter().flatten() {
        if !(r.starts_with('/') || r.starts_with("~/")) {
            return Err(invalid(format!(
                "plugins.{name}.read: `{r}` must be an absolute path or start with `~/` (the workspace is always readable)"
            )));
        }
    }
    if pc.memory_mib == Some(0) || pc.timeout_ms == Some(0) {
        return Err(invalid(format!(
            "plugins.{name}: limits must be greater than zero"
        )));
    }
    Ok(())
}

fn validate_mcp_server(path: &Path, name: &str, s: &McpServerConfig) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(invalid(format!(
            "mcp.servers.{name}: a server name may use only letters, digits, `-` and `_` (its tools are offered as NAME__tool)"
        )));
    }
    if s.command.trim().is_empty() {
        return Err(invalid(format!(
            "mcp.servers.{name}: `command` may not be empty"
        )));
    }
    Ok(())
}

/// Grants implied by naming a runner on the command line (DESIGN §3: naming it is consent for
/// the build it runs): `--runner command --cmd "prog ..."` grants `prog`; `--runner cargo`
/// grants `cargo`, the variables rustup and cargo need, writing cargo's caches
/// (`CARGO_HOME/registry`, `CARGO_HOME/git` and its lock and cache-tracking files) and reading
/// its installed tools and configuration. Never writing `config.toml`, credentials or `bin/`:
/// a build script that could would run its code in the user's next plain `cargo`.
pub fn grant_runner_consent(
    config: &mut Config,
    runner: &str,
    cmd: Option<&str>,
) -> Result<(), String> {
    let pc = config.plugins.entry(runner.to_string()).or_default();
    if let Some(cmd) = cmd {
        let program = cmd.split_whitespace().next().ok_or("--cmd is empty")?;
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.trim_matches(['"', '\'']).to_string(),
            args: vec!["*".into()],
        });
    }
    if runner == "cargo" {
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: "cargo".into(),
            args: vec!["*".into()],
        });
        let cargo_home = std::env::var("CARGO_HOME")
            .ok()
            .filter(|h| Path::new(h).is_absolute())
            .unwrap_or_else(|| "~/.cargo".to_string());
        let under = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|n| format!("{}/{n}", cargo_home.trim_end_matches('/')))
                .collect()
        };
        // The caches, and the lock and cache-tracking files cargo keeps beside them (files
        // only: no new file can be created in CARGO_HOME itself).
        let write = under(&[
            "registry",
            "git",
            ".package-cache",
            ".package-cache-mutate",
            ".global-cache",
        ]);
        // Tools installed there and the configuration cargo reads (never the credentials).
        let read = under(&["bin", "config.toml", "config"]);
        for (list, add) in [(&mut pc.write, write), (&mut pc.read, read)] {
            let list = list.get_or_insert_with(Vec::new);
            for p in add {
                if !list.contains(&p) {
                    list.push(p);
                }
            }
        }
        let env = pc.env.get_or_insert_with(Vec::new);
        for v in [
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "CARGO_TARGET_DIR",
        ] {
            if !env.iter().any(|e| e == v) {
                env.push(v.to_string());
            }
        }
    }
    Ok(())
}

/// Grant the `shell` tool (and the `command` runner, for `compile_loop`) exactly the command
/// named by `--test-command` / `[agent] test_command`.
pub fn grant_test_command(config: &mut Config, cmd: &str) -> Result<(), String> {
    let mut words = cmd.split_whitespace().map(String::from);
    let program = words.next().ok_or("--test-command is empty")?;
    let args: Vec<String> = words.collect();
    for plugin in ["shell", "command"] {
        config
            .plugins
            .entry(plugin.into())
            .or_default()
            .exec
            .get_or_insert_with(Vec::new)
            .push(ExecGrant {
                program: program.clone(),
                args: if plugin == "command" {
                    vec!["*".into()]
                } else {
                    args.clone()
                },
            });
    }
    Ok(())
}

/// The user-level configuration file, if a home directory is known.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("kiln").join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pricing_is_parsed_validated_and_layered() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("kiln.toml");
        let mut c = Config::default();
        let ignored = c
            .layer_text(
                &ws,
                "[pricing.\"my-model\"]\ninput = 1.0\ncached_input = 0.5\noutput = 4\n",
                false,
            )
            .unwrap();
        assert!(ignored.is_empty(), "prices need no trust: {ignored:?}");
        let p = c.pricing["my-model"];
        assert_eq!((p.input, p.cached_input, p.output), (1.0, Some(0.5), 4.0));
        c.layer_text(&ws, "[pricing.\"my-model\"]\ninput = 2\noutput = 8\n", true)
            .unwrap();
        assert_eq!(c.pricing["my-model"].input, 2.0);
        let err = Config::default()
            .layer_text(&ws, "[pricing.m]\ninput = -1\noutput = 1\n", true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pricing.\"m\".input") && err.contains("kiln.toml"),
            "{err}"
        );
        let err = Config::default()
            .layer_text(
                &ws,
                "[pricing.m]\ninput = 1\noutput = 1\ncached = 1\n",
                true,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("cached"), "{err}");
        let err = Config::default()
            .layer_text(&ws, "[pricing.m]\ninput = 1\n", true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("output"), "{err}");
    }

    #[test]
    fn unknown_field_names_the_file_and_layers_merge() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        std::fs::write(
            &user,
            "[plugins.command]\nenv = [\"CC\"]\ntimeout_ms = 5000\n",
        )
        .unwrap();
        let ws = dir.path().join("kiln.toml");
        std::fs::write(&ws, "[plugins.command]\ntimeout_ms = 9000\nexec = [{ program = \"gcc\", args = [\"*\"] }]\n").unwrap();
        let mut c = Config::default();
        c.layer_file(&user).unwrap();
        c.layer_file(&ws).unwrap();
        let pc = c.plugin("command");
        assert_eq!(pc.timeout_ms, Some(9000));
        assert_eq!(pc.env, Some(vec!["CC".to_string()]));
        assert_eq!(pc.exec.unwrap()[0].program, "gcc");

        std::fs::write(&ws, "[plugins.command]\nexce = []\n").unwrap();
        let err = Config::default().layer_file(&ws).unwrap_err().to_string();
        assert!(err.contains("kiln.toml") && err.contains("exce"), "{err}");
        std::fs::write(&ws, "[plugins.fs]\nfs = [\"../etc\"]\n").unwrap();
        let err = Config::default().layer_file(&ws).unwrap_err().to_string();
        assert!(err.contains("plugins.fs.fs"), "{err}");
    }

    #[test]
    fn write_grants_are_absolute_or_home_and_cargo_consent_writes_only_its_caches() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("kiln.toml");
        std::fs::write(&ws, "[plugins.command]\nwrite = [\"target\"]\n").unwrap();
        let err = Config::default().layer_file(&ws).unwrap_err().to_string();
        assert!(err.contains("plugins.command.write: `target`"), "{err}");
        std::fs::write(
            &ws,
            "[plugins.command]\nwrite = [\"~/.cache\", \"/opt/x\"]\n",
        )
        .unwrap();
        Config::default().layer_file(&ws).unwrap();

        let mut c = Config::default();
        grant_runner_consent(&mut c, "cargo", None).unwrap();
        let home = std::env::var("CARGO_HOME").unwrap_or_else(|_| "~/.cargo".into());
        let pc = c.plugin("cargo");
        let write = pc.write.unwrap();
        assert_eq!(
            write,
            [
                "registry",
                "git",
                ".package-cache",
                ".package-cache-mutate",
                ".global-cache"
            ]
            .map(|n| format!("{home}/{n}"))
        );
        assert!(
            !write.contains(&home) && !write.iter().any(|w| w.ends_with("/bin")),
            "never CARGO_HOME itself, its config or bin/: {write:?}"
        );
        assert_eq!(pc.read.unwrap()[0], format!("{home}/bin"));
    }

    #[test]
    fn mcp_servers_need_trust_and_valid_names() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("kiln.toml");
        let text = "[mcp.servers.notes]\ncommand = \"notes-server\"\nargs = [\"--stdio\"]\nenv = [\"NOTES_TOKEN\"]\n";
        let mut c = Config::default();
        let ignored = c.layer_text(&ws, text, false).unwrap();
        assert_eq!(ignored, ["mcp.servers.notes"]);
        assert!(
            c.mcp.servers.is_empty(),
            "an untrusted file starts no server"
        );
        let mut c = Config::default();
        c.layer_text(&ws, text, true).unwrap();
        let s = &c.mcp.servers["notes"];
        assert_eq!(
            (s.command.as_str(), s.args.as_slice(), s.env.as_slice()),
            (
                "notes-server",
                &["--stdio".to_string()][..],
                &["NOTES_TOKEN".to_string()][..]
            )
        );
        let err = Config::default()
            .layer_text(&ws, "[mcp.servers.\"a.b\"]\ncommand = \"x\"\n", true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mcp.servers.a.b"), "{err}");
        let err = Config::default()
            .layer_text(&ws, "[mcp.servers.x]\ncommand = \"x\"\ncwd = \"/\"\n", true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cwd"), "{err}");
    }
}
