//! The root supervisor of the runtime's actors, and the sweep of processes that outlived a
//! crashed troupe.

use super::*;

/// The root supervisor.
pub(crate) struct RootActor;

impl Actor for RootActor {
    type Msg = ();
    type State = Arc<RuntimeShared>;
    type Arguments = Arc<RuntimeShared>;

    async fn pre_start(
        &self,
        _m: ActorRef<()>,
        shared: Arc<RuntimeShared>,
    ) -> Result<Arc<RuntimeShared>, ActorProcessingErr> {
        Ok(shared)
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
