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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_config::ResolvedModel;
use troupe_llm::{ChatRequest, ErrorKind, FinishReason, LlmError, StreamEvent};
use troupe_session::cost::{StepUsage, usage_cost};
use troupe_session::{
    AssistantMessage, Event, Message, MessageError, MessageErrorName, MessageWithParts, Part,
    PartKind, PartTime, SessionStatus, Store, ToolState, ToolTime, Write, now_ms,
};
use troupe_tools::{ToolContext, ToolError, ToolOutput};

use tracing::Instrument;

use crate::RuntimeShared;
use crate::tool_call::{ToolCallActor, ToolCallArgs, ToolCallState};

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
    /// A normalized stream event.
    Stream(StreamEvent),
    /// The stream ended normally.
    StreamEnded,
    /// The stream failed for good.
    StreamFailed(LlmError),
    /// A retryable failure: the next attempt starts at `next` (ms since epoch).
    Retrying {
        /// 1-based attempt that failed.
        attempt: u32,
        /// Why.
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
    SnapshotFinished(crate::snapshots::Finished),
}

/// Arguments to start a processor.
pub struct ProcessorArgs {
    /// Shared runtime parts.
    pub rt: Arc<RuntimeShared>,
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
    _gauge: crate::ActorGauge,
    node: crate::tree::NodeGuard,
    rt: Arc<RuntimeShared>,
    store: Store,
    assistant: AssistantMessage,
    parts: Vec<Part>,
    index: HashMap<String, usize>,
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

impl ProcessorState {
    fn push_part(&mut self, kind: PartKind) -> usize {
        let part = Part::new(&self.assistant.session_id, &self.assistant.id, kind);
        self.index.insert(part.id.clone(), self.parts.len());
        self.store.write1(Write::Part(part.clone()));
        self.parts.push(part);
        self.parts.len() - 1
    }

    fn save_part(&self, i: usize) {
        self.store.write1(Write::Part(self.parts[i].clone()));
    }

    /// Writes the request's timing on the step-start part (once, when the stream ended or
    /// failed); nothing when no attempt was ever sent.
    fn record_request_time(&mut self) {
        if std::mem::replace(&mut self.request_clock.recorded, true) {
            return;
        }
        let Some((start, attempts)) = self.request_clock.sent else {
            return;
        };
        let i = self.step_start;
        if let Some(PartKind::StepStart { request, .. }) =
            self.parts.get_mut(i).map(|p| &mut p.kind)
        {
            *request = Some(troupe_session::RequestTime {
                start,
                first_token: self.request_clock.first,
                end: now_ms(),
                attempts,
            });
            self.save_part(i);
        }
    }

    /// The tool part of `call_id`, opened when the stream gave it none.
    fn tool_part(&mut self, call_id: &str, name: &str) -> usize {
        if let Some(&i) = self.blocks.tool.get(call_id) {
            return i;
        }
        let i = self.push_part(PartKind::Tool {
            call_id: call_id.to_string(),
            tool: name.to_string(),
            state: ToolState::Pending {
                input: Value::Object(Default::default()),
                raw: String::new(),
            },
        });
        self.blocks.tool.insert(call_id.to_string(), i);
        i
    }

    fn set_tool_state(&mut self, i: usize, new_state: ToolState, tool_name: Option<String>) {
        if new_state.is_final() {
            let tool = tool_name.clone().or_else(|| match &self.parts[i].kind {
                PartKind::Tool { tool, .. } => Some(tool.clone()),
                _ => None,
            });
            self.rt.counters.incr(
                "tool_calls_total",
                format!(
                    "tool=\"{}\",outcome=\"{}\"",
                    tool.unwrap_or_default(),
                    new_state.status()
                ),
                1,
            );
        }
        if let PartKind::Tool { state, tool, .. } = &mut self.parts[i].kind {
            *state = new_state;
            if let Some(n) = tool_name {
                *tool = n;
            }
        }
        self.save_part(i);
    }

    fn close_open_blocks(&mut self) {
        let now = now_ms();
        let open: Vec<usize> = self
            .blocks
            .text
            .drain()
            .map(|(_, i)| i)
            .chain(self.blocks.reasoning.drain().map(|(_, i)| i))
            .collect();
        for i in open {
            match &mut self.parts[i].kind {
                PartKind::Text { time: Some(t), .. } if t.end.is_none() => t.end = Some(now),
                PartKind::Reasoning { time, .. } if time.end.is_none() => time.end = Some(now),
                _ => continue,
            }
            self.save_part(i);
        }
    }

