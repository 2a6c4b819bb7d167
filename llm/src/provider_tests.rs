use super::*;

fn model() -> ResolvedModel {
    ResolvedModel {
        name: "M1".into(),
        ..ResolvedModel::new("mock", "m1", Protocol::OpenaiChat, "http://127.0.0.1:9/v1")
    }
}

fn kind(status: u16, body: &str) -> (ErrorKind, String) {
    let e = classify_http_error(status, body, vec![], &model());
    (e.kind, e.message)
}

#[test]
fn classify_table() {
    use ErrorKind::*;
    let cases: Vec<(u16, &str, ErrorKind, &str)> = vec![
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            Auth,
            "Incorrect API key provided",
        ),
        (
            403,
            "<html>forbidden</html>",
            Auth,
            "authentication failed for provider mock (HTTP 403)",
        ),
        (
            400,
            r#"{"error":{"message":"Please reduce the length of the messages.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            ContextOverflow,
            "Please reduce the length of the messages.",
        ),
        (
            400,
            r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}"#,
            ContextOverflow,
            "request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it",
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205429 tokens > 200000 maximum"}}"#,
            ContextOverflow,
            "prompt is too long: 205429 tokens > 200000 maximum",
        ),
        (
            413,
            "Request Entity Too Large",
            ContextOverflow,
            "Request Entity Too Large",
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            QuotaExceeded,
            "You exceeded your current quota",
        ),
        (
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-4","type":"tokens","code":"rate_limit_exceeded"}}"#,
            RateLimit,
            "Rate limit reached for gpt-4",
        ),
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            Overloaded,
            "Overloaded",
        ),
        (
            503,
            r#"{"error":{"message":"busy","type":"service_unavailable_error","code":"server_is_overloaded"}}"#,
            Overloaded,
            "busy",
        ),
        (
            500,
            r#"{"error":{"message":"The server had an error","type":"server_error","code":null}}"#,
            Server,
            "The server had an error",
        ),
        (502, "Bad Gateway", Server, "Bad Gateway"),
        (
            400,
            r#"{"object":"error","message":"bad param","type":"BadRequestError","param":null,"code":400}"#,
            BadRequest,
            "bad param",
        ),
        (
            404,
            "404 page not found",
            BadRequest,
            "model m1 not found at http://127.0.0.1:9/v1 (404 page not found)",
        ),
        (
            404,
            r#"{"error":{"message":"The model `m1` does not exist","type":"invalid_request_error"}}"#,
            BadRequest,
            "The model `m1` does not exist",
        ),
        (422, "", BadRequest, "HTTP 422 from provider mock"),
        (
            402,
            r#"{"error":"Insufficient Balance"}"#,
            QuotaExceeded,
            "Insufficient Balance",
        ),
    ];
    for (status, body, want_kind, want_msg) in cases {
        assert_eq!(
            kind(status, body),
            (want_kind, want_msg.to_string()),
            "status {status} body {body}"
        );
    }
}

