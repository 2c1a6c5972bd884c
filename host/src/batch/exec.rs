//! Running one claimed task: the task checked again against what this worker allows (its
//! installed plugins, its local repository roots, its budget), its fresh checkout, then a
//! child `kiln -C <checkout> run-task` (this executable) that reads the task's [`TaskSpec`]
//! on stdin, checks it once more and runs it with `--json`; its last JSON line is the run's
//! result. The task is never a command line: the child's command line is the worker's own.
//! The child inherits the worker's environment (API keys and model settings come only from
//! there and the worker's configuration) and dies with the worker (`PR_SET_PDEATHSIG`).
//!
//! [`TaskSpec`]: crate::task_spec::TaskSpec
// Writes outside the workspace: a task's attempt directory under the batch's scratch (never the workspace).
#![allow(clippy::disallowed_methods)]

use super::checkout;
use super::queue::Claim;
use crate::task_spec::TaskSpec;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How tasks run on this worker.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    /// The kiln executable run for each task.
    pub kiln: PathBuf,
    /// Where checkouts go: `<scratch>/<batch>/<task>/attempt-<n>/`.
    pub scratch: PathBuf,
    /// The store each task records its run in (the batch's store), handed to the child as
    /// `KILN_STORE` so that a password stays off command lines.
    pub store: Option<String>,
    /// Pass `--yes` (apply a checkout's kiln.toml without `kiln trust`): the worker's own flag,
    /// never a task's.
    pub yes: bool,
    /// The plugins installed here and the user's own budget caps.
    pub allowed: crate::task_spec::Allowed,
    /// Canonical directories under which a task's local `repo` may be.
    pub local_repos: Vec<PathBuf>,
    /// Keep a finished task's checkout (else it is removed, with kiln's state for it, once
    /// its result and diff are taken; its `kiln.log` stays).
    pub keep_checkouts: bool,
}

/// Token totals of a task's run.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Tokens {
    /// Input (uncached and cached).
    pub input: u64,
    /// Output.
    pub output: u64,
}

impl Tokens {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

/// The result of one attempt at a task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskResult {
    /// Batch.
    pub batch: String,
    /// Task id.
    pub id: String,
    /// `success` (exit 0), `failed` (1), `error` (anything else, or the task could not start).
    pub status: String,
    /// Attempt number.
    pub attempts: i64,
    /// The child's exit code (none when it did not run or was killed).
    pub exit_code: Option<i32>,
    /// The run's stop reason.
    pub stop_reason: Option<String>,
    /// The run's loop id in the store.
    pub loop_id: Option<i64>,
    /// Tokens used.
    pub tokens: Tokens,
    /// Cost in USD, when the model's price is known.
    pub cost_usd: Option<f64>,
    /// Wall time of the attempt, checkout included.
    pub duration_ms: u64,
    /// What the run changed in its checkout (a unified diff, capped).
    pub diff: String,
    /// Why it could not run or what it said last on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The worker that ran it.
    pub worker: String,
    /// The checkout it ran in (on that worker's machine).
    pub checkout: String,
}

/// How an attempt ended.
pub enum Ended {
    /// It ran to an end (any status).
    Done(Box<TaskResult>),
    /// Cancelled (Ctrl-C, or the lease was lost): no result.
    Cancelled,
    /// The run failed because the store went away under it: not the task's fault, so no
    /// result; the task is given back to run again.
    StoreLost(String),
    /// The checkout failed for a reason of this worker's own (its scratch directory cannot
    /// be written: a full disk, no permission, gone): no result, and the task is given back
    /// with its attempts unchanged, for a healthy worker to run.
    WorkerFault(String),
}

/// The attempt's directory: `<scratch>/<batch>/<task>/attempt-<n>`.
pub fn attempt_dir(s: &ExecSettings, c: &Claim) -> PathBuf {
    s.scratch
        .join(&c.batch)
        .join(&c.task.id)
        .join(format!("attempt-{}", c.attempt))
}

/// The child's command line: the worker's own options only (the task goes on stdin).
pub fn child_args(s: &ExecSettings, workdir: &Path) -> Vec<String> {
    let mut a = vec!["-C".to_string(), workdir.to_string_lossy().into_owned()];
    if s.yes {
        a.push("--yes".into());
    }
    a.push("run-task".into());
    a
}

