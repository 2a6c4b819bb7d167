//! Session, Message and Part: the persisted shape of a conversation.
//!
//! JSON field names follow OpenCode's (`sessionID`, `messageID`, `callID`, `providerID`, …) so
//! exported sessions and `--format json` output read the same as OpenCode's.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Cache token counts, tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CacheTokens {
    /// Input tokens read from the provider's prompt cache.
    pub read: u64,
    /// Input tokens written to the provider's prompt cache.
    pub write: u64,
}

/// Token counts split by category (OpenCode `tokens`): `input` excludes cache reads and
/// writes; `output` excludes reasoning. All in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Tokens {
    /// Uncached input tokens.
    pub input: u64,
    /// Output tokens excluding reasoning.
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Cache tokens.
    pub cache: CacheTokens,
}

impl Tokens {
    /// input + output + reasoning + cache read + cache write.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.reasoning + self.cache.read + self.cache.write
    }

    /// Add another count into this one. Sums saturate at `u64::MAX` instead of wrapping
    /// (a provider's absurd usage report must not wrap a session's totals, issue 24.4).
    pub fn add(&mut self, o: &Tokens) {
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.reasoning = self.reasoning.saturating_add(o.reasoning);
        self.cache.read = self.cache.read.saturating_add(o.cache.read);
        self.cache.write = self.cache.write.saturating_add(o.cache.write);
    }
}

/// A model reference `{providerID, modelID}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRef {
    /// Provider id.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Model id.
    #[serde(rename = "modelID")]
    pub model_id: String,
}

impl From<&troupe_config::model::ResolvedModel> for ModelRef {
    fn from(m: &troupe_config::model::ResolvedModel) -> Self {
        ModelRef {
            provider_id: m.provider_id.clone(),
            model_id: m.model_id.clone(),
        }
    }
}

impl ModelRef {
    /// Parse `provider/model` (split at the first `/`).
    pub fn parse(spec: &str) -> Option<Self> {
        let (p, m) = spec.split_once('/')?;
        (!p.is_empty() && !m.is_empty()).then(|| Self {
            provider_id: p.to_string(),
            model_id: m.to_string(),
        })
    }

    /// `provider/model`.
    pub fn full(&self) -> String {
        format!("{}/{}", self.provider_id, self.model_id)
    }
}

/// Session timestamps, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SessionTime {
    /// When the session was created, ms since the epoch.
    pub created: Millis,
    /// When anything of the session last changed, ms since the epoch.
    pub updated: Millis,
    /// Set while a compaction runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacting: Option<Millis>,
}

/// Files changed in a session (SummaryWorker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SessionSummary {
    /// Lines added, summed over files.
    pub additions: u64,
    /// Lines deleted, summed over files.
    pub deletions: u64,
    /// Number of files changed.
    pub files: u64,
    /// Per-file details.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<FileDiff>,
}

/// Per-file change counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// The file's path as the tool reported it.
    pub file: String,
    /// Lines added.
    pub additions: u64,
    /// Lines deleted.
    pub deletions: u64,
}

/// A session: one conversation, possibly the child of another (subagent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `ses_…`.
    pub id: String,
    /// Parent session for subagent sessions.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Title (default `New session - <ISO time>`).
    pub title: String,
    /// Working directory tools resolve paths against.
    pub directory: String,
    /// Last agent used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Last model used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// Created / updated / compacting times.
    pub time: SessionTime,
    /// Total cost, USD, summed from step-finish parts.
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: Decimal,
    /// Total tokens, summed from step-finish parts.
    pub tokens: Tokens,
    /// Files changed by the session's `write` / `edit` calls, with line counts (set after
    /// each loop; `None` before any change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<SessionSummary>,
    /// Session-level permission rules (a subagent's derived ruleset, or rules patched onto
    /// the session). Read them with [`Session::ruleset`], which fails when they do not decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<SessionPermission>,
    /// Set by a revert: the messages after the revert point are hidden until the next prompt
    /// deletes them, or an unrevert restores the files (OpenCode `session.revert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<SessionRevert>,
}

/// Where a session was reverted to, and what undoing the revert needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRevert {
    /// The message reverted to: it and everything after it are hidden (with `partID`: the
    /// parts from `partID` on, and the later messages).
    #[serde(rename = "messageID")]
    pub message_id: String,
    /// The part reverted to, if the revert was to a part.
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<String>,
    /// Tree hash of the project just before the revert (what unrevert restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Absolute paths the revert changed (what unrevert puts back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

