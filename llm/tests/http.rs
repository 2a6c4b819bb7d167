//! HTTP-level tests of `Provider::stream` against a tiny raw TCP server on 127.0.0.1.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use troupe_config::model::{Protocol, ResolvedModel};
use troupe_llm::{
    ChatMessage, ChatRequest, ErrorKind, FinishReason, LlmError, Provider, StreamEvent,
};

/// What the server does after reading the request.
enum Reply {
    /// Write these bytes, then close.
    Bytes(Vec<u8>),
    /// Write these bytes, then keep the connection open (silent) for a long time.
    Hang(Vec<u8>),
}

/// Serve one connection; returns the base URL and a receiver for the raw request text.
async fn serve(reply: Reply) -> (String, oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        // Read headers, then Content-Length bytes of body.
        loop {
            let Ok(n) = sock.read(&mut tmp).await else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&tmp[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.trim()
                            .eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).to_string());
        match reply {
            Reply::Bytes(b) => {
                let _ = sock.write_all(&b).await;
                let _ = sock.shutdown().await;
            }
            Reply::Hang(b) => {
                let _ = sock.write_all(&b).await;
                let _ = sock.flush().await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    });
    (format!("http://{addr}/v1"), rx)
}

fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A `200 OK` event-stream response whose body is `body`.
fn sse(body: &[u8]) -> Vec<u8> {
    response("200 OK", &[("content-type", "text/event-stream")], body)
}

/// A provider of `protocol` (see [`model`]) at a one-connection server that answers with
/// `reply`; the provider and the receiver of the raw request text.
async fn answering(reply: Reply, protocol: Protocol) -> (Provider, oneshot::Receiver<String>) {
    let (url, rx) = serve(reply).await;
    (
        Provider::new(reqwest::Client::new(), model(&url, protocol)),
        rx,
    )
}

/// The first chunk of a stream that then stalls: a text delta "a".
const FIRST_DELTA: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";

fn model(base_url: &str, protocol: Protocol) -> ResolvedModel {
    ResolvedModel {
        name: "M1".into(),
        api_key: Some("sk-test".into()),
        headers: vec![("x-model-header".into(), "mh".into())],
        ..ResolvedModel::new("mock", "m1", protocol, base_url)
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m1".into(),
        messages: vec![ChatMessage::User {
            content: "hi".into(),
            images: Vec::new(),
        }],
        headers: vec![("x-session-affinity".into(), "s1".into())],
        ..Default::default()
    }
}

async fn collect(p: &Provider) -> Result<Vec<Result<StreamEvent, LlmError>>, LlmError> {
    let s = p.stream(request(), CancellationToken::new()).await?;
    Ok(s.collect().await)
}

#[tokio::test]
async fn streams_a_recorded_sse_body() {
    let body = load_body(&wire_dir().join("openai/chat-tool-call-single.sse"));
    let (p, req_rx) = answering(Reply::Bytes(sse(&body)), Protocol::OpenaiChat).await;
    let events = collect(&p).await.expect("stream");
    let s = summarize(&events);
    assert!(s.error.is_none(), "{:?}", s.error);
    assert_eq!(s.tools.len(), 1);
    assert_eq!(s.tools[0].1, "GetWeatherArgs");
    assert_eq!(
        s.finish.as_ref().map(|f| f.0),
        Some(FinishReason::ToolCalls)
    );
    let req = req_rx.await.expect("request").to_ascii_lowercase();
    assert!(req.starts_with("post /v1/chat/completions "), "{req}");
    assert!(req.contains("authorization: bearer sk-test"));
    assert!(req.contains("x-model-header: mh"));
    assert!(req.contains("x-session-affinity: s1"));
    assert!(req.contains("\"stream\":true"));
    assert!(req.contains("\"include_usage\":true"));
}

#[tokio::test]
async fn anthropic_protocol_over_http() {
    let body = load_body(&wire_dir().join("anthropic/messages-tool-use.sse"));
    let (p, req_rx) = answering(Reply::Bytes(sse(&body)), Protocol::AnthropicMessages).await;
    let s = summarize(&collect(&p).await.expect("stream"));
    assert!(s.error.is_none(), "{:?}", s.error);
    assert_eq!(s.tools[0].1, "get_weather");
    let req = req_rx.await.expect("request").to_ascii_lowercase();
    assert!(req.starts_with("post /v1/messages "), "{req}");
    assert!(req.contains("x-api-key: sk-test"));
    assert!(req.contains("anthropic-version: 2023-06-01"));
    assert!(!req.contains("authorization:"));
}