/// Check the claimed task once more, here, where it runs: the task itself, the batch id,
/// its plugins among those installed here, and a local repository under an allowed root.
/// Returns the repository to check out and the spec to run, its budget lowered to the
/// batch's per-task budget and the user's own.
pub fn checked(s: &ExecSettings, c: &Claim) -> Result<(String, TaskSpec), String> {
    use super::task::{Repo, allowed_local, check_id, classify_repo};
    check_id(&c.batch).map_err(|why| format!("batch: {why}"))?;
    if let Some((field, why)) = c.task.problem() {
        return Err(format!("{field}: {why}"));
    }
    c.task
        .spec
        .check_allowed(&s.allowed)
        .map_err(|e| e.to_string())?;
    let repo = match classify_repo(&c.task.repo).map_err(|why| format!("repo: {why}"))? {
        Repo::Remote(url) => url.to_string(),
        Repo::Local(p) => allowed_local(p, &s.local_repos)
            .map_err(|why| format!("repo: {why}"))?
            .to_string_lossy()
            .into_owned(),
    };
    let spec = c
        .task
        .spec
        .clone()
        .capped(c.budgets.task_max_cost, c.budgets.task_max_tokens)
        .capped(s.allowed.max_cost, s.allowed.max_tokens);
    Ok((repo, spec))
}

/// Run one attempt: checkout, child, result. `cancel` turning true kills the child (SIGINT,
/// then SIGKILL after a grace period) and ends with [`Ended::Cancelled`].
pub async fn run_task(s: &ExecSettings, c: &Claim, mut cancel: watch::Receiver<bool>) -> Ended {
    let started = Instant::now();
    let checked = checked(s, c);
    let dir = attempt_dir(s, c);
    let co = dir.join("checkout");
    let mut res = TaskResult {
        batch: c.batch.clone(),
        id: c.task.id.clone(),
        status: "error".into(),
        attempts: c.attempt,
        exit_code: None,
        stop_reason: None,
        loop_id: None,
        tokens: Tokens::default(),
        cost_usd: None,
        duration_ms: 0,
        diff: String::new(),
        error: None,
        worker: c.worker.clone(),
        checkout: co.to_string_lossy().into_owned(),
    };
    let (repo, spec) = match checked {
        Ok(v) => v,
        Err(why) => {
            res.error = Some(format!("refused, not run: {why}"));
            res.checkout = String::new();
            return Ended::Done(Box::new(res));
        }
    };
    if let Err(e) = prepare(&repo, c.task.rev.as_deref(), &dir, &co).await {
        let (scratch, d) = (s.scratch.clone(), dir.clone());
        let fault = tokio::task::spawn_blocking(move || {
            // What the failed checkout left must not count against the probe.
            let _ = std::fs::remove_dir_all(&d);
            scratch_fault(&scratch)
        })
        .await
        .ok()
        .flatten();
        if let Some(why) = fault {
            return Ended::WorkerFault(format!("checkout: {e} ({why})"));
        }
        res.error = Some(format!("checkout: {e}"));
        res.duration_ms = started.elapsed().as_millis() as u64;
        return Ended::Done(Box::new(res));
    }
    // A `dir` that is a link in the repository must not move the run out of its checkout.
    let workdir = match &c.task.dir {
        Some(d) => co
            .join(d)
            .canonicalize()
            .ok()
            .filter(|w| co.canonicalize().is_ok_and(|root| w.starts_with(&root))),
        None => Some(co.clone()),
    };
    // Nor into git's metadata (`docs -> .git`), by its real path below the checkout.
    let in_git = workdir.as_ref().is_some_and(|w| {
        co.canonicalize()
            .ok()
            .and_then(|root| w.strip_prefix(root).ok().map(Path::to_path_buf))
            .is_some_and(|below| crate::path::has_git_component(&below))
    });
    if in_git {
        res.error = Some(format!(
            "`dir` {} {}",
            c.task.dir.as_deref().unwrap_or("."),
            super::task::GIT_DIR_WHY
        ));
        return Ended::Done(Box::new(res));
    }
    let Some(workdir) = workdir.filter(|w| w.is_dir()) else {
        res.error = Some(format!(
            "`dir` {} is not a directory of the checkout",
            c.task.dir.as_deref().unwrap_or(".")
        ));
        return Ended::Done(Box::new(res));
    };
    let out = match run_child(s, &spec, &workdir, &dir.join("kiln.log"), &mut cancel).await {
        Ok(Some(out)) => out,
        Ok(None) => return Ended::Cancelled,
        Err(e) => {
            res.error = Some(format!("cannot run {}: {e}", s.kiln.display()));
            return Ended::Done(Box::new(res));
        }
    };
    fill_from_output(&mut res, &out, &dir.join("kiln.log"));
    if res.status == "error"
        && let Some(e) = res
            .error
            .as_deref()
            .filter(|e| e.contains("is unreachable"))
    {
        return Ended::StoreLost(e.to_string());
    }
    if res.tokens == Tokens::default()
        && let Some(id) = res.loop_id
    {
        let (store, wd) = (s.store.clone(), workdir.clone());
        res.tokens =
            tokio::task::spawn_blocking(move || tokens_from_store(store.as_deref(), &wd, id))
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
    }
    res.diff = match checkout::diff(&co).await {
        Ok(d) => d,
        Err(e) => format!("(no diff: {e})"),
    };
    if !s.keep_checkouts {
        let (co, wd) = (co.clone(), workdir.clone());
        let removed = tokio::task::spawn_blocking(move || remove_checkout(&co, &wd))
            .await
            .unwrap_or(false);
        if removed {
            res.checkout = String::new();
        }
    }
    res.duration_ms = started.elapsed().as_millis() as u64;
    Ended::Done(Box::new(res))
}

