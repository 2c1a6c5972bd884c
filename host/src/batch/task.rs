//! The task file: JSONL, one task per line: where to run (`id`, `repo`, optional `rev` and
//! `dir`) and what to run, a [`TaskSpec`] (`kind`, `targets`, `runner`, `format`, `prompt`,
//! `limits`, ...). Parsed and checked with errors naming the line and the field at fault; the
//! same checks run again when a worker claims the task and when it runs it.
//!
//! A task is never a command line. The old `args` field is refused with a message naming the
//! typed fields that replace it.

use crate::task_spec::{Kind, SpecError, TaskSpec, field_in};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The most bytes of a task id.
pub const MAX_ID: usize = 200;

/// Git URL schemes a task's `repo` may use.
pub const REPO_SCHEMES: &[&str] = &["https", "http", "ssh", "git"];

/// One task: a [`TaskSpec`] run in a fresh checkout of `repo` at `rev`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>", into = "Map<String, Value>")]
pub struct Task {
    /// Unique within its batch; submitting the same id again is a no-op. A path component of
    /// the checkout once checked ([`check_id`]).
    pub id: String,
    /// A git URL ([`REPO_SCHEMES`] or `host:path`), or a local directory under one the user
    /// allowed (see [`Repo`]).
    pub repo: String,
    /// The revision to check out (a git repository only); default its HEAD.
    pub rev: Option<String>,
    /// The subdirectory of the checkout the run works in.
    pub dir: Option<String>,
    /// What to run.
    pub spec: TaskSpec,
}

/// A task file that cannot be used, naming the line and field.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The file could not be read.
    #[error("cannot read task file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a task.
    #[error("{path}:{line}: {field}: {why}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The field at fault (or `line` for the whole line).
        field: String,
        /// What is wrong.
        why: String,
    },
    /// The file holds no task.
    #[error("{0}: no task (one JSON object per line)")]
    Empty(PathBuf),
}

/// What the old `args` field said, and what replaces it.
const ARGS_GONE: &str = "a task is no longer a kiln command line, and `args` is not read: say what to run with typed fields: `kind` (fix, agent or loop), `targets` (files of the checkout), `runner`, `cmd`, `mode`, `format`, `prompt`, `test_command`, `limits` {max_iters, max_steps, max_cost, max_tokens, ...}; model settings come from the worker's configuration (see README, Batches and workers)";

impl TryFrom<Map<String, Value>> for Task {
    type Error = SpecError;

    fn try_from(mut m: Map<String, Value>) -> Result<Task, SpecError> {
        let bad = |field: &str, why: String| SpecError {
            field: field.into(),
            why,
        };
        if m.contains_key("args") {
            return Err(bad("args", ARGS_GONE.into()));
        }
        let mut string = |field: &str, required: bool| -> Result<Option<String>, SpecError> {
            match m.remove(field) {
                Some(Value::String(s)) => Ok(Some(s)),
                None | Some(Value::Null) if !required => Ok(None),
                None | Some(Value::Null) => Err(bad(field, format!("missing field `{field}`"))),
                Some(other) => Err(bad(field, format!("must be a string, not {other}"))),
            }
        };
        let id = string("id", true)?.unwrap_or_default();
        let repo = string("repo", true)?.unwrap_or_default();
        let rev = string("rev", false)?;
        let dir = string("dir", false)?;
        if !m.contains_key("kind") {
            return Err(bad(
                "kind",
                "missing field `kind` (fix, agent or loop)".into(),
            ));
        }
        let spec: TaskSpec = serde_json::from_value(Value::Object(m)).map_err(|e| {
            let msg = e.to_string();
            let field = field_in(&msg).unwrap_or("kind").to_string();
            bad(&field, msg)
        })?;
        Ok(Task {
            id,
            repo,
            rev,
            dir,
            spec,
        })
    }
}

