//! `kiln mcp`'s stdio transport: newline-delimited JSON-RPC 2.0 on stdin/stdout, answering what
//! cannot be served as JSON-RPC 2.0 says instead of dropping it (rmcp's own stdio transport drops
//! an unparsable line and an oversized one without a word, so a client waits forever):
//!
//! - a line that is not JSON: `-32700` "Parse error" with `"id": null`;
//! - JSON that is not a JSON-RPC message (a batch, a request without `method`, ...): `-32600`
//!   "Invalid Request", with the message's id when it has one, else `null`;
//! - a line over [`MAX_LINE`]: `-32600` with the request's id when its start names one (clients
//!   write `id` before `params`), else `null`; the line is skipped and the server goes on.
//!
//! An unknown notification is ignored (a notification gets no answer). Error answers are written
//! by their own task under the writer's lock, so a `receive` cancelled by the service loop never
//! leaves half a line on stdout; `close` waits for them.

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The longest request line served (rmcp's default): longer ones are answered with an error.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept to find its id.
const ID_PREFIX: usize = 64 * 1024;

/// JSON-RPC 2.0's parse error code.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's invalid request code.
const INVALID_REQUEST: i64 = -32600;

pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read (kept across a cancelled `receive`).
    line: Vec<u8>,
    max_line: usize,
    /// Skipping the rest of an oversized line (until its newline).
    discarding: bool,
    /// The start of the oversized line being skipped, to find its id.
    prefix: Vec<u8>,
    write: Arc<Mutex<W>>,
    /// Error answers being written.
    answers: Vec<tokio::task::JoinHandle<()>>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub(crate) fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line: MAX_LINE,
            discarding: false,
            prefix: Vec::new(),
            write: Arc::new(Mutex::new(write)),
            answers: Vec::new(),
        }
    }

    /// Write one JSON-RPC error answer (by its own task: see the module's documentation).
    fn answer(&mut self, id: Value, code: i64, message: String) {
        let line = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        );
        let write = self.write.clone();
        self.answers.retain(|h| !h.is_finished());
        self.answers.push(tokio::spawn(async move {
            let mut w = write.lock().await;
            if w.write_all(line.as_bytes()).await.is_ok() {
                let _ = w.flush().await;
            }
        }));
    }

    /// Read the next line into `self.line` (without its newline), never holding more than
    /// `max_line` bytes of it. Cancel-safe: a partial line stays in `self.line`.
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let (consumed, step) = {
                let available = self.read.fill_buf().await?;
                if available.is_empty() {
                    return Ok(Read::Eof);
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                let chunk = &available[..newline.unwrap_or(take)];
                if self.discarding {
                    let room = ID_PREFIX.saturating_sub(self.prefix.len());
                    self.prefix
                        .extend_from_slice(&chunk[..chunk.len().min(room)]);
                    (take, newline.map_or(Step::More, |_| Step::Oversized))
                } else if self.line.len() + chunk.len() > self.max_line {
                    self.prefix = std::mem::take(&mut self.line);
                    self.prefix.truncate(ID_PREFIX);
                    let room = ID_PREFIX.saturating_sub(self.prefix.len());
                    self.prefix
                        .extend_from_slice(&chunk[..chunk.len().min(room)]);
                    self.discarding = true;
                    (take, newline.map_or(Step::More, |_| Step::Oversized))
                } else {
                    self.line.extend_from_slice(chunk);
                    (take, newline.map_or(Step::More, |_| Step::Line))
                }
            };
            self.read.consume(consumed);
            match step {
                Step::More => {}
                Step::Line => return Ok(Read::Line),
                Step::Oversized => {
                    self.discarding = false;
                    return Ok(Read::Oversized);
                }
            }
        }
    }
}

enum Read {
    Line,
    Oversized,
    Eof,
}

enum Step {
    More,
    Line,
    Oversized,
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut w = write.lock().await;
            w.write_all(&line).await?;
            w.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(Read::Line) => {}
                Ok(Read::Eof) => return None,
                Ok(Read::Oversized) => {
                    let id = prefix_id(&self.prefix);
                    self.prefix = Vec::new();
                    let message = format!(
                        "Invalid Request: the message is longer than {} MiB (the most kiln mcp reads in one line); it was skipped",
                        self.max_line / (1024 * 1024)
                    );
                    self.answer(id, INVALID_REQUEST, message);
                    continue;
                }
                Err(e) => {
                    tracing::error!("kiln mcp: reading stdin failed: {e}");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\r").unwrap_or(&line);
            let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = match serde_json::from_slice(text) {
                Ok(v) => v,
                Err(e) => {
                    self.answer(Value::Null, PARSE_ERROR, format!("Parse error: {e}"));
                    continue;
                }
            };
            match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
                Ok(msg) => return Some(msg),
                // A notification gets no answer, even one kiln does not know.
                Err(_) if value.get("method").is_some() && value.get("id").is_none() => continue,
                Err(e) => {
                    let id = match value.get("id") {
                        Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
                        _ => Value::Null,
                    };
                    self.answer(id, INVALID_REQUEST, format!("Invalid Request: {e}"));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        for h in std::mem::take(&mut self.answers) {
            let _ = h.await;
        }
        self.write.lock().await.flush().await
    }
}

/// The top-level `id` (a number or a string) the start of a JSON object names, or `null`.
fn prefix_id(prefix: &[u8]) -> Value {
    let mut depth = 0usize;
    let mut i = 0;
    let mut expect_key = false;
    while i < prefix.len() {
        match prefix[i] {
            b'"' => {
                let Some(end) = string_end(prefix, i) else {
                    return Value::Null;
                };
                if depth == 1 && expect_key && &prefix[i..=end] == b"\"id\"" {
                    let rest = &prefix[end + 1..];
                    let rest = skip_ws(rest);
                    if let Some(rest) = rest.strip_prefix(b":") {
                        return scalar(skip_ws(rest));
                    }
                    return Value::Null;
                }
                expect_key = false;
                i = end + 1;
                continue;
            }
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => expect_key = depth == 1,
            _ => {}
        }
        i += 1;
    }
    Value::Null
}

/// The index of the quote closing the JSON string opened at `start`.
fn string_end(s: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

/// A number or string at the start of `s` (an id), or `null`.
fn scalar(s: &[u8]) -> Value {
    let end = if s.first() == Some(&b'"') {
        string_end(s, 0).map(|e| e + 1)
    } else {
        s.iter()
            .position(|b| matches!(b, b',' | b'}') || b.is_ascii_whitespace())
    };
    end.and_then(|e| serde_json::from_slice::<Value>(&s[..e]).ok())
        .filter(|v| v.is_number() || v.is_string())
        .unwrap_or(Value::Null)
}