impl Session {
    /// A new session in `directory`.
    pub fn new(directory: &str, parent_id: Option<String>) -> Self {
        let now = now_ms();
        let iso = crate::iso_time(now);
        let title = if parent_id.is_some() {
            format!("Child session - {iso}")
        } else {
            format!("New session - {iso}")
        };
        Self {
            id: crate::id::session(),
            parent_id,
            title,
            directory: directory.to_string(),
            agent: None,
            model: None,
            time: SessionTime {
                created: now,
                updated: now,
                compacting: None,
            },
            cost: Decimal::ZERO,
            tokens: Tokens::default(),
            summary: None,
            permission: None,
            revert: None,
        }
    }

    /// Whether the title is still the default one.
    pub fn has_default_title(&self) -> bool {
        self.title.starts_with("New session - ") || self.title.starts_with("Child session - ")
    }

    /// The session's own permission rules (empty when it has none), or an error naming the
    /// session when the stored value does not decode: a ruleset that cannot be read must fail
    /// whatever would use it, never be dropped (that would widen a subagent's permissions to
    /// its agent's).
    pub fn ruleset(&self) -> Result<troupe_agents::Ruleset, UndecodableRuleset> {
        match &self.permission {
            None => Ok(troupe_agents::Ruleset::default()),
            Some(SessionPermission::Rules(r)) => Ok(r.clone()),
            Some(SessionPermission::Undecodable { error, .. }) => Err(UndecodableRuleset {
                session_id: self.id.clone(),
                error: error.clone(),
            }),
        }
    }
}

/// A session's permission rules as stored.
///
/// Rows are JSON, and one written by an older or foreign writer may hold a value that is not a
/// ruleset. Decoding the whole session must not fail for that (the session still has to be
/// listed, shown and deleted), and the value must not be read as "no rules" either. So such a
/// value is kept verbatim, with its decode error: writing the session back stores it unchanged,
/// and [`Session::ruleset`] fails for it.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionPermission {
    /// A ruleset that decoded.
    Rules(troupe_agents::Ruleset),
    /// A stored value that is not a ruleset.
    Undecodable {
        /// The stored value, unchanged.
        raw: Value,
        /// Why it does not decode.
        error: String,
    },
}

impl From<troupe_agents::Ruleset> for SessionPermission {
    fn from(r: troupe_agents::Ruleset) -> Self {
        SessionPermission::Rules(r)
    }
}

impl SessionPermission {
    /// Decode a stored value: a ruleset, or [`SessionPermission::Undecodable`] keeping it.
    pub fn from_value(raw: Value) -> Self {
        match serde_json::from_value::<troupe_agents::Ruleset>(raw.clone()) {
            Ok(r) => SessionPermission::Rules(r),
            Err(e) => SessionPermission::Undecodable {
                raw,
                error: e.to_string(),
            },
        }
    }
}

impl Serialize for SessionPermission {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SessionPermission::Rules(r) => r.serialize(s),
            SessionPermission::Undecodable { raw, .. } => raw.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SessionPermission {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(SessionPermission::from_value)
    }
}

/// A session's stored permission value does not decode as a ruleset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "session {session_id} has a permission ruleset that does not decode ({error}); refusing to run it without its restrictions"
)]
pub struct UndecodableRuleset {
    /// The session.
    pub session_id: String,
    /// Why the stored value does not decode.
    pub error: String,
}

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
    pub id: String,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: String,
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
    pub id: String,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// The user message this answers.
    #[serde(rename = "parentID")]
    pub parent_id: String,
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
        session_id: &str,
        parent_id: &str,
        agent: &str,
        model: &ModelRef,
        path: MessagePath,
    ) -> Self {
        AssistantMessage {
            id: crate::id::message(),
            session_id: session_id.to_string(),
            parent_id: parent_id.to_string(),
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
    pub fn id(&self) -> &str {
        match self {
            Message::User(m) => &m.id,
            Message::Assistant(m) => &m.id,
        }
    }

    /// Session id.
    pub fn session_id(&self) -> &str {
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

/// Start/end timestamps of a text or reasoning part, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PartTime {
    /// When the part started, ms since the epoch.
    pub start: Millis,
    /// When it ended, ms since the epoch (`None` while it streams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Millis>,
}

/// Timestamps of a tool call, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ToolTime {
    /// When the call started running, ms since the epoch.
    pub start: Millis,
    /// When it finished, ms since the epoch (`None` while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Millis>,
    /// When prune cleared this output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<Millis>,
}

impl ToolTime {
    /// A call that ran from `start` to `end` (ms since the epoch), its output not cleared.
    pub fn ended(start: Millis, end: Millis) -> Self {
        ToolTime {
            start,
            end: Some(end),
            compacted: None,
        }
    }
}

/// When a step's provider request ran, ms since the epoch (the timeline's request bar).
///
/// With retries, `start` is when the last attempt was sent: the earlier attempts and the
/// waits between them lie between the step's start and this `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RequestTime {
    /// When the (last) attempt was sent.
    pub start: Millis,
    /// When its first stream event arrived (`None`: none did).
    #[serde(
        rename = "firstToken",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub first_token: Option<Millis>,
    /// When the stream ended, normally or not.
    pub end: Millis,
    /// How many attempts the step made (1 without retries).
    pub attempts: u32,
}

