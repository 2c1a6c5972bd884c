//! kiln-env: the process environment, read in one place. Every variable kiln reads is read
//! here, once, into one typed [`Env`]: kiln's own (`KILN_*`, `AGENT_*`), the test hooks
//! (`KILN_TEST_*`, honoured by debug builds only) and the system's ones kiln uses (`HOME`,
//! `PATH`, `XDG_*_HOME`, `NO_COLOR`, the toolchains' homes). [`env()`] takes it at its first
//! call (`kiln`'s `main` makes that call before anything else) and it is read-only after: a
//! variable set later in the process is not seen.
//!
//! No other file of the host reads the environment: `clippy.toml` disallows
//! `std::env::var`, `var_os`, `vars` and `vars_os`, and `clippy -D warnings` (`.ci/run`)
//! refuses a new direct read; this file is the one place allowed.
//!
//! Variables a person sets for kiln (README, "Environment"):
//!
//! | variable | read by | what it does |
//! |---|---|---|
//! | `KILN_CONFIG` | [`Env::kiln_config`] | the user's configuration file instead of `$XDG_CONFIG_HOME/kiln/config.toml` |
//! | `KILN_CACHE_DIR` | [`Env::kiln_cache_dir`] | the compile cache directory |
//! | `KILN_CACHE_KEY` | [`Env::kiln_cache_key`] | the compile cache's key file (absolute paths only) |
//! | `KILN_NO_WARMER` | [`Env::var_os`], read by the CLI's warmer (`cli/warm_cmd.rs`) | set (not `0`): no background compile of the built-ins (the tests set it) |
//! | `KILN_MODEL`, `KILN_PROVIDER`, `KILN_BASE_URL`, `KILN_LLM_TEMPERATURE`, `KILN_MAX_REPLY_BYTES` | [`Env::var`], handed to `kiln-llm`'s settings | the model settings, below flags and above configuration |
//! | `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, the variable `[llm] api_key_env` names | [`Env::var`] | the API key |
//! | `AGENT_CONSOLE_LOGGING`, `AGENT_FILE_LOGGING`, `AGENT_LOG_FILE` | [`Env::var`], [`Env::agent_log_file`] | `kiln agent`'s event lines |
//! | `KILN_YES`, `KILN_STORE`, `KILN_LEASE`, `KILN_HEARTBEAT`, `KILN_POLL` | the CLI's argument parser (clap's `env =`, shown in `--help`) | a flag's value when the flag is not given |
//!
//! System variables: `HOME` ([`Env::home`]), `PATH` ([`Env::path`]), `XDG_CONFIG_HOME`,
//! `XDG_STATE_HOME`, `XDG_CACHE_HOME` ([`Env::xdg_config_home`], ...), `NO_COLOR`
//! ([`Env::no_color`]), `RUSTUP_HOME`, `CARGO_HOME`, `GOPATH`, `GOMODCACHE` (what a runner's
//! grants name), and the variables a configuration names for a plugin or an MCP server to
//! receive (`env = [...]`, read with [`Env::var`] / [`Env::var_os`]).
//!
//! Test hooks ([`TestHooks`]; debug builds only, the sites check `cfg!(debug_assertions)`):
//!
//! | variable | what it does |
//! |---|---|
//! | `KILN_TEST_NO_LANDLOCK=1` | behave as on a kernel without Landlock |
//! | `KILN_TEST_NO_SECCOMP=1` | behave as on a kernel without seccomp filters |
//! | `KILN_TEST_NO_PIDNS=1` | behave as where PID namespaces are refused |
//! | `KILN_TEST_NO_VIEW=1` | behave as where a call cannot get a view of its own (mount, UTS, network namespaces) |
//! | `KILN_TEST_NO_INOTIFY` (set) | behave as where inotify is missing (every checkpoint walks) |
//! | `KILN_TEST_APPLY_PAUSE=STEP[:MS]` | the one writer pauses (or aborts) at step STEP of an apply |
//! | `KILN_TEST_PLUGINS=1` | build-time only (read by `kiln-plugin`'s build script): embed the test-fixture plugins in a release build |
//!
//! This crate has no dependencies; every host crate may depend on it.

