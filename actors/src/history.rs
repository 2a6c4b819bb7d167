//! History → model messages (OpenCode `toModelMessages`, opencode-engine.md §3.5).
//!
//! Rules:
//! - user text parts are joined; empty messages are skipped;
//! - an assistant message with an error is skipped unless it was aborted (or its step
//!   crashed, `data.crashed`) and has content;
//! - every tool call sent has exactly one result: completed → output (or
//!   `[Old tool result content cleared]` once pruned), error → the error text, pending/running
//!   → `[Tool execution was interrupted]`; a call without a valid JSON object input is sent
//!   with `{}`.
//!
//! [`ChatCache`] converts each finished message once and appends, and serializes it once
//! ([`BodyCache`]), so a step costs O(new messages), not O(history).

use troupe_config::ResolvedModel;
use troupe_llm::body::{BodyCache, RequestBody};
use troupe_llm::{ChatMessage, ChatRequest, ToolCallRequest};
use troupe_session::compaction::{CLEARED_TOOL_OUTPUT, CompactedView};
use troupe_session::{Message, MessageErrorName, MessageWithParts, PartKind, ToolState};

/// Result sent for a tool call that never finished.
pub const INTERRUPTED_OUTPUT: &str = "[Tool execution was interrupted]";

/// Convert one message into zero or more model messages, appending to `out`.
pub fn convert(m: &MessageWithParts, out: &mut Vec<ChatMessage>) {
    match &m.info {
        Message::User(_) => {
            let mut text = String::new();
            let mut images = Vec::new();
            for p in &m.parts {
                // Text files and directories were expanded into synthetic text when the
                // message was made; only inline media (images, PDFs) go as attachments.
                if let PartKind::File { url, .. } = &p.kind
                    && let Some(image) = troupe_llm::types::ImageInput::from_data_url(url)
                    && (image.mime.starts_with("image/") || image.mime == "application/pdf")
                {
                    images.push(image);
                }
                if let PartKind::Text { text: t, .. } = &p.kind
                    && !t.is_empty()
                {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(t);
                }
                let stands_for = match &p.kind {
                    PartKind::Compaction { .. } => Some("What did we do so far?"),
                    // The subtask itself follows as the assistant's `task` call (OpenCode's
                    // wording).
                    PartKind::Subtask { .. } => Some(crate::user_shell::USER_SHELL_TEXT),
                    _ => None,
                };
                if let Some(s) = stands_for {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(s);
                }
            }
            if !text.is_empty() || !images.is_empty() {
                out.push(ChatMessage::User {
                    content: text,
                    images,
                });
            }
        }
        Message::Assistant(a) => {
            let has_content = m
                .parts
                .iter()
                .any(|p| matches!(p.kind, PartKind::Text { .. } | PartKind::Tool { .. }));
            // A step whose processor crashed keeps what it committed (its tool results), so
            // the retried step sees them and does not run a finished call again.
            let crashed = |e: &troupe_session::MessageError| {
                e.data.get("crashed").and_then(|v| v.as_bool()) == Some(true)
            };
            if let Some(err) = &a.error
                && !((err.name == MessageErrorName::MessageAborted || crashed(err)) && has_content)
            {
                return;
            }
            let mut text = String::new();
            let mut reasoning = String::new();
            let mut signature = None;
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for p in &m.parts {
                match &p.kind {
                    PartKind::Text { text: t, .. } => text.push_str(t),
                    PartKind::Reasoning {
                        text: t, metadata, ..
                    } => {
                        reasoning.push_str(t);
                        if let Some(sig) = metadata
                            .as_ref()
                            .and_then(|m| m.get("signature"))
                            .and_then(|s| s.as_str())
                        {
                            signature = Some(sig.to_string());
                        }
                    }
                    PartKind::Tool {
                        call_id,
                        tool,
                        state,
                    } => {
                        let input = match state.input() {
                            v @ serde_json::Value::Object(_) => v.clone(),
                            _ => serde_json::json!({}),
                        };
                        calls.push(ToolCallRequest {
                            id: call_id.clone(),
                            name: tool.clone(),
                            input,
                        });
                        let (content, is_error) = match state {
                            ToolState::Completed { output, time, .. } => {
                                if time.compacted.is_some() {
                                    (CLEARED_TOOL_OUTPUT.to_string(), false)
                                } else {
                                    (output.clone(), false)
                                }
                            }
                            ToolState::Error { error, .. } => (error.clone(), true),
                            ToolState::Pending { .. } | ToolState::Running { .. } => {
                                (INTERRUPTED_OUTPUT.to_string(), true)
                            }
                        };
                        results.push(ChatMessage::Tool {
                            call_id: call_id.clone(),
                            content,
                            is_error,
                        });
                    }
                    _ => {}
                }
            }
            if text.is_empty() && calls.is_empty() && reasoning.is_empty() {
                return;
            }
            out.push(ChatMessage::Assistant {
                content: (!text.is_empty()).then_some(text),
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
                reasoning_signature: signature,
                tool_calls: calls,
            });
            out.extend(results);
        }
    }
}

