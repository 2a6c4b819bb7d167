//! SessionActor: serializes the prompts of one session and runs the loop.
//!
//! A prompt arriving while a turn runs is queued and runs after it, in order (never
//! interleaved), unless it asked to steer: then it joins the running turn at its next step
//! boundary ([`crate::steer`]). A turn is a series of steps; each step is one linked
//! [`ProcessorActor`].
//! After each step (its `ActorTerminated` carries the [`StepOutcome`]) the loop continues
//! while the step ended in tool calls, and stops when the newest assistant message is newer
//! than the last user message and finished for another reason, when it failed, or when the
//! agent's step limit is reached. When idle with nothing queued, the actor stops itself so
//! finished sessions hold no memory; the next prompt loads the session again.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use troupe_session::MessageId;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use troupe_agents::Agent;
use troupe_config::ResolvedModel;
use troupe_llm::ToolSpec;
use troupe_session::{
    AssistantMessage, Event, Message, MessageError, MessageErrorName, MessagePath,
    MessageWithParts, ModelRef, Part, PartKind, Session, SessionStatus, UserMessage, Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::history::ChatCache;
use crate::processor::{ProcessorActor, ProcessorArgs, ProcessorState, StepResult};
use crate::{PromptInput, RuntimeShared, TurnError, TurnResult};

mod step;
mod turns;
mod workers;

/// A prompt waiting for its turn.
pub struct PendingPrompt {
    /// What to send.
    pub input: PromptInput,
    /// Set when the session actor took the prompt (so a caller knows whether to resend it
    /// to a fresh actor if this one stopped first).
    pub accepted: Arc<AtomicBool>,
    /// Set when the prompt's turn began (so a caller whose actor crashed knows whether to
    /// resend it or to resume its turn).
    pub started: Arc<AtomicBool>,
    /// Continue the session's last turn from the store instead of starting one: no user
    /// message is created (the runtime restarting a crashed session actor).
    pub resume: bool,
    /// Where the turn's result goes.
    pub reply: crate::turn_error::TurnReply,
}

/// Messages of a session actor.
pub enum SessionMsg {
    /// Queue a prompt (boxed: a prompt's input with its resolved parts is far larger than
    /// the other messages).
    Prompt(Box<PendingPrompt>),
    /// Abort the running turn and drop queued prompts.
    Abort,
    /// [`SessionMsg::Abort`] because the caller's deadline for the running turn passed (a
    /// batch task's `timeout`): the same, and the turn's span records `outcome = timeout`.
    AbortTimedOut,
    /// The session's lease was taken over by another process: abort, refuse queued
    /// prompts, stop (the next prompt takes the lease again).
    LeaseLost,
    /// Change the session's title or permission rules (`PATCH /session/{id}`); replies with
    /// the updated session. Goes through the actor because it writes its own copy of the
    /// session on every turn.
    Update(
        crate::SessionPatch,
        oneshot::Sender<Result<Session, String>>,
    ),
    /// A crashed step's backoff ended: start it again (the timer's number; a timer of a
    /// turn that ended or was aborted meanwhile is ignored). Scheduled, not slept in the
    /// handler, so the actor takes aborts, prompts and updates while it waits.
    RetryStep(u64),
    /// The `chat.params` hooks of the step waiting under this number answered (their output
    /// object, or the hook's error).
    StepParams(
        u64,
        Result<serde_json::Map<String, serde_json::Value>, String>,
    ),
}

/// The error of a turn aborted while no step ran (waiting for a retry's backoff or for the
/// `chat.params` hooks): the same a processor gives an aborted step.
fn aborted_between_steps() -> MessageError {
    MessageError::new(MessageErrorName::MessageAborted, "aborted")
}

/// A step's request before its body is built, with what building the body needs.
struct PreparedStep {
    request: troupe_llm::ChatRequest,
    registry: Arc<troupe_tools::Registry>,
    view: troupe_session::compaction::CompactedView,
    wrapped: Option<Vec<troupe_llm::ChatMessage>>,
    delivered: usize,
}

/// The session actor.
pub struct SessionActor;

/// Arguments: the shared runtime and the loaded session with its history.
pub struct SessionArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// The session.
    pub session: Session,
    /// Its messages, oldest first.
    pub history: Vec<MessageWithParts>,
    /// Parent node in the supervision tree (the task tool call of a subagent session).
    pub tree_parent: Option<String>,
    /// The session's lease, held for the actor's life and released when it stops
    /// ([`crate::lease`]).
    pub lease: Option<crate::lease::SessionLease>,
    /// Span the session's span nests under (a subagent's task call); `None`: a root span.
    pub span_parent: Option<tracing::Span>,
}

