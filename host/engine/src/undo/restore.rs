//! `kiln undo`: what undoing a run would do to each file it changed ([`plan`]), the diff of
//! it (`--dry-run`), and doing it ([`apply`]): every file put back at once, through the one
//! writer and its journal (so an undo is all-or-nothing too), files the run created deleted.
//! A file whose content is neither what the run left nor what it was before has been changed
//! since by someone else: it is refused, and named, unless forced.

use super::backup::{Backups, NOT_REGULAR, RunRecord};
use super::error::UndoError;
use super::scan::{self, Now};
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
    /// Why, for `changed_since` and `cannot`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
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

impl Plan {
    /// Files refused because they changed since the run.
    pub fn conflicts(&self) -> Vec<&Item> {
        self.files
            .iter()
            .filter(|i| i.action == Action::ChangedSince)
            .collect()
    }

    /// The unified diff of what undo writes (forced files included when `force`).
    pub fn diff(&self, force: bool) -> String {
        let mut out = String::new();
        for i in &self.files {
            let goes = matches!(i.action, Action::Restore | Action::Delete)
                || (force && i.action == Action::ChangedSince && i.why.is_none());
            if !goes {
                continue;
            }
            let old = i.now.as_deref().unwrap_or("");
            let new = i.before.as_deref().unwrap_or("");
            let a = if i.now.is_some() {
                format!("a/{}", i.path)
            } else {
                "/dev/null".into()
            };
            let b = if i.before.is_some() {
                format!("b/{}", i.path)
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
    let files = super::compare::since_start(root, rec, start)
        .iter()
        .map(|c| item(&b, root, c))
        .collect();
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
    let files = changes.values().map(|c| item(&b, root, c)).collect();
    Ok(Plan {
        id,
        finished: rec.finished,
        files,
        not_covered: rec.not_covered,
        pending: None,
    })
}

fn item(b: &Backups, root: &Path, c: &super::backup::Change) -> Item {
    let mut it = Item {
        path: c.path.clone(),
        action: Action::Restore,
        why: None,
        now: None,
        before: None,
        mode: c.mode,
    };
    let now_hash = match scan::now(root, &c.path) {
        Now::Absent => None,
        Now::Other => Some(NOT_REGULAR.to_string()),
        Now::File(_) => match scan::read(root, &c.path) {
            Ok(bytes) => {
                let h = scan::hash(&bytes);
                it.now = String::from_utf8(bytes).ok();
                if it.now.is_none() {
                    it.why =
                        Some("it is not UTF-8 text now (kiln's writer writes text only)".into());
                }
                Some(h)
            }
            Err(e) => Some(format!("unreadable: {e}")),
        },
    };
    if let Some(h) = &c.before {
        match b.object(h).map(String::from_utf8) {
            Ok(Ok(text)) => it.before = Some(text),
            Ok(Err(_)) => {
                it.why = Some(format!(
                    "its content before the run is not UTF-8 text (kiln's writer writes text only); it is kept at {}",
                    b.object_path(h).display()
                ));
            }
            Err(e) => it.why = Some(format!("its backup is missing: {e}")),
        }
    }
    it.action = if now_hash == c.before {
        Action::AsBefore
    } else if now_hash == c.after {
        if c.before.is_some() {
            Action::Restore
        } else {
            Action::Delete
        }
    } else {
        Action::ChangedSince
    };
    if it.why.is_some() && it.action != Action::AsBefore {
        it.action = Action::Cannot;
    }
    if now_hash.as_deref() == Some(NOT_REGULAR) && it.action != Action::AsBefore {
        it.action = Action::Cannot;
        it.why = Some("it is no longer a regular file".into());
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
    let ws = Workspace::open(root)?;
    let writer = ws.writer(protected, &[]);
    let mut changes = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for i in &plan.files {
        let goes = matches!(i.action, Action::Restore | Action::Delete)
            || (force && i.action == Action::ChangedSince);
        if !goes {
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
        done.insert(i.path.clone());
    }
    // A file absent now whose run deleted it, and absent before too, needs nothing.
    changes.retain(|c| !matches!(c, Change::Remove { before: None, .. }));
    writer.commit(&changes)?;
    let b = Backups::open(root, false)?.ok_or(UndoError::NoRecord(plan.id))?;
    if let Some(pid) = plan.pending {
        b.remove_pending(pid);
    } else {
        let mut rec = b.record(plan.id)?.ok_or(UndoError::NoRecord(plan.id))?;
        rec.undone_ms = Some(crate::clock::now_ms());
        b.save_record(&rec)?;
    }
    let mut out = Applied::default();
    for i in &plan.files {
        if i.action == Action::Cannot {
            let why = i
                .why
                .clone()
                .unwrap_or_else(|| "it cannot be put back".into());
            out.not_restored.push((i.path.clone(), why));
        } else if !done.contains(&i.path) {
            continue;
        } else if holds_before(root, i) {
            out.put_back.push(i.path.clone());
        } else {
            let why = "it does not hold its content from before the run after the undo".into();
            out.not_restored.push((i.path.clone(), why));
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
