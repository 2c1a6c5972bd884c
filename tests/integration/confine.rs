//! Programs that plugins run are confined: Landlock keeps kiln's environment and memory out of
//! reach, writes inside the workspace, the call's TMPDIR and granted paths, and TCP behind
//! `net = true`; every descendant dies with the call, and a daemon holding the output pipes
//! does not hold the call. Where Landlock is missing kiln warns, or refuses when told to.

use crate::support::{Run, Workspace, error_of, tool_result, wasm};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SECRET: &str = "sk-test-do-not-leak";

fn grant(extra: &str) -> String {
    format!(
        r#"
[plugins.escape]
fs = ["."]
exec = [
  {{ program = "sh", args = ["-c", "*"] }},
  {{ program = "bash", args = ["-c", "*"] }},
]
timeout_ms = 30000
{extra}
"#
    )
}

fn workspace(kiln_toml: &str) -> Workspace {
    let ws = Workspace::new();
    ws.write("kiln.toml", kiln_toml);
    ws
}

/// `escape.exec` of `program -c script`, with an API key in kiln's environment.
fn exec(ws: &Workspace, program: &str, script: &str, env: &[(&str, &str)]) -> Run {
    exec_args(
        ws,
        json!({ "program": program, "args": ["-c", script] }),
        env,
    )
}

fn exec_args(ws: &Workspace, args: Value, env: &[(&str, &str)]) -> Run {
    let mut all = vec![("OPENAI_API_KEY", SECRET)];
    all.extend_from_slice(env);
    ws.escape_tool("exec", &args.to_string(), &all)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn kill(pid: i32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}

/// A `sleep` whose command line no other process has (the call's processes are invisible to
/// each other's `/proc` numbers, so the test finds them by what they run).
fn marker(tag: &str) -> String {
    format!("6{}.{tag}", std::process::id() % 1000)
}

/// The live processes on the host running `sleep MARKER`, killed once counted.
fn survivors(marker: &str) -> Vec<i32> {
    let found = crate::kernel::alive_with(&format!("sleep\0{marker}"));
    for pid in &found {
        kill(*pid);
    }
    found
}

#[test]
fn a_program_cannot_read_kilns_environment() {
    let ws = workspace(&grant(""));
    // Walk up from the program through kiln's /proc (the namespace's init and the spawned
    // process are forks of kiln, their memory a copy of its) to kiln itself, and try each.
    let r = exec(
        &ws,
        "sh",
        r#"set -- $(sed 's/.*) //' /proc/self/stat); p=$2
while :; do
  set -- $(sed 's/.*) //' /proc/$p/stat); p=$2
  [ "$p" -lt 1 ] && break
  comm=$(cat /proc/$p/comm)
  cat /proc/$p/environ; echo "environ=$?"; head -c 64 /proc/$p/mem >/dev/null; echo "mem=$?"
  [ "$comm" = kiln ] && echo "reached kiln"
done"#,
        &[],
    );
    assert!(!r.stdout().contains(SECRET), "{}", r.stdout());
    let res = tool_result(&r);
    let (out, err) = (text(&res["stdout"]), text(&res["stderr"]));
    assert!(out.contains("reached kiln"), "kiln is an ancestor: {out}");
    assert!(
        !out.contains("environ=0") && !out.contains("mem=0"),
        "{out}"
    );
    assert!(err.contains("Permission denied"), "{err}");
    assert!(!out.contains("OPENAI_API_KEY") && !err.contains(SECRET));
}

#[test]
fn writes_reach_only_the_workspace_tmpdir_and_granted_paths() {
    let ws = workspace(&grant(r#"write = ["~/granted"]"#));
    std::fs::create_dir(ws.path().join("granted")).unwrap();
    let r = exec(
        &ws,
        "sh",
        r#"
echo in > inside-new.txt && echo inside-ok
echo t > "$TMPDIR/t" && [ "$(cat "$TMPDIR/t")" = t ] && echo tmp-ok
echo g > "$HOME/granted/g.txt" && echo granted-ok
echo x > ../outside-new.txt || echo outside-denied
echo x > "$HOME/not-granted.txt" || echo home-denied
echo x > "/tmp/kiln-confine-test-$PPID" && echo slash-tmp-own
echo "tmpdir=$TMPDIR"
"#,
        &[],
    );
    let res = tool_result(&r);
    let out = text(&res["stdout"]);
    for want in ["inside-ok", "tmp-ok", "granted-ok", "slash-tmp-own"] {
        assert!(out.contains(want), "{want}: {out}\n{}", res["stderr"]);
    }
    assert_eq!(ws.read("inside-new.txt"), "in\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("granted/g.txt")).unwrap(),
        "g\n"
    );
    // `..` and `$HOME` are the view's own empty home: nothing reaches the host.
    assert!(!ws.path().join("outside-new.txt").exists());
    assert!(!ws.path().join("not-granted.txt").exists());
    let tmpdir = out.lines().find_map(|l| l.strip_prefix("tmpdir=")).unwrap();
    assert_eq!(tmpdir, "/tmp", "the call's /tmp is its own");
    let leaked = std::fs::read_dir("/tmp").unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with("kiln-confine-test-")
    });
    assert!(!leaked, "a file reached the host's /tmp");
}

#[test]
fn descendants_die_with_the_call_even_after_setsid_or_a_double_fork() {
    let ws = workspace(&grant(""));
    let (daemon, orphan) = (marker("101"), marker("202"));
    let r = exec(
        &ws,
        "sh",
        &r#"
setsid sh -c 'echo $$ > daemon.pid; exec sleep DAEMON' </dev/null >/dev/null 2>&1 &
( sh -c 'echo $$ > orphan.pid; exec sleep ORPHAN' </dev/null >/dev/null 2>&1 & )
while [ ! -s orphan.pid ]; do sleep 0.05; done
while [ ! -s daemon.pid ]; do sleep 0.05; done
sleep 0.2
echo started
"#
        .replace("DAEMON", &daemon)
        .replace("ORPHAN", &orphan),
        &[],
    );
    let res = tool_result(&r);
    assert!(text(&res["stdout"]).contains("started"), "{res}");
    for m in [daemon, orphan] {
        let left = survivors(&m);
        assert!(left.is_empty(), "sleep {m}: {left:?} outlived the call");
    }
}

#[test]
fn a_daemon_holding_stdout_does_not_keep_the_call_waiting() {
    let ws = workspace(&grant(""));
    let held = marker("303");
    let start = Instant::now();
    let r = exec(
        &ws,
        "sh",
        &r#"setsid sh -c 'echo $$ > held.pid; echo from-daemon; exec sleep HELD' & while [ ! -s held.pid ]; do sleep 0.05; done; echo done"#
            .replace("HELD", &held),
        &[],
    );
    let took = start.elapsed();
    let res = tool_result(&r);
    let left = survivors(&held);
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}; the deadline is 30 s"
    );
    let out = text(&res["stdout"]);
    assert!(out.contains("done") && out.contains("from-daemon"), "{out}");
    assert_eq!(res["exit_code"], 0);
    assert_eq!(res["timed_out"], false);
    assert!(left.is_empty(), "the daemon {left:?} outlived the call");
}