struct Turn {
    reply: crate::turn_error::TurnReply,
    user_id: MessageId,
    step: u32,
    cancel: CancellationToken,
    agent: Agent,
    model: Arc<ResolvedModel>,
    max_steps: u32,
    system: String,
    /// Tools of this turn only (the structured-output tool); the registry's tools are listed
    /// at each step ([`registry_tools`]), so MCP tools that come or go mid-turn are offered
    /// or withdrawn from the next request.
    tools: Vec<ToolSpec>,
    /// The session's own rules (a subagent's derived ruleset), for each step's tool list.
    session_rules: troupe_agents::Ruleset,
    /// Registry tool descriptions that depend on the session (the `skill` list), computed
    /// once per turn on the blocking pool ([`troupe_tools::Tool::description_in`]).
    descriptions: std::collections::HashMap<String, String>,
    /// The last step's registry tool list and the [`troupe_tools::Registry::generation`] it
    /// was built at: reused while the registry's sources report no change (everything
    /// else it depends on — agent, rules, model, descriptions — is fixed for the turn).
    tool_list: Option<(u64, Arc<[ToolSpec]>)>,
    rules: Arc<troupe_agents::Ruleset>,
    started_cost: rust_decimal::Decimal,
    /// Compactions since the last step that made progress (at most 2 in a row).
    compactions: u32,
    /// Summary attempts of the running compaction (a summary that overflows is retried
    /// once with a smaller input).
    summary_attempts: u32,
    /// This turn only compacts (`session compact`): no continue message, no step.
    compact_only: bool,
    /// The turn was resumed after its session actor crashed: the step that was interrupted
    /// (swept as aborted) does not end the turn.
    resumed: bool,
    /// Crashed steps within the period (`supervision.step_retries`).
    step_crashes: crate::supervision::Intensity,
    /// Steps restarted after a crash in this turn (the next processor's `restarts`).
    step_restarts: u64,
    /// A crashed step waits for its backoff: the [`SessionMsg::RetryStep`] timer that starts
    /// it again (only that timer's message, by its number, does).
    retry_timer: Option<u64>,
    /// A step waits for its `chat.params` hooks ([`SessionMsg::StepParams`] with this
    /// number): what it will send once they answered.
    params_wait: Option<(u64, Box<PreparedStep>)>,
    /// The user message that started the turn (its summary goes there; `user_id` moves on
    /// to a compaction's messages).
    origin_user_id: MessageId,
    /// The turn's span ([`crate::spans::turn`]); closed when the turn ends.
    span: tracing::Span,
    /// The turn was aborted because its caller's deadline passed
    /// ([`SessionMsg::AbortTimedOut`]): its outcome is `timeout`.
    timed_out: bool,
    /// Structured output of a prompt with a JSON schema.
    structured: Option<crate::structured::StructuredTurn>,
    /// Prompts steering this turn ([`crate::steer`]).
    steering: crate::steer::Steering,
    /// The user message the running compaction replays after its summary (the provider
    /// rejected the request as too large): it is sent again instead of "continue".
    replay: Option<MessageId>,
    /// The running compaction follows a complete step ([`crate::turn::AfterSummary::Finish`]):
    /// the user message that step answered (the turn's result is read from its answer, not
    /// from the summary) and the turn's error. Once the summary is stored the turn ends.
    finish_after_summary: Option<(MessageId, Option<MessageError>)>,
}

/// A child the session actor spawned, by role; supervision events are matched against
/// these (never guessed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Child {
    /// The running step.
    Processor,
    /// The compaction worker.
    Compaction,
    /// The title worker.
    Title,
    /// The summary worker.
    Summary,
}

impl Child {
    fn role(self) -> crate::supervision::Role {
        match self {
            Child::Processor => crate::supervision::Role::Processor,
            Child::Compaction => crate::supervision::Role::Compaction,
            Child::Title => crate::supervision::Role::Title,
            Child::Summary => crate::supervision::Role::Summary,
        }
    }
}

