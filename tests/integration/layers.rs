//! Layers point one way inside the crates `kiln` and `kiln-engine` (README, Layout): every module
//! below is declared in a layer, and a file of one uses (by `use`, or a `crate::`/`super::` path
//! anywhere in its code outside `#[cfg(test)]`) only modules of its own layer or of those under
//! it. Circles between files are `circles.py`'s (tools of the lead); this test holds the
//! direction: a lower module reaching up (`ctx.rs` calling a command, `edit/` naming the
//! engine) fails it, naming the file and the path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One layered directory: the module path it sits under in the crate rooted at `src`, and its
/// child modules in layers, the highest first. `*_cmd` stands for every module so named.
struct Layered {
    src: &'static str,
    under: &'static [&'static str],
    layers: &'static [&'static [&'static str]],
}

const LAYERED: &[Layered] = &[
    // crate `kiln`: the CLI over what drives and reads runs.
    Layered {
        src: "host/src",
        under: &[],
        layers: &[&["cli"], &["batch", "report", "gc"]],
    },
    // The CLI: commands over the options they share, over what every command gets.
    Layered {
        src: "host/src",
        under: &["cli"],
        layers: &[
            &["*_cmd", "check"],
            &[
                "settings",
                "args",
                "common",
                "runner_args",
                "llm_args",
                "scaffold",
            ],
            &[
                "ctx",
                "event_log",
                "render",
                "log_lines",
                "output",
                "closed_output",
                "signals",
                "detect",
                "prompt_file",
                "root",
                "warmer",
                "mcp_stdio",
                "guest_sdk",
            ],
        ],
    },
    // crate `kiln-engine`: the loops over undo, the MCP client and task lines, over the writer.
    Layered {
        src: "host/engine/src",
        under: &[],
        layers: &[&["engine"], &["mcp", "task_spec", "undo"], &["edit"]],
    },
    // The loops: their registry over the loop kinds, over the tool table, over the run core
    // and the leaves every loop names.
    Layered {
        src: "host/engine/src",
        under: &["engine"],
        layers: &[
            &["kind"],
            &["review", "agent", "fix"],
            &["tools"],
            &[
                "run",
                "model",
                "budget",
                "resume",
                "history",
                "fix_options",
                "command_policy",
                "check_files",
                "events",
                "error",
                "defaults",
                "tool_names",
            ],
        ],
    },
];

/// `code` without comments, string and char literals (their text emptied), and
/// `#[cfg(test)]` items.
fn strip(code: &str) -> String {
    let b: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1b}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    drop_test_items(&out)
}

/// `code` without each `#[cfg(test)]` item (up to its `;` or its closing brace).
fn drop_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let brace = after.find('{');
        let semi = after.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (None, Some(s)) => s + 1,
            (Some(b), _) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, ch) in after[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The module paths `code` names through `crate::` or `super::`: `use crate::a::{b, c::d}`
/// gives `crate::a::b` and `crate::a::c`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let b: Vec<char> = code.chars().collect();
    let word_at = |i: usize| {
        let mut j = i;
        while j < b.len() && (b[j].is_alphanumeric() || b[j] == '_') {
            j += 1;
        }
        (b[i..j].iter().collect::<String>(), j)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_word =
            i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_' || b[i - 1] == '$');
        let after_colons = i >= 2 && b[i - 1] == ':' && b[i - 2] == ':';
        if !starts_word || after_colons || !(b[i] == 'c' || b[i] == 's') {
            i += 1;
            continue;
        }
        let (w, mut j) = word_at(i);
        if w != "crate" && w != "super" {
            i = j.max(i + 1);
            continue;
        }
        let mut segs = vec![w];
        let mut groups: Vec<String> = Vec::new();
        while j + 1 < b.len() && b[j] == ':' && b[j + 1] == ':' {
            j += 2;
            if b.get(j) == Some(&'{') {
                // A use group: the first segment of each of its items.
                let mut depth = 0;
                let mut item = String::new();
                let mut k = j;
                while k < b.len() {
                    match b[k] {
                        '{' => {
                            depth += 1;
                            if depth > 1 {
                                item.push('{');
                            }
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                            item.push('}');
                        }
                        ',' if depth == 1 => {
                            groups.push(std::mem::take(&mut item));
                        }
                        ch => item.push(ch),
                    }
                    k += 1;
                }
                groups.push(item);
                j = k + 1;
                break;
            }
            let (w, e) = word_at(j);
            if w.is_empty() {
                break;
            }
            segs.push(w);
            j = e;
        }
        if groups.is_empty() {
            out.push(segs);
        } else {
            for g in groups {
                let first = g.trim().split("::").next().unwrap_or("").trim().to_string();
                let mut p = segs.clone();
                if !first.is_empty() && first != "self" && first != "*" {
                    p.push(first);
                }
                out.push(p);
            }
        }
        i = j.max(i + 1);
    }
    out
}

