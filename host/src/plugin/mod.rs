//! The plugin runtime: one wasmtime `Engine` per process (component model, async, epoch
//! interruption), components compiled once and cached on disk, one linked `InstancePre` per
//! plugin and a fresh `Store` per call, with a wall-clock deadline, a memory limit and output
//! caps. A trap or a deadline is reported with the plugin's name; the runtime keeps working.

pub mod bindings;
pub mod builtin;
mod cache;
pub mod capability;
pub mod confine;
mod exec;
mod host_impl;
mod reap;
mod registry;

pub use bindings::types::Error as PluginCallError;
pub use bindings::types::{Diagnostic, Manifest, Severity};
pub use capability::Effective;
pub use host_impl::{State, set_log_level};
pub use registry::{Needed, Registry};

use bindings::{edit_format, runner, tool};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// The `kiln:plugin` contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";
/// Epoch tick length: the granularity of call deadlines.
const TICK: Duration = Duration::from_millis(1);
/// Bytes of a guest's stderr kept to explain a trap.
const STDERR_KEEP: usize = 64 * 1024;
/// Most bytes wasmtime may copy from a guest to the host in one call.
const MAX_HOSTCALL_COPY: usize = 1 << 30;

/// The kind of a plugin, from the world it implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// `runner-plugin`.
    Runner,
    /// `edit-format-plugin`.
    EditFormat,
    /// `tool-plugin`.
    Tool,
}

