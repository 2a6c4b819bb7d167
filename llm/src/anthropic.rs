//! Anthropic Messages: request body building and streamed event assembly (wire-formats.md §2).

use serde_json::{Map, Value, json};
use troupe_config::model::ResolvedModel;

use crate::error::{ErrorKind, LlmError};
use crate::openai::{CONTROL_OPTION_KEYS, end_of_stream, excerpt, is_overflow_message};
use crate::types::{ChatMessage, ChatRequest, FinishReason, StreamEvent, Usage};

/// Value of the `anthropic-version` header.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Build the JSON body of `POST {base_url}/messages`.
///
/// Shape: `model`, `max_tokens` (`req.max_tokens`, else [`ResolvedModel::max_output_tokens`];
/// the API requires it), `stream: true`, `system` as text blocks (one per system message, the
/// last one with `cache_control: {type: "ephemeral"}`), `messages` with consecutive same-role
/// turns merged (tool results are `user` turns of `tool_result` blocks), assistant turns as
/// `thinking` (only when a signature is known) / `text` / `tool_use` blocks, `cache_control` on
/// the last block of the last message, `tools: [{name, description, input_schema}]` when
/// non-empty, `temperature`/`top_p` when set, then `req.extra` (minus control keys) merged last.
pub fn build_request_body(model: &ResolvedModel, req: &ChatRequest) -> Value {
    let mut body = Map::new();
    let model_id = if req.model.is_empty() {
        model.model_id.clone()
    } else {
        req.model.clone()
    };
    body.insert("model".into(), json!(model_id));
    body.insert(
        "max_tokens".into(),
        json!(req.max_tokens.unwrap_or_else(|| model.max_output_tokens())),
    );
    body.insert("stream".into(), json!(true));

    let mut system: Vec<Value> = req
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::System { content } if !content.is_empty() => {
                Some(json!({"type": "text", "text": content}))
            }
            _ => None,
        })
        .collect();
    if let Some(Value::Object(last)) = system.last_mut() {
        last.insert("cache_control".into(), ephemeral());
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }

    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        if let Some((role, blocks)) = message_blocks(m) {
            push_group(&mut messages, role, blocks);
        }
    }
    if let Some((_, blocks)) = messages.last_mut() {
        mark_last_block(blocks);
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| group_json(role, content))
        .collect();
    body.insert("messages".into(), Value::Array(messages));

    if !req.tools.is_empty() {
        body.insert("tools".into(), tools_json(&req.tools));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p));
    }
    for (k, v) in &req.extra {
        if !CONTROL_OPTION_KEYS.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

/// The wire role and content blocks of one non-system message; `None` for a system message
/// (sent in `system`) or a message without blocks (skipped).
pub(crate) fn message_blocks(m: &ChatMessage) -> Option<(&'static str, Vec<Value>)> {
    let (role, blocks) = match m {
        ChatMessage::System { .. } => return None,
        // Messages API: image (and PDF `document`) blocks with a base64 source before
        // the text, as Anthropic recommends.
        ChatMessage::User { content, images } => {
            let mut blocks: Vec<Value> = images
                .iter()
                .map(|i| {
                    let kind = if i.mime == "application/pdf" {
                        "document"
                    } else {
                        "image"
                    };
                    json!({"type": kind, "source": {
                        "type": "base64", "media_type": i.mime, "data": i.data}})
                })
                .collect();
            blocks.push(json!({"type": "text", "text": content}));
            ("user", blocks)
        }
        ChatMessage::Tool {
            call_id,
            content,
            is_error,
        } => {
            let mut b = json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
            if *is_error {
                b["is_error"] = json!(true);
            }
            ("user", vec![b])
        }
        ChatMessage::Assistant {
            content,
            reasoning,
            reasoning_signature,
            tool_calls,
        } => {
            let mut blocks = Vec::new();
            if let (Some(r), Some(sig)) = (reasoning, reasoning_signature) {
                blocks.push(json!({"type": "thinking", "thinking": r, "signature": sig}));
            }
            if let Some(t) = content.as_ref().filter(|t| !t.is_empty()) {
                blocks.push(json!({"type": "text", "text": t}));
            }
            for c in tool_calls {
                let input = match &c.input {
                    Value::Object(_) => c.input.clone(),
                    Value::String(s) => serde_json::from_str::<Value>(s)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({})),
                    _ => json!({}),
                };
                blocks
                    .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            ("assistant", blocks)
        }
    };
    (!blocks.is_empty()).then_some((role, blocks))
}

/// The `tools` value of a body: `[{name, description, input_schema}]`.
pub(crate) fn tools_json(tools: &[crate::types::ToolSpec]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect(),
    )
}

