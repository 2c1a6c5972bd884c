//! The `node` runner: `npm test` (default) or `node --test` (`mode = "node"`), with every
//! failing test as a diagnostic at the deepest frame of its stack inside the project (not
//! `node_modules`, not node's internals), with the test's name and its error. Parsed from
//! `node --test`'s TAP report (its format when not writing to a terminal), and from jest's and
//! vitest's failure reports (`● suite › name` / `FAIL file > name`) when the test script runs
//! those.
//!
//! Settings: `mode` (`npm`, `node`), `args` (extra arguments, split on whitespace).

use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};

struct Node;

/// Prints the directory the programs run in (stack frames are absolute paths).
const CWD_SCRIPT: &str = "process.stdout.write(process.cwd())";

impl Runner for Node {
    fn manifest() -> Manifest {
        runner::manifest(
            "node",
            env!("CARGO_PKG_VERSION"),
            "npm test / node --test with failing tests as structured diagnostics",
        )
        .with_exec("npm", &["test", "*"])
        .with_exec("node", &["--test", "*"])
        .with_exec("node", &["-e", CWD_SCRIPT])
        .with_env("NODE_OPTIONS")
        .with_env("NO_COLOR")
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "node".into(),
            description: "npm test or node --test; failing tests (TAP, jest, vitest) as structured diagnostics".into(),
            languages: vec!["javascript".into(), "typescript".into()],
            patterns: vec!["*.js".into(), "*.ts".into(), "package.json".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let mode = runner::setting(&request, "mode").unwrap_or("npm");
        let mut args: Vec<String> = match mode {
            "npm" => vec!["test".into()],
            "node" => vec!["--test".into()],
            _ => {
                return Err(Error::InvalidInput(format!(
                    "node runner: mode `{mode}` is not one of npm, node"
                )));
            }
        };
        if let Some(extra) = runner::setting(&request, "args") {
            if mode == "npm" {
                args.push("--".into());
            }
            args.extend(extra.split_whitespace().map(String::from));
        }
        let cwd = project_dir();
        let program = if mode == "npm" { "npm" } else { "node" };
        let mut cmd = runner::command(program, &args);
        // Plain text: vitest colours its report even when not writing to a terminal.
        cmd.env.push(("NO_COLOR".into(), "1".into()));
        let out = runner::exec(&cmd)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let plain = strip_ansi(&format!("{stdout}\n{stderr}"));
        let mut diagnostics = parse_tap(&plain, &cwd);
        if diagnostics.is_empty() {
            diagnostics = parse_jest(&plain, &cwd);
        }
        let exit_code = out.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !out.timed_out,
            exit_code,
            stdout,
            stderr,
            duration_ms: out.duration_ms,
            diagnostics,
            truncated: out.truncated,
            timed_out: out.timed_out,
        })
    }
}

kiln_guest::export_runner!(Node);

