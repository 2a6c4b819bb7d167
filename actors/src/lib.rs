//! troupe-actors: the supervised runtime.
//!
//! ```text
//! Runtime (root supervisor, one per process)              restart strategy of the child
//! └── SessionActor ses_…  serializes prompts; runs the turn   restart from the store, in-flight
//!     │                                                        turn continues (≤ session_restarts
//!     │                                                        per period), then the turn fails
//!     ├── Processor msg_…  one per step: stream → parts        open parts closed as errors, step
//!     │   │                                                    retried once (step_retries), then
//!     │   │                                                    the turn fails
//!     │   └── ToolCall call_…  one per tool invocation
//!     │       ├── read-only (read, glob, grep, list)           re-run with the same input after a
//!     │       │                                                backoff (≤ tool_restarts), then an
//!     │       │                                                error part naming the attempts
//!     │       ├── side-effecting (bash, write, edit, MCP, …)   never re-run: error part, outcome
//!     │       │                                                unknown
//!     │       └── task → SessionActor ses_… (subagent, same     restarted by the task call from the
//!     │                  tree below)                           store, turn continues (as a root)
//!     ├── CompactionWorker  summary step on overflow           the turn fails with the cause
//!     │   └── Processor msg_…  (tool-less summary step)
//!     ├── TitleWorker       first prompt → session title       ignored (default title stays)
//!     └── SummaryWorker     `summary` agent after a turn that  ignored (no summary stored)
//!                           changed files
//! ```
//!
//! Every parent keeps the `ActorId` and [`supervision::Role`] of each child it spawned and
//! overrides `handle_supervisor_evt` (ractor's default would stop the parent), matching each
//! event against that map: a child's end becomes state (an error part, a retried step, a
//! failed turn) and an event from an unknown child is logged, never guessed. Restarts and
//! failures are counted per node in [`tree`] (`/actors`, `troupe monitor`) and per role in
//! [`Counters`] (`troupe_actor_restarts_total{role}`, `troupe_actor_failures_total{role}` on
//! `/metrics`). Limits come from the `supervision` config block. Streams and waits run in
//! tasks that cast back to their actor, so handlers stay short and an abort is never stuck
//! behind a long await. Cancellation flows down the tree as a `CancellationToken`. Waits a
//! session actor has between steps are messages, not awaits in its handler: a crashed step's
//! backoff is a timer (`SessionMsg::RetryStep`) and the `chat.params` hooks of a step run on a
//! task that answers with `SessionMsg::StepParams`; an abort meanwhile ends the turn at once.
//!
//! The turn loop's decisions are plain functions with unit tests beside them, and the actors
//! carry them out: what follows a step ([`turn`]), the provider request of a step, a
//! compaction or a title ([`request`]), and what a stream event does to the step's parts
//! ([`stream_parts`]). A prompt that gets no result says why with a [`TurnError`].

pub mod command;
pub mod compaction;
pub mod doom;
pub mod faults;
pub mod history;
pub mod inputs;
pub mod lease;
pub mod mcp;
pub mod permission;
pub mod processor;
pub mod progress;
pub mod question;
pub mod remote;
pub mod request;
pub mod revert;
pub mod session_actor;
pub mod skill;
pub mod snapshots;
pub mod spans;
pub mod steer;
pub mod stream_parts;
pub mod structured;
pub mod summary;
pub mod supervision;
pub mod task;
pub mod title;
pub mod todo;
pub mod tool_call;
pub mod tree;
pub mod turn;
pub mod turn_error;
pub mod user_shell;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use rust_decimal::Decimal;
use serde::Serialize;
use tokio::sync::oneshot;
use troupe_config::{LoadedConfig, ResolvedModel};
use troupe_llm::provider::Provider;
use troupe_session::{
    AssistantMessage, Bus, MessageError, MessageErrorName, Session, Store, Tokens, Write,
};
use troupe_tools::{PermissionAsker, Registry};
pub use turn_error::TurnError;

use crate::session_actor::{PendingPrompt, SessionActor, SessionArgs, SessionMsg};

/// Runtime tuning.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Safety-net timeout for one tool call (the actor is stopped past it). Default 10 min;
    /// `bash` gets at least its own `timeout` argument + 10 s, `question` none
    /// ([`RuntimeOptions::tool_timeout_for`]).
    pub tool_timeout: Duration,
    /// Default maximum steps per turn for agents without `steps`. Default 100.
    pub max_steps: u32,
    /// Retries of a retryable provider failure per step. Default 8.
    pub max_retries: u32,
    /// Upper bound on one retry wait (a server may ask for hours). Default 5 min.
    pub max_retry_delay: Duration,
    /// Upper bound on the total of one step's retry waits: a retry whose wait would take the
    /// sum past it is not made and the failure is final (its message says so). `None` = no
    /// cap beyond [`RuntimeOptions::max_retries`] (default; the defaults allow
    /// 2+4+8+16+30×4 = 150 s). `troupe batch` sets one so a failing provider does not hold
    /// every task for minutes.
    pub max_retry_time: Option<Duration>,
    /// Timeout of one `task` call (a subagent's whole turn). Default 30 min.
    pub task_timeout: Duration,
    /// Maximum subagent nesting depth (a root session's children are depth 1). Default 3.
    pub max_depth: u32,
    /// Maximum concurrently running subagent sessions per runtime; more task calls wait.
    /// Default 32.
    pub max_subagents: usize,
    /// Generate a title for a root session after its first user message (one extra
    /// provider request beside the first turn). Default false in the library; the CLI turns
    /// it on unless `TROUPE_TITLE=0`.
    pub titles: bool,
    /// Summarise a turn that changed files with the `summary` agent (one extra tool-less
    /// provider request after the turn, stored on its user message). Default false in the
    /// library; the CLI turns it on unless `TROUPE_SUMMARY=0`.
    pub summaries: bool,
    /// How long a session lease lasts without a heartbeat ([`lease`]); a holder renews it
    /// every third of this. Default [`lease::DEFAULT_LEASE_TTL`] (30 s); the CLI reads
    /// `TROUPE_LEASE_TTL_MS`.
    pub lease_ttl: Duration,
    /// Longest wait for a session another process drives before the prompt fails with
    /// [`RuntimeError::SessionBusy`]; zero refuses at once. Default
    /// [`lease::DEFAULT_LEASE_WAIT`] (5 min); the CLI reads `TROUPE_LEASE_WAIT_MS`.
    pub lease_wait: Duration,
    /// What this process is, shown to other processes as the owner of the sessions it
    /// drives (`troupe run`, `troupe serve`). Default `troupe`.
    pub lease_label: String,
    /// troupe's data directory, under which file snapshots are kept (`<dir>/snapshot/…`,
    /// see `troupe-snapshot`). `None` (the library default): snapshots off. The CLI passes
    /// `troupe_config::data_dir()`; `"snapshot": false` in the config turns them off too.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// How long saved full tool outputs (`troupe_tools::truncate::output_dir`) are kept: the
    /// runtime's root actor deletes older ones when it starts and every
    /// [`OUTPUT_CLEANUP_INTERVAL`] (OpenCode keeps them 7 days and cleans hourly). `None`
    /// (the library default): never deleted. The CLI passes
    /// [`troupe_tools::truncate::RETENTION`] (7 days) unless `TROUPE_TOOL_OUTPUT_RETENTION_DAYS`
    /// says otherwise.
    pub output_retention: Option<Duration>,
    /// Whether someone can answer the model's questions (the HTTP API of `troupe serve`, the
    /// terminal of `troupe chat` or an interactive `run`). `false` (the library default, and
    /// non-interactive `run` and `batch`) adds OpenCode's non-interactive session rules:
    /// `question`, `plan_enter` and `plan_exit` are denied and not offered.
    pub interactive: bool,
}

