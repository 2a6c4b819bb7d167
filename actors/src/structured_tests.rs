use super::*;
use troupe_session::{AssistantMessage, Message, Part, ToolTime};

fn step(id: &str, finish: Option<&str>, tools: Vec<ToolState>) -> MessageWithParts {
    let a = AssistantMessage {
        id: id.into(),
        session_id: "ses_1".into(),
        parent_id: "msg_user".into(),
        time: Default::default(),
        agent: "build".into(),
        model_id: "m".into(),
        provider_id: "p".into(),
        path: Default::default(),
        summary: false,
        cost: Default::default(),
        tokens: Default::default(),
        finish: finish.map(str::to_string),
        error: None,
        structured: None,
    };
    let parts = tools
        .into_iter()
        .enumerate()
        .map(|(i, state)| {
            Part::new(
                &"ses_1".into(),
                &id.into(),
                PartKind::Tool {
                    call_id: format!("call_{i}"),
                    tool: STRUCTURED_OUTPUT_TOOL.into(),
                    state,
                },
            )
        })
        .collect();
    MessageWithParts {
        info: Message::Assistant(a),
        parts,
    }
}

fn time() -> ToolTime {
    ToolTime {
        start: 1,
        end: Some(2),
        compacted: None,
    }
}

fn invalid(msg: &str) -> ToolState {
    ToolState::Error {
        input: json!({}),
        error: msg.into(),
        metadata: None,
        time: time(),
    }
}

fn turn() -> StructuredTurn {
    StructuredTurn::new(
        &json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        &Registry::builtin(),
    )
    .unwrap()
}

#[test]
fn a_valid_call_is_captured_once() {
    let mut st = turn();
    assert!(st.spec().is_some());
    assert!(st.registry.get("bash").is_some());
    let done = ToolState::Completed {
        input: json!({"n": 3}),
        output: "Structured output captured.".into(),
        title: String::new(),
        metadata: json!({"structured": {"n": 3}}),
        time: time(),
    };
    let m = step("msg_a", Some("tool-calls"), vec![done]);
    assert_eq!(st.after_step(Some(&m)), Outcome::Captured(json!({"n": 3})));
    assert_eq!(st.after_step(Some(&m)), Outcome::Continue, "seen once");
    let mut m = m;
    let info = attach(&mut m, json!({"n": 3})).unwrap();
    let Message::Assistant(a) = info else {
        panic!()
    };
    assert_eq!(a.structured, Some(json!({"n": 3})));
}

#[test]
fn invalid_answers_go_back_until_the_limit_then_fail_with_the_last_error() {
    let mut st = turn();
    for i in 1..MAX_INVALID_ANSWERS {
        let m = step(
            &format!("msg_{i}"),
            Some("tool-calls"),
            vec![invalid(&format!("bad {i}"))],
        );
        assert_eq!(st.after_step(Some(&m)), Outcome::Continue);
    }
    let m = step("msg_z", Some("tool-calls"), vec![invalid("bad last")]);
    let Outcome::Failed(e) = st.after_step(Some(&m)) else {
        panic!("expected a failure")
    };
    assert_eq!(e.name, MessageErrorName::StructuredOutput);
    assert!(e.message().contains("after 3 attempts"), "{}", e.message());
    assert!(
        e.message().ends_with("last validation error: bad last"),
        "{}",
        e.message()
    );
}

#[test]
fn a_plain_text_answer_fails_and_other_tools_continue() {
    let mut st = turn();
    assert_eq!(st.after_step(None), Outcome::Continue);
    let text = step("msg_t", Some("stop"), vec![]);
    let Outcome::Failed(e) = st.after_step(Some(&text)) else {
        panic!("expected a failure")
    };
    assert_eq!(e.message(), "Model did not produce structured output");
    let mut other = step("msg_o", Some("tool-calls"), vec![]);
    other.parts.push(Part::new(
        &"ses_1".into(),
        &"msg_o".into(),
        PartKind::Tool {
            call_id: "c".into(),
            tool: "bash".into(),
            state: invalid("x"),
        },
    ));
    assert_eq!(st.after_step(Some(&other)), Outcome::Continue);
}

#[test]
fn tool_choice_per_protocol() {
    let mut r = troupe_llm::ChatRequest {
        tools: vec![troupe_llm::ToolSpec {
            name: "x".into(),
            description: String::new(),
            parameters: json!({}),
        }]
        .into(),
        ..Default::default()
    };
    StructuredTurn::require_tool_call(Protocol::OpenaiChat, &mut r);
    assert_eq!(r.extra["tool_choice"], "required");
    StructuredTurn::require_tool_call(Protocol::AnthropicMessages, &mut r);
    assert_eq!(r.extra["tool_choice"], json!({"type": "any"}));
    let mut none = troupe_llm::ChatRequest::default();
    StructuredTurn::require_tool_call(Protocol::OpenaiChat, &mut none);
    assert!(none.extra.is_empty());
}
