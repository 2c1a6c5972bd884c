//! kiln-llm, the LLM transport: provider-neutral request/response types, the client (timeouts,
//! retries with backoff honouring `retry-after-ms`/`retry-after`, streaming), and typed
//! errors. One file per wire dialect (`openai`, `anthropic`); SSE decoding in `sse`; prices
//! in `pricing`. API keys are [`Secret`]s and are scrubbed from every error message.
//!
//! It depends on `kiln-protocol` only (messages, tool calls, usage). It must never import the
//! engine, the store, the plugin runtime or the CLI: a loop asks a model through this crate,
//! never the other way round.

mod anthropic;
mod openai;
pub mod pricing;
pub mod retry;
pub mod settings;
pub mod sse;
mod types;

pub use settings::{
    LlmConfig, LlmFlags, LlmSettings, Provider, Secret, join_url, shown_url, url_password,
    url_query_values,
};
pub use types::{
    ChatRequest, ChatResponse, Delta, LlmError, Message, ToolCall, ToolDef, Usage, classify_error,
};

use types::{Assembler, ReplyBytes};

use futures_util::StreamExt;
use std::time::{Duration, Instant};

/// The client: one reqwest client and the resolved settings.
pub struct LlmClient {
    http: reqwest::Client,
    settings: LlmSettings,
}

/// The most bytes kept of an HTTP error body (only its message is used).
const ERROR_BODY_MAX: usize = 64 << 10;

/// The most raw bytes read for a reply whose text may be `text_cap` bytes: JSON can escape a
/// byte as six (`\u001b`), plus room for the envelope.
fn raw_cap(text_cap: u64) -> usize {
    usize::try_from(text_cap.saturating_mul(6).saturating_add(64 << 10)).unwrap_or(usize::MAX)
}

/// Why a capped body read stopped.
enum BodyError {
    /// More than the cap arrived.
    TooLarge,
    /// The connection failed.
    Broken(String),
}

/// Read a body, at most `cap` bytes: memory stays bounded, whatever the server sends.
async fn read_capped(resp: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if body.len() + c.len() > cap {
                    return Err(BodyError::TooLarge);
                }
                body.extend_from_slice(&c);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(BodyError::Broken(root_cause(&e))),
        }
    }
}

/// The reply of a complete answer as [`Assembler::reply_bytes`] counts it: content and each
/// tool call's id, name and arguments.
fn reply_bytes(r: &ChatResponse) -> usize {
    r.text.len()
        + r.tool_calls
            .iter()
            .map(ToolCall::reply_bytes)
            .sum::<usize>()
}

