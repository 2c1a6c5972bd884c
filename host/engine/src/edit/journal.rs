//! The intent journal that makes a multi-file apply all-or-nothing even when kiln is killed
//! (SIGKILL, power loss): before the first rename, `apply-<id>.json` in the workspace's journal
//! directory records every path of the apply, its temporary file, the content hashes before
//! and after, and a backup of each file that is overwritten or deleted (`apply-<id>.<step>`: a
//! hard link to the old file, or a copy where linking fails, as it does across file systems).
//! Journal and backups are fsync'd (files and directory) before anything in the workspace
//! changes; the journal is removed only after the last directory fsync. On the next start,
//! [`recover_workspace`] rolls an unfinished journal forward (every temporary file present and
//! whole, checked by hash) or back (otherwise, from the backups), removes stale
//! `.NAME.kiln-tmp-*` files and says what it did.
//!
//! The journal directory is kiln's own, outside the workspace: `journal/` in the workspace's
//! state directory ([`crate::state_dir`]), so a repository cannot plant a journal for kiln to
//! replay. A journal found in a workspace's `.kiln/journal/` (an older kiln's, or planted) is
//! reported and never replayed. Every change to the workspace, recovery included, goes through
//! the writer's [`Beneath`] handle: no link is followed at any component.
//!
//! fsync discipline, as SQLite and git do it: backups fsync'd; journal written, fsync'd, renamed
//! into place; journal directory fsync'd (once, for journal and backups); temporary files
//! written and fsync'd; renames; directories fsync'd; removals; directories fsync'd; journal
//! removed; journal directory fsync'd; backups removed.
//!
//! One apply at a time per workspace: an apply holds an exclusive lock on `journal/lock` from
//! before its journal is written until after it is removed, and recovery takes the same lock,
//! so it never touches the journal or the temporary files of an apply that is still running in
//! another process.
//!
//! A Ctrl-C cannot cut a commit in two: the commit is synchronous (no await point inside, so a
//! cancelled future is dropped before or after it, never during it), and commands without a
//! loop to cancel exit on Ctrl-C only once no commit is running ([`exit_on_interrupt`]).

use super::beneath::Beneath;
use super::error::{EditError, describe_io};
use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// What marks a temporary file of an apply: `.NAME.kiln-tmp-<apply id>-<step>`.
pub const TEMP_MARK: &str = ".kiln-tmp-";
/// How the journal directory is named in messages.
const JOURNAL_SHOWN: &str = "journal";
/// The lock file inside the journal directory.
const LOCK: &str = "lock";
/// The journal format version.
const VERSION: u32 = 1;

/// Held (shared) by every commit; [`exit_on_interrupt`] takes it exclusively before exiting.
static COMMITS: RwLock<()> = RwLock::new(());

/// One change of a commit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<'a> {
    /// Create or replace `path` with `text`. `before` is the content the plan was made from
    /// (`None`: the file does not exist). `mode`: the permission bits to give it (undo's
    /// recorded ones); `None` keeps those of the file it replaces (a new file gets 0666 less
    /// the umask). Only the bits of `0o777` are ever set: never set-user-ID, set-group-ID or
    /// sticky.
    Write {
        path: &'a str,
        text: &'a str,
        before: Option<&'a str>,
        mode: Option<u32>,
    },
    /// Delete `path`, whose content is `before`.
    Remove {
        path: &'a str,
        before: Option<&'a str>,
    },
}

/// The journal of one apply, as written to `apply-<id>.json` in the journal directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub kiln_journal: u32,
    /// The apply's id (also in the file name and the temporary file names).
    pub id: String,
    /// The process that made it.
    pub pid: u32,
    /// When it was made (ms since the epoch).
    pub started_ms: i64,
    /// Directories the apply created for new files (removed again on a roll-back when empty).
    #[serde(default)]
    pub created_dirs: Vec<String>,
    /// The changes, in the order they are made.
    pub steps: Vec<Step>,
}

/// One change recorded in a journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Step {
    /// `tmp` (a sibling of `path`) is renamed onto `path`.
    Write {
        /// Workspace-relative path.
        path: String,
        /// Workspace-relative temporary file holding the new content.
        tmp: String,
        /// SHA-256 of the content before (`None`: the file did not exist).
        before: Option<String>,
        /// SHA-256 of the new content.
        after: String,
        /// The backup of the old content: `apply-<id>.<backup>` in the journal directory.
        backup: Option<String>,
    },
    /// `path` is deleted.
    Remove {
        /// Workspace-relative path.
        path: String,
        /// SHA-256 of the content before (`None`: the file did not exist).
        before: Option<String>,
        /// The backup of the old content: `apply-<id>.<backup>` in the journal directory.
        backup: Option<String>,
    },
}

impl Step {
    /// The workspace-relative path the step changes.
    pub fn path(&self) -> &str {
        match self {
            Step::Write { path, .. } | Step::Remove { path, .. } => path,
        }
    }
    fn backup(&self) -> Option<&str> {
        match self {
            Step::Write { backup, .. } | Step::Remove { backup, .. } => backup.as_deref(),
        }
    }
}

/// What a file (or a temporary file) holds when recovery looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// It does not exist.
    Absent,
    /// A regular file with this SHA-256.
    File(String),
    /// Something else: a directory, a symbolic link, unreadable.
    Other,
}

