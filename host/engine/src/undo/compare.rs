//! Comparing the workspace with what a run found at its start: the changes a checkpoint
//! records, and what `kiln undo` of a run that did not finish puts back. Read-only.

use super::backup::{self, Cached, Change, RunRecord};
use super::scan::{self, Listing, Now, StatKey};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A file whose modification or status change time is this close to a snapshot (or later)
/// may change again without its stat showing it (filesystems keep times at a granularity of
/// a clock tick, a second on some): its stat is never trusted to say it is unchanged, as git
/// does with its "racy" index entries.
pub const RACY_NS: i64 = 2_000_000_000;

/// What the workspace held at a run's start: path → stat key and hash (`None`: not backed
/// up, too large or unreadable).
pub type Start = BTreeMap<String, (StatKey, Option<String>)>;

/// A stat taken at or after `racy_ns` (ns), which cannot vouch for the content.
pub fn racy(stat: &StatKey, racy_ns: i64) -> bool {
    stat.mtime_ns.max(stat.ctime_ns) >= racy_ns
}

/// Paths never the run's changes: kiln's own output files, files not backed up, the links
/// (FIFOs, ...) there were at its start.
pub fn skipped(rec: &RunRecord) -> BTreeSet<String> {
    rec.own_output
        .iter()
        .chain(&rec.not_covered)
        .chain(&rec.others)
        .cloned()
        .collect()
}

/// What undo records as the content of the regular file `rel`: its SHA-256, or for a file
/// over [`scan::MAX_FILE`] (never read) [`backup::TOO_LARGE`] with its size and
/// modification time.
pub fn content_id(root: &Path, rel: &str) -> std::io::Result<String> {
    match scan::read(root, rel) {
        Ok(bytes) => Ok(scan::hash(&bytes)),
        Err(e) => scan::too_large(&e).map(large_id).ok_or(e),
    }
}

/// The [`content_id`] of a file too large to read.
pub fn large_id(t: scan::TooLarge) -> String {
    format!("{}{}:{}", backup::TOO_LARGE, t.size, t.mtime_ns)
}

/// Whether `rel` is a directory on the way to a file of `start`: a link or FIFO there now
/// stands where that directory was, and is not the run's creation.
pub fn holds_start(start: &Start, rel: &str) -> bool {
    let below = format!("{rel}/");
    start
        .range(below.clone()..)
        .next()
        .is_some_and(|(p, _)| p.starts_with(&below))
}

/// Every difference between the workspace (walked: `listing`) and `start`. A file whose
/// stat is as at the start is unchanged, unless its stat is racy (see [`RACY_NS`]).
pub fn compare_all(
    root: &Path,
    start: &Start,
    skip: &BTreeSet<String>,
    racy_ns: i64,
    listing: &Listing,
) -> BTreeMap<String, Change> {
    let mut out = BTreeMap::new();
    for (rel, st) in start {
        let now = match listing.files.get(rel) {
            Some(s) => Now::File(*s),
            None => scan::now(root, rel),
        };
        if let Some(c) = changed_start(root, rel, st, now, racy_ns, true) {
            out.insert(rel.clone(), c);
        }
    }
    for rel in listing.files.keys() {
        if !start.contains_key(rel)
            && !skip.contains(rel)
            && let Some(c) = created(root, rel)
        {
            out.insert(rel.clone(), c);
        }
    }
    for rel in listing.others.keys() {
        if !start.contains_key(rel) && !skip.contains(rel) && !holds_start(start, rel) {
            out.insert(rel.clone(), created_other(rel));
        }
    }
    out
}

/// The change of `rel`, a file at the start (stat key, hash), now `now`; `None` when its
/// content is as at the start (or it was not backed up: never undone). With `trust_stat`,
/// an unchanged stat that is not racy means unchanged content.
pub fn changed_start(
    root: &Path,
    rel: &str,
    (stat, before): &(StatKey, Option<String>),
    now: Now,
    racy_ns: i64,
    trust_stat: bool,
) -> Option<Change> {
    let before = before.as_ref()?;
    let after = match now {
        Now::File(s) => {
            if trust_stat && s == *stat && !racy(stat, racy_ns) {
                return None;
            }
            let h = content_id(root, rel).ok()?;
            if h == *before {
                return None;
            }
            Some(h)
        }
        Now::Absent => None,
        Now::Other(_) | Now::Blocked { .. } => Some(backup::NOT_REGULAR.to_string()),
    };
    Some(change(rel, Some(before.clone()), after, stat))
}

/// The change of `rel`, a file the run created (`None`: unreadable now). A file over
/// [`scan::MAX_FILE`] is not read (nor hashed): undo deletes it all the same.
pub fn created(root: &Path, rel: &str) -> Option<Change> {
    Some(Change {
        path: rel.to_string(),
        before: None,
        after: Some(content_id(root, rel).ok()?),
        mode: None,
    })
}

/// The change of `rel`, a symbolic link, FIFO, socket or device node the run created.
pub fn created_other(rel: &str) -> Change {
    Change {
        path: rel.to_string(),
        before: None,
        after: Some(backup::NOT_REGULAR.to_string()),
        mode: None,
    }
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

/// Every difference between the workspace at `root` and what run `id` found at its start
/// (its start-of-run list), by a walk: what a run that did not finish changed, whether it
/// recorded it or was killed first.
pub fn since_start(root: &Path, rec: &RunRecord, start: &BTreeMap<String, Cached>) -> Vec<Change> {
    let start: Start = start
        .iter()
        .map(|(p, c)| (p.clone(), (c.stat, Some(c.hash.clone()))))
        .collect();
    let racy_ns = rec.started_ms * 1_000_000 - RACY_NS;
    let mut listing = scan::walk(root);
    super::rules::at_start(root, &mut listing, rec.ignore_rules.as_ref(), racy_ns);
    compare_all(root, &start, &skipped(rec), racy_ns, &listing)
        .into_values()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file rewritten within the same clock tick keeps its stat (same size, same times):
    /// only a racy stat, one not older than the snapshot, is read again.
    #[test]
    fn a_racy_stat_is_never_taken_for_unchanged_content() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        let listing = scan::walk(dir.path());
        let stat = listing.files["a.txt"];
        // What the snapshot saw: the same stat, other content ("two" rewritten to "one").
        let start: Start =
            BTreeMap::from([("a.txt".to_string(), (stat, Some(scan::hash(b"two\n"))))]);
        let skip = BTreeSet::new();
        let newest = stat.mtime_ns.max(stat.ctime_ns);
        let racy_now = compare_all(dir.path(), &start, &skip, newest, &listing);
        assert_eq!(racy_now["a.txt"].after, Some(scan::hash(b"one\n")));
        let settled = compare_all(dir.path(), &start, &skip, newest + 1, &listing);
        assert!(
            settled.is_empty(),
            "an older stat vouches for the content: {settled:?}"
        );
    }
}
