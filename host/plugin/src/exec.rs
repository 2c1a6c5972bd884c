//! Running a program on behalf of a plugin (the `exec` import): resolution of the program,
//! a cwd opened inside the workspace, a clean environment, Landlock confinement (`confine`),
//! output caps, a timeout, and every descendant killed when the call ends (`reap`), then what
//! the confinement refused it ([`Finished::refused`]). Policy checks happen before this in
//! `host_impl`.

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use kiln_sandbox::{self as confine, reap};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// A checked request to run a process.
#[derive(Debug)]
pub struct Spawn {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments after the program, passed as they are (no shell).
    pub args: Vec<String>,
    /// The complete environment of the child.
    pub env: Vec<(String, String)>,
    /// Working directory, opened inside the workspace; the child enters it by descriptor.
    pub cwd: Dir,
    /// Standard input bytes.
    pub stdin: Option<Vec<u8>>,
    /// Time limit.
    pub timeout: Duration,
    /// Cap per stream.
    pub cap: usize,
    /// The call's temp dir and Landlock ruleset.
    pub confinement: confine::Confinement,
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
    /// What kiln's confinement refused the call (sockets the kernel reported, paths its output
    /// names where kiln's rules refuse them).
    pub refused: confine::Refusals,
}

/// Why a program named in an exec call or a configuration cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum ProgramNotFound {
    /// A path (with `/`) that is not workspace-relative: [`kiln_config::path::check_relative`]'s
    /// reason.
    #[error("program `{program}` {why}")]
    Outside { program: String, why: &'static str },
    /// A workspace path with no file there.
    #[error("program `{0}` does not exist in the workspace")]
    MissingInWorkspace(String),
    /// A name that no absolute `PATH` entry holds as an executable file.
    #[error("program `{0}` was not found on PATH")]
    NoneOnPath(String),
}

/// Why the working directory of a call cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum CwdError {
    /// The workspace itself could not be opened.
    #[error("workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The cwd is not workspace-relative: [`kiln_config::path::check_relative`]'s reason.
    #[error("cwd `{cwd}` {why}")]
    NotRelative { cwd: String, why: &'static str },
    /// A symbolic link on the way leads out of the workspace.
    #[error("cwd `{0}` leaves the workspace (through a symlink)")]
    Escapes(String),
    /// The directory could not be opened (missing, not a directory, ...).
    #[error("cwd `{cwd}`: {source}")]
    Open { cwd: String, source: std::io::Error },
}

/// Find `program` on the host's `PATH` (names) or in the workspace (paths with `/`).
pub fn resolve_program(program: &str, workspace: &Path) -> Result<PathBuf, ProgramNotFound> {
    if program.contains('/') {
        kiln_config::path::check_relative(program).map_err(|why| ProgramNotFound::Outside {
            program: program.to_string(),
            why,
        })?;
        let p = workspace.join(program);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ProgramNotFound::MissingInWorkspace(program.to_string()))
        };
    }
    let path = kiln_env::env()
        .path()
        .unwrap_or(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(path) {
        // An empty or relative entry (`PATH=:/usr/bin`, `bin`) is resolved against kiln's
        // current directory, usually the workspace: a repository's own executable `ls` would
        // run for the granted `ls`. Only absolute entries count.
        if !dir.is_absolute() {
            continue;
        }
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(ProgramNotFound::NoneOnPath(program.to_string()))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Open a workspace-relative cwd as a directory descriptor: every component is resolved inside
/// the workspace (a symlink may not lead out), and the child enters the descriptor, not a path
/// resolved again later.
pub fn open_cwd(cwd: Option<&str>, workspace: &Path) -> Result<Dir, CwdError> {
    let root = Dir::open_ambient_dir(workspace, ambient_authority()).map_err(|source| {
        CwdError::Workspace {
            path: workspace.to_path_buf(),
            source,
        }
    })?;
    let Some(rel) = cwd else { return Ok(root) };
    kiln_config::path::check_relative(rel).map_err(|why| CwdError::NotRelative {
        cwd: rel.to_string(),
        why,
    })?;
    root.open_dir(rel).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            CwdError::Escapes(rel.to_string())
        } else {
            CwdError::Open {
                cwd: rel.to_string(),
                source: e,
            }
        }
    })
}

