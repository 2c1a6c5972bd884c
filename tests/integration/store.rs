//! The store chosen with `--store`, `KILN_STORE` or the user's `[store] url`, end to end on a
//! throwaway PostgreSQL (`pg.rs`): `kiln fix`, `agent`, `loop` and `mcp` record there, `kiln
//! history --store` lists every workspace's runs and `history show` reads one back; a
//! workspace `kiln.toml` may not name a store; the URL's password is never printed, logged or
//! stored.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::pg::{PASSWORD, PgServer};
use crate::support::{Run, Workspace};
use kiln::store::{RunKind, Store, StoreUrl};

const BROKEN_C: &str = "int main(void) {\n    int x = 1\n    return x;\n}\n";

fn fixed_reply() -> crate::mock_llm::Reply {
    openai_text(
        "Fixed.\n\n<<<<<<< SEARCH\n    int x = 1\n=======\n    int x = 1;\n>>>>>>> REPLACE\n",
    )
}

/// `kiln fix` over main.c with gcc against a mock that fixes it, with `args` first and `env`.
fn fix(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Run {
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![fixed_reply()]);
    let base = format!("{}/v1", mock.url);
    let mut all = args.to_vec();
    all.extend([
        "fix",
        "--base-url",
        &base,
        "--model",
        "m",
        "--cmd",
        "gcc -fsyntax-only {file}",
        "--file",
        "main.c",
    ]);
    ws.kiln(&all, env)
}

#[track_caller]
fn no_password(r: &Run) {
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(!all.contains(PASSWORD), "the password was printed: {all}");
}

fn open(url: &str, ws: &Workspace) -> Store {
    let url: StoreUrl = url.parse().unwrap();
    Store::open_project(&url, &ws.root().canonicalize().unwrap().to_string_lossy()).unwrap()
}

/// Three workspaces record into one PostgreSQL database, choosing it by flag, environment
/// and user configuration; `kiln history --store` from anywhere lists all three with their
/// project and `history show` reads one back. No workspace gets an SQLite store.
#[test]
fn fix_runs_of_many_workspaces_share_a_postgres_store() {
    let url = PgServer::shared().fresh_db();
    let (a, b, c) = (Workspace::new(), Workspace::new(), Workspace::new());
    let r = fix(&a, &["--store", &url], &[]);
    r.expect_code(0);
    no_password(&r);
    fix(&b, &[], &[("KILN_STORE", &url)]).expect_code(0);
    let config = c.path().join("no-user-config.toml");
    std::fs::write(&config, format!("[store]\nurl = \"{url}\"\n")).unwrap();
    fix(&c, &[], &[]).expect_code(0);
    for ws in [&a, &b, &c] {
        assert!(!ws.store_path().exists(), "no SQLite store");
        let rows = open(&url, ws).loops(5).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].kind, rows[0].status.as_str()),
            (RunKind::Fix, "success")
        );
    }
    // The password is in no row and no log.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let q = "SELECT (SELECT count(*) FROM loops WHERE row_to_json(loops)::text LIKE $1)
        + (SELECT count(*) FROM events WHERE payload LIKE $1)
        + (SELECT count(*) FROM iterations WHERE row_to_json(iterations)::text LIKE $1)
        + (SELECT count(*) FROM llm_calls WHERE row_to_json(llm_calls)::text LIKE $1)";
    let hits: i64 = client
        .query_one(q, &[&format!("%{PASSWORD}%")])
        .unwrap()
        .get(0);
    assert_eq!(hits, 0);
    for ws in [&a, &b, &c] {
        for log in std::fs::read_dir(ws.root().join(".kiln/logs"))
            .into_iter()
            .flatten()
        {
            let text = std::fs::read_to_string(log.unwrap().path()).unwrap_or_default();
            assert!(!text.contains(PASSWORD), "a log holds the password");
        }
    }
    let elsewhere = Workspace::new();
    let list = elsewhere.kiln(&["history", "--store", &url], &[]);
    list.expect_code(0);
    no_password(&list);
    let text = list.stdout();
    for ws in [&a, &b, &c] {
        let project = ws.root().canonicalize().unwrap();
        assert!(text.contains(&*project.to_string_lossy()), "{text}");
    }
    assert_eq!(
        text.lines().filter(|l| l.contains(" success ")).count(),
        3,
        "{text}"
    );
    let json = elsewhere.kiln(&["history", "--json", "--store", &url], &[]);
    let first: serde_json::Value =
        serde_json::from_str(json.stdout().lines().next().unwrap()).unwrap();
    assert!(
        first["project"].as_str().unwrap().ends_with("/ws"),
        "{first}"
    );
    let id = first["id"].to_string();
    let show = elsewhere.kiln(&["history", "show", &id, "--store", &url], &[]);
    show.expect_code(0);
    no_password(&show);
    assert!(
        show.stdout().contains(&format!("loop {id}: success")),
        "{}",
        show.stdout()
    );
    assert!(
        show.stdout().contains("edit applied replace main.c"),
        "{}",
        show.stdout()
    );
}