    /// End every tool part the stream opened but never completed into a call (a tool block
    /// cut off, restarted or never stopped): it cannot run, and must not stay `pending`.
    fn fail_orphan_tool_parts(&mut self) {
        let now = now_ms();
        for i in 0..self.parts.len() {
            let orphan = match &self.parts[i].kind {
                PartKind::Tool {
                    call_id,
                    state: ToolState::Pending { .. },
                    ..
                } => !self.calls.iter().any(|c| &c.call_id == call_id),
                _ => false,
            };
            if orphan {
                let st = ToolState::Error {
                    input: Value::Object(Default::default()),
                    error: "The stream ended before this tool call was complete, so it was not executed.".into(),
                    metadata: None,
                    time: ToolTime {
                        start: now,
                        end: Some(now),
                        compacted: None,
                    },
                };
                self.set_tool_state(i, st, None);
            }
        }
    }

    /// End every unfinished tool part with `error`.
    fn fail_unfinished_tools(&mut self, error: &str, interrupted: bool) {
        let now = now_ms();
        for i in 0..self.parts.len() {
            let new_state = match &self.parts[i].kind {
                PartKind::Tool { state, .. } if !state.is_final() => {
                    let start = match state {
                        ToolState::Running { time, .. } => time.start,
                        _ => now,
                    };
                    let metadata = match state {
                        ToolState::Running {
                            metadata: Some(m), ..
                        } => {
                            let mut m = m.clone();
                            if interrupted && let Some(o) = m.as_object_mut() {
                                o.insert("interrupted".into(), Value::Bool(true));
                            }
                            Some(m)
                        }
                        _ if interrupted => Some(serde_json::json!({"interrupted": true})),
                        _ => None,
                    };
                    ToolState::Error {
                        input: state.input().clone(),
                        error: error.to_string(),
                        metadata,
                        time: ToolTime {
                            start,
                            end: Some(now),
                            compacted: None,
                        },
                    }
                }
                _ => continue,
            };
            self.set_tool_state(i, new_state, None);
        }
    }

