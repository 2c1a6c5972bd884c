//! The `ast_refactor` agent tool end to end: the real `ast-refactor` plugin (oxc for
//! TypeScript/JavaScript, syn for Rust) called by `kiln agent` through a mock LLM, the host
//! applying its files atomically on a temporary workspace.

use crate::mock_llm::{MockLlm, openai_calls};
use crate::support::{Run, Workspace};
use serde_json::{Value, json};

/// Run `kiln agent` whose model calls `ast_refactor` with `args`, then answers; returns the
/// tool's result (text, is_error) and the run.
fn refactor(ws: &Workspace, args: Value) -> (String, bool, Run) {
    let mock = MockLlm::start(vec![
        openai_calls(&[("ast_refactor", &args.to_string())]),
        openai_calls(&[("final_answer", r#"{"summary":"refactored"}"#)]),
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
            "refactor",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout(), r.stderr());
    let reqs = mock.recorded();
    let tool = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .expect("a tool result");
    let text = tool["content"].as_str().unwrap().to_string();
    // Whether the agent saw it as an error: the event stream records each call's outcome.
    let ok = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "agent.result")
        .and_then(|e| e["tool_calls"][0]["ok"].as_bool())
        .expect("the call is recorded");
    (text, !ok, r)
}

const A_TS: &str = "export function total(xs: number[]): number {\n  // total adds up\n  return xs.reduce((a, b) => a + b, 0);\n}\n\nexport const label = \"total\";\n";
const B_TS: &str = "import { total, label } from './a';\n\nfunction report(xs: number[]) {\n  const sum = total(xs);\n  return { sum, total };\n}\n\nfunction shadow() {\n  const total = 'total';\n  return total.length;\n}\n\nconsole.log(report([1]), shadow(), label);\n";

#[test]
fn ts_rename_follows_imports_and_leaves_shadows_and_strings() {
    let ws = Workspace::new();
    ws.write("src/a.ts", A_TS);
    ws.write("src/b.ts", B_TS);
    ws.write(
        "src/unrelated.js",
        "const total = 1;\nexport default total;\n",
    );
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"rename","path":"src/a.ts","symbol":"total","new_name":"sumAll"}),
    );
    assert!(!err, "{text}");
    assert_eq!(
        ws.read("src/a.ts"),
        "export function sumAll(xs: number[]): number {\n  // total adds up\n  return xs.reduce((a, b) => a + b, 0);\n}\n\nexport const label = \"total\";\n"
    );
    assert_eq!(
        ws.read("src/b.ts"),
        "import { sumAll, label } from './a';\n\nfunction report(xs: number[]) {\n  const sum = sumAll(xs);\n  return { sum, total: sumAll };\n}\n\nfunction shadow() {\n  const total = 'total';\n  return total.length;\n}\n\nconsole.log(report([1]), shadow(), label);\n"
    );
    assert_eq!(
        ws.read("src/unrelated.js"),
        "const total = 1;\nexport default total;\n"
    );
    // The model sees the summary and a unified diff of both files.
    assert!(text.contains("in 2 file(s)"), "{text}");
    assert!(
        text.contains("--- a/src/a.ts\n+++ b/src/a.ts\n")
            && text.contains("-export function total(xs: number[]): number {\n+export function sumAll(xs: number[]): number {\n")
            && text.contains("-import { total, label } from './a';\n+import { sumAll, label } from './a';\n"),
        "{text}"
    );
}

const LIB_RS: &str = r#"/// Scale a value.
pub fn scale(x: i32) -> i32 {
    x * 3
}

pub fn run() -> i32 {
    // scale is applied twice
    let name = "scale";
    let a = scale(1);
    let b = {
        let scale = 10;
        scale + a
    };
    println!("{} {}", name, scale(b));
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales() {
        assert_eq!(scale(2), 6);
    }
}
"#;

#[test]
fn rust_rename_leaves_shadows_strings_and_comments() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", LIB_RS);
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"rename","path":"src/lib.rs","symbol":"scale","new_name":"triple"}),
    );
    assert!(!err, "{text}");
    let want = LIB_RS
        .replace("pub fn scale(", "pub fn triple(")
        .replace("let a = scale(1);", "let a = triple(1);")
        .replace("scale(b));", "triple(b));")
        .replace("assert_eq!(scale(2)", "assert_eq!(triple(2)");
    assert_eq!(ws.read("src/lib.rs"), want);
    assert!(
        text.contains("renamed the function `scale` (line 2) to `triple`: 4 occurrence(s)"),
        "{text}"
    );

    // Invalid names and unknown symbols are refused with a reason; nothing changes.
    for (args, why) in [
        (
            json!({"operation":"rename","path":"src/lib.rs","symbol":"triple","new_name":"match"}),
            "keyword",
        ),
        (
            json!({"operation":"rename","path":"src/lib.rs","symbol":"triple","new_name":"2x"}),
            "not a valid Rust identifier",
        ),
        (
            json!({"operation":"rename","path":"src/lib.rs","symbol":"nothing","new_name":"x"}),
            "not declared",
        ),
    ] {
        let (text, err, _) = refactor(&ws, args);
        assert!(err && text.contains(why), "{text}");
    }
    assert_eq!(ws.read("src/lib.rs"), want);
}

