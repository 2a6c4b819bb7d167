//! Background subagents (`background: true`, see the parent module): starting one, the
//! `<task>` block its end delivers to the parent, aborting them with the parent, and the
//! `task_status` tool that checks on one or waits for it.

use super::*;

/// A background subagent (in [`crate::RuntimeShared::background`]).
pub(crate) struct Background {
    /// The session that started it.
    pub parent: String,
    /// Its actor while it runs.
    pub(super) actor: ractor::ActorRef<SessionMsg>,
    /// The `<task …>` result block once it ended.
    pub(super) result: tokio::sync::watch::Receiver<Option<String>>,
    /// True once it ended and its result was delivered to the parent (or dropped because
    /// the parent was aborted).
    pub settled: tokio::sync::watch::Receiver<bool>,
    /// Set when the parent was aborted: the child is aborted and its result not delivered.
    pub(super) aborted: Arc<std::sync::atomic::AtomicBool>,
    /// The result of the parent's turn that took the delivery (joined or started by it),
    /// once it ended; taken by [`crate::Runtime::wait_background`].
    pub delivered: Arc<std::sync::Mutex<Option<crate::TurnResult>>>,
}

/// Abort the running background subagents of `session_id` and, through their own aborts,
/// theirs. Their results are not delivered.
pub(crate) fn abort_background(rt: &RuntimeShared, session_id: &str) {
    for b in rt.background.iter().filter(|b| b.parent == session_id) {
        if b.result.borrow().is_none() {
            b.aborted.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = b.actor.cast(SessionMsg::Abort);
        }
    }
}

