//! The LLM transport against a mock server over real HTTP: both dialects, streaming and not,
//! tool calls, usage, retries, truncation, stream errors, stalls, context overflow, secrets.

use crate::mock_llm::{MockLlm, Reply, anthropic_events, openai_events};
use crate::support::Workspace;
use kiln::llm::{
    ChatRequest, LlmClient, LlmError, LlmSettings, Message, Provider, Secret, ToolDef,
};
use serde_json::json;
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRET-123456";

fn settings(mock: &MockLlm, provider: Provider) -> LlmSettings {
    LlmSettings {
        provider,
        base_url: if provider == Provider::Openai {
            format!("{}/v1", mock.url)
        } else {
            mock.url.clone()
        },
        model: "test-model".into(),
        api_key: Some(Secret::new(KEY)),
        max_tokens: 256,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        temperature: Some(0.0),
        disable_thinking: false,
        max_retries: 3,
        stream_max_retries: 2,
        retry_base: Duration::from_millis(10),
        stream: true,
        max_reply_bytes: 4 << 20,
    }
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        system: Some("be brief".into()),
        messages: vec![Message::User { text: text.into() }],
        tools: vec![],
        max_tokens: None,
    }
}

fn tool_req() -> ChatRequest {
    let mut r = ask("read two files");
    r.tools = vec![ToolDef {
        name: "read_file".into(),
        description: "read".into(),
        parameters: json!({"type":"object","properties":{"path":{"type":"string"}}}),
    }];
    r
}

fn oa_text(text: &str) -> Reply {
    crate::mock_llm::openai_text(text)
}

async fn complete(
    s: LlmSettings,
    req: &ChatRequest,
) -> (Result<kiln::llm::ChatResponse, LlmError>, String) {
    let client = LlmClient::new(s).unwrap();
    let mut streamed = String::new();
    let r = client
        .complete(req, &mut |d| {
            if let kiln::llm::Delta::Text(t) = d {
                streamed.push_str(&t)
            }
        })
        .await;
    (r, streamed)
}

#[tokio::test]
async fn openai_streams_text_and_usage_by_class() {
    let mock = MockLlm::start(vec![oa_text("Hello there")]);
    let (r, streamed) = complete(settings(&mock, Provider::Openai), &ask("hi")).await;
    let r = r.unwrap();
    assert_eq!(
        (r.text.as_str(), streamed.as_str()),
        ("Hello there", "Hello there")
    );
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        (
            r.usage.input,
            r.usage.cached_input,
            r.usage.output,
            r.usage.reasoning
        ),
        (12, 8, 5, 2)
    );
    let req = &mock.recorded()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.body["model"], "test-model");
    assert_eq!(req.body["temperature"], 0.0);
    assert_eq!(req.body["stream"], true);
    assert_eq!(
        req.body["messages"][0],
        json!({"role":"system","content":"be brief"})
    );
}

#[tokio::test]
async fn openai_parallel_tool_calls_are_assembled_from_fragments() {
    let mut parts = openai_events(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"path\":"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a.rs\"}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"b.rs\"}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let mock = MockLlm::start(vec![Reply::sse(parts)]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &tool_req()).await;
    let r = r.unwrap();
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(
        (
            r.tool_calls[0].id.as_str(),
            r.tool_calls[0].arguments.as_str()
        ),
        ("call_a", r#"{"path":"a.rs"}"#)
    );
    assert_eq!(
        (
            r.tool_calls[1].id.as_str(),
            r.tool_calls[1].arguments.as_str()
        ),
        ("call_b", r#"{"path":"b.rs"}"#)
    );
    assert_eq!(
        mock.recorded()[0].body["tools"][0]["function"]["name"],
        "read_file"
    );
}

fn anthropic_stream_with_tool() -> Reply {
    Reply::sse(anthropic_events(&[
        json!({"type":"message_start","message":{"model":"claude-test","usage":{"input_tokens":30,"cache_read_input_tokens":100,"cache_creation_input_tokens":7,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Reading "}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"both."}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".rs\"}"}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"read_file","input":{}}}),
        json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"b.rs\"}"}}),
        json!({"type":"content_block_stop","index":2}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}),
        json!({"type":"message_stop"}),
    ]))
}

