//! End-to-end tests of the mock server over real HTTP (reqwest).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use troupe_testkit::{
    Conversation, Dialect, Exhausted, Fault, MockOptions, MockServer, Script, Step, UsageSpec,
};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

fn chat_body(first_user: &str, assistants: usize) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coder."}),
        json!({"role": "user", "content": first_user}),
    ];
    for i in 0..assistants {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "ok"}));
    }
    json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
           "messages": messages})
}

/// Posts and reads the whole body; `Err` carries the body read error (e.g. a cut connection)
/// together with what was received before it.
async fn post_raw(
    url: &str,
    body: &Value,
    session: Option<&str>,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    Result<String, String>,
) {
    let mut req = client()
        .post(url)
        .header("authorization", "Bearer sk-test")
        .json(body);
    if let Some(s) = session {
        req = req.header("x-session-affinity", s);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status();
    let headers = resp.headers().clone();
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => buf.extend_from_slice(&b),
            Err(e) => {
                return (
                    status,
                    headers,
                    Err(format!("{e}|{}", String::from_utf8_lossy(&buf))),
                );
            }
        }
    }
    (
        status,
        headers,
        Ok(String::from_utf8_lossy(&buf).into_owned()),
    )
}

fn data_lines(sse: &str) -> Vec<&str> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

fn chunks(sse: &str) -> Vec<Value> {
    data_lines(sse)
        .into_iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("chunk is JSON"))
        .collect()
}

fn content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

fn chat_url(s: &MockServer) -> String {
    format!("{}/chat/completions", s.base_url())
}

