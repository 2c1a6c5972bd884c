#![doc = include_str!("../README.md")]
//! `kiln-guest`: everything a Rust plugin author needs to write a kiln runner, edit format or
//! tool: one trait per plugin kind (with default methods), an export macro per kind, helpers
//! for the host imports, and a diagnostics parser for `file:line:col: severity: message` output.
//!
//! Implement the trait of the kind you write and call its export macro; the component then
//! carries only that kind's world. The component is then built with
//! `cargo build --target wasm32-wasip2 --release`; its exported interfaces carry the contract
//! version ([`CONTRACT_VERSION`]), which the host checks before loading it.

pub mod diagnostics;
pub mod edit;

/// The version of the `kiln:plugin` WIT package this SDK builds against.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// Helpers shared by every kind module; expanded once per generated world so they work on
/// that world's types.
macro_rules! common_helpers {
    () => {
        pub use bindings::kiln::plugin::log::Level;
        pub use bindings::kiln::plugin::types::{
            Access, Diagnostic, Error, ExecRequest, FsRequest, Limits, Manifest, Severity,
        };

        /// Start a manifest that requests nothing; add requests with the builder methods.
        pub fn manifest(name: &str, version: &str, description: &str) -> Manifest {
            Manifest {
                name: name.to_string(),
                version: version.to_string(),
                description: description.to_string(),
                fs: Vec::new(),
                exec: Vec::new(),
                env: Vec::new(),
                limits: Limits {
                    memory_mib: None,
                    timeout_ms: None,
                    output_bytes: None,
                },
            }
        }

        impl Manifest {
            /// Request access to a workspace-relative path (`.` for the whole workspace).
            pub fn with_fs(mut self, path: &str, access: Access) -> Self {
                self.fs.push(FsRequest {
                    path: path.to_string(),
                    access,
                });
                self
            }
            /// Request running `program` with arguments matching `args` (glob patterns).
            pub fn with_exec(mut self, program: &str, args: &[&str]) -> Self {
                self.exec.push(ExecRequest {
                    program: program.to_string(),
                    args: args.iter().map(|a| a.to_string()).collect(),
                });
                self
            }
            /// Request that host variable `name` be passed to programs this plugin runs.
            pub fn with_env(mut self, name: &str) -> Self {
                self.env.push(name.to_string());
                self
            }
            /// Ask for a per-call deadline in milliseconds.
            pub fn with_timeout_ms(mut self, ms: u32) -> Self {
                self.limits.timeout_ms = Some(ms);
                self
            }
        }

        /// Log a message through the host (tagged with this plugin's name).
        pub fn log(level: Level, message: &str) {
            bindings::kiln::plugin::log::log(level, message);
        }

        /// Convert parsed diagnostics into this world's WIT type.
        pub fn to_wit_diagnostics(diags: Vec<$crate::diagnostics::Parsed>) -> Vec<Diagnostic> {
            diags
                .into_iter()
                .map(|d| Diagnostic {
                    file: d.file,
                    line: d.line,
                    column: d.column,
                    severity: match d.severity {
                        $crate::diagnostics::Level::Error => Severity::Error,
                        $crate::diagnostics::Level::Warning => Severity::Warning,
                        $crate::diagnostics::Level::Note => Severity::Note,
                        $crate::diagnostics::Level::Help => Severity::Help,
                    },
                    code: d.code,
                    message: d.message,
                })
                .collect()
        }
    };
}

macro_rules! exec_helpers {
    () => {
        pub use bindings::kiln::plugin::exec::{Command, Output};

        /// A command with no env, cwd at the workspace root, no stdin and host default limits.
        pub fn command(program: &str, args: &[String]) -> Command {
            Command {
                program: program.to_string(),
                args: args.to_vec(),
                env: Vec::new(),
                cwd: None,
                stdin: None,
                timeout_ms: None,
                output_cap: None,
            }
        }

        /// Run a program through the host's `exec` import (checked against the grant).
        pub fn exec(cmd: &Command) -> Result<Output, Error> {
            bindings::kiln::plugin::exec::run(cmd)
        }
    };
}

