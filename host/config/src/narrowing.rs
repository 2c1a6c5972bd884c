//! Narrowing: what an untrusted workspace `kiln.toml` may set (the allowlist), and the rule
//! that its limits only lower what the user set.

use crate::schema::*;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The longest `[fix] prompt` an untrusted file may set: a prompt is sent with every request,
/// so a longer one raises cost and needs trust.
pub const UNTRUSTED_PROMPT_MAX: usize = 16 * 1024;

/// Any other keys of a table: what an untrusted file sets but may not.
pub(crate) type Other = BTreeMap<String, toml::Value>;

/// The ALLOWLIST: everything an untrusted workspace `kiln.toml` may set. Only these fields
/// exist here; every other key of the file (a field added to [`File`] later included) lands
/// in an `other` map and is ignored with a warning. Limits apply only where they lower the
/// effective value (see [`UntrustedFile::narrowing`]).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedFile {
    #[serde(default)]
    plugins: BTreeMap<String, UntrustedPlugin>,
    #[serde(default)]
    llm: Option<UntrustedLlm>,
    #[serde(default)]
    fix: Option<UntrustedFix>,
    #[serde(default)]
    sandbox: Option<UntrustedSandbox>,
    #[serde(default)]
    budget: Option<UntrustedBudget>,
    #[serde(flatten)]
    other: Other,
}

/// `[budget]` untrusted: caps that lower what applies (or add one where none applies).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedBudget {
    max_cost_usd: Option<f64>,
    max_tokens: Option<u64>,
    #[serde(flatten)]
    other: Other,
}

/// `[plugins.NAME]` untrusted: limits, applied only where they lower.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedPlugin {
    memory_mib: Option<u32>,
    timeout_ms: Option<u32>,
    output_bytes: Option<u32>,
    #[serde(flatten)]
    other: Other,
}

/// `[llm]` untrusted: sampling switches, and limits applied only where they lower. Not the
/// model or provider (cost, and which key goes where), endpoints or keys.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedLlm {
    temperature: Option<f64>,
    omit_temperature: Option<bool>,
    disable_thinking: Option<bool>,
    stream: Option<bool>,
    max_tokens: Option<u32>,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_retries: Option<u32>,
    stream_max_retries: Option<u32>,
    max_reply_bytes: Option<u64>,
    #[serde(flatten)]
    other: Other,
}

/// `[fix]` untrusted: the prompt (up to [`UNTRUSTED_PROMPT_MAX`]), the format, and a lower
/// iteration ceiling.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedFix {
    prompt: Option<String>,
    format: Option<String>,
    max_iters: Option<u32>,
    timeout: Option<u32>,
    #[serde(flatten)]
    other: Other,
}

/// `[sandbox]` untrusted: both fields only add protection.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UntrustedSandbox {
    protect: Option<Vec<String>>,
    require_confinement: Option<bool>,
    #[serde(flatten)]
    other: Other,
}

/// The names of the keys in `other` under `prefix`, tables expanded `depth` more levels.
pub(crate) fn other_keys(prefix: &str, other: &Other, depth: usize, out: &mut Vec<String>) {
    for (k, v) in other {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            // An empty table sets nothing.
            toml::Value::Table(t) if t.is_empty() => {}
            toml::Value::Table(t) if depth > 0 => {
                let t: Other = t.clone().into_iter().collect();
                other_keys(&key, &t, depth - 1, out);
            }
            _ => out.push(key),
        }
    }
}

/// `value` if it does not raise `current`; else `None`, with the key named in `ignored`.
pub(crate) fn lower_only<T: PartialOrd + std::fmt::Display + Copy>(
    key: String,
    value: Option<T>,
    current: T,
    ignored: &mut Vec<String>,
) -> Option<T> {
    let v = value?;
    if v <= current {
        Some(v)
    } else {
        ignored.push(format!("{key} (raises {current} to {v})"));
        None
    }
}

