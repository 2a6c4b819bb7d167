//! A turn's beginning and end: storing the user message, starting or resuming the turn
//! (its agent, model, ruleset and tools), delivering steering prompts, accounting usage and
//! cost, and finishing with the reply to the prompt's caller.

use super::*;

impl SessionActor {
    /// Resolve the prompt's agent (default: the config's default agent) and model (agent's,
    /// session's, config's), then store the user message with its parts (text or compaction
    /// request, synthetic reminders) and append it to the history. Returns the agent, the
    /// model and the new message's id; errors name a bad agent or model.
    pub(super) fn add_user_message(
        &self,
        state: &mut SessionState,
        input: &PromptInput,
    ) -> Result<
        (
            troupe_agents::Agent,
            Arc<troupe_config::model::ResolvedModel>,
            MessageId,
        ),
        String,
    > {
        let shared = state.shared.clone();
        let agent = match &input.agent {
            Some(name) => shared
                .agents
                .require(name)
                .map_err(|e| e.to_string())?
                .clone(),
            None => shared
                .agents
                .default_agent(shared.config.config.default_agent.as_deref())
                .map_err(|e| e.to_string())?
                .clone(),
        };
        let model_spec = input
            .model
            .clone()
            .or_else(|| agent.model.clone())
            .or_else(|| state.session.model.as_ref().map(ModelRef::full))
            .or_else(|| shared.config.default_model())
            .ok_or_else(|| {
                "no model configured: set \"model\" in troupe.json or pass --model provider/model"
                    .to_string()
            })?;
        let model = Arc::new(
            shared
                .config
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
            system: input.system.clone(),
            ..UserMessage::new(&state.session.id, &agent.name, ModelRef::from(&*model))
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
        shared.store.write(writes);
        let user_id = user.id.clone();
        state.history.push(MessageWithParts {
            info: Message::User(user),
            parts,
        });
        Ok((agent, model, user_id))
    }

    /// A `noReply` prompt (OpenCode's): store the user message, run no turn.
    pub(super) fn store_only(
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
    pub(super) async fn begin_turn(
        &self,
        state: &mut SessionState,
        input: PromptInput,
        resume: bool,
    ) -> Result<Turn, TurnError> {
        let structured = input
            .schema
            .as_ref()
            .map(|s| crate::structured::StructuredTurn::new(s, &state.shared.registry))
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
    pub(super) async fn resume_turn(
        &self,
        state: &mut SessionState,
        input: PromptInput,
    ) -> Result<Turn, TurnError> {
        let shared = state.shared.clone();
        let Some(user) = state.history.iter().rev().find_map(|m| match &m.info {
            Message::User(u) => Some(u.clone()),
            Message::Assistant(_) => None,
        }) else {
            return Err(TurnError::Refused(
                "nothing to resume: the session has no user message".into(),
            ));
        };
        let agent = shared
            .agents
            .require(input.agent.as_deref().unwrap_or(&user.agent))
            .map_err(|e| TurnError::Refused(e.to_string()))?
            .clone();
        let model = Arc::new(
            shared
                .config
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
    pub(super) async fn turn_for(
        &self,
        state: &mut SessionState,
        agent: Agent,
        model: Arc<ResolvedModel>,
        user_id: MessageId,
        user_system: Option<String>,
        compact_only: bool,
    ) -> Result<Turn, TurnError> {
        let shared = state.shared.clone();
        // Session rules (e.g. a subagent's derived ruleset) come after the agent's. A value
        // that does not decode fails the turn: dropping it would run a subagent with its
        // parent's wider permissions.
        let mut session_rules = state.session.ruleset()?;
        if !shared.opts.interactive {
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
            shared.mcp.first_connects().await;
        }
        // Descriptions may list what the session's directory holds (skills): blocking pool.
        let descriptions = if model.tool_call {
            let (registry, dir, wt, turn_rules) = (
                shared.registry.clone(),
                state.directory.clone(),
                state.worktree.clone(),
                rules.clone(),
            );
            tokio::task::spawn_blocking(move || {
                let denies = |permission: &str, pattern: &str| {
                    turn_rules.evaluate(permission, pattern) == troupe_agents::Action::Deny
                };
                registry
                    .descriptions_in(&troupe_tools::DescribeContext {
                        directory: &dir,
                        worktree: &wt,
                        denies: &denies,
                    })
                    .into_iter()
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
        let instructions = shared.config.config.instructions.clone();
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
        let max_steps = agent.steps.unwrap_or(shared.opts.max_steps).max(1);
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
            finish_after_summary: None,
            step_restarts: 0,
            retry_timer: None,
            params_wait: None,
            step_crashes: crate::supervision::Intensity::for_role(
                crate::supervision::Role::Processor,
                &shared.config.config.supervision,
            ),
        })
    }

    /// At a step boundary: store the prompts steering the turn as user messages and make
    /// the newest the turn's current one (see [`crate::steer`]). Not after an abort.
    pub(super) fn deliver_steering(&self, state: &mut SessionState) {
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

    /// Add a finished step's cost and tokens to the session totals.
    pub(super) fn account(&self, state: &mut SessionState, m: &MessageWithParts) {
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
                    .shared
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
                    .shared
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
    pub(super) async fn finish_turn(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        error: Option<MessageError>,
    ) {
        let Some(turn) = state.turn.take() else {
            return;
        };
        state.cache.turn_ended();
        // After the turn: prune old tool outputs (they are then sent as a short marker) and
        // refresh the session's file-change summary. Both are pure passes over the history.
        let now = now_ms();
        let cfg = &state.shared.config.config.compaction;
        let marks = troupe_session::compaction::prune(
            &state.history,
            cfg,
            troupe_session::compaction::PRUNE_PROTECTED_TOOLS,
            now,
        );
        if !marks.is_empty() {
            let changed = troupe_session::compaction::apply_prune(&mut state.history, &marks, now);
            state
                .shared
                .store
                .write(changed.into_iter().map(Write::Part).collect());
            state.cache.reset();
        }
        // With snapshots, the diff from the first to the last snapshot (it sees `bash` too).
        let summary = state
            .shared
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
        state.shared.store.write(vec![
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
            .shared
            .hooks
            .clone()
            .filter(|h| !h.config().session_idle.is_empty())
        {
            // A notification: off the turn's path, reported when it fails.
            let (dir, id) = (state.directory.clone(), sid.clone());
            state.shared.hook_tasks.spawn(async move {
                for e in hooks.session_idle(&dir, &id).await {
                    tracing::warn!(session = %id, "{e}");
                }
            });
        }
        if let Some(e) = &error {
            state
                .shared
                .store
                .write1(Write::Publish(Event::SessionError {
                    session_id: sid.clone(),
                    error: e.clone(),
                }));
        }
        let flushed = state.shared.store.flush().await;
        // The turn's newest assistant message (the answer, when a compaction followed it).
        let answered = turn
            .finish_after_summary
            .as_ref()
            .map_or(&turn.user_id, |(id, _)| id);
        let (message, text) = state
            .history
            .iter()
            .rev()
            .find_map(|m| match &m.info {
                Message::Assistant(a) if a.parent_id == *answered => Some((
                    Some(a.clone()),
                    m.typed_texts().collect::<Vec<_>>().join(""),
                )),
                _ => None,
            })
            .unwrap_or_default();
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
