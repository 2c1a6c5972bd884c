//! The boundaries the kernel keeps for every program kiln runs (runners, `run_cmd`, review
//! commands, hooks): reads confined to the workspace, system and toolchain directories
//! (Landlock), no socket but `AF_UNIX` without `net` (seccomp), every descendant ends with its
//! call (a PID namespace, else freeze-and-kill), and `--runner cargo` writes cargo's caches,
//! never its configuration or `bin/`.

use crate::mock_llm::{MockLlm, openai_calls, tool_contents};
use crate::review_loop::{final_answer, review};
use crate::support::{Run, Workspace};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SECRET: &str = "s3cret-in-home";

/// A workspace whose `$HOME` (the parent of the workspace, for kiln) holds a secret.
fn with_home_secret() -> (Workspace, PathBuf) {
    let ws = Workspace::new();
    let secret = ws.path().join(".ssh-like-secret");
    std::fs::write(&secret, SECRET).unwrap();
    ws.write("a.txt", "a\n");
    (ws, secret)
}

/// `kiln check --cmd CMD --file a.txt --json` with `env`.
fn check(ws: &Workspace, cmd: &str, env: &[(&str, &str)]) -> Run {
    ws.kiln(&["check", "--cmd", cmd, "--file", "a.txt", "--json"], env)
}

fn output(r: &Run) -> String {
    let j = r.json();
    format!(
        "{}{}",
        j["stdout"].as_str().unwrap_or(""),
        j["stderr"].as_str().unwrap_or("")
    )
}

#[test]
fn a_checked_program_cannot_read_home_outside_the_workspace() {
    let (ws, secret) = with_home_secret();
    let r = check(&ws, &format!("cat {}", secret.display()), &[]);
    let out = output(&r);
    assert!(!out.contains(SECRET), "the secret was read: {out}");
    assert!(out.contains("No such file or directory"), "{out}");
    // $HOME is the view's own, holding only the way to the workspace; the workspace reads fine.
    let r = check(&ws, &format!("ls -A {}", ws.path().display()), &[]);
    assert_eq!(output(&r).trim(), "ws", "{}", output(&r));
    let r = check(&ws, "cat a.txt", &[]);
    r.expect_code(0);
}

