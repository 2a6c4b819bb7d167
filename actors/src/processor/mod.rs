//! Processor actor: one per assistant step.
//!
//! It streams one LLM request through the provider (in a task that casts each normalized
//! [`StreamEvent`] back to the actor), turns events into parts written through the store,
//! retries retryable failures with the pure retry policy, and, once the stream finished,
//! runs the step's tool calls each in its own linked [`ToolCallActor`]. When everything has
//! settled it stops; its final state ([`StepOutcome`]) reaches the SessionActor in
//! `ActorTerminated`.
//!
//! Tool calls run after the stream finished, so a retried attempt never re-runs a tool that
//! already ran, and a call cut off by the output limit is never executed.
//!
//! This file holds the actor, its messages and state, and the step's life (start, what each
//! message does, the finish). The rest is in sibling modules by purpose: `stream` (the
//! provider request in its task, with retries), `events` (what a stream event does to the
//! parts), `parts` (building, updating and saving the parts), `tool_calls` (running the
//! calls and turning their ends into final tool states) and `clock` (the tool timeout's
//! clock).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use troupe_session::{MessageId, PartId, SessionId};

use futures::StreamExt;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_config::ResolvedModel;
use troupe_llm::{ChatRequest, ErrorKind, FinishReason, LlmError, StreamEvent};
use troupe_session::cost::{StepUsage, usage_cost};
use troupe_session::{
    AssistantMessage, Event, Message, MessageError, MessageErrorName, MessageWithParts, Part,
    PartKind, PartRef, PartTime, SessionStatus, Store, ToolState, ToolTime, Write, now_ms,
};
use troupe_tools::{ToolContext, ToolError, ToolOutput};

use tracing::Instrument;

use crate::RuntimeShared;
use crate::tool_call::{ToolCallActor, ToolCallArgs, ToolCallState};

mod clock;
mod events;
mod parts;
mod stream;
mod tool_calls;

use stream::*;

/// What the session loop does after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepResult {
    /// Run another step if the loop condition says so.
    Continue,
    /// Stop the turn (error, abort).
    Stop,
}

/// Final state of a processor: the finished assistant message and the decision.
pub struct StepOutcome {
    /// The assistant message with all its parts, as stored.
    pub message: MessageWithParts,
    /// Continue or stop.
    pub result: StepResult,
}

/// Messages of a processor.
#[derive(Debug)]
pub enum ProcMsg {
    /// Normalized stream events, in stream order: those the decoder had ready together
    /// (their parts' writes go to the store as one batch).
    Stream(Vec<StreamEvent>),
    /// The stream ended normally.
    StreamEnded,
    /// The stream failed for good.
    StreamFailed(LlmError),
    /// A retryable failure: the next attempt starts at `next` (ms since epoch).
    Retrying {
        /// 1-based attempt that failed.
        attempt: u32,
        /// The failure, as the provider or the client described it.
        message: String,
        /// Next attempt time, ms.
        next: i64,
    },
    /// A new attempt starts: drop what the failed attempt produced.
    ResetAttempt,
    /// Attempt `attempt` (1-based) of the provider request was sent at `at` (ms since epoch).
    AttemptSent {
        /// 1-based attempt number.
        attempt: u32,
        /// When it was sent, ms since the epoch.
        at: i64,
    },
    /// The first stream event of the current attempt arrived at `at` (ms since epoch), taken
    /// in the stream task so a busy mailbox does not delay the time to first token.
    FirstEvent {
        /// When it arrived, ms since the epoch.
        at: i64,
    },
    /// A tool call ran past its timeout.
    ToolTimeout(String),
    /// The backoff of a crashed read-only tool call is over: run it again (call id).
    RestartTool(String),
    /// The turn was cancelled.
    Cancelled,
    /// Grace period after cancellation is over: kill what still runs.
    SettleDeadline,
    /// The project's snapshot before the step (`None`: off or failed).
    SnapshotStarted(Option<String>),
    /// The snapshot after the step and its patch.
    SnapshotFinished(Box<crate::snapshots::Finished>),
}

