//! The OpenAI chat-completions dialect (`{base}/chat/completions`), spoken by OpenAI, vLLM,
//! llama.cpp server, Ollama and OpenRouter.

use super::settings::Flavor;
use super::{
    Assembler, ChatRequest, ChatResponse, Delta, LlmError, LlmSettings, Message, ToolCall, Usage,
    sse,
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

/// Assembles `chat.completion.chunk`s; tool-call arguments arrive in fragments by index.
#[derive(Default)]
pub(super) struct StreamAssembler {
    r: ChatResponse,
    calls: Vec<ToolCall>,
    finished: bool,
    /// Bytes of reasoning streamed (`reasoning_content` / `reasoning`); counted, not kept.
    reasoning_bytes: usize,
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
            if super::is_context_overflow(&msg) {
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
                let idx = tc["index"]
                    .as_u64()
                    .unwrap_or(self.calls.len().saturating_sub(1) as u64)
                    as usize;
                while self.calls.len() <= idx {
                    self.calls.push(ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                let call = &mut self.calls[idx];
                if let Some(id) = tc["id"].as_str() {
                    call.id = id.to_string();
                }
                if let Some(name) = tc.pointer("/function/name").and_then(Value::as_str) {
                    call.name.push_str(name);
                    sink(Delta::ToolCall {
                        name: call.name.clone(),
                    });
                }
                if let Some(args) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                    call.arguments.push_str(args);
                }
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
        self.r.text.len()
            + self.calls.iter().map(|c| c.arguments.len()).sum::<usize>()
            + self.reasoning_bytes
    }

    fn missing(&self) -> String {
        if self.finished {
            "no `data: [DONE]`".into()
        } else {
            "no finish_reason and no `data: [DONE]`".into()
        }
    }
}
