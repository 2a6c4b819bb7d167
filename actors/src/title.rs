//! TitleWorker: names a session after its first user message.
//!
//! Started by the session actor when a root session with the default title gets its first
//! user message. It asks the hidden `title` agent (temperature 0.5) on `small_model` when
//! configured, else the session's model, and cleans the answer
//! (troupe-session `title::title_from_response`: one line, ≤ 100 chars, no quotes).
//! It runs beside the turn and never blocks or fails it: any error just leaves the default
//! title. Its final state carries the title for the session actor to store.

use std::sync::Arc;
use std::time::Duration;
use troupe_session::SessionId;

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;
use troupe_config::ResolvedModel;
use troupe_llm::StreamEvent;

use crate::RuntimeShared;

/// How long a title may take before it is given up.
pub const TITLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Arguments of a title worker.
pub struct TitleArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// Session id.
    pub session_id: SessionId,
    /// The first user message's text.
    pub text: String,
    /// Model to ask.
    pub model: Arc<ResolvedModel>,
    /// Registry key of the parent node in the supervision tree (the session's).
    pub tree_parent: String,
}

/// Final state: the title, if one was made.
pub struct TitleState {
    _gauge: crate::ActorGauge,
    _node: crate::tree::NodeGuard,
    /// The cleaned title.
    pub title: Option<String>,
    args: Option<TitleArgs>,
}

/// The title worker actor.
pub struct TitleWorker;

/// Its only message: start.
#[derive(Debug)]
pub enum TitleMsg {
    /// Ask the model.
    Start,
}

impl Actor for TitleWorker {
    type Msg = TitleMsg;
    type State = TitleState;
    type Arguments = TitleArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TitleMsg>,
        args: TitleArgs,
    ) -> Result<TitleState, ActorProcessingErr> {
        myself.cast(TitleMsg::Start)?;
        let node = args.shared.tree.register_busy(
            crate::tree::Kind::Title,
            &args.session_id,
            &args.session_id,
            &args.tree_parent,
        );
        Ok(TitleState {
            _gauge: crate::ActorGauge::new(&args.shared.counters.live_actors),
            _node: node,
            title: None,
            args: Some(args),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TitleMsg>,
        _msg: TitleMsg,
        state: &mut TitleState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(args) = state.args.take() {
            state.title = tokio::time::timeout(TITLE_TIMEOUT, ask(args))
                .await
                .ok()
                .flatten();
        }
        myself.stop(None);
        Ok(())
    }
}

async fn ask(args: TitleArgs) -> Option<String> {
    let agent = args.shared.agents.get("title").cloned();
    let system = agent
        .as_ref()
        .and_then(|a| a.prompt.clone())
        .unwrap_or_else(|| "Write a short title.".into());
    let request = crate::request::title_request(
        &args.model,
        &system,
        agent.as_ref().and_then(|a| a.temperature),
        &args.text,
        &args.session_id,
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
    troupe_session::title::title_from_response(&out)
}
