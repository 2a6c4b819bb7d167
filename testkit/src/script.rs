//! The script model: which conversation answers a request, and what each step streams.
//!
//! A [`Script`] is plain JSON (see the crate README for the full format). Everything here is
//! `serde`-(de)serializable and validated by [`Script::from_json`] / [`Script::load`], so a typo
//! in a test script fails loudly at load time instead of silently streaming the wrong thing.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use axum::http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Text streamed by the synthesized step used when a conversation runs out of steps and its
/// `exhausted` policy is [`Exhausted::Text`].
pub const EXHAUSTED_TEXT: &str = "(script exhausted)";

/// Default number of characters (Unicode scalar values) per streamed text, reasoning or
/// tool-argument delta.
pub const DEFAULT_CHUNK_SIZE: usize = 16;

/// Error raised while loading or validating a script.
#[derive(Debug)]
pub enum ScriptError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The JSON did not parse or did not match the script shape.
    Json(serde_json::Error),
    /// The JSON parsed but a value is out of range; the string names the offending path,
    /// e.g. `conversations[0].steps[2].chunk_size: must be >= 1`.
    Invalid(String),
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptError::Io(e) => write!(f, "cannot read script: {e}"),
            ScriptError::Json(e) => write!(f, "invalid script JSON: {e}"),
            ScriptError::Invalid(m) => write!(f, "invalid script: {m}"),
        }
    }
}

impl std::error::Error for ScriptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScriptError::Io(e) => Some(e),
            ScriptError::Json(e) => Some(e),
            ScriptError::Invalid(_) => None,
        }
    }
}

/// A whole mock-provider script: `{"conversations": [Conversation, ...]}`.
///
/// Request routing (stateless, so parallel sessions are deterministic):
/// 1. the conversation is the first one that has at least one matcher (`match` /
///    `match_system`) and all of its matchers match; else the first one without matchers;
///    else the server answers 404;
/// 2. the step index is the number of `role: "assistant"` messages in the request, not
///    counting a trailing one (a response prefill, e.g. `firstStep.prefill`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Conversations, tried in order (see the type docs for the matching rule).
    pub conversations: Vec<Conversation>,
}

/// What to answer once a conversation's step index is past its last step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exhausted {
    /// Stream a plain text step [`EXHAUSTED_TEXT`] with finish reason `stop` (the default).
    #[default]
    Text,
    /// Answer HTTP 400 (`invalid_request_error`, message starting with `script exhausted`), a
    /// non-retryable error so a runaway loop fails fast.
    Error,
}

/// One scripted conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conversation {
    /// Substring that must occur in the text of the FIRST user message (JSON key `match`).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_text: Option<String>,
    /// Substring that must occur in the system prompt (OpenAI `system`/`developer` messages, or
    /// Anthropic's top-level `system`), all parts joined with `\n`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_system: Option<String>,
    /// The steps; step `i` answers requests that contain `i` assistant messages.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Policy when the step index is past the end of `steps`.
    #[serde(default)]
    pub exhausted: Exhausted,
}

/// One assistant turn.
///
/// Streaming order: reasoning, then text, then each tool call in order; then the finish chunk
/// (and, on the OpenAI wire, the usage chunk when `stream_options.include_usage` is true).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Assistant text (OpenAI `delta.content`, Anthropic `text_delta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Reasoning text (OpenAI `delta.reasoning_content`, Anthropic `thinking_delta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Anthropic thinking signature (sent as one `signature_delta`); default
    /// `mock-signature-<conv>-<step>`. Ignored on the OpenAI wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Tool calls, streamed after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallSpec>,
    /// OpenAI finish reason; default `tool_calls` if there are tool calls, else `stop`. Mapped
    /// for Anthropic: `tool_calls`→`tool_use`, `stop`→`end_turn`, `length`→`max_tokens`,
    /// `content_filter`→`refusal`, anything else passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token counts to report; missing fields get defaults (see [`UsageSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageSpec>,
    /// Characters per text/reasoning/argument delta; default [`DEFAULT_CHUNK_SIZE`]; must be ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<usize>,
    /// Milliseconds to wait between consecutive SSE events (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Milliseconds to wait before sending the response headers (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_delay_ms: Option<u64>,
    /// Line ending of the SSE framing: `lf` (default), `crlf` or `cr` (the SSE spec allows all
    /// three; `cr` ends each event with `\r\r`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_ending: Option<LineEnding>,
    /// Start the stream with a UTF-8 byte-order mark (`EF BB BF`), which the SSE spec allows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bom: bool,
    /// Send a keep-alive written as a data line (`data: : keepalive`) before every event after
    /// the first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_keepalive: bool,
    /// After the last event, keep the connection open, silent, up to
    /// [`HANG_LIMIT`](crate::HANG_LIMIT) instead of ending the body (a server or proxy that
    /// does not close a finished stream).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_open: bool,
    /// Faults consumed one per attempt of this step: attempt 1 gets `faults[0]`, attempt 2
    /// `faults[1]`, …; once they are used up the normal response is sent. Attempts are counted
    /// per (session key, conversation index, step index).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

