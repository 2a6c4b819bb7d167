use super::*;
use crate::types::{ToolCallRequest, ToolSpec};

pub(crate) fn model(provider: &str) -> ResolvedModel {
    ResolvedModel {
        name: "M1".into(),
        ..ResolvedModel::new(provider, "m1", Default::default(), "http://127.0.0.1:9/v1")
    }
}

fn req() -> ChatRequest {
    ChatRequest {
        model: "gpt-x".into(),
        messages: vec![
            ChatMessage::System {
                content: "sys".into(),
            },
            ChatMessage::User {
                content: "hi".into(),
                images: Vec::new(),
            },
            ChatMessage::Assistant {
                content: None,
                reasoning: Some("think".into()),
                reasoning_signature: None,
                tool_calls: vec![ToolCallRequest {
                    id: "call_1".into(),
                    name: "read".into(),
                    input: json!({"path": "a"}),
                }],
            },
            ChatMessage::Tool {
                call_id: "call_1".into(),
                content: "data".into(),
                is_error: false,
            },
        ],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        temperature: Some(0.5),
        top_p: None,
        max_tokens: Some(100),
        extra: Map::new(),
        headers: vec![],
        body: None,
    }
}

#[test]
fn body_shape_openai() {
    let b = build_request_body(&model("openai"), &req());
    assert_eq!(b["model"], "gpt-x");
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"]["include_usage"], true);
    assert_eq!(b["max_completion_tokens"], 100);
    assert!(b.get("max_tokens").is_none());
    assert!(b.get("top_p").is_none());
    assert_eq!(b["temperature"], 0.5);
    let msgs = b["messages"].as_array().expect("array");
    assert_eq!(msgs[0], json!({"role": "system", "content": "sys"}));
    assert_eq!(msgs[2]["content"], Value::Null);
    assert!(msgs[2].get("reasoning_content").is_none());
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"a\"}"
    );
    assert_eq!(msgs[2]["tool_calls"][0]["type"], "function");
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "data"})
    );
    assert_eq!(b["tools"][0]["function"]["name"], "read");
    assert_eq!(b["tools"][0]["type"], "function");
}

#[test]
fn body_deepseek_reasoning_extra_override_and_no_tools() {
    let mut r = req();
    r.tools = Default::default();
    r.extra.insert("temperature".into(), json!(0.1));
    r.extra.insert("grammar".into(), json!("root ::= x"));
    r.extra.insert("chunkTimeout".into(), json!(1000));
    let b = build_request_body(&model("deepseek"), &r);
    assert!(b.get("tools").is_none());
    assert_eq!(b["max_tokens"], 100);
    assert_eq!(b["temperature"], 0.1);
    assert_eq!(b["grammar"], "root ::= x");
    assert!(b.get("chunkTimeout").is_none());
    assert_eq!(b["messages"][2]["reasoning_content"], "think");
    let mut m = model("local");
    m.options.insert("sendReasoning".into(), json!(true));
    assert_eq!(
        build_request_body(&m, &r)["messages"][2]["reasoning_content"],
        "think"
    );
}

