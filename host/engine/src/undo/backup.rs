//! Undo's files in kiln's state directory, outside the workspace (`undo/` beside the edit
//! journal, see [`crate::state_dir`]): the pre-images, content-addressed (`objects/<sha256>`,
//! shared by every run, so a file unchanged between runs is stored once; a file git's
//! objects hold is not copied but named in `blobs.json`, SHA-256 → git's blob id, see
//! [`super::git`]), the stat cache
//! (`index.json`: path → stat key and hash, so a file whose stat did not change is not read
//! again) and one record per run (`runs/<id>.json`). Every file is written whole (temporary
//! file, fsync, rename), mode 0600 below 0700 directories; nothing here touches a workspace.

use super::error::UndoError;
use super::scan::StatKey;
use cap_std::fs::{Dir, OpenOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

/// The map of pre-images that are git's objects, in the undo directory.
pub const BLOBS: &str = "blobs.json";

/// The record format version.
const VERSION: u32 = 1;

/// What `after` holds when the path became something other than a regular file (or the run
/// created a link, a FIFO, a socket or a device node there).
pub const NOT_REGULAR: &str = "not-a-regular-file";

/// How `after` begins for a file over [`super::scan::MAX_FILE`], never read: `too-large:`
/// then its size and modification time (`too-large:21474836480:1700000000000000000`).
pub const TOO_LARGE: &str = "too-large:";

/// One path a run changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Workspace-relative path.
    pub path: String,
    /// SHA-256 of its content before the run (`None`: it did not exist; the run created it).
    pub before: Option<String>,
    /// SHA-256 of its content when the run last looked (`None`: the run deleted it;
    /// [`NOT_REGULAR`]: it is no longer a regular file; [`TOO_LARGE`]: too large to read).
    pub after: Option<String>,
    /// Its permission bits before the run (`& 0o777`), which undo gives it back; `None` when
    /// it did not exist, or in a record written before kiln kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// What undo keeps about one run: `runs/<id>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Format version.
    pub kiln_undo: u32,
    /// The run's id in the store.
    pub id: i64,
    /// When the run began (ms since the epoch).
    pub started_ms: i64,
    /// When this record was last brought up to date.
    pub updated_ms: i64,
    /// The run finished (false: it is running, or it was killed).
    pub finished: bool,
    /// The process that ran it.
    #[serde(default)]
    pub pid: u32,
    /// Files that were not backed up (larger than the limit) or `...` when the walk stopped
    /// at its file limit: a change to them cannot be undone.
    pub not_covered: Vec<String>,
    /// Every path whose content differs from before the run, as of `updated_ms`.
    pub changes: Vec<Change>,
    /// Files that were kiln's own standard output or error (redirected into the workspace):
    /// what kiln wrote there is not the run's change, so they are neither recorded nor undone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_output: Vec<String>,
    /// The symbolic links, FIFOs, sockets and device nodes the workspace held at the run's
    /// start: never taken for the run's creations (undo deletes those), never changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
    /// When the run was undone, if it was.
    pub undone_ms: Option<i64>,
}

impl RunRecord {
    /// A new record for run `id`.
    pub fn new(id: i64) -> RunRecord {
        let now = crate::clock::now_ms();
        RunRecord {
            kiln_undo: VERSION,
            id,
            started_ms: now,
            updated_ms: now,
            finished: false,
            pid: std::process::id(),
            not_covered: Vec::new(),
            changes: Vec::new(),
            own_output: Vec::new(),
            others: Vec::new(),
            undone_ms: None,
        }
    }
}

/// One cached stat key and hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cached {
    /// The stat key when the file was hashed.
    pub stat: StatKey,
    /// Its hash then.
    pub hash: String,
}

/// A pending snapshot: the record and start-of-run list of a run that had no id yet.
pub type Pending = (RunRecord, BTreeMap<String, Cached>);

/// `undo/` of one workspace's state directory, open.
pub struct Backups {
    dir: Dir,
    path: PathBuf,
}