#[tokio::test]
async fn anthropic_streams_text_tool_use_and_usage() {
    let mock = MockLlm::start(vec![anthropic_stream_with_tool()]);
    let mut req = tool_req();
    req.messages.push(Message::Assistant {
        text: String::new(),
        tool_calls: vec![kiln::llm::ToolCall {
            id: "t0".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        }],
    });
    req.messages.push(Message::ToolResult {
        id: "t0".into(),
        content: "x".into(),
        is_error: false,
    });
    req.messages.push(Message::User {
        text: "continue".into(),
    });
    let (r, streamed) = complete(settings(&mock, Provider::Anthropic), &req).await;
    let r = r.unwrap();
    assert_eq!(
        (r.text.as_str(), streamed.as_str()),
        ("Reading both.", "Reading both.")
    );
    assert_eq!(
        r.tool_calls
            .iter()
            .map(|c| c.arguments.as_str())
            .collect::<Vec<_>>(),
        [r#"{"path": "a.rs"}"#, r#"{"path": "b.rs"}"#]
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        (
            r.usage.input,
            r.usage.cached_input,
            r.usage.cache_write,
            r.usage.output
        ),
        (30, 100, 7, 42)
    );
    let rec = &mock.recorded()[0];
    assert_eq!(rec.path, "/v1/messages");
    assert_eq!(rec.header("x-api-key"), Some(KEY));
    assert_eq!(rec.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(rec.body["max_tokens"], 256);
    assert_eq!(rec.body["system"], "be brief");
    // The tool result and the following user text are merged into one user turn.
    let msgs = rec.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(msgs[2]["content"][1]["text"], "continue");
}

#[tokio::test]
async fn non_streaming_both_dialects() {
    let mock = MockLlm::start(vec![
        Reply::json(
            200,
            json!({"model":"m","choices":[{"message":{"role":"assistant","content":"plain","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}),
        ),
        Reply::json(
            200,
            json!({"model":"claude","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"tu","name":"g","input":{"b":2}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":6}}),
        ),
    ]);
    let mut s = settings(&mock, Provider::Openai);
    s.stream = false;
    let (r, _) = complete(s, &ask("x")).await;
    let r = r.unwrap();
    assert_eq!(
        (
            r.text.as_str(),
            r.tool_calls[0].arguments.as_str(),
            r.usage.output
        ),
        ("plain", r#"{"a":1}"#, 4)
    );
    let mut s = settings(&mock, Provider::Anthropic);
    s.stream = false;
    let (r, _) = complete(s, &ask("x")).await;
    let r = r.unwrap();
    assert_eq!(
        (
            r.text.as_str(),
            r.tool_calls[0].arguments.as_str(),
            r.usage.input
        ),
        ("hi", r#"{"b":2}"#, 5)
    );
}

#[tokio::test]
async fn retryable_statuses_are_retried_with_and_without_retry_after() {
    for (status, header) in [
        (503, None),
        (429, Some(("retry-after-ms", "30"))),
        (408, None),
        (409, None),
        (500, Some(("retry-after", "0"))),
    ] {
        let first = Reply::Full(
            status,
            header
                .map(|(k, v)| vec![(k, v.to_string())])
                .unwrap_or_default(),
            r#"{"error":{"message":"busy"}}"#.into(),
        );
        let mock = MockLlm::start(vec![first, oa_text("ok")]);
        let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
        let r = r.unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!((r.text.as_str(), r.attempts), ("ok", 2), "{status}");
        assert_eq!(mock.recorded().len(), 2);
    }
    // Anthropic's 529 overloaded.
    let overloaded = Reply::json(
        529,
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
    );
    let mock = MockLlm::start(vec![overloaded, anthropic_stream_with_tool()]);
    let (r, _) = complete(settings(&mock, Provider::Anthropic), &ask("x")).await;
    assert_eq!(r.unwrap().attempts, 2);
}

#[tokio::test]
async fn retry_after_seconds_is_honoured() {
    let mock = MockLlm::start(vec![
        Reply::Full(429, vec![("retry-after", "1".into())], "{}".into()),
        oa_text("ok"),
    ]);
    let start = Instant::now();
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    r.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn quota_exhaustion_and_client_errors_are_not_retried() {
    let quota = Reply::json(
        429,
        json!({"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}),
    );
    let mock = MockLlm::start(vec![quota, oa_text("never")]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    assert!(matches!(r, Err(LlmError::QuotaExhausted { .. })), "{r:?}");
    assert_eq!(mock.recorded().len(), 1);

    let mock = MockLlm::start(vec![
        Reply::json(400, json!({"error":{"message":"bad request"}})),
        oa_text("never"),
    ]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    assert!(
        matches!(
            r,
            Err(LlmError::Http {
                status: 400,
                retryable: false,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(mock.recorded().len(), 1);

    let mock = MockLlm::start(vec![Reply::json(503, json!({})); 5]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    assert!(matches!(r, Err(LlmError::Http { status: 503, .. })));
    assert_eq!(mock.recorded().len(), 4, "first attempt + max_retries (3)");
}

/// `complete` that also collects the retries announced to the sink.
async fn complete_with_retries(
    s: LlmSettings,
    req: &ChatRequest,
) -> (
    Result<kiln::llm::ChatResponse, LlmError>,
    String,
    Vec<(u32, String, bool)>,
) {
    let client = LlmClient::new(s).unwrap();
    let mut streamed = String::new();
    let mut retries = Vec::new();
    let r = client
        .complete(req, &mut |d| match d {
            kiln::llm::Delta::Text(t) => streamed.push_str(&t),
            kiln::llm::Delta::Retry {
                attempt,
                reason,
                discard,
            } => {
                if discard {
                    streamed.clear();
                }
                retries.push((attempt, reason, discard));
            }
            _ => {}
        })
        .await;
    (r, streamed, retries)
}

#[tokio::test]
async fn a_stream_cut_off_is_retried_and_never_taken_as_the_answer() {
    let cut = Reply::sse(openai_events(&[
        json!({"choices":[{"index":0,"delta":{"content":"Half an ans"}}]}),
    ]));
    let mock = MockLlm::start(vec![cut, oa_text("The whole answer.")]);
    let (r, streamed, retries) =
        complete_with_retries(settings(&mock, Provider::Openai), &ask("x")).await;
    let r = r.unwrap();
    assert_eq!(r.text, "The whole answer.");
    assert_eq!(r.attempts, 2);
    assert_eq!(
        streamed, "The whole answer.",
        "the partial text was discarded"
    );
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0].1.contains("finish_reason") && retries[0].2,
        "{retries:?}"
    );
    assert_eq!(mock.recorded().len(), 2);

    // Cut every time: bounded by stream_max_retries (2), then an error, never a short answer.
    let cut = || {
        Reply::sse(anthropic_events(&[
            json!({"type":"message_start","message":{"usage":{"input_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}),
        ]))
    };
    let mock = MockLlm::start(vec![cut(), cut(), cut(), cut()]);
    let (r, _, retries) =
        complete_with_retries(settings(&mock, Provider::Anthropic), &ask("x")).await;
    assert!(
        matches!(&r, Err(LlmError::Truncated(m)) if m.contains("message_stop")),
        "{r:?}"
    );
    assert_eq!(retries.len(), 2);
    assert_eq!(
        mock.recorded().len(),
        3,
        "first attempt + stream_max_retries"
    );
}

#[tokio::test]
async fn an_error_inside_a_200_stream_is_an_error_and_a_malformed_chunk_is_retried() {
    let mock = MockLlm::start(vec![
        Reply::sse(vec![
            "data: {\"error\":{\"message\":\"upstream model crashed\"}}\n\n".into(),
        ]),
        Reply::sse(vec!["data: {not json\n\n".into()]),
        oa_text("fine now"),
        Reply::sse(anthropic_events(&[
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ])),
    ]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    assert!(
        matches!(&r, Err(LlmError::Stream(m)) if m.contains("upstream model crashed")),
        "{r:?}"
    );
    let (r, _, retries) = complete_with_retries(settings(&mock, Provider::Openai), &ask("x")).await;
    assert_eq!(r.unwrap().text, "fine now");
    assert!(retries[0].1.contains("not JSON"), "{retries:?}");
    let (r, _) = complete(settings(&mock, Provider::Anthropic), &ask("x")).await;
    assert!(
        matches!(&r, Err(LlmError::Stream(m)) if m == "Overloaded"),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout_and_is_retried() {
    let stall = || {
        Reply::Stream(vec![
            (
                Duration::ZERO,
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n".into(),
            ),
            (Duration::from_secs(4), "data: [DONE]\n\n".into()),
        ])
    };
    let mock = MockLlm::start(vec![stall(), oa_text("after the stall")]);
    let mut s = settings(&mock, Provider::Openai);
    s.idle_timeout = Duration::from_millis(500);
    let (r, _, retries) = complete_with_retries(s.clone(), &ask("x")).await;
    assert_eq!(r.unwrap().text, "after the stall");
    assert!(retries[0].1.contains("idle"), "{retries:?}");

    let mock = MockLlm::start(vec![stall(), stall(), stall()]);
    let mut s = settings(&mock, Provider::Openai);
    s.idle_timeout = Duration::from_millis(500);
    let start = Instant::now();
    let (r, _) = complete(s, &ask("x")).await;
    assert!(
        matches!(r, Err(LlmError::Timeout { phase: "idle", .. })),
        "{r:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn context_overflow_is_typed() {
    let mock = MockLlm::start(vec![
        Reply::json(
            400,
            json!({"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}),
        ),
        Reply::json(
            400,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}),
        ),
    ]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &ask("x")).await;
    assert!(matches!(r, Err(LlmError::ContextOverflow { .. })), "{r:?}");
    let (r, _) = complete(settings(&mock, Provider::Anthropic), &ask("x")).await;
    assert!(matches!(r, Err(LlmError::ContextOverflow { .. })), "{r:?}");
}

#[tokio::test]
async fn disable_thinking_and_omitted_temperature() {
    let mock = MockLlm::start(vec![oa_text("a")]);
    let mut s = settings(&mock, Provider::Openai);
    s.disable_thinking = true;
    s.temperature = None;
    complete(s, &ask("x")).await.0.unwrap();
    let body = &mock.recorded()[0].body;
    assert_eq!(
        body["chat_template_kwargs"],
        json!({"enable_thinking": false}),
        "a self-hosted (vLLM/llama.cpp) URL"
    );
    assert!(body.get("temperature").is_none());
}

#[test]
fn llm_check_reports_success_and_failure_without_leaking_the_key() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![
        oa_text("ok"),
        Reply::json(
            401,
            json!({"error":{"message":format!("Incorrect API key provided: {KEY}"),"type":"invalid_request_error"}}),
        ),
        Reply::json(404, json!({"error":"model 'nope' not found"})),
    ]);
    let base = format!("{}/v1", mock.url);
    let env = [("OPENAI_API_KEY", KEY), ("KILN_MODEL", "test-model")];
    let r = ws.kiln(&["llm", "check", "--base-url", &base, "--json"], &env);
    r.expect_code(0);
    let j = r.json();
    assert_eq!(
        (
            j["ok"].as_bool(),
            j["usage"]["output"].as_u64(),
            j["model"].as_str()
        ),
        (Some(true), Some(5), Some("test-model"))
    );

    let r = ws.kiln(&["llm", "check", "--base-url", &base, "--json"], &env);
    r.expect_code(2);
    assert_eq!(r.json()["reason"], "bad_key");
    assert!(
        !r.stdout().contains(KEY) && !r.stderr().contains(KEY),
        "{}{}",
        r.stdout(),
        r.stderr()
    );
    assert!(r.stderr().contains("[redacted]"));

    let r = ws.kiln(
        &["llm", "check", "--base-url", &base, "--model", "nope"],
        &env,
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("model or endpoint not found") && r.stderr().contains("nope"),
        "{}",
        r.stderr()
    );

    // Nothing listening: unreachable, named as such.
    let r = ws.kiln(
        &[
            "llm",
            "check",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--json",
        ],
        &env,
    );
    r.expect_code(2);
    assert_eq!(r.json()["reason"], "unreachable");
}

/// An OpenAI stream of `n` deltas of 1000 bytes of text each that never finishes: 64 MiB
/// and more, generated as it is sent.
fn endless_openai_stream(n: usize) -> Reply {
    let part = format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":{"content":"x".repeat(1000)}}]})
    );
    Reply::Repeat("text/event-stream", String::new(), part, n, String::new())
}

/// A non-streamed OpenAI body whose content is `n` × 1000 bytes (valid JSON once complete).
fn huge_openai_body(n: usize) -> Reply {
    Reply::Repeat(
        "application/json",
        r#"{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":""#
            .into(),
        "y".repeat(1000),
        n,
        r#""}}]}"#.into(),
    )
}

#[tokio::test]
async fn a_streamed_reply_past_max_reply_bytes_fails_fast_and_is_not_retried() {
    let mock = MockLlm::start(vec![endless_openai_stream(70_000)]);
    let mut s = settings(&mock, Provider::Openai);
    s.max_reply_bytes = 1 << 20;
    let t = Instant::now();
    let (r, streamed) = complete(s, &ask("hi")).await;
    let e = r.unwrap_err();
    assert!(
        matches!(e, LlmError::ReplyTooLarge { limit } if limit == 1 << 20),
        "{e}"
    );
    assert!(e.to_string().contains("max_reply_bytes"), "{e}");
    assert!(!e.retryable() && !e.is_broken_stream());
    // Stopped at the cap: what reached the caller is at most one delta past it.
    assert!(streamed.len() <= (1 << 20) + 1000, "{}", streamed.len());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(mock.recorded().len(), 1, "never retried");
    // One event that never ends (no newline) is not held past 6 × the cap + 64 KiB either.
    let line = Reply::Repeat(
        "text/event-stream",
        "data: ".into(),
        "z".repeat(1000),
        64 << 10,
        String::new(),
    );
    let mock = MockLlm::start(vec![line]);
    let mut s = settings(&mock, Provider::Openai);
    s.max_reply_bytes = 64 << 10;
    let (r, _) = complete(s, &ask("hi")).await;
    assert!(matches!(r, Err(LlmError::ReplyTooLarge { .. })), "{r:?}");
    assert_eq!(mock.recorded().len(), 1, "never retried");
}

#[tokio::test]
async fn a_whole_reply_past_max_reply_bytes_fails_without_reading_the_rest() {
    // 64 MiB of body against a 1 MiB cap: kiln stops at 6 MiB + 64 KiB of raw body.
    let mock = MockLlm::start(vec![huge_openai_body(64 << 10), huge_openai_body(512)]);
    let mut s = settings(&mock, Provider::Openai);
    s.stream = false;
    s.max_reply_bytes = 1 << 20;
    let t = Instant::now();
    let (r, _) = complete(s.clone(), &ask("hi")).await;
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("max_reply_bytes"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(mock.recorded().len(), 1, "never retried");
    // A body within the raw bound whose text is still over the cap fails the same way.
    s.max_reply_bytes = 256 << 10;
    let (r, _) = complete(s, &ask("hi")).await;
    assert!(matches!(r, Err(LlmError::ReplyTooLarge { limit }) if limit == 256 << 10));
}

#[test]
fn kiln_fix_stops_a_huge_reply_at_the_default_cap_and_stores_little() {
    let ws = Workspace::new();
    ws.write(
        "main.c",
        "int main(void) {\n    int x = 1\n    return x;\n}\n",
    );
    // The plugins come from the compile cache (compiling them is not what is measured).
    ws.kiln(&["plugin", "list"], &[]).expect_code(0);
    // 64 MiB of streamed text, lazily generated, against the default cap of 4 MiB.
    let mock = MockLlm::start(vec![endless_openai_stream(64 << 10)]);
    let base = format!("{}/v1", mock.url);
    let t = Instant::now();
    let child = ws
        .command(&[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
            "--cmd",
            "gcc -fsyntax-only {file}",
            "--file",
            "main.c",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (out, peak_kib) = wait_with_peak_rss(child);
    let r = crate::support::Run(out);
    assert_eq!(r.code(), 2, "{}\n{}", r.stdout(), r.stderr());
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert!(
        all.contains("size cap of 4194304 bytes") && all.contains("max_reply_bytes"),
        "{}",
        &all[all.len().saturating_sub(2000)..]
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(mock.recorded().len(), 1, "never retried");
    let db_bytes: u64 = std::fs::read_dir(ws.store_path().parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kiln.db"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(db_bytes < 1 << 20, "kiln.db* hold {db_bytes} bytes");
    eprintln!("kiln fix against a 64 MiB reply: peak RSS {peak_kib} KiB, store {db_bytes} bytes");
    assert!(peak_kib < 200 << 10, "peak RSS {peak_kib} KiB");
}

/// Wait for `child`, collecting its output, and return it with its peak resident set (KiB).
fn wait_with_peak_rss(mut child: std::process::Child) -> (std::process::Output, i64) {
    use std::io::Read;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let pid = child.id() as libc::pid_t;
    // kiln's own high-water mark (VmHWM), read until it exits: wait4's `ru_maxrss` would also
    // count the processes of its calls, forks of kiln made before the model answered.
    let hwm_reader = std::thread::spawn(move || {
        let mut peak = 0i64;
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            else {
                break;
            };
            peak = peak.max(kib);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        peak
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, with valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Output {
        status: std::process::ExitStatus::from_raw(if code >= 0 { code << 8 } else { status }),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    let own = hwm_reader.join().unwrap();
    eprintln!(
        "kiln's own VmHWM {own} KiB; with its calls' processes (wait4) {} KiB",
        usage.ru_maxrss
    );
    (out, own)
}

/// `complete` of `reply` (one scripted reply, nothing after it), with a 1 MiB cap: the error,
/// after checking it came at once and was not retried.
async fn refused_at_once(provider: Provider, reply: Reply, stream: bool) -> LlmError {
    let mock = MockLlm::start(vec![reply]);
    let mut s = settings(&mock, provider);
    s.max_reply_bytes = 1 << 20;
    s.stream = stream;
    let t = Instant::now();
    let (r, _) = complete(s, &tool_req()).await;
    let e = r.expect_err("refused");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!e.retryable() && !e.is_broken_stream(), "{e}");
    assert_eq!(mock.recorded().len(), 1, "never retried: {e}");
    e
}

#[tokio::test]
async fn a_tool_call_index_far_past_the_calls_so_far_fails_fast() {
    // One 300-byte chunk naming call 100,000,000: kiln used to grow a vector that long.
    let mut parts = openai_events(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":100_000_000,"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let e = refused_at_once(Provider::Openai, Reply::sse(parts), true).await;
    assert!(
        matches!(&e, LlmError::Protocol { dialect: "OpenAI", message } if message.contains("index 100000000")),
        "{e}"
    );
    assert!(e.to_string().contains("breaks the OpenAI protocol"), "{e}");
    // A gap of one is refused too; the next index and one seen already are fine.
    let mut parts = openai_events(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"read_file","arguments":"{}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let mock = MockLlm::start(vec![Reply::sse(parts)]);
    let (r, _) = complete(settings(&mock, Provider::Openai), &tool_req()).await;
    let calls = r.unwrap().tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].arguments, r#"{"path":"x"}"#);
    let mut parts = openai_events(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"a","function":{"name":"read_file","arguments":"{}"}}]}}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let e = refused_at_once(Provider::Openai, Reply::sse(parts), true).await;
    assert!(matches!(e, LlmError::Protocol { .. }), "{e}");

    // The Anthropic dialect: a content block far past the blocks so far.
    let events = anthropic_events(&[
        json!({"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":5,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":100_000_000,"content_block":{"type":"tool_use","id":"tu_1","name":"read_file","input":{}}}),
        json!({"type":"content_block_stop","index":100_000_000}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}),
        json!({"type":"message_stop"}),
    ]);
    let e = refused_at_once(Provider::Anthropic, Reply::sse(events), true).await;
    assert!(
        matches!(&e, LlmError::Protocol { dialect: "Anthropic", message } if message.contains("index 100000000")),
        "{e}"
    );
}

#[tokio::test]
async fn tool_call_names_and_ids_count_toward_max_reply_bytes() {
    // OpenAI, streamed: a name of 4 MiB in 1000-byte fragments against a 1 MiB cap.
    let first = format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"n","arguments":""}}]}}]})
    );
    let more = format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"n".repeat(1000)}}]}}]})
    );
    let reply = Reply::Repeat("text/event-stream", first, more, 4 << 10, String::new());
    let e = refused_at_once(Provider::Openai, reply, true).await;
    assert!(
        matches!(e, LlmError::ReplyTooLarge { limit } if limit == 1 << 20),
        "{e}"
    );
    // One chunk whose id alone is past the cap.
    let mut parts = openai_events(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"i".repeat(2 << 20),"function":{"name":"read_file","arguments":"{}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let e = refused_at_once(Provider::Openai, Reply::sse(parts), true).await;
    assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");
    // Not streamed: a 2 MiB name in a whole body.
    let body = json!({"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"n".repeat(2 << 20),"arguments":"{}"}}]}}]});
    let e = refused_at_once(Provider::Openai, Reply::json(200, body), false).await;
    assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");

    // Anthropic, streamed: a 2 MiB name, then a 2 MiB id, each in one content block.
    for (id, name) in [
        ("tu_1".to_string(), "n".repeat(2 << 20)),
        ("i".repeat(2 << 20), "read_file".to_string()),
    ] {
        let events = anthropic_events(&[
            json!({"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":5,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}),
            json!({"type":"message_stop"}),
        ]);
        let e = refused_at_once(Provider::Anthropic, Reply::sse(events), true).await;
        assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");
    }
    // Anthropic, streamed: tool input past the cap, in fragments.
    let head = anthropic_events(&[
        json!({"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":5,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"tu_1","name":"read_file","input":{}}}),
    ])
    .concat();
    let part = anthropic_events(&[json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"x".repeat(1000)}})]).concat();
    let reply = Reply::Repeat("text/event-stream", head, part, 4 << 10, String::new());
    let e = refused_at_once(Provider::Anthropic, reply, true).await;
    assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");
    // Not streamed: a 2 MiB name.
    let body = json!({"type":"message","model":"claude-x","stop_reason":"tool_use","content":[{"type":"tool_use","id":"tu","name":"n".repeat(2 << 20),"input":{}}],"usage":{"input_tokens":1,"output_tokens":1}});
    let e = refused_at_once(Provider::Anthropic, Reply::json(200, body), false).await;
    assert!(matches!(e, LlmError::ReplyTooLarge { .. }), "{e}");
}

/// A server that accepts every connection, reads nothing and never answers; the connections
/// are held open for as long as the test runs.
fn silent_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            let Ok(s) = s else { break };
            held.push(s);
        }
    });
    url
}

/// Wait for `child`, killing it (and failing) after `limit`.
fn wait_at_most(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// Issue 31 item 13: against a server that accepts the connection and never answers, `kiln
/// llm check` gives up within its default 30 s, showing each retry as it happens.
#[test]
fn llm_check_against_a_silent_server_gives_up_within_30_s_showing_its_retries() {
    let ws = Workspace::new();
    let url = silent_server();
    let start = Instant::now();
    let child = ws
        .command(&["llm", "check", "--base-url", &url, "--model", "m", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_at_most(child, Duration::from_secs(60));
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(took < Duration::from_secs(40), "took {took:?}: {stderr}");
    assert!(
        stderr.contains("retry 1") && stderr.contains("retry 2"),
        "{stderr}"
    );
    assert!(stderr.contains("no answer within 30 s"), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["reason"], "timeout", "{j}");
    assert_eq!(j["attempts"], 3, "{j}");
}

/// Issue 31 item 13: an HTML page (or other text that is no event stream) at the base URL is
/// named as such, at once (no retries), with no advice about `stream = false`; asked not to
/// stream, the same page is "not a JSON answer".
#[test]
fn an_html_page_at_the_base_url_is_named_as_such() {
    let ws = Workspace::new();
    let page = || {
        Reply::Repeat(
            "text/html; charset=utf-8",
            "<!DOCTYPE html>\n<html><head><title>Welcome to nginx</title></head>".into(),
            String::new(),
            0,
            "</html>\n".into(),
        )
    };
    let text = Reply::Repeat(
        "text/plain",
        "Ollama is running".into(),
        String::new(),
        0,
        String::new(),
    );
    let mock = MockLlm::start(vec![page(), text, page()]);
    let base = format!("{}/v1", mock.url);
    let check = |env: &[(&str, &str)]| {
        ws.kiln(
            &[
                "llm",
                "check",
                "--base-url",
                &base,
                "--model",
                "m",
                "--json",
            ],
            env,
        )
    };
    let r = check(&[]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("the server sent text/html, not an event stream: check `--base-url`"),
        "{err}"
    );
    assert!(err.contains("Welcome to nginx"), "{err}");
    assert!(
        !err.contains("stream = false") && !err.contains("retry"),
        "{err}"
    );
    assert_eq!(r.json()["reason"], "not_an_llm_api");
    assert_eq!(mock.recorded().len(), 1, "an HTML page is not retried");

    let r = check(&[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("the server sent text/plain, not an event stream"),
        "{}",
        r.stderr()
    );
    assert_eq!(mock.recorded().len(), 2);

    ws.user_config("[llm]\nstream = false\n");
    let r = check(&[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("the server sent text/html, not a JSON answer"),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("stream = false"), "{}", r.stderr());
}

/// A password in the base URL (`http://user:password@proxy/v1`, a self-hosted server behind
/// basic authentication) is a secret like the key: it is sent, but no message, `llm check`
/// answer, history row or byte of the store holds it.
#[test]
fn a_password_in_the_base_url_is_never_shown_or_stored() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let base = "http://alice:pa55w0rd@127.0.0.1:1/v1";
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            base,
            "--model",
            "m",
            "--cmd",
            "false",
            "--max-iters",
            "1",
        ],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    assert!(
        r.stderr().contains("alice:***@127.0.0.1:1"),
        "{}",
        r.stderr()
    );
    let h = ws.kiln(&["history", "--json"], &[]);
    h.expect_code(0);
    assert!(h.stdout().contains("alice:***@"), "{}", h.stdout());
    let c = ws.kiln(
        &["llm", "check", "--base-url", base, "--model", "m", "--json"],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    c.expect_code(2);
    assert_eq!(c.json()["base_url"], "http://alice:***@127.0.0.1:1/v1");
    for text in [r.stdout(), r.stderr(), h.stdout(), c.stdout(), c.stderr()] {
        assert!(!text.contains("pa55w0rd"), "{text}");
    }
    let db = std::fs::read(ws.store_path()).unwrap();
    assert!(
        !db.windows(8).any(|w| w == b"pa55w0rd"),
        "the password is in the store"
    );
}

/// An Azure-style base URL with a query (`.../v1?api-version=...`): the request's path is
/// joined before the query, and a key in the query is shown as `key=***`, never stored.
#[test]
fn a_base_url_query_follows_the_path_and_its_values_are_never_shown_or_stored() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![oa_text("ok")]);
    let base = format!(
        "{}/openai/v1?api-version=2024-02-01&key=QK-SECRET",
        mock.url
    );
    let c = ws.kiln(
        &[
            "llm",
            "check",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
        ],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    c.expect_code(0);
    assert_eq!(
        mock.recorded()[0].path,
        "/openai/v1/chat/completions?api-version=2024-02-01&key=QK-SECRET"
    );
    assert_eq!(
        c.json()["base_url"],
        format!("{}/openai/v1?api-version=***&key=***", mock.url)
    );
    let dead = "http://127.0.0.1:1/v1?key=QK-SECRET";
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            dead,
            "--model",
            "m",
            "--cmd",
            "false",
            "--max-iters",
            "1",
        ],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    assert!(r.stderr().contains("key=***"), "{}", r.stderr());
    let h = ws.kiln(&["history", "--json"], &[]);
    h.expect_code(0);
    for text in [r.stdout(), r.stderr(), h.stdout(), c.stdout(), c.stderr()] {
        assert!(!text.contains("QK-SECRET"), "{text}");
    }
    let db = std::fs::read(ws.store_path()).unwrap();
    assert!(
        !db.windows(9).any(|w| w == b"QK-SECRET"),
        "the query's key is in the store"
    );
}
