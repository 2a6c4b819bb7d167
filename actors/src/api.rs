//! The types of the [`Runtime`]'s API: what a prompt sends ([`PromptInput`]), a session
//! update ([`SessionPatch`]), a turn's result ([`TurnResult`]) and the errors ([`RuntimeError`]).

use super::*;

/// What to send in a prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptInput {
    /// The user's text.
    pub text: String,
    /// Agent name (default `build`).
    pub agent: Option<String>,
    /// `provider/model` (default: agent's, session's, config's).
    pub model: Option<String>,
    /// Extra system prompt for this message.
    pub system: Option<String>,
    /// Synthetic text parts to attach (reminders).
    pub synthetic: Vec<String>,
    /// Only compact the session's history (`session compact`); `text` is ignored.
    pub compact: bool,
    /// OpenCode's `noReply`: store the user message and run no turn (the result has no
    /// assistant message). Queued behind a running turn like any prompt.
    pub no_reply: bool,
    /// A JSON Schema the turn's final answer must satisfy (structured output, see
    /// [`structured`]): the answer is [`TurnResult::structured`]. An invalid schema, or a
    /// model without tool calls, refuses the prompt before anything is stored.
    pub schema: Option<serde_json::Value>,
    /// Sent to a busy session, join its running turn at the next step boundary
    /// ([`steer`]) instead of waiting for a turn of its own. The user-facing entry points
    /// (CLI `--session`, the API, the web view) set it unless asked to `queue`; the library
    /// default (`false`) queues.
    pub steer: bool,
    /// Files attached to the prompt (`-f`, API `file` parts), resolved with the text's
    /// `@` references before the prompt is queued (see [`inputs`]).
    pub files: Vec<inputs::FileInput>,
    /// Subagents named by API `agent` parts (`@name` in the text works too).
    pub agents: Vec<String>,
    /// The parts [`inputs::resolve`] made (synthetic read results, `file` and `agent`
    /// parts), stored after the text part. A `file` part holding an image or a PDF refuses
    /// the prompt, before anything is stored, when the model does not accept it.
    pub parts: Vec<troupe_session::PartKind>,
    /// Step limit of this prompt's turn (≥ 1), over the agent's `steps` and
    /// [`RuntimeOptions::max_steps`]; a turn that reaches it ends as any turn at its limit.
    /// `troupe batch` sets it from a task's `maxSteps`.
    pub max_steps: Option<u32>,
    /// Deliver this prompt at most once to the session (a cluster task, which JetStream may
    /// deliver again after its worker died): when the session, as loaded under its lease,
    /// already holds a user message, no new one is stored and the session's last turn is
    /// resumed from the store instead (its interrupted parts were swept when the lease was
    /// taken; a turn that had already ended returns its result without a new step). Meant
    /// for sessions that receive exactly one prompt (`troupe worker`'s task sessions).
    pub once: bool,
}

/// Changes to a session (`PATCH /session/{id}`, OpenCode's `{title?, permission?}`).
#[derive(Debug, Clone, Default)]
pub struct SessionPatch {
    /// New title.
    pub title: Option<String>,
    /// Rules appended to the session's own ruleset (later rules win, as OpenCode merges
    /// them onto the existing ruleset); they apply from the session's next turn.
    pub permission: Option<troupe_agents::Ruleset>,
}

impl SessionPatch {
    /// Apply to `s` and bump its `time.updated`.
    ///
    /// Errors (and leaves `s` unchanged) when the session's stored ruleset does not decode:
    /// merging onto an empty ruleset instead would drop its restrictions.
    pub fn apply(&self, s: &mut troupe_session::Session) -> Result<(), String> {
        let permission = match &self.permission {
            Some(extra) => {
                let old = s.ruleset().map_err(|e| e.to_string())?;
                Some(troupe_agents::Ruleset::merge(&[&old, extra]).into())
            }
            None => None,
        };
        if let Some(t) = &self.title {
            s.title = t.clone();
        }
        if permission.is_some() {
            s.permission = permission;
        }
        s.time.updated = troupe_session::now_ms();
        Ok(())
    }
}

/// The result of one turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnResult {
    /// The session the turn ran in (`ses_…`).
    pub session_id: SessionId,
    /// The user message the prompt stored.
    pub user_message_id: Option<MessageId>,
    /// The turn's last assistant message.
    pub message: Option<AssistantMessage>,
    /// Its text.
    pub text: String,
    /// Why the turn failed, if it did.
    pub error: Option<MessageError>,
    /// Steps run.
    pub steps: u32,
    /// Cost of this turn, USD.
    pub cost: Decimal,
    /// Session tokens after the turn.
    pub tokens: Tokens,
    /// The validated answer of a turn with [`PromptInput::schema`].
    pub structured: Option<serde_json::Value>,
}

impl TurnResult {
    /// Whether this turn's last assistant message came after `other`'s (message ids grow
    /// with time; a turn without an assistant message counts as earliest).
    pub fn ends_after(&self, other: &TurnResult) -> bool {
        let id = |t: &TurnResult| t.message.as_ref().map(|m| m.id.clone());
        id(self) > id(other)
    }
}

/// Runtime errors (before a turn could run).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No such session.
    #[error("session not found: {0}")]
    SessionNotFound(SessionId),
    /// Store failure.
    #[error(transparent)]
    Store(#[from] troupe_session::StoreError),
    /// Could not start an actor.
    #[error("could not start actor: {0}")]
    Spawn(String),
    /// A request other than a prompt could not run (a command, revert or shell with bad
    /// arguments or state).
    #[error("{0}")]
    Turn(String),
    /// A prompt got no turn result: refused before it started, or the session actor went
    /// away (see [`TurnError`]).
    #[error(transparent)]
    Prompt(#[from] TurnError),
    /// Another process drives the session (holds its lease): it did not finish within the
    /// wait ([`RuntimeOptions::lease_wait`]), or the session cannot be deleted now.
    #[error("session {session_id} is driven by {owner} since {since}; {outcome}")]
    SessionBusy {
        /// The session.
        session_id: SessionId,
        /// Who drives it: `troupe serve (pid 123 on box)`.
        owner: String,
        /// When the owner took it, ISO-8601 UTC (store clock).
        since: String,
        /// What this caller did about it: `gave up after waiting 300.0 s …`, `nothing
        /// deleted`.
        outcome: String,
    },
}
