//! The schema: every section and field of a configuration file, its default beside it, and
//! the merged [`Config`] a command reads.

use crate::narrowing::{Cap, Fields, Free, Lower, MaxBytes, Narrow, OnlyOn, Trusted, UserOnly};
use crate::trust::Trust;
use kiln_llm::LlmConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

pub(crate) fn default_access() -> Access {
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

/// `[plugins.NAME]` untrusted: its limits, only where they lower; nothing it grants.
impl Narrow<PluginConfig> for Fields {
    fn narrow(
        &self,
        key: &str,
        pc: PluginConfig,
        have: &PluginConfig,
        ignored: &mut Vec<String>,
    ) -> PluginConfig {
        // In the order the warning names them: what needs trust, then the limits.
        crate::narrow_fields!(
            PluginConfig {
                env: Trusted(0),
                exec: Trusted(0),
                fs: Trusted(0),
                net: Trusted(0),
                path: Trusted(0),
                read: Trusted(0),
                replaces: Trusted(0),
                settings: Trusted(0),
                write: Trusted(0),
                memory_mib: Lower(DEFAULT_MEMORY_MIB),
                timeout_ms: Lower(DEFAULT_TIMEOUT_MS),
                output_bytes: Lower(DEFAULT_OUTPUT_BYTES),
            },
            pc,
            have,
            key,
            ignored
        )
    }
}

impl PluginConfig {
    /// Layer `over` on top of `self`: every field `over` sets wins.
    pub(crate) fn merge(&mut self, over: PluginConfig) {
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
pub(crate) struct File {
    #[serde(default)]
    pub(crate) plugins: BTreeMap<String, PluginConfig>,
    #[serde(default)]
    pub(crate) llm: Option<kiln_llm::LlmConfig>,
    #[serde(default)]
    pub(crate) fix: Option<FixConfig>,
    #[serde(default)]
    pub(crate) agent: Option<AgentConfig>,
    #[serde(default)]
    pub(crate) sandbox: Option<SandboxConfig>,
    #[serde(default)]
    pub(crate) mcp: Option<McpConfig>,
    /// `[pricing."MODEL"]`: USD per million tokens, for the cost kiln reports.
    #[serde(default)]
    pub(crate) pricing: Option<BTreeMap<String, kiln_llm::pricing::Price>>,
    /// `[budget]`: spend caps of `kiln fix`, `agent` and `loop`.
    #[serde(default)]
    pub(crate) budget: Option<BudgetConfig>,
    /// `[store]`: where runs are recorded; only from the user's own file (it carries
    /// credentials).
    #[serde(default, skip_serializing)]
    pub(crate) store: Option<StoreConfig>,
    /// `[batch]`: what batch tasks may name; only from the user's own file.
    #[serde(default, skip_serializing)]
    pub(crate) batch: Option<BatchConfig>,
    /// `[gc]`: how much of kiln's state to keep; only from the user's own file.
    #[serde(default, skip_serializing)]
    pub(crate) gc: Option<GcConfig>,
}

/// A workspace file, untrusted: each section by its rule (the plugin sections against what
/// the configuration so far gives that plugin).
impl Narrow<File, Config> for Fields {
    fn narrow(&self, _: &str, file: File, have: &Config, ignored: &mut Vec<String>) -> File {
        let File {
            plugins,
            llm,
            fix,
            agent,
            sandbox,
            mcp,
            pricing,
            budget,
            store,
            batch,
            gc,
        } = file;
        // In the order the warning names them: the sections that need trust first.
        let agent = Trusted(1).narrow("agent", agent, &None, ignored);
        let mcp = Trusted(2).narrow("mcp", mcp, &None, ignored);
        let pricing = Trusted(1).narrow("pricing", pricing, &None, ignored);
        let (store, batch, gc) = (
            UserOnly.narrow("store", store, &None, ignored),
            UserOnly.narrow("batch", batch, &None, ignored),
            UserOnly.narrow("gc", gc, &None, ignored),
        );
        let plugins = plugins
            .into_iter()
            .map(|(name, pc)| {
                let key = format!("plugins.{name}");
                let pc = Fields.narrow(&key, pc, &have.plugin(&name), ignored);
                (name, pc)
            })
            .collect();
        File {
            plugins,
            llm: llm.map(|l| Fields.narrow("llm", l, &have.llm, ignored)),
            fix: fix.map(|f| Fields.narrow("fix", f, &have.fix, ignored)),
            agent,
            sandbox: sandbox.map(|s| Fields.narrow("sandbox", s, &have.sandbox, ignored)),
            mcp,
            pricing,
            budget: budget.map(|b| Fields.narrow("budget", b, &have.budget, ignored)),
            store,
            batch,
            gc,
        }
    }
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

/// `[budget]` untrusted: a cap lowers what applies, or adds one where none applies.
impl Narrow<BudgetConfig> for Fields {
    fn narrow(
        &self,
        key: &str,
        b: BudgetConfig,
        have: &BudgetConfig,
        ignored: &mut Vec<String>,
    ) -> BudgetConfig {
        crate::narrow_fields!(
            BudgetConfig {
                max_cost_usd: Cap,
                max_tokens: Cap,
            },
            b,
            have,
            key,
            ignored
        )
    }
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

/// `[sandbox]` untrusted: both fields only add protection.
impl Narrow<SandboxConfig> for Fields {
    fn narrow(
        &self,
        key: &str,
        s: SandboxConfig,
        have: &SandboxConfig,
        ignored: &mut Vec<String>,
    ) -> SandboxConfig {
        crate::narrow_fields!(
            SandboxConfig {
                protect: Free,
                require_confinement: OnlyOn,
            },
            s,
            have,
            key,
            ignored
        )
    }
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

/// The `kiln fix` iteration ceiling when nothing sets one (the same default `kiln fix` and the
/// MCP server use); an untrusted file may only lower it.
pub const DEFAULT_MAX_ITERS: u32 = 5;
/// A fix loop runner's default deadline per check, in seconds (10 minutes: a fresh build of a
/// crate with dependencies takes minutes).
pub const DEFAULT_RUNNER_TIMEOUT_S: u32 = 600;
/// The longest `[fix] prompt` an untrusted file may set: a prompt is sent with every request,
/// so a longer one raises cost and needs trust.
pub const UNTRUSTED_PROMPT_MAX: usize = 16 * 1024;

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

/// `[fix]` untrusted: the prompt (up to [`UNTRUSTED_PROMPT_MAX`]), the format, and lower
/// limits; not what it runs.
impl Narrow<FixConfig> for Fields {
    fn narrow(
        &self,
        key: &str,
        fix: FixConfig,
        have: &FixConfig,
        ignored: &mut Vec<String>,
    ) -> FixConfig {
        // In the order the warning names them: what needs trust, then the rest.
        crate::narrow_fields!(
            FixConfig {
                cmd: Trusted(0),
                runner: Trusted(0),
                prompt: MaxBytes(UNTRUSTED_PROMPT_MAX),
                format: Free,
                max_iters: Lower(DEFAULT_MAX_ITERS),
                timeout: Lower(DEFAULT_RUNNER_TIMEOUT_S),
            },
            fix,
            have,
            key,
            ignored
        )
    }
}

/// `[llm]` untrusted (the section is kiln-llm's; its defaults are `kiln_llm::settings`'s):
/// sampling switches, and limits only where they lower. Not the model or provider (cost, and
/// which key goes where), endpoints or keys.
impl Narrow<LlmConfig> for Fields {
    fn narrow(
        &self,
        key: &str,
        llm: LlmConfig,
        have: &LlmConfig,
        ignored: &mut Vec<String>,
    ) -> LlmConfig {
        use kiln_llm::settings as d;
        // In the order the warning names them: what needs trust, then the rest.
        crate::narrow_fields!(
            LlmConfig {
                api_key: Trusted(0),
                api_key_env: Trusted(0),
                base_url: Trusted(0),
                model: Trusted(0),
                provider: Trusted(0),
                temperature: Free,
                omit_temperature: Free,
                disable_thinking: Free,
                stream: Free,
                max_tokens: Lower(d::DEFAULT_MAX_TOKENS),
                timeout_secs: Lower(d::DEFAULT_TIMEOUT_SECS),
                connect_timeout_secs: Lower(d::DEFAULT_CONNECT_TIMEOUT_SECS),
                idle_timeout_secs: Lower(d::DEFAULT_IDLE_TIMEOUT_SECS),
                max_retries: Lower(d::DEFAULT_MAX_RETRIES),
                stream_max_retries: Lower(d::DEFAULT_STREAM_MAX_RETRIES),
                max_reply_bytes: Lower(d::DEFAULT_MAX_REPLY_BYTES),
            },
            llm,
            have,
            key,
            ignored
        )
    }
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
    /// The `[plugins.NAME]` sections the configuration files wrote (not those a command's flags
    /// added, such as `--runner NAME`'s consent), for the warning about a section that names
    /// no plugin.
    pub file_sections: std::collections::BTreeSet<String>,
    /// What loading said without refusing: a workspace kiln.toml's sections only the user's
    /// own configuration may set (`[store]`, `[batch]`, `[gc]`), ignored. Shown as warnings.
    pub warnings: Vec<String>,
    /// The files that were read, lowest precedence first.
    pub sources: Vec<PathBuf>,
    /// Whether the workspace's kiln.toml was applied whole (see [`Trust`]).
    pub trust: Trust,
    /// Per plugin the user's configuration grants something to: the component those grants
    /// belong to (see [`Config::grant_for`]).
    pub bindings: BTreeMap<String, Bound>,
    /// The plugin sections merged without the user's configuration: what a plugin gets when
    /// it is not the component the user's grants belong to.
    pub(crate) unbound: BTreeMap<String, PluginConfig>,
    /// Components named by a workspace file's `path` (as written, resolved).
    pub(crate) workspace_paths: Vec<PathBuf>,
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
