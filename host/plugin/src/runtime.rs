//! The runtime: one wasmtime `Engine` per process (component model, async, epoch
//! interruption) with its epoch ticker and linker, compiling components (or loading them from
//! the disk cache), checking their world and contract, and linking them into [`Plugin`]s.

use super::bindings::{self, edit_format, runner, tool};
use super::contract::{empty_manifest, validate_name, world};
use super::declared::Declared;
use super::instance::{Lazy, Pre};
use super::{Effective, Plugin, PluginError, PluginKind, Source, State, builtin, cache};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

/// Epoch tick length: the granularity of call deadlines.
const TICK: Duration = Duration::from_millis(1);

/// One engine, one linker and the compile cache, shared by every plugin of a process.
pub struct Runtime {
    shared: Arc<Shared>,
    stop_ticker: Arc<AtomicBool>,
}

/// What compiling and linking a component needs, shared with the built-ins that compile on
/// their first call.
struct Shared {
    engine: Engine,
    linker: Linker<State>,
    /// The compile cache's directory and the key its entries are signed with.
    cache: Option<(PathBuf, cache::Signer)>,
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
    /// Hex sha256 of the bytes compiled, for a component read from a file (a user's grants
    /// bind to the bytes they named: `Config::grant_for`).
    sha256: Option<String>,
    /// How it was loaded.
    pub info: LoadInfo,
}

impl Runtime {
    /// Create the engine; `cache_dir` `None` disables the disk cache. Entries are signed with
    /// the key at [`kiln_state::cache_key_path`].
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Runtime, PluginError> {
        match cache_dir {
            None => Runtime::with_cache(None),
            Some(dir) => match kiln_state::cache_key_path() {
                Ok(key) => Runtime::with_cache(Some((dir, key))),
                Err(e) => {
                    eprintln!("kiln: warning: the compile cache is off: {e}");
                    Runtime::with_cache(None)
                }
            },
        }
    }