impl PluginKind {
    /// The WIT world name.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Runner => "runner-plugin",
            PluginKind::EditFormat => "edit-format-plugin",
            PluginKind::Tool => "tool-plugin",
        }
    }
    fn interface(self) -> &'static str {
        match self {
            PluginKind::Runner => "runner",
            PluginKind::EditFormat => "edit-format",
            PluginKind::Tool => "tool",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Runner => "runner",
            PluginKind::EditFormat => "edit-format",
            PluginKind::Tool => "tool",
        })
    }
}

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "path")]
pub enum Source {
    /// Embedded in the binary.
    Builtin,
    /// A `.wasm` file.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin => f.write_str("built-in"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Everything that can go wrong loading or calling a plugin. Each message names the plugin
/// or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not WebAssembly at all.
    #[error("{0} is not a WebAssembly component (no `\\0asm` header)")]
    NotWasm(String),
    /// A core module instead of a component.
    #[error(
        "{0} is a core WebAssembly module, not a component: build it with `--target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule(String),
    /// wasmtime refused the bytes.
    #[error("{source_name} is not a valid component: {message}")]
    Invalid {
        /// The file.
        source_name: String,
        /// wasmtime's reason.
        message: String,
    },
    /// A component, but of no kiln world.
    #[error(
        "{source_name} does not implement a kiln plugin world: it exports [{exports}], but a kiln plugin exports kiln:plugin/runner, kiln:plugin/edit-format or kiln:plugin/tool"
    )]
    WrongWorld {
        /// The file.
        source_name: String,
        /// What it exports instead.
        exports: String,
    },
    /// Built for another contract version.
    #[error(
        "{source_name} was built for the kiln:plugin contract {found}, but this kiln supports {supported}; rebuild the plugin against kiln:plugin@{supported} (kiln-guest {supported})"
    )]
    IncompatibleContract {
        /// The file.
        source_name: String,
        /// The component's contract version.
        found: String,
        /// This host's version.
        supported: String,
    },
    /// Imports the host does not provide (or may not give this kind).
    #[error("{source_name} cannot be linked: {message}")]
    Link {
        /// The file.
        source_name: String,
        /// What is missing.
        message: String,
    },
    /// The plugin trapped (a bug in the plugin).
    #[error("plugin `{plugin}` crashed (trap): {message}")]
    Trap {
        /// Plugin name.
        plugin: String,
        /// The trap and the plugin's last stderr lines.
        message: String,
    },
    /// The call ran past its deadline.
    #[error("plugin `{plugin}` was stopped after its deadline of {ms} ms")]
    Deadline {
        /// Plugin name.
        plugin: String,
        /// The deadline.
        ms: u32,
    },
    /// The instance tried to grow memory past its limit.
    #[error("plugin `{plugin}` was stopped: it exceeded its memory limit of {mib} MiB")]
    Memory {
        /// Plugin name.
        plugin: String,
        /// The limit.
        mib: u32,
    },
    /// Returned more than the output cap.
    #[error(
        "plugin `{plugin}`: output limit exceeded ({}{bytes} > {cap} bytes)",
        if *.more { "more than " } else { "" }
    )]
    OutputCap {
        /// Plugin name.
        plugin: String,
        /// Returned size (a lower bound when `more`).
        bytes: usize,
        /// The cap.
        cap: u32,
        /// The plugin tried to pass even more than `bytes` to the host, which stopped copying.
        more: bool,
    },
    /// The manifest is unusable.
    #[error("{source_name} has an invalid manifest: {message}")]
    Manifest {
        /// The file.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// A call for another kind.
    #[error("plugin `{plugin}` is a {actual} plugin, not a {expected} plugin")]
    WrongKind {
        /// Plugin name.
        plugin: String,
        /// Its kind.
        actual: PluginKind,
        /// The kind needed.
        expected: PluginKind,
    },
    /// No such plugin.
    #[error("no {kind} named `{name}`; known: {known}")]
    NotFound {
        /// What was looked for.
        kind: String,
        /// The name.
        name: String,
        /// The names there are.
        known: String,
    },
    /// A user plugin took a built-in's name without saying so.
    #[error(
        "{source_name} is named `{name}` like a built-in plugin; to replace the built-in, add `replaces = \"{name}\"` under [plugins.{name}] in kiln.toml (it then gets only what kiln.toml grants it, none of the built-in's defaults)"
    )]
    ShadowsBuiltin {
        /// The file.
        source_name: String,
        /// The name.
        name: String,
    },
    /// `replaces` is wrong.
    #[error("{source_name}: {message}")]
    Replaces {
        /// The file.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// Two configured user plugins have the same name.
    #[error("two plugins are named `{name}`: {first} and {second}")]
    Duplicate {
        /// The name.
        name: String,
        /// The one loaded.
        first: String,
        /// The one refused.
        second: String,
    },
    /// A configured plugin that failed to load was asked for.
    #[error("plugin `{name}` is not available: {message}")]
    Unavailable {
        /// The name asked for.
        name: String,
        /// Why it could not be loaded.
        message: String,
    },
    /// The sandbox could not be set up (a granted path could not be opened).
    #[error("plugin `{plugin}`: cannot set up its sandbox: {message}")]
    Sandbox {
        /// Plugin name.
        plugin: String,
        /// Why.
        message: String,
    },
    /// The engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
}

/// Is a component's contract version compatible with this host's?
pub fn contract_compatible(found: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parse(found), parse(CONTRACT_VERSION)) {
        (Some((fmaj, fmin)), Some((hmaj, hmin))) => {
            if hmaj == 0 {
                fmaj == 0 && fmin == hmin
            } else {
                fmaj == hmaj && fmin <= hmin
            }
        }
        _ => false,
    }
}

/// One engine, one linker and the compile cache, shared by every plugin of a process.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    cache_dir: Option<PathBuf>,
    stop_ticker: Arc<AtomicBool>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct LoadInfo {
    /// True when the compiled artifact came from the disk cache.
    pub from_cache: bool,
    /// Time to obtain the compiled component (compile or cache load), microseconds.
    pub load_us: u128,
}

/// A compiled component whose world and contract version were checked.
pub struct Checked {
    component: Component,
    kind: PluginKind,
    contract: String,
    source: Source,
    /// How it was loaded.
    pub info: LoadInfo,
}

