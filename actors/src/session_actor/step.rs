//! The steps of a turn: deciding whether to take another, building its request (tool
//! list, `chat.params` hooks, the cached body), launching its processor, and what a step's
//! end or crash means for the turn (OpenCode's loop condition is [`crate::turn`]).

use super::*;

impl SessionActor {
    /// Decide whether the loop goes on; start the next step or finish the turn.
    pub(super) async fn next_step(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
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
    pub(super) async fn start_step(&self, myself: &ActorRef<SessionMsg>, state: &mut SessionState) {
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
            cached_registry_tools(&state.shared.registry, turn)
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
            None => state.shared.registry.clone(),
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
            .shared
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
    pub(super) async fn step_params(
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
    pub(super) async fn launch_step(
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
        let provider = state.shared.provider(&model);
        let body = match &wrapped {
            None => state.cache.body(provider.model(), &request),
            Some(h) => troupe_llm::body::full_body(
                provider.model(),
                &troupe_llm::body::with_history(&request, h),
            )
            .into(),
        };
        #[cfg(debug_assertions)]
        crate::history::check_body_from_scratch(
            provider.model(),
            &request,
            &state.history,
            &view,
            delivered,
            &body.to_bytes(),
        );
        #[cfg(not(debug_assertions))]
        let _ = (&view, delivered);
        request.body = Some(body);
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
            .shared
            .store
            .write1(Write::Message(Message::Assistant(assistant.clone())));
        let tool_ctx = ToolContext {
            session_id: state.session.id.to_string(),
            message_id: assistant.id.to_string(),
            call_id: String::new(),
            agent: turn.agent.name.clone(),
            directory: state.directory.clone(),
            worktree: state.worktree.clone(),
            abort: turn.cancel.clone(),
            permissions: Arc::new(crate::permission::TurnPermissions {
                broker: state.shared.broker.clone(),
                session_id: state.session.id.clone(),
                project: state.worktree.display().to_string(),
                rules: turn.rules.clone(),
            }),
            progress: Arc::new(troupe_tools::NoProgress),
            extra: None,
            hooks: state.shared.hooks.clone(),
        };
        // The turn's newest tool calls, oldest first: the doom-loop detector only looks at
        // the last `doom::WINDOW`, so a long turn is not copied whole at every step. The
        // turn's steps come after its prompt (ids sort by creation time).
        let mut prior_calls: Vec<(String, serde_json::Value)> = Vec::new();
        for m in state.history.iter().rev() {
            if prior_calls.len() >= crate::doom::WINDOW || *m.info.id() <= turn.user_id {
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
            shared: state.shared.clone(),
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
        state.shared.counters.steps.fetch_add(1, Ordering::Relaxed);
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
                    .shared
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

    /// A step finished (its processor stopped normally): account it, then compact, finish
    /// or go on.
    pub(super) async fn step_done(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        o: crate::processor::StepOutcome,
    ) {
        self.account(state, &o.message);
        let cfg = &state.shared.config.config.compaction;
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
            crate::turn::AfterStep::Compact {
                overflow_error,
                then,
            } => {
                if let Some(t) = state.turn.as_mut() {
                    t.finish_after_summary = match then {
                        // The model answered, but the user said more meanwhile: after the
                        // summary the turn goes on.
                        crate::turn::AfterSummary::Finish {
                            why: crate::turn::Why::Answered,
                            ..
                        } if !t.steering.pending.is_empty() => None,
                        crate::turn::AfterSummary::Finish { error, .. } => {
                            Some((t.user_id.clone(), error))
                        }
                        crate::turn::AfterSummary::GoOn => None,
                    };
                }
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
    pub(super) fn structured_after_step(
        &self,
        state: &mut SessionState,
    ) -> Option<Option<MessageError>> {
        let st = state.turn.as_mut()?.structured.as_mut()?;
        match st.after_step(state.history.last()) {
            crate::structured::Outcome::Continue => None,
            crate::structured::Outcome::Failed(e) => Some(Some(e)),
            crate::structured::Outcome::Captured(v) => {
                let m = state.history.last_mut()?;
                if let Some(info) = crate::structured::attach(m, v) {
                    state.shared.store.write1(Write::Message(info));
                }
                Some(None)
            }
        }
    }

    /// The loop's state for [`crate::turn`]'s decisions.
    pub(super) fn loop_facts(&self, state: &SessionState, resumed: bool) -> crate::turn::LoopFacts {
        match state.turn.as_ref() {
            Some(t) => crate::turn::LoopFacts {
                aborted: t.cancel.is_cancelled(),
                auto_compact: state.shared.config.config.compaction.auto,
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
    pub(super) async fn step_crashed(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        cause: String,
    ) {
        let sid = state.session.id.clone();
        let mut history = match state.shared.store.read(move |r| r.messages(&sid)).await {
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
                troupe_session::store::sweep_interrupted(&state.shared.store, &mut fixed);
                if let Message::Assistant(a) = &mut fixed[0].info {
                    let mut e = crashed.clone();
                    e.data["crashed"] = serde_json::Value::Bool(true);
                    a.error = Some(e);
                    state
                        .shared
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
                    .shared
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
                        state.shared.config.config.supervision.step_retries()
                    ),
                );
                self.finish_turn(myself, state, Some(e)).await;
            }
        }
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