/// The real toolchain's homes (the test runs with the developer's or CI's HOME).
fn toolchain_homes() -> (PathBuf, PathBuf) {
    let env = kiln_env::env();
    let home = env.home().unwrap();
    let cargo = env
        .var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cargo"));
    let rustup = env
        .var("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".rustup"));
    (cargo, rustup)
}

/// A crate depending on `hex` (a dependency of kiln, so in the registry cache wherever kiln's
/// tests run); its build script tries to plant a cargo configuration and a program in
/// CARGO_HOME and to change `hex`'s unpacked source, its test tries to read the secret in $HOME.
fn hostile_crate(ws: &Workspace, secret: &Path, cargo_home: &Path) {
    ws.write(
        "Cargo.toml",
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nhex = \"=0.4.3\"\n",
    );
    ws.write(
        "build.rs",
        &format!(
            "fn main() {{\n    let home = {:?};\n    let _ = std::fs::write(format!(\"{{home}}/config.toml\"), \"[build]\\nrustc-wrapper = \\\"/tmp/evil\\\"\\n\");\n    let _ = std::fs::write(format!(\"{{home}}/bin/cargo-evil\"), \"#!/bin/sh\\n\");\n    for e in std::fs::read_dir(format!(\"{{home}}/registry/src\")).unwrap().flatten() {{\n        use std::io::Write;\n        let lib = e.path().join(\"hex-0.4.3/src/lib.rs\");\n        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&lib) {{\n            let _ = f.write_all(b\"// planted by a build script\\n\");\n        }}\n    }}\n}}\n",
            cargo_home.display().to_string()
        ),
    );
    ws.write(
        "src/lib.rs",
        &format!(
            "pub fn enc(b: &[u8]) -> String {{ hex::encode(b) }}\n\n#[test]\nfn encodes_and_cannot_read_home() {{\n    assert_eq!(enc(b\"hi\"), \"6869\");\n    assert!(std::fs::read({:?}).is_err(), \"read the secret\");\n}}\n",
            secret.display().to_string()
        ),
    );
    ws.write(
        "kiln.toml",
        "[plugins.cargo.settings]\nargs = \"--offline\"\n",
    );
}

#[test]
fn runner_cargo_builds_with_the_registry_cache_but_never_writes_cargo_config_or_bin() {
    let (ws, secret) = with_home_secret();
    let (real_cargo, rustup) = toolchain_homes();
    // A CARGO_HOME of the test's own, sharing the real registry cache (a link: Landlock
    // allows the directory it resolves to).
    let cargo_home = ws.path().join("cargo-home");
    std::fs::create_dir_all(cargo_home.join("bin")).unwrap();
    std::os::unix::fs::symlink(real_cargo.join("registry"), cargo_home.join("registry")).unwrap();
    for lock in [".package-cache", ".package-cache-mutate"] {
        std::fs::write(cargo_home.join(lock), "").unwrap();
    }
    hostile_crate(&ws, &secret, &cargo_home);
    let path = format!(
        "{}:{}",
        real_cargo.join("bin").display(),
        kiln_env::env().var("PATH").unwrap()
    );
    // The toolchain this test runs with (rust-toolchain.toml), not rustup's default.
    let toolchain = kiln_env::env().var("RUSTUP_TOOLCHAIN").unwrap_or_default();
    let mut env = vec![
        ("CARGO_HOME", cargo_home.to_str().unwrap()),
        ("RUSTUP_HOME", rustup.to_str().unwrap()),
        ("PATH", &path),
    ];
    if !toolchain.is_empty() {
        env.push(("RUSTUP_TOOLCHAIN", toolchain));
    }
    let r = ws.kiln(
        &[
            "check",
            "--runner",
            "cargo",
            "--mode",
            "test",
            "--file",
            "src/lib.rs",
            "--json",
        ],
        &env,
    );
    let j = r.json();
    assert_eq!(
        j["ok"],
        true,
        "cargo test failed inside kiln: {j}\n{}",
        r.stderr()
    );
    assert!(
        !cargo_home.join("config.toml").exists(),
        "config.toml planted"
    );
    assert!(!cargo_home.join("bin/cargo-evil").exists(), "bin/ planted");
    for e in std::fs::read_dir(real_cargo.join("registry/src"))
        .unwrap()
        .flatten()
    {
        let lib = e.path().join("hex-0.4.3/src/lib.rs");
        if let Ok(text) = std::fs::read_to_string(&lib) {
            assert!(
                !text.contains("planted by a build script"),
                "{} was changed",
                lib.display()
            );
        }
    }
}

/// A UDP listener on 127.0.0.1 and what it received within `wait`.
fn udp_listener() -> (std::net::UdpSocket, u16) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    (s, port)
}

fn received(s: &std::net::UdpSocket, wait: Duration) -> Option<String> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    s.recv_from(&mut buf)
        .ok()
        .map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn a_udp_datagram_to_loopback_is_never_delivered() {
    let (ws, _) = with_home_secret();
    let (sock, port) = udp_listener();
    ws.write(
        "udp.py",
        &format!(
            "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    s.sendto(b'leak', ('127.0.0.1', {port}))\n    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)\n"
        ),
    );
    let r = check(&ws, "python3 udp.py", &[]);
    let out = output(&r);
    assert!(out.contains("refused 13"), "{out}");
    assert_eq!(received(&sock, Duration::from_millis(300)), None);
}

#[test]
fn an_mptcp_socket_cannot_be_created_without_net() {
    let (ws, _) = with_home_secret();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    ws.write(
        "mptcp.py",
        &format!(
            "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
        ),
    );
    let r = check(&ws, "python3 mptcp.py", &[]);
    let out = output(&r);
    // EACCES from the filter (not EPROTONOSUPPORT from a kernel without MPTCP).
    assert!(out.contains("refused 13"), "{out}");
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err(), "a connection arrived");
}

