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

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;
use troupe_config::ResolvedModel;
use troupe_llm::{ChatMessage, StreamEvent};
use troupe_session::UserSummary;

use crate::RuntimeShared;

/// How long a summary may take before it is given up.
pub const SUMMARY_TIMEOUT: Duration = Duration::from_secs(30);
/// Most output tokens of a summary.
pub const SUMMARY_MAX_TOKENS: u64 = 400;

/// Arguments of a summary worker.
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

/// Final state: the summary, if one was made.
pub struct SummaryState {
    _gauge: crate::ActorGauge,
    _node: crate::tree::NodeGuard,
    /// The turn's user message id.
    pub user_id: MessageId,
    /// The summary.
    pub summary: Option<UserSummary>,
    args: Option<SummaryArgs>,
}

/// The summary worker actor.
pub struct SummaryWorker;

/// Its only message: start.
#[derive(Debug)]
pub enum SummaryMsg {
    /// Ask the model.
    Start,
}

impl Actor for SummaryWorker {
    type Msg = SummaryMsg;
    type State = SummaryState;
    type Arguments = SummaryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SummaryMsg>,
        args: SummaryArgs,
    ) -> Result<SummaryState, ActorProcessingErr> {
        myself.cast(SummaryMsg::Start)?;
        let node = args.shared.tree.register_busy(
            crate::tree::Kind::Summary,
            &args.user_id,
            &args.session_id,
            &args.tree_parent,
        );
        Ok(SummaryState {
            _gauge: crate::ActorGauge::new(&args.shared.counters.live_actors),
            _node: node,
            user_id: args.user_id.clone(),
            summary: None,
            args: Some(args),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SummaryMsg>,
        _msg: SummaryMsg,
        state: &mut SummaryState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(args) = state.args.take() {
            state.summary = tokio::time::timeout(SUMMARY_TIMEOUT, ask(args))
                .await
                .ok()
                .flatten();
        }
        myself.stop(None);
        Ok(())
    }
}

async fn ask(args: SummaryArgs) -> Option<UserSummary> {
    let system = args
        .shared
        .agents
        .get("summary")
        .and_then(|a| a.prompt.clone())
        .unwrap_or_else(|| "Summarise the changes made in this conversation.".into());
    let mut messages = vec![ChatMessage::System { content: system }];
    messages.extend(args.turn);
    messages.push(ChatMessage::User {
        content: "Summarise what you did in this conversation.".into(),
        images: Vec::new(),
    });
    let request = crate::request::side_request(
        &args.model,
        messages,
        args.model.max_output_tokens().min(SUMMARY_MAX_TOKENS),
        None,
        &args.session_id,
        Some("summary"),
    );
    let provider = args.shared.provider(&args.model);
    let mut stream = provider
        .stream(request, CancellationToken::new())
        .await
        .ok()?;
    let mut out = String::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(StreamEvent::TextDelta { text, .. }) => out.push_str(&text),
            Ok(StreamEvent::FinishStep { .. }) => break,
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    summary_from_response(&out)
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
