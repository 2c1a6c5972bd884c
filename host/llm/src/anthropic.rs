//! The Anthropic Messages dialect (`{base}/v1/messages`, `anthropic-version` header, required
//! `max_tokens`). Consecutive messages of one role are merged, as the API requires alternation.

use super::settings::LlmSettings;
use super::sse;
use super::types::{
    Assembler, ChatRequest, ChatResponse, Delta, LlmError, Message, ReplyBytes, ToolCall, Usage,
};
use serde_json::{Value, json};

/// The request body.
pub(super) fn body(s: &LlmSettings, req: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for m in &req.messages {
        let (role, blocks): (&str, Vec<Value>) = match m {
            Message::User { text } => ("user", vec![json!({ "type": "text", "text": text })]),
            Message::Assistant { text, tool_calls } => {
                let mut b = Vec::new();
                if !text.is_empty() {
                    b.push(json!({ "type": "text", "text": text }));
                }
                for c in tool_calls {
                    let input: Value =
                        serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                    b.push(
                        json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input }),
                    );
                }
                ("assistant", b)
            }
            Message::ToolResult {
                id,
                content,
                is_error,
            } => (
                "user",
                vec![
                    json!({ "type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error }),
                ],
            ),
        };
        match messages.last_mut() {
            Some(last) if last["role"] == role => last["content"]
                .as_array_mut()
                .expect("content is an array")
                .extend(blocks),
            _ => messages.push(json!({ "role": role, "content": blocks })),
        }
    }
    let mut b = json!({
        "model": s.model,
        "max_tokens": req.max_tokens.unwrap_or(s.max_tokens),
        "messages": messages,
        "stream": s.stream,
    });
    if let Some(sys) = &req.system {
        b["system"] = json!(sys);
    }
    if let Some(t) = s.temperature {
        b["temperature"] = json!(t);
    }
    if !req.tools.is_empty() {
        b["tools"] = req.tools.iter().map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters })).collect();
    }
    // `disable_thinking`: extended thinking is only on when requested, so nothing is sent.
    b
}

fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n("input_tokens"),
        cached_input: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        output: n("output_tokens"),
        reasoning: 0,
    }
}