/// The state machine of a tool part: pending → running → completed | error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ToolState {
    /// Input is streaming.
    Pending {
        /// Parsed input so far (`{}` until complete).
        input: Value,
        /// Raw input text so far.
        raw: String,
    },
    /// The tool is running.
    Running {
        /// The arguments the model sent (a JSON object).
        input: Value,
        /// Title set by the tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// Progress metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// When the call started and ended.
        time: ToolTime,
    },
    /// The tool finished; its output is the result the model sees.
    Completed {
        /// The arguments the model sent (a JSON object).
        input: Value,
        /// Output sent to the model.
        output: String,
        /// Short title set by the tool (e.g. the file path).
        title: String,
        /// Tool-specific details kept on the part (e.g. `exit`, `diff`, `additions`).
        metadata: Value,
        /// When the call started and ended.
        time: ToolTime,
    },
    /// The tool failed (or was denied, aborted or interrupted); the model sees the error.
    Error {
        /// The arguments the model sent (a JSON object).
        input: Value,
        /// Error text sent to the model.
        error: String,
        /// Metadata (`interrupted: true` when aborted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// When the call started and ended.
        time: ToolTime,
    },
}

impl ToolState {
    /// `pending`, `running`, `completed`, `error`.
    pub fn status(&self) -> &'static str {
        match self {
            ToolState::Pending { .. } => "pending",
            ToolState::Running { .. } => "running",
            ToolState::Completed { .. } => "completed",
            ToolState::Error { .. } => "error",
        }
    }

    /// The input.
    pub fn input(&self) -> &Value {
        match self {
            ToolState::Pending { input, .. }
            | ToolState::Running { input, .. }
            | ToolState::Completed { input, .. }
            | ToolState::Error { input, .. } => input,
        }
    }

    /// Whether the call reached an end state.
    pub fn is_final(&self) -> bool {
        matches!(self, ToolState::Completed { .. } | ToolState::Error { .. })
    }
}

