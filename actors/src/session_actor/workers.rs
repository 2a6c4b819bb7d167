//! The session's workers: the compaction worker (overflow, manual `/compact`) and what its
//! result does to the turn, the title agent started for a root session's first user message, and
//! the summary agent started after a turn that changed files.

use super::*;

impl Turn {
    /// A new user message of session `session_id` by this turn's agent and model, created now,
    /// without a system prompt or summary: what the turn adds itself (a compaction request, the
    /// "continue" after a summary).
    fn user_message(&self, session_id: &troupe_session::SessionId) -> UserMessage {
        UserMessage::new(session_id, &self.agent.name, ModelRef::from(&*self.model))
    }
}

impl SessionActor {
    /// Start a compaction: store the request (a user message with a compaction part) unless
    /// the turn's own message is the request, then run the CompactionWorker.
    pub(super) async fn start_compaction(
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
            let user = turn.user_message(&state.session.id);
            let part = Part::new(
                &state.session.id,
                &user.id,
                PartKind::Compaction {
                    auto,
                    overflow,
                    tail_start_id: None,
                },
            );
            state.shared.store.write(vec![
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

    pub(super) async fn spawn_compaction_worker(
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
            .rposition(|m| *m.info.id() == turn.user_id)
            .unwrap_or_else(|| state.history.len().saturating_sub(1));
        let plan = crate::compaction::plan(
            &state.history[..end],
            state.history.get(end),
            &model,
            &state.shared.config.config.compaction,
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
            state.shared.store.write1(Write::Part(part));
        }
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        turn.replay = replay;
        let tool_ctx = ToolContext {
            session_id: state.session.id.to_string(),
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
            shared: state.shared.clone(),
            session_id: state.session.id.to_string(),
            request_id: turn.user_id.to_string(),
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
    pub(super) async fn compaction_done(
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
            .shared
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
        // The step before the compaction was complete: the turn ends as it would have.
        if let Some(error) = state
            .turn
            .as_ref()
            .and_then(|t| t.finish_after_summary.as_ref())
            .map(|(_, e)| e.clone())
        {
            self.finish_turn(myself, state, error).await;
            return;
        }
        // Ask the model to go on from the summary.
        let Some(turn) = state.turn.as_mut() else {
            return;
        };
        let user = turn.user_message(&state.session.id);
        // After an overflow, the request that was too large is sent again from the summary;
        // otherwise the model is asked to go on.
        let replayed = turn
            .replay
            .take()
            .and_then(|id| state.history.iter().rev().find(|m| *m.info.id() == id));
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
        state.shared.store.write(writes);
        turn.user_id = user.id.clone();
        state.history.push(MessageWithParts {
            info: Message::User(user),
            parts,
        });
        self.next_step(myself, state).await;
    }

    /// Start the summary worker when the finished turn changed files (and summaries are on):
    /// it runs beside whatever comes next and stores its summary on the turn's user message.
    pub(super) async fn maybe_start_summary(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
        turn: &Turn,
    ) {
        if !state.shared.opts.summaries || turn.compact_only || turn.cancel.is_cancelled() {
            return;
        }
        let Some(start) = state
            .history
            .iter()
            .position(|m| *m.info.id() == turn.origin_user_id)
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
        let model = small_model_or(state, &turn.model);
        let args = crate::summary::SummaryArgs {
            shared: state.shared.clone(),
            session_id: state.session.id.clone(),
            user_id: turn.origin_user_id.clone(),
            turn: messages,
            model,
            tree_parent: state.node.key().to_string(),
        };
        match Actor::spawn_linked(
            None,
            crate::summary::SummaryWorker::new(),
            args,
            myself.get_cell(),
        )
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
    pub(super) async fn maybe_start_title(
        &self,
        myself: &ActorRef<SessionMsg>,
        state: &mut SessionState,
    ) {
        if !state.shared.opts.titles
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
            .filter_map(|m| m.typed_texts().next())
            .collect();
        let [first] = user_texts.as_slice() else {
            return;
        };
        let Some(turn) = state.turn.as_ref() else {
            return;
        };
        let model = small_model_or(state, &turn.model);
        let args = crate::title::TitleArgs {
            tree_parent: state.node.key().to_string(),
            shared: state.shared.clone(),
            session_id: state.session.id.clone(),
            text: first.to_string(),
            model,
        };
        if let Ok((a, _)) = Actor::spawn_linked(
            None,
            crate::title::TitleWorker::new(),
            args,
            myself.get_cell(),
        )
        .await
        {
            state.children.insert(a.get_id(), Child::Title);
            let span =
                crate::spans::worker(&state.span, crate::spans::Worker::Title, &state.session.id);
            state.worker_spans.insert(a.get_id(), span);
        }
    }
}

/// The model of the title and summary agents: the config's `small_model` when it resolves,
/// else `fallback` (the turn's model), as OpenCode picks it.
fn small_model_or(state: &SessionState, fallback: &Arc<ResolvedModel>) -> Arc<ResolvedModel> {
    match state
        .shared
        .config
        .config
        .small_model
        .as_deref()
        .map(|m| state.shared.config.resolve_model(m))
    {
        Some(Ok(m)) => Arc::new(m),
        _ => fallback.clone(),
    }
}
