//! Unit tests of [`super::step`]: stream events → part actions, without an actor.

use super::*;

/// Feed `events` to a fresh step, keeping the part count as the actor would (one part per
/// `Open`); returns every action in order and the blocks left open.
fn run(events: Vec<StreamEvent>) -> (Vec<PartAction>, OpenBlocks) {
    let mut blocks = OpenBlocks::default();
    let mut parts = 0;
    let mut all = Vec::new();
    for ev in events {
        let actions = step(&mut blocks, parts, ev);
        parts += actions
            .iter()
            .filter(|a| matches!(a, PartAction::Open(_)))
            .count();
        all.extend(actions);
    }
    (all, blocks)
}

fn text_start(id: &str) -> StreamEvent {
    StreamEvent::TextStart { id: id.into() }
}
fn text_delta(id: &str, t: &str) -> StreamEvent {
    StreamEvent::TextDelta {
        id: id.into(),
        text: t.into(),
    }
}
fn append(part: usize, delta: &str) -> PartAction {
    PartAction::Append {
        part,
        delta: delta.into(),
    }
}

#[test]
fn text_opens_appends_and_closes() {
    let (actions, blocks) = run(vec![
        text_start("t"),
        text_delta("t", "hel"),
        text_delta("t", "lo"),
        StreamEvent::TextEnd { id: "t".into() },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Text),
            append(0, "hel"),
            append(0, "lo"),
            PartAction::CloseText(0),
        ]
    );
    assert!(blocks.text.is_empty());
}

#[test]
fn reasoning_closes_with_its_signature() {
    let (actions, blocks) = run(vec![
        StreamEvent::ReasoningStart { id: "r".into() },
        StreamEvent::ReasoningDelta {
            id: "r".into(),
            text: "think".into(),
        },
        StreamEvent::ReasoningEnd {
            id: "r".into(),
            signature: Some("sig".into()),
        },
        text_delta("t", "answer"),
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Reasoning),
            append(0, "think"),
            PartAction::CloseReasoning {
                part: 0,
                signature: Some("sig".into())
            },
            PartAction::Open(NewPart::Text),
            append(1, "answer"),
        ]
    );
    assert!(blocks.reasoning.is_empty());
    assert_eq!(blocks.text.get("t"), Some(&1), "the text block stays open");
}

#[test]
fn interleaved_blocks_keep_their_own_parts() {
    let (actions, _) = run(vec![
        text_start("a"),
        StreamEvent::ReasoningStart { id: "a".into() },
        text_delta("a", "x"),
        StreamEvent::ReasoningDelta {
            id: "a".into(),
            text: "y".into(),
        },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Text),
            PartAction::Open(NewPart::Reasoning),
            append(0, "x"),
            append(1, "y"),
        ],
        "text and reasoning ids are separate namespaces"
    );
}

#[test]
fn tool_call_start_delta_and_end() {
    let (actions, blocks) = run(vec![
        text_delta("t", "let me look"),
        StreamEvent::ToolInputStart {
            id: "call_1".into(),
            name: "read".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "call_1".into(),
            delta: "{\"path\":".into(),
        },
        StreamEvent::ToolInputDelta {
            id: "call_1".into(),
            delta: "\"a\"}".into(),
        },
        StreamEvent::ToolCall {
            id: "call_1".into(),
            name: "read".into(),
            input: "{\"path\":\"a\"}".into(),
            truncated: false,
            error: None,
        },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Text),
            append(0, "let me look"),
            PartAction::Open(NewPart::Tool {
                call_id: "call_1".into(),
                name: "read".into()
            }),
            PartAction::Call {
                part: 1,
                call_id: "call_1".into(),
                name: "read".into(),
                input: "{\"path\":\"a\"}".into(),
                truncated: false,
                error: None,
            },
        ],
        "input deltas change no part; the complete call does"
    );
    assert_eq!(
        blocks.tool.get("call_1"),
        Some(&1),
        "the tool part stays findable for its result"
    );
}

#[test]
fn a_truncated_or_refused_call_carries_why() {
    let (actions, _) = run(vec![StreamEvent::ToolCall {
        id: "c".into(),
        name: "bash".into(),
        input: "{\"comm".into(),
        truncated: true,
        error: Some("too big".into()),
    }]);
    assert!(matches!(
        &actions[1],
        PartAction::Call { truncated: true, error: Some(e), .. } if e == "too big"
    ));
}

