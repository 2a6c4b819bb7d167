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

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use troupe_agents::Agent;
use troupe_config::ResolvedModel;
use troupe_llm::ToolSpec;
use troupe_session::{
    AssistantMessage, Event, Message, MessageError, MessageErrorName, MessagePath,
    MessageWithParts, ModelRef, Part, PartKind, Session, SessionStatus, UserMessage, UserTime,
    Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::history::ChatCache;
use crate::processor::{ProcessorActor, ProcessorArgs, ProcessorState, StepResult};
use crate::{PromptInput, RuntimeShared, TurnError, TurnResult};

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
    pub rt: Arc<RuntimeShared>,
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
    user_id: String,
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
    origin_user_id: String,
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
    replay: Option<String>,
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
    rt: Arc<RuntimeShared>,
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
                .rt
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
                // Idle: release the actor (and its memory).
                state.rt.sessions.remove(&state.session.id);
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
                    state.rt.store.write1(Write::Publish(Event::SessionStatus {
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

    /// Resolve the prompt's agent (default: the config's default agent) and model (agent's,
    /// session's, config's), then store the user message with its parts (text or compaction
    /// request, synthetic reminders) and append it to the history. Returns the agent, the
    /// model and the new message's id; errors name a bad agent or model.
    fn add_user_message(
        &self,
        state: &mut SessionState,
        input: &PromptInput,
    ) -> Result<
        (
            troupe_agents::Agent,
            Arc<troupe_config::model::ResolvedModel>,
            String,
        ),
        String,
    > {
        let rt = state.rt.clone();
        let agent = match &input.agent {
            Some(name) => rt.agents.require(name).map_err(|e| e.to_string())?.clone(),
            None => rt
                .agents
                .default_agent(rt.config.config.default_agent.as_deref())
                .map_err(|e| e.to_string())?
                .clone(),
        };
        let model_spec = input
            .model
            .clone()
            .or_else(|| agent.model.clone())
            .or_else(|| state.session.model.as_ref().map(ModelRef::full))
            .or_else(|| rt.config.default_model())
            .ok_or_else(|| {
                "no model configured: set \"model\" in troupe.json or pass --model provider/model"
                    .to_string()
            })?;
        let model = Arc::new(
            rt.config
                .resolve_model(&model_spec)
                .map_err(|e| e.to_string())?,
        );
        crate::inputs::check_media(&input.parts, &model)?;
        if input.schema.is_some() && !model.tool_call {
            return Err(format!(
                "model {} cannot call tools, so it cannot give a structured answer (--json-schema / \"schema\" need a model with tool calls)",
                model.full_id()
            ));
        }
        let user = UserMessage {
            id: troupe_session::id::message(),
            session_id: state.session.id.clone(),
            time: UserTime { created: now_ms() },
            agent: agent.name.clone(),
            model: ModelRef::from(&*model),
            system: input.system.clone(),
            summary: None,
        };
        // A prompt of only attachments or synthetic text (an API file part, a subtask's
        // follow-up) stores no empty text part.
        let mut parts = Vec::new();
        if input.compact {
            parts.push(Part::new(
                &state.session.id,
                &user.id,
                PartKind::Compaction {
                    auto: false,
                    overflow: false,
                    tail_start_id: None,
                },
            ));
        } else if !input.text.is_empty() || (input.parts.is_empty() && input.synthetic.is_empty()) {
            parts.push(Part::new(
                &state.session.id,
                &user.id,
                PartKind::Text {
                    text: input.text.clone(),
                    synthetic: false,
                    time: None,
                },
            ));
        }
        // Agent switching: a synthetic reminder on the new user message (plan → read-only;
        // plan → build → edits allowed again).
        let previous_agent = state.history.last().map(|m| match &m.info {
            Message::Assistant(a) => a.agent.clone(),
            Message::User(u) => u.agent.clone(),
        });
        let reminder = troupe_agents::switch_reminder(previous_agent.as_deref(), &agent.name)
            .filter(|_| !input.compact);
        if !input.compact {
            for kind in &input.parts {
                parts.push(Part::new(&state.session.id, &user.id, kind.clone()));
            }
        }
        for extra in input.synthetic.iter().cloned().chain(reminder) {
            parts.push(Part::new(
                &state.session.id,
                &user.id,
                PartKind::Text {
                    text: extra,
                    synthetic: true,
                    time: None,
                },
            ));
        }
        state.session.agent = Some(agent.name.clone());
        state.session.model = Some(user.model.clone());
        state.session.time.updated = now_ms();
        let mut writes = vec![
            Write::Session {
                info: state.session.clone(),
                created: false,
            },
            Write::Message(Message::User(user.clone())),
        ];
        writes.extend(parts.iter().cloned().map(Write::Part));
        rt.store.write(writes);
        let user_id = user.id.clone();
        state.history.push(MessageWithParts {
            info: Message::User(user),
            parts,
        });
        Ok((agent, model, user_id))
    }

    /// A `noReply` prompt (OpenCode's): store the user message, run no turn.
    fn store_only(
        &self,
        state: &mut SessionState,
        input: &PromptInput,
    ) -> Result<TurnResult, TurnError> {
        let (_, _, user_id) = self
            .add_user_message(state, input)
            .map_err(TurnError::Refused)?;
        Ok(TurnResult {
            session_id: state.session.id.clone(),
            user_message_id: Some(user_id),
            message: None,
            text: String::new(),
            error: None,
            steps: 0,
            cost: Default::default(),
            tokens: state.session.tokens,
            structured: None,
        })
    }

    /// Create the user message and resolve agent, model, tools, permissions and the system
    /// prompt (instruction files are read on the blocking pool).
    async fn begin_turn(
        &self,
        state: &mut SessionState,
        input: PromptInput,
        resume: bool,
    ) -> Result<Turn, TurnError> {
        let structured = input
            .schema
            .as_ref()
            .map(|s| crate::structured::StructuredTurn::new(s, &state.rt.registry))
            .transpose()
            .map_err(TurnError::Refused)?;
        let max_steps = input.max_steps;
        let mut turn = if resume {
            self.resume_turn(state, input).await?
        } else {
            let (agent, model, user_id) = self
                .add_user_message(state, &input)
                .map_err(TurnError::Refused)?;
            self.turn_for(state, agent, model, user_id, input.system, input.compact)
                .await?
        };
        if let Some(n) = max_steps {
            turn.max_steps = n.max(1);
        }
        if let Some(st) = structured {
            turn.tools.extend(st.spec());
            turn.system = crate::structured::StructuredTurn::system(&turn.system);
            turn.structured = Some(st);
        }
        Ok(turn)
    }

    /// Resume the session's last turn after its actor crashed: the agent and model of its
    /// last user message, no new message.
    async fn resume_turn(
        &self,
        state: &mut SessionState,
        input: PromptInput,
    ) -> Result<Turn, TurnError> {
        let rt = state.rt.clone();
        let Some(user) = state.history.iter().rev().find_map(|m| match &m.info {
            Message::User(u) => Some(u.clone()),
            Message::Assistant(_) => None,
        }) else {
            return Err(TurnError::Refused(
                "nothing to resume: the session has no user message".into(),
            ));
        };
        let agent = rt
            .agents
            .require(input.agent.as_deref().unwrap_or(&user.agent))
            .map_err(|e| TurnError::Refused(e.to_string()))?
            .clone();
        let model = Arc::new(
            rt.config
                .resolve_model(&input.model.clone().unwrap_or_else(|| user.model.full()))
                .map_err(|e| TurnError::Refused(e.to_string()))?,
        );
        let mut turn = self
            .turn_for(state, agent, model, user.id, user.system, false)
            .await?;
        turn.resumed = true;
        Ok(turn)
    }

    /// Resolve a turn's permissions, tools and system prompt (instruction files are read on
    /// the blocking pool).
    async fn turn_for(
        &self,
        state: &mut SessionState,
        agent: Agent,
        model: Arc<ResolvedModel>,
        user_id: String,
        user_system: Option<String>,
        compact_only: bool,
    ) -> Result<Turn, TurnError> {
        let rt = state.rt.clone();
        // Session rules (e.g. a subagent's derived ruleset) come after the agent's. A value
        // that does not decode fails the turn: dropping it would run a subagent with its
        // parent's wider permissions.
        let mut session_rules = state.session.ruleset()?;
        if !rt.opts.interactive {
            // Nobody can answer a question here (OpenCode's non-interactive rules, last so
            // they win).
            session_rules = troupe_agents::Ruleset::merge(&[
                &session_rules,
                &troupe_agents::permission::noninteractive_session_ruleset(),
            ]);
        }
        let rules = Arc::new(troupe_agents::Ruleset::merge(&[
            &agent.permission,
            &session_rules,
        ]));
        // The first step offers the tools of MCP servers still starting (bounded by their
        // own timeouts); later steps never wait.
        if model.tool_call {
            rt.mcp.first_connects().await;
        }
        // Descriptions may list what the session's directory holds (skills): blocking pool.
        let descriptions = if model.tool_call {
            let (registry, dir, wt, turn_rules) = (
                rt.registry.clone(),
                state.directory.clone(),
                state.worktree.clone(),
                rules.clone(),
            );
            tokio::task::spawn_blocking(move || {
                let denies = |permission: &str, pattern: &str| {
                    turn_rules.evaluate(permission, pattern) == troupe_agents::Action::Deny
                };
                registry
                    .specs_in(&troupe_tools::DescribeContext {
                        directory: &dir,
                        worktree: &wt,
                        denies: &denies,
                    })
                    .into_iter()
                    .map(|(name, description, _)| (name, description))
                    .collect()
            })
            .await
            .map_err(|e| TurnError::Refused(format!("could not describe the tools: {e}")))?
        } else {
            std::collections::HashMap::new()
        };
        let (dir, wt, full_id, ag) = (
            state.directory.clone(),
            state.worktree.clone(),
            model.full_id(),
            agent.clone(),
        );
        let instructions = rt.config.config.instructions.clone();
        let system = tokio::task::spawn_blocking(move || {
            let files = troupe_agents::find_instruction_files(
                &dir,
                &wt,
                &instructions,
                &troupe_config::global_config_dir(),
            );
            troupe_agents::build_system_prompt(
                &ag,
                &full_id,
                &dir,
                &wt,
                &today(),
                &files,
                user_system.as_deref(),
            )
        })
        .await
        .map_err(|e| TurnError::Refused(format!("could not build the system prompt: {e}")))?;
        let max_steps = agent.steps.unwrap_or(rt.opts.max_steps).max(1);
        let (tx, _rx) = oneshot::channel();
        let origin = user_id.clone();
        let span = crate::spans::turn(
            &state.span,
            &state.session.id,
            &user_id,
            &agent.name,
            &model.full_id(),
        );
        Ok(Turn {
            span,
            timed_out: false,
            reply: tx,
            user_id,
            step: 0,
            cancel: CancellationToken::new(),
            agent,
            model,
            max_steps,
            system,
            tools: Vec::new(),
            session_rules,
            descriptions,
            tool_list: None,
            rules,
            started_cost: state.session.cost,
            compactions: 0,
            summary_attempts: 0,
            compact_only,
            resumed: false,
            origin_user_id: origin,
            structured: None,
            steering: Default::default(),
            replay: None,
            step_restarts: 0,
            retry_timer: None,
            params_wait: None,
            step_crashes: crate::supervision::Intensity::for_role(
                crate::supervision::Role::Processor,
                &rt.config.config.supervision,
            ),
        })
    }

    /// Decide whether the loop goes on; start the next step or finish the turn.
    async fn next_step(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
        self.deliver_steering(state);
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        // A resumed turn goes on past the step its crashed actor left (swept as aborted).
        let resumed = std::mem::take(&mut turn.resumed);
        let last = match state.history.last() {
            Some(
                m @ MessageWithParts {
                    info: Message::Assistant(a),
                    ..
                },
            ) if a.id.as_str() > turn.user_id.as_str() => {
                Some(crate::turn::StepFacts::of(m, false, false))
            }
            _ => None,
        };
        let lp = self.loop_facts(state, resumed);
        match crate::turn::continue_or_finish(last.as_ref(), &lp) {
            crate::turn::AfterStep::NextStep => {}
            crate::turn::AfterStep::Finish { why, error } => {
                if why == crate::turn::Why::EmptyToolCalls
                    || (why == crate::turn::Why::Answered
                        && last.as_ref().and_then(|l| l.finish.as_deref()) == Some("tool-calls"))
                {
                    tracing::warn!(session = %state.session.id, "finish reason tool-calls without a tool call; ending the turn");
                }
                self.finish_turn(myself, state, error).await;
                return;
            }
            // Only decided after a step (never before one).
            crate::turn::AfterStep::Compact { .. } => {}
        }
        self.start_step(myself, state).await;
    }

    /// Start the turn's next step (within the agent's step limit): build the request from
    /// the committed history and spawn its processor.
    async fn start_step(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        turn.step += 1;
        if turn.step > turn.max_steps {
            let e = crate::turn::max_steps_error(turn.max_steps, &turn.agent.name);
            self.finish_turn(myself, state, Some(e)).await;
            return;
        }
        // Requests start from the newest completed summary (with the turns it kept); the
        // full history stays stored.
        let view = troupe_session::compaction::compacted_view(&state.history);
        // Prompts delivered at this boundary are sent wrapped, in this request only.
        let delivered = std::mem::take(&mut turn.steering.just_delivered);
        let wrapped = if delivered == 0 {
            state.cache.view(&state.history, &view);
            None
        } else {
            let end = state
                .history
                .len()
                .saturating_sub(delivered)
                .max(view.body_start);
            let mut h = state.cache.view(&state.history[..end], &view).to_vec();
            for m in &state.history[end..] {
                crate::steer::convert_wrapped(m, &mut h);
            }
            Some(h)
        };
        let model = turn.model.clone();
        let registry_list = if model.tool_call {
            cached_registry_tools(&state.rt.registry, turn)
        } else {
            Arc::default()
        };
        // The turn's own tools (structured output) follow the registry's.
        let tools = if turn.tools.is_empty() {
            registry_list
        } else {
            registry_list
                .iter()
                .chain(turn.tools.iter())
                .cloned()
                .collect()
        };
        // The request without its history (system prompt, then what follows the history);
        // the body below carries the history, serialized incrementally.
        let mut request = crate::request::step_request_with_tools(
            &crate::request::StepInput {
                model: &model,
                system: &turn.system,
                history: &[],
                tools: &[],
                agent_options: &turn.agent.options,
                temperature: turn.agent.temperature,
                top_p: turn.agent.top_p,
                step: turn.step,
                max_steps: turn.max_steps,
                session_id: &state.session.id,
            },
            tools,
        );
        let registry = match &turn.structured {
            Some(st) => {
                crate::structured::StructuredTurn::require_tool_call(model.protocol, &mut request);
                st.registry.clone()
            }
            None => state.rt.registry.clone(),
        };
        let prepared = PreparedStep {
            request,
            registry,
            view,
            wrapped,
            delivered,
        };
        // `chat.params` hooks may change the request's temperature, topP and options before
        // its body is built. They run commands: off the handler, answering with
        // `SessionMsg::StepParams`.
        let hooks = state
            .rt
            .hooks
            .clone()
            .filter(|h| !h.config().chat_params.is_empty());
        let Some(hooks) = hooks else {
            self.launch_step(myself, state, prepared).await;
            return;
        };
        state.timers += 1;
        let timer = state.timers;
        let mut params = serde_json::Map::new();
        let num = |v: Option<f64>| v.map(serde_json::Value::from).unwrap_or_default();
        params.insert("temperature".into(), num(prepared.request.temperature));
        params.insert("topP".into(), num(prepared.request.top_p));
        params.insert(
            "options".into(),
            serde_json::Value::Object(prepared.request.extra.clone()),
        );
        let (dir, sid, agent) = (
            state.directory.clone(),
            state.session.id.clone(),
            turn.agent.name.clone(),
        );
        turn.params_wait = Some((timer, Box::new(prepared)));
        let me = myself.clone();
        tokio::spawn(async move {
            let out = hooks
                .chat_params(
                    &dir,
                    &sid,
                    &agent,
                    &model.provider_id,
                    &model.model_id,
                    params,
                )
                .await
                .map_err(|e| e.to_string());
            let _ = me.cast(SessionMsg::StepParams(timer, out));
        });
    }

    /// The `chat.params` hooks of the step waiting in `params_wait` answered: apply their
    /// answer and start the step, or fail the turn with the hook's error (no request sent).
    async fn step_params(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        timer: u64,
        out: Result<serde_json::Map<String, serde_json::Value>, String>,
    ) {
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        if turn.params_wait.as_ref().is_none_or(|(t, _)| *t != timer) {
            return;
        }
        let Some((_, prepared)) = turn.params_wait.take() else {
            return;
        };
        let mut prepared = *prepared;
        if turn.cancel.is_cancelled() {
            self.finish_turn(myself, state, Some(aborted_between_steps()))
                .await;
            return;
        }
        match out {
            Ok(out) => {
                let request = &mut prepared.request;
                request.temperature = out.get("temperature").and_then(|v| v.as_f64());
                request.top_p = out.get("topP").and_then(|v| v.as_f64());
                if let Some(serde_json::Value::Object(o)) = out.get("options") {
                    request.extra = o.clone();
                }
                self.launch_step(myself, state, prepared).await;
            }
            Err(e) => {
                let e = crate::processor::llm_error_to_message(
                    &troupe_llm::LlmError::new(troupe_llm::ErrorKind::BadRequest, e),
                    &turn.model.provider_id,
                );
                self.finish_turn(myself, state, Some(e)).await;
            }
        }
    }

    /// Build the prepared step's request body (the history serialized incrementally), store
    /// its assistant message and start its processor.
    async fn launch_step(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        prepared: PreparedStep,
    ) {
        let PreparedStep {
            mut request,
            registry,
            view,
            wrapped,
            delivered,
        } = prepared;
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        let model = turn.model.clone();
        // Serialized for the provider client the processor will use (its model is the one
        // the wire format and option rules come from).
        let provider = state.rt.provider(&model);
        let body = match &wrapped {
            None => state.cache.body(provider.model(), &request),
            Some(h) => troupe_llm::body::full_body(
                provider.model(),
                &troupe_llm::body::with_history(&request, h),
            ),
        };
        #[cfg(debug_assertions)]
        crate::history::check_body_from_scratch(
            provider.model(),
            &request,
            &state.history,
            &view,
            delivered,
            &body,
        );
        #[cfg(not(debug_assertions))]
        let _ = (&view, delivered);
        request.body = Some(body.into());
        let assistant = AssistantMessage::begun(
            &state.session.id,
            &turn.user_id,
            &turn.agent.name,
            &ModelRef::from(&*model),
            MessagePath {
                cwd: state.directory.display().to_string(),
                root: state.worktree.display().to_string(),
            },
        );
        state
            .rt
            .store
            .write1(Write::Message(Message::Assistant(assistant.clone())));
        let tool_ctx = ToolContext {
            session_id: state.session.id.clone(),
            message_id: assistant.id.clone(),
            call_id: String::new(),
            agent: turn.agent.name.clone(),
            directory: state.directory.clone(),
            worktree: state.worktree.clone(),
            abort: turn.cancel.clone(),
            permissions: Arc::new(crate::permission::TurnPermissions {
                broker: state.rt.broker.clone(),
                session_id: state.session.id.clone(),
                project: state.worktree.display().to_string(),
                rules: turn.rules.clone(),
            }),
            progress: Arc::new(troupe_tools::NoProgress),
            extra: None,
            hooks: state.rt.hooks.clone(),
        };
        // The turn's newest tool calls, oldest first: the doom-loop detector only looks at
        // the last `doom::WINDOW`, so a long turn is not copied whole at every step. The
        // turn's steps come after its prompt (ids sort by creation time).
        let mut prior_calls: Vec<(String, serde_json::Value)> = Vec::new();
        for m in state.history.iter().rev() {
            if prior_calls.len() >= crate::doom::WINDOW || m.info.id() <= turn.user_id.as_str() {
                break;
            }
            if !matches!(&m.info, Message::Assistant(a) if a.parent_id == turn.user_id) {
                continue;
            }
            for p in m.parts.iter().rev() {
                if let PartKind::Tool { tool, state, .. } = &p.kind {
                    prior_calls.push((tool.clone(), state.input().clone()));
                }
            }
        }
        prior_calls.truncate(crate::doom::WINDOW);
        prior_calls.reverse();
        let args = ProcessorArgs {
            rt: state.rt.clone(),
            assistant: assistant.clone(),
            request,
            model,
            cancel: turn.cancel.clone(),
            tool_ctx,
            prior_calls,
            restarts: turn.step_restarts,
            tree_parent: None,
            span: crate::spans::step(&turn.span, &state.session.id, &assistant.id, turn.step),
            registry,
        };
        state.rt.counters.steps.fetch_add(1, Ordering::Relaxed);
        match Actor::spawn_linked(None, ProcessorActor, args, myself.get_cell()).await {
            Ok((a, _)) => {
                state.children.insert(a.get_id(), Child::Processor);
            }
            Err(e) => {
                let mut a = assistant;
                a.error = Some(MessageError::new(
                    MessageErrorName::Unknown,
                    format!("could not start the step: {e}"),
                ));
                a.time.completed = Some(now_ms());
                state
                    .rt
                    .store
                    .write1(Write::Message(Message::Assistant(a.clone())));
                state.history.push(MessageWithParts {
                    info: Message::Assistant(a),
                    parts: Vec::new(),
                });
                self.finish_turn(myself, state, None).await;
            }
        }
    }

    /// Start a compaction: store the request (a user message with a compaction part) unless
    /// the turn's own message is the request, then run the CompactionWorker.
    async fn start_compaction(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        auto: bool,
        overflow: bool,
        create_request: bool,
    ) {
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        turn.compactions += 1;
        if turn.compactions > 2 {
            let e = MessageError::new(
                MessageErrorName::ContextOverflow,
                "stopped: the conversation is still over the model's context limit after 2 compactions in a row",
            );
            self.finish_turn(myself, state, Some(e)).await;
            return;
        }
        turn.summary_attempts = 0;
        if create_request {
            let user = UserMessage {
                id: troupe_session::id::message(),
                session_id: state.session.id.clone(),
                time: UserTime { created: now_ms() },
                agent: turn.agent.name.clone(),
                model: ModelRef {
                    provider_id: turn.model.provider_id.clone(),
                    model_id: turn.model.model_id.clone(),
                },
                system: None,
                summary: None,
            };
            let part = Part::new(
                &state.session.id,
                &user.id,
                PartKind::Compaction {
                    auto,
                    overflow,
                    tail_start_id: None,
                },
            );
            state.rt.store.write(vec![
                Write::Message(Message::User(user.clone())),
                Write::Part(part.clone()),
            ]);
            turn.user_id = user.id.clone();
            state.history.push(MessageWithParts {
                info: Message::User(user),
                parts: vec![part],
            });
        }
        self.spawn_compaction_worker(myself, state, 1.0).await;
    }

    async fn spawn_compaction_worker(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        budget_share: f64,
    ) {
        let Some(turn) = state.turn.as_ref() else {
            return;
        };
        let model = turn.model.clone();
        // Summarize from the newest summary up to (not including) the compaction request,
        // which is the turn's current user message (a failed summary attempt may follow it).
        let end = state
            .history
            .iter()
            .rposition(|m| m.info.id() == turn.user_id)
            .unwrap_or_else(|| state.history.len().saturating_sub(1));
        let plan = crate::compaction::plan(
            &state.history[..end],
            state.history.get(end),
            &model,
            &state.rt.config.config.compaction,
        );
        let history = plan.head;
        let previous_summary = plan.previous_summary;
        let replay = plan.replay;
        if let Some(part) = plan.request_part {
            // The request records where its kept tail starts (read by `compacted_view`).
            if let Some(m) = state.history.get_mut(end)
                && let Some(p) = m.parts.iter_mut().find(|p| p.id == part.id)
            {
                *p = part.clone();
            }
            state.rt.store.write1(Write::Part(part));
        }
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        turn.replay = replay;
        let tool_ctx = ToolContext {
            session_id: state.session.id.clone(),
            message_id: String::new(),
            call_id: String::new(),
            agent: "compaction".into(),
            directory: state.directory.clone(),
            worktree: state.worktree.clone(),
            abort: turn.cancel.clone(),
            permissions: Arc::new(crate::permission::Policy::Deny),
            progress: Arc::new(troupe_tools::NoProgress),
            extra: None,
            hooks: None,
        };
        // The summary uses the session's model (not small_model): it must read the whole
        // history the session's model worked with.
        let args = crate::compaction::CompactionArgs {
            rt: state.rt.clone(),
            session_id: state.session.id.clone(),
            request_id: turn.user_id.clone(),
            history,
            previous_summary,
            model: turn.model.clone(),
            budget_share,
            cancel: turn.cancel.clone(),
            tool_ctx,
            path: MessagePath {
                cwd: state.directory.display().to_string(),
                root: state.worktree.display().to_string(),
            },
            tree_parent: state.node.key().to_string(),
            span: crate::spans::worker(
                &turn.span,
                crate::spans::Worker::Compaction,
                &state.session.id,
            ),
        };
        let span = args.span.clone();
        state.session.time.compacting = Some(now_ms());
        match Actor::spawn_linked(
            None,
            crate::compaction::CompactionWorker,
            args,
            myself.get_cell(),
        )
        .await
        {
            Ok((a, _)) => {
                state.children.insert(a.get_id(), Child::Compaction);
                state.worker_spans.insert(a.get_id(), span);
            }
            Err(e) => {
                let err = MessageError::new(
                    MessageErrorName::Unknown,
                    format!("could not start the compaction: {e}"),
                );
                self.finish_turn(myself, state, Some(err)).await;
            }
        }
    }

    /// The compaction worker ended.
    async fn compaction_done(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        done: Option<crate::compaction::CompactionState>,
    ) {
        state.session.time.compacting = None;
        let Some(done) = done else {
            let e = MessageError::new(
                MessageErrorName::Unknown,
                "the compaction worker stopped before it finished",
            );
            self.finish_turn(myself, state, Some(e)).await;
            return;
        };
        let Some(outcome) = done.outcome else {
            let e = MessageError::new(
                MessageErrorName::Unknown,
                done.error.unwrap_or_else(|| "the compaction failed".into()),
            );
            self.finish_turn(myself, state, Some(e)).await;
            return;
        };
        self.account(state, &outcome.message);
        let summary_error = match &outcome.message.info {
            Message::Assistant(a) => a.error.clone(),
            Message::User(_) => None,
        };
        // Only a provider rejection counts: a summary request the provider accepted is fine
        // even when its input was large (the summary itself is short).
        let overflowed = match &outcome.message.info {
            Message::Assistant(a) => a
                .error
                .as_ref()
                .is_some_and(|e| e.name == MessageErrorName::ContextOverflow),
            Message::User(_) => false,
        };
        state.history.push(outcome.message);
        let ok = state
            .history
            .last()
            .is_some_and(troupe_session::compaction::is_completed_summary);
        if state.turn.as_ref().is_some_and(|t| t.cancel.is_cancelled()) {
            self.finish_turn(myself, state, None).await;
            return;
        }
        if !ok || overflowed {
            let attempts = state.turn.as_mut().map(|t| {
                t.summary_attempts += 1;
                t.summary_attempts
            });
            if overflowed && attempts.unwrap_or(2) < 2 {
                // The summary request itself was too big: once more with half the input.
                self.spawn_compaction_worker(myself, state, 0.5).await;
                return;
            }
            let why = summary_error
                .map(|e| e.message())
                .unwrap_or_else(|| "the summary is over the context limit".into());
            let e = MessageError::new(
                MessageErrorName::ContextOverflow,
                format!("conversation too large to compact (2 attempts): {why}"),
            );
            self.finish_turn(myself, state, Some(e)).await;
            return;
        }
        state
            .rt
            .store
            .write1(Write::Publish(Event::SessionCompacted {
                session_id: state.session.id.clone(),
            }));
        state.cache.reset();
        let (auto, compact_only) = match state.turn.as_ref() {
            Some(t) => (
                !t.compact_only
                    && state.history.iter().rev().find_map(|m| {
                        m.parts.iter().find_map(|p| match p.kind {
                            PartKind::Compaction { auto, .. } => Some(auto),
                            _ => None,
                        })
                    }) == Some(true),
                t.compact_only,
            ),
            None => return,
        };
        if compact_only || !auto {
            self.finish_turn(myself, state, None).await;
            return;
        }
        // Ask the model to go on from the summary.
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        let user = UserMessage {
            id: troupe_session::id::message(),
            session_id: state.session.id.clone(),
            time: UserTime { created: now_ms() },
            agent: turn.agent.name.clone(),
            model: ModelRef {
                provider_id: turn.model.provider_id.clone(),
                model_id: turn.model.model_id.clone(),
            },
            system: None,
            summary: None,
        };
        // After an overflow, the request that was too large is sent again from the summary;
        // otherwise the model is asked to go on.
        let replayed = turn
            .replay
            .take()
            .and_then(|id| state.history.iter().rev().find(|m| m.info.id() == id));
        let (user, parts) = match replayed {
            Some(m) => crate::compaction::replay_message(m, user),
            None => {
                let part = Part::new(
                    &state.session.id,
                    &user.id,
                    PartKind::Text {
                        text: troupe_agents::prompt::COMPACTION_CONTINUE_PROMPT.to_string(),
                        synthetic: true,
                        time: None,
                    },
                );
                (user, vec![part])
            }
        };
        let mut writes = vec![Write::Message(Message::User(user.clone()))];
        writes.extend(parts.iter().cloned().map(Write::Part));
        state.rt.store.write(writes);
        turn.user_id = user.id.clone();
        state.history.push(MessageWithParts {
            info: Message::User(user),
            parts,
        });
        self.next_step(myself, state).await;
    }

    /// Start the summary worker when the finished turn changed files (and summaries are on):
    /// it runs beside whatever comes next and stores its summary on the turn's user message.
    async fn maybe_start_summary(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        turn: &Turn,
    ) {
        if !state.rt.opts.summaries || turn.compact_only || turn.cancel.is_cancelled() {
            return;
        }
        let Some(start) = state
            .history
            .iter()
            .position(|m| m.info.id() == turn.origin_user_id)
        else {
            return;
        };
        let slice = &state.history[start..];
        if troupe_session::file_changes::file_changes(slice).files == 0 {
            return;
        }
        let mut messages = Vec::new();
        for m in slice {
            crate::history::convert(m, &mut messages);
        }
        let model = match state
            .rt
            .config
            .config
            .small_model
            .as_deref()
            .map(|m| state.rt.config.resolve_model(m))
        {
            Some(Ok(m)) => Arc::new(m),
            _ => turn.model.clone(),
        };
        let args = crate::summary::SummaryArgs {
            rt: state.rt.clone(),
            session_id: state.session.id.clone(),
            user_id: turn.origin_user_id.clone(),
            turn: messages,
            model,
            tree_parent: state.node.key().to_string(),
        };
        match Actor::spawn_linked(None, crate::summary::SummaryWorker, args, myself.get_cell())
            .await
        {
            Ok((a, _)) => {
                state.children.insert(a.get_id(), Child::Summary);
                let span = crate::spans::worker(
                    &turn.span,
                    crate::spans::Worker::Summary,
                    &state.session.id,
                );
                state.worker_spans.insert(a.get_id(), span);
            }
            Err(e) => {
                tracing::warn!(session = %state.session.id, "could not start the summary: {e}")
            }
        }
    }

    /// Start the title worker for a root session's first user message.
    async fn maybe_start_title(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
        if !state.rt.opts.titles
            || state.has_child(Child::Title)
            || state.session.parent_id.is_some()
            || !state.session.has_default_title()
        {
            return;
        }
        let user_texts: Vec<&str> = state
            .history
            .iter()
            .filter(|m| matches!(m.info, Message::User(_)))
            .filter_map(|m| {
                m.parts.iter().find_map(|p| match &p.kind {
                    PartKind::Text {
                        text,
                        synthetic: false,
                        ..
                    } => Some(text.as_str()),
                    _ => None,
                })
            })
            .collect();
        let [first] = user_texts.as_slice() else {
            return;
        };
        let Some(turn) = state.turn.as_ref() else {
            return;
        };
        let model = match state
            .rt
            .config
            .config
            .small_model
            .as_deref()
            .map(|m| state.rt.config.resolve_model(m))
        {
            Some(Ok(m)) => Arc::new(m),
            _ => turn.model.clone(),
        };
        let args = crate::title::TitleArgs {
            tree_parent: state.node.key().to_string(),
            rt: state.rt.clone(),
            session_id: state.session.id.clone(),
            text: first.to_string(),
            model,
        };
        if let Ok((a, _)) =
            Actor::spawn_linked(None, crate::title::TitleWorker, args, myself.get_cell()).await
        {
            state.children.insert(a.get_id(), Child::Title);
            let span =
                crate::spans::worker(&state.span, crate::spans::Worker::Title, &state.session.id);
            state.worker_spans.insert(a.get_id(), span);
        }
    }

    /// A step finished (its processor stopped normally): account it, then compact, finish
    /// or go on.
    async fn step_done(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        o: crate::processor::StepOutcome,
    ) {
        self.account(state, &o.message);
        let cfg = &state.rt.config.config.compaction;
        let overflowed = match (&o.message.info, state.turn.as_ref()) {
            (Message::Assistant(a), Some(t)) => {
                troupe_session::compaction::is_overflow(&a.tokens, &t.model, cfg)
            }
            _ => false,
        };
        let facts =
            crate::turn::StepFacts::of(&o.message, overflowed, o.result == StepResult::Stop);
        state.history.push(o.message);
        if let Some(error) = self.structured_after_step(state) {
            self.finish_turn(myself, state, error).await;
            return;
        }
        let lp = self.loop_facts(state, false);
        match crate::turn::after_step(&facts, &lp) {
            crate::turn::AfterStep::Compact { overflow_error } => {
                self.start_compaction(myself, state, true, overflow_error, true)
                    .await;
            }
            crate::turn::AfterStep::Finish {
                why: crate::turn::Why::Answered,
                error: None,
            } if state
                .turn
                .as_ref()
                .is_some_and(|t| !t.steering.pending.is_empty()) =>
            {
                // The model answered, but the user said more meanwhile: the turn goes on.
                self.next_step(myself, state).await;
            }
            crate::turn::AfterStep::Finish { error, .. } => {
                self.finish_turn(myself, state, error).await;
            }
            crate::turn::AfterStep::NextStep => {
                if let Some(t) = state.turn.as_mut() {
                    t.compactions = 0;
                }
                self.next_step(myself, state).await;
            }
        }
    }

    /// A structured turn's decision after the step just pushed on the history: `None` = the
    /// normal rules go on; `Some(error)` = finish the turn (`None` error: the value was
    /// captured and stored on the step's message).
    fn structured_after_step(&self, state: &mut SessionState) -> Option<Option<MessageError>> {
        let st = state.turn.as_mut()?.structured.as_mut()?;
        match st.after_step(state.history.last()) {
            crate::structured::Outcome::Continue => None,
            crate::structured::Outcome::Failed(e) => Some(Some(e)),
            crate::structured::Outcome::Captured(v) => {
                let m = state.history.last_mut()?;
                if let Some(info) = crate::structured::attach(m, v) {
                    state.rt.store.write1(Write::Message(info));
                }
                Some(None)
            }
        }
    }

    /// At a step boundary: store the prompts steering the turn as user messages and make
    /// the newest the turn's current one (see [`crate::steer`]). Not after an abort.
    fn deliver_steering(&self, state: &mut SessionState) {
        let pending = match state.turn.as_mut() {
            Some(t) if !t.cancel.is_cancelled() && !t.steering.pending.is_empty() => {
                std::mem::take(&mut t.steering.pending)
            }
            _ => return,
        };
        for p in pending {
            match self.add_user_message(state, &p.input) {
                Ok((_, _, user_id)) => {
                    p.started.store(true, Ordering::SeqCst);
                    if let Some(t) = state.turn.as_mut() {
                        t.user_id = user_id.clone();
                        t.steering.just_delivered += 1;
                        t.steering.joined.push((user_id, p.reply));
                    }
                }
                Err(e) => {
                    let _ = p.reply.send(Err(TurnError::Refused(e)));
                }
            }
        }
        state.sync_waiting();
    }

    /// The loop's state for [`crate::turn`]'s decisions.
    fn loop_facts(&self, state: &SessionState, resumed: bool) -> crate::turn::LoopFacts {
        match state.turn.as_ref() {
            Some(t) => crate::turn::LoopFacts {
                aborted: t.cancel.is_cancelled(),
                auto_compact: state.rt.config.config.compaction.auto,
                compactions: t.compactions,
                steps: t.step,
                max_steps: t.max_steps,
                agent: t.agent.name.clone(),
                resumed,
            },
            None => crate::turn::LoopFacts {
                aborted: true,
                ..Default::default()
            },
        }
    }

    /// The step's processor crashed: its open parts are closed as errors (from the store,
    /// which holds what it wrote), its message is marked crashed, and the step is retried
    /// once from the committed history (`supervision.step_retries`); past the limit the turn
    /// fails with the cause.
    async fn step_crashed(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        cause: String,
    ) {
        let sid = state.session.id.clone();
        let mut history = match state.rt.store.read(move |r| r.messages(&sid)).await {
            Ok(h) => h,
            Err(e) => {
                let e = MessageError::new(
                    MessageErrorName::Unknown,
                    format!(
                        "the step crashed ({cause}) and the session could not be read back: {e}"
                    ),
                );
                self.finish_turn(myself, state, Some(e)).await;
                return;
            }
        };
        let crashed = MessageError::new(
            MessageErrorName::Unknown,
            format!("the step crashed: {cause}"),
        );
        if let Some(turn) = &state.turn {
            let last_assistant = history.iter().rposition(
                |m| matches!(&m.info, Message::Assistant(a) if a.parent_id == turn.user_id),
            );
            if let Some(i) = last_assistant
                && matches!(&history[i].info, Message::Assistant(a) if a.time.completed.is_none() || a.error.is_none())
            {
                let mut fixed = vec![history[i].clone()];
                troupe_session::store::sweep_interrupted(&state.rt.store, &mut fixed);
                if let Message::Assistant(a) = &mut fixed[0].info {
                    let mut e = crashed.clone();
                    e.data["crashed"] = serde_json::Value::Bool(true);
                    a.error = Some(e);
                    state
                        .rt
                        .store
                        .write1(Write::Message(Message::Assistant(a.clone())));
                }
                history[i] = fixed.remove(0);
            }
        }
        state.history = history;
        state.cache.reset();
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        if turn.cancel.is_cancelled() {
            self.finish_turn(myself, state, None).await;
            return;
        }
        match turn.step_crashes.crash(std::time::Instant::now()) {
            crate::supervision::Verdict::Restart { backoff, attempt } => {
                tracing::warn!(session = %state.session.id, "retrying the crashed step (retry {attempt})");
                crate::spans::supervision(
                    &turn.span,
                    crate::spans::Supervision::Restart,
                    crate::supervision::Role::Processor.as_str(),
                    &format!("step retry {attempt}"),
                );
                state
                    .rt
                    .counters
                    .restart(crate::supervision::Role::Processor);
                turn.step_restarts += 1;
                // The backoff is a timer, not a wait in this handler: an abort meanwhile
                // ends the turn at once (and the timer's message is then ignored).
                state.timers += 1;
                let timer = state.timers;
                turn.retry_timer = Some(timer);
                myself.send_after(backoff, move || SessionMsg::RetryStep(timer));
            }
            crate::supervision::Verdict::Escalate { crashes } => {
                crate::spans::supervision(
                    &turn.span,
                    crate::spans::Supervision::Escalation,
                    crate::supervision::Role::Processor.as_str(),
                    &format!("the step crashed {crashes} times; the turn fails"),
                );
                let e = MessageError::new(
                    MessageErrorName::Unknown,
                    format!(
                        "the step crashed {crashes} time{} (supervision.step_retries = {}); last crash: {cause}",
                        if crashes == 1 { "" } else { "s" },
                        state.rt.config.config.supervision.step_retries()
                    ),
                );
                self.finish_turn(myself, state, Some(e)).await;
            }
        }
    }

    /// Add a finished step's cost and tokens to the session totals.
    fn account(&self, state: &mut SessionState, m: &MessageWithParts) {
        if let Message::Assistant(a) = &m.info {
            state.session.cost += a.cost;
            let mut step_tokens = troupe_session::Tokens::default();
            for p in &m.parts {
                if let PartKind::StepFinish { tokens, .. } = &p.kind {
                    state.session.tokens.add(tokens);
                    step_tokens.add(tokens);
                }
            }
            let cost = a.cost;
            {
                let mut c = state
                    .rt
                    .counters
                    .cost
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                *c += cost;
            }
            for (kind, v) in [
                ("input", step_tokens.input),
                ("output", step_tokens.output),
                ("reasoning", step_tokens.reasoning),
                ("cache_read", step_tokens.cache.read),
                ("cache_write", step_tokens.cache.write),
            ] {
                state
                    .rt
                    .counters
                    .incr("tokens_total", format!("type=\"{kind}\""), v);
            }
            state.node.update(|n| {
                n.steps += 1;
                n.tokens.add(&step_tokens);
                n.cost += cost;
            });
        }
    }

    /// End the turn: totals, status idle, reply, then the next queued prompt.
    async fn finish_turn(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        error: Option<MessageError>,
    ) {
        let Some(turn) = state.turn.take() else {
            return;
        };
        // After the turn: prune old tool outputs (they are then sent as a short marker) and
        // refresh the session's file-change summary. Both are pure passes over the history.
        let now = now_ms();
        let cfg = &state.rt.config.config.compaction;
        let marks = troupe_session::compaction::prune(
            &state.history,
            cfg,
            troupe_session::compaction::PRUNE_PROTECTED_TOOLS,
            now,
        );
        if !marks.is_empty() {
            let changed = troupe_session::compaction::apply_prune(&mut state.history, &marks, now);
            state
                .rt
                .store
                .write(changed.into_iter().map(Write::Part).collect());
            state.cache.reset();
        }
        // With snapshots, the diff from the first to the last snapshot (it sees `bash` too).
        let summary = state
            .rt
            .snapshots
            .summary(&state.session.id)
            .unwrap_or_else(|| troupe_session::file_changes::file_changes(&state.history));
        if summary.files > 0 {
            state.session.summary = Some(summary);
        }
        state.session.time.updated = now;
        let sid = state.session.id.clone();
        state
            .node
            .update(|n| n.status = crate::tree::ActorStatus::Idle);
        state.rt.store.write(vec![
            Write::Session {
                info: state.session.clone(),
                created: false,
            },
            Write::Publish(Event::SessionStatus {
                session_id: sid.clone(),
                status: SessionStatus::Idle,
            }),
            Write::Publish(Event::SessionIdle {
                session_id: sid.clone(),
            }),
        ]);
        if let Some(hooks) = state
            .rt
            .hooks
            .clone()
            .filter(|h| !h.config().session_idle.is_empty())
        {
            // A notification: off the turn's path, reported when it fails.
            let (dir, id) = (state.directory.clone(), sid.clone());
            state.rt.hook_tasks.spawn(async move {
                for e in hooks.session_idle(&dir, &id).await {
                    tracing::warn!(session = %id, "{e}");
                }
            });
        }
        if let Some(e) = &error {
            state.rt.store.write1(Write::Publish(Event::SessionError {
                session_id: sid.clone(),
                error: e.clone(),
            }));
        }
        let flushed = state.rt.store.flush().await;
        // The turn's newest assistant message.
        let last = state.history.iter().rev().find_map(|m| match &m.info {
            Message::Assistant(a) if a.parent_id == turn.user_id => {
                Some((a.clone(), m.parts.clone()))
            }
            _ => None,
        });
        let (message, text) = match &last {
            Some((a, parts)) => {
                let text = parts
                    .iter()
                    .filter_map(|p| match &p.kind {
                        PartKind::Text {
                            text,
                            synthetic: false,
                            ..
                        } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("");
                (Some(a.clone()), text)
            }
            None => (None, String::new()),
        };
        let mut error = error.or_else(|| message.as_ref().and_then(|m| m.error.clone()));
        if let Err(e) = flushed {
            error.get_or_insert_with(|| MessageError::new(MessageErrorName::Store, e.to_string()));
        }
        let outcome = match &error {
            _ if turn.timed_out => crate::spans::TurnOutcome::Timeout,
            None => crate::spans::TurnOutcome::Completed,
            Some(e) if e.name == MessageErrorName::MessageAborted => {
                crate::spans::TurnOutcome::Aborted
            }
            Some(_) => crate::spans::TurnOutcome::Error,
        };
        crate::spans::turn_end(
            &turn.span,
            turn.step,
            outcome,
            error.as_ref().map(|e| e.message()).as_deref(),
        );
        let structured = message.as_ref().and_then(|m| m.structured.clone());
        let result = TurnResult {
            structured,
            session_id: sid,
            user_message_id: Some(turn.origin_user_id.clone()),
            message,
            text,
            error,
            steps: turn.step,
            cost: state.session.cost - turn.started_cost,
            tokens: state.session.tokens,
        };
        self.maybe_start_summary(myself, state, &turn).await;
        let mut steering = turn.steering;
        steering.answer(&result);
        // Prompts the turn ended before delivering run as turns of their own, first.
        for p in steering.pending.into_iter().rev() {
            state.queue.push_front(p);
        }
        let _ = turn.reply.send(Ok(result));
        Box::pin(self.start_next(myself, state)).await;
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
            _gauge: crate::ActorGauge::new(&args.rt.counters.live_actors),
            node: {
                let n = args.rt.tree.register(
                    crate::tree::Kind::Session,
                    &args.session.id,
                    Some(&args.session.id),
                    args.tree_parent.as_deref(),
                );
                n.update(|x| x.agent = args.session.agent.clone());
                n
            },
            rt: args.rt,
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
                    self.start_next(&myself, state).await;
                }
            }
            msg @ (SessionMsg::Abort | SessionMsg::AbortTimedOut) => {
                // Background subagents of this session stop with it (OpenCode's cancel
                // cancels a session's background jobs first) unless the config keeps them
                // (`supervision.abort_background: false`).
                if state.rt.config.config.supervision.abort_background() {
                    crate::task::abort_background(&state.rt, &state.session.id);
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
                    self.finish_turn(&myself, state, Some(aborted_between_steps()))
                        .await;
                }
            }
            SessionMsg::StepParams(timer, out) => {
                self.step_params(&myself, state, timer, out).await;
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
                    self.finish_turn(&myself, state, Some(aborted_between_steps()))
                        .await;
                } else {
                    self.start_step(&myself, state).await;
                }
            }
            SessionMsg::Update(patch, reply) => {
                let applied = patch.apply(&mut state.session);
                if applied.is_ok() {
                    state.rt.store.write1(Write::Session {
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
                state.rt.store.write1(Write::Publish(Event::SessionError {
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
                            self.finish_turn(&myself, state, Some(aborted_between_steps()))
                                .await;
                        }
                    }
                    None => self.start_next(&myself, state).await,
                }
            }
        }
        Ok(())
    }

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
            state.rt.counters.failure(child.role());
            state.node.add_failure();
        }
        match (child, ended) {
            (Child::Title, ended) => {
                let title = ended
                    .ok()
                    .flatten()
                    .and_then(|mut b| b.take::<crate::title::TitleState>().ok())
                    .and_then(|t| t.title);
                if let Some(t) = title {
                    state.session.title = t;
                    state.session.time.updated = now_ms();
                    state.rt.store.write1(Write::Session {
                        info: state.session.clone(),
                        created: false,
                    });
                }
                if state.turn.is_none() {
                    self.start_next(&myself, state).await;
                }
            }
            (Child::Summary, ended) => {
                let done = ended
                    .ok()
                    .flatten()
                    .and_then(|mut b| b.take::<crate::summary::SummaryState>().ok());
                if let Some(crate::summary::SummaryState {
                    user_id,
                    summary: Some(summary),
                    ..
                }) = done
                    && let Some(m) = state.history.iter_mut().find(|m| m.info.id() == user_id)
                    && let Message::User(u) = &mut m.info
                {
                    u.summary = Some(summary);
                    state
                        .rt
                        .store
                        .write1(Write::Message(Message::User(u.clone())));
                }
                if state.turn.is_none() {
                    self.start_next(&myself, state).await;
                }
            }
            (Child::Compaction, Ok(boxed)) => {
                let done =
                    boxed.and_then(|mut b| b.take::<crate::compaction::CompactionState>().ok());
                self.compaction_done(&myself, state, done).await;
            }
            (Child::Compaction, Err(cause)) => {
                state.session.time.compacting = None;
                let e = MessageError::new(
                    MessageErrorName::Unknown,
                    format!("the compaction worker crashed: {cause}"),
                );
                self.finish_turn(&myself, state, Some(e)).await;
            }
            (Child::Processor, Ok(boxed)) => {
                let outcome = boxed
                    .and_then(|mut b| b.take::<ProcessorState>().ok())
                    .map(ProcessorState::into_outcome);
                state
                    .rt
                    .faults
                    .check(crate::faults::FaultPoint::SessionStep, &state.session.id);
                match outcome {
                    Some(o) => self.step_done(&myself, state, o).await,
                    None if state.turn.is_some() => {
                        let e = MessageError::new(
                            MessageErrorName::Unknown,
                            "the step was stopped before it finished",
                        );
                        self.finish_turn(&myself, state, Some(e)).await;
                    }
                    None => {}
                }
            }
            (Child::Processor, Err(cause)) => self.step_crashed(&myself, state, cause).await,
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

/// [`registry_tools`] for this step: the turn's list of an earlier step while the registry's
/// generation has not moved since (MCP servers that connect, fail or change their tools move
/// it), else built anew. The generation is read BEFORE the list is built, so a change that
/// lands while building moves it past the cached value.
fn cached_registry_tools(registry: &troupe_tools::Registry, turn: &mut Turn) -> Arc<[ToolSpec]> {
    let generation = registry.generation();
    if let (Some(g), Some((cached, list))) = (generation, &turn.tool_list)
        && g == *cached
    {
        return list.clone();
    }
    let list: Arc<[ToolSpec]> = registry_tools(registry, turn).into();
    turn.tool_list = generation.map(|g| (g, list.clone()));
    list
}

/// The registry's tools as the turn's agent (with the session's own rules) may use them,
/// sorted by name: every tool whose permission is not denied outright, minus the edit tools
/// the turn's model is not offered ([`troupe_tools::registry::hidden_for_model`]), with the
/// turn's session-dependent descriptions. Listed at each step.
fn registry_tools(registry: &troupe_tools::Registry, turn: &Turn) -> Vec<ToolSpec> {
    let names = registry.names();
    let disabled = turn.agent.disabled_tools(&names, &turn.session_rules);
    let hidden = troupe_tools::registry::hidden_for_model(&turn.model.model_id);
    registry
        .specs()
        .into_iter()
        .filter(|(name, _, _)| !disabled.contains(name) && !hidden.contains(&name.as_str()))
        .map(|(name, description, parameters)| ToolSpec {
            description: turn.descriptions.get(&name).cloned().unwrap_or(description),
            name,
            parameters,
        })
        .collect()
}