/// Runner plugins: implement [`runner::Runner`] and call [`export_runner!`].
pub mod runner {
    #[doc(hidden)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "runner-plugin",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "__export_runner_world",
            default_bindings_module: "kiln_guest::runner::bindings",
        });
    }
    common_helpers!();
    exec_helpers!();
    pub use bindings::exports::kiln::plugin::runner::{
        Guest as RunnerGuest, RunRequest, RunResult, RunnerInfo,
    };

    /// A runner: how to build, check or test a project.
    pub trait Runner {
        /// Name, version and requested capabilities.
        fn manifest() -> Manifest;
        /// Languages and file patterns; defaults to "any".
        fn describe() -> RunnerInfo {
            let m = Self::manifest();
            RunnerInfo {
                name: m.name,
                description: m.description,
                languages: vec![],
                patterns: vec![],
            }
        }
        /// Run the check over `request.targets`.
        fn run(request: RunRequest) -> Result<RunResult, Error>;
    }

    /// Look up a setting passed by the host (`[plugins.NAME.settings]` or the command line).
    pub fn setting<'a>(request: &'a RunRequest, key: &str) -> Option<&'a str> {
        request
            .settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Export a type implementing [`runner::Runner`] as this component's runner.
#[macro_export]
macro_rules! export_runner {
    ($t:ident) => {
        impl $crate::runner::RunnerGuest for $t {
            fn get_manifest() -> $crate::runner::Manifest {
                <$t as $crate::runner::Runner>::manifest()
            }
            fn describe() -> $crate::runner::RunnerInfo {
                <$t as $crate::runner::Runner>::describe()
            }
            fn run(
                request: $crate::runner::RunRequest,
            ) -> Result<$crate::runner::RunResult, $crate::runner::Error> {
                <$t as $crate::runner::Runner>::run(request)
            }
        }
        $crate::runner::bindings::__export_runner_world!($t with_types_in $crate::runner::bindings);
    };
}