#![allow(clippy::disallowed_methods)] // the one place that reads the environment

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment kiln reads, taken once (see the crate's documentation for every variable).
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<OsString, OsString>,
    home: Option<PathBuf>,
    path: Option<OsString>,
    xdg_config_home: Option<PathBuf>,
    xdg_state_home: Option<PathBuf>,
    xdg_cache_home: Option<PathBuf>,
    no_color: bool,
    kiln_config: Option<PathBuf>,
    kiln_cache_dir: Option<PathBuf>,
    kiln_cache_key: Option<PathBuf>,
    agent_log_file: Option<PathBuf>,
    test: TestHooks,
}

/// The test hooks (`KILN_TEST_*`), as set; the code that honours one does so in debug builds
/// only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestHooks {
    /// `KILN_TEST_NO_LANDLOCK=1`.
    pub no_landlock: bool,
    /// `KILN_TEST_NO_SECCOMP=1`.
    pub no_seccomp: bool,
    /// `KILN_TEST_NO_PIDNS=1`.
    pub no_pidns: bool,
    /// `KILN_TEST_NO_VIEW=1`.
    pub no_view: bool,
    /// `KILN_TEST_NO_INOTIFY` set (to anything).
    pub no_inotify: bool,
    /// `KILN_TEST_APPLY_PAUSE`, as written (`STEP` or `STEP:MS`).
    pub apply_pause: Option<String>,
}

/// The test hooks' names, for the messages that say a hook turned something off.
pub mod hook {
    /// See [`super::TestHooks::no_landlock`].
    pub const NO_LANDLOCK: &str = "KILN_TEST_NO_LANDLOCK";
    /// See [`super::TestHooks::no_seccomp`].
    pub const NO_SECCOMP: &str = "KILN_TEST_NO_SECCOMP";
    /// See [`super::TestHooks::no_pidns`].
    pub const NO_PIDNS: &str = "KILN_TEST_NO_PIDNS";
    /// See [`super::TestHooks::no_view`].
    pub const NO_VIEW: &str = "KILN_TEST_NO_VIEW";
    /// See [`super::TestHooks::no_inotify`].
    pub const NO_INOTIFY: &str = "KILN_TEST_NO_INOTIFY";
    /// See [`super::TestHooks::apply_pause`].
    pub const APPLY_PAUSE: &str = "KILN_TEST_APPLY_PAUSE";
}

/// The process's environment, read at the first call and the same afterwards.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::from_vars(std::env::vars_os()))
}

impl Env {
    /// The environment made of these variables (the process's, or a test's own).
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Env {
        let vars: BTreeMap<OsString, OsString> = vars.into_iter().collect();
        let os = |k: &str| vars.get(OsStr::new(k)).cloned();
        let path = |k: &str| os(k).map(PathBuf::from);
        let is_1 = |k: &str| os(k).is_some_and(|v| v == "1");
        Env {
            home: path("HOME"),
            path: os("PATH"),
            xdg_config_home: path("XDG_CONFIG_HOME"),
            xdg_state_home: path("XDG_STATE_HOME"),
            xdg_cache_home: path("XDG_CACHE_HOME"),
            no_color: os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            kiln_config: path("KILN_CONFIG"),
            kiln_cache_dir: path("KILN_CACHE_DIR"),
            kiln_cache_key: path("KILN_CACHE_KEY"),
            agent_log_file: os("AGENT_LOG_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            test: TestHooks {
                no_landlock: is_1(hook::NO_LANDLOCK),
                no_seccomp: is_1(hook::NO_SECCOMP),
                no_pidns: is_1(hook::NO_PIDNS),
                no_view: is_1(hook::NO_VIEW),
                no_inotify: os(hook::NO_INOTIFY).is_some(),
                apply_pause: os(hook::APPLY_PAUSE).and_then(|v| v.into_string().ok()),
            },
            vars,
        }
    }

