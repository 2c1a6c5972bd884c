//! Grant edits the CLI makes on the user's behalf: a toolchain runner's consent, a test
//! command.

use crate::error::ConfigError;
use crate::schema::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Grants implied by naming a runner on the command line (naming it is consent for
/// the build it runs): `--runner command --cmd "prog ..."` grants `prog`; `--runner cargo`
/// grants `cargo`, the variables rustup and cargo need, reading cargo's caches
/// (`CARGO_HOME/registry`, `CARGO_HOME/git`), writing its lock and cache-tracking files and
/// reading its installed tools and configuration. Never writing `config.toml`, credentials or `bin/`:
/// a build script that could would run its code in the user's next plain `cargo`.
/// `--runner go` also gets a build cache of kiln's own for `workspace`, when given (see
/// [`kiln_state::build_cache`]; `None`: none, the build cache is each call's own).
pub fn grant_runner_consent(
    config: &mut Config,
    runner: &str,
    cmd: Option<&str>,
    workspace: Option<&Path>,
) -> Result<(), ConfigError> {
    let pc = config.plugins.entry(runner.to_string()).or_default();
    if let Some(cmd) = cmd {
        let program = cmd
            .split_whitespace()
            .next()
            .ok_or(ConfigError::EmptyCommand { flag: "--cmd" })?;
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.trim_matches(['"', '\'']).to_string(),
            args: vec!["*".into()],
        });
    }
    // The built-in runners of other toolchains: the tool itself, with any arguments (the
    // plugin's manifest narrows it: a call must fit both), and the variables it reads.
    let (programs, args, env): (&[&str], &[&str], &[&str]) = match runner {
        // The pytest runner runs one fixed `python3 -c SCRIPT` that calls `pytest.main`.
        "pytest" => (
            &["python3", "python"],
            &["-c", "*"],
            &["VIRTUAL_ENV", "PYTHONPATH"],
        ),
        "go" => (&["go"], &["*"], &["GOFLAGS", "GOTOOLCHAIN", "GOPROXY"]),
        "tsc" => (&["tsc", "node_modules/.bin/tsc"], &["*"], &[]),
        "node" => (&["npm", "node"], &["*"], &["NODE_OPTIONS", "NO_COLOR"]),
        "make" => (&["make", "cmake"], &["*"], &["CC", "CXX", "CFLAGS"]),
        _ => (&[], &[], &[]),
    };
    for program in programs {
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
        });
    }
    if !env.is_empty() {
        let list = pc.env.get_or_insert_with(Vec::new);
        for v in env {
            if !list.iter().any(|e| e == v) {
                list.push(v.to_string());
            }
        }
    }
    if runner == "go"
        && let Some(cache) = go_module_cache()
    {
        // The user's module cache, read-only (as the view holds every grant not written):
        // a module already downloaded builds without network, and no build can change what
        // the user's next plain `go build` takes from it. The build cache stays the call's own.
        let read = pc.read.get_or_insert_with(Vec::new);
        if !read.contains(&cache) {
            read.push(cache.clone());
        }
        pc.settings
            .get_or_insert_with(BTreeMap::new)
            .entry("modcache".into())
            .or_insert(cache);
        let env = pc.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e == "GOMODCACHE") {
            env.push("GOMODCACHE".into());
        }
    }
    if runner == "go"
        && let Some(ws) = workspace
        && let Ok(Some(cache)) = kiln_state::build_cache(ws, "go")
    {
        // go's build cache: kiln's own for this workspace, written by confined builds only,
        // so every check after the first compiles only what changed. Never the user's
        // `GOCACHE`: a confined build could plant an object there that the user's next plain
        // `go build` would link. Without it (no state directory) the build cache is the
        // call's own, as before.
        let cache = cache.to_string_lossy().into_owned();
        let write = pc.write.get_or_insert_with(Vec::new);
        if !write.contains(&cache) {
            write.push(cache.clone());
        }
        pc.settings
            .get_or_insert_with(BTreeMap::new)
            .insert("gocache".into(), cache);
        let env = pc.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e == "GOCACHE") {
            env.push("GOCACHE".into());
        }
    }
    if runner == "cargo" {
        pc.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: "cargo".into(),
            args: vec!["*".into()],
        });
        let cargo_home = kiln_env::env()
            .var("CARGO_HOME")
            .filter(|h| Path::new(h).is_absolute())
            .map(str::to_string)
            .unwrap_or_else(|| "~/.cargo".to_string());
        let under = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|n| format!("{}/{n}", cargo_home.trim_end_matches('/')))
                .collect()
        };
        // The lock and cache-tracking files cargo keeps beside its caches (files only: no
        // new file can be created in CARGO_HOME itself).
        let mut write = under(&[".package-cache", ".package-cache-mutate", ".global-cache"]);
        // Tools installed there, the configuration cargo reads (never the credentials), and
        // the caches, read-only: cargo does not check an archive in `registry/cache` again
        // when it unpacks it, nor an index entry, nor a git checkout, so a build script that
        // could write them would run its code in the user's next plain `cargo build`.
        let mut read = under(&["bin", "config.toml", "config", "registry", "git"]);
        // With the network granted a build may need to download: into a CARGO_HOME of kiln's
        // own for the workspace (as go's build cache), never the user's.
        if pc.net == Some(true)
            && let Some(ws) = workspace
            && let Ok(Some(home)) = kiln_state::build_cache(ws, "cargo")
        {
            let home = home.to_string_lossy().into_owned();
            write = vec![home.clone()];
            read = under(&["bin"]);
            pc.settings
                .get_or_insert_with(BTreeMap::new)
                .insert("cargo_home".into(), home);
        }
        for (list, add) in [(&mut pc.write, write), (&mut pc.read, read)] {
            let list = list.get_or_insert_with(Vec::new);
            for p in add {
                if !list.contains(&p) {
                    list.push(p);
                }
            }
        }
        let env = pc.env.get_or_insert_with(Vec::new);
        for v in [
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "CARGO_TARGET_DIR",
        ] {
            if !env.iter().any(|e| e == v) {
                env.push(v.to_string());
            }
        }
    }
    Ok(())
}