    fn save_message(&self) {
        self.store
            .write1(Write::Message(Message::Assistant(self.assistant.clone())));
    }
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
            json_kind(&other)
        )),
        Err(e) => {
            let shown: String = trimmed.chars().take(200).collect();
            Err(format!("arguments are not valid JSON ({e}): {shown}"))
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How one provider request attempt ended.
enum Attempt {
    /// Nothing more to do for this step's task: the stream ended (and was reported) or the
    /// processor is gone.
    Over,
    /// The request or its stream failed: retry or report it.
    Failed(LlmError),
}

/// The step's span and the ids its provider-request spans carry.
struct StreamSpan {
    step: tracing::Span,
    session_id: String,
    message_id: String,
}

fn spawn_stream_task(
    myself: ActorRef<ProcMsg>,
    rt: Arc<RuntimeShared>,
    model: Arc<ResolvedModel>,
    mut request: ChatRequest,
    cancel: CancellationToken,
    span: StreamSpan,
) {
    let watcher = myself.clone();
    let task = tokio::spawn(async move {
        let model_name = model.full_id();
        let provider = rt.provider(&model);
        let max_attempts = rt.opts.max_retries.saturating_add(1).max(1);
        let mut attempt: u32 = 0;
        // Sum of this step's retry waits so far, for `max_retry_time`.
        let mut waited = Duration::ZERO;
        let limiter_key = model.provider_id.clone();
        loop {
            attempt += 1;
            // Shared back-off: another session's 429 holds every request to this provider.
            let until = rt.rate_limits.get(&limiter_key).map(|v| *v).unwrap_or(0);
            let wait = until - now_ms();
            if wait > 0 {
                tokio::select! {
                    _ = cancel.cancelled() => {
                        let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(ErrorKind::Aborted, "aborted")));
                        return;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
                }
            }
            rt.counters.incr(
                "provider_requests_started_total",
                format!("provider=\"{}\"", model.provider_id),
                1,
            );
            // Only an attempt that may be retried needs its own copy of the request (the
            // whole history and tool schemas); the last permitted attempt takes it.
            let mut this_request = if attempt >= max_attempts {
                std::mem::take(&mut request)
            } else {
                request.clone()
            };
            let req_span = crate::spans::provider_request(
                &span.step,
                &span.session_id,
                &span.message_id,
                &model_name,
                attempt,
            );
            // W3C trace context: a traced gateway or inference server joins this trace.
            if let Some(tp) = crate::spans::traceparent(&req_span) {
                this_request
                    .headers
                    .retain(|(k, _)| !k.eq_ignore_ascii_case("traceparent"));
                this_request.headers.push(("traceparent".into(), tp));
            }
            let sent = std::time::Instant::now();
            let _ = myself.cast(ProcMsg::AttemptSent {
                attempt,
                at: now_ms(),
            });
            // The whole attempt, sending and reading the stream, runs inside its span, so the
            // span (and its exported duration) ends with the stream.
            let ended = async {
                let mut first_event = true;
                let mut stream = match provider.stream(this_request, cancel.clone()).await {
                    Ok(stream) => stream,
                    Err(e) => return Attempt::Failed(e),
                };
                loop {
                    let next = tokio::select! {
                        _ = cancel.cancelled() => {
                            return Attempt::Failed(LlmError::new(ErrorKind::Aborted, "aborted"));
                        }
                        n = stream.next() => n,
                    };
                    match next {
                        Some(Ok(StreamEvent::Warning { message })) => {
                            tracing::warn!(provider = %model.provider_id, "{message}");
                            rt.counters.incr(
                                "stream_data_skipped_total",
                                format!("provider=\"{}\"", model.provider_id),
                                1,
                            );
                        }
                        Some(Ok(ev)) => {
                            if std::mem::take(&mut first_event) {
                                req_span.record("ttft_ms", sent.elapsed().as_millis() as u64);
                                let _ = myself.cast(ProcMsg::FirstEvent { at: now_ms() });
                            }
                            if let StreamEvent::FinishStep { usage, .. } = &ev {
                                req_span.record("tokens_input", usage.input);
                                req_span.record("tokens_output", usage.output);
                            }
                            if myself.cast(ProcMsg::Stream(ev)).is_err() {
                                return Attempt::Over;
                            }
                        }
                        Some(Err(e)) => return Attempt::Failed(e),
                        None => {
                            crate::spans::provider_request_end(&req_span, "ok");
                            rt.counters.incr(
                                "provider_requests_total",
                                format!("provider=\"{}\",status=\"ok\"", model.provider_id),
                                1,
                            );
                            let _ = myself.cast(ProcMsg::StreamEnded);
                            return Attempt::Over;
                        }
                    }
                }
            }
            .instrument(req_span.clone())
            .await;
            let failure = match ended {
                Attempt::Over => return,
                Attempt::Failed(f) => f,
            };
            let status = if failure.timeout {
                "timeout".to_string()
            } else {
                format!("{:?}", failure.kind)
            };
            crate::spans::provider_request_end(&req_span, &status);
            drop(req_span);
            rt.counters.incr(
                "provider_requests_total",
                format!(
                    "provider=\"{}\",status=\"{:?}\"",
                    model.provider_id, failure.kind
                ),
                1,
            );
            if cancel.is_cancelled() {
                let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(
                    ErrorKind::Aborted,
                    "aborted",
                )));
                return;
            }
            // A provider that cannot be reached at all (DNS, connection refused) is more likely
            // misconfigured than briefly down: give it 2 retries (2 s + 4 s), not the full cap.
            let unreachable = failure.message.starts_with("cannot reach provider");
            if !failure.is_retryable() || attempt >= max_attempts || (unreachable && attempt >= 3) {
                let _ = myself.cast(ProcMsg::StreamFailed(failure));
                return;
            }
            let delay =
                troupe_llm::retry::retry_delay(attempt, &failure.retry_headers, SystemTime::now());
            let delay = delay.min(rt.opts.max_retry_delay);
            if let Some(cap) = rt.opts.max_retry_time
                && waited + delay > cap
            {
                let mut failure = failure;
                failure.message = format!(
                    "{} (gave up after {attempt} attempt{}: another retry would pass the {:.1}s retry-time cap)",
                    failure.message,
                    if attempt == 1 { "" } else { "s" },
                    cap.as_secs_f64()
                );
                let _ = myself.cast(ProcMsg::StreamFailed(failure));
                return;
            }
            waited += delay;
            let next = now_ms() + delay.as_millis() as i64;
            rt.counters.incr(
                "retries_total",
                format!("provider=\"{}\"", model.provider_id),
                1,
            );
            if failure.kind == ErrorKind::RateLimit {
                rt.rate_limits
                    .entry(limiter_key.clone())
                    .and_modify(|v| *v = (*v).max(next))
                    .or_insert(next);
            }
            let _ = myself.cast(ProcMsg::Retrying {
                attempt,
                message: failure.message.clone(),
                next,
            });
            let _wait = crate::spans::retry_wait(
                &span.step,
                &span.session_id,
                &span.message_id,
                attempt,
                delay.as_millis() as u64,
                &failure.message,
            );
            tokio::select! {
                _ = cancel.cancelled() => {
                    let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(ErrorKind::Aborted, "aborted")));
                    return;
                }
                _ = tokio::time::sleep(delay) => {}
            }
            if myself.cast(ProcMsg::ResetAttempt).is_err() {
                return;
            }
        }
    });
    // A panic in the provider task fails this step with an error instead of leaving the
    // processor waiting forever.
    tokio::spawn(async move {
        if let Err(e) = task.await
            && e.is_panic()
        {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            let _ = watcher.cast(ProcMsg::StreamFailed(LlmError::new(
                ErrorKind::Transport,
                format!("the provider task panicked: {msg}"),
            )));
        }
    });
}

