//! Bus events and the in-process bus.
//!
//! Every state change is published as an [`Event`] after the store committed it (the store's
//! writer thread publishes; see [`crate::store`]). The CLI's JSON output, the HTTP server's
//! SSE stream and the monitor all read the bus. Text deltas are bus-only
//! (`message.part.delta`), never stored: the finished part is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::types::{
    Message, MessageError, MessageId, Part, PartId, Session, SessionId, SessionStatus,
};

/// Where a part is, as events name it: JSON `{"sessionID", "messageID", "partID"}`, written
/// flat beside the event's other properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// Id of the session (`ses_…`).
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Id of the message (`msg_…`).
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// Id of the part (`prt_…`).
    #[serde(rename = "partID")]
    pub part_id: PartId,
}

impl From<&Part> for PartRef {
    fn from(p: &Part) -> PartRef {
        PartRef {
            session_id: p.session_id.clone(),
            message_id: p.message_id.clone(),
            part_id: p.id.clone(),
        }
    }
}

/// A bus event. JSON: `{"type": "<name>", "properties": {…}}` (OpenCode's `/event` shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "properties")]
pub enum Event {
    /// A session was created.
    #[serde(rename = "session.created")]
    SessionCreated {
        /// The session.
        info: Session,
    },
    /// A session changed (title, totals, summary).
    #[serde(rename = "session.updated")]
    SessionUpdated {
        /// The session.
        info: Session,
    },
    /// A session was deleted.
    #[serde(rename = "session.deleted")]
    SessionDeleted {
        /// The session.
        info: Session,
    },
    /// Status changed: idle, busy, retry.
    #[serde(rename = "session.status")]
    SessionStatus {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// New status.
        status: SessionStatus,
    },
    /// The session finished its queued work.
    #[serde(rename = "session.idle")]
    SessionIdle {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
    },
    /// A turn failed.
    #[serde(rename = "session.error")]
    SessionError {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// What went wrong.
        error: MessageError,
    },
    /// The history was compacted.
    #[serde(rename = "session.compacted")]
    SessionCompacted {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
    },
    /// A message was created or changed.
    #[serde(rename = "message.updated")]
    MessageUpdated {
        /// The message.
        info: Message,
    },
    /// The session's file changes (first to last snapshot) were recomputed: per file
    /// `{file, status, additions, deletions}` (OpenCode `session.diff`).
    #[serde(rename = "session.diff")]
    SessionDiff {
        /// Id of the session (`ses_…`) whose changes these are.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The changed files.
        diff: Value,
    },
    /// Something the user should know once, that is not an error (e.g. snapshots are off
    /// for a project that is not a git repository). Not an OpenCode event.
    #[serde(rename = "session.notice")]
    SessionNotice {
        /// Id of the session (`ses_…`) the notice is about.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// One line.
        message: String,
    },
    /// A message was removed.
    #[serde(rename = "message.removed")]
    MessageRemoved {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Id of the message (`msg_…`).
        #[serde(rename = "messageID")]
        message_id: MessageId,
    },
    /// A part was created or changed.
    #[serde(rename = "message.part.updated")]
    PartUpdated {
        /// The part, whole.
        part: Part,
    },
    /// A part was removed (e.g. the partial output of a failed attempt before a retry).
    #[serde(rename = "message.part.removed")]
    PartRemoved {
        /// The part removed.
        #[serde(flatten)]
        part: PartRef,
    },
    /// Text appended to a streaming part (bus only; not stored).
    #[serde(rename = "message.part.delta")]
    PartDelta {
        /// The part appended to.
        #[serde(flatten)]
        part: PartRef,
        /// Field appended to (`text`).
        field: String,
        /// Appended text.
        delta: String,
    },
    /// A command ran (`/NAME`, `troupe run --command`, `POST /session/{id}/command`):
    /// OpenCode's `command.executed`.
    #[serde(rename = "command.executed")]
    CommandExecuted {
        /// The command's name.
        name: String,
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The arguments as typed.
        arguments: String,
        /// The user message the command made (`msg_…`).
        #[serde(rename = "messageID")]
        message_id: MessageId,
    },
    /// A permission request waits for an answer.
    #[serde(rename = "permission.asked")]
    PermissionAsked(Value),
    /// A permission request was answered.
    #[serde(rename = "permission.replied")]
    PermissionReplied {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Id of the permission request (`per_…`).
        #[serde(rename = "requestID")]
        request_id: String,
        /// `once`, `always`, `reject`.
        reply: String,
    },
    /// The `question` tool waits for the user's answers: `{id, sessionID, questions, tool:
    /// {messageID, callID}}`.
    #[serde(rename = "question.asked")]
    QuestionAsked(Value),
    /// A question was answered.
    #[serde(rename = "question.replied")]
    QuestionReplied {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Id of the question (`que_…`).
        #[serde(rename = "requestID")]
        request_id: String,
        /// One list of picked labels (or typed text) per question.
        answers: Vec<Vec<String>>,
    },
    /// A question was dismissed (or dropped with its aborted turn).
    #[serde(rename = "question.rejected")]
    QuestionRejected {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Id of the question (`que_…`).
        #[serde(rename = "requestID")]
        request_id: String,
    },
    /// A session's todo list was replaced (`todowrite`).
    #[serde(rename = "todo.updated")]
    TodoUpdated {
        /// Id of the session (`ses_…`).
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The whole list, in order.
        todos: Vec<crate::todo::Todo>,
    },
    /// An MCP server's state or tool list changed (connected, restarting, failed with its
    /// tools withdrawn, `tools/list_changed`). Same type name as OpenCode's event.
    #[serde(rename = "mcp.tools.changed")]
    McpToolsChanged {
        /// Server name (the key under `mcp` in the config).
        server: String,
        /// `connecting`, `connected`, `restarting`, `failed` or `disabled`.
        status: String,
        /// Tools offered now, as the model sees them (`<server>_<tool>`); empty once failed.
        tools: Vec<String>,
        /// Why the server failed or is restarting.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Event {
    /// The session the event is about, if any.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Event::SessionCreated { info }
            | Event::SessionUpdated { info }
            | Event::SessionDeleted { info } => Some(info.id.as_str()),
            Event::SessionStatus { session_id, .. }
            | Event::SessionIdle { session_id }
            | Event::SessionError { session_id, .. }
            | Event::SessionCompacted { session_id }
            | Event::SessionDiff { session_id, .. }
            | Event::SessionNotice { session_id, .. }
            | Event::MessageRemoved { session_id, .. }
            | Event::PartDelta {
                part: PartRef { session_id, .. },
                ..
            }
            | Event::PartRemoved {
                part: PartRef { session_id, .. },
            }
            | Event::PermissionReplied { session_id, .. }
            | Event::QuestionReplied { session_id, .. }
            | Event::QuestionRejected { session_id, .. }
            | Event::TodoUpdated { session_id, .. }
            | Event::CommandExecuted { session_id, .. } => Some(session_id.as_str()),
            Event::MessageUpdated { info } => Some(info.session_id().as_str()),
            Event::PartUpdated { part } => Some(part.session_id.as_str()),
            Event::PermissionAsked(v) | Event::QuestionAsked(v) => {
                v.get("sessionID").and_then(Value::as_str)
            }
            Event::McpToolsChanged { .. } => None,
        }
    }

    /// The event's type name (`session.status`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::SessionCreated { .. } => "session.created",
            Event::SessionUpdated { .. } => "session.updated",
            Event::SessionDeleted { .. } => "session.deleted",
            Event::SessionStatus { .. } => "session.status",
            Event::SessionIdle { .. } => "session.idle",
            Event::SessionError { .. } => "session.error",
            Event::SessionCompacted { .. } => "session.compacted",
            Event::MessageUpdated { .. } => "message.updated",
            Event::SessionDiff { .. } => "session.diff",
            Event::SessionNotice { .. } => "session.notice",
            Event::MessageRemoved { .. } => "message.removed",
            Event::PartUpdated { .. } => "message.part.updated",
            Event::PartDelta { .. } => "message.part.delta",
            Event::PartRemoved { .. } => "message.part.removed",
            Event::PermissionAsked(_) => "permission.asked",
            Event::CommandExecuted { .. } => "command.executed",
            Event::PermissionReplied { .. } => "permission.replied",
            Event::QuestionAsked(_) => "question.asked",
            Event::QuestionReplied { .. } => "question.replied",
            Event::QuestionRejected { .. } => "question.rejected",
            Event::TodoUpdated { .. } => "todo.updated",
            Event::McpToolsChanged { .. } => "mcp.tools.changed",
        }
    }
}