/// What a program of a call may reach beyond its view's fixed parts: the grant's paths, where
/// it may write, the network, and whether gaps are refused.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    /// Granted read paths outside the workspace (absolute).
    pub read: &'a [PathBuf],
    /// Granted write paths outside the workspace (absolute).
    pub write: &'a [PathBuf],
    /// Where writes may go.
    pub writes: confine::Writes,
    /// The network is granted.
    pub net: bool,
    /// `[sandbox] require_confinement`.
    pub require: bool,
    /// `[sandbox] protect` globs.
    pub protect: &'a [String],
}

/// The confinement of one call of `program` in `workspace` (starting in the workspace-relative
/// `cwd`) with the environment `env` (its `PATH` and `HOME` shape the view).
pub fn confinement(
    workspace: &Path,
    cwd: Option<&str>,
    program: &Path,
    env: &[(String, String)],
    reach: Reach<'_>,
) -> Result<confine::Confinement, confine::Refusal> {
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let path: Vec<PathBuf> = var("PATH")
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    let home = var("HOME").map(Path::new);
    // Never a workspace that holds the user's home or kiln's own directories (the CLI refuses
    // one up front; this holds for every other way in).
    if let Some(refused) = super::kiln_dirs::refuse_workspace_here(workspace, None) {
        return Err(confine::Refusal::Denied(refused.to_string()));
    }
    // Only a view can keep paths inside the workspace read-only: without one, no walk.
    let mut protect = if confine::reap::view_missing().is_none() {
        protected_in(workspace, reach.protect)
            .map_err(|e| confine::Refusal::Denied(e.to_string()))?
    } else {
        Vec::new()
    };
    // Cargo's caches stay as cargo wrote them, even where a grant lets a build write the
    // registry or git cache: the unpacked sources, the archives they are unpacked from and the
    // index (cargo checks neither again), the git databases and checkouts.
    for w in reach.write {
        let subs: &[&str] = match w.file_name().and_then(|n| n.to_str()) {
            Some("registry") => &["src", "cache", "index"],
            Some("git") => &["db", "checkouts"],
            _ => &[],
        };
        for sub in subs {
            let p = w.join(sub);
            if p.is_dir() {
                protect.push(p);
            }
        }
    }
    // Every git directory's `config` without the credentials it may hold: the view shows a
    // filtered copy (protected paths are found only where there is a view).
    let shown = super::git_config::shown_configs(&protect);
    let cwd = match cwd {
        Some(rel) => workspace.join(kiln_config::path::normalize(rel)),
        None => workspace.to_path_buf(),
    };
    confine::Confinement::prepare(&confine::Policy {
        workspace,
        cwd: &cwd,
        program,
        path: &path,
        home,
        protect: &protect,
        shown: &shown,
        read: reach.read,
        write: reach.write,
        writes: reach.writes,
        net: reach.net,
        require: reach.require,
    })
}