/// Remove a finished task's checkout `co` and kiln's state for the workspace `workdir` in
/// it (its undo records: the checkout they would restore is gone). Whether it was removed.
fn remove_checkout(co: &Path, workdir: &Path) -> bool {
    if let (Ok(id), Ok(base)) = (
        crate::state_dir::Identity::of(workdir),
        crate::state_dir::base(),
    ) {
        let _ = std::fs::remove_dir_all(base.join("workspaces").join(id.key()));
    }
    std::fs::remove_dir_all(co).is_ok()
}

/// Bytes a worker's scratch must take for a failed checkout to count as the task's own
/// failure rather than the worker's.
const SCRATCH_PROBE: usize = 1 << 20;

/// Why this worker's scratch directory cannot take a checkout, if it cannot: a probe of
/// [`SCRATCH_PROBE`] bytes written (and synced) in it fails. Asked after a checkout failed,
/// so what decides whose fault it was is what the file system does, not the wording of the
/// error.
fn scratch_fault(scratch: &Path) -> Option<String> {
    use std::io::Write;
    let probe = scratch.join(format!(".kiln-probe-{}", std::process::id()));
    let wrote = std::fs::File::create(&probe).and_then(|mut f| {
        f.write_all(&vec![0u8; SCRATCH_PROBE])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    wrote.err().map(|e| {
        format!(
            "this worker's scratch {} cannot take a checkout: {e}",
            scratch.display()
        )
    })
}

/// A fresh `dir` (a previous try of the same attempt removed) holding the checkout `co` of
/// `repo` (already checked) at `rev`.
async fn prepare(repo: &str, rev: Option<&str>, dir: &Path, co: &Path) -> Result<(), String> {
    let (repo, rev) = (repo.to_string(), rev.map(str::to_string));
    let (dir, co) = (dir.to_path_buf(), co.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| checkout::CheckoutError::Io {
            what: "cannot create",
            path: dir.clone(),
            source,
        })?;
        checkout::prepare(&repo, rev.as_deref(), &co)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

/// What the child left: exit code and stdout.
struct ChildOut {
    code: Option<i32>,
    stdout: String,
}

/// Start the child and wait for it; `Ok(None)` when cancelled (the child killed).
async fn run_child(
    s: &ExecSettings,
    spec: &TaskSpec,
    workdir: &Path,
    log: &Path,
    cancel: &mut watch::Receiver<bool>,
) -> std::io::Result<Option<ChildOut>> {
    let log = std::fs::File::create(log)?;
    let mut cmd = tokio::process::Command::new(&s.kiln);
    cmd.args(child_args(s, workdir))
        .current_dir(workdir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    if let Some(store) = &s.store {
        cmd.env("KILN_STORE", store);
    }
    // SAFETY: prctl is async-signal-safe; it only asks for SIGKILL when the parent dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let spec_json = serde_json::to_vec(spec).expect("specs serialize");
    let mut stdin = child.stdin.take().expect("piped");
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&spec_json).await;
    });
    let mut stdout = child.stdout.take().expect("piped");
    let read = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    });
    let status = tokio::select! {
        st = child.wait() => st?,
        _ = cancelled(cancel) => {
            stop(&mut child).await;
            read.abort();
            return Ok(None);
        }
    };
    let stdout = read.await.unwrap_or_default();
    Ok(Some(ChildOut {
        code: status.code(),
        stdout,
    }))
}