/// Live processes whose command line holds `marker`.
pub(crate) fn alive_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_none_or(|st| st == "Z" || st == "X");
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// A fork-and-exit chain: a new process about every millisecond, each the child of one that
/// exits, none calling setsid. The program itself returns at once.
fn fork_chain(env: &[(&str, &str)]) {
    let (ws, _) = with_home_secret();
    let marker = format!("kiln-chain-{}-{}", std::process::id(), env.len());
    ws.write(
        "chain.py",
        "import os, sys, time\nif os.fork() > 0:\n    sys.exit(0)\nwhile True:\n    time.sleep(0.001)\n    if os.fork() > 0:\n        os._exit(0)\n",
    );
    let start = Instant::now();
    let r = check(&ws, &format!("python3 chain.py {marker}"), env);
    r.expect_code(0);
    std::thread::sleep(Duration::from_millis(300));
    let left = alive_with(&marker);
    // Clean up after a failure, so one broken run does not load the machine: by process group
    // (the chain never leaves its group, and killing a group is atomic against fork).
    let until = Instant::now() + Duration::from_secs(5);
    while !alive_with(&marker).is_empty() && Instant::now() < until {
        for pid in alive_with(&marker) {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let pgrp = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(2))
                .and_then(|g| g.parse::<i32>().ok());
            // SAFETY: signals this test's own chain (its group, else the process).
            unsafe {
                match pgrp {
                    Some(g) if g > 1 => libc::kill(-g, libc::SIGKILL),
                    _ => libc::kill(pid, libc::SIGKILL),
                };
            }
        }
    }
    assert!(
        left.is_empty(),
        "the chain outlived its call: {left:?} (env {env:?})"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_fork_chain_dies_with_its_call() {
    fork_chain(&[]);
}

#[test]
fn a_fork_chain_dies_with_its_call_without_pid_namespaces() {
    fork_chain(&[("KILN_TEST_NO_PIDNS", "1")]);
}

#[test]
fn a_hook_cannot_read_home_or_write_outside_the_workspace() {
    let (ws, secret) = with_home_secret();
    ws.write(
        "hook.sh",
        &format!(
            "#!/bin/sh\ncat > /dev/null\ncat {} > leaked.txt 2>&1\necho x > {}/outside.txt 2>>leaked.txt\necho '{{\"decision\":\"allow\"}}'\n",
            secret.display(),
            ws.path().display()
        ),
    );
    ws.write("kiln.toml", "[agent.hooks]\nbefore_tool = \"sh hook.sh\"\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[("read_file", r#"{"path":"a.txt"}"#)]),
        crate::mock_llm::openai_text("done"),
    ]);
    let r = ws.kiln_model(&mock.url, "agent", &["--prompt", "go"]);
    r.expect_code(0);
    let leaked = ws.read("leaked.txt");
    assert!(!leaked.contains(SECRET), "the hook read $HOME: {leaked}");
    assert!(leaked.contains("No such file or directory"), "{leaked}");
    assert!(!ws.path().join("outside.txt").exists());
    assert!(tool_contents(&mock, 1)[0].contains('a'));
}

/// The review phase's commands, past the host's argument checks (which do not know
/// `--deref` or `-files0-from`): the kernel keeps them inside the workspace.
#[test]
fn review_commands_cannot_read_outside_the_workspace_whatever_their_arguments() {
    let (ws, _) = with_home_secret();
    ws.write("task.md", "Do it.\n");
    // A workspace link to $HOME, and a list of start points naming $HOME.
    std::os::unix::fs::symlink(ws.path(), ws.root().join("up")).unwrap();
    std::fs::write(
        ws.root().join("starts.bin"),
        format!("{}\0", ws.path().display()),
    )
    .unwrap();
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- more\n"),
        openai_calls(&[
            (
                "run_cmd",
                r#"{"command":"grep","args":["--deref","s3cret","."]}"#,
            ),
            (
                "run_cmd",
                r#"{"command":"find","args":["-files0-from","starts.bin"]}"#,
            ),
        ]),
        review("looked", "", &["more"]),
    ]);
    let r = ws.kiln_model(&mock.url, "loop", &["--task", "task.md", "--loops", "1"]);
    let results = tool_contents(&mock, 2);
    assert_eq!(results.len(), 2, "{results:?}\n{}", r.stderr());
    for out in &results {
        assert!(!out.contains(SECRET), "read outside: {out}");
        assert!(!out.contains(".ssh-like-secret"), "listed $HOME: {out}");
    }
    // `find` walked the view's own $HOME: the way to the workspace, nothing else.
    assert!(results[1].contains("/ws/task.md"), "{}", results[1]);
}

