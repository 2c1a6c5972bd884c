//! The `pytest` runner: runs the project's tests with `python3 -m pytest` semantics and turns
//! every failing or erroring test of pytest's JUnit XML report into a structured diagnostic at
//! the deepest workspace frame of its traceback (where the assertion or exception happened),
//! with the test's name, the exception and its message.
//!
//! pytest writes the report to a file; a runner reaches only the workspace, so a fixed
//! Python snippet ([`SCRIPT`]) runs `pytest.main` with the report in the call's temp dir and
//! prints it after the test output, behind a marker line carrying the working directory (to
//! make absolute paths workspace-relative). The output shown is pytest's own, without it.
//!
//! Settings: `python` (the interpreter, default `python3`), `args` (extra pytest arguments,
//! split on whitespace).

use kiln_guest::runner::{
    self, Diagnostic, Error, Manifest, RunRequest, RunResult, Runner, RunnerInfo, Severity,
};

/// Runs pytest with the JUnit report in the temp dir and appends it behind [`MARKER`]. Must
/// hold no `*` or `?` (it is matched as an exact exec argument).
const SCRIPT: &str = "import os,sys,tempfile\nsys.pycache_prefix=tempfile.mkdtemp()\nsys.dont_write_bytecode=True\nimport pytest\np=os.path.join(tempfile.mkdtemp(),'junit.xml')\nc=pytest.main(['-p','no:cacheprovider','--junitxml='+p]+sys.argv[1:])\nsys.stdout.flush()\nx=open(p,encoding='utf-8').read() if os.path.exists(p) else ''\nsys.stdout.write('\\n@@kiln-pytest-junit@@ '+os.getcwd()+'\\n'+x)\nsys.stdout.flush()\nsys.exit(int(c))\n";
// Bytecode is neither read from nor written to the project (`pycache_prefix` is a fresh
// directory, `dont_write_bytecode`): a fix written within the second of the last run, of the
// same size (`a - b` -> `a + b`), would otherwise be hidden by the `.pyc` of the old text,
// whose check is the source's mtime in seconds and its size.
const MARKER: &str = "\n@@kiln-pytest-junit@@ ";

struct Pytest;

impl Runner for Pytest {
    fn manifest() -> Manifest {
        runner::manifest(
            "pytest",
            env!("CARGO_PKG_VERSION"),
            "pytest with failing tests as structured diagnostics",
        )
        .with_exec("python3", &["-c", SCRIPT, "*"])
        .with_exec("python", &["-c", SCRIPT, "*"])
        .with_env("VIRTUAL_ENV")
        .with_env("PYTHONPATH")
        .with_timeout_ms(600_000)
    }

    fn describe() -> RunnerInfo {
        RunnerInfo {
            name: "pytest".into(),
            description: "pytest; failing tests (JUnit XML report) as diagnostics at the assertion or exception".into(),
            languages: vec!["python".into()],
            patterns: vec!["*.py".into(), "pyproject.toml".into(), "pytest.ini".into()],
        }
    }

    fn run(request: RunRequest) -> Result<RunResult, Error> {
        let python = runner::setting(&request, "python").unwrap_or("python3");
        let mut args = vec!["-c".to_string(), SCRIPT.to_string()];
        if let Some(extra) = runner::setting(&request, "args") {
            args.extend(extra.split_whitespace().map(String::from));
        }
        let out = runner::exec(&runner::command(python, &args))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if stderr.contains("No module named pytest") {
            return Err(Error::NotFound(format!(
                "pytest is not installed for `{python}`: install it (`{python} -m pip install pytest`) or set `python` under [plugins.pytest.settings]"
            )));
        }
        let (text, diagnostics) = split_report(&stdout);
        let exit_code = out.exit_code.unwrap_or(-1);
        Ok(RunResult {
            ok: exit_code == 0 && !out.timed_out,
            exit_code,
            stdout: text,
            stderr,
            duration_ms: out.duration_ms,
            diagnostics,
            truncated: out.truncated,
            timed_out: out.timed_out,
        })
    }
}

kiln_guest::export_runner!(Pytest);

/// pytest's own output and the diagnostics of the report behind the marker.
fn split_report(stdout: &str) -> (String, Vec<Diagnostic>) {
    match stdout.rfind(MARKER) {
        Some(at) => {
            let rest = &stdout[at + MARKER.len()..];
            let (cwd, xml) = rest.split_once('\n').unwrap_or((rest, ""));
            (stdout[..at].to_string(), parse_junit(xml, cwd))
        }
        None => (stdout.to_string(), Vec::new()),
    }
}

/// One diagnostic per `<testcase>` holding a `<failure>` or `<error>`.
fn parse_junit(xml: &str, cwd: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<testcase") {
        rest = &rest[start..];
        let Some(head_end) = rest.find('>') else {
            break;
        };
        let head = &rest[..head_end];
        if head.ends_with('/') {
            rest = &rest[head_end..];
            continue;
        }
        let end = rest.find("</testcase>").unwrap_or(rest.len());
        let body = &rest[head_end + 1..end];
        rest = &rest[end..];
        let classname = attr(head, "classname").unwrap_or_default();
        let name = attr(head, "name").unwrap_or_default();
        let test = if classname.is_empty() {
            name
        } else {
            format!("{classname}::{name}")
        };
        for tag in ["failure", "error"] {
            let open = format!("<{tag}");
            let Some(at) = body.find(&open) else {
                continue;
            };
            let el = &body[at..];
            let Some(h) = el.find('>') else { continue };
            let ehead = &el[..h];
            let text = if ehead.ends_with('/') {
                String::new()
            } else {
                let close = format!("</{tag}>");
                unescape(&el[h + 1..el.find(&close).unwrap_or(el.len())])
            };
            let message = attr(ehead, "message").unwrap_or_default();
            out.push(diagnostic(&test, tag, &message, &text, cwd));
        }
    }
    out
}