/// Append one message's blocks to the wire messages: consecutive same-role turns merge.
pub(crate) fn push_group(
    groups: &mut Vec<(&'static str, Vec<Value>)>,
    role: &'static str,
    blocks: Vec<Value>,
) {
    match groups.last_mut() {
        Some((r, b)) if *r == role => b.extend(blocks),
        _ => groups.push((role, blocks)),
    }
}

/// `cache_control: ephemeral` on the last block of the last message.
pub(crate) fn mark_last_block(blocks: &mut [Value]) {
    if let Some(Value::Object(last)) = blocks.last_mut() {
        last.insert("cache_control".into(), ephemeral());
    }
}

/// One wire message: `{"role", "content": [blocks]}`.
pub(crate) fn group_json(role: &str, content: Vec<Value>) -> Value {
    json!({"role": role, "content": content})
}

#[derive(Debug)]
enum Block {
    Text {
        id: String,
    },
    Thinking {
        id: String,
        signature: Option<String>,
    },
    Tool {
        id: String,
        name: String,
        args: String,
        /// Argument bytes received, including those dropped past the cap.
        arg_bytes: usize,
        initial: Option<String>,
    },
    Other,
}

#[derive(Debug, Default, Clone, Copy)]
struct RawUsage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl RawUsage {
    fn update(&mut self, u: &Value) {
        // Absent or null keeps the previous value (usage is cumulative); anything else goes
        // through the same bounds as every usage count.
        let get = |k: &str| {
            u.get(k)
                .filter(|v| !v.is_null())
                .map(crate::types::token_count)
        };
        if let Some(n) = get("input_tokens") {
            self.input = n;
        }
        if let Some(n) = get("output_tokens") {
            self.output = n;
        }
        if let Some(n) = get("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            self.cache_write = n;
        }
    }

    /// Anthropic `input_tokens` excludes cache reads and writes (wire-formats.md §2.2).
    fn normalized(self) -> Usage {
        Usage {
            input: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_write),
            output: self.output,
            reasoning: 0,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
        }
    }
}

/// Assembles Anthropic Messages SSE events into [`StreamEvent`]s. Pure and synchronous.
///
/// `message_start` and every `message_delta` update the usage (cumulative, last value wins per
/// field); blocks map to text / reasoning (with the `signature_delta` passed on
/// `ReasoningEnd`) / tool calls; open blocks are closed at `content_block_stop`, or at
/// `message_delta` when the stream skipped it (`max_tokens` mid tool JSON: the call is emitted
/// with `truncated: true` when its JSON is incomplete); `message_stop` emits the one
/// `FinishStep`. `error` events fail the stream (`overloaded_error` → `Overloaded`). Unknown
/// event and block types are ignored. `redacted_thinking` blocks are skipped (no event shape
/// carries their opaque data yet). A second `message_start` is ignored.
///
/// Whatever the order of events (issue 24.7): a `content_block_start` for an index that is
/// still open closes the open block first; a text or thinking delta before its block start
/// opens the block; every block open at `message_delta`/`message_stop`/end of stream is closed;
/// block ids are unique within the step (`text-3`, then `text-3-2` for a restarted index); a
/// `tool_use` id already used in this step gets a `-2`, `-3`… suffix; tool arguments past the
/// cap ([`crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES`]) are dropped and the call is emitted
/// with an error. A data payload that is not JSON is skipped with a
/// [`StreamEvent::Warning`] (issue 13.2).
#[derive(Debug)]
pub struct MessageAssembler {
    blocks: Vec<(u64, Block)>,
    usage: RawUsage,
    stop_reason: Option<String>,
    ended: bool,
    /// Every block and tool id handed out in this step.
    used_ids: std::collections::HashSet<String>,
    max_tool_argument_bytes: usize,
}