/// Session actor state.
pub struct SessionState {
    _gauge: crate::ActorGauge,
    node: crate::tree::NodeGuard,
    shared: Arc<RuntimeShared>,
    session: Session,
    history: Vec<MessageWithParts>,
    cache: ChatCache,
    queue: VecDeque<PendingPrompt>,
    turn: Option<Turn>,
    directory: PathBuf,
    worktree: PathBuf,
    /// Live children by actor id (processor, compaction and title workers). The actor
    /// stays alive while a title worker runs, until it reports.
    children: std::collections::HashMap<ractor::ActorId, Child>,
    /// The session's lease (dropped, and so released, with the state).
    _lease: Option<crate::lease::SessionLease>,
    /// Set when the lease was lost: no more turns start.
    lease_lost: bool,
    /// The span of this actor's life ([`crate::spans::session`]).
    span: tracing::Span,
    /// Spans of running title, summary and compaction workers, closed when they end.
    worker_spans: std::collections::HashMap<ractor::ActorId, tracing::Span>,
    /// Number of the last [`SessionMsg::RetryStep`] timer set.
    timers: u64,
}

impl SessionState {
    fn has_child(&self, kind: Child) -> bool {
        self.children.values().any(|c| *c == kind)
    }

    /// Show the prompts waiting (queued, or steering the turn) on the session's tree node.
    fn sync_waiting(&self) {
        let waiting = self.queue.len() + self.turn.as_ref().map_or(0, |t| t.steering.pending.len());
        self.node.update(|n| n.queued = waiting as u64);
    }
}

pub(crate) fn worktree_of(dir: &std::path::Path) -> PathBuf {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.join(".git").exists() {
            return d.to_path_buf();
        }
        cur = d.parent();
    }
    dir.to_path_buf()
}

impl SessionActor {
    /// Start the next queued prompt, or stop when nothing is queued.
    async fn start_next(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
        if state.lease_lost && state.turn.is_none() {
            for p in state.queue.drain(..) {
                let _ = p.reply.send(Err(TurnError::LeaseLost));
            }
            state
                .shared
                .sessions
                .remove_if(&state.session.id, |_, a| a.get_id() == myself.get_id());
            myself.stop(Some("lease lost".into()));
            return;
        }
        while state.turn.is_none() {
            let Some(p) = state.queue.pop_front() else {
                if state.has_child(Child::Title) || state.has_child(Child::Summary) {
                    // Stay until the title arrives; the worker's end brings us back here.
                    return;
                }
                // Idle: release the actor (and its memory; the heap is trimmed once no
                // session is live, `memory`).
                state.shared.sessions.remove(&state.session.id);
                crate::memory::IdleTrim::session_stopped(&state.shared);
                myself.stop(Some("idle".into()));
                return;
            };
            // A prompt delivered once (a redelivered cluster task) whose user message is
            // already stored resumes that turn instead of asking again.
            let resume = p.resume
                || (p.input.once
                    && state
                        .history
                        .iter()
                        .any(|m| matches!(m.info, Message::User(_))));
            if p.input.no_reply && !resume {
                let _ = p.reply.send(self.store_only(state, &p.input));
                continue;
            }
            match self.begin_turn(state, p.input, resume).await {
                Ok(turn) => {
                    p.started.store(true, Ordering::SeqCst);
                    state.turn = Some(Turn {
                        reply: p.reply,
                        ..turn
                    });
                    state
                        .shared
                        .store
                        .write1(Write::Publish(Event::SessionStatus {
                            session_id: state.session.id.clone(),
                            status: SessionStatus::Busy,
                        }));
                    self.maybe_start_title(myself, state).await;
                    let agent = state.turn.as_ref().map(|t| t.agent.name.clone());
                    let queued = state.queue.len() as u64;
                    state.node.update(|n| {
                        n.status = crate::tree::ActorStatus::Busy;
                        n.agent = agent;
                        n.queued = queued;
                    });
                    if state.turn.as_ref().is_some_and(|t| t.compact_only) {
                        self.start_compaction(myself, state, false, false, false)
                            .await;
                    } else {
                        self.next_step(myself, state).await;
                    }
                }
                Err(e) => {
                    let _ = p.reply.send(Err(e));
                }
            }
        }
    }
}

