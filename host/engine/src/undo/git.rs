//! Pre-images from git's objects: in a git repository, a tracked file whose content is what
//! git's index names is not copied into kiln's state directory; the undo directory's
//! `blobs.json` maps its SHA-256 to the blob ([`super::backup::Backups::blobs`], one map for
//! every run, as the stored copies are shared) and undo reads the content back from git
//! ([`read_blobs`]), checking its SHA-256 before writing it.
//!
//! At a run's start kiln reads each file it has not seen unchanged before anyway (to hash it),
//! so it computes git's blob id of the bytes it read ([`blob_id`]) and compares it with the
//! index's entry for that path (`git ls-files -s -z`, which only reads `.git/index`): equal,
//! git's object store holds those exact bytes. No `stat` is trusted for it (no racy entries),
//! and no filter, `core.fsmonitor` hook or other program git could start on the repository's
//! say is involved.
//!
//! git is run without a shell, with an environment of its own (no inherited `GIT_DIR`,
//! `GIT_INDEX_FILE`, ...; no system or global configuration), with `core.fsmonitor`, hooks,
//! every transport and lazy fetching of a partial clone's missing objects turned off, so a
//! hostile `.git/config` cannot make it run anything or reach the network. `cat-file blob`
//! applies no filter.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// git, set up as the module's header says, run in `dir`.
fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", kiln_env::env().path().unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_LAZY_FETCH", "1")
        // A list of allowed transports that names none: it overrides every
        // `protocol.<name>.allow` the repository's config may set.
        .env("GIT_ALLOW_PROTOCOL", "none")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("LC_ALL", "C")
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "protocol.allow=never",
            "-c",
            "core.pager=cat",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The blob ids git's index holds for the regular files under `root` (paths relative to
/// `root`, `/`-separated; merge stages, links and submodules left out). Empty when `root` is
/// not in a git repository or git cannot answer: every file is then copied, as before.
pub fn index(root: &Path) -> HashMap<String, String> {
    let Ok(out) = git(root).args(["ls-files", "-s", "-z"]).output() else {
        return HashMap::new();
    };
    if !out.status.success() {
        return HashMap::new();
    }
    let mut map = HashMap::new();
    for entry in out.stdout.split(|b| *b == 0) {
        // `<mode> <object> <stage>\t<path>`
        let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let (meta, path) = (&entry[..tab], &entry[tab + 1..]);
        let Ok(meta) = std::str::from_utf8(meta) else {
            continue;
        };
        let mut parts = meta.split(' ');
        let (Some(mode), Some(oid), Some("0")) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if !matches!(mode, "100644" | "100755") || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        map.insert(path.to_string(), oid.to_string());
    }
    map
}

/// git's id of a blob holding `bytes`, in the repository's hash (a 40-digit id: SHA-1, a
/// 64-digit one: SHA-256); `None` for another length.
pub fn blob_id(bytes: &[u8], oid_len: usize) -> Option<String> {
    let header = format!("blob {}\0", bytes.len());
    match oid_len {
        40 => {
            use sha1::Digest;
            let mut h = sha1::Sha1::new();
            h.update(header.as_bytes());
            h.update(bytes);
            Some(hex::encode(h.finalize()))
        }
        64 => {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            h.update(header.as_bytes());
            h.update(bytes);
            Some(hex::encode(h.finalize()))
        }
        _ => None,
    }
}

/// The content of each blob of `wanted` (SHA-256 of the content → blob id), read with one
/// `git cat-file --batch` in `root`, each checked against its SHA-256; the key is the
/// SHA-256. A blob git no longer has (a `git gc --prune=now` after the index moved on), or
/// whose content is not what was recorded, is an error naming it.
pub fn read_blobs(
    root: &Path,
    wanted: &BTreeMap<String, String>,
) -> HashMap<String, Result<Vec<u8>, String>> {
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return out;
    }
    let oids: BTreeSet<&str> = wanted.values().map(String::as_str).collect();
    let mut found = match cat_batch(root, &oids) {
        Ok(f) => f,
        Err(why) => {
            for sha in wanted.keys() {
                out.insert(sha.clone(), Err(why.clone()));
            }
            return out;
        }
    };
    for (sha, oid) in wanted {
        let got = match found.remove(oid) {
            Some(bytes) if super::scan::hash(&bytes) == *sha => Ok(bytes),
            Some(_) => Err(format!(
                "git's object {oid} does not hold its content from before the run"
            )),
            None => Err(format!(
                "its content before the run was git's object {oid}, which this repository no longer has (pruned by git gc?)"
            )),
        };
        out.insert(sha.clone(), got);
    }
    out
}

/// `git cat-file --batch` of `oids`: the blobs found (over [`super::scan::MAX_FILE`] or not
/// a blob: left out).
fn cat_batch(root: &Path, oids: &BTreeSet<&str>) -> Result<HashMap<String, Vec<u8>>, String> {
    let mut child = git(root)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git to read its content from before the run: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let request: String = oids.iter().map(|o| format!("{o}\n")).collect();
    // Written from a thread while the answers are read: neither pipe can fill up and stall.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(request.as_bytes());
    });
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut found = HashMap::new();
    let mut line = String::new();
    let mut failed = None;
    for _ in 0..oids.len() {
        line.clear();
        if stdout.read_line(&mut line).unwrap_or(0) == 0 {
            failed = Some("git stopped answering".to_string());
            break;
        }
        // `<oid> blob <size>` then the content and a newline, or `<oid> missing`.
        let parts: Vec<&str> = line.trim_end().split(' ').collect();
        let [oid, kind, size] = parts[..] else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            failed = Some(format!("git answered {line:?}"));
            break;
        };
        let keep = kind == "blob" && size <= super::scan::MAX_FILE;
        let mut bytes = Vec::new();
        let read = if keep {
            (&mut stdout).take(size + 1).read_to_end(&mut bytes).ok()
        } else {
            // Not kept, but read past: the next answer follows it.
            std::io::copy(&mut (&mut stdout).take(size + 1), &mut std::io::sink())
                .ok()
                .map(|n| n as usize)
        };
        if read != Some(size as usize + 1) {
            failed = Some("git's answer was cut short".to_string());
            break;
        }
        if keep {
            bytes.pop();
            found.insert(oid.to_string(), bytes);
        }
    }
    drop(stdout);
    let _ = writer.join();
    let _ = child.kill();
    let _ = child.wait();
    match failed {
        Some(why) => Err(format!("cannot read git's objects: {why}")),
        None => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob id kiln computes is git's own (`git hash-object` of the same bytes), in both of
    /// git's object formats.
    #[test]
    fn blob_ids_are_gits() {
        assert_eq!(
            blob_id(b"hello\n", 40).as_deref(),
            Some("ce013625030ba8dba906f756967f9e9ca394464a")
        );
        assert_eq!(
            blob_id(b"", 40).as_deref(),
            Some("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")
        );
        // A repository made with `git init --object-format=sha256`.
        assert_eq!(
            blob_id(b"hello\n", 64).as_deref(),
            Some("2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4")
        );
        assert_eq!(blob_id(b"x", 12), None);
    }
}