#[tokio::test]
async fn streams_text_step_like_openai() {
    let server = MockServer::start(Script::single(vec![
        Step::text("Hello from the mock server!").with_chunk_size(4),
    ]))
    .await
    .expect("start");
    let (status, headers, body) = post_raw(&chat_url(&server), &chat_body("hi", 0), None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let body = body.expect("complete body");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let c = chunks(&body);
    assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(c[0]["object"], "chat.completion.chunk");
    assert_eq!(c[0]["model"], "gpt-test");
    assert_eq!(c[1]["choices"][0]["delta"]["content"], "Hell");
    assert_eq!(content(&c), "Hello from the mock server!");
    let finish = &c[c.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    let usage = &c[c.len() - 1]["usage"];
    assert_eq!(c[c.len() - 1]["choices"], json!([]));
    assert!(usage["prompt_tokens"].as_u64().expect("prompt") >= 1);
    assert_eq!(usage["completion_tokens"], 27 / 4);
    assert_eq!(
        usage["total_tokens"],
        usage["prompt_tokens"].as_u64().unwrap_or(0) + 6
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);
    server.shutdown().await;
}

#[tokio::test]
async fn no_usage_chunk_without_include_usage_and_plain_path() {
    let server = MockServer::start(Script::single(vec![Step::text("x")]))
        .await
        .expect("start");
    let mut body = chat_body("hi", 0);
    body["stream_options"] = json!({"include_usage": false});
    let url = format!("http://{}/chat/completions", server.addr());
    let (_, _, sse) = post_raw(&url, &body, None).await;
    let c = chunks(&sse.expect("body"));
    assert!(c.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        c.last().expect("finish")["choices"][0]["finish_reason"],
        "stop"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn streams_tool_calls_reasoning_and_usage_override() {
    let step = Step::text("Let me look.")
        .with_reasoning("The user wants a listing.")
        .with_tool("bash", json!({"command": "ls -la /tmp"}))
        .with_tool_id(
            "my_id",
            "read",
            Value::String("{\"path\": \"unterminated".into()),
        )
        .with_chunk_size(5)
        .with_usage(UsageSpec {
            prompt_tokens: Some(1000),
            completion_tokens: Some(50),
            cached_tokens: Some(800),
            reasoning_tokens: Some(7),
        });
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let (_, _, sse) = post_raw(&chat_url(&server), &chat_body("go", 0), None).await;
    let c = chunks(&sse.expect("body"));
    let reasoning: String = c
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "The user wants a listing.");
    assert_eq!(content(&c), "Let me look.");
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for ch in &c {
        if let Some(tcs) = ch["choices"][0]["delta"]["tool_calls"].as_array() {
            for tc in tcs {
                let idx = tc["index"].as_u64().expect("index") as usize;
                if let Some(id) = tc["id"].as_str() {
                    assert_eq!(idx, calls.len());
                    assert_eq!(tc["type"], "function");
                    assert_eq!(tc["function"]["arguments"], "");
                    calls.push((
                        id.to_owned(),
                        tc["function"]["name"].as_str().expect("name").to_owned(),
                        String::new(),
                    ));
                } else {
                    calls[idx].2 += tc["function"]["arguments"].as_str().expect("args");
                }
            }
        }
    }
    assert_eq!(
        calls,
        vec![
            (
                "call_0_0_0".into(),
                "bash".into(),
                r#"{"command":"ls -la /tmp"}"#.into()
            ),
            (
                "my_id".into(),
                "read".into(),
                "{\"path\": \"unterminated".into()
            ),
        ]
    );
    assert_eq!(c[c.len() - 2]["choices"][0]["finish_reason"], "tool_calls");
    let u = &c[c.len() - 1]["usage"];
    assert_eq!(
        (
            u["prompt_tokens"].clone(),
            u["completion_tokens"].clone(),
            u["total_tokens"].clone()
        ),
        (json!(1000), json!(50), json!(1050))
    );
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 800);
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 7);
    server.shutdown().await;
}

#[tokio::test]
async fn step_index_is_assistant_count_and_exhaustion() {
    let server = MockServer::start(Script::new(vec![
        Conversation::new(vec![Step::text("zero"), Step::text("one")]).matching("soft"),
        Conversation::new(vec![Step::text("only")])
            .matching("hard")
            .on_exhausted(Exhausted::Error),
    ]))
    .await
    .expect("start");
    let url = chat_url(&server);
    for (n, want) in [
        (0, "zero"),
        (1, "one"),
        (2, "(script exhausted)"),
        (5, "(script exhausted)"),
    ] {
        let (_, _, sse) = post_raw(&url, &chat_body("soft", n), None).await;
        assert_eq!(
            content(&chunks(&sse.expect("body"))),
            want,
            "assistants={n}"
        );
    }
    let (status, _, body) = post_raw(&url, &chat_body("hard", 1), None).await;
    assert_eq!(status, 400);
    let err: Value = serde_json::from_str(&body.expect("body")).expect("json");
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert!(
        err["error"]["message"]
            .as_str()
            .expect("msg")
            .starts_with("script exhausted"),
        "{err}"
    );
    let steps: Vec<Option<usize>> = server.requests().iter().map(|r| r.step).collect();
    assert_eq!(steps, vec![Some(0), Some(1), Some(2), Some(5), Some(1)]);
    server.shutdown().await;
}

/// A request far over axum's default body limit (2 MiB) is read and answered: the mock must
/// not answer 413 (a context overflow to the client) where a real provider would not.
#[tokio::test]
async fn a_body_of_several_mib_is_answered_not_refused_as_too_large() {
    let server = MockServer::start(Script::new(vec![Conversation::new(vec![
        Step::text("zero"),
        Step::text("big"),
    ])]))
    .await
    .expect("start");
    let mut body = chat_body("long session", 1);
    let filler = "x".repeat(6 << 20);
    body["messages"]
        .as_array_mut()
        .expect("messages")
        .push(json!({"role": "user", "content": filler}));
    let (status, _, sse) = post_raw(&chat_url(&server), &body, None).await;
    assert_eq!(status, 200);
    assert_eq!(content(&chunks(&sse.expect("body"))), "big");
    server.shutdown().await;
}

#[tokio::test]
async fn conversation_matching_and_404() {
    let server = MockServer::start(Script::new(vec![
        Conversation::new(vec![Step::text("coder-fix")])
            .matching("fix")
            .matching_system("careful coder"),
        Conversation::new(vec![Step::text("other-fix")]).matching("fix"),
        Conversation::new(vec![Step::text("title")]).matching_system("title generator"),
    ]))
    .await
    .expect("start");
    let url = chat_url(&server);
    let (_, _, sse) = post_raw(&url, &chat_body("please fix the bug", 0), None).await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "coder-fix");
    let mut body = chat_body("please fix it", 0);
    body["messages"][0]["content"] = json!("You are sloppy.");
    let (_, _, sse) = post_raw(&url, &body, None).await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "other-fix");
    // System given as content parts.
    body["messages"][0]["content"] =
        json!([{"type": "text", "text": "You are a title generator."}]);
    body["messages"][1]["content"] = json!("write a title");
    let (_, _, sse) = post_raw(&url, &body, None).await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "title");
    // No default conversation: 404 with OpenAI error shape.
    let (status, _, err) = post_raw(&url, &chat_body("unrelated", 0), None).await;
    assert_eq!(status, 404);
    let err: Value = serde_json::from_str(&err.expect("body")).expect("json");
    assert!(
        err["error"]["message"]
            .as_str()
            .expect("m")
            .contains("unrelated")
    );
    assert_eq!(err["error"]["param"], Value::Null);
    let convs: Vec<Option<usize>> = server.requests().iter().map(|r| r.conversation).collect();
    assert_eq!(convs, vec![Some(0), Some(1), Some(2), None]);
    server.shutdown().await;
}