impl ProcessorActor {
    /// Carry out what a stream event does to the step's parts (decided by
    /// [`crate::stream_parts::step`]).
    fn handle_event(&self, state: &mut ProcessorState, ev: StreamEvent) {
        use crate::stream_parts::{NewPart, PartAction};
        for action in crate::stream_parts::step(&mut state.blocks, state.parts.len(), ev) {
            match action {
                PartAction::Open(NewPart::Text) => {
                    state.push_part(PartKind::Text {
                        text: String::new(),
                        synthetic: false,
                        time: Some(PartTime {
                            start: now_ms(),
                            end: None,
                        }),
                    });
                }
                PartAction::Open(NewPart::Reasoning) => {
                    state.push_part(PartKind::Reasoning {
                        text: String::new(),
                        metadata: None,
                        time: PartTime {
                            start: now_ms(),
                            end: None,
                        },
                    });
                }
                PartAction::Open(NewPart::Tool { call_id, name }) => {
                    state.push_part(PartKind::Tool {
                        call_id,
                        tool: name,
                        state: ToolState::Pending {
                            input: Value::Object(Default::default()),
                            raw: String::new(),
                        },
                    });
                }
                PartAction::Append { part, delta } => {
                    match &mut state.parts[part].kind {
                        PartKind::Text { text, .. } | PartKind::Reasoning { text, .. } => {
                            text.push_str(&delta)
                        }
                        _ => continue,
                    }
                    let p = &state.parts[part];
                    state.store.write1(Write::Publish(Event::PartDelta {
                        session_id: p.session_id.clone(),
                        message_id: p.message_id.clone(),
                        part_id: p.id.clone(),
                        field: "text".into(),
                        delta,
                    }));
                }
                PartAction::CloseText(i) => {
                    if let PartKind::Text { time: Some(t), .. } = &mut state.parts[i].kind {
                        t.end = Some(now_ms());
                    }
                    state.save_part(i);
                }
                PartAction::CloseReasoning { part, signature } => {
                    if let PartKind::Reasoning { time, metadata, .. } = &mut state.parts[part].kind
                    {
                        time.end = Some(now_ms());
                        if let Some(sig) = signature {
                            *metadata = Some(serde_json::json!({"signature": sig}));
                        }
                    }
                    state.save_part(part);
                }
                PartAction::Call {
                    part,
                    call_id,
                    name,
                    input,
                    truncated,
                    error,
                } => {
                    if let PartKind::Tool {
                        state: ToolState::Pending { raw, .. },
                        ..
                    } = &mut state.parts[part].kind
                    {
                        raw.clone_from(&input);
                    }
                    state.calls.push(PendingCall {
                        call_id,
                        name,
                        input,
                        truncated,
                        error,
                    });
                }
                PartAction::Finish { reason, usage } => {
                    let step = StepUsage {
                        input: usage.input,
                        output: usage.output,
                        reasoning: usage.reasoning,
                        cache_read: usage.cache_read,
                        cache_write: usage.cache_write,
                    };
                    let (tokens, cost) = usage_cost(step, state.model.cost.as_ref());
                    state.assistant.tokens = tokens;
                    state.assistant.cost += cost;
                    state.assistant.finish = Some(reason.as_str().to_string());
                    state.push_part(PartKind::StepFinish {
                        reason: reason.as_str().to_string(),
                        snapshot: None,
                        cost,
                        tokens,
                    });
                    state.save_message();
                    if reason == FinishReason::Length && state.calls.is_empty() {
                        tracing::debug!(session = %state.assistant.session_id, "step hit the output limit");
                    }
                }
            }
        }
    }

