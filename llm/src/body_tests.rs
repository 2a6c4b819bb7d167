use super::*;
use crate::types::{ImageInput, ToolCallRequest, ToolSpec};
use serde_json::{Map, json};

fn model(protocol: Protocol) -> ResolvedModel {
    ResolvedModel {
        name: "M".into(),
        api_key: Some("k".into()),
        reasoning: true,
        image_input: true,
        pdf_input: true,
        ..ResolvedModel::new("p", "m-1", protocol, "http://127.0.0.1:9/v1")
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: text.into(),
        images: Vec::new(),
    }
}

fn assistant_text(text: &str) -> ChatMessage {
    ChatMessage::Assistant {
        content: Some(text.into()),
        reasoning: None,
        reasoning_signature: None,
        tool_calls: Vec::new(),
    }
}

/// Message `i` of a varied conversation: prompts (one with an image), tool steps with one or
/// two calls (object, string and odd inputs; ok and error results; quotes, newlines and
/// non-ASCII text to escape), reasoning with and without a signature, plain answers.
fn message(i: usize) -> Vec<ChatMessage> {
    match i % 7 {
        0 => vec![user(&format!("prompt {i}: fix \"it\"\nplease — ünïcode"))],
        1 => vec![
            ChatMessage::Assistant {
                content: None,
                reasoning: Some(format!("thinking {i}")),
                reasoning_signature: i.is_multiple_of(2).then(|| format!("sig{i}")),
                tool_calls: vec![ToolCallRequest {
                    id: format!("call_{i}"),
                    name: "read".into(),
                    input: json!({"filePath": format!("src/{i}.rs"), "limit": i}),
                }],
            },
            ChatMessage::Tool {
                call_id: format!("call_{i}"),
                content: format!("line 1\n\tline \"2\" of {i}"),
                is_error: false,
            },
        ],
        2 => vec![
            ChatMessage::Assistant {
                content: Some(format!("two calls {i}")),
                reasoning: None,
                reasoning_signature: None,
                tool_calls: vec![
                    ToolCallRequest {
                        id: format!("a_{i}"),
                        name: "bash".into(),
                        input: Value::String(format!("{{\"command\":\"ls {i}\"}}")),
                    },
                    ToolCallRequest {
                        id: format!("b_{i}"),
                        name: "glob".into(),
                        input: Value::Null,
                    },
                ],
            },
            ChatMessage::Tool {
                call_id: format!("a_{i}"),
                content: "permission denied".into(),
                is_error: true,
            },
            ChatMessage::Tool {
                call_id: format!("b_{i}"),
                content: String::new(),
                is_error: false,
            },
        ],
        3 => vec![assistant_text(&format!("answer {i} ✓"))],
        4 => vec![ChatMessage::User {
            content: format!("look at this {i}"),
            images: vec![ImageInput {
                mime: if i.is_multiple_of(2) {
                    "image/png".into()
                } else {
                    "application/pdf".into()
                },
                data: "aGVsbG8=".into(),
            }],
        }],
        // Two assistant messages in a row (an aborted step, then its retry) and an empty one.
        5 => vec![
            assistant_text(&format!("partial {i}")),
            ChatMessage::Assistant {
                content: None,
                reasoning: None,
                reasoning_signature: None,
                tool_calls: Vec::new(),
            },
        ],
        _ => vec![
            ChatMessage::Assistant {
                content: Some(String::new()),
                reasoning: None,
                reasoning_signature: None,
                tool_calls: vec![ToolCallRequest {
                    id: format!("w_{i}"),
                    name: "write".into(),
                    input: json!({"content": "x".repeat(i), "nested": {"k": [1, 2.5, null]}}),
                }],
            },
            ChatMessage::Tool {
                call_id: format!("w_{i}"),
                content: format!("wrote {i}"),
                is_error: false,
            },
        ],
    }
}

fn history(n: usize) -> Vec<ChatMessage> {
    (0..n).flat_map(message).collect()
}