/// Start `child` in the background (see the module docs): its actor is spawned unlinked
/// (it outlives this call) and shown under the parent session in the tree; a watcher task
/// holds the call's claim, subagent slot and lease until the child ends, then delivers its
/// result to the parent.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_background(
    rt: Arc<RuntimeShared>,
    args: Args,
    ctx: ToolContext,
    sub: troupe_agents::Agent,
    child: Session,
    model_spec: Option<String>,
    lease: crate::lease::SessionLease,
    claim: ChildClaim,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<ToolOutput, ToolError> {
    let child_id = child.id.clone();
    let cid = child_id.clone();
    let history = rt
        .store
        .read(move |r| r.messages(&cid))
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let actor_args = SessionArgs {
        rt: rt.clone(),
        session: child.clone(),
        history,
        tree_parent: Some(crate::tree::node_key(
            crate::tree::Kind::Session,
            &ctx.session_id,
        )),
        lease: Some(lease),
        span_parent: Some(tracing::Span::current()),
    };
    let (actor, _) = Actor::spawn(None, SessionActor, actor_args)
        .await
        .map_err(|e| ToolError::Failed(format!("could not start the subagent: {e}")))?;
    rt.sessions.insert(child_id.clone(), actor.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let input = PromptInput {
        text: args.prompt.clone(),
        agent: Some(sub.name.clone()),
        model: model_spec,
        ..Default::default()
    };
    actor
        .cast(SessionMsg::Prompt(Box::new(PendingPrompt {
            input,
            accepted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            started: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            resume: false,
            reply: tx,
        })))
        .map_err(|e| ToolError::Failed(format!("could not start the subagent: {e}")))?;
    let (result_tx, result_rx) = tokio::sync::watch::channel(None);
    let (settled_tx, settled_rx) = tokio::sync::watch::channel(false);
    let aborted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let delivered = Arc::new(std::sync::Mutex::new(None));
    rt.background.insert(
        child_id.clone(),
        Background {
            parent: ctx.session_id.clone(),
            actor: actor.clone(),
            result: result_rx,
            settled: settled_rx,
            aborted: aborted.clone(),
            delivered: delivered.clone(),
        },
    );
    let (parent, description) = (ctx.session_id.clone(), args.description.clone());
    let watcher_rt = rt.clone();
    let cid = child_id.clone();
    tokio::spawn(async move {
        let rt = watcher_rt;
        let outcome = rx.await;
        rt.sessions
            .remove_if(&cid, |_, a| a.get_id() == actor.get_id());
        drop(claim);
        drop(permit);
        let block = background_result(&cid, &description, outcome);
        let _ = result_tx.send(Some(block.clone()));
        if !aborted.load(std::sync::atomic::Ordering::SeqCst)
            && let Some(runtime) = crate::Runtime::from_shared(&rt)
        {
            // Into the parent's running turn, or a new turn of an idle parent, as a
            // synthetic text (OpenCode injects a synthetic user prompt): the model must not
            // read it as something the user typed, so a running turn that takes it does
            // not wrap it in the "user sent a message" reminder (`steer::wrap`).
            let turn = runtime
                .prompt(
                    &parent,
                    PromptInput {
                        synthetic: vec![block],
                        steer: true,
                        ..Default::default()
                    },
                )
                .await;
            match turn {
                Ok(turn) => {
                    *delivered.lock().unwrap_or_else(|p| p.into_inner()) = Some(turn);
                }
                Err(e) => {
                    tracing::warn!(session_id = %parent, task_id = %cid, "the result of a background subagent was not delivered: {e}");
                }
            }
        }
        let _ = settled_tx.send(true);
    });
    let mut metadata = serde_json::Map::new();
    metadata.insert("sessionId".into(), json!(child_id));
    metadata.insert("agent".into(), json!(sub.name));
    metadata.insert("background".into(), json!(true));
    Ok(ToolOutput {
        title: args.description,
        output: format!(
            "task_id: {child_id} (running in the background; its result will arrive as a message when it ends; call task_status with this task_id to check on it or wait for it)\n\n<task id=\"{child_id}\" state=\"running\">\n</task>"
        ),
        metadata,
    })
}

/// The `<task>` block a background subagent's end delivers to its parent (OpenCode's
/// shape: a summary line, then `<task_result>` or `<task_error>`).
pub(super) fn background_result(
    child_id: &str,
    description: &str,
    outcome: Result<
        Result<crate::TurnResult, crate::TurnError>,
        tokio::sync::oneshot::error::RecvError,
    >,
) -> String {
    let (state, body) = match outcome {
        Ok(Ok(turn)) => match &turn.error {
            None => (
                "completed",
                format!("<task_result>\n{}\n</task_result>", turn.text.trim()),
            ),
            Some(e) => (
                "error",
                format!("<task_error>\n{}: {}\n</task_error>", e.name, e.message()),
            ),
        },
        Ok(Err(e)) => ("error", format!("<task_error>\n{e}\n</task_error>")),
        Err(_) => (
            "error",
            "<task_error>\nthe subagent stopped before it answered (it crashed or was killed)\n</task_error>"
                .to_string(),
        ),
    };
    format!(
        "<task id=\"{child_id}\" state=\"{state}\">\n<summary>Background task {state}: {description}</summary>\n{body}\n</task>"
    )
}

/// `task_status {task_id, wait_ms?}`: the state of a background subagent this session
/// started: its result once it ended, else `running`; with `wait_ms` (at most
/// [`MAX_STATUS_WAIT_MS`]) it waits that long for the end first. Read-only; asks nothing.
pub struct TaskStatusTool {
    rt: Weak<RuntimeShared>,
}

/// Longest `task_status` wait: 10 minutes, ms.
pub const MAX_STATUS_WAIT_MS: u64 = 600_000;

impl TaskStatusTool {
    /// A task_status tool bound to a runtime.
    pub fn new(rt: Weak<RuntimeShared>) -> Self {
        Self { rt }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatusArgs {
    task_id: String,
    #[serde(default)]
    wait_ms: Option<u64>,
}

impl Tool for TaskStatusTool {
    fn name(&self) -> &'static str {
        "task_status"
    }

    fn description(&self) -> String {
        "Check on a subagent started with task and background: true. Returns its result once it has ended, else says it is still running. Pass wait_ms to wait up to that long (at most 600000) for it to end.".into()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task_id": {"type": "string", "description": "The task_id the background task call returned"},
                "wait_ms": {"type": "integer", "minimum": 0, "description": "Wait up to this many milliseconds for the task to end (default 0, at most 600000)"}
            },
            "required": ["task_id"]
        })
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let rt = self.rt.clone();
        Box::pin(async move {
            let rt = live_runtime(&rt)?;
            let args: StatusArgs = troupe_tools::parse_args("task_status", args)?;
            let mut result = match rt.background.get(&args.task_id) {
                Some(b) if b.parent == ctx.session_id => b.result.clone(),
                _ => {
                    return Err(ToolError::Failed(format!(
                        "task_id {} is not a background task of this session",
                        args.task_id
                    )));
                }
            };
            let wait =
                std::time::Duration::from_millis(args.wait_ms.unwrap_or(0).min(MAX_STATUS_WAIT_MS));
            if result.borrow().is_none() && !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::timeout(wait, result.wait_for(|r| r.is_some())) => {}
                    _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
                }
            }
            let done = result.borrow().clone();
            let mut metadata = serde_json::Map::new();
            metadata.insert("sessionId".into(), json!(args.task_id));
            metadata.insert("running".into(), json!(done.is_none()));
            Ok(ToolOutput {
                title: args.task_id.clone(),
                output: done.unwrap_or_else(|| {
                    format!(
                        "<task id=\"{}\" state=\"running\">\n</task>\nStill running; its result will arrive as a message when it ends.",
                        args.task_id
                    )
                }),
                metadata,
            })
        })
    }
}
