//! Builds the plugins in `plugins/` (embedded in this crate, kiln-plugin, and so in the `kiln`
//! binary) and the test fixtures in `tests/plugins/` for wasm32-wasip2 with a nested cargo, so
//! a plain `cargo build` yields one self-contained binary. The nested build uses its own target
//! directory (no lock contention with the outer build) and the workspace's Cargo.lock.
// The build script writes only its OUT_DIR and the wasm build of the plugins, and its input
// is the environment cargo sets for it (OUT_DIR, PROFILE, RUSTC, ...), not kiln's at run time:
// it reads that directly (clippy.toml sends kiln's own reads to kiln-env).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The profile the plugins are built with. (`opt-level = "s"` was measured: 14% less CPU for
/// the plugins' build, about 20 s, with some components larger; not worth an unmeasured cost
/// at run time.)
const PLUGIN_PROFILE: &str = "release";

/// One plugin crate to build: (package, file stem of its component, embedded in the binary).
struct PluginCrate {
    package: String,
    stem: String,
    embedded: bool,
    /// The crate's directory (where a built-in keeps its `declared.json`).
    dir: PathBuf,
}

/// Every crate under `plugins/` (built-ins, embedded) and `tests/plugins/` (test fixtures),
/// found on disk so adding a plugin needs no second list. A crate with `[lib]` builds
/// `lib<name>.wasm` as `<name_with_underscores>.wasm`; one without (a WASI command) builds a
/// binary named after the package.
fn plugin_crates(root: &Path) -> Vec<PluginCrate> {
    let mut out = Vec::new();
    for (dir, embedded) in [("plugins", true), ("tests/plugins", false)] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
            .flatten()
            .map(|e| e.path().join("Cargo.toml"))
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        for manifest in entries {
            let text = std::fs::read_to_string(&manifest).unwrap();
            let package = text
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    (k.trim() == "name").then(|| v.trim().trim_matches('"').to_string())
                })
                .unwrap_or_else(|| panic!("{} has no package name", manifest.display()));
            let is_lib = text.lines().any(|l| l.trim() == "[lib]");
            let stem = if is_lib {
                package.replace('-', "_")
            } else {
                package.clone()
            };
            out.push(PluginCrate {
                package,
                stem,
                embedded,
                dir: manifest.parent().unwrap().to_path_buf(),
            });
        }
    }
    out
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    // host/plugin → the workspace root.
    let root = manifest_dir.ancestors().nth(2).unwrap().to_path_buf();
    for dir in ["wit", "guest-sdk", "plugins", "tests/plugins", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let target_dir = root.join("target").join("wasm");
    ensure_wasm_target(&root);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--profile",
            PLUGIN_PROFILE,
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    // The test fixtures (`tests/plugins/`) are only loaded by the tests, which build with the
    // dev profile: a release build (`cargo run --release`, `cargo bench`) skips them unless
    // KILN_TEST_PLUGINS=1 asks for them (`cargo test --release`).
    println!("cargo:rerun-if-env-changed=KILN_TEST_PLUGINS");
    let fixtures = std::env::var("PROFILE").as_deref() != Ok("release")
        || std::env::var("KILN_TEST_PLUGINS").as_deref() == Ok("1");
    let plugins: Vec<PluginCrate> = plugin_crates(&root)
        .into_iter()
        .filter(|p| p.embedded || fixtures)
        .collect();
    for p in &plugins {
        cmd.args(["-p", &p.package]);
    }
    // Flags meant for the host build must not leak into the guest build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_LLVM_COV",
        "LLVM_PROFILE_FILE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("failed to run cargo for the wasm32-wasip2 plugins");
    if !status.success() {
        panic!(
            "building the plugins for wasm32-wasip2 failed (see above). If the target is missing, \
             run `rustup target add wasm32-wasip2` (rust-toolchain.toml normally installs it)."
        );
    }

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let wasm_dir = target_dir.join("wasm32-wasip2").join(PLUGIN_PROFILE);
    let mut builtins = String::from(
        "/// Built-in plugin components: (file stem, bytes).\npub static BUILTINS: &[(&str, &[u8])] = &[\n",
    );
    let mut declared = String::from(
        "/// What each built-in declares (its `declared.json`, see `declared.rs`): (file stem, JSON).\npub static DECLARED: &[(&str, &str)] = &[\n",
    );
    for PluginCrate {
        stem,
        embedded,
        dir,
        ..
    } in &plugins
    {
        let file = wasm_dir.join(format!("{stem}.wasm"));
        assert!(
            file.exists(),
            "expected {} after the plugin build",
            file.display()
        );
        if *embedded {
            // Copy so the embedded bytes cannot change under a later nested build.
            let copy = out_dir.join(format!("{stem}.wasm"));
            std::fs::copy(&file, &copy).unwrap();
            builtins.push_str(&format!(
                "    ({stem:?}, include_bytes!({:?})),\n",
                path_str(&copy)
            ));
            // Checked in beside the plugin and kept equal to what the component answers by
            // host/plugin/tests/declared.rs; a built-in without one is compiled to be listed.
            let file = dir.join("declared.json");
            if file.is_file() {
                declared.push_str(&format!(
                    "    ({stem:?}, include_str!({:?})),\n",
                    path_str(&file)
                ));
            }
        }
    }
    builtins.push_str("];\n");
    declared.push_str("];\n");
    builtins.push_str(&declared);
    std::fs::write(out_dir.join("builtins.rs"), builtins).unwrap();
    println!(
        "cargo:rustc-env=KILN_TEST_PLUGINS_DIR={}",
        path_str(&wasm_dir)
    );
}

/// A toolchain installed before `rust-toolchain.toml` existed does not get the file's `targets`
/// added by rustup, so check for the wasm32-wasip2 standard library and add it when missing.
fn ensure_wasm_target(root: &Path) {
    const TARGET: &str = "wasm32-wasip2";
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let libdir = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string()));
    if libdir.as_deref().is_some_and(|d| d.is_dir()) {
        return;
    }
    println!(
        "cargo:warning=the {TARGET} target is not installed; running `rustup target add {TARGET}`"
    );
    let status = Command::new("rustup")
        .current_dir(root)
        .args(["target", "add", TARGET])
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "`rustup target add {TARGET}` failed ({s}); kiln's plugins are built for {TARGET}. \
             Install it for the toolchain in rust-toolchain.toml and build again."
        ),
        Err(e) => panic!(
            "the {TARGET} target is missing and rustup could not be run ({e}); kiln's plugins \
             are built for {TARGET}: install that target's standard library for this toolchain."
        ),
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("non-UTF-8 build path").to_string()
}
