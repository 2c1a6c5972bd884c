//! LLM settings and their resolution: `[llm]` in the user config and `kiln.toml`, then the
//! environment, then flags (low to high). Temperature: explicit setting > `KILN_LLM_TEMPERATURE`
//! (`COMPILE_LOOP_LLM_TEMPERATURE` also honoured) > 0.0. API keys are held in [`Secret`], which
//! never prints its value.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, OpenRouter).
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// Parse a provider name.
    pub fn parse(s: &str) -> Option<Provider> {
        match s.to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" | "vllm" | "ollama" | "llamacpp" | "llama.cpp"
            | "openrouter" => Some(Provider::Openai),
            "anthropic" | "claude" => Some(Provider::Anthropic),
            _ => None,
        }
    }
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
        }
    }
}

/// A secret string (API key): `Debug` and `Display` print `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The password of `url`'s `user:password@`, if it has one: a secret like the API key
/// (reqwest sends it as basic authentication), never shown or recorded.
pub fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (userinfo, _) = authority.rsplit_once('@')?;
    userinfo
        .split_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty())
}

/// The values of `url`'s query (`?api-version=1&key=K` gives `1` and `K`; an entry without
/// `=` is a value): some gateways take the key there, so they are kept out of what is shown.
pub fn url_query_values(url: &str) -> Vec<&str> {
    let Some((_, rest)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = rest.split('#').next().unwrap_or("");
    query
        .split('&')
        .map(|kv| kv.split_once('=').map_or(kv, |(_, v)| v))
        .filter(|v| !v.is_empty())
        .collect()
}

/// `base` (no trailing `/` needed) with `path` (`/chat/completions`) joined onto its path,
/// before its query and fragment: `https://x/openai/v1?api-version=2024-02-01` gives
/// `https://x/openai/v1/chat/completions?api-version=2024-02-01`.
pub fn join_url(base: &str, path: &str) -> String {
    let (head, tail) = base.split_at(base.find(['?', '#']).unwrap_or(base.len()));
    format!("{}{path}{tail}", head.trim_end_matches('/'))
}

/// `url` as kiln shows and records it: the password of its `user:password@` replaced by
/// `***` (`http://alice:***@proxy/v1`), and so is each value of its query
/// (`?api-version=***&key=***`).
pub fn shown_url(url: &str) -> String {
    let url = match url_password(url) {
        Some(p) => url.replacen(&format!(":{p}@"), ":***@", 1),
        None => url.to_string(),
    };
    let Some((head, rest)) = url.split_once('?') else {
        return url;
    };
    let (query, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !v.is_empty() => format!("{k}=***"),
            Some(_) => kv.to_string(),
            None if kv.is_empty() => String::new(),
            None => "***".to_string(),
        })
        .collect();
    format!("{head}?{}{fragment}", query.join("&"))
}

/// Output token limit when nothing sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// First-byte timeout, seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Connect timeout, seconds.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 10;
/// Idle timeout of a stream, seconds.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 60;
/// Retries after the first attempt.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Retries of a broken stream.
pub const DEFAULT_STREAM_MAX_RETRIES: u32 = 5;
/// The most text one model reply may carry (content, tool-call arguments and reasoning
/// together): 4 MiB.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 4 << 20;

/// `[llm]` as written in a configuration file; every field optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// `openai` or `anthropic`.
    pub provider: Option<String>,
    /// Base URL (`https://api.openai.com/v1`, `http://localhost:8000/v1`, ...).
    pub base_url: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// The key itself (prefer `api_key_env`).
    pub api_key: Option<String>,
    /// Name of the environment variable holding the key.
    pub api_key_env: Option<String>,
    /// Output token limit.
    pub max_tokens: Option<u32>,
    /// First-byte and idle timeout in seconds.
    pub timeout_secs: Option<u64>,
    /// Connect timeout in seconds.
    pub connect_timeout_secs: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Do not send a temperature (for models that reject it).
    pub omit_temperature: Option<bool>,
    /// Ask the backend not to think (Qwen-style reasoning models).
    pub disable_thinking: Option<bool>,
    /// Retries after the first attempt.
    pub max_retries: Option<u32>,
    /// Retries of a stream that broke, stalled or sent a malformed chunk (default 5).
    pub stream_max_retries: Option<u32>,
    /// Seconds without a byte of a streamed answer before it counts as stalled (default 60).
    pub idle_timeout_secs: Option<u64>,
    /// Use streaming (default true).
    pub stream: Option<bool>,
    /// The most text one reply may carry, in bytes (content, tool-call arguments and
    /// reasoning together; default 4 MiB). Past it the request fails and is not retried.
    pub max_reply_bytes: Option<u64>,
}

