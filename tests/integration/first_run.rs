//! Issue 34 item 4, "the first run is as fast as the second": right after a build (an empty
//! compile cache) `kiln plugin list`, `kiln tool list` and the start of `kiln agent` compile no
//! plugin (what the built-ins declare is embedded); a background warmer, one per cache
//! directory, compiles them for the next call.

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace};
use std::path::Path;
use std::time::{Duration, Instant};

/// The compiled entries in the cache `dir`.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("components"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

/// `kiln ARGS` over the compile cache `cache` (its own key), the warmer on or off.
fn kiln_with_cache(ws: &Workspace, cache: &Path, warmer: bool, args: &[&str]) -> Run {
    let mut cmd = ws.command(args);
    cmd.env("KILN_CACHE_DIR", cache)
        .env("KILN_CACHE_KEY", cache.with_extension("key"));
    if warmer {
        cmd.env_remove("KILN_NO_WARMER");
    }
    Run(cmd.output().unwrap())
}

/// `text` with the name of each call's own temp dir (`/tmp/kiln-exec-XXXXXX`, in `inspect`'s
/// view) left out.
fn without_call_dirs(text: &str) -> String {
    let mut parts = text.split("kiln-exec-");
    let mut out = parts.next().unwrap_or_default().to_string();
    for p in parts {
        out.push_str("kiln-exec-…");
        out.push_str(p.get(6..).unwrap_or_default());
    }
    out
}

#[test]
fn lists_on_an_empty_cache_compile_nothing_and_print_what_a_warm_cache_prints() {
    let ws = Workspace::new();
    let t = tempfile::tempdir().unwrap();
    let cold = t.path().join("cold");
    let warm = t.path().join("warm");
    // A warm cache: every built-in compiled by the warmer, run by hand.
    kiln_with_cache(&ws, &warm, false, &["warm-cache"]).expect_code(0);
    assert_eq!(entries(&warm).len(), kiln::plugin::builtin::BUILTINS.len());
    for args in [
        &["plugin", "list"][..],
        &["plugin", "list", "--json"],
        &["tool", "list"],
        &["tool", "list", "--json"],
        &["plugin", "inspect", "fs", "--json"],
        &["plugin", "inspect", "cargo"],
        &["plugin", "inspect", "udiff"],
    ] {
        let c = kiln_with_cache(&ws, &cold, false, args);
        c.expect_code(0);
        let w = kiln_with_cache(&ws, &warm, false, args);
        w.expect_code(0);
        assert_eq!(
            without_call_dirs(&c.stdout()),
            without_call_dirs(&w.stdout()),
            "{args:?}"
        );
        assert!(!c.stdout().is_empty(), "{args:?}");
        assert!(
            !c.stderr().contains("compiling"),
            "{args:?}: {}",
            c.stderr()
        );
        assert_eq!(entries(&cold), Vec::<String>::new(), "{args:?} compiled");
    }
}

/// An agent starts (its tool table, its system prompt, its first request to the model) without
/// compiling a plugin; a tool compiles on its first call, and only that tool's plugin.
#[test]
fn an_agent_on_an_empty_cache_asks_the_model_before_compiling_anything() {
    let ws = Workspace::new();
    ws.write("a.txt", "hello\n");
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let mock = MockLlm::start(vec![openai_text("nothing to do")]);
    let base = format!("{}/v1", mock.url);
    let agent = [
        "agent",
        "--base-url",
        &base,
        "--model",
        "m",
        "-p",
        "say hi",
        "--json",
    ];
    let r = kiln_with_cache(&ws, &cache, false, &agent);
    r.expect_code(0);
    assert_eq!(mock.recorded().len(), 1);
    assert!(
        mock.recorded()[0].body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "read_file")),
        "the plugins' tools were offered"
    );
    assert!(!r.stderr().contains("compiling"), "{}", r.stderr());
    assert_eq!(entries(&cache), Vec::<String>::new());
    // A call of one tool compiles its plugin alone, saying so.
    let r = kiln_with_cache(
        &ws,
        &cache,
        false,
        &["tool", "call", "read_file", "--args", r#"{"path":"a.txt"}"#],
    );
    r.expect_code(0);
    assert!(r.stdout().contains("hello"), "{}", r.stdout());
    assert!(
        r.stderr()
            .contains("kiln: compiling the built-in plugin `fs` (first use; cached afterwards)"),
        "{}",
        r.stderr()
    );
    assert_eq!(entries(&cache).len(), 1, "{:?}", entries(&cache));
}

/// The warmer compiles every built-in into the cache; a second one does not run while one
/// holds the cache's lock; and a command that found the cache cold starts it in the background.
#[test]
fn the_warmer_fills_the_cache_once_per_cache_directory() {
    let ws = Workspace::new();
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let all = kiln::plugin::builtin::BUILTINS.len();
    {
        let _held = kiln::plugin::warm::try_lock(&cache)
            .unwrap()
            .expect("nothing else holds it");
        assert!(
            kiln::plugin::warm::try_lock(&cache).unwrap().is_none(),
            "a lock taken twice"
        );
        let start = Instant::now();
        kiln_with_cache(&ws, &cache, true, &["warm-cache"]).expect_code(0);
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(entries(&cache), Vec::<String>::new(), "a second warmer ran");
    }
    kiln_with_cache(&ws, &cache, true, &["warm-cache"]).expect_code(0);
    assert_eq!(entries(&cache).len(), all, "{:?}", entries(&cache));
    // Nothing left to do: the next warmer compiles nothing and writes nothing.
    let before = std::fs::metadata(cache.join("components"))
        .unwrap()
        .modified()
        .unwrap();
    kiln_with_cache(&ws, &cache, true, &["warm-cache"]).expect_code(0);
    assert_eq!(
        std::fs::metadata(cache.join("components"))
            .unwrap()
            .modified()
            .unwrap(),
        before
    );

    // Started in the background by a list on an empty cache: the list returns, the warmer
    // fills the cache after it.
    let fresh = t.path().join("fresh");
    kiln_with_cache(&ws, &fresh, true, &["plugin", "list"]).expect_code(0);
    let deadline = Instant::now() + Duration::from_secs(600);
    while entries(&fresh).len() < all {
        assert!(
            Instant::now() < deadline,
            "the warmer did not fill the cache: {:?}",
            entries(&fresh)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Wait for it to let go of the lock before the directory is removed.
    while kiln::plugin::warm::try_lock(&fresh).unwrap().is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
}
