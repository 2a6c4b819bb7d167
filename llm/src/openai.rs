//! OpenAI Chat Completions: request body building, provider errors and usage here, streamed
//! chunk assembly in `openai/stream.rs` (wire-formats.md §1 and §3; OpenAI-compatible servers:
//! llama.cpp, vLLM, Ollama, OpenRouter, DeepSeek, Groq, Mistral, xAI).

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};
use troupe_config::model::ResolvedModel;

use crate::error::{ErrorKind, LlmError};
use crate::types::{
    ChatMessage, ChatRequest, FinishReason, ImageInput, StreamEvent, ToolCallRequest, Usage,
};

mod stream;

pub use stream::{ChunkAssembler, events_from_completion};

/// Model/request option keys that steer this crate and are never sent in the request body:
/// `chunkTimeout` (body idle deadline, ms), `sendReasoning` (send `reasoning_content` back),
/// `timeout` (response-header deadline, ms or `false`; OpenCode's provider option),
/// `connectTimeout` and `errorBodyTimeout` (ms; see [`crate::provider::Deadlines`]),
/// `maxToolArgumentBytes` (see [`crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES`]).
pub const CONTROL_OPTION_KEYS: &[&str] = &[
    "chunkTimeout",
    "sendReasoning",
    "timeout",
    "connectTimeout",
    "errorBodyTimeout",
    "maxToolArgumentBytes",
];

/// Whether assistant messages must carry their reasoning back as `reasoning_content`:
/// provider `deepseek` (its thinking mode rejects tool-call turns without it, wire-formats.md
/// §3.5) or model option `"sendReasoning": true`.
pub fn sends_reasoning(model: &ResolvedModel) -> bool {
    model.provider_id == "deepseek"
        || model
            .options
            .get("sendReasoning")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

/// Build the JSON body of `POST {base_url}/chat/completions` for `req`.
///
/// Shape: `model` (`req.model`, or `model.model_id` when empty), `messages`, `tools` (only when
/// non-empty), `stream: true`, `stream_options: {include_usage: true}`, `temperature` / `top_p`
/// when set, `max_completion_tokens` (provider `openai`) or `max_tokens` (everyone else) when
/// set, then `req.extra` merged last (overrides computed keys; [`CONTROL_OPTION_KEYS`] are
/// dropped).
pub fn build_request_body(model: &ResolvedModel, req: &ChatRequest) -> Value {
    let send_reasoning = sends_reasoning(model);
    let mut body = Map::new();
    let model_id = if req.model.is_empty() {
        model.model_id.clone()
    } else {
        req.model.clone()
    };
    body.insert("model".into(), Value::String(model_id));
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| message_json(m, send_reasoning))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        body.insert("tools".into(), tools_json(&req.tools));
    }
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(n) = req.max_tokens {
        let key = if model.provider_id == "openai" {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(key.into(), json!(n));
    }
    for (k, v) in &req.extra {
        if CONTROL_OPTION_KEYS.contains(&k.as_str()) {
            continue;
        }
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// The `tools` value of a body: `[{type: "function", function: {name, description,
/// parameters}}]`.
pub(crate) fn tools_json(tools: &[crate::types::ToolSpec]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect(),
    )
}

/// [`WireMessage`] as a `Value` (whole-body builds).
pub(crate) fn message_json(m: &ChatMessage, send_reasoning: bool) -> Value {
    // Our own wire types always serialize (no non-string keys, no failing impls).
    serde_json::to_value(WireMessage { m, send_reasoning }).unwrap_or(Value::Null)
}

/// One message in its Chat Completions wire form: `{role, content}` (system, plain user),
/// `{role: "user", content: [text part, image_url / file parts…]}`, `{role: "assistant",
/// content (null when only tool calls), reasoning_content (when sent back), tool_calls:
/// [{id, type: "function", function: {name, arguments}}]}`, `{role: "tool", tool_call_id,
/// content}`. The one definition of the form: [`crate::body::BodyCache`] serializes it
/// straight into a body (no `Value` per message), [`message_json`] makes it a `Value` for
/// whole-body builds, so both give the same bytes.
pub(crate) struct WireMessage<'a> {
    /// The message.
    pub m: &'a ChatMessage,
    /// Assistant messages carry `reasoning_content` ([`sends_reasoning`]).
    pub send_reasoning: bool,
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self.m {
            ChatMessage::System { content } => {
                map.serialize_entry("role", "system")?;
                map.serialize_entry("content", content)?;
            }
            ChatMessage::User { content, images } => {
                map.serialize_entry("role", "user")?;
                if images.is_empty() {
                    map.serialize_entry("content", content)?;
                } else {
                    map.serialize_entry("content", &user_parts(content, images))?;
                }
            }
            ChatMessage::Assistant {
                content,
                reasoning,
                tool_calls,
                ..
            } => {
                map.serialize_entry("role", "assistant")?;
                match content {
                    Some(c) => map.serialize_entry("content", c)?,
                    None if !tool_calls.is_empty() => map.serialize_entry("content", &())?,
                    None => map.serialize_entry("content", "")?,
                }
                if self.send_reasoning
                    && let Some(r) = reasoning
                {
                    map.serialize_entry("reasoning_content", r)?;
                }
                if !tool_calls.is_empty() {
                    map.serialize_entry("tool_calls", &WireCalls(tool_calls))?;
                }
            }
            ChatMessage::Tool {
                call_id, content, ..
            } => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", call_id)?;
                map.serialize_entry("content", content)?;
            }
        }
        map.end()
    }
}

