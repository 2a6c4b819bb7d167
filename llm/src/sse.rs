//! Byte-capped SSE framing over the `eventsource-stream` crate.
//!
//! [`sse_events`] turns a byte stream (e.g. `reqwest::Response::bytes_stream()`, with its errors
//! already mapped to [`LlmError`]) into a stream of [`SseEvent`]s, adding what the plain parser
//! lacks (wire-formats.md §0):
//! - a cap on the bytes buffered for one event ([`MAX_EVENT_BYTES`], 8 MiB): past it the stream
//!   fails with [`ErrorKind::MalformedChunk`];
//! - an idle timeout: when no byte arrives for `idle`, the stream fails with
//!   [`ErrorKind::Transport`] `"stream idle for N s"`. Comment lines (`: keep-alive`) are bytes,
//!   so they re-arm the timer even though the parser drops them;
//! - EOF flushing: real streams (Anthropic SDK recordings) end with an unterminated last event.
//!   The spec drops it; we dispatch it with [`SseEvent::at_eof`] set, so the protocol layer can
//!   accept it when it is complete JSON and ignore it when the connection was cut mid-line.
//!
//! Not handled: the non-standard `error: {...}` field line of old llama.cpp builds
//! (wire-formats.md §3.1). `eventsource-stream` ignores unknown fields and does not expose them;
//! such a stream then ends without a finish reason and surfaces as a retryable transport error.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::{EventStream, EventStreamError};
use futures::{Stream, StreamExt};

use crate::error::{ErrorKind, LlmError};

/// Maximum bytes received for one event before it is dispatched: 8 MiB (house limit; a single
/// OpenAI/Anthropic chunk is a few hundred bytes, a whole non-streamed answer rarely exceeds 1 MiB).
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Event name (`event:` field); `"message"` when the server sent none (SSE spec default).
    pub event: String,
    /// Data lines joined with `\n`.
    pub data: String,
    /// True when the event was never terminated by a blank line and was dispatched only because
    /// the byte stream ended. It may be a cut-off fragment.
    pub at_eof: bool,
}

/// A boxed stream of SSE events; ends after the first error.
pub type SseStream = Pin<Box<dyn Stream<Item = Result<SseEvent, LlmError>> + Send>>;

struct ByteState<S> {
    src: Pin<Box<S>>,
    idle: Duration,
    pending: Arc<AtomicUsize>,
    eof: Arc<AtomicBool>,
    done: bool,
}

/// Frame `bytes` as SSE with the event cap [`MAX_EVENT_BYTES`] and the idle timeout `idle`.
/// Errors from `bytes` are passed through unchanged; the stream ends after the first error.
pub fn sse_events<S>(bytes: S, idle: Duration) -> SseStream
where
    S: Stream<Item = Result<Bytes, LlmError>> + Send + 'static,
{
    let pending = Arc::new(AtomicUsize::new(0));
    let eof = Arc::new(AtomicBool::new(false));
    let state = ByteState {
        src: Box::pin(bytes),
        idle,
        pending: pending.clone(),
        eof: eof.clone(),
        done: false,
    };
    let guarded = futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        match tokio::time::timeout(st.idle, st.src.next()).await {
            Err(_) => {
                st.done = true;
                let secs = st.idle.as_secs_f64();
                let msg = if secs.fract() == 0.0 {
                    format!("stream idle for {} s", st.idle.as_secs())
                } else {
                    format!("stream idle for {secs:.1} s")
                };
                Some((Err(LlmError::new(ErrorKind::Transport, msg)), st))
            }
            Ok(Some(Ok(chunk))) => {
                let total = st.pending.fetch_add(chunk.len(), Ordering::SeqCst) + chunk.len();
                if total > MAX_EVENT_BYTES {
                    st.done = true;
                    let err = LlmError::new(
                        ErrorKind::MalformedChunk,
                        format!(
                            "stream event exceeds {MAX_EVENT_BYTES} bytes without a terminating blank line"
                        ),
                    );
                    return Some((Err(err), st));
                }
                Some((Ok(chunk), st))
            }
            Ok(Some(Err(e))) => {
                st.done = true;
                Some((Err(e), st))
            }
            Ok(None) => {
                // Terminate a possibly unterminated last event so the parser dispatches it.
                st.done = true;
                st.eof.store(true, Ordering::SeqCst);
                Some((Ok(Bytes::from_static(b"\n\n")), st))
            }
        }
    });
    let events = EventStream::new(guarded);
    let mut failed = false;
    let out = events
        .map(move |item| match item {
            Ok(ev) => {
                pending.store(0, Ordering::SeqCst);
                Ok(SseEvent {
                    event: ev.event,
                    data: ev.data,
                    at_eof: eof.load(Ordering::SeqCst),
                })
            }
            Err(EventStreamError::Transport(e)) => Err(e),
            Err(EventStreamError::Utf8(e)) => Err(LlmError::new(
                ErrorKind::MalformedChunk,
                format!("stream is not valid UTF-8: {e}"),
            )),
            Err(EventStreamError::Parser(e)) => Err(LlmError::new(
                ErrorKind::MalformedChunk,
                format!("invalid SSE framing: {e:?}"),
            )),
        })
        .take_while(move |item| {
            let keep = !failed;
            if item.is_err() {
                failed = true;
            }
            futures::future::ready(keep)
        });
    Box::pin(out)
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
    async fn invalid_utf8_is_malformed_not_panic() {
        let body: &[&'static [u8]] = &[b"data: \xff\xfe\n\n"];
        let out = collect(sse_events(chunks(body), Duration::from_secs(5))).await;
        assert!(out.iter().any(|r| {
            r.as_ref()
                .is_err_and(|e| e.kind == ErrorKind::MalformedChunk)
        }));
    }
}
