//! kiln-config: what a person writes down for kiln. It owns the configuration files (the
//! user-level `$XDG_CONFIG_HOME/kiln/config.toml`, else `~/.config/kiln/config.toml`, and the
//! workspace's `kiln.toml`, layered in that order): parsing, validation (unknown fields are
//! errors that name the file), merging, what an untrusted workspace file may set (an
//! allowlist: `UntrustedFile`), which component the user's grants belong to
//! ([`Config::grant_for`]) and the trust records (in the user's state directory). It also
//! owns the rules every workspace-relative path goes through ([`path`]) and the
//! "did you mean" suggestions for names a person typed ([`suggest`]).
//!
//! The meaning of a grant lives in the plugin layer (`kiln-plugin`'s `capability`). This crate
//! must never import the plugin runtime, the engine or the CLI: it depends only on the leaf
//! crates (`kiln-llm` for the model settings, `kiln-store` for the store URL, `kiln-state`
//! for the state directory).

pub mod path;
pub mod suggest;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors reading configuration; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The configuration file that could not be read.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("invalid configuration in {path}: {message}")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message (line, column, field).
        message: String,
    },
    /// A value is well-formed TOML but not allowed.
    #[error("invalid configuration in {path}: {message}")]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
    /// A command-line flag that names a program (`--cmd`, `--test-command`) names none.
    #[error("{flag} is empty")]
    EmptyCommand {
        /// The flag, as the user typed it.
        flag: &'static str,
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

/// Host defaults, the limits a plugin gets where neither the plugin nor the user asks for less.
pub const DEFAULT_MEMORY_MIB: u32 = 256;
/// Default deadline per plugin call.
pub const DEFAULT_TIMEOUT_MS: u32 = 30_000;
/// Default cap on returned and captured output.
pub const DEFAULT_OUTPUT_BYTES: u32 = 4 << 20;

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
    llm: Option<kiln_llm::LlmConfig>,
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
    pricing: Option<BTreeMap<String, kiln_llm::pricing::Price>>,
    /// `[budget]`: spend caps of `kiln fix`, `agent` and `loop`.
    #[serde(default)]
    budget: Option<BudgetConfig>,
    /// `[store]`: where runs are recorded; only from the user's own file (it carries
    /// credentials).
    #[serde(default, skip_serializing)]
    store: Option<StoreConfig>,
    /// `[batch]`: what batch tasks may name; only from the user's own file.
    #[serde(default, skip_serializing)]
    batch: Option<BatchConfig>,
    /// `[gc]`: how much of kiln's state to keep; only from the user's own file.
    #[serde(default, skip_serializing)]
    gc: Option<GcConfig>,
}

/// `[gc]`: how much of each workspace's undo history kiln's state directory keeps (see
/// `kiln gc`). Read only from the user's own configuration: what kiln keeps about your
/// runs is not a repository's to say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcConfig {
    /// Undo records kept per workspace, the newest (default 50).
    #[serde(default)]
    pub keep_runs: Option<usize>,
    /// Undo records older than this many days are removed (default 30).
    #[serde(default)]
    pub max_age_days: Option<u64>,
}

/// Undo records kept per workspace by default (`[gc] keep_runs`).
pub const DEFAULT_KEEP_RUNS: usize = 50;
/// Age in days past which undo records are removed by default (`[gc] max_age_days`).
pub const DEFAULT_MAX_AGE_DAYS: u64 = 30;

/// `[batch]`: the local directories a batch task's `repo` may name (absolute, or starting
/// with `~/`). Read only from the user's own configuration: a task or a workspace never
/// chooses which of the worker's directories it may copy. Default: none (git URLs only, and
/// for `kiln batch run` the task file's own directory).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Directories under which a task's local `repo` may be.
    #[serde(default)]
    pub local_repos: Vec<String>,
}

/// `[store]`: the store URL (`postgres://…`, `sqlite:PATH`), read only from the user's own
/// configuration, never from a workspace `kiln.toml` (the URL carries credentials). Its
/// `Debug` hides any password.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The store URL (`--store` and `KILN_STORE` win).
    pub url: Option<String>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = self
            .url
            .as_deref()
            .map(|u| match u.parse::<kiln_store::StoreUrl>() {
                Ok(parsed) => parsed.to_string(),
                Err(_) => "(invalid)".to_string(),
            });
        f.debug_struct("StoreConfig").field("url", &url).finish()
    }
}

/// `[budget]`: what one `kiln fix`, `agent` or `loop` may spend on model requests (the
/// `--max-cost` and `--max-tokens` flags win). An untrusted workspace file may only lower it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// USD over every request of the run (needs a known price for the model).
    pub max_cost_usd: Option<f64>,
    /// Tokens over every request of the run (input, cached, cache writes and output).
    pub max_tokens: Option<u64>,
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
    /// The runner `kiln fix`/`check` use when no flag names one (trusted files only: naming
    /// a runner grants the build it runs).
    pub runner: Option<String>,
    /// The `command` runner's command when no flag names one (trusted files only: it is
    /// granted like `--cmd`).
    pub cmd: Option<String>,
    /// The runner's deadline per check, in seconds (default [`DEFAULT_RUNNER_TIMEOUT_S`]).
    pub timeout: Option<u32>,
}

