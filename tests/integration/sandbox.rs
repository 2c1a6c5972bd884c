//! Every escape attempt is refused with a clear error, and the host goes on.

use crate::support::Workspace;

const ESCAPE_GRANT: &str = r#"
[plugins.escape]
fs = ["."]
exec = [
  { program = "echo", args = ["*"] },
  { program = "env" },
  { program = "sh", args = ["-c", "*"] },
]
env = ["KILN_TEST_VISIBLE"]
timeout_ms = 2000
memory_mib = 64
output_bytes = 1048576
"#;

fn escape_ws(grant: &str) -> Workspace {
    let ws = Workspace::new();
    ws.write("kiln.toml", grant);
    ws.write("inside.txt", "inside\n");
    std::fs::write(ws.path().join("outside.txt"), "TOP SECRET\n").unwrap();
    std::os::unix::fs::symlink(ws.path().join("outside.txt"), ws.root().join("link-out")).unwrap();
    ws
}

fn call(ws: &Workspace, tool: &str, args: &str) -> crate::support::Run {
    ws.escape_tool(
        tool,
        args,
        &[
            ("OPENAI_API_KEY", "sk-test-do-not-leak"),
            ("KILN_TEST_VISIBLE", "visible-value"),
        ],
    )
}

#[test]
fn reads_inside_the_workspace_work() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(&ws, "read", r#"{"path":"/workspace/inside.txt"}"#);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "inside\n");
}

