//! The flags every command that talks to a model takes (`--provider`, `--base-url`, `--model`,
//! `--max-reply-bytes`) and their resolution into settings, refusing a hosted API without a key:
//! shared by `kiln llm check` and the loop commands' options.

use crate::llm::{LlmFlags, LlmSettings};
use clap::Args;

/// Flags every command that talks to a model takes.
#[derive(Debug, Clone, Args, Default)]
pub(crate) struct LlmArgs {
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    #[arg(long)]
    pub provider: Option<String>,
    /// Base URL, e.g. `http://localhost:8000/v1`.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name.
    #[arg(long)]
    pub model: Option<String>,
    /// The most text one model reply may carry, in bytes (default 4 MiB, or `[llm]
    /// max_reply_bytes`); past it the request fails.
    #[arg(long, value_name = "BYTES")]
    pub max_reply_bytes: Option<u64>,
}

impl LlmArgs {
    /// Resolve settings from configuration, the process environment and these flags.
    pub fn settings(&self, config: &crate::config::Config) -> anyhow::Result<LlmSettings> {
        let flags = LlmFlags {
            provider: self.provider.clone(),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            max_reply_bytes: self.max_reply_bytes,
            user_config: crate::config::user_config_path(),
        };
        let env = |k: &str| kiln_env::env().var(k).map(str::to_string);
        let s = LlmSettings::resolve(&config.llm, &env, &flags, &mut |w| {
            eprintln!("warning: {w}")
        })?;
        Ok(s)
    }

    /// [`LlmArgs::settings`], refusing up front (before any check runs or plugin loads) a
    /// hosted API that would be called without a key, naming the variable to set.
    pub fn settings_with_key(&self, config: &crate::config::Config) -> anyhow::Result<LlmSettings> {
        let s = self.settings(config)?;
        if let Some(var) = missing_key(&s) {
            anyhow::bail!(
                "no API key for {} ({}): set {var} (or name another variable with `api_key_env` under [llm] in your user config{})",
                crate::llm::shown_url(&s.base_url),
                s.provider.name(),
                crate::config::user_config_path()
                    .map(|p| format!(", {}", p.display()))
                    .unwrap_or_default()
            );
        }
        Ok(s)
    }
}

/// Hosted APIs that always need a key (a local or self-hosted server may need none).
const KEYED_HOSTS: &[&str] = &[
    "api.openai.com",
    "api.anthropic.com",
    "openrouter.ai",
    "api.groq.com",
    "api.mistral.ai",
    "api.deepseek.com",
    "api.together.xyz",
    "api.fireworks.ai",
    "api.x.ai",
    "generativelanguage.googleapis.com",
];

/// The variable to set when `s` has no key but its base URL is a hosted API that needs one.
fn missing_key(s: &LlmSettings) -> Option<&'static str> {
    if s.api_key.is_some() {
        return None;
    }
    let rest = s
        .base_url
        .split_once("://")
        .map_or(s.base_url.as_str(), |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
    let keyed = KEYED_HOSTS
        .iter()
        .any(|h| host == *h || host.ends_with(&format!(".{h}")));
    keyed.then_some(match s.provider {
        crate::llm::Provider::Openai => "OPENAI_API_KEY",
        crate::llm::Provider::Anthropic => "ANTHROPIC_API_KEY",
    })
}
