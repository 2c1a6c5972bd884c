//! The `shell` tool plugin: `run_cmd`, which runs a program through the host's `exec` import.
//! No shell is involved and nothing runs unless granted: `kiln.toml` (`[plugins.shell] exec`)
//! or `kiln agent --test-command "..."` says which programs and arguments are allowed.

use kiln_guest::tool::{self, Error, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};

struct Shell;

impl Tool for Shell {
    fn manifest() -> Manifest {
        tool::manifest(
            "shell",
            env!("CARGO_PKG_VERSION"),
            "run_cmd: run an allowlisted command in the workspace",
        )
        .with_exec("*", &["*"])
    }

    fn list_tools() -> Vec<ToolSpec> {
        vec![tool::spec(
            "run_cmd",
            "Run a command in the workspace root (only allowlisted commands run). Returns exit code, stdout and stderr (each cut at 16 KiB, keeping the end).",
            r#"{"type":"object","properties":{"command":{"type":"string","description":"The program, or a whole command line when args is omitted"},"args":{"type":"array","items":{"type":"string"}}},"required":["command"],"additionalProperties":false}"#,
            false,
        )]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        if name != "run_cmd" {
            return Err(Error::InvalidInput(format!(
                "unknown tool `{name}`; this plugin offers run_cmd"
            )));
        }
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| Error::InvalidInput(format!("arguments are not valid JSON: {e}")))?;
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::InvalidInput("`command` is required".into()))?;
        let (program, argv): (String, Vec<String>) =
            match args.get("args").and_then(Value::as_array) {
                Some(a) => (
                    command.to_string(),
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect(),
                ),
                None => {
                    let mut words = command.split_whitespace().map(String::from);
                    let p = words
                        .next()
                        .ok_or_else(|| Error::InvalidInput("`command` is empty".into()))?;
                    (p, words.collect())
                }
            };
        let out = tool::exec(&tool::command(&program, &argv))?;
        let tail = |b: &[u8]| {
            let s = String::from_utf8_lossy(b);
            let keep = 16 * 1024;
            if s.len() > keep {
                let mut start = s.len() - keep;
                while !s.is_char_boundary(start) {
                    start += 1;
                }
                format!("[... {start} bytes omitted ...]\n{}", &s[start..])
            } else {
                s.into_owned()
            }
        };
        Ok(json!({
            "exit_code": out.exit_code,
            "stdout": tail(&out.stdout),
            "stderr": tail(&out.stderr),
            "timed_out": out.timed_out,
            "truncated": out.truncated,
            "duration_ms": out.duration_ms,
        })
        .to_string())
    }
}

kiln_guest::export_tool!(Shell);
