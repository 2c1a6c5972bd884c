//! `TaskSpec`: what a batch task, a queue row or a recorded run may ask kiln to do, as an
//! allowlist of typed fields: the kind of run (fix, agent or loop), workspace-relative targets,
//! a runner and an edit format by name, bounded limits and prompt text.
//!
//! These records come from data that the person running kiln did not type: a task file, a row
//! of a shared database, the store a run's own programs could write. So nothing in a spec can
//! name an endpoint, a key, a provider, a model, a file outside the workspace, a log, a plugin
//! file, trust or the store; fields that are not listed here are refused by name
//! (`deny_unknown_fields`), and [`TaskSpec::check`] bounds every value. A spec is never turned
//! into a command line to be parsed again: the commands take its fields one by one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The most bytes of prompt text (`prompt`, `system`, `system_prompt`).
pub const MAX_PROMPT: usize = 256 * 1024;
/// The most bytes of a command (`cmd`, `test_command`) or a target path.
pub const MAX_COMMAND: usize = 4096;
/// The most targets.
pub const MAX_TARGETS: usize = 1000;

/// The kind of run a spec starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `kiln fix`: the compile-and-fix loop over target files.
    Fix,
    /// `kiln agent` with one task.
    Agent,
    /// `kiln loop` over a task file of the workspace.
    Loop,
}

impl Kind {
    /// `fix`, `agent` or `loop`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Fix => "fix",
            Kind::Agent => "agent",
            Kind::Loop => "loop",
        }
    }
}

/// Caps of a run. Each is optional (the command's default, or the configuration's, applies)
/// and bounded; the money and token caps are lowered to the worker's own by
/// [`TaskSpec::capped`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// fix: iteration ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iters: Option<u32>,
    /// agent: turn cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// agent: write_patch cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_writes: Option<u32>,
    /// agent: run_cmd cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_commands: Option<u32>,
    /// agent: identical calls allowed before stopping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<u32>,
    /// loop: rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<u32>,
    /// loop: turns of each execution phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    /// agent and loop: per-tool timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout: Option<f64>,
    /// agent: conversation size (characters) that triggers compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_chars: Option<usize>,
    /// USD over the run's model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// Tokens over the run's model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl Limits {
    /// No limit set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// What a run may be asked to do by data (see the module header).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The kind of run.
    pub kind: Kind,
    /// fix: the target files (one or more); loop: the task file (exactly one). Relative to
    /// the workspace, never leaving it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// fix: the runner plugin, by name (default `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// fix, `command` runner: the build command (`{file}`/`{files}` are the targets). It runs
    /// confined to the checkout, like any build the repository ships.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// fix, `cargo` runner: `check`, `build` or `test`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The edit format plugin, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// agent: the task; fix: the project prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// fix and agent: text appended to kiln's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// agent: text that replaces kiln's system prompt (the text, never a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// agent and loop: the command run_cmd may run (confined, like every program a run starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_command: Option<String>,
    /// agent: plain words added to the test command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_args: Vec<String>,
    /// agent: run every tool call in order.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sequential: bool,
    /// agent: manual mode (JSON decisions instead of tool calls).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
    /// Caps.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

/// A spec that cannot be used: the field at fault and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct SpecError {
    /// The field (`targets`, `limits.max_cost`, ...).
    pub field: String,
    /// What is wrong.
    pub why: String,
}

fn bad(field: &str, why: impl Into<String>) -> SpecError {
    SpecError {
        field: field.to_string(),
        why: why.into(),
    }
}

/// What the worker (or the user) allows, against which a spec is checked where it runs.
#[derive(Debug, Clone, Default)]
pub struct Allowed {
    /// Names of the plugins installed here (built-ins and the user's configured plugins).
    pub plugins: BTreeSet<String>,
    /// The user's own cap on a run's cost, USD.
    pub max_cost: Option<f64>,
    /// The user's own cap on a run's tokens.
    pub max_tokens: Option<u64>,
}

