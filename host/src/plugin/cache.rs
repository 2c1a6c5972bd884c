//! The on-disk compile cache: a compiled component is stored under a key made of the
//! component's SHA-256 and the engine's compatibility hash (wasmtime version, target, and
//! settings), so a later run loads it with `mmap` instead of compiling it again. A corrupt or
//! stale entry is recompiled and replaced; a cache that cannot be written only costs speed.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The cache directory: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("KILN_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("kiln"))
}

/// The cache file of `bytes` for `engine` inside `dir`.
pub fn entry_path(dir: &Path, engine: &Engine, bytes: &[u8]) -> PathBuf {
    let digest = hex::encode(Sha256::digest(bytes));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join("components")
        .join(format!("{digest}-{:016x}.cwasm", h.finish()))
}

/// Load from the cache if present and valid. `None` means: compile.
pub fn load(engine: &Engine, path: &Path) -> Option<Component> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: the file was written by `store` below from `Component::serialize` of this
    // engine configuration (the key includes the engine's compatibility hash), in a directory
    // owned by the user; wasmtime also checks the header and refuses mismatches.
    unsafe { Component::deserialize_file(engine, path) }.ok()
}

/// Write a compiled component atomically (temp file + rename).
pub fn store(component: &Component, path: &Path) -> std::io::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = path.parent().expect("cache entries live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
