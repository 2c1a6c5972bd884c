//! Where a loop's answers come from: a live model through the transport, or a replay of
//! recorded responses (a JSONL file, or an earlier loop's LLM calls from the store) for
//! deterministic re-runs without an API key.

use crate::llm::{ChatRequest, ChatResponse, LlmClient, LlmError, ToolCall, Usage};
use std::collections::VecDeque;
use std::path::Path;

/// Why recorded responses could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The replay file could not be read.
    #[error("cannot read replay file {path}: {source}")]
    Read {
        /// The replay file.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A line is not JSON.
    #[error("{path}:{line}: not JSON: {source}")]
    NotJson {
        /// The replay file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        source: serde_json::Error,
    },
    /// A line is JSON but not a response.
    #[error(
        "{path}:{line}: expected a string or an object with `text` (and optional `tool_calls`)"
    )]
    NotAResponse {
        /// The replay file.
        path: String,
        /// 1-based line number.
        line: usize,
    },
    /// The file has no responses.
    #[error("replay file {0} has no responses")]
    EmptyFile(String),
    /// The earlier loop could not be read from the store.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The earlier loop recorded no responses.
    #[error("loop {0} recorded no LLM responses to replay")]
    EmptyLoop(i64),
}

/// Recorded responses, served in order.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    responses: VecDeque<ChatResponse>,
    /// Where they came from (for messages).
    pub source: String,
}

impl Replay {
    /// Read a JSONL file: each line is a JSON string (the answer text) or an object with `text`
    /// (or `response`/`content`) and optional `tool_calls: [{name, arguments}]`.
    pub fn from_jsonl(path: &Path) -> Result<Replay, ReplayError> {
        let shown = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
            path: shown(),
            source,
        })?;
        let mut responses = VecDeque::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|source| ReplayError::NotJson {
                    path: shown(),
                    line: i + 1,
                    source,
                })?;
            responses.push_back(Self::parse(&v).ok_or_else(|| ReplayError::NotAResponse {
                path: shown(),
                line: i + 1,
            })?);
        }
        if responses.is_empty() {
            return Err(ReplayError::EmptyFile(shown()));
        }
        Ok(Replay {
            responses,
            source: path.display().to_string(),
        })
    }

    fn parse(v: &serde_json::Value) -> Option<ChatResponse> {
        if let Some(s) = v.as_str() {
            return Some(ChatResponse {
                text: s.to_string(),
                ..Default::default()
            });
        }
        let o = v.as_object()?;
        let text = ["text", "response", "content"]
            .iter()
            .find_map(|k| o.get(*k).and_then(|t| t.as_str()))
            .unwrap_or("")
            .to_string();
        let tool_calls: Vec<ToolCall> = o
            .get("tool_calls")
            .and_then(|t| t.as_array())
            .map(|calls| {
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| ToolCall {
                        id: c
                            .get("id")
                            .and_then(|x| x.as_str())
                            .map(String::from)
                            .unwrap_or_else(|| format!("replay_{i}")),
                        name: c
                            .get("name")
                            .and_then(|x| x.as_str())
                            .unwrap_or_default()
                            .to_string(),
                        arguments: match c.get("arguments") {
                            Some(serde_json::Value::String(s)) => s.clone(),
                            Some(other) => other.to_string(),
                            None => "{}".into(),
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        if text.is_empty() && tool_calls.is_empty() && !o.contains_key("text") {
            return None;
        }
        Some(ChatResponse {
            text,
            tool_calls,
            ..Default::default()
        })
    }

    /// Responses recorded for an earlier loop.
    pub fn from_store(store: &crate::store::Store, loop_id: i64) -> Result<Replay, ReplayError> {
        let detail = store.loop_detail(loop_id)?;
        let responses: VecDeque<ChatResponse> = detail
            .llm_calls
            .iter()
            .filter(|c| c.error.is_none())
            .map(|c| ChatResponse {
                text: c.response.clone(),
                tool_calls: serde_json::from_value(c.tool_calls.clone()).unwrap_or_default(),
                ..Default::default()
            })
            .collect();
        if responses.is_empty() {
            return Err(ReplayError::EmptyLoop(loop_id));
        }
        Ok(Replay {
            responses,
            source: format!("loop {loop_id}"),
        })
    }
}

/// Where answers come from.
pub enum Source {
    /// A model behind the LLM transport.
    Live(LlmClient),
    /// Recorded responses, served in order.
    Replay(Replay),
}

/// A live client or a replay, counting the tokens of every answer it gave (so a run's usage
/// includes reviewers, generated patches and nested loops that asked through it).
pub struct ModelSource {
    source: Source,
    spent: Usage,
    budget: super::budget::Budget,
}

impl ModelSource {
    /// Ask the transport.
    pub fn live(client: LlmClient) -> ModelSource {
        ModelSource {
            source: Source::Live(client),
            spent: Usage::default(),
            budget: Default::default(),
        }
    }

    /// Serve recorded responses.
    pub fn replay(replay: Replay) -> ModelSource {
        ModelSource {
            source: Source::Replay(replay),
            spent: Usage::default(),
            budget: Default::default(),
        }
    }

    /// `provider/model` or `replay:SOURCE`.
    pub fn label(&self) -> String {
        match &self.source {
            Source::Live(c) => c.settings().model.clone(),
            Source::Replay(r) => format!("replay:{}", r.source),
        }
    }

    /// Tokens of every answer so far.
    pub fn spent(&self) -> Usage {
        self.spent
    }

    /// Cap what every later request may spend, counting what was spent so far. A request that
    /// names no output limit is assumed to spend the settings' `max_tokens` (a replay: the
    /// budget's own estimate).
    pub fn set_budget(&mut self, mut budget: super::budget::Budget) {
        if let Source::Live(c) = &self.source {
            budget.output_estimate = u64::from(c.settings().max_tokens);
        }
        if budget.output_estimate == 0 {
            budget.output_estimate = super::budget::DEFAULT_OUTPUT_ESTIMATE;
        }
        self.budget = budget;
    }

    /// Refuse `req` when it would pass the budget (see [`super::budget::Budget::check`]).
    pub fn check_budget(&self, req: &ChatRequest) -> Result<(), super::budget::BudgetExceeded> {
        self.budget.check(&self.spent, req)
    }

    /// An answer served from the store (a resumed run's), counted as if the model gave it.
    pub(crate) fn served(&mut self, answer: ChatResponse) -> ChatResponse {
        self.spent += answer.usage;
        answer
    }

    /// Get the next answer.
    pub async fn complete(&mut self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.complete_streaming(req, &mut |_| {}).await
    }

    /// Get the next answer, streaming text deltas to `sink` (a replay sends its text at once).
    pub async fn complete_streaming(
        &mut self,
        req: &ChatRequest,
        sink: &mut (dyn FnMut(crate::llm::Delta) + Send),
    ) -> Result<ChatResponse, LlmError> {
        let r = match &mut self.source {
            Source::Live(c) => c.complete(req, sink).await,
            Source::Replay(r) => r.responses.pop_front().ok_or_else(|| {
                LlmError::Decode(format!(
                    "the replay ({}) has no more recorded responses",
                    r.source
                ))
            }),
        };
        if let Ok(resp) = &r {
            self.spent += resp.usage;
        }
        r
    }
}
