//! A Server-Sent Events decoder: bytes in, complete events (`event:` name and joined `data:`
//! lines) out. Tolerates CRLF line endings and events split across network chunks.
//!
//! Kept rather than `eventsource-stream` (issue #32): that crate wraps the byte stream and
//! holds an unfinished event where the caller cannot see it, so the cap on an event that
//! never ends ([`Decoder::pending_bytes`], tests/integration/llm.rs
//! `a_streamed_reply_past_max_reply_bytes_fails_fast_and_is_not_retried`) could not be
//! kept; it drops, as the SSE specification says a browser should, a last event with no
//! blank line after it, which [`Decoder::finish`] hands over so a reply whose last event
//! completes it is not called cut off; and the read loop needs each raw chunk under its idle
//! timeout and the body's first bytes to name a body that is no event stream. It would
//! also bring `nom`, which nothing else here builds.

/// One SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental decoder.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl Decoder {
    /// Feed bytes; returns the events completed by them.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            if line.is_empty() {
                if let Some(e) = self.take() {
                    out.push(e);
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f.to_string(), v.strip_prefix(' ').unwrap_or(v).to_string()),
                None => (line.clone(), String::new()),
            };
            match field.as_str() {
                "event" => self.event = Some(value),
                "data" => self.data.push(value),
                _ => {}
            }
        }
        out
    }

    /// Bytes held for an event not complete yet (its `data:` lines and the partial line).
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() + self.data.iter().map(String::len).sum::<usize>()
    }

    /// At end of stream: the last event if it was not terminated by a blank line.
    pub fn finish(&mut self) -> Option<Event> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let mut evs = self.push(&rest);
            evs.extend(self.push(b"\n"));
            if let Some(e) = evs.pop() {
                return Some(e);
            }
        }
        self.take()
    }

    fn take(&mut self) -> Option<Event> {
        if self.data.is_empty() && self.event.is_none() {
            return None;
        }
        Some(Event {
            event: self.event.take(),
            data: std::mem::take(&mut self.data).join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks() {
        let mut d = Decoder::default();
        assert!(d.push(b"event: message_start\r\nda").is_empty());
        let evs = d.push(b"ta: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\n: comment\n");
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].event.as_deref(), Some("message_start"));
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].data, "x\ny");
        assert!(d.finish().is_none());
        d.push(b"data: tail");
        assert_eq!(d.finish().unwrap().data, "tail");
    }
}