#[tokio::test]
async fn http_fault_then_success_per_session() {
    let step = Step::text("finally")
        .with_fault(Fault::rate_limited(2))
        .with_fault(Fault::Http {
            status: 503,
            headers: Default::default(),
            body: Some(json!("upstream down")),
        });
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let url = chat_url(&server);
    let body = chat_body("same prompt", 0);

    let (status, headers, err) = post_raw(&url, &body, Some("ses_a")).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "2");
    let err: Value = serde_json::from_str(&err.expect("body")).expect("json");
    assert_eq!(err["error"]["code"], "rate_limit_exceeded");
    assert_eq!(err["error"]["param"], Value::Null);

    // Another session starts its own attempt count.
    let (status, _, _) = post_raw(&url, &body, Some("ses_b")).await;
    assert_eq!(status, 429);

    let (status, headers, text) = post_raw(&url, &body, Some("ses_a")).await;
    assert_eq!(status, 503);
    assert_eq!(headers["content-type"], "text/plain");
    assert_eq!(text.expect("body"), "upstream down");

    let (status, _, sse) = post_raw(&url, &body, Some("ses_a")).await;
    assert_eq!(status, 200);
    assert_eq!(content(&chunks(&sse.expect("body"))), "finally");

    let attempts: Vec<(String, u32, u16)> = server
        .requests()
        .iter()
        .map(|r| (r.session_key.clone(), r.attempt, r.status))
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("ses_a".into(), 1, 429),
            ("ses_b".into(), 1, 429),
            ("ses_a".into(), 2, 503),
            ("ses_a".into(), 3, 200),
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn cut_fault_aborts_connection_without_done() {
    let step = Step::text("abcdefghijklmnop")
        .with_chunk_size(2)
        .with_fault(Fault::cut_after(3));
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let url = chat_url(&server);
    let (status, _, body) = post_raw(&url, &chat_body("cut me", 0), None).await;
    assert_eq!(status, 200);
    let err = body.expect_err("body must fail: connection cut");
    let received = err.split_once('|').map_or("", |(_, r)| r);
    assert_eq!(data_lines(received).len(), 3, "{received}");
    assert!(!received.contains("[DONE]"));
    assert!(!received.contains("finish_reason\":\"stop"));
    // Attempt 2 (same session key = first user text) succeeds.
    let (_, _, sse) = post_raw(&url, &chat_body("cut me", 0), None).await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "abcdefghijklmnop");
    let recs = server.requests();
    assert_eq!(recs[0].fault, Some(Fault::CutAfter(3)));
    assert!(recs[0].end_ms.is_some());
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_and_error_event_faults() {
    let step = Step::text("0123456789")
        .with_chunk_size(3)
        .with_fault(Fault::malformed_after(2))
        .with_fault(Fault::error_event_after(1, "The server had an error"));
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let url = chat_url(&server);
    let body = chat_body("faulty", 0);

    let (_, _, sse) = post_raw(&url, &body, None).await;
    let sse = sse.expect("malformed body ends cleanly");
    let lines = data_lines(&sse);
    assert_eq!(lines.len(), 3, "{sse}");
    assert_eq!(lines[2], "{not json");
    assert!(!sse.contains("[DONE]"));

    let (_, _, sse) = post_raw(&url, &body, None).await;
    let sse = sse.expect("error-event body ends cleanly");
    let lines = data_lines(&sse);
    assert_eq!(lines.len(), 2, "{sse}");
    let err: Value = serde_json::from_str(lines[1]).expect("json");
    assert_eq!(err["error"]["message"], "The server had an error");
    assert_eq!(err["error"]["type"], "server_error");
    assert!(!sse.contains("[DONE]"));

    let (_, _, sse) = post_raw(&url, &body, None).await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "0123456789");
    server.shutdown().await;
}

