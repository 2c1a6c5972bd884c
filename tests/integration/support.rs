//! Test support: temporary workspaces, the built `kiln` binary run with a clean environment,
//! and the paths of the test-fixture components built by the host's build script.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding every component built from `plugins/` and `tests/plugins/`.
pub fn wasm(stem: &str) -> PathBuf {
    Path::new(kiln::plugin::builtin::TEST_PLUGINS_DIR).join(format!("{stem}.wasm"))
}

/// A compile cache shared by the tests (compiling once per test run).
pub fn shared_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-cache")
}

/// The key that signs the shared cache's entries (`KILN_CACHE_KEY`): beside the cache, not in
/// it, and one for every test, so the tests' different state directories share the cache.
pub fn shared_cache_key() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-cache.key")
}

/// A runtime over the compile cache `dir` whose entries are signed with the key file `key`.
pub fn runtime_with_cache(dir: &Path, key: &Path) -> kiln::plugin::Runtime {
    kiln::plugin::Runtime::with_cache(Some((dir.to_path_buf(), key.to_path_buf()))).unwrap()
}

/// A runtime over the shared compile cache.
pub fn shared_runtime() -> kiln::plugin::Runtime {
    runtime_with_cache(&shared_cache(), &shared_cache_key())
}

/// A temporary workspace with files.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The workspace itself lives in a subdirectory so tests can put files "outside" it.
    pub fn root(&self) -> PathBuf {
        let r = self.dir.path().join("ws");
        std::fs::create_dir_all(&r).unwrap();
        r
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `XDG_STATE_HOME` of the kiln processes: beside the workspace, not in it.
    pub fn state_home(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The workspace's own store as the kiln processes keep it: `kiln.db` in their state
    /// directory for the workspace (`kiln::store::default_path` under `state_home`).
    pub fn store_path(&self) -> PathBuf {
        self.store_path_under(&self.state_home())
    }

    /// The store a kiln whose `XDG_STATE_HOME` is `state_home` keeps for this workspace.
    pub fn store_path_under(&self, state_home: &Path) -> PathBuf {
        let key = kiln::state_dir::Identity::of(&self.root()).unwrap().key();
        state_home
            .join("kiln/workspaces")
            .join(key)
            .join(kiln::store::STORE_FILE)
    }

    /// The workspace's own store, opened (created when no kiln ran yet) as kiln opens it.
    pub fn store(&self) -> kiln::store::Store {
        self.store_under(&self.state_home())
    }

    /// The store a kiln whose `XDG_STATE_HOME` is `state_home` keeps for this workspace.
    pub fn store_under(&self, state_home: &Path) -> kiln::store::Store {
        let path = self.store_path_under(state_home);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let project = self.root().canonicalize().unwrap();
        kiln::store::Store::open_file(&path, &project.to_string_lossy()).unwrap()
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap()
    }

    /// `kiln` in the workspace with a clean environment: PATH, a HOME of its own, the shared
    /// compile cache and no user configuration.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(args)
            .current_dir(self.root())
            .env_clear()
            .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
            .env("HOME", self.path())
            // kiln's own state (edit journal, trust records) outside the workspace.
            .env("XDG_STATE_HOME", self.state_home())
            .env("KILN_CACHE_DIR", shared_cache())
            .env("KILN_CACHE_KEY", shared_cache_key())
            // No background warmer of the compile cache (tests/integration/first_run.rs tests
            // it): what a test compiles, it compiles itself.
            .env("KILN_NO_WARMER", "1")
            .env("KILN_CONFIG", self.path().join("no-user-config.toml"))
            // The tests' kiln.toml files are written by the tests themselves; trust is tested
            // on its own (escapes.rs) with this removed.
            .env("KILN_YES", "1");
        cmd
    }

    /// Write the user's own configuration file of the kiln processes (`KILN_CONFIG`).
    pub fn user_config(&self, text: &str) {
        std::fs::write(self.path().join("no-user-config.toml"), text).unwrap();
    }

    /// Run `kiln` in the workspace with a clean environment plus `env`.
    pub fn kiln(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run(cmd.output().unwrap())
    }
}

/// The output of one `kiln` run.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    /// stdout parsed as one JSON value.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout().trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout(),
                self.stderr()
            )
        })
    }
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code(),
            code,
            "exit code ({:?})\nstdout: {}\nstderr: {}",
            self.0.status,
            self.stdout(),
            self.stderr()
        );
        self
    }
}

impl Workspace {
    /// `kiln --plugin <escape fixture> tool call escape.TOOL --args ARGS --json` with `env`.
    pub fn escape_tool(&self, tool: &str, args: &str, env: &[(&str, &str)]) -> Run {
        let plugin = wasm("kiln_test_escape");
        self.kiln(
            &[
                "--plugin",
                plugin.to_str().unwrap(),
                "tool",
                "call",
                &format!("escape.{tool}"),
                "--args",
                args,
                "--json",
            ],
            env,
        )
    }
}

/// The message of a `--json` tool error of the given WIT kind (asserting the kind).
#[track_caller]
pub fn error_of(r: &Run, kind: &str) -> String {
    let j = r.json();
    assert_eq!(j["error"]["kind"], kind, "{j}");
    j["error"]["message"].as_str().unwrap().to_string()
}

impl Workspace {
    /// Run `kiln` with `stdin` as standard input.
    pub fn kiln_stdin(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut cmd = self.command(args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        Run(child.wait_with_output().unwrap())
    }
}

impl Workspace {
    /// Start `kiln` without waiting (stdout and stderr piped).
    pub fn spawn_kiln(&self, args: &[&str]) -> std::process::Child {
        self.command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Workspace {
    /// `kiln COMMAND --base-url MOCK/v1 --model test-model --json ARGS...` in the workspace.
    pub fn kiln_model(&self, mock_url: &str, command: &str, args: &[&str]) -> Run {
        let base = format!("{mock_url}/v1");
        let mut all = vec![
            command,
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--json",
        ];
        all.extend_from_slice(args);
        self.kiln(&all, &[])
    }
}

/// The last JSON event a run printed, which must be of type `kind`.
pub fn last_event(r: &Run, kind: &str) -> serde_json::Value {
    let last: serde_json::Value =
        serde_json::from_str(r.stdout().lines().last().expect("events")).unwrap();
    assert_eq!(last["type"], kind, "{last}\n{}", r.stderr());
    last
}

/// A SEARCH/REPLACE block of the default edit format (`search-replace`), as a model writes it.
pub fn sr(search: &str, replace: &str) -> String {
    format!("<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n")
}

/// `kiln agent --base-url MOCK/v1 --model test-model --json ARGS...` in `ws`.
pub fn agent(ws: &Workspace, mock: &crate::mock_llm::MockLlm, args: &[&str]) -> Run {
    ws.kiln_model(&mock.url, "agent", args)
}

/// The `agent.result` event that ends a `kiln agent --json` run.
pub fn agent_result(r: &Run) -> serde_json::Value {
    last_event(r, "agent.result")
}

/// The `loop.result` event that ends a `kiln fix --json` run.
pub fn fix_result(r: &Run) -> serde_json::Value {
    last_event(r, "loop.result")
}

/// The `loop.run.result` event that ends a `kiln loop --json` run.
pub fn loop_result(r: &Run) -> serde_json::Value {
    last_event(r, "loop.run.result")
}

/// The `result` of a successful `kiln tool call --json`.
pub fn tool_result(r: &Run) -> serde_json::Value {
    r.expect_code(0);
    r.json()["result"].clone()
}
