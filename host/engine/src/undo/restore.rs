//! `kiln undo`: what undoing a run would do to each file it changed ([`plan`]), the diff of
//! it (`--dry-run`), and doing it ([`apply`]): every file put back at once, through the one
//! writer and its journal (so an undo is all-or-nothing too), files the run created deleted.
//! A file whose content is neither what the run left nor what it was before has been changed
//! since by someone else: it is refused, and named, unless forced.
//!
//! What no journal can hold is handled apart, never followed and never read whole: what the
//! run created that is not a text file (a symbolic link, a FIFO, a socket, a device node, a
//! binary file, a file over [`scan::MAX_FILE`]) is unlinked after the journal's commit; what
//! stands where a file must go back (a link or FIFO where the file or a directory on its way
//! was, a file grown over the bound) is unlinked before it: a link or FIFO only with
//! `--force` ([`Action::Blocked`] without), a file the run made too large whenever the file
//! goes back.

use super::backup::{Backups, NOT_REGULAR, RunRecord};
use super::error::UndoError;
use super::scan::{self, Kind, Now};
use crate::edit::Workspace;
use crate::edit::journal::Change;
use serde::Serialize;
use std::path::Path;

/// What undo does with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Put its content from before the run back.
    Restore,
    /// Delete it: the run created it.
    Delete,
    /// Nothing: it already holds its content from before the run.
    AsBefore,
    /// Refused (unless forced): it changed since the run.
    ChangedSince,
    /// Not put back unless forced: a symbolic link, FIFO, socket or device node stands where
    /// it was, or where a directory on its way was (`blocker`); `--force` removes that entry
    /// (never following it) and puts the file back.
    Blocked,
    /// It cannot be put back (see the reason).
    Cannot,
}

/// One file of an undo.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// Workspace-relative path.
    pub path: String,
    /// What undo does.
    pub action: Action,
    /// Why, for `changed_since`, `blocked` and `cannot`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// What the path is now when it is not a regular file (`a symbolic link`, `a FIFO`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now_is: Option<&'static str>,
    /// Its size now, when it is too large to keep or compare (over 16 MiB: never read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The entry undo removes first, without following it, for the file to go back: a link
    /// (FIFO, ...) at its path or on its way, or the file itself when too large to read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
    /// Deleted by unlinking it (never followed, never read), not through the journal: the
    /// run created it, and it is not a text file.
    #[serde(skip)]
    unlink: bool,
    /// Its content now (text), for the diff and the journal.
    #[serde(skip)]
    now: Option<String>,
    /// Its content before the run (`None`: it did not exist).
    #[serde(skip)]
    before: Option<String>,
    /// Its permission bits before the run, as recorded.
    #[serde(skip)]
    mode: Option<u32>,
}

/// The permission bits undo gives a file whose record predates recorded modes: a plain
/// file's usual ones, never the current file's (a program of the run may have set those).
const MODE_UNRECORDED: u32 = 0o644;

/// What undoing a run would do.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The run.
    pub id: i64,
    /// The run had finished when it was last recorded (false: killed, or still running).
    pub finished: bool,
    /// Every file the run changed.
    pub files: Vec<Item>,
    /// Files the run's record could not back up (their changes are not undone).
    pub not_covered: Vec<String>,
    /// For a run killed before it had an id: the process that ran it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<u32>,
}

impl Item {
    /// Whether undo writes (or deletes) it, `force` given or not.
    fn goes(&self, force: bool) -> bool {
        matches!(self.action, Action::Restore | Action::Delete)
            || (force && matches!(self.action, Action::ChangedSince | Action::Blocked))
    }
}

impl Plan {
    /// Files refused because they changed since the run.
    pub fn conflicts(&self) -> Vec<&Item> {
        self.files
            .iter()
            .filter(|i| i.action == Action::ChangedSince)
            .collect()
    }

    /// Whether undoing (with `force` or not) would put every file back: what `kiln undo
    /// --dry-run` exits with (the real undo exits 1 otherwise).
    pub fn complete(&self, force: bool) -> bool {
        self.files
            .iter()
            .all(|i| i.action == Action::AsBefore || i.goes(force))
    }

