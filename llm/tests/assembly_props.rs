//! Issue 24.7: both assemblers fed random event orders (drops, repeats, swaps, cuts, duplicate
//! tool ids, a leading BOM, any line ending, any read boundaries) never panic; when the step
//! finishes, every block it opened is closed before the finish and every tool call that
//! started is emitted exactly once; block and call ids are unique within the step.

mod common;

use std::collections::{HashMap, HashSet};

use common::{replay_parts, split_at, tokio_rt};
use proptest::prelude::*;
use serde_json::{Value, json};
use troupe_config::model::Protocol;
use troupe_llm::{LlmError, StreamEvent};

/// One canonical Anthropic step with text, thinking and two tool calls sharing one id.
fn anthropic_events() -> Vec<(String, Value)> {
    let mut v = vec![(
        "message_start",
        json!({"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}),
    )];
    v.push((
        "content_block_start",
        json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
    ));
    v.push((
        "content_block_delta",
        json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}),
    ));
    v.push((
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    v.push((
        "content_block_start",
        json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
    ));
    v.push((
        "content_block_delta",
        json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hello"}}),
    ));
    v.push((
        "content_block_stop",
        json!({"type":"content_block_stop","index":1}),
    ));
    for ix in [2, 3] {
        v.push((
            "content_block_start",
            json!({"type":"content_block_start","index":ix,"content_block":{"type":"tool_use","id":"toolu_same","name":"read","input":{}}}),
        ));
        v.push((
            "content_block_delta",
            json!({"type":"content_block_delta","index":ix,"delta":{"type":"input_json_delta","partial_json":"{\"filePath\":"}}),
        ));
        v.push((
            "content_block_delta",
            json!({"type":"content_block_delta","index":ix,"delta":{"type":"input_json_delta","partial_json":"\"a\"}"}}),
        ));
        v.push((
            "content_block_stop",
            json!({"type":"content_block_stop","index":ix}),
        ));
    }
    v.push((
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}),
    ));
    v.push(("message_stop", json!({"type":"message_stop"})));
    v.into_iter().map(|(e, d)| (e.to_string(), d)).collect()
}