/// Edit-format plugins: implement [`edit_format::EditFormat`] and call [`export_edit_format!`].
pub mod edit_format {
    #[doc(hidden)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "edit-format-plugin",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "__export_edit_format_world",
            default_bindings_module: "kiln_guest::edit_format::bindings",
        });
    }
    common_helpers!();
    pub use bindings::exports::kiln::plugin::edit_format::{
        AppliedFile, ApplyFailure, EditKind, EditOutcome, EditStatus, FailureKind, FileEdit,
        FormatInfo, Guest as EditFormatGuest, ParseError,
    };

    /// How a format words the refusals of [`apply_edits_as`]: what one edit is called, what
    /// locates it, and how to create a file in that format, so that each format's messages give
    /// its own advice (an apply-patch chunk is never told to "use an empty SEARCH").
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Advice {
        /// What one edit is called: `block`, `chunk`, `hunk`.
        pub unit: &'static str,
        /// What locates an edit, as the messages name it: `SEARCH`, `the chunk`.
        pub search: &'static str,
        /// What to do about an edit to a file that does not exist (`{path}` is replaced).
        pub missing: &'static str,
        /// What to do about a creation over an existing file (`{path}` is replaced); `None`
        /// keeps the shared message.
        pub exists: Option<&'static str>,
    }

    impl Advice {
        /// The wording of SEARCH/REPLACE blocks (and of [`apply_edits`]).
        pub const SEARCH_REPLACE: Advice = Advice {
            unit: "block",
            search: "SEARCH",
            missing: "to create it, use an empty SEARCH",
            exists: None,
        };

        /// `msg` (from [`crate::edit`], which says `block N: SEARCH ...`) in this wording. Only
        /// the fixed words are changed, never the file lines a message quotes.
        pub fn reword(&self, msg: &str) -> String {
            if *self == Advice::SEARCH_REPLACE {
                return msg.to_string();
            }
            let mut out = Vec::new();
            for (k, line) in msg.split('\n').enumerate() {
                let mut l = line.to_string();
                if k == 0
                    && let Some(rest) = l.strip_prefix("block ")
                    && let Some((n, tail)) = rest.split_once(": ")
                    && n.chars().all(|c| c.is_ascii_digit())
                {
                    let tail = match tail.strip_prefix("SEARCH") {
                        Some(t) => format!("{}{t}", self.search),
                        None => tail.replace("an empty SEARCH", "a creation"),
                    };
                    l = format!("{} {n}: {tail}", self.unit);
                } else if l.starts_with("First difference at line ") {
                    l = l.replacen(
                        "` but SEARCH has `",
                        &format!("` but {} has `", self.search),
                        1,
                    );
                }
                out.push(l);
            }
            out.join("\n")
        }
    }

    /// Apply one file's edits in order with the shared semantics (see [`crate::edit`]):
    /// `replace` through the matching tiers, `create` only where the file does not exist (or
    /// is empty), `rewrite` keeping the file's conventions, `delete`, and `rename` (the host
    /// moves the file).
    pub fn apply_edits(
        path: &str,
        text: Option<String>,
        edits: Vec<FileEdit>,
    ) -> Result<AppliedFile, ApplyFailure> {
        apply_edits_as(path, text, edits, &Advice::SEARCH_REPLACE)
    }

    /// [`apply_edits`] with the refusals worded by `advice`.
    pub fn apply_edits_as(
        path: &str,
        text: Option<String>,
        edits: Vec<FileEdit>,
        advice: &Advice,
    ) -> Result<AppliedFile, ApplyFailure> {
        let mut current = text;
        let mut outcomes = Vec::with_capacity(edits.len());
        for (i, e) in edits.iter().enumerate() {
            let (next, outcome) =
                apply_one(path, current, e, i + 1, advice).map_err(|(kind, message)| {
                    ApplyFailure {
                        index: i as u32,
                        kind,
                        message,
                    }
                })?;
            current = next;
            outcomes.push(outcome);
        }
        Ok(AppliedFile {
            text: current,
            outcomes,
        })
    }

    /// Apply one edit, the `n`th (1-based) of its file, to `current` (`None`: the file does not
    /// exist); the file's new text and the edit's outcome, or why it cannot apply.
    pub fn apply_one(
        path: &str,
        current: Option<String>,
        e: &FileEdit,
        n: usize,
        advice: &Advice,
    ) -> Result<(Option<String>, EditOutcome), (FailureKind, String)> {
        use crate::edit;
        let unit = advice.unit;
        if e.path != path {
            return Err((
                FailureKind::Invalid,
                format!("{unit} {n} names {} but was given for {path}", e.path),
            ));
        }
        let (current, status, tier) = match e.kind {
            EditKind::Replace | EditKind::Create => {
                let creates = e.kind == EditKind::Create || e.search.trim().is_empty();
                let base = match (&current, creates) {
                    (Some(t), _) => t.clone(),
                    (None, true) => String::new(),
                    (None, false) => {
                        return Err((
                            FailureKind::Invalid,
                            format!(
                                "{unit} {n}: {path} does not exist; {}",
                                advice.missing.replace("{path}", path)
                            ),
                        ));
                    }
                };
                let search = if e.kind == EditKind::Create {
                    ""
                } else {
                    e.search.as_str()
                };
                match edit::apply_search_replace(path, &base, search, &e.replace, n) {
                    Ok(a) => {
                        let status = if a.already_applied {
                            EditStatus::AlreadyApplied
                        } else {
                            EditStatus::Applied
                        };
                        (Some(a.text), status, a.tier.map(|t| t.name().to_string()))
                    }
                    Err(f) => {
                        let kind = match f {
                            edit::Failure::NoMatch(_) => FailureKind::NoMatch,
                            edit::Failure::Ambiguous(_) => FailureKind::Ambiguous,
                            edit::Failure::Invalid(_) => FailureKind::Invalid,
                        };
                        let message = match (creates, advice.exists, &f) {
                            (true, Some(exists), edit::Failure::Invalid(_)) => format!(
                                "{unit} {n}: {path} already exists; {}",
                                exists.replace("{path}", path)
                            ),
                            _ => advice.reword(f.message()),
                        };
                        return Err((kind, message));
                    }
                }
            }
            EditKind::Rewrite => {
                let new = match &current {
                    Some(old) => edit::conform(old, &e.replace),
                    None => e.replace.clone(),
                };
                let status = if current.as_deref() == Some(new.as_str()) {
                    EditStatus::AlreadyApplied
                } else {
                    EditStatus::Applied
                };
                (Some(new), status, None)
            }
            EditKind::Delete | EditKind::Rename => {
                if current.is_none() {
                    let verb = if e.kind == EditKind::Delete {
                        "delete"
                    } else {
                        "move"
                    };
                    return Err((
                        FailureKind::Invalid,
                        format!("cannot {verb} {path}: it does not exist"),
                    ));
                }
                let next = if e.kind == EditKind::Delete {
                    None
                } else {
                    current
                };
                (next, EditStatus::Applied, None)
            }
        };
        Ok((current, EditOutcome { status, tier }))
    }

    /// An edit format: how an LLM expresses a change.
    pub trait EditFormat {
        /// Name, version (edit formats request no capabilities).
        fn manifest() -> Manifest;
        /// Name, description, multi-file support; defaults to single-file.
        fn describe() -> FormatInfo {
            let m = Self::manifest();
            FormatInfo {
                name: m.name,
                description: m.description,
                multi_file: false,
            }
        }
        /// The prompt fragment that teaches the format.
        fn instructions(multi_file: bool) -> String;
        /// Parse an LLM response into edits.
        fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>>;
        /// Apply one file's edits to its text; the default is [`apply_edits`], the shared
        /// semantics every built-in format uses.
        fn apply(
            path: String,
            text: Option<String>,
            edits: Vec<FileEdit>,
        ) -> Result<AppliedFile, ApplyFailure> {
            apply_edits(&path, text, edits)
        }
    }
}