impl LlmConfig {
    /// Layer `over` on top of `self`.
    pub fn merge(&mut self, over: LlmConfig) {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f; } )* };
        }
        take!(
            provider,
            base_url,
            model,
            api_key,
            api_key_env,
            max_tokens,
            timeout_secs,
            connect_timeout_secs,
            temperature,
            omit_temperature,
            disable_thinking,
            max_retries,
            stream_max_retries,
            idle_timeout_secs,
            stream,
            max_reply_bytes
        );
    }
}

/// Which OpenAI-compatible server is behind a base URL (for `disable_thinking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// api.openai.com.
    Openai,
    /// Ollama (port 11434 or "ollama" in the URL).
    Ollama,
    /// OpenRouter.
    Openrouter,
    /// vLLM, llama.cpp server and other self-hosted servers.
    SelfHosted,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// The wire dialect (OpenAI-compatible or Anthropic).
    pub provider: Provider,
    /// Base URL without a trailing slash.
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// API key, if any (local servers need none).
    pub api_key: Option<Secret>,
    /// Output token limit.
    pub max_tokens: u32,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time allowed until the response headers (and a non-streamed body).
    pub timeout: Duration,
    /// Time allowed between chunks of a streamed answer; a stall is retried.
    pub idle_timeout: Duration,
    /// Temperature to send; `None` omits it.
    pub temperature: Option<f64>,
    /// See [`LlmConfig::disable_thinking`].
    pub disable_thinking: bool,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Retries of a stream that broke, stalled or sent a malformed chunk (even after text
    /// reached the caller: it is told to discard it with [`super::Delta::Retry`]).
    pub stream_max_retries: u32,
    /// First backoff delay.
    pub retry_base: Duration,
    /// Use streaming.
    pub stream: bool,
    /// The most text one reply may carry, in bytes (see [`LlmConfig::max_reply_bytes`]).
    pub max_reply_bytes: u64,
}