/// `kiln agent` (reading an earlier fix loop with `get_loops` and `get_loop_detail`) and a
/// `kiln mcp` session record into PostgreSQL too, tool calls included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_and_mcp_sessions_record_into_postgres() {
    use rmcp::ServiceExt;
    let url = PgServer::shared().fresh_db();
    let ws = Workspace::new();
    ws.write("notes.txt", "hello\n");
    fix(&ws, &["--store", &url], &[]).expect_code(0);
    let fix_id = open(&url, &ws).loops(1).unwrap()[0].id;
    let mock = MockLlm::start(vec![
        openai_calls(&[("get_loops", "{}")]),
        openai_calls(&[("get_loop_detail", &format!(r#"{{"id":{fix_id}}}"#))]),
        openai_calls(&[("final_answer", r#"{"summary":"read it"}"#)]),
    ]);
    let base = format!("{}/v1", mock.url);
    let args = [
        "--store",
        &url,
        "agent",
        "--base-url",
        &base,
        "--model",
        "m",
        "read notes.txt",
    ];
    ws.kiln(&args, &[]).expect_code(0);
    let mut cmd = ws.command(&["mcp"]);
    cmd.env("KILN_STORE", &url);
    let (transport, _) =
        rmcp::transport::TokioChildProcess::builder(tokio::process::Command::from(cmd))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    let session = ().serve(transport).await.unwrap();
    let mut p = rmcp::model::CallToolRequestParams::new("read_file".to_string());
    p.arguments = serde_json::json!({"path": "notes.txt"})
        .as_object()
        .cloned();
    let r = session.peer().call_tool(p).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    session.cancel().await.unwrap();
    let s = open(&url, &ws);
    let rows = s.loops(5).unwrap();
    let kinds: Vec<String> = rows
        .iter()
        .map(|r| format!("{}:{}", r.kind, r.status))
        .collect();
    assert_eq!(kinds, ["mcp:closed", "agent:success", "fix:success"]);
    let served = s.tool_calls(rows[0].id).unwrap();
    assert_eq!(
        (served[0].name.as_str(), served[0].is_error),
        ("read_file", false)
    );
    let agent = s.tool_calls(rows[1].id).unwrap();
    let names: Vec<&str> = agent.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names[..2], ["get_loops", "get_loop_detail"]);
    assert!(
        agent[0].result.contains(&format!(r#""id":{fix_id}"#)),
        "{}",
        agent[0].result
    );
    assert!(
        agent[1].result.contains(r#""status":"success""#),
        "{}",
        agent[1].result
    );
}

/// A workspace `kiln.toml` naming a store is ignored with a warning (trusted or not), without
/// echoing it: the workspace's own store is used.
#[test]
fn a_workspace_kiln_toml_may_not_choose_the_store() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        &format!("[store]\nurl = \"postgres://kiln:{PASSWORD}@127.0.0.1:9/x\"\n"),
    );
    for yes in ["1", "0"] {
        let r = ws.kiln(&["history"], &[("KILN_YES", yes)]);
        r.expect_code(0);
        no_password(&r);
        assert!(
            r.stderr()
                .contains("sets [store], which a workspace kiln.toml may not set: ignored"),
            "{}",
            r.stderr()
        );
    }
}

/// A store that cannot be reached is a clear error naming it, password hidden.
#[test]
fn an_unreachable_store_is_named_without_its_password() {
    let ws = Workspace::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://kiln:{PASSWORD}@127.0.0.1:{port}/x?sslmode=disable");
    let r = ws.kiln(&["history", "--store", &url], &[]);
    r.expect_code(2);
    no_password(&r);
    assert!(
        r.stderr()
            .contains(&format!("store postgres://kiln:***@127.0.0.1:{port}/x")),
        "{}",
        r.stderr()
    );
    assert!(r.stderr().contains("unreachable"), "{}", r.stderr());
    let tls = ws.kiln(
        &["history", "--store", &format!("{url}&sslmode=require")],
        &[],
    );
    tls.expect_code(2);
    no_password(&tls);
    assert!(tls.stderr().contains("no TLS"), "{}", tls.stderr());
}

/// `kiln loop` records its run and its execution round (a nested loop, not an overlap) into
/// PostgreSQL.
#[test]
fn a_review_loop_records_into_postgres() {
    let url = PgServer::shared().fresh_db();
    let ws = Workspace::new();
    ws.write("task.md", "Create hello.txt saying hi.\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[("write_file", r#"{"path":"hello.txt","content":"hi\n"}"#)]),
        crate::review_loop::final_answer("STATUS: COMPLETE\nPlan: hello.\nChecks: none needed"),
    ]);
    let r = ws.kiln_model(&mock.url, "loop", &["--task", "task.md", "--store", &url]);
    r.expect_code(0);
    no_password(&r);
    let rows = open(&url, &ws).loops(5).unwrap();
    let kinds: Vec<String> = rows
        .iter()
        .map(|r| format!("{}:{}", r.kind, r.status))
        .collect();
    assert_eq!(kinds, ["loop-execute:success", "loop:success"]);
    assert_eq!(ws.read("hello.txt"), "hi\n");
}

/// Issue 35: a `kiln fix` whose database restarts while its first check runs reconnects and
/// records the whole run: the first statement after the restart, on the connection the
/// restart closed, is made again on a fresh one.
#[test]
fn a_fix_survives_a_restart_of_its_database_during_the_first_check() {
    let server = PgServer::start();
    let url = server.fresh_db();
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    // The first check takes 3 s; the server restarts in its middle.
    ws.write(
        "check.sh",
        "if [ ! -e .kiln-slow-done ]; then sleep 3; : > .kiln-slow-done; fi\ngcc -fsyntax-only main.c\n",
    );
    let mock = MockLlm::start(vec![fixed_reply()]);
    let base = format!("{}/v1", mock.url);
    let child = ws
        .command(&[
            "--store",
            &url,
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "sh check.sh",
            "--file",
            "main.c",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    server.stop();
    server.start_again();
    let out = child.wait_with_output().unwrap();
    let r = Run(out);
    r.expect_code(0);
    let rows = open(&url, &ws).loops(5).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "success", "{}", r.stderr());
    assert_eq!(rows[0].iters, 1);
}
