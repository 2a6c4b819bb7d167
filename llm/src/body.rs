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
//!
//! Sharing: a body is a [`RequestBody`], a list of shared [`Bytes`] chunks. Once the cached
//! prefix is [`SHARE_MIN`] bytes or more, a body holds it as shared chunks (no copy) between
//! a chunk written for this step (the request's head) and one for its tail, so a step late
//! in a long session no longer copies the whole history into its body; the provider sends
//! the chunks in order with the exact `Content-Length` (the same bytes on the wire).

use std::sync::Arc;

use bytes::Bytes;
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

/// A cached prefix shorter than this is copied into each body (one contiguous chunk, as a
/// body built whole); from this size on it is shared: 64 KiB, where a copy per step starts
/// to cost more than handing the chunks to the HTTP client (one write of several buffers).
pub const SHARE_MIN: usize = 64 * 1024;

/// A request body: shared chunks sent in order, [`RequestBody::len`] bytes in all. Cloning it
/// (a retried attempt) shares the chunks. Built by [`BodyCache::body`], or from one buffer
/// (`From<Vec<u8>>`, `From<Bytes>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestBody {
    chunks: Vec<Bytes>,
    len: usize,
}

impl RequestBody {
    /// The chunks in the order sent; none is empty.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Total length, bytes (the request's `Content-Length`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body as one contiguous buffer: the one chunk shared, or the chunks copied into one.
    pub fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = Vec::with_capacity(self.len);
                for c in many {
                    out.extend_from_slice(c);
                }
                Bytes::from(out)
            }
        }
    }

    /// The HTTP client's body: one chunk as a plain (reusable) body, as before bodies were
    /// shared; several as a body that yields them in order and states their exact length,
    /// so the request carries the same `Content-Length` and bytes, never chunked transfer
    /// encoding. (The client cannot replay such a body itself: a request an HTTP/2 server
    /// refuses before reading it fails as a transport error that the step's retries handle.)
    pub fn into_http(self) -> reqwest::Body {
        if self.chunks.len() <= 1 {
            return reqwest::Body::from(self.to_bytes());
        }
        reqwest::Body::wrap(Chunks {
            left: self.len as u64,
            chunks: self.chunks.into(),
        })
    }

    fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push(chunk);
        }
    }
}

impl From<Bytes> for RequestBody {
    fn from(b: Bytes) -> Self {
        let mut body = RequestBody::default();
        body.push(b);
        body
    }
}

/// Chunks in the order sent (empty ones are left out).
impl FromIterator<Bytes> for RequestBody {
    fn from_iter<I: IntoIterator<Item = Bytes>>(chunks: I) -> Self {
        let mut body = RequestBody::default();
        for c in chunks {
            body.push(c);
        }
        body
    }
}

impl From<Vec<u8>> for RequestBody {
    fn from(v: Vec<u8>) -> Self {
        Bytes::from(v).into()
    }
}

