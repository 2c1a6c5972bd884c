//! A tool call's result as a person reads it, shared by the console (`tool.end`), `kiln
//! history show` and the HTML report, so they tell the same story: JSON results shown as
//! text (strings with their real line breaks, not `\n` escapes), and a command that ran but
//! exited non-zero (or ran out of time) counted as failed, not shown with a ✓.

use serde_json::Value;

/// Whether a call failed: its outcome was an error, or its result reports a command that
/// exited non-zero or timed out (`run_cmd`'s `exit_code` / `timed_out`).
pub fn failed(is_error: bool, result: &str) -> bool {
    if is_error {
        return true;
    }
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(result) else {
        return false;
    };
    m.get("exit_code")
        .and_then(Value::as_i64)
        .is_some_and(|c| c != 0)
        || m.get("timed_out").and_then(Value::as_bool) == Some(true)
}

/// The result as text: a JSON object one `key: value` line per field (a string with line
/// breaks below its key, as it reads), anything else as it is.
pub fn as_text(result: &str) -> String {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(result) else {
        return result.to_string();
    };
    // What a person looks at first: the outcome of a command, then its output.
    const FIRST: &[&str] = &["exit_code", "timed_out", "stdout", "stderr", "content"];
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_by_key(|k| FIRST.iter().position(|f| f == k).unwrap_or(FIRST.len()));
    let mut out = String::new();
    for k in keys {
        let v = &m[k.as_str()];
        match v {
            Value::String(s) if s.is_empty() => continue,
            Value::String(s) if s.contains('\n') => {
                out.push_str(&format!("{k}:\n{}\n", s.trim_end_matches('\n')))
            }
            Value::String(s) => out.push_str(&format!("{k}: {s}\n")),
            Value::Bool(false) if k == "timed_out" || k == "truncated" => continue,
            other => out.push_str(&format!("{k}: {other}\n")),
        }
    }
    out.trim_end().to_string()
}

/// The first line worth showing of [`as_text`].
pub fn preview(result: &str) -> String {
    let text = as_text(result);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_results_read_as_text_and_a_non_zero_exit_fails() {
        let r = r#"{"duration_ms":5,"exit_code":1,"stderr":"E1\nE2\n","stdout":"","timed_out":false,"truncated":false}"#;
        assert!(failed(false, r));
        assert!(!failed(
            false,
            &r.replace("\"exit_code\":1", "\"exit_code\":0")
        ));
        assert!(failed(true, "whatever"));
        assert!(!failed(false, "plain text"));
        assert_eq!(as_text(r), "exit_code: 1\nstderr:\nE1\nE2\nduration_ms: 5");
        assert_eq!(preview(r), "exit_code: 1");
        assert_eq!(as_text("not json\n"), "not json\n");
    }
}
