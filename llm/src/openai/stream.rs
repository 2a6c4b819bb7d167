//! Streamed OpenAI `chat.completion.chunk` payloads assembled into [`StreamEvent`]s
//! ([`ChunkAssembler`]), and a non-streamed `chat.completion` body read as the same events
//! ([`events_from_completion`]); wire-formats.md §1.4.

use std::borrow::Cow;

use super::*;

#[derive(Debug)]
struct ToolState {
    index: Option<u64>,
    /// The id as the provider sent it ("" when it sent none).
    wire_id: String,
    /// The id used in events: the wire id, with a `-2`, `-3`… suffix when another call of this
    /// step already had it.
    id: String,
    name: String,
    args: String,
    /// Argument bytes received, including those dropped past the cap.
    arg_bytes: usize,
    started: bool,
}

/// Assembles OpenAI `chat.completion.chunk` data payloads into [`StreamEvent`]s. Pure and
/// synchronous: feed each SSE `data` string to [`push`](Self::push) and call
/// [`finish`](Self::finish) at end of stream.
///
/// Rules (wire-formats.md §1.4): only choice index 0 is used; text and reasoning
/// (`reasoning_content` or `reasoning`) become start/delta/end blocks, reasoning closing when
/// text or a tool call begins; `refusal` text is shown as text; a tool-call fragment belongs to
/// the call with the same `index` (and the same `id`, when both carry one), else to the call
/// with its `id` (servers that send every call at index 0), else to the latest call; a
/// fragment whose id another call of the step already holds at another index is a new call
/// whose id gets a `-2`, `-3`… suffix (issue 24.7); a name is never overwritten with `""`;
/// arguments past the cap ([`crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES`]) are dropped and
/// the call is emitted with an error; usage is accepted on any chunk (last wins);
/// `finish_reason` closes all blocks and emits the `ToolCall`s; exactly one `FinishStep` is
/// emitted, at `[DONE]` or EOF.
#[derive(Debug)]
pub struct ChunkAssembler {
    /// Parse chunks into the typed [`chunk`] structs first (off only in tests, to compare
    /// with the `Value` path).
    pub(super) typed: bool,
    /// Chunks that went the typed way.
    pub(super) typed_chunks: u64,
    output_excludes_reasoning: bool,
    max_tool_argument_bytes: usize,
    block_seq: u64,
    text: Option<String>,
    reasoning: Option<String>,
    tools: Vec<ToolState>,
    tools_emitted: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    ended: bool,
}

impl ChunkAssembler {
    /// New assembler for `provider_id` (`xai` switches on "completion_tokens excludes reasoning").
    pub fn new(provider_id: &str) -> Self {
        Self {
            typed: true,
            typed_chunks: 0,
            output_excludes_reasoning: provider_id == "xai",
            max_tool_argument_bytes: crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
            block_seq: 0,
            text: None,
            reasoning: None,
            tools: Default::default(),
            tools_emitted: false,
            finish_reason: None,
            usage: None,
            ended: false,
        }
    }

    /// Set the cap on one tool call's argument text, bytes.
    pub fn with_max_tool_argument_bytes(mut self, max: usize) -> Self {
        self.max_tool_argument_bytes = max;
        self
    }

    /// Whether the step has ended (`FinishStep` emitted); later input is ignored.
    pub fn is_done(&self) -> bool {
        self.ended
    }