/// Capacity of the bus ring buffer, events. A subscriber that falls this far behind loses
/// the oldest events (and is told so by `RecvError::Lagged`) instead of slowing the runtime.
/// The ring keeps its last `BUS_CAPACITY` events alive, so this also bounds the memory the
/// bus holds (a few MiB) however many sessions have run.
pub const BUS_CAPACITY: usize = 8_192;

/// The in-process broadcast bus.
///
/// Besides broadcasting, it remembers the last `session.status` of every session that is not
/// idle (`GET /session/status`, OpenCode's map of session id → status): a `busy`, `retry` or
/// `waiting` status is kept until an `idle` status, `session.idle` or `session.deleted` for
/// the same session is published.
#[derive(Debug, Clone)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Event>>,
    statuses: Arc<Mutex<HashMap<SessionId, SessionStatus>>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::new()
    }
}

impl Bus {
    /// A new bus with [`BUS_CAPACITY`].
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(BUS_CAPACITY);
        Self {
            tx,
            statuses: Arc::default(),
        }
    }

    /// Publish (never blocks; dropped when nobody listens).
    pub fn publish(&self, ev: Event) {
        match &ev {
            Event::SessionStatus { session_id, status } => {
                let mut map = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
                if matches!(status, SessionStatus::Idle) {
                    map.remove(session_id);
                } else {
                    map.insert(session_id.clone(), status.clone());
                }
            }
            Event::SessionIdle { session_id } => {
                self.statuses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(session_id);
            }
            Event::SessionDeleted { info } => {
                self.statuses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&info.id);
            }
            _ => {}
        }
        let _ = self.tx.send(Arc::new(ev));
    }

    /// Subscribe to events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// The last published status of every session that is not idle (busy, retry, waiting),
    /// by session id (`ses_…`). Idle sessions are absent, as in OpenCode's `/session/status`.
    pub fn statuses(&self) -> HashMap<SessionId, SessionStatus> {
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: &str, status: SessionStatus) -> Event {
        Event::SessionStatus {
            session_id: id.into(),
            status,
        }
    }

    #[test]
    fn statuses_keep_what_is_not_idle() {
        let bus = Bus::new();
        assert!(bus.statuses().is_empty());
        bus.publish(status("ses_a", SessionStatus::Busy));
        bus.publish(status("ses_b", SessionStatus::Busy));
        bus.publish(status(
            "ses_b",
            SessionStatus::Retry {
                attempt: 2,
                message: "rate limited".into(),
                next: 1_000,
            },
        ));
        let map = bus.statuses();
        assert_eq!(map.len(), 2);
        assert_eq!(map["ses_a"], SessionStatus::Busy);
        assert!(matches!(
            map["ses_b"],
            SessionStatus::Retry { attempt: 2, .. }
        ));
        bus.publish(status("ses_a", SessionStatus::Idle));
        bus.publish(Event::SessionIdle {
            session_id: "ses_b".into(),
        });
        assert!(bus.statuses().is_empty());
        // A clone shares the map (the runtime and the server hold clones).
        let other = bus.clone();
        other.publish(status("ses_c", SessionStatus::Busy));
        assert_eq!(bus.statuses().len(), 1);
    }
}
