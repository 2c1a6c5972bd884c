//! The provider-neutral request/response types, the typed errors and how an HTTP error
//! is classified, and what a dialect's stream assembler must do.

use super::settings::Secret;
use super::{retry, sse};
use serde::Serialize;

pub use kiln_protocol::chat::{ChatResponse, Message, ToolCall, Usage};

/// A tool the model may call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolDef {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One request to the model: system prompt, conversation, tools and output limit.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// System prompt.
    pub system: Option<String>,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolDef>,
    /// Override of the settings' max tokens.
    pub max_tokens: Option<u32>,
}

/// Streaming progress delivered to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// More text.
    Text(String),
    /// A tool call started.
    ToolCall {
        /// Tool name.
        name: String,
    },
    /// The attempt failed and another starts: text streamed so far is void.
    Retry {
        /// The retry about to start (1 = the first retry).
        attempt: u32,
        /// Why the last attempt failed.
        reason: String,
        /// Whether text of the failed attempt had reached the caller (and must be discarded).
        discard: bool,
    },
}

/// Transport errors, each saying what the caller can do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// Connection failed (DNS, refused, TLS).
    #[error("cannot reach the LLM at {url}: {message}")]
    Unreachable {
        /// The URL that could not be reached.
        url: String,
        /// The transport's error.
        message: String,
    },
    /// Nothing listens at the address: not retried (a server that is down stays down for
    /// the seconds retries would wait).
    #[error(
        "nothing answers at {url} (connection refused): is the server running, and is the base URL (`--base-url`, `[llm] base_url`) right?"
    )]
    Refused {
        /// The URL that refused the connection.
        url: String,
    },
    /// No response headers, or no stream data, in time.
    #[error("the LLM did not answer in time ({phase} timeout of {secs} s)")]
    Timeout {
        /// `connect`, `first byte` or `idle`.
        phase: &'static str,
        /// The timeout that passed, in seconds.
        secs: u64,
    },
    /// 401/403: bad or missing key.
    #[error("the LLM rejected the credentials (HTTP {status}): {message}")]
    Auth {
        /// The HTTP status (401 or 403).
        status: u16,
        /// Server message.
        message: String,
    },
    /// 404: unknown model or wrong base URL.
    #[error("model or endpoint not found (HTTP 404): {message}")]
    NotFound {
        /// Server message.
        message: String,
    },
    /// 429 `insufficient_quota`: permanent until the account is topped up.
    #[error("the API quota is exhausted: {message}")]
    QuotaExhausted {
        /// Server message.
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("the conversation exceeds the model's context window: {message}")]
    ContextOverflow {
        /// Server message.
        message: String,
    },
    /// Any other HTTP error.
    #[error("the LLM answered HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// Server message (the body as text when it is not a known shape).
        message: String,
        /// Worth retrying (408, 409, 429, 5xx, 529).
        retryable: bool,
    },
    /// The stream ended without its finish marker.
    #[error("the LLM stream ended before the answer was complete ({0})")]
    Truncated(String),
    /// An error event inside a 200 stream.
    #[error("the LLM stream reported an error: {0}")]
    Stream(String),
    /// A body or chunk that is not what the dialect promises.
    #[error("the LLM sent something kiln cannot read: {0}")]
    Decode(String),
    /// A reply that breaks its dialect's rules in a way no retry mends (a tool-call index far
    /// past the calls so far): not retried.
    #[error("the LLM's reply breaks the {dialect} protocol: {message}")]
    Protocol {
        /// `OpenAI` or `Anthropic`.
        dialect: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A successful answer whose body is not what was asked for: an HTML page (a web server,
    /// a proxy's login page, a base URL without `/v1`) or some other text that is neither an
    /// event stream nor JSON. Not retried: the same address sends the same page.
    #[error(
        "the server sent {content_type}, not {expected}: check `--base-url` (`[llm] base_url`; it is {url}){preview}"
    )]
    NotAnAnswer {
        /// The response's content type (`text/html`, or `no content type`).
        content_type: String,
        /// `an event stream` or `a JSON answer`.
        expected: &'static str,
        /// The URL asked.
        url: String,
        /// The start of the body, for a person (`: it begins "<!DOCTYPE html>..."`), or empty.
        preview: String,
    },
    /// The reply carried more text than `max_reply_bytes` allows; kiln stopped reading it.
    #[error(
        "the model's reply passed the size cap of {limit} bytes (`max_reply_bytes`), so kiln stopped reading it; if a reply this large is expected, raise `max_reply_bytes` under [llm] in your user configuration or pass --max-reply-bytes"
    )]
    ReplyTooLarge {
        /// The cap, bytes.
        limit: u64,
    },
}