impl Default for MessageAssembler {
    fn default() -> Self {
        Self {
            blocks: Vec::new(),
            usage: RawUsage::default(),
            stop_reason: None,
            ended: false,
            used_ids: Default::default(),
            max_tool_argument_bytes: crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
        }
    }
}

impl MessageAssembler {
    /// New assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set the cap on one tool call's argument text, bytes.
    pub fn with_max_tool_argument_bytes(mut self, max: usize) -> Self {
        self.max_tool_argument_bytes = max;
        self
    }

    /// `base` if unused in this step, else `base-2`, `base-3`…; marks the result used.
    fn unique_id(&mut self, base: String) -> String {
        let mut id = base.clone();
        let mut n = 2;
        while self.used_ids.contains(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        self.used_ids.insert(id.clone());
        id
    }

    /// Whether `FinishStep` has been emitted.
    pub fn is_done(&self) -> bool {
        self.ended
    }

    /// Feed one SSE event (`event` name, `data` JSON). The JSON `type` decides; the event name is
    /// only used when `type` is missing.
    pub fn push(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>, LlmError> {
        let mut out = Vec::new();
        if self.ended || data.trim().is_empty() {
            return Ok(out);
        }
        let parsed = serde_json::from_str::<Value>(data.trim());
        if parsed.is_err() && !crate::openai::looks_like_json(data.trim()) {
            out.push(crate::openai::skipped_data(data));
            return Ok(out);
        }
        let v: Value = parsed.map_err(|e| {
            LlmError::new(
                ErrorKind::MalformedChunk,
                format!(
                    "malformed stream chunk (invalid JSON: {e}): {}",
                    excerpt(data, 200)
                ),
            )
        })?;
        if !v.is_object() {
            return Err(LlmError::new(
                ErrorKind::MalformedChunk,
                format!(
                    "malformed stream chunk (not a JSON object): {}",
                    excerpt(data, 200)
                ),
            ));
        }
        let typ = v.get("type").and_then(Value::as_str).unwrap_or(event);
        match typ {
            "message_start" => {
                if let Some(u) = v.get("message").and_then(|m| m.get("usage")) {
                    self.usage.update(u);
                }
            }
            "content_block_start" => self.block_start(&v, &mut out),
            "content_block_delta" => self.block_delta(&v, &mut out),
            "content_block_stop" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) {
                    let (_, block) = self.blocks.remove(pos);
                    self.close_block(block, false, &mut out);
                }
            }
            "message_delta" => {
                if let Some(sr) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(sr.to_string());
                }
                if let Some(u) = v.get("usage") {
                    self.usage.update(u);
                }
                if self.stop_reason.is_some() {
                    self.close_all(&mut out);
                }
            }
            "message_stop" => {
                self.close_all(&mut out);
                self.emit_finish(&mut out);
            }
            "error" => return Err(error_event(&v, data)),
            _ => {}
        }
        Ok(out)
    }

    /// End of the byte stream: emits the finish when a `stop_reason` was seen (lost
    /// `message_stop`), else `Transport` "stream ended before the step finished".
    pub fn finish(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        end_of_stream(self.ended, self.stop_reason.is_some(), |out| {
            self.close_all(out);
            self.emit_finish(out);
        })
    }

    fn block_start(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        // A start for an index that is still open: close what is open there first.
        if let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) {
            let (_, old) = self.blocks.remove(pos);
            self.close_block(old, false, out);
        }
        let cb = v.get("content_block").cloned().unwrap_or(Value::Null);
        let block = match cb.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                let block = self.open_text(index, out);
                if let (Some(t), Block::Text { id }) = (
                    cb.get("text")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty()),
                    &block,
                ) {
                    out.push(StreamEvent::TextDelta {
                        id: id.clone(),
                        text: t.to_string(),
                    });
                }
                block
            }
            "thinking" => {
                let signature = cb
                    .get("signature")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
                let mut block = self.open_thinking(index, out);
                if let Block::Thinking { id, signature: s } = &mut block {
                    *s = signature;
                    if let Some(t) = cb
                        .get("thinking")
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                    {
                        out.push(StreamEvent::ReasoningDelta {
                            id: id.clone(),
                            text: t.to_string(),
                        });
                    }
                }
                block
            }
            "tool_use" => {
                let base = cb
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("toolu_{index}"));
                let id = self.unique_id(base);
                let name = cb
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                out.push(StreamEvent::ToolInputStart {
                    id: id.clone(),
                    name: name.clone(),
                });
                let initial = cb
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    .map(Value::to_string);
                Block::Tool {
                    id,
                    name,
                    args: String::new(),
                    arg_bytes: 0,
                    initial,
                }
            }
            _ => Block::Other,
        };
        self.blocks.push((index, block));
    }

    fn open_text(&mut self, index: u64, out: &mut Vec<StreamEvent>) -> Block {
        let id = self.unique_id(format!("text-{index}"));
        out.push(StreamEvent::TextStart { id: id.clone() });
        Block::Text { id }
    }

    fn open_thinking(&mut self, index: u64, out: &mut Vec<StreamEvent>) -> Block {
        let id = self.unique_id(format!("reasoning-{index}"));
        out.push(StreamEvent::ReasoningStart { id: id.clone() });
        Block::Thinking {
            id,
            signature: None,
        }
    }

    fn block_delta(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let Some(delta) = v.get("delta") else { return };
        let dtype = delta.get("type").and_then(Value::as_str).unwrap_or("");
        if !self.blocks.iter().any(|(i, _)| *i == index) {
            // A delta before its block start: text and thinking open their block (the text is
            // not lost); a tool delta without its start has no name and is dropped.
            let block = match dtype {
                "text_delta" => self.open_text(index, out),
                "thinking_delta" | "signature_delta" => self.open_thinking(index, out),
                _ => return,
            };
            self.blocks.push((index, block));
        }
        let cap = self.max_tool_argument_bytes;
        let Some((_, block)) = self.blocks.iter_mut().find(|(i, _)| *i == index) else {
            return;
        };
        let s = |k: &str| {
            delta
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match (dtype, block) {
            ("text_delta", Block::Text { id }) => {
                let text = s("text");
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta {
                        id: id.clone(),
                        text,
                    });
                }
            }
            ("thinking_delta", Block::Thinking { id, .. }) => {
                let text = s("thinking");
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta {
                        id: id.clone(),
                        text,
                    });
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                let sig = s("signature");
                match signature {
                    Some(existing) => existing.push_str(&sig),
                    None => *signature = Some(sig),
                }
            }
            (
                "input_json_delta",
                Block::Tool {
                    id,
                    args,
                    arg_bytes,
                    ..
                },
            ) => {
                let part = s("partial_json");
                if !part.is_empty() {
                    *arg_bytes = arg_bytes.saturating_add(part.len());
                    if *arg_bytes > cap {
                        return;
                    }
                    args.push_str(&part);
                    out.push(StreamEvent::ToolInputDelta {
                        id: id.clone(),
                        delta: part,
                    });
                }
            }
            _ => {}
        }
    }

    fn close_block(&self, block: Block, at_message_end: bool, out: &mut Vec<StreamEvent>) {
        match block {
            Block::Text { id } => out.push(StreamEvent::TextEnd { id }),
            Block::Thinking { id, signature } => {
                out.push(StreamEvent::ReasoningEnd { id, signature })
            }
            Block::Tool {
                id,
                name,
                args,
                arg_bytes,
                initial,
            } => {
                if arg_bytes > self.max_tool_argument_bytes {
                    out.push(StreamEvent::ToolCall {
                        id,
                        name,
                        input: String::new(),
                        truncated: false,
                        error: Some(crate::types::oversized_arguments_error(
                            arg_bytes,
                            self.max_tool_argument_bytes,
                        )),
                    });
                    return;
                }
                let input = if args.is_empty() {
                    initial.unwrap_or_default()
                } else {
                    args
                };
                let cut = at_message_end
                    && self.stop_reason.as_deref().map(FinishReason::from_wire)
                        == Some(FinishReason::Length);
                let truncated = cut
                    && !input.trim().is_empty()
                    && serde_json::from_str::<Value>(&input).is_err();
                out.push(StreamEvent::ToolCall {
                    id,
                    name,
                    input,
                    truncated,
                    error: None,
                });
            }
            Block::Other => {}
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        let blocks = std::mem::take(&mut self.blocks);
        for (_, b) in blocks {
            self.close_block(b, true, out);
        }
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let raw = self.stop_reason.clone();
        out.push(StreamEvent::FinishStep {
            reason: raw
                .as_deref()
                .map(FinishReason::from_wire)
                .unwrap_or(FinishReason::Unknown),
            usage: self.usage.normalized(),
            raw_reason: raw,
        });
    }
}

