//! `kiln report ID --html FILE` rendered by a real browser: a fix loop whose runner prints a
//! diagnostic holding `<script>` and an agent run with tool calls are written as pages, loaded
//! in headless Chromium (Debian's `chromium`; `.ci/run` installs it), and the DOM it builds
//! must show what the store holds: the iteration count, the stop reason, a diagnostic line
//! (as text, never as markup), a diff line, the token numbers, the tool calls.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::support::{Workspace, last_event};
use std::path::{Path, PathBuf};

/// The Chromium binary: `/usr/bin/chromium` (Debian's package).
fn chromium() -> PathBuf {
    let p = PathBuf::from("/usr/bin/chromium");
    assert!(
        p.exists(),
        "these tests need Debian's chromium (`apt-get install -y chromium`, as .ci/run does)"
    );
    p
}

/// Load `page` in headless Chromium, networking off, and return the DOM it built; with
/// `screenshot`, also save a 1200x1600 PNG of it there.
pub fn browser_dom(page: &Path, screenshot: Option<&Path>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()));
    if let Some(shot) = screenshot {
        let mut c = std::process::Command::new(chromium());
        c.args(cmd.get_args().collect::<Vec<_>>())
            .arg(format!("--screenshot={}", shot.display()))
            .arg("--window-size=1200,1600")
            .arg(format!("file://{}", page.display()));
        let out = c.output().unwrap();
        assert!(shot.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = cmd
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn sr(search: &str, replace: &str) -> String {
    format!("I changed the line.\n\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n")
}

/// The text of the element with `id` in a dumped DOM.
pub fn text_of(dom: &str, id: &str) -> String {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let rest = &dom[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find("</").unwrap() + start;
    rest[start..end].to_string()
}

#[test]
fn a_fix_run_report_shows_what_the_store_holds_in_a_browser() {
    let ws = Workspace::new();
    ws.write("x.txt", "line one\nbroken\n");
    ws.write(
        "check.sh",
        "if grep -q broken \"$1\"; then echo \"$1:2:1: error: <script>alert(1)</script> still broken\"; exit 1; fi\n",
    );
    let mock = MockLlm::start(vec![
        openai_text(&sr("broken\n", "still broken\n")),
        openai_text(&sr("still broken\n", "mended\n")),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--json",
            "--cmd",
            "sh check.sh {file}",
            "--file",
            "x.txt",
        ],
        &[],
    );
    r.expect_code(0);
    let row = ws.store().loops(1).unwrap().remove(0);
    assert_eq!(row.iters, 2);

    let out = ws.path().parent().unwrap().join("fix-report.html");
    let rep = ws.kiln(
        &[
            "report",
            &row.id.to_string(),
            "--html",
            out.to_str().unwrap(),
        ],
        &[],
    );
    rep.expect_code(0);
    // The console, the store and the page count the same iterations (the first check is not
    // one): the fix's summary said 2, so does `kiln report`.
    assert_eq!(last_event(&r, "loop.result")["iters"], 2);
    assert!(rep.stderr().contains("(2 iterations)"), "{}", rep.stderr());
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("default-src 'none'"));
    assert!(!html.contains("<script"), "the diagnostic is escaped");

    let shot = kiln_env::env()
        .var_os("KILN_REPORT_SCREENSHOT")
        .map(PathBuf::from);
    let dom = browser_dom(&out, shot.as_deref());
    assert!(!dom.contains("<script"), "no script element in the DOM");
    assert_eq!(text_of(&dom, "step-count"), "2");
    assert_eq!(text_of(&dom, "stop-reason"), "success");
    assert!(
        dom.contains("x.txt:2:1: error: &lt;script&gt;alert(1)&lt;/script&gt; still broken"),
        "{dom}"
    );
    assert!(
        dom.contains("<span class=\"add\">+still broken</span>"),
        "{dom}"
    );
    assert!(
        dom.contains("<span class=\"del\">-still broken</span>"),
        "{dom}"
    );
    // Every prompt token, cached or not, as the console counts them.
    assert_eq!(
        text_of(&dom, "tokens-input"),
        (row.tokens.input + row.tokens.cached_input).to_string()
    );
    assert_eq!(
        text_of(&dom, "tokens-output"),
        row.tokens.output.to_string()
    );
    assert!(row.tokens.output > 0);
    assert!(dom.contains("I changed the line."), "the model's summary");
    // Iteration 0 (the first check) and two iterations, in order, stop reason last.
    let (a, b, c) = (
        dom.find("id=\"step-0\"").unwrap(),
        dom.find("id=\"step-1\"").unwrap(),
        dom.find("id=\"step-2\"").unwrap(),
    );
    assert!(a < b && b < c && c < dom.find("id=\"stop\"").unwrap());

    // Undone, the fix run leaves the file as it was, and its next report says so.
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("x.txt"), "line one\nbroken\n");
    ws.kiln(
        &[
            "report",
            &row.id.to_string(),
            "--html",
            out.to_str().unwrap(),
        ],
        &[],
    )
    .expect_code(0);
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .contains("id=\"undone\"")
    );
}

