//! `kiln llm check`: one tiny request to confirm the model is reachable and the key works.

use super::ctx::{Ctx, Outcome};
use super::llm_args::LlmArgs;
use super::output::print_json;
use crate::llm::{ChatRequest, LlmClient, LlmError, Message};
use clap::Subcommand;
use serde_json::json;

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