impl From<Task> for Map<String, Value> {
    fn from(t: Task) -> Map<String, Value> {
        let mut m = match serde_json::to_value(&t.spec) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        m.insert("id".into(), t.id.into());
        m.insert("repo".into(), t.repo.into());
        if let Some(r) = t.rev {
            m.insert("rev".into(), r.into());
        }
        if let Some(d) = t.dir {
            m.insert("dir".into(), d.into());
        }
        m
    }
}

/// An id usable as a path component: 1 to [`MAX_ID`] letters, digits, `-`, `_` or `.`, not
/// starting with `.`. Batch ids obey the same rule.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{id}` must be 1 to {MAX_ID} letters, digits, `-`, `_` or `.` (not starting with `.`)"
        ))
    }
}

/// Why a `dir` in `.git` is refused.
pub(crate) const GIT_DIR_WHY: &str = "lies in `.git`, git's own metadata: a run there would write git's config and hooks (which git runs unconfined); a task works in the checkout's files";

/// Where a task's checkout comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repo<'a> {
    /// A git URL: cloned.
    Remote(&'a str),
    /// A local directory: taken only under a directory the worker's user allowed (`[batch]
    /// local_repos`, or the task file's own directory for `kiln batch run`).
    Local(&'a Path),
}

/// What `repo` names, or why it cannot be used. Git's other transports (`file://`, `ext::`,
/// remote helpers) are refused, and so is a password in a URL, or any user name but over SSH.
pub fn classify_repo(repo: &str) -> Result<Repo<'_>, String> {
    if repo.trim().is_empty() {
        return Err("is empty".into());
    }
    if repo.len() > 4096 || repo.chars().any(|c| c.is_control()) {
        return Err("is not a repository (too long, or control characters)".into());
    }
    if repo.starts_with('-') {
        return Err(format!("`{repo}` starts with `-`"));
    }
    if let Some((scheme, rest)) = repo.split_once("://") {
        if !REPO_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{scheme}://` is not a repository scheme a task may use ({}://, or a local directory the worker allows)",
                REPO_SCHEMES.join("://, ")
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if userinfo.contains(':') {
                return Err(
                    "carries a password: a task file is data, so credentials belong in git's credential helper on the worker".into(),
                );
            }
            // Over HTTP a user name is a credential too (`https://ghp_TOKEN@github.com/...`,
            // GitHub's token form); over SSH it only names the account (`ssh://git@host/`).
            if !scheme.eq_ignore_ascii_case("ssh") {
                return Err(
                    "carries a user name, which over http(s) and git:// can be a token (not shown): a task file is data, so credentials belong in git's credential helper on the worker (`git config --global credential.helper store`, or the CI's own); write the URL without `USER@`".into(),
                );
            }
        }
        return Ok(Repo::Remote(repo));
    }
    if repo.contains("::") {
        return Err(format!("`{repo}` names a git transport a task may not use"));
    }
    // scp-like `[user@]host:path`: a colon before any slash.
    if let Some(colon) = repo.find(':')
        && !repo[..colon].contains('/')
        && colon > 0
    {
        return Ok(Repo::Remote(repo));
    }
    // A relative path (as a task file writes it) stays below the file's directory and out of
    // its hidden entries; an absolute one (as submitted) is judged by the worker's roots.
    let p = Path::new(repo);
    use std::path::Component;
    let hidden = |c: &Component<'_>| matches!(c, Component::Normal(n) if n.to_string_lossy().starts_with('.'));
    if p.components().any(|c| matches!(c, Component::ParentDir))
        || (!p.is_absolute() && p.components().any(|c| hidden(&c)))
    {
        return Err(format!(
            "`{repo}`: a local repository path may not have `..` or hidden (`.name`) components"
        ));
    }
    Ok(Repo::Local(p))
}