impl Seen {
    fn is(&self, hash: Option<&str>) -> bool {
        match (self, hash) {
            (Seen::Absent, None) => true,
            (Seen::File(h), Some(want)) => h == want,
            _ => false,
        }
    }
}

/// Which way an unfinished apply was completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Every file now holds the apply's new content.
    Forward,
    /// Every file holds its content from before the apply.
    Back,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::Forward => "rolled forward",
            Direction::Back => "rolled back",
        })
    }
}

/// The decision for an unfinished journal, from what each step's file (`target`) and
/// temporary file (`temp`, for writes) hold now: forward when every write is done (the file
/// holds the new content) or ready (its temporary file is present and whole), back otherwise.
/// Removals can always be finished and never decide.
pub fn decide(steps: &[Step], target: &[Seen], temp: &[Seen]) -> Direction {
    let forward = steps.iter().enumerate().all(|(i, s)| match s {
        Step::Write { after, .. } => {
            target[i].is(Some(after.as_str())) || temp[i].is(Some(after.as_str()))
        }
        Step::Remove { .. } => true,
    });
    if forward {
        Direction::Forward
    } else {
        Direction::Back
    }
}

/// What happened to one file during a recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileOutcome {
    /// Workspace-relative path.
    pub path: String,
    /// `new content`, `deleted`, `restored`, `removed` (a file the apply created),
    /// `unchanged`, or why it was left as it is.
    pub outcome: String,
}

/// One unfinished journal and what recovery did with it.
#[derive(Debug, Clone, Serialize)]
pub struct Recovered {
    /// The apply's id.
    pub id: String,
    /// The process that was interrupted.
    pub pid: u32,
    /// Which way it was completed.
    pub direction: Direction,
    /// Every file of the apply.
    pub files: Vec<FileOutcome>,
    /// Files left as they are because they changed after the interruption, or could not be
    /// restored.
    pub skipped: Vec<FileOutcome>,
    /// Operations that failed; the journal is kept and tried again at the next start.
    pub errors: Vec<String>,
}

impl Recovered {
    /// The message for the user.
    pub fn message(&self) -> String {
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{} ({})", f.path, f.outcome))
            .collect();
        let mut m = format!(
            "an edit interrupted when kiln (pid {}) stopped was {}: {}",
            self.pid,
            self.direction,
            if files.is_empty() {
                "no file had changed".into()
            } else {
                files.join(", ")
            }
        );
        for s in &self.skipped {
            m.push_str(&format!("\n  {}: {}", s.path, s.outcome));
        }
        if !self.errors.is_empty() {
            m.push_str(&format!(
                "\n  not finished ({}); the journal apply-{}.json in kiln's state directory is kept and kiln tries again at its next start",
                self.errors.join("; "),
                self.id
            ));
        }
        m
    }
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryReport {
    /// Unfinished applies, completed one way or the other.
    pub recovered: Vec<Recovered>,
    /// Stale temporary files removed (workspace-relative).
    pub removed_temps: Vec<String>,
    /// Journals that could not be read (renamed to `*.damaged`, left for the user).
    pub damaged: Vec<String>,
    /// Journals found in the workspace's own `.kiln/journal/`: reported, never replayed.
    pub ignored: Vec<String>,
}

impl RecoveryReport {
    /// True when there was nothing to do.
    pub fn is_empty(&self) -> bool {
        self.recovered.is_empty()
            && self.removed_temps.is_empty()
            && self.damaged.is_empty()
            && self.ignored.is_empty()
    }

