//! A child turn handed to the cluster ([`crate::remote`]) instead of run here, and taking its
//! session's lease back when it returns.

use super::*;

/// Hand the turn of the new child session `child_id` to the cluster and wait for its
/// outcome (see [`crate::remote`]): the result reads like a local child's; an abort of the
/// parent cancels the remote turn.
pub(super) async fn run_remote(
    shared: &Arc<RuntimeShared>,
    remote: Arc<dyn crate::remote::RemoteSubagents>,
    args: Args,
    ctx: &ToolContext,
    agent: &str,
    child_id: &SessionId,
    model: Option<String>,
) -> Result<ToolOutput, ToolError> {
    // The node that takes the turn reads the child (and its ruleset) from the shared store.
    shared
        .store
        .flush()
        .await
        .map_err(|e| ToolError::Failed(format!("the subagent session was not stored: {e}")))?;
    let cancel = tokio_util::sync::CancellationToken::new();
    // However this call ends before the outcome (abort, timeout, its actor killed), the
    // remote turn is cancelled.
    let _cancel_on_drop = cancel.clone().drop_guard();
    let mut progress = serde_json::Map::new();
    progress.insert("sessionId".into(), json!(child_id));
    progress.insert("agent".into(), json!(agent));
    progress.insert("remote".into(), json!(true));
    ctx.progress
        .update(Some(args.description.clone()), progress.clone());
    let turn = crate::remote::RemoteTurn {
        session_id: child_id.clone(),
        agent: agent.to_string(),
        model,
        prompt: args.prompt.clone(),
        directory: ctx.directory.clone(),
        call_id: ctx.call_id.clone(),
        parent_session_id: ctx.session_id.clone().into(),
        cancel: cancel.clone(),
    };
    let outcome = tokio::select! {
        r = remote.run(turn) => r,
        _ = ctx.abort.cancelled() => {
            cancel.cancel();
            return Err(ToolError::Aborted);
        }
    };
    let outcome = outcome.map_err(|e| {
        ToolError::Failed(format!(
            "The subagent {child_id} could not run on the cluster: {e}"
        ))
    })?;
    if let Some(e) = &outcome.error {
        return Err(ToolError::Failed(format!(
            "The subagent {child_id} failed on node {}: {e}\n(task_id: {child_id} to continue it)",
            outcome.node
        )));
    }
    let mut metadata = progress;
    metadata.insert("node".into(), json!(outcome.node));
    metadata.insert("cost".into(), json!(outcome.cost.to_string()));
    Ok(ToolOutput {
        title: args.description,
        output: completed_output(child_id, &outcome.text),
        metadata,
    })
}

/// Take the lease of a subagent session whose crashed actor just released it (the release
/// runs on a task, so it may still be held for a moment): polls for a short while.
pub(super) async fn retake_lease(
    shared: &Arc<RuntimeShared>,
    child_id: &SessionId,
    abort: &tokio_util::sync::CancellationToken,
) -> Result<crate::lease::SessionLease, ToolError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match shared
            .store
            .lease_take(child_id, &shared.identity.claim(), shared.opts.lease_ttl)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?
        {
            troupe_session::TakeOutcome::Taken { lease, .. } => {
                return Ok(crate::lease::SessionLease::start(
                    shared.store.clone(),
                    &lease,
                    shared.opts.lease_ttl,
                    shared.leases.clone(),
                ));
            }
            troupe_session::TakeOutcome::Held(h) if std::time::Instant::now() >= deadline => {
                return Err(ToolError::Failed(format!(
                    "the subagent session {child_id} crashed and could not be restarted: it is driven by {}",
                    h.describe()
                )));
            }
            troupe_session::TakeOutcome::Held(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
            _ = abort.cancelled() => return Err(ToolError::Aborted),
        }
    }
}