/// Why the protected paths of a workspace could not all be found (the call is refused: a
/// directory kiln cannot list could hide a `.git`).
#[derive(Debug, thiserror::Error)]
#[error("cannot look for protected paths (.git, .kiln, kiln.toml) in `{}`: {source}; kiln does not run programs in a workspace it cannot see whole", path.display())]
pub struct WalkError {
    /// The workspace-relative directory that could not be opened or listed.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// The paths of `workspace` a program must not change, whatever it may write: every `.git`,
/// `.kiln` and `kiln.toml` at any depth, the git directory a `.git` file (`gitdir: ...`) or a
/// `.git` link names inside the workspace, and what `[sandbox] protect` matches. Found by one
/// walk, directory by directory through descriptors (no path length limit), that follows no
/// link and does not descend into what it found; a directory it cannot list fails the walk.
pub fn protected_in(workspace: &Path, globs: &[String]) -> Result<Vec<PathBuf>, WalkError> {
    let rules = (!globs.is_empty()).then(|| kiln_config::path::Protected::new(globs));
    let ws_real = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let fail = |rel: &Path| {
        let path = rel.to_path_buf();
        move |source| WalkError { path, source }
    };
    let root =
        Dir::open_ambient_dir(workspace, ambient_authority()).map_err(fail(Path::new(".")))?;
    let mut found = Vec::new();
    let mut stack = vec![(root, PathBuf::new())];
    while let Some((dir, rel)) = stack.pop() {
        for entry in dir.entries().map_err(fail(&rel))? {
            let entry = entry.map_err(fail(&rel))?;
            let name = entry.file_name();
            let child = rel.join(&name);
            let ty = entry.file_type().map_err(fail(&child))?;
            let always = name == ".git" || name == ".kiln" || name == "kiln.toml";
            if always
                || rules
                    .as_ref()
                    .is_some_and(|r| r.why(&child.to_string_lossy()).is_some())
            {
                if ty.is_symlink() || (name == ".git" && ty.is_file()) {
                    // Where it leads, when that is inside the workspace: a link is never a
                    // mount point (it would take the mount elsewhere).
                    if let Some(target) = git_dir_of(workspace, &child, ty.is_symlink())
                        .filter(|t| t.starts_with(&ws_real))
                    {
                        found.push(target);
                    }
                    if ty.is_symlink() {
                        continue;
                    }
                }
                found.push(workspace.join(&child));
                continue;
            }
            if ty.is_dir() {
                let sub = dir.open_dir(&name).map_err(fail(&child))?;
                stack.push((sub, child));
            }
        }
    }
    Ok(found)
}

/// The resolved target of the link at `rel`, or the directory a `.git` file names
/// (`gitdir: PATH`, relative to the file's directory).
fn git_dir_of(workspace: &Path, rel: &Path, link: bool) -> Option<PathBuf> {
    let at = workspace.join(rel);
    if link {
        return std::fs::canonicalize(&at).ok();
    }
    let text = std::fs::read_to_string(&at).ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    std::fs::canonicalize(at.parent()?.join(named)).ok()
}

/// What a descendant still holding the pipes gets to finish writing once the program exited.
const GRACE: Duration = Duration::from_millis(200);
/// How long output is still read after everything of the call was killed.
const AFTER_KILL: Duration = Duration::from_millis(200);

/// One captured output stream: at most `cap` bytes kept, and whether more were discarded. Past
/// the cap it keeps the head (the first quarter) and the tail (the rest, the last bytes
/// written), joined by a line saying how much was cut: a build's errors come at its end.
struct Stream<R> {
    reader: Option<R>,
    /// The first bytes, up to [`Stream::head_cap`].
    kept: Vec<u8>,
    /// The last bytes once the head is full, at most `cap - head_cap` (minus the marker).
    tail: std::collections::VecDeque<u8>,
    /// Bytes dropped between head and tail.
    cut: u64,
    truncated: bool,
    cap: usize,
    buf: Box<[u8]>,
}

/// Room left for the line that says how much was cut between head and tail.
const CUT_MARKER_ROOM: usize = 64;

impl<R: AsyncRead + Unpin> Stream<R> {
    fn new(reader: Option<R>, cap: usize) -> Stream<R> {
        Stream {
            reader,
            kept: Vec::new(),
            tail: std::collections::VecDeque::new(),
            cut: 0,
            truncated: false,
            cap,
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
        }
    }

    fn is_open(&self) -> bool {
        self.reader.is_some()
    }

    /// How much of the start is kept once the stream passes its cap.
    fn head_cap(&self) -> usize {
        if self.cap <= 4 * CUT_MARKER_ROOM {
            self.cap
        } else {
            self.cap / 4
        }
    }

