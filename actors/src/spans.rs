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
//! For OpenTelemetry export (the binary's `telemetry` module) the spans carry
//! `otel.status_code` (`error` on a failed or timed-out turn, step, provider request or tool
//! call) and the provider request is a `client` span (`otel.kind`) whose W3C trace context
//! goes out with the HTTP request ([`traceparent`]). A subagent's session span has its task
//! call as explicit parent, so its OpenTelemetry span is in the parent session's trace.
//!
//! Spans are cheap when nobody listens: with no subscriber interested in `troupe` spans at
//! `info`, each helper returns a disabled span after one cached callsite check, with no
//! allocation. Actors hold their span by value and pass it (a reference-counted handle) to
//! the children they spawn; ractor does not carry the caller's span into a spawned actor.

use tracing::Span;
use tracing::field::Empty;

/// A `troupe` span at `info` under `parent`: `name`, the fields known at its start (each
/// from the variable of its name), the fields recorded later (empty until then), any extra
/// `key = value` fields, and an empty `otel.status_code` (set to `error` by the `*_end`
/// helpers).
macro_rules! troupe_span {
    ($parent:expr, $name:literal, [$($known:ident),*], [$($later:ident),*] $(, $($extra:tt)+)?) => {
        tracing::info_span!(
            target: "troupe",
            parent: $parent,
            $name,
            $($known = $known,)*
            $($later = Empty,)*
            $($($extra)+,)?
            "otel.status_code" = Empty,
        )
    };
}

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
/// (`provider/model`); `steps`, `outcome` and `error` are recorded when it ends ([`turn_end`]).
pub fn turn(parent: &Span, session_id: &str, message_id: &str, agent: &str, model: &str) -> Span {
    troupe_span!(
        parent,
        "turn",
        [session_id, message_id, agent, model],
        [steps, outcome, error]
    )
}

/// How a turn ended (its span's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The turn ended without an error.
    Completed,
    /// The turn ended with an error (a provider failure, a crash, a store error, …).
    Error,
    /// The user (or a parent session) aborted it.
    Aborted,
    /// Its caller's deadline passed and it was aborted (a batch task's `timeout`).
    Timeout,
}

impl TurnOutcome {
    /// The `outcome` field: `completed`, `error`, `aborted`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Error => "error",
            TurnOutcome::Aborted => "aborted",
            TurnOutcome::Timeout => "timeout",
        }
    }
}

/// Record how a turn ended on its span (the number of steps, the outcome and the error, if
/// any) and log it: `turn finished` at `info`, or `turn failed` at `warn` with the error.
/// `error` and `timeout` mark the span an error for OpenTelemetry; a user's abort does not.
pub fn turn_end(span: &Span, steps: u32, outcome: TurnOutcome, error: Option<&str>) {
    span.record("steps", steps);
    span.record("outcome", outcome.as_str());
    if matches!(outcome, TurnOutcome::Error | TurnOutcome::Timeout) {
        span.record("otel.status_code", "error");
    }
    match error {
        Some(e) => {
            span.record("error", e);
            tracing::warn!(target: "troupe", parent: span, steps, outcome = outcome.as_str(), error = e, "turn failed");
        }
        None => {
            tracing::info!(target: "troupe", parent: span, steps, outcome = outcome.as_str(), "turn finished")
        }
    }
}

/// A step (one processor): `session_id`, `message_id` (the assistant message), `step`
/// (1-based within the turn; 0 for a compaction's summary step); `finish`, `tokens_input`,
/// `tokens_output` are recorded at its end ([`step_end`]).
pub fn step(parent: &Span, session_id: &str, message_id: &str, step: u32) -> Span {
    troupe_span!(
        parent,
        "step",
        [session_id, message_id, step],
        [finish, tokens_input, tokens_output, error]
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
        span.record("otel.status_code", "error");
    }
}

/// One provider request (an attempt of a step, from sending it to the end of its stream):
/// `session_id`, `message_id`, `model` (`provider/model`), `attempt` (1-based); `status` (`ok`, `timeout` or the error class:
/// [`provider_request_end`]), `ttft_ms` (ms from sending to the first stream event),
/// `tokens_input`, `tokens_output` are recorded as they become known. An OpenTelemetry
/// `client` span.
pub fn provider_request(
    parent: &Span,
    session_id: &str,
    message_id: &str,
    model: &str,
    attempt: u32,
) -> Span {
    troupe_span!(
        parent,
        "provider.request",
        [session_id, message_id, model, attempt],
        [status, ttft_ms, tokens_input, tokens_output],
        "otel.kind" = "client"
    )
}

/// Record how a provider request ended: `status` is `ok`, `timeout` (a deadline of the
/// request passed: connect, response headers, or a stream silent too long) or the error
/// class (`RateLimit`, `Server`, `Transport`, …); anything but `ok` marks the span an error.
pub fn provider_request_end(span: &Span, status: &str) {
    span.record("status", status);
    if status != "ok" {
        span.record("otel.status_code", "error");
    }
}

/// The W3C `traceparent` header value (`00-<trace id>-<span id>-<flags>`) of `span`'s
/// OpenTelemetry span, or `None` when spans are not exported (no OpenTelemetry layer, or a
/// disabled span). Sent with a provider request so a traced gateway or server joins the trace.
pub fn traceparent(span: &Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
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
        session_id,
        message_id,
        attempt,
        delay_ms,
        reason
    )
}

/// One tool call: `session_id`, `message_id`, `call_id`, `tool`, `restart` (0 for the first
/// run); `outcome` is recorded when the call ends ([`tool_call_end`]). A crash is also an event
/// on the step's span.
pub fn tool_call(
    parent: &Span,
    session_id: &str,
    message_id: &str,
    call_id: &str,
    tool: &str,
    restart: u64,
) -> Span {
    troupe_span!(
        parent,
        "tool.call",
        [session_id, message_id, call_id, tool, restart],
        [outcome]
    )
}

/// Record how a tool call ended: `outcome` is `completed`, `error` (the tool failed or was
/// refused), `aborted` (the session was cancelled), `timeout` (stopped at its deadline) or
/// `crashed` (the tool panicked); `error`, `timeout` and `crashed` mark the span an error.
pub fn tool_call_end(span: &Span, outcome: &str) {
    span.record("outcome", outcome);
    if matches!(outcome, "error" | "timeout" | "crashed") {
        span.record("otel.status_code", "error");
    }
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