impl Runtime {
    /// Create the engine; `cache_dir` `None` disables the disk cache.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Runtime, PluginError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(2 << 20);
        let engine = Engine::new(&config).map_err(|e| PluginError::Engine(e.to_string()))?;
        let mut linker = Linker::<State>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        bindings::HostImports::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| PluginError::Engine(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (e, s) = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kiln-epoch".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    e.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        Ok(Runtime {
            engine,
            linker,
            cache_dir,
            stop_ticker: stop,
        })
    }

    /// A runtime with the default cache directory.
    pub fn with_default_cache() -> Result<Runtime, PluginError> {
        Runtime::new(cache::default_dir())
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Read a component file and check it.
    pub fn check_file(&self, path: &Path) -> Result<Checked, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.check_bytes(&bytes, Source::File(path.to_path_buf()))
    }

    /// Compile (or load from the cache) and check world and contract version.
    pub fn check_bytes(&self, bytes: &[u8], source: Source) -> Result<Checked, PluginError> {
        let source_name = match &source {
            Source::Builtin => "built-in plugin".to_string(),
            Source::File(p) => p.display().to_string(),
        };
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(PluginError::NotWasm(source_name));
        }
        if bytes[4..8] == [1, 0, 0, 0] {
            return Err(PluginError::CoreModule(source_name));
        }
        let start = Instant::now();
        let entry = self
            .cache_dir
            .as_ref()
            .map(|d| cache::entry_path(d, &self.engine, bytes));
        let (component, from_cache) =
            match entry.as_deref().and_then(|p| cache::load(&self.engine, p)) {
                Some(c) => (c, true),
                None => {
                    let c =
                        Component::new(&self.engine, bytes).map_err(|e| PluginError::Invalid {
                            source_name: source_name.clone(),
                            message: format!("{e:#}"),
                        })?;
                    if let Some(p) = &entry {
                        // A cache that cannot be written only costs speed on the next run.
                        let _ = cache::store(&c, p);
                    }
                    (c, false)
                }
            };
        let info = LoadInfo {
            from_cache,
            load_us: start.elapsed().as_micros(),
        };
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let mut found = None;
        for name in &exports {
            let Some(rest) = name.strip_prefix("kiln:plugin/") else {
                continue;
            };
            let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
            if !contract_compatible(version) {
                return Err(PluginError::IncompatibleContract {
                    source_name,
                    found: if version.is_empty() {
                        "(unversioned)".into()
                    } else {
                        version.into()
                    },
                    supported: CONTRACT_VERSION.into(),
                });
            }
            for kind in [PluginKind::Runner, PluginKind::EditFormat, PluginKind::Tool] {
                if iface == kind.interface() {
                    found = Some((kind, version.to_string()));
                }
            }
        }
        let Some((kind, contract)) = found else {
            return Err(PluginError::WrongWorld {
                source_name,
                exports: exports.join(", "),
            });
        };
        if kind == PluginKind::EditFormat
            && let Some((name, _)) = ty
                .imports(&self.engine)
                .find(|(n, _)| n.starts_with("kiln:plugin/exec"))
        {
            return Err(PluginError::Link {
                source_name,
                message: format!("edit formats are pure and may not import `{name}`"),
            });
        }
        Ok(Checked {
            component,
            kind,
            contract,
            source,
            info,
        })
    }

    /// Link a checked component, read its manifest and compute its effective capabilities.
    pub async fn instantiate(
        &self,
        checked: Checked,
        workspace: &Path,
        config: &crate::config::Config,
    ) -> Result<Plugin, PluginError> {
        let source_name = checked.source.to_string();
        let link_err = |e: wasmtime::Error| PluginError::Link {
            source_name: source_name.clone(),
            message: format!("{e:#}"),
        };
        let pre = self
            .linker
            .instantiate_pre(&checked.component)
            .map_err(link_err)?;
        let pre = match checked.kind {
            PluginKind::Runner => Pre::Runner(runner::RunnerPluginPre::new(pre).map_err(link_err)?),
            PluginKind::EditFormat => {
                Pre::EditFormat(edit_format::EditFormatPluginPre::new(pre).map_err(link_err)?)
            }
            PluginKind::Tool => Pre::Tool(tool::ToolPluginPre::new(pre).map_err(link_err)?),
        };
        let mut plugin = Plugin {
            name: source_name.clone(),
            kind: checked.kind,
            contract: checked.contract,
            source: checked.source,
            info: checked.info,
            manifest: empty_manifest(),
            effective: Arc::new(Effective::none()),
            settings: BTreeMap::new(),
            workspace: Arc::from(workspace),
            root: Arc::new(
                cap_std::fs::Dir::open_ambient_dir(workspace, cap_std::ambient_authority())
                    .map_err(|e| PluginError::Sandbox {
                        plugin: source_name.clone(),
                        message: format!("cannot open the workspace {}: {e}", workspace.display()),
                    })?,
            ),
            pre,
        };
        let manifest = plugin.get_manifest().await?;
        validate_name(&manifest.name).map_err(|message| PluginError::Manifest {
            source_name: source_name.clone(),
            message,
        })?;
        let mut grant = config.plugin(&manifest.name);
        if plugin.source == Source::Builtin && grant.fs.is_none() {
            grant.fs = builtin::default_grant(&manifest.name).fs;
        }
        plugin.name = manifest.name.clone();
        let mut effective = Effective::compute(&manifest, &grant);
        effective.require_confinement = config.sandbox.require_confinement == Some(true);
        let protected = config.protected();
        effective
            .check_protected(&manifest.name, &protected, workspace)
            .map_err(|message| PluginError::Sandbox {
                plugin: manifest.name.clone(),
                message,
            })?;
        plugin.effective = Arc::new(effective);
        plugin.settings = grant.settings.unwrap_or_default();
        plugin.manifest = manifest;
        Ok(plugin)
    }

    /// Check, link and describe a component from bytes.
    pub async fn load(
        &self,
        bytes: &[u8],
        source: Source,
        workspace: &Path,
        config: &crate::config::Config,
    ) -> Result<Plugin, PluginError> {
        let checked = self.check_bytes(bytes, source)?;
        self.instantiate(checked, workspace, config).await
    }
}

