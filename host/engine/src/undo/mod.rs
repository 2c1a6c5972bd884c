//! Undo for whole runs: before a fix, agent or loop run does anything (a fix's first check
//! included: [`prepare`]), kiln notes every regular file of the workspace (a `stat` walk, see
//! [`scan`]), keeps a pre-image of each in its state directory ([`backup`]) and saves that
//! start-of-run list; as the run goes (after each applied edit, runner result, tool call,
//! turn and iteration: [`checkpoint`]) it compares the files that changed with that snapshot
//! and brings the run's record up to date, so the record names every file the run changed,
//! whether kiln's writer or a program the run started (a formatter, a code generator, a
//! build script) changed it. `kiln undo` ([`restore`]) puts each file back, deleting those
//! the run created, through the one writer; of a run that did not finish (killed), every
//! file that differs from its start-of-run list ([`compare`]).
//!
//! What it costs: each run walks the workspace and `stat`s every file once at its start; a
//! file is read (and hashed) only when its stat differs from the cache of the run before (a
//! racy stat never counts as unchanged), and copied only when that content is not stored
//! yet and, in a git repository, is not the blob git's index names for the file ([`git`]:
//! undo reads that back from git's objects). The first run on a workspace therefore copies
//! once what git does not hold (skipping what [`scan`] skips and files over
//! [`scan::MAX_FILE`]); later runs copy only what changed between runs. A
//! checkpoint looks only at the paths the kernel said changed since the last one ([`watch`],
//! inotify): its cost follows the change, not the workspace. When notification cannot answer
//! (the watch limit, a queue overflow, a directory moved) it walks the workspace instead.
//!
//! Left out: what [`scan`] skips (git-ignored build products among it), and the files that are
//! kiln's own standard output or error ([`scan::own_outputs`]): `kiln fix > out` does not make
//! `out` the run's change.
//!
//! Recording is off unless the command turns it on ([`enable`]): an embedder of the library
//! and unit tests get none of it. A nested run (an agent's `compile_loop`) belongs to the
//! run that started it: undoing the outer run undoes both.

pub mod backup;
mod compare;
mod error;
pub mod git;
pub mod restore;
pub mod scan;
mod watch;

pub use error::UndoError;

use backup::{Backups, Cached, Change, RunRecord};
use compare::{
    RACY_NS, Start, changed_start, compare_all, content_id, created, created_other, holds_start,
    racy, skipped,
};
use scan::{Listing, StatKey};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use watch::Watcher;

/// Undo's recording for the runs one command starts: carried by every run's `RunCtx`
/// (`engine::run`), shared by nested runs (a nested run belongs to the outer one's record).
/// [`Recording::off`] records nothing (a library caller, the MCP server's compile_loop).
#[derive(Default)]
pub struct Recording {
    enabled: bool,
    active: Mutex<Option<Recorder>>,
}

impl Recording {
    /// Record undo information for the runs that carry this (the CLI's fix, agent and loop).
    pub fn on() -> Recording {
        Recording {
            enabled: true,
            active: Mutex::new(None),
        }
    }

    /// Record nothing.
    pub fn off() -> Recording {
        Recording::default()
    }

    /// A recording in the same state (on or off) with no run in it yet.
    pub fn fresh(&self) -> Recording {
        Recording {
            enabled: self.enabled,
            active: Mutex::new(None),
        }
    }