/// Chat Completions content parts of a user message with images: the text, then one
/// `image_url` part per image and one `file` part (`file_data` as a data URL) per PDF.
fn user_parts(content: &str, images: &[ImageInput]) -> Value {
    let mut parts = vec![json!({"type": "text", "text": content})];
    parts.extend(images.iter().map(|i| {
        if i.mime == "application/pdf" {
            json!({"type": "file", "file": {"filename": "document.pdf", "file_data": i.data_url()}})
        } else {
            json!({"type": "image_url", "image_url": {"url": i.data_url()}})
        }
    }));
    Value::Array(parts)
}

/// An assistant message's `tool_calls`.
struct WireCalls<'a>(&'a [ToolCallRequest]);

impl Serialize for WireCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| WireCall {
            id: &c.id,
            kind: "function",
            function: WireFunction {
                name: &c.name,
                arguments: Arguments(&c.input),
            },
        }))
    }
}

/// `{id, type: "function", function: {name, arguments}}`.
#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

/// `{name, arguments}`.
#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: Arguments<'a>,
}

/// A call's `arguments`, a JSON string: the input's own text when it is a string (a model's
/// unparsed arguments), `{}` for none, else the input's compact JSON.
struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(text) => s.serialize_str(text),
            Value::Null => s.serialize_str("{}"),
            other => s.collect_str(other),
        }
    }
}

/// Regexes (case-insensitive) whose match in a provider error message means context overflow
/// (OpenCode `provider/error.ts`, opencode-engine.md §3.4).
pub const OVERFLOW_PATTERNS: &[&str] = &[
    r"prompt is too long",
    r"input is too long for requested model",
    r"exceeds the context window",
    r"input token count.*exceeds the maximum",
    r"maximum prompt length is \d+",
    r"reduce the length of the messages",
    r"maximum context length is \d+ tokens",
    r"exceeds the limit of \d+",
    r"exceeds the available context size",
    r"greater than the context length",
    r"context window exceeds limit",
    r"exceeded model token limit",
    r"context[_ ]length[_ ]exceeded",
    r"request entity too large",
    r"context length is only \d+ tokens",
    r"input length.*exceeds.*context length",
    r"prompt too long; exceeded (?:max )?context length",
    r"too large for model with \d+ maximum context length",
    r"model_context_window_exceeded",
    r"^4(00|13)\s*(status code)?\s*\(no body\)",
];

/// True when `message` matches one of [`OVERFLOW_PATTERNS`].
pub fn is_overflow_message(message: &str) -> bool {
    static SET: std::sync::OnceLock<Option<regex::RegexSet>> = std::sync::OnceLock::new();
    let set = SET.get_or_init(|| {
        regex::RegexSetBuilder::new(OVERFLOW_PATTERNS)
            .case_insensitive(true)
            .build()
            .ok()
    });
    set.as_ref().is_some_and(|s| s.is_match(message))
}