/// A setting is missing or malformed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Flags that override configuration and environment.
#[derive(Debug, Clone, Default)]
pub struct LlmFlags {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--max-reply-bytes`.
    pub max_reply_bytes: Option<u64>,
    /// The user's configuration file (`KILN_CONFIG`, else under `XDG_CONFIG_HOME` or
    /// `~/.config`), named in messages that send the user there.
    pub user_config: Option<std::path::PathBuf>,
}

/// The API key: the variable `[llm] api_key_env` names (which must be set), else `[llm]
/// api_key`, else the provider's usual variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
fn api_key(
    config: &LlmConfig,
    env: &dyn Fn(&str) -> Option<String>,
    provider: Provider,
) -> Result<Option<Secret>, SettingsError> {
    let key_env_default = match provider {
        Provider::Openai => "OPENAI_API_KEY",
        Provider::Anthropic => "ANTHROPIC_API_KEY",
    };
    Ok(match (&config.api_key_env, &config.api_key) {
        (Some(var), _) => match env(var) {
            Some(v) if !v.is_empty() => Some(Secret::new(v)),
            _ => {
                return Err(SettingsError(format!(
                    "[llm] api_key_env names `{var}`, but that environment variable is not set"
                )));
            }
        },
        (None, Some(k)) => Some(Secret::new(k.clone())),
        (None, None) => env(key_env_default)
            .filter(|v| !v.is_empty())
            .map(Secret::new),
    })
}

/// The temperature: none with `omit_temperature`, else `[llm] temperature`, else
/// `KILN_LLM_TEMPERATURE` (or the older `COMPILE_LOOP_LLM_TEMPERATURE`), else 0.0; a variable
/// that is not a number is warned about and read as 0.0.
fn temperature(
    config: &LlmConfig,
    env: &dyn Fn(&str) -> Option<String>,
    warn: &mut dyn FnMut(String),
) -> Option<f64> {
    if config.omit_temperature == Some(true) {
        return None;
    }
    if let Some(t) = config.temperature {
        return Some(t);
    }
    let from_env = env("KILN_LLM_TEMPERATURE")
        .map(|v| ("KILN_LLM_TEMPERATURE", v))
        .or_else(|| {
            env("COMPILE_LOOP_LLM_TEMPERATURE").map(|v| ("COMPILE_LOOP_LLM_TEMPERATURE", v))
        });
    match from_env {
        Some((name, v)) => match v.trim().parse::<f64>() {
            Ok(t) if t.is_finite() => Some(t),
            _ => {
                warn(format!(
                    "{name}={v:?} is not a number; using temperature 0.0"
                ));
                Some(0.0)
            }
        },
        None => Some(0.0),
    }
}

/// The reply size limit: `--max-reply-bytes`, else `KILN_MAX_REPLY_BYTES`, else `[llm]
/// max_reply_bytes`, else 4 MiB; never zero.
fn max_reply_bytes(
    config: &LlmConfig,
    env: &dyn Fn(&str) -> Option<String>,
    flags: &LlmFlags,
) -> Result<u64, SettingsError> {
    let n = match flags.max_reply_bytes {
        Some(n) => n,
        None => match env("KILN_MAX_REPLY_BYTES") {
            Some(v) => v.trim().parse::<u64>().map_err(|_| {
                SettingsError(format!(
                    "KILN_MAX_REPLY_BYTES={v:?} is not a number of bytes"
                ))
            })?,
            None => config.max_reply_bytes.unwrap_or(DEFAULT_MAX_REPLY_BYTES),
        },
    };
    if n == 0 {
        return Err(SettingsError(
            "max_reply_bytes must be greater than zero".into(),
        ));
    }
    Ok(n)
}

impl LlmSettings {
    /// Resolve: configuration < environment (`env` is a lookup so tests can inject) < flags.
    pub fn resolve(
        config: &LlmConfig,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &LlmFlags,
        warn: &mut dyn FnMut(String),
    ) -> Result<LlmSettings, SettingsError> {
        let provider_name = flags
            .provider
            .clone()
            .or_else(|| env("KILN_PROVIDER"))
            .or(config.provider.clone())
            .unwrap_or_else(|| "openai".into());
        let provider = Provider::parse(&provider_name)
            .ok_or_else(|| SettingsError(format!("unknown LLM provider `{provider_name}`: use `openai` (any OpenAI-compatible server) or `anthropic`")))?;
        let default_base = match provider {
            Provider::Openai => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com",
        };
        let base_url = flags
            .base_url
            .clone()
            .or_else(|| env("KILN_BASE_URL"))
            .or(config.base_url.clone())
            .unwrap_or_else(|| default_base.into());
        let base_url = base_url.trim_end_matches('/').to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(SettingsError(format!(
                "LLM base URL `{base_url}` must start with http:// or https://"
            )));
        }
        let model = flags.model.clone().or_else(|| env("KILN_MODEL")).or(config.model.clone()).ok_or_else(|| {
            SettingsError(format!(
                "no model configured: pass --model, set KILN_MODEL, or set `model` under [llm] in your user config ({}a workspace's kiln.toml counts only once you trust it with `kiln trust`)",
                flags
                    .user_config
                    .as_ref()
                    .map(|p| format!("{}; ", p.display()))
                    .unwrap_or_default()
            ))
        })?;
        let api_key = api_key(config, env, provider)?;
        let temperature = temperature(config, env, warn);
        let max_reply_bytes = max_reply_bytes(config, env, flags)?;
        Ok(LlmSettings {
            provider,
            base_url,
            model,
            api_key,
            max_tokens: config.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            connect_timeout: Duration::from_secs(
                config
                    .connect_timeout_secs
                    .unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECS),
            ),
            timeout: Duration::from_secs(config.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            idle_timeout: Duration::from_secs(
                config
                    .idle_timeout_secs
                    .unwrap_or(DEFAULT_IDLE_TIMEOUT_SECS),
            ),
            temperature,
            disable_thinking: config.disable_thinking.unwrap_or(false),
            max_retries: config.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            stream_max_retries: config
                .stream_max_retries
                .unwrap_or(DEFAULT_STREAM_MAX_RETRIES),
            retry_base: Duration::from_millis(500),
            stream: config.stream.unwrap_or(true),
            max_reply_bytes,
        })
    }