/// The merged configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Per-plugin grants and settings, by plugin name.
    pub plugins: BTreeMap<String, PluginConfig>,
    /// `[llm]`, merged.
    pub llm: kiln_llm::LlmConfig,
    /// `[fix]`, merged.
    pub fix: FixConfig,
    /// `[agent]`, merged.
    pub agent: AgentConfig,
    /// `[sandbox]`, merged (protect globs accumulate; a layer can only add protection).
    pub sandbox: SandboxConfig,
    /// `[mcp]`, merged (a later file's server of the same name replaces the earlier one).
    pub mcp: McpConfig,
    /// `[pricing]`, by model name (a later file's entry for the same model wins).
    pub pricing: BTreeMap<String, kiln_llm::pricing::Price>,
    /// `[budget]`, merged (a later file's value replaces; an untrusted one only lowers).
    pub budget: BudgetConfig,
    /// `[store]`, from the user's configuration only.
    pub store: StoreConfig,
    /// `[batch]`, from the user's configuration only.
    pub batch: BatchConfig,
    /// `[gc]`, from the user's configuration only.
    pub gc: GcConfig,
    /// The files that were read, lowest precedence first.
    pub sources: Vec<PathBuf>,
    /// Whether the workspace's kiln.toml was applied whole (see [`Trust`]).
    pub trust: Trust,
    /// Per plugin the user's configuration grants something to: the component those grants
    /// belong to (see [`Config::grant_for`]).
    pub bindings: BTreeMap<String, Bound>,
    /// The plugin sections merged without the user's configuration: what a plugin gets when
    /// it is not the component the user's grants belong to.
    unbound: BTreeMap<String, PluginConfig>,
    /// Components named by a workspace file's `path` (as written, resolved).
    workspace_paths: Vec<PathBuf>,
}

/// The component a plugin's grants in the user's configuration belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// The user's section names a `path`: that file, with the sha256 of its bytes when kiln read
    /// the configuration (`None`: it could not be read, so nothing matches it).
    File {
        /// The path as named (resolved against the user's configuration directory).
        path: PathBuf,
        /// Hex sha256 of its content.
        sha256: Option<String>,
    },
    /// No `path`: the built-in of that name, or a component named on the command line
    /// (`--plugin FILE`), never one named by a workspace file.
    Unnamed,
}

/// A component being loaded, as [`Config::grant_for`] compares it with a [`Bound`].
#[derive(Debug, Clone, Copy)]
pub enum Component<'a> {
    /// Embedded in kiln.
    Builtin,
    /// Read from a file, with the hex sha256 of the bytes compiled.
    File {
        /// The component file.
        path: &'a Path,
        /// Hex sha256 of the bytes that were compiled.
        sha256: &'a str,
    },
}

/// Whether the workspace's `kiln.toml` applied whole. Like direnv and mise, a file kiln has not
/// seen, or that changed since the user ran `kiln trust`, applies only an allowlist of fields
/// that can neither widen access nor raise limits or cost (`UntrustedFile`: limits that
/// lower the effective value, `[sandbox]` protections, `[fix]` prompt/format/max_iters that
/// lower, a few `[llm]` sampling settings, lowered `[llm]` limits and a lowered `[budget]`)
/// until it is trusted again;
/// every other field is ignored and named in the warning.
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
        /// The workspace's kiln.toml.
        path: PathBuf,
        /// The settings that were ignored (`plugins.x.exec`, `agent.hooks`, ...).
        ignored: Vec<String>,
        /// Lines added (`+ ...`) and removed (`- ...`) since the trusted version; empty when
        /// the file was never trusted.
        changed: Vec<String>,
        /// A trust record an older kiln kept beside the user's configuration: no longer read.
        stale_record: Option<PathBuf>,
    },
}