impl UntrustedFile {
    /// The file as it applies untrusted, and the names of what it sets that does not apply
    /// (`config`: what is loaded so far, against which limits must lower).
    pub(crate) fn narrowing(self, config: &Config) -> (File, Vec<String>) {
        let mut ignored = Vec::new();
        let top: Other = self
            .other
            .into_iter()
            .filter(|(k, _)| k != "plugins")
            .collect();
        for (k, v) in &top {
            let depth = if k == "mcp" { 2 } else { 1 };
            other_keys(
                "",
                &BTreeMap::from([(k.clone(), v.clone())]),
                depth,
                &mut ignored,
            );
        }
        let mut file = File::default();
        for (name, up) in self.plugins {
            let pc = up.narrowing(&name, &config.plugin(&name), &mut ignored);
            file.plugins.insert(name, pc);
        }
        if let Some(llm) = self.llm {
            file.llm = Some(llm.narrowing(&config.llm, &mut ignored));
        }
        if let Some(fix) = self.fix {
            other_keys("fix", &fix.other, 0, &mut ignored);
            let prompt = match fix.prompt {
                Some(p) if p.len() > UNTRUSTED_PROMPT_MAX => {
                    ignored.push(format!(
                        "fix.prompt (longer than {UNTRUSTED_PROMPT_MAX} bytes)"
                    ));
                    None
                }
                p => p,
            };
            file.fix = Some(FixConfig {
                prompt,
                format: fix.format,
                max_iters: lower_only(
                    "fix.max_iters".into(),
                    fix.max_iters,
                    config.fix.max_iters.unwrap_or(DEFAULT_MAX_ITERS),
                    &mut ignored,
                ),
                runner: None,
                cmd: None,
                timeout: lower_only(
                    "fix.timeout".into(),
                    fix.timeout,
                    config.fix.timeout.unwrap_or(DEFAULT_RUNNER_TIMEOUT_S),
                    &mut ignored,
                ),
            });
        }
        if let Some(sandbox) = self.sandbox {
            other_keys("sandbox", &sandbox.other, 0, &mut ignored);
            file.sandbox = Some(SandboxConfig {
                protect: sandbox.protect,
                require_confinement: sandbox.require_confinement.filter(|r| *r),
            });
        }
        if let Some(budget) = self.budget {
            other_keys("budget", &budget.other, 0, &mut ignored);
            let have = config.budget;
            file.budget = Some(BudgetConfig {
                max_cost_usd: match have.max_cost_usd {
                    Some(c) => lower_only(
                        "budget.max_cost_usd".into(),
                        budget.max_cost_usd,
                        c,
                        &mut ignored,
                    ),
                    None => budget.max_cost_usd,
                },
                max_tokens: match have.max_tokens {
                    Some(t) => lower_only(
                        "budget.max_tokens".into(),
                        budget.max_tokens,
                        t,
                        &mut ignored,
                    ),
                    None => budget.max_tokens,
                },
            });
        }
        (file, ignored)
    }
}

impl UntrustedPlugin {
    /// The limits that lower what `have` (the section so far) allows.
    pub(crate) fn narrowing(
        self,
        name: &str,
        have: &PluginConfig,
        ignored: &mut Vec<String>,
    ) -> PluginConfig {
        other_keys(&format!("plugins.{name}"), &self.other, 0, ignored);
        let key = |f: &str| format!("plugins.{name}.{f}");
        PluginConfig {
            memory_mib: lower_only(
                key("memory_mib"),
                self.memory_mib,
                have.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB),
                ignored,
            ),
            timeout_ms: lower_only(
                key("timeout_ms"),
                self.timeout_ms,
                have.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
                ignored,
            ),
            output_bytes: lower_only(
                key("output_bytes"),
                self.output_bytes,
                have.output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES),
                ignored,
            ),
            ..PluginConfig::default()
        }
    }
}

impl UntrustedLlm {
    pub(crate) fn narrowing(
        self,
        have: &kiln_llm::LlmConfig,
        ignored: &mut Vec<String>,
    ) -> kiln_llm::LlmConfig {
        use kiln_llm::settings as d;
        other_keys("llm", &self.other, 0, ignored);
        let key = |f: &str| format!("llm.{f}");
        kiln_llm::LlmConfig {
            temperature: self.temperature,
            omit_temperature: self.omit_temperature,
            disable_thinking: self.disable_thinking,
            stream: self.stream,
            max_tokens: lower_only(
                key("max_tokens"),
                self.max_tokens,
                have.max_tokens.unwrap_or(d::DEFAULT_MAX_TOKENS),
                ignored,
            ),
            timeout_secs: lower_only(
                key("timeout_secs"),
                self.timeout_secs,
                have.timeout_secs.unwrap_or(d::DEFAULT_TIMEOUT_SECS),
                ignored,
            ),
            connect_timeout_secs: lower_only(
                key("connect_timeout_secs"),
                self.connect_timeout_secs,
                have.connect_timeout_secs
                    .unwrap_or(d::DEFAULT_CONNECT_TIMEOUT_SECS),
                ignored,
            ),
            idle_timeout_secs: lower_only(
                key("idle_timeout_secs"),
                self.idle_timeout_secs,
                have.idle_timeout_secs
                    .unwrap_or(d::DEFAULT_IDLE_TIMEOUT_SECS),
                ignored,
            ),
            max_retries: lower_only(
                key("max_retries"),
                self.max_retries,
                have.max_retries.unwrap_or(d::DEFAULT_MAX_RETRIES),
                ignored,
            ),
            stream_max_retries: lower_only(
                key("stream_max_retries"),
                self.stream_max_retries,
                have.stream_max_retries
                    .unwrap_or(d::DEFAULT_STREAM_MAX_RETRIES),
                ignored,
            ),
            max_reply_bytes: lower_only(
                key("max_reply_bytes"),
                self.max_reply_bytes,
                have.max_reply_bytes.unwrap_or(d::DEFAULT_MAX_REPLY_BYTES),
                ignored,
            ),
            ..Default::default()
        }
    }
}

/// `pc`'s limits, each no higher than what `have` has (or the default): what an untrusted
/// layer may merge into `have`.
pub(crate) fn lowered(have: &PluginConfig, pc: &PluginConfig) -> PluginConfig {
    let low = |v: Option<u32>, h: Option<u32>, d: u32| v.map(|v| v.min(h.unwrap_or(d)));
    PluginConfig {
        memory_mib: low(pc.memory_mib, have.memory_mib, DEFAULT_MEMORY_MIB),
        timeout_ms: low(pc.timeout_ms, have.timeout_ms, DEFAULT_TIMEOUT_MS),
        output_bytes: low(pc.output_bytes, have.output_bytes, DEFAULT_OUTPUT_BYTES),
        ..PluginConfig::default()
    }
}