    /// Read once (cancel-safe: bytes are kept only once a read completed).
    async fn read(&mut self) {
        let Some(r) = self.reader.as_mut() else {
            return std::future::pending().await;
        };
        match r.read(&mut self.buf).await {
            Ok(0) | Err(_) => self.reader = None,
            Ok(n) => {
                let chunk = &self.buf[..n];
                if !self.truncated && self.kept.len() + n <= self.cap {
                    self.kept.extend_from_slice(chunk);
                    return;
                }
                if !self.truncated {
                    // Past the cap for the first time: what is beyond the head starts the tail.
                    self.truncated = true;
                    let head = self.head_cap();
                    let beyond: Vec<u8> = self.kept.drain(head.min(self.kept.len())..).collect();
                    self.tail.extend(beyond);
                }
                let tail_cap = self
                    .cap
                    .saturating_sub(self.head_cap())
                    .saturating_sub(CUT_MARKER_ROOM);
                if self.head_cap() == self.cap {
                    // Too small a cap for a tail: keep the head only.
                    self.cut += n as u64;
                    return;
                }
                self.tail.extend(chunk);
                let over = self.tail.len().saturating_sub(tail_cap);
                self.tail.drain(..over);
                self.cut += over as u64;
            }
        }
    }

    /// What was kept: all of it, or its head, a line saying how much was cut, and its tail.
    fn into_kept(self) -> Vec<u8> {
        let mut out = self.kept;
        if self.cut > 0 && !self.tail.is_empty() {
            out.extend_from_slice(
                format!("\n[... {} bytes of output cut here ...]\n", self.cut).as_bytes(),
            );
        }
        out.extend(self.tail);
        out.truncate(self.cap);
        out
    }
}

/// Read both streams until they close or `limit` passes.
async fn drain<A, B>(out: &mut Stream<A>, err: &mut Stream<B>, limit: Duration)
where
    A: AsyncRead + Unpin,
    B: AsyncRead + Unpin,
{
    let until = tokio::time::Instant::now() + limit;
    while out.is_open() || err.is_open() {
        tokio::select! {
            _ = out.read(), if out.is_open() => {}
            _ = err.read(), if err.is_open() => {}
            _ = tokio::time::sleep_until(until) => break,
        }
    }
}

/// Kill every process of the call now (on a blocking thread: it scans `/proc`).
async fn kill_all(call: &reap::Call) {
    let _ = tokio::task::spawn_blocking(call.killer()).await;
}

/// The command for `program`: only the environment given (and `TMPDIR`, the call's own
/// temporary directory), stdin piped when there is input, output captured, killed if dropped.
fn command(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    tmp: &Path,
    has_stdin: bool,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("TMPDIR", tmp)
        .stdin(if has_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Read the output while the program runs, until it exits (its exit code) or the deadline
/// passes (then every process of the call is killed: no exit code, timed out).
async fn wait_or_kill<O: AsyncRead + Unpin, E: AsyncRead + Unpin>(
    child: &mut tokio::process::Child,
    call: &mut reap::Call,
    out: &mut Stream<O>,
    err: &mut Stream<E>,
    deadline: tokio::time::Instant,
) -> std::io::Result<(Option<i32>, bool)> {
    let status = {
        let wait = child.wait();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                s = &mut wait => break Some(s),
                _ = out.read(), if out.is_open() => {}
                _ = err.read(), if err.is_open() => {}
                _ = tokio::time::sleep_until(deadline) => break None,
            }
        }
    };
    Ok(match status {
        Some(status) => {
            let status = status?;
            call.exited();
            (status.code(), false)
        }
        None => {
            kill_all(call).await;
            let _ = child.wait().await;
            (None, true)
        }
    })
}

/// Run the process confined, until it exits or the timeout; then kill all its descendants.
/// Returns once the program exited, even if a descendant still holds its output pipes.
pub async fn run(spawn: Spawn) -> std::io::Result<Finished> {
    let start = Instant::now();
    let Spawn {
        program,
        args,
        env,
        cwd,
        stdin,
        timeout,
        cap,
        mut confinement,
    } = spawn;
    let mut cmd = command(&program, &args, &env, &confinement.tmp(), stdin.is_some());
    let child = confinement.child(cwd.as_fd().as_raw_fd());
    // SAFETY: `enter` makes only async-signal-safe system calls and allocates nothing; `cwd` and
    // `confinement` (which own the descriptors and the filter `child` names) live until after
    // the spawn.
    unsafe {
        cmd.pre_exec(move || confine::enter(child));
    }
    let mut call = reap::Call::begin(confinement.pid_ns());
    let mut child = cmd.spawn()?;
    confinement.supervise();
    drop(cwd);
    if let Some(pid) = child.id() {
        call.spawned(pid as i32);
    }
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
        });
    }
    let mut out = Stream::new(child.stdout.take(), cap);
    let mut err = Stream::new(child.stderr.take(), cap);
    let deadline = tokio::time::Instant::from_std(start + timeout);
    let (exit_code, timed_out) =
        wait_or_kill(&mut child, &mut call, &mut out, &mut err, deadline).await?;
    // A descendant that kept the pipes gets a moment to finish writing, then everything of
    // the call is killed: the call never waits for a daemon.
    drain(&mut out, &mut err, GRACE).await;
    if out.is_open() || err.is_open() {
        kill_all(&call).await;
        drain(&mut out, &mut err, AFTER_KILL).await;
    }
    // Kill and reap what is left (strays too when no other call runs), then remove the temp
    // dir, and what the program created that its view could not hold read-only: a new `.git`
    // or `kiln.toml` (the view protects those that existed when the call began).
    let truncated = out.truncated || err.truncated;
    let (stdout, stderr) = (out.into_kept(), err.into_kept());
    let (planted, refused, stdout, stderr) = tokio::task::spawn_blocking(move || {
        call.finish();
        let refused = confinement.refusals(&stdout, &stderr);
        let planted = confinement
            .protected()
            .map(|(ws, before)| match protected_in(ws, &[]) {
                Ok(now) => super::planted::remove_new(ws, before, now),
                // A walk that fails finds nothing to remove.
                Err(_) => Vec::new(),
            })
            .unwrap_or_default();
        drop(confinement);
        (planted, refused, stdout, stderr)
    })
    .await
    .map_err(std::io::Error::other)?;
    if !planted.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the program created {}, which only you may create (git would run its hooks and config outside kiln's sandbox); kiln removed {} and refuses the call's result",
                planted.join(", "),
                if planted.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    Ok(Finished {
        exit_code,
        stdout,
        stderr,
        truncated,
        timed_out,
        duration: start.elapsed(),
        refused,
    })
}

