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
    assert_eq!(err.message, "stream stalled: no data for 3 s");
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