/// The exact wire bytes of each message kind (key order included), written straight by
/// `WireMessage` and through `message_json`'s `Value`: the body cache writes the first, a
/// whole-body build the second.
#[test]
fn wire_messages_have_exact_bytes_both_ways() {
    use crate::types::ImageInput;
    let cases: Vec<(ChatMessage, bool, &str)> = vec![
        (
            ChatMessage::System {
                content: "be \"brief\"\n".into(),
            },
            false,
            r#"{"role":"system","content":"be \"brief\"\n"}"#,
        ),
        (
            ChatMessage::User {
                content: "see".into(),
                images: vec![
                    ImageInput {
                        mime: "image/png".into(),
                        data: "QQ==".into(),
                    },
                    ImageInput {
                        mime: "application/pdf".into(),
                        data: "Qg==".into(),
                    },
                ],
            },
            false,
            r#"{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,QQ=="}},{"type":"file","file":{"filename":"document.pdf","file_data":"data:application/pdf;base64,Qg=="}}]}"#,
        ),
        (
            ChatMessage::Assistant {
                content: None,
                reasoning: Some("hm".into()),
                reasoning_signature: None,
                tool_calls: vec![
                    ToolCallRequest {
                        id: "c1".into(),
                        name: "read".into(),
                        input: json!({"filePath": "a\"b", "n": 2.5}),
                    },
                    ToolCallRequest {
                        id: "c2".into(),
                        name: "bash".into(),
                        input: Value::String("{\"command\":".into()),
                    },
                    ToolCallRequest {
                        id: "c3".into(),
                        name: "glob".into(),
                        input: Value::Null,
                    },
                ],
            },
            true,
            r#"{"role":"assistant","content":null,"reasoning_content":"hm","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"filePath\":\"a\\\"b\",\"n\":2.5}"}},{"id":"c2","type":"function","function":{"name":"bash","arguments":"{\"command\":"}},{"id":"c3","type":"function","function":{"name":"glob","arguments":"{}"}}]}"#,
        ),
        (
            ChatMessage::Assistant {
                content: None,
                reasoning: Some("not sent".into()),
                reasoning_signature: None,
                tool_calls: Vec::new(),
            },
            false,
            r#"{"role":"assistant","content":""}"#,
        ),
        (
            ChatMessage::Tool {
                call_id: "c1".into(),
                content: "ok ✓".into(),
                is_error: true,
            },
            false,
            r#"{"role":"tool","tool_call_id":"c1","content":"ok ✓"}"#,
        ),
    ];
    for (m, send_reasoning, want) in cases {
        let direct = serde_json::to_string(&WireMessage {
            m: &m,
            send_reasoning,
        })
        .unwrap();
        assert_eq!(direct, want, "{m:?}");
        let via_value = serde_json::to_string(&message_json(&m, send_reasoning)).unwrap();
        assert_eq!(via_value, want, "{m:?}");
    }
}

fn run(provider: &str, chunks: &[&str]) -> Result<Vec<StreamEvent>, LlmError> {
    let mut a = ChunkAssembler::new(provider);
    let mut out = Vec::new();
    for c in chunks {
        out.extend(a.push(c)?);
    }
    out.extend(a.finish()?);
    Ok(out)
}

