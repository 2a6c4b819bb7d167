//! Builders of sessions' histories for unit tests.

use rust_decimal::Decimal;
use serde_json::json;
use troupe_config::{CompactionConfig, ModelLimits, Protocol, ResolvedModel};

use crate::types::{
    AssistantMessage, AssistantTime, Message, MessageError, MessageId, MessagePath,
    MessageWithParts, Millis, ModelRef, Part, PartKind, Tokens, ToolState, ToolTime, UserMessage,
    UserTime,
};

pub(crate) fn model(context: u64, input: Option<u64>, output: u64) -> ResolvedModel {
    ResolvedModel {
        name: "M".into(),
        limits: ModelLimits {
            context,
            input,
            output,
        },
        ..ResolvedModel::new("mock", "m", Protocol::OpenaiChat, "http://127.0.0.1")
    }
}

pub(crate) fn part(msg: &str, kind: PartKind) -> Part {
    Part {
        id: format!("prt_{msg}_{}", crate::id::part()).into(),
        session_id: "ses_1".into(),
        message_id: msg.into(),
        kind,
    }
}

pub(crate) fn text(msg: &str, t: &str) -> Part {
    part(
        msg,
        PartKind::Text {
            text: t.into(),
            synthetic: false,
            time: None,
        },
    )
}

/// A user message `id` of `session_id` created at `created` (agent `build`, model
/// `mock/m`).
pub(crate) fn user_message(session_id: &str, id: impl Into<MessageId>, created: Millis) -> Message {
    Message::User(UserMessage {
        id: id.into(),
        session_id: session_id.into(),
        time: UserTime { created },
        agent: "build".into(),
        model: ModelRef {
            provider_id: "mock".into(),
            model_id: "m".into(),
        },
        system: None,
        summary: None,
    })
}

pub(crate) fn user(id: &str) -> MessageWithParts {
    MessageWithParts {
        info: user_message("ses_1", id, 1),
        parts: vec![text(id, "do it")],
    }
}

pub(crate) fn compaction_request(id: &str) -> MessageWithParts {
    let mut m = user(id);
    m.parts = vec![part(
        id,
        PartKind::Compaction {
            auto: true,
            overflow: false,
            tail_start_id: None,
        },
    )];
    m
}

pub(crate) fn assistant_msg(id: &str, parent: &str) -> AssistantMessage {
    AssistantMessage {
        id: id.into(),
        session_id: "ses_1".into(),
        parent_id: parent.into(),
        time: AssistantTime {
            created: 2,
            completed: Some(3),
        },
        agent: "build".into(),
        model_id: "m".into(),
        provider_id: "mock".into(),
        path: MessagePath::default(),
        summary: false,
        cost: Decimal::ZERO,
        tokens: Tokens::default(),
        finish: Some("stop".into()),
        error: None,
        structured: None,
    }
}

pub(crate) fn assistant(id: &str, parent: &str, kinds: Vec<PartKind>) -> MessageWithParts {
    MessageWithParts {
        info: Message::Assistant(assistant_msg(id, parent)),
        parts: kinds.into_iter().map(|k| part(id, k)).collect(),
    }
}

pub(crate) fn summary(
    id: &str,
    parent: &str,
    finish: Option<&str>,
    error: bool,
) -> MessageWithParts {
    let mut a = assistant_msg(id, parent);
    a.summary = true;
    a.finish = finish.map(str::to_string);
    a.error = error.then(|| MessageError::new(crate::MessageErrorName::Api, "boom"));
    MessageWithParts {
        info: Message::Assistant(a),
        parts: vec![text(id, "## Goal\n- x")],
    }
}

pub(crate) fn tool_kind(tool: &str, output: String, compacted: Option<Millis>) -> PartKind {
    PartKind::Tool {
        call_id: format!("call_{}", crate::id::part()),
        tool: tool.into(),
        state: ToolState::Completed {
            input: json!({}),
            output,
            title: tool.into(),
            metadata: json!({}),
            time: ToolTime {
                start: 1,
                end: Some(2),
                compacted,
            },
        },
    }
}

/// A completed `bash` tool part whose output estimates to exactly `tokens` tokens.
pub(crate) fn tool_tokens(tokens: u64) -> PartKind {
    tool_kind("bash", "x".repeat((tokens * 4) as usize), None)
}

pub(crate) fn output_of(p: &Part) -> &str {
    match &p.kind {
        PartKind::Tool {
            state: ToolState::Completed { output, .. },
            ..
        } => output,
        _ => panic!("not a completed tool part"),
    }
}

pub(crate) fn compacted_at(p: &Part) -> Option<Millis> {
    match &p.kind {
        PartKind::Tool {
            state: ToolState::Completed { time, .. },
            ..
        } => time.compacted,
        _ => None,
    }
}

pub(crate) fn ids(h: &[MessageWithParts]) -> Vec<&str> {
    h.iter().map(|m| m.info.id().as_str()).collect()
}

/// `[U0, A0(a), U1, A1(b), U2, A2(100k), U3, A3(100k)]`: the last two turns hold huge
/// outputs that must never count.
pub(crate) fn four_turns(a: Vec<PartKind>, b: Vec<PartKind>) -> Vec<MessageWithParts> {
    vec![
        user("u0"),
        assistant("a0", "u0", a),
        user("u1"),
        assistant("a1", "u1", b),
        user("u2"),
        assistant("a2", "u2", vec![tool_tokens(100_000)]),
        user("u3"),
        assistant("a3", "u3", vec![tool_tokens(100_000)]),
    ]
}

pub(crate) fn prune_cfg() -> CompactionConfig {
    CompactionConfig::default()
}
