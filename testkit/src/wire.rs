//! Request analysis and response rendering for the two wire dialects.
//!
//! Shapes follow `/work/shared/reference/wire-formats.md` §1 (OpenAI Chat Completions) and §2
//! (Anthropic Messages), checked against the recorded fixtures in `shared/fixtures/wire/`.
//! This module is pure (no I/O) so the frame sequences are unit-tested directly.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::script::{Fault, Step};

/// The provider dialect a request arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

/// What the router needs to know about a completion request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestInfo {
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub step_index: usize,
    pub first_user_text: String,
    pub system_text: String,
}

/// Text of a message `content`: a string, or the `text` of each part of an array, joined by `\n`.
pub(crate) fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Extracts routing facts from a parsed request body; `Err` carries a client-facing message.
pub(crate) fn analyze(body: &Value, dialect: Dialect) -> Result<RequestInfo, String> {
    let obj = body
        .as_object()
        .ok_or("request body must be a JSON object")?;
    let messages = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` must be an array")?;
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
    // A trailing assistant message is a response prefill (the start of the answer being
    // asked for), not a finished step.
    let prefill = messages
        .last()
        .is_some_and(|m| role(m).as_deref() == Some("assistant"));
    let step_index = messages
        .iter()
        .filter(|m| role(m).as_deref() == Some("assistant"))
        .count()
        - usize::from(prefill);
    let first_user_text = messages
        .iter()
        .find(|m| role(m).as_deref() == Some("user"))
        .and_then(|m| m.get("content"))
        .map(content_text)
        .unwrap_or_default();
    let system_text = match dialect {
        Dialect::OpenAi => messages
            .iter()
            .filter(|m| matches!(role(m).as_deref(), Some("system" | "developer")))
            .filter_map(|m| m.get("content"))
            .map(content_text)
            .collect::<Vec<_>>()
            .join("\n"),
        Dialect::Anthropic => obj.get("system").map(content_text).unwrap_or_default(),
    };
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = obj
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(RequestInfo {
        model,
        stream,
        include_usage,
        step_index,
        first_user_text,
        system_text,
    })
}

/// Token counts after defaults (see [`crate::UsageSpec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
    pub reasoning: u64,
}

/// A step resolved for one request: ids, argument strings, finish reason and usage fixed.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub reasoning: Option<String>,
    pub signature: String,
    pub text: Option<String>,
    /// (id, name, argument string)
    pub tool_calls: Vec<(String, String, String)>,
    pub finish_reason: String,
    pub usage: Usage,
    pub chunk_size: usize,
}

fn quarter_at_least_one(n: usize) -> u64 {
    ((n / 4) as u64).max(1)
}

impl Plan {
    /// Resolves `step` for conversation `conv`, step `step_idx`; `body_len` is the request body
    /// size in bytes; `seq` makes the response id unique.
    pub fn new(
        step: &Step,
        conv: usize,
        step_idx: usize,
        seq: u64,
        created: u64,
        model: &str,
        body_len: usize,
    ) -> Plan {
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        let reasoning = non_empty(&step.reasoning);
        let text = non_empty(&step.text);
        let tool_calls: Vec<(String, String, String)> = step
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, tc)| {
                let id = tc
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{conv}_{step_idx}_{i}"));
                (id, tc.name.clone(), tc.arguments_string())
            })
            .collect();
        let reasoning_chars = reasoning.as_deref().map_or(0, |r| r.chars().count());
        let out_chars = reasoning_chars
            + text.as_deref().map_or(0, |t| t.chars().count())
            + tool_calls
                .iter()
                .map(|(_, n, a)| n.chars().count() + a.chars().count())
                .sum::<usize>();
        let spec = step.usage.unwrap_or_default();
        let usage = Usage {
            prompt: spec
                .prompt_tokens
                .unwrap_or_else(|| quarter_at_least_one(body_len)),
            completion: spec
                .completion_tokens
                .unwrap_or_else(|| quarter_at_least_one(out_chars)),
            cached: spec.cached_tokens.unwrap_or(0),
            reasoning: spec.reasoning_tokens.unwrap_or(if reasoning_chars > 0 {
                quarter_at_least_one(reasoning_chars)
            } else {
                0
            }),
        };
        Plan {
            id: format!("{seq}"),
            created,
            model: model.to_owned(),
            reasoning,
            signature: step
                .signature
                .clone()
                .unwrap_or_else(|| format!("mock-signature-{conv}-{step_idx}")),
            text,
            tool_calls,
            finish_reason: step.effective_finish_reason(),
            usage,
            chunk_size: step.effective_chunk_size(),
        }
    }
}