#[test]
fn eof_without_finish_is_retryable_transport() {
    let e = run(
        "x",
        &[r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#],
    )
    .expect_err("e");
    assert_eq!(e.kind, ErrorKind::Transport);
    assert_eq!(e.message, "stream ended before the step finished");
    assert!(e.is_retryable());
}

#[test]
fn error_payloads_classify() {
    let e = run(
        "x",
        &[r#"{"error":{"message":"The server had an error","type":"server_error"}}"#],
    )
    .expect_err("e");
    assert_eq!(e.kind, ErrorKind::StreamError);
    assert_eq!(e.message, "The server had an error");
    let e = run("x", &[r#"{"error":{"message":"This model's maximum context length is 4097 tokens.","code":"x"}}"#])
        .expect_err("e");
    assert_eq!(e.kind, ErrorKind::ContextOverflow);
    let e = run(
        "x",
        &[r#"{"error":{"message":"m","type":"error","code":"context_length_exceeded"}}"#],
    )
    .expect_err("e");
    assert_eq!(e.kind, ErrorKind::ContextOverflow);
    // `"error": null` is not an error.
    let ok = run(
        "x",
        &[r#"{"error":null,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#],
    );
    assert!(ok.is_ok());
}

#[test]
fn malformed_json_names_problem_and_quotes_chunk() {
    let long = format!("{{\"choices\": [{}", "x".repeat(500));
    let e = run("x", &[&long]).expect_err("e");
    assert_eq!(e.kind, ErrorKind::MalformedChunk);
    assert!(e.message.contains("invalid JSON"), "{}", e.message);
    assert!(e.message.contains("{\"choices\": [xxx"), "{}", e.message);
    assert!(e.message.len() < 400);
    let e = run("x", &["42"]).expect_err("e");
    assert!(e.message.contains("not a JSON object"));
}

#[test]
fn length_with_incomplete_tool_json_is_truncated() {
    let ev = run(
        "x",
        &[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"write","arguments":"{\"a\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c0","function":{"name":"ok","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            "[DONE]",
        ],
    )
    .expect("ok");
    let calls: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall {
                id,
                truncated,
                input,
                ..
            } => Some((id.clone(), *truncated, input.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ("c1".into(), true, "{\"a\":".into()),
            ("c0".into(), false, "{}".into())
        ]
    );
}

#[test]
fn reasoning_closes_when_text_begins_and_usage_last_wins() {
    let ev = run(
        "x",
        &[
            r#"{"choices":[{"index":0,"delta":{"reasoning":"hm"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":"stop"}]}"#,
            r#"{"choices":null,"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":2},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
        ],
    )
    .expect("ok");
    assert_eq!(
        ev[0],
        StreamEvent::ReasoningStart {
            id: "reasoning-0".into()
        }
    );
    assert_eq!(
        ev[2],
        StreamEvent::ReasoningEnd {
            id: "reasoning-0".into(),
            signature: None
        }
    );
    assert_eq!(
        ev[3],
        StreamEvent::TextStart {
            id: "text-1".into()
        }
    );
    assert_eq!(
        ev.last(),
        Some(&StreamEvent::FinishStep {
            reason: FinishReason::Stop,
            usage: Usage {
                input: 10,
                output: 5,
                reasoning: 3,
                cache_read: 4,
                cache_write: 2
            },
            raw_reason: Some("stop".into()),
        })
    );
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, StreamEvent::FinishStep { .. }))
            .count(),
        1
    );
}

#[test]
fn xai_output_adds_reasoning() {
    let u = json!({"prompt_tokens":291,"completion_tokens":26,"completion_tokens_details":{"reasoning_tokens":196}});
    assert_eq!(normalize_usage(&u, true).output, 222);
    // Elsewhere completion includes reasoning; inconsistent counts clamp to reasoning.
    assert_eq!(normalize_usage(&u, false).output, 196);
}

#[test]
fn non_streaming_completion_fallback() {
    let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    let ev = events_from_completion(body, "x").expect("ok");
    assert!(ev.contains(&StreamEvent::TextDelta {
        id: "text-0".into(),
        text: "hi".into()
    }));
    assert!(ev.contains(&StreamEvent::ToolCall {
        id: "c".into(),
        name: "f".into(),
        input: "{\"a\":1}".into(),
        truncated: false,
        error: None
    }));
    assert!(
        matches!(ev.last(), Some(StreamEvent::FinishStep { reason: FinishReason::ToolCalls, usage, .. }) if usage.input == 3)
    );
    assert!(events_from_completion("nope", "x").is_err());
}

#[test]
fn overflow_patterns_match() {
    assert!(is_overflow_message(
        "prompt is too long: 205429 tokens > 200000 maximum"
    ));
    assert!(is_overflow_message(
        "request (13392 tokens) exceeds the available context size (8192 tokens)"
    ));
    assert!(is_overflow_message("413 status code (no body)"));
    assert!(!is_overflow_message("Rate limit reached"));
}

/// Issue 13.2: a keep-alive written as a data line is skipped with a warning; the text on
/// both sides of it is kept. JSON of the wrong shape stays an error.
#[test]
fn data_keepalive_is_skipped_with_a_warning() {
    let ev = run(
        "x",
        &[
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
            ": keepalive",
            r#"{"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ],
    )
    .expect("ok");
    let text: String = ev
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "ab");
    assert!(ev.contains(&StreamEvent::Warning {
        message: "skipped a stream data line that is not JSON: : keepalive".into()
    }));
    for bad in ["42", "\"text\"", "[1]", "{not json"] {
        let e = run("x", &[bad]).expect_err(bad);
        assert_eq!(e.kind, ErrorKind::MalformedChunk, "{bad}");
    }
}

/// Issue 24.4: absurd and negative usage counts are clamped to 0, never wrapped.
#[test]
fn absurd_usage_is_clamped() {
    let u = json!({"prompt_tokens": 18446744073709551615u64, "completion_tokens": -5,
                   "prompt_tokens_details": {"cached_tokens": 1e300}});
    assert_eq!(normalize_usage(&u, false), Usage::default());
    let u = json!({"prompt_tokens": 100000000u64, "completion_tokens": 7.4});
    let n = normalize_usage(&u, false);
    assert_eq!((n.input, n.output), (100_000_000, 7));
    let u = json!({"prompt_tokens": 100000001u64});
    assert_eq!(normalize_usage(&u, false).input, 0);
}

/// Issue 24.4: arguments past the cap are neither kept nor forwarded; the call carries an
/// error naming the cap, and each delta is forwarded once (never the accumulated text).
#[test]
fn tool_arguments_past_the_cap_end_the_call_with_an_error() {
    let mut a = ChunkAssembler::new("x").with_max_tool_argument_bytes(10);
    let mut ev = Vec::new();
    for args in ["{\"a\":", "\"0123", "456789\"}"] {
        let chunk = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"write","arguments":args}}]}}]});
        ev.extend(a.push(&chunk.to_string()).expect("push"));
    }
    ev.extend(
        a.push(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#)
            .expect("finish"),
    );
    ev.extend(a.finish().expect("end"));
    let deltas: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolInputDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["{\"a\":", "\"0123"]);
    let call = ev
        .iter()
        .find_map(|e| match e {
            StreamEvent::ToolCall { input, error, .. } => Some((input.clone(), error.clone())),
            _ => None,
        })
        .expect("call");
    assert_eq!(call.0, "");
    let err = call.1.expect("error");
    assert!(err.contains("limit of 10 bytes"), "{err}");
    assert!(err.contains("at least 18 bytes"), "{err}");
}