/// The end of a step's byte stream, for the decoders of both protocols: nothing when the
/// step already ended; a `Transport` error "stream ended before the step finished"
/// (retryable) when no finish reason was seen; else what `close` emits (the open blocks
/// closed and the step's finish, as a lost end marker would have).
pub(crate) fn end_of_stream(
    ended: bool,
    finish_seen: bool,
    close: impl FnOnce(&mut Vec<StreamEvent>),
) -> Result<Vec<StreamEvent>, LlmError> {
    let mut out = Vec::new();
    if ended {
        return Ok(out);
    }
    if !finish_seen {
        return Err(LlmError::new(
            ErrorKind::Transport,
            "stream ended before the step finished",
        ));
    }
    close(&mut out);
    Ok(out)
}

/// First `max` bytes of `s`, cut at a char boundary, with `…` when cut.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Turn a data payload's top-level `error` value into an [`LlmError`]: `ContextOverflow` when the
/// code is `context_length_exceeded` or the message matches [`OVERFLOW_PATTERNS`],
/// `QuotaExceeded` for `insufficient_quota` (never retried, opencode-engine.md §3.4), else
/// `StreamError`.
pub(crate) fn stream_error(err: &Value, raw: &str) -> LlmError {
    let (message, code, typ) = match err {
        Value::String(s) => (s.clone(), String::new(), String::new()),
        Value::Object(o) => {
            let msg = o
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            let code = o.get("code").map(value_to_code).unwrap_or_default();
            let typ = o
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            (msg, code, typ)
        }
        other => (other.to_string(), String::new(), String::new()),
    };
    let kind = if code == "context_length_exceeded" || is_overflow_message(&message) {
        ErrorKind::ContextOverflow
    } else if code == "insufficient_quota" || typ == "insufficient_quota" {
        ErrorKind::QuotaExceeded
    } else {
        ErrorKind::StreamError
    };
    let mut e = LlmError::new(kind, message);
    e.body = Some(excerpt(raw, 4096));
    e
}

pub(crate) fn value_to_code(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether a data payload that failed to parse was meant as JSON (starts with `{` or `[`: a
/// chunk whose content is lost, an error); anything else is not a protocol chunk at all (a
/// keep-alive written as data) and is skipped.
pub(crate) fn looks_like_json(trimmed: &str) -> bool {
    trimmed.starts_with('{') || trimmed.starts_with('[')
}

/// The warning for a skipped non-JSON data payload.
pub(crate) fn skipped_data(data: &str) -> StreamEvent {
    StreamEvent::Warning {
        message: format!(
            "skipped a stream data line that is not JSON: {}",
            excerpt(data.trim(), 80)
        ),
    }
}

fn malformed(problem: &str, data: &str) -> LlmError {
    LlmError::new(
        ErrorKind::MalformedChunk,
        format!("malformed stream chunk ({problem}): {}", excerpt(data, 200)),
    )
}

fn as_count(v: Option<&Value>) -> u64 {
    v.map(crate::types::token_count).unwrap_or(0)
}

/// Normalize an OpenAI `usage` object into the inclusive [`Usage`]:
/// `input = prompt_tokens` (includes cached), `cache_read = prompt_tokens_details.cached_tokens`
/// (DeepSeek `prompt_cache_hit_tokens` as fallback), `cache_write =
/// prompt_tokens_details.cache_write_tokens`, `reasoning =
/// completion_tokens_details.reasoning_tokens`, `output = completion_tokens`, plus reasoning
/// when `output_excludes_reasoning` (xAI, wire-formats.md §3.7). Inconsistent counts are
/// clamped so that `input >= cache_read + cache_write` and `output >= reasoning`.
pub fn normalize_usage(u: &Value, output_excludes_reasoning: bool) -> Usage {
    let prompt = as_count(u.get("prompt_tokens"));
    let completion = as_count(u.get("completion_tokens"));
    let pd = u.get("prompt_tokens_details");
    let mut cache_read = as_count(pd.and_then(|d| d.get("cached_tokens")));
    if cache_read == 0 {
        cache_read = as_count(u.get("prompt_cache_hit_tokens"));
    }
    let cache_write = as_count(pd.and_then(|d| d.get("cache_write_tokens")));
    let reasoning = as_count(
        u.get("completion_tokens_details")
            .and_then(|d| d.get("reasoning_tokens")),
    );
    let mut output = completion;
    if output_excludes_reasoning {
        output = output.saturating_add(reasoning);
    }
    Usage {
        input: prompt.max(cache_read.saturating_add(cache_write)),
        output: output.max(reasoning),
        reasoning,
        cache_read,
        cache_write,
    }
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
