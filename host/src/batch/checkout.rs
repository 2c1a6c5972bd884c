//! A task's fresh checkout in the worker's scratch directory: a git clone at the task's
//! revision, or a copy of a plain directory made into a repository with one baseline commit,
//! so that what the run changed is always `git diff` against where it started.
// Writes outside the workspace: a task's checkout: a copy of its repository under the batch's scratch.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Largest diff kept in a result; a longer one is cut in the middle, saying so.
pub const MAX_DIFF: usize = 256 * 1024;

/// A checkout that could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What kiln was doing.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// git failed.
    #[error("git {args} failed: {stderr}")]
    Git {
        /// Its arguments.
        args: String,
        /// Its error output (last lines).
        stderr: String,
    },
    /// A revision was given for a directory that is not a git repository.
    #[error("`rev` {0} needs a git repository, and {1} is a plain directory")]
    RevOfPlainDir(String, String),
    /// The repository has no commit to check out (a `git init` with nothing committed).
    #[error(
        "{0} has no commits: a task runs on a committed revision; commit the files first (or name a plain directory without .git)"
    )]
    NoCommits(String),
    /// A local repository whose objects or git directory live elsewhere: cloning it would copy
    /// what lies outside the directory the task was allowed.
    #[error("{repo}: {why}; a task's local repository must hold its own .git directory")]
    GitElsewhere {
        /// The repository as the task named it.
        repo: String,
        /// What points elsewhere.
        why: &'static str,
    },
}

/// Refuse a local repository whose git data is reached through something that points out of
/// it: a `.git` that is a link or a `gitdir:` file, a `commondir` (a worktree's), or
/// alternates (objects borrowed from another repository).
fn own_git_dir(local: &Path, repo: &str) -> Result<(), CheckoutError> {
    let elsewhere = |why| CheckoutError::GitElsewhere {
        repo: repo.to_string(),
        why,
    };
    let git = local.join(".git");
    match std::fs::symlink_metadata(&git) {
        Ok(m) if m.file_type().is_symlink() => return Err(elsewhere("its .git is a link")),
        Ok(m) if !m.is_dir() => {
            return Err(elsewhere("its .git is a file naming another git directory"));
        }
        _ => {}
    }
    for (rel, why) in [
        (
            "commondir",
            "its .git/commondir shares another repository's git directory",
        ),
        (
            "objects/info/alternates",
            "its .git/objects/info/alternates borrows another repository's objects",
        ),
        (
            "objects/info/http-alternates",
            "its .git/objects/info/http-alternates borrows objects from elsewhere",
        ),
    ] {
        if std::fs::symlink_metadata(git.join(rel)).is_ok() {
            return Err(elsewhere(why));
        }
    }
    Ok(())
}