fn today() -> String {
    let iso = troupe_session::iso_time(now_ms());
    iso[..10].to_string()
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        if let Some(l) = &args.lease {
            // The heartbeat runs in its own task; a lost lease comes back as a message.
            let (lost, dropped) = (l.lost(), l.dropped());
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = lost.cancelled() => { let _ = me.cast(SessionMsg::LeaseLost); }
                    _ = dropped.cancelled() => {}
                }
            });
        }
        let directory = PathBuf::from(&args.session.directory);
        let worktree = worktree_of(&directory);
        let span = crate::spans::session(
            args.span_parent.as_ref(),
            &args.session.id,
            args.session.parent_id.as_deref(),
        );
        Ok(SessionState {
            span,
            worker_spans: std::collections::HashMap::new(),
            timers: 0,
            _gauge: crate::ActorGauge::new(&args.shared.counters.live_actors),
            node: {
                let n = args.shared.tree.register(
                    crate::tree::Kind::Session,
                    &args.session.id,
                    Some(&args.session.id),
                    args.tree_parent.as_deref(),
                );
                n.update(|x| x.agent = args.session.agent.clone());
                n
            },
            shared: args.shared,
            session: args.session,
            history: args.history,
            cache: ChatCache::default(),
            queue: VecDeque::new(),
            turn: None,
            directory,
            worktree,
            children: std::collections::HashMap::new(),
            _lease: args.lease,
            lease_lost: false,
        })
    }

    /// Every await that may start a step, a turn or a child actor is boxed: ractor moves this
    /// handler's future by value several times per message, so its size is copied on every
    /// message (bench README, tenth pass).
    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Prompt(p) => {
                p.accepted.store(true, Ordering::SeqCst);
                let p = *p;
                match state.turn.as_mut() {
                    Some(t)
                        if !t.compact_only
                            && crate::steer::can_join(&p, &t.agent.name, &t.model.full_id()) =>
                    {
                        t.steering.pending.push(p)
                    }
                    _ => state.queue.push_back(p),
                }
                state.sync_waiting();
                if state.turn.is_none() {
                    Box::pin(self.start_next(&myself, state)).await;
                }
            }
            msg @ (SessionMsg::Abort | SessionMsg::AbortTimedOut) => {
                // Background subagents of this session stop with it (OpenCode's cancel
                // cancels a session's background jobs first) unless the config keeps them
                // (`supervision.abort_background: false`).
                if state.shared.config.config.supervision.abort_background() {
                    crate::task::abort_background(&state.shared, &state.session.id);
                }
                for p in state.queue.drain(..) {
                    let _ = p.reply.send(Err(TurnError::AbortedBeforeStart));
                }
                let mut waiting_retry = false;
                if let Some(t) = state.turn.as_mut() {
                    t.timed_out |= matches!(msg, SessionMsg::AbortTimedOut);
                    for p in t.steering.pending.drain(..) {
                        let _ = p.reply.send(Err(TurnError::AbortedBeforeDelivery));
                    }
                    t.cancel.cancel();
                    // Waiting for a retry's backoff or for chat.params hooks: no processor
                    // runs to notice the cancel.
                    waiting_retry = t.retry_timer.take().is_some() | t.params_wait.take().is_some();
                }
                if waiting_retry {
                    Box::pin(self.finish_turn(&myself, state, Some(aborted_between_steps()))).await;
                }
            }
            SessionMsg::StepParams(timer, out) => {
                Box::pin(self.step_params(&myself, state, timer, out)).await;
            }
            SessionMsg::RetryStep(timer) => {
                let Some(t) = state.turn.as_mut() else {
                    return Ok(());
                };
                if t.retry_timer != Some(timer) {
                    return Ok(());
                }
                t.retry_timer = None;
                if t.cancel.is_cancelled() {
                    Box::pin(self.finish_turn(&myself, state, Some(aborted_between_steps()))).await;
                } else {
                    Box::pin(self.start_step(&myself, state)).await;
                }
            }
            SessionMsg::Update(patch, reply) => {
                let applied = patch.apply(&mut state.session);
                if applied.is_ok() {
                    state.shared.store.write1(Write::Session {
                        info: state.session.clone(),
                        created: false,
                    });
                }
                let _ = reply.send(applied.map(|()| state.session.clone()));
            }
            SessionMsg::LeaseLost => {
                let sid = state.session.id.clone();
                tracing::error!("session {sid}: {}", TurnError::LeaseLost);
                state.lease_lost = true;
                state
                    .shared
                    .store
                    .write1(Write::Publish(Event::SessionError {
                        session_id: sid,
                        error: MessageError::new(
                            MessageErrorName::SessionBusy,
                            TurnError::LeaseLost.to_string(),
                        ),
                    }));
                for p in state.queue.drain(..) {
                    let _ = p.reply.send(Err(TurnError::LeaseLost));
                }
                match state.turn.as_mut() {
                    Some(t) => {
                        t.cancel.cancel();
                        if t.retry_timer.take().is_some() | t.params_wait.take().is_some() {
                            Box::pin(self.finish_turn(
                                &myself,
                                state,
                                Some(aborted_between_steps()),
                            ))
                            .await;
                        }
                    }
                    None => Box::pin(self.start_next(&myself, state)).await,
                }
            }
        }
        Ok(())
    }

    /// Boxed awaits as in `handle`, for the same reason.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SessionMsg>,
        evt: SupervisionEvent,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, ended) = match evt {
            SupervisionEvent::ActorTerminated(cell, boxed, _) => (cell, Ok(boxed)),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Err(err.to_string())),
            _ => return Ok(()),
        };
        // Supervise by identity: the child's role was recorded when it was spawned.
        let Some(child) = state.children.remove(&cell.get_id()) else {
            tracing::warn!(
                session = %state.session.id,
                actor = %cell.get_id(),
                "supervision event from an unknown child; ignored"
            );
            return Ok(());
        };
        let worker_span = state.worker_spans.remove(&cell.get_id());
        if let Err(cause) = &ended {
            tracing::error!(session = %state.session.id, role = child.role().as_str(), "child crashed: {cause}");
            let parent = match (&worker_span, &state.turn) {
                (Some(w), _) => w,
                (None, Some(t)) => &t.span,
                (None, None) => &state.span,
            };
            crate::spans::supervision(
                parent,
                crate::spans::Supervision::Crash,
                child.role().as_str(),
                cause,
            );
            state.shared.counters.failure(child.role());
            state.node.add_failure();
        }
        match (child, ended) {
            (Child::Title, ended) => {
                let title = ended
                    .ok()
                    .flatten()
                    .and_then(|mut b| b.take::<crate::title::TitleState>().ok())
                    .and_then(|t| t.output);
                if let Some(t) = title {
                    state.session.title = t;
                    state.session.time.updated = now_ms();
                    state.shared.store.write1(Write::Session {
                        info: state.session.clone(),
                        created: false,
                    });
                }
                if state.turn.is_none() {
                    Box::pin(self.start_next(&myself, state)).await;
                }
            }
            (Child::Summary, ended) => {
                let done = ended
                    .ok()
                    .flatten()
                    .and_then(|mut b| b.take::<crate::summary::SummaryState>().ok());
                if let Some(crate::summary::SummaryState {
                    output: Some((user_id, summary)),
                    ..
                }) = done
                    && let Some(m) = state.history.iter_mut().find(|m| m.info.id() == &user_id)
                    && let Message::User(u) = &mut m.info
                {
                    u.summary = Some(summary);
                    state
                        .shared
                        .store
                        .write1(Write::Message(Message::User(u.clone())));
                }
                if state.turn.is_none() {
                    Box::pin(self.start_next(&myself, state)).await;
                }
            }
            (Child::Compaction, Ok(boxed)) => {
                let done =
                    boxed.and_then(|mut b| b.take::<crate::compaction::CompactionState>().ok());
                Box::pin(self.compaction_done(&myself, state, done)).await;
            }
            (Child::Compaction, Err(cause)) => {
                state.session.time.compacting = None;
                let e = MessageError::new(
                    MessageErrorName::Unknown,
                    format!("the compaction worker crashed: {cause}"),
                );
                Box::pin(self.finish_turn(&myself, state, Some(e))).await;
            }
            (Child::Processor, Ok(boxed)) => {
                let outcome = boxed
                    .and_then(|mut b| b.take::<ProcessorState>().ok())
                    .map(ProcessorState::into_outcome);
                state
                    .shared
                    .faults
                    .check(crate::faults::FaultPoint::SessionStep, &state.session.id);
                match outcome {
                    Some(o) => Box::pin(self.step_done(&myself, state, o)).await,
                    None if state.turn.is_some() => {
                        let e = MessageError::new(
                            MessageErrorName::Unknown,
                            "the step was stopped before it finished",
                        );
                        Box::pin(self.finish_turn(&myself, state, Some(e))).await;
                    }
                    None => {}
                }
            }
            (Child::Processor, Err(cause)) => {
                Box::pin(self.step_crashed(&myself, state, cause)).await
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        for p in state.queue.drain(..) {
            let _ = p.reply.send(Err(TurnError::Stopped));
        }
        if let Some(t) = state.turn.take() {
            t.cancel.cancel();
            for p in t.steering.pending {
                let _ = p.reply.send(Err(TurnError::Stopped));
            }
            for (_, reply) in t.steering.joined {
                let _ = reply.send(Err(TurnError::Stopped));
            }
            let _ = t.reply.send(Err(TurnError::Stopped));
        }
        Ok(())
    }
}