#[test]
fn inspect_names_each_boundary_and_a_missing_mechanism_refuses_under_require_confinement() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nexec = [{ program = \"sh\", args = [\"-c\", \"*\"] }]\n",
    );
    let plugin = crate::support::wasm("kiln_test_escape");
    let inspect = |env: &[(&str, &str)]| {
        let r = ws.kiln(
            &["plugin", "inspect", plugin.to_str().unwrap(), "--json"],
            env,
        );
        r.expect_code(0);
        r.json()["confinement"]["programs"]["landlock"]["boundaries"].clone()
    };
    let b = inspect(&[]);
    assert_eq!(b["view"]["state"], "enforced", "{b}");
    assert!(
        b["reads"]["held_by"]
            .as_str()
            .unwrap()
            .starts_with("a view built for the call"),
        "{b}"
    );
    assert!(
        b["network"]["held_by"]
            .as_str()
            .unwrap()
            .starts_with("a network namespace"),
        "{b}"
    );
    assert_eq!(b["network"]["state"], "enforced", "{b}");
    assert_eq!(
        b["descendants"]["held_by"], "a PID namespace per call",
        "{b}"
    );
    let b = inspect(&[("KILN_TEST_NO_PIDNS", "1"), ("KILN_TEST_NO_SECCOMP", "1")]);
    assert_eq!(b["view"]["state"], "missing", "{b}");
    assert_eq!(b["reads"]["held_by"], "Landlock read rules", "{b}");
    assert_eq!(b["descendants"]["state"], "partial", "{b}");
    assert_eq!(b["network"]["state"], "partial", "{b}");

    // Without PID namespaces, `require_confinement` refuses to run the program.
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nexec = [{ program = \"sh\", args = [\"-c\", \"*\"] }]\n[sandbox]\nrequire_confinement = true\n",
    );
    let r = ws.escape_tool(
        "exec",
        r#"{"program":"sh","args":["-c","echo ran > ran.txt"]}"#,
        &[("KILN_TEST_NO_PIDNS", "1")],
    );
    let msg = crate::support::error_of(&r, "denied");
    assert!(msg.contains("PID namespace"), "{msg}");
    assert!(!ws.root().join("ran.txt").exists());
}

/// kiln killed outright (SIGKILL, no clean-up of its own) mid-call: the call's processes end
/// with it, the PID namespace's waiting process sees kiln's lifeline close and ends the
/// namespace.
#[test]
fn a_call_ends_with_kiln_even_when_kiln_is_killed() {
    let (ws, _) = with_home_secret();
    let marker = format!("kiln-orphan-{}", std::process::id());
    ws.write(
        "stay.py",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    open('started', 'w').close()\nwhile True:\n    time.sleep(1)\n",
    );
    let cmd = format!("python3 stay.py {marker}");
    let mut kiln = ws.spawn_kiln(&["check", "--cmd", &cmd, "--file", "a.txt", "--json"]);
    let until = Instant::now() + Duration::from_secs(20);
    while !ws.root().join("started").exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        ws.root().join("started").exists(),
        "the program did not start"
    );
    kiln.kill().unwrap();
    kiln.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !alive_with(&marker).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = alive_with(&marker);
    for pid in &left {
        // SAFETY: signals this test's own processes.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    assert!(left.is_empty(), "outlived kiln: {left:?}");
}

/// `require_confinement` holds for hooks too: with a mechanism missing the hook is not run, and
/// a before-tool hook that could not run denies the call.
#[test]
fn require_confinement_refuses_a_hook_the_kernel_cannot_confine() {
    let (ws, _) = with_home_secret();
    ws.write(
        "hook.sh",
        "#!/bin/sh\necho ran > ran.txt\necho '{\"decision\":\"allow\"}'\n",
    );
    ws.write(
        "kiln.toml",
        "[agent.hooks]\nbefore_tool = \"sh hook.sh\"\n[sandbox]\nrequire_confinement = true\n",
    );
    let mock = MockLlm::start(vec![
        openai_calls(&[("read_file", r#"{"path":"a.txt"}"#)]),
        crate::mock_llm::openai_text("done"),
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
            "go",
        ],
        &[("KILN_TEST_NO_PIDNS", "1")],
    );
    r.expect_code(0);
    assert!(!ws.root().join("ran.txt").exists(), "the hook ran");
    let res = tool_contents(&mock, 1);
    assert!(
        res[0].contains("denied by the before-tool hook") && res[0].contains("require_confinement"),
        "{res:?}"
    );
}

#[test]
fn a_descriptor_kiln_inherited_never_reaches_the_program() {
    let (ws, secret) = with_home_secret();
    // A descriptor of the secret without close-on-exec, as a careless parent leaves it.
    let path = std::ffi::CString::new(secret.to_str().unwrap()).unwrap();
    // SAFETY: opens a file; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd > 2);
    let r = check(&ws, &format!("sh -c 'cat <&{fd}; ls /proc/self/fd'"), &[]);
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    let out = output(&r);
    assert!(
        !out.contains(SECRET),
        "the inherited descriptor was read: {out}"
    );
}

#[test]
fn a_program_keeps_no_capability() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let r = check(&ws, "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status", &[]);
    let out = output(&r);
    for line in out.lines() {
        let hex = line.split_whitespace().last().unwrap();
        let caps = u64::from_str_radix(hex, 16).unwrap();
        assert_eq!(caps, 0, "{line}");
    }
    assert_eq!(out.lines().count(), 3, "{out}");
}

#[test]
fn no_program_can_make_a_file_set_user_id() {
    // Landlock does not cover chmod: outside the writable paths a root program could make any
    // binary set-user-ID root. The seccomp filter refuses those mode bits, with `net` or not.
    let (ws, _) = with_home_secret();
    let outside = ws.path().join("victim");
    std::fs::write(&outside, "#!/bin/sh\n").unwrap();
    ws.write("inside", "#!/bin/sh\n");
    let r = check(
        &ws,
        &format!(
            "sh -c 'chmod 4755 {} inside; chmod 2755 inside; chmod 755 inside && echo plain-ok'",
            outside.display()
        ),
        &[],
    );
    let out = output(&r);
    assert!(out.contains("plain-ok"), "{out}");
    use std::os::unix::fs::PermissionsExt;
    for p in [outside, ws.root().join("inside")] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o6000, 0, "{} became {mode:o}: {out}", p.display());
    }
}

#[test]
fn without_root_descendants_still_end_with_the_call() {
    // kiln run as `nobody` (the tests run as root) gets its PID namespace through a user
    // namespace that maps its own ids to themselves.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let ws = base.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let kiln = base.join("kiln");
    std::fs::copy(env!("CARGO_BIN_EXE_kiln"), &kiln).unwrap();
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in [
        base.to_path_buf(),
        ws.clone(),
        ws.join("a.txt"),
        kiln.clone(),
    ] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&kiln)
        .args([
            "-C",
            ws.to_str().unwrap(),
            "check",
            "--file",
            "a.txt",
            "--json",
        ])
        .arg("--cmd")
        .arg("sh -c '(setsid sleep 79.5 </dev/null >/dev/null 2>&1 &); echo $$; ls -A $HOME; cat /etc/shadow; true'")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", base)
        .env("XDG_STATE_HOME", base.join("state"))
        .env("KILN_CACHE_DIR", base.join("cache"))
        .output()
        .unwrap();
    let r = Run(out);
    let j = r.json();
    assert_eq!(j["exit_code"], 0, "{j}\n{}", r.stderr());
    // The program is PID 2 of its own namespace (its init is 1), and its view holds for a
    // user too: $HOME shows only the way to the workspace, /etc no shadow.
    assert_eq!(
        j["stdout"].as_str().unwrap().trim(),
        "2\nws",
        "{j}\n{}",
        r.stderr()
    );
    assert!(
        j["stderr"]
            .as_str()
            .unwrap()
            .contains("/etc/shadow: No such file or directory"),
        "{j}"
    );
    let alive = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("cmdline"))
            .is_ok_and(|c| c.ends_with("sleep\u{0}79.5\u{0}"))
    });
    assert!(!alive, "the daemon outlived its call");
}
