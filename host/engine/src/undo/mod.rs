//! Undo for whole runs: before a fix, agent or loop run changes anything, kiln notes every
//! regular file of the workspace (a `stat` walk, see [`scan`]) and keeps a pre-image of each
//! in its state directory ([`backup`]); as the run goes (after each applied edit, runner
//! result, tool call, turn and iteration) it compares the workspace with that snapshot and
//! brings the run's record up to date, so the record names every file the run changed,
//! whether kiln's writer or a program the run started (a formatter, a code generator, a
//! build script) changed it, including after the run is killed. `kiln undo` ([`restore`])
//! puts each file back, deleting those the run created, through the one writer.
//!
//! What it costs: each run walks the workspace and `stat`s every file once at its start and
//! once per checkpoint; a file is read (and hashed) only when its stat differs from the
//! cache of the run before, and copied only when that content is not stored yet. The first
//! run on a workspace therefore copies it once (skipping what [`scan`] skips and files over
//! [`scan::MAX_FILE`]); later runs copy only what changed between runs.
//!
//! Left out: what [`scan`] skips (git-ignored build products among it), and the files that are
//! kiln's own standard output or error ([`scan::own_outputs`]): `kiln fix > out` does not make
//! `out` the run's change.
//!
//! Recording is off unless the command turns it on ([`enable`]): an embedder of the library
//! and unit tests get none of it. A nested run (an agent's `compile_loop`) belongs to the
//! run that started it: undoing the outer run undoes both.

pub mod backup;
mod error;
pub mod restore;
pub mod scan;

pub use error::UndoError;

use backup::{Backups, Cached, Change, RunRecord};
use scan::{Listing, Now, StatKey};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);
static ACTIVE: Mutex<Option<Recorder>> = Mutex::new(None);

/// Record undo information for the runs this process starts (the CLI's fix, agent and loop).
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// The recording of one run in progress.
struct Recorder {
    root: PathBuf,
    backups: Backups,
    /// Every file at the start: stat key and hash (`None`: not backed up).
    start: BTreeMap<String, (StatKey, Option<String>)>,
    /// Files seen changed at the last checkpoint: stat key then and hash.
    seen: BTreeMap<String, (StatKey, String)>,
    record: RunRecord,
}

/// Start recording run `id` on the workspace at `root` (a no-op when recording is off or a
/// run is already being recorded). A failure only loses undo for this run, with a warning.
pub fn begin(root: &Path, id: i64) {
    if !ENABLED.load(Ordering::SeqCst) {
        return;
    }
    let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if active.is_some() {
        return;
    }
    match Recorder::start(root, id) {
        Ok(r) => *active = Some(r),
        Err(e) => eprintln!("warning: run {id} cannot be undone later: {e}"),
    }
}

/// Bring the record of the run being recorded up to date, when `event` may follow a change
/// to the workspace.
pub fn on_event(event: &str) {
    const AFTER_CHANGE: &[&str] = &[
        "edit.applied",
        "runner.finished",
        "loop.iteration",
        "tool.end",
        "turn.end",
        "round.end",
        "phase.start",
    ];
    if AFTER_CHANGE.contains(&event) {
        checkpoint(false);
    }
}

/// The run `id` ends: its record is brought up to date a last time and closed.
pub fn finish(id: i64) {
    let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if active.as_ref().is_some_and(|r| r.record.id == id)
        && let Some(mut r) = active.take()
    {
        r.checkpoint(true);
    }
}

fn checkpoint(finished: bool) {
    let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = active.as_mut() {
        r.checkpoint(finished);
    }
}

impl Recorder {
    fn start(root: &Path, id: i64) -> Result<Recorder, UndoError> {
        let backups = Backups::open(root, true)?.ok_or(UndoError::NoRecord(id))?;
        let listing = scan::walk(root);
        let mut record = RunRecord::new(id);
        record.own_output = scan::own_outputs(root, &listing);
        let Listing { files, truncated } = listing;
        let old = backups.index();
        let mut index = BTreeMap::new();
        let mut start = BTreeMap::new();
        for (rel, stat) in files {
            if record.own_output.contains(&rel) {
                continue;
            }
            let hash = backup_one(&backups, root, &rel, stat, old.get(&rel));
            if let Some(h) = &hash {
                index.insert(
                    rel.clone(),
                    Cached {
                        stat,
                        hash: h.clone(),
                    },
                );
            } else {
                record.not_covered.push(rel.clone());
            }
            start.insert(rel, (stat, hash));
        }
        if truncated {
            record.not_covered.push("...".into());
        }
        backups.sync()?;
        backups.save_index(&index)?;
        backups.save_start(id, &index)?;
        backups.save_record(&record)?;
        Ok(Recorder {
            root: root.to_path_buf(),
            backups,
            start,
            seen: BTreeMap::new(),
            record,
        })
    }