/// Trial on main: a 400 with an HTML body said only `HTTP 400 from provider mock`. The start
/// of a body that gives no message of its own is now quoted (bounded, control characters
/// escaped).
#[test]
fn non_json_error_body_is_quoted() {
    let html = "<html>\r\n<head><title>400 Bad Request</title></head>\n<body>nginx</body>\n</html>";
    let (k, m) = kind(400, html);
    assert_eq!(k, ErrorKind::BadRequest);
    assert_eq!(
        m,
        r#"HTTP 400 from provider mock; the response body starts: "<html>\r\n<head><title>400 Bad Request</title></head>\n<body>nginx</body>\n</html>""#
    );
    let (_, m) = kind(400, r#"{"detail": "no such field: toolz"}"#);
    assert!(
        m.ends_with(r#"starts: "{\"detail\": \"no such field: toolz\"}""#),
        "{m}"
    );
    let big = format!("<p>{}\u{1b}</p>", "é".repeat(1000));
    let (_, m) = kind(400, &big);
    assert!(m.ends_with("…"), "{m}");
    assert!(m.len() < ERROR_BODY_SHOWN_BYTES + 120, "{}", m.len());
    let (_, m) = kind(400, "<b>\u{1b}[31m</b>");
    assert!(m.contains(r"\u{1b}[31m"), "{m}");
    assert_eq!(kind(422, "  \n").1, "HTTP 422 from provider mock");
}

#[test]
fn classify_keeps_headers_status_and_capped_body() {
    let big = "x".repeat(10_000);
    let e = classify_http_error(
        429,
        &big,
        vec![("retry-after".into(), "3".into())],
        &model(),
    );
    assert_eq!(e.status, Some(429));
    assert_eq!(
        e.retry_headers,
        vec![("retry-after".to_string(), "3".to_string())]
    );
    assert!(
        e.body
            .as_ref()
            .is_some_and(|b| b.len() <= MAX_KEPT_BODY_BYTES + 4)
    );
    assert!(e.message.len() < 400);
}

#[test]
fn stream_future_and_stream_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let p = Provider::new(reqwest::Client::new(), model());
    let fut = p.stream(ChatRequest::default(), CancellationToken::new());
    assert_send(&fut);
}

#[test]
fn chunk_timeout_option() {
    let mut m = model();
    assert_eq!(
        Provider::new(reqwest::Client::new(), m.clone()).idle_timeout(),
        DEFAULT_IDLE_TIMEOUT
    );
    m.options
        .insert("chunkTimeout".into(), serde_json::json!(1500));
    assert_eq!(
        Provider::new(reqwest::Client::new(), m).idle_timeout(),
        Duration::from_millis(1500)
    );
}

/// Accepts one HTTP/1.1 request on `listener`, answers 400 and returns the request's raw
/// bytes (head and body, read up to its `Content-Length`).
async fn capture_one(listener: &tokio::net::TcpListener) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut sock, _) = listener.accept().await.expect("accept");
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut buf).await.expect("read");
        assert!(n > 0, "connection closed before the head ended");
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length header")
        .trim()
        .parse()
        .expect("a number");
    while raw.len() < head_end + len {
        let n = sock.read(&mut buf).await.expect("read");
        assert!(n > 0, "connection closed before the body ended");
        raw.extend_from_slice(&buf[..n]);
    }
    let answer = b"{\"error\":{\"message\":\"captured\"}}";
    let reply = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    );
    sock.write_all(reply.as_bytes()).await.expect("write");
    sock.write_all(answer).await.expect("write");
    raw
}

#[tokio::test]
async fn a_body_of_shared_chunks_goes_out_as_the_same_bytes_as_one_buffer() {
    // The chunked body (a long session's cached prefix shared, not copied) must put the same
    // bytes on the wire as the body in one buffer: the same head with an exact
    // Content-Length (no chunked transfer encoding) and the same body.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let provider = Provider::new(
        reqwest::Client::new(),
        ResolvedModel {
            name: "M1".into(),
            ..ResolvedModel::new("mock", "m1", Protocol::OpenaiChat, &base)
        },
    );
    let whole: Vec<u8> = (0..200_000u32)
        .map(|i| b"{\"a\":[1,2],\"b\":\"x\"}"[i as usize % 19])
        .collect();
    let chunked: crate::body::RequestBody = [0..7, 7..150_000, 150_000..150_001, 150_001..200_000]
        .into_iter()
        .map(|r| Bytes::copy_from_slice(&whole[r]))
        .collect();
    assert_eq!(chunked.chunks().len(), 4);
    let mut raws = Vec::new();
    for body in [crate::body::RequestBody::from(whole.clone()), chunked] {
        let req = ChatRequest {
            body: Some(body),
            ..ChatRequest::default()
        };
        let (raw, sent) = tokio::join!(
            capture_one(&listener),
            provider.stream(req, CancellationToken::new())
        );
        let err = sent.err().expect("the capture answers 400");
        assert!(err.message.contains("captured"), "{}", err.message);
        raws.push(raw);
    }
    assert!(raws[0].ends_with(&whole));
    assert_eq!(
        String::from_utf8_lossy(&raws[0]),
        String::from_utf8_lossy(&raws[1])
    );
}
