//! The `ast_refactor` agent tool: the built-in `ast-refactor` plugin (read-only, it never
//! writes) computes the new text of every file a refactoring changes, with the SHA-256 of the
//! text it read; the host then applies them all or none through the journal, refusing
//! protected paths, symbolic links and files that changed since the plugin read them, and
//! answers with a unified diff of what changed.

use super::{EditError, Workspace, journal};
use crate::plugin::Plugin;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The plugin that implements the tool, and its tool's name.
pub const PLUGIN: &str = "ast-refactor";
/// The tool's name, in the plugin and in the agent.
pub const TOOL: &str = "ast_refactor";

/// One file of a plugin answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// The file, relative to the workspace root.
    pub path: String,
    /// SHA-256 (hex) of the text the plugin read.
    pub old_sha256: String,
    /// The new text.
    pub new_text: String,
}

/// Run the tool: call the plugin, apply the files it returns, answer `(text, is_error,
/// files written)`. `outline` answers come back as the plugin gave them.
pub async fn ast_refactor_tool(
    plugin: &Plugin,
    ws: &Workspace,
    args: &str,
    protected: &crate::path::Protected,
    timeout: Duration,
) -> (String, bool, Vec<String>) {
    // Its first call compiles it (once per machine): not the tool's time.
    let _ = plugin.link().await;
    let call = tokio::time::timeout(timeout, plugin.tool_call(TOOL, args)).await;
    let out = match call {
        Err(_) => {
            return (
                format!("{TOOL} timed out after {} s", timeout.as_secs_f64()),
                true,
                Vec::new(),
            );
        }
        Ok(Err(e)) => return (e.to_string(), true, Vec::new()),
        Ok(Ok(Err(e))) => return (crate::plugin::describe_call_error(&e), true, Vec::new()),
        Ok(Ok(Ok(out))) => out,
    };
    let Ok(v) = serde_json::from_str::<Value>(&out) else {
        return (out, false, Vec::new());
    };
    let Some(files) = v.get("files").and_then(Value::as_array) else {
        return (out, false, Vec::new());
    };
    let mut parsed = Vec::new();
    for f in files {
        match (
            f["path"].as_str(),
            f["old_sha256"].as_str(),
            f["new_text"].as_str(),
        ) {
            (Some(p), Some(h), Some(t)) => parsed.push(NewFile {
                path: p.into(),
                old_sha256: h.into(),
                new_text: t.into(),
            }),
            _ => {
                return (
                    format!("the {PLUGIN} plugin answered a malformed file entry: {f}"),
                    true,
                    Vec::new(),
                );
            }
        }
    }
    match apply_files(ws, &parsed, protected) {
        Ok(Ok((diff, written))) => (applied_text(&v, &diff), false, written),
        Ok(Err(refusals)) => (
            format!(
                "{TOOL} changed nothing: {}\n(the refactoring would have changed {})",
                refusals.join("; "),
                parsed
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            true,
            Vec::new(),
        ),
        Err(e) => (e.to_string(), true, Vec::new()),
    }
}

/// The answer to the model once the files are written: the plugin's summary and warnings,
/// then the unified diff of what changed.
fn applied_text(answer: &Value, diff: &str) -> String {
    let mut text = answer["summary"].as_str().unwrap_or_default().to_string();
    let warnings = answer["warnings"].as_array().into_iter().flatten();
    for w in warnings.filter_map(Value::as_str) {
        text.push_str(&format!("\nwarning: {w}"));
    }
    if diff.is_empty() {
        text.push_str("\nno file changed");
    } else {
        text.push_str("\n\n");
        text.push_str(diff);
    }
    text
}

fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// What [`apply_files`] did: `Ok((diff, written))`, or `Err(reasons)` when it refused.
pub type Applied = Result<(String, Vec<String>), Vec<String>>;

/// Apply `files` all or none. `Ok(Err(reasons))`: refused, nothing written;
/// `Ok(Ok((diff, written)))`: the unified diff of every change (empty when nothing changed)
/// and the paths written.
pub fn apply_files(
    ws: &Workspace,
    files: &[NewFile],
    protected: &crate::path::Protected,
) -> Result<Applied, EditError> {
    let mut refusals = Vec::new();
    let mut plan: Vec<(&NewFile, String)> = Vec::new();
    for f in files {
        if let Some(why) = ws.refuse_write(&f.path, protected) {
            refusals.push(why);
            continue;
        }
        match ws.read(&f.path) {
            Ok(Some(now)) => {
                // The plugin's hash is the full SHA-256; the edit path's fingerprint is its
                // first 12 bytes, so either form is accepted.
                let full = sha256(&now);
                if f.old_sha256 != full && f.old_sha256 != super::fingerprint(&now) {
                    refusals.push(format!(
                        "{} changed since {TOOL} read it; call {TOOL} again",
                        f.path
                    ));
                    continue;
                }
                if now != f.new_text {
                    plan.push((f, now));
                }
            }
            Ok(None) => refusals.push(format!("{} no longer exists", f.path)),
            Err(EditError::Io { path, message }) => refusals.push(format!("{path}: {message}")),
            Err(e) => return Err(e),
        }
    }
    if !refusals.is_empty() {
        return Ok(Err(refusals));
    }
    let changes: Vec<journal::Change<'_>> = plan
        .iter()
        .map(|(f, before)| journal::Change::Write {
            path: &f.path,
            text: &f.new_text,
            before: Some(before.as_str()),
            mode: None,
        })
        .collect();
    ws.writer(protected, &[]).commit(&changes)?;
    let diff = plan
        .iter()
        .map(|(f, before)| unified_diff(&f.path, before, &f.new_text))
        .collect::<Vec<_>>()
        .join("");
    Ok(Ok((
        diff,
        plan.iter().map(|(f, _)| f.path.clone()).collect(),
    )))
}

/// A unified diff (3 lines of context) of `old` → `new`, with `a/` and `b/` headers, by
/// `similar` (Myers' algorithm); empty when nothing changed.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_has_hunks_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nB\nc\nd\ne\nf\ng\nh\ni\nJ\n";
        let d = unified_diff("x.ts", old, new);
        assert_eq!(
            d,
            "--- a/x.ts\n+++ b/x.ts\n@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n@@ -7,4 +7,4 @@\n g\n h\n i\n-j\n+J\n"
        );
        assert_eq!(unified_diff("x", "same\n", "same\n"), "");
        assert_eq!(
            unified_diff("x", "a", "b"),
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"
        );
    }

    fn ws_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    fn nf(path: &str, old: &str, new: &str) -> NewFile {
        NewFile {
            path: path.into(),
            old_sha256: sha256(old),
            new_text: new.into(),
        }
    }

    #[test]
    fn all_or_nothing_protected_and_stale() {
        let (dir, ws) = ws_with(&[("a.ts", "let a = 1;\n"), ("kiln.toml", "x = 1\n")]);
        let p = crate::path::Protected::default();
        let r = apply_files(
            &ws,
            &[
                nf("a.ts", "let a = 1;\n", "let b = 1;\n"),
                nf("kiln.toml", "x = 1\n", "y = 1\n"),
            ],
            &p,
        )
        .unwrap();
        assert!(r.unwrap_err()[0].contains("protected"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.ts")).unwrap(),
            "let a = 1;\n"
        );
        let r = apply_files(&ws, &[nf("a.ts", "stale", "let b = 1;\n")], &p).unwrap();
        assert!(r.unwrap_err()[0].contains("changed since"));
        let (diff, written) = apply_files(&ws, &[nf("a.ts", "let a = 1;\n", "let b = 1;\n")], &p)
            .unwrap()
            .unwrap();
        assert_eq!(written, ["a.ts"]);
        assert!(diff.contains("-let a = 1;\n+let b = 1;\n"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.ts")).unwrap(),
            "let b = 1;\n"
        );
    }
}