/// A step request without its history: system prompt, tools, options, and (varying by
/// `step`) the max-steps reminder and a prefill after the history's place.
fn step_request(step: usize) -> ChatRequest {
    // The system prompt changes now and then (a new instructions file, another agent): the
    // cached head must follow it.
    let system = if step % 8 == 7 {
        "You are troupe.\nBe \"very\" brief."
    } else {
        "You are troupe.\nBe brief."
    };
    let mut messages = vec![ChatMessage::System {
        content: system.into(),
    }];
    if step % 5 == 4 {
        messages.push(assistant_text("max steps reached"));
    }
    if step % 3 == 2 {
        messages.push(assistant_text("<tool_call>\n"));
    }
    let mut extra = Map::new();
    extra.insert("seed".into(), json!(7));
    if step % 4 == 1 {
        // Overrides a computed key: kept at the computed key's place.
        extra.insert("stream".into(), json!(true));
        extra.insert("tool_choice".into(), json!("required"));
    }
    extra.insert("timeout".into(), json!(1000));
    let mut tools = vec![ToolSpec {
        name: "read".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"filePath": {"type": "string"}}}),
    }];
    // The tools change now and then (an MCP server came up; the last step offers none).
    if step % 6 == 5 {
        tools.push(ToolSpec {
            name: "mcp_x".into(),
            description: "An \"MCP\" tool".into(),
            parameters: json!({"type": "object"}),
        });
    }
    if step % 7 == 6 {
        tools.clear();
    }
    ChatRequest {
        model: String::new(),
        messages,
        tools: tools.into(),
        temperature: step.is_multiple_of(2).then_some(0.3),
        top_p: None,
        max_tokens: Some(4096),
        extra,
        headers: vec![],
        body: None,
    }
}

fn assert_same(cache: &mut BodyCache, m: &ResolvedModel, req: &ChatRequest, h: &[ChatMessage]) {
    let incremental = cache.body(m, req, h).to_bytes();
    let scratch = full_body(m, &with_history(req, h));
    assert_eq!(
        String::from_utf8_lossy(&incremental),
        String::from_utf8_lossy(&scratch),
        "{:?}, {} history messages",
        m.protocol,
        h.len()
    );
    // And the scratch body is valid JSON with the history in it.
    let v: Value = serde_json::from_slice(&scratch).expect("json");
    assert!(v["messages"].is_array());
}

const BOTH: [Protocol; 2] = [Protocol::OpenaiChat, Protocol::AnthropicMessages];

#[test]
fn growing_history_is_byte_identical_to_a_full_build() {
    for protocol in BOTH {
        let m = model(protocol);
        let mut cache = BodyCache::new();
        let mut len = 0;
        for step in 0..40 {
            len = history(step + 1).len();
            let h = history(step + 1);
            assert_same(&mut cache, &m, &step_request(step), &h);
            // A retry of the same step (same history) too.
            assert_same(&mut cache, &m, &step_request(step), &h);
            if step % 10 == 9 {
                // A turn ended in between: the head is serialized again.
                cache.forget_head();
            }
        }
        assert_eq!(cache.covered(), len);
    }
}

#[test]
fn a_compaction_or_revert_rewrites_the_history_and_the_reset_rebuilds_it() {
    for protocol in BOTH {
        let m = model(protocol);
        let mut cache = BodyCache::new();
        let long = history(30);
        assert_same(&mut cache, &m, &step_request(0), &long);
        // Compaction: the view now starts at the summary; the owner resets the cache.
        let mut compacted = vec![
            user("What did we do so far?"),
            assistant_text("Summary: read files, fixed a bug."),
        ];
        compacted.extend(history(30)[20..].iter().cloned());
        cache.reset();
        assert_same(&mut cache, &m, &step_request(1), &compacted);
        compacted.extend(message(31));
        assert_same(&mut cache, &m, &step_request(2), &compacted);
        // Revert: the history goes back to an earlier point (shorter), then a new prompt.
        let mut reverted = history(12);
        cache.reset();
        assert_same(&mut cache, &m, &step_request(3), &reverted);
        reverted.push(user("try again"));
        assert_same(&mut cache, &m, &step_request(4), &reverted);
        // A shorter history than covered resets on its own, even without `reset`.
        let shorter = history(5);
        assert_same(&mut cache, &m, &step_request(5), &shorter);
    }
}

#[test]
fn a_rewritten_history_of_the_same_length_needs_the_reset() {
    // Why the owner must reset: a prune clears an old tool output in place. Without the
    // reset the cached prefix is stale — this test pins that the cache does not (and cannot
    // cheaply) detect it, so the owner's reset points are what keep bodies right.
    let m = model(Protocol::OpenaiChat);
    let mut cache = BodyCache::new();
    let h = history(10);
    assert_same(&mut cache, &m, &step_request(0), &h);
    let mut pruned = h.clone();
    if let Some(ChatMessage::Tool { content, .. }) = pruned
        .iter_mut()
        .find(|x| matches!(x, ChatMessage::Tool { .. }))
    {
        *content = "[Old tool result content cleared]".into();
    }
    let stale = cache.body(&m, &step_request(0), &pruned);
    assert_ne!(
        stale.to_bytes(),
        full_body(&m, &with_history(&step_request(0), &pruned))
    );
    cache.reset();
    assert_same(&mut cache, &m, &step_request(0), &pruned);
}

