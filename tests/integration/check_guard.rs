//! The model may not grade its own homework: in a fix loop, an edit to what decides success
//! (the files that define the check: a Makefile, package.json, ...; a failing test) is
//! refused whole and the refusal goes back to the model, unless the user allows it
//! (`--allow-check-edits`). A success the model's changes to tests decided says so.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::support::{Run, Workspace, agent, fix_result, sr};
use serde_json::{Value, json};

const BROKEN_C: &str = "int main(void) { return 0 }\n";
const FIXED_C: &str = "int main(void) { return 0; }\n";
const MAKEFILE: &str = "check:\n\tgcc -fsyntax-only main.c\n";
/// The attack: the check target no longer checks anything.
const WEAK_MAKEFILE: &str = "check:\n\t@true\n";

fn fix(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    ws.kiln_model(&mock.url, "fix", args)
}

/// A multi-file answer: one SEARCH/REPLACE block per `(path, search, replace)`.
fn answer(edits: &[(&str, &str, &str)]) -> String {
    let mut s = String::from("Here is the fix.\n\n");
    for (path, search, replace) in edits {
        s.push_str(&format!("<<< path={path} >>>\n{}", sr(search, replace)));
    }
    s
}

fn events(r: &Run, kind: &str) -> Vec<Value> {
    r.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == kind)
        .collect()
}

fn make_project() -> Workspace {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    ws.write("Makefile", MAKEFILE);
    ws
}

fn weaken_makefile() -> String {
    answer(&[("Makefile", MAKEFILE, WEAK_MAKEFILE)])
}

