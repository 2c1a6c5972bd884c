//! `kiln llm check`: one tiny request to confirm the model is reachable and the key works.

use super::{Ctx, Outcome, print_json};
use crate::llm::{ChatRequest, LlmClient, LlmError, LlmFlags, LlmSettings, Message};
use clap::{Args, Subcommand};
use serde_json::json;

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
}

impl LlmArgs {
    /// Resolve settings from configuration, the process environment and these flags.
    pub fn settings(&self, config: &crate::config::Config) -> anyhow::Result<LlmSettings> {
        let flags = LlmFlags {
            provider: self.provider.clone(),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
        };
        let env = |k: &str| std::env::var(k).ok();
        let s = LlmSettings::resolve(&config.llm, &env, &flags, &mut |w| {
            eprintln!("warning: {w}")
        })?;
        Ok(s)
    }
}

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
    },
}

fn reason(e: &LlmError) -> &'static str {
    match e {
        LlmError::Unreachable { .. } => "unreachable",
        LlmError::Timeout { .. } => "timeout",
        LlmError::Auth { .. } => "bad_key",
        LlmError::NotFound { .. } => "unknown_model",
        LlmError::QuotaExhausted { .. } => "quota_exhausted",
        LlmError::ContextOverflow { .. } => "context_overflow",
        LlmError::Http { .. } => "http_error",
        LlmError::Truncated(_) | LlmError::Stream(_) | LlmError::Decode(_) => "bad_response",
    }
}

pub(crate) async fn run(ctx: &Ctx, cmd: LlmCommand) -> anyhow::Result<Outcome> {
    let LlmCommand::Check { llm, json } = cmd;
    let settings = llm.settings(&ctx.config)?;
    let (provider, model, base) = (
        settings.provider.name(),
        settings.model.clone(),
        settings.base_url.clone(),
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
    match client.complete(&req, &mut |_| {}).await {
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
