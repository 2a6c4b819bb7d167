//! A session: its row, timestamps, revert point, permission ruleset and live status.

use super::*;

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
    pub id: SessionId,
    /// Parent session for subagent sessions.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
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
    pub message_id: MessageId,
    /// The part reverted to, if the revert was to a part.
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<PartId>,
    /// Tree hash of the project just before the revert (what unrevert restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Absolute paths the revert changed (what unrevert puts back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

impl Session {
    /// A new session in `directory`.
    pub fn new(directory: &str, parent_id: Option<SessionId>) -> Self {
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
    pub session_id: SessionId,
    /// Why the stored value does not decode.
    pub error: String,
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