/// SSE line ending of a scripted step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LineEnding {
    /// `\n`.
    #[default]
    Lf,
    /// `\r\n`.
    Crlf,
    /// A lone `\r`.
    Cr,
}

/// Where a [`Fault::Stall`] stops answering (issue 24.1: every request phase needs a deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stall {
    /// Accept the request and never send the response headers.
    Headers,
    /// Send `200 application/json` headers declaring the whole completion's length, half of
    /// the body, then nothing.
    Body,
    /// Send `500` headers declaring the whole error body's length, half of it, then nothing.
    ErrorBody,
    /// Answer this request normally on a kept-alive connection, then never answer the next
    /// request that arrives on the same connection (a fresh connection is answered).
    Reuse,
}

impl Stall {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "headers" => Stall::Headers,
            "body" => Stall::Body,
            "error_body" => Stall::ErrorBody,
            "reuse" => Stall::Reuse,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Stall::Headers => "headers",
            Stall::Body => "body",
            Stall::ErrorBody => "error_body",
            Stall::Reuse => "reuse",
        }
    }
}

/// A scripted tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// Call id; default `call_<conversation index>_<step index>_<call index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments: a JSON string is sent verbatim (it may be invalid JSON on purpose); any other
    /// JSON value is serialized compactly. Default `{}`.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl ToolCallSpec {
    /// The argument string as it goes on the wire (see [`ToolCallSpec::arguments`]).
    pub fn arguments_string(&self) -> String {
        match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Token counts a step reports. Every field is optional.
///
/// Defaults: `prompt_tokens` = request body bytes / 4; `completion_tokens` = characters of
/// reasoning + text + tool names + arguments / 4; `reasoning_tokens` = reasoning characters / 4;
/// `cached_tokens` = 0. Each computed default is at least 1 (0 for reasoning without
/// reasoning text and for cached). OpenAI semantics: `prompt_tokens` includes `cached_tokens`
/// and `completion_tokens` includes `reasoning_tokens`; the Anthropic wire reports
/// `input_tokens = prompt_tokens - cached_tokens` and `cache_read_input_tokens = cached_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Input tokens including cached ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Output tokens including reasoning ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Cache-read input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Reasoning output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// A fault injected instead of (or part way through) the normal response.
///
/// "Chunks" are SSE events of the normal streamed response (OpenAI: `data:` lines including the
/// usage chunk and `[DONE]`; Anthropic: `event:`/`data:` pairs including `ping`). `N` larger
/// than the normal response is clamped to its length.
///
/// JSON shapes (exactly one kind per object):
/// - `{"status": 429, "headers": {"retry-after": "2"}, "body": <json or string>}`
/// - `{"cut_after": N}`
/// - `{"malformed_after": N}`
/// - `{"error_event_after": N, "error": {"message": "...", "type": "server_error"}}`
/// - `{"hang_after": N}`
/// - `{"stall": "headers" | "body" | "error_body" | "reuse"}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum Fault {
    /// Plain HTTP error response (status 400..=599). Without `body`, the dialect's standard
    /// error body is generated (OpenAI `{"error":{message,type,param,code}}`, Anthropic
    /// `{"type":"error","error":{type,message},"request_id"}`). A string body is sent verbatim
    /// as `text/plain`, any other JSON as `application/json`.
    Http {
        /// HTTP status code.
        status: u16,
        /// Extra response headers (e.g. `retry-after`).
        headers: BTreeMap<String, String>,
        /// Optional body override.
        body: Option<Value>,
    },
    /// Send N chunks, then abort the connection (chunked body never terminated: no finish,
    /// no `[DONE]`, the client sees an incomplete body / connection reset).
    CutAfter(usize),
    /// Send N chunks, then a `data: {not json` event, then end the body.
    MalformedAfter(usize),
    /// Send N chunks, then an error event, then end the body (no `[DONE]` / `message_stop`).
    /// OpenAI: `data: {"error": <error>}`; Anthropic: `event: error` with
    /// `{"type":"error","error":{"type","message"}}` where a `server_error` type becomes
    /// `api_error`.
    ErrorEventAfter {
        /// Chunks sent before the error event.
        after: usize,
        /// The error object; default `{"message":"mock error event","type":"server_error"}`.
        error: Value,
    },
    /// Send N chunks, then keep the connection open sending nothing for up to
    /// [`HANG_LIMIT`](crate::HANG_LIMIT) (or until the server shuts down), then end the body.
    HangAfter(usize),
    /// Stop answering at a given phase of the exchange, for up to
    /// [`HANG_LIMIT`](crate::HANG_LIMIT) or until the server shuts down (see [`Stall`]).
    Stall(Stall),
}