#[tokio::test]
async fn hang_fault_stalls_until_shutdown() {
    let step = Step::text("abcdef")
        .with_chunk_size(1)
        .with_fault(Fault::hang_after(2));
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let resp = client()
        .post(chat_url(&server))
        .json(&chat_body("hang", 0))
        .send()
        .await
        .expect("send");
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(400), stream.next()).await {
            Ok(Some(Ok(b))) => got.push_str(&String::from_utf8_lossy(&b)),
            Ok(other) => panic!("stream ended early: {other:?}"),
            Err(_) => break, // silent: hanging as scripted
        }
    }
    assert_eq!(data_lines(&got).len(), 2, "{got}");
    assert_eq!(server.requests()[0].end_ms, None, "still streaming");
    let started = std::time::Instant::now();
    server.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "shutdown ended the hang"
    );
    // The body now ends.
    let rest = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("stream ends after shutdown");
    assert!(
        !matches!(rest, Some(Ok(ref b)) if !b.is_empty()),
        "{rest:?}"
    );
}

#[tokio::test]
async fn delays_are_applied() {
    let step = Step::text("abcd")
        .with_chunk_size(1)
        .with_delay_ms(30)
        .with_first_byte_delay_ms(100);
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let started = std::time::Instant::now();
    let (_, _, sse) = post_raw(&chat_url(&server), &chat_body("slow", 0), None).await;
    sse.expect("body");
    // 100 ms + 7 gaps (role, 4 text, finish, usage, done = 8 frames) × 30 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(100 + 7 * 30),
        "{:?}",
        started.elapsed()
    );
    let r = &server.requests()[0];
    let (start, end) = (r.start_ms, r.end_ms.expect("finished"));
    assert!(end - start >= 300, "{start}..{end}");
    server.shutdown().await;
}