/// Every chunk sequence gives the same events (or the same error) whether chunks are parsed
/// into the typed structs first or only as `serde_json::Value`s: well-formed streams and
/// chunks the typed parse does not model (other field types, repeated keys, arrays where an
/// object belongs, errors, escapes, several choices).
#[test]
fn typed_chunk_parse_gives_the_same_events_as_the_value_parse() {
    let streams: &[&[&str]] = &[
        &[
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think \"hard\"\n"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"héllo \u00e9\n"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"filePath\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"notes.md\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
        ],
        // Reasoning under `reasoning`, refusal text, a second choice, choice 0 later.
        &[
            r#"{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"reasoning":"r","content":"a","refusal":"no"}}]}"#,
            r#"{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}"#,
        ],
        // Fields of other types than modelled: the `Value` way decides.
        &[
            r#"{"choices":[{"index":"0","delta":{"content":"x"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":5,"reasoning_content":7,"reasoning":"r2"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[3,{"id":"","index":1,"function":{"name":"glob","arguments":{"pattern":"*"}}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c2","function":"x"}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":["array","delta"]}]}"#,
            r#"{"choices":[5,{"index":0,"delta":{"content":"skipped: 5 is choice 0"}}]}"#,
            r#"{"choices":{"index":0},"usage":7}"#,
            r#"{"choices":[{"index":0.0,"delta":{"content":"float index"}}]}"#,
            r#"{"choices":[{"index":-1,"delta":{"content":"negative index"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a","content":"dup"}}]}"#,
            r#"{"error":null,"choices":[{"index":0,"delta":{"content":"null error"}}]}"#,
            r#"{"error":"","choices":[{"index":0,"delta":{"content":"empty error"}}]}"#,
            r#"{"choices":[{"index":0,"finish_reason":"length","delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"write","arguments":"{\"a\":"}}]}}]}"#,
        ],
        &[r#"{"error":{"message":"boom","code":"server_error"}}"#],
        &[r#"{"choices":[{"index":0,"delta":{"content":"a"}}]"#],
        &[r#"["not","an","object"]"#],
        &[
            ": keepalive",
            r#"{"choices":[{"index":0,"delta":{"content":"k"},"finish_reason":"stop"}]} "#,
        ],
    ];
    let run_with = |typed: bool, chunks: &[&str]| {
        let mut a = ChunkAssembler::new("openai");
        a.typed = typed;
        let mut out = Vec::new();
        for c in chunks {
            match a.push(c) {
                Ok(ev) => out.extend(ev),
                Err(e) => return (out, Some(format!("{:?}: {}", e.kind, e.message))),
            }
        }
        match a.finish() {
            Ok(ev) => out.extend(ev),
            Err(e) => return (out, Some(format!("{:?}: {}", e.kind, e.message))),
        }
        (out, None)
    };
    for (i, chunks) in streams.iter().enumerate() {
        let typed = run_with(true, chunks);
        let value = run_with(false, chunks);
        assert_eq!(typed, value, "stream {i}");
    }
    // The well-formed stream went the typed way (all 8 JSON chunks) and said something.
    let mut a = ChunkAssembler::new("openai");
    let mut events = Vec::new();
    for c in streams[0] {
        events.extend(a.push(c).expect("chunk"));
    }
    assert_eq!(a.typed_chunks, 8);
    assert!(events.len() > 8, "{events:?}");
}
