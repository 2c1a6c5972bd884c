//! The `go` runner: `go test -json ./...` (default), `go build ./...` or `go vet ./...`
//! (`mode`). Compiler and vet messages (`./calc.go:4:9: undefined: y`) become diagnostics at
//! their file and line; a failing test becomes a diagnostic at its `t.Errorf` line or, when it
//! panicked, at the deepest frame inside the module, with the test's name and message. The
//! output shown is go's own text, not the JSON.
//!
//! Settings: `mode` (`test`, `build`, `vet`), `args` (extra arguments replacing `./...`,
//! split on whitespace).
//!
//! The `gocache` setting (which naming the runner sets to a build cache kiln keeps for the
//! workspace, granted read-write) becomes `GOCACHE`, so a check compiles only what changed
//! since the last one; without it the build cache goes to the (empty, writable) HOME kiln gives
//! each program. `GOTOOLCHAIN=local` keeps go from fetching another toolchain. The `modcache`
//! setting (which naming the runner sets to the user's module cache, granted read-only)
//! becomes `GOMODCACHE`, so a module already downloaded builds without network.

use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};
use serde_json::Value;
use std::collections::BTreeMap;

struct Go;

/// `go list -m -f` format: the main module's path and directory.
const MODULE_FORMAT: &str = "{{.Path}} {{.Dir}}";