#[tokio::test]
async fn recording_and_log_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("requests.jsonl");
    let server = MockServer::start_with(
        Script::single(vec![Step::text("a"), Step::text("b")]),
        MockOptions {
            port: 0,
            log: Some(log.clone()),
            ..MockOptions::default()
        },
    )
    .await
    .expect("start");
    let (_, _, _) = post_raw(&chat_url(&server), &chat_body("rec", 0), Some("ses_1")).await;
    let resp = client()
        .post(format!("{}/messages", server.base_url()))
        .header("x-api-key", "secret")
        .header("anthropic-version", "2023-06-01")
        .header("user-agent", "troupe-test/1")
        .json(
            &json!({"model": "claude-x", "max_tokens": 10, "system": "sys",
            "messages": [{"role": "user", "content": "rec"}, {"role": "assistant", "content": "a"},
                         {"role": "user", "content": "more"}]}),
        )
        .send()
        .await
        .expect("send");
    let msg: Value = resp.json().await.expect("json");
    assert_eq!(msg["content"][0]["text"], "b");

    let via_http: Vec<Value> = client()
        .get(format!("http://{}/_mock/requests", server.addr()))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(via_http.len(), 2);
    let recs = server.requests();
    let r0 = &recs[0];
    assert_eq!(r0.seq, 0);
    assert_eq!(r0.dialect, Some(Dialect::OpenAi));
    assert_eq!(
        (r0.conversation, r0.step, r0.attempt),
        (Some(0), Some(0), 1)
    );
    assert_eq!(r0.session_key, "ses_1");
    assert_eq!(r0.method, "POST");
    assert_eq!(r0.path, "/v1/chat/completions");
    assert_eq!(r0.headers.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(r0.headers.x_session_affinity.as_deref(), Some("ses_1"));
    assert!(!r0.headers.x_api_key_present);
    assert_eq!(r0.body["model"], "gpt-test");
    assert_eq!(r0.status, 200);
    assert!(r0.stream);
    assert!(r0.end_ms.expect("end") >= r0.start_ms);
    let r1 = &recs[1];
    assert_eq!(r1.dialect, Some(Dialect::Anthropic));
    assert_eq!((r1.step, r1.session_key.as_str()), (Some(1), "rec"));
    assert!(r1.headers.x_api_key_present);
    assert_eq!(r1.headers.anthropic_version.as_deref(), Some("2023-06-01"));
    assert_eq!(r1.headers.user_agent.as_deref(), Some("troupe-test/1"));
    assert_eq!(serde_json::to_value(r1).expect("ser"), via_http[1]);

    server.shutdown().await;
    let text = tokio::fs::read_to_string(&log).await.expect("log");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let mut seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, vec![0, 1]);
    assert!(lines.iter().all(|l| l["end_ms"].is_u64()));
}

#[tokio::test]
async fn non_streaming_openai_completion() {
    let server = MockServer::start(Script::single(vec![
        Step::tool("bash", json!({"command": "pwd"})).with_text("running"),
    ]))
    .await
    .expect("start");
    let mut body = chat_body("ns", 0);
    body["stream"] = json!(false);
    let (status, headers, text) = post_raw(&chat_url(&server), &body, None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let v: Value = serde_json::from_str(&text.expect("body")).expect("json");
    assert_eq!(v["object"], "chat.completion");
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], "running");
    assert_eq!(
        m["tool_calls"][0]["function"]["arguments"],
        r#"{"command":"pwd"}"#
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert!(v["usage"]["total_tokens"].as_u64().expect("total") > 0);
    server.shutdown().await;
}