impl Fault {
    /// `{"status": status}` with the default body.
    pub fn http(status: u16) -> Self {
        Fault::Http {
            status,
            headers: BTreeMap::new(),
            body: None,
        }
    }

    /// HTTP 429 with header `retry-after: <secs>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        let mut headers = BTreeMap::new();
        headers.insert("retry-after".to_string(), retry_after_secs.to_string());
        Fault::Http {
            status: 429,
            headers,
            body: None,
        }
    }

    /// `{"cut_after": n}`.
    pub fn cut_after(n: usize) -> Self {
        Fault::CutAfter(n)
    }

    /// `{"malformed_after": n}`.
    pub fn malformed_after(n: usize) -> Self {
        Fault::MalformedAfter(n)
    }

    /// `{"error_event_after": n, "error": {"message": message, "type": "server_error"}}`.
    pub fn error_event_after(n: usize, message: &str) -> Self {
        Fault::ErrorEventAfter {
            after: n,
            error: json!({"message": message, "type": "server_error"}),
        }
    }

    /// `{"hang_after": n}`.
    pub fn hang_after(n: usize) -> Self {
        Fault::HangAfter(n)
    }

    /// `{"stall": phase}`.
    pub fn stall(phase: Stall) -> Self {
        Fault::Stall(phase)
    }
}

const FAULT_KINDS: &str =
    "expected one of status / cut_after / malformed_after / error_event_after / hang_after / stall";

fn take_count(obj: &Map<String, Value>, key: &str) -> Result<usize, String> {
    obj.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("fault `{key}` must be a non-negative integer"))
}

