//! Host-side state of one plugin call (`Store` data) and the implementations of the imports
//! plugins may use: `log` and `exec`. Every exec call is checked against the effective grant.

use super::bindings::{exec, log, types};
use super::capability::Effective;
use super::confine::Refusal;
use super::fs_guard::{FsGuard, Guarded, WritePolicy};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Longest log message kept from a plugin.
const MAX_LOG_MESSAGE: usize = 4096;
/// Most log lines one plugin call may print; later messages are dropped and counted.
const MAX_LOG_LINES_PER_CALL: usize = 200;
/// Most log bytes one plugin call may print.
const MAX_LOG_BYTES_PER_CALL: usize = 64 * 1024;

/// The `tracing` target of a plugin's log messages (each event has a `plugin` field, the
/// plugin's name). Which levels are shown is the subscriber's choice (the command line's
/// `-q`/`-v`); with no subscriber, nothing is.
pub const PLUGIN_LOG_TARGET: &str = "kiln::plugin";

/// Whether kiln's own progress lines are shown: the subscriber shows warnings (not `-q`,
/// which shows errors only).
pub fn progress_shown() -> bool {
    tracing::enabled!(target: "kiln::progress", tracing::Level::WARN)
}

/// Whether a plugin's message at `level` is shown.
fn log_shown(level: log::Level) -> bool {
    match level {
        log::Level::Error => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::ERROR),
        log::Level::Warn => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::WARN),
        log::Level::Info => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::INFO),
        log::Level::Debug => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::DEBUG),
        log::Level::Trace => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::TRACE),
    }
}

/// Send a plugin's message (already made printable) to the subscriber.
fn log_event(level: log::Level, plugin: &str, text: &str) {
    match level {
        log::Level::Error => tracing::error!(target: PLUGIN_LOG_TARGET, plugin, "{text}"),
        log::Level::Warn => tracing::warn!(target: PLUGIN_LOG_TARGET, plugin, "{text}"),
        log::Level::Info => tracing::info!(target: PLUGIN_LOG_TARGET, plugin, "{text}"),
        log::Level::Debug => tracing::debug!(target: PLUGIN_LOG_TARGET, plugin, "{text}"),
        log::Level::Trace => tracing::trace!(target: PLUGIN_LOG_TARGET, plugin, "{text}"),
    }
}

/// Most linear memories, tables and core instances one plugin instance may create. A
/// component is made of a few core instances (a Python or JavaScript guest has a handful); these
/// bounds keep a component with hundreds of memories from reaching gigabytes.
pub(crate) const MAX_MEMORIES: usize = 32;
/// See [`MAX_MEMORIES`].
pub(crate) const MAX_TABLES: usize = 64;
/// See [`MAX_MEMORIES`].
pub(crate) const MAX_INSTANCES: usize = 64;
/// Table elements are accounted at this many bytes each against the memory limit.
const TABLE_ELEMENT_BYTES: usize = 16;

/// The memory limit of one plugin instance: every linear memory and table of the instance
/// counts against one budget (not each memory on its own), and records why growth was refused.
pub(crate) struct Limiter {
    pub(crate) max_bytes: usize,
    /// Bytes held by all memories and tables of the instance.
    used: usize,
    pub(crate) exceeded: bool,
}

impl Limiter {
    pub(crate) fn new(max_bytes: usize) -> Limiter {
        Limiter {
            max_bytes,
            used: 0,
            exceeded: false,
        }
    }

    fn grow(&mut self, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(desired.saturating_sub(current));
        if total > self.max_bytes {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "memory limit of {} MiB exceeded",
                self.max_bytes >> 20
            ));
        }
        self.used = total;
        Ok(true)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(current, desired)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// What one call has printed of its log so far.
#[derive(Default)]
struct LogBudget {
    lines: usize,
    bytes: usize,
    dropped: usize,
}

/// The data of one plugin call's `Store`.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    plugin: Arc<str>,
    effective: Arc<Effective>,
    workspace: Arc<Path>,
    deadline: Instant,
    log: LogBudget,
    /// The write guard of the call's `wasi:filesystem`.
    fs_guard: Arc<FsGuard>,
    /// What the sandbox refused the call's programs, gathered over its `exec` calls.
    refused: kiln_sandbox::Refusals,
}

