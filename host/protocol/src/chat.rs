//! What a conversation with a model is made of, as loops, the store and the transport share it:
//! messages, tool calls and token usage.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id (echoed in the tool result).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text.
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// From the user (or the loop speaking for them).
    User {
        /// What the user (or the loop) says.
        text: String,
    },
    /// From the model.
    Assistant {
        /// What the model wrote besides its tool calls.
        text: String,
        /// Tool calls it made.
        tool_calls: Vec<ToolCall>,
    },
    /// The result of a tool call.
    ToolResult {
        /// The call's id.
        id: String,
        /// Result text.
        content: String,
        /// The tool failed.
        is_error: bool,
    },
}

/// Token usage by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Input tokens not read from a cache.
    pub input: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Of the output, reasoning tokens.
    pub reasoning: u64,
}

impl Usage {
    /// Every prompt token, read from the cache or not: what "input tokens" means wherever a
    /// person reads it.
    pub fn prompt(&self) -> u64 {
        self.input + self.cached_input
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.input += o.input;
        self.cached_input += o.cached_input;
        self.cache_write += o.cache_write;
        self.output += o.output;
        self.reasoning += o.reasoning;
    }
}

/// A complete answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChatResponse {
    /// The answer's text (tool calls apart).
    pub text: String,
    /// Tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens the request used, as the server counted them.
    pub usage: Usage,
    /// Why the model stopped (`stop`, `tool_calls`, `end_turn`, `length`, ...).
    pub finish_reason: Option<String>,
    /// The model that answered, as reported.
    pub model: Option<String>,
    /// Time from the first attempt to the end of the answer.
    #[serde(skip)]
    pub latency: Duration,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
}