    /// Start the step's tool calls (after the stream finished).
    async fn start_tools(&self, myself: &ActorRef<ProcMsg>, state: &mut ProcessorState) {
        state.tools_started = true;
        let calls = std::mem::take(&mut state.calls);
        let registry = state.registry.clone();
        for call in calls {
            let i = state.tool_part(&call.call_id, &call.name);
            let start = now_ms();
            let done_err = |input: Value, error: String| ToolState::Error {
                input,
                error,
                metadata: None,
                time: ToolTime {
                    start,
                    end: Some(now_ms()),
                    compacted: None,
                },
            };
            if let Some(error) = call.error {
                state.set_tool_state(i, done_err(Value::Object(Default::default()), error), None);
                continue;
            }
            if call.truncated {
                let st = done_err(
                    Value::Object(Default::default()),
                    "This tool call was cut off by the output token limit before its arguments were complete, so it was not executed. Retry with shorter arguments.".into(),
                );
                state.set_tool_state(i, st, None);
                continue;
            }
            let Some(name) = registry.repair(&call.name) else {
                let msg = troupe_tools::invalid_tool_message(&call.name, &registry.names());
                let input =
                    parse_input(&call.input).unwrap_or_else(|_| Value::Object(Default::default()));
                state.set_tool_state(i, done_err(input, msg), None);
                continue;
            };
            let input = match parse_input(&call.input) {
                Ok(v) => v,
                Err(detail) => {
                    let err = ToolError::InvalidArguments {
                        tool: name.clone(),
                        detail,
                    };
                    state.set_tool_state(
                        i,
                        done_err(Value::Object(Default::default()), err.to_string()),
                        Some(name),
                    );
                    continue;
                }
            };
            if state.result == StepResult::Stop {
                state.set_tool_state(
                    i,
                    done_err(
                        input,
                        "Tool call not executed: the turn was stopped.".into(),
                    ),
                    Some(name),
                );
                continue;
            }
            state.prior_calls.push((name.clone(), input.clone()));
            let tail = state.prior_calls.len().saturating_sub(crate::doom::WINDOW);
            let seen: Vec<crate::doom::Call<'_>> = state.prior_calls[tail..]
                .iter()
                .map(|(t, v)| crate::doom::Call { tool: t, input: v })
                .collect();
            if let Some(dl) = crate::doom::detect(&seen) {
                let tools = dl.tools();
                let req = troupe_tools::PermissionRequest {
                    permission: "doom_loop".into(),
                    patterns: tools.clone(),
                    always: tools,
                    metadata: serde_json::json!({"tool": name, "input": input, "reason": dl.describe()}),
                    ..Default::default()
                };
                let ask = state.tool_ctx.permissions.ask(req);
                let reply = tokio::select! {
                    r = ask => r,
                    _ = state.cancel.cancelled() => troupe_tools::PermissionReply::Deny("aborted".into()),
                };
                if let troupe_tools::PermissionReply::Deny(msg)
                | troupe_tools::PermissionReply::Reject(msg) = reply
                {
                    let text = format!("Stopped a doom loop: {}. {msg}", dl.describe());
                    state.set_tool_state(i, done_err(input, text.clone()), Some(name));
                    state.assistant.error =
                        Some(MessageError::new(MessageErrorName::DoomLoop, text));
                    state.result = StepResult::Stop;
                    continue;
                }
            }
            let offered = state.offered.binary_search(&name).is_ok();
            let Some(tool) = registry.get(&name).filter(|_| offered) else {
                let msg = if registry.get(&name).is_some() {
                    format!(
                        "The tool '{name}' is not available to this agent: its permissions do not allow it. Available tools: {}.",
                        state.offered.join(", ")
                    )
                } else {
                    troupe_tools::invalid_tool_message(&call.name, &state.offered)
                };
                state.set_tool_state(i, done_err(input, msg), None);
                continue;
            };
            state.set_tool_state(
                i,
                ToolState::Running {
                    input: input.clone(),
                    title: None,
                    metadata: None,
                    time: ToolTime {
                        start,
                        end: None,
                        compacted: None,
                    },
                },
                Some(name.clone()),
            );
            let role = if tool.read_only() {
                crate::supervision::Role::ReadOnlyTool
            } else {
                crate::supervision::Role::of_tool(&name, &state.rt.config.config.supervision)
            };
            state.call_specs.insert(
                call.call_id.clone(),
                CallSpec {
                    name,
                    tool,
                    input,
                    role,
                    crashes: crate::supervision::Intensity::for_role(
                        role,
                        &state.rt.config.config.supervision,
                    ),
                    restarts: 0,
                },
            );
            self.spawn_tool(myself, state, &call.call_id).await;
        }
    }

