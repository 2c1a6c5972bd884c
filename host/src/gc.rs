//! Retention of kiln's state directory (`$XDG_STATE_HOME/kiln/workspaces/<key>/`, see
//! [`crate::state_dir`]): what `kiln gc` shows and frees, and what every fix, agent and loop
//! run prunes of its own workspace when it ends.
//!
//! - The state of a workspace that no longer exists (its recorded path is gone, or is another
//!   directory now: `workspace.json` no longer matches) is removed whole.
//! - Of a workspace's undo records, the newest [`Limits::keep_runs`] younger than
//!   [`Limits::max_age_days`] are kept; so is, whatever its age, the newest run that can
//!   still be undone, and every run whose process is still alive. The others' records and
//!   start-of-run lists are removed.
//! - A pre-image (`undo/objects/<sha256>`) is kept while a kept record needs it (a change's
//!   content before the run; for a run that never finished, its start-of-run list) or the
//!   stat cache names it (so the next run does not copy the file again); the rest are
//!   removed, and so are the names of pre-images that are git's objects (`blobs.json`) by
//!   the same rule.
//!
//! Nothing here reads or writes a workspace. A directory that cannot be understood (no
//! readable `workspace.json`, a record that does not parse) is left alone and named.
// Writes outside the workspace: removes what kiln's state directory no longer keeps; never reads or writes a workspace.
#![allow(clippy::disallowed_methods)]

use crate::state_dir::Identity;
use crate::undo::backup::{Cached, RunRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How much of each workspace's history to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Undo records kept per workspace (the newest).
    pub keep_runs: usize,
    /// Undo records older than this many days are removed.
    pub max_age_days: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            keep_runs: crate::config::DEFAULT_KEEP_RUNS,
            max_age_days: crate::config::DEFAULT_MAX_AGE_DAYS,
        }
    }
}

impl Limits {
    /// The limits `[gc]` of the user's configuration sets, each default filled in.
    pub fn of(c: &crate::config::GcConfig) -> Limits {
        Limits {
            keep_runs: c.keep_runs.unwrap_or(crate::config::DEFAULT_KEEP_RUNS),
            max_age_days: c
                .max_age_days
                .unwrap_or(crate::config::DEFAULT_MAX_AGE_DAYS),
        }
    }
}

/// Why the state directory could not be examined.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// kiln's state directory cannot be found.
    #[error(transparent)]
    State(#[from] crate::state_dir::StateDirError),
    /// Listing or removing failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A workspace whose state was (or, in a dry run, would be) removed whole.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GoneWorkspace {
    /// Its state directory.
    pub state: PathBuf,
    /// The workspace path it recorded.
    pub workspace: PathBuf,
    /// Bytes it held.
    pub bytes: u64,
}

/// What a collection found and freed (or, in a dry run, would free).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// Nothing was removed.
    pub dry_run: bool,
    /// Workspaces that no longer exist.
    pub workspaces: Vec<GoneWorkspace>,
    /// Undo records removed, by workspace path.
    pub runs: BTreeMap<PathBuf, Vec<i64>>,
    /// Pre-images removed.
    pub objects: u64,
    /// Bytes freed in all.
    pub freed_bytes: u64,
    /// Bytes the state directory holds after it.
    pub kept_bytes: u64,
    /// State directories left alone, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Examine every workspace's state under `base` (kiln's state directory) and remove what
/// `limits` no longer keep, unless `dry_run`.
pub fn collect(base: &Path, limits: Limits, now_ms: i64, dry_run: bool) -> Result<Report, GcError> {
    let mut report = Report {
        dry_run,
        ..Report::default()
    };
    let dir = base.join("workspaces");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(source) => return Err(GcError::Io { path: dir, source }),
    };
    for entry in entries.flatten() {
        let state = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        workspace(&state, limits, now_ms, dry_run, &mut report);
    }
    report.kept_bytes = size_of(base);
    Ok(report)
}

/// Prune the state of the one workspace at `root` (after a run of it ended).
pub fn after_run(root: &Path, limits: Limits) -> Result<Report, GcError> {
    let mut report = Report::default();
    let id = Identity::of(root)?;
    let state = crate::state_dir::base()?.join("workspaces").join(id.key());
    if state.is_dir() {
        workspace(&state, limits, crate::clock::now_ms(), false, &mut report);
    }
    Ok(report)
}