    /// Compare the workspace with the snapshot and save the record.
    fn checkpoint(&mut self, finished: bool) {
        let now = scan::walk(&self.root);
        let mut changes = Vec::new();
        let Recorder {
            root,
            start,
            seen,
            record,
            ..
        } = self;
        let own = &record.own_output;
        let mut hash_changed = |rel: &str, stat: StatKey| hash_changed(seen, root, rel, stat);
        for (rel, (stat, before)) in start.iter() {
            if before.is_none() {
                // Not backed up (too large): listed in `not_covered`, never undone.
                continue;
            }
            match now.files.get(rel) {
                Some(s) if s == stat => {}
                Some(s) => {
                    if let Some(after) = hash_changed(rel, *s)
                        && before.as_deref() != Some(after.as_str())
                    {
                        changes.push(change(rel, before.clone(), Some(after), stat));
                    }
                }
                None => {
                    let after = match scan::now(root, rel) {
                        Now::Absent => None,
                        _ => Some(backup::NOT_REGULAR.to_string()),
                    };
                    changes.push(change(rel, before.clone(), after, stat));
                }
            }
        }
        for (rel, s) in &now.files {
            if !start.contains_key(rel)
                && !own.contains(rel)
                && let Some(after) = hash_changed(rel, *s)
            {
                changes.push(Change {
                    path: rel.clone(),
                    before: None,
                    after: Some(after),
                    mode: None,
                });
            }
        }
        self.record.changes = changes;
        self.record.finished = finished;
        self.record.updated_ms = crate::clock::now_ms();
        if let Err(e) = self.backups.save_record(&self.record) {
            eprintln!(
                "warning: cannot update the undo record of run {}: {e}",
                self.record.id
            );
        }
    }
}

/// The hash of a file whose stat differs from the snapshot (cached by stat key in `seen`).
fn hash_changed(
    seen: &mut BTreeMap<String, (StatKey, String)>,
    root: &Path,
    rel: &str,
    stat: StatKey,
) -> Option<String> {
    if let Some((s, h)) = seen.get(rel)
        && *s == stat
    {
        return Some(h.clone());
    }
    let bytes = scan::read(root, rel).ok()?;
    let h = scan::hash(&bytes);
    seen.insert(rel.to_string(), (stat, h.clone()));
    Some(h)
}

/// A change to `path`, a file the run found with stat `start`: its mode then is what undo
/// puts back (never the mode the run left).
fn change(path: &str, before: Option<String>, after: Option<String>, start: &StatKey) -> Change {
    Change {
        path: path.to_string(),
        before,
        after,
        mode: Some(start.mode & 0o777),
    }
}

/// The hash of `rel`, its pre-image stored (`None`: too large or unreadable).
fn backup_one(
    backups: &Backups,
    root: &Path,
    rel: &str,
    stat: StatKey,
    cached: Option<&Cached>,
) -> Option<String> {
    if let Some(c) = cached
        && c.stat == stat
        && backups.has_object(&c.hash)
    {
        return Some(c.hash.clone());
    }
    if stat.size > scan::MAX_FILE {
        return None;
    }
    let bytes = scan::read(root, rel).ok()?;
    let h = scan::hash(&bytes);
    if !backups.has_object(&h) {
        backups.put_object(&h, &bytes).ok()?;
    }
    Some(h)
}

/// The files of the workspace at `root` that differ from what run `id` left, as far as its
/// record says (what it found at its start, with every change it made on top): changes the
/// run cannot account for. Files it could not back up are not compared.
pub fn unaccounted(root: &Path, id: i64) -> Result<Vec<String>, UndoError> {
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRecord(id))?;
    let rec = b.record(id)?.ok_or(UndoError::NoRecord(id))?;
    let start = b.start_of(id).ok_or(UndoError::NoRecord(id))?;
    let mut expected: BTreeMap<String, Option<String>> = start
        .iter()
        .map(|(p, c)| (p.clone(), Some(c.hash.clone())))
        .collect();
    for c in &rec.changes {
        expected.insert(c.path.clone(), c.after.clone());
    }
    let changed: std::collections::BTreeSet<&str> =
        rec.changes.iter().map(|c| c.path.as_str()).collect();
    let now = scan::walk(root);
    let mut out = Vec::new();
    for (rel, stat) in &now.files {
        if rec.not_covered.contains(rel) || rec.own_output.contains(rel) {
            continue;
        }
        let unchanged =
            !changed.contains(rel.as_str()) && start.get(rel).is_some_and(|c| c.stat == *stat);
        if unchanged {
            continue;
        }
        let want = expected.get(rel).cloned().flatten();
        let have = scan::read(root, rel).ok().map(|b| scan::hash(&b));
        if want.is_none() || have != want {
            out.push(rel.clone());
        }
    }
    for (rel, want) in &expected {
        if want.is_some() && !now.files.contains_key(rel) && !now.truncated {
            out.push(rel.clone());
        }
    }
    out.sort();
    Ok(out)
}