    /// Spawn the tool-call actor of `call_id` (from its [`CallSpec`]) with its timeout timer.
    async fn spawn_tool(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        call_id: &str,
    ) {
        let (Some(&i), Some(spec)) = (
            state.blocks.tool.get(call_id),
            state.call_specs.get(call_id),
        ) else {
            return;
        };
        let (name, tool, input, restarts) = (
            spec.name.clone(),
            spec.tool.clone(),
            spec.input.clone(),
            spec.restarts,
        );
        let token = state.cancel.child_token();
        let mut ctx = state.tool_ctx.clone();
        ctx.call_id = call_id.to_string();
        ctx.message_id = state.assistant.id.clone();
        ctx.abort = token.clone();
        ctx.progress = Arc::new(crate::progress::PartProgress::new(
            state.store.clone(),
            state.parts[i].clone(),
        ));
        let timeout = state.rt.opts.tool_timeout_for(&name, &input);
        let span = crate::spans::tool_call(
            &state.span,
            &state.assistant.session_id,
            &state.assistant.id,
            call_id,
            &name,
            restarts,
        );
        let args = ToolCallArgs {
            span: span.clone(),
            call_id: call_id.to_string(),
            tool,
            args: input,
            ctx,
            gauge: crate::ActorGauge::new(&state.rt.counters.live_actors),
            node: {
                let n = state.rt.tree.register(
                    crate::tree::Kind::ToolCall,
                    call_id,
                    Some(&state.assistant.session_id),
                    Some(state.node.key()),
                );
                n.update(|x| {
                    x.status = crate::tree::ActorStatus::Busy;
                    x.tool = Some(name.clone());
                    x.restarts = restarts;
                });
                n
            },
        };
        let me = myself.clone();
        let call_id = call_id.to_string();
        // spawn_linked awaits pre_start, which only casts a message to itself.
        match Actor::spawn_linked(None, ToolCallActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                let timer_token = token.clone();
                state.running.insert(
                    actor.get_id(),
                    (call_id.clone(), actor.get_cell(), token, span),
                );
                // The timer ends early when the call ends (its token is cancelled then).
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(timeout) => { let _ = me.cast(ProcMsg::ToolTimeout(call_id)); }
                        _ = timer_token.cancelled() => {}
                    }
                });
            }
            Err(e) => {
                let now = now_ms();
                let st = ToolState::Error {
                    input: Value::Object(Default::default()),
                    error: format!("could not start the tool: {e}"),
                    metadata: None,
                    time: ToolTime {
                        start: now,
                        end: Some(now),
                        compacted: None,
                    },
                };
                state.set_tool_state(i, st, None);
            }
        }
    }

    /// A tool-call child crashed: a read-only call runs again with the same input after a
    /// backoff while within `supervision.tool_restarts`, else (and for every side-effecting
    /// call) its part becomes an error.
    fn tool_crashed(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        call_id: String,
        err: String,
    ) {
        state
            .rt
            .counters
            .tool_crashes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.node.add_failure();
        let Some(spec) = state.call_specs.get_mut(&call_id) else {
            return;
        };
        state.rt.counters.failure(spec.role);
        let role = spec.role;
        crate::spans::supervision(
            &state.span,
            crate::spans::Supervision::Crash,
            role.as_str(),
            &format!("tool call {call_id}: {err}"),
        );
        let verdict = match role {
            crate::supervision::Role::ReadOnlyTool => spec.crashes.crash(std::time::Instant::now()),
            _ => crate::supervision::Verdict::Escalate { crashes: 1 },
        };
        if let crate::supervision::Verdict::Restart { backoff, attempt } = verdict
            && !state.cancel.is_cancelled()
        {
            spec.restarts += 1;
            tracing::warn!(call = %call_id, tool = %spec.name, "read-only tool crashed ({err}); running it again (restart {attempt})");
            state.rt.counters.restart(role);
            crate::spans::supervision(
                &state.span,
                crate::spans::Supervision::Restart,
                role.as_str(),
                &format!("tool call {call_id}, restart {attempt}"),
            );
            state.restarting.insert(call_id.clone());
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(backoff).await;
                let _ = me.cast(ProcMsg::RestartTool(call_id));
            });
            return;
        }
        let error = match (role, verdict) {
            (
                crate::supervision::Role::ReadOnlyTool,
                crate::supervision::Verdict::Escalate { crashes },
            ) => format!(
                "Tool crashed {crashes} time{} in a row (supervision.tool_restarts = {}), so it was given up: {err}",
                if crashes == 1 { "" } else { "s" },
                state.rt.config.config.supervision.tool_restarts()
            ),
            (crate::supervision::Role::ReadOnlyTool, _) => format!("Tool crashed: {err}"),
            _ => format!(
                "Tool crashed: {err}. It may have partly run, so its outcome is unknown; it was not run again."
            ),
        };
        crate::spans::supervision(
            &state.span,
            crate::spans::Supervision::Escalation,
            role.as_str(),
            &format!("tool call {call_id}: {error}"),
        );
        let Some(&i) = state.blocks.tool.get(&call_id) else {
            return;
        };
        let (input, start) = match &state.parts[i].kind {
            PartKind::Tool {
                state: ToolState::Running { input, time, .. },
                ..
            } => (input.clone(), time.start),
            PartKind::Tool { state: s, .. } => (s.input().clone(), now_ms()),
            _ => (Value::Null, now_ms()),
        };
        let mut metadata = serde_json::json!({"crashed": true});
        if role != crate::supervision::Role::ReadOnlyTool {
            metadata["outcome"] = "unknown".into();
        }
        state.set_tool_state(
            i,
            ToolState::Error {
                input,
                error,
                metadata: Some(metadata),
                time: ToolTime {
                    start,
                    end: Some(now_ms()),
                    compacted: None,
                },
            },
            None,
        );
    }

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
                        &state.rt,
                        &state.tool_ctx.directory,
                        &state.assistant.session_id,
                        start,
                        move |done| {
                            let _ = me.cast(ProcMsg::SnapshotFinished(done));
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
            span: args.span,
            _gauge: crate::ActorGauge::new(&args.rt.counters.live_actors),
            node: {
                let n = args.rt.tree.register(
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
            store: args.rt.store.clone(),
            rt: args.rt,
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
            &state.rt,
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
            state.rt.clone(),
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

    async fn handle(
        &self,
        myself: ActorRef<ProcMsg>,
        msg: ProcMsg,
        state: &mut ProcessorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProcMsg::Stream(ev) => {
                state.rt.faults.check(
                    crate::faults::FaultPoint::ProcessorEvent,
                    &state.assistant.id,
                );
                if !state.stream_done {
                    self.handle_event(state, ev);
                }
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
                self.start_tools(&myself, state).await;
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
                    self.start_tools(&myself, state).await;
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
            ProcMsg::ToolTimeout(call_id) => {
                let found = state
                    .running
                    .iter()
                    .find(|(_, (c, _, _, _))| *c == call_id)
                    .map(|(id, _)| *id);
                if let Some(id) = found
                    && let Some((call_id, cell, token, span)) = state.running.remove(&id)
                {
                    crate::spans::tool_call_end(&span, "timeout");
                    // Kill before cancelling: the kill signal is then seen before the tool's
                    // aborted return (ractor polls signals first), so the span keeps `timeout`.
                    cell.kill();
                    token.cancel();
                    if let Some(&i) = state.blocks.tool.get(&call_id) {
                        let (input, start) = match &state.parts[i].kind {
                            PartKind::Tool {
                                state: ToolState::Running { input, time, .. },
                                ..
                            } => (input.clone(), time.start),
                            PartKind::Tool { state: s, .. } => (s.input().clone(), now_ms()),
                            _ => (Value::Null, now_ms()),
                        };
                        let ms = match &state.parts[i].kind {
                            PartKind::Tool { tool, state: s, .. } => {
                                state.rt.opts.tool_timeout_for(tool, s.input()).as_millis()
                            }
                            _ => state.rt.opts.tool_timeout.as_millis(),
                        };
                        state.set_tool_state(
                            i,
                            ToolState::Error {
                                input,
                                error: format!(
                                    "Tool execution timed out after {ms} ms and was stopped"
                                ),
                                metadata: Some(serde_json::json!({"timeout": true})),
                                time: ToolTime {
                                    start,
                                    end: Some(now_ms()),
                                    compacted: None,
                                },
                            },
                            None,
                        );
                    }
                    self.maybe_finish(&myself, state);
                }
            }
            ProcMsg::RestartTool(call_id) => {
                if state.restarting.remove(&call_id) {
                    if state.cancel.is_cancelled() {
                        // Aborted during the backoff: the part ends as aborted below.
                    } else {
                        self.spawn_tool(&myself, state, &call_id).await;
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
                let Some((call_id, _, done_token, _)) = state.running.remove(&cell.get_id()) else {
                    tracing::warn!(actor = %cell.get_id(), "supervision event from an unknown child of a step; ignored");
                    return Ok(());
                };
                // The call is over: end its timeout timer (and anything still holding its token).
                done_token.cancel();
                let result = boxed
                    .and_then(|mut b| b.take::<ToolCallState>().ok())
                    .and_then(|s| s.result);
                let Some(&i) = state.blocks.tool.get(&call_id) else {
                    return Ok(());
                };
                let (input, start, metadata) = match &state.parts[i].kind {
                    PartKind::Tool {
                        state:
                            ToolState::Running {
                                input,
                                time,
                                metadata,
                                ..
                            },
                        ..
                    } => (input.clone(), time.start, metadata.clone()),
                    PartKind::Tool { state: s, .. } => (s.input().clone(), now_ms(), None),
                    _ => (Value::Null, now_ms(), None),
                };
                let time = ToolTime {
                    start,
                    end: Some(now_ms()),
                    compacted: None,
                };
                let new_state = match result {
                    Some(Ok(ToolOutput {
                        title,
                        output,
                        metadata,
                    })) => ToolState::Completed {
                        input,
                        output,
                        title,
                        metadata: Value::Object(metadata),
                        time,
                    },
                    Some(Err(ToolError::Aborted)) => {
                        let mut m = metadata.unwrap_or_else(|| serde_json::json!({}));
                        if let Some(o) = m.as_object_mut() {
                            o.insert("interrupted".into(), Value::Bool(true));
                        }
                        ToolState::Error {
                            input,
                            error: "Tool execution aborted".into(),
                            metadata: Some(m),
                            time,
                        }
                    }
                    Some(Err(e)) => {
                        if matches!(e, ToolError::PermissionRejected(_)) {
                            // A plain user reject stops the turn after this step (OpenCode
                            // `RejectedError`); feedback and rule denials do not.
                            state.result = StepResult::Stop;
                        }
                        ToolState::Error {
                            input,
                            error: e.to_string(),
                            metadata,
                            time,
                        }
                    }
                    None => ToolState::Error {
                        input,
                        error: "Tool execution aborted".into(),
                        metadata,
                        time,
                    },
                };
                state.set_tool_state(i, new_state, None);
                self.maybe_finish(&myself, state);
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