/// Period of the saved-output cleanup ([`RuntimeOptions::output_retention`]): 1 hour, as
/// OpenCode's `Truncate` scheduler.
pub const OUTPUT_CLEANUP_INTERVAL: Duration = Duration::from_secs(3600);

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(600),
            max_steps: 100,
            max_retries: 8,
            max_retry_delay: Duration::from_secs(300),
            max_retry_time: None,
            task_timeout: Duration::from_secs(1800),
            max_depth: 3,
            max_subagents: 32,
            titles: false,
            summaries: false,
            lease_ttl: lease::DEFAULT_LEASE_TTL,
            lease_wait: lease::DEFAULT_LEASE_WAIT,
            lease_label: "troupe".into(),
            snapshot_dir: None,
            output_retention: None,
            interactive: false,
        }
    }
}

impl RuntimeOptions {
    /// The timeout for one call of `tool` with `input`: `task` has its own, `question` none
    /// (it waits for a person, as OpenCode's does; an abort still ends it), `bash` at least
    /// its `timeout` argument (ms) + 10 s, every other tool [`Self::tool_timeout`].
    pub fn tool_timeout_for(&self, tool: &str, input: &serde_json::Value) -> Duration {
        if tool == "task" {
            return self.task_timeout;
        }
        if tool == "question" {
            // tokio's sleep takes a deadline past the clock's range as "never".
            return Duration::MAX;
        }
        if tool == "bash"
            && let Some(ms) = input.get("timeout").and_then(|v| v.as_u64())
        {
            return self
                .tool_timeout
                .max(Duration::from_millis(ms) + Duration::from_secs(10));
        }
        self.tool_timeout
    }
}

/// Counters of the runtime, exported by `GET /metrics` (server/src/metrics.rs) and shown in `/actors`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Steps started.
    pub steps: AtomicU64,
    /// Tool actors that crashed.
    pub tool_crashes: AtomicU64,
    /// Processor actors that crashed.
    pub processor_crashes: AtomicU64,
    /// Live actors of the runtime (sessions, processors, tool calls), kept by [`ActorGauge`]s.
    pub live_actors: Arc<std::sync::atomic::AtomicI64>,
    /// Labelled counters: (metric name, label set in Prometheus syntax) → value.
    pub labeled: DashMap<(&'static str, String), u64>,
    /// Total cost, USD, of the steps this runtime ran.
    pub cost: std::sync::Mutex<Decimal>,
}

impl Counters {
    /// Count a crash of an actor of `role` (`actor_failures_total{role=…}`).
    pub fn failure(&self, role: crate::supervision::Role) {
        self.incr(
            "actor_failures_total",
            format!("role=\"{}\"", role.as_str()),
            1,
        );
    }

    /// Count a restart of an actor of `role` (`actor_restarts_total{role=…}`).
    pub fn restart(&self, role: crate::supervision::Role) {
        self.incr(
            "actor_restarts_total",
            format!("role=\"{}\"", role.as_str()),
            1,
        );
    }

    /// Add `by` to a labelled counter, e.g. `incr("tool_calls_total", "tool=\"bash\",outcome=\"completed\"", 1)`.
    pub fn incr(&self, name: &'static str, labels: String, by: u64) {
        *self.labeled.entry((name, labels)).or_insert(0) += by;
    }

    /// Snapshot of the labelled counters, sorted.
    pub fn snapshot(&self) -> Vec<(&'static str, String, u64)> {
        let mut v: Vec<_> = self
            .labeled
            .iter()
            .map(|e| (e.key().0, e.key().1.clone(), *e.value()))
            .collect();
        v.sort();
        v
    }
}

/// Counts one live actor while it exists: created in `pre_start`, kept in the actor's state,
/// dropped with the state however the actor ends (stop, panic or kill), so the count never
/// leaks the way `post_stop`-based bookkeeping would.
#[derive(Debug)]
pub struct ActorGauge(Arc<std::sync::atomic::AtomicI64>);