    /// Guess the server behind an OpenAI-compatible base URL.
    pub fn flavor(&self) -> Flavor {
        let u = self.base_url.to_ascii_lowercase();
        if u.contains("api.openai.com") {
            Flavor::Openai
        } else if u.contains("openrouter.ai") {
            Flavor::Openrouter
        } else if u.contains(":11434") || u.contains("ollama") {
            Flavor::Ollama
        } else {
            Flavor::SelfHosted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        cfg: LlmConfig,
        env: &[(&str, &str)],
        flags: LlmFlags,
    ) -> (Result<LlmSettings, SettingsError>, Vec<String>) {
        let map: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut warnings = Vec::new();
        let r = LlmSettings::resolve(&cfg, &|k| map.get(k).cloned(), &flags, &mut |w| {
            warnings.push(w)
        });
        (r, warnings)
    }

    #[test]
    fn precedence_config_env_flags() {
        let cfg = LlmConfig {
            model: Some("cfg-model".into()),
            base_url: Some("http://cfg/v1/".into()),
            ..Default::default()
        };
        let (s, _) = resolve(
            cfg.clone(),
            &[("KILN_MODEL", "env-model")],
            LlmFlags::default(),
        );
        let s = s.unwrap();
        assert_eq!(
            (s.model.as_str(), s.base_url.as_str()),
            ("env-model", "http://cfg/v1")
        );
        let (s, _) = resolve(
            cfg,
            &[("KILN_MODEL", "env-model")],
            LlmFlags {
                model: Some("flag-model".into()),
                ..Default::default()
            },
        );
        assert_eq!(s.unwrap().model, "flag-model");
    }

    #[test]
    fn temperature_precedence_and_bad_env() {
        let base = LlmConfig {
            model: Some("m".into()),
            ..Default::default()
        };
        let (s, _) = resolve(base.clone(), &[], LlmFlags::default());
        assert_eq!(s.unwrap().temperature, Some(0.0));
        let (s, _) = resolve(
            base.clone(),
            &[("COMPILE_LOOP_LLM_TEMPERATURE", "0.4")],
            LlmFlags::default(),
        );
        assert_eq!(s.unwrap().temperature, Some(0.4));
        let (s, _) = resolve(
            base.clone(),
            &[
                ("KILN_LLM_TEMPERATURE", "0.7"),
                ("COMPILE_LOOP_LLM_TEMPERATURE", "0.4"),
            ],
            LlmFlags::default(),
        );
        assert_eq!(s.unwrap().temperature, Some(0.7));
        let (s, w) = resolve(
            base.clone(),
            &[("KILN_LLM_TEMPERATURE", "warm")],
            LlmFlags::default(),
        );
        assert_eq!(s.unwrap().temperature, Some(0.0));
        assert!(w[0].contains("not a number"));
        let explicit = LlmConfig {
            temperature: Some(0.2),
            ..base.clone()
        };
        let (s, _) = resolve(
            explicit,
            &[("KILN_LLM_TEMPERATURE", "0.7")],
            LlmFlags::default(),
        );
        assert_eq!(s.unwrap().temperature, Some(0.2));
        let omit = LlmConfig {
            omit_temperature: Some(true),
            ..base
        };
        assert_eq!(
            resolve(omit, &[], LlmFlags::default())
                .0
                .unwrap()
                .temperature,
            None
        );
    }

    #[test]
    fn keys_and_errors() {
        let cfg = LlmConfig {
            model: Some("m".into()),
            provider: Some("anthropic".into()),
            ..Default::default()
        };
        let (s, _) = resolve(
            cfg.clone(),
            &[
                ("ANTHROPIC_API_KEY", "sk-ant-1"),
                ("OPENAI_API_KEY", "sk-oa"),
            ],
            LlmFlags::default(),
        );
        let s = s.unwrap();
        assert_eq!(s.api_key.as_ref().unwrap().expose(), "sk-ant-1");
        assert_eq!(
            format!("{s:?}").matches("sk-ant-1").count(),
            0,
            "Debug never shows the key"
        );
        let with_env = LlmConfig {
            api_key_env: Some("MY_KEY".into()),
            ..cfg
        };
        assert!(
            resolve(with_env, &[], LlmFlags::default())
                .0
                .unwrap_err()
                .0
                .contains("MY_KEY")
        );
        assert!(
            resolve(LlmConfig::default(), &[], LlmFlags::default())
                .0
                .unwrap_err()
                .0
                .contains("no model configured")
        );
        let bad = LlmConfig {
            model: Some("m".into()),
            provider: Some("gemini".into()),
            ..Default::default()
        };
        assert!(
            resolve(bad, &[], LlmFlags::default())
                .0
                .unwrap_err()
                .0
                .contains("unknown LLM provider `gemini`")
        );
    }
}