fn empty_manifest() -> Manifest {
    Manifest {
        name: String::new(),
        version: String::new(),
        description: String::new(),
        fs: vec![],
        exec: vec![],
        env: vec![],
        limits: bindings::types::Limits {
            memory_mib: None,
            timeout_ms: None,
            output_bytes: None,
        },
    }
}

fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name `{name}` must be 1-64 characters of a-z, 0-9, `-`, `_`, starting with a letter"
        ))
    }
}

enum Pre {
    Runner(runner::RunnerPluginPre<State>),
    EditFormat(edit_format::EditFormatPluginPre<State>),
    Tool(tool::ToolPluginPre<State>),
}

/// A loaded plugin: checked, linked, with its manifest and effective capabilities. Every call
/// gets a fresh instance, so no state leaks between calls and a crash cannot poison the next.
pub struct Plugin {
    /// Name from the manifest.
    pub name: String,
    /// Kind, from the exported world.
    pub kind: PluginKind,
    /// Contract version the component was built for.
    pub contract: String,
    /// Where it came from.
    pub source: Source,
    /// How its compiled form was obtained.
    pub info: LoadInfo,
    /// What it requests.
    pub manifest: Manifest,
    /// What it may do (request ∩ grant).
    pub effective: Arc<Effective>,
    /// Settings from `[plugins.NAME.settings]`.
    pub settings: BTreeMap<String, String>,
    workspace: Arc<Path>,
    /// The workspace opened once; every preopen is opened beneath it.
    root: Arc<cap_std::fs::Dir>,
    pre: Pre,
}

/// A live instance (see [`Plugin::hold_instance`]).
#[doc(hidden)]
pub struct HeldInstance {
    _store: Store<State>,
}

