//! Why a prompt got no turn result: the error half of a prompt's reply.
//!
//! A turn that ran and failed (a provider error, a step limit, an abort during a step) still
//! ends with a [`crate::TurnResult`] whose `error` says so; a [`TurnError`] means the caller
//! got no result at all: the turn was refused before it started, the session actor went away,
//! or the session failed under supervision. Callers match on the variant; the `Display` text
//! is what the CLI and the API show.

use tokio::sync::oneshot;

/// The reply channel of a queued prompt.
pub type TurnReply = oneshot::Sender<Result<crate::TurnResult, TurnError>>;

/// What a prompt's caller learns when its turn gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The turn could not start: an unknown agent or model, an unusable input (media the
    /// model cannot read, a schema for a model without tool calls), no user message to
    /// resume, a system prompt or tool list that could not be built.
    #[error("{0}")]
    Refused(String),
    /// The session's stored permission ruleset does not decode: running the turn without
    /// it would widen what the session may do.
    #[error(transparent)]
    Ruleset(#[from] troupe_session::UndecodableRuleset),
    /// Another process took the session over (this one's lease lapsed).
    #[error(
        "another process took over this session (its lease lapsed: this process stalled past the lease TTL); the turn was aborted"
    )]
    LeaseLost,
    /// Aborted while it waited in the session's queue.
    #[error("aborted before it started")]
    AbortedBeforeStart,
    /// A steering prompt aborted before the running turn took it.
    #[error("aborted before it was delivered")]
    AbortedBeforeDelivery,
    /// The session actor stopped with the prompt queued or running (runtime shutdown, a
    /// stop that was not a crash).
    #[error("session actor stopped")]
    Stopped,
    /// The session actor ended during the turn and no crash cause was recorded for it.
    #[error("the session actor stopped during the turn")]
    StoppedDuringTurn,
    /// The session actor crashed during the turn and the turn was aborted meanwhile, so it
    /// is not resumed.
    #[error("the session actor crashed ({cause}) and the turn was aborted")]
    CrashedThenAborted {
        /// The crash.
        cause: String,
    },
    /// The session actor crashed more often than `supervision.session_restarts` allows within
    /// the supervision period: the session is failed instead of restarted again.
    #[error(
        "the session failed: its actor crashed {crashes} times within {period_secs} s (supervision.session_restarts = {limit}); last crash: {cause}"
    )]
    Failed {
        /// Crashes within the period.
        crashes: u32,
        /// The supervision period, seconds.
        period_secs: u64,
        /// The configured restart limit.
        limit: u32,
        /// The last crash.
        cause: String,
    },
    /// An aborted turn (a cluster task past its timeout) did not wind down within the grace
    /// period.
    #[error("the aborted turn did not end")]
    AbortDidNotEnd,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts are what the CLI and the API showed when these were strings; scripts and
    /// tests read them.
    #[test]
    fn display_keeps_the_messages_callers_saw() {
        assert_eq!(
            TurnError::Refused("agent not found".into()).to_string(),
            "agent not found"
        );
        assert_eq!(TurnError::Stopped.to_string(), "session actor stopped");
        assert_eq!(
            TurnError::CrashedThenAborted {
                cause: "boom".into()
            }
            .to_string(),
            "the session actor crashed (boom) and the turn was aborted"
        );
        assert_eq!(
            TurnError::Failed {
                crashes: 3,
                period_secs: 60,
                limit: 2,
                cause: "boom".into()
            }
            .to_string(),
            "the session failed: its actor crashed 3 times within 60 s (supervision.session_restarts = 2); last crash: boom"
        );
        let e: TurnError = troupe_session::UndecodableRuleset {
            session_id: "ses_a".into(),
            error: "bad".into(),
        }
        .into();
        assert!(
            e.to_string()
                .starts_with("session ses_a has a permission ruleset that does not decode (bad)")
        );
    }
}