/// The project's directory as the programs see it (stack frames are absolute).
fn project_dir() -> String {
    let args = vec!["-e".to_string(), CWD_SCRIPT.to_string()];
    match runner::exec(&runner::command("node", &args)) {
        Ok(o) if o.exit_code == Some(0) => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => String::new(),
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `(file, line, column)` of a stack frame or location inside the project, relative to it.
fn frame(s: &str, cwd: &str) -> Option<(String, u32, u32)> {
    let s = s.trim().trim_start_matches("at ").trim();
    let s = match (s.rfind('('), s.ends_with(')')) {
        (Some(open), true) => &s[open + 1..s.len() - 1],
        _ => s.rsplit(' ').next().unwrap_or(s),
    };
    let s = s.trim_start_matches("file://");
    let mut parts = s.rsplitn(3, ':');
    let col = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    let path = parts.next()?;
    if path.starts_with("node:") || path.contains("node_modules/") || path.is_empty() {
        return None;
    }
    let rel = if path.starts_with('/') {
        let cwd = cwd.trim_end_matches('/');
        if cwd.is_empty() {
            return None;
        }
        path.strip_prefix(cwd)?.strip_prefix('/')?.to_string()
    } else {
        path.to_string()
    };
    Some((rel, line, col))
}

fn diagnostic(test: &str, error: &str, loc: Option<(String, u32, u32)>) -> Diagnostic {
    let (file, line, column) = loc.unwrap_or_default();
    Diagnostic {
        file,
        line,
        column,
        severity: Severity::Error,
        code: Some("test-failure".into()),
        message: format!(
            "test {test} failed{}{error}",
            if error.is_empty() { "" } else { ": " }
        ),
    }
}

/// `not ok N - name` and its YAML block (`location`, `error`, `name`, `stack`); a suite
/// failing only because a subtest did is skipped (the subtest says it).
fn parse_tap(out: &str, cwd: &str) -> Vec<Diagnostic> {
    let lines: Vec<&str> = out.lines().collect();
    let mut diags = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        i += 1;
        let Some(rest) = l.strip_prefix("not ok ") else {
            continue;
        };
        let name = rest
            .split_once(" - ")
            .map(|(_, n)| n)
            .unwrap_or(rest)
            .trim();
        // The YAML block: from `---` to `...`.
        if i >= lines.len() || lines[i].trim() != "---" {
            diags.push(diagnostic(name, "", None));
            continue;
        }
        let indent = lines[i].len() - lines[i].trim_start().len();
        i += 1;
        let mut fields: Vec<(String, Vec<String>)> = Vec::new();
        while i < lines.len() && lines[i].trim() != "..." {
            let raw = lines[i];
            i += 1;
            let ind = raw.len() - raw.trim_start().len();
            let t = raw.trim();
            if ind == indent
                && let Some((k, v)) = t.split_once(':')
                && !k.contains(' ')
            {
                let v = v.trim();
                let v = if v == "|-" || v == "|" || v == ">-" {
                    Vec::new()
                } else {
                    vec![v.trim_matches('\'').replace("''", "'")]
                };
                fields.push((k.to_string(), v));
            } else if let Some(f) = fields.last_mut() {
                f.1.push(t.to_string());
            }
        }
        i += 1;
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get("failureType").is_some_and(|v| v.iter().any(|x| x == "subtestsFailed")) {
            continue;
        }
        let error: Vec<String> = get("error")
            .unwrap_or_default()
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect();
        let mut error = error.join(" ");
        if let Some(n) = get("name").and_then(|v| v.first().cloned())
            && !error.starts_with(&n)
        {
            error = format!("{n}: {error}");
        }
        let loc = get("stack")
            .unwrap_or_default()
            .iter()
            .find_map(|f| frame(f, cwd))
            .or_else(|| get("location").and_then(|v| v.first().and_then(|l| frame(l, cwd))));
        diags.push(diagnostic(name, &error, loc));
    }
    diags
}

/// jest (`● suite › name`, message, `at fn (file:L:C)`) and vitest (`FAIL file > name`,
/// message, `❯ file:L:C`) failure reports.
fn parse_jest(out: &str, cwd: &str) -> Vec<Diagnostic> {
    let lines: Vec<&str> = out.lines().collect();
    let mut diags = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        i += 1;
        let name = if let Some(n) = t.strip_prefix("● ") {
            if n.starts_with("Test suite failed to run") {
                n.to_string()
            } else {
                n.replace(" › ", " > ")
            }
        } else if let Some(n) = t.strip_prefix("FAIL ").filter(|n| n.contains(" > ")) {
            n.trim().to_string()
        } else {
            continue;
        };
        let mut message = Vec::new();
        let mut loc = None;
        while i < lines.len() {
            let t = lines[i].trim();
            if t.starts_with("● ") || t.starts_with("FAIL ") || t.starts_with("⎯") {
                break;
            }
            i += 1;
            if let Some(f) = t
                .strip_prefix("at ")
                .or_else(|| t.strip_prefix("❯ "))
                .and_then(|f| frame(f, cwd))
            {
                loc.get_or_insert(f);
                continue;
            }
            let code_frame = t.starts_with('>')
                || t.starts_with('|')
                || t.split_once(" |")
                    .is_some_and(|(n, _)| n.trim().parse::<u32>().is_ok());
            if loc.is_none() && !t.is_empty() && !code_frame && message.len() < 6 {
                message.push(t.to_string());
            }
        }
        diags.push(diagnostic(&name, &message.join(" "), loc));
    }
    diags
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAP: &str = "TAP version 13\n# Subtest: math\n    # Subtest: adds\n    not ok 1 - adds\n      ---\n      duration_ms: 1.5\n      location: '/w/test/calc.test.js:5:1'\n      failureType: 'testCodeFailure'\n      error: |-\n        Expected values to be strictly equal:\n        \n        -1 !== 3\n        \n      code: 'ERR_ASSERTION'\n      name: 'AssertionError'\n      stack: |-\n        TestContext.<anonymous> (/w/test/calc.test.js:6:10)\n        Test.run (node:internal/test_runner/test:796:25)\n      ...\n    1..1\nnot ok 1 - math\n  ---\n  location: '/w/test/calc.test.js:3:1'\n  failureType: 'subtestsFailed'\n  error: '1 subtest failed'\n  ...\n# Subtest: divides\nnot ok 2 - divides\n  ---\n  location: '/w/test/calc.test.js:9:1'\n  failureType: 'testCodeFailure'\n  error: 'division by zero'\n  code: 'ERR_TEST_FAILURE'\n  stack: |-\n    exports.div (/w/calc.js:2:46)\n    TestContext.<anonymous> (/w/test/calc.test.js:10:22)\n  ...\nok 3 - ok\n";

    #[test]
    fn tap_failures_at_the_deepest_project_frame() {
        let d = parse_tap(TAP, "/w");
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].column),
            ("test/calc.test.js", 6, 10)
        );
        assert_eq!(
            d[0].message,
            "test adds failed: AssertionError: Expected values to be strictly equal: -1 !== 3"
        );
        assert_eq!((d[1].file.as_str(), d[1].line), ("calc.js", 2));
        assert_eq!(d[1].message, "test divides failed: division by zero");
    }

    #[test]
    fn jest_and_vitest_reports() {
        let jest = "FAIL test/calc.test.js\n  ● calc › adds\n\n    expect(received).toBe(expected) // Object.is equality\n\n    Expected: 3\n    Received: -1\n\n      4 | test('adds', () => {\n    > 5 |   expect(add(1, 2)).toBe(3);\n        |                     ^\n\n      at Object.toBe (test/calc.test.js:5:21)\n      at node_modules/jest-circus/x.js:1:1\n";
        let d = parse_jest(jest, "/w");
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].column),
            ("test/calc.test.js", 5, 21)
        );
        assert!(
            d[0].message
                .starts_with("test calc > adds failed: expect(received).toBe(expected)"),
            "{}",
            d[0].message
        );
        // vitest 4, as it printed it (colours and all).
        let vitest = " \u{1b}[31m❯\u{1b}[39m test/calc.test.js \u{1b}[2m(\u{1b}[22m2 tests | 2 failed)\n\u{1b}[31m⎯⎯⎯⎯⎯⎯⎯\u{1b}[39m\u{1b}[1m\u{1b}[41m Failed Tests 2 \u{1b}[49m\u{1b}[22m\u{1b}[31m⎯⎯⎯⎯⎯⎯⎯\u{1b}[39m\n\n\u{1b}[41m\u{1b}[1m FAIL \u{1b}[22m\u{1b}[49m test/calc.test.js\u{1b}[2m > \u{1b}[22mcalc\u{1b}[2m > \u{1b}[22madds\n\u{1b}[31m\u{1b}[1mAssertionError\u{1b}[22m: expected -1 to be 3 // Object.is equality\u{1b}[39m\n\n\u{1b}[32m- Expected\u{1b}[39m\n\u{1b}[31m+ Received\u{1b}[39m\n\n\u{1b}[32m- 3\u{1b}[39m\n\u{1b}[31m+ -1\u{1b}[39m\n\n\u{1b}[36m \u{1b}[2m❯\u{1b}[22m test/calc.test.js:\u{1b}[2m6:23\u{1b}[22m\u{1b}[39m\n    \u{1b}[90m  6|\u{1b}[39m     expect(add(1, 2)).toBe(3);\n\n\u{1b}[31m\u{1b}[2m⎯⎯⎯⎯⎯⎯⎯⎯[1/2]⎯\u{1b}[22m\u{1b}[39m\n\n\u{1b}[41m\u{1b}[1m FAIL \u{1b}[22m\u{1b}[49m test/calc.test.js\u{1b}[2m > \u{1b}[22mcalc\u{1b}[2m > \u{1b}[22mdivides\n\u{1b}[31m\u{1b}[1mError\u{1b}[22m: division by zero\u{1b}[39m\n\u{1b}[36m \u{1b}[2m❯\u{1b}[22m div calc.js:\u{1b}[2m3:22\u{1b}[22m\u{1b}[39m\n    \u{1b}[90m  3|\u{1b}[39m   if (b === 0) throw new Error(\"division by zero\");\n\u{1b}[90m \u{1b}[2m❯\u{1b}[22m test/calc.test.js:\u{1b}[2m9:12\u{1b}[22m\u{1b}[39m\n";
        let d = parse_jest(&strip_ansi(vitest), "/w");
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            (d[0].file.as_str(), d[0].line, d[0].column),
            ("test/calc.test.js", 6, 23)
        );
        assert!(
            d[0].message.starts_with(
                "test test/calc.test.js > calc > adds failed: AssertionError: expected -1 to be 3 // Object.is equality"
            ),
            "{}",
            d[0].message
        );
        assert_eq!(
            (d[1].file.as_str(), d[1].line, d[1].column),
            ("calc.js", 3, 22)
        );
        assert_eq!(
            d[1].message,
            "test test/calc.test.js > calc > divides failed: Error: division by zero"
        );
    }
}
