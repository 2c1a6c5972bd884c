//! The `cargo` runner: `cargo check` (default), `build` or `test` with
//! `--message-format=json`; compiler messages become structured diagnostics (primary span,
//! level, code) and failing tests become diagnostics at their panic location. The output
//! shown to the model is the compiler's rendered text, not the JSON.
//!
//! Settings: `mode` (`check`, `build`, `test`), `args` (extra arguments, split on whitespace),
//! `cargo_home` (set by kiln when the network is granted: a CARGO_HOME of kiln's own for the
//! workspace, becomes `CARGO_HOME`).

use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};
use serde_json::Value;

struct Cargo;

impl Runner for Cargo {
    fn manifest() -> Manifest {
        runner::manifest(
            "cargo",
            env!("CARGO_PKG_VERSION"),
            "cargo check/build/test with structured diagnostics",
        )
        .with_exec("cargo", &["*"])
        .with_env("CARGO_HOME")
        .with_env("RUSTUP_HOME")
        .with_env("RUSTUP_TOOLCHAIN")
        .with_env("CARGO_TARGET_DIR")
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "cargo".into(),
            description: "cargo check/build/test; compiler JSON diagnostics and failing tests as structured diagnostics".into(),
            languages: vec!["rust".into()],
            patterns: vec!["*.rs".into(), "Cargo.toml".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let mode = runner::setting(&request, "mode").unwrap_or("check");
        if !matches!(mode, "check" | "build" | "test") {
            return Err(Error::InvalidInput(format!(
                "cargo runner: mode `{mode}` is not one of check, build, test"
            )));
        }
        let mut args = vec![
            mode.to_string(),
            "--message-format=json".to_string(),
            "--color=never".to_string(),
        ];
        if let Some(extra) = runner::setting(&request, "args") {
            args.extend(extra.split_whitespace().map(String::from));
        }
        let mut cmd = runner::command("cargo", &args);
        // A CARGO_HOME of kiln's own for this workspace, where a build with the network may
        // download (the user's caches are read-only to it).
        if let Some(home) = runner::setting(&request, "cargo_home") {
            cmd.env.push(("CARGO_HOME".into(), home.into()));
        }
        let out = runner::exec(&cmd)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let parsed = parse_output(&stdout);
        let exit_code = out.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !out.timed_out,
            exit_code,
            stdout: parsed.text,
            stderr,
            duration_ms: out.duration_ms,
            diagnostics: parsed.diagnostics,
            truncated: out.truncated,
            timed_out: out.timed_out,
        })
    }
}

kiln_guest::export_runner!(Cargo);

struct Parsed {
    text: String,
    diagnostics: Vec<Diagnostic>,
}

fn level(l: &str) -> Option<Severity> {
    match l {
        "error" | "error: internal compiler error" => Some(Severity::Error),
        "warning" => Some(Severity::Warning),
        "note" | "failure-note" => Some(Severity::Note),
        "help" => Some(Severity::Help),
        _ => None,
    }
}

fn parse_output(stdout: &str) -> Parsed {
    let mut text = String::new();
    let mut diagnostics = Vec::new();
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with('{')
            && let Ok(v) = serde_json::from_str::<Value>(line)
        {
            if v["reason"] == "compiler-message" {
                let m = &v["message"];
                if let Some(r) = m["rendered"].as_str() {
                    text.push_str(r);
                }
                let Some(sev) = m["level"].as_str().and_then(level) else {
                    continue;
                };
                let span = m["spans"]
                    .as_array()
                    .and_then(|s| s.iter().find(|s| s["is_primary"] == true).or(s.first()));
                let (file, line, column) = match span {
                    Some(s) => (
                        s["file_name"].as_str().unwrap_or("").to_string(),
                        s["line_start"].as_u64().unwrap_or(0) as u32,
                        s["column_start"].as_u64().unwrap_or(0) as u32,
                    ),
                    None => (String::new(), 0, 0),
                };
                let message = m["message"].as_str().unwrap_or("").to_string();
                if file.is_empty()
                    && (message.starts_with("aborting due to") || sev != Severity::Error)
                {
                    continue;
                }
                diagnostics.push(Diagnostic {
                    file,
                    line,
                    column,
                    severity: sev,
                    code: m
                        .pointer("/code/code")
                        .and_then(Value::as_str)
                        .map(String::from),
                    message,
                });
            }
            continue;
        }
        // Test harness output: `---- name stdout ----` then `thread 'name' panicked at FILE:L:C:`.
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            text.push_str(line);
            text.push('\n');
            let mut detail = Vec::new();
            let mut location = None;
            while let Some(next) = lines.peek() {
                if next.starts_with("---- ") || next.starts_with("failures:") {
                    break;
                }
                let next = lines.next().unwrap();
                text.push_str(next);
                text.push('\n');
                if let Some(loc) = next.split(" panicked at ").nth(1) {
                    location = parse_location(loc.trim_end_matches(':'));
                } else if !next.trim().is_empty() && !next.starts_with("note: run with") {
                    detail.push(next.trim().to_string());
                }
            }
            let (file, line, column) = location.unwrap_or_default();
            diagnostics.push(Diagnostic {
                file,
                line,
                column,
                severity: Severity::Error,
                code: Some("test-failure".into()),
                message: format!(
                    "test {name} failed{}{}",
                    if detail.is_empty() { "" } else { ": " },
                    detail.join(" | ")
                ),
            });
            continue;
        }
        text.push_str(line);
        text.push('\n');
    }
    Parsed { text, diagnostics }
}

fn parse_location(s: &str) -> Option<(String, u32, u32)> {
    let mut parts = s.rsplitn(3, ':');
    let col = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    Some((parts.next()?.to_string(), line, col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiler_messages_and_test_failures() {
        let out = concat!(
            r#"{"reason":"compiler-artifact","target":{}}"#,
            "\n",
            r#"{"reason":"compiler-message","message":{"rendered":"error[E0308]: mismatched types\n --> src/main.rs:2:18\n","level":"error","message":"mismatched types","code":{"code":"E0308"},"spans":[{"file_name":"src/main.rs","line_start":2,"column_start":18,"is_primary":true}]}}"#,
            "\n",
            r#"{"reason":"compiler-message","message":{"rendered":"error: aborting due to 1 previous error\n","level":"error","message":"aborting due to 1 previous error","code":null,"spans":[]}}"#,
            "\n",
            "running 2 tests\n",
            "---- tests::adds stdout ----\n",
            "thread 'tests::adds' panicked at src/lib.rs:10:9:\n",
            "assertion `left == right` failed\n",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
            "\nfailures:\n    tests::adds\n",
        );
        let p = parse_output(out);
        assert_eq!(p.diagnostics.len(), 2);
        let d = &p.diagnostics[0];
        assert_eq!(
            (d.file.as_str(), d.line, d.column, d.code.as_deref()),
            ("src/main.rs", 2, 18, Some("E0308"))
        );
        let t = &p.diagnostics[1];
        assert_eq!(
            (t.file.as_str(), t.line, t.code.as_deref()),
            ("src/lib.rs", 10, Some("test-failure"))
        );
        assert!(
            t.message
                .contains("test tests::adds failed: assertion `left == right` failed"),
            "{}",
            t.message
        );
        assert!(
            p.text.contains("error[E0308]: mismatched types")
                && !p.text.contains("compiler-artifact")
        );
    }
}