fn anthropic_events(sse: &str) -> Vec<(String, Value)> {
    sse.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).expect("event JSON");
                }
            }
            assert_eq!(data["type"], name.as_str(), "type matches event name");
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn anthropic_streaming_and_faults() {
    let step = Step::text("Checking.")
        .with_reasoning("Need to list files")
        .with_tool("bash", json!({"command": "ls"}))
        .with_chunk_size(4)
        .with_usage(UsageSpec {
            prompt_tokens: Some(500),
            cached_tokens: Some(200),
            completion_tokens: Some(40),
            reasoning_tokens: None,
        })
        .with_fault(Fault::http(529))
        .with_fault(Fault::error_event_after(2, "Overloaded"));
    let server = MockServer::start(Script::new(vec![
        Conversation::new(vec![step]).matching_system("agent"),
    ]))
    .await
    .expect("start");
    let url = format!("{}/messages", server.base_url());
    let body = json!({"model": "claude-test", "max_tokens": 100, "stream": true,
        "system": [{"type": "text", "text": "You are an agent."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "list"}]}]});

    let (status, _, err) = post_raw(&url, &body, None).await;
    assert_eq!(status, 529);
    let err: Value = serde_json::from_str(&err.expect("body")).expect("json");
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "overloaded_error");

    let (_, _, sse) = post_raw(&url, &body, None).await;
    let ev = anthropic_events(&sse.expect("body"));
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["message_start", "content_block_start", "error"]);
    assert_eq!(ev[2].1["error"]["type"], "api_error");
    assert_eq!(ev[2].1["error"]["message"], "Overloaded");

    let (status, headers, sse) = post_raw(&url, &body, None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let ev = anthropic_events(&sse.expect("body"));
    assert_eq!(ev[0].0, "message_start");
    assert_eq!(ev[0].1["message"]["model"], "claude-test");
    assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 300);
    assert!(ev.iter().any(|(n, _)| n == "ping"));
    let mut thinking = String::new();
    let mut text = String::new();
    let mut json_in = String::new();
    let mut signature = String::new();
    let mut tool_block = Value::Null;
    for (name, d) in &ev {
        match name.as_str() {
            "content_block_delta" => match d["delta"]["type"].as_str().expect("delta type") {
                "thinking_delta" => thinking += d["delta"]["thinking"].as_str().expect("t"),
                "text_delta" => text += d["delta"]["text"].as_str().expect("t"),
                "input_json_delta" => json_in += d["delta"]["partial_json"].as_str().expect("j"),
                "signature_delta" => signature += d["delta"]["signature"].as_str().expect("s"),
                other => panic!("unexpected delta {other}"),
            },
            "content_block_start" if d["content_block"]["type"] == "tool_use" => {
                tool_block = d.clone()
            }
            _ => {}
        }
    }
    assert_eq!(thinking, "Need to list files");
    assert_eq!(text, "Checking.");
    assert_eq!(json_in, r#"{"command":"ls"}"#);
    assert!(!signature.is_empty());
    assert_eq!(tool_block["index"], 2);
    assert_eq!(tool_block["content_block"]["name"], "bash");
    assert_eq!(tool_block["content_block"]["id"], "call_0_0_0");
    let (n, md) = &ev[ev.len() - 2];
    assert_eq!(n, "message_delta");
    assert_eq!(md["delta"]["stop_reason"], "tool_use");
    assert_eq!(md["usage"]["input_tokens"], 300);
    assert_eq!(md["usage"]["cache_read_input_tokens"], 200);
    assert_eq!(md["usage"]["output_tokens"], 40);
    assert_eq!(ev[ev.len() - 1].0, "message_stop");
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let server = MockServer::start(Script::single(vec![Step::text("x")]))
        .await
        .expect("start");
    let resp = client()
        .post(chat_url(&server))
        .body("{nope")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.expect("json");
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("m")
            .contains("invalid JSON")
    );
    let resp = client()
        .post(format!("{}/messages", server.base_url()))
        .json(&json!({"model": "m"}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let resp = client()
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .expect("send");
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["data"][0]["id"], "mock-model");
    let resp = client()
        .get(format!("http://{}/health", server.addr()))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let resp = client()
        .get(format!("{}/nowhere", server.base_url()))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn many_parallel_sessions_are_deterministic() {
    let steps = vec![
        Step::tool("bash", json!({"command": "echo 1"})).with_fault(Fault::http(500)),
        Step::tool("bash", json!({"command": "echo 2"})),
        Step::text("done"),
    ];
    let server = MockServer::start(Script::single(steps))
        .await
        .expect("start");
    let url = chat_url(&server);
    let mut tasks = Vec::new();
    for s in 0..40 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let ses = format!("ses_{s}");
            let mut statuses = Vec::new();
            let mut step = 0;
            while step < 3 {
                let (status, _, _) =
                    post_raw(&url, &chat_body("same task", step), Some(&ses)).await;
                statuses.push(status.as_u16());
                if status == 200 {
                    step += 1;
                }
            }
            statuses
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join"), vec![500, 200, 200, 200]);
    }
    assert_eq!(server.requests().len(), 160);
    server.shutdown().await;
}