    /// The unified diff of what undo writes (forced files included when `force`). Paths in
    /// its headers have their control characters escaped (a newline in a name cannot forge a
    /// line of the diff), and are cut in the middle past 200 characters when `human`.
    pub fn diff(&self, force: bool, human: bool) -> String {
        let mut out = String::new();
        for i in &self.files {
            if !i.goes(force) || (i.now.is_none() && i.before.is_none()) {
                continue;
            }
            let old = i.now.as_deref().unwrap_or("");
            let new = i.before.as_deref().unwrap_or("");
            let shown = if human {
                crate::terminal::path(&i.path)
            } else {
                crate::terminal::escape_path(&i.path)
            };
            let a = if i.now.is_some() {
                format!("a/{shown}")
            } else {
                "/dev/null".into()
            };
            let b = if i.before.is_some() {
                format!("b/{shown}")
            } else {
                "/dev/null".into()
            };
            out.push_str(
                &similar::TextDiff::from_lines(old, new)
                    .unified_diff()
                    .context_radius(3)
                    .header(&a, &b)
                    .to_string(),
            );
        }
        out
    }
}

/// The pre-images a plan (or a report) needs: kiln's stored copies, else git's objects for
/// files the run found tracked and clean (all read at once, each checked by its SHA-256).
pub struct PreImages<'a> {
    b: &'a Backups,
    from_git: std::collections::HashMap<String, Result<Vec<u8>, String>>,
}

impl<'a> PreImages<'a> {
    /// The pre-images of `changes`: those kiln did not copy are git's objects, as
    /// `blobs.json` names them.
    pub fn load<'c>(
        b: &'a Backups,
        root: &Path,
        changes: impl IntoIterator<Item = &'c super::backup::Change>,
    ) -> PreImages<'a> {
        let blobs = b.blobs();
        let mut wanted = std::collections::BTreeMap::new();
        for c in changes {
            if let Some(h) = &c.before
                && !b.has_object(h)
                && let Some(oid) = blobs.get(h)
            {
                wanted.insert(h.clone(), oid.clone());
            }
        }
        PreImages {
            b,
            from_git: super::git::read_blobs(root, &wanted),
        }
    }

    /// The content `hash` (SHA-256), or why it cannot be had.
    pub fn get(&self, hash: &str) -> Result<Vec<u8>, String> {
        match self.from_git.get(hash) {
            Some(r) => r.clone(),
            None => self
                .b
                .object(hash)
                .map_err(|e| format!("its backup is missing: {e}")),
        }
    }

    /// Where the content `hash` is kept (for messages).
    fn kept_at(&self, hash: &str) -> String {
        if self.from_git.contains_key(hash) {
            "in git's objects".into()
        } else {
            format!("at {}", self.b.object_path(hash).display())
        }
    }
}

/// Whether process `pid` exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// The snapshot of a run whose process died before the run had an id (a `kiln fix` killed
/// during its first check), when it is newer than every recorded run: its record and
/// start-of-run list.
pub fn killed_before_start(root: &Path) -> Result<Option<super::backup::Pending>, UndoError> {
    let Some(b) = Backups::open(root, false)? else {
        return Ok(None);
    };
    let latest = b
        .runs()
        .first()
        .and_then(|id| b.record(*id).ok().flatten())
        .map(|r| r.started_ms);
    Ok(b.pending()
        .into_iter()
        .filter(|(r, _)| !alive(r.pid) && latest.is_none_or(|s| r.started_ms > s))
        .max_by_key(|(r, _)| r.started_ms))
}

/// What undoing the run of [`killed_before_start`] would do: every file that differs from
/// what it found is its change.
pub fn plan_pending(
    root: &Path,
    rec: &RunRecord,
    start: &std::collections::BTreeMap<String, super::backup::Cached>,
) -> Result<Plan, UndoError> {
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRuns)?;
    let changes = super::compare::since_start(root, rec, start);
    let pre = PreImages::load(&b, root, &changes);
    let files = changes.iter().map(|c| item(&pre, root, c)).collect();
    Ok(Plan {
        id: 0,
        finished: false,
        files,
        not_covered: rec.not_covered.clone(),
        pending: Some(rec.pid),
    })
}

/// The id of the newest run with an undo record.
pub fn latest(root: &Path) -> Result<i64, UndoError> {
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRuns)?;
    b.runs().first().copied().ok_or(UndoError::NoRuns)
}

/// The record of run `id`.
pub fn record(root: &Path, id: i64) -> Result<RunRecord, UndoError> {
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRecord(id))?;
    b.record(id)?.ok_or(UndoError::NoRecord(id))
}