/// Export a type implementing [`edit_format::EditFormat`] as this component's edit format.
#[macro_export]
macro_rules! export_edit_format {
    ($t:ident) => {
        impl $crate::edit_format::EditFormatGuest for $t {
            fn get_manifest() -> $crate::edit_format::Manifest {
                <$t as $crate::edit_format::EditFormat>::manifest()
            }
            fn describe() -> $crate::edit_format::FormatInfo {
                <$t as $crate::edit_format::EditFormat>::describe()
            }
            fn instructions(multi_file: bool) -> String {
                <$t as $crate::edit_format::EditFormat>::instructions(multi_file)
            }
            fn parse(
                response: String,
                targets: Vec<String>,
            ) -> Result<Vec<$crate::edit_format::FileEdit>, Vec<$crate::edit_format::ParseError>> {
                <$t as $crate::edit_format::EditFormat>::parse(response, targets)
            }
            fn apply(
                path: String,
                text: Option<String>,
                edits: Vec<$crate::edit_format::FileEdit>,
            ) -> Result<$crate::edit_format::AppliedFile, $crate::edit_format::ApplyFailure> {
                <$t as $crate::edit_format::EditFormat>::apply(path, text, edits)
            }
        }
        $crate::edit_format::bindings::__export_edit_format_world!($t with_types_in $crate::edit_format::bindings);
    };
}

/// Tool plugins: implement [`tool::Tool`] and call [`export_tool!`].
pub mod tool {
    #[doc(hidden)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "tool-plugin",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "__export_tool_world",
            default_bindings_module: "kiln_guest::tool::bindings",
        });
    }
    common_helpers!();
    exec_helpers!();
    pub use bindings::exports::kiln::plugin::tool::{Guest as ToolGuest, ToolSpec};

    /// A tool plugin: functions an agent may call.
    pub trait Tool {
        /// Name, version and requested capabilities.
        fn manifest() -> Manifest;
        /// The tools the plugin offers, each with its description and argument schema.
        fn list_tools() -> Vec<ToolSpec>;
        /// Call one tool with JSON arguments; return JSON text.
        fn call(name: String, arguments: String) -> Result<String, Error>;
    }

    /// A tool's spec: its name, the description and JSON Schema the model reads, and
    /// whether it only reads (`read_only`).
    pub fn spec(name: &str, description: &str, schema: &str, read_only: bool) -> ToolSpec {
        ToolSpec {
            name: name.to_string(),
            description: description.to_string(),
            schema: schema.to_string(),
            read_only,
        }
    }
}

/// Export a type implementing [`tool::Tool`] as this component's tool plugin.
#[macro_export]
macro_rules! export_tool {
    ($t:ident) => {
        impl $crate::tool::ToolGuest for $t {
            fn get_manifest() -> $crate::tool::Manifest {
                <$t as $crate::tool::Tool>::manifest()
            }
            fn list_tools() -> Vec<$crate::tool::ToolSpec> {
                <$t as $crate::tool::Tool>::list_tools()
            }
            fn call(name: String, arguments: String) -> Result<String, $crate::tool::Error> {
                <$t as $crate::tool::Tool>::call(name, arguments)
            }
        }
        $crate::tool::bindings::__export_tool_world!($t with_types_in $crate::tool::bindings);
    };
}
