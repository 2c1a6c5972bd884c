//! The loop's artifacts under `.kiln/loop/` (run.toml, state.toml, execution.toml,
//! review.toml, review_output.toml), each written atomically through the workspace's one
//! writer, so a killed run leaves them readable and a planted link is replaced, not followed.

use crate::edit::Workspace;
use crate::llm::Usage;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// Where the artifacts live, workspace-relative.
pub const ARTIFACT_DIR: &str = ".kiln/loop";

/// An artifact that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The workspace could not be opened.
    #[error(transparent)]
    Open(#[from] crate::edit::EditError),
    /// The file could not be written (or its value is not TOML).
    #[error("cannot write {path}: {source}")]
    Write {
        /// Workspace-relative path.
        path: String,
        /// Why the write failed.
        source: std::io::Error,
    },
}

/// state.toml: where the run is.
#[derive(Serialize)]
pub(super) struct State<'a> {
    /// The loop's run id in the store.
    pub run_id: i64,
    /// The round running now (or the last one).
    pub loop_index: u32,
    /// `execution`, `review`, `done` or `cancelled`.
    pub phase: &'a str,
    /// The phase a cancelled run stopped in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_in: Option<&'a str>,
    /// The workspace root.
    pub workspace: String,
    /// The task file, workspace-relative.
    pub task_file: &'a str,
    /// When this was written (ms since the epoch).
    pub updated_at: i64,
}

/// run.toml's limits.
#[derive(Serialize)]
pub(super) struct Limits {
    /// Round limit.
    pub loops: u32,
    /// Turn budget of each execution phase.
    pub iterations: u32,
    /// Turn budget of each review phase.
    pub review_iterations: u32,
}

/// run.toml's token counts (input includes cached input).
#[derive(Serialize)]
pub(super) struct Tokens {
    input: u64,
    cached_input: u64,
    output: u64,
    reasoning: u64,
}

impl From<Usage> for Tokens {
    fn from(u: Usage) -> Tokens {
        Tokens {
            input: u.prompt(),
            cached_input: u.cached_input,
            output: u.output,
            reasoning: u.reasoning,
        }
    }
}

/// run.toml: the run as a whole.
#[derive(Serialize)]
pub(super) struct RunToml<'a> {
    /// The loop's run id in the store.
    pub run_id: i64,
    /// The model's label.
    pub model: String,
    /// The task file, workspace-relative.
    pub task_file: &'a str,
    /// Rounds finished.
    pub loops_completed: u32,
    /// The run has ended.
    pub finished: bool,
    /// The run's limits.
    pub limits: Limits,
    /// Tokens of every request of the run.
    pub tokens: Tokens,
}

/// `.kiln/loop/`, written through the workspace's one writer (its privileged artifact
/// write: no link followed at any component); each file is written to a temporary name and
/// renamed, so a reader never sees half a file.
pub(super) struct Artifacts {
    ws: Workspace,
}

impl Artifacts {
    pub(super) fn open(workspace: &Path) -> Result<Artifacts, ArtifactError> {
        Ok(Artifacts {
            ws: Workspace::open(workspace)?,
        })
    }

    pub(super) fn write(&self, name: &str, text: &str) -> Result<(), ArtifactError> {
        let rel = ARTIFACT_DIR
            .strip_prefix(".kiln/")
            .expect("the artifacts live in .kiln/");
        let protected = crate::path::Protected::default();
        self.ws
            .writer(&protected, &[])
            .write_artifact(&format!("{rel}/{name}"), text)
            .map_err(|e| ArtifactError::Write {
                path: format!("{ARTIFACT_DIR}/{name}"),
                source: std::io::Error::other(e.to_string()),
            })
    }

    pub(super) fn write_toml<T: Serialize>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<(), ArtifactError> {
        let text = toml::to_string(value).map_err(|e| ArtifactError::Write {
            path: format!("{ARTIFACT_DIR}/{name}"),
            source: std::io::Error::other(e),
        })?;
        self.write(name, &text)
    }

    /// A phase's events as `[[event]]` tables (JSON nulls left out, which TOML cannot say).
    pub(super) fn write_events(&self, name: &str, events: &[Value]) -> Result<(), ArtifactError> {
        let list: Vec<toml::Value> = events.iter().filter_map(json_to_toml).collect();
        let mut table = toml::Table::new();
        table.insert("event".into(), toml::Value::Array(list));
        self.write_toml(name, &table)
    }
}

fn json_to_toml(v: &Value) -> Option<toml::Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().filter_map(json_to_toml).collect()),
        Value::Object(o) => toml::Value::Table(
            o.iter()
                .filter_map(|(k, v)| json_to_toml(v).map(|t| (k.clone(), t)))
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_never_writes_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious.txt"), "precious\n").unwrap();
        let a = Artifacts::open(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join(ARTIFACT_DIR)).unwrap();
        let planted = dir.path().join(format!(
            ".kiln/loop/.state.toml.kiln-tmp-{}",
            std::process::id()
        ));
        std::os::unix::fs::symlink(dir.path().join("precious.txt"), &planted).unwrap();
        // The final name as a link, too: replaced, not followed.
        std::os::unix::fs::symlink(
            dir.path().join("precious.txt"),
            dir.path().join(".kiln/loop/run.toml"),
        )
        .unwrap();
        a.write("state.toml", "phase = \"done\"\n").unwrap();
        a.write("run.toml", "run_id = 1\n").unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("precious.txt"), "precious\n");
        assert_eq!(read(".kiln/loop/state.toml"), "phase = \"done\"\n");
        assert_eq!(read(".kiln/loop/run.toml"), "run_id = 1\n");
        assert!(!planted.exists());
    }
}
