//! The OpenAI chat-completions dialect (`{base}/chat/completions`), spoken by OpenAI, vLLM,
//! llama.cpp server, Ollama and OpenRouter.

use super::settings::Flavor;
use super::settings::LlmSettings;
use super::sse;
use super::types::{
    Assembler, ChatRequest, ChatResponse, Delta, LlmError, Message, ToolCall, Usage,
};
use serde_json::{Value, json};

/// The request body.
pub(super) fn body(s: &LlmSettings, req: &ChatRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(sys) = &req.system {
        messages.push(json!({ "role": "system", "content": sys }));
    }
    for m in &req.messages {
        messages.push(match m {
            Message::User { text } => json!({ "role": "user", "content": text }),
            Message::Assistant { text, tool_calls } => {
                let mut v = json!({ "role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) } });
                if !tool_calls.is_empty() {
                    v["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
                        .collect();
                }
                v
            }
            Message::ToolResult { id, content, .. } => json!({ "role": "tool", "tool_call_id": id, "content": content }),
        });
    }
    let mut b = json!({
        "model": s.model,
        "messages": messages,
        "max_tokens": req.max_tokens.unwrap_or(s.max_tokens),
        "stream": s.stream,
    });
    if s.stream {
        b["stream_options"] = json!({ "include_usage": true });
    }
    if let Some(t) = s.temperature {
        b["temperature"] = json!(t);
    }
    if !req.tools.is_empty() {
        b["tools"] = req
            .tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
            .collect();
    }
    if s.disable_thinking {
        match s.flavor() {
            Flavor::SelfHosted => b["chat_template_kwargs"] = json!({ "enable_thinking": false }),
            Flavor::Ollama => b["reasoning_effort"] = json!("none"),
            Flavor::Openrouter => b["reasoning"] = json!({ "enabled": false }),
            Flavor::Openai => {}
        }
    }
    b
}

fn usage(v: &Value) -> Usage {
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("/prompt_tokens_details/cached_tokens");
    Usage {
        input: n("/prompt_tokens").saturating_sub(cached),
        cached_input: cached,
        cache_write: 0,
        output: n("/completion_tokens"),
        reasoning: n("/completion_tokens_details/reasoning_tokens"),
    }
}

/// A non-streamed response.
pub(super) fn parse_full(v: &Value) -> Result<ChatResponse, LlmError> {
    if let Some(err) = v.get("error") {
        return Err(LlmError::Stream(
            err.get("message")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| err.to_string()),
        ));
    }
    let choice = v
        .pointer("/choices/0")
        .ok_or_else(|| LlmError::Decode("no `choices[0]` in the response".into()))?;
    let msg = &choice["message"];
    let tool_calls = msg["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    arguments: c
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}")
                        .to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatResponse {
        text: msg["content"].as_str().unwrap_or_default().to_string(),
        tool_calls,
        usage: v.get("usage").map(usage).unwrap_or_default(),
        finish_reason: choice["finish_reason"].as_str().map(String::from),
        model: v["model"].as_str().map(String::from),
        ..Default::default()
    })
}

/// The most bytes of a tool call's name announced with each fragment ([`Delta::ToolCall`]).
const SHOWN_NAME_MAX: usize = 256;

/// Assembles `chat.completion.chunk`s; tool-call arguments arrive in fragments by index.
/// Every call's id, name and arguments count toward the reply's size as they arrive, so no
/// part of a reply grows past `max_reply_bytes`, even inside one chunk.
pub(super) struct StreamAssembler {
    r: ChatResponse,
    calls: Vec<ToolCall>,
    finished: bool,
    /// Bytes of reasoning streamed (`reasoning_content` / `reasoning`); counted, not kept.
    reasoning_bytes: usize,
    /// Bytes of the tool calls so far (see [`ToolCall::reply_bytes`]).
    call_bytes: usize,
    /// `max_reply_bytes`.
    cap: u64,
}

impl StreamAssembler {
    /// An assembler refusing a reply past `cap` bytes (`max_reply_bytes`).
    pub(super) fn new(cap: u64) -> StreamAssembler {
        StreamAssembler {
            r: ChatResponse::default(),
            calls: Vec::new(),
            finished: false,
            reasoning_bytes: 0,
            call_bytes: 0,
            cap,
        }
    }

    /// Apply one `tool_calls[]` fragment. A call's `index` may name a call seen already or
    /// the next one, nothing beyond: an index far ahead would make kiln hold that many calls.
    fn tool_call(&mut self, tc: &Value, sink: &mut dyn FnMut(Delta)) -> Result<(), LlmError> {
        let idx = match tc.get("index").filter(|v| !v.is_null()) {
            None => self.calls.len().saturating_sub(1),
            Some(v) => v
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| *i <= self.calls.len())
                .ok_or_else(|| LlmError::Protocol {
                    dialect: "OpenAI",
                    message: format!(
                        "a tool call has index {}, but only {} call(s) came before it (an index may name a call seen already or the next one)",
                        kiln_protocol::terminal::printable(&v.to_string().chars().take(40).collect::<String>()),
                        self.calls.len()
                    ),
                })?,
        };
        if idx == self.calls.len() {
            self.calls.push(ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            self.call_bytes += super::types::CALL_OVERHEAD;
        }
        let id = tc["id"].as_str();
        let name = tc.pointer("/function/name").and_then(Value::as_str);
        let args = tc.pointer("/function/arguments").and_then(Value::as_str);
        let call = &self.calls[idx];
        // Counted before anything is kept: the id replaces the one before, the name and
        // arguments grow.
        let grown = self.call_bytes - id.map_or(0, |_| call.id.len())
            + id.map_or(0, str::len)
            + name.map_or(0, str::len)
            + args.map_or(0, str::len);
        if (self.r.text.len() + self.reasoning_bytes + grown) as u64 > self.cap {
            return Err(LlmError::ReplyTooLarge { limit: self.cap });
        }
        self.call_bytes = grown;
        let call = &mut self.calls[idx];
        if let Some(id) = id {
            call.id = id.to_string();
        }
        if let Some(name) = name {
            call.name.push_str(name);
            // Shown as it grows, at most its first bytes: a name streamed in many fragments
            // is not copied whole for each.
            let shown = call.name.floor_char_boundary(SHOWN_NAME_MAX);
            sink(Delta::ToolCall {
                name: call.name[..shown].to_string(),
            });
        }
        if let Some(args) = args {
            call.arguments.push_str(args);
        }
        Ok(())
    }
}

impl Assembler for StreamAssembler {
    fn event(&mut self, ev: &sse::Event, sink: &mut dyn FnMut(Delta)) -> Result<bool, LlmError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            if !self.finished {
                return Err(LlmError::Truncated(
                    "`[DONE]` arrived without a finish_reason".into(),
                ));
            }
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Decode(format!(
                "stream chunk is not JSON ({e}): {}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        if let Some(err) = v.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| err.to_string());
            if super::types::is_context_overflow(&msg) {
                return Err(LlmError::ContextOverflow { message: msg });
            }
            return Err(LlmError::Stream(msg));
        }
        if let Some(m) = v["model"].as_str() {
            self.r.model = Some(m.to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.r.usage = usage(u);
        }
        if let Some(choice) = v.pointer("/choices/0") {
            let delta = &choice["delta"];
            if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.r.text.push_str(t);
                sink(Delta::Text(t.to_string()));
            }
            for k in ["reasoning_content", "reasoning"] {
                self.reasoning_bytes += delta[k].as_str().map_or(0, str::len);
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                self.tool_call(tc, sink)?;
            }
            if let Some(fr) = choice["finish_reason"].as_str() {
                self.r.finish_reason = Some(fr.to_string());
                self.finished = true;
            }
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> ChatResponse {
        let mut r = self.r;
        r.tool_calls = self
            .calls
            .into_iter()
            .map(|mut c| {
                if c.arguments.trim().is_empty() {
                    c.arguments = "{}".into();
                }
                c
            })
            .collect();
        r
    }

    fn reply_bytes(&self) -> usize {
        self.r.text.len() + self.call_bytes + self.reasoning_bytes
    }

    fn missing(&self) -> String {
        if self.finished {
            "no `data: [DONE]`".into()
        } else {
            "no finish_reason and no `data: [DONE]`".into()
        }
    }
}
