//! Plugins in other languages, built from source with their own public toolchains
//! (componentize-py, jco + componentize-js) and loaded like any user plugin: the two examples
//! under examples/plugins, and `kiln plugin new` for every kind and language.

use crate::support::Workspace;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn jco() -> PathBuf {
    let p = repo().join("examples/plugins/js-tool/node_modules/.bin/jco");
    assert!(
        p.exists(),
        "{} is missing: run `npm install` in examples/plugins/js-tool (.ci/run does)",
        p.display()
    );
    p
}

#[track_caller]
fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (install it: .ci/run does)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn build_python(src_dir: &Path, world: &str, out: &Path) {
    run(Command::new("componentize-py")
        .current_dir(src_dir)
        .args([
            "-d",
            repo().join("wit").to_str().unwrap(),
            "-w",
            world,
            "componentize",
            "app",
            "-o",
        ])
        .arg(out));
}

fn build_js(src: &Path, world: &str, out: &Path) {
    run(Command::new(jco())
        .current_dir(src.parent().unwrap())
        .arg("componentize")
        .arg(src)
        .args([
            "--wit",
            repo().join("wit").to_str().unwrap(),
            "--world-name",
            world,
            "-o",
        ])
        .arg(out)
        .args(["-d", "http", "-d", "fetch-event"]));
}

#[test]
fn the_python_runner_example_works_and_is_refused_without_its_grant() {
    let ws = Workspace::new();
    let wasm = ws.path().join("pycheck.wasm");
    build_python(
        &repo().join("examples/plugins/python-runner"),
        "runner-plugin",
        &wasm,
    );
    let plugin = wasm.to_str().unwrap();
    ws.kiln(&["plugin", "check", plugin], &[]).expect_code(0);
    ws.write("bad.py", "def f(:\n    pass\n");
    ws.write("good.py", "print('ok')\n");
    let r = ws.kiln(
        &[
            "--plugin", plugin, "check", "--runner", "pycheck", "--file", "bad.py",
        ],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("not granted to plugin `pycheck`")
            && r.stderr().contains("[plugins.pycheck]"),
        "{}",
        r.stderr()
    );
    ws.write("kiln.toml", "[plugins.pycheck]\nexec = [{ program = \"python3\", args = [\"-m\", \"py_compile\", \"*\"] }]\n");
    let r = ws.kiln(
        &[
            "--plugin", plugin, "check", "--runner", "pycheck", "--file", "bad.py", "--json",
        ],
        &[],
    );
    r.expect_code(1);
    let d = &r.json()["diagnostics"][0];
    assert_eq!(
        (d["file"].as_str(), d["line"].as_u64(), d["code"].as_str()),
        (Some("bad.py"), Some(1), Some("SyntaxError")),
        "{d}"
    );
    ws.kiln(
        &[
            "--plugin", plugin, "check", "--runner", "pycheck", "--file", "good.py",
        ],
        &[],
    )
    .expect_code(0);
}