/// SIGINT (the run records itself as cancelled), then SIGKILL after two seconds.
async fn stop(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: signalling our own child by its pid, which we have not reaped yet.
        unsafe {
            libc::kill(pid as i32, libc::SIGINT);
        }
    }
    if tokio::time::timeout(Duration::from_secs(2), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// Status, stop reason, loop id, tokens and cost from the child's exit code and its last
/// JSON line. On failure the reason comes from that result (its `error`, `last_error` and
/// `summary`); without one (the child stopped before its run began), from the last `error:`
/// line of its log, else its last line.
fn fill_from_output(res: &mut TaskResult, out: &ChildOut, log: &Path) {
    res.exit_code = out.code;
    res.status = match out.code {
        Some(0) => "success",
        Some(1) => "failed",
        _ => "error",
    }
    .into();
    let last = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    if let Some(v) = &last {
        res.stop_reason = v["stop_reason"].as_str().map(str::to_string);
        res.loop_id = v["loop_id"].as_i64().or(v["run_id"].as_i64());
        res.cost_usd = v["cost_usd"].as_f64();
        let u = &v["usage"];
        if u.is_object() {
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            res.tokens = Tokens {
                input: n("input") + n("cached_input"),
                output: n("output"),
            };
        }
    }
    if res.status != "success" {
        res.error = last
            .as_ref()
            .and_then(reason_of_result)
            .or_else(|| reason_in_log(&std::fs::read_to_string(log).unwrap_or_default()))
            .map(|e| crate::store::cap_text(&e, 2000));
    }
}

/// Why a run ended without success, from its result line (`loop.result`, `agent.result`,
/// `loop.run.result`): its `error`, else its `summary` and `last_error` together, else (an
/// agent's) its `content`.
fn reason_of_result(v: &serde_json::Value) -> Option<String> {
    let text = |k: &str| {
        v[k].as_str()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    if let Some(e) = text("error") {
        return Some(e);
    }
    match (text("summary"), text("last_error")) {
        (Some(s), Some(e)) if s.contains(&e) => Some(s),
        (Some(s), Some(e)) => Some(format!("{s}\n{e}")),
        (Some(s), None) => Some(s),
        (None, Some(e)) => Some(e),
        // An agent's last words.
        (None, None) => text("content"),
    }
}

/// The reason a child that left no result gave on stderr: its last `error:` line, else its
/// last line.
fn reason_in_log(text: &str) -> Option<String> {
    let mut lines = text.lines().rev().filter(|l| !l.trim().is_empty());
    text.lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .or_else(|| lines.next())
        .map(str::to_string)
}

/// A fix loop's tokens, from the store it wrote (its checkout's, when no store was given).
fn tokens_from_store(store: Option<&str>, workdir: &Path, loop_id: i64) -> Option<Tokens> {
    let url = match store {
        Some(s) => Some(s.parse::<crate::store::StoreUrl>().ok()?),
        None => None,
    };
    let store = crate::store::Store::open_url(url.as_ref(), workdir).ok()?;
    let t = store.loop_detail(loop_id).ok()?.row.tokens;
    Some(Tokens {
        input: t.prompt(),
        output: t.output,
    })
}

/// Wait until `cancel` turns true (forever if its sender is gone without doing so).
pub(crate) async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}