/// Arguments to start a processor.
pub struct ProcessorArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// The (already stored) assistant message for this step.
    pub assistant: AssistantMessage,
    /// The request to send.
    pub request: ChatRequest,
    /// Model (limits, prices).
    pub model: Arc<ResolvedModel>,
    /// Cancellation of the turn.
    pub cancel: CancellationToken,
    /// Template for tool contexts (session, directories, agent, permission asker).
    pub tool_ctx: ToolContext,
    /// Tool calls made earlier in this user turn (name, input), oldest first, for doom-loop
    /// detection.
    pub prior_calls: Vec<(String, Value)>,
    /// Times this step was started again after a crashed processor (shown in `/actors`).
    pub restarts: u64,
    /// Registry key of the parent node in the supervision tree; `None` = the session's.
    pub tree_parent: Option<String>,
    /// The step's span ([`crate::spans::step`]); provider requests and tool calls nest in it.
    pub span: tracing::Span,
    /// The tools calls are resolved in: the runtime's, or a turn's own (with
    /// `StructuredOutput`).
    pub registry: Arc<troupe_tools::Registry>,
}

/// The processor actor.
pub struct ProcessorActor;

struct PendingCall {
    call_id: String,
    name: String,
    input: String,
    truncated: bool,
    /// Why the call must not run (from the provider layer, e.g. oversized arguments).
    error: Option<String>,
}

/// One started tool call, kept so a crashed read-only call can run again with the same
/// input.
struct CallSpec {
    name: String,
    tool: Arc<dyn troupe_tools::Tool>,
    input: Value,
    role: crate::supervision::Role,
    crashes: crate::supervision::Intensity,
    /// Times it was started again.
    restarts: u64,
}

/// Processor state.
pub struct ProcessorState {
    /// Writes held while a batch of stream events is handled ([`ProcessorState::write`]),
    /// queued together at its end; `None` outside one.
    batch: Option<Vec<Write>>,
    _gauge: crate::ActorGauge,
    node: crate::tree::NodeGuard,
    shared: Arc<RuntimeShared>,
    store: Store,
    assistant: AssistantMessage,
    parts: Vec<Part>,
    index: HashMap<PartId, usize>,
    /// Open text and reasoning blocks and the tool parts, by stream id
    /// ([`crate::stream_parts`]).
    blocks: crate::stream_parts::OpenBlocks,
    calls: Vec<PendingCall>,
    /// Live tool-call children by actor id: the call, how to stop it and its span (where a
    /// timeout or a crash is recorded). Supervision events are matched against this map (an
    /// unknown child is logged, never guessed).
    running: HashMap<ActorId, (String, ActorCell, CancellationToken, tracing::Span)>,
    /// Calls of this step by call id: what is needed to run one again after a crash.
    call_specs: HashMap<String, CallSpec>,
    /// Crashed read-only calls waiting for their backoff before running again.
    restarting: std::collections::HashSet<String>,
    model: Arc<ResolvedModel>,
    cancel: CancellationToken,
    tool_ctx: ToolContext,
    attempt_start: usize,
    stream_done: bool,
    tools_started: bool,
    result: StepResult,
    request: Option<ChatRequest>,
    prior_calls: Vec<(String, Value)>,
    /// Ends the cancel watcher when the processor ends.
    _done: Option<tokio_util::sync::DropGuard>,
    /// Tools offered in this step's request: a call to any other tool is refused, even if
    /// the registry has it (a tool hidden by the agent's permissions stays unusable).
    offered: Vec<String>,
    /// The tools calls are resolved in ([`ProcessorArgs::registry`]).
    registry: Arc<troupe_tools::Registry>,
    /// Snapshots of the step (issue 15; see [`crate::snapshots`]).
    snap: crate::snapshots::StepSnap,
    /// Index of the step-start part.
    step_start: usize,
    /// The stream ended before the snapshot before the step was taken: tools wait for it.
    tools_deferred: bool,
    /// The step's span; closed when the outcome is taken.
    span: tracing::Span,
    /// When the provider request ran, written to the step-start part once the stream ends.
    request_clock: RequestClock,
}

/// What the processor learns about its provider request's timing as it runs.
#[derive(Default)]
struct RequestClock {
    /// When the current attempt was sent and its number.
    sent: Option<(i64, u32)>,
    /// When its first stream event arrived.
    first: Option<i64>,
    /// Already written to the step-start part.
    recorded: bool,
}

