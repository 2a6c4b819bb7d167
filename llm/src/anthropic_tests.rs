use super::*;
use crate::types::{ToolCallRequest, ToolSpec};

fn model() -> ResolvedModel {
    ResolvedModel {
        name: "C".into(),
        api_key: Some("k".into()),
        reasoning: true,
        ..ResolvedModel::new(
            "anthropic",
            "claude-x",
            troupe_config::model::Protocol::AnthropicMessages,
            "http://127.0.0.1:9/v1",
        )
    }
}

#[test]
fn body_shape() {
    let req = ChatRequest {
        model: String::new(),
        messages: vec![
            ChatMessage::System {
                content: "a".into(),
            },
            ChatMessage::System {
                content: "b".into(),
            },
            ChatMessage::User {
                content: "hi".into(),
                images: Vec::new(),
            },
            ChatMessage::Assistant {
                content: Some("ok".into()),
                reasoning: Some("th".into()),
                reasoning_signature: Some("sig".into()),
                tool_calls: vec![ToolCallRequest {
                    id: "t1".into(),
                    name: "read".into(),
                    input: json!({"p": 1}),
                }],
            },
            ChatMessage::Tool {
                call_id: "t1".into(),
                content: "out".into(),
                is_error: true,
            },
            ChatMessage::User {
                content: "next".into(),
                images: Vec::new(),
            },
        ],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "d".into(),
            parameters: json!({"type":"object"}),
        }]
        .into(),
        temperature: None,
        top_p: None,
        max_tokens: None,
        extra: Map::new(),
        headers: vec![],
        body: None,
    };
    let b = build_request_body(&model(), &req);
    assert_eq!(b["model"], "claude-x");
    assert_eq!(b["max_tokens"], 32_000);
    assert_eq!(b["system"][0], json!({"type":"text","text":"a"}));
    assert_eq!(b["system"][1]["cache_control"]["type"], "ephemeral");
    let msgs = b["messages"].as_array().expect("array");
    assert_eq!(msgs.len(), 3, "tool result merged with the next user turn");
    assert_eq!(
        msgs[1]["content"][0],
        json!({"type":"thinking","thinking":"th","signature":"sig"})
    );
    assert_eq!(msgs[1]["content"][2]["type"], "tool_use");
    assert_eq!(msgs[1]["content"][2]["input"], json!({"p": 1}));
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(msgs[2]["content"][0]["is_error"], true);
    assert_eq!(msgs[2]["content"][1]["cache_control"]["type"], "ephemeral");
    assert!(msgs[2]["content"][0].get("cache_control").is_none());
    assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
}

#[test]
fn error_event_overloaded() {
    let mut a = MessageAssembler::new();
    // (event data, the error's kind, its message where the test pins it)
    let cases = [
        (
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            ErrorKind::Overloaded,
            Some("Overloaded"),
        ),
        (
            r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#,
            ErrorKind::StreamError,
            None,
        ),
    ];
    for (data, kind, message) in cases {
        let e = a.push("error", data).expect_err("e");
        assert_eq!(e.kind, kind, "{data}");
        if let Some(message) = message {
            assert_eq!(e.message, message);
        }
    }
}

#[test]
fn eof_before_stop_is_transport() {
    let mut a = MessageAssembler::new();
    a.push(
        "",
        r#"{"type":"message_start","message":{"usage":{"input_tokens":1}}}"#,
    )
    .expect("ok");
    assert_eq!(a.finish().expect_err("e").kind, ErrorKind::Transport);
}

#[test]
fn non_streaming_message() {
    let body = r#"{"type":"message","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"cache_read_input_tokens":10,"output_tokens":3}}"#;
    let ev = events_from_message(body).expect("ok");
    assert!(ev.contains(&StreamEvent::TextDelta {
        id: "text-0".into(),
        text: "hi".into()
    }));
    assert!(ev.contains(&StreamEvent::ToolCall {
        id: "t".into(),
        name: "f".into(),
        input: "{\"a\":1}".into(),
        truncated: false,
        error: None
    }));
    assert!(
        matches!(ev.last(), Some(StreamEvent::FinishStep { reason: FinishReason::ToolCalls, usage, .. }) if usage.input == 15 && usage.output == 3)
    );
}

fn feed(events: &[&str]) -> Vec<StreamEvent> {
    let mut a = MessageAssembler::new();
    let mut out = Vec::new();
    for e in events {
        out.extend(a.push("", e).expect("push"));
    }
    out.extend(a.finish().expect("finish"));
    out
}

/// Issue 24.7: a repeated start for an open index closes the first block; a delta before
/// its start opens the block, so its text is kept and closed.
#[test]
fn restarted_and_unstarted_blocks_are_closed() {
    let ev = feed(&[
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"early"}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late"}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":-3}}"#,
    ]);
    assert_eq!(
        ev[..6],
        [
            StreamEvent::TextStart {
                id: "text-0".into()
            },
            StreamEvent::TextDelta {
                id: "text-0".into(),
                text: "early".into()
            },
            StreamEvent::TextEnd {
                id: "text-0".into()
            },
            StreamEvent::TextStart {
                id: "text-0-2".into()
            },
            StreamEvent::TextDelta {
                id: "text-0-2".into(),
                text: "late".into()
            },
            StreamEvent::TextEnd {
                id: "text-0-2".into()
            },
        ]
    );
    assert!(matches!(
        ev.last(),
        Some(StreamEvent::FinishStep { usage, .. }) if usage.output == 0
    ));
}

#[test]
fn data_keepalive_is_skipped() {
    let ev = feed(&[
        ": keepalive",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
    ]);
    assert!(matches!(ev[0], StreamEvent::Warning { .. }));
    let mut a = MessageAssembler::new();
    assert!(a.push("", "{broken").is_err());
}