/// What undoing run `id` would do to each file.
pub fn plan(root: &Path, id: i64) -> Result<Plan, UndoError> {
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRecord(id))?;
    let rec = b.record(id)?.ok_or(UndoError::NoRecord(id))?;
    if rec.undone_ms.is_some() {
        return Err(UndoError::AlreadyUndone(id));
    }
    if !rec.finished && alive(rec.pid) && rec.pid != std::process::id() {
        return Err(UndoError::Running(id, rec.pid));
    }
    let mut changes: std::collections::BTreeMap<String, super::backup::Change> = rec
        .changes
        .iter()
        .map(|c| (c.path.clone(), c.clone()))
        .collect();
    // A run that did not finish (killed) may have changed more than it recorded: a program
    // still writing, an edit written but not yet looked at. Every file that differs from
    // what it found at its start is its change.
    if !rec.finished
        && let Some(start) = b.start_of(id)
    {
        for c in super::compare::since_start(root, &rec, &start) {
            changes.insert(c.path.clone(), c);
        }
    }
    let pre = PreImages::load(&b, root, changes.values());
    let files = changes.values().map(|c| item(&pre, root, c)).collect();
    Ok(Plan {
        id,
        finished: rec.finished,
        files,
        not_covered: rec.not_covered,
        pending: None,
    })
}

fn item(pre: &PreImages<'_>, root: &Path, c: &super::backup::Change) -> Item {
    let mut it = Item {
        path: c.path.clone(),
        action: Action::Restore,
        why: None,
        now_is: None,
        size: None,
        blocker: None,
        unlink: false,
        now: None,
        before: None,
        mode: c.mode,
    };
    // What stands at the path (or on its way) that is not a regular file: (where, what).
    let mut other: Option<(String, Kind)> = None;
    // Why its content now cannot go through the journal (not text, unreadable).
    let mut now_problem = None;
    let now_id = match scan::now(root, &c.path) {
        Now::Absent => None,
        Now::File(_) => match scan::read(root, &c.path) {
            Ok(bytes) => {
                let h = scan::hash(&bytes);
                it.now = String::from_utf8(bytes).ok();
                if it.now.is_none() {
                    now_problem =
                        Some("it is not UTF-8 text now (kiln's writer writes text only)".into());
                }
                Some(h)
            }
            Err(e) => match scan::too_large(&e) {
                Some(t) => {
                    it.size = Some(t.size);
                    Some(super::compare::large_id(t))
                }
                None => {
                    now_problem = Some(format!("it is unreadable now: {e}"));
                    Some(format!("unreadable: {e}"))
                }
            },
        },
        Now::Other(k) => {
            it.now_is = Some(k.name());
            other = Some((c.path.clone(), k));
            Some(NOT_REGULAR.to_string())
        }
        Now::Blocked { at, kind } => {
            other = Some((at, kind));
            Some(NOT_REGULAR.to_string())
        }
    };
    let mut before_problem = None;
    if let Some(h) = &c.before {
        match pre.get(h).map(String::from_utf8) {
            Ok(Ok(text)) => it.before = Some(text),
            Ok(Err(_)) => {
                before_problem = Some(format!(
                    "its content before the run is not UTF-8 text (kiln's writer writes text only); it is kept {}",
                    pre.kept_at(h)
                ));
            }
            Err(why) => before_problem = Some(why),
        }
    }
    it.action = if now_id == c.before {
        Action::AsBefore
    } else if now_id == c.after {
        if c.before.is_some() {
            Action::Restore
        } else {
            Action::Delete
        }
    } else {
        Action::ChangedSince
    };
    if it.action == Action::AsBefore {
        return it;
    }
    let created = c.before.is_none();
    if let Some(why) = before_problem {
        it.action = Action::Cannot;
        it.why = Some(why);
        return it;
    }
    match other {
        Some((at, Kind::Dir)) => {
            it.action = Action::Cannot;
            it.why = Some(format!("{at} is a directory now"));
        }
        // A link (FIFO, ...) the run created: deleted, never followed.
        Some((at, _)) if created && at == c.path => it.unlink = true,
        Some((at, kind)) => {
            let here = if at == c.path {
                "it".to_string()
            } else {
                format!("{at}, on its way,")
            };
            it.action = Action::Blocked;
            it.why = Some(format!(
                "{here} is {} now; --force replaces it, without following it",
                kind.name()
            ));
            it.blocker = Some(at);
        }
        None if it.size.is_some() => {
            // Never read: a file the run created goes whole; one that was there before is
            // removed before its content goes back.
            if created {
                it.unlink = true;
            } else {
                it.blocker = Some(c.path.clone());
            }
        }
        None => {
            if let Some(why) = now_problem {
                if created && it.action == Action::Delete {
                    it.unlink = true;
                } else {
                    it.action = Action::Cannot;
                    it.why = Some(why);
                }
            }
        }
    }
    it
}

