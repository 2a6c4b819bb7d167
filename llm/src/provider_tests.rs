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