/// The user's go module cache, as go finds it: `GOMODCACHE`, else the first `GOPATH` entry's
/// `pkg/mod`, else `~/go/pkg/mod`; only an absolute directory that exists.
pub(crate) fn go_module_cache() -> Option<String> {
    let env = kiln_env::env();
    let var = |k: &str| env.var(k).filter(|v| Path::new(v).is_absolute());
    let cache = var("GOMODCACHE")
        .map(PathBuf::from)
        .or_else(|| {
            let gopath = env.var_os("GOPATH")?;
            let first = std::env::split_paths(gopath).next()?;
            first.is_absolute().then(|| first.join("pkg/mod"))
        })
        .or_else(|| var("HOME").map(|h| Path::new(h).join("go/pkg/mod")))?;
    cache.is_dir().then(|| cache.to_string_lossy().into_owned())
}

/// Grant the `shell` tool (and the `command` runner, for `compile_loop`) exactly the command
/// named by `--test-command` / `[agent] test_command`.
pub fn grant_test_command(config: &mut Config, cmd: &str) -> Result<(), ConfigError> {
    let mut words = cmd.split_whitespace().map(String::from);
    let program = words.next().ok_or(ConfigError::EmptyCommand {
        flag: "--test-command",
    })?;
    let args: Vec<String> = words.collect();
    for plugin in ["shell", "command"] {
        config
            .plugins
            .entry(plugin.into())
            .or_default()
            .exec
            .get_or_insert_with(Vec::new)
            .push(ExecGrant {
                program: program.clone(),
                args: if plugin == "command" {
                    vec!["*".into()]
                } else {
                    args.clone()
                },
            });
    }
    // The `command` runner runs it in `compile_loop`: a build's deadline, as `kiln fix`'s
    // (`[fix] timeout`, a deadline granted to the plugin, else 10 minutes).
    let fix_timeout = config.fix.timeout;
    let pc = config.plugins.entry("command".into()).or_default();
    let secs = fix_timeout
        .or(pc.timeout_ms.map(|ms| ms.div_ceil(1000)))
        .unwrap_or(DEFAULT_RUNNER_TIMEOUT_S);
    pc.timeout_ms = Some(secs.saturating_mul(1000));
    Ok(())
}