fn error_event(v: &Value, raw: &str) -> LlmError {
    let err = v.get("error").cloned().unwrap_or(Value::Null);
    let typ = err.get("type").and_then(Value::as_str).unwrap_or("");
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("stream error: {}", excerpt(raw, 200)));
    let kind = if typ == "overloaded_error" {
        ErrorKind::Overloaded
    } else if is_overflow_message(&message) {
        ErrorKind::ContextOverflow
    } else {
        ErrorKind::StreamError
    };
    let mut e = LlmError::new(kind, message);
    e.body = Some(excerpt(raw, 4096));
    e
}

/// Parse a non-streamed Anthropic `message` body into the same events a stream would give.
pub fn events_from_message(body: &str) -> Result<Vec<StreamEvent>, LlmError> {
    let v: Value = serde_json::from_str(body.trim()).map_err(|e| {
        LlmError::new(
            ErrorKind::MalformedChunk,
            format!(
                "malformed message body (invalid JSON: {e}): {}",
                excerpt(body, 200)
            ),
        )
    })?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_event(&v, body));
    }
    let mut asm = MessageAssembler::new();
    let mut out = Vec::new();
    let usage = v.get("usage").cloned().unwrap_or(Value::Null);
    let mut feed = |ev: Value, out: &mut Vec<StreamEvent>| -> Result<(), LlmError> {
        out.extend(asm.push("", &ev.to_string())?);
        Ok(())
    };
    feed(
        json!({"type": "message_start", "message": {"usage": usage}}),
        &mut out,
    )?;
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, b) in blocks.iter().enumerate() {
        let typ = b.get("type").and_then(Value::as_str).unwrap_or("");
        let mut start = b.clone();
        let delta = match typ {
            "text" => {
                start["text"] = json!("");
                Some(
                    json!({"type": "text_delta", "text": b.get("text").cloned().unwrap_or(json!(""))}),
                )
            }
            "thinking" => {
                start["thinking"] = json!("");
                Some(
                    json!({"type": "thinking_delta", "thinking": b.get("thinking").cloned().unwrap_or(json!(""))}),
                )
            }
            "tool_use" => {
                start["input"] = json!({});
                let input = b.get("input").cloned().unwrap_or(json!({}));
                Some(json!({"type": "input_json_delta", "partial_json": input.to_string()}))
            }
            _ => None,
        };
        feed(
            json!({"type": "content_block_start", "index": i, "content_block": start}),
            &mut out,
        )?;
        if let Some(d) = delta {
            feed(
                json!({"type": "content_block_delta", "index": i, "delta": d}),
                &mut out,
            )?;
        }
        feed(json!({"type": "content_block_stop", "index": i}), &mut out)?;
    }
    let stop = v.get("stop_reason").cloned().unwrap_or(json!("end_turn"));
    feed(
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage}),
        &mut out,
    )?;
    feed(json!({"type": "message_stop"}), &mut out)?;
    Ok(out)
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