#[test]
fn imports_are_added_merged_deduplicated_and_removed() {
    let ws = Workspace::new();
    ws.write(
        "src/app.ts",
        "import { a } from './util';\nimport React from 'react';\n\nexport const x = a;\n",
    );
    ws.write(
        "src/main.rs",
        "use std::collections::{BTreeMap, HashSet};\nuse std::fmt;\n\nfn main() {}\n",
    );
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"add_import","path":"src/app.ts","module":"./util","names":["b","a"]}),
    );
    assert!(!err, "{text}");
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"add_import","path":"src/app.ts","module":"react","names":["useState"]}),
    );
    assert!(!err, "{text}");
    assert_eq!(
        ws.read("src/app.ts"),
        "import { a, b } from './util';\nimport React, { useState } from 'react';\n\nexport const x = a;\n"
    );
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"remove_import","path":"src/app.ts","module":"react"}),
    );
    assert!(!err, "{text}");
    assert_eq!(
        ws.read("src/app.ts"),
        "import { a, b } from './util';\n\nexport const x = a;\n"
    );

    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"add_import","path":"src/main.rs","use":"std::collections::HashMap"}),
    );
    assert!(!err, "{text}");
    assert!(
        text.contains("+use std::collections::{BTreeMap, HashMap, HashSet};"),
        "{text}"
    );
    // Already there: nothing changes.
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"add_import","path":"src/main.rs","use":"std::fmt"}),
    );
    assert!(!err && text.contains("no file changed"), "{text}");
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"remove_import","path":"src/main.rs","use":"std::collections::BTreeMap"}),
    );
    assert!(!err, "{text}");
    assert_eq!(
        ws.read("src/main.rs"),
        "use std::collections::{HashMap, HashSet};\nuse std::fmt;\n\nfn main() {}\n"
    );
}

#[test]
fn outline_lists_symbols_and_tool_list_offers_the_tool() {
    let ws = Workspace::new();
    ws.write("src/a.ts", A_TS);
    ws.write("src/lib.rs", LIB_RS);
    let (text, err, _) = refactor(&ws, json!({"operation":"outline","path":"src/a.ts"}));
    assert!(!err, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let got: Vec<(&str, &str, u64)> = v["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("total", "function", 1), ("label", "const", 6)]);
    let (text, err, _) = refactor(&ws, json!({"operation":"outline","path":"src/lib.rs"}));
    assert!(!err, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = v["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["scale", "run", "tests"]);

    let r = ws.kiln(&["tool", "list", "--json"], &[]);
    r.expect_code(0);
    let entries: Vec<Value> = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let named: Vec<&Value> = entries
        .iter()
        .filter(|e| e["name"].as_str().unwrap().contains("ast_refactor"))
        .collect();
    assert_eq!(named.len(), 1, "offered once: {entries:?}");
    assert_eq!(named[0]["name"], "ast_refactor");
    assert_eq!(named[0]["plugin"], "ast-refactor");
    assert_eq!(named[0]["read_only"], false);
}

#[test]
fn a_rename_touching_a_symlink_or_a_protected_file_writes_nothing() {
    let ws = Workspace::new();
    ws.write("src/a.ts", A_TS);
    ws.write("src/b.ts", B_TS);
    std::os::unix::fs::symlink("b.ts", ws.root().join("src/link.ts")).unwrap();
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"rename","path":"src/a.ts","symbol":"total","new_name":"sumAll"}),
    );
    assert!(
        err && text.contains("symbolic link") && text.contains("changed nothing"),
        "{text}"
    );
    assert_eq!(ws.read("src/a.ts"), A_TS);
    assert_eq!(ws.read("src/b.ts"), B_TS);

    // A file protected by `[sandbox] protect` that imports the symbol.
    std::fs::remove_file(ws.root().join("src/link.ts")).unwrap();
    ws.write("kiln.toml", "[sandbox]\nprotect = [\"vendor\"]\n");
    ws.write(
        "vendor/v.ts",
        "import { total } from '../src/a';\nexport const v = total([1]);\n",
    );
    let (text, err, _) = refactor(
        &ws,
        json!({"operation":"rename","path":"src/a.ts","symbol":"total","new_name":"sumAll"}),
    );
    assert!(err && text.contains("protected"), "{text}");
    assert_eq!(ws.read("src/a.ts"), A_TS);
    assert_eq!(ws.read("src/b.ts"), B_TS);
    assert_eq!(
        ws.read("vendor/v.ts"),
        "import { total } from '../src/a';\nexport const v = total([1]);\n"
    );
}

/// `kiln tool call ast_refactor` is the agent's call: the plugin computes, the host applies the
/// files through its edit path (the old `ast-refactor.ast_refactor` name too, with a note).
#[test]
fn tool_call_applies_ast_refactor_as_the_agent_does() {
    let ws = Workspace::new();
    ws.write("src/a.ts", A_TS);
    ws.write("src/b.ts", B_TS);
    let args = json!({"operation":"rename","path":"src/a.ts","symbol":"label","new_name":"title"});
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "ast_refactor",
            "--args",
            &args.to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout(), r.stderr());
    assert_eq!(r.json()["plugin"], "ast-refactor");
    assert!(
        ws.read("src/a.ts")
            .contains("export const title = \"total\";")
    );
    assert!(
        ws.read("src/b.ts")
            .contains("import { total, title } from './a';")
    );

    let back = json!({"operation":"rename","path":"src/a.ts","symbol":"title","new_name":"label"});
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "ast-refactor.ast_refactor",
            "--args",
            &back.to_string(),
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout(), r.stderr());
    assert!(
        r.stderr()
            .contains("`ast-refactor.ast_refactor` is the old name of `ast_refactor`"),
        "{}",
        r.stderr()
    );
    assert_eq!(ws.read("src/a.ts"), A_TS);
}