    /// A variable by name, when set and UTF-8 (as `std::env::var(name).ok()`): for the names
    /// a configuration or the model settings give (`api_key_env`, a plugin's `env` grants).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.var_os(name)?.to_str()
    }

    /// A variable by name, when set (as `std::env::var_os(name)`).
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// `HOME`.
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    /// `PATH`.
    pub fn path(&self) -> Option<&OsStr> {
        self.path.as_deref()
    }

    /// `XDG_CONFIG_HOME`.
    pub fn xdg_config_home(&self) -> Option<&Path> {
        self.xdg_config_home.as_deref()
    }

    /// `XDG_STATE_HOME`.
    pub fn xdg_state_home(&self) -> Option<&Path> {
        self.xdg_state_home.as_deref()
    }

    /// `XDG_CACHE_HOME`.
    pub fn xdg_cache_home(&self) -> Option<&Path> {
        self.xdg_cache_home.as_deref()
    }

    /// `NO_COLOR` set and not empty (<https://no-color.org>).
    pub fn no_color(&self) -> bool {
        self.no_color
    }

    /// `KILN_CONFIG`: the user's configuration file.
    pub fn kiln_config(&self) -> Option<&Path> {
        self.kiln_config.as_deref()
    }

    /// `KILN_CACHE_DIR`: the compile cache directory.
    pub fn kiln_cache_dir(&self) -> Option<&Path> {
        self.kiln_cache_dir.as_deref()
    }

    /// `KILN_CACHE_KEY`: the compile cache's key file (the caller keeps only an absolute one).
    pub fn kiln_cache_key(&self) -> Option<&Path> {
        self.kiln_cache_key.as_deref()
    }

    /// `AGENT_LOG_FILE`, when set and not empty: `kiln agent`'s log file.
    pub fn agent_log_file(&self) -> Option<&Path> {
        self.agent_log_file.as_deref()
    }

    /// The test hooks.
    pub fn test(&self) -> &TestHooks {
        &self.test
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(vars: &[(&str, &str)]) -> Env {
        Env::from_vars(vars.iter().map(|(k, v)| (k.into(), v.into())))
    }

    #[test]
    fn each_variable_lands_in_its_field() {
        let e = of(&[
            ("HOME", "/home/u"),
            ("PATH", "/bin"),
            ("XDG_STATE_HOME", "/s"),
            ("NO_COLOR", "1"),
            ("KILN_CONFIG", "/c.toml"),
            ("AGENT_LOG_FILE", ""),
            ("KILN_TEST_NO_SECCOMP", "1"),
            ("KILN_TEST_NO_VIEW", "yes"),
            ("KILN_TEST_NO_INOTIFY", ""),
            ("KILN_TEST_APPLY_PAUSE", "3:50"),
            ("OPENAI_API_KEY", "k"),
        ]);
        assert_eq!(e.home(), Some(Path::new("/home/u")));
        assert_eq!(e.path(), Some(OsStr::new("/bin")));
        assert_eq!(e.xdg_state_home(), Some(Path::new("/s")));
        assert_eq!(e.xdg_config_home(), None);
        assert!(e.no_color());
        assert_eq!(e.kiln_config(), Some(Path::new("/c.toml")));
        assert_eq!(e.agent_log_file(), None, "an empty value is unset");
        let t = e.test();
        assert!(t.no_seccomp && !t.no_landlock);
        assert!(!t.no_view, "only `1` turns a kernel feature off");
        assert!(t.no_inotify, "set, even empty");
        assert_eq!(t.apply_pause.as_deref(), Some("3:50"));
        assert_eq!(e.var("OPENAI_API_KEY"), Some("k"));
        assert_eq!(e.var("ANTHROPIC_API_KEY"), None);
        assert!(
            !of(&[("NO_COLOR", "")]).no_color(),
            "an empty NO_COLOR is unset"
        );
    }

    #[test]
    fn the_process_environment_is_read_once() {
        let first = env() as *const Env;
        assert_eq!(first, env() as *const Env);
        assert_eq!(env().var_os("PATH"), std::env::var_os("PATH").as_deref());
    }
}
