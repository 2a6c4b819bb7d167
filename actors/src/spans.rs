//! Tracing spans that mirror the actor tree (issue 23).
//!
//! ```text
//! session  ses_A                      one per session actor life (a subagent's: child of its task call)
//! ├── turn  msg_user                  one per prompt
//! │   ├── step  msg_assistant         one per processor
//! │   │   ├── provider.request        one per attempt (model, attempt, status, ttft_ms, tokens)
//! │   │   ├── retry.wait              the back-off before the next attempt
//! │   │   └── tool.call  call_1       tool, outcome
//! │   │       ├── permission.ask      the wait for a reply
//! │   │       └── session  ses_B      the subagent (and so on, nested)
//! │   ├── compaction                  the compaction worker (its summary step nests inside)
//! │   └── summary                     the summary worker
//! └── title                           the title worker
//! ```
//!
//! Fields carry the ids users see (`session_id`, `message_id`, `call_id`). A span's duration
//! is its life: it is created when the work starts and dropped with the actor state (or the
//! future) that owns it, so no explicit end is needed. Supervision events (a crash, a restart,
//! an escalation) are `tracing` events whose parent is the span of the supervising actor's
//! work ([`supervision`]).
//!
//! Spans are cheap when nobody listens: with no subscriber interested in `troupe` spans at
//! `info`, each helper returns a disabled span after one cached callsite check, with no
//! allocation. Actors hold their span by value and pass it (a reference-counted handle) to
//! the children they spawn; ractor does not carry the caller's span into a spawned actor.

use tracing::Span;
use tracing::field::Empty;

/// The span of a session actor's life: `session` with `session_id`, `parent_session_id`
/// (empty for a top-level session) and `title`. `parent` is the task call that started a
/// subagent; `None` makes the span a root (one trace per top-level session).
pub fn session(parent: Option<&Span>, session_id: &str, parent_session_id: Option<&str>) -> Span {
    let parent = parent.and_then(Span::id);
    let span = tracing::info_span!(
        target: "troupe",
        parent: parent,
        "session",
        session_id = session_id,
        parent_session_id = Empty,
    );
    if let Some(p) = parent_session_id {
        span.record("parent_session_id", p);
    }
    span
}

/// A turn: `session_id`, `message_id` (the user message), `agent`, `model`
/// (`provider/model`); `steps` and `error` are recorded when it ends ([`turn_end`]).
pub fn turn(parent: &Span, session_id: &str, message_id: &str, agent: &str, model: &str) -> Span {
    tracing::info_span!(
        target: "troupe",
        parent: parent,
        "turn",
        session_id = session_id,
        message_id = message_id,
        agent = agent,
        model = model,
        steps = Empty,
        error = Empty,
    )
}

/// Record how a turn ended on its span (the number of steps and the error, if any) and log
/// it: `turn finished` at `info`, `turn failed` at `warn` with the error.
pub fn turn_end(span: &Span, steps: u32, error: Option<&str>) {
    span.record("steps", steps);
    match error {
        Some(e) => {
            span.record("error", e);
            tracing::warn!(target: "troupe", parent: span, steps, error = e, "turn failed");
        }
        None => tracing::info!(target: "troupe", parent: span, steps, "turn finished"),
    }
}

/// A step (one processor): `session_id`, `message_id` (the assistant message), `step`
/// (1-based within the turn; 0 for a compaction's summary step); `finish`, `tokens_input`,
/// `tokens_output` are recorded at its end ([`step_end`]).
pub fn step(parent: &Span, session_id: &str, message_id: &str, step: u32) -> Span {
    tracing::info_span!(
        target: "troupe",
        parent: parent,
        "step",
        session_id = session_id,
        message_id = message_id,
        step = step,
        finish = Empty,
        tokens_input = Empty,
        tokens_output = Empty,
        error = Empty,
    )
}

/// Record a step's finish reason, token counts and error on its span.
pub fn step_end(span: &Span, finish: Option<&str>, input: u64, output: u64, error: Option<&str>) {
    if let Some(f) = finish {
        span.record("finish", f);
    }
    span.record("tokens_input", input);
    span.record("tokens_output", output);
    if let Some(e) = error {
        span.record("error", e);
    }
}

