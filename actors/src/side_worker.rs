//! The one-shot workers a session starts beside its turns, the title and the summary
//! workers: each asks the model once with a tool-less request, off the critical path and
//! under a time limit, and never blocks or fails a turn; any failure (or the time limit) just
//! leaves no result. What they share is here: the actor ([`SideWorker`]: its node in the
//! supervision tree, its live-actor gauge, the time limit, the stop) and reading the text of
//! a side request ([`answer_text`]). What each one asks is its [`SideJob`] (`title.rs`,
//! `summary.rs`); its final state ([`SideState`]) carries the result for the session actor.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::sync::CancellationToken;
use troupe_config::ResolvedModel;
use troupe_llm::{ChatRequest, StreamEvent};

use crate::RuntimeShared;

/// What a one-shot side worker asks, and how it shows in the supervision tree.
pub trait SideJob: Send + 'static {
    /// The result the session actor stores (a title, a summary).
    type Output: Send + 'static;
    /// The worker's node kind in the supervision tree.
    const KIND: crate::tree::Kind;
    /// How long the job may take before it is given up (no result).
    const TIMEOUT: Duration;
    /// Shared runtime parts (the tree and the live-actor counter).
    fn shared(&self) -> &Arc<RuntimeShared>;
    /// The worker's node: its id, its session's id and the registry key of its parent node.
    fn node(&self) -> (&str, &str, &str);
    /// Ask the model; `None` when anything failed.
    fn run(self) -> impl Future<Output = Option<Self::Output>> + Send;
}

/// The actor of a one-shot side job `J`: it starts the job as soon as it is up, waits for it
/// at most [`SideJob::TIMEOUT`] and stops; its final state holds the result.
pub struct SideWorker<J>(PhantomData<fn() -> J>);

impl<J> SideWorker<J> {
    /// The actor value to spawn.
    pub const fn new() -> Self {
        SideWorker(PhantomData)
    }
}

impl<J> Default for SideWorker<J> {
    fn default() -> Self {
        Self::new()
    }
}

/// A side worker's only message: start the job.
#[derive(Debug)]
pub enum SideMsg {
    /// Ask the model.
    Start,
}

/// A side worker's state; its final state carries the result.
pub struct SideState<J: SideJob> {
    _gauge: crate::ActorGauge,
    _node: crate::tree::NodeGuard,
    /// The job's result, if it made one in time.
    pub output: Option<J::Output>,
    job: Option<J>,
}

impl<J: SideJob> Actor for SideWorker<J> {
    type Msg = SideMsg;
    type State = SideState<J>;
    type Arguments = J;

    async fn pre_start(
        &self,
        myself: ActorRef<SideMsg>,
        job: J,
    ) -> Result<SideState<J>, ActorProcessingErr> {
        myself.cast(SideMsg::Start)?;
        let (id, session_id, parent) = job.node();
        let node = job
            .shared()
            .tree
            .register_busy(J::KIND, id, session_id, parent);
        Ok(SideState {
            _gauge: crate::ActorGauge::new(&job.shared().counters.live_actors),
            _node: node,
            output: None,
            job: Some(job),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SideMsg>,
        _msg: SideMsg,
        state: &mut SideState<J>,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(job) = state.job.take() {
            state.output = tokio::time::timeout(J::TIMEOUT, job.run())
                .await
                .ok()
                .flatten();
        }
        myself.stop(None);
        Ok(())
    }
}

/// Send a side `request` to `model`'s provider and collect the text of its answer (up to the
/// end of its step); `None` when the request or its stream failed.
pub async fn answer_text(
    shared: &RuntimeShared,
    model: &ResolvedModel,
    request: ChatRequest,
) -> Option<String> {
    let provider = shared.provider(model);
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
    Some(out)
}