#[tokio::test]
async fn binary_serves_and_exits_on_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("tmp");
    let script = dir.path().join("script.json");
    let log = dir.path().join("log.jsonl");
    tokio::fs::write(
        &script,
        r#"{"conversations":[{"steps":[{"text":"from the binary"}]}]}"#,
    )
    .await
    .expect("write");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe-mock"))
        .arg("--script")
        .arg(&script)
        .arg("--log")
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("line in time")
        .expect("read")
        .expect("a line");
    let base = line
        .strip_prefix("listening on ")
        .expect("listening prefix")
        .to_owned();
    assert!(
        base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"),
        "{base}"
    );
    let (_, _, sse) = post_raw(
        &format!("{base}/chat/completions"),
        &chat_body("b", 0),
        None,
    )
    .await;
    assert_eq!(content(&chunks(&sse.expect("body"))), "from the binary");
    let pid = child.id().expect("pid");
    let killed = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits in time")
        .expect("wait");
    assert!(status.success(), "{status:?}");
    let text = tokio::fs::read_to_string(&log).await.expect("log");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        lines.next_line().await.expect("read").is_none(),
        "exactly one stdout line"
    );
}

#[tokio::test]
async fn binary_rejects_bad_script() {
    let dir = tempfile::tempdir().expect("tmp");
    let script = dir.path().join("bad.json");
    tokio::fs::write(
        &script,
        r#"{"conversations":[{"steps":[{"chunk_size":0}]}]}"#,
    )
    .await
    .expect("write");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe-mock"))
        .arg("--script")
        .arg(&script)
        .output()
        .await
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chunk_size"), "{err}");
    assert!(out.stdout.is_empty());
}

/// The benchmark shape: 200 concurrent sessions × 10 steps, each step a tool call streamed in
/// small chunks. Guards against global locks held while streaming and per-request blowups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benchmark_shape_200_sessions_by_10_steps() {
    let mut steps: Vec<Step> = (0..9)
        .map(|i| {
            Step::tool("bash", json!({"command": format!("echo step {i}")})).with_chunk_size(4)
        })
        .collect();
    steps.push(Step::text("all done, nothing more to do here").with_chunk_size(4));
    let server = MockServer::start(Script::single(steps))
        .await
        .expect("start");
    let url = chat_url(&server);
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for s in 0..200 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let http = client();
            let ses = format!("ses_{s}");
            let mut last = String::new();
            for step in 0..10 {
                let resp = http
                    .post(&url)
                    .header("x-session-affinity", &ses)
                    .json(&chat_body("bench", step))
                    .send()
                    .await
                    .expect("send");
                assert_eq!(resp.status(), 200);
                last = resp.text().await.expect("body");
                assert!(last.ends_with("data: [DONE]\n\n"));
            }
            content(&chunks(&last))
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join"), "all done, nothing more to do here");
    }
    let elapsed = started.elapsed();
    let recs = server.requests();
    assert_eq!(recs.len(), 2000);
    assert!(recs.iter().all(|r| r.end_ms.is_some() && r.attempt == 1));
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
    eprintln!("200x10 requests in {elapsed:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn non_streaming_faults() {
    let step = Step::text("plain answer text that is long enough to cut")
        .with_fault(Fault::cut_after(0))
        .with_fault(Fault::malformed_after(0))
        .with_fault(Fault::error_event_after(0, "boom"));
    let server = MockServer::start(Script::single(vec![step]))
        .await
        .expect("start");
    let mut body = chat_body("ns faults", 0);
    body["stream"] = json!(false);
    let url = chat_url(&server);
    let (_, _, cut) = post_raw(&url, &body, None).await;
    let err = cut.expect_err("cut body fails");
    assert!(!err.contains("long enough to cut"), "{err}");
    let (_, _, bad) = post_raw(&url, &body, None).await;
    assert_eq!(bad.expect("body"), "{not json");
    let (status, _, e) = post_raw(&url, &body, None).await;
    assert_eq!(status, 500);
    let e: Value = serde_json::from_str(&e.expect("body")).expect("json");
    assert_eq!(e["error"]["message"], "boom");
    let (status, _, ok) = post_raw(&url, &body, None).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&ok.expect("body")).expect("json");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "plain answer text that is long enough to cut"
    );
    server.shutdown().await;
}
