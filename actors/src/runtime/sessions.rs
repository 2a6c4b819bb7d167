//! The [`Runtime`]'s session API: creating a session, prompting it (its live actor, started
//! once this process holds the session's lease, and restarted after a crash), changing,
//! compacting, aborting and deleting it, and waiting for its background subagents.

use super::*;

impl Runtime {
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
    pub async fn wait_background(&self, session_id: &SessionId) -> Option<TurnResult> {
        loop {
            // The session's background subagents and theirs, transitively.
            let mut parents = vec![session_id.clone()];
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
            .filter(|b| b.parent == *session_id)
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

    /// Create and store a new session in `directory` (optionally a child of `parent`).
    pub async fn create_session(
        &self,
        directory: &Path,
        parent: Option<SessionId>,
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
        session_id: &SessionId,
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
                                session_id: session_id.clone(),
                                status: troupe_session::SessionStatus::Idle,
                            }));
                        }
                    };
                    if waited >= opts.lease_wait {
                        end_wait(announced);
                        return Err(RuntimeError::SessionBusy {
                            session_id: session_id.clone(),
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
                            session_id: session_id.clone(),
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
        let swept = crate::recover::load_swept(&self.shared, session_id)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.clone()))?;
        // A prompt after a revert deletes the messages the revert hid (issue 15).
        let (session, history) = revert::cleanup(&self.shared, swept.session, swept.history);
        let args = SessionArgs {
            shared: self.shared.clone(),
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
            .insert(actor.get_id(), session_id.clone());
        self.shared
            .sessions
            .insert(session_id.clone(), actor.clone());
        Ok(actor)
    }

    /// Send a prompt and wait for its turn to finish. Prompts to a busy session queue and
    /// run in order.
    pub async fn prompt(
        &self,
        session_id: &SessionId,
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
                        .entry(session_id.clone())
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
                                    session_id: session_id.clone(),
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
        session_id: &SessionId,
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
        let key = session_id.clone();
        let mut s = self
            .shared
            .store
            .read(move |r| r.session(&key))
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.clone()))?;
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
    async fn crash_of(
        &self,
        session_id: &SessionId,
        actor: &ActorRef<SessionMsg>,
    ) -> Option<String> {
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
    pub async fn compact(&self, session_id: &SessionId) -> Result<TurnResult, RuntimeError> {
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
    pub fn abort(&self, session_id: &SessionId) {
        if let Some(a) = self.shared.sessions.get(session_id) {
            let _ = a.cast(SessionMsg::Abort);
        }
        self.shared.leases.abort_waits(Some(session_id));
    }

    /// [`Runtime::abort`] because the caller's deadline for the turn passed (a batch task's
    /// `timeout`): the same, and the turn's span records `outcome = timeout`.
    pub fn abort_timed_out(&self, session_id: &SessionId) {
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

    /// Start a prompt without waiting for it (the result goes to the bus).
    pub fn prompt_async(&self, session_id: &SessionId, input: PromptInput) {
        let runtime = self.clone();
        let sid = session_id.clone();
        tokio::spawn(async move {
            if let Err(e) = runtime.prompt(&sid, input).await {
                runtime
                    .shared
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
    pub async fn delete_session(&self, session_id: &SessionId) -> Result<bool, RuntimeError> {
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
        let owner = session_id.clone();
        let _ =
            tokio::task::spawn_blocking(move || troupe_tools::procs::stop_session(&owner)).await;
        let sid = session_id.clone();
        let Some(s) = self.shared.store.read(move |r| r.session(&sid)).await? else {
            return Ok(false);
        };
        let sid = session_id.clone();
        let children = self.shared.store.read(move |r| r.children(&sid)).await?;
        for c in children {
            Box::pin(self.delete_session(&c.id)).await?;
        }
        // Its background subagent records (as parent and as child) go with it.
        self.shared
            .background
            .retain(|child, b| child != session_id && b.parent != *session_id);
        self.shared.store.write1(Write::DeleteSession(s));
        self.shared.store.flush().await?;
        Ok(true)
    }

    /// [`RuntimeError::SessionBusy`] when another process holds the lease of `session_id`
    /// or of a session below it.
    async fn refuse_if_driven_elsewhere(&self, session_id: &SessionId) -> Result<(), RuntimeError> {
        let mut stack = vec![session_id.clone()];
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
}
