//! The task file: JSONL, one task per line (`id`, `repo`, optional `rev` and `dir`, and
//! `args`, a kiln command line limited to `fix`, `agent` or `loop`), parsed and checked with
//! errors naming the line and the field at fault.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The commands a task may run.
pub const TASK_COMMANDS: &[&str] = &["fix", "agent", "loop"];

/// One task: a kiln command line run in a fresh checkout of `repo` at `rev`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Unique within its batch; submitting the same id again is a no-op.
    pub id: String,
    /// A git URL, a local git repository or a plain local directory (copied).
    pub repo: String,
    /// The revision to check out (a git repository only); default its HEAD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// The subdirectory of the checkout the command runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The kiln command line, starting with `fix`, `agent` or `loop`.
    pub args: Vec<String>,
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

impl Task {
    /// The command (`fix`, `agent` or `loop`).
    pub fn command(&self) -> &str {
        self.args.first().map(String::as_str).unwrap_or("")
    }

    /// What is wrong with this task, as (field, reason); `None` when it can run.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 200
            && self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !self.id.starts_with('.');
        if !id_ok {
            return Some((
                "id",
                format!(
                    "`{}` must be 1 to 200 letters, digits, `-`, `_` or `.` (not starting with `.`)",
                    self.id
                ),
            ));
        }
        if self.repo.trim().is_empty() {
            return Some(("repo", "is empty".into()));
        }
        if let Some(rev) = &self.rev
            && (rev.is_empty() || rev.starts_with('-'))
        {
            return Some(("rev", format!("`{rev}` is not a revision")));
        }
        if let Some(dir) = &self.dir
            && let Err(why) = crate::path::check_relative(dir)
        {
            return Some(("dir", format!("`{dir}` {why}")));
        }
        if !TASK_COMMANDS.contains(&self.command()) {
            return Some((
                "args",
                format!(
                    "the command must be one of {} (got `{}`)",
                    TASK_COMMANDS.join(", "),
                    self.command()
                ),
            ));
        }
        // Parsed as kiln parses it, so no spelling (`-qC DIR`, `--workspace=DIR`) slips by.
        match crate::cli::chosen_globals(&self.args) {
            Err(e) => Some((
                "args",
                format!(
                    "not a kiln command line: {}",
                    e.to_string()
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("error: ")
                ),
            )),
            Ok((_, chosen)) if !chosen.is_empty() => Some((
                "args",
                format!(
                    "{} is chosen by the worker, not by a task",
                    chosen.join(", ")
                ),
            )),
            Ok(_) => None,
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
        let task: Task = serde_json::from_str(trimmed).map_err(|e| {
            let msg = e.to_string();
            let field = field_in(&msg).unwrap_or("line").to_string();
            err(&field, msg)
        })?;
        if let Some((field, why)) = task.problem() {
            return Err(err(field, why));
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

/// The field serde names in its message (`missing field `id``, `unknown field `x``).
fn field_in(msg: &str) -> Option<&str> {
    let rest = msg
        .strip_prefix("unknown field `")
        .or_else(|| msg.strip_prefix("missing field `"))?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Task>, TaskError> {
        parse(text, Path::new("tasks.jsonl"))
    }

    #[test]
    fn good_lines_parse_and_comments_skip() {
        let t = p("# a comment\n\n{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\",\"--file\",\"x.c\"]}\n{\"id\":\"b\",\"repo\":\"r\",\"rev\":\"v1\",\"dir\":\"sub\",\"args\":[\"agent\",\"do it\"]}\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].rev.as_deref(), Some("v1"));
        assert_eq!(t[1].command(), "agent");
    }

    #[test]
    fn errors_name_line_and_field() {
        let cases = [
            ("{\"id\":\"a\",\"args\":[\"fix\"]}", 1, "repo"),
            (
                "\n{\"id\":\"a\",\"repo\":\".\",\"args\":[\"history\"]}",
                2,
                "args",
            ),
            (
                "{\"id\":\"a b\",\"repo\":\".\",\"args\":[\"fix\"]}",
                1,
                "id",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"dir\":\"../x\",\"args\":[\"fix\"]}",
                1,
                "dir",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\",\"--store\",\"x\"]}",
                1,
                "args",
            ),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\"],\"extra\":1}",
                1,
                "extra",
            ),
            ("{\"id\":\"a\",\"repo\":\".\",\"args\":\"fix\"}", 1, "line"),
            ("not json", 1, "line"),
            (
                "{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\"]}\n{\"id\":\"a\",\"repo\":\".\",\"args\":[\"fix\"]}",
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
}
