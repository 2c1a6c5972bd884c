//! The paths every program reads (system directories, device files), the installations the
//! programs on its `PATH` come from, and `~` expansion.

use std::path::{Path, PathBuf};

/// Device files every program may open for writing.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// System directories every program may read and execute from.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
];

/// `~/x` is `$HOME/x`; anything else is kept as written (config validation refuses relative
/// paths).
pub fn expand_home(p: &str) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => match kiln_env::env().home() {
            Some(home) => home.join(rest),
            None => PathBuf::from(p),
        },
        None if p == "~" => kiln_env::env()
            .home()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(p)),
        None => PathBuf::from(p),
    }
}

/// The installation a program comes from, when it is not a system directory: its own
/// directory and, for a `prefix/bin/prog`, the prefix's `lib`, `libexec`, `share` and
/// `include`; with symbolic links resolved (`~/.cargo/bin/cargo -> rustup`). A pyenv or rbenv
/// shim (`root/shims/prog`) makes the manager's root readable; a rustup proxy its toolchains
/// and settings. Nothing else of `$HOME` is.
pub fn install_roots(program: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let real = std::fs::canonicalize(program).ok();
    for p in std::iter::once(program).chain(real.as_deref()) {
        if let Some(dir) = p.parent() {
            dir_roots(dir, &mut roots);
        }
    }
    if real
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "rustup")
    {
        rustup_roots(&mut roots);
    }
    roots.sort();
    roots.dedup();
    roots
}

/// What a directory of programs (`dir`) needs readable beside itself.
fn dir_roots(dir: &Path, roots: &mut Vec<PathBuf>) {
    if SYSTEM_READ.iter().any(|s| dir.starts_with(s)) {
        return;
    }
    roots.push(dir.to_path_buf());
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("bin") => {
            // `~/bin` and `~/.local/bin` are not installations: their prefix is the home
            // directory (or `~/.local`, where `share/` holds keyrings and app data; only its
            // `lib`, where `pip install --user` puts packages, is read).
            let home = kiln_env::env().home();
            let Some(prefix) = dir.parent() else { return };
            if home.is_some_and(|h| prefix == h) {
                return;
            }
            if home.is_some_and(|h| prefix == h.join(".local")) {
                roots.push(prefix.join("lib"));
                return;
            }
            for sub in ["lib", "lib64", "libexec", "share", "include"] {
                roots.push(prefix.join(sub));
            }
        }
        Some("shims") => roots.extend(dir.parent().map(Path::to_path_buf)),
        _ => {}
    }
}

/// rustup's toolchains and settings, for a rustup proxy (`cargo`, `rustc`).
fn rustup_roots(roots: &mut Vec<PathBuf>) {
    let rustup_home = kiln_env::env()
        .var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| expand_home("~/.rustup"));
    roots.push(rustup_home.join("toolchains"));
    roots.push(rustup_home.join("settings.toml"));
    roots.push(rustup_home.join("update-hashes"));
}

/// The toolchains a call's programs may read and run: the program's installation and that of
/// every directory on its `PATH` (so `sh -c "cargo test"` finds cargo, rustup's toolchains and
/// `~/.local/bin`'s packages). Never a path inside the workspace (a repository's `bin/` or a
/// `libexec -> /` link it ships), never `/` or a directory holding `home` (a link that resolves
/// there), never a relative `PATH` entry.
pub fn toolchain_roots(
    program: &Path,
    path: &[PathBuf],
    workspace: &Path,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let ws_real = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let home_real = home.and_then(|h| std::fs::canonicalize(h).ok());
    let inside_ws = |p: &Path| p.starts_with(workspace) || p.starts_with(&ws_real);
    let mut roots = if inside_ws(program) {
        Vec::new()
    } else {
        install_roots(program)
    };
    for dir in path.iter().filter(|d| d.is_absolute() && !inside_ws(d)) {
        dir_roots(dir, &mut roots);
        if dir.join("rustup").is_file() {
            rustup_roots(&mut roots);
        }
    }
    roots.retain(|r| {
        if inside_ws(r) {
            return false;
        }
        let Ok(real) = std::fs::canonicalize(r) else {
            return false;
        };
        let holds_home = home_real.as_deref().is_some_and(|h| h.starts_with(&real));
        real != Path::new("/") && !holds_home && !inside_ws(&real)
    });
    roots.sort();
    roots.dedup();
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_outside_the_system_keeps_its_installation_readable_and_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        // A pyenv shim: the manager's root.
        std::fs::create_dir_all(home.join(".pyenv/shims")).unwrap();
        std::fs::write(home.join(".pyenv/shims/python3"), "#!/bin/sh\n").unwrap();
        let roots = install_roots(&home.join(".pyenv/shims/python3"));
        assert_eq!(roots, [home.join(".pyenv"), home.join(".pyenv/shims")]);
        // A rustup proxy found as `cargo`: its bin directory and rustup's toolchains, never
        // CARGO_HOME itself.
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::write(home.join(".cargo/bin/rustup"), "").unwrap();
        std::os::unix::fs::symlink("rustup", home.join(".cargo/bin/cargo")).unwrap();
        let roots = install_roots(&home.join(".cargo/bin/cargo"));
        assert!(roots.contains(&home.join(".cargo/bin")), "{roots:?}");
        assert!(roots.iter().any(|r| r.ends_with("toolchains")), "{roots:?}");
        assert!(!roots.contains(&home.join(".cargo")), "{roots:?}");
        assert!(!roots.iter().any(|r| r == home), "{roots:?}");
        // A system program adds nothing.
        assert!(install_roots(Path::new("/bin/sh")).is_empty());
        // A program of the workspace adds nothing, and a `libexec -> /` link it ships is never
        // followed; neither is a PATH entry inside the workspace.
        let ws = home.join("ws");
        std::fs::create_dir_all(ws.join("bin")).unwrap();
        std::fs::write(ws.join("bin/test"), "").unwrap();
        std::os::unix::fs::symlink("/", ws.join("libexec")).unwrap();
        let roots = toolchain_roots(
            &ws.join("bin/test"),
            &[ws.join("bin"), home.join(".cargo/bin")],
            &ws,
            Some(home),
        );
        assert!(roots.iter().all(|r| !r.starts_with(&ws)), "{roots:?}");
        assert!(roots.contains(&home.join(".cargo/bin")), "{roots:?}");
        // A toolchain directory that resolves to `/` or to a directory holding HOME is left out.
        std::fs::create_dir_all(home.join("tool/bin")).unwrap();
        std::os::unix::fs::symlink("/", home.join("tool/libexec")).unwrap();
        let roots = toolchain_roots(
            Path::new("/bin/sh"),
            &[home.join("tool/bin")],
            &ws,
            Some(home),
        );
        assert!(roots.contains(&home.join("tool/bin")), "{roots:?}");
        assert!(!roots.contains(&home.join("tool/libexec")), "{roots:?}");
    }

    #[test]
    fn home_is_expanded() {
        let home = kiln_env::env().home().unwrap();
        assert_eq!(expand_home("~/.cargo"), home.join(".cargo"));
        assert_eq!(expand_home("/opt/x"), PathBuf::from("/opt/x"));
    }
}