#[test]
fn parent_dir_absolute_path_and_symlink_escapes_are_refused() {
    let ws = escape_ws(ESCAPE_GRANT);
    let outside = ws.path().join("outside.txt");
    for path in [
        "/workspace/../outside.txt",
        outside.to_str().unwrap(),
        "/workspace/link-out",
        "/etc/passwd",
    ] {
        let r = call(&ws, "read", &format!(r#"{{"path":{path:?}}}"#));
        r.expect_code(1);
        let out = r.stdout();
        assert!(
            !out.contains("TOP SECRET") && !out.contains("root:"),
            "{path} leaked: {out}"
        );
        let err = crate::support::error_of(&r, "denied");
        assert!(
            err.contains("not permitted") || err.contains("No such file"),
            "{path}: {err}"
        );
    }
}

#[test]
fn writing_to_a_read_only_workspace_is_refused() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(
        &ws,
        "write",
        r#"{"path":"/workspace/new.txt","content":"x"}"#,
    );
    r.expect_code(1);
    assert!(crate::support::error_of(&r, "denied").contains("not permitted"));
    assert!(!ws.root().join("new.txt").exists());

    // Granting read-write on a directory makes the same call work there.
    let rw = escape_ws(&ESCAPE_GRANT.replace(
        r#"fs = ["."]"#,
        r#"fs = [".", { path = "out", access = "read-write" }]"#,
    ));
    rw.write("out/.keep", "");
    call(
        &rw,
        "write",
        r#"{"path":"/workspace/out/new.txt","content":"x"}"#,
    )
    .expect_code(0);
    assert_eq!(rw.read("out/new.txt"), "x");
}

#[test]
fn exec_of_a_program_not_granted_is_denied_naming_the_grant() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(
        &ws,
        "exec",
        r#"{"program":"rm","args":["-rf","inside.txt"]}"#,
    );
    r.expect_code(1);
    let denied = crate::support::error_of(&r, "denied").to_string();
    assert!(
        denied.contains("running `rm -rf inside.txt` is not granted to plugin `escape`"),
        "{denied}"
    );
    // The suggested line keeps what is granted and adds the call, so it works when pasted.
    assert!(
        denied.contains("[plugins.escape]")
            && denied.contains(r#"exec = [{ program = "echo", args = ["*"] }, { program = "env" }, { program = "sh", args = ["-c", "*"] }, { program = "rm", args = ["*"] }]"#),
        "{denied}"
    );
    assert!(ws.root().join("inside.txt").exists());
}

#[test]
fn exec_with_arguments_outside_the_pattern_is_denied() {
    let ws = escape_ws(ESCAPE_GRANT);
    // `sh` is granted only as `sh -c <script>`.
    let r = call(&ws, "exec", r#"{"program":"sh","args":["inside.txt"]}"#);
    r.expect_code(1);
    assert!(
        crate::support::error_of(&r, "denied").contains("running `sh inside.txt` is not granted")
    );
    let ok = call(&ws, "exec", r#"{"program":"echo","args":["a","b"]}"#);
    ok.expect_code(0);
    assert_eq!(ok.json()["result"]["stdout"], "a b\n");
}

#[test]
fn exec_cwd_may_not_leave_the_workspace() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(&ws, "exec", r#"{"program":"echo","args":["x"],"cwd":".."}"#);
    r.expect_code(1);
    assert!(crate::support::error_of(&r, "denied").contains("cwd `..`"));
}

#[test]
fn the_host_environment_never_reaches_a_plugin() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(&ws, "env", "{}");
    r.expect_code(0);
    assert_eq!(
        r.json()["result"]["vars"],
        serde_json::json!([]),
        "the guest sees no variables at all"
    );

    // A program run through exec gets PATH, HOME and the granted variables only.
    let r = call(&ws, "exec", r#"{"program":"env"}"#);
    r.expect_code(0);
    let out = r.json()["result"]["stdout"].as_str().unwrap().to_string();
    assert!(out.contains("KILN_TEST_VISIBLE=visible-value"), "{out}");
    assert!(
        !out.contains("sk-test-do-not-leak") && !out.contains("OPENAI_API_KEY"),
        "{out}"
    );

    // Asking to pass a variable the manifest does not request is denied (no grant could
    // allow it); one requested but not granted is denied naming the grant.
    let r = call(
        &ws,
        "exec",
        r#"{"program":"env","env":{"OPENAI_API_KEY":"x"}}"#,
    );
    r.expect_code(1);
    assert!(
        crate::support::error_of(&r, "denied")
            .contains("does not request environment variable `OPENAI_API_KEY`")
    );
    let r = call(
        &ws,
        "exec",
        r#"{"program":"env","env":{"KILN_TEST_SECRET_KEY":"x"}}"#,
    );
    r.expect_code(1);
    assert!(
        crate::support::error_of(&r, "denied")
            .contains(r#"env = ["KILN_TEST_VISIBLE", "KILN_TEST_SECRET_KEY"]"#)
    );
}

#[test]
fn an_infinite_loop_is_stopped_by_the_deadline() {
    let ws = escape_ws(ESCAPE_GRANT);
    let start = std::time::Instant::now();
    let r = call(&ws, "spin", "{}");
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("plugin `escape` was stopped after its deadline of 2000 ms"),
        "{}",
        r.stderr()
    );
    assert!(start.elapsed().as_secs() < 20);
}

#[test]
fn unbounded_memory_growth_is_stopped_by_the_limit() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(&ws, "grow", "{}");
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("plugin `escape` was stopped: it exceeded its memory limit of 64 MiB"),
        "{}",
        r.stderr()
    );
}

#[test]
fn hundreds_of_mib_of_output_are_capped() {
    // Draining 300 MiB takes seconds on a loaded machine: this test is about the cap, not the
    // deadline, so it gets a long one.
    let ws = escape_ws(&ESCAPE_GRANT.replace("timeout_ms = 2000", "timeout_ms = 60000"));
    // A process printing 300 MiB: captured up to the cap, flagged truncated.
    let r = call(
        &ws,
        "exec",
        r#"{"program":"sh","args":["-c","head -c 314572800 /dev/zero"]}"#,
    );
    r.expect_code(0);
    let res = &r.json()["result"];
    // At most 3/8 of the plugin's 1 MiB output limit: its head, a line saying how much was
    // cut, and its tail.
    let len = res["stdout_len"].as_u64().unwrap();
    assert!((393216 - 64..=393216).contains(&len), "{len}");
    assert_eq!(res["truncated"], true);
    assert_eq!(res["exit_code"], 0);
    // A plugin returning more than its cap is refused.
    let r = call(&ws, "flood", r#"{"mib":8}"#);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("plugin `escape`: output limit exceeded (8388608 > 1048576 bytes; raise"),
        "{}",
        r.stderr()
    );
}

#[test]
fn exec_timeout_kills_the_whole_process_group() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(
        &ws,
        "exec",
        // The call's processes have their own PID numbers: the child is found by what it runs.
        r#"{"program":"sh","args":["-c","sh -c 'echo $$ > bg.pid; exec sleep 30.4711' & wait"],"timeout_ms":500}"#,
    );
    r.expect_code(0);
    assert_eq!(r.json()["result"]["timed_out"], true);
    assert!(ws.read("bg.pid").trim().parse::<i32>().is_ok());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let left = crate::kernel::alive_with("sleep\u{0}30.4711");
    assert!(
        left.is_empty(),
        "the background child {left:?} survived the timeout"
    );
}

#[test]
fn a_plugin_panic_is_reported_with_its_name_and_message() {
    let ws = escape_ws(ESCAPE_GRANT);
    let r = call(&ws, "panic", "{}");
    r.expect_code(2);
    let e = r.stderr();
    assert!(
        e.contains("plugin `escape` crashed (trap)")
            && e.contains("deliberate panic in the escape plugin"),
        "{e}"
    );
}

#[test]
fn nothing_is_granted_without_kiln_toml() {
    let ws = escape_ws("");
    let r = call(&ws, "read", r#"{"path":"/workspace/inside.txt"}"#);
    r.expect_code(1);
    let r = call(&ws, "exec", r#"{"program":"echo","args":["x"]}"#);
    r.expect_code(1);
    assert!(crate::support::error_of(&r, "denied").contains("[plugins.escape]"));
}
