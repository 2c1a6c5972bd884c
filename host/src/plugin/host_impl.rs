//! Host-side state of one plugin call (`Store` data) and the implementations of the imports
//! plugins may use: `log` and `exec`. Every exec call is checked against the effective grant.

use super::bindings::{exec, log, types};
use super::capability::Effective;
use super::confine::{Confinement, Refusal};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Longest log message kept from a plugin.
const MAX_LOG_MESSAGE: usize = 4096;

static LOG_LEVEL: AtomicU8 = AtomicU8::new(3);

/// Set the most detailed plugin log level shown: 0 off, 1 error, 2 warn, 3 info, 4 debug, 5 trace.
pub fn set_log_level(level: u8) {
    LOG_LEVEL.store(level, Ordering::Relaxed);
}

/// Memory limiter that records why growth was refused.
pub(crate) struct Limiter {
    pub(crate) max_bytes: usize,
    pub(crate) exceeded: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "memory limit of {} MiB exceeded",
                self.max_bytes >> 20
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
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
}

impl State {
    pub(crate) fn new(
        plugin: Arc<str>,
        effective: Arc<Effective>,
        workspace: Arc<Path>,
        wasi: WasiCtx,
    ) -> State {
        let limits = effective.limits;
        State {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                max_bytes: (limits.memory_mib as usize) << 20,
                exceeded: false,
            },
            plugin,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_ms as u64),
            effective,
            workspace,
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
        let (n, name) = match level {
            log::Level::Error => (1, "error"),
            log::Level::Warn => (2, "warn"),
            log::Level::Info => (3, "info"),
            log::Level::Debug => (4, "debug"),
            log::Level::Trace => (5, "trace"),
        };
        if n > LOG_LEVEL.load(Ordering::Relaxed) {
            return;
        }
        let mut msg = message;
        if msg.len() > MAX_LOG_MESSAGE {
            let mut cut = MAX_LOG_MESSAGE;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push_str(" …[truncated]");
        }
        eprintln!("[plugin {}] {name}: {msg}", self.plugin);
    }
}

impl exec::Host for State {
    async fn run(&mut self, cmd: exec::Command) -> Result<exec::Output, types::Error> {
        let spawn = self.check(&cmd)?;
        match super::exec::run(spawn).await {
            Ok(f) => Ok(exec::Output {
                exit_code: f.exit_code,
                stdout: f.stdout,
                stderr: f.stderr,
                truncated: f.truncated,
                timed_out: f.timed_out,
                duration_ms: f.duration.as_millis() as u64,
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
            .map_err(types::Error::NotFound)?;
        let cwd = super::exec::open_cwd(cmd.cwd.as_deref(), &self.workspace)
            .map_err(types::Error::Denied)?;
        // Base environment so compilers find their own tools; nothing else is inherited.
        let mut env: Vec<(String, String)> = Vec::new();
        for base in ["PATH", "HOME"] {
            if let Ok(v) = std::env::var(base) {
                env.push((base.to_string(), v));
            }
        }
        for name in &self.effective.env {
            if let Ok(v) = std::env::var(name) {
                env.push((name.clone(), v));
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
        let mut cap = limits.output_bytes as usize;
        if let Some(c) = cmd.output_cap {
            cap = cap.min(c as usize);
        }
        let e = &self.effective;
        let confinement =
            Confinement::prepare(&self.workspace, &e.write, e.net, e.require_confinement).map_err(
                |r| match r {
                    Refusal::Denied(why) => {
                        types::Error::Denied(format!("running `{}`: {why}", cmd.program))
                    }
                    Refusal::Failed(why) => {
                        types::Error::Failed(format!("running `{}`: {why}", cmd.program))
                    }
                },
            )?;
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