/// What a part holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PartKind {
    /// Text of the model's answer, or of a user message.
    Text {
        /// The text.
        text: String,
        /// Made by troupe, not typed by the user or the model (reminders, continue prompts).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        synthetic: bool,
        /// When the text streamed (`None` for user text).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time: Option<PartTime>,
    },
    /// The model's reasoning text, when the provider streams it.
    Reasoning {
        /// The text.
        text: String,
        /// Provider metadata (e.g. `{"signature": …}`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// When the reasoning streamed.
        time: PartTime,
    },
    /// A tool call and its result.
    Tool {
        /// Provider call id.
        #[serde(rename = "callID")]
        call_id: String,
        /// Tool name (after repair).
        tool: String,
        /// Where the call is: pending, running, completed or error.
        state: ToolState,
    },
    /// A step began.
    StepStart {
        /// Tree hash of the project's snapshot before the step (absent when snapshots are
        /// off; see `troupe-snapshot`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// When the step's provider request ran (set once the stream ended or failed;
        /// absent while it streams, for a step aborted before any request was sent, and in
        /// sessions stored before troupe recorded it). Not an OpenCode field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<RequestTime>,
    },
    /// A step finished.
    StepFinish {
        /// Finish reason.
        reason: String,
        /// Tree hash of the project's snapshot after the step and its tool calls (absent when
        /// snapshots are off).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// Cost of the step, USD.
        #[serde(with = "rust_decimal::serde::float")]
        cost: Decimal,
        /// Tokens of the step.
        tokens: Tokens,
    },
    /// An attached or referenced file (OpenCode's `FilePart`): an image or PDF sent to the
    /// model as an input, its bytes inline as a `data:` URL; or a text file or directory
    /// (`text/plain`, `application/x-directory`) whose content the message's synthetic text
    /// parts already hold, by its `file://` URL.
    File {
        /// MIME type, e.g. `image/png`.
        mime: String,
        /// The file's name as given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
        /// `data:<mime>;base64,<bytes>`, or `file:///abs/path[?start=N&end=M]`.
        url: String,
    },
    /// Files a step changed (OpenCode `PatchPart`): written after the step's tool calls when
    /// its snapshots differ.
    Patch {
        /// Tree hash before the step (what a revert restores these files from).
        hash: String,
        /// Absolute paths of the changed files.
        files: Vec<String>,
    },
    /// A subagent the user mentioned (`@explore …`, OpenCode's `AgentPart`): the user
    /// message also carries a synthetic text asking the model to call the task tool with it.
    Agent {
        /// The agent's name.
        name: String,
        /// Where the mention stands in the prompt text, when it came from one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<AgentSource>,
    },
    /// Work the user handed to a subagent (OpenCode's `SubtaskPart`), made by a command that
    /// runs as a subtask; the `task` call made for it on the user's behalf is stored on the
    /// next (assistant) message. The model sees it as "The following tool was executed by the
    /// user".
    Subtask {
        /// The prompt the subagent gets (the command's filled template).
        prompt: String,
        /// Short description (the command's, else its name).
        description: String,
        /// The subagent that runs it.
        agent: String,
        /// Its model, when the command names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<ModelRef>,
        /// The command that made it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
    },
    /// A compaction request (on a user message).
    Compaction {
        /// Started automatically on overflow.
        auto: bool,
        /// The provider rejected the request as too large.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        overflow: bool,
        /// First message of the tail kept verbatim (OpenCode's `tail_start_id`): requests
        /// after this compaction send the request, its summary, then the messages from
        /// here up to the request (`compaction::compacted_view`). Unset: no tail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail_start_id: Option<String>,
    },
}

/// Where an `@agent` mention stands in a prompt's text (OpenCode's `AgentPart.source`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSource {
    /// The mention as written (`@explore`).
    pub value: String,
    /// Char offset of the `@` in the text.
    pub start: u64,
    /// Char offset just after the mention.
    pub end: u64,
}

/// A part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// `prt_…`.
    pub id: String,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// Id of the message (`msg_…`) the part belongs to.
    #[serde(rename = "messageID")]
    pub message_id: String,
    /// What the part holds (its `type` and fields, flattened into the JSON).
    #[serde(flatten)]
    pub kind: PartKind,
}

impl Part {
    /// A new part with a fresh id.
    pub fn new(session_id: &str, message_id: &str, kind: PartKind) -> Self {
        Self {
            id: crate::id::part(),
            session_id: session_id.to_string(),
            message_id: message_id.to_string(),
            kind,
        }
    }

    /// `text`, `reasoning`, `tool`, `step-start`, `step-finish`, `patch`, `compaction`, `file`,
    /// `agent`, `subtask`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            PartKind::Text { .. } => "text",
            PartKind::Reasoning { .. } => "reasoning",
            PartKind::Tool { .. } => "tool",
            PartKind::StepStart { .. } => "step-start",
            PartKind::StepFinish { .. } => "step-finish",
            PartKind::Patch { .. } => "patch",
            PartKind::Compaction { .. } => "compaction",
            PartKind::File { .. } => "file",
            PartKind::Agent { .. } => "agent",
            PartKind::Subtask { .. } => "subtask",
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

/// Session status, published on the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SessionStatus {
    /// Not running.
    Idle,
    /// Running a turn.
    Busy,
    /// Waiting before retrying a failed provider request.
    Retry {
        /// 1-based attempt number that failed.
        attempt: u32,
        /// The failed attempt's error, as shown to the user.
        message: String,
        /// When the next attempt starts, ms since epoch.
        next: Millis,
    },
    /// Waiting for another process that drives this session (holds its lease) to finish.
    /// Not an OpenCode status.
    Waiting {
        /// Who drives it: `troupe run (pid 123 on box)`.
        owner: String,
        /// Until when this driver waits before giving up, ms since epoch (local clock).
        until: Millis,
    },
}

#[cfg(test)]
#[path = "types_tests.rs"]
mod tests;