#[test]
fn step_finish_carries_reason_and_usage() {
    let usage = Usage {
        input: 100,
        output: 20,
        reasoning: 5,
        cache_read: 40,
        cache_write: 0,
    };
    let (actions, _) = run(vec![
        text_delta("t", "done"),
        StreamEvent::FinishStep {
            reason: FinishReason::Stop,
            usage,
            raw_reason: Some("end_turn".into()),
        },
    ]);
    assert_eq!(
        actions.last(),
        Some(&PartAction::Finish {
            reason: FinishReason::Stop,
            usage
        })
    );
}

#[test]
fn warnings_change_nothing() {
    let (actions, blocks) = run(vec![StreamEvent::Warning {
        message: "skipped a line".into(),
    }]);
    assert!(actions.is_empty());
    assert_eq!(blocks, OpenBlocks::default());
}

// Malformed and out-of-order streams.

#[test]
fn a_delta_without_a_start_opens_the_block() {
    let (actions, _) = run(vec![
        text_delta("t", "a"),
        text_delta("t", "b"),
        StreamEvent::ReasoningDelta {
            id: "r".into(),
            text: "c".into(),
        },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Text),
            append(0, "a"),
            append(0, "b"),
            PartAction::Open(NewPart::Reasoning),
            append(1, "c"),
        ]
    );
}

#[test]
fn a_restarted_block_closes_the_old_part_and_opens_a_new_one() {
    let (actions, blocks) = run(vec![
        text_start("t"),
        text_delta("t", "first"),
        text_start("t"),
        text_delta("t", "second"),
        StreamEvent::ReasoningStart { id: "r".into() },
        StreamEvent::ReasoningStart { id: "r".into() },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Text),
            append(0, "first"),
            PartAction::CloseText(0),
            PartAction::Open(NewPart::Text),
            append(1, "second"),
            PartAction::Open(NewPart::Reasoning),
            PartAction::CloseReasoning {
                part: 2,
                signature: None
            },
            PartAction::Open(NewPart::Reasoning),
        ]
    );
    assert_eq!(blocks.text.get("t"), Some(&1));
    assert_eq!(blocks.reasoning.get("r"), Some(&3));
}

#[test]
fn ends_of_blocks_that_are_not_open_do_nothing() {
    let (actions, _) = run(vec![
        StreamEvent::TextEnd { id: "nope".into() },
        StreamEvent::ReasoningEnd {
            id: "nope".into(),
            signature: Some("s".into()),
        },
        text_start("t"),
        StreamEvent::TextEnd { id: "t".into() },
        StreamEvent::TextEnd { id: "t".into() },
    ]);
    assert_eq!(
        actions,
        vec![PartAction::Open(NewPart::Text), PartAction::CloseText(0)],
        "a second end of a closed block is ignored"
    );
}

#[test]
fn a_call_without_an_input_start_opens_its_part_and_a_repeated_start_keeps_it() {
    let (actions, blocks) = run(vec![
        StreamEvent::ToolCall {
            id: "c1".into(),
            name: "glob".into(),
            input: String::new(),
            truncated: false,
            error: None,
        },
        StreamEvent::ToolInputStart {
            id: "c2".into(),
            name: "grep".into(),
        },
        StreamEvent::ToolInputStart {
            id: "c2".into(),
            name: "grep".into(),
        },
    ]);
    assert_eq!(
        actions,
        vec![
            PartAction::Open(NewPart::Tool {
                call_id: "c1".into(),
                name: "glob".into()
            }),
            PartAction::Call {
                part: 0,
                call_id: "c1".into(),
                name: "glob".into(),
                input: String::new(),
                truncated: false,
                error: None,
            },
            PartAction::Open(NewPart::Tool {
                call_id: "c2".into(),
                name: "grep".into()
            }),
        ]
    );
    assert_eq!(blocks.tool.len(), 2);
}

#[test]
fn indices_count_from_the_parts_already_there() {
    let mut blocks = OpenBlocks::default();
    // The step-start part (and parts of an earlier attempt) come first.
    let actions = step(&mut blocks, 3, text_delta("t", "x"));
    assert_eq!(
        actions,
        vec![PartAction::Open(NewPart::Text), append(3, "x")]
    );
}