/// A non-streamed response.
pub(super) fn parse_full(v: &Value) -> Result<ChatResponse, LlmError> {
    if v["type"] == "error" {
        return Err(LlmError::Stream(
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_string(),
        ));
    }
    let content = v["content"]
        .as_array()
        .ok_or_else(|| LlmError::Decode("no `content` array in the response".into()))?;
    let mut r = ChatResponse {
        usage: v.get("usage").map(usage).unwrap_or_default(),
        finish_reason: v["stop_reason"].as_str().map(String::from),
        model: v["model"].as_str().map(String::from),
        ..Default::default()
    };
    for block in content {
        match block["type"].as_str() {
            Some("text") => r.text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => r.tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().into(),
                name: block["name"].as_str().unwrap_or_default().into(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    Ok(r)
}

/// Assembles Messages stream events; tool input arrives as `input_json_delta` fragments.
/// Every tool call's id, name and input count toward the reply's size as they arrive.
pub(super) struct StreamAssembler {
    r: ChatResponse,
    /// Content blocks by index: `Some(call)` for tool_use blocks.
    blocks: Vec<Option<ToolCall>>,
    stopped: bool,
    /// Bytes of thinking streamed; counted, not kept.
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
            blocks: Vec::new(),
            stopped: false,
            reasoning_bytes: 0,
            call_bytes: 0,
            cap,
        }
    }

    /// Count `more` bytes of tool calls, refusing them past the cap (before they are kept).
    fn count(&mut self, more: usize) -> Result<(), LlmError> {
        let total = self.r.text.len() + self.reasoning_bytes + self.call_bytes + more;
        if total as u64 > self.cap {
            return Err(LlmError::ReplyTooLarge { limit: self.cap });
        }
        self.call_bytes += more;
        Ok(())
    }

    /// A content block opens: a tool call (announced to `sink`) or text, maybe with its first
    /// words. Its index is that of the next block, or of one open already; nothing beyond.
    fn block_start(&mut self, v: &Value, sink: &mut dyn FnMut(Delta)) -> Result<(), LlmError> {
        let idx = v
            .get("index")
            .filter(|i| !i.is_null())
            .map_or(Some(0), Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i <= self.blocks.len())
            .ok_or_else(|| LlmError::Protocol {
                dialect: "Anthropic",
                message: format!(
                    "a content block has index {}, but only {} block(s) came before it",
                    kiln_protocol::terminal::printable(
                        &v["index"].to_string().chars().take(40).collect::<String>()
                    ),
                    self.blocks.len()
                ),
            })?;
        if idx == self.blocks.len() {
            self.blocks.push(None);
        }
        let cb = &v["content_block"];
        if cb["type"] == "tool_use" {
            let id = cb["id"].as_str().unwrap_or_default();
            let name = cb["name"].as_str().unwrap_or_default();
            let replaced = self.blocks[idx].as_ref().map_or(0, ToolCall::reply_bytes);
            self.call_bytes -= replaced;
            self.count(super::types::CALL_OVERHEAD + id.len() + name.len())?;
            sink(Delta::ToolCall { name: name.into() });
            self.blocks[idx] = Some(ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: String::new(),
            });
        } else if let Some(t) = cb["text"].as_str().filter(|t| !t.is_empty()) {
            self.r.text.push_str(t);
            sink(Delta::Text(t.into()));
        }
        Ok(())
    }

    /// More of a content block: text (passed to `sink`), thinking (counted) or a fragment of
    /// a tool call's JSON input.
    fn block_delta(&mut self, v: &Value, sink: &mut dyn FnMut(Delta)) -> Result<(), LlmError> {
        let idx = v["index"].as_u64().unwrap_or(0) as usize;
        let d = &v["delta"];
        match d["type"].as_str() {
            Some("text_delta") => {
                let t = d["text"].as_str().unwrap_or_default();
                self.r.text.push_str(t);
                sink(Delta::Text(t.into()));
            }
            Some("thinking_delta") => {
                self.reasoning_bytes += d["thinking"].as_str().map_or(0, str::len);
            }
            Some("input_json_delta") => {
                if matches!(self.blocks.get(idx), Some(Some(_))) {
                    let part = d["partial_json"].as_str().unwrap_or_default();
                    self.count(part.len())?;
                    if let Some(Some(call)) = self.blocks.get_mut(idx) {
                        call.arguments.push_str(part);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Assembler for StreamAssembler {
    fn event(&mut self, ev: &sse::Event, sink: &mut dyn FnMut(Delta)) -> Result<bool, LlmError> {
        if ev.data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(&ev.data).map_err(|e| {
            LlmError::Decode(format!(
                "stream event is not JSON ({e}): {}",
                ev.data.chars().take(200).collect::<String>()
            ))
        })?;
        let kind = ev
            .event
            .clone()
            .or_else(|| v["type"].as_str().map(String::from))
            .unwrap_or_default();
        match kind.as_str() {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.r.usage = usage(u);
                }
                self.r.model = v
                    .pointer("/message/model")
                    .and_then(Value::as_str)
                    .map(String::from);
            }
            "content_block_start" => self.block_start(&v, sink)?,
            "content_block_delta" => self.block_delta(&v, sink)?,
            "message_delta" => {
                if let Some(sr) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.r.finish_reason = Some(sr.into());
                }
                if let Some(out) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.r.usage.output = out;
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let msg = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_string();
                if super::types::is_context_overflow(&msg) {
                    return Err(LlmError::ContextOverflow { message: msg });
                }
                return Err(LlmError::Stream(msg));
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> ChatResponse {
        let mut r = self.r;
        r.tool_calls = self
            .blocks
            .into_iter()
            .flatten()
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
        "no `message_stop` event".into()
    }
}