    /// Whether a `finish_reason` has been seen for choice 0.
    pub fn has_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Feed one SSE `data` payload (JSON chunk or `[DONE]`).
    ///
    /// A payload that is not JSON at all (it does not parse and does not start with `{` or `[`,
    /// e.g. the `data: : keepalive` some proxies send) is skipped with a
    /// [`StreamEvent::Warning`] (issue 13.2).
    ///
    /// Errors: a top-level `error` key → `StreamError`/`ContextOverflow`/`QuotaExceeded` with the
    /// provider's message; a payload that starts like JSON but does not parse (a chunk whose
    /// content is lost) or JSON that is not an object → `MalformedChunk` quoting the first 200
    /// bytes.
    pub fn push(&mut self, data: &str) -> Result<Vec<StreamEvent>, LlmError> {
        let mut out = Vec::new();
        if self.ended {
            return Ok(out);
        }
        let trimmed = data.trim();
        if trimmed.starts_with("[DONE]") {
            self.close_all(&mut out);
            self.emit_finish(&mut out);
            return Ok(out);
        }
        if trimmed.is_empty() {
            return Ok(out);
        }
        // The usual chunk, typed and borrowing its strings; anything it does not model
        // (an `error`, a field of another type, a repeated key) goes the `Value` way below.
        if self.typed
            && trimmed.starts_with('{')
            && let Ok(c) = serde_json::from_str::<chunk::Chunk<'_>>(trimmed)
            && c.error.is_none()
        {
            self.typed_chunks += 1;
            self.apply_typed(c, &mut out);
            return Ok(out);
        }
        let v: Value = match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(_) if !looks_like_json(trimmed) => {
                out.push(skipped_data(data));
                return Ok(out);
            }
            Err(e) => return Err(malformed(&format!("invalid JSON: {e}"), data)),
        };
        let Value::Object(obj) = &v else {
            return Err(malformed("not a JSON object", data));
        };
        if let Some(err) = obj.get("error").filter(|e| is_truthy(e)) {
            return Err(stream_error(err, data));
        }
        if let Some(u) = obj.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(normalize_usage(u, self.output_excludes_reasoning));
        }
        let Some(choices) = obj.get("choices").and_then(Value::as_array) else {
            return Ok(out);
        };
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(out);
        };
        if self.finish_reason.is_none() {
            if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
                let text = |key: &str| {
                    delta
                        .get(key)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                };
                let calls = delta.get("tool_calls").and_then(Value::as_array);
                self.apply_delta(
                    text("reasoning_content").or_else(|| text("reasoning")),
                    [text("content"), text("refusal")],
                    calls
                        .into_iter()
                        .flatten()
                        .filter(|c| c.is_object())
                        .map(ToolDelta::of_value),
                    &mut out,
                );
            }
            if let Some(fr) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(fr.to_string());
                self.close_all(&mut out);
            }
        }
        Ok(out)
    }

    /// End of the byte stream. Emits the final events when a finish reason was seen (a missing
    /// `[DONE]` is fine); otherwise fails with `Transport` "stream ended before the step
    /// finished" (retryable).
    pub fn finish(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        end_of_stream(self.ended, self.finish_reason.is_some(), |out| {
            self.close_all(out);
            self.emit_finish(out);
        })
    }

    fn next_block_id(&mut self, prefix: &str) -> String {
        let id = format!("{prefix}-{}", self.block_seq);
        self.block_seq += 1;
        id
    }

    fn close_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.reasoning.take() {
            out.push(StreamEvent::ReasoningEnd {
                id,
                signature: None,
            });
        }
    }

    fn close_text(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.text.take() {
            out.push(StreamEvent::TextEnd { id });
        }
    }

    /// A typed chunk (see [`ChunkAssembler::push`]): the same steps as the `Value` path.
    fn apply_typed(&mut self, c: chunk::Chunk<'_>, out: &mut Vec<StreamEvent>) {
        if let Some(u) = c.usage.as_ref().filter(|u| u.is_object()) {
            self.usage = Some(normalize_usage(u, self.output_excludes_reasoning));
        }
        let Some(choices) = c.choices else {
            return;
        };
        let Some(choice) = choices.into_iter().find(|c| c.0.index.unwrap_or(0) == 0) else {
            return;
        };
        let choice = choice.0;
        if self.finish_reason.is_none() {
            if let Some(chunk::Obj(delta)) = choice.delta {
                fn text<'s>(s: &'s Option<chunk::Str<'_>>) -> Option<&'s str> {
                    s.as_ref().map(|s| s.0.as_ref()).filter(|s| !s.is_empty())
                }
                let reasoning = text(&delta.reasoning_content).or_else(|| text(&delta.reasoning));
                self.apply_delta(
                    reasoning,
                    [text(&delta.content), text(&delta.refusal)],
                    delta.tool_calls.iter().flatten().map(|chunk::Obj(call)| {
                        let func = call.function.as_ref().map(|f| &f.0);
                        ToolDelta {
                            id: text(&call.id),
                            index: call.index,
                            name: func
                                .and_then(|f| f.name.as_ref())
                                .map_or("", |s| s.0.as_ref()),
                            args: func
                                .and_then(|f| f.arguments.as_ref())
                                .map_or(Cow::Borrowed(""), |s| Cow::Borrowed(s.0.as_ref())),
                        }
                    }),
                    out,
                );
            }
            if let Some(fr) = choice.finish_reason {
                self.finish_reason = Some(fr.0.into_owned());
                self.close_all(out);
            }
        }
    }

    /// A delta of choice 0: reasoning text, then text (`content`, `refusal`), then tool-call
    /// fragments, each already found non-empty / an object.
    fn apply_delta<'a>(
        &mut self,
        reasoning: Option<&str>,
        texts: [Option<&str>; 2],
        calls: impl Iterator<Item = ToolDelta<'a>>,
        out: &mut Vec<StreamEvent>,
    ) {
        if let Some(r) = reasoning {
            self.close_text(out);
            let id = match &self.reasoning {
                Some(id) => id.clone(),
                None => {
                    let id = self.next_block_id("reasoning");
                    out.push(StreamEvent::ReasoningStart { id: id.clone() });
                    self.reasoning = Some(id.clone());
                    id
                }
            };
            out.push(StreamEvent::ReasoningDelta {
                id,
                text: r.to_string(),
            });
        }
        for t in texts.into_iter().flatten() {
            self.close_reasoning(out);
            let id = match &self.text {
                Some(id) => id.clone(),
                None => {
                    let id = self.next_block_id("text");
                    out.push(StreamEvent::TextStart { id: id.clone() });
                    self.text = Some(id.clone());
                    id
                }
            };
            out.push(StreamEvent::TextDelta {
                id,
                text: t.to_string(),
            });
        }
        for call in calls {
            self.apply_tool_delta(call, out);
        }
    }

    fn apply_tool_delta(&mut self, call: ToolDelta<'_>, out: &mut Vec<StreamEvent>) {
        self.close_reasoning(out);
        self.close_text(out);
        let ToolDelta {
            id,
            index,
            name,
            args,
        } = call;
        let pos = match (id, index) {
            (Some(id), Some(ix)) => self
                .tools
                .iter()
                .rposition(|t| t.index == Some(ix) && (t.wire_id == id || t.wire_id.is_empty()))
                .or_else(|| {
                    // Same id, no index of its own yet: the same call.
                    self.tools
                        .iter()
                        .rposition(|t| t.wire_id == id && t.index.is_none())
                }),
            (Some(id), None) => self.tools.iter().rposition(|t| t.wire_id == id),
            (None, Some(ix)) => self.tools.iter().rposition(|t| t.index == Some(ix)),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let pos = match pos {
            Some(p) => p,
            None => {
                let wire_id = id.unwrap_or("").to_string();
                let base = if wire_id.is_empty() {
                    format!("call_{}", self.tools.len())
                } else {
                    wire_id.clone()
                };
                let mut unique = base.clone();
                let mut n = 2;
                while self.tools.iter().any(|t| t.id == unique) {
                    unique = format!("{base}-{n}");
                    n += 1;
                }
                self.tools.push(ToolState {
                    index,
                    wire_id,
                    id: unique,
                    name: String::new(),
                    args: String::new(),
                    arg_bytes: 0,
                    started: false,
                });
                self.tools.len() - 1
            }
        };
        let cap = self.max_tool_argument_bytes;
        let tool = &mut self.tools[pos];
        if tool.wire_id.is_empty()
            && let Some(id) = id
        {
            tool.wire_id = id.to_string();
        }
        if tool.index.is_none() {
            tool.index = index;
        }
        if tool.name.is_empty() && !name.is_empty() {
            tool.name = name.to_string();
        }
        if !tool.started && !tool.name.is_empty() {
            tool.started = true;
            out.push(StreamEvent::ToolInputStart {
                id: tool.id.clone(),
                name: tool.name.clone(),
            });
            if !tool.args.is_empty() {
                out.push(StreamEvent::ToolInputDelta {
                    id: tool.id.clone(),
                    delta: tool.args.clone(),
                });
            }
        }
        if !args.is_empty() {
            tool.arg_bytes = tool.arg_bytes.saturating_add(args.len());
            if tool.arg_bytes > cap {
                // Past the cap nothing more is kept or forwarded; the call ends as an error.
                return;
            }
            tool.args.push_str(&args);
            if tool.started {
                out.push(StreamEvent::ToolInputDelta {
                    id: tool.id.clone(),
                    delta: args.into_owned(),
                });
            }
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        self.close_reasoning(out);
        self.close_text(out);
        if self.tools_emitted {
            return;
        }
        self.tools_emitted = true;
        let length = self.finish_reason.as_deref().map(FinishReason::from_wire)
            == Some(FinishReason::Length);
        for t in &mut self.tools {
            if !t.started {
                t.started = true;
                out.push(StreamEvent::ToolInputStart {
                    id: t.id.clone(),
                    name: t.name.clone(),
                });
                if !t.args.is_empty() {
                    out.push(StreamEvent::ToolInputDelta {
                        id: t.id.clone(),
                        delta: t.args.clone(),
                    });
                }
            }
            let oversized = t.arg_bytes > self.max_tool_argument_bytes;
            let incomplete = !oversized
                && !t.args.trim().is_empty()
                && serde_json::from_str::<Value>(&t.args).is_err();
            out.push(StreamEvent::ToolCall {
                id: t.id.clone(),
                name: t.name.clone(),
                input: if oversized {
                    String::new()
                } else {
                    std::mem::take(&mut t.args)
                },
                truncated: length && incomplete,
                error: oversized.then(|| {
                    crate::types::oversized_arguments_error(
                        t.arg_bytes,
                        self.max_tool_argument_bytes,
                    )
                }),
            });
        }
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let raw = self.finish_reason.clone();
        let reason = raw
            .as_deref()
            .map(FinishReason::from_wire)
            .unwrap_or(FinishReason::Unknown);
        out.push(StreamEvent::FinishStep {
            reason,
            usage: self.usage.unwrap_or_default(),
            raw_reason: raw,
        });
    }
}

/// One tool-call fragment of a delta, from either parse.
struct ToolDelta<'a> {
    /// Non-empty `id`.
    id: Option<&'a str>,
    index: Option<u64>,
    /// `function.name`, `""` when absent.
    name: &'a str,
    /// `function.arguments`: a string as is, `null`/absent `""`, any other value its JSON.
    args: Cow<'a, str>,
}