/// Run git with a fixed identity and no prompts, in `dir` (when given).
fn git(dir: Option<&Path>, args: &[&str]) -> Result<String, CheckoutError> {
    let mut cmd = Command::new("git");
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    cmd.args([
        "-c",
        "user.name=kiln",
        "-c",
        "user.email=kiln@localhost",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "core.hooksPath=/dev/null",
    ])
    .args(args)
    .env("GIT_TERMINAL_PROMPT", "0")
    .stdin(std::process::Stdio::null());
    let out = cmd.output().map_err(|source| CheckoutError::Io {
        what: "cannot run git for",
        path: dir.map(Path::to_path_buf).unwrap_or_default(),
        source,
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(CheckoutError::Git {
            args: args.join(" "),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Make `dest` (which must not exist) a fresh checkout of `repo` at `rev`. A local directory
/// without `.git` is copied (kiln's own `.kiln` left out); anything else is cloned.
pub fn prepare(repo: &str, rev: Option<&str>, dest: &Path) -> Result<(), CheckoutError> {
    let local = Path::new(repo);
    let dest_s = dest.to_string_lossy().into_owned();
    if local.is_dir() && std::fs::symlink_metadata(local.join(".git")).is_err() {
        if let Some(r) = rev {
            return Err(CheckoutError::RevOfPlainDir(r.into(), repo.into()));
        }
        copy_tree(local, dest)?;
        git(Some(dest), &["init", "-q"])?;
        git(Some(dest), &["add", "-A"])?;
        git(
            Some(dest),
            &[
                "commit",
                "-q",
                "--no-verify",
                "--allow-empty",
                "-m",
                "kiln batch: baseline",
            ],
        )?;
        return Ok(());
    }
    if local.is_dir() {
        own_git_dir(local, repo)?;
    }
    git(None, &["clone", "-q", "--", repo, &dest_s])?;
    // An empty repository clones without complaint (a warning), and the run would then fail
    // far from the cause: refuse it here, asking the fresh clone (git config of our own).
    if git(
        Some(dest),
        &["rev-parse", "-q", "--verify", "HEAD^{commit}"],
    )
    .is_err()
        && git(Some(dest), &["rev-list", "-n", "1", "--all"]).is_ok_and(|o| o.trim().is_empty())
    {
        return Err(CheckoutError::NoCommits(repo.to_string()));
    }
    if let Some(r) = rev {
        git(Some(dest), &["checkout", "-q", "--detach", r, "--"])?;
    }
    Ok(())
}

/// What the run changed in the checkout, new files included, as a unified diff (capped).
///
/// The task's programs could write the checkout's `.git/config` (an fsmonitor hook, a clean
/// filter, a textconv driver), so git runs here as they did: confined to the checkout, no
/// network, an environment of PATH alone (HOME is the checkout), never with the worker's
/// keys or files.
///
/// `.git` is read-only in the program's view, so new files are marked in a copy of the index
/// in the call's own temp dir (`GIT_INDEX_FILE`, with new objects there too and the checkout's
/// as alternates), never in the checkout's. The copy keeps the index's time (`cp -p`): git
/// re-reads an entry whose file is not older than its index ("racily clean"), and a fresh
/// time on the copy would hide a same-size change made within the file system's timestamp
/// granularity of the baseline commit.
pub async fn diff(dest: &Path) -> Result<String, CheckoutError> {
    let d = confined_git(
        dest,
        "diff",
        &[
            "sh",
            "-c",
            "cp -p .git/index \"$TMPDIR/index\" 2>/dev/null; mkdir \"$TMPDIR/objects\" && \
             export GIT_INDEX_FILE=\"$TMPDIR/index\" GIT_OBJECT_DIRECTORY=\"$TMPDIR/objects\" \
             GIT_ALTERNATE_OBJECT_DIRECTORIES=\"$PWD/.git/objects\"; \
             git -c core.hooksPath=/dev/null -c core.fsmonitor=false add -A -N -- . && \
             git -c core.hooksPath=/dev/null -c core.fsmonitor=false diff --no-color --no-ext-diff HEAD",
        ],
    )
    .await?;
    Ok(crate::store::cap_text(&d, MAX_DIFF))
}

/// `words` (a git command line, or a shell line of git commands named `what`) in `dest` under
/// [`crate::plugin::run_confined`].
async fn confined_git(dest: &Path, what: &str, words: &[&str]) -> Result<String, CheckoutError> {
    let args = [what];
    let env = vec![
        (
            "PATH".to_string(),
            kiln_env::env().var("PATH").unwrap_or_default().to_string(),
        ),
        ("HOME".to_string(), dest.to_string_lossy().into_owned()),
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
    ];
    let out = crate::plugin::run_confined(
        words,
        None,
        dest,
        env,
        std::time::Duration::from_secs(120),
        4 * MAX_DIFF,
        false,
    )
    .await
    .map_err(|e| CheckoutError::Git {
        args: args.join(" "),
        stderr: e.to_string(),
    })?;
    if out.exit_code != Some(0) {
        return Err(CheckoutError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Copy a directory tree: files with their permissions, symlinks as symlinks, `.kiln` and
/// anything that is neither left out.
fn copy_tree(from: &Path, to: &Path) -> Result<(), CheckoutError> {
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckoutError::Io { what, path, source }
    };
    std::fs::create_dir_all(to).map_err(io("cannot create", to))?;
    for entry in std::fs::read_dir(from).map_err(io("cannot read", from))? {
        let entry = entry.map_err(io("cannot read", from))?;
        let name = entry.file_name();
        if name == ".kiln" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let t = entry.file_type().map_err(io("cannot read", &src))?;
        if t.is_dir() {
            copy_tree(&src, &dst)?;
        } else if t.is_file() {
            std::fs::copy(&src, &dst).map_err(io("cannot copy", &src))?;
        } else if t.is_symlink() {
            let target = std::fs::read_link(&src).map_err(io("cannot read", &src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io("cannot create", &dst))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_copied_and_its_changes_diffed() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join(".kiln")).unwrap();
        std::fs::write(src.join("a.txt"), "one\n").unwrap();
        std::fs::write(src.join(".kiln/kiln.db"), "x").unwrap();
        let dest = d.path().join("co");
        prepare(src.to_str().unwrap(), None, &dest).unwrap();
        assert!(!dest.join(".kiln").exists());
        std::fs::write(dest.join("a.txt"), "two\n").unwrap();
        std::fs::write(dest.join("new.txt"), "new\n").unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let d = rt.block_on(diff(&dest)).unwrap();
        assert!(d.contains("-one\n+two"), "{d}");
        assert!(d.contains("+++ b/new.txt"), "{d}");
        assert!(matches!(
            prepare(src.to_str().unwrap(), Some("v1"), &dest.with_extension("x")),
            Err(CheckoutError::RevOfPlainDir(..))
        ));
        let base = src.parent().unwrap();
        // A repository whose .git is a `gitdir:` file, a link, or borrows objects, is refused:
        // cloning it would copy what lies outside it.
        let outside = base.join("outside");
        git(None, &["init", "-q", outside.to_str().unwrap()]).unwrap();
        let proj = base.join("proj");
        std::fs::create_dir(&proj).unwrap();
        std::fs::write(
            proj.join(".git"),
            format!("gitdir: {}/.git\n", outside.display()),
        )
        .unwrap();
        let r = prepare(proj.to_str().unwrap(), None, &base.join("co1"));
        assert!(
            matches!(r, Err(CheckoutError::GitElsewhere { .. })),
            "{r:?}"
        );
        std::fs::remove_file(proj.join(".git")).unwrap();
        std::os::unix::fs::symlink(outside.join(".git"), proj.join(".git")).unwrap();
        let r = prepare(proj.to_str().unwrap(), None, &base.join("co2"));
        assert!(
            matches!(r, Err(CheckoutError::GitElsewhere { .. })),
            "{r:?}"
        );
        let alt = base.join("alt");
        git(None, &["init", "-q", alt.to_str().unwrap()]).unwrap();
        std::fs::write(
            alt.join(".git/objects/info/alternates"),
            format!("{}/.git/objects\n", outside.display()),
        )
        .unwrap();
        let r = prepare(alt.to_str().unwrap(), None, &base.join("co3"));
        assert!(
            matches!(r, Err(CheckoutError::GitElsewhere { .. })),
            "{r:?}"
        );
    }
}