/// The real path of a local `repo`, when it lies under one of `roots` (each canonical);
/// otherwise why not.
pub fn allowed_local(repo: &Path, roots: &[PathBuf]) -> Result<PathBuf, String> {
    if !repo.is_absolute() {
        return Err(format!(
            "`{}` is a relative path; a worker takes only absolute local paths",
            repo.display()
        ));
    }
    let real = repo
        .canonicalize()
        .map_err(|e| format!("`{}`: {e}", repo.display()))?;
    if roots.iter().any(|r| real.starts_with(r)) {
        return Ok(real);
    }
    Err(format!(
        "`{}` is a local directory this worker's user did not allow: a task may name a git URL, or a directory under [batch] local_repos in the user's configuration (allowed now: {})",
        repo.display(),
        if roots.is_empty() {
            "none".to_string()
        } else {
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))
}

impl Task {
    /// The kind of run.
    pub fn kind(&self) -> Kind {
        self.spec.kind
    }

    /// What is wrong with this task, as (field, reason); `None` when it can run. Checks
    /// everything that needs no worker: the id, the repository's form, `rev`, `dir` and the
    /// spec.
    pub fn problem(&self) -> Option<(String, String)> {
        if let Err(why) = check_id(&self.id) {
            return Some(("id".into(), why));
        }
        if let Err(why) = classify_repo(&self.repo) {
            return Some(("repo".into(), why));
        }
        if let Some(rev) = &self.rev
            && (rev.is_empty()
                || rev.starts_with('-')
                || rev.len() > 256
                || rev.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            return Some(("rev".into(), format!("`{rev}` is not a revision")));
        }
        if let Some(dir) = &self.dir {
            if let Err(why) = crate::path::check_relative(dir) {
                return Some(("dir".into(), format!("`{dir}` {why}")));
            }
            if crate::path::has_git_component(Path::new(dir)) {
                return Some(("dir".into(), format!("`{dir}` {}", GIT_DIR_WHY)));
            }
        }
        if let Err(e) = self.spec.check() {
            return Some((e.field, e.why));
        }
        if self.spec.kind == Kind::Agent && self.spec.prompt.is_none() {
            return Some(("prompt".into(), "an agent task needs its `prompt`".into()));
        }
        None
    }

    /// Parse a task from one stored JSON row and check it ([`Task::problem`]): for a queue
    /// row, which anyone with access to the database could have edited.
    pub fn from_row(text: &str) -> Result<Task, SpecError> {
        let v: Value = serde_json::from_str(text).map_err(|e| SpecError {
            field: "task".into(),
            why: format!("not JSON: {e}"),
        })?;
        let Value::Object(m) = v else {
            return Err(SpecError {
                field: "task".into(),
                why: "not a JSON object".into(),
            });
        };
        let t = Task::try_from(m)?;
        match t.problem() {
            Some((field, why)) => Err(SpecError { field, why }),
            None => Ok(t),
        }
    }
}

/// Parse a task file: blank lines and lines starting with `#` are skipped; every other line
/// is one task. Ids must be unique.
pub fn parse_file(path: &Path) -> Result<Vec<Task>, TaskError> {
    let text = std::fs::read_to_string(path).map_err(|source| TaskError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// Parse task lines (`path` only names the file in errors).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Task>, TaskError> {
    let mut tasks: Vec<Task> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let err = |field: &str, why: String| TaskError::Line {
            path: path.to_path_buf(),
            line,
            field: field.to_string(),
            why,
        };
        let v: Value = serde_json::from_str(trimmed).map_err(|e| err("line", e.to_string()))?;
        let Value::Object(m) = v else {
            return Err(err("line", "not a JSON object".into()));
        };
        let task = Task::try_from(m).map_err(|e| err(&e.field, e.why))?;
        if let Some((field, why)) = task.problem() {
            return Err(err(&field, why));
        }
        if let Some(first) = seen.insert(task.id.clone(), line) {
            return Err(err(
                "id",
                format!("`{}` is already the id of line {first}", task.id),
            ));
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(TaskError::Empty(path.to_path_buf()));
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Task>, TaskError> {
        parse(text, Path::new("tasks.jsonl"))
    }

    #[test]
    fn good_lines_parse_and_comments_skip() {
        let t = p("# a comment\n\n{\"id\":\"a\",\"repo\":\".\",\"kind\":\"fix\",\"targets\":[\"x.c\"]}\n{\"id\":\"b\",\"repo\":\"https://h/r.git\",\"rev\":\"v1\",\"dir\":\"sub\",\"kind\":\"agent\",\"prompt\":\"do it\"}\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].rev.as_deref(), Some("v1"));
        assert_eq!(t[1].kind(), Kind::Agent);
        // A row round-trips through the queue's JSON.
        let row = serde_json::to_string(&t[1]).unwrap();
        assert_eq!(Task::from_row(&row).unwrap(), t[1]);
    }

    #[test]
    fn errors_name_line_and_field() {
        let cases = [
            (
                "{\"id\":\"a\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "repo",
            ),
            (
                "\n{\"id\":\"a\",\"repo\":\".\",\"kind\":\"history\"}",
                2,
                "kind",
            ),
            (
                "{\"id\":\"a b\",\"repo\":\".\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "id",
            ),
            (
                "{\"id\":\"../../x\",\"repo\":\".\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "id",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"dir\":\"../x\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "dir",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\"]}",
                1,
                "args",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"kind\":\"fix\",\"targets\":[\"a\"],\"extra\":1}",
                1,
                "extra",
            ),
            (
                "{\"id\":\"a\",\"repo\":\"file:///etc\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "repo",
            ),
            (
                "{\"id\":\"a\",\"repo\":\"ext::sh -c x\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "repo",
            ),
            (
                "{\"id\":\"a\",\"repo\":\"https://u:pw@h/r\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "repo",
            ),
            (
                "{\"id\":\"a\",\"repo\":\"../up\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                1,
                "repo",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"kind\":\"agent\"}",
                1,
                "prompt",
            ),
            ("not json", 1, "line"),
            (
                "{\"id\":\"a\",\"repo\":\"r\",\"kind\":\"fix\",\"targets\":[\"a\"]}\n{\"id\":\"a\",\"repo\":\"r\",\"kind\":\"fix\",\"targets\":[\"a\"]}",
                2,
                "id",
            ),
        ];
        for (text, want_line, want_field) in cases {
            match p(text) {
                Err(TaskError::Line { line, field, .. }) => {
                    assert_eq!((line, field.as_str()), (want_line, want_field), "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(p("\n# only\n"), Err(TaskError::Empty(_))));
    }

    #[test]
    fn local_repositories_only_under_allowed_roots() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("ok/proj")).unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        std::os::unix::fs::symlink(root.join("other"), root.join("ok/link")).unwrap();
        let roots = vec![root.join("ok")];
        assert!(allowed_local(&root.join("ok/proj"), &roots).is_ok());
        assert!(allowed_local(&root.join("other"), &roots).is_err());
        // A link under an allowed root to somewhere else is judged by where it leads.
        assert!(allowed_local(&root.join("ok/link"), &roots).is_err());
        assert!(allowed_local(&root.join("ok/proj"), &[]).is_err());
        assert_eq!(
            classify_repo("git@github.com:o/r.git"),
            Ok(Repo::Remote("git@github.com:o/r.git"))
        );
    }

    #[test]
    fn a_user_name_is_refused_but_over_ssh_and_never_echoed() {
        for url in [
            "https://ghp_TOKEN@github.com/o/r.git",
            "HTTP://ghp_TOKEN@h/r",
            "git://ghp_TOKEN@h/r",
            "https://u:ghp_TOKEN@h/r",
        ] {
            let e = classify_repo(url).unwrap_err();
            assert!(
                e.contains("credential helper") && !e.contains("TOKEN"),
                "{e}"
            );
        }
        assert!(classify_repo("ssh://git@github.com/o/r.git").is_ok());
        assert!(classify_repo("https://github.com/o/r.git").is_ok());
    }
}