#[test]
fn an_agent_run_report_shows_its_tool_calls() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    let patch = serde_json::json!({
        "path": "a.txt",
        "patch": "<<<<<<< SEARCH\none\n=======\nuno\n>>>>>>> REPLACE\n",
    })
    .to_string();
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("write_patch", &patch),
            ("read_file", r#"{"path":"nope.txt"}"#),
        ]),
        crate::mock_llm::call(
            "final_answer",
            serde_json::json!({ "summary": "all done, a.txt says uno" }),
        ),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--json",
            "-p",
            "change a",
        ],
        &[],
    );
    r.expect_code(0);
    let id = ws.store().loops(1).unwrap()[0].id;
    let out = ws.path().parent().unwrap().join("agent-report.html");
    ws.kiln(
        &["report", &id.to_string(), "--html", out.to_str().unwrap()],
        &[],
    )
    .expect_code(0);
    let shot = kiln_env::env()
        .var_os("KILN_REPORT_SCREENSHOT_AGENT")
        .map(PathBuf::from);
    let dom = browser_dom(&out, shot.as_deref());
    assert_eq!(text_of(&dom, "stop-reason"), "complete");
    assert!(
        dom.contains("write_patch") && dom.contains("read_file"),
        "{dom}"
    );
    assert!(
        dom.contains("class=\"okmark\"") && dom.contains("class=\"errmark\""),
        "{dom}"
    );
    assert!(dom.contains("<span class=\"add\">+uno</span>"), "{dom}");
    assert!(
        dom.contains("final_answer: all done, a.txt says uno"),
        "{dom}"
    );
}

/// `kiln report --batch`: a local batch of a fix and an agent task becomes a table page whose
/// rows (status, attempts) and links Chromium shows, each link a page of that task's run.
#[test]
fn a_batch_report_lists_its_tasks_and_links_each_run() {
    use crate::batch::{KEY, Mock, agent_task, fix_task, project, task_file};
    let ws = Workspace::new();
    let mock = Mock::start(std::time::Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    task_file(&ws, "nightly.jsonl", &[fix_task("f1"), agent_task("a1")]);
    ws.kiln(&["batch", "run", "nightly.jsonl", "--jobs", "2"], &[KEY])
        .expect_code(0);
    let r = ws.kiln(
        &["report", "--batch", "nightly", "--html", "nightly.html"],
        &[],
    );
    r.expect_code(0);
    let dom = browser_dom(&ws.root().join("nightly.html"), None);
    assert_eq!(text_of(&dom, "task-count"), "2", "{dom}");
    // No task has a priced cost: the total is zero, never `$-0.000000` (an empty f64 sum).
    assert_eq!(text_of(&dom, "cost"), "$0.00", "{dom}");
    for task in ["f1", "a1"] {
        let row = dom
            .split("<tr>")
            .find(|row| row.contains(&format!("<td>{task}</td>")))
            .unwrap_or_else(|| panic!("no row for {task}: {dom}"));
        assert!(
            row.contains(">success<") && row.contains("<td>1</td>"),
            "{row}"
        );
        assert!(
            row.contains(&format!("href=\"nightly-{task}.html\"")),
            "{row}"
        );
        let run = browser_dom(&ws.root().join(format!("nightly-{task}.html")), None);
        assert!(run.contains("Stopped:"), "{task}: {run}");
    }
    // A batch that does not exist is named.
    let r = ws.kiln(&["report", "--batch", "weekly", "--html", "w.html"], &[]);
    assert_ne!(r.code(), 0);
    assert!(r.stderr().contains("no batch `weekly`"), "{}", r.stderr());
}

/// A `run_cmd` whose command exits 1 is failed everywhere (✗ on the console, in `kiln history
/// show` and on the page), and its result reads as text with real line breaks on the page,
/// not as JSON with `\n` escapes.
#[test]
fn a_failing_command_is_not_shown_as_a_success_and_its_output_reads_as_text() {
    let ws = Workspace::new();
    ws.write(
        "check.sh",
        "echo 'first problem' >&2\necho 'second problem' >&2\nexit 1\n",
    );
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"sh check.sh"}"#)]),
        openai_text("the check fails"),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--test-command",
            "sh check.sh",
            "check it",
        ],
        &[],
    );
    r.expect_code(0);
    let console = r.stderr();
    assert!(console.contains("✗ run_cmd"), "{console}");
    assert!(!console.contains("✓ run_cmd"), "{console}");
    assert!(console.contains("exit_code: 1"), "{console}");

    let id = ws.store().loops(1).unwrap()[0].id;
    let h = ws.kiln(&["history", "show", &id.to_string()], &[]);
    assert!(h.stdout().contains("✗ run_cmd"), "{}", h.stdout());

    let out = ws.path().parent().unwrap().join("failing-report.html");
    ws.kiln(
        &["report", &id.to_string(), "--html", out.to_str().unwrap()],
        &[],
    )
    .expect_code(0);
    let dom = browser_dom(&out, None);
    let row = dom
        .split("<tr>")
        .find(|row| row.contains("run_cmd"))
        .unwrap_or_else(|| panic!("no run_cmd row: {dom}"));
    assert!(row.contains("class=\"errmark\""), "{row}");
    assert!(
        row.contains("exit_code: 1\nstderr:\nfirst problem\nsecond problem"),
        "{row}"
    );
    assert!(!row.contains("\\n"), "{row}");
}