/// One workspace's state directory.
fn workspace(state: &Path, limits: Limits, now_ms: i64, dry_run: bool, report: &mut Report) {
    let recorded: Option<Identity> = std::fs::read(state.join("workspace.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(recorded) = recorded else {
        report
            .skipped
            .push((state.to_path_buf(), "no readable workspace.json".into()));
        return;
    };
    let records = match records(state) {
        Ok(r) => r,
        Err(why) => {
            report.skipped.push((state.to_path_buf(), why));
            return;
        }
    };
    let live = |r: &RunRecord| !r.finished && pid_alive(r.pid);
    let exists = Identity::of(&recorded.path).is_ok_and(|now| now == recorded);
    if !exists {
        if records.iter().any(live) {
            report.skipped.push((
                state.to_path_buf(),
                "its workspace is gone but a run of it is still running".into(),
            ));
            return;
        }
        let bytes = size_of(state);
        if dry_run || std::fs::remove_dir_all(state).is_ok() {
            report.freed_bytes += bytes;
            report.workspaces.push(GoneWorkspace {
                state: state.to_path_buf(),
                workspace: recorded.path,
                bytes,
            });
        }
        return;
    }
    let undo = state.join("undo");
    let oldest = now_ms.saturating_sub((limits.max_age_days as i64).saturating_mul(86_400_000));
    let newest_undoable = records.iter().find(|r| r.undone_ms.is_none()).map(|r| r.id);
    let (mut kept, mut pruned) = (Vec::new(), Vec::new());
    for (i, r) in records.iter().enumerate() {
        let keep = (i < limits.keep_runs && r.started_ms >= oldest)
            || Some(r.id) == newest_undoable
            || live(r);
        if keep { kept.push(r) } else { pruned.push(r) }
    }
    let mut freed = Vec::new();
    for r in &pruned {
        for name in [format!("{}.json", r.id), format!("{}.start.json", r.id)] {
            let p = undo.join("runs").join(name);
            let bytes = file_size(&p);
            if dry_run || std::fs::remove_file(&p).is_ok() {
                report.freed_bytes += bytes;
            }
        }
        freed.push(r.id);
    }
    if !freed.is_empty() {
        report.runs.insert(recorded.path.clone(), freed);
    }
    // The pre-images still needed: the stat cache's, and what each kept record needs.
    let mut needed: BTreeSet<String> = read_cache(&undo.join("index.json"))
        .into_values()
        .map(|c| c.hash)
        .collect();
    for r in &kept {
        needed.extend(r.changes.iter().filter_map(|c| c.before.clone()));
        if !r.finished {
            let start = read_cache(&undo.join("runs").join(format!("{}.start.json", r.id)));
            needed.extend(start.into_values().map(|c| c.hash));
        }
    }
    // The pre-images that are git's objects: only the names of those still needed stay.
    let blobs_path = undo.join(crate::undo::backup::BLOBS);
    if let Ok(bytes) = std::fs::read(&blobs_path)
        && let Ok(mut blobs) = serde_json::from_slice::<BTreeMap<String, String>>(&bytes)
    {
        let before = blobs.len();
        blobs.retain(|h, _| needed.contains(h));
        if blobs.len() < before
            && !dry_run
            && let Ok(kept) = serde_json::to_vec(&blobs)
        {
            let tmp = undo.join(format!(
                "{}.tmp-{}",
                crate::undo::backup::BLOBS,
                std::process::id()
            ));
            if std::fs::write(&tmp, &kept).is_ok() && std::fs::rename(&tmp, &blobs_path).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    let Ok(objects) = std::fs::read_dir(undo.join("objects")) else {
        return;
    };
    for o in objects.flatten() {
        let name = o.file_name().to_string_lossy().into_owned();
        // Only finished pre-images (64 hex digits); a temporary file of a run in progress
        // has a suffix and is left to it.
        if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        if needed.contains(&name) {
            continue;
        }
        let bytes = o.metadata().map_or(0, |m| m.len());
        if dry_run || std::fs::remove_file(o.path()).is_ok() {
            report.objects += 1;
            report.freed_bytes += bytes;
        }
    }
}

/// Every undo record of the workspace state `state`, newest (highest id) first.
fn records(state: &Path) -> Result<Vec<RunRecord>, String> {
    let dir = state.join("undo").join("runs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(id) = name
            .strip_suffix(".json")
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        let rec: RunRecord = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| format!("the undo record of run {id} cannot be read"))?;
        out.push(rec);
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.id));
    Ok(out)
}

/// A stat cache or start-of-run list (empty when missing or unreadable).
fn read_cache(path: &Path) -> BTreeMap<String, Cached> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Whether process `pid` exists.
fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

fn file_size(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map_or(0, |m| m.len())
}

/// Bytes of the regular files below `p` (links not followed).
fn size_of(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| size_of(&e.path()))
        .sum()
}