#[tokio::test]
async fn http_429_is_rate_limit_with_retry_headers() {
    let body = br#"{"error":{"message":"Rate limit reached for m1","type":"requests","code":"rate_limit_exceeded"}}"#;
    let (p, _rx) = answering(
        Reply::Bytes(response(
            "429 Too Many Requests",
            &[
                ("content-type", "application/json"),
                ("retry-after", "7"),
                ("retry-after-ms", "6500"),
            ],
            body,
        )),
        Protocol::OpenaiChat,
    )
    .await;
    let e = collect(&p).await.expect_err("429");
    assert_eq!(e.kind, ErrorKind::RateLimit);
    assert_eq!(e.status, Some(429));
    assert_eq!(e.message, "Rate limit reached for m1");
    assert!(
        e.retry_headers
            .contains(&("retry-after".to_string(), "7".to_string()))
    );
    assert!(
        e.retry_headers
            .contains(&("retry-after-ms".to_string(), "6500".to_string()))
    );
    assert_eq!(
        troupe_llm::retry_delay(1, &e.retry_headers, std::time::SystemTime::now()),
        Duration::from_millis(6500)
    );
}

#[tokio::test]
async fn http_401_is_auth() {
    let body = br#"{"error":{"message":"Incorrect API key provided: sk-test.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let (p, _rx) = answering(
        Reply::Bytes(response(
            "401 Unauthorized",
            &[("content-type", "application/json")],
            body,
        )),
        Protocol::OpenaiChat,
    )
    .await;
    let e = collect(&p).await.expect_err("401");
    assert_eq!(e.kind, ErrorKind::Auth);
    assert_eq!(e.message, "Incorrect API key provided: sk-test.");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn cut_connection_is_transport() {
    let body = load_body(&wire_dir().join("openai/chat-text-stop.sse"));
    let half = &body[..body.len() / 2];
    let (p, _rx) = answering(Reply::Bytes(sse(half)), Protocol::OpenaiChat).await;
    let events = collect(&p).await.expect("stream opens");
    let s = summarize(&events);
    assert!(!s.text.is_empty(), "events before the cut are kept");
    let e = s.error.expect("error");
    assert_eq!(e.kind, ErrorKind::Transport);
    assert_eq!(e.message, "stream ended before the step finished");
    assert_eq!(s.finish_count, 0);
}

#[tokio::test]
async fn json_body_is_parsed_as_a_completion() {
    let body = br#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"plain"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}"#;
    let (p, _rx) = answering(
        Reply::Bytes(response(
            "200 OK",
            &[("content-type", "application/json")],
            body,
        )),
        Protocol::OpenaiChat,
    )
    .await;
    let s = summarize(&collect(&p).await.expect("stream"));
    assert_eq!(s.text, "plain");
    assert_eq!(
        s.finish.map(|f| (f.0, f.1.input)),
        Some((FinishReason::Stop, 4))
    );
}

#[tokio::test]
async fn connection_refused_names_the_url() {
    // Port 9 (discard) is not listening on the test machine.
    let p = Provider::new(
        reqwest::Client::new(),
        model("http://127.0.0.1:9/v1", Protocol::OpenaiChat),
    );
    let e = collect(&p).await.expect_err("refused");
    assert_eq!(e.kind, ErrorKind::Transport);
    assert_eq!(
        e.message,
        "cannot reach provider mock at http://127.0.0.1:9/v1: connection refused"
    );
}

#[tokio::test]
async fn idle_stream_times_out() {
    let (p, _rx) = answering(Reply::Hang(sse(FIRST_DELTA)), Protocol::OpenaiChat).await;
    let p = p.with_idle_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let s = summarize(&collect(&p).await.expect("stream"));
    assert_eq!(s.text, "a");
    let e = s.error.expect("idle error");
    assert_eq!(e.kind, ErrorKind::Transport);
    assert_eq!(e.message, "stream stalled: no data for 0.3 s");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn cancel_ends_the_stream_promptly_with_aborted() {
    let (p, _rx) = answering(Reply::Hang(sse(FIRST_DELTA)), Protocol::OpenaiChat).await;
    let cancel = CancellationToken::new();
    let mut s = p.stream(request(), cancel.clone()).await.expect("stream");
    let mut got = Vec::new();
    while let Some(ev) = s.next().await {
        let is_delta = matches!(ev, Ok(StreamEvent::TextDelta { .. }));
        got.push(ev);
        if is_delta {
            break;
        }
    }
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let start = Instant::now();
    let next = s.next().await.expect("an item");
    assert_eq!(next.expect_err("aborted").kind, ErrorKind::Aborted);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(s.next().await.is_none());
    assert!(got.iter().all(|e| e.is_ok()));

    // A token cancelled before the request is sent aborts at once.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let e = p.stream(request(), cancel).await.err().expect("aborted");
    assert_eq!(e.kind, ErrorKind::Aborted);
}
