//! The runtime itself: the compile cache, refusing components that are not kiln plugins, and
//! carrying on after a plugin traps, times out or runs out of memory.

use crate::support::{Workspace, runtime_with_cache, wasm};
use kiln::config::Config;
use kiln::plugin::{PluginError, Runtime, Source};

#[test]
fn compiled_components_are_cached_and_reused() {
    let cache = tempfile::tempdir().unwrap();
    let key = tempfile::tempdir().unwrap();
    let key = key.path().join("cache.key");
    let bytes = std::fs::read(wasm("kiln_plugin_fs")).unwrap();
    let first = runtime_with_cache(cache.path(), &key);
    let c1 = first.check_bytes(&bytes, Source::Builtin).unwrap();
    assert!(!c1.info.from_cache, "a fresh cache compiles");
    let entries: Vec<_> = std::fs::read_dir(cache.path().join("components"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1, "one artifact written");
    drop(first);
    let second = runtime_with_cache(cache.path(), &key);
    let c2 = second.check_bytes(&bytes, Source::Builtin).unwrap();
    assert!(c2.info.from_cache, "a second runtime loads from the cache");

    // A corrupt cache entry is recompiled, not fatal.
    drop((c2, second));
    let entry = std::fs::read_dir(cache.path().join("components"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&entry, b"garbage").unwrap();
    let third = runtime_with_cache(cache.path(), &key);
    let c3 = third.check_bytes(&bytes, Source::Builtin).unwrap();
    assert!(!c3.info.from_cache);
}

#[test]
fn files_that_are_not_kiln_components_are_refused_clearly() {
    let ws = Workspace::new();
    let rt = Runtime::new(None).unwrap();
    let corrupt = ws.path().join("corrupt.wasm");
    std::fs::write(&corrupt, b"this is not wasm at all").unwrap();
    let e = rt.check_file(&corrupt).err().unwrap();
    assert!(matches!(e, PluginError::NotWasm(_)), "{e}");
    assert!(e.to_string().contains("corrupt.wasm"));

    let core = ws.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let e = rt.check_file(&core).err().unwrap();
    assert!(
        e.to_string()
            .contains("core.wasm is a core WebAssembly module, not a component"),
        "{e}"
    );

    let truncated = ws.path().join("truncated.wasm");
    let mut bytes = std::fs::read(wasm("kiln_plugin_fs")).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&truncated, bytes).unwrap();
    let e = rt.check_file(&truncated).err().unwrap();
    assert!(matches!(e, PluginError::Invalid { .. }), "{e}");

    let e = rt.check_file(&wasm("kiln-test-not-kiln")).err().unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("does not implement a kiln plugin world") && msg.contains("wasi:cli/run"),
        "{msg}"
    );

    let e = rt
        .check_file(&wasm("kiln_test_future_contract"))
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("contract 9.0.0") && msg.contains("supports 0.1.0"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_keeps_running_after_traps_deadlines_and_memory_exhaustion() {
    let ws = Workspace::new();
    ws.write("inside.txt", "still here\n");
    let mut config = Config::default();
    let grant = ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\ntimeout_ms = 1000\nmemory_mib = 32\n",
    );
    config.layer_file(&grant).unwrap();
    let rt = crate::support::shared_runtime();
    let bytes = std::fs::read(wasm("kiln_test_escape")).unwrap();
    let plugin = rt
        .load(
            &bytes,
            Source::File(wasm("kiln_test_escape")),
            &ws.root(),
            &config,
        )
        .await
        .unwrap();

    let e = plugin.tool_call("spin", "{}").await.err().unwrap();
    assert!(matches!(e, PluginError::Deadline { ms: 1000, .. }), "{e}");
    let e = plugin.tool_call("grow", "{}").await.err().unwrap();
    assert!(matches!(e, PluginError::Memory { mib: 32, .. }), "{e}");
    let e = plugin.tool_call("panic", "{}").await.err().unwrap();
    assert!(matches!(e, PluginError::Trap { .. }), "{e}");
    // The same plugin answers the next call: each call gets a fresh instance.
    let ok = plugin
        .tool_call("read", r#"{"path":"/workspace/inside.txt"}"#)
        .await
        .unwrap()
        .unwrap();
    assert!(ok.contains("still here"), "{ok}");
}