/// The module path of `file` in the crate rooted at `src` (`a/mod.rs` and `a.rs` are `a`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segs: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        segs.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segs.pop();
    }
    segs
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The child modules the module at `under` declares (`mod x;`, `pub mod x;`).
fn declared(src: &Path, under: &[String]) -> BTreeSet<String> {
    let dir = under.iter().fold(src.to_path_buf(), |d, s| d.join(s));
    let file = [
        dir.join("mod.rs"),
        dir.with_extension("rs"),
        dir.join("lib.rs"),
    ]
    .into_iter()
    .find(|f| f.is_file())
    .unwrap_or_else(|| panic!("no module file for {}", dir.display()));
    let code = strip(&std::fs::read_to_string(file).unwrap());
    let words: Vec<&str> = code.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "mod")
        .map(|w| w[1].trim_end_matches([';', '{']).to_string())
        .collect()
}

fn layer_of(layers: &[&[&str]], name: &str) -> Option<usize> {
    layers.iter().position(|l| {
        l.iter().any(|m| match m.strip_prefix('*') {
            Some(suffix) => name.ends_with(suffix),
            None => *m == name,
        })
    })
}

/// Every use in the crate rooted at `src` by a module under `under` of a module in a layer
/// above its own, as `file: path (layer of the file -> layer used)`; and every module under
/// `under` that no layer declares.
fn upward(src: &Path, under: &[&str], layers: &[&[&str]]) -> Vec<String> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let under: Vec<String> = under.iter().map(|s| s.to_string()).collect();
    let children = declared(src, &under);
    let mut found = Vec::new();
    for c in &children {
        if layer_of(layers, c).is_none() {
            found.push(format!(
                "module `{c}` is in no layer: declare it in tests/integration/layers.rs"
            ));
        }
    }
    for f in &files {
        let name = f.file_stem().unwrap().to_string_lossy();
        if name == "tests" || name.ends_with("_tests") {
            continue;
        }
        let here = module_of(src, f);
        if here.len() <= under.len() || here[..under.len()] != under[..] {
            continue;
        }
        let Some(from) = layer_of(layers, &here[under.len()]) else {
            continue;
        };
        let code = strip(&std::fs::read_to_string(f).unwrap());
        for p in paths(&code) {
            let mut target = here.clone();
            let mut segs = p.as_slice();
            if segs[0] == "crate" {
                target.clear();
                segs = &segs[1..];
            } else {
                while segs.first().is_some_and(|s| s == "super") {
                    target.pop();
                    segs = &segs[1..];
                }
            }
            target.extend(segs.iter().cloned());
            if target.len() <= under.len() || target[..under.len()] != under[..] {
                continue;
            }
            let to = &target[under.len()];
            if *to == here[under.len()] || !children.contains(to) {
                continue;
            }
            if let Some(l) = layer_of(layers, to)
                && l < from
            {
                found.push(format!(
                    "{}: {} reaches up from `{}` to `{to}`",
                    f.strip_prefix(repo()).unwrap_or(f).display(),
                    p.join("::"),
                    here[under.len()],
                ));
            }
        }
    }
    found
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn layers_inside_kiln_and_kiln_engine_point_one_way() {
    let mut found = Vec::new();
    for l in LAYERED {
        found.extend(upward(&repo().join(l.src), l.under, l.layers));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The check finds what it is for: in a crate whose `low` module names `high` (by `use`, by a
/// path in a call, through a `use` group, by `super::`), each use is reported, and a module in
/// no layer too; comments, strings and `#[cfg(test)]` code are not uses.
#[test]
fn an_arrow_running_back_up_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("low")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod high;\nmod low;\nmod stray;\n").unwrap();
    std::fs::write(
        src.join("high.rs"),
        "use crate::low::f;\npub fn g() { f() }\n",
    )
    .unwrap();
    std::fs::write(src.join("stray.rs"), "").unwrap();
    std::fs::write(
        src.join("low/mod.rs"),
        "mod inner;\n// crate::high::g() in a comment\nconst S: &str = \"crate::high::g\";\n\
         pub fn f() { crate::high::g() }\n#[cfg(test)]\nmod t { use crate::high::g; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("low/inner.rs"),
        "use crate::{high, low};\nuse super::super::high::g;\nfn h() -> char { '\"' }\n",
    )
    .unwrap();
    let found = upward(src, &[], &[&["high"], &["low"]]);
    let joined = found.join("\n");
    assert_eq!(found.len(), 4, "{joined}");
    assert!(joined.contains("module `stray` is in no layer"), "{joined}");
    assert!(
        joined.contains("low/mod.rs: crate::high::g reaches up from `low` to `high`"),
        "{joined}"
    );
    assert!(
        joined.contains("low/inner.rs: crate::high reaches up"),
        "{joined}"
    );
    assert!(
        joined.contains("low/inner.rs: super::super::high::g reaches up"),
        "{joined}"
    );
}