#[test]
fn a_model_switch_and_odd_requests_still_match() {
    let h = history(15);
    let mut cache = BodyCache::new();
    // The same history sent to OpenAI, then Anthropic, then OpenAI with reasoning sent back:
    // the wire settings changed, the cache starts over by itself.
    let mut deepseek = model(Protocol::OpenaiChat);
    deepseek.provider_id = "deepseek".into();
    for m in [
        model(Protocol::OpenaiChat),
        model(Protocol::AnthropicMessages),
        deepseek,
        model(Protocol::OpenaiChat),
    ] {
        assert_same(&mut cache, &m, &step_request(0), &h);
        // Options that set `messages` themselves, a request without a system prompt, a system
        // message after the history's place, and an empty history.
        let mut odd = step_request(1);
        odd.extra.insert("messages".into(), json!([]));
        assert_same(&mut cache, &m, &odd, &h);
        let mut own_tools = step_request(5);
        own_tools.extra.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "x"}}]),
        );
        assert_same(&mut cache, &m, &own_tools, &h);
        let mut no_system = step_request(2);
        no_system.messages.remove(0);
        assert_same(&mut cache, &m, &no_system, &h);
        let mut late_system = step_request(3);
        late_system.messages.push(ChatMessage::System {
            content: "late".into(),
        });
        assert_same(&mut cache, &m, &late_system, &h);
        assert_same(&mut BodyCache::new(), &m, &step_request(4), &[]);
    }
    // A system message inside the history: built from scratch, still identical.
    let mut with_system = h.clone();
    with_system.insert(
        3,
        ChatMessage::System {
            content: "inner".into(),
        },
    );
    for protocol in BOTH {
        assert_same(
            &mut BodyCache::new(),
            &model(protocol),
            &step_request(0),
            &with_system,
        );
    }
}

#[test]
fn a_long_history_is_shared_not_copied_and_stays_byte_identical() {
    // Past SHARE_MIN the cached prefix goes into each body as shared chunks: the same
    // bytes as a full build, the prefix's chunks are the cache's own (no copy: a step's
    // body points at memory the previous step's body held too, unless a merge of the
    // prefix's chunks replaced all of them), and their number stays logarithmic.
    for protocol in BOTH {
        let m = model(protocol);
        let mut cache = BodyCache::new();
        let mut h = Vec::new();
        let mut previous: Option<RequestBody> = None;
        let (mut shared_steps, mut reused) = (0, 0);
        let mut step = 0;
        while previous.as_ref().is_none_or(|b| b.len() < 4 * SHARE_MIN) {
            h.extend(message(step));
            let req = step_request(step);
            let body = cache.body(&m, &req, &h);
            if step % 16 == 0 || body.len() >= 4 * SHARE_MIN {
                assert_eq!(
                    body.to_bytes(),
                    Bytes::from(full_body(&m, &with_history(&req, &h))),
                    "{protocol:?}, step {step}"
                );
            }
            assert_eq!(
                body.len(),
                body.chunks().iter().map(Bytes::len).sum::<usize>()
            );
            assert!(body.chunks().iter().all(|c| !c.is_empty()));
            assert!(body.chunks().len() <= 24, "{} chunks", body.chunks().len());
            if body.len() < SHARE_MIN {
                assert_eq!(body.chunks().len(), 1, "a short body is one buffer");
            } else if let Some(p) = previous.as_ref().filter(|p| p.chunks().len() > 1) {
                shared_steps += 1;
                let same = body
                    .chunks()
                    .iter()
                    .any(|c| p.chunks().iter().any(|d| d.as_ptr() == c.as_ptr()));
                reused += usize::from(same);
            }
            previous = Some(body);
            step += 1;
        }
        assert!(
            shared_steps > 50,
            "{protocol:?}: {shared_steps} steps past SHARE_MIN"
        );
        assert!(
            reused * 10 >= shared_steps * 8,
            "{protocol:?}: only {reused} of {shared_steps} bodies shared the previous one's prefix"
        );
    }
}