impl Runner for Go {
    fn manifest() -> Manifest {
        runner::manifest(
            "go",
            env!("CARGO_PKG_VERSION"),
            "go test/build/vet with structured diagnostics",
        )
        .with_exec("go", &["test", "*"])
        .with_exec("go", &["build", "*"])
        .with_exec("go", &["vet", "*"])
        .with_exec("go", &["list", "-m", "-f", MODULE_FORMAT])
        .with_env("GOFLAGS")
        .with_env("GOTOOLCHAIN")
        .with_env("GOPROXY")
        .with_env("GOMODCACHE")
        .with_env("GOCACHE")
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "go".into(),
            description: "go test -json/build/vet; compiler errors and failing tests as structured diagnostics".into(),
            languages: vec!["go".into()],
            patterns: vec!["*.go".into(), "go.mod".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let mode = runner::setting(&request, "mode").unwrap_or("test");
        let mut args: Vec<String> = match mode {
            "test" => vec!["test".into(), "-json".into()],
            "build" | "vet" => vec![mode.into()],
            _ => {
                return Err(Error::InvalidInput(format!(
                    "go runner: mode `{mode}` is not one of test, build, vet"
                )));
            }
        };
        match runner::setting(&request, "args") {
            Some(extra) => args.extend(extra.split_whitespace().map(String::from)),
            None => args.push("./...".into()),
        }
        let module = module_info(&request);
        let cmd = go(&request, &args);
        let out = runner::exec(&cmd)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let parsed = parse(&stdout, &stderr, &module);
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

kiln_guest::export_runner!(Go);

/// The main module's path and directory (to place test files, printed by base name, and to
/// make panic frames, printed absolute, workspace-relative).
#[derive(Default)]
struct Module {
    path: String,
    dir: String,
}

/// `go ARGS` with the toolchain kept local, the module cache of the `modcache` setting and the
/// build cache of the `gocache` setting.
fn go(request: &RunRequest, args: &[String]) -> runner::Command {
    let mut cmd = runner::command("go", args);
    cmd.env.push(("GOTOOLCHAIN".into(), "local".into()));
    if let Some(cache) = runner::setting(request, "modcache") {
        cmd.env.push(("GOMODCACHE".into(), cache.into()));
    }
    if let Some(cache) = runner::setting(request, "gocache") {
        cmd.env.push(("GOCACHE".into(), cache.into()));
    }
    cmd
}

fn module_info(request: &RunRequest) -> Module {
    let args: Vec<String> = ["list", "-m", "-f", MODULE_FORMAT]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let cmd = go(request, &args);
    match runner::exec(&cmd) {
        Ok(o) if o.exit_code == Some(0) => {
            let s = String::from_utf8_lossy(&o.stdout);
            let line = s.lines().next().unwrap_or("");
            let (path, dir) = line.split_once(' ').unwrap_or((line, ""));
            Module {
                path: path.to_string(),
                dir: dir.to_string(),
            }
        }
        _ => Module::default(),
    }
}

struct Parsed {
    text: String,
    diagnostics: Vec<Diagnostic>,
}

fn parse(stdout: &str, stderr: &str, module: &Module) -> Parsed {
    let mut text = String::new();
    let mut diagnostics = Vec::new();
    // Output of each (package, test), in order.
    let mut outputs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for line in stdout.lines() {
        let v = if line.starts_with('{') {
            serde_json::from_str::<Value>(line).ok()
        } else {
            None
        };
        let Some(v) = v else {
            text.push_str(line);
            text.push('\n');
            diagnostics.extend(compiler_line(line));
            continue;
        };
        let pkg = v["Package"].as_str().unwrap_or("").to_string();
        let test = v["Test"].as_str().unwrap_or("").to_string();
        match v["Action"].as_str() {
            Some("output") | Some("build-output") => {
                let o = v["Output"].as_str().unwrap_or("");
                text.push_str(o);
                if test.is_empty() {
                    diagnostics.extend(compiler_line(o.trim_end()));
                }
                outputs
                    .entry((pkg, test))
                    .or_default()
                    .push(o.trim_end().to_string());
            }
            Some("fail") if !test.is_empty() => failed.push((pkg, test)),
            _ => {}
        }
    }
    for l in stderr.lines() {
        diagnostics.extend(compiler_line(l));
    }
    for key in failed {
        let lines = outputs.remove(&key).unwrap_or_default();
        diagnostics.push(test_failure(&key.0, &key.1, &lines, module));
    }
    Parsed { text, diagnostics }
}

/// `./calc.go:4:9: undefined: y` or `calc.go:4: msg` at the start of a line (compiler, vet).
fn compiler_line(line: &str) -> Option<Diagnostic> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let (file, rest) = line.split_once(".go:")?;
    let file = format!("{}.go", file.trim_start_matches("./"));
    if file.contains(' ') {
        return None;
    }
    let mut parts = rest.splitn(3, ':');
    let line_no: u32 = parts.next()?.parse().ok()?;
    let second = parts.next()?;
    let (column, message) = match second.parse::<u32>() {
        Ok(c) => (c, parts.next()?.trim().to_string()),
        Err(_) => (
            0,
            format!(
                "{second}{}",
                parts.next().map(|p| format!(":{p}")).unwrap_or_default()
            )
            .trim()
            .to_string(),
        ),
    };
    if message.is_empty() {
        return None;
    }
    Some(Diagnostic {
        file,
        line: line_no,
        column,
        severity: Severity::Error,
        code: None,
        message,
    })
}

/// A failing test: its first `file_test.go:LINE: message` line, else (a panic) the deepest
/// frame inside the module.
fn test_failure(pkg: &str, test: &str, lines: &[String], module: &Module) -> Diagnostic {
    let pkg_dir = pkg
        .strip_prefix(module.path.as_str())
        .map(|d| d.trim_start_matches('/'))
        .filter(|_| !module.path.is_empty())
        .unwrap_or("");
    let mut loc: Option<(String, u32)> = None;
    let mut message = String::new();
    for l in lines {
        let t = l.trim();
        if let Some((file, rest)) = t.split_once(".go:")
            && !file.contains(' ')
            && !file.starts_with('/')
            && let Some((n, msg)) = rest.split_once(": ")
            && let Ok(n) = n.parse::<u32>()
        {
            let file = format!("{file}.go");
            let file = if pkg_dir.is_empty() {
                file
            } else {
                format!("{pkg_dir}/{file}")
            };
            loc = Some((file, n));
            message = msg.trim().to_string();
            break;
        }
    }
    if loc.is_none()
        && let Some(p) = lines.iter().find(|l| l.starts_with("panic: "))
    {
        message = p.trim_end_matches(" [recovered]").to_string();
        let prefix = format!("{}/", module.dir.trim_end_matches('/'));
        // The first frame inside the module after the runtime's own: the panic's site.
        for l in lines {
            let t = l.trim();
            if let Some(rel) = t
                .strip_prefix(prefix.as_str())
                .filter(|_| !module.dir.is_empty())
                && let Some((file, rest)) = rel.split_once(':')
            {
                let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(n) = n.parse() {
                    loc = Some((file.to_string(), n));
                    break;
                }
            }
        }
    }
    if message.is_empty() {
        message = lines
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("=== ") && !l.starts_with("--- "))
            .unwrap_or("")
            .to_string();
    }
    let (file, line) = loc.unwrap_or_default();
    Diagnostic {
        file,
        line,
        column: 0,
        severity: Severity::Error,
        code: Some("test-failure".into()),
        message: format!(
            "test {test} failed{}{message}",
            if message.is_empty() { "" } else { ": " }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(test: &str, output: &str) -> String {
        serde_json::json!({"Action": "output", "Package": "example.com/calc/sub", "Test": test, "Output": output}).to_string() + "\n"
    }

    #[test]
    fn failing_tests_and_panics() {
        let mut out = String::new();
        out += &ev("TestAdd", "=== RUN   TestAdd\n");
        out += &ev("TestAdd", "    calc_test.go:7: Add(1, 2) = -1, want 3\n");
        out += &ev("TestAdd", "--- FAIL: TestAdd (0.00s)\n");
        out += r#"{"Action":"fail","Package":"example.com/calc/sub","Test":"TestAdd"}"#;
        out += "\n";
        out += &ev(
            "TestDiv",
            "panic: runtime error: integer divide by zero [recovered]\n",
        );
        out += &ev(
            "TestDiv",
            "\t/usr/lib/go/src/testing/testing.go:1396 +0x24e\n",
        );
        out += &ev("TestDiv", "example.com/calc/sub.Div(...)\n");
        out += &ev("TestDiv", "\t/ws/sub/calc.go:8\n");
        out += &ev("TestDiv", "\t/ws/sub/calc_test.go:12 +0x12\n");
        out += r#"{"Action":"fail","Package":"example.com/calc/sub","Test":"TestDiv"}"#;
        out += "\n";
        let module = Module {
            path: "example.com/calc".into(),
            dir: "/ws".into(),
        };
        let p = parse(&out, "", &module);
        assert_eq!(p.diagnostics.len(), 2);
        let d = &p.diagnostics[0];
        assert_eq!((d.file.as_str(), d.line), ("sub/calc_test.go", 7));
        assert_eq!(d.message, "test TestAdd failed: Add(1, 2) = -1, want 3");
        let d = &p.diagnostics[1];
        assert_eq!((d.file.as_str(), d.line), ("sub/calc.go", 8));
        assert_eq!(
            d.message,
            "test TestDiv failed: panic: runtime error: integer divide by zero"
        );
        assert!(p.text.contains("--- FAIL: TestAdd") && !p.text.contains("\"Action\""));
    }

    #[test]
    fn compiler_errors_on_stderr() {
        let err = "# example.com/calc\n./calc.go:4:9: undefined: y\nvet: ./x.go:3: bad\n";
        let p = parse(
            "FAIL\texample.com/calc [build failed]\n",
            err,
            &Module::default(),
        );
        assert_eq!(p.diagnostics.len(), 1);
        let d = &p.diagnostics[0];
        assert_eq!(
            (d.file.as_str(), d.line, d.column, d.message.as_str()),
            ("calc.go", 4, 9, "undefined: y")
        );
    }
}