/// [`RequestBody::into_http`] of several chunks: yields them in order, exact size.
struct Chunks {
    chunks: std::collections::VecDeque<Bytes>,
    left: u64,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.chunks.pop_front();
        if let Some(c) = &next {
            self.left -= c.len() as u64;
        }
        std::task::Poll::Ready(next.map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// Writes a body: bytes go to the current chunk; [`ChunkWriter::share`] ends it and adds a
/// shared chunk after it.
struct ChunkWriter {
    body: RequestBody,
    cur: Vec<u8>,
}

impl ChunkWriter {
    fn share(&mut self, chunk: &Bytes) {
        if !self.cur.is_empty() {
            self.body.push(Bytes::from(std::mem::take(&mut self.cur)));
        }
        self.body.push(chunk.clone());
    }

    fn finish(mut self) -> RequestBody {
        self.body.push(Bytes::from(self.cur));
        self.body
    }
}

/// The finished wire messages of the cache, joined with `,`: frozen shared chunks, each at
/// least twice as long as the next (so at most about log2 of the length of them; a new
/// chunk merges into the one before while that is not), then the bytes appended since the
/// last body.
#[derive(Debug, Default, Clone)]
struct Prefix {
    frozen: Vec<Bytes>,
    open: Vec<u8>,
    len: usize,
}

impl Prefix {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `v`'s JSON, after a `,` unless it is the first.
    fn push_joined(&mut self, v: &impl serde::Serialize) {
        let before = self.open.len();
        if self.len > 0 {
            self.open.push(b',');
        }
        write_json(&mut self.open, v);
        self.len += self.open.len() - before;
    }

    /// Freeze what was appended, merging chunks to keep the halving rule; the chunks.
    fn freeze(&mut self) -> &[Bytes] {
        if !self.open.is_empty() {
            self.frozen
                .push(Bytes::from(std::mem::take(&mut self.open)));
            while let [.., a, b] = self.frozen.as_slice() {
                if a.len() >= 2 * b.len() {
                    break;
                }
                let mut merged = Vec::with_capacity(a.len() + b.len());
                merged.extend_from_slice(a);
                merged.extend_from_slice(b);
                self.frozen.truncate(self.frozen.len() - 2);
                self.frozen.push(Bytes::from(merged));
            }
        }
        &self.frozen
    }

    /// Write the prefix to `w`: shared from [`SHARE_MIN`] bytes on, else copied.
    fn write_to(&mut self, w: &mut ChunkWriter) {
        let share = self.len >= SHARE_MIN;
        for c in self.freeze() {
            if share {
                w.share(c);
            } else {
                w.cur.extend_from_slice(c);
            }
        }
    }
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
    done: Prefix,
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
    /// OpenAI: the messages before the history's place (the system prompt, the same every
    /// step of a turn), whether they were serialized with reasoning, and their wire JSON
    /// joined with `,`: an equal head is not converted and escaped again.
    head: Option<(Vec<ChatMessage>, bool, Vec<u8>)>,
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

    /// Drop the cached head (the messages before the history, serialized): the next body
    /// serializes them again. For a cache kept while its session is idle.
    pub fn forget_head(&mut self) {
        self.head = None;
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
    ) -> RequestBody {
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
            return full_body(model, &with_history(req, history)).into();
        }
        // The body without history, with our `messages` spliced in at its key: the same
        // keys in the same order as the full build (the history changes only `messages`).
        // Its tools come from the cache: both wire formats put `tools` right after
        // `messages` (unless the options set `tools`, which then stays where they put it).
        let own_tools = !req.tools.is_empty() && !req.extra.contains_key("tools");
        let openai = wire.protocol == Protocol::OpenaiChat;
        let slim;
        let skeleton_req = if own_tools || openai {
            slim = ChatRequest {
                model: req.model.clone(),
                // OpenAI: the skeleton's `messages` only holds the key's place (the messages
                // are written below), so the system prompt is not copied and converted for
                // nothing. Anthropic's skeleton needs the system messages: they make its
                // `system` key.
                messages: if openai {
                    Vec::new()
                } else {
                    req.messages.clone()
                },
                tools: if own_tools {
                    Default::default()
                } else {
                    req.tools.clone()
                },
                temperature: req.temperature,
                top_p: req.top_p,
                max_tokens: req.max_tokens,
                extra: req.extra.clone(),
                headers: Vec::new(),
                body: None,
            };
            &slim
        } else {
            req
        };
        let skeleton = match wire.protocol {
            Protocol::OpenaiChat => openai::build_request_body(model, skeleton_req),
            Protocol::AnthropicMessages => anthropic::build_request_body(model, skeleton_req),
        };
        let Value::Object(map) = skeleton else {
            return full_body(model, &with_history(req, history)).into();
        };
        let shared = self.done.len >= SHARE_MIN;
        let mut w = ChunkWriter {
            body: RequestBody::default(),
            cur: Vec::with_capacity(if shared { 0 } else { self.done.len } + 16 * 1024),
        };
        let out = &mut w;
        out.cur.push(b'{');
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                out.cur.push(b',');
            }
            write_json(&mut out.cur, &Value::String(k.clone()));
            out.cur.push(b':');
            if k == "messages" {
                match wire.protocol {
                    Protocol::OpenaiChat => {
                        self.openai_messages(req, at, wire.send_reasoning, out);
                    }
                    Protocol::AnthropicMessages => self.anthropic_messages(req, at, out),
                }
                if own_tools {
                    out.cur.extend_from_slice(b",\"tools\":");
                    let tools = self.tools_json(wire.protocol, &req.tools);
                    out.cur.extend_from_slice(tools.as_bytes());
                }
            } else {
                write_json(&mut out.cur, v);
            }
        }
        out.cur.push(b'}');
        w.finish()
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
                self.done.push_joined(&openai::WireMessage {
                    m,
                    send_reasoning: wire.send_reasoning,
                });
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
                            self.done.push_joined(&anthropic::group_json(r, b));
                            self.done_count += 1;
                        }
                    }
                }
            }
        }
    }

    /// `[head…, history…, tail…]`, each message serialized on its own, written to `out`.
    fn openai_messages(
        &mut self,
        req: &ChatRequest,
        at: usize,
        send_reasoning: bool,
        out: &mut ChunkWriter,
    ) {
        out.cur.push(b'[');
        let mut first = true;
        let mut sep = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        let head = &req.messages[..at];
        if !head.is_empty() {
            sep(&mut out.cur);
            let same =
                matches!(&self.head, Some((h, r, _)) if *r == send_reasoning && h[..] == head[..]);
            if !same {
                let mut json = Vec::new();
                for (i, m) in head.iter().enumerate() {
                    if i > 0 {
                        json.push(b',');
                    }
                    write_json(&mut json, &openai::WireMessage { m, send_reasoning });
                }
                self.head = Some((head.to_vec(), send_reasoning, json));
            }
            if let Some((_, _, json)) = &self.head {
                out.cur.extend_from_slice(json);
            }
        }
        if self.done_count > 0 {
            sep(&mut out.cur);
            self.done.write_to(out);
        }
        for m in &req.messages[at..] {
            sep(&mut out.cur);
            write_json(&mut out.cur, &openai::WireMessage { m, send_reasoning });
        }
        out.cur.push(b']');
    }

    /// The finished wire messages, then the open one merged with the request's messages
    /// after the history, the last block marked, written to `out`. (Before the history a
    /// request holds at most its system prompt, which goes to `system`.)
    fn anthropic_messages(&mut self, req: &ChatRequest, at: usize, out: &mut ChunkWriter) {
        let mut groups: Vec<(&'static str, Vec<Value>)> = self.open.iter().cloned().collect();
        for m in &req.messages[at..] {
            if let Some((role, blocks)) = anthropic::message_blocks(m) {
                anthropic::push_group(&mut groups, role, blocks);
            }
        }
        if let Some((_, blocks)) = groups.last_mut() {
            anthropic::mark_last_block(blocks);
        }
        out.cur.push(b'[');
        self.done.write_to(out);
        let mut first = self.done.is_empty();
        for (r, b) in groups {
            if !std::mem::take(&mut first) {
                out.cur.push(b',');
            }
            write_json(&mut out.cur, &anthropic::group_json(r, b));
        }
        out.cur.push(b']');
    }
}

fn to_string(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn write_json(out: &mut Vec<u8>, v: &impl serde::Serialize) {
    // Serializing a `Value` or a wire message into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