impl ActorGauge {
    /// Count one more live actor.
    pub fn new(counter: &Arc<std::sync::atomic::AtomicI64>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for ActorGauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What every actor of the runtime shares.
pub struct RuntimeShared {
    /// Store (and, through it, the bus).
    pub store: Store,
    /// Merged configuration.
    pub config: Arc<LoadedConfig>,
    /// Tools.
    pub registry: Arc<Registry>,
    /// Agents (built-in, config, markdown).
    pub agents: Arc<troupe_agents::AgentSet>,
    /// Pending permission requests and approvals.
    pub broker: Arc<crate::permission::PermissionBroker>,
    /// Options.
    pub opts: RuntimeOptions,
    /// Live session actors by session id.
    pub sessions: DashMap<String, ActorRef<SessionMsg>>,
    /// Counters.
    pub counters: Counters,
    /// Child sessions a `task` call is driving right now: one call per child at a time, so
    /// two calls with the same `task_id` never run two actors on one session (issue 24.7).
    pub task_children: DashMap<String, ()>,
    /// Slots for concurrently running subagents.
    pub subagent_slots: Arc<tokio::sync::Semaphore>,
    /// Background subagents (`task` with `background: true`) by child session id, running
    /// or finished (a finished one keeps its result for `task_status`); an entry goes when
    /// its parent or child session is deleted.
    pub(crate) background: DashMap<String, crate::task::Background>,
    /// The root actor, for work that outlives the call that started it (a background
    /// subagent's result is prompted into its parent through a [`Runtime`]).
    root_ref: std::sync::OnceLock<ActorRef<()>>,
    /// The live supervision tree (for monitoring).
    pub tree: Arc<crate::tree::ActorTree>,
    /// Per-provider back-off: no request to the provider starts before this time (ms since
    /// epoch). Set when one session gets a 429, so parallel sessions back off together.
    pub rate_limits: DashMap<String, i64>,
    http: reqwest::Client,
    providers: DashMap<String, Arc<Provider>>,
    spawn_lock: tokio::sync::Mutex<()>,
    /// Who this runtime is to other processes (session leases).
    pub identity: lease::Identity,
    /// Session leases held by this runtime.
    pub leases: Arc<lease::LeaseBook>,
    /// The runtime root's children: session actor id → session id.
    root_children: DashMap<ractor::ActorId, String>,
    /// Session actors that crashed, by session id: (actor, cause), until the prompt whose
    /// turn they ran takes the entry and restarts the session.
    crashed: DashMap<String, (ractor::ActorId, String)>,
    /// Restart-intensity state of each session (crashes within the period).
    session_intensity: DashMap<String, crate::supervision::Intensity>,
    /// Notified after the root handled a supervision event.
    root_events: tokio::sync::Notify,
    /// Fault injection for tests ([`faults`]; empty without the `fault-injection` feature).
    pub faults: faults::Faults,
    /// File snapshots per project (issue 15).
    pub snapshots: snapshots::Snapshots,
    /// Set while a saved-output cleanup runs (one at a time).
    output_cleanup_running: AtomicBool,
    /// MCP servers: states and tools (issue 16; see [`mcp`]).
    pub mcp: Arc<mcp::McpHub>,
    /// Pending `question` tool questions.
    pub questions: Arc<crate::question::QuestionBroker>,
    /// Hook commands of the config's `hooks` block; `None` when none is configured (the
    /// tool-call, request and idle paths then skip hooks entirely).
    pub hooks: Option<Arc<troupe_tools::hooks::Hooks>>,
    /// Running `session.idle` hooks: shutdown waits for them (within its grace period), so
    /// the notification of a CLI run's last turn is not cut off by the exit.
    pub(crate) hook_tasks: tokio_util::task::TaskTracker,
    /// The cluster that runs `cluster.subagents` task calls, once this process joined one
    /// ([`Runtime::set_remote_subagents`]).
    pub(crate) remote: std::sync::OnceLock<Arc<dyn remote::RemoteSubagents>>,
}

impl RuntimeShared {
    /// The provider client for a model (one per `provider/model`, sharing one HTTP pool).
    pub fn provider(&self, model: &ResolvedModel) -> Arc<Provider> {
        let key = model.full_id();
        if let Some(p) = self.providers.get(&key) {
            return p.clone();
        }
        let p = Arc::new(Provider::new(self.http.clone(), model.clone()));
        self.providers.insert(key, p.clone());
        p
    }
}

/// What to send in a prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptInput {
    /// The user's text.
    pub text: String,
    /// Agent name (default `build`).
    pub agent: Option<String>,
    /// `provider/model` (default: agent's, session's, config's).
    pub model: Option<String>,
    /// Extra system prompt for this message.
    pub system: Option<String>,
    /// Synthetic text parts to attach (reminders).
    pub synthetic: Vec<String>,
    /// Only compact the session's history (`session compact`); `text` is ignored.
    pub compact: bool,
    /// OpenCode's `noReply`: store the user message and run no turn (the result has no
    /// assistant message). Queued behind a running turn like any prompt.
    pub no_reply: bool,
    /// A JSON Schema the turn's final answer must satisfy (structured output, see
    /// [`structured`]): the answer is [`TurnResult::structured`]. An invalid schema, or a
    /// model without tool calls, refuses the prompt before anything is stored.
    pub schema: Option<serde_json::Value>,
    /// Sent to a busy session, join its running turn at the next step boundary
    /// ([`steer`]) instead of waiting for a turn of its own. The user-facing entry points
    /// (CLI `--session`, the API, the web view) set it unless asked to `queue`; the library
    /// default (`false`) queues.
    pub steer: bool,
    /// Files attached to the prompt (`-f`, API `file` parts), resolved with the text's
    /// `@` references before the prompt is queued (see [`inputs`]).
    pub files: Vec<inputs::FileInput>,
    /// Subagents named by API `agent` parts (`@name` in the text works too).
    pub agents: Vec<String>,
    /// The parts [`inputs::resolve`] made (synthetic read results, `file` and `agent`
    /// parts), stored after the text part. A `file` part holding an image or a PDF refuses
    /// the prompt, before anything is stored, when the model does not accept it.
    pub parts: Vec<troupe_session::PartKind>,
    /// Step limit of this prompt's turn (≥ 1), over the agent's `steps` and
    /// [`RuntimeOptions::max_steps`]; a turn that reaches it ends as any turn at its limit.
    /// `troupe batch` sets it from a task's `maxSteps`.
    pub max_steps: Option<u32>,
    /// Deliver this prompt at most once to the session (a cluster task, which JetStream may
    /// deliver again after its worker died): when the session, as loaded under its lease,
    /// already holds a user message, no new one is stored and the session's last turn is
    /// resumed from the store instead (its interrupted parts were swept when the lease was
    /// taken; a turn that had already ended returns its result without a new step). Meant
    /// for sessions that receive exactly one prompt (`troupe worker`'s task sessions).
    pub once: bool,
}

/// Changes to a session (`PATCH /session/{id}`, OpenCode's `{title?, permission?}`).
#[derive(Debug, Clone, Default)]
pub struct SessionPatch {
    /// New title.
    pub title: Option<String>,
    /// Rules appended to the session's own ruleset (later rules win, as OpenCode merges
    /// them onto the existing ruleset); they apply from the session's next turn.
    pub permission: Option<troupe_agents::Ruleset>,
}

impl SessionPatch {
    /// Apply to `s` and bump its `time.updated`.
    ///
    /// Errors (and leaves `s` unchanged) when the session's stored ruleset does not decode:
    /// merging onto an empty ruleset instead would drop its restrictions.
    pub fn apply(&self, s: &mut troupe_session::Session) -> Result<(), String> {
        let permission = match &self.permission {
            Some(extra) => {
                let old = s.ruleset().map_err(|e| e.to_string())?;
                Some(troupe_agents::Ruleset::merge(&[&old, extra]).into())
            }
            None => None,
        };
        if let Some(t) = &self.title {
            s.title = t.clone();
        }
        if permission.is_some() {
            s.permission = permission;
        }
        s.time.updated = troupe_session::now_ms();
        Ok(())
    }
}

/// How long [`Runtime::delete_session`] waits for an aborted turn to close its parts before
/// it deletes the session anyway: 10 s.
pub const DELETE_ABORT_WAIT: Duration = Duration::from_secs(10);

/// The result of one turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnResult {
    /// Session.
    pub session_id: String,
    /// The user message the prompt stored.
    pub user_message_id: Option<String>,
    /// The turn's last assistant message.
    pub message: Option<AssistantMessage>,
    /// Its text.
    pub text: String,
    /// Why the turn failed, if it did.
    pub error: Option<MessageError>,
    /// Steps run.
    pub steps: u32,
    /// Cost of this turn, USD.
    pub cost: Decimal,
    /// Session tokens after the turn.
    pub tokens: Tokens,
    /// The validated answer of a turn with [`PromptInput::schema`].
    pub structured: Option<serde_json::Value>,
}

