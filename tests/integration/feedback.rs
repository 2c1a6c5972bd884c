//! Feedback from the first second (issue 33 item 7): `kiln fix` prints its banner and the
//! check it starts before the check ends, and on a terminal the seconds elapsed while it runs.

use crate::support::Workspace;
use std::io::BufRead;
use std::time::{Duration, Instant};

/// What `kiln` (as `kiln` is set up to run, clean environment and all) writes on a
/// pseudo-terminal (`script` runs it on one), with `env` added.
fn on_a_terminal(kiln: &std::process::Command, env: &[(&str, &str)]) -> String {
    let quote = |w: &std::ffi::OsStr| format!("'{}'", w.to_string_lossy().replace('\'', "'\\''"));
    let line: Vec<String> = std::iter::once(kiln.get_program())
        .chain(kiln.get_args())
        .map(quote)
        .collect();
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qfec", &line.join(" "), "/dev/null"])
        .current_dir(kiln.get_current_dir().unwrap())
        .env_clear()
        .env("SHELL", "/bin/sh");
    for (k, v) in kiln.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.envs(env.iter().copied());
    String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
}

const BANNER: &str = "fixing the project with runner `command`, format `search-replace`, model `m` (at most 5 iterations)";

#[test]
fn the_banner_and_runner_started_come_on_stderr_before_a_slow_runner_ends() {
    let ws = Workspace::new();
    let mut child = ws
        .command(&[
            "fix",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--cmd",
            "sleep 30",
        ])
        .env("OPENAI_API_KEY", "sk-feedback")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut lines = Vec::new();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    while lines.len() < 2 {
        let mut l = String::new();
        if err.read_line(&mut l).unwrap() == 0 {
            break;
        }
        lines.push(l.trim_end().to_string());
    }
    let waited = start.elapsed();
    // SAFETY: sending SIGINT to the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let _ = child.wait();
    assert_eq!(
        lines,
        [BANNER, "[0] checking the project: `sleep 30`…"],
        "{lines:?}"
    );
    assert!(waited < Duration::from_secs(20), "{waited:?}");
}

#[test]
fn on_a_terminal_a_running_check_shows_the_seconds_elapsed() {
    let ws = Workspace::new();
    let kiln = ws.command(&[
        "fix",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--cmd",
        "sleep 3",
    ]);
    let text = on_a_terminal(&kiln, &[("OPENAI_API_KEY", "sk-feedback")]);
    assert!(text.contains(BANNER), "{text}");
    // Redrawn in place with the seconds elapsed, then cleared before the next line.
    assert!(text.contains("\r\x1b[2K    "), "{text:?}");
    assert!(text.contains(" 2 s"), "{text:?}");
    let cleared = text.rfind("\r\x1b[2K").unwrap();
    assert!(text[cleared..].contains("[0] runner: passed"), "{text:?}");
}

#[test]
fn kiln_check_shows_the_time_elapsed_on_a_terminal_and_in_plain_lines_otherwise() {
    let ws = Workspace::new();
    ws.write("a.txt", "");
    let check = |secs: &str| {
        ws.command(&[
            "check",
            "--file",
            "a.txt",
            "--cmd",
            &format!("sleep {secs}"),
        ])
    };
    // Not a terminal: a plain line at 10 s.
    let out = check("11").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\nstill checking… 10 s\npassed (exit 0"),
        "{err}"
    );
    assert!(!err.contains('\r'), "{err:?}");
    // A terminal: the spinner, cleared before the verdict.
    let text = on_a_terminal(&check("2"), &[]);
    assert!(text.contains(" 1 s\r\x1b[2K"), "{text:?}");
    assert!(text.contains("\r\x1b[2Kpassed (exit 0"), "{text:?}");
}
