//! SummaryWorker: says what a turn that changed files did, with the hidden `summary` agent.
//!
//! Started by the session actor when a turn ends whose messages changed files
//! (`file_changes`), unless summaries are off ([`crate::RuntimeOptions::summaries`],
//! `TROUPE_SUMMARY=0`). One short tool-less request on `small_model` when configured, else the
//! session's model, off the critical path like the title: the turn's reply does not wait for
//! it, and any failure just leaves no summary. Its final state carries the summary for the
//! session actor to store on the turn's user message (`summary.title`, `summary.body`).

use std::sync::Arc;
use std::time::Duration;
use troupe_session::{MessageId, SessionId};

use troupe_config::ResolvedModel;
use troupe_llm::ChatMessage;
use troupe_session::UserSummary;

use crate::RuntimeShared;
use crate::side_worker::{SideJob, SideState, SideWorker};

/// How long a summary may take before it is given up.
pub const SUMMARY_TIMEOUT: Duration = Duration::from_secs(30);
/// Most output tokens of a summary.
pub const SUMMARY_MAX_TOKENS: u64 = 400;

/// Arguments of a summary worker: its job.
pub struct SummaryArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// Session id.
    pub session_id: SessionId,
    /// The turn's user message id (where the summary goes).
    pub user_id: MessageId,
    /// The turn converted to model messages (its user message and the answers).
    pub turn: Vec<ChatMessage>,
    /// Model to ask.
    pub model: Arc<ResolvedModel>,
    /// Registry key of the parent node in the supervision tree (the session's).
    pub tree_parent: String,
}

/// The summary worker actor.
pub type SummaryWorker = SideWorker<SummaryArgs>;

/// Final state: the turn's user message id and its summary (`output`), if one was made.
pub type SummaryState = SideState<SummaryArgs>;

impl SideJob for SummaryArgs {
    /// The turn's user message id and the summary to store on it.
    type Output = (MessageId, UserSummary);
    const KIND: crate::tree::Kind = crate::tree::Kind::Summary;
    const TIMEOUT: Duration = SUMMARY_TIMEOUT;

    fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    fn node(&self) -> (&str, &str, &str) {
        (&self.user_id, &self.session_id, &self.tree_parent)
    }

    async fn run(self) -> Option<(MessageId, UserSummary)> {
        let system = self
            .shared
            .agents
            .get("summary")
            .and_then(|a| a.prompt.clone())
            .unwrap_or_else(|| "Summarise the changes made in this conversation.".into());
        let mut messages = vec![ChatMessage::System { content: system }];
        messages.extend(self.turn);
        messages.push(ChatMessage::User {
            content: "Summarise what you did in this conversation.".into(),
            images: Vec::new(),
        });
        let request = crate::request::side_request(
            &self.model,
            messages,
            self.model.max_output_tokens().min(SUMMARY_MAX_TOKENS),
            None,
            &self.session_id,
            Some("summary"),
        );
        let out = crate::side_worker::answer_text(&self.shared, &self.model, request).await?;
        Some((self.user_id, summary_from_response(&out)?))
    }
}

/// The summary from the model's answer: the body is the answer trimmed; the title its first
/// line cleaned like a session title (one line, ≤ 100 chars, no quotes or label). `None` for
/// an empty answer.
pub fn summary_from_response(text: &str) -> Option<UserSummary> {
    let body = text.trim();
    if body.is_empty() {
        return None;
    }
    let title = troupe_session::title::title_from_response(body)?;
    Some(UserSummary {
        title,
        body: body.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_title_is_the_first_line_cleaned() {
        let s =
            summary_from_response("  I added a parser for the config.\nIt checks keys.  ").unwrap();
        assert!(
            s.title.starts_with("I added a parser for the config"),
            "{}",
            s.title
        );
        assert_eq!(s.body, "I added a parser for the config.\nIt checks keys.");
        assert!(summary_from_response("  \n ").is_none());
    }
}