impl Backups {
    /// The undo directory of the workspace at `root`; `Ok(None)` when it does not exist and
    /// `create` is false.
    pub fn open(root: &std::path::Path, create: bool) -> Result<Option<Backups>, UndoError> {
        let state = match crate::state_dir::WorkspaceState::open(root, create) {
            Ok(Some(s)) => s,
            Ok(None) | Err(crate::state_dir::StateDirError::NoHome) if !create => return Ok(None),
            Ok(None) => return Ok(None),
            Err(e) => return Err(UndoError::State(e)),
        };
        let path = state.path().join("undo");
        let Some(dir) = state.subdir("undo", create)? else {
            return Ok(None);
        };
        let b = Backups { dir, path };
        if create {
            for sub in ["objects", "runs"] {
                b.mkdir(sub)?;
            }
        }
        Ok(Some(b))
    }

    fn io(&self, rel: &str) -> impl Fn(std::io::Error) -> UndoError + '_ {
        let path = self.path.join(rel);
        move |source| UndoError::Io {
            path: path.clone(),
            source,
        }
    }

    fn mkdir(&self, rel: &str) -> Result<(), UndoError> {
        use cap_std::fs::DirBuilderExt;
        let mut b = cap_std::fs::DirBuilder::new();
        b.mode(0o700);
        match self.dir.create_dir_with(rel, &b) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.io(rel)(e)),
        }
    }

    /// Write `rel` whole: a temporary file, fsync'd, renamed into place.
    fn put(&self, rel: &str, bytes: &[u8]) -> Result<(), UndoError> {
        self.put_with(rel, bytes, true)
    }

    /// [`Backups::put`], the fsync left to a later [`Backups::sync`] when `!sync`.
    fn put_with(&self, rel: &str, bytes: &[u8], sync: bool) -> Result<(), UndoError> {
        use cap_std::fs::OpenOptionsExt;
        let tmp = format!("{rel}.tmp-{}", std::process::id());
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true).mode(0o600);
        let mut f = self.dir.open_with(&tmp, &opts).map_err(self.io(&tmp))?;
        f.write_all(bytes).map_err(self.io(&tmp))?;
        if sync {
            f.sync_all().map_err(self.io(&tmp))?;
        }
        drop(f);
        self.dir.rename(&tmp, &self.dir, rel).map_err(self.io(rel))
    }

    /// Whether the pre-image `hash` is stored.
    pub fn has_object(&self, hash: &str) -> bool {
        self.dir.is_file(format!("objects/{hash}"))
    }

    /// Store the pre-image `bytes` under its `hash`, not yet fsync'd: one [`Backups::sync`]
    /// after a snapshot makes them all durable at once (one fsync per file made the first
    /// snapshot of a 20,000-file workspace several times slower).
    pub fn put_object(&self, hash: &str, bytes: &[u8]) -> Result<(), UndoError> {
        self.put_with(&format!("objects/{hash}"), bytes, false)
    }

    /// Make everything written so far durable: `syncfs` of the file system holding the
    /// undo directory.
    pub fn sync(&self) -> Result<(), UndoError> {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs on a valid directory descriptor we hold.
        if unsafe { libc::syncfs(self.dir.as_raw_fd()) } != 0 {
            return Err(self.io("objects")(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The pre-image `hash` (never more than [`super::scan::MAX_FILE`] bytes: kiln stores
    /// none larger).
    pub fn object(&self, hash: &str) -> Result<Vec<u8>, UndoError> {
        use std::io::Read;
        let rel = format!("objects/{hash}");
        let f = self.dir.open(&rel).map_err(self.io(&rel))?;
        let mut out = Vec::new();
        f.take(super::scan::MAX_FILE + 1)
            .read_to_end(&mut out)
            .map_err(self.io(&rel))?;
        if out.len() as u64 > super::scan::MAX_FILE {
            let e = std::io::Error::other("larger than any pre-image kiln keeps");
            return Err(self.io(&rel)(e));
        }
        Ok(out)
    }

    /// Where the pre-image `hash` lies (for messages).
    pub fn object_path(&self, hash: &str) -> PathBuf {
        self.path.join("objects").join(hash)
    }

    /// The pre-images that are git's objects: SHA-256 of the content → git's blob id of it
    /// (empty when missing or unreadable).
    pub fn blobs(&self) -> BTreeMap<String, String> {
        self.dir
            .read(BLOBS)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Replace the map of pre-images that are git's objects.
    pub fn save_blobs(&self, blobs: &BTreeMap<String, String>) -> Result<(), UndoError> {
        let bytes = serde_json::to_vec(blobs).map_err(|e| self.io(BLOBS)(e.into()))?;
        self.put(BLOBS, &bytes)
    }

    /// The stat cache (empty when missing or unreadable).
    pub fn index(&self) -> BTreeMap<String, Cached> {
        self.dir
            .read("index.json")
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Replace the stat cache.
    pub fn save_index(&self, index: &BTreeMap<String, Cached>) -> Result<(), UndoError> {
        let bytes = serde_json::to_vec(index).map_err(|e| self.io("index.json")(e.into()))?;
        self.put("index.json", &bytes)
    }

    /// The record of run `id`, if there is one.
    pub fn record(&self, id: i64) -> Result<Option<RunRecord>, UndoError> {
        let rel = format!("runs/{id}.json");
        match self.dir.read(&rel) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| self.io(&rel)(e.into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(&rel)(e)),
        }
    }

    /// Write the record of a run.
    pub fn save_record(&self, rec: &RunRecord) -> Result<(), UndoError> {
        let rel = format!("runs/{}.json", rec.id);
        let bytes = serde_json::to_vec_pretty(rec).map_err(|e| self.io(&rel)(e.into()))?;
        self.put(&rel, &bytes)
    }

    /// Keep the workspace's files as run `id` found them (path → stat key and hash), to tell
    /// later which changes the run cannot account for.
    pub fn save_start(&self, id: i64, files: &BTreeMap<String, Cached>) -> Result<(), UndoError> {
        let rel = format!("runs/{id}.start.json");
        let bytes = serde_json::to_vec(files).map_err(|e| self.io(&rel)(e.into()))?;
        self.put(&rel, &bytes)
    }

    /// The files as run `id` found them, if kept.
    pub fn start_of(&self, id: i64) -> Option<BTreeMap<String, Cached>> {
        let b = self.dir.read(format!("runs/{id}.start.json")).ok()?;
        serde_json::from_slice(&b).ok()
    }

    /// Save the snapshot of a run that has no id yet (a fix's first check runs before its row
    /// in the store exists), as `runs/pending-<pid>.json` and `.start.json`: if the process
    /// dies before the run gets its id, `kiln undo` still has what it found.
    pub fn save_pending(
        &self,
        rec: &RunRecord,
        files: &BTreeMap<String, Cached>,
    ) -> Result<(), UndoError> {
        // Not fsync'd: they must outlive the process (a kill), not the machine, and most
        // live for the length of one check.
        let rel = format!("runs/pending-{}.start.json", rec.pid);
        let bytes = serde_json::to_vec(files).map_err(|e| self.io(&rel)(e.into()))?;
        self.put_with(&rel, &bytes, false)?;
        let rel = format!("runs/pending-{}.json", rec.pid);
        let bytes = serde_json::to_vec(rec).map_err(|e| self.io(&rel)(e.into()))?;
        self.put_with(&rel, &bytes, false)
    }

    /// Remove the snapshot [`Backups::save_pending`] kept for process `pid`.
    pub fn remove_pending(&self, pid: u32) {
        for rel in [
            format!("runs/pending-{pid}.json"),
            format!("runs/pending-{pid}.start.json"),
        ] {
            // Already gone is as good.
            let _ = self.dir.remove_file(rel);
        }
    }

    /// Make the pending start-of-run list of process `pid` run `id`'s (a rename, not a copy).
    /// False when there is none.
    pub fn adopt_pending(&self, pid: u32, id: i64) -> bool {
        self.dir
            .rename(
                format!("runs/pending-{pid}.start.json"),
                &self.dir,
                format!("runs/{id}.start.json"),
            )
            .is_ok()
    }

    /// Every pending snapshot (record and start-of-run list) still kept.
    pub fn pending(&self) -> Vec<Pending> {
        let mut out = Vec::new();
        for e in self.dir.read_dir("runs").into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = n
                .strip_prefix("pending-")
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let rec: Option<RunRecord> = self
                .dir
                .read(format!("runs/{n}"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let start: Option<BTreeMap<String, Cached>> = self
                .dir
                .read(format!("runs/pending-{pid}.start.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if let (Some(rec), Some(start)) = (rec, start) {
                out.push((rec, start));
            }
        }
        out
    }

    /// The ids of every recorded run, newest (highest) first.
    pub fn runs(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .dir
            .read_dir("runs")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_suffix(".json")?.parse().ok() // `N.start.json` does not parse
            })
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    }
}