    fn active(&self) -> std::sync::MutexGuard<'_, Option<Recorder>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The recording of one run in progress (`record.id` 0: prepared, the run not begun yet).
struct Recorder {
    root: PathBuf,
    backups: Backups,
    start: Start,
    /// The start-of-run list as saved for the run (backed-up files only).
    start_list: BTreeMap<String, Cached>,
    /// Stat times at or after this (ns since the epoch) are not trusted: see [`RACY_NS`].
    racy_ns: i64,
    /// What differs from the start, as of the last checkpoint, by path.
    changes: BTreeMap<String, Change>,
    /// Change notification (`None`: each checkpoint walks the workspace).
    watcher: Option<Watcher>,
    record: RunRecord,
}

/// Take the snapshot of the workspace at `root` for a run about to start, before it does
/// anything (a fix's first check runs before its row in the store exists): [`begin`] then
/// gives it the run's id. A no-op when recording is off or a run is being recorded.
pub fn prepare(rec: &Recording, root: &Path) {
    if !rec.enabled {
        return;
    }
    let mut active = rec.active();
    if active.is_some() {
        return;
    }
    match Recorder::snapshot(root) {
        Ok(r) => {
            if let Err(e) = r.backups.save_pending(&r.record, &r.start_list) {
                eprintln!(
                    "warning: this run cannot be undone if it is killed before it starts: {e}"
                );
            }
            *active = Some(r);
        }
        Err(e) => eprintln!("warning: this run cannot be undone later: {e}"),
    }
}

/// Drop a snapshot [`prepare`] took for a run that did not start (a usage error).
pub fn abandon(rec: &Recording) {
    let mut active = rec.active();
    if active.as_ref().is_some_and(|r| r.record.id == 0)
        && let Some(r) = active.take()
    {
        r.backups.remove_pending(r.record.pid);
    }
}

/// Start recording run `id` on the workspace at `root`, from the snapshot [`prepare`] took
/// (else one taken now). A no-op when recording is off or another run is being recorded (a
/// nested run belongs to the outer one). A failure only loses undo for this run, with a
/// warning.
pub fn begin(rec: &Recording, root: &Path, id: i64) {
    if !rec.enabled {
        return;
    }
    let mut active = rec.active();
    match active.as_ref() {
        Some(r) if r.record.id == 0 && r.root == root => {}
        Some(_) => return,
        None => match Recorder::snapshot(root) {
            Ok(r) => *active = Some(r),
            Err(e) => {
                eprintln!("warning: run {id} cannot be undone later: {e}");
                return;
            }
        },
    }
    let Some(r) = active.as_mut() else {
        return;
    };
    if let Err(e) = r.begin(id) {
        eprintln!("warning: run {id} cannot be undone later: {e}");
        *active = None;
    }
}

/// Whether undo could put `rel` (workspace-relative) back as the run found it: it is in the
/// start-of-run list, the run created it, or it does not exist. `false` for an existing file
/// the snapshot left out (git-ignored, over [`scan::MAX_FILE`], past the file limit): kiln
/// keeps no copy of it. `true` when nothing is recorded (recording off).
pub fn keeps(rec: &Recording, root: &Path, rel: &str) -> bool {
    let active = rec.active();
    let Some(r) = active.as_ref() else {
        return true;
    };
    let rel = kiln_config::path::normalize(rel)
        .to_string_lossy()
        .into_owned();
    r.start_list.contains_key(&rel)
        || r.changes.contains_key(&rel)
        || std::fs::symlink_metadata(root.join(&rel)).is_err()
}

/// Bring the record of the run being recorded up to date (after anything that may have
/// changed the workspace: an applied edit, a runner's result, a tool call, a turn).
pub fn checkpoint(rec: &Recording) {
    let mut active = rec.active();
    if let Some(r) = active.as_mut()
        && r.record.id != 0
    {
        r.checkpoint(false);
    }
}

/// The run `id` ends: its record is brought up to date a last time and closed.
pub fn finish(rec: &Recording, id: i64) {
    let mut active = rec.active();
    if active.as_ref().is_some_and(|r| r.record.id == id)
        && let Some(mut r) = active.take()
    {
        r.checkpoint(true);
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Recorder {
    /// Note every file of the workspace and keep the pre-images kiln lacks; watch its
    /// directories. Nothing is written for the run yet (see [`Recorder::begin`]).
    fn snapshot(root: &Path) -> Result<Recorder, UndoError> {
        let backups = Backups::open(root, true)?.ok_or(UndoError::NoRecord(0))?;
        let racy_ns = now_ns() - RACY_NS;
        let mut watcher = Watcher::new();
        let listing = scan::walk(root);
        if let Some(w) = &mut watcher
            && !listing.dirs.iter().all(|d| w.add(root, d))
        {
            watcher = None;
        }
        let mut record = RunRecord::new(0);
        record.own_output = scan::own_outputs(root, &listing);
        let Listing {
            files,
            truncated,
            others,
            ..
        } = listing;
        record.others = others.into_keys().collect();
        let old = backups.index();
        let tracked = git::index(root);
        let mut blobs = backups.blobs();
        let mut new_blobs = false;
        let mut cache = BTreeMap::new();
        let mut start_list = BTreeMap::new();
        let mut start = BTreeMap::new();
        let mut wrote = false;
        for (rel, stat) in files {
            if record.own_output.contains(&rel) {
                continue;
            }
            let hash = backup_one(
                &backups,
                root,
                &rel,
                stat,
                old.get(&rel),
                tracked.get(&rel),
                &mut blobs,
                &mut new_blobs,
                &mut wrote,
            );
            if let Some(h) = &hash {
                let c = Cached {
                    stat,
                    hash: h.clone(),
                };
                // A racy stat is kept out of the cache: the next run reads the file again.
                if !racy(&stat, racy_ns) {
                    cache.insert(rel.clone(), c.clone());
                }
                start_list.insert(rel.clone(), c);
            } else {
                record.not_covered.push(rel.clone());
            }
            start.insert(rel, (stat, hash));
        }
        if truncated {
            record.not_covered.push("...".into());
            // A partial walk's directories are not all watched: walk at each checkpoint.
            watcher = None;
        }
        // Durable before the run changes anything (one `syncfs`, only when something new was
        // stored); the cache rewritten only when it changed.
        if wrote {
            backups.sync()?;
        }
        if new_blobs {
            backups.save_blobs(&blobs)?;
        }
        if cache != old {
            backups.save_index(&cache)?;
        }
        Ok(Recorder {
            root: root.to_path_buf(),
            backups,
            start,
            start_list,
            racy_ns,
            changes: BTreeMap::new(),
            watcher,
            record,
        })
    }

    /// The snapshot becomes run `id`'s: its start-of-run list and record are saved, and what
    /// the run did before it had an id (a fix's first check) is recorded at once.
    fn begin(&mut self, id: i64) -> Result<(), UndoError> {
        self.record.id = id;
        if !self.backups.adopt_pending(self.record.pid, id) {
            self.backups.save_start(id, &self.start_list)?;
        }
        self.backups.save_record(&self.record)?;
        // The run has its record now: its pending snapshot, and those of processes killed
        // before their run began (this run's snapshot supersedes them), go.
        self.backups.remove_pending(self.record.pid);
        for (rec, _) in self.backups.pending() {
            if !restore::alive(rec.pid) {
                self.backups.remove_pending(rec.pid);
            }
        }
        self.checkpoint(false);
        Ok(())
    }

    /// Compare the workspace with the snapshot (what notification says changed, else a
    /// walk) and save the record.
    fn checkpoint(&mut self, finished: bool) {
        let drained = self.watcher.as_mut().map(Watcher::drain);
        let done = match drained {
            Some(d) if !d.rescan => self.follow(d),
            _ => false,
        };
        if !done {
            self.rescan();
        }
        self.record.changes = self.changes.values().cloned().collect();
        self.record.finished = finished;
        self.record.updated_ms = crate::clock::now_ms();
        if let Err(e) = self.backups.save_record(&self.record) {
            eprintln!(
                "warning: cannot update the undo record of run {}: {e}",
                self.record.id
            );
        }
    }

    /// Walk the workspace and compare every file; watch its directories anew.
    fn rescan(&mut self) {
        let mut watcher = self.watcher.take().and_then(|_| Watcher::new());
        let listing = scan::walk(&self.root);
        if let Some(w) = &mut watcher
            && (listing.truncated || !listing.dirs.iter().all(|d| w.add(&self.root, d)))
        {
            watcher = None;
        }
        // Events queued while the walk ran are covered by it: drop them.
        if let Some(w) = &mut watcher {
            w.drain();
        }
        self.watcher = watcher;
        let skip = skipped(&self.record);
        self.changes = compare_all(&self.root, &self.start, &skip, self.racy_ns, &listing);
    }

    /// Bring `changes` up to date for the paths notification named: cost follows the
    /// change. False when it cannot (a watch could not be added): walk instead.
    fn follow(&mut self, d: watch::Drained) -> bool {
        let root = self.root.clone();
        let mut dirty = d.paths;
        // Directory listings by the walk's rules, one per directory looked at.
        let mut listings: HashMap<String, Listing> = HashMap::new();
        for dir in &d.new_dirs {
            let parent = parent_of(dir).to_string();
            let l = listings
                .entry(parent.clone())
                .or_insert_with(|| scan::walk_from(&root, &parent, Some(1)));
            if !l.dirs.contains(dir) {
                continue;
            }
            let below = scan::walk_from(&root, dir, None);
            let Some(w) = &mut self.watcher else {
                return false;
            };
            if below.truncated || !below.dirs.iter().all(|s| w.add(&root, s)) {
                return false;
            }
            dirty.extend(below.files.into_keys());
            dirty.extend(below.others.into_keys());
        }
        let own = &self.record.own_output;
        let not_covered = &self.record.not_covered;
        let others = &self.record.others;
        for rel in dirty {
            let change = if let Some(st) = self.start.get(&rel) {
                changed_start(&root, &rel, st, scan::now(&root, &rel), self.racy_ns, false)
            } else if own.contains(&rel) || not_covered.contains(&rel) || others.contains(&rel) {
                None
            } else {
                let parent = parent_of(&rel).to_string();
                let l = listings
                    .entry(parent.clone())
                    .or_insert_with(|| scan::walk_from(&root, &parent, Some(1)));
                if l.files.contains_key(&rel) {
                    created(&root, &rel)
                } else if l.others.contains_key(&rel) && !holds_start(&self.start, &rel) {
                    Some(created_other(&rel))
                } else {
                    None
                }
            };
            match change {
                Some(c) => {
                    self.changes.insert(rel, c);
                }
                None => {
                    self.changes.remove(&rel);
                }
            }
        }
        true
    }
}

/// The directory holding `rel` (`""`: the root).
fn parent_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

/// The hash of `rel`, its pre-image kept: stored, or git's blob `in_index` (the blob id git's
/// index names for the path) when that blob holds the file's content, then noted in `blobs`
/// (`new_blobs` set when it was not yet) and not copied (`None`: too large or unreadable).
#[allow(clippy::too_many_arguments)]
fn backup_one(
    backups: &Backups,
    root: &Path,
    rel: &str,
    stat: StatKey,
    cached: Option<&Cached>,
    in_index: Option<&String>,
    blobs: &mut BTreeMap<String, String>,
    new_blobs: &mut bool,
    wrote: &mut bool,
) -> Option<String> {
    if let Some(c) = cached
        && c.stat == stat
    {
        // Unchanged since it was found to be this blob, which the index still names (so
        // git keeps it): no look in `objects/` either.
        if in_index.is_some() && blobs.get(&c.hash) == in_index {
            return Some(c.hash.clone());
        }
        if backups.has_object(&c.hash) {
            return Some(c.hash.clone());
        }
    }
    if stat.size > scan::MAX_FILE {
        return None;
    }
    let bytes = scan::read(root, rel).ok()?;
    let h = scan::hash(&bytes);
    if let Some(oid) = in_index
        && (blobs.get(&h) == Some(oid) || git::blob_id(&bytes, oid.len()).as_ref() == Some(oid))
    {
        if blobs.get(&h) != Some(oid) {
            blobs.insert(h.clone(), oid.clone());
            *new_blobs = true;
        }
        return Some(h);
    }
    if !backups.has_object(&h) {
        backups.put_object(&h, &bytes).ok()?;
        *wrote = true;
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
        let have = content_id(root, rel).ok();
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
