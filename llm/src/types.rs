//! Provider-neutral request and stream types.

use serde::{Deserialize, Serialize};

/// An image or PDF in a user turn: MIME type (`image/png`, `image/jpeg`, `image/gif`,
/// `image/webp`, `application/pdf`) and the bytes as standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInput {
    /// MIME type.
    pub mime: String,
    /// Standard base64 of the bytes (no `data:` prefix).
    pub data: String,
}

impl ImageInput {
    /// From a `data:<mime>;base64,<data>` URL; `None` for anything else.
    pub fn from_data_url(url: &str) -> Option<ImageInput> {
        let rest = url.strip_prefix("data:")?;
        let (head, data) = rest.split_once(',')?;
        let mime = head.strip_suffix(";base64")?;
        (!mime.is_empty() && !data.is_empty()).then(|| ImageInput {
            mime: mime.to_string(),
            data: data.to_string(),
        })
    }

    /// `data:<mime>;base64,<data>`.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.data)
    }
}

/// One message of the conversation sent to a model, in a provider-neutral shape.
/// Providers convert it to their wire format (OpenAI `messages[]`, Anthropic `messages[]` + `system`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// System prompt text. Several system messages are allowed; Anthropic joins them.
    System {
        /// Prompt text.
        content: String,
    },
    /// A user turn.
    User {
        /// Text content (parts already joined by the caller when needed).
        content: String,
        /// Images sent after the text (only to models whose catalog entry accepts images).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageInput>,
    },
    /// An assistant turn: optional reasoning, optional text, and tool calls, in that order.
    Assistant {
        /// Visible text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Reasoning text (sent back as `reasoning_content` for providers that require it, or
        /// as an Anthropic `thinking` block when `reasoning_signature` is set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// Anthropic thinking-block signature, passed back verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_signature: Option<String>,
        /// Tool calls made in this turn.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRequest>,
    },
    /// The result of one tool call.
    Tool {
        /// The call id this result answers.
        call_id: String,
        /// Result text (or error text, with `is_error`).
        content: String,
        /// True when the tool failed (Anthropic `is_error`).
        #[serde(default)]
        is_error: bool,
    },
}

/// A tool call as it appears in history sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// Provider call id (e.g. `call_abc`, `toolu_…`).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON object.
    pub input: serde_json::Value,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// Description shown to the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One streaming request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ChatRequest {
    /// Model id as sent on the wire.
    pub model: String,
    /// Conversation, system messages first.
    pub messages: Vec<ChatMessage>,
    /// Tools offered; empty = no `tools` key. Shared: a turn offers the same list at every
    /// step, and [`crate::body::BodyCache`] recognizes the list it serialized last by
    /// pointer before comparing contents.
    #[serde(with = "shared_tools")]
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Max output tokens.
    pub max_tokens: Option<u64>,
    /// Extra top-level request-body fields, merged last (provider/model/agent `options`,
    /// e.g. llama.cpp `grammar`). Keys here override the computed ones.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Extra HTTP headers for this request (e.g. `x-session-affinity`).
    pub headers: Vec<(String, String)>,
    /// The serialized body, when the caller built it already (incrementally, with a
    /// [`crate::body::BodyCache`]): sent as is instead of serializing the fields above, which
    /// then need not hold the history (a step request's `messages` is only its system prompt
    /// and what follows the history). Must equal [`crate::body::full_body`] of the request
    /// the caller stands for. Not serialized. Shared chunks (a long session's cached history
    /// is not copied into each step's body), sent with their exact total `Content-Length`.
    #[serde(skip)]
    pub body: Option<crate::body::RequestBody>,
}

/// Why a step ended, normalized (OpenCode `FinishReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model stopped on its own.
    Stop,
    /// Output token limit reached.
    Length,
    /// The model asked for tool calls.
    ToolCalls,
    /// Provider content filter.
    ContentFilter,
    /// The provider reported an error.
    Error,
    /// Anything else, or no finish reason at all.
    Unknown,
}

impl FinishReason {
    /// Map an OpenAI `finish_reason` or Anthropic `stop_reason` string.
    pub fn from_wire(s: &str) -> Self {
        match s {
            "stop" | "end_turn" | "stop_sequence" | "eos" => Self::Stop,
            "length" | "max_tokens" | "model_context_window_exceeded" => Self::Length,
            "tool_calls" | "tool_use" | "function_call" => Self::ToolCalls,
            "content_filter" | "refusal" => Self::ContentFilter,
            "error" => Self::Error,
            _ => Self::Unknown,
        }
    }

    /// Wire-style name (`stop`, `length`, `tool-calls`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool-calls",
            Self::ContentFilter => "content-filter",
            Self::Error => "error",
            Self::Unknown => "unknown",
        }
    }
}

