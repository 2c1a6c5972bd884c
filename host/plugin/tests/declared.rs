//! Every built-in's `plugins/<name>/declared.json` (embedded in the binary, answering `kiln
//! plugin list`, `kiln tool list` and the agent's tool table without compiling anything) says
//! exactly what the real component answers: each built-in is compiled, its `get-manifest` and
//! describe functions called, and the result compared with the embedded text.
//! `KILN_BLESS_DECLARED=1 cargo test --workspace --test declared` rewrites the files.

// The bless mode rewrites the declared files (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln_plugin::{Declared, Runtime, Source, builtin};
use std::path::PathBuf;

fn declared_file(stem: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins")
        .join(builtin::name_of(stem))
        .join("declared.json")
}

#[tokio::test(flavor = "multi_thread")]
async fn every_builtin_declares_what_its_component_answers() {
    let bless = std::env::var("KILN_BLESS_DECLARED").is_ok_and(|v| v == "1");
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::with_cache(Some((
        cache.path().join("cache"),
        cache.path().join("cache.key"),
    )))
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let config = kiln_config::Config::default();
    let mut wrong = Vec::new();
    for (stem, bytes) in builtin::BUILTINS {
        let plugin = runtime
            .load(bytes, Source::Builtin, ws.path(), &config)
            .await
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        let live = Declared::live(&plugin).await.unwrap().to_text();
        let file = declared_file(stem);
        assert!(
            file.parent().unwrap().join("Cargo.toml").is_file(),
            "{stem}: its crate is not at {}",
            file.parent().unwrap().display()
        );
        let embedded = builtin::DECLARED
            .iter()
            .find(|(s, _)| s == stem)
            .map(|(_, t)| *t);
        if bless {
            std::fs::write(&file, &live).unwrap();
            continue;
        }
        match embedded {
            Some(text) if text == live => {
                // The embedded text also parses into what the registry uses.
                let parsed = Declared::of_builtin(stem).expect("it parses");
                assert_eq!(parsed.to_text(), live, "{stem}");
                assert_eq!(parsed.manifest.name, plugin.name, "{stem}");
            }
            Some(_) => wrong.push(format!("{} differs from the component", file.display())),
            None => wrong.push(format!("{} is missing", file.display())),
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nrun `KILN_BLESS_DECLARED=1 cargo test --workspace --test declared` and review the diff",
        wrong.join("\n")
    );
}

/// A built-in listed from its declared data is not compiled until a call needs it; then it
/// compiles once, into the cache, and answers as the component does.
#[tokio::test(flavor = "multi_thread")]
async fn a_declared_builtin_compiles_on_its_first_call_only() {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join("cache");
    let runtime = Runtime::with_cache(Some((dir.clone(), cache.path().join("cache.key")))).unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let config = kiln_config::Config::default();
    let (stem, bytes) = builtin::BUILTINS
        .iter()
        .find(|(s, _)| builtin::name_of(s) == "fs")
        .unwrap();
    let declared = Declared::of_builtin(stem).expect("fs has declared data");
    let fs = runtime
        .instantiate_declared(bytes, declared, ws.path(), &config)
        .unwrap();
    let entries = || {
        std::fs::read_dir(dir.join("components"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert!(!fs.is_linked());
    assert!(
        fs.tool_list()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "read_file")
    );
    assert_eq!(fs.get_manifest().await.unwrap().name, "fs");
    assert!(!fs.is_linked(), "describing compiled it");
    assert_eq!(entries(), 0, "describing wrote the cache");
    let out = fs
        .tool_call("read_file", r#"{"path":"a.txt"}"#)
        .await
        .unwrap()
        .unwrap();
    assert!(out.contains("hello"), "{out}");
    assert!(fs.is_linked());
    assert_eq!(entries(), 1, "the first call compiled it into the cache");
}