/// Incrementally converted history, and its serialized wire form ([`BodyCache`]): both only
/// grow between resets, and reset together.
#[derive(Debug, Default, Clone)]
pub struct ChatCache {
    messages: Vec<ChatMessage>,
    converted: usize,
    /// [`CompactedView::key`] of the view converted by [`ChatCache::view`].
    view: Option<usize>,
    /// The wire form of `messages`, extended as they grow.
    body: BodyCache,
}

impl ChatCache {
    /// The history a request sends after compactions ([`CompactedView`]: the compaction
    /// request, its summary and the kept tail, then the messages after the summary),
    /// converted incrementally: the prefix once per view, the body as it grows. Only call
    /// with finished messages.
    pub fn view(&mut self, history: &[MessageWithParts], view: &CompactedView) -> &[ChatMessage] {
        if self.view != Some(view.key()) {
            self.reset();
            self.view = Some(view.key());
            for &i in &view.prefix {
                if let Some(m) = history.get(i) {
                    convert(m, &mut self.messages);
                }
            }
        }
        let body = &history[view.body_start.min(history.len())..];
        for m in &body[self.converted.min(body.len())..] {
            convert(m, &mut self.messages);
        }
        self.converted = body.len();
        &self.messages
    }

    /// The request body of `req` (a request without history: system prompt, then what
    /// follows the history) with the messages of the last [`ChatCache::view`] inserted after
    /// its system prompt, serialized for `model`'s wire format. Only the messages converted
    /// since the previous call are serialized; the bytes equal
    /// [`troupe_llm::body::full_body`] of the whole request.
    pub fn body(&mut self, model: &ResolvedModel, req: &ChatRequest) -> RequestBody {
        self.body.body(model, req, &self.messages)
    }

    /// The turn ended: drop what only the turn's steps reuse (the serialized system prompt,
    /// [`BodyCache::forget_head`]), so an idle session holds its history's wire form only.
    pub fn turn_ended(&mut self) {
        self.body.forget_head();
    }

    /// Forget everything (history was rewritten, e.g. by prune or compaction).
    pub fn reset(&mut self) {
        self.messages.clear();
        self.converted = 0;
        self.view = None;
        self.body.reset();
    }
}

