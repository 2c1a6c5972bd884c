//! The on-disk compile cache: a compiled component is stored under a key made of the
//! component's SHA-256 and the engine's compatibility hash (wasmtime version, target, and
//! settings), so a later run loads it instead of compiling it again. A corrupt or stale entry
//! is recompiled and replaced; a cache that cannot be written only costs speed.
//!
//! A compiled component is native code kiln runs unconfined, and the cache directory is one a
//! user might let a tool write (`~/.cache`). So every entry is signed: it starts with
//! [`MAGIC`] and an HMAC-SHA256 over its file name (which names the component and the engine)
//! and the artifact, keyed with a random key kept in kiln's state directory
//! ([`kiln_state::cache_key_path`]), never in the cache. An entry is read into memory
//! once, checked, and only then deserialized from that same memory: an entry that is unsigned, signed with another key, for another
//! component, or changed after the check is never loaded. It is removed and the component
//! compiled again.
// Writes outside the workspace: the compile cache, outside the workspace.
#![allow(clippy::disallowed_methods)]

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The first bytes of a signed cache entry (format version 1).
pub const MAGIC: &[u8; 8] = b"kilnmac1";

/// Bytes before the artifact: [`MAGIC`] and the tag.
const HEADER: usize = MAGIC.len() + 32;

/// The largest entry read (a compiled Python or JavaScript component is tens of MB).
const MAX_ENTRY: u64 = 1 << 30;

/// The cache directory: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = kiln_env::env().kiln_cache_dir() {
        return Some(d.to_path_buf());
    }
    kiln_state::UserDir::Cache.kiln_dir()
}

/// The cache file of `bytes` for `engine` inside `dir`.
pub fn entry_path(dir: &Path, engine: &Engine, bytes: &[u8]) -> PathBuf {
    let digest = hex::encode(Sha256::digest(bytes));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join("components")
        .join(format!("{digest}-{:016x}.cwasm", h.finish()))
}

/// The key that signs and checks cache entries.
pub struct Signer {
    key: [u8; kiln_state::CACHE_KEY_LEN],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(***)")
    }
}

impl Signer {
    /// A signer with `key`.
    pub fn new(key: [u8; kiln_state::CACHE_KEY_LEN]) -> Signer {
        Signer { key }
    }

    /// The key at `path`, made when missing ([`kiln_state::load_or_create_key`]). A
    /// key file inside `cache_dir` is refused: whoever writes the cache could sign with it.
    pub fn load(path: &Path, cache_dir: &Path) -> Result<Signer, kiln_state::StateDirError> {
        use kiln_state::resolve;
        if resolve(path).starts_with(resolve(cache_dir)) {
            return Err(kiln_state::StateDirError::BadKey {
                path: path.to_path_buf(),
                why: "it is inside the compile cache it signs",
            });
        }
        kiln_state::load_or_create_key(path).map(Signer::new)
    }

    /// The HMAC-SHA256 of the entry named `name` holding `artifact`, fed but not finished.
    fn mac(&self, name: &[u8], artifact: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(name);
        mac.update(b"\0");
        mac.update(artifact);
        mac
    }

    /// The tag of the entry named `name` holding `artifact`.
    fn tag(&self, name: &[u8], artifact: &[u8]) -> [u8; 32] {
        self.mac(name, artifact).finalize().into_bytes().into()
    }

    /// Whether `tag` is the tag of the entry named `name` holding `artifact` (compared in
    /// constant time).
    fn verify(&self, name: &[u8], artifact: &[u8], tag: &[u8]) -> bool {
        self.mac(name, artifact).verify_slice(tag).is_ok()
    }
}

/// What a cache lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// The entry, checked and loaded.
    Hit(Component),
    /// No entry (or one that cannot be read): compile.
    Miss,
    /// An entry that failed its check (unsigned, another key, another component, corrupt):
    /// it was removed; compile and store again.
    Rejected,
}

/// Load the entry at `path` if its signature checks. The file is opened without following a
/// link, read whole into memory, checked there and deserialized from the same bytes (a copy
/// nothing outside this process can change). Reading and checking costs about 1 ms per MB of
/// artifact over wasmtime's lazy `mmap` of the file, which would run whatever the file holds
/// when it is mapped (README, "Performance").
pub fn load(engine: &Engine, path: &Path, signer: &Signer) -> Lookup {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    else {
        return Lookup::Miss;
    };
    let len = match f.metadata() {
        Ok(m) if m.is_file() && m.len() <= MAX_ENTRY => m.len(),
        _ => return reject(path),
    };
    let mut bytes = Vec::with_capacity(len as usize);
    if f.read_to_end(&mut bytes).is_err() {
        return Lookup::Miss;
    }
    let name = path
        .file_name()
        .map(|n| n.as_encoded_bytes())
        .unwrap_or_default();
    if bytes.len() < HEADER
        || &bytes[..MAGIC.len()] != MAGIC
        || !signer.verify(name, &bytes[HEADER..], &bytes[MAGIC.len()..HEADER])
    {
        return reject(path);
    }
    // SAFETY: these bytes were checked, in memory, to be an artifact this user's kiln signed
    // (the key never leaves kiln's state directory) for this component and this engine (both
    // named in the signed file name), from `Component::serialize`; wasmtime also checks the
    // header and refuses mismatches. Nothing outside this process can change them now.
    match unsafe { Component::deserialize(engine, &bytes[HEADER..]) } {
        Ok(c) => Lookup::Hit(c),
        Err(_) => reject(path),
    }
}

/// Remove an entry that failed its check (the compile that follows writes a good one).
fn reject(path: &Path) -> Lookup {
    let _ = std::fs::remove_file(path);
    Lookup::Rejected
}

/// Write a compiled component, signed, atomically (a new temp file, then rename).
pub fn store(component: &Component, path: &Path, signer: &Signer) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let artifact = component
        .serialize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = path.parent().expect("cache entries live in a directory");
    let name = path.file_name().expect("cache entries have a name");
    let tag = signer.tag(name.as_encoded_bytes(), &artifact);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&tag)?;
        f.write_all(&artifact)?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_binds_the_key_the_name_and_the_bytes() {
        let (a, b) = (Signer::new([1; 32]), Signer::new([2; 32]));
        let t = a.tag(b"x.cwasm", b"code");
        assert!(a.verify(b"x.cwasm", b"code", &t));
        assert!(!b.verify(b"x.cwasm", b"code", &t));
        assert!(!a.verify(b"y.cwasm", b"code", &t));
        assert!(!a.verify(b"x.cwasm", b"codE", &t));
        assert!(!a.verify(b"x.cwas", b"mcode", &t));
        // HMAC-SHA256 as RFC 4231 defines it (test case 2, key "Jefe").
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