fn diagnostic(test: &str, tag: &str, message: &str, text: &str, cwd: &str) -> Diagnostic {
    let (file, line, exception) = location(text, cwd).unwrap_or_default();
    // The `E   ` lines hold the exception as Python printed it.
    let e_lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix('E'))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let detail = if message.is_empty() || message == "collection failure" {
        e_lines.last().copied().unwrap_or(message).to_string()
    } else {
        let m: Vec<&str> = message.lines().map(str::trim).collect();
        let m = m.join(" ");
        if exception.is_empty() || m.starts_with(&exception) {
            m
        } else {
            format!("{exception}: {m}")
        }
    };
    let what = if tag == "error" { "errored" } else { "failed" };
    Diagnostic {
        file,
        line,
        column: 0,
        severity: Severity::Error,
        code: Some("test-failure".into()),
        message: format!("test {test} {what}: {detail}"),
    }
}

/// The deepest frame of the traceback inside the workspace: `path:LINE: Exception` /
/// `path:LINE: in func` lines, and `File "path", line N` (a syntax error while importing).
fn location(text: &str, cwd: &str) -> Option<(String, u32, String)> {
    let mut found = None;
    for l in text.lines() {
        let l = l.trim_end();
        if let Some(rest) = l
            .trim_start_matches('E')
            .trim_start()
            .strip_prefix("File \"")
            && let Some((path, tail)) = rest.split_once("\", line ")
        {
            let n: String = tail.chars().take_while(char::is_ascii_digit).collect();
            if let (Some(p), Ok(n)) = (relative(path, cwd), n.parse()) {
                found = Some((p, n, String::new()));
            }
            continue;
        }
        if l.starts_with(' ') {
            continue;
        }
        // `path:LINE: rest`, path without spaces.
        let mut parts = l.splitn(3, ':');
        let (Some(path), Some(n), Some(tail)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if path.is_empty() || path.contains(' ') || path.starts_with('<') {
            continue;
        }
        let Ok(n) = n.parse::<u32>() else { continue };
        if let Some(p) = relative(path, cwd) {
            let tail = tail.trim();
            let exception = if tail.starts_with("in ") {
                String::new()
            } else {
                tail.to_string()
            };
            found = Some((p, n, exception));
        }
    }
    found
}

/// `path` relative to the workspace, or `None` when it lies outside (site-packages, ...).
fn relative(path: &str, cwd: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some(path.to_string());
    }
    let cwd = cwd.trim_end_matches('/');
    path.strip_prefix(cwd)
        .and_then(|p| p.strip_prefix('/'))
        .map(String::from)
}

fn attr(head: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = head.find(&key)? + key.len();
    let end = head[at..].find('"')?;
    Some(unescape(&head[at..at + end]))
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(semi) = rest.find(';').filter(|&n| n <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let ent = &rest[1..semi];
        let ch = match ent {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => ent
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0" failures="2" skipped="0" tests="3"><testcase classname="test_calc" name="test_add" time="0.000"><failure message="assert -1 == 3&#10; +  where -1 = add(1, 2)">def test_add():
&gt;       assert add(1, 2) == 3
E       assert -1 == 3
E        +  where -1 = add(1, 2)

test_calc.py:5: AssertionError</failure></testcase><testcase classname="test_calc" name="test_div" time="0.000"><failure message="ZeroDivisionError: division by zero">def test_div():
&gt;       assert div(1, 0) == 0

test_calc.py:9: 
_ _ _ _ _ _ _ _

    def div(a, b):
&gt;       return a / b
E       ZeroDivisionError: division by zero

calc.py:6: ZeroDivisionError</failure></testcase><testcase classname="test_calc" name="test_ok" time="0.000" /></testsuite></testsuites>"#;

    #[test]
    fn failures_point_at_the_deepest_workspace_frame() {
        let d = parse_junit(REPORT, "/ws");
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].file.as_str(), d[0].line), ("test_calc.py", 5));
        assert_eq!(
            d[0].message,
            "test test_calc::test_add failed: AssertionError: assert -1 == 3 +  where -1 = add(1, 2)"
        );
        assert_eq!((d[1].file.as_str(), d[1].line), ("calc.py", 6));
        assert_eq!(
            d[1].message,
            "test test_calc::test_div failed: ZeroDivisionError: division by zero"
        );
    }

    #[test]
    fn a_collection_error_points_at_the_syntax_error() {
        let xml = r#"<testcase classname="" name="test_calc" time="0.000"><error message="collection failure">/usr/lib/python3.11/site-packages/_pytest/python.py:528: in importtestmodule
    mod = import_path(
&lt;frozen importlib._bootstrap&gt;:1204: in _gcd_import
    ???
test_calc.py:1: in &lt;module&gt;
    from calc import add
E     File "/ws/pkg/calc.py", line 1
E       def add(a, b)
E                    ^
E   SyntaxError: expected ':'</error></testcase>"#;
        let d = parse_junit(xml, "/ws");
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].file.as_str(), d[0].line), ("pkg/calc.py", 1));
        assert_eq!(
            d[0].message,
            "test test_calc errored: SyntaxError: expected ':'"
        );
    }

    #[test]
    fn the_report_is_cut_from_the_output() {
        let out = format!("1 failed\n{MARKER}/ws\n{REPORT}");
        let (text, d) = split_report(&out);
        assert_eq!(text, "1 failed\n");
        assert_eq!(d.len(), 2);
    }
}
