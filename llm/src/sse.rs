//! Server-sent-events framing of our own, after the WHATWG event-stream algorithm
//! (html.spec.whatwg.org "Parsing an event stream"; wire-formats.md §0).
//!
//! Why not a crate: the SSE framing is small and fully specified, and the crate we used
//! (`eventsource-stream` 0.2) got three things wrong that reached users: it panicked on a stream
//! that starts with a UTF-8 byte-order mark ("start byte index 1 is not a char boundary",
//! issue 24.2), it held an event ended by a bare `\r` until the next byte arrived (a kept-open
//! connection then idled out, issue 13.1), and it hid unknown fields. Fixing the first two
//! around it would have meant re-implementing its line splitting anyway.
//!
//! [`SseParser`] is pure and synchronous (bytes in, events out). [`sse_events`] drives it over
//! a byte stream (e.g. `reqwest::Response::bytes_stream()`, errors already mapped to
//! [`LlmError`]) and adds:
//! - a cap on the bytes buffered for one event ([`MAX_EVENT_BYTES`], 8 MiB): past it the stream
//!   fails with [`ErrorKind::MalformedChunk`];
//! - an idle timeout: when no byte arrives for `idle`, the stream fails with
//!   [`ErrorKind::Transport`] `"stream stalled: no data for N s"`. Comment lines (`: keep-alive`) are bytes,
//!   so they re-arm the timer even though the parser drops them;
//! - EOF flushing: real streams (Anthropic SDK recordings) end with an unterminated last event.
//!   The spec drops it; we dispatch it with [`SseEvent::at_eof`] set, so the protocol layer can
//!   accept it when it is complete JSON and ignore it when the connection was cut mid-line.
//!
//! Framing rules (spec): lines end at `\r\n`, `\n` or a lone `\r` (a `\r` that ends one read and
//! a `\n` that starts the next are one line end, and an event ended by `\r\r` is dispatched at
//! once, without waiting for more bytes); one leading BOM (`EF BB BF`) of the stream is dropped;
//! lines starting with `:` are comments; `field:value` drops one space after the colon (`data:x`
//! and `data: x` are the same); `data` lines are joined with `\n`; `event` names the event
//! (default `message`); `id` sets the last event id unless it holds a NUL; `retry` is kept when
//! it is all ASCII digits; other fields are ignored; a blank line dispatches the event when it
//! has data. Lines are decoded as UTF-8 only once complete, so a character split across reads
//! is whole; invalid bytes become U+FFFD, as the spec's decoder does.
//!
//! Not handled: the non-standard `error: {...}` field line of old llama.cpp builds
//! (wire-formats.md §3.1) is ignored like any unknown field; such a stream then ends without a
//! finish reason and surfaces as a retryable transport error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::error::{ErrorKind, LlmError};

/// Maximum bytes received for one event before it is dispatched: 8 MiB (house limit; a single
/// OpenAI/Anthropic chunk is a few hundred bytes, a whole non-streamed answer rarely exceeds 1 MiB).
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Event name (`event:` field); `"message"` when the server sent none (SSE spec default).
    pub event: String,
    /// Data lines joined with `\n`.
    pub data: String,
    /// The last event id seen on the stream (`id:` field), `""` when none.
    pub id: String,
    /// True when the event was never terminated by a blank line and was dispatched only because
    /// the byte stream ended. It may be a cut-off fragment.
    pub at_eof: bool,
}