    /// Create the engine with the disk cache `cache` (its directory and its key file, see
    /// [`cache`]); `None` disables it. A key that cannot be read or made turns the cache off
    /// (with a warning): kiln then compiles every plugin it loads.
    pub fn with_cache(cache: Option<(PathBuf, PathBuf)>) -> Result<Runtime, PluginError> {
        let cache = cache.and_then(|(dir, key)| match cache::Signer::load(&key, &dir) {
            Ok(signer) => Some((dir, signer)),
            Err(e) => {
                eprintln!("kiln: warning: the compile cache is off: {e}");
                None
            }
        });
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(2 << 20);
        let engine = Engine::new(&config).map_err(|e| PluginError::Engine(e.to_string()))?;
        let mut linker = Linker::<State>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        // Plugins' writes through `wasi:filesystem` go through kiln's guard of protected paths.
        super::fs_guard::add_to_linker(&mut linker, State::guarded_fs)
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
            shared: Arc::new(Shared {
                engine,
                linker,
                cache,
            }),
            stop_ticker: stop,
        })
    }

    /// A runtime with the default cache directory.
    pub fn with_default_cache() -> Result<Runtime, PluginError> {
        Runtime::new(cache::default_dir())
    }

    /// The wasmtime engine every plugin of this runtime is compiled for.
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// The compile cache's directory, when the cache is on.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.shared.cache.as_ref().map(|(d, _)| d.as_path())
    }

    /// Read a component file and check it.
    pub fn check_file(&self, path: &Path) -> Result<Checked, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.check_bytes(&bytes, Source::File(path.to_path_buf()))
    }

    /// Whether the disk cache holds `bytes` compiled for this engine (loading it is quick).
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        self.shared.is_cached(bytes)
    }

    /// Compile (or load from the cache) and check world and contract version.
    pub fn check_bytes(&self, bytes: &[u8], source: Source) -> Result<Checked, PluginError> {
        let source_name = match &source {
            Source::Builtin => super::kind::BUILTIN_SOURCE.to_string(),
            Source::File(p) => p.display().to_string(),
        };
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(PluginError::NotWasm(source_name));
        }
        if bytes[4..8] == [1, 0, 0, 0] {
            return Err(PluginError::CoreModule(source_name));
        }
        let start = Instant::now();
        let (component, from_cache) = self.shared.compile(bytes, &source_name)?;
        let info = LoadInfo {
            from_cache,
            load_us: start.elapsed().as_micros(),
        };
        let (kind, contract) = self.shared.world_of(&component, &source_name)?;
        let sha256 = match &source {
            Source::File(_) => {
                use sha2::{Digest, Sha256};
                Some(hex::encode(Sha256::digest(bytes)))
            }
            Source::Builtin => None,
        };
        Ok(Checked {
            component,
            kind,
            contract,
            source,
            sha256,
            info,
        })
    }

    /// Link a checked component, read its manifest and compute its effective capabilities.
    pub async fn instantiate(
        &self,
        checked: Checked,
        workspace: &Path,
        config: &kiln_config::Config,
    ) -> Result<Plugin, PluginError> {
        let source_name = checked.source.to_string();
        let sha256 = checked.sha256.clone().unwrap_or_default();
        let pre = self
            .shared
            .link(&checked.component, checked.kind, &source_name)?;
        let plugin = self.unadmitted(
            source_name,
            checked.kind,
            checked.contract,
            checked.source,
            Lazy::ready(pre),
            None,
            workspace,
            config,
        )?;
        let manifest = plugin.get_manifest().await?;
        self.admit(plugin, manifest, &sha256, workspace, config)
    }

    /// A built-in known by its `declared` data, its capabilities computed from the declared
    /// manifest, its describe functions answered from the declared data: nothing is compiled
    /// until another of its functions is called (then `bytes` are compiled, or loaded from the
    /// cache, and linked once).
    pub fn instantiate_declared(
        &self,
        bytes: &'static [u8],
        declared: Declared,
        workspace: &Path,
        config: &kiln_config::Config,
    ) -> Result<Plugin, PluginError> {
        let manifest = declared.manifest.clone();
        let shared = self.shared.clone();
        let (name, kind, contract) = (
            manifest.name.clone(),
            declared.kind,
            declared.contract.clone(),
        );
        let link = move || shared.link_declared(bytes, &name, kind, &contract);
        let plugin = self.unadmitted(
            super::kind::BUILTIN_SOURCE.to_string(),
            declared.kind,
            declared.contract.clone(),
            Source::Builtin,
            Lazy::later(Box::new(link)),
            Some(Arc::new(declared)),
            workspace,
            config,
        )?;
        self.admit(plugin, manifest, "", workspace, config)
    }

    /// A plugin with no manifest or capabilities yet.
    #[allow(clippy::too_many_arguments)]
    fn unadmitted(
        &self,
        source_name: String,
        kind: PluginKind,
        contract: String,
        source: Source,
        pre: Lazy,
        declared: Option<Arc<Declared>>,
        workspace: &Path,
        config: &kiln_config::Config,
    ) -> Result<Plugin, PluginError> {
        let root = cap_std::fs::Dir::open_ambient_dir(workspace, cap_std::ambient_authority())
            .map_err(|e| PluginError::Sandbox {
                plugin: source_name.clone(),
                message: format!("cannot open the workspace {}: {e}", workspace.display()),
            })?;
        let fs_policy = Arc::new(super::fs_guard::WritePolicy::new(&root, config.protected()));
        Ok(Plugin {
            name: source_name,
            kind,
            contract,
            source,
            manifest: empty_manifest(),
            effective: Arc::new(Effective::none()),
            settings: BTreeMap::new(),
            workspace: Arc::from(workspace),
            root: Arc::new(root),
            fs_policy,
            declared,
            engine: self.shared.engine.clone(),
            pre,
        })
    }

    /// Check `manifest`'s name, compute the plugin's grant and effective capabilities.
    fn admit(
        &self,
        mut plugin: Plugin,
        manifest: super::Manifest,
        sha256: &str,
        workspace: &Path,
        config: &kiln_config::Config,
    ) -> Result<Plugin, PluginError> {
        let source_name = plugin.name.clone();
        validate_name(&manifest.name).map_err(|e| PluginError::Manifest {
            source_name: source_name.clone(),
            message: e.to_string(),
        })?;
        let component = match &plugin.source {
            Source::File(path) => kiln_config::Component::File { path, sha256 },
            Source::Builtin => kiln_config::Component::Builtin,
        };
        let (mut grant, unbound) = config.grant_for(&manifest.name, component);
        if let Some(why) = unbound {
            eprintln!(
                "kiln: warning: {}",
                kiln_protocol::terminal::printable(&why)
            );
        }
        if plugin.source == Source::Builtin && grant.fs.is_none() {
            grant.fs = builtin::default_grant(&manifest.name).fs;
        }
        plugin.name = manifest.name.clone();
        // No grant reaches kiln's own configuration, state or compile cache.
        let kiln_dirs = super::kiln_dirs::kiln_dirs(self.cache_dir());
        super::kiln_dirs::check_grant(&manifest.name, &grant, workspace, &kiln_dirs).map_err(
            |e| PluginError::Sandbox {
                plugin: manifest.name.clone(),
                message: e.to_string(),
            },
        )?;
        let mut effective = Effective::compute(&manifest, &grant);
        effective.require_confinement = config.sandbox.require_confinement == Some(true);
        effective.protect = config.sandbox.protect.clone().unwrap_or_default();
        let protected = config.protected();
        effective
            .check_protected(&manifest.name, &protected, workspace)
            .map_err(|e| PluginError::Sandbox {
                plugin: manifest.name.clone(),
                message: e.to_string(),
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
        config: &kiln_config::Config,
    ) -> Result<Plugin, PluginError> {
        let checked = self.check_bytes(bytes, source)?;
        self.instantiate(checked, workspace, config).await
    }
}

impl Shared {
    /// Whether the disk cache holds `bytes` compiled for this engine (loading it is quick).
    fn is_cached(&self, bytes: &[u8]) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|(d, _)| cache::entry_path(d, &self.engine, bytes).is_file())
    }

    /// The compiled component, from the disk cache when it holds it (`true`), else compiled
    /// now and stored there.
    fn compile(&self, bytes: &[u8], source_name: &str) -> Result<(Component, bool), PluginError> {
        let entry = self
            .cache
            .as_ref()
            .map(|(d, signer)| (cache::entry_path(d, &self.engine, bytes), signer));
        if let Some((p, signer)) = &entry
            && let cache::Lookup::Hit(c) = cache::load(&self.engine, p, signer)
        {
            return Ok((c, true));
        }
        // A big component (Python, JavaScript) takes seconds: say why nothing else shows.
        if source_name != super::kind::BUILTIN_SOURCE && super::host_impl::progress_shown() {
            eprintln!(
                "kiln: compiling {source_name} ({} MB; first use, cached afterwards)…",
                bytes.len().div_ceil(1 << 20)
            );
        }
        let c = Component::new(&self.engine, bytes).map_err(|e| PluginError::Invalid {
            source_name: source_name.to_string(),
            message: format!("{e:#}"),
        })?;
        if let Some((p, signer)) = &entry {
            // A cache that cannot be written only costs speed on the next run.
            let _ = cache::store(&c, p, signer);
        }
        Ok((c, false))
    }

    /// The kind and contract version of a compiled component (an edit format importing
    /// `exec` is refused).
    fn world_of(
        &self,
        component: &Component,
        source_name: &str,
    ) -> Result<(PluginKind, String), PluginError> {
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let (kind, contract) = world(&exports, source_name)?;
        if kind == PluginKind::EditFormat
            && let Some((name, _)) = ty
                .imports(&self.engine)
                .find(|(n, _)| n.starts_with("kiln:plugin/exec"))
        {
            return Err(PluginError::Link {
                source_name: source_name.to_string(),
                message: format!("edit formats are pure and may not import `{name}`"),
            });
        }
        Ok((kind, contract))
    }

    /// Link a compiled component of `kind`.
    fn link(
        &self,
        component: &Component,
        kind: PluginKind,
        source_name: &str,
    ) -> Result<Pre, PluginError> {
        let link_err = |e: wasmtime::Error| PluginError::Link {
            source_name: source_name.to_string(),
            message: format!("{e:#}"),
        };
        let pre = self.linker.instantiate_pre(component).map_err(link_err)?;
        Ok(match kind {
            PluginKind::Runner => Pre::Runner(runner::RunnerPluginPre::new(pre).map_err(link_err)?),
            PluginKind::EditFormat => {
                Pre::EditFormat(edit_format::EditFormatPluginPre::new(pre).map_err(link_err)?)
            }
            PluginKind::Tool => Pre::Tool(tool::ToolPluginPre::new(pre).map_err(link_err)?),
        })
    }

    /// Compile (or load from the cache) and link the built-in `name` on its first call,
    /// checking that it is the world its declared data says (a stale `declared.json` is an
    /// error, never a plugin of another kind).
    fn link_declared(
        &self,
        bytes: &[u8],
        name: &str,
        kind: PluginKind,
        contract: &str,
    ) -> Result<Pre, PluginError> {
        if !self.is_cached(bytes) && super::host_impl::progress_shown() {
            eprintln!(
                "kiln: compiling the built-in plugin `{name}` (first use; cached afterwards)…"
            );
        }
        let source_name = format!("{} `{name}`", super::kind::BUILTIN_SOURCE);
        let (component, _) = self.compile(bytes, super::kind::BUILTIN_SOURCE)?;
        let found = self.world_of(&component, &source_name)?;
        if found != (kind, contract.to_string()) {
            return Err(PluginError::Manifest {
                source_name,
                message: format!(
                    "it implements {}@{} but its declared.json says {}@{}",
                    found.0, found.1, kind, contract
                ),
            });
        }
        self.link(&component, kind, &source_name)
    }
}