impl TurnResult {
    /// Whether this turn's last assistant message came after `other`'s (message ids grow
    /// with time; a turn without an assistant message counts as earliest).
    pub fn ends_after(&self, other: &TurnResult) -> bool {
        let id = |t: &TurnResult| t.message.as_ref().map(|m| m.id.clone());
        id(self) > id(other)
    }
}

/// Runtime errors (before a turn could run).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No such session.
    #[error("session not found: {0}")]
    SessionNotFound(String),
    /// Store failure.
    #[error(transparent)]
    Store(#[from] troupe_session::StoreError),
    /// Could not start an actor.
    #[error("could not start actor: {0}")]
    Spawn(String),
    /// A request other than a prompt could not run (a command, revert or shell with bad
    /// arguments or state).
    #[error("{0}")]
    Turn(String),
    /// A prompt got no turn result: refused before it started, or the session actor went
    /// away (see [`TurnError`]).
    #[error(transparent)]
    Prompt(#[from] TurnError),
    /// Another process drives the session (holds its lease): it did not finish within the
    /// wait ([`RuntimeOptions::lease_wait`]), or the session cannot be deleted now.
    #[error("session {session_id} is driven by {owner} since {since}; {outcome}")]
    SessionBusy {
        /// The session.
        session_id: String,
        /// Who drives it: `troupe serve (pid 123 on box)`.
        owner: String,
        /// When the owner took it, ISO-8601 UTC (store clock).
        since: String,
        /// What this caller did about it: `gave up after waiting 300.0 s …`, `nothing
        /// deleted`.
        outcome: String,
    },
}

/// The root supervisor.
struct RootActor;

impl Actor for RootActor {
    type Msg = ();
    type State = Arc<RuntimeShared>;
    type Arguments = Arc<RuntimeShared>;

    async fn pre_start(
        &self,
        _m: ActorRef<()>,
        rt: Arc<RuntimeShared>,
    ) -> Result<Arc<RuntimeShared>, ActorProcessingErr> {
        Ok(rt)
    }

    async fn post_start(
        &self,
        myself: ActorRef<()>,
        shared: &mut Arc<RuntimeShared>,
    ) -> Result<(), ActorProcessingErr> {
        // Saved-output cleanup: now, then periodically; the timer ends with this actor.
        if shared.opts.output_retention.is_some() {
            let _ = myself.cast(());
            myself.send_interval(OUTPUT_CLEANUP_INTERVAL, || ());
        }
        Ok(())
    }

    /// `()` is the cleanup tick: delete saved tool outputs past their retention, off the
    /// handler (a slow file system never holds the root's supervision), one sweep at a time.
    async fn handle(
        &self,
        _m: ActorRef<()>,
        _msg: (),
        shared: &mut Arc<RuntimeShared>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(retention) = shared.opts.output_retention else {
            return Ok(());
        };
        if shared.output_cleanup_running.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let removed = troupe_tools::truncate::cleanup_outputs(retention).await;
            if removed > 0 {
                tracing::info!(removed, "deleted saved tool outputs past their retention");
            }
            shared
                .output_cleanup_running
                .store(false, Ordering::Release);
        });
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _m: ActorRef<()>,
        evt: SupervisionEvent,
        shared: &mut Arc<RuntimeShared>,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, crash) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        // Supervise by identity: only the session actors this root spawned are its children.
        let id = cell.get_id();
        let Some(session_id) = shared.root_children.get(&id).map(|e| e.value().clone()) else {
            tracing::warn!(actor = %id, "supervision event from an unknown child of the runtime; ignored");
            return Ok(());
        };
        shared
            .sessions
            .remove_if(&session_id, |_, a| a.get_id() == id);
        if let Some(cause) = crash {
            tracing::error!("session actor {session_id} crashed: {cause}");
            shared.counters.failure(crate::supervision::Role::Session);
            shared.tree.root_failure();
            // The prompt waiting on this actor's turn restarts it from the store.
            shared.crashed.insert(session_id, (id, cause));
        }
        // Only now is the child gone: `crash_of` reads `crashed` as soon as it sees the child
        // removed, so the cause must be there first (removing first let a waiting prompt see
        // no cause and fail with "the session actor stopped during the turn").
        shared.root_children.remove(&id);
        shared.root_events.notify_waiters();
        Ok(())
    }
}

/// Before a loaded session is swept: for each tool part still `running` whose metadata
/// names its processes' mark (bash, [`troupe_tools::procs::OWNER_METADATA_KEY`]), stop
/// whatever still carries that mark (the process that ran it died) and record how many on
/// the part ([`troupe_session::store::SURVIVORS_KEY`]) so the swept error says so (issue
/// 12.4).
pub(crate) async fn stop_survivors(history: &mut [troupe_session::MessageWithParts]) {
    for m in history.iter_mut() {
        for p in m.parts.iter_mut() {
            let troupe_session::PartKind::Tool {
                state:
                    troupe_session::ToolState::Running {
                        metadata: Some(meta),
                        ..
                    },
                ..
            } = &mut p.kind
            else {
                continue;
            };
            let Some(tag) = meta
                .get(troupe_tools::procs::OWNER_METADATA_KEY)
                .and_then(|v| v.as_str())
                .map(str::to_string)
            else {
                continue;
            };
            let n = tokio::task::spawn_blocking(move || troupe_tools::procs::stop_survivors(&tag))
                .await
                .unwrap_or(0);
            if n > 0 {
                tracing::warn!(part = %p.id, processes = n, "stopped processes that outlived a crashed troupe");
            }
            meta[troupe_session::store::SURVIVORS_KEY] = serde_json::json!(n);
        }
    }
}