/// One provider request (an attempt of a step): `session_id`, `message_id`, `model`
/// (`provider/model`), `attempt` (1-based); `status` (`ok` or the error class), `ttft_ms`
/// (ms from sending to the first stream event), `tokens_input`, `tokens_output` are recorded
/// as they become known.
pub fn provider_request(
    parent: &Span,
    session_id: &str,
    message_id: &str,
    model: &str,
    attempt: u32,
) -> Span {
    tracing::info_span!(
        target: "troupe",
        parent: parent,
        "provider.request",
        session_id = session_id,
        message_id = message_id,
        model = model,
        attempt = attempt,
        status = Empty,
        ttft_ms = Empty,
        tokens_input = Empty,
        tokens_output = Empty,
    )
}

/// The back-off before a step's next attempt: `session_id`, `message_id`, `attempt` (the
/// one that failed), `delay_ms`, `reason`. Hold it for the wait.
pub fn retry_wait(
    parent: &Span,
    session_id: &str,
    message_id: &str,
    attempt: u32,
    delay_ms: u64,
    reason: &str,
) -> Span {
    tracing::info_span!(
        target: "troupe",
        parent: parent,
        "retry.wait",
        session_id = session_id,
        message_id = message_id,
        attempt = attempt,
        delay_ms = delay_ms,
        reason = reason,
    )
}

/// One tool call: `session_id`, `message_id`, `call_id`, `tool`, `restart` (0 for the first
/// run); `outcome` (`completed` or `error`) is recorded when the tool returns. A crash or a
/// timeout is an event on the step's span instead.
pub fn tool_call(
    parent: &Span,
    session_id: &str,
    message_id: &str,
    call_id: &str,
    tool: &str,
    restart: u64,
) -> Span {
    tracing::info_span!(
        target: "troupe",
        parent: parent,
        "tool.call",
        session_id = session_id,
        message_id = message_id,
        call_id = call_id,
        tool = tool,
        restart = restart,
        outcome = Empty,
    )
}

/// A permission ask that waits for an answer (child of the current span, the tool call's):
/// `session_id`, `permission`; `reply` (`allow`, `deny`, `reject`) is recorded when it is answered.
/// Its duration is the time the call waited for the answer.
pub fn permission_ask(session_id: &str, permission: &str) -> Span {
    tracing::info_span!(
        target: "troupe",
        "permission.ask",
        session_id = session_id,
        permission = permission,
        reply = Empty,
    )
}

/// Which background worker a [`worker`] span is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worker {
    /// The compaction worker (summary of the history).
    Compaction,
    /// The title worker.
    Title,
    /// The summary worker (after a turn that changed files).
    Summary,
}

/// The span of a background worker of a session: named `compaction`, `title` or `summary`,
/// with `session_id`.
pub fn worker(parent: &Span, kind: Worker, session_id: &str) -> Span {
    match kind {
        Worker::Compaction => {
            tracing::info_span!(target: "troupe", parent: parent, "compaction", session_id = session_id)
        }
        Worker::Title => {
            tracing::info_span!(target: "troupe", parent: parent, "title", session_id = session_id)
        }
        Worker::Summary => {
            tracing::info_span!(target: "troupe", parent: parent, "summary", session_id = session_id)
        }
    }
}

/// What happened to a supervised child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supervision {
    /// The child failed (panicked or returned an error).
    Crash,
    /// The child's work is started again.
    Restart,
    /// The crash was not retried: it becomes an error of the parent's work.
    Escalation,
}

impl Supervision {
    /// The event's `supervision` field: `crash`, `restart`, `escalation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Supervision::Crash => "crash",
            Supervision::Restart => "restart",
            Supervision::Escalation => "escalation",
        }
    }
}

/// A supervision event on the parent's span: `supervision` (crash/restart/escalation),
/// `role` (the child's supervision role), `detail` (the cause or what follows). A crash
/// and an escalation are at `warn` level, a restart at `info`.
pub fn supervision(parent: &Span, what: Supervision, role: &str, detail: &str) {
    match what {
        Supervision::Restart => tracing::info!(
            target: "troupe",
            parent: parent,
            supervision = what.as_str(),
            role = role,
            detail = detail,
            "supervision: child restarted"
        ),
        Supervision::Crash | Supervision::Escalation => tracing::warn!(
            target: "troupe",
            parent: parent,
            supervision = what.as_str(),
            role = role,
            detail = detail,
            "supervision: child {}",
            if what == Supervision::Crash {
                "crashed"
            } else {
                "escalated"
            }
        ),
    }
}
