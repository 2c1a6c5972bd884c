//! `kiln report ID --html FILE` rendered by a real browser: a fix loop whose runner prints a
//! diagnostic holding `<script>` and an agent run with tool calls are written as pages, loaded
//! in headless Chromium (Debian's `chromium`; `.ci/run` installs it), and the DOM it builds
//! must show what the store holds: the iteration count, the stop reason, a diagnostic line
//! (as text, never as markup), a diff line, the token numbers, the tool calls.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::support::{Workspace, last_event};
use kiln::llm::Usage;
use kiln::report::{Diff, ProgramChange, RunReport, Step};
use kiln::store::{IterationRow, LoopRow, RunKind, ToolCallRow};
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

/// `kiln report` on an agent run that patched a file named `<img src=x onerror=...>.txt`
/// to hold such a line and whose last answer closes `</pre>` and opens `<script>`: the page
/// Chromium builds has no `img` or `script` element, and shows each text as written.
#[test]
fn hostile_names_and_answers_in_a_real_run_stay_text_in_a_browser() {
    let ws = Workspace::new();
    let name = "<img src=x onerror=alert(1)>.txt";
    ws.write(name, "old\n");
    let args = serde_json::json!({
        "path": name,
        "patch": "<<<<<<< SEARCH\nold\n=======\n<img src=y onerror=alert(2)>\n>>>>>>> REPLACE\n",
    })
    .to_string();
    let mock = MockLlm::start(vec![
        openai_calls(&[("write_patch", &args)]),
        openai_text("done </pre><script>alert(3)</script> & it's \"written\""),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "-p",
            "write it",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(ws.root().join(name).exists(), "{}", r.stderr());
    assert_eq!(ws.read(name), "<img src=y onerror=alert(2)>\n");
    let id = ws.store().loops(1).unwrap()[0].id;
    let out = ws.path().parent().unwrap().join("hostile-report.html");
    ws.kiln(
        &["report", &id.to_string(), "--html", out.to_str().unwrap()],
        &[],
    )
    .expect_code(0);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(
        !html.contains("<img") && !html.contains("<script"),
        "{html}"
    );
    let dom = browser_dom(&out, None);
    assert!(!dom.contains("<img") && !dom.contains("<script"), "{dom}");
    for shown in [
        "<h3>Diff: &lt;img src=x onerror=alert(1)&gt;.txt</h3>",
        "<span class=\"head\">+++ b/&lt;img src=x onerror=alert(1)&gt;.txt</span>",
        "<span class=\"del\">-old</span>",
        "<span class=\"add\">+&lt;img src=y onerror=alert(2)&gt;</span>",
        "done &lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt; &amp; it's \"written\"",
    ] {
        assert!(dom.contains(shown), "missing {shown} in {dom}");
    }
}

/// Markup a file name, a diff line or a model's answer may hold.
const IMG: &str = "<img src=x onerror=alert(1)>";

/// A run whose every text from the store is hostile: a file name, a diff line, a model's
/// answer closing `</pre>`, a status and a model name breaking out of their attribute.
fn hostile_run() -> RunReport {
    let name = format!("{IMG}.txt");
    let row = LoopRow {
        id: 7,
        kind: RunKind::Agent,
        project: "/p".into(),
        host: None,
        runner: "command".into(),
        targets: vec![name.clone()],
        format: "search-replace".into(),
        model: "m\" onmouseover=\"alert(4)".into(),
        status: "failed\" onmouseover=\"alert(3)".into(),
        stop_reason: Some("error</span><script>alert(5)</script>".into()),
        max_iters: 3,
        iters: 1,
        summary: Some("summary </pre><script>alert(6)</script>".into()),
        last_error: Some("error </pre><img src=y onerror=alert(7)>".into()),
        started_at: 0,
        ended_at: Some(1),
        tokens: Usage::default(),
    };
    let step = Step {
        n: 1,
        runner: Some(IterationRow {
            n: 1,
            diagnostics: serde_json::json!([{
                "severity": "error\"><script>",
                "file": name,
                "line": 2,
                "column": 1,
                "message": format!("expected {IMG} & \"q\""),
            }]),
            ..IterationRow::default()
        }),
        summary: Some(format!("done </pre><script>alert(2)</script> & it's {IMG}")),
        diffs: vec![Diff {
            path: name.clone(),
            text: format!("--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-old\n+{IMG}\n {IMG}\n"),
        }],
        tools: vec![ToolCallRow {
            turn: 1,
            name: format!("tool{IMG}"),
            arguments: format!("{{\"path\":\"{IMG}\"}}"),
            result: format!("</pre>{IMG}"),
            is_error: false,
            duration_ms: 3,
        }],
        errors: vec![format!("request failed: </pre>{IMG}")],
        ..Step::default()
    };
    RunReport {
        row,
        step_word: "turn",
        steps: vec![step],
        cost: None,
        undone_ms: None,
        phases: Vec::new(),
        program_changes: vec![ProgramChange {
            path: format!("gen/{IMG}"),
            what: "created",
            note: Some(format!("note {IMG}")),
            diff: Some(format!("+++ b/gen/{IMG}\n+{IMG}\n")),
        }],
    }
}

#[test]
fn a_run_page_shows_every_hostile_text_from_the_store_as_text() {
    let page = kiln::report::html::render(&hostile_run());
    for tag in ["<img", "<script", "onmouseover=\""] {
        assert!(!page.contains(tag), "{tag} reached the page: {page}");
    }
    // Each <pre> the template opens is the one its </pre> closes.
    assert_eq!(page.matches("<pre").count(), page.matches("</pre>").count());
    let img = "&lt;img src=x onerror=alert(1)&gt;";
    for shown in [
        format!("<h3>Diff: {img}.txt</h3>"),
        format!("<span class=\"head\">+++ b/{img}.txt</span>"),
        format!("<span class=\"add\">+{img}</span>"),
        format!("\n {img}\n"),
        format!(
            "<p class=\"summary\">done &lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt; &amp; it's {img}</p>"
        ),
        format!("<pre>request failed: &lt;/pre&gt;{img}</pre>"),
        format!(
            "<li class=\"sev-error&quot;&gt;&lt;script&gt;\">{img}.txt:2:1: error&quot;&gt;&lt;script&gt;: expected {img} &amp; &quot;q&quot;</li>"
        ),
        format!(
            "<td>tool{img}</td><td><code>{{&quot;path&quot;:&quot;{img}&quot;}}</code></td><td><pre>&lt;/pre&gt;{img}</pre></td>"
        ),
        format!("<h3 class=\"program-change\">gen/{img}: created (note {img})</h3>"),
        format!("<dd id=\"targets\">{img}.txt</dd>"),
        "<dd id=\"model\">m&quot; onmouseover=&quot;alert(4)</dd>".to_string(),
        "<span class=\"status-failed&quot; onmouseover=&quot;alert(3)\">".to_string(),
        "<section class=\"stop failed&quot; onmouseover=&quot;alert(3)\" id=\"stop\">".to_string(),
        "<span id=\"stop-reason\">error&lt;/span&gt;&lt;script&gt;alert(5)&lt;/script&gt;</span>"
            .to_string(),
        "<p class=\"summary\">summary &lt;/pre&gt;&lt;script&gt;alert(6)&lt;/script&gt;</p>"
            .to_string(),
        "<pre>error &lt;/pre&gt;&lt;img src=y onerror=alert(7)&gt;</pre>".to_string(),
    ] {
        assert!(page.contains(&shown), "missing {shown}\nin {page}");
    }
}

/// `kiln report --batch`: a task's name, status and report file name stay text, each
/// inside its element or its attribute.
#[test]
fn a_batch_page_keeps_a_hostile_name_status_or_file_as_text() {
    let page = kiln::report::batch::render(
        "<b1>",
        &[kiln::report::batch::BatchTask {
            name: "<img src=x onerror=alert(1)>".into(),
            status: "x\" onclick=\"y".into(),
            attempts: 1,
            cost: None,
            report: Some((7, "r\" onclick=\"z.html".into())),
        }],
        None,
    );
    assert!(
        !page.contains("<img") && !page.contains("onclick=\""),
        "{page}"
    );
    assert!(
        page.contains("<title>kiln batch &lt;b1&gt;</title>"),
        "{page}"
    );
    assert!(
        page.contains("<td>&lt;img src=x onerror=alert(1)&gt;</td>"),
        "{page}"
    );
    assert!(
        page.contains("<td class=\"x&quot; onclick=&quot;y\">x&quot; onclick=&quot;y</td>"),
        "{page}"
    );
    assert!(
        page.contains("<a href=\"r&quot; onclick=&quot;z.html\">run 7</a>"),
        "{page}"
    );
}