    /// One message per finding, for stderr.
    pub fn messages(&self) -> Vec<String> {
        let mut out: Vec<String> = self.recovered.iter().map(Recovered::message).collect();
        if !self.removed_temps.is_empty() {
            out.push(format!(
                "removed {} stale temporary file(s) of an interrupted edit: {}",
                self.removed_temps.len(),
                self.removed_temps.join(", ")
            ));
        }
        for d in &self.damaged {
            out.push(format!(
                "the edit journal {d} in kiln's state directory cannot be read; it was renamed to {d}.damaged and the files it names were left as they are"
            ));
        }
        for j in &self.ignored {
            out.push(format!(
                "{j} in the workspace was not replayed: kiln keeps its edit journals in its own state directory, and one inside a workspace may have been put there by the repository; if an older kiln was interrupted, check the files it names by hand, then remove .kiln/journal/"
            ));
        }
        out
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An I/O error on `path`, described as a person reads it.
pub(super) fn io_err(path: impl Into<String>, e: &std::io::Error) -> EditError {
    EditError::Io {
        path: path.into(),
        message: describe_io(e),
    }
}

/// Whether a file name is one of kiln's temporary files (`.NAME.kiln-tmp-*`).
pub fn is_temp_name(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.find(TEMP_MARK))
        .is_some_and(|at| at > 0)
}

fn temp_path(rel: &str, id: &str, step: usize) -> String {
    let p = Path::new(rel);
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = format!(".{name}{TEMP_MARK}{id}-{step}");
    match parent_of(rel) {
        Some(parent) => parent.join(tmp).to_string_lossy().into_owned(),
        None => tmp,
    }
}

/// The parent directory of a workspace-relative path (`None`: the workspace root).
fn parent_of(rel: &str) -> Option<&Path> {
    Path::new(rel)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
}

/// fsync a directory. cap-std may hold directories as `O_PATH` descriptors, which cannot be
/// fsync'd, so `.` is opened for reading first.
fn sync_dir(dir: &Dir) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: openat with a valid directory fd and a NUL-terminated name; the returned fd is
    // owned by the File built from it.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    unsafe { std::fs::File::from_raw_fd(fd) }.sync_all()
}

/// fsync the directory holding `rel` (the workspace root when it has no parent).
fn sync_parent(ws: &Beneath, rel: &str) -> std::io::Result<()> {
    sync_dir(&ws.dir_at(parent_of(rel))?)
}

/// The exclusive lock on `journal/lock`, released when dropped (or when the process
/// dies).
struct Lock(#[allow(dead_code)] std::fs::File);

fn lock(state: &Dir) -> Result<Lock, EditError> {
    let path = format!("{JOURNAL_SHOWN}/{LOCK}");
    let file = state
        .open_with(LOCK, OpenOptions::new().read(true).write(true).create(true))
        .map_err(|e| io_err(&path, &e))?
        .into_std();
    file.lock().map_err(|e| io_err(&path, &e))?;
    Ok(Lock(file))
}

/// A process-wide count of commit steps, for the test hook.
static STEPS: AtomicU32 = AtomicU32::new(0);

/// The test hook: `KILN_TEST_APPLY_PAUSE=N` stops the process right after the Nth commit
/// step (forever, so a test can SIGKILL it there), `N:MS` pauses for MS milliseconds and goes
/// on. A step is: each backup, journal written, each temporary file, each rename, each
/// directory fsync, each removal, journal removed. Honoured by debug builds only.
fn test_pause(what: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        static PAUSE: std::sync::OnceLock<Option<(u32, Option<u64>)>> = std::sync::OnceLock::new();
        let n = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
        let pause = PAUSE.get_or_init(|| {
            let v = kiln_env::env().test().apply_pause.as_deref()?;
            let (step, ms) = match v.split_once(':') {
                Some((s, ms)) => (s.parse().ok()?, Some(ms.parse().ok()?)),
                None => (v.parse().ok()?, None),
            };
            Some((step, ms))
        });
        if let Some((step, ms)) = *pause
            && step == n
        {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "kiln-test: apply paused after step {n}: {what}");
            let _ = err.flush();
            drop(err);
            match ms {
                Some(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
                None => loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                },
            }
        }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = what;
        STEPS.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Why a commit stopped early in a unit test (a simulated kill).
const SIMULATED_KILL: &str = "simulated kill";

/// Commit `changes` under the journal. Runs on a blocking-capable thread when called from a
/// multi-threaded runtime (fsync may take a while); either way it has no await point, so a
/// cancelled caller cannot stop it half-way.
pub(super) fn commit(ws: &Beneath, state: &Dir, changes: &[Change<'_>]) -> Result<(), EditError> {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(|| commit_with(ws, state, changes, &mut test_pause))
    } else {
        commit_with(ws, state, changes, &mut test_pause)
    }
}

/// [`commit`], with `step` called after every step; when it returns false the commit stops
/// right there, leaving everything as a killed process would (for tests).
pub(super) fn commit_with(
    ws: &Beneath,
    state: &Dir,
    changes: &[Change<'_>],
    step: &mut dyn FnMut(&str) -> bool,
) -> Result<(), EditError> {
    if changes.is_empty() {
        return Ok(());
    }
    each_path_once(changes)?;
    let _commit = COMMITS.read().unwrap_or_else(|e| e.into_inner());
    let _lock = lock(state)?;
    // A journal left by a process that was killed (when the command did not recover at its
    // start, as an embedder may not): finish it first, so this plan's files are whole.
    let mut earlier = recover_locked(ws, state)?;
    remove_stale_temps(ws, changes, &mut earlier.removed_temps);
    for m in earlier.messages() {
        eprintln!("warning: {m}");
    }
    let id = format!(
        "{}-{}-{}",
        crate::clock::now_ms(),
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    );
    let (steps, created_dirs) = plan(ws, changes, &id);
    let journal = Journal {
        kiln_journal: VERSION,
        id: id.clone(),
        pid: std::process::id(),
        started_ms: crate::clock::now_ms(),
        created_dirs,
        steps,
    };
    // Backups first, beside the journal, so that the journal's directory fsync makes both
    // durable. A failure before the journal exists leaves nothing behind.
    let name = format!("apply-{id}.json");
    let written = make_backups(ws, state, &journal, changes, step)
        .and_then(|()| write_journal(state, &name, &journal));
    if let Err(e) = written {
        if !is_simulated(&e) {
            let _ = state.remove_file(format!("{name}.part"));
            remove_backups(state, &id);
        }
        return Err(e);
    }
    if !step("journal written") {
        return Err(simulated());
    }
    // Everything else up to the first rename: directories, temporary files. A failure here
    // leaves the workspace as it was.
    if let Err(e) = prepare(ws, &journal, changes, step) {
        return Err(undo(ws, state, &journal, e));
    }
    let applied = rename_and_remove(ws, &journal, step);
    if let Err(e) = applied {
        return Err(undo(ws, state, &journal, e));
    }
    finish_journal(state, &id)?;
    if !step("journal removed") {
        return Err(simulated());
    }
    Ok(())
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// Refuse a response that changes one path twice (an added file and a move onto the same new
/// path, say): the journal decides per path.
fn each_path_once(changes: &[Change<'_>]) -> Result<(), EditError> {
    let mut seen = BTreeSet::new();
    for c in changes {
        let (Change::Write { path, .. } | Change::Remove { path, .. }) = *c;
        if !seen.insert(crate::path::normalize(path)) {
            return Err(EditError::Io {
                path: path.into(),
                message: "is changed twice by the same response (created, moved onto or deleted more than once); nothing was written".into(),
            });
        }
    }
    Ok(())
}

/// Remove stale temporary files beside the files about to be written (an older kiln's, or a
/// journal's that was lost), recording them in `removed`: under the lock, none can belong to
/// a running apply.
fn remove_stale_temps(ws: &Beneath, changes: &[Change<'_>], removed: &mut Vec<String>) {
    let dirs: BTreeSet<Option<&Path>> = changes
        .iter()
        .map(|c| match *c {
            Change::Write { path, .. } | Change::Remove { path, .. } => parent_of(path),
        })
        .collect();
    for d in dirs.into_iter().flatten() {
        for t in find_temps(ws, Some(d)) {
            if ws.remove_file(&t).is_ok() {
                removed.push(t);
            }
        }
    }
}

/// The journal's plan for `changes` of commit `id`: one step per change, and the directories
/// the writes will create (parents first).
fn plan(ws: &Beneath, changes: &[Change<'_>], id: &str) -> (Vec<Step>, Vec<String>) {
    let mut steps = Vec::new();
    let mut created_dirs: Vec<String> = Vec::new();
    for (i, c) in changes.iter().enumerate() {
        match *c {
            Change::Write {
                path, text, before, ..
            } => {
                let mut prefix = PathBuf::new();
                if let Some(parent) = parent_of(path) {
                    for part in parent.components() {
                        prefix.push(part);
                        let d = prefix.to_string_lossy().into_owned();
                        if !created_dirs.contains(&d) && !matches!(ws.file_type(&d), Ok(Some(_))) {
                            created_dirs.push(d);
                        }
                    }
                }
                steps.push(Step::Write {
                    path: path.into(),
                    tmp: temp_path(path, id, i),
                    before: before.map(|b| sha256(b.as_bytes())),
                    after: sha256(text.as_bytes()),
                    backup: before.map(|_| i.to_string()),
                });
            }
            Change::Remove { path, before } => steps.push(Step::Remove {
                path: path.into(),
                before: before.map(|b| sha256(b.as_bytes())),
                backup: before.map(|_| i.to_string()),
            }),
        }
    }
    (steps, created_dirs)
}

/// The renames and removals of a journal's steps, then their directories' fsyncs.
fn rename_and_remove(
    ws: &Beneath,
    journal: &Journal,
    step: &mut dyn FnMut(&str) -> bool,
) -> Result<(), EditError> {
    let mut dirs: BTreeSet<Option<PathBuf>> = BTreeSet::new();
    for s in &journal.steps {
        if let Step::Write { path, tmp, .. } = s {
            ws.rename(tmp, path)
                .map_err(|e| io_err(path.as_str(), &e))?;
            dirs.insert(parent_of(path).map(Path::to_path_buf));
            if !step(&format!("renamed {tmp} to {path}")) {
                return Err(simulated());
            }
        }
    }
    sync_dirs(ws, &mut dirs, step)?;
    for s in &journal.steps {
        if let Step::Remove { path, .. } = s {
            ws.remove_file(path)
                .map_err(|e| io_err(path.as_str(), &e))?;
            dirs.insert(parent_of(path).map(Path::to_path_buf));
            if !step(&format!("removed {path}")) {
                return Err(simulated());
            }
        }
    }
    sync_dirs(ws, &mut dirs, step)
}

/// After a failure inside a commit (not a simulated kill): roll the apply back; the journal
/// stays when that fails too, for the next start.
fn undo(ws: &Beneath, state: &Dir, journal: &Journal, e: EditError) -> EditError {
    if is_simulated(&e) {
        return e;
    }
    let undone = roll(ws, state, journal, Direction::Back);
    if undone.errors.is_empty() {
        let _ = finish_journal(state, &journal.id);
        return e;
    }
    EditError::Io {
        path: journal.steps[0].path().into(),
        message: format!(
            "{e}; undoing the other files failed too ({}); kiln finishes or undoes the edit at its next start",
            undone.errors.join("; ")
        ),
    }
}

fn simulated() -> EditError {
    EditError::Io {
        path: String::new(),
        message: SIMULATED_KILL.into(),
    }
}

fn is_simulated(e: &EditError) -> bool {
    matches!(e, EditError::Io { message, .. } if message == SIMULATED_KILL)
}

fn sync_dirs(
    ws: &Beneath,
    dirs: &mut BTreeSet<Option<PathBuf>>,
    step: &mut dyn FnMut(&str) -> bool,
) -> Result<(), EditError> {
    for d in std::mem::take(dirs) {
        let shown = d
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| ".".into());
        ws.dir_at(d.as_deref())
            .and_then(|d| sync_dir(&d))
            .map_err(|e| io_err(shown.as_str(), &e))?;
        if !step(&format!("fsync'd directory {shown}")) {
            return Err(simulated());
        }
    }
    Ok(())
}

/// Write the journal to `NAME.part`, fsync it, rename it to `NAME`, fsync the directory.
fn write_journal(state: &Dir, name: &str, journal: &Journal) -> Result<(), EditError> {
    let path = format!("{JOURNAL_SHOWN}/{name}");
    let io = |e: std::io::Error| io_err(&path, &e);
    let part = format!("{name}.part");
    let text = serde_json::to_vec_pretty(journal)
        .map_err(std::io::Error::other)
        .map_err(io)?;
    let mut f = state
        .open_with(&part, OpenOptions::new().write(true).create_new(true))
        .map_err(io)?;
    f.write_all(&text).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    state.rename(&part, state, name).map_err(io)?;
    sync_dir(state).map_err(io)
}

/// Remove the journal, fsync its directory, then remove the backups.
fn finish_journal(state: &Dir, id: &str) -> Result<(), EditError> {
    let name = format!("apply-{id}.json");
    let path = format!("{JOURNAL_SHOWN}/{name}");
    match state.remove_file(&name) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&path, &e)),
    }
    sync_dir(state).map_err(|e| io_err(&path, &e))?;
    remove_backups(state, id);
    Ok(())
}

/// The file name of a step's backup in the journal directory.
fn backup_file(id: &str, backup: &str) -> String {
    format!("apply-{id}.{backup}")
}

/// The apply id of a backup file name (`apply-<id>.<step>`).
fn backup_owner(name: &str) -> Option<&str> {
    let (id, n) = name.strip_prefix("apply-")?.rsplit_once('.')?;
    (!n.is_empty() && n.chars().all(|c| c.is_ascii_digit())).then_some(id)
}

fn remove_backups(state: &Dir, id: &str) {
    let Ok(entries) = state.entries() else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if backup_owner(&name) == Some(id) {
            let _ = state.remove_file(&name);
        }
    }
}

/// A backup of every file that is overwritten or deleted, each fsync'd.
fn make_backups(
    ws: &Beneath,
    state: &Dir,
    journal: &Journal,
    changes: &[Change<'_>],
    step: &mut dyn FnMut(&str) -> bool,
) -> Result<(), EditError> {
    for (s, c) in journal.steps.iter().zip(changes) {
        let (Some(backup), Some(before)) = (s.backup(), change_before(c)) else {
            continue;
        };
        write_backup(
            ws,
            state,
            s.path(),
            &backup_file(&journal.id, backup),
            before,
        )?;
        if !step(&format!("backed up {}", s.path())) {
            return Err(simulated());
        }
    }
    Ok(())
}

/// New directories and temporary files, each fsync'd.
fn prepare(
    ws: &Beneath,
    journal: &Journal,
    changes: &[Change<'_>],
    step: &mut dyn FnMut(&str) -> bool,
) -> Result<(), EditError> {
    for d in &journal.created_dirs {
        match ws.create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(d.as_str(), &e)),
        }
        sync_parent(ws, d).map_err(|e| io_err(d.as_str(), &e))?;
    }
    for (s, c) in journal.steps.iter().zip(changes) {
        let (Step::Write { path, tmp, .. }, Change::Write { text, mode, .. }) = (s, c) else {
            continue;
        };
        let io = |e: std::io::Error| io_err(path.as_str(), &e);
        let mut f = ws.create_new(tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        if let Some(mode) = mode.or_else(|| ws.mode(path)) {
            set_mode(&f, mode);
        }
        f.sync_all().map_err(io)?;
        if !step(&format!("wrote and fsync'd {tmp}")) {
            return Err(simulated());
        }
    }
    Ok(())
}

/// Give the open file `f` the permission bits of `mode` (best effort: the content matters).
/// Only `mode & 0o777`: kiln never makes a set-user-ID, set-group-ID or sticky file, whatever
/// mode the file it replaces (or a backup of it) had.
fn set_mode(f: &impl std::os::fd::AsRawFd, mode: u32) {
    // SAFETY: fchmod on a valid open descriptor.
    unsafe {
        libc::fchmod(f.as_raw_fd(), (mode & 0o777) as libc::mode_t);
    }
}

fn change_before<'a>(c: &Change<'a>) -> Option<&'a str> {
    match *c {
        Change::Write { before, .. } | Change::Remove { before, .. } => before,
    }
}

/// Back up `path` as `name` in the journal directory: a hard link to the file (no copy; the rename leaves the
/// old content to the link), checked against the content the plan was made from, or a copy of
/// that content when the file cannot be linked. fsync'd either way.
fn write_backup(
    ws: &Beneath,
    bdir: &Dir,
    path: &str,
    name: &str,
    before: &str,
) -> Result<(), EditError> {
    let io = |e: std::io::Error| io_err(path, &e);
    if !NO_LINKS.load(Ordering::Relaxed) && ws.hard_link_to(path, bdir, name).is_ok() {
        let f = bdir.open(name).map_err(io)?;
        if bdir.read(name).map_err(io)? != before.as_bytes() {
            let _ = bdir.remove_file(name);
            return Err(EditError::Io {
                path: path.into(),
                message: "changed while the edit was being applied; nothing was written".into(),
            });
        }
        return f.sync_all().map_err(io);
    }
    let mut f = bdir
        .open_with(name, OpenOptions::new().write(true).create_new(true))
        .map_err(io)?;
    f.write_all(before.as_bytes()).map_err(io)?;
    if let Some(mode) = ws.mode(path) {
        set_mode(&f, mode);
    }
    f.sync_all().map_err(io)
}

/// Backups are copies, never hard links (for tests of the fallback).
static NO_LINKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What the workspace's `rel` holds now, never following a symbolic link at any component
/// and never reading anything but a regular file.
fn observe_ws(ws: &Beneath, rel: &str) -> Seen {
    match ws.file_type(rel) {
        Ok(None) => Seen::Absent,
        Ok(Some(t)) if t.is_file() => match ws.read(rel) {
            Ok(bytes) => Seen::File(sha256(&bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Seen::Absent,
            Err(_) => Seen::Other,
        },
        _ => Seen::Other,
    }
}

/// What `rel` in kiln's own directory `dir` holds now, never following a symbolic link at its
/// end and never reading anything but a regular file.
fn observe(dir: &Dir, rel: &str) -> Seen {
    match dir.symlink_metadata(rel) {
        Err(e) if e.kind() == ErrorKind::NotFound => Seen::Absent,
        Err(_) => Seen::Other,
        Ok(m) if !m.is_file() => Seen::Other,
        Ok(_) => match dir.read(rel) {
            Ok(bytes) => Seen::File(sha256(&bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Seen::Absent,
            Err(_) => Seen::Other,
        },
    }
}

/// Complete an unfinished journal in `direction`. Idempotent: a recovery that is itself
/// interrupted is finished by the next one (each action moves a file to the state the
/// direction wants, and the decision does not change on the way).
fn roll(ws: &Beneath, state: &Dir, j: &Journal, direction: Direction) -> Recovered {
    let mut out = Recovered {
        id: j.id.clone(),
        pid: j.pid,
        direction,
        files: Vec::new(),
        skipped: Vec::new(),
        errors: Vec::new(),
    };
    let mut dirs: BTreeSet<Option<PathBuf>> = BTreeSet::new();
    let order: Vec<&Step> = match direction {
        Direction::Forward => j.steps.iter().collect(),
        Direction::Back => j.steps.iter().rev().collect(),
    };
    for s in order {
        dirs.insert(parent_of(s.path()).map(Path::to_path_buf));
        match direction {
            Direction::Forward => roll_forward(ws, s, &mut out),
            Direction::Back => roll_back(ws, state, &j.id, s, &mut out),
        }
    }
    if direction == Direction::Back {
        for d in j.created_dirs.iter().rev() {
            if ws.remove_dir(d).is_ok() {
                dirs.insert(parent_of(d).map(Path::to_path_buf));
            }
        }
    }
    for d in dirs {
        let r = ws.dir_at(d.as_deref()).and_then(|d| sync_dir(&d));
        if let Err(e) = r
            && e.kind() != ErrorKind::NotFound
        {
            out.errors.push(format!("fsync: {e}"));
        }
    }
    // Files that were unchanged in a roll-back are not news.
    if direction == Direction::Back && out.files.iter().all(|f| f.outcome == "unchanged") {
        out.files.clear();
    }
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Record `outcome` for `path` among a recovery's files.
fn note(out: &mut Recovered, path: &str, outcome: &str) {
    out.files.push(FileOutcome {
        path: path.to_string(),
        outcome: outcome.into(),
    })
}

/// Record `path` as left alone: it changed after the interruption.
fn skip_changed(out: &mut Recovered, path: &str) {
    out.skipped.push(FileOutcome {
        path: path.to_string(),
        outcome: "changed after the interruption; left as it is".into(),
    });
}

/// Finish one step of a journal: the file gets its new content (or is deleted).
fn roll_forward(ws: &Beneath, s: &Step, out: &mut Recovered) {
    let path = s.path();
    let now = observe_ws(ws, path);
    match s {
        Step::Write {
            tmp, before, after, ..
        } => {
            if now.is(Some(after)) {
                remove_if_present(ws, tmp, &mut out.errors);
                note(out, path, "new content");
            } else if now.is(before.as_deref()) && observe_ws(ws, tmp).is(Some(after)) {
                match ws.rename(tmp, path) {
                    Ok(()) => note(out, path, "new content"),
                    Err(e) => out.errors.push(format!("{path}: {e}")),
                }
            } else {
                remove_if_present(ws, tmp, &mut out.errors);
                skip_changed(out, path);
            }
        }
        Step::Remove { before, .. } => {
            if now == Seen::Absent {
                note(out, path, "deleted");
            } else if now.is(before.as_deref()) {
                match ws.remove_file(path) {
                    Ok(()) => note(out, path, "deleted"),
                    Err(e) => out.errors.push(format!("{path}: {e}")),
                }
            } else {
                skip_changed(out, path);
            }
        }
    }
}

/// Undo one step of journal `id`: the file gets its old content back (from the backup in
/// `state`), or is removed when it was new.
fn roll_back(ws: &Beneath, state: &Dir, id: &str, s: &Step, out: &mut Recovered) {
    let path = s.path();
    let now = observe_ws(ws, path);
    match s {
        Step::Write {
            tmp, before, after, ..
        } => {
            remove_if_present(ws, tmp, &mut out.errors);
            if now.is(before.as_deref()) {
                note(out, path, "unchanged");
            } else if now.is(Some(after)) {
                match before {
                    None => match ws.remove_file(path) {
                        Ok(()) => note(out, path, "removed"),
                        Err(e) => out.errors.push(format!("{path}: {e}")),
                    },
                    Some(h) => restore(ws, state, id, s, h, out),
                }
            } else {
                skip_changed(out, path);
            }
        }
        Step::Remove { before, .. } => {
            if now.is(before.as_deref()) {
                note(out, path, "unchanged");
            } else if now == Seen::Absent
                && let Some(h) = before
            {
                restore(ws, state, id, s, h, out);
            } else {
                skip_changed(out, path);
            }
        }
    }
}

fn remove_if_present(ws: &Beneath, rel: &str, errors: &mut Vec<String>) {
    match ws.remove_file(rel) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => errors.push(format!("{rel}: {e}")),
    }
}

/// Put a step's backup back in place (checked by hash), by rename (or a copy through a
/// fsync'd temporary file when the backup lives on another file system).
fn restore(ws: &Beneath, bdir: &Dir, id: &str, s: &Step, hash: &str, out: &mut Recovered) {
    let path = s.path().to_string();
    let backup = &backup_file(id, s.backup().unwrap_or_default());
    if s.backup().is_none() || !observe(bdir, backup).is(Some(hash)) {
        out.skipped.push(FileOutcome {
            path,
            outcome: "its backup is missing or damaged, so it cannot be restored; left as it is"
                .into(),
        });
        return;
    };
    // A backup hard-linked to the file it saved has that file's mode: what is put back never
    // carries a set-user-ID, set-group-ID or sticky bit.
    if let Ok(f) = bdir.open(backup)
        && let Ok(meta) = f.metadata()
    {
        use cap_std::fs::PermissionsExt;
        if meta.permissions().mode() & 0o7000 != 0 {
            set_mode(&f, meta.permissions().mode());
        }
    }
    // The backup is renamed into place (parent directories made again, never through a
    // link), or copied through a fsync'd temporary file when it lives on another file system.
    let r = match ws.rename_from(bdir, backup, &path) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => (|| {
            let bytes = bdir.read(backup)?;
            let tmp = temp_path(&path, "restore", 0);
            let _ = ws.remove_file(&tmp);
            let mut f = ws.create_new(&tmp)?;
            f.write_all(&bytes)?;
            if let Ok(meta) = bdir.metadata(backup) {
                use cap_std::fs::PermissionsExt;
                set_mode(&f, meta.permissions().mode());
            }
            f.sync_all()?;
            ws.rename(&tmp, &path)
        })(),
        r => r,
    };
    match r {
        Ok(()) => out.files.push(FileOutcome {
            path,
            outcome: "restored".into(),
        }),
        Err(e) => out.errors.push(format!("{path}: {e}")),
    }
}

/// Why a journal file is treated as damaged (renamed `.damaged`, its apply left alone).
#[derive(Debug, thiserror::Error)]
enum Damaged {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Unreadable(#[from] std::io::Error),
    /// The file is not a journal in JSON.
    #[error("it is not a journal: {0}")]
    NotJson(#[from] serde_json::Error),
    /// A journal whose content kiln would not replay: what is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// Read the journal `name` of the apply `id` and check it ([`validate`]).
fn read_journal(state: &Dir, name: &str, id: &str) -> Result<Journal, Damaged> {
    let j: Journal = serde_json::from_slice(&state.read(name)?)?;
    validate(&j)?;
    if j.id != id {
        return Err(Damaged::Invalid(format!(
            "its id {} does not match its name",
            j.id
        )));
    }
    Ok(j)
}

/// Check a journal read from disk: paths inside the workspace and not protected, temporary
/// files beside their files, backups plain names.
fn validate(j: &Journal) -> Result<(), Damaged> {
    if j.kiln_journal != VERSION {
        return Err(Damaged::Invalid(format!(
            "version {} is not {VERSION}",
            j.kiln_journal
        )));
    }
    let protected = crate::path::Protected::new(&[]);
    let ok_path = |p: &str| {
        crate::path::check_relative(p)
            .map_err(|why| Damaged::Invalid(format!("path {p} {why}")))
            .and_then(|()| match protected.why(p) {
                Some(why) => Err(Damaged::Invalid(format!("path {p} is protected ({why})"))),
                None => Ok(()),
            })
    };
    for d in &j.created_dirs {
        ok_path(d)?;
    }
    for s in &j.steps {
        ok_path(s.path())?;
        if let Some(b) = s.backup()
            && (b.is_empty() || !b.chars().all(|c| c.is_ascii_digit()))
        {
            return Err(Damaged::Invalid(format!(
                "backup name {b} is not a step number"
            )));
        }
        if let Step::Write { path, tmp, .. } = s {
            ok_path(tmp)?;
            let name = Path::new(tmp)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !is_temp_name(&name) || parent_of(tmp) != parent_of(path) {
                return Err(Damaged::Invalid(format!(
                    "{tmp} is not a temporary file beside {path}"
                )));
            }
        }
    }
    Ok(())
}

/// Finish or undo every unfinished apply of the workspace `root` (its journals in kiln's state
/// directory), report journals left in the workspace's own `.kiln/journal/` without replaying
/// them, and remove stale temporary files. Call it at the start of every command that reads or
/// writes workspace files; it creates nothing when there is nothing to recover, and waits for
/// an apply running in another kiln process to end rather than touching it.
pub fn recover_workspace(root: &Path) -> Result<RecoveryReport, EditError> {
    let ws = Beneath::open(root).map_err(|source| EditError::Workspace {
        path: root.to_path_buf(),
        source,
    })?;
    let ignored = workspace_journals(&ws);
    let temps = !find_temps(&ws, None).is_empty();
    let state = journal_dir(root, temps)?;
    let mut report = recover(&ws, state.as_ref())?;
    report.ignored = ignored;
    Ok(report)
}

/// Journals in the workspace's own `.kiln/journal/` (an older kiln's, or planted by the
/// repository): named, never read.
fn workspace_journals(ws: &Beneath) -> Vec<String> {
    let Ok(dir) = ws.dir_at(Some(Path::new(".kiln/journal"))) else {
        return Vec::new();
    };
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("apply-") && n.ends_with(".json"))
        .map(|n| format!(".kiln/journal/{n}"))
        .collect();
    out.sort();
    out
}

/// [`recover_workspace`] for an open workspace and its journal directory (`None`: there is
/// none, so nothing to recover but stale temporary files, which wait for one).
pub(super) fn recover(ws: &Beneath, state: Option<&Dir>) -> Result<RecoveryReport, EditError> {
    let _commit = COMMITS.read().unwrap_or_else(|e| e.into_inner());
    let Some(state) = state else {
        return Ok(RecoveryReport::default());
    };
    let _lock = lock(state)?;
    recover_locked(ws, state)
}

/// Recovery under the lock: journals, partial journals, orphaned backups, then stale
/// temporary files in the workspace root and in every directory an unfinished apply touched.
fn recover_locked(ws: &Beneath, state: &Dir) -> Result<RecoveryReport, EditError> {
    let mut report = RecoveryReport::default();
    let jpath = JOURNAL_SHOWN;
    let mut names: Vec<String> = state
        .entries()
        .map_err(|e| io_err(jpath, &e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("apply-"))
        .collect();
    names.sort();
    let mut dirs: BTreeSet<Option<PathBuf>> = BTreeSet::new();
    dirs.insert(None);
    for name in &names {
        if name.ends_with(".json.part") {
            // Killed while writing its journal: nothing of that apply exists yet but its
            // backups (removed below).
            let _ = state.remove_file(name);
            continue;
        }
        let Some(id) = name
            .strip_prefix("apply-")
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let parsed = read_journal(state, name, id);
        let j = match parsed {
            Ok(j) => j,
            Err(_) => {
                let _ = state.rename(name, state, format!("{name}.damaged"));
                report.damaged.push(name.clone());
                continue;
            }
        };
        let done = replay(ws, state, &j);
        for s in &j.steps {
            dirs.insert(parent_of(s.path()).map(Path::to_path_buf));
        }
        if done.errors.is_empty() {
            finish_journal(state, id)?;
        }
        report.recovered.push(done);
    }
    // Backups whose journal is gone (killed before the journal was complete, or after it
    // was removed); a damaged journal keeps its backups for the user.
    for name in &names {
        if let Some(id) = backup_owner(name)
            && !state.exists(format!("apply-{id}.json"))
            && !state.exists(format!("apply-{id}.json.damaged"))
        {
            let _ = state.remove_file(name);
        }
    }
    for d in dirs {
        for t in find_temps(ws, d.as_deref()) {
            match ws.remove_file(&t) {
                Ok(()) => report.removed_temps.push(t),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(t, &e)),
            }
        }
    }
    Ok(report)
}

/// Finish or undo one unfinished apply, whichever the state of its files allows.
fn replay(ws: &Beneath, state: &Dir, j: &Journal) -> Recovered {
    let target: Vec<Seen> = j.steps.iter().map(|s| observe_ws(ws, s.path())).collect();
    let temp: Vec<Seen> = j
        .steps
        .iter()
        .map(|s| match s {
            Step::Write { tmp, .. } => observe_ws(ws, tmp),
            Step::Remove { .. } => Seen::Absent,
        })
        .collect();
    let direction = decide(&j.steps, &target, &temp);
    roll(ws, state, j, direction)
}

/// Regular files named `.NAME.kiln-tmp-*` directly in `dir` (workspace-relative; `None` is
/// the root).
fn find_temps(ws: &Beneath, dir: Option<&Path>) -> Vec<String> {
    let entries = ws.dir_at(dir).and_then(|d| d.entries());
    let Ok(entries) = entries else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_temp_name(n))
        .map(|n| match dir {
            Some(d) => d.join(n).to_string_lossy().into_owned(),
            None => n,
        })
        .collect();
    out.sort();
    out
}

/// For a command without a loop to cancel (`kiln edit apply`): on Ctrl-C, exit with status
/// 130 as the default handler would, but only once no commit is running (an apply that has
/// started its commit finishes first). Must be called inside the tokio runtime.
pub fn exit_on_interrupt() {
    // Registered now (not at the task's first poll), so no Ctrl-C slips through in between.
    let Ok(mut interrupt) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
    else {
        return;
    };
    tokio::spawn(async move {
        if interrupt.recv().await.is_some() {
            let _wait = COMMITS.write().unwrap_or_else(|e| e.into_inner());
            eprintln!("interrupted");
            std::process::exit(130);
        }
    });
}

/// The journal directory of the workspace at `root` in kiln's state directory
/// ([`crate::state_dir`]); `None` when it does not exist and `create` is false.
pub(super) fn journal_dir(root: &Path, create: bool) -> Result<Option<Dir>, EditError> {
    let state_err = |e: crate::state_dir::StateDirError| EditError::Io {
        path: "kiln's state directory".into(),
        message: e.to_string(),
    };
    let state = match crate::state_dir::WorkspaceState::open(root, create) {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        // Nowhere to look, so nothing kiln wrote there to recover.
        Err(crate::state_dir::StateDirError::NoHome) if !create => return Ok(None),
        Err(e) => return Err(state_err(e)),
    };
    state.subdir("journal", create).map_err(state_err)
}

#[cfg(test)]
mod tests;
