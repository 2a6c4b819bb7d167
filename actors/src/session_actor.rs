//! SessionActor: serializes the prompts of one session and runs the loop.
//!
//! A prompt arriving while a turn runs is queued and runs after it, in order (never
//! interleaved). A turn is a series of steps; each step is one linked [`ProcessorActor`].
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
use troupe_llm::{ChatMessage, ChatRequest, ToolSpec};
use troupe_session::{
    AssistantMessage, AssistantTime, Event, Message, MessageError, MessagePath, MessageWithParts,
    ModelRef, Part, PartKind, Session, SessionStatus, UserMessage, UserTime, Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::history::ChatCache;
use crate::processor::{ProcessorActor, ProcessorArgs, ProcessorState, StepResult};
use crate::{PromptInput, RuntimeShared, TurnResult};

/// A prompt waiting for its turn.
pub struct PendingPrompt {
    /// What to send.
    pub input: PromptInput,
    /// Set when the session actor took the prompt (so a caller knows whether to resend it
    /// to a fresh actor if this one stopped first).
    pub accepted: Arc<AtomicBool>,
    /// Where the turn's result goes.
    pub reply: oneshot::Sender<Result<TurnResult, String>>,
}

/// Messages of a session actor.
pub enum SessionMsg {
    /// Queue a prompt.
    Prompt(PendingPrompt),
    /// Abort the running turn and drop queued prompts.
    Abort,
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
}

struct Turn {
    reply: oneshot::Sender<Result<TurnResult, String>>,
    user_id: String,
    step: u32,
    cancel: CancellationToken,
    agent: Agent,
    model: Arc<ResolvedModel>,
    max_steps: u32,
    system: String,
    tools: Vec<ToolSpec>,
    rules: Arc<troupe_agents::Ruleset>,
    started_cost: rust_decimal::Decimal,
}

/// Session actor state.
pub struct SessionState {
    _gauge: crate::ActorGauge,
    rt: Arc<RuntimeShared>,
    session: Session,
    history: Vec<MessageWithParts>,
    cache: ChatCache,
    queue: VecDeque<PendingPrompt>,
    turn: Option<Turn>,
    directory: PathBuf,
    worktree: PathBuf,
}

fn worktree_of(dir: &std::path::Path) -> PathBuf {
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
        while state.turn.is_none() {
            let Some(p) = state.queue.pop_front() else {
                // Idle: release the actor (and its memory).
                state.rt.sessions.remove(&state.session.id);
                myself.stop(Some("idle".into()));
                return;
            };
            match self.begin_turn(state, p.input).await {
                Ok(turn) => {
                    state.turn = Some(Turn {
                        reply: p.reply,
                        ..turn
                    });
                    state.rt.store.write1(Write::Publish(Event::SessionStatus {
                        session_id: state.session.id.clone(),
                        status: SessionStatus::Busy,
                    }));
                    self.next_step(myself, state).await;
                }
                Err(e) => {
                    let _ = p.reply.send(Err(e));
                }
            }
        }
    }

    /// Create the user message and resolve agent, model, tools, permissions and the system
    /// prompt (instruction files are read on the blocking pool).
    async fn begin_turn(
        &self,
        state: &mut SessionState,
        input: PromptInput,
    ) -> Result<Turn, String> {
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
        let user = UserMessage {
            id: troupe_session::id::message(),
            session_id: state.session.id.clone(),
            time: UserTime { created: now_ms() },
            agent: agent.name.clone(),
            model: ModelRef {
                provider_id: model.provider_id.clone(),
                model_id: model.model_id.clone(),
            },
            system: input.system.clone(),
        };
        let mut parts = vec![Part::new(
            &state.session.id,
            &user.id,
            PartKind::Text {
                text: input.text.clone(),
                synthetic: false,
                time: None,
            },
        )];
        // Agent switching: a synthetic reminder on the new user message (plan → read-only;
        // plan → build → edits allowed again).
        let previous_agent = state.history.last().map(|m| match &m.info {
            Message::Assistant(a) => a.agent.clone(),
            Message::User(u) => u.agent.clone(),
        });
        let reminder = troupe_agents::switch_reminder(previous_agent.as_deref(), &agent.name);
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

        // Session rules (e.g. a subagent's derived ruleset) come after the agent's.
        let session_rules: troupe_agents::Ruleset = state
            .session
            .permission
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        let rules = Arc::new(troupe_agents::Ruleset::merge(&[
            &agent.permission,
            &session_rules,
        ]));
        let tools = if model.tool_call {
            let names = rt.registry.names();
            let disabled = agent.disabled_tools(&names, &session_rules);
            rt.registry
                .specs()
                .into_iter()
                .filter(|(name, _, _)| !disabled.contains(name))
                .map(|(name, description, parameters)| ToolSpec {
                    name,
                    description,
                    parameters,
                })
                .collect()
        } else {
            Vec::new()
        };
        let (dir, wt, full_id, ag) = (
            state.directory.clone(),
            state.worktree.clone(),
            model.full_id(),
            agent.clone(),
        );
        let instructions = rt.config.config.instructions.clone();
        let user_system = input.system.clone();
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
        .map_err(|e| format!("could not build the system prompt: {e}"))?;
        let max_steps = agent.steps.unwrap_or(rt.opts.max_steps).max(1);
        let (tx, _rx) = oneshot::channel();
        Ok(Turn {
            reply: tx,
            user_id,
            step: 0,
            cancel: CancellationToken::new(),
            agent,
            model,
            max_steps,
            system,
            tools,
            rules,
            started_cost: state.session.cost,
        })
    }

    /// Decide whether the loop goes on; start the next step or finish the turn.
    async fn next_step(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        if turn.cancel.is_cancelled() {
            self.finish_turn(myself, state, None).await;
            return;
        }
        // Exit condition (OpenCode runLoop): the newest assistant answers the newest user
        // message and finished for a reason other than tool calls, without tool parts.
        if let Some(MessageWithParts {
            info: Message::Assistant(a),
            parts,
        }) = state.history.last()
            && a.id.as_str() > turn.user_id.as_str()
        {
            if a.error.is_some() {
                self.finish_turn(myself, state, None).await;
                return;
            }
            let has_tools = parts
                .iter()
                .any(|p| matches!(p.kind, PartKind::Tool { .. }));
            if let Some(f) = &a.finish
                && f != "tool-calls"
                && !has_tools
            {
                self.finish_turn(myself, state, None).await;
                return;
            }
        }
        turn.step += 1;
        if turn.step > turn.max_steps {
            let msg = format!(
                "stopped after the maximum of {} steps for agent {}",
                turn.max_steps, turn.agent.name
            );
            self.finish_turn(myself, state, Some(MessageError::new("MaxStepsError", msg)))
                .await;
            return;
        }
        let is_last = turn.step >= turn.max_steps;
        let mut messages = Vec::with_capacity(state.history.len() * 2 + 2);
        messages.push(ChatMessage::System {
            content: turn.system.clone(),
        });
        messages.extend_from_slice(state.cache.extend(&state.history));
        if is_last && turn.max_steps > 1 {
            messages.push(ChatMessage::Assistant {
                content: Some(troupe_agents::MAX_STEPS_PROMPT.to_string()),
                reasoning: None,
                reasoning_signature: None,
                tool_calls: Vec::new(),
            });
        }
        let model = turn.model.clone();
        let mut extra = model.options.clone();
        for (k, v) in &turn.agent.options {
            extra.insert(k.clone(), v.clone());
        }
        // `firstStep`: options merged only into the first request of a turn (e.g. llama.cpp's
        // `tool_choice: "required"` for a small model), with `prefill` sent as the start of
        // the assistant's answer (a response prefill, as llama.cpp and Anthropic support).
        if let Some(serde_json::Value::Object(first)) = extra.remove("firstStep")
            && turn.step == 1
        {
            for (k, v) in first {
                if k == "prefill" {
                    if let Some(text) = v.as_str().filter(|t| !t.is_empty()) {
                        messages.push(ChatMessage::Assistant {
                            content: Some(text.to_string()),
                            reasoning: None,
                            reasoning_signature: None,
                            tool_calls: Vec::new(),
                        });
                    }
                } else {
                    extra.insert(k, v);
                }
            }
        }
        let request = ChatRequest {
            model: model.model_id.clone(),
            messages,
            tools: if is_last && turn.max_steps > 1 {
                Vec::new()
            } else {
                turn.tools.clone()
            },
            temperature: turn.agent.temperature.filter(|_| model.temperature),
            top_p: turn.agent.top_p,
            max_tokens: Some(model.max_output_tokens()),
            extra,
            headers: vec![("x-session-affinity".into(), state.session.id.clone())],
        };
        let assistant = AssistantMessage {
            id: troupe_session::id::message(),
            session_id: state.session.id.clone(),
            parent_id: turn.user_id.clone(),
            time: AssistantTime {
                created: now_ms(),
                completed: None,
            },
            agent: turn.agent.name.clone(),
            model_id: model.model_id.clone(),
            provider_id: model.provider_id.clone(),
            path: MessagePath {
                cwd: state.directory.display().to_string(),
                root: state.worktree.display().to_string(),
            },
            summary: false,
            cost: Default::default(),
            tokens: Default::default(),
            finish: None,
            error: None,
        };
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
        };
        let prior_calls: Vec<(String, serde_json::Value)> = state
            .history
            .iter()
            .filter(|m| matches!(&m.info, Message::Assistant(a) if a.parent_id == turn.user_id))
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| match &p.kind {
                PartKind::Tool { tool, state, .. } => Some((tool.clone(), state.input().clone())),
                _ => None,
            })
            .collect();
        let args = ProcessorArgs {
            rt: state.rt.clone(),
            assistant: assistant.clone(),
            request,
            model,
            cancel: turn.cancel.clone(),
            tool_ctx,
            prior_calls,
        };
        state.rt.counters.steps.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = Actor::spawn_linked(None, ProcessorActor, args, myself.get_cell()).await {
            let mut a = assistant;
            a.error = Some(MessageError::new(
                "UnknownError",
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
        state.session.time.updated = now_ms();
        let sid = state.session.id.clone();
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
            error.get_or_insert_with(|| MessageError::new("StoreError", e.to_string()));
        }
        let result = TurnResult {
            session_id: sid,
            message,
            text,
            error,
            steps: turn.step,
            cost: state.session.cost - turn.started_cost,
            tokens: state.session.tokens,
        };
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
        _myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        let directory = PathBuf::from(&args.session.directory);
        let worktree = worktree_of(&directory);
        Ok(SessionState {
            _gauge: crate::ActorGauge::new(&args.rt.counters.live_actors),
            rt: args.rt,
            session: args.session,
            history: args.history,
            cache: ChatCache::default(),
            queue: VecDeque::new(),
            turn: None,
            directory,
            worktree,
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
                state.queue.push_back(p);
                if state.turn.is_none() {
                    self.start_next(&myself, state).await;
                }
            }
            SessionMsg::Abort => {
                for p in state.queue.drain(..) {
                    let _ = p.reply.send(Err("aborted before it started".into()));
                }
                if let Some(t) = &state.turn {
                    t.cancel.cancel();
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
        match evt {
            SupervisionEvent::ActorTerminated(_cell, boxed, _) => {
                let outcome = boxed
                    .and_then(|mut b| b.take::<ProcessorState>().ok())
                    .map(ProcessorState::into_outcome);
                if let Some(o) = outcome {
                    if let Message::Assistant(a) = &o.message.info {
                        state.session.cost += a.cost;
                        for p in &o.message.parts {
                            if let PartKind::StepFinish { tokens, .. } = &p.kind {
                                state.session.tokens.add(tokens);
                            }
                        }
                    }
                    state.history.push(o.message);
                    if o.result == StepResult::Stop {
                        self.finish_turn(&myself, state, None).await;
                    } else {
                        self.next_step(&myself, state).await;
                    }
                } else if state.turn.is_some() {
                    let e = MessageError::new(
                        "UnknownError",
                        "the step was stopped before it finished",
                    );
                    self.finish_turn(&myself, state, Some(e)).await;
                }
            }
            SupervisionEvent::ActorFailed(_cell, err) => {
                // The processor crashed: the step fails, the session goes on serving.
                state
                    .rt
                    .counters
                    .processor_crashes
                    .fetch_add(1, Ordering::Relaxed);
                let sid = state.session.id.clone();
                let mut history = state
                    .rt
                    .store
                    .read(move |r| r.messages(&sid))
                    .await
                    .unwrap_or_default();
                if let Some(turn) = &state.turn {
                    let last_assistant = history.iter().rposition(
                        |m| matches!(&m.info, Message::Assistant(a) if a.parent_id == turn.user_id),
                    );
                    if let Some(i) = last_assistant {
                        let mut fixed = vec![history[i].clone()];
                        troupe_session::store::sweep_interrupted(&state.rt.store, &mut fixed);
                        if let Message::Assistant(a) = &mut fixed[0].info {
                            a.error = Some(MessageError::new(
                                "UnknownError",
                                format!("the step crashed: {err}"),
                            ));
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
                let e = MessageError::new("UnknownError", format!("the step crashed: {err}"));
                self.finish_turn(&myself, state, Some(e)).await;
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        for p in state.queue.drain(..) {
            let _ = p.reply.send(Err("session actor stopped".into()));
        }
        if let Some(t) = state.turn.take() {
            t.cancel.cancel();
            let _ = t.reply.send(Err("session actor stopped".into()));
        }
        Ok(())
    }
}