impl Trust {
    /// The message for a person, when something was ignored.
    pub fn warning(&self) -> Option<String> {
        let Trust::Untrusted {
            path,
            ignored,
            changed,
            stale_record,
        } = self
        else {
            return None;
        };
        let mut m = if changed.is_empty() {
            format!(
                "{} is not trusted yet: kiln applies only fields that cannot widen access or raise limits or cost, and ignores {}.",
                path.display(),
                ignored.join(", ")
            )
        } else {
            format!(
                "{} changed since you trusted it; until you trust it again kiln applies only fields that cannot widen access or raise limits or cost, and ignores {}. Changed lines:\n{}",
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
        if let Some(old) = stale_record {
            m.push_str(&format!(
                "\nNote: {} is a trust record of an older kiln; trust records now live in the user's state directory and the old one is not read.",
                old.display()
            ));
        }
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
            let ignored = config.layer_text(&ws_file, &text, Layer::Workspace { trusted })?;
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
                    stale_record: if trusted_text.is_none() {
                        old_trust_file(workspace).filter(|p| p.is_file())
                    } else {
                        None
                    },
                    changed: trusted_text
                        .map(|old| line_changes(&old, &text))
                        .unwrap_or_default(),
                }
            };
        }
        Ok(config)
    }

    /// Merge one file of the user's on top of what is loaded (applied whole; its plugin grants
    /// belong to the components it names, see [`Config::grant_for`]).
    pub fn layer_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = read_text(path)?;
        self.layer_text(path, &text, Layer::User).map(|_| ())
    }

    /// Merge one file's text. A workspace file that is not `trusted` applies only its
    /// [`UntrustedFile`] part. Returns the settings that apply only once the file is trusted
    /// (the same either way; empty for the user's file).
    fn layer_text(
        &mut self,
        path: &Path,
        text: &str,
        layer: Layer,
    ) -> Result<Vec<String>, ConfigError> {
        let parse_err = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        };
        let full: File = toml::from_str(text).map_err(parse_err)?;
        let Layer::Workspace { trusted } = layer else {
            self.apply(path, full, Layer::User)?;
            return Ok(Vec::new());
        };
        // Every value is checked, whether it applies or not (nothing is read from disk).
        Config::default().apply(path, full.clone(), TRUSTED_WORKSPACE)?;
        let allowed: UntrustedFile = toml::from_str(text).map_err(parse_err)?;
        let (narrow, mut ignored) = allowed.narrowing(self);
        for (name, pc) in &full.plugins {
            if pc.path.is_some() && self.bindings.contains_key(name) {
                let named = format!("plugins.{name}.path");
                if let Some(entry) = ignored.iter_mut().find(|i| **i == named) {
                    entry.push_str(" (your own configuration grants this plugin: its grants stay with the component you named)");
                }
            }
        }
        if trusted {
            self.apply(path, full, layer)?;
        } else {
            self.apply(path, narrow, Layer::Untrusted)?;
        }
        Ok(ignored)
    }

    /// `[store]`: taken from the user's own file only; a workspace file (trusted or not) that
    /// sets it is refused, since a store URL carries credentials.
    fn apply_store(
        &mut self,
        path: &Path,
        store: Option<StoreConfig>,
        layer: Layer,
    ) -> Result<(), ConfigError> {
        let Some(store) = store else { return Ok(()) };
        if layer != Layer::User {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: "a workspace kiln.toml may not set [store]: a store URL carries credentials, so kiln reads it only from --store, KILN_STORE or [store] url in your own configuration".into(),
            });
        }
        self.store = store;
        Ok(())
    }

    /// Merge one parsed file.
    fn apply(&mut self, path: &Path, file: File, layer: Layer) -> Result<(), ConfigError> {
        self.apply_plugins(path, file.plugins, layer)?;
        if let Some(llm) = file.llm {
            // An untrusted layer's limits were checked to lower (`narrowing`).
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
            self.apply_sandbox(path, sandbox)?;
        }
        if let Some(mcp) = file.mcp {
            for (name, server) in mcp.servers {
                validate_mcp_server(path, &name, &server)?;
                self.mcp.servers.insert(name, server);
            }
        }
        self.apply_pricing(path, file.pricing.unwrap_or_default())?;
        if let Some(b) = file.budget {
            self.apply_budget(path, b)?;
        }
        self.apply_store(path, file.store, layer)?;
        if let Some(batch) = file.batch {
            if layer != Layer::User {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: "a workspace kiln.toml may not set [batch]: which of your directories a batch task may copy is yours to say, in your own configuration".into(),
                });
            }
            self.batch = batch;
        }
        if let Some(gc) = file.gc {
            if layer != Layer::User {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: "a workspace kiln.toml may not set [gc]: how much of your run history kiln keeps is yours to say, in your own configuration".into(),
                });
            }
            self.gc = gc;
        }
        if let Some(fix) = file.fix {
            self.apply_fix(fix, layer);
        }
        self.sources.push(path.to_path_buf());
        Ok(())
    }

    /// Merge one file's `[plugins.NAME]` sections: a user file binds each name to its
    /// component, a workspace file's sections are kept apart until trusted, an untrusted
    /// file may only lower what is granted.
    fn apply_plugins(
        &mut self,
        path: &Path,
        plugins: BTreeMap<String, PluginConfig>,
        layer: Layer,
    ) -> Result<(), ConfigError> {
        let base = path.parent().unwrap_or(Path::new("."));
        for (name, mut pc) in plugins {
            validate(path, &name, &pc)?;
            if let Some(p) = &pc.path
                && p.is_relative()
            {
                pc.path = Some(base.join(p));
            }
            match layer {
                Layer::User => {
                    let bound = match &pc.path {
                        Some(p) => Bound::File {
                            path: p.clone(),
                            sha256: p
                                .is_file()
                                .then(|| std::fs::read(p).ok())
                                .flatten()
                                .map(|b| sha256_hex(&b)),
                        },
                        None => self.bindings.get(&name).cloned().unwrap_or(Bound::Unnamed),
                    };
                    self.bindings.insert(name.clone(), bound);
                }
                Layer::Workspace { .. } => {
                    self.workspace_paths.extend(pc.path.clone());
                    self.unbound
                        .entry(name.clone())
                        .or_default()
                        .merge(pc.clone());
                }
                Layer::Untrusted => {
                    let unbound = self.unbound.entry(name.clone()).or_default();
                    unbound.merge(lowered(unbound, &pc));
                    let merged = self.plugins.entry(name).or_default();
                    merged.merge(lowered(merged, &pc));
                    continue;
                }
            }
            self.plugins.entry(name).or_default().merge(pc);
        }
        Ok(())
    }

    /// Merge a file's `[fix]`; an untrusted file may only lower the iteration ceiling.
    fn apply_fix(&mut self, fix: FixConfig, layer: Layer) {
        if fix.prompt.is_some() {
            self.fix.prompt = fix.prompt;
        }
        if fix.format.is_some() {
            self.fix.format = fix.format;
        }
        // An untrusted file never gets here with these (its allowlist has no such keys).
        if fix.runner.is_some() {
            self.fix.runner = fix.runner;
        }
        if fix.cmd.is_some() {
            self.fix.cmd = fix.cmd;
        }
        if let Some(n) = fix.max_iters {
            self.fix.max_iters = Some(match layer {
                Layer::Untrusted => n.min(self.fix.max_iters.unwrap_or(DEFAULT_MAX_ITERS)),
                _ => n,
            });
        }
        if let Some(n) = fix.timeout {
            self.fix.timeout = Some(match layer {
                Layer::Untrusted => n.min(self.fix.timeout.unwrap_or(DEFAULT_RUNNER_TIMEOUT_S)),
                _ => n,
            });
        }
    }

    fn apply_sandbox(&mut self, path: &Path, sandbox: SandboxConfig) -> Result<(), ConfigError> {
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
        Ok(())
    }

    fn apply_budget(&mut self, path: &Path, b: BudgetConfig) -> Result<(), ConfigError> {
        if let Some(c) = b.max_cost_usd {
            if !(c.is_finite() && c >= 0.0) {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: format!(
                        "budget.max_cost_usd: {c} is not an amount; give USD (a number, 0 or more)"
                    ),
                });
            }
            self.budget.max_cost_usd = Some(c);
        }
        if b.max_tokens.is_some() {
            self.budget.max_tokens = b.max_tokens;
        }
        Ok(())
    }

    fn apply_pricing(
        &mut self,
        path: &Path,
        pricing: BTreeMap<String, kiln_llm::pricing::Price>,
    ) -> Result<(), ConfigError> {
        for (model, price) in pricing {
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
        Ok(())
    }

    /// What plugin `name` is granted when `component` is the one loaded for it. The user's
    /// grants for `name` belong to the component the user named: the file their
    /// section's `path` names, with the same bytes as when kiln read the configuration, or,
    /// without a `path`, the built-in or a `--plugin` file — never a component a workspace
    /// file names. Any other component gets only what the workspace file (once trusted)
    /// grants, and the second value says why, for a warning.
    pub fn grant_for(
        &self,
        name: &str,
        component: Component<'_>,
    ) -> (PluginConfig, Option<String>) {
        let Some(bound) = self.bindings.get(name) else {
            return (self.plugin(name), None);
        };
        let same_file = |a: &Path, b: &Path| {
            a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
        };
        let mismatch = match (bound, component) {
            (Bound::File { path, sha256 }, Component::File { path: p, sha256: h }) => {
                if !same_file(path, p) {
                    Some(format!(
                        "it is loaded from {} (sha256 {h}), not from {} that your configuration names",
                        p.display(),
                        path.display()
                    ))
                } else if sha256.as_deref() != Some(h) {
                    Some(format!(
                        "{} changed since kiln read your configuration (sha256 {} then, {h} now)",
                        p.display(),
                        sha256.as_deref().unwrap_or("unreadable")
                    ))
                } else {
                    None
                }
            }
            (Bound::File { path, .. }, Component::Builtin) => Some(format!(
                "the built-in is loaded, not {} that your configuration names",
                path.display()
            )),
            (Bound::Unnamed, Component::Builtin) => None,
            (Bound::Unnamed, Component::File { path: p, sha256: h }) => self
                .workspace_paths
                .iter()
                .any(|w| same_file(w, p))
                .then(|| {
                    format!(
                        "it is loaded from {} (sha256 {h}), which the workspace's kiln.toml names, not a component you named",
                        p.display()
                    )
                }),
        };
        match mismatch {
            None => (self.plugin(name), None),
            Some(why) => (
                self.unbound.get(name).cloned().unwrap_or_default(),
                Some(format!(
                    "plugin `{name}`: the grants in your configuration do not apply: {why}. It runs with only what the workspace's kiln.toml grants it."
                )),
            ),
        }
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

/// How a file is layered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// The user's own configuration: applies whole; its plugin grants are bound to the
    /// components it names.
    User,
    /// The workspace's kiln.toml; applies whole only when `trusted`.
    Workspace {
        /// Trusted (`kiln trust`, `--yes`).
        trusted: bool,
    },
    /// The [`UntrustedFile`] part of an untrusted workspace file (limits only lower).
    Untrusted,
}

/// A workspace file applied whole (never read as the user's: that would hash the files its
/// `path`s name).
const TRUSTED_WORKSPACE: Layer = Layer::Workspace { trusted: true };

/// The `kiln fix` iteration ceiling when nothing sets one (the same default `kiln fix` and the
/// MCP server use); an untrusted file may only lower it.
pub const DEFAULT_MAX_ITERS: u32 = 5;
/// A fix loop runner's default deadline per check, in seconds (10 minutes: a fresh build of a
/// crate with dependencies takes minutes).
pub const DEFAULT_RUNNER_TIMEOUT_S: u32 = 600;

/// The longest `[fix] prompt` an untrusted file may set: a prompt is sent with every request,
/// so a longer one raises cost and needs trust.
pub const UNTRUSTED_PROMPT_MAX: usize = 16 * 1024;

/// Any other keys of a table: what an untrusted file sets but may not.
type Other = BTreeMap<String, toml::Value>;

/// The ALLOWLIST: everything an untrusted workspace `kiln.toml` may set. Only these fields
/// exist here; every other key of the file (a field added to [`File`] later included) lands
/// in an `other` map and is ignored with a warning. Limits apply only where they lower the
/// effective value (see [`UntrustedFile::narrowing`]).
#[derive(Debug, Default, Deserialize)]
struct UntrustedFile {
    #[serde(default)]
    plugins: BTreeMap<String, UntrustedPlugin>,
    #[serde(default)]
    llm: Option<UntrustedLlm>,
    #[serde(default)]
    fix: Option<UntrustedFix>,
    #[serde(default)]
    sandbox: Option<UntrustedSandbox>,
    #[serde(default)]
    budget: Option<UntrustedBudget>,
    #[serde(flatten)]
    other: Other,
}

/// `[budget]` untrusted: caps that lower what applies (or add one where none applies).
#[derive(Debug, Default, Deserialize)]
struct UntrustedBudget {
    max_cost_usd: Option<f64>,
    max_tokens: Option<u64>,
    #[serde(flatten)]
    other: Other,
}

/// `[plugins.NAME]` untrusted: limits, applied only where they lower.
#[derive(Debug, Default, Deserialize)]
struct UntrustedPlugin {
    memory_mib: Option<u32>,
    timeout_ms: Option<u32>,
    output_bytes: Option<u32>,
    #[serde(flatten)]
    other: Other,
}

/// `[llm]` untrusted: sampling switches, and limits applied only where they lower. Not the
/// model or provider (cost, and which key goes where), endpoints or keys.
#[derive(Debug, Default, Deserialize)]
struct UntrustedLlm {
    temperature: Option<f64>,
    omit_temperature: Option<bool>,
    disable_thinking: Option<bool>,
    stream: Option<bool>,
    max_tokens: Option<u32>,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retries: Option<u32>,
    stream_max_retries: Option<u32>,
    max_reply_bytes: Option<u64>,
    #[serde(flatten)]
    other: Other,
}

/// `[fix]` untrusted: the prompt (up to [`UNTRUSTED_PROMPT_MAX`]), the format, and a lower
/// iteration ceiling.
#[derive(Debug, Default, Deserialize)]
struct UntrustedFix {
    prompt: Option<String>,
    format: Option<String>,
    max_iters: Option<u32>,
    timeout: Option<u32>,
    #[serde(flatten)]
    other: Other,
}

/// `[sandbox]` untrusted: both fields only add protection.
#[derive(Debug, Default, Deserialize)]
struct UntrustedSandbox {
    protect: Option<Vec<String>>,
    require_confinement: Option<bool>,
    #[serde(flatten)]
    other: Other,
}

/// The names of the keys in `other` under `prefix`, tables expanded `depth` more levels.
fn other_keys(prefix: &str, other: &Other, depth: usize, out: &mut Vec<String>) {
    for (k, v) in other {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            // An empty table sets nothing.
            toml::Value::Table(t) if t.is_empty() => {}
            toml::Value::Table(t) if depth > 0 => {
                let t: Other = t.clone().into_iter().collect();
                other_keys(&key, &t, depth - 1, out);
            }
            _ => out.push(key),
        }
    }
}