/// Incremental SSE parser: feed bytes as they arrive with [`push`](Self::push), then call
/// [`finish`](Self::finish) at end of stream. Never panics on any input.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous byte was a `\r` ending a line: a `\n` right after it is part of that end.
    skip_lf: bool,
    /// No line has been completed yet (a leading BOM is still possible).
    started: bool,
    data: String,
    has_data: bool,
    event: String,
    last_id: String,
    retry_ms: Option<u64>,
    /// Bytes received for the event being built (its lines so far plus the open line).
    event_bytes: usize,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reconnection time from the last valid `retry:` field, ms.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// The last event id (`id:` field), `""` when none.
    pub fn last_id(&self) -> &str {
        &self.last_id
    }

    /// Feed one read; complete events are appended to `out`.
    ///
    /// Errors: [`ErrorKind::MalformedChunk`] when one event grows past [`MAX_EVENT_BYTES`]
    /// without a terminating blank line. The parser should not be fed after an error.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        if self.skip_lf {
            self.skip_lf = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
                None => {
                    self.grow(bytes.len())?;
                    self.line.extend_from_slice(bytes);
                    break;
                }
                Some(pos) => {
                    self.grow(pos + 1)?;
                    self.line.extend_from_slice(&bytes[..pos]);
                    let cr = bytes[pos] == b'\r';
                    bytes = &bytes[pos + 1..];
                    if cr {
                        if bytes.is_empty() {
                            self.skip_lf = true;
                        } else if bytes[0] == b'\n' {
                            bytes = &bytes[1..];
                        }
                    }
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, false, out);
                }
            }
        }
        Ok(())
    }

    /// End of stream: a last line without a line end is processed, and an event that was never
    /// terminated by a blank line is dispatched with [`SseEvent::at_eof`] set.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, true, out);
        }
        self.dispatch(true, out);
    }

    fn grow(&mut self, n: usize) -> Result<(), LlmError> {
        self.event_bytes = self.event_bytes.saturating_add(n);
        if self.event_bytes > MAX_EVENT_BYTES {
            return Err(LlmError::new(
                ErrorKind::MalformedChunk,
                format!(
                    "stream event exceeds {MAX_EVENT_BYTES} bytes without a terminating blank line"
                ),
            ));
        }
        Ok(())
    }

    fn process_line(&mut self, mut line: &[u8], at_eof: bool, out: &mut Vec<SseEvent>) {
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
            }
        }
        if line.is_empty() {
            self.dispatch(at_eof, out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                // Valid UTF-8 (every real stream) takes `from_utf8`'s word-at-a-time check;
                // `from_utf8_lossy` walks byte by byte, and only invalid data needs it.
                match std::str::from_utf8(value) {
                    Ok(text) => self.data.push_str(text),
                    Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                }
                self.has_data = true;
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => {
                self.last_id = String::from_utf8_lossy(value).into_owned();
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry_ms = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, at_eof: bool, out: &mut Vec<SseEvent>) {
        self.event_bytes = self.line.len();
        let event = std::mem::take(&mut self.event);
        if !self.has_data {
            self.data.clear();
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".to_string()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
            at_eof,
        });
    }
}

/// A boxed stream of SSE events; ends after the first error.
pub type SseStream = Pin<Box<dyn Stream<Item = Result<SseEvent, LlmError>> + Send>>;

struct Drive<S> {
    src: Pin<Box<S>>,
    idle: Duration,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    done: bool,
}

/// Frame `bytes` as SSE with the event cap [`MAX_EVENT_BYTES`] and the idle timeout `idle`.
/// Errors from `bytes` are passed through unchanged; the stream ends after the first error.
pub fn sse_events<S>(bytes: S, idle: Duration) -> SseStream
where
    S: Stream<Item = Result<Bytes, LlmError>> + Send + 'static,
{
    let st = Drive {
        src: Box::pin(bytes),
        idle,
        parser: SseParser::new(),
        queue: VecDeque::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            let mut out = Vec::new();
            match tokio::time::timeout(st.idle, st.src.next()).await {
                Err(_) => {
                    st.done = true;
                    let msg = format!(
                        "stream stalled: no data for {}",
                        crate::provider::secs(st.idle)
                    );
                    return Some((Err(LlmError::timed_out(msg)), st));
                }
                Ok(Some(Ok(chunk))) => {
                    if let Err(e) = st.parser.push(&chunk, &mut out) {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                }
                Ok(Some(Err(e))) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                Ok(None) => {
                    st.done = true;
                    st.parser.finish(&mut out);
                }
            }
            st.queue.extend(out);
        }
    }))
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