/// A listener on 127.0.0.1 that records what one client sends (for up to 15 s).
fn listener() -> (u16, std::thread::JoinHandle<Option<String>>) {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    let mut got = String::new();
                    let _ = s.read_to_string(&mut got);
                    return Some(got);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        None
    });
    (port, h)
}

#[test]
fn tcp_needs_net_true() {
    let connect = |port: u16| {
        format!("echo hello > /dev/tcp/127.0.0.1/{port} && echo connected || echo refused")
    };
    let ws = workspace(&grant(""));
    let (port, got) = listener();
    let res = tool_result(&exec(&ws, "bash", &connect(port), &[]));
    assert!(
        text(&res["stdout"]).contains("refused")
            && text(&res["stderr"]).contains("Permission denied"),
        "{res}"
    );
    // Unblock the listener so the thread ends, then check it saw no program.
    let _ = std::net::TcpStream::connect(("127.0.0.1", port)).map(drop);
    assert_eq!(
        got.join().unwrap().as_deref(),
        Some(""),
        "only the test's own connection arrived"
    );

    let ws = workspace(&grant("net = true"));
    let (port, got) = listener();
    let res = tool_result(&exec(&ws, "bash", &connect(port), &[]));
    assert!(text(&res["stdout"]).contains("connected"), "{res}");
    assert_eq!(got.join().unwrap().as_deref(), Some("hello\n"));
}

#[test]
fn require_confinement_refuses_to_run_a_program_landlock_cannot_confine() {
    let ws = workspace(&format!(
        "{}\n[sandbox]\nrequire_confinement = true\n",
        grant("")
    ));
    let r = exec(
        &ws,
        "sh",
        "echo ran > ran.txt",
        &[("KILN_TEST_NO_LANDLOCK", "1")],
    );
    r.expect_code(1);
    let msg = error_of(&r, "denied");
    assert!(
        msg.contains("require_confinement")
            && msg.contains("was not run")
            && msg.contains("running `sh`"),
        "{msg}"
    );
    assert!(!ws.root().join("ran.txt").exists());

    // With Landlock present the same configuration runs the program, confined.
    let r = exec(
        &ws,
        "sh",
        "echo ran > ran.txt; echo x > ../out.txt; echo tried",
        &[],
    );
    let res = tool_result(&r);
    assert!(text(&res["stdout"]).contains("tried"), "{res}");
    assert_eq!(ws.read("ran.txt"), "ran\n");
    assert!(!ws.path().join("out.txt").exists());
}