/// Splits `s` into pieces of at most `n` chars, on char boundaries. Empty input gives no piece.
pub(crate) fn split_chars(s: &str, n: usize) -> Vec<&str> {
    let n = n.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (i, _) in s.char_indices() {
        if count == n {
            out.push(&s[start..i]);
            start = i;
            count = 0;
        }
        count += 1;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// How a streamed body ends after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// End the body normally.
    Done,
    /// Abort the connection (the chunked body is never terminated).
    Abort,
    /// Keep the connection open, silent, up to the hang limit.
    Hang,
}

/// Applies a stream fault to the normal frame sequence.
pub(crate) fn apply_fault(
    mut frames: Vec<Bytes>,
    fault: Option<&Fault>,
    dialect: Dialect,
) -> (Vec<Bytes>, Ending) {
    match fault {
        None | Some(Fault::Http { .. }) | Some(Fault::Stall(_)) => (frames, Ending::Done),
        Some(Fault::CutAfter(n)) => {
            frames.truncate(*n);
            (frames, Ending::Abort)
        }
        Some(Fault::MalformedAfter(n)) => {
            frames.truncate(*n);
            frames.push(Bytes::from_static(match dialect {
                Dialect::OpenAi => b"data: {not json\n\n",
                Dialect::Anthropic => b"event: content_block_delta\ndata: {not json\n\n",
            }));
            (frames, Ending::Done)
        }
        Some(Fault::ErrorEventAfter { after, error }) => {
            frames.truncate(*after);
            frames.push(match dialect {
                Dialect::OpenAi => sse_data(&json!({ "error": error })),
                Dialect::Anthropic => sse_event("error", &anthropic_error_event(error)),
            });
            (frames, Ending::Done)
        }
        Some(Fault::HangAfter(n)) => {
            frames.truncate(*n);
            (frames, Ending::Hang)
        }
    }
}

/// Reframe `frames` (built with `\n` line ends) per the step's framing options: the line
/// ending, a keep-alive data line between events, and a leading BOM.
pub(crate) fn reframe(frames: Vec<Bytes>, step: &crate::script::Step) -> Vec<Bytes> {
    use crate::script::LineEnding;
    let ending: &[u8] = match step.line_ending.unwrap_or_default() {
        LineEnding::Lf => b"\n",
        LineEnding::Crlf => b"\r\n",
        LineEnding::Cr => b"\r",
    };
    let mut out = Vec::with_capacity(frames.len() * 2);
    for (i, f) in frames.into_iter().enumerate() {
        if step.data_keepalive && i > 0 {
            out.push(Bytes::from_static(b"data: : keepalive\n\n"));
        }
        out.push(f);
    }
    let mut out: Vec<Bytes> = if ending == b"\n" {
        out
    } else {
        out.into_iter()
            .map(|f| {
                let mut v = Vec::with_capacity(f.len() + 8);
                for b in f.iter() {
                    if *b == b'\n' {
                        v.extend_from_slice(ending);
                    } else {
                        v.push(*b);
                    }
                }
                Bytes::from(v)
            })
            .collect()
    };
    if step.bom {
        let first = out.first().cloned().unwrap_or_default();
        let mut v = b"\xEF\xBB\xBF".to_vec();
        v.extend_from_slice(&first);
        if out.is_empty() {
            out.push(Bytes::from(v));
        } else {
            out[0] = Bytes::from(v);
        }
    }
    out
}

/// `data: <v>\n\n`, with `v` in compact JSON (what `Value`'s `Display` writes, without going
/// through `fmt`).
fn sse_data(v: &Value) -> Bytes {
    let mut out = b"data: ".to_vec();
    write_json(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn sse_event(name: &str, v: &Value) -> Bytes {
    let mut out = Vec::with_capacity(16 + name.len());
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    write_json(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Appends `v` as compact JSON. Writing a `Value` or a `&str` into a `Vec` cannot fail.
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(&mut *out, v).expect("JSON into a Vec");
}

// ---------------------------------------------------------------- OpenAI

/// What every chunk of one response repeats around its delta: the SSE `data: ` and the chunk's
/// keys up to `"delta":` (id, object, created, model, system_fingerprint, the choice's index),
/// written once per response instead of once per chunk.
struct ChunkEnvelope {
    head: Vec<u8>,
}

impl ChunkEnvelope {
    fn new(plan: &Plan) -> Self {
        let mut head = b"data: {\"id\":".to_vec();
        write_json(&mut head, &format!("chatcmpl-mock-{}", plan.id));
        head.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        write_json(&mut head, &plan.created);
        head.extend_from_slice(b",\"model\":");
        write_json(&mut head, &plan.model);
        head.extend_from_slice(
            b",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":",
        );
        ChunkEnvelope { head }
    }

    /// One `chat.completion.chunk` frame: the same bytes as `sse_data` of the chunk object
    /// `{id, object, created, model, system_fingerprint, choices: [{index: 0, delta, logprobs:
    /// null, finish_reason}]}`.
    fn chunk(&self, delta: &Value, finish: Option<&str>) -> Bytes {
        let mut out = Vec::with_capacity(self.head.len() + 96);
        out.extend_from_slice(&self.head);
        write_json(&mut out, delta);
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        write_json(&mut out, &finish);
        out.extend_from_slice(b"}]}\n\n");
        Bytes::from(out)
    }
}

fn openai_usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt,
        "completion_tokens": u.completion,
        "total_tokens": u.prompt.saturating_add(u.completion),
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}

/// The normal OpenAI SSE frame sequence for `plan` (§1.2): role chunk (merged with the first
/// tool-call opening when there is no text/reasoning, as recorded), reasoning_content deltas,
/// content deltas, per tool call an opening fragment then argument fragments, the empty-delta
/// finish chunk, the usage chunk (if requested) and `[DONE]`.
pub(crate) fn openai_frames(plan: &Plan, include_usage: bool) -> Vec<Bytes> {
    let n = plan.chunk_size;
    let env = ChunkEnvelope::new(plan);
    let mut frames = Vec::new();
    let merge_role_with_tool = plan.reasoning.is_none() && plan.text.is_none();
    if !merge_role_with_tool || plan.tool_calls.is_empty() {
        frames.push(env.chunk(&json!({"role": "assistant", "content": ""}), None));
    }
    if let Some(r) = &plan.reasoning {
        for piece in split_chars(r, n) {
            frames.push(env.chunk(&json!({"reasoning_content": piece}), None));
        }
    }
    if let Some(t) = &plan.text {
        for piece in split_chars(t, n) {
            frames.push(env.chunk(&json!({"content": piece}), None));
        }
    }
    for (i, (id, name, args)) in plan.tool_calls.iter().enumerate() {
        let opening = json!({
            "index": i, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""},
        });
        let delta = if i == 0 && merge_role_with_tool {
            json!({"role": "assistant", "content": null, "tool_calls": [opening]})
        } else {
            json!({"tool_calls": [opening]})
        };
        frames.push(env.chunk(&delta, None));
        for piece in split_chars(args, n) {
            frames.push(env.chunk(
                &json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    frames.push(env.chunk(&json!({}), Some(&plan.finish_reason)));
    if include_usage {
        frames.push(sse_data(&json!({
            "id": format!("chatcmpl-mock-{}", plan.id),
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "system_fingerprint": "fp_mock",
            "choices": [],
            "usage": openai_usage(&plan.usage),
        })));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// A non-streaming `chat.completion` object for `plan`.
pub(crate) fn openai_completion(plan: &Plan) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        plan.text.clone().map_or(Value::Null, Value::String),
    );
    if let Some(r) = &plan.reasoning {
        message.insert("reasoning_content".into(), json!(r));
    }
    if !plan.tool_calls.is_empty() {
        let calls: Vec<Value> = plan
            .tool_calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    message.insert("refusal".into(), Value::Null);
    json!({
        "id": format!("chatcmpl-mock-{}", plan.id),
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": plan.finish_reason}],
        "usage": openai_usage(&plan.usage),
    })
}

/// OpenAI error `type` and `code` for an HTTP status (§1.5 table).
fn openai_error_kind(status: u16) -> (&'static str, Option<&'static str>) {
    match status {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        404 => ("invalid_request_error", Some("model_not_found")),
        429 => ("requests", Some("rate_limit_exceeded")),
        503 => ("service_unavailable_error", Some("server_is_overloaded")),
        s if s >= 500 => ("server_error", None),
        _ => ("invalid_request_error", None),
    }
}

/// Anthropic error `type` for an HTTP status (§2.3 table).
fn anthropic_error_kind(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The dialect's standard HTTP error body.
pub(crate) fn error_body(dialect: Dialect, status: u16, message: &str, seq: u64) -> Value {
    match dialect {
        Dialect::OpenAi => {
            let (ty, code) = openai_error_kind(status);
            json!({"error": {"message": message, "type": ty, "param": null, "code": code}})
        }
        Dialect::Anthropic => json!({
            "type": "error",
            "error": {"type": anthropic_error_kind(status), "message": message},
            "request_id": format!("req_mock_{seq}"),
        }),
    }
}

// ---------------------------------------------------------------- Anthropic

/// Maps an OpenAI finish reason to an Anthropic stop_reason.
pub(crate) fn anthropic_stop_reason(finish: &str) -> &str {
    match finish {
        "tool_calls" => "tool_use",
        "stop" => "end_turn",
        "length" => "max_tokens",
        "content_filter" => "refusal",
        other => other,
    }
}

fn anthropic_error_event(error: &Value) -> Value {
    let ty = match error.get("type").and_then(Value::as_str) {
        None | Some("server_error") => "api_error",
        Some(t) => t,
    };
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("mock error event");
    json!({"type": "error", "error": {"type": ty, "message": message}})
}

fn anthropic_usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt.saturating_sub(u.cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached,
        "output_tokens": u.completion,
    })
}

/// Tool input object for non-streaming answers: the argument string parsed as JSON, or
/// `{"_raw": <string>}` if it is not valid JSON (a non-streaming answer cannot carry invalid
/// JSON input).
fn tool_input(args: &str) -> Value {
    match serde_json::from_str::<Value>(args) {
        Ok(v) => v,
        Err(_) => json!({"_raw": args}),
    }
}

/// The normal Anthropic SSE event sequence for `plan` (§2.1): `message_start`; per block
/// (thinking, text, tool_use…) `content_block_start`, deltas, `content_block_stop` with a
/// `ping` after the first block start; `message_delta` with the stop reason and cumulative
/// usage; `message_stop`.
pub(crate) fn anthropic_frames(plan: &Plan) -> Vec<Bytes> {
    let n = plan.chunk_size;
    let mut frames = Vec::new();
    let mut start_usage = anthropic_usage(&plan.usage);
    start_usage["output_tokens"] = json!(1);
    frames.push(sse_event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_mock_{}", plan.id), "type": "message", "role": "assistant",
            "model": plan.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": start_usage,
        }}),
    ));
    let mut index = 0usize;
    let mut pinged = false;
    let mut open = |frames: &mut Vec<Bytes>, index: usize, block: Value| {
        frames.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        if !pinged {
            frames.push(sse_event("ping", &json!({"type": "ping"})));
            pinged = true;
        }
    };
    let delta = |index: usize, d: Value| {
        sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": d}),
        )
    };
    let stop = |index: usize| {
        sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )
    };
    if let Some(r) = &plan.reasoning {
        open(
            &mut frames,
            index,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        );
        for piece in split_chars(r, n) {
            frames.push(delta(
                index,
                json!({"type": "thinking_delta", "thinking": piece}),
            ));
        }
        frames.push(delta(
            index,
            json!({"type": "signature_delta", "signature": plan.signature}),
        ));
        frames.push(stop(index));
        index += 1;
    }
    if let Some(t) = &plan.text {
        open(&mut frames, index, json!({"type": "text", "text": ""}));
        for piece in split_chars(t, n) {
            frames.push(delta(index, json!({"type": "text_delta", "text": piece})));
        }
        frames.push(stop(index));
        index += 1;
    }
    for (id, name, args) in &plan.tool_calls {
        open(
            &mut frames,
            index,
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
        );
        frames.push(delta(
            index,
            json!({"type": "input_json_delta", "partial_json": ""}),
        ));
        for piece in split_chars(args, n) {
            frames.push(delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
            ));
        }
        frames.push(stop(index));
        index += 1;
    }
    if !pinged {
        frames.push(sse_event("ping", &json!({"type": "ping"})));
    }
    frames.push(sse_event(
        "message_delta",
        &json!({"type": "message_delta",
            "delta": {"stop_reason": anthropic_stop_reason(&plan.finish_reason), "stop_sequence": null},
            "usage": anthropic_usage(&plan.usage)}),
    ));
    frames.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    frames
}

/// A non-streaming Anthropic `message` object for `plan`.
pub(crate) fn anthropic_message(plan: &Plan) -> Value {
    let mut content = Vec::new();
    if let Some(r) = &plan.reasoning {
        content.push(json!({"type": "thinking", "thinking": r, "signature": plan.signature}));
    }
    if let Some(t) = &plan.text {
        content.push(json!({"type": "text", "text": t}));
    }
    for (id, name, args) in &plan.tool_calls {
        content
            .push(json!({"type": "tool_use", "id": id, "name": name, "input": tool_input(args)}));
    }
    json!({
        "id": format!("msg_mock_{}", plan.id), "type": "message", "role": "assistant",
        "model": plan.model, "content": content,
        "stop_reason": anthropic_stop_reason(&plan.finish_reason), "stop_sequence": null,
        "usage": anthropic_usage(&plan.usage),
    })
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