impl Allowed {
    /// The built-in plugins and those `config` names, with `config`'s `[budget]` as caps.
    pub fn from_config(config: &crate::config::Config) -> Allowed {
        let mut plugins: BTreeSet<String> = crate::plugin::builtin::BUILTINS
            .iter()
            .map(|(stem, _)| crate::plugin::builtin::name_of(stem))
            .collect();
        plugins.extend(
            config
                .plugins
                .iter()
                .filter(|(_, pc)| pc.path.is_some())
                .map(|(name, _)| name.clone()),
        );
        Allowed {
            plugins,
            max_cost: config.budget.max_cost_usd,
            max_tokens: config.budget.max_tokens,
        }
    }
}

/// A plugin name: lowercase letters, digits, `-` and `_`, 1 to 64 of them.
fn plugin_name(field: &str, name: &str) -> Result<(), SpecError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("`{name}` is not a plugin name (lowercase letters, digits, `-`, `_`)"),
        ))
    }
}

/// Text of at most `max` bytes without NUL.
fn text(field: &str, t: &str, max: usize) -> Result<(), SpecError> {
    if t.len() > max {
        return Err(bad(
            field,
            format!("is {} bytes; the most is {max}", t.len()),
        ));
    }
    if t.contains('\0') {
        return Err(bad(field, "contains a NUL byte"));
    }
    Ok(())
}

/// A whole number within `lo..=hi`.
fn range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    v: Option<T>,
    lo: T,
    hi: T,
) -> Result<(), SpecError> {
    match v {
        Some(v) if v < lo || v > hi => Err(bad(field, format!("{v} is not in {lo}..={hi}"))),
        _ => Ok(()),
    }
}

impl TaskSpec {
    /// A spec of `kind` with nothing else set.
    pub fn new(kind: Kind) -> TaskSpec {
        TaskSpec {
            kind,
            targets: Vec::new(),
            runner: None,
            cmd: None,
            mode: None,
            format: None,
            prompt: None,
            system: None,
            system_prompt: None,
            test_command: None,
            test_args: Vec::new(),
            sequential: false,
            manual: false,
            limits: Limits::default(),
        }
    }