#[test]
fn the_javascript_tool_example_works_and_is_refused_without_its_grant() {
    let ws = Workspace::new();
    let wasm = ws.path().join("textstats.wasm");
    build_js(
        &repo().join("examples/plugins/js-tool/tool.js"),
        "tool-plugin",
        &wasm,
    );
    let plugin = wasm.to_str().unwrap();
    ws.kiln(&["plugin", "check", plugin], &[]).expect_code(0);
    let r = ws.kiln(
        &[
            "--plugin",
            plugin,
            "tool",
            "call",
            "word_count",
            "--args",
            r#"{"text":"one two\nthree"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(
        r.json()["result"],
        serde_json::json!({"words": 3, "lines": 2, "chars": 13})
    );
    run(Command::new("git")
        .current_dir(ws.root())
        .args(["init", "-q"]));
    run(Command::new("git").current_dir(ws.root()).args([
        "-c",
        "user.email=t@example.com",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first commit",
    ]));
    let r = ws.kiln(
        &[
            "--plugin",
            plugin,
            "tool",
            "call",
            "git_log",
            "--args",
            r#"{"n":1}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(1);
    assert_eq!(r.json()["error"]["kind"], "denied");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[plugins.textstats]")
    );
    ws.write("kiln.toml", "[plugins.textstats]\nexec = [{ program = \"git\", args = [\"log\", \"--oneline\", \"-n\", \"*\"] }]\n");
    let r = ws.kiln(
        &[
            "--plugin",
            plugin,
            "tool",
            "call",
            "git_log",
            "--args",
            r#"{"n":1}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(
        r.json()["result"]["commits"][0]
            .as_str()
            .unwrap()
            .ends_with("first commit")
    );
}

#[test]
fn plugin_new_scaffolds_every_kind_and_language_and_they_pass_the_checks() {
    let ws = Workspace::new();
    let target = ws.path().join("rust-target");
    ws.write("a.txt", "old\n");
    for lang in ["rust", "python", "js"] {
        for kind in ["runner", "edit-format", "tool"] {
            let name = format!("my-{lang}-{kind}");
            let dir = ws.path().join(&name);
            let r = ws.kiln(
                &[
                    "plugin",
                    "new",
                    "--kind",
                    kind,
                    "--lang",
                    lang,
                    &name,
                    "--dir",
                    dir.to_str().unwrap(),
                ],
                &[],
            );
            r.expect_code(0);
            assert!(dir.join("README.md").exists() && dir.join("wit/worlds.wit").exists());
            let world = format!("{kind}-plugin");
            let wasm = match lang {
                "rust" => {
                    // The scaffold vendors kiln-guest; its dependencies (wit-bindgen, and
                    // serde_json for a tool) are kiln's own, already in the local registry
                    // cache once kiln is built, so the build needs no network.
                    assert!(dir.join("kiln-guest/Cargo.toml").exists());
                    let mut cmd = Command::new("cargo");
                    cmd.current_dir(&dir)
                        .args([
                            "build",
                            "--target",
                            "wasm32-wasip2",
                            "--release",
                            "--offline",
                            "-q",
                        ])
                        .env("CARGO_TARGET_DIR", &target);
                    run(&mut cmd);
                    target.join(format!(
                        "wasm32-wasip2/release/{}.wasm",
                        name.replace('-', "_")
                    ))
                }
                "python" => {
                    let out = dir.join(format!("{name}.wasm"));
                    run(Command::new("componentize-py")
                        .current_dir(&dir)
                        .args(["-d", "wit", "-w", &world, "componentize", "app", "-o"])
                        .arg(&out));
                    out
                }
                _ => {
                    let out = dir.join(format!("{name}.wasm"));
                    build_js(&dir.join("plugin.js"), &world, &out);
                    out
                }
            };
            let plugin = wasm.to_str().unwrap();
            let r = ws.kiln(&["plugin", "check", plugin], &[]);
            r.expect_code(0);
            assert!(
                r.stdout().contains(&format!("ok: {name} ({kind} plugin")),
                "{}",
                r.stdout()
            );
            // Exercise the generated code, not only its describe functions.
            match kind {
                "tool" => {
                    let r = ws.kiln(
                        &[
                            "--plugin",
                            plugin,
                            "tool",
                            "call",
                            "hello",
                            "--args",
                            r#"{"name":"kiln"}"#,
                            "--json",
                        ],
                        &[],
                    );
                    r.expect_code(0);
                    assert_eq!(r.json()["result"]["greeting"], "hello, kiln", "{name}");
                }
                "edit-format" => {
                    let r = ws.kiln_stdin(
                        &[
                            "--plugin",
                            plugin,
                            "edit",
                            "apply",
                            "--format",
                            &name,
                            "--files",
                            "a.txt",
                            "--dry-run",
                            "--json",
                        ],
                        "new\n",
                    );
                    r.expect_code(0);
                    assert_eq!(r.json()["edits"][0]["status"], "applied", "{name}");
                }
                _ => {
                    let r = ws.kiln(
                        &[
                            "--plugin", plugin, "check", "--runner", &name, "--file", "a.txt",
                        ],
                        &[],
                    );
                    r.expect_code(0);
                }
            }
        }
    }
}
