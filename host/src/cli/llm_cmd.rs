//! `kiln llm check`: one tiny request to confirm the model is reachable and the key works.

use super::ctx::{Ctx, Outcome};
use super::llm_args::LlmArgs;
use super::output::print_json;
use crate::llm::{ChatRequest, LlmClient, LlmError, Message};
use clap::Subcommand;
use serde_json::json;

<<<<<<< HEAD
=======
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
pub(crate) fn missing_key(s: &LlmSettings) -> Option<&'static str> {
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

>>>>>>> attack
#[derive(Debug, Subcommand)]
pub(crate) enum LlmCommand {
    /// Send one tiny request; print provider, model, latency and token usage, or exactly why
    /// it failed (bad key, unknown model, unreachable, timeout).
    Check {
        #[command(flatten)]
        llm: LlmArgs,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// The most seconds the whole check may take, retries included; each attempt gets a
        /// third of it (or less, as `[llm]` timeouts say).
        #[arg(long, value_name = "SECS", default_value_t = CHECK_TIMEOUT_SECS)]
        timeout: u64,
    },
}

/// How long `kiln llm check` waits, retries included, unless `--timeout` says otherwise.
const CHECK_TIMEOUT_SECS: u64 = 30;

fn reason(e: &LlmError) -> &'static str {
    match e {
        LlmError::Unreachable { .. } | LlmError::Refused { .. } => "unreachable",
        LlmError::Timeout { .. } => "timeout",
        LlmError::Auth { .. } => "bad_key",
        LlmError::NotFound { .. } => "unknown_model",
        LlmError::QuotaExhausted { .. } => "quota_exhausted",
        LlmError::ContextOverflow { .. } => "context_overflow",
        LlmError::Http { .. } => "http_error",
        LlmError::ReplyTooLarge { .. } => "reply_too_large",
        LlmError::NotAnAnswer { .. } => "not_an_llm_api",
        LlmError::Truncated(_)
        | LlmError::Stream(_)
        | LlmError::Decode(_)
        | LlmError::Protocol { .. } => "bad_response",
    }
}

pub(crate) async fn run(ctx: &Ctx, cmd: LlmCommand) -> anyhow::Result<Outcome> {
    let LlmCommand::Check { llm, json, timeout } = cmd;
    anyhow::ensure!(timeout > 0, "--timeout takes a number of seconds above 0");
    let mut settings = llm.settings(&ctx.config)?;
    // The whole check is bounded; each attempt gets a third, so a server that accepts the
    // connection and never answers shows its retries before the check gives up.
    let total = std::time::Duration::from_secs(timeout);
    let attempt = (total / 3).max(std::time::Duration::from_secs(1));
    settings.timeout = settings.timeout.min(attempt);
    settings.connect_timeout = settings.connect_timeout.min(attempt);
    settings.idle_timeout = settings.idle_timeout.min(attempt);
    let (provider, model, base) = (
        settings.provider.name(),
        settings.model.clone(),
        crate::llm::shown_url(&settings.base_url),
    );
    let client = LlmClient::new(settings)?;
    let req = ChatRequest {
        system: None,
        messages: vec![Message::User {
            text: "Reply with the single word: ok".into(),
        }],
        tools: vec![],
        max_tokens: Some(16),
    };
    let quiet = ctx.quiet;
    let retries = std::sync::atomic::AtomicU32::new(0);
    // Each retry on stderr, as `kiln fix` shows them.
    let mut on_delta = |d: crate::llm::Delta| {
        if let crate::llm::Delta::Retry {
            attempt, reason, ..
        } = d
        {
            retries.store(attempt, std::sync::atomic::Ordering::Relaxed);
            if !quiet {
                eprintln!(
                    "  ! model request failed ({}); retry {attempt}",
                    crate::terminal::printable(&reason)
                );
            }
        }
    };
    let answer = match tokio::time::timeout(total, client.complete(&req, &mut on_delta)).await {
        Ok(a) => a,
        Err(_) => {
            let attempts = retries.load(std::sync::atomic::Ordering::Relaxed) + 1;
            let e = format!(
                "no answer within {timeout} s (`--timeout`), {}: the server accepts connections but does not answer",
                crate::terminal::count(attempts as usize, "attempt", "attempts")
            );
            if json {
                print_json(
                    &json!({ "ok": false, "provider": provider, "base_url": base, "model": model, "reason": "timeout", "error": e, "attempts": attempts }),
                );
            }
            anyhow::bail!("{provider} {model} at {base}: {e}");
        }
    };
    match answer {
        Ok(r) => {
            let latency_ms = r.latency.as_millis() as u64;
            if json {
                print_json(
                    &json!({ "ok": true, "provider": provider, "base_url": base, "model": model, "reported_model": r.model,
                    "latency_ms": latency_ms, "usage": r.usage, "reply": r.text, "attempts": r.attempts }),
                );
            } else {
                println!("ok: {provider} {model} at {base}");
                println!("latency {latency_ms} ms, {} attempt(s)", r.attempts);
                println!(
                    "tokens: input {}, cached input {}, cache write {}, output {}, reasoning {}",
                    r.usage.input,
                    r.usage.cached_input,
                    r.usage.cache_write,
                    r.usage.output,
                    r.usage.reasoning
                );
                println!("reply: {}", r.text.trim());
            }
            Ok(Outcome::Success)
        }
        Err(e) => {
            if json {
                print_json(
                    &json!({ "ok": false, "provider": provider, "base_url": base, "model": model, "reason": reason(&e), "error": e.to_string() }),
                );
            }
            Err(anyhow::anyhow!("{provider} {model} at {base}: {e}"))
        }
    }
}