/// Token usage of one step as reported by the provider, normalized to *inclusive* counts:
/// `input` includes cache reads and writes, `output` includes reasoning. Cost and the
/// stored per-category tokens are derived from this (see troupe-session `cost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    /// All input tokens of the request, including cache read and cache write.
    pub input: u64,
    /// All output tokens, including reasoning.
    pub output: u64,
    /// Reasoning tokens (part of `output`).
    pub reasoning: u64,
    /// Input tokens served from cache (part of `input`).
    pub cache_read: u64,
    /// Input tokens written to cache (part of `input`).
    pub cache_write: u64,
}

/// Largest token count accepted from a provider's usage report for one step: 100,000,000
/// (ten times the largest context window of any model in the catalog, 10 M). Larger values,
/// like `18446744073709551615`, are bugs or attacks, not usage.
pub const MAX_STEP_TOKENS: u64 = 100_000_000;

/// Default cap on one tool call's streamed argument text: 10 MiB (issue 24.4). A call whose
/// arguments grow past it is not executed; its part ends as an error naming the cap. Model
/// option `maxToolArgumentBytes` overrides it.
pub const DEFAULT_MAX_TOOL_ARGUMENT_BYTES: usize = 10 * 1024 * 1024;

/// The error of a tool call whose arguments passed the cap: names both sizes and what to do.
pub fn oversized_arguments_error(received: usize, cap: usize) -> String {
    format!(
        "The arguments of this tool call were larger than the limit of {cap} bytes (at least \
         {received} bytes arrived), so the call was not executed. Split the content into \
         smaller pieces (e.g. write a smaller file, then append with edits)."
    )
}

/// Read one usage count (tokens) from a provider's JSON. Integers in `0..=`[`MAX_STEP_TOKENS`]
/// are taken as is and non-negative floats rounded; a negative, absurd (above
/// [`MAX_STEP_TOKENS`]) or non-numeric value is logged and counted as 0, so one bad report
/// can neither wrap nor inflate the session totals.
pub fn token_count(v: &serde_json::Value) -> u64 {
    let n = match v {
        serde_json::Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0 && *f <= MAX_STEP_TOKENS as f64)
                .map(|f| f.round() as u64)
        }),
        serde_json::Value::Null => return 0,
        _ => None,
    };
    match n {
        Some(n) if n <= MAX_STEP_TOKENS => n,
        _ => {
            tracing::warn!(value = %v, "provider reported an impossible token count; counted as 0");
            0
        }
    }
}

/// Normalized stream event: what every provider protocol is turned into.
/// Ids (`id`) are block ids for text/reasoning and provider call ids for tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamEvent {
    /// A text block opens.
    TextStart {
        /// Block id.
        id: String,
    },
    /// Text appended to a block.
    TextDelta {
        /// Block id.
        id: String,
        /// Appended text.
        text: String,
    },
    /// A text block closes.
    TextEnd {
        /// Block id.
        id: String,
    },
    /// A reasoning block opens.
    ReasoningStart {
        /// Block id.
        id: String,
    },
    /// Reasoning text appended.
    ReasoningDelta {
        /// Block id.
        id: String,
        /// Appended text.
        text: String,
    },
    /// A reasoning block closes; `signature` is the Anthropic thinking signature, if any.
    ReasoningEnd {
        /// Block id.
        id: String,
        /// Provider signature to pass back verbatim.
        signature: Option<String>,
    },
    /// A tool call starts streaming its input.
    ToolInputStart {
        /// Call id.
        id: String,
        /// Tool name as the model wrote it (not yet repaired).
        name: String,
    },
    /// A fragment of the tool input JSON.
    ToolInputDelta {
        /// Call id.
        id: String,
        /// Raw JSON fragment.
        delta: String,
    },
    /// A tool call is complete. `input` is the raw argument text exactly as streamed (may be
    /// invalid JSON; the caller validates). `truncated` is true when the step hit the output
    /// limit while this call's input was still streaming: such a call must not be executed.
    ToolCall {
        /// Call id.
        id: String,
        /// Tool name as the model wrote it.
        name: String,
        /// Raw JSON argument text ("" means `{}`).
        input: String,
        /// Cut off by the output limit.
        truncated: bool,
        /// Why the call must not run even though it is complete (e.g. its arguments passed
        /// the size cap); the caller ends its part with this error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Something in the stream was skipped (e.g. a data line that is not JSON); the step goes
    /// on. Callers log and count it; it opens or closes nothing.
    Warning {
        /// What was skipped, with an excerpt.
        message: String,
    },
    /// The step finished.
    FinishStep {
        /// Normalized reason.
        reason: FinishReason,
        /// Usage; zeros when the provider sent none.
        usage: Usage,
        /// The provider's raw finish reason string, if any.
        raw_reason: Option<String>,
    },
}

/// Serde for [`ChatRequest::tools`]: a JSON array, as a `Vec` would be.
mod shared_tools {
    use super::ToolSpec;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    pub(super) fn serialize<S: Serializer>(t: &Arc<[ToolSpec]>, s: S) -> Result<S::Ok, S::Error> {
        t[..].serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Arc<[ToolSpec]>, D::Error> {
        Vec::<ToolSpec>::deserialize(d).map(Into::into)
    }
}
