//! The benches' mock model: a server on 127.0.0.1 that answers every chat request with the fix
//! of [`BROKEN_C`] as an OpenAI-style stream, each connection on its own thread.

use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

/// A C file missing one semicolon; gcc fails on it until the mock's answer is applied.
pub const BROKEN_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

/// A mock model answering every request with the fix of BROKEN_C after `latency`, each
/// connection on its own thread (so N tasks wait on it at once, as on a real endpoint).
pub fn mock(latency: Duration) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let l = line.trim_end().to_ascii_lowercase();
                    if l.is_empty() {
                        break;
                    }
                    if let Some(v) = l.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                std::thread::sleep(latency);
                let text = "Fixed.\n\n<<<<<<< SEARCH\n    int x = 1\n=======\n    int x = 1;\n>>>>>>> REPLACE\n";
                let chunks = [
                    json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}),
                    json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
                    json!({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5}}),
                ];
                let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{sse}",
                    sse.len()
                );
            });
        }
    });
    url
}
