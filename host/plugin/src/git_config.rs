//! What a program kiln runs sees of a git directory's `config`: a copy without the
//! credentials git may keep there (every `extraheader` line, `http.*.extraheader =
//! AUTHORIZATION: ...`, and the user name and password of every URL, `https://TOKEN@host/...`),
//! bound over the real one in the program's view. The rest stays, so `git status`, `git log`
//! and `git diff` work as before; only what would authenticate to a remote is gone.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest `config` copied; a larger one is shown empty (git configs are a few KiB).
const MAX_CONFIG: u64 = 1 << 20;

/// `text` without credentials: `extraheader` lines (with their continuation lines) dropped,
/// the userinfo of every `SCHEME://USER[:PASS]@HOST` removed.
pub fn filtered(text: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len());
    let mut dropping = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if dropping {
            dropping = body.ends_with('\\');
            continue;
        }
        let key = body
            .trim_start()
            .split(|c: char| c == '=' || c.is_whitespace())
            .next()
            .unwrap_or("");
        if key.eq_ignore_ascii_case("extraheader") {
            dropping = body.ends_with('\\');
            continue;
        }
        out.push_str(&without_userinfo(line));
    }
    out.into_bytes()
}

/// `line` with the user name and password of every URL in it removed.
fn without_userinfo(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let end = rest
            .find(|c: char| c == '/' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@') {
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// For each git directory among `protected` (a directory holding `HEAD` and a regular file
/// `config`), that `config`'s path and its [`filtered`] content. A `config` that is a link is
/// left as it is (the view resolves it inside itself); one too large is shown empty.
pub fn shown_configs(protected: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in protected {
        if !dir.symlink_metadata().is_ok_and(|m| m.is_dir()) || !dir.join("HEAD").exists() {
            continue;
        }
        let config = dir.join("config");
        if let Some(content) = read_regular(&config) {
            out.push((config, filtered(&content)));
        }
    }
    out
}

/// The bytes of the regular file at `path`, opened without following a link; `None` when it
/// is missing, a link or not a regular file; empty when larger than [`MAX_CONFIG`].
fn read_regular(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() > MAX_CONFIG {
        return Some(Vec::new());
    }
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_extra_headers_are_dropped_the_rest_kept() {
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = https://x-access-token:GITCONFIG-SECRET@github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[http]\n\textraheader = AUTHORIZATION: basic EXTRAHEADER-SECRET\n[http \"https://github.com/\"]\n\tExtraHeader = AUTHORIZATION: \\\n  bearer CONTINUED-SECRET\n\tsslVerify = true\n[url \"https://tok:pw@git.example/\"]\n\tinsteadOf = https://git.example/\n[remote \"ssh\"]\n\turl = git@github.com:o/r.git\n";
        let out = String::from_utf8(filtered(config.as_bytes())).unwrap();
        for secret in ["SECRET", "x-access-token", "tok:pw"] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert_eq!(
            out,
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = https://github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[http]\n[http \"https://github.com/\"]\n\tsslVerify = true\n[url \"https://git.example/\"]\n\tinsteadOf = https://git.example/\n[remote \"ssh\"]\n\turl = git@github.com:o/r.git\n"
        );
    }

    #[test]
    fn only_regular_configs_of_git_directories_are_shown() {
        let t = tempfile::tempdir().unwrap();
        let git = t.path().join(".git");
        std::fs::create_dir(&git).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(git.join("config"), "[http]\n\textraheader = X\n").unwrap();
        let not_git = t.path().join("kiln.toml");
        std::fs::write(&not_git, "").unwrap();
        let linked = t.path().join("other/.git");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join("HEAD"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", linked.join("config")).unwrap();
        let shown = shown_configs(&[git.clone(), not_git, linked]);
        assert_eq!(shown, [(git.join("config"), b"[http]\n".to_vec())]);
    }
}
