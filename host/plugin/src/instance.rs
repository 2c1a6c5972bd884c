//! A loaded [`Plugin`]: its linked `InstancePre` per world, the fresh `Store` each call gets
//! (sandboxed WASI context, memory limit, epoch yields), and the mapping of a call's outcome
//! (trap, deadline, memory, output cap) to [`PluginError`].

use super::bindings::{edit_format, runner, tool};
use super::declared::Declared;
use super::{Effective, Manifest, PluginError, PluginKind, Source, State};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Bytes of a guest's stderr kept to explain a trap.
const STDERR_KEEP: usize = 64 * 1024;
/// Most bytes wasmtime may copy from a guest to the host in one call.
const MAX_HOSTCALL_COPY: usize = 1 << 30;

/// The linked component, by world.
pub(super) enum Pre {
    Runner(runner::RunnerPluginPre<State>),
    EditFormat(edit_format::EditFormatPluginPre<State>),
    Tool(tool::ToolPluginPre<State>),
}

/// The linked component, or (a built-in known by its declared data) what to compile and link
/// on its first call.
pub(super) struct Lazy {
    cell: tokio::sync::OnceCell<Pre>,
    later: Option<LinkLater>,
}

/// Compiles (or loads from the cache) and links a built-in, once, on its first call.
pub(super) type LinkLater = Box<dyn Fn() -> Result<Pre, PluginError> + Send + Sync>;

impl Lazy {
    /// Linked already.
    pub(super) fn ready(pre: Pre) -> Lazy {
        Lazy {
            cell: tokio::sync::OnceCell::new_with(Some(pre)),
            later: None,
        }
    }

    /// Compiled (or loaded from the cache) and linked on first use.
    pub(super) fn later(link: LinkLater) -> Lazy {
        Lazy {
            cell: tokio::sync::OnceCell::new(),
            later: Some(link),
        }
    }

    /// Whether the component is linked (compiled or loaded) yet.
    pub(super) fn linked(&self) -> bool {
        self.cell.initialized()
    }
}

/// A loaded plugin: checked, with its manifest and effective capabilities; a built-in known by
/// its declared data is compiled only when a function other than its describe functions is
/// first called. Every call gets a fresh instance, so no state leaks between calls and a crash
/// cannot poison the next.
pub struct Plugin {
    /// Name from the manifest.
    pub name: String,
    /// Kind, from the exported world.
    pub kind: PluginKind,
    /// Contract version the component was built for.
    pub contract: String,
    /// Where it came from.
    pub source: Source,
    /// What it requests.
    pub manifest: Manifest,
    /// What it may do (request ∩ grant).
    pub effective: Arc<Effective>,
    /// Settings from `[plugins.NAME.settings]`.
    pub settings: BTreeMap<String, String>,
    pub(super) workspace: Arc<Path>,
    /// The workspace opened once; every preopen is opened beneath it.
    pub(super) root: Arc<cap_std::fs::Dir>,
    /// What the plugin's `wasi:filesystem` writes may not touch.
    pub(super) fs_policy: Arc<super::fs_guard::WritePolicy>,
    /// A built-in's declared data: its describe functions are answered from it.
    pub(super) declared: Option<Arc<Declared>>,
    /// The engine it is compiled for.
    pub(super) engine: Engine,
    pub(super) pre: Lazy,
}

/// A live instance (see [`Plugin::hold_instance`]).
#[doc(hidden)]
pub struct HeldInstance {
    _store: Store<State>,
}

impl Plugin {
    /// The linked component, compiled (or loaded from the cache) on the first call of a
    /// built-in known by its declared data. Calls at once wait for the one compile.
    pub(super) async fn pre(&self) -> Result<&Pre, PluginError> {
        self.pre
            .cell
            .get_or_try_init(|| async {
                match &self.pre.later {
                    // A compile takes a core for a while: on a multi-thread runtime the
                    // worker hands its other tasks over first.
                    Some(link) => match tokio::runtime::Handle::try_current() {
                        Ok(h)
                            if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
                        {
                            tokio::task::block_in_place(link)
                        }
                        _ => link(),
                    },
                    None => Err(PluginError::Engine(format!(
                        "plugin `{}` has no component to link",
                        self.name
                    ))),
                }
            })
            .await
    }

    /// Compile (or load from the cache) and link the component now if it is not yet: a caller
    /// timing a call does this first, so a built-in's one compile is not counted as the call's.
    pub async fn link(&self) -> Result<(), PluginError> {
        self.pre().await.map(|_| ())
    }

    /// Whether the component is compiled (or loaded from the cache) and linked yet: a
    /// built-in known by its declared data is not until its first call.
    pub fn is_linked(&self) -> bool {
        self.pre.linked()
    }

    /// A fresh store for one call under `effective` (the plugin's own, or a narrowed copy).
    pub(super) fn new_store(
        &self,
        effective: Arc<Effective>,
    ) -> Result<(Store<State>, MemoryOutputPipe), PluginError> {
        let stderr = MemoryOutputPipe::new(STDERR_KEEP);
        let wasi = effective
            .wasi_ctx(&self.root, stderr.clone())
            .map_err(|e| PluginError::Sandbox {
                plugin: self.name.clone(),
                message: e.to_string(),
            })?;
        let state = State::new(
            Arc::from(self.name.as_str()),
            effective,
            self.workspace.clone(),
            wasi,
            self.fs_policy.clone(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Let wasmtime copy a returned string as large as the instance's memory (up to 1 GiB),
        // so an oversized return is measured against `output_bytes` and reported as such
        // rather than cut short by wasmtime's smaller default copy limit.
        let memory = ((self.effective.limits.memory_mib as usize) << 20).min(MAX_HOSTCALL_COPY);
        store.set_hostcall_fuel(store.hostcall_fuel().max(memory));
        // Yield to the async executor every 10 ms of guest execution, so the call's deadline
        // (a tokio timeout around it, see `invoke!` in calls.rs) and any caller's timeout can
        // stop even a guest that never returns; dropping the call's future drops the instance.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(10);
        Ok((store, stderr))
    }

    pub(super) fn wrong_kind(&self, expected: PluginKind) -> PluginError {
        PluginError::WrongKind {
            plugin: self.name.clone(),
            actual: self.kind,
            expected,
        }
    }

    pub(super) fn finish<R>(
        &self,
        res: Result<wasmtime::Result<R>, tokio::time::error::Elapsed>,
        store: &Store<State>,
        stderr: &MemoryOutputPipe,
    ) -> Result<R, PluginError> {
        store.data().report_dropped_logs();
        store.data().report_refused_writes();
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

    pub(super) fn cap(&self, bytes: usize) -> Result<(), PluginError> {
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
        let pre = self.pre().await?;
        let (mut store, stderr) = self.new_store(self.effective.clone())?;
        let res = match pre {
            Pre::Runner(p) => p.instance_pre().instantiate_async(&mut store).await,
            Pre::EditFormat(p) => p.instance_pre().instantiate_async(&mut store).await,
            Pre::Tool(p) => p.instance_pre().instantiate_async(&mut store).await,
        };
        self.finish(Ok(res.map(|_| ())), &store, &stderr)?;
        Ok(HeldInstance { _store: store })
    }
}