/// Why a program kiln starts itself (a hook) did not run.
#[derive(Debug, thiserror::Error)]
pub enum HostProgramError {
    /// The command line is empty.
    #[error("the command is empty")]
    Empty,
    /// The program or the workspace could not be found or opened.
    #[error("{0}")]
    NotFound(String),
    /// The confinement refused or failed.
    #[error("{0}")]
    Refused(String),
    /// Spawning failed.
    #[error("could not start it: {0}")]
    Io(#[from] std::io::Error),
}

/// Run a program kiln starts on its own behalf (an `[agent.hooks]` command): the same path as a
/// plugin's program with nothing granted. It reads what every program reads, writes the
/// workspace and its temp dir, has no network and no variables but `PATH` and `HOME`, and
/// everything it starts ends with it.
pub async fn run_host_program(
    words: &[&str],
    stdin: Option<Vec<u8>>,
    workspace: &Path,
    timeout: Duration,
    cap: usize,
    require: bool,
) -> Result<Finished, HostProgramError> {
    let env = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| Some((k.to_string(), kiln_env::env().var(k)?.to_string())))
        .collect();
    run_confined(words, stdin, workspace, env, timeout, cap, require).await
}

/// [`run_host_program`] with exactly the environment `env`: for a program kiln runs on its
/// own account over content it does not trust (`git diff` in a batch task's checkout, whose
/// `.git/config` the task's programs could write).
pub async fn run_confined(
    words: &[&str],
    stdin: Option<Vec<u8>>,
    workspace: &Path,
    env: Vec<(String, String)>,
    timeout: Duration,
    cap: usize,
    require: bool,
) -> Result<Finished, HostProgramError> {
    let (program, args) = words.split_first().ok_or(HostProgramError::Empty)?;
    // The user configured the command: an absolute path is taken as written.
    let program = if Path::new(program).is_absolute() && is_executable(Path::new(program)) {
        PathBuf::from(program)
    } else {
        resolve_program(program, workspace)
            .map_err(|e| HostProgramError::NotFound(e.to_string()))?
    };
    let cwd = open_cwd(None, workspace).map_err(|e| HostProgramError::NotFound(e.to_string()))?;
    let confinement = confinement(
        workspace,
        None,
        &program,
        &env,
        Reach {
            read: &[],
            write: &[],
            writes: confine::Writes::WorkspaceAndGrants,
            net: false,
            require,
            protect: &[],
        },
    )
    .map_err(|r| match r {
        confine::Refusal::Denied(m) | confine::Refusal::Failed(m) => HostProgramError::Refused(m),
    })?;
    Ok(run(Spawn {
        program,
        args: args.iter().map(|a| a.to_string()).collect(),
        env,
        cwd,
        stdin,
        timeout,
        cap,
        confinement,
    })
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(ws: &Path, script: &str) -> Spawn {
        spawn_writing(ws, script, confine::Writes::WorkspaceAndGrants)
    }

    fn spawn_writing(ws: &Path, script: &str, writes: confine::Writes) -> Spawn {
        let env = vec![(
            "PATH".into(),
            kiln_env::env().var("PATH").unwrap_or_default().into(),
        )];
        Spawn {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: open_cwd(None, ws).unwrap(),
            stdin: None,
            timeout: Duration::from_secs(30),
            cap: 1 << 20,
            confinement: confinement(
                ws,
                None,
                Path::new("/bin/sh"),
                &env,
                Reach {
                    read: &[],
                    write: &[],
                    writes,
                    net: false,
                    require: false,
                    protect: &[],
                },
            )
            .unwrap(),
            env,
        }
    }

    /// A protected path swapped for a decoy between kiln's walk and the program's start (a
    /// concurrent call's program renaming directories) fails the call: the view binds only the
    /// very files the walk found.
    #[tokio::test]
    async fn a_protected_path_replaced_after_the_walk_fails_the_call() {
        if confine::reap::view_missing().is_some() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git/config"), "[core]\n").unwrap();
        // kiln's walk finds an empty decoy where the real .git was; the real one comes back
        // before the program starts.
        std::fs::rename(ws.join("sub/.git"), ws.join("sub/real")).unwrap();
        std::fs::create_dir(ws.join("sub/.git")).unwrap();
        let spawn = spawn(ws, "echo pwned > sub/.git/config");
        std::fs::rename(ws.join("sub/.git"), ws.join("sub/decoy")).unwrap();
        std::fs::rename(ws.join("sub/real"), ws.join("sub/.git")).unwrap();
        let r = run(spawn).await;
        assert!(r.is_err(), "the call ran: {r:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join("sub/.git/config")).unwrap(),
            "[core]\n"
        );
    }

    /// The review phase's programs write nowhere, whatever their arguments: the kernel says no
    /// (no host-side argument check runs on this path).
    #[tokio::test]
    async fn a_program_that_may_write_nowhere_cannot_write_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("kept.txt"), "kept\n").unwrap();
        let f = run(spawn_writing(
            ws,
            "cat kept.txt; echo x > new.txt; echo y >> kept.txt; echo t > \"$TMPDIR/t\"; rm -f kept.txt; echo done",
            confine::Writes::Nowhere,
        ))
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&f.stderr);
        assert_eq!(String::from_utf8_lossy(&f.stdout), "kept\ndone\n", "{err}");
        // The view mounts the workspace and the call's /tmp read-only.
        assert_eq!(err.matches("Read-only file system").count(), 4, "{err}");
        assert!(!ws.join("new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("kept.txt")).unwrap(),
            "kept\n"
        );
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let st = s.rsplit(')').next()?.split_whitespace().next()?.to_string();
                Some(st != "Z" && st != "X")
            })
            .unwrap_or(false)
    }

    /// The pid (as kiln's `/proc` numbers it) of the live process running `sleep ARG`, if any:
    /// the call's processes have PID numbers of their own, so they are found by what they run.
    fn running_sleep(arg: &str) -> Option<i32> {
        let want = format!("sleep\0{arg}\0");
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (String::from_utf8_lossy(&cmdline) == want && alive(pid)).then_some(pid)
        })
    }

    // One test, so no other test's call is in flight meanwhile (the tracker is per process).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strays_end_with_their_call_and_cancelled_calls_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let other = tokio::spawn(run(spawn(ws, "sleep 1.5")));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let a = run(spawn(
            ws,
            "setsid sh -c 'echo $$ > d.pid; exec sleep 60.7301' </dev/null >/dev/null 2>&1 & \
             while [ ! -s d.pid ]; do sleep 0.02; done; sleep 0.1",
        ))
        .await
        .unwrap();
        assert_eq!(a.exit_code, Some(0));
        let daemon = running_sleep("60.7301");
        if reap::PidNs::current().available() {
            // In a PID namespace the daemon ends with its own call, whatever else runs.
            assert_eq!(daemon, None, "the daemon outlived its call");
        } else {
            // A setsid'd orphan cannot be told from another running call's, so it survives
            // until the last running call ends.
            assert!(daemon.is_some(), "killed while another call was running");
        }
        other.await.unwrap().unwrap();
        assert_eq!(
            running_sleep("60.7301"),
            None,
            "the last call to end kills the stray"
        );

        // A call whose future is dropped (the plugin call was cancelled) kills its processes.
        let cancelled = tokio::time::timeout(
            Duration::from_millis(500),
            run(spawn(
                ws,
                "sh -c 'echo $$ > bg.pid; exec sleep 60.7302' & wait",
            )),
        )
        .await;
        assert!(cancelled.is_err());
        assert!(ws.join("bg.pid").exists(), "the cancelled call started");
        assert_eq!(
            running_sleep("60.7302"),
            None,
            "the cancelled call's child survived"
        );

        // The program's exit code and death by a signal come through the namespace's init.
        let code = run(spawn(ws, "exit 7")).await.unwrap();
        assert_eq!(code.exit_code, Some(7));
        let killed = run(spawn(ws, "kill -9 $$")).await.unwrap();
        assert_eq!(killed.exit_code, None);
    }
}