/// `value` if it does not raise `current`; else `None`, with the key named in `ignored`.
fn lower_only<T: PartialOrd + std::fmt::Display + Copy>(
    key: String,
    value: Option<T>,
    current: T,
    ignored: &mut Vec<String>,
) -> Option<T> {
    let v = value?;
    if v <= current {
        Some(v)
    } else {
        ignored.push(format!("{key} (raises {current} to {v})"));
        None
    }
}

impl UntrustedFile {
    /// The file as it applies untrusted, and the names of what it sets that does not apply
    /// (`config`: what is loaded so far, against which limits must lower).
    fn narrowing(self, config: &Config) -> (File, Vec<String>) {
        let mut ignored = Vec::new();
        let top: Other = self
            .other
            .into_iter()
            .filter(|(k, _)| k != "plugins")
            .collect();
        for (k, v) in &top {
            let depth = if k == "mcp" { 2 } else { 1 };
            other_keys(
                "",
                &BTreeMap::from([(k.clone(), v.clone())]),
                depth,
                &mut ignored,
            );
        }
        let mut file = File::default();
        for (name, up) in self.plugins {
            let pc = up.narrowing(&name, &config.plugin(&name), &mut ignored);
            file.plugins.insert(name, pc);
        }
        if let Some(llm) = self.llm {
            file.llm = Some(llm.narrowing(&config.llm, &mut ignored));
        }
        if let Some(fix) = self.fix {
            other_keys("fix", &fix.other, 0, &mut ignored);
            let prompt = match fix.prompt {
                Some(p) if p.len() > UNTRUSTED_PROMPT_MAX => {
                    ignored.push(format!(
                        "fix.prompt (longer than {UNTRUSTED_PROMPT_MAX} bytes)"
                    ));
                    None
                }
                p => p,
            };
            file.fix = Some(FixConfig {
                prompt,
                format: fix.format,
                max_iters: lower_only(
                    "fix.max_iters".into(),
                    fix.max_iters,
                    config.fix.max_iters.unwrap_or(DEFAULT_MAX_ITERS),
                    &mut ignored,
                ),
                runner: None,
                cmd: None,
                timeout: lower_only(
                    "fix.timeout".into(),
                    fix.timeout,
                    config.fix.timeout.unwrap_or(DEFAULT_RUNNER_TIMEOUT_S),
                    &mut ignored,
                ),
            });
        }
        if let Some(sandbox) = self.sandbox {
            other_keys("sandbox", &sandbox.other, 0, &mut ignored);
            file.sandbox = Some(SandboxConfig {
                protect: sandbox.protect,
                require_confinement: sandbox.require_confinement.filter(|r| *r),
            });
        }
        if let Some(budget) = self.budget {
            other_keys("budget", &budget.other, 0, &mut ignored);
            let have = config.budget;
            file.budget = Some(BudgetConfig {
                max_cost_usd: match have.max_cost_usd {
                    Some(c) => lower_only(
                        "budget.max_cost_usd".into(),
                        budget.max_cost_usd,
                        c,
                        &mut ignored,
                    ),
                    None => budget.max_cost_usd,
                },
                max_tokens: match have.max_tokens {
                    Some(t) => lower_only(
                        "budget.max_tokens".into(),
                        budget.max_tokens,
                        t,
                        &mut ignored,
                    ),
                    None => budget.max_tokens,
                },
            });
        }
        (file, ignored)
    }
}