/// The runtime: one per process.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<RuntimeShared>,
    root: ActorRef<()>,
}

impl Runtime {
    /// Start the root supervisor. Agents are loaded from `config` (built-ins, `agent` keys,
    /// markdown agents in the global dir and the worktree's `.troupe/`). `responder` answers
    /// permission asks nobody else answers first (a policy or a terminal prompt; see
    /// [`permission`]).
    pub async fn start(
        store: Store,
        config: LoadedConfig,
        registry: Registry,
        responder: Arc<dyn PermissionAsker>,
        opts: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let cfg = config.clone();
        let agents = tokio::task::spawn_blocking(move || troupe_agents::AgentSet::load(&cfg, &[]))
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?
            .map_err(|e| RuntimeError::Turn(e.to_string()))?;
        Self::start_with_agents(store, config, agents, registry, responder, opts).await
    }

    /// [`Runtime::start`] with an already loaded agent set.
    pub async fn start_with_agents(
        store: Store,
        config: LoadedConfig,
        agents: troupe_agents::AgentSet,
        registry: Registry,
        responder: Arc<dyn PermissionAsker>,
        opts: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        let mut registry = registry;
        let mcp = mcp::McpHub::new(&config.config.mcp, store.bus().clone());
        registry.add_source(mcp.clone());
        let max_subagents = opts.max_subagents.max(1);
        let lease_label = opts.lease_label.clone();
        let snapshots = snapshots::Snapshots::new(
            opts.snapshot_dir.clone(),
            config.config.snapshot == Some(false),
        );
        let hooks = (!config.config.hooks.is_empty())
            .then(|| Arc::new(troupe_tools::hooks::Hooks::new(config.config.hooks.clone())));
        let questions = Arc::new(crate::question::QuestionBroker::new(store.clone()));
        let shared = Arc::new_cyclic(|weak| {
            registry.register(Arc::new(crate::task::TaskTool::new(weak.clone())));
            registry.register(Arc::new(crate::task::TaskStatusTool::new(weak.clone())));
            registry.register(Arc::new(crate::todo::TodoWriteTool::new(store.clone())));
            registry.register(Arc::new(crate::todo::TodoReadTool::new(store.clone())));
            registry.register(Arc::new(crate::question::QuestionTool::new(
                questions.clone(),
            )));
            // A registry that brings its own `skill` (e.g. another global dir) keeps it.
            if registry.get("skill").is_none() {
                registry.register(Arc::new(crate::skill::SkillTool::new(
                    troupe_config::global_config_dir(),
                )));
            }
            RuntimeShared {
                store: store.clone(),
                config: Arc::new(config),
                registry: Arc::new(registry),
                agents: Arc::new(agents),
                broker: Arc::new(
                    crate::permission::PermissionBroker::new(store.clone(), responder)
                        .with_hooks(hooks.clone()),
                ),
                opts,
                sessions: DashMap::new(),
                counters: Counters::default(),
                task_children: DashMap::new(),
                background: DashMap::new(),
                root_ref: std::sync::OnceLock::new(),
                subagent_slots: Arc::new(tokio::sync::Semaphore::new(max_subagents)),
                rate_limits: DashMap::new(),
                tree: Arc::new(crate::tree::ActorTree::default()),
                http,
                providers: DashMap::new(),
                spawn_lock: tokio::sync::Mutex::new(()),
                identity: lease::Identity::current(&lease_label),
                leases: Arc::new(lease::LeaseBook::default()),
                root_children: DashMap::new(),
                crashed: DashMap::new(),
                session_intensity: DashMap::new(),
                root_events: tokio::sync::Notify::new(),
                faults: faults::Faults::default(),
                snapshots,
                output_cleanup_running: AtomicBool::new(false),
                mcp,
                hooks,
                questions,
                hook_tasks: tokio_util::task::TaskTracker::new(),
                remote: std::sync::OnceLock::new(),
            }
        });
        let (root, _) = Actor::spawn(None, RootActor, shared.clone())
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        let _ = shared.root_ref.set(root.clone());
        mcp::server::start(
            shared.mcp.clone(),
            shared.tree.clone(),
            shared.config.config.supervision.clone(),
        )
        .await
        .map_err(RuntimeError::Spawn)?;
        Ok(Runtime { shared, root })
    }

    /// The runtime of these shared parts (`None` before its root actor started).
    pub(crate) fn from_shared(shared: &Arc<RuntimeShared>) -> Option<Runtime> {
        Some(Runtime {
            shared: shared.clone(),
            root: shared.root_ref.get()?.clone(),
        })
    }

    /// Wait until no background subagent started by `session_id` (or by its background
    /// subagents) is running and their results have been delivered (each result is a
    /// prompt to the parent: it joins the parent's running turn or starts a new one, which
    /// this also waits for). `troupe run` calls it before it exits, so a run's background
    /// work is not cut off by the process ending.
    ///
    /// Returns the result of the latest of `session_id`'s turns that took a delivery (by
    /// its assistant message id, which grows with time), or `None` when no result was
    /// delivered since the last call: `troupe run` reports that turn (exit code,
    /// `--output-last-message`) rather than the first one, which ended before the results.
    pub async fn wait_background(&self, session_id: &str) -> Option<TurnResult> {
        loop {
            // The session's background subagents and theirs, transitively.
            let mut parents = vec![session_id.to_string()];
            let mut pending = Vec::new();
            while let Some(p) = parents.pop() {
                for b in self.shared.background.iter().filter(|b| b.parent == p) {
                    parents.push(b.key().clone());
                    if !*b.settled.borrow() {
                        pending.push(b.settled.clone());
                    }
                }
            }
            if pending.is_empty() {
                break;
            }
            for mut rx in pending {
                let _ = rx.wait_for(|settled| *settled).await;
            }
        }
        let mut latest: Option<TurnResult> = None;
        for b in self
            .shared
            .background
            .iter()
            .filter(|b| b.parent == session_id)
        {
            let taken = b.delivered.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(turn) = taken
                && latest.as_ref().is_none_or(|l| turn.ends_after(l))
            {
                latest = Some(turn);
            }
        }
        latest
    }

