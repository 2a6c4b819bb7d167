//! Subagents run by other nodes of a cluster (config `cluster.subagents`).
//!
//! A process that joined a cluster (`troupe worker`) installs a [`RemoteSubagents`]
//! ([`crate::Runtime::set_remote_subagents`]). A `task` call whose subagent matches
//! `cluster.subagents` then creates the child session in the shared store as usual (with its
//! derived ruleset) and, instead of spawning the child's actor here, hands the child's turn to
//! the cluster: any worker (this one included) takes it, drives the child session under its
//! own lease and returns the turn's outcome. The parent's call waits for it; an abort of the
//! parent (or the call's end for any other reason) cancels the remote turn.
//!
//! What stays local: a call that continues a child (`task_id`), a background call, and every
//! call in a process without a cluster.

use futures::future::BoxFuture;
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;
use troupe_session::SessionId;

/// One child turn handed to the cluster.
#[derive(Debug, Clone)]
pub struct RemoteTurn {
    /// The child session, already in the shared store (new: no messages yet).
    pub session_id: SessionId,
    /// The subagent's name.
    pub agent: String,
    /// `provider/model` for the turn, if the call chose one.
    pub model: Option<String>,
    /// The prompt the parent wrote for the child.
    pub prompt: String,
    /// The child's working directory (the parent's), absolute; it must exist on the node
    /// that runs the turn.
    pub directory: std::path::PathBuf,
    /// The parent's `task` call id (names the work on the wire and in logs).
    pub call_id: String,
    /// The parent session, whose turn waits for this one (a cluster worker lends the slot
    /// of a task that waits on remote children, so that one worker alone cannot deadlock).
    pub parent_session_id: SessionId,
    /// Cancelled when the parent's call ends before the result came (abort, timeout,
    /// crash): the implementation must then cancel the remote turn.
    pub cancel: CancellationToken,
}

/// The outcome of a [`RemoteTurn`].
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteOutcome {
    /// The turn's final text.
    pub text: String,
    /// `Name: message` of a failed turn.
    pub error: Option<String>,
    /// Cost of the child session, USD.
    pub cost: Decimal,
    /// The node that ran it.
    pub node: String,
}

/// Runs child turns somewhere in a cluster (implemented by `troupe-cluster` over NATS
/// JetStream).
pub trait RemoteSubagents: Send + Sync {
    /// Run `turn` on some node and resolve with its outcome. Errors: the work could not be
    /// handed over, or no outcome came back (a message for the `task` call's error part).
    /// The future ends with `Err` soon after `turn.cancel` is cancelled.
    fn run(&self, turn: RemoteTurn) -> BoxFuture<'static, Result<RemoteOutcome, String>>;
}

/// Whether `agent` matches one of the `cluster.subagents` patterns (`*` matches any run of
/// characters, as in permission patterns).
pub fn is_remote(patterns: &[String], agent: &str) -> bool {
    patterns
        .iter()
        .any(|p| troupe_agents::permission::wildcard_match(agent, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_pick_the_subagents() {
        let p = vec!["explore".to_string(), "review-*".to_string()];
        assert!(is_remote(&p, "explore"));
        assert!(is_remote(&p, "review-security"));
        assert!(!is_remote(&p, "general"));
        assert!(!is_remote(&p, "explorer"));
        assert!(is_remote(&["*".to_string()], "general"));
        assert!(!is_remote(&[], "general"));
    }
}
