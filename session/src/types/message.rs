//! A message: user or assistant, its timestamps, tokens and error, and a message with its
//! parts.

use super::*;

/// The name of a [`MessageError`], serialized as OpenCode's `NamedError` names (and troupe's
/// own, in the same `…Error` style). A name this build does not know (a newer troupe, another
/// tool writing the store) is kept as [`MessageErrorName::Other`], so reading and writing a
/// message back loses nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum MessageErrorName {
    /// `APIError`: the provider answered with an error, or the request failed.
    Api,
    /// `ProviderAuthError`: the provider refused the credentials (HTTP 401/403).
    ProviderAuth,
    /// `ContextOverflowError`: the request did not fit the model's context window.
    ContextOverflow,
    /// `MessageAbortedError`: the user (or a timeout) aborted the turn.
    MessageAborted,
    /// `MessageOutputLengthError`: the model hit its output token limit.
    MessageOutputLength,
    /// `StructuredOutputError`: no answer validated against the requested JSON schema.
    StructuredOutput,
    /// `DoomLoopError`: the same tool call repeated until the doom-loop guard stopped it.
    DoomLoop,
    /// `EmptyToolCallsError`: the model finished with `tool_calls` but sent no call and no
    /// text.
    EmptyToolCalls,
    /// `MaxStepsError`: the turn reached the agent's step limit.
    MaxSteps,
    /// `SessionBusyError`: another process drives the session (its lease was lost).
    SessionBusy,
    /// `StoreError`: the store could not record the turn.
    Store,
    /// `UnknownError`: anything else (a crash, a failed start), described by the message.
    Unknown,
    /// A name this build does not know, kept verbatim.
    Other(String),
}

impl MessageErrorName {
    /// The serialized name, e.g. `"MessageAbortedError"`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Api => "APIError",
            Self::ProviderAuth => "ProviderAuthError",
            Self::ContextOverflow => "ContextOverflowError",
            Self::MessageAborted => "MessageAbortedError",
            Self::MessageOutputLength => "MessageOutputLengthError",
            Self::StructuredOutput => "StructuredOutputError",
            Self::DoomLoop => "DoomLoopError",
            Self::EmptyToolCalls => "EmptyToolCallsError",
            Self::MaxSteps => "MaxStepsError",
            Self::SessionBusy => "SessionBusyError",
            Self::Store => "StoreError",
            Self::Unknown => "UnknownError",
            Self::Other(name) => name,
        }
    }
}

impl From<String> for MessageErrorName {
    fn from(name: String) -> Self {
        match name.as_str() {
            "APIError" => Self::Api,
            "ProviderAuthError" => Self::ProviderAuth,
            "ContextOverflowError" => Self::ContextOverflow,
            "MessageAbortedError" => Self::MessageAborted,
            "MessageOutputLengthError" => Self::MessageOutputLength,
            "StructuredOutputError" => Self::StructuredOutput,
            "DoomLoopError" => Self::DoomLoop,
            "EmptyToolCallsError" => Self::EmptyToolCalls,
            "MaxStepsError" => Self::MaxSteps,
            "SessionBusyError" => Self::SessionBusy,
            "StoreError" => Self::Store,
            "UnknownError" => Self::Unknown,
            _ => Self::Other(name),
        }
    }
}

impl From<MessageErrorName> for String {
    fn from(name: MessageErrorName) -> Self {
        match name {
            MessageErrorName::Other(name) => name,
            known => known.as_str().to_string(),
        }
    }
}