    /// Let the cluster run this runtime's `task` calls of the subagents config
    /// `cluster.subagents` names (see [`remote`]). Set once, when the process joins a
    /// cluster; a second call is ignored.
    pub fn set_remote_subagents(&self, remote: Arc<dyn remote::RemoteSubagents>) {
        let _ = self.shared.remote.set(remote);
    }

    /// Install a fault hook (tests only: feature `fault-injection`); see [`faults`].
    #[cfg(feature = "fault-injection")]
    pub fn inject_faults(&self, hook: faults::FaultHook) {
        self.shared.faults.install(hook);
    }

    /// Shared parts (store, config, counters).
    pub fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The bus.
    pub fn bus(&self) -> &Bus {
        self.shared.store.bus()
    }

    /// Create and store a new session in `directory` (optionally a child of `parent`).
    pub async fn create_session(
        &self,
        directory: &Path,
        parent: Option<String>,
    ) -> Result<Session, RuntimeError> {
        let dir = directory
            .canonicalize()
            .unwrap_or_else(|_| directory.to_path_buf());
        let s = Session::new(&dir.display().to_string(), parent);
        self.shared.store.write1(Write::Session {
            info: s.clone(),
            created: true,
        });
        self.shared.store.flush().await?;
        Ok(s)
    }

    /// The live actor of `session_id`, or a new one once this runtime holds the session's
    /// lease: another process's lease is waited for (polling every
    /// [`lease::LEASE_POLL`], publishing `session.status` `waiting` once) up to
    /// [`RuntimeOptions::lease_wait`], then [`RuntimeError::SessionBusy`]. The session is
    /// loaded (and swept) only after the lease is taken, so its history is current.
    ///
    /// `abort` is the prompt's abort token ([`Runtime::abort`] cancels it): it ends a wait.
    async fn session_actor(
        &self,
        session_id: &str,
        abort: &tokio_util::sync::CancellationToken,
    ) -> Result<ActorRef<SessionMsg>, RuntimeError> {
        if let Some(a) = self.shared.sessions.get(session_id) {
            return Ok(a.clone());
        }
        let store = &self.shared.store;
        let opts = &self.shared.opts;
        let started = std::time::Instant::now();
        let claim = self.shared.identity.claim();
        let mut announced = false;
        let lease = loop {
            // A prompt from this process may have started the actor while we waited.
            if let Some(a) = self.shared.sessions.get(session_id) {
                return Ok(a.clone());
            }
            match store.lease_take(session_id, &claim, opts.lease_ttl).await? {
                troupe_session::TakeOutcome::Taken { lease, previous } => {
                    if let Some(p) = previous {
                        tracing::warn!(
                            "session {session_id}: took over the expired lease of {}",
                            p.describe()
                        );
                    }
                    break lease::SessionLease::start(
                        store.clone(),
                        &lease,
                        opts.lease_ttl,
                        self.shared.leases.clone(),
                    );
                }
                troupe_session::TakeOutcome::Held(holder) => {
                    let waited = started.elapsed();
                    // A `waiting` status announced earlier ends with this driver's wait.
                    let end_wait = |announced: bool| {
                        if announced {
                            store.write1(Write::Publish(troupe_session::Event::SessionStatus {
                                session_id: session_id.to_string(),
                                status: troupe_session::SessionStatus::Idle,
                            }));
                        }
                    };
                    if waited >= opts.lease_wait {
                        end_wait(announced);
                        return Err(RuntimeError::SessionBusy {
                            session_id: session_id.to_string(),
                            owner: holder.describe(),
                            since: troupe_session::iso_time(holder.acquired),
                            outcome: format!(
                                "gave up after waiting {:.1} s (TROUPE_LEASE_WAIT_MS sets the wait)",
                                waited.as_secs_f64()
                            ),
                        });
                    }
                    // Our own process's holder is an actor starting or stopping: no news.
                    let ours = holder.pid == self.shared.identity.pid
                        && holder.host == self.shared.identity.host;
                    if !announced && !ours {
                        announced = true;
                        tracing::info!(
                            "session {session_id} is driven by {}; waiting",
                            holder.describe()
                        );
                        let until = troupe_session::now_ms()
                            + (opts.lease_wait - waited).as_millis().min(i64::MAX as u128) as i64;
                        store.write1(Write::Publish(troupe_session::Event::SessionStatus {
                            session_id: session_id.to_string(),
                            status: troupe_session::SessionStatus::Waiting {
                                owner: holder.describe(),
                                until,
                            },
                        }));
                    }
                    let left = opts.lease_wait - waited;
                    tokio::select! {
                        _ = tokio::time::sleep(left.min(lease::LEASE_POLL)) => {}
                        _ = abort.cancelled() => {
                            end_wait(announced);
                            return Err(RuntimeError::Turn(format!(
                                "gave up waiting for session {session_id}, which {} drives",
                                holder.describe()
                            )));
                        }
                    }
                }
            }
        };
        let _guard = self.shared.spawn_lock.lock().await;
        if let Some(a) = self.shared.sessions.get(session_id) {
            // Defensive: a live actor holds its own lease, so ours was granted only after
            // that one's release; use the live actor and release ours.
            drop(lease);
            return Ok(a.clone());
        }
        let sid = session_id.to_string();
        let (session, history) = self
            .shared
            .store
            .read(move |r| Ok((r.session(&sid)?, r.messages(&sid)?)))
            .await?;
        let session =
            session.ok_or_else(|| RuntimeError::SessionNotFound(session_id.to_string()))?;
        // A prompt after a revert deletes the messages the revert hid (issue 15).
        let (session, mut history) = revert::cleanup(&self.shared, session, history);
        stop_survivors(&mut history).await;
        troupe_session::store::sweep_interrupted(&self.shared.store, &mut history);
        let args = SessionArgs {
            rt: self.shared.clone(),
            session,
            history,
            tree_parent: None,
            lease: Some(lease),
            span_parent: None,
        };
        let (actor, _) = Actor::spawn_linked(None, SessionActor, args, self.root.get_cell())
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        self.shared
            .root_children
            .insert(actor.get_id(), session_id.to_string());
        self.shared
            .sessions
            .insert(session_id.to_string(), actor.clone());
        Ok(actor)
    }