pub(crate) fn llm_error_to_message(e: &LlmError, provider_id: &str) -> MessageError {
    let name = match e.kind {
        ErrorKind::Auth => MessageErrorName::ProviderAuth,
        ErrorKind::ContextOverflow => MessageErrorName::ContextOverflow,
        ErrorKind::Aborted => MessageErrorName::MessageAborted,
        _ => MessageErrorName::Api,
    };
    let mut data = serde_json::json!({
        "message": e.message,
        "kind": e.kind,
        "isRetryable": e.is_retryable(),
        "providerID": provider_id,
    });
    if let Some(s) = e.status {
        data["statusCode"] = s.into();
    }
    if let Some(b) = &e.body {
        data["responseBody"] = b.clone().into();
    }
    MessageError { name, data }
}

fn parse_input(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!(
            "arguments must be a JSON object, got {}",
            troupe_config::json_kind(&other)
        )),
        Err(e) => {
            let shown: String = trimmed.chars().take(200).collect();
            Err(format!("arguments are not valid JSON ({e}): {shown}"))
        }
    }
}

impl ProcessorActor {
    fn maybe_finish(&self, myself: &ActorRef<ProcMsg>, state: &mut ProcessorState) {
        if state.stream_done
            && state.tools_started
            && state.running.is_empty()
            && state.restarting.is_empty()
        {
            // Snapshot after the step (in a task; this runs again when it reports back).
            match &state.snap {
                crate::snapshots::StepSnap::Starting | crate::snapshots::StepSnap::Finishing => {
                    return;
                }
                crate::snapshots::StepSnap::Started(Some(start)) => {
                    let (start, me) = (start.clone(), myself.clone());
                    state.snap = crate::snapshots::StepSnap::Finishing;
                    crate::snapshots::finish(
                        &state.shared,
                        &state.tool_ctx.directory,
                        &state.assistant.session_id,
                        start,
                        move |done| {
                            let _ = me.cast(ProcMsg::SnapshotFinished(Box::new(done)));
                        },
                    );
                    return;
                }
                _ => {}
            }
            state.close_open_blocks();
            state.fail_unfinished_tools("Tool execution aborted", true);
            if state.cancel.is_cancelled() && state.assistant.error.is_none() {
                state.assistant.error = Some(MessageError::new(
                    MessageErrorName::MessageAborted,
                    "aborted",
                ));
                state.result = StepResult::Stop;
            }
            state.assistant.time.completed = Some(now_ms());
            state.save_message();
            myself.stop(None);
        }
    }
}

