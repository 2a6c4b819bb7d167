//! troupe-actors: the supervised runtime.
//!
//! ```text
//! RootActor (the Runtime's root supervisor, root.rs)           restart strategy of the child
//! └── SessionActor ses_…  serializes prompts; runs the turn    restarted from the store, in-flight
//!     │                                                        turn continues (≤ session_restarts
//!     │                                                        per period), then the turn fails
//!     ├── ProcessorActor msg_…  one per step: stream → parts   open parts closed as errors, step
//!     │   │                                                    retried once (step_retries), then
//!     │   │                                                    the turn fails
//!     │   └── ToolCallActor call_…  one per tool invocation
//!     │       ├── read-only (read, glob, grep, list; the       re-run with the same input after a
//!     │       │   list is supervision.read_only_tools)         backoff (≤ tool_restarts), then an
//!     │       │                                                error part naming the attempts
//!     │       ├── side-effecting (bash, write, edit, MCP, …)   never re-run: error part, outcome
//!     │       │                                                unknown
//!     │       └── task → SessionActor ses_… (subagent, same    restarted from the store by the
//!     │                  tree below)                           task call, turn continues (≤
//!     │                                                        session_restarts), then the call
//!     │                                                        fails
//!     ├── CompactionWorker  summary step on overflow, or when  the turn fails with the cause
//!     │   │                 asked (`session compact`)
//!     │   └── ProcessorActor msg_…  (tool-less summary step)
//!     ├── TitleWorker       first user message of a root       ignored (default title stays)
//!     │                     session → its title
//!     └── SummaryWorker     `summary` agent after a turn that  ignored (no summary stored)
//!                           changed files
//!
//! Outside that tree (spawned unlinked, each the root of its own):
//!
//! McpSupervisor (one per runtime with MCP servers)
//! └── McpServerActor <name>  one per enabled server: its       restarted after a backoff (≤
//!                            process or HTTP session, tools    mcp_restarts per period), then
//!                                                              `failed`, its tools withdrawn
//! SessionActor ses_… of a background subagent (`task` with     restarted from the store, turn
//!   `background: true`; it outlives the call that started it)  continues (≤ session_restarts),
//!                                                              then its result is the failure
//! SessionActor ses_… of a command's subtask (its `task` runs   restarted from the store by the
//!   outside any step, with no tool-call actor to link to)      command, turn continues (≤
//!                                                              session_restarts), then the task
//!                                                              part holds the error
//! ```
//!
//! Where each one lives: `RootActor` in `root.rs` (it also deletes saved tool outputs past
//! their retention, on a timer), [`session_actor`], [`processor`], [`tool_call`],
//! [`compaction`], and the MCP actors in `mcp/server.rs`. The title and summary workers are
//! one generic actor, [`side_worker::SideWorker`], whose job is in [`title`] or [`summary`].
//! A subagent handed to the cluster ([`remote`]) is a turn that a worker of the cluster (this
//! process included) runs under its own root; the `task` call here only waits for its result.
//!
//! Every parent keeps the `ActorId` of each child it spawned, with what the child is (its
//! [`supervision::Role`], its session or its MCP server), and overrides
//! `handle_supervisor_evt` (ractor's default would stop the parent), matching each event
//! against that map: a child's end becomes state (an error part, a retried step, a failed
//! turn) and an event from an unknown child is logged, never guessed. The one exception is the
//! tool-call actor of a `task` call: it ignores the events of its subagent's session actor,
//! whose end the call learns through its reply channel. Restarts and failures are counted per
//! node in [`tree`] (`/actors`, `troupe monitor`) and per role in [`Counters`]
//! (`troupe_actor_restarts_total{role}`, `troupe_actor_failures_total{role}` on `/metrics`).
//! Limits come from the `supervision` config block. Streams and waits run in tasks that cast
//! back to their actor, so handlers stay short and an abort is never stuck behind a long
//! await. Cancellation flows down the tree as a `CancellationToken`. Waits a session actor has
//! between steps are messages, not awaits in its handler: a crashed step's backoff is a timer
//! (`SessionMsg::RetryStep`) and the `chat.params` hooks of a step run on a task that answers
//! with `SessionMsg::StepParams`; an abort meanwhile ends the turn at once.
//!
//! The turn loop's decisions are plain functions with unit tests beside them, and the actors
//! carry them out: what follows a step ([`turn`]), the provider request of a step, a
//! compaction, a title or a turn summary ([`request`]), and what a stream event does to the
//! step's parts ([`stream_parts`]). A prompt that gets no result says why with a [`TurnError`].

mod api;
pub mod command;
pub mod compaction;
mod counters;
pub mod doom;
pub mod faults;
pub mod history;
pub mod inputs;
pub mod lease;
pub mod mcp;
pub mod memory;
mod options;
pub mod permission;
pub mod processor;
pub mod progress;
pub mod question;
pub mod recover;
pub mod remote;
pub mod request;
pub mod revert;
mod root;
mod runtime;
pub mod session_actor;
pub mod side_worker;
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
    AssistantMessage, Bus, MessageError, MessageErrorName, MessageId, Session, SessionId, Store,
    Tokens, Write,
};
use troupe_tools::{PermissionAsker, Registry};
pub use turn_error::TurnError;

use crate::session_actor::{PendingPrompt, SessionActor, SessionArgs, SessionMsg};

pub use api::{PromptInput, RuntimeError, SessionPatch, TurnResult};
pub use counters::{ActorGauge, Counters};
pub use options::{OUTPUT_CLEANUP_INTERVAL, RuntimeOptions};
pub(crate) use root::RootActor;
pub use runtime::{DELETE_ABORT_WAIT, Runtime, RuntimeShared};