impl UntrustedPlugin {
    /// The limits that lower what `have` (the section so far) allows.
    fn narrowing(self, name: &str, have: &PluginConfig, ignored: &mut Vec<String>) -> PluginConfig {
        other_keys(&format!("plugins.{name}"), &self.other, 0, ignored);
        let key = |f: &str| format!("plugins.{name}.{f}");
        PluginConfig {
            memory_mib: lower_only(
                key("memory_mib"),
                self.memory_mib,
                have.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB),
                ignored,
            ),
            timeout_ms: lower_only(
                key("timeout_ms"),
                self.timeout_ms,
                have.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
                ignored,
            ),
            output_bytes: lower_only(
                key("output_bytes"),
                self.output_bytes,
                have.output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES),
                ignored,
            ),
            ..PluginConfig::default()
        }
    }
}

impl UntrustedLlm {
    fn narrowing(
        self,
        have: &kiln_llm::LlmConfig,
        ignored: &mut Vec<String>,
    ) -> kiln_llm::LlmConfig {
        use kiln_llm::settings as d;
        other_keys("llm", &self.other, 0, ignored);
        let key = |f: &str| format!("llm.{f}");
        kiln_llm::LlmConfig {
            temperature: self.temperature,
            omit_temperature: self.omit_temperature,
            disable_thinking: self.disable_thinking,
            stream: self.stream,
            max_tokens: lower_only(
                key("max_tokens"),
                self.max_tokens,
                have.max_tokens.unwrap_or(d::DEFAULT_MAX_TOKENS),
                ignored,
            ),
            timeout_secs: lower_only(
                key("timeout_secs"),
                self.timeout_secs,
                have.timeout_secs.unwrap_or(d::DEFAULT_TIMEOUT_SECS),
                ignored,
            ),
            connect_timeout_secs: lower_only(
                key("connect_timeout_secs"),
                self.connect_timeout_secs,
                have.connect_timeout_secs
                    .unwrap_or(d::DEFAULT_CONNECT_TIMEOUT_SECS),
                ignored,
            ),
            idle_timeout_secs: lower_only(
                key("idle_timeout_secs"),
                self.idle_timeout_secs,
                have.idle_timeout_secs
                    .unwrap_or(d::DEFAULT_IDLE_TIMEOUT_SECS),
                ignored,
            ),
            max_retries: lower_only(
                key("max_retries"),
                self.max_retries,
                have.max_retries.unwrap_or(d::DEFAULT_MAX_RETRIES),
                ignored,
            ),
            stream_max_retries: lower_only(
                key("stream_max_retries"),
                self.stream_max_retries,
                have.stream_max_retries
                    .unwrap_or(d::DEFAULT_STREAM_MAX_RETRIES),
                ignored,
            ),
            max_reply_bytes: lower_only(
                key("max_reply_bytes"),
                self.max_reply_bytes,
                have.max_reply_bytes.unwrap_or(d::DEFAULT_MAX_REPLY_BYTES),
                ignored,
            ),
            ..Default::default()
        }
    }
}