/// One canonical OpenAI step: reasoning, text, two tool calls with the same id at two indexes.
fn openai_events() -> Vec<(String, Value)> {
    let c = |delta: Value, finish: Value| json!({"choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    let mut v = vec![
        c(
            json!({"role":"assistant","reasoning_content":"hm"}),
            Value::Null,
        ),
        c(json!({"content":"hel"}), Value::Null),
        c(json!({"content":"lo"}), Value::Null),
    ];
    for ix in [0, 1] {
        v.push(c(
            json!({"tool_calls":[{"index":ix,"id":"call_same","type":"function","function":{"name":"read","arguments":""}}]}),
            Value::Null,
        ));
        v.push(c(
            json!({"tool_calls":[{"index":ix,"function":{"arguments":"{\"filePath\":"}}]}),
            Value::Null,
        ));
        v.push(c(
            json!({"tool_calls":[{"index":ix,"function":{"arguments":"\"a\"}"}}]}),
            Value::Null,
        ));
    }
    v.push(c(json!({}), json!("tool_calls")));
    v.push(json!({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}));
    let mut out: Vec<(String, Value)> = v.into_iter().map(|d| (String::new(), d)).collect();
    out.push((String::new(), Value::String("[DONE]".into())));
    out
}

#[derive(Debug, Clone)]
enum Op {
    Drop(usize),
    Repeat(usize),
    Swap(usize),
    Cut(usize),
}

fn mutate(mut events: Vec<(String, Value)>, ops: &[Op]) -> Vec<(String, Value)> {
    for op in ops {
        let n = events.len();
        if n == 0 {
            break;
        }
        match *op {
            Op::Drop(i) => {
                events.remove(i % n);
            }
            Op::Repeat(i) => {
                let e = events[i % n].clone();
                events.insert(i % n, e);
            }
            Op::Swap(i) if n > 1 => events.swap(i % n, (i + 1) % n),
            Op::Swap(_) => {}
            Op::Cut(i) => events.truncate(i % (n + 1)),
        }
    }
    events
}

fn frame(events: &[(String, Value)], bom: bool, ending: &str) -> Vec<u8> {
    let mut s = String::new();
    if bom {
        s.push('\u{feff}');
    }
    for (name, data) in events {
        if !name.is_empty() {
            s.push_str(&format!("event: {name}{ending}"));
        }
        let data = match data {
            Value::String(d) => d.clone(),
            other => other.to_string(),
        };
        s.push_str(&format!("data: {data}{ending}{ending}"));
    }
    s.into_bytes()
}

/// The invariants of one assembled step.
fn check(events: &[Result<StreamEvent, LlmError>]) -> Result<(), String> {
    let mut open: HashSet<String> = HashSet::new();
    let mut block_ids: HashSet<String> = HashSet::new();
    let mut started: HashMap<String, usize> = HashMap::new();
    let mut called: HashMap<String, usize> = HashMap::new();
    let mut finished = false;
    for e in events {
        let Ok(e) = e else { continue };
        if finished {
            return Err(format!("event after the finish: {e:?}"));
        }
        match e {
            StreamEvent::TextStart { id } | StreamEvent::ReasoningStart { id } => {
                if !block_ids.insert(id.clone()) {
                    return Err(format!("block id {id} opened twice"));
                }
                open.insert(id.clone());
            }
            StreamEvent::TextDelta { id, .. } | StreamEvent::ReasoningDelta { id, .. } => {
                if !open.contains(id) {
                    return Err(format!("delta for block {id} that is not open"));
                }
            }
            StreamEvent::TextEnd { id } | StreamEvent::ReasoningEnd { id, .. } => {
                if !open.remove(id) {
                    return Err(format!("end of block {id} that is not open"));
                }
            }
            StreamEvent::ToolInputStart { id, .. } => *started.entry(id.clone()).or_default() += 1,
            StreamEvent::ToolInputDelta { id, .. } => {
                if !started.contains_key(id) {
                    return Err(format!("tool delta before start for {id}"));
                }
            }
            StreamEvent::ToolCall { id, .. } => {
                if !started.contains_key(id) {
                    return Err(format!("tool call {id} never started"));
                }
                *called.entry(id.clone()).or_default() += 1;
            }
            StreamEvent::Warning { .. } => {}
            StreamEvent::FinishStep { .. } => {
                finished = true;
                if !open.is_empty() {
                    return Err(format!("blocks open at the finish: {open:?}"));
                }
                if let Some((id, _)) = started.iter().find(|(id, _)| !called.contains_key(*id)) {
                    return Err(format!("tool {id} started but never emitted"));
                }
            }
        }
    }
    if let Some((id, n)) = started.iter().find(|(_, n)| **n > 1) {
        return Err(format!(
            "tool id {id} started {n} times (one part per call)"
        ));
    }
    if let Some((id, n)) = called.iter().find(|(_, n)| **n > 1) {
        return Err(format!("tool id {id} emitted {n} times"));
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            any::<usize>().prop_map(Op::Drop),
            any::<usize>().prop_map(Op::Repeat),
            any::<usize>().prop_map(Op::Swap),
            any::<usize>().prop_map(Op::Cut),
        ],
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn assemblers_survive_random_event_orders(
        anthropic in any::<bool>(),
        ops in ops(),
        bom in any::<bool>(),
        ending in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let (base, protocol) = if anthropic {
            (anthropic_events(), Protocol::AnthropicMessages)
        } else {
            (openai_events(), Protocol::OpenaiChat)
        };
        let events = mutate(base, &ops);
        let body = frame(&events, bom, ending);
        let out = tokio_rt().block_on(replay_parts(split_at(&body, &cuts), protocol, "x"));
        if let Err(why) = check(&out) {
            return Err(TestCaseError::fail(format!("{why}\nops {ops:?}\nevents {out:#?}")));
        }
    }
}

/// The unmutated steps: both duplicate-id calls survive as two calls, the second suffixed.
#[test]
fn duplicate_tool_ids_become_two_calls() {
    for (events, protocol, ids) in [
        (
            anthropic_events(),
            Protocol::AnthropicMessages,
            ["toolu_same", "toolu_same-2"],
        ),
        (
            openai_events(),
            Protocol::OpenaiChat,
            ["call_same", "call_same-2"],
        ),
    ] {
        let body = frame(&events, true, "\r");
        let out = tokio_rt().block_on(replay_parts(vec![body], protocol, "x"));
        check(&out).expect("invariants");
        let calls: Vec<(String, String)> = out
            .iter()
            .filter_map(|e| match e {
                Ok(StreamEvent::ToolCall { id, input, .. }) => Some((id.clone(), input.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                (ids[0].to_string(), "{\"filePath\":\"a\"}".to_string()),
                (ids[1].to_string(), "{\"filePath\":\"a\"}".to_string()),
            ],
            "{protocol:?}"
        );
    }
}
