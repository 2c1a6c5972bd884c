//! Layering: the user file, then the workspace file (whole when trusted, else its
//! fields' rules, `narrowing`), validated and merged into one [`Config`](crate::schema::Config).
// Writes outside the workspace: the trust record `kiln trust` writes, in the user's state directory.
#![allow(clippy::disallowed_methods)]

use crate::error::ConfigError;
use crate::files::{read_text, read_workspace_file, sha256_hex, user_config_path};
use crate::narrowing::{Fields, Narrow};
use crate::schema::*;
use crate::trust::{
    Trust, line_changes, named_files, old_trust_file, pin_changes, pins_file, recorded_pins,
    trust_file, trusted_copy,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
        if let Some(text) = read_workspace_file(&ws_file)? {
            let trusted_text = trusted_copy(workspace);
            // Trusted: the text the user trusted, and the files its trust-needing settings
            // name (a server's script, a hook, a component) as they were then.
            let same_text = trusted_text.as_deref() == Some(text.as_str());
            let pins_changed = if same_text {
                let needs = Config::default().layer_text(
                    &ws_file,
                    &text,
                    Layer::Workspace { trusted: false },
                )?;
                pin_changes(
                    recorded_pins(workspace).as_ref(),
                    &named_files(workspace, &text, &needs),
                )
            } else {
                Vec::new()
            };
            let recorded = same_text && pins_changed.is_empty();
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
                    changed: if same_text {
                        pins_changed
                    } else {
                        trusted_text
                            .map(|old| line_changes(&old, &text))
                            .unwrap_or_default()
                    },
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

    /// Merge one file's text. A workspace file that is not `trusted` applies only what its
    /// fields' rules let an untrusted file set (`narrowing`). Returns the settings that apply only once the file is trusted
    /// (the same either way; empty for the user's file).
    pub(crate) fn layer_text(
        &mut self,
        path: &Path,
        text: &str,
        layer: Layer,
    ) -> Result<Vec<String>, ConfigError> {
        let parse_err = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            // The parser quotes the line at fault: never the value of a secret.
            message: crate::redact::parse_message(e.to_string().trim_end()),
        };
        let mut full: File = toml::from_str(text).map_err(parse_err)?;
        let Layer::Workspace { trusted } = layer else {
            self.apply(path, full, Layer::User)?;
            return Ok(Vec::new());
        };
        self.drop_user_only(path, &mut full);
        // Every value is checked, whether it applies or not (nothing is read from disk).
        Config::default().apply(path, full.clone(), TRUSTED_WORKSPACE)?;
        let mut ignored = Vec::new();
        let narrow = Fields.narrow("", full.clone(), self, &mut ignored);
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

    /// A workspace file's sections that only the user's own configuration may set (`[store]`,
    /// `[batch]`, `[gc]`), trusted or not: taken out of `file` and named in a warning, so the
    /// repository's choice never applies and never locks its user out of kiln (`kiln undo`,
    /// `kiln trust` and the rest still run). Their values are not echoed (a store URL carries
    /// credentials).
    fn drop_user_only(&mut self, path: &Path, file: &mut File) {
        let mut dropped = Vec::new();
        if file.store.take().is_some() {
            dropped.push((
                "store",
                "a store URL carries credentials, so kiln reads it only from --store, KILN_STORE or [store] url in",
            ));
        }
        if file.batch.take().is_some() {
            dropped.push((
                "batch",
                "which of your directories a batch task may copy is yours to say, in",
            ));
        }
        if file.gc.take().is_some() {
            dropped.push((
                "gc",
                "how much of your run history kiln keeps is yours to say, in",
            ));
        }
        let own = user_config_path().map_or_else(
            || "your own configuration".to_string(),
            |p| format!("your own configuration ({})", p.display()),
        );
        for (section, why) in dropped {
            self.warnings.push(format!(
                "{} sets [{section}], which a workspace kiln.toml may not set: ignored ({why} {own})",
                path.display()
            ));
        }
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
            if let Some(hooks) = &agent.hooks
                && layer == Layer::User
            {
                validate_user_hooks(path, hooks)?;
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
                if layer == Layer::User {
                    validate_user_mcp_server(path, &name, &server)?;
                }
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
            self.file_sections.insert(name.clone());
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
        // An untrusted file never gets here with these (their rule is `Trusted`).
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
pub(crate) enum Layer {
    /// The user's own configuration: applies whole; its plugin grants are bound to the
    /// components it names.
    User,
    /// The workspace's kiln.toml; applies whole only when `trusted`.
    Workspace {
        /// Trusted (`kiln trust`, `--yes`).
        trusted: bool,
    },
    /// What an untrusted workspace file may set, narrowed by each field's rule (limits only
    /// lower).
    Untrusted,
}

/// A workspace file applied whole (never read as the user's: that would hash the files its
/// `path`s name).
pub(crate) const TRUSTED_WORKSPACE: Layer = Layer::Workspace { trusted: true };

pub(crate) fn validate(path: &Path, name: &str, pc: &PluginConfig) -> Result<(), ConfigError> {
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

pub(crate) fn validate_mcp_server(
    path: &Path,
    name: &str,
    s: &McpServerConfig,
) -> Result<(), ConfigError> {
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

/// A word of a command line in the user's own configuration that names a path relative to
/// the workspace (or to `--opt=`'s value): it has a `/`, is not absolute, and is neither a URL
/// nor text with spaces. kiln expands no `~` there, so `~/x` is relative too.
fn workspace_relative(word: &str) -> Option<&str> {
    let value = match word.split_once('=') {
        Some((opt, v)) if opt.starts_with('-') => v,
        _ => word,
    };
    (value.contains('/')
        && !value.starts_with('/')
        && !value.contains("://")
        && !value.contains(char::is_whitespace))
    .then_some(word)
}

/// The message for a relative path in the user's configuration at `key`.
fn relative_in_user_config(key: &str, word: &str, how: &str) -> String {
    format!(
        "{key}: `{word}` is a relative path: in your own configuration it names a file of whichever repository kiln runs in, {how}; give an absolute path, or a bare name found on PATH"
    )
}

/// `[mcp.servers.NAME]` of the user's own configuration: a server starts outside the sandbox,
/// in every workspace, so its `command` and `args` may not name a workspace file (a cloned
/// repository's `tools/x` would run with the user's rights).
fn validate_user_mcp_server(
    path: &Path,
    name: &str,
    s: &McpServerConfig,
) -> Result<(), ConfigError> {
    let words = std::iter::once(s.command.trim()).chain(s.args.iter().map(String::as_str));
    for word in words {
        if let Some(w) = workspace_relative(word) {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: relative_in_user_config(
                    &format!("mcp.servers.{name}"),
                    w,
                    "started outside the sandbox",
                ),
            });
        }
    }
    Ok(())
}

/// `[agent.hooks]` of the user's own configuration: a hook sees (and may rewrite) every tool
/// call in every workspace, so no word of it may name a workspace file.
fn validate_user_hooks(path: &Path, hooks: &Hooks) -> Result<(), ConfigError> {
    for (key, cmd) in [
        ("before_tool", &hooks.before_tool),
        ("after_tool", &hooks.after_tool),
        ("before_llm", &hooks.before_llm),
        ("after_llm", &hooks.after_llm),
    ] {
        let Some(cmd) = cmd else { continue };
        if let Some(w) = cmd.split_whitespace().find_map(workspace_relative) {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: relative_in_user_config(
                    &format!("agent.hooks.{key}"),
                    w,
                    "run on every tool or model call",
                ),
            });
        }
    }
    Ok(())
}

/// Record the current `kiln.toml` of `workspace` as trusted, with the workspace files its
/// trust-needing settings name pinned by content; returns the record's path and those files.
pub fn trust_workspace(workspace: &Path) -> Result<(PathBuf, Vec<String>), ConfigError> {
    let ws_file = workspace.join("kiln.toml");
    let text = read_workspace_file(&ws_file)?.ok_or_else(|| ConfigError::Invalid {
        path: ws_file.clone(),
        message: "there is no such file to trust".into(),
    })?;
    // Refuse to trust a file that does not load.
    Config::default().layer_text(&ws_file, &text, Layer::Workspace { trusted: true })?;
    let needs =
        Config::default().layer_text(&ws_file, &text, Layer::Workspace { trusted: false })?;
    let pins = named_files(workspace, &text, &needs);
    let pins_text = toml::to_string(&pins).map_err(|e| ConfigError::Invalid {
        path: ws_file.clone(),
        message: format!("cannot record the files it names: {e}"),
    })?;
    let pins_dest = pins_file(workspace);
    let dest = trust_file(workspace).ok_or_else(|| ConfigError::Invalid {
        path: ws_file.clone(),
        message: "no state directory to keep the trust record in (set HOME or XDG_STATE_HOME)"
            .into(),
    })?;
    let write = || -> std::io::Result<()> {
        let dir = dest.parent().expect("trust file has a parent");
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".trust-{}.tmp", std::process::id()));
        // The pins first: a crash between the two leaves a record that does not match, so
        // nothing is trusted that the user did not see pinned.
        // None named: no pins file (an older one removed, so none is compared).
        match &pins_dest {
            Some(pins_dest) if !pins.is_empty() => {
                std::fs::write(&tmp, &pins_text)?;
                std::fs::rename(&tmp, pins_dest)?;
            }
            Some(pins_dest) => match std::fs::remove_file(pins_dest) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
            None => {}
        }
        std::fs::write(&tmp, &text)?;
        std::fs::rename(&tmp, &dest)
    };
    write().map_err(|source| ConfigError::Read {
        path: dest.clone(),
        source,
    })?;
    Ok((dest, pins.into_keys().collect()))
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