#[test]
fn without_landlock_kiln_warns_once_and_the_view_still_holds() {
    let ws = workspace(&grant(""));
    let r = exec(
        &ws,
        "sh",
        "echo x > ../out.txt; echo tried",
        &[("KILN_TEST_NO_LANDLOCK", "1")],
    );
    let res = tool_result(&r);
    let err = r.stderr();
    assert_eq!(
        err.matches("warning: programs run by plugins are not fully confined")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("Landlock"), "{err}");
    assert!(text(&res["stdout"]).contains("tried"));
    assert!(!ws.path().join("out.txt").exists(), "the view holds writes");
}

#[test]
fn require_confinement_refuses_where_the_kernel_builds_no_view() {
    let ws = workspace(&format!(
        "{}\n[sandbox]\nrequire_confinement = true\n",
        grant("")
    ));
    let r = exec(
        &ws,
        "sh",
        "echo ran > ran.txt",
        &[("KILN_TEST_NO_VIEW", "1")],
    );
    r.expect_code(1);
    let msg = error_of(&r, "denied");
    assert!(
        msg.contains("a view built for each call") && msg.contains("was not run"),
        "{msg}"
    );
    assert!(!ws.root().join("ran.txt").exists());
}

#[test]
fn without_a_view_or_landlock_kiln_warns_once_and_runs_unconfined() {
    let ws = workspace(&grant(""));
    let r = exec(
        &ws,
        "sh",
        "echo x > ../out.txt && echo wrote-outside",
        &[("KILN_TEST_NO_LANDLOCK", "1"), ("KILN_TEST_NO_VIEW", "1")],
    );
    let res = tool_result(&r);
    let err = r.stderr();
    assert_eq!(
        err.matches("warning: programs run by plugins are not fully confined")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("require_confinement = true"), "{err}");
    // Honest: nothing confines the program then.
    assert!(text(&res["stdout"]).contains("wrote-outside"));
    assert!(ws.path().join("out.txt").exists());
}

#[test]
fn the_cwd_is_opened_inside_the_workspace() {
    let ws = workspace(&grant(""));
    std::fs::create_dir(ws.root().join("real")).unwrap();
    std::os::unix::fs::symlink("real", ws.root().join("inner")).unwrap();
    std::os::unix::fs::symlink("..", ws.root().join("up")).unwrap();
    let res = tool_result(&exec_args(
        &ws,
        json!({ "program": "sh", "args": ["-c", "pwd -P"], "cwd": "inner" }),
        &[],
    ));
    assert!(
        text(&res["stdout"]).trim_end().ends_with("/ws/real"),
        "{res}"
    );
    let r = exec_args(
        &ws,
        json!({ "program": "sh", "args": ["-c", "pwd -P"], "cwd": "up" }),
        &[],
    );
    r.expect_code(1);
    let msg = error_of(&r, "denied");
    assert!(msg.contains("cwd `up` leaves the workspace"), "{msg}");
}

#[test]
fn plugin_inspect_says_what_confines_the_programs() {
    let ws = workspace(&grant(r#"write = ["/opt/kiln-granted-cache"]"#));
    let plugin = wasm("kiln_test_escape");
    let r = ws.kiln(
        &["plugin", "inspect", plugin.to_str().unwrap(), "--json"],
        &[],
    );
    r.expect_code(0);
    let c = &r.json()["confinement"];
    let p = &c["programs"];
    assert_eq!(p["landlock"]["state"], "enforced", "{c}");
    assert_eq!(p["net"], false);
    let writes: Vec<String> = p["write"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| text(&w["path"]))
        .collect();
    assert!(
        writes.iter().any(|w| w == "/opt/kiln-granted-cache")
            && writes.iter().any(|w| w == "$TMPDIR"),
        "{writes:?}"
    );
    let human = ws.kiln(&["plugin", "inspect", plugin.to_str().unwrap()], &[]);
    human.expect_code(0);
    let out = human.stdout();
    for want in [
        "confined by a view built for each call",
        "write   /opt/kiln-granted-cache (granted (write)) [does not exist",
        "TCP bind/connect denied (grant with `net = true`)",
        "/proc/<kiln>/environ are out of reach",
        "killed when the call ends",
    ] {
        assert!(out.contains(want), "{want}:\n{out}");
    }
    // Without Landlock it says the second layer is missing; without a view too, that
    // nothing confines the programs.
    let r = ws.kiln(
        &["plugin", "inspect", plugin.to_str().unwrap()],
        &[("KILN_TEST_NO_LANDLOCK", "1")],
    );
    assert!(
        r.stdout()
            .contains("not enforced: Landlock, the second layer"),
        "{}",
        r.stdout()
    );
    let r = ws.kiln(
        &["plugin", "inspect", plugin.to_str().unwrap()],
        &[("KILN_TEST_NO_LANDLOCK", "1"), ("KILN_TEST_NO_VIEW", "1")],
    );
    assert!(r.stdout().contains("NOT confined"), "{}", r.stdout());
}
