//! A part of a message: text, reasoning, tool calls and their states, step boundaries,
//! files and the other kinds, with their timestamps.

use super::*;

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
        tail_start_id: Option<MessageId>,
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
    pub id: PartId,
    /// Id of the session (`ses_…`) the item belongs to.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Id of the message (`msg_…`) the part belongs to.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// What the part holds (its `type` and fields, flattened into the JSON).
    #[serde(flatten)]
    pub kind: PartKind,
}

impl Part {
    /// A new part with a fresh id.
    pub fn new(session_id: &SessionId, message_id: &MessageId, kind: PartKind) -> Self {
        Self {
            id: crate::id::part(),
            session_id: session_id.clone(),
            message_id: message_id.clone(),
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