fn reject_extra(obj: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "unknown fault field `{k}` (allowed here: {})",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

impl TryFrom<Value> for Fault {
    type Error = String;

    fn try_from(v: Value) -> Result<Self, String> {
        let Value::Object(obj) = v else {
            return Err(format!("a fault must be a JSON object; {FAULT_KINDS}"));
        };
        if obj.contains_key("panic") {
            return Err("fault `panic` is not supported".into());
        }
        if obj.contains_key("status") {
            reject_extra(&obj, &["status", "headers", "body"])?;
            let status = obj
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
                .ok_or("fault `status` must be an integer HTTP status")?;
            let mut headers = BTreeMap::new();
            match obj.get("headers") {
                None | Some(Value::Null) => {}
                Some(Value::Object(h)) => {
                    for (k, v) in h {
                        let v = match v {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            _ => return Err(format!("fault header `{k}` must be a string")),
                        };
                        headers.insert(k.clone(), v);
                    }
                }
                Some(_) => return Err("fault `headers` must be an object of strings".into()),
            }
            let body = obj.get("body").cloned();
            return Ok(Fault::Http {
                status,
                headers,
                body,
            });
        }
        if obj.contains_key("cut_after") {
            reject_extra(&obj, &["cut_after"])?;
            return Ok(Fault::CutAfter(take_count(&obj, "cut_after")?));
        }
        if obj.contains_key("malformed_after") {
            reject_extra(&obj, &["malformed_after"])?;
            return Ok(Fault::MalformedAfter(take_count(&obj, "malformed_after")?));
        }
        if obj.contains_key("error_event_after") {
            reject_extra(&obj, &["error_event_after", "error"])?;
            let error = match obj.get("error") {
                None | Some(Value::Null) => {
                    json!({"message": "mock error event", "type": "server_error"})
                }
                Some(e @ Value::Object(_)) => e.clone(),
                Some(_) => return Err("fault `error` must be an object".into()),
            };
            return Ok(Fault::ErrorEventAfter {
                after: take_count(&obj, "error_event_after")?,
                error,
            });
        }
        if obj.contains_key("hang_after") {
            reject_extra(&obj, &["hang_after"])?;
            return Ok(Fault::HangAfter(take_count(&obj, "hang_after")?));
        }
        if obj.contains_key("stall") {
            reject_extra(&obj, &["stall"])?;
            return obj
                .get("stall")
                .and_then(Value::as_str)
                .and_then(Stall::parse)
                .map(Fault::Stall)
                .ok_or_else(|| {
                    "fault `stall` must be one of \"headers\", \"body\", \"error_body\", \"reuse\""
                        .to_string()
                });
        }
        Err(format!(
            "unrecognised fault {}; {FAULT_KINDS}",
            Value::Object(obj)
        ))
    }
}

impl From<Fault> for Value {
    fn from(f: Fault) -> Value {
        match f {
            Fault::Http {
                status,
                headers,
                body,
            } => {
                let mut m = Map::new();
                m.insert("status".into(), json!(status));
                if !headers.is_empty() {
                    m.insert("headers".into(), json!(headers));
                }
                if let Some(b) = body {
                    m.insert("body".into(), b);
                }
                Value::Object(m)
            }
            Fault::CutAfter(n) => json!({"cut_after": n}),
            Fault::MalformedAfter(n) => json!({"malformed_after": n}),
            Fault::ErrorEventAfter { after, error } => {
                json!({"error_event_after": after, "error": error})
            }
            Fault::HangAfter(n) => json!({"hang_after": n}),
            Fault::Stall(p) => json!({"stall": p.as_str()}),
        }
    }
}

impl Step {
    /// A step that streams `text` and finishes with `stop`.
    pub fn text(text: impl Into<String>) -> Self {
        Step {
            text: Some(text.into()),
            ..Step::default()
        }
    }

    /// A step with one tool call `name(arguments)` and finish reason `tool_calls`.
    pub fn tool(name: impl Into<String>, arguments: Value) -> Self {
        Step::default().with_tool(name, arguments)
    }

    /// A step with one tool call whose argument string is sent verbatim (may be invalid JSON).
    pub fn raw_tool(name: impl Into<String>, raw_arguments: impl Into<String>) -> Self {
        Step::default().with_tool(name, Value::String(raw_arguments.into()))
    }

    /// Adds/replaces the text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Adds/replaces the reasoning text.
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Appends a tool call (a JSON string argument is sent verbatim).
    pub fn with_tool(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(ToolCallSpec {
            id: None,
            name: name.into(),
            arguments,
        });
        self
    }

    /// Appends a tool call with an explicit id.
    pub fn with_tool_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
    ) -> Self {
        self.tool_calls.push(ToolCallSpec {
            id: Some(id.into()),
            name: name.into(),
            arguments,
        });
        self
    }

    /// Sets the finish reason (OpenAI vocabulary, e.g. `length`).
    pub fn with_finish(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Sets the reported usage.
    pub fn with_usage(mut self, usage: UsageSpec) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets characters per delta (must be ≥ 1).
    pub fn with_chunk_size(mut self, chars: usize) -> Self {
        self.chunk_size = Some(chars);
        self
    }

    /// Sets the delay between SSE events, in milliseconds.
    pub fn with_delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    /// Sets the delay before the response headers, in milliseconds.
    pub fn with_first_byte_delay_ms(mut self, ms: u64) -> Self {
        self.first_byte_delay_ms = Some(ms);
        self
    }

    /// Appends a fault (consumed by the next attempt that has no earlier fault).
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// The finish reason in OpenAI vocabulary, applying the default.
    pub fn effective_finish_reason(&self) -> String {
        match &self.finish_reason {
            Some(r) => r.clone(),
            None if self.tool_calls.is_empty() => "stop".into(),
            None => "tool_calls".into(),
        }
    }

    /// Characters per delta, applying the default.
    pub fn effective_chunk_size(&self) -> usize {
        self.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE).max(1)
    }
}