impl Actor for ProcessorActor {
    type Msg = ProcMsg;
    type State = ProcessorState;
    type Arguments = ProcessorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ProcMsg>,
        args: ProcessorArgs,
    ) -> Result<ProcessorState, ActorProcessingErr> {
        let mut offered: Vec<String> = args.request.tools.iter().map(|t| t.name.clone()).collect();
        offered.sort();
        Ok(ProcessorState {
            batch: None,
            span: args.span,
            _gauge: crate::ActorGauge::new(&args.shared.counters.live_actors),
            node: {
                let n = args.shared.tree.register(
                    crate::tree::Kind::Processor,
                    &args.assistant.id,
                    Some(&args.assistant.session_id),
                    Some(&args.tree_parent.clone().unwrap_or_else(|| {
                        crate::tree::node_key(
                            crate::tree::Kind::Session,
                            &args.assistant.session_id,
                        )
                    })),
                );
                n.update(|x| {
                    x.status = crate::tree::ActorStatus::Busy;
                    x.agent = Some(args.assistant.agent.clone());
                    x.restarts = args.restarts;
                });
                n
            },
            store: args.shared.store.clone(),
            shared: args.shared,
            assistant: args.assistant,
            parts: Vec::new(),
            index: HashMap::new(),
            blocks: Default::default(),
            calls: Vec::new(),
            running: HashMap::new(),
            model: args.model,
            cancel: args.cancel,
            tool_ctx: args.tool_ctx,
            attempt_start: 0,
            stream_done: false,
            tools_started: false,
            result: StepResult::Continue,
            request: Some(args.request),
            prior_calls: args.prior_calls,
            call_specs: HashMap::new(),
            restarting: std::collections::HashSet::new(),
            _done: None,
            offered,
            registry: args.registry,
            snap: crate::snapshots::StepSnap::Off,
            step_start: 0,
            tools_deferred: false,
            request_clock: RequestClock::default(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<ProcMsg>,
        state: &mut ProcessorState,
    ) -> Result<(), ActorProcessingErr> {
        state.step_start = state.push_part(PartKind::StepStart {
            snapshot: None,
            request: None,
        });
        let me = myself.clone();
        state.snap = crate::snapshots::begin(
            &state.shared,
            &state.tool_ctx.directory,
            &state.assistant.session_id,
            move |tree| {
                let _ = me.cast(ProcMsg::SnapshotStarted(tree));
            },
        );
        state.attempt_start = state.parts.len();
        let request = state.request.take().unwrap_or_default();
        spawn_stream_task(
            myself.clone(),
            state.shared.clone(),
            state.model.clone(),
            request,
            state.cancel.clone(),
            StreamSpan {
                step: state.span.clone(),
                session_id: state.assistant.session_id.clone(),
                message_id: state.assistant.id.clone(),
            },
        );
        // Watch the turn's token only while this step lives: the guard in the state ends the
        // watcher when the processor ends (a watcher left waiting on a token that is never
        // cancelled would keep the actor's mailbox alive for the whole turn and beyond).
        let cancel = state.cancel.clone();
        let done = CancellationToken::new();
        state._done = Some(done.clone().drop_guard());
        let me = myself.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => { let _ = me.cast(ProcMsg::Cancelled); }
                _ = done.cancelled() => {}
            }
        });
        Ok(())
    }

    /// The awaits that spawn tool-call actors are boxed: ractor moves this handler's future
    /// by value several times per message (into its signal `select!` and the loop's state),
    /// so its size is copied on every message; unboxed, `spawn_linked`'s future made every
    /// stream batch and timestamp pay for the rare spawn (bench README, tenth pass).
    async fn handle(
        &self,
        myself: ActorRef<ProcMsg>,
        msg: ProcMsg,
        state: &mut ProcessorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProcMsg::Stream(events) => {
                // The events' writes are queued as one batch (one store job); with faults
                // armed each event's writes go before the next check, so a crash keeps what
                // the events before it wrote, as one event a message did.
                let armed = state.shared.faults.armed();
                state.batch = Some(Vec::new());
                for ev in events {
                    if armed {
                        state.send_batch();
                        state.batch = Some(Vec::new());
                    }
                    state.shared.faults.check(
                        crate::faults::FaultPoint::ProcessorEvent,
                        &state.assistant.id,
                    );
                    if !state.stream_done {
                        self.handle_event(state, ev);
                    }
                }
                state.send_batch();
            }
            ProcMsg::AttemptSent { attempt, at } => {
                state.request_clock.sent = Some((at, attempt));
                state.request_clock.first = None;
            }
            ProcMsg::FirstEvent { at } => {
                state.request_clock.first.get_or_insert(at);
            }
            ProcMsg::StreamEnded => {
                state.stream_done = true;
                state.record_request_time();
                state.close_open_blocks();
                state.fail_orphan_tool_parts();
                if state.assistant.finish.is_none() {
                    state.assistant.finish = Some(FinishReason::Unknown.as_str().to_string());
                    state.save_message();
                }
                if state.cancel.is_cancelled() {
                    state.calls.clear();
                }
                if state.snap == crate::snapshots::StepSnap::Starting {
                    // No tool may change a file before the tree it is compared with exists.
                    state.tools_deferred = true;
                    return Ok(());
                }
                Box::pin(self.start_tools(&myself, state)).await;
                self.maybe_finish(&myself, state);
            }
            ProcMsg::SnapshotStarted(tree) => {
                if let Some(t) = &tree
                    && let PartKind::StepStart { snapshot, .. } =
                        &mut state.parts[state.step_start].kind
                {
                    *snapshot = Some(t.clone());
                    state.save_part(state.step_start);
                }
                state.snap = crate::snapshots::StepSnap::Started(tree);
                if std::mem::take(&mut state.tools_deferred) && !state.tools_started {
                    if state.cancel.is_cancelled() {
                        state.calls.clear();
                    }
                    Box::pin(self.start_tools(&myself, state)).await;
                }
                self.maybe_finish(&myself, state);
            }
            ProcMsg::SnapshotFinished(done) => {
                if let Some(tree) = done.tree
                    && let Some(i) = state
                        .parts
                        .iter()
                        .rposition(|p| matches!(p.kind, PartKind::StepFinish { .. }))
                    && let PartKind::StepFinish { snapshot, .. } = &mut state.parts[i].kind
                {
                    *snapshot = Some(tree);
                    state.save_part(i);
                }
                if let Some(patch) = done.patch {
                    state.push_part(patch);
                }
                state.snap = crate::snapshots::StepSnap::Done;
                self.maybe_finish(&myself, state);
            }
            ProcMsg::StreamFailed(e) => {
                state.stream_done = true;
                state.record_request_time();
                state.tools_started = true;
                state.calls.clear();
                state.close_open_blocks();
                state.fail_unfinished_tools(
                    if e.kind == ErrorKind::Aborted {
                        "Tool execution aborted"
                    } else {
                        "Tool call not executed: the step failed"
                    },
                    e.kind == ErrorKind::Aborted,
                );
                state.assistant.error = Some(llm_error_to_message(&e, &state.model.provider_id));
                if state.assistant.finish.is_none() {
                    state.assistant.finish = Some(FinishReason::Error.as_str().to_string());
                }
                state.result = StepResult::Stop;
                if e.kind != ErrorKind::Aborted {
                    state.store.write1(Write::Publish(Event::SessionError {
                        session_id: state.assistant.session_id.clone(),
                        error: llm_error_to_message(&e, &state.model.provider_id),
                    }));
                }
                self.maybe_finish(&myself, state);
            }
            ProcMsg::Retrying {
                attempt,
                message,
                next,
            } => {
                state
                    .node
                    .update(|n| n.status = crate::tree::ActorStatus::Retry);
                state.store.write1(Write::Publish(Event::SessionStatus {
                    session_id: state.assistant.session_id.clone(),
                    status: SessionStatus::Retry {
                        attempt,
                        message,
                        next,
                    },
                }));
            }
            ProcMsg::ResetAttempt => {
                state
                    .node
                    .update(|n| n.status = crate::tree::ActorStatus::Busy);
                // Drop what the failed attempt produced; the step starts over.
                let removed: Vec<Part> = state.parts.drain(state.attempt_start..).collect();
                for p in removed {
                    state.index.remove(&p.id);
                    state.store.write1(Write::RemovePart(p));
                }
                state.blocks = Default::default();
                state.calls.clear();
                state.assistant.finish = None;
                state.store.write1(Write::Publish(Event::SessionStatus {
                    session_id: state.assistant.session_id.clone(),
                    status: SessionStatus::Busy,
                }));
            }
            ProcMsg::ToolTimeout(call_id) => self.tool_timed_out(&myself, state, call_id),
            ProcMsg::RestartTool(call_id) => {
                if state.restarting.remove(&call_id) {
                    if state.cancel.is_cancelled() {
                        // Aborted during the backoff: the part ends as aborted below.
                    } else {
                        Box::pin(self.spawn_tool(&myself, state, &call_id)).await;
                    }
                    self.maybe_finish(&myself, state);
                }
            }
            ProcMsg::Cancelled => {
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                    let _ = me.cast(ProcMsg::SettleDeadline);
                });
            }
            ProcMsg::SettleDeadline => {
                for (_, (_, cell, _, _)) in state.running.drain() {
                    cell.kill();
                }
                state.restarting.clear();
                state.stream_done = true;
                state.tools_started = true;
                self.maybe_finish(&myself, state);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ProcMsg>,
        evt: SupervisionEvent,
        state: &mut ProcessorState,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop because a child ended: turn it into the tool part's final state.
        match evt {
            SupervisionEvent::ActorTerminated(cell, boxed, _reason) => {
                self.tool_ended(&myself, state, cell, boxed);
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                let Some((call_id, _, done_token, span)) = state.running.remove(&cell.get_id())
                else {
                    tracing::warn!(actor = %cell.get_id(), "supervision event from an unknown child of a step; ignored");
                    return Ok(());
                };
                crate::spans::tool_call_end(&span, "crashed");
                // The call is over: end its timeout timer (and anything still holding its token).
                done_token.cancel();
                self.tool_crashed(&myself, state, call_id, err.to_string());
                self.maybe_finish(&myself, state);
            }
            _ => {}
        }
        Ok(())
    }
}

impl ProcessorState {
    /// The outcome handed to the session once the processor stopped.
    pub fn into_outcome(self) -> StepOutcome {
        let a = &self.assistant;
        crate::spans::step_end(
            &self.span,
            a.finish.as_deref(),
            a.tokens.input,
            a.tokens.output,
            a.error.as_ref().map(|e| e.message()).as_deref(),
        );
        StepOutcome {
            message: MessageWithParts {
                info: Message::Assistant(self.assistant),
                parts: self.parts,
            },
            result: self.result,
        }
    }
}