    /// Send a prompt and wait for its turn to finish. Prompts to a busy session queue and
    /// run in order.
    pub async fn prompt(
        &self,
        session_id: &str,
        input: PromptInput,
    ) -> Result<TurnResult, RuntimeError> {
        // An abort that comes before the prompt reaches the session's actor (while the lease
        // is taken or waited for, or the actor starts) must not be lost: `abort` cancels this
        // token, which ends a wait and is checked again once the prompt is queued.
        let pending = self.shared.leases.wait_guard(session_id);
        let mut input = input;
        if inputs::needed(&input) {
            inputs::resolve(&self.shared, session_id, &mut input, &pending.token)
                .await
                .map_err(TurnError::Refused)?;
        }
        // Set once the session actor crashed during this prompt's turn: the turn goes on
        // from the store instead of starting again.
        let mut resume = false;
        loop {
            let actor = self.session_actor(session_id, &pending.token).await?;
            let accepted = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicBool::new(false));
            let (tx, rx) = oneshot::channel();
            let msg = SessionMsg::Prompt(Box::new(PendingPrompt {
                input: input.clone(),
                accepted: accepted.clone(),
                started: started.clone(),
                resume,
                reply: tx,
            }));
            if actor.cast(msg).is_err() {
                // The actor stopped between lookup and send: start a fresh one.
                self.shared
                    .sessions
                    .remove_if(session_id, |_, a| a.get_id() == actor.get_id());
                continue;
            }
            if pending.token.is_cancelled() {
                // Aborted on the way: the abort goes after the prompt in the mailbox.
                let _ = actor.cast(SessionMsg::Abort);
            }
            match rx.await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) => return Err(e.into()),
                Err(_) if !accepted.load(Ordering::SeqCst) => {
                    self.shared
                        .sessions
                        .remove_if(session_id, |_, a| a.get_id() == actor.get_id());
                    continue;
                }
                Err(_) => {
                    let Some(cause) = self.crash_of(session_id, &actor).await else {
                        return Err(TurnError::StoppedDuringTurn.into());
                    };
                    if !started.load(Ordering::SeqCst) {
                        // Still queued when the actor crashed: send it again as it was.
                        continue;
                    }
                    if pending.token.is_cancelled() {
                        return Err(TurnError::CrashedThenAborted { cause }.into());
                    }
                    let cfg = &self.shared.config.config.supervision;
                    let verdict = self
                        .shared
                        .session_intensity
                        .entry(session_id.to_string())
                        .or_insert_with(|| {
                            crate::supervision::Intensity::for_role(
                                crate::supervision::Role::Session,
                                cfg,
                            )
                        })
                        .crash(std::time::Instant::now());
                    match verdict {
                        crate::supervision::Verdict::Restart { backoff, attempt } => {
                            tracing::warn!(
                                "session {session_id}: restarting its actor from the store (restart {attempt}) after: {cause}"
                            );
                            self.shared
                                .counters
                                .restart(crate::supervision::Role::Session);
                            self.shared.tree.root_restart();
                            tokio::select! {
                                _ = tokio::time::sleep(backoff) => {}
                                _ = pending.token.cancelled() => {}
                            }
                            // The turn goes on from the store: no new user message.
                            resume = true;
                            continue;
                        }
                        crate::supervision::Verdict::Escalate { crashes } => {
                            let err = TurnError::Failed {
                                crashes,
                                period_secs: cfg.period().as_secs(),
                                limit: cfg.session_restarts(),
                                cause,
                            };
                            self.shared.store.write1(Write::Publish(
                                troupe_session::Event::SessionError {
                                    session_id: session_id.to_string(),
                                    error: MessageError::new(
                                        MessageErrorName::Unknown,
                                        err.to_string(),
                                    ),
                                },
                            ));
                            return Err(err.into());
                        }
                    }
                }
            }
        }
    }

    /// Change a session's title or permission rules. A live session actor applies it (so its
    /// next write keeps it); otherwise the stored session is updated. Returns the session.
    pub async fn update_session(
        &self,
        session_id: &str,
        patch: SessionPatch,
    ) -> Result<troupe_session::Session, RuntimeError> {
        let live = self.shared.sessions.get(session_id).map(|a| a.clone());
        if let Some(actor) = live {
            let (tx, rx) = oneshot::channel();
            if actor.cast(SessionMsg::Update(patch.clone(), tx)).is_ok()
                && let Ok(s) = rx.await
            {
                let s = s.map_err(RuntimeError::Turn)?;
                self.shared.store.flush().await?;
                return Ok(s);
            }
            // The actor stopped before it took the change: update the store instead.
        }
        let key = session_id.to_string();
        let mut s = self
            .shared
            .store
            .read(move |r| r.session(&key))
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.to_string()))?;
        patch.apply(&mut s).map_err(RuntimeError::Turn)?;
        self.shared.store.write1(Write::Session {
            info: s.clone(),
            created: false,
        });
        self.shared.store.flush().await?;
        Ok(s)
    }

    /// Why `actor` (the actor of `session_id`) ended, when it crashed: waits until the root
    /// handled its supervision event (the reply channel closes a moment before), at most 5 s.
    async fn crash_of(&self, session_id: &str, actor: &ActorRef<SessionMsg>) -> Option<String> {
        let wait = async {
            loop {
                let notified = self.shared.root_events.notified();
                if !self.shared.root_children.contains_key(&actor.get_id()) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
        self.shared
            .crashed
            .remove_if(session_id, |_, (id, _)| *id == actor.get_id())
            .map(|(_, (_, cause))| cause)
    }

    /// Compact a session's history now (a manual compaction; waits for the summary).
    pub async fn compact(&self, session_id: &str) -> Result<TurnResult, RuntimeError> {
        self.prompt(
            session_id,
            PromptInput {
                compact: true,
                ..Default::default()
            },
        )
        .await
    }

    /// Abort a session's running turn (and its queued prompts). No-op when idle.
    pub fn abort(&self, session_id: &str) {
        if let Some(a) = self.shared.sessions.get(session_id) {
            let _ = a.cast(SessionMsg::Abort);
        }
        self.shared.leases.abort_waits(Some(session_id));
    }

    /// [`Runtime::abort`] because the caller's deadline for the turn passed (a batch task's
    /// `timeout`): the same, and the turn's span records `outcome = timeout`.
    pub fn abort_timed_out(&self, session_id: &str) {
        if let Some(a) = self.shared.sessions.get(session_id) {
            let _ = a.cast(SessionMsg::AbortTimedOut);
        }
        self.shared.leases.abort_waits(Some(session_id));
    }

    /// Abort everything.
    pub fn abort_all(&self) {
        for a in self.shared.sessions.iter() {
            let _ = a.cast(SessionMsg::Abort);
        }
        self.shared.leases.abort_waits(None);
    }

    /// Answer a pending permission request (`permission.asked` id).
    pub fn reply_permission(&self, request_id: &str, reply: crate::permission::Reply) -> bool {
        self.shared.broker.reply(request_id, reply)
    }

    /// Pending questions of the `question` tool (their `question.asked` payloads).
    pub fn pending_questions(&self) -> Vec<serde_json::Value> {
        self.shared.questions.pending()
    }

    /// Answer a pending question: one list of picked labels or typed text per question.
    pub fn reply_question(
        &self,
        id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), crate::question::ReplyError> {
        self.shared.questions.reply(id, answers)
    }

    /// Let `asker` (a terminal) answer the model's questions besides the API; set once.
    pub fn set_question_asker(&self, asker: Arc<dyn crate::question::QuestionAsker>) {
        self.shared.questions.set_asker(asker);
    }

    /// Dismiss a pending question (its turn stops); false when it is not pending.
    pub fn reject_question(&self, id: &str) -> bool {
        self.shared.questions.reject(id)
    }

    /// Number of live session actors.
    pub fn live_sessions(&self) -> usize {
        self.shared.sessions.len()
    }

    /// The live supervision tree: runtime → sessions → processor → tool calls → subagent
    /// sessions, with status, current tool, steps, tokens and cost.
    pub fn actors(&self) -> crate::tree::ActorNode {
        self.shared.tree.tree()
    }

    /// Pending permission requests (`permission.asked` payloads).
    pub fn pending_permissions(&self) -> Vec<serde_json::Value> {
        self.shared.broker.pending()
    }

    /// Start a prompt without waiting for it (the result goes to the bus).
    pub fn prompt_async(&self, session_id: &str, input: PromptInput) {
        let rt = self.clone();
        let sid = session_id.to_string();
        tokio::spawn(async move {
            if let Err(e) = rt.prompt(&sid, input).await {
                rt.shared
                    .store
                    .write1(Write::Publish(troupe_session::Event::SessionError {
                        session_id: sid.clone(),
                        error: MessageError::new(MessageErrorName::Unknown, e.to_string()),
                    }));
            }
        });
    }

    /// Abort a session and delete it (and its messages, parts and event log) from the store;
    /// its background processes (bash `background: true`) are stopped.
    /// Fails with [`RuntimeError::SessionBusy`] (nothing deleted) while another process
    /// drives the session or one of its children.
    pub async fn delete_session(&self, session_id: &str) -> Result<bool, RuntimeError> {
        self.refuse_if_driven_elsewhere(session_id).await?;
        self.abort(session_id);
        // The aborted turn still closes its parts; delete after those writes, or they would
        // reach the store after the session's rows are gone (a foreign-key failure that
        // fails the writer's whole batch). Bounded: a turn that does not end within
        // [`DELETE_ABORT_WAIT`] is deleted anyway.
        let deadline = tokio::time::Instant::now() + DELETE_ABORT_WAIT;
        loop {
            let changed = self.shared.tree.changed();
            if self.shared.tree.session_idle(session_id)
                || tokio::time::timeout_at(deadline, changed).await.is_err()
            {
                break;
            }
        }
        // Its background processes stop with it.
        let owner = session_id.to_string();
        let _ =
            tokio::task::spawn_blocking(move || troupe_tools::procs::stop_session(&owner)).await;
        let sid = session_id.to_string();
        let Some(s) = self.shared.store.read(move |r| r.session(&sid)).await? else {
            return Ok(false);
        };
        let sid = session_id.to_string();
        let children = self.shared.store.read(move |r| r.children(&sid)).await?;
        for c in children {
            Box::pin(self.delete_session(&c.id)).await?;
        }
        // Its background subagent records (as parent and as child) go with it.
        self.shared
            .background
            .retain(|child, b| child != session_id && b.parent != session_id);
        self.shared.store.write1(Write::DeleteSession(s));
        self.shared.store.flush().await?;
        Ok(true)
    }

    /// [`RuntimeError::SessionBusy`] when another process holds the lease of `session_id`
    /// or of a session below it.
    async fn refuse_if_driven_elsewhere(&self, session_id: &str) -> Result<(), RuntimeError> {
        let mut stack = vec![session_id.to_string()];
        while let Some(id) = stack.pop() {
            if let Some(h) = self.shared.store.lease_of(&id).await?
                && (h.pid != self.shared.identity.pid || h.host != self.shared.identity.host)
            {
                return Err(RuntimeError::SessionBusy {
                    session_id: id,
                    owner: h.describe(),
                    since: troupe_session::iso_time(h.acquired),
                    outcome: "nothing deleted (try again when it is idle)".into(),
                });
            }
            let sid = id.clone();
            let children = self.shared.store.read(move |r| r.children(&sid)).await?;
            stack.extend(children.into_iter().map(|c| c.id));
        }
        Ok(())
    }

    /// Number of live actors below the root (sessions, processors, tool calls).
    pub fn live_actors(&self) -> i64 {
        self.shared.counters.live_actors.load(Ordering::Relaxed)
    }

    /// Stop the root supervisor and flush the store. Sessions still finishing background
    /// work (a title) get up to 3 s before everything is aborted.
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(3)).await
    }

    /// [`Runtime::shutdown`] waiting at most `grace` for background work (0 after Ctrl-C).
    pub async fn shutdown_within(self, grace: Duration) {
        // Only idle sessions with background work (a title, a summary) are waited for; a
        // running turn is aborted at once below. Every status change or removal in the tree
        // wakes the wait, so it ends as soon as the last session is gone.
        let _ = tokio::time::timeout(grace, async {
            loop {
                let changed = self.shared.tree.changed();
                if self.shared.sessions.is_empty() || !self.shared.tree.sessions_idle() {
                    return;
                }
                changed.await;
            }
        })
        .await;
        self.shared.hook_tasks.close();
        let _ = tokio::time::timeout(grace, self.shared.hook_tasks.wait()).await;
        self.abort_all();
        // Background processes of every session stop with the runtime.
        let _ = tokio::task::spawn_blocking(troupe_tools::procs::stop_all).await;
        let _ = self.shared.store.flush().await;
        self.root.stop(None);
        mcp::server::stop(&self.shared.mcp, Duration::from_secs(3)).await;
        // Stopped session actors release their leases; give the releases a moment so the
        // next process does not wait for them to expire.
        self.shared.leases.settle(Duration::from_secs(3)).await;
    }
}