    /// Every field bounded, and only the fields of its kind set. Run wherever a spec is used.
    pub fn check(&self) -> Result<(), SpecError> {
        let kind = self.kind.name();
        let only = |field: &str, set: bool, kinds: &[Kind]| {
            if set && !kinds.contains(&self.kind) {
                let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
                Err(bad(
                    field,
                    format!("is for {} tasks, not {kind}", names.join(" and ")),
                ))
            } else {
                Ok(())
            }
        };
        use Kind::*;
        only("runner", self.runner.is_some(), &[Fix])?;
        only("cmd", self.cmd.is_some(), &[Fix])?;
        only("mode", self.mode.is_some(), &[Fix])?;
        only("system", self.system.is_some(), &[Fix, Agent])?;
        only("system_prompt", self.system_prompt.is_some(), &[Agent])?;
        only("prompt", self.prompt.is_some(), &[Fix, Agent])?;
        only("test_command", self.test_command.is_some(), &[Agent, Loop])?;
        only("test_args", !self.test_args.is_empty(), &[Agent])?;
        only("sequential", self.sequential, &[Agent])?;
        only("manual", self.manual, &[Agent])?;
        let l = &self.limits;
        only("limits.max_iters", l.max_iters.is_some(), &[Fix])?;
        for (f, v) in [
            ("limits.max_steps", l.max_steps),
            ("limits.max_writes", l.max_writes),
            ("limits.max_commands", l.max_commands),
            ("limits.max_repeats", l.max_repeats),
        ] {
            only(f, v.is_some(), &[Agent])?;
        }
        only("limits.context_chars", l.context_chars.is_some(), &[Agent])?;
        only("limits.loops", l.loops.is_some(), &[Loop])?;
        only("limits.iterations", l.iterations.is_some(), &[Loop])?;
        only(
            "limits.tool_timeout",
            l.tool_timeout.is_some(),
            &[Agent, Loop],
        )?;

        if self.targets.len() > MAX_TARGETS {
            return Err(bad(
                "targets",
                format!("{} files; the most is {MAX_TARGETS}", self.targets.len()),
            ));
        }
        for t in &self.targets {
            text("targets", t, MAX_COMMAND)?;
            crate::path::check_relative(t).map_err(|why| bad("targets", format!("`{t}` {why}")))?;
        }
        match self.kind {
            Fix if self.targets.is_empty() => {
                return Err(bad("targets", "a fix task names one or more files"));
            }
            Loop if self.targets.len() != 1 => {
                return Err(bad(
                    "targets",
                    "a loop task names exactly one file: its task file",
                ));
            }
            Agent if !self.targets.is_empty() => {
                return Err(bad(
                    "targets",
                    "is for fix and loop tasks; an agent's task is its `prompt`",
                ));
            }
            _ => {}
        }
        if let Some(r) = &self.runner {
            plugin_name("runner", r)?;
        }
        if let Some(f) = &self.format {
            plugin_name("format", f)?;
        }
        if let Some(m) = &self.mode
            && !["check", "build", "test"].contains(&m.as_str())
        {
            return Err(bad("mode", format!("`{m}`: use check, build or test")));
        }
        for (f, v) in [("cmd", &self.cmd), ("test_command", &self.test_command)] {
            if let Some(c) = v {
                text(f, c, MAX_COMMAND)?;
                if c.trim().is_empty() {
                    return Err(bad(f, "is empty"));
                }
            }
        }
        for (f, v) in [
            ("prompt", &self.prompt),
            ("system", &self.system),
            ("system_prompt", &self.system_prompt),
        ] {
            if let Some(t) = v {
                text(f, t, MAX_PROMPT)?;
            }
        }
        if self.test_args.len() > 64 {
            return Err(bad("test_args", "more than 64 words"));
        }
        for a in &self.test_args {
            if a.is_empty()
                || a.len() > 256
                || a.contains(',')
                || a.chars()
                    .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '*' | '?'))
            {
                return Err(bad(
                    "test_args",
                    format!(
                        "`{a}`: each is one plain word (no whitespace, comma or glob character)"
                    ),
                ));
            }
        }
        range("limits.max_iters", l.max_iters, 1, 100)?;
        range("limits.max_steps", l.max_steps, 1, 1000)?;
        range("limits.max_writes", l.max_writes, 0, 1000)?;
        range("limits.max_commands", l.max_commands, 0, 1000)?;
        range("limits.max_repeats", l.max_repeats, 1, 100)?;
        range("limits.loops", l.loops, 1, 100)?;
        range("limits.iterations", l.iterations, 1, 1000)?;
        range("limits.context_chars", l.context_chars, 1000, 10_000_000)?;
        if let Some(t) = l.tool_timeout
            && !(t.is_finite() && t > 0.0 && t <= 3600.0)
        {
            return Err(bad(
                "limits.tool_timeout",
                format!("{t} is not in (0, 3600] seconds"),
            ));
        }
        if let Some(c) = l.max_cost
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(bad(
                "limits.max_cost",
                format!("{c} is not an amount of USD"),
            ));
        }
        Ok(())
    }

    /// [`TaskSpec::check`], then: the runner and format are plugins installed here.
    pub fn check_allowed(&self, allowed: &Allowed) -> Result<(), SpecError> {
        self.check()?;
        for (f, v) in [("runner", &self.runner), ("format", &self.format)] {
            if let Some(name) = v
                && !allowed.plugins.contains(name)
            {
                return Err(bad(
                    f,
                    format!(
                        "`{name}` is not a plugin installed here (installed: {})",
                        allowed
                            .plugins
                            .iter()
                            .map(String::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The spec with its cost and token caps lowered to `cost`/`tokens` (each the lower of the
    /// two; set where the spec sets none).
    pub fn capped(mut self, cost: Option<f64>, tokens: Option<u64>) -> TaskSpec {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        self.limits.max_cost = min(self.limits.max_cost, cost);
        self.limits.max_tokens = min(self.limits.max_tokens, tokens);
        self
    }

    /// Parse a spec from JSON: unknown fields are refused by name.
    pub fn from_json(v: serde_json::Value) -> Result<TaskSpec, SpecError> {
        let spec: TaskSpec = serde_json::from_value(v).map_err(|e| {
            let msg = e.to_string();
            let field = field_in(&msg).unwrap_or("task").to_string();
            bad(&field, msg)
        })?;
        spec.check()?;
        Ok(spec)
    }
}

/// The field serde names in its message (`missing field `x``, `unknown field `x``).
pub fn field_in(msg: &str) -> Option<&str> {
    let rest = msg
        .strip_prefix("unknown field `")
        .or_else(|| msg.strip_prefix("missing field `"))?;
    rest.split('`').next()
}

/// `text` with the `user:password@` of every URL in it removed (`https://u:p@h/` →
/// `https://h/`), for anything kiln records that a person typed.
pub fn strip_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(i) => out.push_str(&authority[i + 1..]),
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_and_foreign_fields_are_refused_by_name() {
        for (v, field) in [
            (
                json!({"kind": "agent", "prompt": "x", "base_url": "http://e"}),
                "base_url",
            ),
            (
                json!({"kind": "agent", "prompt": "x", "log_file": "/tmp/x"}),
                "log_file",
            ),
            (
                json!({"kind": "agent", "prompt": "x", "system_file": "/etc/passwd"}),
                "system_file",
            ),
            (
                json!({"kind": "fix", "targets": ["a.c"], "prompt_file": "/x"}),
                "prompt_file",
            ),
            (
                json!({"kind": "fix", "targets": ["a.c"], "yes": true}),
                "yes",
            ),
            (
                json!({"kind": "agent", "prompt": "x", "limits": {"store": "x"}}),
                "store",
            ),
            (json!({"kind": "fix", "targets": ["../x.c"]}), "targets"),
            (
                json!({"kind": "fix", "targets": ["/etc/passwd"]}),
                "targets",
            ),
            (json!({"kind": "fix", "targets": []}), "targets"),
            (
                json!({"kind": "agent", "prompt": "x", "runner": "cargo"}),
                "runner",
            ),
            (
                json!({"kind": "fix", "targets": ["a"], "runner": "../x.wasm"}),
                "runner",
            ),
            (
                json!({"kind": "fix", "targets": ["a"], "limits": {"max_iters": 100000}}),
                "limits.max_iters",
            ),
            (
                json!({"kind": "fix", "targets": ["a"], "limits": {"max_cost": -1.0}}),
                "limits.max_cost",
            ),
            (json!({"kind": "history"}), "task"),
        ] {
            let e = TaskSpec::from_json(v.clone()).expect_err(&v.to_string());
            assert_eq!(e.field, field, "{v}: {e}");
        }
        let ok = TaskSpec::from_json(json!({"kind": "fix", "targets": ["src/a.c"],
            "runner": "command", "cmd": "gcc -c {file}", "limits": {"max_iters": 3}}))
        .unwrap();
        assert_eq!(ok.limits.max_iters, Some(3));
    }

    #[test]
    fn plugins_must_be_installed_and_caps_only_lower() {
        let mut allowed = Allowed::default();
        allowed.plugins.insert("command".into());
        let mut s = TaskSpec::new(Kind::Fix);
        s.targets = vec!["a.c".into()];
        s.runner = Some("evil".into());
        assert_eq!(s.check_allowed(&allowed).unwrap_err().field, "runner");
        s.runner = Some("command".into());
        s.check_allowed(&allowed).unwrap();
        s.limits.max_cost = Some(50.0);
        let c = s.clone().capped(Some(1.0), Some(10));
        assert_eq!(
            (c.limits.max_cost, c.limits.max_tokens),
            (Some(1.0), Some(10))
        );
        s.limits.max_cost = Some(0.5);
        assert_eq!(s.capped(Some(1.0), None).limits.max_cost, Some(0.5));
    }

    #[test]
    fn credentials_are_stripped_from_urls() {
        assert_eq!(
            strip_credentials("see https://user:PASSWORD@host/v1 and http://h:1/x"),
            "see https://host/v1 and http://h:1/x"
        );
    }
}
