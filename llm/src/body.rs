//! Request bodies built incrementally: a session's history only grows between compactions,
//! so each message's wire form is serialized once and the body of a step is the cached
//! prefix plus the new messages, not a re-serialization of the whole history.
//!
//! The contract, checked by the tests below and by every debug build of the session actor:
//! [`BodyCache::body`] returns exactly the bytes of [`full_body`] for the same request with
//! the history inserted after its system message — byte for byte, for both wire formats.
//!
//! Invalidation: the cache holds the wire form of the first `covered` history messages. The
//! owner calls [`BodyCache::reset`] whenever the history it passes stops being an extension
//! of the one passed before (a compaction changes the view, a prune clears old tool outputs,
//! a revert or a crash reloads the history). On its own the cache also starts over when the
//! history is shorter than what it covers or the wire settings (protocol, reasoning sent
//! back) changed.

use std::sync::Arc;

use serde_json::Value;
use troupe_config::model::{Protocol, ResolvedModel};

use crate::types::{ChatMessage, ChatRequest, ToolSpec};
use crate::{anthropic, openai};

/// The body of `req` as [`crate::Provider::stream`] sends it when the caller did not build it:
/// `serde_json::to_vec` of [`openai::build_request_body`] or [`anthropic::build_request_body`].
pub fn full_body(model: &ResolvedModel, req: &ChatRequest) -> Vec<u8> {
    let body = match model.protocol {
        Protocol::OpenaiChat => openai::build_request_body(model, req),
        Protocol::AnthropicMessages => anthropic::build_request_body(model, req),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `req` with `history` inserted at [`history_index`]: the request [`BodyCache::body`] stands for.
pub fn with_history(req: &ChatRequest, history: &[ChatMessage]) -> ChatRequest {
    let at = history_index(req);
    let mut full = req.clone();
    full.messages.splice(at..at, history.iter().cloned());
    full
}

/// Where the history goes in `req.messages`: after the leading system message (index 1), or
/// at 0 when the request has none.
pub fn history_index(req: &ChatRequest) -> usize {
    usize::from(matches!(
        req.messages.first(),
        Some(ChatMessage::System { .. })
    ))
}

/// Wire settings the cached serialization depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wire {
    protocol: Protocol,
    /// OpenAI: assistant messages carry `reasoning_content` ([`openai::sends_reasoning`]).
    send_reasoning: bool,
}

/// The serialized wire messages of a growing history (one per session). Memory: the JSON of
/// every covered message once, plus (Anthropic) the blocks of the last wire message.
#[derive(Debug, Default, Clone)]
pub struct BodyCache {
    wire: Option<Wire>,
    /// History messages whose wire form is in `done` (or in `open`).
    covered: usize,
    /// Finished wire messages, serialized and joined with `,` (no brackets).
    done: String,
    /// Wire messages in `done`.
    done_count: usize,
    /// Anthropic: the last wire message of the covered history, not serialized yet: the next
    /// message of the same role merges into it, and the last one carries `cache_control`.
    open: Option<(&'static str, Vec<Value>)>,
    /// A covered message has no incremental form (a system message in the history):
    /// every body is built from scratch until the next reset.
    scratch: bool,
    /// The tools of the last body and their serialized `tools` value (a step offers the
    /// same tools as the one before, almost always): the same shared list (pointer) or an
    /// equal one is not serialized again.
    tools: Option<(Arc<[ToolSpec]>, String)>,
}

impl BodyCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget the covered history (it was rewritten: compaction, prune, revert, reload).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// History messages covered so far.
    pub fn covered(&self) -> usize {
        self.covered
    }

    /// The body of `req` with `history` inserted at [`history_index`] — the same bytes as
    /// `full_body(model, &with_history(req, history))` — serializing only the history
    /// messages not seen before. `history` must extend the one of the previous call since
    /// the last [`BodyCache::reset`] (same messages, more at the end).
    pub fn body(
        &mut self,
        model: &ResolvedModel,
        req: &ChatRequest,
        history: &[ChatMessage],
    ) -> Vec<u8> {
        let wire = Wire {
            protocol: model.protocol,
            send_reasoning: openai::sends_reasoning(model),
        };
        if self.wire != Some(wire) || self.covered > history.len() {
            self.reset();
            self.wire = Some(wire);
        }
        for m in &history[self.covered..] {
            self.append(wire, m);
        }
        self.covered = history.len();
        let at = history_index(req);
        // Cases the splice below does not model: a body key `messages` from the options, a
        // system message after the history's place (Anthropic collects them all into
        // `system`), a system message in the history.
        if self.scratch
            || req.extra.contains_key("messages")
            || req.messages[at..]
                .iter()
                .any(|m| matches!(m, ChatMessage::System { .. }))
        {
            return full_body(model, &with_history(req, history));
        }
        // The body without history, with our `messages` spliced in at its key: the same
        // keys in the same order as the full build (the history changes only `messages`).
        // Its tools come from the cache: both wire formats put `tools` right after
        // `messages` (unless the options set `tools`, which then stays where they put it).
        let own_tools = !req.tools.is_empty() && !req.extra.contains_key("tools");
        let without_tools;
        let skeleton_req = if own_tools {
            without_tools = ChatRequest {
                model: req.model.clone(),
                messages: req.messages.clone(),
                tools: Default::default(),
                temperature: req.temperature,
                top_p: req.top_p,
                max_tokens: req.max_tokens,
                extra: req.extra.clone(),
                headers: Vec::new(),
                body: None,
            };
            &without_tools
        } else {
            req
        };
        let skeleton = match wire.protocol {
            Protocol::OpenaiChat => openai::build_request_body(model, skeleton_req),
            Protocol::AnthropicMessages => anthropic::build_request_body(model, skeleton_req),
        };
        let Value::Object(map) = skeleton else {
            return full_body(model, &with_history(req, history));
        };
        let mut out = Vec::with_capacity(self.done.len() + 16 * 1024);
        out.push(b'{');
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json(&mut out, &Value::String(k.clone()));
            out.push(b':');
            if k == "messages" {
                match wire.protocol {
                    Protocol::OpenaiChat => {
                        self.openai_messages(req, at, wire.send_reasoning, &mut out);
                    }
                    Protocol::AnthropicMessages => self.anthropic_messages(req, at, &mut out),
                }
                if own_tools {
                    out.extend_from_slice(b",\"tools\":");
                    out.extend_from_slice(self.tools_json(wire.protocol, &req.tools).as_bytes());
                }
            } else {
                write_json(&mut out, v);
            }
        }
        out.push(b'}');
        out
    }

    /// The serialized `tools` value for `tools`, reused while they stay the same.
    fn tools_json(&mut self, protocol: Protocol, tools: &Arc<[ToolSpec]>) -> &str {
        let fresh =
            !matches!(&self.tools, Some((t, _)) if Arc::ptr_eq(t, tools) || t[..] == tools[..]);
        if fresh {
            let v = match protocol {
                Protocol::OpenaiChat => openai::tools_json(tools),
                Protocol::AnthropicMessages => anthropic::tools_json(tools),
            };
            self.tools = Some((tools.clone(), to_string(&v)));
        }
        self.tools.as_ref().map_or("[]", |(_, s)| s.as_str())
    }

    fn append(&mut self, wire: Wire, m: &ChatMessage) {
        if matches!(m, ChatMessage::System { .. }) {
            self.scratch = true;
            return;
        }
        match wire.protocol {
            Protocol::OpenaiChat => {
                let v = openai::message_json(m, wire.send_reasoning);
                push_joined(&mut self.done, &v);
                self.done_count += 1;
            }
            Protocol::AnthropicMessages => {
                let Some((role, blocks)) = anthropic::message_blocks(m) else {
                    return;
                };
                match &mut self.open {
                    Some((r, b)) if *r == role => b.extend(blocks),
                    _ => {
                        if let Some((r, b)) = self.open.replace((role, blocks)) {
                            push_joined(&mut self.done, &anthropic::group_json(r, b));
                            self.done_count += 1;
                        }
                    }
                }
            }
        }
    }

    /// `[head…, history…, tail…]`, each message serialized on its own, written to `out`.
    fn openai_messages(
        &self,
        req: &ChatRequest,
        at: usize,
        send_reasoning: bool,
        out: &mut Vec<u8>,
    ) {
        out.push(b'[');
        let mut first = true;
        let mut sep = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        for m in &req.messages[..at] {
            sep(out);
            write_json(out, &openai::message_json(m, send_reasoning));
        }
        if self.done_count > 0 {
            sep(out);
            out.extend_from_slice(self.done.as_bytes());
        }
        for m in &req.messages[at..] {
            sep(out);
            write_json(out, &openai::message_json(m, send_reasoning));
        }
        out.push(b']');
    }

    /// The finished wire messages, then the open one merged with the request's messages
    /// after the history, the last block marked, written to `out`. (Before the history a
    /// request holds at most its system prompt, which goes to `system`.)
    fn anthropic_messages(&self, req: &ChatRequest, at: usize, out: &mut Vec<u8>) {
        let mut groups: Vec<(&'static str, Vec<Value>)> = self.open.iter().cloned().collect();
        for m in &req.messages[at..] {
            if let Some((role, blocks)) = anthropic::message_blocks(m) {
                anthropic::push_group(&mut groups, role, blocks);
            }
        }
        if let Some((_, blocks)) = groups.last_mut() {
            anthropic::mark_last_block(blocks);
        }
        out.push(b'[');
        out.extend_from_slice(self.done.as_bytes());
        let mut first = self.done.is_empty();
        for (r, b) in groups {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            write_json(out, &anthropic::group_json(r, b));
        }
        out.push(b']');
    }
}

fn to_string(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn write_json(out: &mut Vec<u8>, v: &Value) {
    // Serializing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

fn push_joined(s: &mut String, v: &Value) {
    if !s.is_empty() {
        s.push(',');
    }
    s.push_str(&to_string(v));
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