impl LlmError {
    /// Whether another attempt may succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            LlmError::Http {
                retryable: true,
                ..
            } | LlmError::Unreachable { .. }
                | LlmError::Timeout { .. }
        )
    }

    /// A streamed answer that broke off, stalled or could not be read: worth asking again
    /// (bounded by `stream_max_retries`), never an answer.
    pub fn is_broken_stream(&self) -> bool {
        matches!(
            self,
            LlmError::Truncated(_) | LlmError::Decode(_) | LlmError::Timeout { phase: "idle", .. }
        )
    }

    /// The error with the API `key`, the password of `base_url`'s `user:password@` and the
    /// values of its query taken out of every text it carries (a URL keeps its user and its
    /// query's names: `http://alice:***@proxy/v1?key=***`).
    pub(super) fn scrub(self, key: Option<&Secret>, base_url: &str) -> LlmError {
        let k = key.map(Secret::expose).filter(|k| k.len() >= 4);
        let password = super::settings::url_password(base_url);
        let query = super::settings::url_query_values(base_url);
        if k.is_none() && password.is_none() && query.is_empty() {
            return self;
        }
        let s = |m: String| {
            // A query value (a gateway's key) as `name=***`, as shown_url shows it; a longer
            // one wherever else it appears.
            let m = query.iter().fold(m, |m, v| {
                let m = m.replace(&format!("={v}"), "=***");
                if v.len() >= 8 {
                    m.replace(v, "[redacted]")
                } else {
                    m
                }
            });
            let m = match password {
                Some(p) => m
                    .replace(&format!(":{p}@"), ":***@")
                    .replace(p, "[redacted]"),
                None => m,
            };
            match k {
                Some(k) => m.replace(k, "[redacted]"),
                None => m,
            }
        };
        match self {
            LlmError::Refused { url } => LlmError::Refused { url: s(url) },
            LlmError::Unreachable { url, message } => LlmError::Unreachable {
                url: s(url),
                message: s(message),
            },
            LlmError::Auth { status, message } => LlmError::Auth {
                status,
                message: s(message),
            },
            LlmError::NotFound { message } => LlmError::NotFound {
                message: s(message),
            },
            LlmError::QuotaExhausted { message } => LlmError::QuotaExhausted {
                message: s(message),
            },
            LlmError::ContextOverflow { message } => LlmError::ContextOverflow {
                message: s(message),
            },
            LlmError::Http {
                status,
                message,
                retryable,
            } => LlmError::Http {
                status,
                message: s(message),
                retryable,
            },
            LlmError::Truncated(m) => LlmError::Truncated(s(m)),
            LlmError::Stream(m) => LlmError::Stream(s(m)),
            LlmError::Decode(m) => LlmError::Decode(s(m)),
            LlmError::Protocol { dialect, message } => LlmError::Protocol {
                dialect,
                message: s(message),
            },
            LlmError::NotAnAnswer {
                content_type,
                expected,
                url,
                preview,
            } => LlmError::NotAnAnswer {
                content_type: s(content_type),
                expected,
                url: s(url),
                preview: s(preview),
            },
            e @ (LlmError::Timeout { .. } | LlmError::ReplyTooLarge { .. }) => e,
        }
    }
}

/// Does a server message describe a context-window overflow?
pub(super) fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "maximum context",
        "context window",
        "prompt is too long",
        "exceed_context_size",
        "exceeds the context",
        "too many tokens",
        "input is too long",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Turn an HTTP error status and body into a typed error, whatever shape the server used:
/// `{"error":{"message","type","code"}}` (OpenAI, OpenRouter, llama.cpp), `{"object":"error",
/// "message", "code": 400}` (vLLM), `{"error":"..."}` (Ollama), `{"type":"error","error":{...}}`
/// (Anthropic), or anything else (kept as text).
pub fn classify_error(status: u16, body: &str) -> LlmError {
    let v: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let pick = |v: &serde_json::Value, k: &str| -> Option<String> {
        match v.get(k)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let (message, kind) = match &v {
        Some(v) => {
            let err = v.get("error");
            match err {
                Some(serde_json::Value::String(s)) => {
                    (s.clone(), pick(v, "type").unwrap_or_default())
                }
                Some(e @ serde_json::Value::Object(_)) => (
                    pick(e, "message").unwrap_or_else(|| e.to_string()),
                    [pick(e, "type"), pick(e, "code")]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => (
                    pick(v, "message")
                        .or_else(|| pick(v, "detail"))
                        .unwrap_or_else(|| body.trim().to_string()),
                    [pick(v, "type"), pick(v, "code")]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
            }
        }
        None => (body.trim().chars().take(2000).collect(), String::new()),
    };
    let message = if message.is_empty() {
        format!("(empty body, HTTP {status})")
    } else {
        message
    };
    if kind.contains("insufficient_quota") || message.contains("insufficient_quota") {
        return LlmError::QuotaExhausted { message };
    }
    if is_context_overflow(&message)
        || kind.contains("context_length")
        || kind.contains("exceed_context")
    {
        return LlmError::ContextOverflow { message };
    }
    match status {
        401 | 403 => LlmError::Auth { status, message },
        404 => LlmError::NotFound { message },
        _ => LlmError::Http {
            status,
            message,
            retryable: retry::retryable_status(status),
        },
    }
}

/// Collects a streamed answer; one implementation per dialect.
pub(super) trait Assembler: Send {
    /// Consume one SSE event; deltas go to `sink`. Returns true when the stream is complete.
    fn event(&mut self, ev: &sse::Event, sink: &mut dyn FnMut(Delta)) -> Result<bool, LlmError>;
    /// The answer, once complete.
    fn finish(self: Box<Self>) -> ChatResponse;
    /// What is missing when the stream ended early.
    fn missing(&self) -> String;
    /// Bytes of reply so far: content, reasoning, and each tool call's id, name and
    /// arguments (plus [`CALL_OVERHEAD`] per call).
    fn reply_bytes(&self) -> usize;
}

/// What each tool call counts toward `max_reply_bytes` besides its id, name and arguments:
/// the memory a call costs, so a reply of many empty calls is capped too.
pub(super) const CALL_OVERHEAD: usize = 64;

/// What a tool call counts toward `max_reply_bytes`.
pub(super) trait ReplyBytes {
    /// Its id, name and arguments plus [`CALL_OVERHEAD`].
    fn reply_bytes(&self) -> usize;
}

impl ReplyBytes for ToolCall {
    fn reply_bytes(&self) -> usize {
        CALL_OVERHEAD + self.id.len() + self.name.len() + self.arguments.len()
    }
}