#[cfg(test)]
mod stream_tests {
    use super::Stream;

    async fn capture(input: &[u8], cap: usize) -> (Vec<u8>, bool) {
        let mut s = Stream::new(Some(input), cap);
        while s.is_open() {
            s.read().await;
        }
        let truncated = s.truncated;
        (s.into_kept(), truncated)
    }

    #[tokio::test]
    async fn past_its_cap_a_stream_keeps_its_head_and_its_tail() {
        // 300 KiB of noise, then the error a build prints last.
        let mut input = vec![b'a'; 300 * 1024];
        input.extend_from_slice(b"\nsrc/main.c:2:3: error: boom\n");
        let (kept, truncated) = capture(&input, 64 * 1024).await;
        assert!(truncated);
        assert!(kept.len() <= 64 * 1024, "{}", kept.len());
        let text = String::from_utf8_lossy(&kept);
        assert!(text.starts_with("aaaa"));
        assert!(
            text.ends_with("src/main.c:2:3: error: boom\n"),
            "{}",
            &text[text.len() - 80..]
        );
        assert!(text.contains(" bytes of output cut here ...]"));
        // Under the cap: everything, unmarked.
        let (kept, truncated) = capture(b"short\n", 64 * 1024).await;
        assert_eq!((kept.as_slice(), truncated), (&b"short\n"[..], false));
    }
}
