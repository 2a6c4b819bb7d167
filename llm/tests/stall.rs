//! Issue 24.1: every request phase has a deadline. Each stalling mode of the testkit's mock
//! provider (before headers, mid JSON body, mid error body, on connection reuse) ends in a
//! retryable error that names the phase, or, for a stalled reused connection, in a success on
//! a fresh connection.

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_config::model::{Protocol, ResolvedModel};
use troupe_llm::provider::Deadlines;
use troupe_llm::{ChatMessage, ChatRequest, ErrorKind, LlmError, Provider, StreamEvent};
use troupe_testkit::{Fault, MockServer, Script, Stall, Step};

fn model(base_url: &str, protocol: Protocol) -> ResolvedModel {
    ResolvedModel {
        name: "Mock".into(),
        api_key: Some("sk-test".into()),
        ..ResolvedModel::new("mock", "mock-model", protocol, base_url)
    }
}

fn deadlines() -> Deadlines {
    Deadlines {
        connect: Duration::from_secs(5),
        headers: Some(Duration::from_millis(500)),
        idle: Duration::from_millis(500),
        error_body: Duration::from_millis(500),
    }
}

fn request(history: &[&str]) -> ChatRequest {
    let mut messages = vec![ChatMessage::User {
        content: "stall test".into(),
        images: Vec::new(),
    }];
    for text in history {
        messages.push(ChatMessage::Assistant {
            content: Some(text.to_string()),
            reasoning: None,
            reasoning_signature: None,
            tool_calls: vec![],
        });
        messages.push(ChatMessage::User {
            content: "again".into(),
            images: Vec::new(),
        });
    }
    ChatRequest {
        model: "mock-model".into(),
        messages,
        headers: vec![("x-session-affinity".into(), "stall".into())],
        ..Default::default()
    }
}

/// Run one step; the text it streamed, or the first error (before or inside the stream).
async fn step(p: &Provider, history: &[&str]) -> Result<String, LlmError> {
    let mut s = p.stream(request(history), CancellationToken::new()).await?;
    let mut text = String::new();
    while let Some(ev) = s.next().await {
        if let StreamEvent::TextDelta { text: t, .. } = ev? {
            text.push_str(&t);
        }
    }
    Ok(text)
}

async fn stalled(fault: Fault, protocol: Protocol, d: Deadlines) -> (LlmError, MockServer) {
    let server = MockServer::start(Script::single(vec![
        Step::text("never seen").with_fault(fault),
    ]))
    .await
    .expect("mock");
    let p = Provider::new(reqwest::Client::new(), model(&server.base_url(), protocol))
        .with_deadlines(d);
    let err = step(&p, &[]).await.expect_err("a stall must fail");
    (err, server)
}

#[tokio::test]
async fn stall_before_headers_is_a_named_retryable_error() {
    for protocol in [Protocol::OpenaiChat, Protocol::AnthropicMessages] {
        let (e, server) = stalled(Fault::stall(Stall::Headers), protocol, deadlines()).await;
        assert_eq!(e.kind, ErrorKind::Transport, "{e:?}");
        assert!(e.is_retryable());
        assert_eq!(
            e.message,
            "no response headers from provider mock after 0.5 s"
        );
        // A deadline passed: the provider-request span says `timeout`.
        assert!(e.timeout, "{e:?}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn stall_mid_json_body_is_a_named_retryable_error() {
    for protocol in [Protocol::OpenaiChat, Protocol::AnthropicMessages] {
        let (e, server) = stalled(Fault::stall(Stall::Body), protocol, deadlines()).await;
        assert_eq!(e.kind, ErrorKind::Transport, "{e:?}");
        assert!(e.is_retryable());
        assert_eq!(
            e.message,
            "response body from provider mock stalled: no bytes for 0.5 s"
        );
        assert!(e.timeout, "{e:?}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn stall_mid_error_body_is_a_named_retryable_error() {
    for protocol in [Protocol::OpenaiChat, Protocol::AnthropicMessages] {
        let d = Deadlines {
            idle: Duration::from_secs(60),
            ..deadlines()
        };
        let (e, server) = stalled(Fault::stall(Stall::ErrorBody), protocol, d).await;
        assert_eq!(e.kind, ErrorKind::Server, "{e:?}");
        assert!(e.is_retryable());
        assert_eq!(e.status, Some(500));
        assert_eq!(
            e.message,
            "HTTP 500 from provider mock: error body incomplete after 0.5 s"
        );
        assert!(e.timeout, "{e:?}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn error_body_stalled_by_idle_deadline_names_it() {
    let server = MockServer::start(Script::single(vec![
        Step::text("x").with_fault(Fault::stall(Stall::ErrorBody)),
    ]))
    .await
    .expect("mock");
    let p = Provider::new(
        reqwest::Client::new(),
        model(&server.base_url(), Protocol::OpenaiChat),
    )
    .with_deadlines(Deadlines {
        error_body: Duration::from_secs(60),
        ..deadlines()
    });
    let e = step(&p, &[]).await.expect_err("stall");
    assert_eq!(
        e.message,
        "HTTP 500 from provider mock: error body stalled: no bytes for 0.5 s"
    );
    assert!(e.is_retryable());
    assert!(e.timeout, "{e:?}");
    server.shutdown().await;
}

/// A kept-alive connection that stops answering: the request that reuses it hits the header
/// deadline and is sent once more on a fresh connection, which answers.
#[tokio::test]
async fn stalled_reused_connection_is_retried_once_on_a_fresh_one() {
    for protocol in [Protocol::OpenaiChat, Protocol::AnthropicMessages] {
        let server = MockServer::start(Script::single(vec![
            Step::text("one").with_fault(Fault::stall(Stall::Reuse)),
            Step::text("two"),
        ]))
        .await
        .expect("mock");
        let p = Provider::new(reqwest::Client::new(), model(&server.base_url(), protocol))
            .with_deadlines(deadlines());
        assert_eq!(step(&p, &[]).await.expect("first step"), "one");
        assert_eq!(step(&p, &["one"]).await.expect("second step"), "two");
        let reqs: Vec<_> = server
            .requests()
            .into_iter()
            .filter(|r| r.dialect.is_some())
            .collect();
        assert_eq!(reqs.len(), 3, "{reqs:#?}");
        assert_eq!(reqs[1].fault, Some(Fault::stall(Stall::Reuse)));
        assert_eq!(reqs[2].fault, None);
        server.shutdown().await;
    }
}

#[test]
fn deadlines_come_from_provider_options() {
    let mut m = model("http://127.0.0.1:9/v1", Protocol::OpenaiChat);
    assert_eq!(
        Provider::new(reqwest::Client::new(), m.clone()).deadlines(),
        Deadlines::default()
    );
    assert_eq!(
        Deadlines::default().headers,
        Some(Duration::from_secs(30)),
        "sane default to headers"
    );
    m.options.insert("timeout".into(), json!(1500));
    m.options.insert("chunkTimeout".into(), json!(2000));
    m.options.insert("connectTimeout".into(), json!(700));
    m.options.insert("errorBodyTimeout".into(), json!(900));
    let d = Provider::new(reqwest::Client::new(), m.clone()).deadlines();
    assert_eq!(
        d,
        Deadlines {
            connect: Duration::from_millis(700),
            headers: Some(Duration::from_millis(1500)),
            idle: Duration::from_millis(2000),
            error_body: Duration::from_millis(900),
        }
    );
    m.options.insert("timeout".into(), json!(false));
    assert_eq!(
        Provider::new(reqwest::Client::new(), m).deadlines().headers,
        None
    );
}
