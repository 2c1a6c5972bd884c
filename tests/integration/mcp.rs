//! `kiln mcp` end to end: a real MCP client (rmcp) over stdio against the real `kiln` binary
//! (plugin tools, apply_edit, refusals as tool errors, compile_loop with progress,
//! cancellation, the store), and `kiln agent` using the tools of an MCP server of
//! `[mcp.servers]` (here `kiln mcp` serving a second workspace) through the mock LLM.

use crate::mock_llm::{MockLlm, openai_calls};
use crate::support::Workspace;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request,
    ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client that keeps the progress notifications it receives.
#[derive(Clone, Default)]
struct Client {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

type Session = RunningService<RoleClient, Client>;

/// `kiln mcp ARGS` in the workspace (clean environment), connected and initialized.
async fn connect(ws: &Workspace, args: &[&str]) -> Session {
    let mut all = vec!["mcp"];
    all.extend_from_slice(args);
    let cmd = tokio::process::Command::from(ws.command(&all));
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    Client::default().serve(transport).await.unwrap()
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    p.arguments = args.as_object().cloned();
    p
}

async fn call(s: &Session, name: &str, args: Value) -> CallToolResult {
    s.peer().call_tool(params(name, args)).await.unwrap()
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn mcp_session(ws: &Workspace) -> kiln::store::LoopRow {
    let s = ws.store();
    s.loops(20)
        .unwrap()
        .into_iter()
        .find(|l| l.kind == "mcp")
        .expect("an mcp session in the store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_plugin_tools_edits_and_refusals_over_stdio() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello from kiln\n");
    ws.write("kiln.toml", "[fix]\nmax_iters = 3\n");
    std::fs::write(ws.path().join("secret.txt"), "TOP SECRET\n").unwrap();
    let s = connect(&ws, &[]).await;

    let info = s.peer_info().expect("initialized");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("kiln")
    );
    let tools = s.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for n in [
        "read_file",
        "read_files",
        "search_repo",
        "apply_edit",
        "compile_loop",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let read_file = tools.iter().find(|t| t.name == "read_file").unwrap();
    assert!(
        read_file.input_schema["properties"].get("path").is_some(),
        "the plugin's schema: {:?}",
        read_file.input_schema
    );

    // A plugin tool (fs read_file) under the workspace's grants.
    let r = call(&s, "read_file", json!({"path": "notes.txt"})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(text(&r).contains("hello from kiln"), "{}", text(&r));

    // An edit through the host's atomic edit path.
    let edit = "<<<<<<< SEARCH\nhello from kiln\n=======\nhello from MCP\n>>>>>>> REPLACE\n";
    let r = call(
        &s,
        "apply_edit",
        json!({"response": edit, "files": ["notes.txt"]}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let report: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["written"], json!(["notes.txt"]));
    assert_eq!(ws.read("notes.txt"), "hello from MCP\n");

    // kiln.toml is protected: a tool error that says so, nothing written.
    let edit = "<<<<<<< SEARCH\nmax_iters = 3\n=======\nmax_iters = 99\n>>>>>>> REPLACE\n";
    let r = call(
        &s,
        "apply_edit",
        json!({"response": edit, "files": ["kiln.toml"]}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("kiln.toml") && text(&r).contains("protected"),
        "{}",
        text(&r)
    );
    assert_eq!(ws.read("kiln.toml"), "[fix]\nmax_iters = 3\n");

    // A path outside the workspace: the sandbox's denial, as a tool error.
    let r = call(&s, "read_file", json!({"path": "../secret.txt"})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("outside the workspace"), "{}", text(&r));
    assert!(!text(&r).contains("TOP SECRET"));

    // An unknown tool is a protocol error; the server goes on answering.
    assert!(
        s.peer()
            .call_tool(params("no_such_tool", json!({})))
            .await
            .is_err()
    );
    let r = call(&s, "read_file", json!({"path": "notes.txt"})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(text(&r).contains("hello from MCP"));

    // Each call is in the store under the session, closed when the client disconnects.
    s.cancel().await.unwrap();
    let session = mcp_session(&ws);
    assert_eq!(session.status, "closed");
    let calls = ws.store().tool_calls(session.id).unwrap();
    let got: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.is_error))
        .collect();
    assert_eq!(
        got,
        [
            ("read_file", false),
            ("apply_edit", false),
            ("apply_edit", true),
            ("read_file", true),
            ("read_file", false),
        ]
    );
    assert!(calls[3].result.contains("outside the workspace"));
    let h = ws.kiln(&["history", "show", &session.id.to_string()], &[]);
    h.expect_code(0);
    assert!(
        h.stdout().contains("apply_edit") && h.stdout().contains("✗ read_file"),
        "{}",
        h.stdout()
    );
}

/// The table's tools as served over MCP: `ast_refactor` as `kiln agent` has it (the host
/// applies its edits), and `compile_loop` without a build command telling the caller what to
/// set, as a tool error; a bad compile_loop call is refused by the table before any loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_agents_table_and_compile_loop_says_what_it_lacks() {
    let ws = Workspace::new();
    ws.write("notes.txt", "x\n");
    let s = connect(&ws, &[]).await;
    let tools = s.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"ast_refactor"), "{names:?}");
    let cl = tools.iter().find(|t| t.name == "compile_loop").unwrap();
    assert_eq!(cl.input_schema["required"], json!(["spec"]));
    assert_eq!(cl.input_schema["additionalProperties"], json!(false));

    let r = call(&s, "compile_loop", json!({"spec": "fix it"})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("compile_loop needs the build command it may run"),
        "{}",
        text(&r)
    );
    s.cancel().await.unwrap();

    let s = connect(&ws, &["--test-command", "true"]).await;
    let r = call(
        &s,
        "compile_loop",
        json!({"spec": "fix", "target_file": "a", "target_files": ["b"]}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("give target_file or target_files, not both"),
        "{}",
        text(&r)
    );
    s.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_loop_fixes_with_a_progress_notification_per_iteration() {
    let ws = Workspace::new();
    ws.write(
        "calc.py",
        "def add(a, b):\n    return a - b\n\nassert add(2, 3) == 5\n",
    );
    let fix = "<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let replay = ws.path().join("answers.jsonl");
    std::fs::write(&replay, format!("{}\n", Value::String(fix.into()))).unwrap();
    let s = connect(
        &ws,
        &[
            "--test-command",
            "python3 calc.py",
            "--replay",
            replay.to_str().unwrap(),
        ],
    )
    .await;
    let handle = s
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params(
                "compile_loop",
                json!({"spec": "add() must add", "target_file": "calc.py"}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let ServerResult::CallToolResult(r) = handle.await_response().await.unwrap() else {
        panic!("not a tool result");
    };
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let outcome: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(
        (&outcome["ok"], &outcome["iters"], &outcome["stop_reason"]),
        (&json!(true), &json!(1), &json!("success")),
        "{outcome}"
    );
    assert_eq!(
        ws.read("calc.py"),
        "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\n"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.service().progress.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let progress = s.service().progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 1, "{progress:?}");
    assert_eq!((progress[0].progress, progress[0].total), (1.0, Some(5.0)));
    assert!(
        progress[0]
            .message
            .as_deref()
            .unwrap_or("")
            .contains("iteration 1"),
        "{progress:?}"
    );
    s.cancel().await.unwrap();
    // The loop is in the store like any fix loop, and the call under the MCP session.
    let store = ws.store();
    let fix_loop = store
        .loops(10)
        .unwrap()
        .into_iter()
        .find(|l| l.kind == "fix")
        .unwrap();
    assert_eq!(fix_loop.status, "success");
    let calls = store.tool_calls(mcp_session(&ws).id).unwrap();
    assert_eq!(
        (calls.len(), calls[0].name.as_str(), calls[0].is_error),
        (1, "compile_loop", false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_dropped_and_the_server_goes_on() {
    let ws = Workspace::new();
    ws.write("notes.txt", "still here\n");
    let s = connect(&ws, &["--test-command", "sleep 20"]).await;
    let started = Instant::now();
    let handle = s
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params(
                "run_cmd",
                json!({"command": "sleep 20"}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    handle
        .cancel(Some("the test changed its mind".into()))
        .await
        .unwrap();
    // The call ends at once (recorded as cancelled), long before the command would have.
    let deadline = Instant::now() + Duration::from_secs(10);
    let cancelled = loop {
        let session = mcp_session(&ws);
        let calls = ws.store().tool_calls(session.id).unwrap();
        if let Some(c) = calls.into_iter().find(|c| c.name == "run_cmd") {
            break c;
        }
        assert!(Instant::now() < deadline, "the cancelled call never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(cancelled.is_error);
    assert_eq!(cancelled.result, "cancelled by the client");
    assert!(started.elapsed() < Duration::from_secs(15));
    let r = call(&s, "read_file", json!({"path": "notes.txt"})).await;
    assert!(text(&r).contains("still here"), "{}", text(&r));
    s.cancel().await.unwrap();
}

#[test]
fn the_agent_uses_the_tools_of_an_mcp_server() {
    // The MCP server: `kiln mcp` serving a second workspace.
    let other = Workspace::new();
    other.write("b.txt", "text only in the other workspace\n");
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        &format!(
            "[mcp.servers.other]\ncommand = {:?}\nargs = [\"-C\", {:?}, \"mcp\"]\nenv = [\"KILN_CACHE_DIR\", \"KILN_CACHE_KEY\", \"KILN_CONFIG\", \"KILN_YES\", \"XDG_STATE_HOME\"]\n",
            env!("CARGO_BIN_EXE_kiln"),
            other.root().to_str().unwrap()
        ),
    );

    // `kiln tool list` starts it and marks its tools as external.
    let r = ws.kiln(&["tool", "list"], &[]);
    r.expect_code(0);
    let line = r
        .stdout()
        .lines()
        .find(|l| l.starts_with("other__read_file "))
        .unwrap_or_else(|| panic!("{}\n{}", r.stdout(), r.stderr()))
        .to_string();
    assert!(
        line.contains("mcp server other (external, not sandboxed)"),
        "{line}"
    );
    let r = ws.kiln(&["tool", "list", "--json"], &[]);
    let entry: Value = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["name"] == "other__read_file")
        .unwrap();
    assert_eq!(
        (&entry["mcp_server"], &entry["read_only"]),
        (&json!("other"), &json!(true))
    );

    // The agent is offered `other__read_file`, calls it, and sees the other workspace's file.
    let mock = MockLlm::start(vec![
        openai_calls(&[("other__read_file", r#"{"path":"b.txt"}"#)]),
        openai_calls(&[("final_answer", r#"{"summary":"read it"}"#)]),
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
            "--prompt",
            "Read b.txt of the other workspace",
        ],
        &[],
    );
    r.expect_code(0);
    let offered: Vec<String> = mock.recorded()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        offered.contains(&"other__read_file".to_string()),
        "{offered:?}"
    );
    let observed: Vec<Value> = mock.recorded()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect();
    assert!(
        observed[0]["content"]
            .as_str()
            .unwrap()
            .contains("text only in the other workspace"),
        "{observed:?}"
    );
    // Recorded on both sides: the agent's tool call, and the MCP server's session.
    let store = ws.store();
    let run = &store.loops(5).unwrap()[0];
    assert_eq!(
        (run.kind.as_str(), run.status.as_str()),
        ("agent", "success")
    );
    let calls = store.tool_calls(run.id).unwrap();
    assert_eq!(
        (calls[0].name.as_str(), calls[0].is_error),
        ("other__read_file", false)
    );
    // The server kiln keeps the store of `other` in the state directory it was handed.
    let served = other.store_under(&ws.state_home());
    let sessions: Vec<_> = served
        .loops(10)
        .unwrap()
        .into_iter()
        .filter(|l| l.kind == "mcp")
        .collect();
    let read = sessions
        .iter()
        .flat_map(|l| served.tool_calls(l.id).unwrap())
        .find(|c| c.name == "read_file")
        .expect("the call reached the MCP server");
    assert!(read.result.contains("text only in the other workspace"));
    // The server was stopped when the agent ended.
    assert!(
        sessions.iter().all(|l| l.status == "closed"),
        "{sessions:?}"
    );
}

/// One JSON-RPC message to `kiln mcp --http`; the answer's JSON (from a JSON or an SSE body).
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    message: Value,
) -> (reqwest::StatusCode, Option<String>, Option<Value>) {
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(message.to_string());
    if let Some(id) = session {
        req = req
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-06-18");
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp.text().await.unwrap();
    let answer = body
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("id").is_some());
    (status, session, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_streamable_http_on_loopback_only() {
    let ws = Workspace::new();
    ws.write("notes.txt", "served over HTTP\n");
    let r = ws.kiln(&["mcp", "--http", "0.0.0.0:0"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("loopback"), "{}", r.stderr());

    let mut child = ws.spawn_kiln(&["mcp", "--http", "127.0.0.1:0"]);
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(url) = line.split("streamable HTTP at ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("kiln mcp --http announces its address");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let (status, session, init) = post(
        &http,
        &url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    assert!(status.is_success(), "{status}");
    let init = init.expect("an initialize result");
    assert_eq!(init["result"]["serverInfo"]["name"], "kiln", "{init}");
    let session = session.expect("a session id");
    let (status, _, _) = post(
        &http,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert!(status.is_success(), "{status}");
    let (_, _, list) = post(
        &http,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let list = list.expect("a tools/list result");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"apply_edit") && names.contains(&"read_file"),
        "{names:?}"
    );
    let (_, _, read) = post(
        &http,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}}),
    )
    .await;
    let read = read.expect("a tools/call result");
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert!(
        read["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("served over HTTP"),
        "{read}"
    );
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn stdout_carries_only_json_rpc() {
    let ws = Workspace::new();
    ws.write("notes.txt", "x\n");
    // Plugin debug logs (-v), a tool call and a refused compile_loop: none of it may reach stdout
    // but as JSON-RPC.
    let input = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "read_file", "arguments": {"path": "notes.txt"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "compile_loop", "arguments": {"spec": "s", "target_file": "notes.txt"}}}),
    ]
    .iter()
    .map(|m| format!("{m}\n"))
    .collect::<String>();
    let r = ws.kiln_stdin(&["-v", "mcp"], &input);
    r.expect_code(0);
    let lines: Vec<Value> = r
        .stdout()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("not JSON-RPC on stdout ({e}): {l}"))
        })
        .collect();
    assert!(lines.iter().all(|m| m["jsonrpc"] == "2.0"), "{lines:?}");
    assert_eq!(lines[0]["result"]["serverInfo"]["name"], "kiln");
}

/// A line-by-line JSON-RPC conversation with `kiln mcp` over its stdin/stdout: each answer is
/// awaited with a deadline, so a server that stays silent fails the test instead of hanging it.
struct Lines {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    rx: std::sync::mpsc::Receiver<String>,
}

impl Lines {
    fn start(ws: &Workspace) -> Lines {
        use std::io::BufRead;
        let mut child = ws
            .command(&["mcp"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { child, stdin, rx }
    }

    fn send(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stdin.write_all(bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message on stdout (within 60 s).
    fn next(&self) -> Value {
        let line = self
            .rx
            .recv_timeout(Duration::from_secs(60))
            .expect("kiln mcp answered nothing within 60 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn unreadable_and_oversized_requests_get_json_rpc_errors_and_the_server_goes_on() {
    let ws = Workspace::new();
    ws.write("notes.txt", "x\n");
    let mut s = Lines::start(&ws);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    s.send(format!("{init}\n").as_bytes());
    assert_eq!(s.next()["id"], 1);
    s.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");

    // Not JSON: a parse error with id null (JSON-RPC 2.0, section 5.1).
    s.send(b"this is not json\n");
    let e = s.next();
    assert_eq!(e["jsonrpc"], "2.0", "{e}");
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(e["id"].is_null() && e.get("id").is_some(), "{e}");

    // JSON but no JSON-RPC message: an invalid request, with the id it names.
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":7}\n");
    let e = s.next();
    assert_eq!(
        (e["error"]["code"].clone(), e["id"].clone()),
        (json!(-32600), json!(5)),
        "{e}"
    );

    // A request over 16 MiB: an error naming its id, sent while stdin stays open (the client
    // would wait for it forever otherwise).
    let big = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "a".repeat(17 * 1024 * 1024)}}});
    s.send(format!("{big}\n").as_bytes());
    let e = s.next();
    assert_eq!(e["id"], 42, "{e}");
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("16 MiB"),
        "{e}"
    );

    // And the server goes on serving.
    let call = json!({"jsonrpc": "2.0", "id": 43, "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "notes.txt"}}});
    s.send(format!("{call}\n").as_bytes());
    let r = s.next();
    assert_eq!(r["id"], 43, "{r}");
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains('x'),
        "{r}"
    );
}

/// compile_loop takes the workspace's run lock as `kiln fix` does: refused, naming the holder,
/// while a `kiln fix` runs there (nothing written), and held while its own loop runs, so a
/// `kiln fix` started then is refused naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_loop_takes_the_workspace_run_lock() {
    use crate::cli::{spawn_interruptible, wait_for_program};
    use crate::mock_llm::MockLlm;
    let ws = Workspace::new();
    let broken = "def add(a, b):\n    return a - b\n\nassert add(2, 3) == 5\n";
    ws.write("calc.py", broken);
    ws.write(
        "slow_check_5521.py",
        "import time\ntime.sleep(29.37)\nexec(open('calc.py').read())\n",
    );
    let fix = "<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let replay = ws.path().join("answers.jsonl");
    std::fs::write(&replay, format!("{}\n", Value::String(fix.into()))).unwrap();
    let compile_loop = || {
        ClientRequest::CallToolRequest(Request::new(params(
            "compile_loop",
            json!({"spec": "add() must add", "target_file": "calc.py"}),
        )))
    };

    // A `kiln fix` in its first check holds the workspace.
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    let fix_args = |cmd: &'static str| {
        vec![
            "fix".to_string(),
            "--base-url".into(),
            base.clone(),
            "--model".into(),
            "m".into(),
            "--max-iters".into(),
            "1".into(),
            "--shell".into(),
            "--cmd".into(),
            cmd.into(),
        ]
    };
    let first = fix_args("sleep 29.73; exit 1");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let running_fix = spawn_interruptible(&ws, &first);
    wait_for_program("sleep\x0029.73\x00");
    let s = connect(
        &ws,
        &[
            "--test-command",
            "python3 calc.py",
            "--replay",
            replay.to_str().unwrap(),
        ],
    )
    .await;
    let ServerResult::CallToolResult(r) = s.peer().send_request(compile_loop()).await.unwrap()
    else {
        panic!("not a tool result");
    };
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("another kiln process is working on this workspace (pid ")
            && text(&r).contains("`kiln fix`"),
        "{}",
        text(&r)
    );
    assert_eq!(ws.read("calc.py"), broken);
    s.cancel().await.unwrap();
    // SAFETY: signals the child this test spawned.
    unsafe { libc::kill(running_fix.id() as i32, libc::SIGINT) };
    assert_eq!(
        running_fix.wait_with_output().unwrap().status.code(),
        Some(130)
    );

    // A compile_loop in its first check holds it in turn.
    let s = connect(
        &ws,
        &[
            "--test-command",
            "python3 slow_check_5521.py",
            "--replay",
            replay.to_str().unwrap(),
        ],
    )
    .await;
    let handle = s
        .peer()
        .send_cancellable_request(compile_loop(), PeerRequestOptions::no_options())
        .await
        .unwrap();
    wait_for_program("slow_check_5521.py\x00");
    let second = fix_args("echo second >> calc.py; exit 1");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let r = ws.kiln(&second, &[("OPENAI_API_KEY", "sk-t")]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("another kiln process is working on this workspace (pid ")
            && r.stderr().contains("`kiln mcp compile_loop`"),
        "{}",
        r.stderr()
    );
    assert_eq!(ws.read("calc.py"), broken);
    handle.cancel(None).await.unwrap();
    s.cancel().await.unwrap();
}