impl State {
    pub(crate) fn new(
        plugin: Arc<str>,
        effective: Arc<Effective>,
        workspace: Arc<Path>,
        wasi: WasiCtx,
        fs_policy: Arc<WritePolicy>,
    ) -> State {
        let limits = effective.limits;
        State {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new((limits.memory_mib as usize) << 20),
            plugin,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_ms as u64),
            effective,
            workspace,
            log: LogBudget::default(),
            fs_guard: Arc::new(FsGuard::new(fs_policy)),
            refused: kiln_sandbox::Refusals::default(),
        }
    }

    /// What the sandbox refused the call's programs (taken: a second call finds nothing).
    pub(crate) fn take_refused(&mut self) -> kiln_sandbox::Refusals {
        std::mem::take(&mut self.refused)
    }

    /// wasmtime-wasi's filesystem view of the store with the call's write guard: what the
    /// guarded `wasi:filesystem/types` is linked with.
    pub(crate) fn guarded_fs(&mut self) -> Guarded<'_> {
        let guard = self.fs_guard.clone();
        Guarded {
            inner: self.filesystem(),
            guard,
        }
    }

    /// Say once, at the end of a call, which writes to protected paths were refused.
    pub(crate) fn report_refused_writes(&self) {
        if let Some(line) = self.fs_guard.refusals() {
            log_event(log::Level::Warn, &self.plugin, &line);
        }
    }

    /// Say once, at the end of a call, how many log messages went over the per-call cap.
    pub(crate) fn report_dropped_logs(&self) {
        if self.log.dropped > 0 {
            eprintln!(
                "[plugin {}] warn: … {} log lines dropped (at most {MAX_LOG_LINES_PER_CALL} lines or {MAX_LOG_BYTES_PER_CALL} bytes of log per call)",
                self.plugin, self.log.dropped
            );
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for State {}

impl log::Host for State {
    async fn log(&mut self, level: log::Level, message: String) {
        if !log_shown(level) {
            return;
        }
        let mut msg = message;
        if msg.len() > MAX_LOG_MESSAGE {
            msg.truncate(msg.floor_char_boundary(MAX_LOG_MESSAGE));
            msg.push_str(" …[truncated]");
        }
        // Escape sequences and control characters are shown, not obeyed; each line of a
        // multi-line message carries the prefix, so no line can pass for kiln's own.
        let text = kiln_protocol::terminal::printable(msg.trim_end_matches('\n'));
        let lines = text.split('\n').count();
        if self.log.lines + lines > MAX_LOG_LINES_PER_CALL
            || self.log.bytes + text.len() > MAX_LOG_BYTES_PER_CALL
        {
            self.log.dropped += 1;
            return;
        }
        self.log.lines += lines;
        self.log.bytes += text.len();
        log_event(level, &self.plugin, &text);
    }
}

impl exec::Host for State {
    async fn run(&mut self, cmd: exec::Command) -> Result<exec::Output, types::Error> {
        let spawn = self.check(&cmd)?;
        match super::exec::run(spawn).await {
            Ok(f) => Ok({
                self.refused.sockets.extend(f.refused.sockets);
                for p in f.refused.paths {
                    if !self.refused.paths.contains(&p) {
                        self.refused.paths.push(p);
                    }
                }
                exec::Output {
                    exit_code: f.exit_code,
                    stdout: f.stdout,
                    stderr: f.stderr,
                    truncated: f.truncated,
                    timed_out: f.timed_out,
                    duration_ms: f.duration.as_millis() as u64,
                }
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(types::Error::NotFound(format!("`{}`: {e}", cmd.program)))
            }
            Err(e) => Err(types::Error::Failed(format!(
                "could not start `{}`: {e}",
                cmd.program
            ))),
        }
    }
}

impl State {
    /// Check a command against the grant and turn it into a process to spawn.
    fn check(&self, cmd: &exec::Command) -> Result<super::exec::Spawn, types::Error> {
        let plugin = &*self.plugin;
        if cmd.program.is_empty()
            || cmd.program.contains('\0')
            || cmd.args.iter().any(|a| a.contains('\0'))
        {
            return Err(types::Error::InvalidInput(
                "the program is empty or an argument contains a NUL byte".into(),
            ));
        }
        self.effective
            .check_exec(plugin, &cmd.program, &cmd.args)
            .map_err(|d| types::Error::Denied(d.to_string()))?;
        let program = super::exec::resolve_program(&cmd.program, &self.workspace)
            .map_err(|e| types::Error::NotFound(e.to_string()))?;
        let cwd = super::exec::open_cwd(cmd.cwd.as_deref(), &self.workspace)
            .map_err(|e| types::Error::Denied(e.to_string()))?;
        // Base environment so compilers find their own tools; nothing else is inherited.
        let mut env: Vec<(String, String)> = Vec::new();
        for base in ["PATH", "HOME"] {
            if let Some(v) = kiln_env::env().var(base) {
                env.push((base.to_string(), v.to_string()));
            }
        }
        for name in &self.effective.env {
            if let Some(v) = kiln_env::env().var(name) {
                env.push((name.clone(), v.to_string()));
            }
        }
        for (k, v) in &cmd.env {
            self.effective
                .check_env(plugin, k)
                .map_err(|d| types::Error::Denied(d.to_string()))?;
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), v.clone()));
        }
        let limits = self.effective.limits;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut timeout = Duration::from_millis(limits.timeout_ms as u64).min(left);
        if let Some(t) = cmd.timeout_ms {
            timeout = timeout.min(Duration::from_millis(t as u64));
        }
        // Each stream keeps at most 3/8 of the plugin's own output limit: both, and the result
        // the plugin builds from them (a runner returns them with its diagnostics), fit under
        // it, so a build that prints much is cut (head and tail) instead of failing the call.
        let mut cap = limits.output_bytes as usize / 8 * 3;
        if let Some(c) = cmd.output_cap {
            cap = cap.min(c as usize);
        }
        let e = &self.effective;
        let confinement = super::exec::confinement(
            &self.workspace,
            cmd.cwd.as_deref(),
            &program,
            &env,
            super::exec::Reach {
                read: &e.read,
                write: &e.write,
                writes: e.writes,
                net: e.net,
                require: e.require_confinement,
                protect: &e.protect,
            },
        )
        .map_err(|r| match r {
            Refusal::Denied(why) => {
                types::Error::Denied(format!("running `{}`: {why}", cmd.program))
            }
            Refusal::Failed(why) => {
                types::Error::Failed(format!("running `{}`: {why}", cmd.program))
            }
        })?;
        Ok(super::exec::Spawn {
            program,
            args: cmd.args.clone(),
            env,
            cwd,
            stdin: cmd.stdin.clone(),
            timeout,
            cap,
            confinement,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instantiate a component written in WAT under a limiter of `mib` MiB.
    fn instantiate(wat: &str, mib: usize) -> (bool, bool) {
        let engine = wasmtime::Engine::default();
        let bytes = wat::parse_str(wat).unwrap();
        let component = wasmtime::component::Component::new(&engine, &bytes).unwrap();
        let mut store = wasmtime::Store::new(&engine, Limiter::new(mib << 20));
        store.limiter(|l| l);
        let linker = wasmtime::component::Linker::<Limiter>::new(&engine);
        let ok = linker.instantiate(&mut store, &component).is_ok();
        (ok, store.data().exceeded)
    }

    fn instances_of(module: &str, n: usize) -> String {
        let mut w = format!("(component (core module $m {module})");
        for _ in 0..n {
            w.push_str(" (core instance (instantiate $m))");
        }
        w.push(')');
        w
    }

    #[test]
    fn the_memory_limit_covers_every_memory_of_an_instance() {
        // 40 pages are 2.5 MiB: four memories fit in 16 MiB, twenty do not (each one alone
        // would).
        let m = "(memory 40)";
        assert_eq!(instantiate(&instances_of(m, 4), 16), (true, false));
        assert_eq!(instantiate(&instances_of(m, 20), 16), (false, true));
        // Several memories in one module count the same way.
        let multi =
            "(memory 40) (memory 40) (memory 40) (memory 40) (memory 40) (memory 40) (memory 40)";
        assert_eq!(instantiate(&instances_of(multi, 1), 16), (false, true));
    }

    #[test]
    fn counts_of_memories_tables_and_instances_are_capped() {
        let (ok, _) = instantiate(&instances_of("(memory 0)", MAX_MEMORIES + 1), 256);
        assert!(!ok, "more than {MAX_MEMORIES} memories");
        let (ok, _) = instantiate(&instances_of("(table 0 funcref)", MAX_TABLES + 1), 256);
        assert!(!ok, "more than {MAX_TABLES} tables");
        let (ok, _) = instantiate(&instances_of("", MAX_INSTANCES + 1), 256);
        assert!(!ok, "more than {MAX_INSTANCES} instances");
        // Table elements count against the memory limit: 2M elements are 32 MiB.
        assert_eq!(
            instantiate(&instances_of("(table 2000000 funcref)", 1), 16),
            (false, true)
        );
        assert_eq!(
            instantiate(&instances_of("(memory 1)", 8), 256),
            (true, false)
        );
    }
}