impl Conversation {
    /// A conversation without matchers (the default conversation).
    pub fn new(steps: Vec<Step>) -> Self {
        Conversation {
            steps,
            ..Conversation::default()
        }
    }

    /// Requires `needle` in the first user message.
    pub fn matching(mut self, needle: impl Into<String>) -> Self {
        self.match_text = Some(needle.into());
        self
    }

    /// Requires `needle` in the system prompt.
    pub fn matching_system(mut self, needle: impl Into<String>) -> Self {
        self.match_system = Some(needle.into());
        self
    }

    /// Sets the exhausted policy.
    pub fn on_exhausted(mut self, policy: Exhausted) -> Self {
        self.exhausted = policy;
        self
    }

    /// True if the conversation has at least one matcher.
    pub fn has_matchers(&self) -> bool {
        self.match_text.is_some() || self.match_system.is_some()
    }

    fn matches(&self, first_user: &str, system: &str) -> bool {
        self.match_text
            .as_deref()
            .is_none_or(|m| first_user.contains(m))
            && self
                .match_system
                .as_deref()
                .is_none_or(|m| system.contains(m))
    }
}

impl Script {
    /// A script with a single default conversation.
    pub fn single(steps: Vec<Step>) -> Self {
        Script {
            conversations: vec![Conversation::new(steps)],
        }
    }

    /// A script from conversations.
    pub fn new(conversations: Vec<Conversation>) -> Self {
        Script { conversations }
    }

    /// Parses and validates a script from JSON text.
    pub fn from_json(s: &str) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_str(s).map_err(ScriptError::Json)?;
        script.validate()?;
        Ok(script)
    }

    /// Reads, parses and validates a script file (blocking read; call before serving).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path.as_ref()).map_err(ScriptError::Io)?;
        Self::from_json(&text)
    }

    /// The script as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks ranges that serde cannot: chunk_size ≥ 1, fault status 400..=599, valid header
    /// names/values, non-empty tool names.
    pub fn validate(&self) -> Result<(), ScriptError> {
        for (ci, conv) in self.conversations.iter().enumerate() {
            for (si, step) in conv.steps.iter().enumerate() {
                let at = format!("conversations[{ci}].steps[{si}]");
                if step.chunk_size == Some(0) {
                    return Err(ScriptError::Invalid(format!(
                        "{at}.chunk_size: must be >= 1"
                    )));
                }
                for (ti, tc) in step.tool_calls.iter().enumerate() {
                    if tc.name.is_empty() {
                        return Err(ScriptError::Invalid(format!(
                            "{at}.tool_calls[{ti}].name: must not be empty"
                        )));
                    }
                }
                for (fi, fault) in step.faults.iter().enumerate() {
                    if let Fault::Http {
                        status, headers, ..
                    } = fault
                    {
                        if !(400..=599).contains(status) {
                            return Err(ScriptError::Invalid(format!(
                                "{at}.faults[{fi}].status: {status} is not in 400..=599"
                            )));
                        }
                        for (k, v) in headers {
                            if HeaderName::from_bytes(k.as_bytes()).is_err()
                                || HeaderValue::from_str(v).is_err()
                            {
                                return Err(ScriptError::Invalid(format!(
                                    "{at}.faults[{fi}].headers: invalid header `{k}: {v}`"
                                )));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Index of the conversation answering a request whose first user message text is
    /// `first_user` and whose system text is `system` (rule in the [`Script`] docs).
    pub fn select(&self, first_user: &str, system: &str) -> Option<usize> {
        self.conversations
            .iter()
            .position(|c| c.has_matchers() && c.matches(first_user, system))
            .or_else(|| self.conversations.iter().position(|c| !c.has_matchers()))
    }
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
