//! The execute/review loop's task file: its text and its TOML front matter (`+++` or `---`
//! fences), whose `[tools] bash` list (or a top-level `bash`) adds programs to the execution
//! phase's command allowlist. Read only through the workspace handle.

use crate::edit::Workspace;

/// The task file as loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task text (front matter removed).
    pub text: String,
    /// Programs its metadata adds to the execution allowlist (`[tools] bash = [...]`); fixed
    /// when the run starts (a reload keeps them).
    pub bash: Vec<String>,
    /// Front matter kiln does not know (ignored), one message each, with the closest name.
    pub warnings: Vec<String>,
    /// Fingerprint of the whole file, to notice a change between rounds.
    pub(super) fingerprint: String,
}

/// What is wrong with a task file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The path is absolute, has `..`, or otherwise leaves the workspace.
    #[error("{0}; it must lie inside the workspace")]
    Outside(String),
    /// There is no such file.
    #[error("does not exist")]
    Missing,
    /// The file could not be read (a FIFO, a link leading out, not text).
    #[error("{0}")]
    Unreadable(String),
    /// The front matter's closing fence is missing.
    #[error("the front matter opened by `{0}` is not closed")]
    Unclosed(&'static str),
    /// The front matter is not TOML.
    #[error("front matter: {0}")]
    Toml(String),
    /// `bash` is not a list of strings.
    #[error("front matter: `bash` must be a list of program names")]
    BashNotAList,
    /// An entry of `bash` is not a bare program name.
    #[error(
        "front matter: `{0}` in `bash` is not a program name (no paths, spaces, globs or leading `-`)"
    )]
    NotAProgram(String),
}

/// A task file that cannot be used, with its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task file {path}: {why}")]
pub struct TaskFileError {
    /// The task file's path as given.
    pub path: String,
    /// What is wrong with it.
    pub why: TaskError,
}

/// The front matter kiln reads: `[tools] bash = [...]`, or a top-level `bash`.
const FRONT_MATTER_KEYS: [&str; 2] = ["tools", "bash"];

/// Messages for the front matter keys kiln does not know.
fn unknown_front_matter(v: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (k, val) in v {
        if !FRONT_MATTER_KEYS.contains(&k.as_str()) {
            out.push(format!(
                "task front matter: `{k}` is not known and is ignored{}",
                crate::suggest::hint(k, FRONT_MATTER_KEYS)
            ));
        } else if let (true, Some(t)) = (k == "tools", val.as_table()) {
            for tk in t.keys().filter(|tk| *tk != "bash") {
                out.push(format!(
                    "task front matter: `tools.{tk}` is not known and is ignored{}",
                    crate::suggest::hint(tk, ["bash"])
                ));
            }
        }
    }
    out
}

/// The front matter (if the file opens with a fence) and the text after it.
fn split_front_matter(text: &str) -> Result<(Option<&str>, String), TaskError> {
    let fence = ["+++", "---"]
        .into_iter()
        .find(|f| text.lines().next().map(str::trim_end) == Some(*f));
    let Some(f) = fence else {
        return Ok((None, text.to_string()));
    };
    let rest = &text[text.find('\n').map(|i| i + 1).unwrap_or(text.len())..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == f {
            return Ok((
                Some(&rest[..offset]),
                rest[offset + line.len()..].to_string(),
            ));
        }
        offset += line.len();
    }
    Err(TaskError::Unclosed(f))
}

/// The `bash` list of the front matter: bare program names only (a glob would become a
/// sandbox grant of every program matching it).
fn bash_list(v: &toml::Table) -> Result<Vec<String>, TaskError> {
    let list = v
        .get("tools")
        .and_then(|t| t.get("bash"))
        .or_else(|| v.get("bash"));
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    let mut bash = Vec::new();
    for p in list.as_array().ok_or(TaskError::BashNotAList)? {
        let p = p.as_str().ok_or(TaskError::BashNotAList)?;
        if p.is_empty()
            || p.contains('/')
            || p.starts_with('-')
            || p.contains(char::is_whitespace)
            || p.contains(['*', '?', '[', ']'])
        {
            return Err(TaskError::NotAProgram(p.to_string()));
        }
        bash.push(p.to_string());
    }
    Ok(bash)
}

/// Split TOML front matter (`+++` or `---` fences) from the task text and read
/// `[tools] bash` (or a top-level `bash`).
pub fn parse_task(text: &str) -> Result<Task, TaskError> {
    let (meta, body) = split_front_matter(text.trim_start_matches('\u{feff}'))?;
    let (bash, warnings) = match meta {
        None => (Vec::new(), Vec::new()),
        Some(meta) => {
            let v: toml::Table =
                toml::from_str(meta).map_err(|e| TaskError::Toml(e.to_string()))?;
            (bash_list(&v)?, unknown_front_matter(&v))
        }
    };
    Ok(Task {
        fingerprint: crate::edit::fingerprint(text),
        text: body.trim().to_string(),
        bash,
        warnings,
    })
}

/// Read the task file through the workspace handle (never outside it, never a FIFO).
pub fn load_task(ws: &Workspace, rel: &str) -> Result<Task, TaskFileError> {
    let err = |why: TaskError| TaskFileError {
        path: rel.to_string(),
        why,
    };
    crate::path::check_relative(rel).map_err(|w| err(TaskError::Outside(w.to_string())))?;
    match ws.read(rel) {
        Ok(Some(text)) => parse_task(&text).map_err(err),
        Ok(None) => Err(err(TaskError::Missing)),
        Err(e) => Err(err(TaskError::Unreadable(e.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_extends_the_allowlist_and_is_validated() {
        let t =
            parse_task("+++\n[tools]\nbash = [\"python3\", \"rg\"]\n+++\nDo the thing.\n").unwrap();
        assert_eq!(t.bash, ["python3", "rg"]);
        assert_eq!(t.text, "Do the thing.");
        let t = parse_task("---\nbash = [\"make\"]\n---\nBuild.\n").unwrap();
        assert_eq!(t.bash, ["make"]);
        assert_eq!(
            parse_task("+++\nbash = [\"/bin/sh\"]\n+++\nx"),
            Err(TaskError::NotAProgram("/bin/sh".into()))
        );
        assert_eq!(
            parse_task("+++\nbash = [\"x\"]\n"),
            Err(TaskError::Unclosed("+++"))
        );
        assert!(
            parse_task("+++\nbash = [\"x\"]\n")
                .unwrap_err()
                .to_string()
                .contains("not closed")
        );
        assert_eq!(parse_task("just text").unwrap().text, "just text");
        assert_eq!(
            parse_task("+++\nbash = \"make\"\n+++\nx"),
            Err(TaskError::BashNotAList)
        );
    }
}