/// The user prompt of request `i`.
fn prompt(mock: &MockLlm, i: usize) -> String {
    mock.recorded()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_makefile_check_rewritten_to_true_is_refused_and_the_run_does_not_succeed() {
    let ws = make_project();
    let mock = MockLlm::start(vec![
        openai_text(&weaken_makefile()),
        openai_text(&weaken_makefile()),
        openai_text(&weaken_makefile()),
    ]);
    let r = fix(&ws, &mock, &["--runner", "make"]);
    let res = fix_result(&r);
    r.expect_code(1);
    assert_eq!(res["stop_reason"], "no_edits_applied", "{res}");
    assert_eq!(res["ok"], false);
    assert_eq!(ws.read("Makefile"), MAKEFILE, "the check was weakened");
    assert_eq!(ws.read("main.c"), BROKEN_C);
    let summary = res["summary"].as_str().unwrap();
    assert!(
        summary.contains("refused") && summary.contains("Makefile"),
        "{summary}"
    );
    // Each refusal names the file and why, as a `check` failure.
    let failed = events(&r, "edit.failed");
    assert_eq!(failed.len(), 3, "{}", r.stdout());
    assert_eq!(failed[0]["path"], "Makefile");
    assert_eq!(failed[0]["failure"], "check");
    let why = failed[0]["error"].as_str().unwrap();
    assert!(
        why.contains("it defines the check")
            && why.contains("the model may not change what decides success"),
        "{why}"
    );
    // The refusal goes back to the model, which is told up front too.
    assert!(
        prompt(&mock, 1).contains("it defines the check"),
        "{}",
        prompt(&mock, 1)
    );
    let system = mock.recorded()[0].body.to_string();
    assert!(
        system.contains("Never make the check pass by weakening it"),
        "{system}"
    );
    assert_eq!(res["check_changed"], json!([]));
}

#[test]
fn with_allow_check_edits_the_check_edit_applies_and_the_success_says_so() {
    let ws = make_project();
    let mock = MockLlm::start(vec![openai_text(&weaken_makefile())]);
    let r = fix(&ws, &mock, &["--runner", "make", "--allow-check-edits"]);
    r.expect_code(0);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(ws.read("Makefile"), WEAK_MAKEFILE);
    // A success the model's own change to the check decided cannot be missed.
    assert_eq!(res["check_changed"], json!(["Makefile"]), "{res}");
    assert!(
        res["summary"]
            .as_str()
            .unwrap()
            .contains("the model changed what the check runs: Makefile"),
        "{res}"
    );
    // For a person, a warning on stderr, kept under -q.
    let ws = make_project();
    let mock = MockLlm::start(vec![openai_text(&weaken_makefile())]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "-q",
            "fix",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--runner",
            "make",
            "--allow-check-edits",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("warning: the model changed what the check runs (Makefile)"),
        "{}",
        r.stderr()
    );
    // Named as a file of the loop, the Makefile is the model's to change too.
    let ws = make_project();
    let mock = MockLlm::start(vec![openai_text(&weaken_makefile())]);
    let r = fix(
        &ws,
        &mock,
        &["--runner", "make", "--files", "Makefile", "main.c"],
    );
    assert_eq!(fix_result(&r)["stop_reason"], "success", "{}", r.stdout());
    assert_eq!(ws.read("Makefile"), WEAK_MAKEFILE);
}

#[test]
fn a_legitimate_fix_beside_a_refused_check_edit_is_refused_whole_then_applies_alone() {
    let ws = make_project();
    let fix_c = ("main.c", BROKEN_C, FIXED_C);
    let mock = MockLlm::start(vec![
        openai_text(&answer(&[fix_c, ("Makefile", MAKEFILE, WEAK_MAKEFILE)])),
        openai_text(&answer(&[fix_c])),
    ]);
    let r = fix(&ws, &mock, &["--runner", "make"]);
    r.expect_code(0);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(res["iters"], 2, "{res}");
    assert_eq!(ws.read("main.c"), FIXED_C);
    assert_eq!(ws.read("Makefile"), MAKEFILE);
    // The first answer applied nothing (all or nothing); the model was told why.
    assert!(prompt(&mock, 1).contains("Makefile is not yours to change"));
    assert_eq!(res["check_changed"], json!([]), "{res}");
    assert!(
        !res["summary"].as_str().unwrap().contains("changed what"),
        "{res}"
    );
}

const PACKAGE_JSON: &str =
    "{\"name\":\"calc\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"node --test\"}}\n";
const CALC_JS: &str = "exports.add = (a, b) => a - b;\n";
const CALC_TEST_JS: &str = "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\nconst { add } = require(\"../calc\");\n\ntest(\"adds\", () => {\n  assert.strictEqual(add(1, 2), 3);\n});\n";

#[test]
fn a_package_json_test_script_rewritten_to_pass_is_refused() {
    let ws = Workspace::new();
    ws.write("package.json", PACKAGE_JSON);
    ws.write("calc.js", CALC_JS);
    ws.write("test/calc.test.js", CALC_TEST_JS);
    let weak = answer(&[(
        "package.json",
        PACKAGE_JSON,
        "{\"name\":\"calc\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"exit 0\"}}\n",
    )]);
    let mock = MockLlm::start(vec![
        openai_text(&weak),
        openai_text(&answer(&[(
            "calc.js",
            CALC_JS,
            "exports.add = (a, b) => a + b;\n",
        )])),
    ]);
    let r = fix(&ws, &mock, &["--runner", "node"]);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(res["iters"], 2, "{res}");
    assert_eq!(ws.read("package.json"), PACKAGE_JSON);
    let failed = events(&r, "edit.failed");
    assert_eq!(failed.len(), 1, "{}", r.stdout());
    assert_eq!(failed[0]["path"], "package.json");
    assert_eq!(failed[0]["failure"], "check");
    assert!(prompt(&mock, 1).contains("package.json is not yours to change"));
}

const CALC_PY: &str = "def add(a, b):\n    return a - b\n";
const TEST_CALC_PY: &str = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\ndef test_ok():\n    assert True\n";

#[test]
fn removing_or_skipping_the_failing_test_is_refused_and_a_success_that_changed_tests_says_so() {
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
    let test_add = "def test_add():\n    assert add(1, 2) == 3\n";
    let mock = MockLlm::start(vec![
        // The failing test goes: refused, even though the user named the test file.
        openai_text(&answer(&[("tests/test_calc.py", test_add, "")])),
        // So is a skip marker on it.
        openai_text(&answer(&[(
            "tests/test_calc.py",
            "def test_add():\n",
            "import pytest\n\n\n@pytest.mark.skip\ndef test_add():\n",
        )])),
        // The code is fixed and the test touched: applied, and said.
        openai_text(&answer(&[
            ("calc.py", "    return a - b\n", "    return a + b\n"),
            (
                "tests/test_calc.py",
                "    assert add(1, 2) == 3\n",
                "    assert add(1, 2) == 3, \"1 + 2\"\n",
            ),
        ])),
    ]);
    let r = fix(
        &ws,
        &mock,
        &[
            "--runner",
            "pytest",
            "--files",
            "calc.py",
            "tests/test_calc.py",
        ],
    );
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(res["iters"], 3, "{res}");
    let failed = events(&r, "edit.failed");
    assert_eq!(failed.len(), 2, "{}", r.stdout());
    assert_eq!(failed[0]["failure"], "check");
    let why = failed[0]["error"].as_str().unwrap();
    assert!(
        why.contains("removes the failing test `tests.test_calc::test_add`"),
        "{why}"
    );
    assert_eq!(failed[1]["failure"], "check");
    let why = failed[1]["error"].as_str().unwrap();
    assert!(why.contains("adds `mark.skip`"), "{why}");
    assert!(!ws.read("tests/test_calc.py").contains("skip"));
    assert!(ws.read("tests/test_calc.py").contains("def test_add():"));
    assert_eq!(res["check_changed"], json!(["tests/test_calc.py"]), "{res}");
    assert!(
        res["summary"]
            .as_str()
            .unwrap()
            .contains("the model changed what the check runs: tests/test_calc.py"),
        "{res}"
    );
}

/// The agent's `compile_loop` is the fix loop: the same rule holds for its nested model.
#[test]
fn the_agents_compile_loop_refuses_a_check_edit_too() {
    let ws = make_project();
    let fix_c = ("main.c", BROKEN_C, FIXED_C);
    let mock = MockLlm::start(vec![
        openai_calls(&[("compile_loop", r#"{"spec":"make the check pass"}"#)]),
        openai_text(&weaken_makefile()),
        openai_text(&answer(&[fix_c])),
        openai_calls(&[("final_answer", r#"{"summary":"passes now"}"#)]),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "make the check pass", "--test-command", "make"],
    );
    r.expect_code(0);
    let results: Vec<String> = mock.recorded()[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    let cl: Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(cl["ok"], true, "{cl}");
    assert_eq!(cl["iters"], 2, "{cl}");
    assert_eq!(cl["check_changed"], json!([]), "{cl}");
    assert_eq!(ws.read("Makefile"), MAKEFILE);
    assert_eq!(ws.read("main.c"), FIXED_C);
    // The nested model was told why its first answer was refused.
    assert!(prompt(&mock, 2).contains("Makefile is not yours to change"));
}