/// Compares with the serialized name (`name == "MessageAbortedError"`), for code that
/// holds names as text (JSON replies, tests).
impl PartialEq<&str> for MessageErrorName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for MessageErrorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error recorded on an assistant message (OpenCode `NamedError.toObject()`: `{name, data}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageError {
    /// What kind of error (serialized as OpenCode's name, e.g. `MessageAbortedError`).
    pub name: MessageErrorName,
    /// Details: at least `message`; `statusCode`, `isRetryable`, `responseBody` when known.
    pub data: Value,
}

impl MessageError {
    /// Build from a name and a message (`data` = `{"message": …}`).
    pub fn new(name: MessageErrorName, message: impl Into<String>) -> Self {
        Self {
            name,
            data: serde_json::json!({ "message": message.into() }),
        }
    }

    /// The human message (the name when `data` has no `message`).
    pub fn message(&self) -> String {
        self.data
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or(self.name.as_str())
            .to_string()
    }
}

/// Timestamps of a user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UserTime {
    /// Created, ms.
    pub created: Millis,
}

/// A user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// `msg_…`.
    pub id: MessageId,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// When the message was created.
    pub time: UserTime,
    /// Agent that answers this message.
    pub agent: String,
    /// Model that answers this message.
    pub model: ModelRef,
    /// Extra system prompt for this message (layer 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// What the turn this message started did, written by the `summary` agent after a turn
    /// that changed files (OpenCode's `summary.title` / `summary.body`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<UserSummary>,
}

impl UserMessage {
    /// A new user message of `session_id` for `agent` and `model`: a fresh `msg_…` id,
    /// created now (ms since the epoch), no extra system prompt and no summary yet.
    pub fn new(session_id: &SessionId, agent: impl Into<String>, model: ModelRef) -> UserMessage {
        UserMessage {
            id: crate::id::message(),
            session_id: session_id.clone(),
            time: UserTime {
                created: super::now_ms(),
            },
            agent: agent.into(),
            model,
            system: None,
            summary: None,
        }
    }
}

/// The summary of a turn, stored on its user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UserSummary {
    /// One line, at most 100 chars.
    pub title: String,
    /// A few sentences on what was changed and why.
    pub body: String,
}

/// Timestamps of an assistant message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AssistantTime {
    /// Created, ms.
    pub created: Millis,
    /// Completed, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Millis>,
}

/// Paths an assistant message ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MessagePath {
    /// Working directory.
    pub cwd: String,
    /// Worktree root.
    pub root: String,
}

/// An assistant message: one step (one LLM request) of the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// `msg_…`.
    pub id: MessageId,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// The user message this answers.
    #[serde(rename = "parentID")]
    pub parent_id: MessageId,
    /// When the step started and finished.
    pub time: AssistantTime,
    /// Name of the agent that ran the step.
    pub agent: String,
    /// Model id.
    #[serde(rename = "modelID")]
    pub model_id: String,
    /// Provider id.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Working directory and worktree root the step ran in.
    pub path: MessagePath,
    /// True for compaction summaries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
    /// Cost of this step, USD.
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: Decimal,
    /// Tokens of this step.
    pub tokens: Tokens,
    /// Finish reason (`stop`, `tool-calls`, `length`, …) once the step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// Error, when the step failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<MessageError>,
    /// The validated answer of a turn with a JSON schema (the `StructuredOutput` tool's
    /// value, OpenCode's `structured`); only on the step that captured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
}

impl AssistantMessage {
    /// A step begun now (`msg_…` id fresh) by `agent` with `model`, answering user message
    /// `parent_id` of `session_id`, run in `path`: no cost, tokens, finish or error yet.
    pub fn begun(
        session_id: &SessionId,
        parent_id: &MessageId,
        agent: &str,
        model: &ModelRef,
        path: MessagePath,
    ) -> Self {
        AssistantMessage {
            id: crate::id::message(),
            session_id: session_id.clone(),
            parent_id: parent_id.clone(),
            time: AssistantTime {
                created: now_ms(),
                completed: None,
            },
            agent: agent.to_string(),
            model_id: model.model_id.clone(),
            provider_id: model.provider_id.clone(),
            path,
            summary: false,
            cost: Default::default(),
            tokens: Default::default(),
            finish: None,
            error: None,
            structured: None,
        }
    }
}

/// A message: user or assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
// Messages live in per-session vectors where most entries are assistant messages; boxing
// would add an allocation per message and noise at every match site.
#[allow(clippy::large_enum_variant)]
pub enum Message {
    /// A prompt (or a synthetic user message such as a compaction request).
    User(UserMessage),
    /// One step of the loop: one model request and what it produced.
    Assistant(AssistantMessage),
}

impl Message {
    /// The message's id (`msg_…`).
    pub fn id(&self) -> &MessageId {
        match self {
            Message::User(m) => &m.id,
            Message::Assistant(m) => &m.id,
        }
    }

    /// Id of the session (`ses_…`) the message belongs to.
    pub fn session_id(&self) -> &SessionId {
        match self {
            Message::User(m) => &m.session_id,
            Message::Assistant(m) => &m.session_id,
        }
    }

    /// Creation time, ms.
    pub fn created(&self) -> Millis {
        match self {
            Message::User(m) => m.time.created,
            Message::Assistant(m) => m.time.created,
        }
    }

    /// The assistant message, if this is one.
    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match self {
            Message::Assistant(a) => Some(a),
            Message::User(_) => None,
        }
    }
}

/// A message with its parts, ordered by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageWithParts {
    /// The message.
    pub info: Message,
    /// Its parts.
    pub parts: Vec<Part>,
}

impl MessageWithParts {
    /// The texts of its text parts that were typed (by the user) or streamed (by the model),
    /// in order: synthetic ones (reminders, injected results) left out.
    pub fn typed_texts(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match &p.kind {
            PartKind::Text {
                text,
                synthetic: false,
                ..
            } => Some(text.as_str()),
            _ => None,
        })
    }
}