impl LlmClient {
    /// Build a client.
    pub fn new(settings: LlmSettings) -> Result<LlmClient, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .user_agent(concat!("kiln/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Unreachable {
                url: settings::shown_url(&settings.base_url),
                message: e.to_string(),
            })?;
        Ok(LlmClient { http, settings })
    }

    /// The settings the client was built with.
    pub fn settings(&self) -> &LlmSettings {
        &self.settings
    }

    fn url(&self) -> String {
        match self.settings.provider {
            Provider::Openai => settings::join_url(&self.settings.base_url, "/chat/completions"),
            Provider::Anthropic => settings::join_url(&self.settings.base_url, "/v1/messages"),
        }
    }

    /// Ask for one answer. Streaming deltas go to `sink`. Failures before the answer starts
    /// (HTTP 408/409/429/5xx, unreachable, first-byte timeout) are retried up to
    /// `max_retries`; a stream that breaks, stalls or sends a malformed chunk is retried up to
    /// `stream_max_retries`, even after text reached the caller: each retry is announced
    /// with [`Delta::Retry`] so the caller discards what it showed. A cut stream is never
    /// accepted as a complete answer. Dropping the future cancels the request.
    pub async fn complete(
        &self,
        req: &ChatRequest,
        sink: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ChatResponse, LlmError> {
        let start = Instant::now();
        let (mut request_retries, mut stream_retries) = (0u32, 0u32);
        loop {
            let mut delivered = false;
            let mut tracking = |d: Delta| {
                delivered = true;
                sink(d)
            };
            let result = self.attempt(req, &mut tracking).await;
            let (e, wait) = match result {
                Ok(mut r) => {
                    r.latency = start.elapsed();
                    r.attempts = request_retries + stream_retries + 1;
                    return Ok(r);
                }
                Err((e, wait)) => (
                    e.scrub(self.settings.api_key.as_ref(), &self.settings.base_url),
                    wait,
                ),
            };
            let budget_left = if e.is_broken_stream() {
                stream_retries < self.settings.stream_max_retries
            } else {
                !delivered && e.retryable() && request_retries < self.settings.max_retries
            };
            if !budget_left {
                return Err(e);
            }
            let attempt = if e.is_broken_stream() {
                stream_retries += 1;
                stream_retries
            } else {
                request_retries += 1;
                request_retries
            };
            sink(Delta::Retry {
                attempt: request_retries + stream_retries,
                reason: e.to_string(),
                discard: delivered,
            });
            let delay = wait.unwrap_or_else(|| {
                retry::backoff(
                    attempt - 1,
                    self.settings.retry_base,
                    Duration::from_secs(30),
                )
            });
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt; on failure also the delay the server asked for.
    async fn attempt(
        &self,
        req: &ChatRequest,
        sink: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ChatResponse, Failure> {
        let mut resp = self.send(req).await?;
        let ctype = content_type(&resp);
        let expected = if self.settings.stream {
            "an event stream"
        } else {
            "a JSON answer"
        };
        // An HTML page is never an answer, whatever was asked: say what came, not that it
        // failed to parse.
        if ctype.as_deref().is_some_and(|t| t.starts_with("text/html")) {
            let start = tokio::time::timeout(self.settings.timeout, read_capped(&mut resp, 4096))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            return Err((self.not_an_answer(ctype, expected, &start), None));
        }
        // A server asked to stream that answers with one JSON body (some proxies and local
        // servers ignore `stream`): take the answer as it is.
        let json_body = ctype.as_deref().is_some_and(is_json_type);
        if !self.settings.stream || json_body {
            return self.read_whole(resp, ctype).await;
        }
        self.read_stream(resp, ctype, sink).await
    }

    /// The error for a 200 answer of content type `ctype` whose body (beginning with
    /// `start`) is not `expected`.
    fn not_an_answer(
        &self,
        ctype: Option<String>,
        expected: &'static str,
        start: &[u8],
    ) -> LlmError {
        let text: String = String::from_utf8_lossy(start)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(120)
            .collect();
        LlmError::NotAnAnswer {
            content_type: ctype.unwrap_or_else(|| "no content type".into()),
            expected,
            url: self.url(),
            preview: if text.is_empty() {
                String::new()
            } else {
                format!(
                    "; it begins \"{}\"",
                    kiln_protocol::terminal::printable(&text)
                )
            },
        }
    }

    /// Send the request and wait for the response's head; an HTTP error status is a failure
    /// (with the delay the server asked for).
    async fn send(&self, req: &ChatRequest) -> Result<reqwest::Response, Failure> {
        let s = &self.settings;
        let url = self.url();
        let body = match s.provider {
            Provider::Openai => openai::body(s, req),
            Provider::Anthropic => anthropic::body(s, req),
        };
        let mut rb = self.http.post(&url).json(&body);
        rb = match (s.provider, &s.api_key) {
            (Provider::Openai, Some(k)) => rb.bearer_auth(k.expose()),
            (Provider::Anthropic, Some(k)) => rb.header("x-api-key", k.expose()),
            _ => rb,
        };
        if s.provider == Provider::Anthropic {
            rb = rb.header("anthropic-version", "2023-06-01");
        }
        let secs = s.timeout.as_secs();
        let resp = match tokio::time::timeout(s.timeout, rb.send()).await {
            Err(_) => {
                return Err((
                    LlmError::Timeout {
                        phase: "first byte",
                        secs,
                    },
                    None,
                ));
            }
            Ok(Err(e)) if e.is_connect() && refused(&e) => {
                return Err((LlmError::Refused { url: url.clone() }, None));
            }
            Ok(Err(e)) if e.is_connect() => {
                return Err((
                    LlmError::Unreachable {
                        url: url.clone(),
                        message: root_cause(&e),
                    },
                    None,
                ));
            }
            Ok(Err(e)) if e.is_timeout() => {
                return Err((
                    LlmError::Timeout {
                        phase: "connect",
                        secs: s.connect_timeout.as_secs(),
                    },
                    None,
                ));
            }
            Ok(Err(e)) => {
                return Err((
                    LlmError::Unreachable {
                        url: url.clone(),
                        message: root_cause(&e),
                    },
                    None,
                ));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        if status >= 400 {
            let wait = retry::server_delay(resp.headers());
            let mut resp = resp;
            let text = match tokio::time::timeout(s.timeout, read_capped(&mut resp, ERROR_BODY_MAX))
                .await
            {
                Ok(Ok(b)) => String::from_utf8_lossy(&b).into_owned(),
                _ => String::new(),
            };
            return Err((classify_error(status, &text), wait));
        }
        Ok(resp)
    }

    /// Read a whole (non-streaming) answer.
    /// Read a whole (non-streaming) answer, at most [`raw_cap`] bytes of body and
    /// `max_reply_bytes` of text.
    async fn read_whole(
        &self,
        mut resp: reqwest::Response,
        ctype: Option<String>,
    ) -> Result<ChatResponse, Failure> {
        let s = &self.settings;
        let too_large = || {
            (
                LlmError::ReplyTooLarge {
                    limit: s.max_reply_bytes,
                },
                None,
            )
        };
        let body = match tokio::time::timeout(
            s.timeout,
            read_capped(&mut resp, raw_cap(s.max_reply_bytes)),
        )
        .await
        {
            Err(_) => {
                return Err((
                    LlmError::Timeout {
                        phase: "idle",
                        secs: s.timeout.as_secs(),
                    },
                    None,
                ));
            }
            Ok(Err(BodyError::TooLarge)) => return Err(too_large()),
            Ok(Err(BodyError::Broken(why))) => return Err((LlmError::Truncated(why), None)),
            Ok(Ok(b)) => b,
        };
        drop(resp);
        let v: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            // Not JSON and not labelled JSON: some other page, named as such.
            Err(_) if !ctype.as_deref().is_some_and(is_json_type) => {
                return Err((self.not_an_answer(ctype, "a JSON answer", &body), None));
            }
            Err(e) => {
                return Err((
                    LlmError::Decode(format!("response body is not JSON: {e}")),
                    None,
                ));
            }
        };
        drop(body);
        let r = match s.provider {
            Provider::Openai => openai::parse_full(&v),
            Provider::Anthropic => anthropic::parse_full(&v),
        };
        let r = r.map_err(|e| (e, None))?;
        if reply_bytes(&r) as u64 > s.max_reply_bytes {
            return Err(too_large());
        }
        Ok(r)
    }

    /// Read a streamed answer, passing deltas to `sink`; a stream that stalls, breaks or ends
    /// before the answer is complete is a failure.
    async fn read_stream(
        &self,
        resp: reqwest::Response,
        ctype: Option<String>,
        sink: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ChatResponse, Failure> {
        let s = &self.settings;
        let mut asm: Box<dyn Assembler> = match s.provider {
            Provider::Openai => Box::new(openai::StreamAssembler::new(s.max_reply_bytes)),
            Provider::Anthropic => Box::new(anthropic::StreamAssembler::new(s.max_reply_bytes)),
        };
        let too_large = || {
            (
                LlmError::ReplyTooLarge {
                    limit: s.max_reply_bytes,
                },
                None,
            )
        };
        let mut decoder = sse::Decoder::default();
        let mut stream = resp.bytes_stream();
        let mut done = false;
        // Whether any event arrived, and the first bytes (to name a body that is no stream).
        let mut any_event = false;
        let mut start: Vec<u8> = Vec::new();
        while !done {
            let chunk = match tokio::time::timeout(s.idle_timeout, stream.next()).await {
                Err(_) => {
                    return Err((
                        LlmError::Timeout {
                            phase: "idle",
                            secs: s.idle_timeout.as_secs(),
                        },
                        None,
                    ));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err((
                        LlmError::Truncated(format!("connection broke: {}", root_cause(&e))),
                        None,
                    ));
                }
                Ok(Some(Ok(c))) => c,
            };
            if start.len() < 512 {
                start.extend_from_slice(&chunk[..chunk.len().min(512 - start.len())]);
            }
            for ev in decoder.push(&chunk) {
                any_event = true;
                if asm.event(&ev, sink).map_err(|e| (e, None))? {
                    done = true;
                    break;
                }
                if asm.reply_bytes() as u64 > s.max_reply_bytes {
                    return Err(too_large());
                }
            }
            // One event that never ends (no blank line, no newline) is held whole: cap it too.
            if decoder.pending_bytes() > raw_cap(s.max_reply_bytes) {
                return Err(too_large());
            }
        }
        if !done {
            let last = decoder.finish();
            // A body with no event at all, sent as something other than an event stream, is
            // not a stream cut short: name what it is.
            let sse_type = ctype
                .as_deref()
                .is_some_and(|t| t.starts_with("text/event-stream"));
            if !any_event && last.is_none() && !sse_type {
                return Err((self.not_an_answer(ctype, "an event stream", &start), None));
            }
            let complete = match last {
                Some(ev) => asm.event(&ev, sink).map_err(|e| (e, None))?,
                None => false,
            };
            if asm.reply_bytes() as u64 > s.max_reply_bytes {
                return Err(too_large());
            }
            if !complete {
                return Err((LlmError::Truncated(asm.missing()), None));
            }
        }
        Ok(asm.finish())
    }
}

/// The response's media type, lowercased, without parameters (`text/html`).
fn content_type(resp: &reqwest::Response) -> Option<String> {
    let v = resp.headers().get(reqwest::header::CONTENT_TYPE)?;
    let t = v.to_str().ok()?;
    let t = t
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    (!t.is_empty()).then_some(t)
}

/// `application/json` or a `+json` type.
fn is_json_type(t: &str) -> bool {
    t == "application/json" || t.ends_with("+json")
}

/// A failed attempt: the error and the delay the server asked for, if any.
type Failure = (LlmError, Option<Duration>);

/// Whether a connection failed because nothing listens there (ECONNREFUSED).
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        msg = format!("{msg}: {s}");
        cur = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes_are_classified() {
        let e = classify_error(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert!(matches!(e, LlmError::ContextOverflow { .. }), "{e}");
        let e = classify_error(
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}"#,
        );
        assert!(
            matches!(e, LlmError::ContextOverflow { .. }),
            "vLLM integer code: {e}"
        );
        let e = classify_error(
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
        );
        assert!(
            matches!(e, LlmError::ContextOverflow { .. }),
            "llama.cpp: {e}"
        );
        let e = classify_error(404, r#"{"error":"model 'qwen9' not found"}"#);
        assert!(
            matches!(&e, LlmError::NotFound { message } if message.contains("qwen9")),
            "ollama: {e}"
        );
        let e = classify_error(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        );
        assert!(matches!(e, LlmError::QuotaExhausted { .. }));
        let e = classify_error(
            429,
            r#"{"error":{"code":429,"message":"Rate limit exceeded","metadata":{}}}"#,
        );
        assert!(e.retryable(), "openrouter rate limit: {e}");
        let e = classify_error(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert!(
            matches!(&e, LlmError::Http { status: 529, retryable: true, message } if message == "Overloaded")
        );
        let e = classify_error(502, "<html>bad gateway</html>");
        assert!(matches!(&e, LlmError::Http { message, .. } if message.contains("bad gateway")));
        let e = classify_error(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc"}}"#,
        )
        .scrub(Some(&Secret::new("sk-abc")), "https://api.openai.com/v1");
        assert!(
            matches!(&e, LlmError::Auth { message, .. } if !message.contains("sk-abc") && message.contains("[redacted]"))
        );
    }

    #[test]
    fn a_base_url_query_stays_after_the_path_and_its_values_are_never_shown() {
        let base = "https://x/openai/v1?api-version=2024-02-01&key=QK-SECRET";
        assert_eq!(
            settings::join_url(base, "/chat/completions"),
            "https://x/openai/v1/chat/completions?api-version=2024-02-01&key=QK-SECRET"
        );
        assert_eq!(
            settings::join_url("https://x/v1", "/chat/completions"),
            "https://x/v1/chat/completions"
        );
        assert_eq!(
            settings::shown_url("http://bob:pw@x/v1?api-version=2024-02-01&key=QK-SECRET&flag"),
            "http://bob:***@x/v1?api-version=***&key=***&***"
        );
        let e = LlmError::Refused {
            url: settings::join_url(base, "/chat/completions"),
        }
        .scrub(None, base);
        let shown = e.to_string();
        assert!(!shown.contains("QK-SECRET"), "{shown}");
        assert!(
            shown.contains("/v1/chat/completions?api-version=***&key=***"),
            "{shown}"
        );
    }

    #[test]
    fn a_base_url_password_is_scrubbed_and_shown_as_stars() {
        let url = "http://alice:pa55w0rd@proxy:8080/v1";
        assert_eq!(settings::url_password(url), Some("pa55w0rd"));
        assert_eq!(settings::shown_url(url), "http://alice:***@proxy:8080/v1");
        assert_eq!(settings::url_password("http://alice@proxy/v1"), None);
        assert_eq!(
            settings::shown_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1"
        );
        let e = LlmError::Refused {
            url: format!("{url}/chat/completions"),
        }
        .scrub(None, url);
        assert!(
            e.to_string()
                .contains("alice:***@proxy:8080/v1/chat/completions"),
            "{e}"
        );
        let e = classify_error(401, "bad password pa55w0rd").scrub(None, url);
        assert!(!e.to_string().contains("pa55w0rd"), "{e}");
    }
}
