//! Running a program on behalf of a plugin (the `exec` import): resolution of the program,
//! a cwd confined to the workspace, a clean environment, output caps, and a timeout that kills
//! the whole process group. Policy checks happen before this in `host_impl`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// A checked request to run a process.
#[derive(Debug)]
pub struct Spawn {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// The complete environment of the child.
    pub env: Vec<(String, String)>,
    /// Absolute working directory (inside the workspace).
    pub cwd: PathBuf,
    /// Standard input bytes.
    pub stdin: Option<Vec<u8>>,
    /// Time limit.
    pub timeout: Duration,
    /// Cap per stream.
    pub cap: usize,
}

/// What the process produced.
#[derive(Debug)]
pub struct Finished {
    /// Exit code, `None` when killed.
    pub exit_code: Option<i32>,
    /// Captured stdout (at most `cap`).
    pub stdout: Vec<u8>,
    /// Captured stderr (at most `cap`).
    pub stderr: Vec<u8>,
    /// Output went past the cap.
    pub truncated: bool,
    /// Killed by the timeout.
    pub timed_out: bool,
    /// Run time.
    pub duration: Duration,
}

/// Find `program` on the host's `PATH` (names) or in the workspace (paths with `/`).
pub fn resolve_program(program: &str, workspace: &Path) -> Result<PathBuf, String> {
    if program.contains('/') {
        super::capability::check_relative(program)
            .map_err(|why| format!("program `{program}` {why}"))?;
        let p = workspace.join(program);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "program `{program}` does not exist in the workspace"
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(format!("program `{program}` was not found on PATH"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Resolve a workspace-relative cwd, refusing anything (symlinks included) that leaves it.
pub fn resolve_cwd(cwd: Option<&str>, workspace: &Path) -> Result<PathBuf, String> {
    let root = workspace
        .canonicalize()
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))?;
    let Some(rel) = cwd else { return Ok(root) };
    super::capability::check_relative(rel).map_err(|why| format!("cwd `{rel}` {why}"))?;
    let p = root
        .join(rel)
        .canonicalize()
        .map_err(|e| format!("cwd `{rel}`: {e}"))?;
    if !p.starts_with(&root) {
        return Err(format!(
            "cwd `{rel}` leaves the workspace (through a symlink)"
        ));
    }
    Ok(p)
}

/// Kills the process group when dropped (timeout, or the plugin call was cancelled).
struct GroupGuard(Option<i32>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // SAFETY: killpg only sends a signal; a stale pgid at worst returns ESRCH.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Bytes kept from a stream and whether more were discarded.
type Captured = (Vec<u8>, bool);

async fn read_capped<R: AsyncRead + Unpin>(mut r: R, cap: usize) -> Captured {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut truncated = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

/// Run the process to completion or until the timeout.
pub async fn run(spawn: Spawn) -> std::io::Result<Finished> {
    let start = Instant::now();
    let mut cmd = tokio::process::Command::new(&spawn.program);
    cmd.args(&spawn.args)
        .env_clear()
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spawn.cwd)
        .stdin(if spawn.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut guard = GroupGuard(child.id().map(|id| id as i32));
    if let (Some(bytes), Some(mut stdin)) = (spawn.stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let out = tokio::spawn(read_capped(child.stdout.take().expect("piped"), spawn.cap));
    let err = tokio::spawn(read_capped(child.stderr.take().expect("piped"), spawn.cap));
    let deadline = tokio::time::Instant::from_std(start + spawn.timeout);
    let (exit_code, timed_out) = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(status) => (status?.code(), false),
        Err(_) => {
            guard.kill();
            let _ = child.wait().await;
            (None, true)
        }
    };
    // Descendants that kept the pipes open get a moment, then the group is killed.
    let grace = tokio::time::sleep(Duration::from_millis(200));
    tokio::pin!(grace);
    let mut out = out;
    let mut err = err;
    let mut results: (Option<Captured>, Option<Captured>) = (None, None);
    let mut grace_over = false;
    loop {
        tokio::select! {
            r = &mut out, if results.0.is_none() => results.0 = Some(r.unwrap_or_default()),
            r = &mut err, if results.1.is_none() => results.1 = Some(r.unwrap_or_default()),
            _ = &mut grace, if !grace_over => {
                grace_over = true;
                guard.kill();
            }
        }
        if results.0.is_some() && results.1.is_some() {
            break;
        }
    }
    guard.kill();
    let (stdout, t1) = results.0.unwrap_or_default();
    let (stderr, t2) = results.1.unwrap_or_default();
    Ok(Finished {
        exit_code,
        stdout,
        stderr,
        truncated: t1 || t2,
        timed_out,
        duration: start.elapsed(),
    })
}