/// Run one call on a fresh instance, under the deadline, mapping traps to `PluginError`.
macro_rules! invoke {
    ($self:ident, $variant:ident, $getter:ident, |$g:ident, $store:ident| $call:expr) => {{
        let Pre::$variant(pre) = &$self.pre else {
            return Err($self.wrong_kind(PluginKind::$variant));
        };
        let (mut store, stderr) = $self.new_store()?;
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

impl Plugin {
    fn new_store(&self) -> Result<(Store<State>, MemoryOutputPipe), PluginError> {
        let stderr = MemoryOutputPipe::new(STDERR_KEEP);
        let wasi = self
            .effective
            .wasi_ctx(&self.root, stderr.clone())
            .map_err(|e| PluginError::Sandbox {
                plugin: self.name.clone(),
                message: e.to_string(),
            })?;
        let state = State::new(
            Arc::from(self.name.as_str()),
            self.effective.clone(),
            self.workspace.clone(),
            wasi,
        );
        let mut store = Store::new(self.pre_engine(), state);
        store.limiter(|s| &mut s.limiter);
        // Let wasmtime copy a returned string as large as the instance's memory (up to 1 GiB),
        // so an oversized return is measured against `output_bytes` and reported as such
        // rather than cut short by wasmtime's smaller default copy limit.
        let memory = ((self.effective.limits.memory_mib as usize) << 20).min(MAX_HOSTCALL_COPY);
        store.set_hostcall_fuel(store.hostcall_fuel().max(memory));
        // Yield to the async executor every 10 ms of guest execution, so the call's deadline
        // (a tokio timeout around it, see `invoke!`) and any caller's timeout can stop even a
        // guest that never returns; dropping the call's future drops the instance.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(10);
        Ok((store, stderr))
    }

    fn pre_engine(&self) -> &Engine {
        match &self.pre {
            Pre::Runner(p) => p.engine(),
            Pre::EditFormat(p) => p.engine(),
            Pre::Tool(p) => p.engine(),
        }
    }

    fn wrong_kind(&self, expected: PluginKind) -> PluginError {
        PluginError::WrongKind {
            plugin: self.name.clone(),
            actual: self.kind,
            expected,
        }
    }

    fn finish<R>(
        &self,
        res: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
        store: &Store<State>,
        stderr: &MemoryOutputPipe,
    ) -> Result<R, PluginError> {
        store.data().report_dropped_logs();
        let limits = self.effective.limits;
        match res {
            Ok(Ok(r)) => Ok(r),
            Err(_) => Err(PluginError::Deadline {
                plugin: self.name.clone(),
                ms: limits.timeout_ms,
            }),
            Ok(Err(e)) => {
                if store.data().limiter.exceeded {
                    return Err(PluginError::Memory {
                        plugin: self.name.clone(),
                        mib: limits.memory_mib,
                    });
                }
                // wasmtime refuses to copy more than the store's hostcall fuel between guest
                // and host in one call: that is output past any cap, not a plugin crash.
                if format!("{e:#}").contains("fuel allocated for hostcalls has been exhausted") {
                    return Err(PluginError::OutputCap {
                        plugin: self.name.clone(),
                        bytes: store.hostcall_fuel(),
                        cap: limits.output_bytes,
                        more: true,
                    });
                }
                if matches!(
                    e.downcast_ref::<wasmtime::Trap>(),
                    Some(wasmtime::Trap::Interrupt)
                ) {
                    return Err(PluginError::Deadline {
                        plugin: self.name.clone(),
                        ms: limits.timeout_ms,
                    });
                }
                let mut message = match e.downcast_ref::<wasmtime::Trap>() {
                    Some(t) => t.to_string(),
                    None => format!("{e:#}"),
                };
                let err_text = String::from_utf8_lossy(&stderr.contents())
                    .trim()
                    .to_string();
                if !err_text.is_empty() {
                    let tail: Vec<&str> = err_text.lines().rev().take(5).collect();
                    message.push_str("; plugin stderr: ");
                    message.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
                }
                Err(PluginError::Trap {
                    plugin: self.name.clone(),
                    message,
                })
            }
        }
    }

    fn cap(&self, bytes: usize) -> Result<(), PluginError> {
        let cap = self.effective.limits.output_bytes;
        if bytes > cap as usize {
            return Err(PluginError::OutputCap {
                plugin: self.name.clone(),
                bytes,
                cap,
                more: false,
            });
        }
        Ok(())
    }

    /// Instantiate and keep an idle instance alive (for measuring memory per instance).
    #[doc(hidden)]
    pub async fn hold_instance(&self) -> Result<HeldInstance, PluginError> {
        let (mut store, stderr) = self.new_store()?;
        let res = match &self.pre {
            Pre::Runner(p) => p.instance_pre().instantiate_async(&mut store).await,
            Pre::EditFormat(p) => p.instance_pre().instantiate_async(&mut store).await,
            Pre::Tool(p) => p.instance_pre().instantiate_async(&mut store).await,
        };
        self.finish(Ok(res.map(|_| ())), &store, &stderr)?;
        Ok(HeldInstance { _store: store })
    }

    /// The plugin's manifest, whatever its kind.
    pub async fn get_manifest(&self) -> Result<Manifest, PluginError> {
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

    /// Runner: describe.
    pub async fn runner_describe(
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
        let targets = match crate::path::target_arguments(&self.root, targets) {
            Ok(t) => t,
            Err(message) => return Ok(Err(PluginCallError::InvalidInput(message))),
        };
        let req = RunRequest {
            targets,
            settings: settings.into_iter().collect(),
        };
        let out = invoke!(self, Runner, kiln_plugin_runner, |g, s| g.call_run(s, &req))?;
        if let Ok(r) = &out {
            self.cap(r.stdout.len() + r.stderr.len())?;
        }
        Ok(out)
    }

    /// Edit format: describe.
    pub async fn format_describe(&self) -> Result<FormatInfo, PluginError> {
        invoke!(self, EditFormat, kiln_plugin_edit_format, |g, s| g
            .call_describe(s))
    }

    /// Edit format: the prompt fragment.
    pub async fn format_instructions(&self, multi_file: bool) -> Result<String, PluginError> {
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

    /// Tool: the tools offered.
    pub async fn tool_list(&self) -> Result<Vec<ToolSpec>, PluginError> {
        invoke!(self, Tool, kiln_plugin_tool, |g, s| g.call_list_tools(s))
    }

    /// Tool: call one tool with JSON arguments.
    pub async fn tool_call(
        &self,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, PluginCallError>, PluginError> {
        let out = invoke!(self, Tool, kiln_plugin_tool, |g, s| g
            .call_call(s, name, arguments))?;
        if let Ok(text) = &out {
            self.cap(text.len())?;
        }
        Ok(out)
    }
}

pub use edit_format::exports::kiln::plugin::edit_format::{
    AppliedFile, ApplyFailure, EditKind, EditOutcome, EditStatus, FailureKind, FileEdit,
    FormatInfo, ParseError,
};
pub use runner::exports::kiln::plugin::runner::{RunRequest, RunResult, RunnerInfo};
pub use tool::exports::kiln::plugin::tool::ToolSpec;

/// A plugin's expected error as its WIT case name and message (`("denied", "...")`).
pub fn call_error_parts(e: &PluginCallError) -> (&'static str, &str) {
    match e {
        PluginCallError::Denied(m) => ("denied", m),
        PluginCallError::NotFound(m) => ("not-found", m),
        PluginCallError::InvalidInput(m) => ("invalid-input", m),
        PluginCallError::TimedOut(m) => ("timed-out", m),
        PluginCallError::Failed(m) => ("failed", m),
    }
}

/// A plugin's expected error as one line: `denied: ...`.
pub fn describe_call_error(e: &PluginCallError) -> String {
    let (kind, message) = call_error_parts(e);
    format!("{kind}: {message}")
}

/// The WIT name of a severity (`error`, `warning`, `note`, `help`).
pub fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
        Severity::Help => "help",
    }
}

/// A diagnostic as JSON with WIT names.
pub fn diagnostic_json(d: &Diagnostic) -> serde_json::Value {
    serde_json::json!({
        "file": d.file, "line": d.line, "column": d.column, "severity": severity_name(d.severity),
        "code": d.code, "message": d.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_versions() {
        assert!(contract_compatible("0.1.0"));
        assert!(contract_compatible("0.1.7"));
        assert!(!contract_compatible("0.2.0"));
        assert!(!contract_compatible("9.0.0"));
        assert!(!contract_compatible(""));
    }
}
