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
//!   [`ErrorKind::Transport`] `"stream idle for N s"`. Comment lines (`: keep-alive`) are bytes,
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
                self.data.push_str(&String::from_utf8_lossy(value));
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
                    let msg = format!("stream idle for {}", crate::provider::secs(st.idle));
                    return Some((Err(LlmError::new(ErrorKind::Transport, msg)), st));
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
mod tests {
    use super::*;
    use futures::stream;

    fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<Bytes, LlmError>> + Send {
        stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
    }

    async fn collect(s: SseStream) -> Vec<Result<SseEvent, LlmError>> {
        s.collect().await
    }

    #[tokio::test]
    async fn frames_events_ignores_comments_and_joins_data_lines() {
        let body: &[&'static [u8]] = &[
            b": keep-alive\n\nevent: ping\ndata: a\ndata: b\n\n",
            b"data: [DONE]\n\n",
        ];
        let out = collect(sse_events(chunks(body), Duration::from_secs(5))).await;
        let out: Vec<SseEvent> = out.into_iter().map(|r| r.expect("ok")).collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].event, "ping");
        assert_eq!(out[0].data, "a\nb");
        assert!(!out[0].at_eof);
        assert_eq!(out[1].event, "message");
        assert_eq!(out[1].data, "[DONE]");
    }

    #[tokio::test]
    async fn crlf_split_across_chunks_and_utf8_split() {
        let body: &[&'static [u8]] = &[b"data: \xd0", b"\xb8\r", b"\n\r\n"];
        let out = collect(sse_events(chunks(body), Duration::from_secs(5))).await;
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].as_ref().expect("ok").data, "и");
    }

    #[tokio::test]
    async fn unterminated_last_event_is_dispatched_at_eof() {
        let body: &[&'static [u8]] = &[b"data: one\n\ndata: {\"type\":\"message_stop\"}"];
        let out = collect(sse_events(chunks(body), Duration::from_secs(5))).await;
        let out: Vec<SseEvent> = out.into_iter().map(|r| r.expect("ok")).collect();
        assert_eq!(out.len(), 2);
        assert!(!out[0].at_eof);
        assert!(out[1].at_eof);
        assert_eq!(out[1].data, "{\"type\":\"message_stop\"}");
    }

    #[tokio::test]
    async fn oversized_event_is_malformed() {
        let big = Bytes::from(vec![b'x'; MAX_EVENT_BYTES + 10]);
        let s = stream::iter(vec![Ok(Bytes::from_static(b"data: ")), Ok(big)]);
        let out = collect(sse_events(s, Duration::from_secs(5))).await;
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].as_ref().expect_err("err").kind,
            ErrorKind::MalformedChunk
        );
    }

    #[tokio::test]
    async fn many_small_events_do_not_trip_the_cap() {
        let one = Bytes::from_static(b"data: 0123456789\n\n");
        let n = MAX_EVENT_BYTES / one.len() + 100;
        let s = stream::iter((0..n).map(move |_| Ok(one.clone())).collect::<Vec<_>>());
        let out = collect(sse_events(s, Duration::from_secs(5))).await;
        assert_eq!(out.len(), n);
        assert!(out.iter().all(|r| r.is_ok()));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_stream_times_out_and_comments_rearm() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, LlmError>>();
        let mut s = sse_events(rx, Duration::from_secs(3));
        tx.unbounded_send(Ok(Bytes::from_static(b"data: a\n\n")))
            .expect("send");
        assert_eq!(s.next().await.expect("item").expect("ok").data, "a");
        // A comment after 2 s re-arms the timer; the stream then stays silent.
        let tx2 = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = tx2.unbounded_send(Ok(Bytes::from_static(b": ping\n\n")));
        });
        let start = tokio::time::Instant::now();
        let err = s.next().await.expect("item").expect_err("idle");
        assert_eq!(err.kind, ErrorKind::Transport);
        assert_eq!(err.message, "stream idle for 3 s");
        assert!(start.elapsed() >= Duration::from_secs(5));
        assert!(s.next().await.is_none(), "stream ends after the error");
        drop(tx);
    }

    #[tokio::test]
    async fn transport_error_passes_through_and_ends() {
        let s = stream::iter(vec![
            Ok(Bytes::from_static(b"data: a\n\n")),
            Err(LlmError::new(ErrorKind::Transport, "reset")),
            Ok(Bytes::from_static(b"data: b\n\n")),
        ]);
        let out = collect(sse_events(s, Duration::from_secs(5))).await;
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].as_ref().expect_err("err").message, "reset");
    }

    #[tokio::test]
    async fn invalid_utf8_becomes_replacement_characters() {
        let body: &[&'static [u8]] = &[b"data: \xff\xfe\n\n"];
        let out = collect(sse_events(chunks(body), Duration::from_secs(5))).await;
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ref().expect("ok").data, "\u{fffd}\u{fffd}");
    }

    /// Parse `chunks` fed one by one; returns (events dispatched by `push`, events from `finish`).
    fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, Vec<SseEvent>) {
        let mut p = SseParser::new();
        let mut live = Vec::new();
        for c in chunks {
            p.push(c, &mut live).expect("push");
        }
        let mut eof = Vec::new();
        p.finish(&mut eof);
        (live, eof)
    }

    fn ev(event: &str, data: &str, id: &str, at_eof: bool) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.into(),
            at_eof,
        }
    }

    fn msg(data: &str) -> SseEvent {
        ev("message", data, "", false)
    }

    /// The framing table of issue 13.1: every case is checked whole, split at every byte
    /// position, and fed one byte at a time; the events (and whether they came before EOF)
    /// must be the same.
    #[test]
    fn framing_table_any_split() {
        let cases: Vec<(&str, &[u8], Vec<SseEvent>)> = vec![
            ("LF", b"data: a\n\ndata: b\n\n", vec![msg("a"), msg("b")]),
            (
                "CRLF",
                b"data: a\r\n\r\ndata: b\r\n\r\n",
                vec![msg("a"), msg("b")],
            ),
            (
                "bare CR",
                b"data: a\r\rdata: [DONE]\r\r",
                vec![msg("a"), msg("[DONE]")],
            ),
            (
                "mixed endings",
                b"data: a\r\ndata: b\n\rdata: c\r\n\n",
                vec![msg("a\nb"), msg("c")],
            ),
            (
                "data without space",
                b"data:a\n\ndata:  b\n\n",
                vec![msg("a"), msg(" b")],
            ),
            (
                "comments are skipped",
                b": keep-alive\n\n:OPENROUTER PROCESSING\r\rdata: x\n\n",
                vec![msg("x")],
            ),
            (
                "event names reset after each event",
                b"event: ping\ndata: {}\n\ndata: y\n\n",
                vec![ev("ping", "{}", "", false), msg("y")],
            ),
            (
                "event without data is not dispatched",
                b"event: ping\n\ndata: z\n\n",
                vec![msg("z")],
            ),
            (
                "id persists, NUL id ignored, retry and unknown fields ignored",
                b"id: 7\nretry: 1500\nfoo: bar\ndata: x\n\nid: a\0b\ndata: y\n\n",
                vec![
                    ev("message", "x", "7", false),
                    ev("message", "y", "7", false),
                ],
            ),
            (
                "data lines joined",
                b"data: a\ndata\ndata: b\n\n",
                vec![msg("a\n\nb")],
            ),
            (
                "data that is not JSON is kept as is",
                b"data: : keepalive\n\n",
                vec![msg(": keepalive")],
            ),
            (
                "leading BOM dropped once",
                b"\xEF\xBB\xBFdata: x\n\n\xEF\xBB\xBFdata: y\n\n",
                vec![msg("x")],
            ),
            (
                "BOM then CR framing",
                b"\xEF\xBB\xBFdata: x\r\r",
                vec![msg("x")],
            ),
            (
                "U+2028 is not a line end",
                "data: {\"c\":\" \u{2028}\"}\n\n".as_bytes(),
                vec![msg("{\"c\":\" \u{2028}\"}")],
            ),
            (
                "multi-byte character",
                "data: и😀\n\n".as_bytes(),
                vec![msg("и😀")],
            ),
            (
                "no trailing blank line at EOF",
                b"data: a\n\ndata: {\"type\":\"message_stop\"}",
                vec![
                    msg("a"),
                    ev("message", "{\"type\":\"message_stop\"}", "", true),
                ],
            ),
            (
                "one line end at EOF",
                b"data: a\r\n",
                vec![ev("message", "a", "", true)],
            ),
            ("empty stream", b"", vec![]),
            ("only blank lines", b"\n\r\n\r", vec![]),
        ];
        for (name, body, want) in cases {
            let (live, eof) = parse(&[body]);
            let all: Vec<SseEvent> = live.iter().chain(eof.iter()).cloned().collect();
            assert_eq!(all, want, "case {name}: whole");
            // Everything terminated by a blank line is dispatched without waiting for EOF.
            assert!(live.iter().all(|e| !e.at_eof), "case {name}");
            assert!(eof.iter().all(|e| e.at_eof), "case {name}");
            for cut in 0..=body.len() {
                let (l2, e2) = parse(&[&body[..cut], &body[cut..]]);
                let got: Vec<SseEvent> = l2.into_iter().chain(e2).collect();
                assert_eq!(got, want, "case {name}: split at {cut}");
            }
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            let (l3, e3) = parse(&bytes);
            let got: Vec<SseEvent> = l3.into_iter().chain(e3).collect();
            assert_eq!(got, want, "case {name}: byte by byte");
        }
    }

    #[test]
    fn retry_field_is_kept_when_numeric() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"retry: 1500\nretry: 2x\nid: 9\n\n", &mut out)
            .expect("push");
        assert_eq!(p.retry_ms(), Some(1500));
        assert_eq!(p.last_id(), "9");
        assert!(out.is_empty());
    }

    /// Issue 13.1: on a connection kept open, an event framed with bare CRs is handled as soon
    /// as its blank line arrives, not when the next bytes do.
    #[tokio::test]
    async fn bare_cr_event_is_dispatched_before_more_bytes_arrive() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, LlmError>>();
        let mut s = sse_events(rx, Duration::from_secs(600));
        tx.unbounded_send(Ok(Bytes::from_static(b"data: {\"a\":1}\r\r")))
            .expect("send");
        let first = s.next().await.expect("item").expect("ok");
        assert_eq!(first.data, "{\"a\":1}");
        assert!(!first.at_eof);
        drop(tx);
        assert!(s.next().await.is_none());
    }
}
