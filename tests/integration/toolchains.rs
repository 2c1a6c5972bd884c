//! The built-in runners of other toolchains (pytest, go, tsc, node, make) against the real
//! tools, and runner detection: `kiln check`/`fix` with no `--runner` pick one from the
//! project's files.

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace, fix_result, sr};
use serde_json::Value;

/// The diagnostics of a `--json` check, as (file, line, message).
fn diags(r: &Run) -> Vec<(String, u64, String)> {
    r.json()["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d: &Value| {
            (
                d["file"].as_str().unwrap().to_string(),
                d["line"].as_u64().unwrap(),
                d["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const CALC_PY: &str = "def add(a, b):\n    return a - b\n\n\ndef div(a, b):\n    return a / b\n";
const TEST_CALC_PY: &str = "from calc import add, div\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\ndef test_div():\n    assert div(1, 0) == 0\n\n\ndef test_ok():\n    assert True\n";

fn pytest_project() -> Workspace {
    let ws = Workspace::new();
    ws.write(
        "pyproject.toml",
        "[project]\nname = \"calc\"\nversion = \"0\"\n",
    );
    ws.write("calc.py", CALC_PY);
    ws.write("tests/test_calc.py", TEST_CALC_PY);
    ws.write(
        "tests/conftest.py",
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n",
    );
    ws
}

#[test]
fn pytest_is_detected_and_failures_point_at_the_assertion_and_the_raise() {
    let ws = pytest_project();
    let r = ws.kiln(&["check", "--file", "calc.py"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("runner `pytest` (python3 -m pytest, detected from pyproject.toml)"),
        "{}",
        r.stderr()
    );
    assert!(
        r.stdout().contains("tests/test_calc.py:5:0: error[test-failure]: test tests.test_calc::test_add failed: AssertionError: assert -1 == 3"),
        "{}",
        r.stdout()
    );
    let r = ws.kiln(&["check", "--file", "calc.py", "--json"], &[]);
    let d = diags(&r);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[1].0.as_str(), d[1].1), ("calc.py", 6), "{d:?}");
    assert!(
        d[1].2.contains("test_div failed: ZeroDivisionError"),
        "{d:?}"
    );
    // The report is read, not shown: the output is pytest's own.
    let j = r.json();
    assert!(!j["stdout"].as_str().unwrap().contains("kiln-pytest-junit"));
    assert!(j["stdout"].as_str().unwrap().contains("2 failed, 1 passed"));
    // A syntax error is an import error of the test module, at the broken line.
    ws.write("calc.py", "def add(a, b)\n    return a + b\n");
    let d = diags(&ws.kiln(&["check", "--file", "calc.py", "--json"], &[]));
    assert_eq!((d[0].0.as_str(), d[0].1), ("calc.py", 1), "{d:?}");
    assert!(d[0].2.contains("SyntaxError"), "{d:?}");
    ws.write(
        "calc.py",
        &CALC_PY
            .replace("a - b", "a + b")
            .replace("a / b", "a // b if b else 0"),
    );
    ws.kiln(&["check", "--file", "calc.py"], &[]).expect_code(0);
}

#[test]
fn fix_with_no_runner_named_fixes_a_pytest_project() {
    let ws = pytest_project();
    ws.write("calc.py", &CALC_PY.replace("a / b", "a // b if b else 0"));
    let mock = MockLlm::start(vec![openai_text(&format!(
        "add subtracts.\n\n{}",
        sr("    return a - b\n", "    return a + b\n")
    ))]);
    let r = ws.kiln_model(&mock.url, "fix", &["--file", "calc.py"]);
    r.expect_code(0);
    assert_eq!(fix_result(&r)["iters"], 1);
    let body = mock.recorded()[0].body.to_string();
    assert!(
        body.contains("tests/test_calc.py:5") && body.contains("test_add failed"),
        "{body}"
    );
    assert!(ws.read("calc.py").contains("a + b"));
}

#[test]
fn go_is_detected_and_failures_point_at_the_test_line_and_the_panic() {
    let ws = Workspace::new();
    ws.write("go.mod", "module example.com/calc\n\ngo 1.19\n");
    ws.write(
        "mathx/calc.go",
        "package mathx\n\nfunc Add(a, b int) int {\n\treturn a - b\n}\n\nfunc Div(a, b int) int {\n\treturn a / b\n}\n",
    );
    ws.write(
        "mathx/calc_test.go",
        "package mathx\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(1, 2); got != 3 {\n\t\tt.Errorf(\"Add(1, 2) = %d, want 3\", got)\n\t}\n}\n\nfunc TestDiv(t *testing.T) {\n\tif Div(1, 0) != 0 {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
    );
    let r = ws.kiln(&["check", "--file", "mathx/calc.go"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("runner `go` (go test -json ./..., detected from go.mod)"),
        "{}",
        r.stderr()
    );
    let d = diags(&ws.kiln(&["check", "--file", "mathx/calc.go", "--json"], &[]));
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(
        (d[0].0.as_str(), d[0].1),
        ("mathx/calc_test.go", 7),
        "{d:?}"
    );
    assert_eq!(d[0].2, "test TestAdd failed: Add(1, 2) = -1, want 3");
    assert_eq!((d[1].0.as_str(), d[1].1), ("mathx/calc.go", 8), "{d:?}");
    assert!(d[1].2.contains("integer divide by zero"), "{d:?}");
    // A compile error, at its line and column.
    ws.write(
        "mathx/calc.go",
        "package mathx\n\nfunc Add(a, b int) int {\n\treturn a + c\n}\n\nfunc Div(a, b int) int {\n\treturn 0\n}\n",
    );
    let r = ws.kiln(&["check", "--file", "mathx/calc.go", "--json"], &[]);
    let j = r.json();
    let d = &j["diagnostics"][0];
    assert_eq!(
        (d["file"].as_str(), d["line"].as_u64(), d["column"].as_u64()),
        (Some("mathx/calc.go"), Some(4), Some(13)),
        "{j}"
    );
    assert!(
        d["message"].as_str().unwrap().contains("undefined: c"),
        "{j}"
    );
}

#[test]
fn tsc_is_detected_and_type_errors_carry_file_line_and_code() {
    let ws = Workspace::new();
    ws.write(
        "tsconfig.json",
        r#"{"compilerOptions":{"strict":true,"noEmit":true},"include":["src"]}"#,
    );
    ws.write(
        "src/app.ts",
        "const name: string = \"kiln\";\nexport const n: number = name.lenght;\n",
    );
    let r = ws.kiln(&["check", "--file", "src/app.ts"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr().contains("runner `tsc`") && r.stderr().contains("tsconfig.json"),
        "{}",
        r.stderr()
    );
    let j = ws
        .kiln(&["check", "--file", "src/app.ts", "--json"], &[])
        .json();
    let d = &j["diagnostics"][0];
    assert_eq!(
        (
            d["file"].as_str(),
            d["line"].as_u64(),
            d["column"].as_u64(),
            d["code"].as_str()
        ),
        (Some("src/app.ts"), Some(2), Some(31), Some("TS2551")),
        "{j}"
    );
    ws.write(
        "src/app.ts",
        "const name: string = \"kiln\";\nexport const n: number = name.length;\n",
    );
    ws.kiln(&["check", "--file", "src/app.ts"], &[])
        .expect_code(0);
}

#[test]
fn a_configured_runner_overrides_detection_but_not_from_an_untrusted_file() {
    let ws = pytest_project();
    // The user's own configuration names a command: it runs, not pytest.
    ws.user_config("[fix]\ncmd = \"python3 -c 'raise SystemExit(3)'\"\n");
    let r = ws.kiln(&["check", "--file", "calc.py", "--json"], &[]);
    assert_eq!(r.json()["exit_code"], 3, "{}", r.stderr());
    ws.user_config("");
    // An untrusted kiln.toml may not pick what runs: ignored, pytest is detected.
    ws.write(
        "kiln.toml",
        "[fix]\nrunner = \"command\"\ncmd = \"python3 -c 'raise SystemExit(3)'\"\n",
    );
    let r = Run(ws
        .command(&["check", "--file", "calc.py", "--json"])
        .env_remove("KILN_YES")
        .output()
        .unwrap());
    assert!(
        r.stderr().contains("fix.runner") && r.stderr().contains("fix.cmd"),
        "{}",
        r.stderr()
    );
    assert_eq!(r.json()["exit_code"], 1, "{}", r.stderr());
    assert_eq!(diags(&r).len(), 2);
    // Trusted (KILN_YES), it is the workspace's own choice.
    let r = ws.kiln(&["check", "--file", "calc.py", "--json"], &[]);
    assert_eq!(r.json()["exit_code"], 3, "{}", r.stderr());
    // A runner named on the command line wins over both.
    let r = ws.kiln(
        &["check", "--runner", "pytest", "--file", "calc.py", "--json"],
        &[],
    );
    assert_eq!(diags(&r).len(), 2);
}

#[test]
fn npm_test_is_detected_and_node_test_failures_point_into_the_project() {
    let ws = Workspace::new();
    ws.write(
        "package.json",
        r#"{"name":"calc","version":"1.0.0","scripts":{"test":"node --test"}}"#,
    );
    ws.write(
        "calc.js",
        "exports.add = (a, b) => a - b;\nexports.div = (a, b) => {\n  if (b === 0) throw new Error(\"division by zero\");\n  return a / b;\n};\n",
    );
    ws.write(
        "test/calc.test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add, div } = require(\"../calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(1, 2), 3);\n});\n\ntest(\"divides\", () => {\n  assert.strictEqual(div(1, 0), 0);\n});\n\ntest(\"ok\", () => {});\n",
    );
    let r = ws.kiln(&["check", "--file", "calc.js"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("runner `node` (npm test, detected from package.json)"),
        "{}",
        r.stderr()
    );
    let d = diags(&ws.kiln(&["check", "--file", "calc.js", "--json"], &[]));
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1), ("test/calc.test.js", 6), "{d:?}");
    assert!(
        d[0].2.starts_with("test adds failed: AssertionError") && d[0].2.contains("-1 !== 3"),
        "{d:?}"
    );
    assert_eq!((d[1].0.as_str(), d[1].1), ("calc.js", 3), "{d:?}");
    assert_eq!(d[1].2, "test divides failed: division by zero");
}

const BROKEN_MAIN_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

#[test]
fn make_and_cmake_builds_give_the_compilers_diagnostics_relative_to_the_project() {
    let ws = Workspace::new();
    ws.write("src/main.c", BROKEN_MAIN_C);
    ws.write(
        "Makefile",
        "app: src/main.c\n\tgcc -Wall -o app src/main.c\n",
    );
    let r = ws.kiln(&["check", "--file", "src/main.c"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("runner `make` (make, detected from Makefile)"),
        "{}",
        r.stderr()
    );
    let d = diags(&ws.kiln(&["check", "--file", "src/main.c", "--json"], &[]));
    assert_eq!((d[0].0.as_str(), d[0].1), ("src/main.c", 5), "{d:?}");

    // CMake wins over a Makefile: configure into build/, then build; gcc's absolute paths
    // come back relative.
    ws.write(
        "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.10)\nproject(demo C)\nadd_executable(app src/main.c)\n",
    );
    let r = ws.kiln(&["check", "--file", "src/main.c", "--json"], &[]);
    let d = diags(&r);
    assert_eq!(
        (d[0].0.as_str(), d[0].1),
        ("src/main.c", 5),
        "{d:?} {}",
        r.stdout()
    );
    // A CMakeLists.txt error is at its line.
    ws.write(
        "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.10)\nproject(demo C)\nadd_executable(app src/nope.c)\n",
    );
    let d = diags(&ws.kiln(&["check", "--file", "src/main.c", "--json"], &[]));
    assert_eq!((d[0].0.as_str(), d[0].1), ("CMakeLists.txt", 3), "{d:?}");
}

#[test]
fn a_failing_check_without_diagnostics_shows_the_output_tail_in_fix() {
    let ws = Workspace::new();
    ws.write("a.py", "x = 1\n");
    let mock = MockLlm::start(vec![openai_text(&format!(
        "Try two.\n\n{}",
        sr("x = 1\n", "x = 2\n")
    ))]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--cmd",
            "python3 -c \"print('boom: the widget exploded'); raise SystemExit(2)\"",
            "--file",
            "a.py",
            "--max-iters",
            "1",
        ],
        &[],
    );
    r.expect_code(1);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(
        all.contains("runner: failed (exit 2, 0 errors")
            && all.contains(
                "no diagnostic parsed; the output ends:\n      | boom: the widget exploded"
            ),
        "{all}"
    );
}

/// The `node_modules` of `tests/fixtures/NAME-runner` (installed by `.ci/run`), copied into
/// `ws`.
fn install_fixture(ws: &Workspace, name: &str) {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/fixtures/{name}-runner/node_modules"));
    assert!(
        fixture.join(".bin").join(name).exists(),
        "{} is missing: run `npm install` in tests/fixtures/{name}-runner (.ci/run does)",
        fixture.display()
    );
    let ok = std::process::Command::new("cp")
        .arg("-r")
        .arg(&fixture)
        .arg(ws.root().join("node_modules"))
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn npm_test_running_jest_gives_its_failures_at_the_project_frames() {
    let ws = Workspace::new();
    install_fixture(&ws, "jest");
    ws.write(
        "package.json",
        r#"{"name":"calc","version":"1.0.0","scripts":{"test":"jest"}}"#,
    );
    ws.write(
        "calc.js",
        "exports.add = (a, b) => a - b;\nexports.div = (a, b) => {\n  if (b === 0) throw new Error(\"division by zero\");\n  return a / b;\n};\n",
    );
    ws.write(
        "test/calc.test.js",
        "const { add, div } = require(\"../calc\");\n\ndescribe(\"calc\", () => {\n  test(\"adds\", () => {\n    expect(add(1, 2)).toBe(3);\n  });\n  test(\"divides\", () => {\n    expect(div(1, 0)).toBe(0);\n  });\n});\n",
    );
    let r = ws.kiln(&["check", "--file", "calc.js", "--json"], &[]);
    let d = diags(&r);
    assert_eq!(d.len(), 2, "{d:?} {}", r.stdout());
    assert_eq!((d[0].0.as_str(), d[0].1), ("test/calc.test.js", 5), "{d:?}");
    assert!(
        d[0].2
            .starts_with("test calc > adds failed: expect(received).toBe(expected)"),
        "{d:?}"
    );
    assert_eq!((d[1].0.as_str(), d[1].1), ("calc.js", 3), "{d:?}");
    assert_eq!(d[1].2, "test calc > divides failed: division by zero");
}

#[test]
fn npm_test_running_vitest_gives_its_failures_at_the_project_frames() {
    let ws = Workspace::new();
    install_fixture(&ws, "vitest");
    ws.write(
        "package.json",
        r#"{"name":"calc","version":"1.0.0","type":"module","scripts":{"test":"vitest run"}}"#,
    );
    ws.write(
        "calc.js",
        "export const add = (a, b) => a - b;\nexport const div = (a, b) => {\n  if (b === 0) throw new Error(\"division by zero\");\n  return a / b;\n};\n",
    );
    ws.write(
        "test/calc.test.js",
        "import { describe, test, expect } from \"vitest\";\nimport { add, div } from \"../calc.js\";\n\ndescribe(\"calc\", () => {\n  test(\"adds\", () => {\n    expect(add(1, 2)).toBe(3);\n  });\n  test(\"divides\", () => {\n    expect(div(1, 0)).toBe(0);\n  });\n});\n",
    );
    let r = ws.kiln(&["check", "--file", "calc.js", "--json"], &[]);
    let d = diags(&r);
    assert_eq!(d.len(), 2, "{d:?} {} {}", r.stdout(), r.stderr());
    assert_eq!((d[0].0.as_str(), d[0].1), ("test/calc.test.js", 6), "{d:?}");
    assert!(
        d[0].2.starts_with(
            "test test/calc.test.js > calc > adds failed: AssertionError: expected -1 to be 3"
        ),
        "{d:?}"
    );
    assert_eq!((d[1].0.as_str(), d[1].1), ("calc.js", 3), "{d:?}");
    assert_eq!(
        d[1].2,
        "test test/calc.test.js > calc > divides failed: Error: division by zero"
    );
}

/// The go runner reads the user's module cache (`GOMODCACHE`, read-only in the program's
/// view): a project whose dependency is already downloaded builds without network. The cache
/// is filled here from a file proxy made on the spot (`GOPROXY=file://`), never the network;
/// kiln's run has `GOPROXY=off`, so go could not fetch it even if the sandbox let it.
#[test]
fn go_builds_with_a_dependency_from_the_users_module_cache_without_network() {
    let outside = tempfile::tempdir().unwrap();
    let (proxy, cache) = (
        outside.path().join("proxy"),
        outside.path().join("modcache"),
    );
    let dep_mod = "module example.com/dep\n\ngo 1.19\n";
    let made = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile, pathlib\n\
             d = pathlib.Path(sys.argv[1]) / 'example.com/dep/@v'\n\
             d.mkdir(parents=True)\n\
             (d / 'list').write_text('v1.0.0\\n')\n\
             (d / 'v1.0.0.info').write_text('{\"Version\":\"v1.0.0\",\"Time\":\"2024-01-01T00:00:00Z\"}\\n')\n\
             (d / 'v1.0.0.mod').write_text(sys.argv[2])\n\
             with zipfile.ZipFile(d / 'v1.0.0.zip', 'w') as z:\n\
             \x20   z.writestr('example.com/dep@v1.0.0/go.mod', sys.argv[2])\n\
             \x20   z.writestr('example.com/dep@v1.0.0/dep.go', 'package dep\\n\\nfunc Two() int { return 2 }\\n')\n",
            proxy.to_str().unwrap(),
            dep_mod,
        ])
        .status()
        .unwrap();
    assert!(made.success());
    let ws = Workspace::new();
    ws.write(
        "go.mod",
        "module example.com/app\n\ngo 1.19\n\nrequire example.com/dep v1.0.0\n",
    );
    ws.write(
        "main.go",
        "package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Two()) }\n",
    );
    // Download into the temp module cache and write go.sum, as a user's earlier `go mod
    // download` would have.
    let tidy = std::process::Command::new("go")
        .args(["mod", "tidy"])
        .current_dir(ws.root())
        .env("GOPROXY", format!("file://{}", proxy.display()))
        .env("GOSUMDB", "off")
        .env("GOMODCACHE", &cache)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        tidy.status.success(),
        "{}",
        String::from_utf8_lossy(&tidy.stderr)
    );
    let cache_s = cache.to_str().unwrap();
    let env = [("GOMODCACHE", cache_s), ("GOPROXY", "off")];
    let r = ws.kiln(
        &[
            "check", "--json", "--file", "main.go", "--runner", "go", "--mode", "build",
        ],
        &env,
    );
    let j = r.json();
    assert_eq!(j["ok"], true, "{j}");
}

#[test]
fn cargo_errors_built_twice_are_reported_once() {
    let ws = Workspace::new();
    ws.write(
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    // `cargo test` builds the library and its test harness: rustc reports each error twice.
    ws.write(
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    let s: String = a + b;\n    s\n}\n",
    );
    let home = kiln_env::env()
        .var("REAL_HOME_FOR_TESTS")
        .or_else(|| kiln_env::env().var("HOME"))
        .unwrap_or_default();
    let rustup_home = kiln_env::env()
        .var("RUSTUP_HOME")
        .map_or_else(|| format!("{home}/.rustup"), str::to_string);
    let cargo_home = kiln_env::env()
        .var("CARGO_HOME")
        .map_or_else(|| format!("{home}/.cargo"), str::to_string);
    let toolchain = kiln_env::env().var("RUSTUP_TOOLCHAIN").unwrap_or("stable");
    let r = ws.kiln(
        &["check", "--json"],
        &[
            ("RUSTUP_HOME", &rustup_home),
            ("CARGO_HOME", &cargo_home),
            ("RUSTUP_TOOLCHAIN", toolchain),
        ],
    );
    r.expect_code(1);
    let d = diags(&r);
    assert_eq!(
        d.iter()
            .map(|(f, l, _)| (f.as_str(), *l))
            .collect::<Vec<_>>(),
        [("src/lib.rs", 2), ("src/lib.rs", 3)],
        "{d:?}"
    );
}

/// Every file under `dir` (recursively), relative to it; empty when `dir` is missing.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// The go runner's build cache is kiln's own for the workspace (in kiln's state directory,
/// written only by confined builds): the second check of a failing module compiles nothing
/// (`go test -x` prints no `compile` command), and the user's `GOCACHE` stays untouched.
#[test]
fn go_checks_share_a_build_cache_of_kilns_own_and_never_the_users() {
    let ws = Workspace::new();
    ws.write("go.mod", "module example.com/calc\n\ngo 1.19\n");
    ws.write(
        "calc.go",
        "package calc\n\nfunc Add(a, b int) int {\n\treturn a - b\n}\n",
    );
    ws.write(
        "calc_test.go",
        "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(1, 2); got != 3 {\n\t\tt.Errorf(\"Add(1, 2) = %d, want 3\", got)\n\t}\n}\n",
    );
    // `-x`: go prints every command it runs, so a cached compile shows as a missing one.
    ws.write("kiln.toml", "[plugins.go.settings]\nargs = \"-x ./...\"\n");
    let user_cache = ws.path().join("user-gocache");
    std::fs::create_dir(&user_cache).unwrap();
    let env = [("GOCACHE", user_cache.to_str().unwrap())];
    let check = || {
        let r = ws.kiln(&["check", "--json", "--runner", "go"], &env);
        let j = r.json();
        assert_eq!(j["ok"], false, "{j}");
        let d = diags(&r);
        assert_eq!(
            d,
            [(
                "calc_test.go".to_string(),
                7,
                "test TestAdd failed: Add(1, 2) = -1, want 3".to_string()
            )],
            "{j}"
        );
        j["stderr"].as_str().unwrap().to_string()
    };
    let compiles = |stderr: &str| {
        stderr
            .lines()
            .filter(|l| l.contains("/compile ") && l.contains("calc"))
            .count()
    };
    let first = check();
    assert!(compiles(&first) > 0, "the first check compiles: {first}");
    let key = kiln::state_dir::Identity::of(&ws.root()).unwrap().key();
    let cache = ws
        .state_home()
        .join("kiln/workspaces")
        .join(key)
        .join("build-cache/go");
    let filled = files_under(&cache);
    assert!(
        filled.iter().any(|f| f.to_string_lossy().ends_with("-d")),
        "kiln's build cache for the workspace holds go's objects: {filled:?}"
    );
    let second = check();
    assert_eq!(
        compiles(&second),
        0,
        "the second check compiles nothing: {second}"
    );
    // The user's cache, and the default one under their HOME, were never written.
    assert!(files_under(&user_cache).is_empty());
    assert!(!ws.path().join(".cache/go-build").exists());
}

/// The failing test's name is a field of its own (read from the runners' `test NAME failed`
/// convention): `test` in `kiln check --json` and in the result's `lastIteration.diagnostics`,
/// `failed_tests` in `runner.finished`, and on the human summary line.
#[test]
fn a_failing_tests_name_is_a_field_of_its_own() {
    let ws = pytest_project();
    let r = ws.kiln(&["check", "--file", "calc.py", "--json"], &[]);
    let j = r.json();
    let tests: Vec<&str> = j["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["test"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        tests,
        ["tests.test_calc::test_add", "tests.test_calc::test_div"],
        "{j}"
    );
    let r = ws.kiln(&["check", "--file", "calc.py"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("failing tests: tests.test_calc::test_add, tests.test_calc::test_div"),
        "{}",
        r.stderr()
    );
    // A compile error is no test: `test` is null.
    let c = Workspace::new();
    c.write("main.c", "int main(void) { return x; }\n");
    let r = c.kiln(
        &[
            "check",
            "--json",
            "--file",
            "main.c",
            "--cmd",
            "gcc -fsyntax-only {file}",
        ],
        &[],
    );
    let j = r.json();
    assert!(j["diagnostics"][0]["test"].is_null(), "{j}");
    // The fix loop: one answer that fixes add, not div; the loop stops after one iteration.
    let mock = MockLlm::start(vec![openai_text(&sr(
        "    return a - b\n",
        "    return a + b\n",
    ))]);
    let r = ws.kiln_model(&mock.url, "fix", &["--file", "calc.py", "--max-iters", "1"]);
    r.expect_code(1);
    let finished: Vec<Value> = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "runner.finished")
        .collect();
    assert_eq!(
        finished[0]["failed_tests"],
        serde_json::json!(["tests.test_calc::test_add", "tests.test_calc::test_div"]),
        "{finished:?}"
    );
    let last = &fix_result(&r)["lastIteration"];
    let d = &last["diagnostics"][0];
    assert_eq!(d["test"], "tests.test_calc::test_div", "{last}");
    assert_eq!(d["code"], "test-failure", "{last}");
}

/// A build that prints more than the plugin's output limit before its error (a verbose make)
/// is cut, head and tail, not failed: the error at the end still reaches the diagnostics.
#[test]
fn a_build_printing_megabytes_before_its_error_still_names_the_error() {
    let ws = crate::support::Workspace::new();
    ws.write(
        "src/main.c",
        "int main(void){\n  int x = 1\n  return x;\n}\n",
    );
    ws.write(
        "Makefile",
        "all:\n\t@head -c 5000000 /dev/zero | tr '\\0' a; echo\n\tgcc -fsyntax-only src/main.c\n",
    );
    let r = ws.kiln(&["check"], &[]);
    r.expect_code(1);
    assert!(
        r.stdout().contains("src/main.c:3:3: error:")
            || r.stderr().contains("src/main.c:3:3: error:"),
        "{}{}",
        r.stdout(),
        r.stderr()
    );
    assert!(
        !r.stderr().contains("output limit exceeded"),
        "{}",
        r.stderr()
    );
}

/// F16: a confined cargo build (any build script; here a stand-in `cargo` on `PATH`) cannot
/// change what the user's next plain `cargo` takes from `CARGO_HOME`: the cached archives
/// (cargo does not check them again when it unpacks them), the index, the unpacked sources,
/// git databases and checkouts; nor add an archive. It still reads them.
#[test]
fn a_cargo_build_cannot_change_or_add_to_cargos_caches() {
    let ws = Workspace::new();
    ws.write(
        "Cargo.toml",
        "[package]\nname = \"x\"\nversion = \"0.1.0\"\n",
    );
    let t = ws.path();
    let idx = "index.crates.io-6f17d22bba15001f";
    let home = t.join("cargohome");
    let files = [
        format!("registry/cache/{idx}/serde-1.0.0.crate"),
        format!("registry/index/{idx}/.cache/se/rd/serde"),
        format!("registry/src/{idx}/serde-1.0.0/lib.rs"),
        "git/db/dep-0123/HEAD".to_string(),
        "git/checkouts/dep-0123/abc/lib.rs".to_string(),
    ];
    for f in &files {
        let p = home.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "ORIGINAL\n").unwrap();
    }
    let bin = t.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut script = String::from("#!/bin/sh\ncd \"$CARGO_HOME\" || exit 3\n");
    for f in &files {
        script.push_str(&format!(
            "cat {f} >/dev/null && echo read {f}; echo POISONED > {f} && echo wrote {f}\n"
        ));
    }
    script.push_str(&format!(
        "echo POISONED > registry/cache/{idx}/evil-1.0.0.crate && echo added an archive\nexit 1\n"
    ));
    std::fs::write(bin.join("cargo"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        kiln_env::env().var("PATH").unwrap_or_default()
    );
    let r = ws.kiln(
        &["check", "--runner", "cargo", "--json"],
        &[("PATH", &path), ("CARGO_HOME", home.to_str().unwrap())],
    );
    let out = r.json()["stdout"].as_str().unwrap_or_default().to_string();
    for f in &files {
        assert_eq!(
            std::fs::read_to_string(home.join(f)).unwrap(),
            "ORIGINAL\n",
            "{f} was changed: {out}\n{}",
            r.stderr()
        );
        assert!(out.contains(&format!("read {f}")), "{f} is readable: {out}");
    }
    assert!(!out.contains("wrote") && !out.contains("added"), "{out}");
    assert!(
        !home
            .join(format!("registry/cache/{idx}/evil-1.0.0.crate"))
            .exists(),
        "{out}"
    );
}

/// F16, with the network granted: a build that must download gets a CARGO_HOME of kiln's own
/// for the workspace (in kiln's state directory, as go's build cache), never the user's, which
/// stays as it was.
#[test]
fn a_cargo_build_with_the_network_downloads_into_a_cargo_home_of_kilns_own() {
    let ws = Workspace::new();
    ws.write(
        "Cargo.toml",
        "[package]\nname = \"x\"\nversion = \"0.1.0\"\n",
    );
    ws.user_config("[plugins.cargo]\nnet = true\n");
    let t = ws.path();
    let user_home = t.join("cargohome");
    let cached = user_home.join("registry/cache/idx/serde-1.0.0.crate");
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    std::fs::write(&cached, "ORIGINAL\n").unwrap();
    let bin = t.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("cargo"),
        format!(
            "#!/bin/sh\necho \"home=$CARGO_HOME\"\nmkdir -p \"$CARGO_HOME/registry/cache/idx\" && echo NEW > \"$CARGO_HOME/registry/cache/idx/new-1.0.0.crate\" && echo downloaded\necho POISONED > {} && echo wrote-users\nexit 1\n",
            cached.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        kiln_env::env().var("PATH").unwrap_or_default()
    );
    let r = ws.kiln(
        &["check", "--runner", "cargo", "--json"],
        &[("PATH", &path), ("CARGO_HOME", user_home.to_str().unwrap())],
    );
    let out = r.json()["stdout"].as_str().unwrap_or_default().to_string();
    let own = ws.store_path().parent().unwrap().join("build-cache/cargo");
    assert!(
        out.contains(&format!("home={}", own.display())) && out.contains("downloaded"),
        "{out}\n{}",
        r.stderr()
    );
    assert_eq!(
        std::fs::read_to_string(own.join("registry/cache/idx/new-1.0.0.crate")).unwrap(),
        "NEW\n"
    );
    assert!(!out.contains("wrote-users"), "{out}");
    assert_eq!(std::fs::read_to_string(&cached).unwrap(), "ORIGINAL\n");
}