/// Debug builds: step request bodies compared with a build from scratch
/// ([`check_body_from_scratch`]); read by tests that drive sessions through compactions and
/// reverts.
#[cfg(debug_assertions)]
pub static BODY_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Debug builds: step request bodies that differed from the build from scratch (each also
/// panics the session actor, which a restart could hide; this count cannot be hidden).
#[cfg(debug_assertions)]
pub static BODY_MISMATCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Debug builds: assert that a step's incrementally built `body` is byte-identical to one
/// built from scratch: every message of the compacted `view` of `history` converted anew
/// (the last `delivered` wrapped as steering prompts), inserted into `req` and serialized
/// whole. Panics (a session actor bug, caught by the test suite) on a difference.
#[cfg(debug_assertions)]
pub fn check_body_from_scratch(
    model: &ResolvedModel,
    req: &ChatRequest,
    history: &[MessageWithParts],
    view: &CompactedView,
    delivered: usize,
    body: &[u8],
) {
    let end = if delivered == 0 {
        history.len()
    } else {
        history.len().saturating_sub(delivered).max(view.body_start)
    };
    let mut messages = Vec::new();
    for i in view.indices(end) {
        if let Some(m) = history.get(i) {
            convert(m, &mut messages);
        }
    }
    for m in &history[end.min(history.len())..] {
        crate::steer::convert_wrapped(m, &mut messages);
    }
    let scratch =
        troupe_llm::body::full_body(model, &troupe_llm::body::with_history(req, &messages));
    BODY_CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if scratch != body {
        BODY_MISMATCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    assert!(
        scratch == body,
        "incremental request body differs from the one built from scratch\nincremental: {}\nscratch:     {}",
        String::from_utf8_lossy(body),
        String::from_utf8_lossy(&scratch)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_session::*;

    fn assistant(parts: Vec<PartKind>, error: Option<MessageError>) -> MessageWithParts {
        let a = AssistantMessage {
            id: "msg_2".into(),
            session_id: "ses".into(),
            parent_id: "msg_1".into(),
            time: AssistantTime::default(),
            agent: "build".into(),
            model_id: "m".into(),
            provider_id: "p".into(),
            path: MessagePath::default(),
            summary: false,
            cost: Default::default(),
            tokens: Default::default(),
            finish: None,
            error,
            structured: None,
        };
        MessageWithParts {
            info: Message::Assistant(a),
            parts: parts
                .into_iter()
                .map(|k| Part::new(&"ses".into(), &"msg_2".into(), k))
                .collect(),
        }
    }

    #[test]
    fn every_tool_call_gets_exactly_one_result() {
        let m = assistant(
            vec![
                PartKind::Tool {
                    call_id: "a".into(),
                    tool: "bash".into(),
                    state: ToolState::Running {
                        input: serde_json::json!({"command": "ls"}),
                        title: None,
                        metadata: None,
                        time: ToolTime::default(),
                    },
                },
                PartKind::Tool {
                    call_id: "b".into(),
                    tool: "read".into(),
                    state: ToolState::Completed {
                        input: serde_json::json!({}),
                        output: "big".into(),
                        title: String::new(),
                        metadata: serde_json::json!({}),
                        time: ToolTime {
                            start: 0,
                            end: Some(1),
                            compacted: Some(2),
                        },
                    },
                },
            ],
            None,
        );
        let mut out = Vec::new();
        convert(&m, &mut out);
        assert_eq!(out.len(), 3);
        match &out[0] {
            ChatMessage::Assistant { tool_calls, .. } => assert_eq!(tool_calls.len(), 2),
            o => panic!("{o:?}"),
        }
        assert_eq!(
            out[1],
            ChatMessage::Tool {
                call_id: "a".into(),
                content: INTERRUPTED_OUTPUT.into(),
                is_error: true
            }
        );
        assert_eq!(
            out[2],
            ChatMessage::Tool {
                call_id: "b".into(),
                content: CLEARED_TOOL_OUTPUT.into(),
                is_error: false
            }
        );
    }

    #[test]
    fn failed_assistant_is_skipped_but_aborted_with_text_is_kept() {
        let text = PartKind::Text {
            text: "partial".into(),
            synthetic: false,
            time: None,
        };
        let mut out = Vec::new();
        convert(
            &assistant(
                vec![text.clone()],
                Some(MessageError::new(MessageErrorName::Api, "x")),
            ),
            &mut out,
        );
        assert!(out.is_empty());
        convert(
            &assistant(
                vec![text],
                Some(MessageError::new(MessageErrorName::MessageAborted, "x")),
            ),
            &mut out,
        );
        assert_eq!(out.len(), 1);
    }
}