/// What an undo did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Files put back (or deleted), each checked afterwards to hold its content from before
    /// the run.
    pub put_back: Vec<String>,
    /// Files that could not be put back, with why.
    pub not_restored: Vec<(String, String)>,
}

/// Undo: write back every file of `plan` (those changed since too when `force`), all at once
/// through the writer, each with the permission bits recorded before the run (`& 0o777`),
/// then mark the run's record undone. Every file written is read back: only those that hold
/// their content from before the run count as put back; the others, and those the plan
/// could not put back at all, are named in [`Applied::not_restored`].
pub fn apply(
    root: &Path,
    plan: &Plan,
    protected: &crate::path::Protected,
    force: bool,
) -> Result<Applied, UndoError> {
    use std::collections::{BTreeMap, BTreeSet};
    let ws = Workspace::open(root)?;
    let writer = ws.writer(protected, &[]);
    // Files that could not go back, with why.
    let mut failed: BTreeMap<&str, String> = BTreeMap::new();
    // First what stands in the way of a file going back, unlinked, never followed.
    let mut cleared = BTreeSet::new();
    for i in &plan.files {
        let Some(at) = i.blocker.as_deref().filter(|_| i.goes(force)) else {
            continue;
        };
        if cleared.contains(at) {
            continue;
        }
        match writer.remove_entry(at) {
            Ok(()) => {
                cleared.insert(at);
            }
            Err(e) => {
                failed.insert(&i.path, e.to_string());
            }
        }
    }
    let mut changes = Vec::new();
    let mut done = BTreeSet::new();
    for i in &plan.files {
        if !i.goes(force) || i.unlink || failed.contains_key(i.path.as_str()) {
            continue;
        }
        changes.push(match &i.before {
            Some(text) => Change::Write {
                path: &i.path,
                text,
                before: i.now.as_deref(),
                mode: Some(i.mode.unwrap_or(MODE_UNRECORDED) & 0o777),
            },
            None => Change::Remove {
                path: &i.path,
                before: i.now.as_deref(),
            },
        });
        done.insert(i.path.as_str());
    }
    // A file absent now whose run deleted it, and absent before too, needs nothing.
    changes.retain(|c| !matches!(c, Change::Remove { before: None, .. }));
    writer.commit(&changes)?;
    // Then what the run created that no journal holds (a link, a FIFO, a binary or huge file).
    for i in &plan.files {
        if !(i.unlink && i.goes(force)) {
            continue;
        }
        match writer.remove_entry(&i.path) {
            Ok(()) => {
                done.insert(i.path.as_str());
            }
            Err(e) => {
                failed.insert(&i.path, e.to_string());
            }
        }
    }
    let mut out = Applied::default();
    for i in &plan.files {
        let not = |why: String| (i.path.clone(), why);
        if let Some(why) = failed.get(i.path.as_str()) {
            out.not_restored.push(not(why.clone()));
        } else if i.action == Action::Cannot {
            let why = i
                .why
                .clone()
                .unwrap_or_else(|| "it cannot be put back".into());
            out.not_restored.push(not(why));
        } else if i.action == Action::Blocked && !force {
            // Its blocker may have gone with another file's undo (a link the run created).
            if holds_before(root, i) {
                out.put_back.push(i.path.clone());
            } else {
                out.not_restored
                    .push(not(i.why.clone().unwrap_or_default()));
            }
        } else if !done.contains(i.path.as_str()) {
            continue;
        } else if holds_before(root, i) {
            out.put_back.push(i.path.clone());
        } else {
            let why = "it does not hold its content from before the run after the undo".into();
            out.not_restored.push(not(why));
        }
    }
    // The run counts as undone only once every file is back: an undo that left some out can
    // be run again (after the obstacle is gone, or with --force), its pre-images still kept.
    if out.not_restored.is_empty() {
        let b = Backups::open(root, false)?.ok_or(UndoError::NoRecord(plan.id))?;
        if let Some(pid) = plan.pending {
            b.remove_pending(pid);
        } else {
            let mut rec = b.record(plan.id)?.ok_or(UndoError::NoRecord(plan.id))?;
            rec.undone_ms = Some(crate::clock::now_ms());
            b.save_record(&rec)?;
        }
    }
    Ok(out)
}

/// Whether the file of `i` is as before the run now: its content then, or absent.
fn holds_before(root: &Path, i: &Item) -> bool {
    match (&i.before, scan::now(root, &i.path)) {
        (None, Now::Absent) => true,
        (Some(text), Now::File(_)) => scan::read(root, &i.path).is_ok_and(|b| b == text.as_bytes()),
        _ => false,
    }
}