impl<'a> ToolDelta<'a> {
    /// From a fragment that is a JSON object.
    fn of_value(call: &'a Value) -> Self {
        let func = call.get("function");
        ToolDelta {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty()),
            index: call.get("index").and_then(Value::as_u64),
            name: func
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or(""),
            args: match func.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => Cow::Borrowed(s.as_str()),
                Some(Value::Null) | None => Cow::Borrowed(""),
                Some(other) => Cow::Owned(other.to_string()),
            },
        }
    }
}

/// The streamed chunk as typed structs that borrow their strings from the payload (a
/// `serde_json::Value` costs an allocation per key and string). Strict on purpose: a field
/// of another type than modelled, a repeated key or an array where an object belongs fails
/// the parse, and the chunk goes the `Value` way, so both give the same events.
mod chunk {
    use std::borrow::Cow;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::Deserialize;
    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
    use serde_json::Value;

    /// A `chat.completion.chunk` (the fields read).
    #[derive(Deserialize)]
    pub(super) struct Chunk<'a> {
        /// Present and not `null`: the chunk goes the `Value` way.
        #[serde(default)]
        pub error: Option<IgnoredAny>,
        #[serde(default)]
        pub usage: Option<Value>,
        #[serde(default, borrow)]
        pub choices: Option<Vec<Obj<Choice<'a>>>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Choice<'a> {
        #[serde(default)]
        pub index: Option<u64>,
        #[serde(default, borrow)]
        pub delta: Option<Obj<Delta<'a>>>,
        #[serde(default, borrow)]
        pub finish_reason: Option<Str<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Delta<'a> {
        #[serde(default, borrow)]
        pub reasoning_content: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub reasoning: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub content: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub refusal: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub tool_calls: Option<Vec<Obj<ToolCall<'a>>>>,
    }