/// `pc`'s limits, each no higher than what `have` has (or the default): what an untrusted
/// layer may merge into `have`.
fn lowered(have: &PluginConfig, pc: &PluginConfig) -> PluginConfig {
    let low = |v: Option<u32>, h: Option<u32>, d: u32| v.map(|v| v.min(h.unwrap_or(d)));
    PluginConfig {
        memory_mib: low(pc.memory_mib, have.memory_mib, DEFAULT_MEMORY_MIB),
        timeout_ms: low(pc.timeout_ms, have.timeout_ms, DEFAULT_TIMEOUT_MS),
        output_bytes: low(pc.output_bytes, have.output_bytes, DEFAULT_OUTPUT_BYTES),
        ..PluginConfig::default()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// kiln's directory in the user's state directory: `$XDG_STATE_HOME/kiln` (an absolute
/// `XDG_STATE_HOME`), else `~/.local/state/kiln`. Outside every workspace.
fn user_state_dir() -> Option<PathBuf> {
    kiln_state::base().ok()
}

/// Where trusted copies of workspace `kiln.toml` files are kept: `trust/` in kiln's state
/// directory (`$XDG_STATE_HOME/kiln/trust`, else `~/.local/state/kiln/trust`), one file per
/// workspace keyed by the hash of its canonical path.
pub fn trust_dir() -> Option<PathBuf> {
    user_state_dir().map(|d| d.join("trust"))
}

/// The key of `workspace`: the hash of its canonical path.
fn workspace_key(workspace: &Path) -> String {
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    sha256_hex(canonical.as_os_str().as_encoded_bytes())[..32].to_string()
}

/// The file holding the trusted copy of `workspace`'s kiln.toml.
fn trust_file(workspace: &Path) -> Option<PathBuf> {
    trust_dir().map(|d| d.join(format!("{}.toml", workspace_key(workspace))))
}

/// Where kiln kept the record before (`trusted/` beside the user's configuration file); such
/// a record is no longer read, only mentioned.
fn old_trust_file(workspace: &Path) -> Option<PathBuf> {
    let key = &sha256_hex(workspace.as_os_str().as_encoded_bytes())[..32];
    user_config_path()
        .and_then(|p| p.parent().map(|d| d.join("trusted")))
        .map(|d| d.join(format!("{key}.toml")))
}

fn trusted_copy(workspace: &Path) -> Option<String> {
    std::fs::read_to_string(trust_file(workspace)?).ok()
}

/// Record the current `kiln.toml` of `workspace` as trusted; returns the trusted file's path.
pub fn trust_workspace(workspace: &Path) -> Result<PathBuf, ConfigError> {
    let ws_file = workspace.join("kiln.toml");
    let text = read_text(&ws_file)?;
    // Refuse to trust a file that does not load.
    Config::default().layer_text(&ws_file, &text, Layer::Workspace { trusted: true })?;
    let dest = trust_file(workspace).ok_or_else(|| ConfigError::Invalid {
        path: ws_file.clone(),
        message: "no state directory to keep the trust record in (set HOME or XDG_STATE_HOME)"
            .into(),
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
        if !(w.starts_with('/') || w.starts_with("~/") || w == "~") {
            return Err(invalid(format!(
                "plugins.{name}.write: `{w}` must be an absolute path or start with `~/` (the workspace is always writable)"
            )));
        }
    }
    for r in pc.read.iter().flatten() {
        if !(r.starts_with('/') || r.starts_with("~/") || r == "~") {
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

/// Grants implied by naming a runner on the command line (naming it is consent for
/// the build it runs): `--runner command --cmd "prog ..."` grants `prog`; `--runner cargo`
/// grants `cargo`, the variables rustup and cargo need, writing cargo's caches
/// (`CARGO_HOME/registry`, `CARGO_HOME/git` and its lock and cache-tracking files) and reading
/// its installed tools and configuration. Never writing `config.toml`, credentials or `bin/`:
/// a build script that could would run its code in the user's next plain `cargo`.
pub fn grant_runner_consent(
    config: &mut Config,
    runner: &str,
    cmd: Option<&str>,
) -> Result<(), ConfigError> {
    let pc = config.plugins.entry(runner.to_string()).or_default();
    if let Some(cmd) = cmd {
        let program = cmd
            .split_whitespace()
            .next()
            .ok_or(ConfigError::EmptyCommand { flag: "--cmd" })?;
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.trim_matches(['"', '\'']).to_string(),
            args: vec!["*".into()],
        });
    }
    // The built-in runners of other toolchains: the tool itself, with any arguments (the
    // plugin's manifest narrows it: a call must fit both), and the variables it reads.
    let (programs, args, env): (&[&str], &[&str], &[&str]) = match runner {
        // The pytest runner runs one fixed `python3 -c SCRIPT` that calls `pytest.main`.
        "pytest" => (
            &["python3", "python"],
            &["-c", "*"],
            &["VIRTUAL_ENV", "PYTHONPATH"],
        ),
        "go" => (&["go"], &["*"], &["GOFLAGS", "GOTOOLCHAIN", "GOPROXY"]),
        "tsc" => (&["tsc", "node_modules/.bin/tsc"], &["*"], &[]),
        "node" => (&["npm", "node"], &["*"], &["NODE_OPTIONS", "NO_COLOR"]),
        "make" => (&["make", "cmake"], &["*"], &["CC", "CXX", "CFLAGS"]),
        _ => (&[], &[], &[]),
    };
    for program in programs {
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
        });
    }
    if !env.is_empty() {
        let list = pc.env.get_or_insert_with(Vec::new);
        for v in env {
            if !list.iter().any(|e| e == v) {
                list.push(v.to_string());
            }
        }
    }
    if runner == "go"
        && let Some(cache) = go_module_cache()
    {
        // The user's module cache, read-only (as the view holds every grant not written):
        // a module already downloaded builds without network, and no build can change what
        // the user's next plain `go build` takes from it. The build cache stays the call's own.
        let read = pc.read.get_or_insert_with(Vec::new);
        if !read.contains(&cache) {
            read.push(cache.clone());
        }
        pc.settings
            .get_or_insert_with(BTreeMap::new)
            .entry("modcache".into())
            .or_insert(cache);
        let env = pc.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e == "GOMODCACHE") {
            env.push("GOMODCACHE".into());
        }
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

/// The user's go module cache, as go finds it: `GOMODCACHE`, else the first `GOPATH` entry's
/// `pkg/mod`, else `~/go/pkg/mod`; only an absolute directory that exists.
fn go_module_cache() -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| Path::new(v).is_absolute());
    let cache = var("GOMODCACHE")
        .map(PathBuf::from)
        .or_else(|| {
            let gopath = std::env::var_os("GOPATH")?;
            let first = std::env::split_paths(&gopath).next()?;
            first.is_absolute().then(|| first.join("pkg/mod"))
        })
        .or_else(|| var("HOME").map(|h| Path::new(&h).join("go/pkg/mod")))?;
    cache.is_dir().then(|| cache.to_string_lossy().into_owned())
}

/// Grant the `shell` tool (and the `command` runner, for `compile_loop`) exactly the command
/// named by `--test-command` / `[agent] test_command`.
pub fn grant_test_command(config: &mut Config, cmd: &str) -> Result<(), ConfigError> {
    let mut words = cmd.split_whitespace().map(String::from);
    let program = words.next().ok_or(ConfigError::EmptyCommand {
        flag: "--test-command",
    })?;
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
    // The `command` runner runs it in `compile_loop`: a build's deadline, as `kiln fix`'s
    // (`[fix] timeout`, a deadline granted to the plugin, else 10 minutes).
    let fix_timeout = config.fix.timeout;
    let pc = config.plugins.entry("command".into()).or_default();
    let secs = fix_timeout
        .or(pc.timeout_ms.map(|ms| ms.div_ceil(1000)))
        .unwrap_or(DEFAULT_RUNNER_TIMEOUT_S);
    pc.timeout_ms = Some(secs.saturating_mul(1000));
    Ok(())
}

/// The user-level configuration file, if a home directory is known.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_CONFIG") {
        return Some(PathBuf::from(p));
    }
    Some(kiln_state::UserDir::Config.kiln_dir()?.join("config.toml"))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod allowlist_tests;
