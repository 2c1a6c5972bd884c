//! A scripted mock LLM server over real HTTP on 127.0.0.1: each request gets the next scripted
//! reply (a full body, an SSE stream with pauses, or a connection that stalls), and every
//! request is recorded (path, headers, JSON body) for assertions.

use serde_json::Value;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted reply.
#[derive(Clone)]
pub enum Reply {
    /// Status, extra headers, body.
    Full(u16, Vec<(&'static str, String)>, String),
    /// A 200 SSE stream: parts written with a pause before each, then the connection closes.
    Stream(Vec<(Duration, String)>),
    /// A 200 reply of content type `.0` whose body is `.1`, then `.2` repeated `.3` times, then
    /// `.4`, written as it goes (a huge body without holding it), with no Content-Length.
    Repeat(&'static str, String, String, usize, String),
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Full(status, vec![], body.to_string())
    }
    pub fn sse(parts: Vec<String>) -> Reply {
        Reply::Stream(parts.into_iter().map(|p| (Duration::ZERO, p)).collect())
    }
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct MockLlm {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl MockLlm {
    pub fn start(replies: Vec<Reply>) -> MockLlm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (q, r) = (queue.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (q, r) = (q.clone(), r.clone());
                std::thread::spawn(move || handle(stream, &q, &r));
            }
        });
        MockLlm { url, requests }
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn handle(mut stream: TcpStream, queue: &Mutex<VecDeque<Reply>>, requests: &Mutex<Vec<Recorded>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = vec![0u8; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    requests.lock().unwrap().push(Recorded {
        path,
        headers,
        body,
    });
    let reply = queue.lock().unwrap().pop_front();
    let write = |s: &mut TcpStream, status: u16, ctype: &str, extra: &[(&str, String)]| {
        let mut head =
            format!("HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nConnection: close\r\n");
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = s.write_all(head.as_bytes());
    };
    match reply {
        None => {
            write(&mut stream, 500, "application/json", &[]);
            let _ = stream.write_all(br#"{"error":{"message":"mock: no scripted reply left"}}"#);
        }
        Some(Reply::Full(status, extra, body)) => {
            let mut extra = extra;
            extra.push(("Content-Length", body.len().to_string()));
            write(&mut stream, status, "application/json", &extra);
            let _ = stream.write_all(body.as_bytes());
        }
        Some(Reply::Stream(parts)) => {
            write(&mut stream, 200, "text/event-stream", &[]);
            for (pause, part) in parts {
                std::thread::sleep(pause);
                if stream.write_all(part.as_bytes()).is_err() {
                    return;
                }
                let _ = stream.flush();
            }
        }
        Some(Reply::Repeat(ctype, head, part, times, tail)) => {
            write(&mut stream, 200, ctype, &[]);
            let mut w = std::io::BufWriter::with_capacity(64 << 10, &mut stream);
            for p in std::iter::once(&head)
                .chain(std::iter::repeat_n(&part, times))
                .chain(std::iter::once(&tail))
            {
                if w.write_all(p.as_bytes()).is_err() {
                    // The client hung up: what the tests want to see.
                    sent_until_hangup(requests);
                    return;
                }
            }
            let _ = w.flush();
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Note on the last recorded request that the client closed the connection mid-reply.
fn sent_until_hangup(requests: &Mutex<Vec<Recorded>>) {
    if let Some(last) = requests.lock().unwrap().last_mut() {
        last.headers
            .push(("x-mock-client-hung-up".into(), "1".into()));
    }
}

/// `data: {json}\n\n` for each chunk.
pub fn openai_events(chunks: &[Value]) -> Vec<String> {
    chunks.iter().map(|c| format!("data: {c}\n\n")).collect()
}

/// `event: NAME\ndata: {json}\n\n` for each event.
pub fn anthropic_events(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// A streamed OpenAI answer with `text`, usage, finish_reason and `[DONE]`.
pub fn openai_text(text: &str) -> Reply {
    let mut parts = openai_events(&[
        serde_json::json!({"model":"test-model","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{"content":text}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
        serde_json::json!({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":2}}}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

/// A streamed OpenAI answer that calls one tool.
pub fn openai_tool_call(name: &str, arguments: &str) -> Reply {
    let mut parts = openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":name,"arguments":arguments}}]}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

/// A streamed OpenAI answer calling several tools at once: `(name, arguments)` pairs.
pub fn openai_calls(calls: &[(&str, &str)]) -> Reply {
    let deltas: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":format!("call_{i}"),"type":"function","function":{"name":name,"arguments":args}}]}}]}))
        .collect();
    let mut parts = openai_events(&deltas);
    parts.extend(openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]));
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

/// A streamed OpenAI answer calling one tool with JSON arguments.
pub fn call(name: &str, args: Value) -> Reply {
    openai_calls(&[(name, &args.to_string())])
}

/// The contents of the tool results the model was shown in request `i`.
pub fn tool_contents(mock: &MockLlm, i: usize) -> Vec<String> {
    mock.recorded()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}