    #[derive(Deserialize)]
    pub(super) struct ToolCall<'a> {
        #[serde(default, borrow)]
        pub id: Option<Str<'a>>,
        #[serde(default)]
        pub index: Option<u64>,
        #[serde(default, borrow)]
        pub function: Option<Obj<Function<'a>>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Function<'a> {
        #[serde(default, borrow)]
        pub name: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub arguments: Option<Str<'a>>,
    }

    /// A JSON string, borrowed from the payload unless it has escapes.
    pub(super) struct Str<'a>(pub Cow<'a, str>);

    impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = Str<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'a>, E> {
                    Ok(Str(Cow::Borrowed(v)))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'a>, E> {
                    Ok(Str(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'a>, E> {
                    Ok(Str(Cow::Owned(v)))
                }
            }
            d.deserialize_str(V(PhantomData))
        }
    }

    /// `T` from a JSON object only (a derived struct would also take an array, by position).
    pub(super) struct Obj<T>(pub T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T>(PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
                type Value = Obj<T>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                    T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Obj)
                }
            }
            d.deserialize_map(V(PhantomData))
        }
    }
}

fn is_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Number(_) => true,
    }
}

/// Parse a non-streamed `chat.completion` body (a server that ignored `stream: true` and
/// answered `application/json`) into the same events a stream would give.
pub fn events_from_completion(body: &str, provider_id: &str) -> Result<Vec<StreamEvent>, LlmError> {
    let v: Value = serde_json::from_str(body.trim())
        .map_err(|e| malformed(&format!("invalid JSON completion body: {e}"), body))?;
    let Value::Object(obj) = &v else {
        return Err(malformed("completion body is not a JSON object", body));
    };
    if let Some(err) = obj.get("error").filter(|e| is_truthy(e)) {
        return Err(stream_error(err, body));
    }
    let mut choices_out = Vec::new();
    if let Some(choices) = obj.get("choices").and_then(Value::as_array) {
        for c in choices {
            let mut delta = c.get("message").cloned().unwrap_or_else(|| json!({}));
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (i, call) in calls.iter_mut().enumerate() {
                    if let Some(o) = call.as_object_mut() {
                        o.entry("index").or_insert(json!(i));
                    }
                }
            }
            let fr = c
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string();
            choices_out.push(json!({
                "index": c.get("index").cloned().unwrap_or(json!(0)),
                "delta": delta,
                "finish_reason": fr,
            }));
        }
    }
    if choices_out.is_empty() {
        return Err(malformed("completion body has no choices", body));
    }
    let chunk =
        json!({"choices": choices_out, "usage": obj.get("usage").cloned().unwrap_or(Value::Null)});
    let mut asm = ChunkAssembler::new(provider_id);
    let mut events = asm.push(&chunk.to_string())?;
    events.extend(asm.finish()?);
    Ok(events)
}
