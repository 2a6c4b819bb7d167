//! Background subagents (`background: true`, see the parent module): starting one, the
//! `<task>` block its end delivers to the parent, aborting them with the parent, and the
//! `task_status` tool that checks on one or waits for it.

use super::*;

/// A background subagent (in [`crate::RuntimeShared::background`]).
pub(crate) struct Background {
    /// The session that started it.
    pub parent: SessionId,
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
pub(crate) fn abort_background(shared: &RuntimeShared, session_id: &SessionId) {
    for b in shared.background.iter().filter(|b| b.parent == *session_id) {
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
    shared: Arc<RuntimeShared>,
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
    let tree_parent = crate::tree::node_key(crate::tree::Kind::Session, &ctx.session_id);
    let actor = spawn_child(&shared, &child, tree_parent.clone(), lease, None).await?;
    let input = PromptInput {
        text: args.prompt.clone(),
        agent: Some(sub.name.clone()),
        model: model_spec,
        ..Default::default()
    };
    let (rx, started) = prompt_child(&actor, input.clone(), false)?;
    let (result_tx, result_rx) = tokio::sync::watch::channel(None);
    let (settled_tx, settled_rx) = tokio::sync::watch::channel(false);
    let aborted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let delivered = Arc::new(std::sync::Mutex::new(None));
    shared.background.insert(
        child_id.clone(),
        Background {
            parent: ctx.session_id.clone().into(),
            actor: actor.clone(),
            result: result_rx,
            settled: settled_rx,
            aborted: aborted.clone(),
            delivered: delivered.clone(),
        },
    );
    let (parent, description) = (
        SessionId::from(ctx.session_id.as_str()),
        args.description.clone(),
    );
    let watcher_shared = shared.clone();
    tokio::spawn(async move {
        let shared = watcher_shared;
        let run = Run {
            shared: &shared,
            child: &child,
            tree_parent,
            input,
            aborted: &aborted,
        };
        let outcome = run.supervise(actor, rx, started).await;
        drop(claim);
        drop(permit);
        let cid = &child.id;
        let block = background_result(cid, &description, outcome);
        let _ = result_tx.send(Some(block.clone()));
        if !aborted.load(std::sync::atomic::Ordering::SeqCst)
            && let Some(runtime) = crate::Runtime::from_shared(&shared)
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

/// A background subagent's run, watched until its turn ends: a session actor that crashes
/// during the turn is started again from the store and the turn goes on, as a foreground
/// child's is (within `supervision.session_restarts`).
struct Run<'a> {
    shared: &'a Arc<RuntimeShared>,
    child: &'a Session,
    tree_parent: String,
    input: PromptInput,
    /// Set when the parent was aborted: no restart then.
    aborted: &'a std::sync::atomic::AtomicBool,
}

/// Why a background subagent ended without a result when its actor stopped unasked.
const STOPPED: &str = "the subagent stopped before it answered (it crashed or was killed)";

impl Run<'_> {
    /// Wait for the turn of `actor` (prompted, answering on `rx`); restart a crashed actor.
    /// `Err` says why there is no turn result.
    async fn supervise(
        &self,
        mut actor: ractor::ActorRef<SessionMsg>,
        mut rx: super::ChildReply,
        mut started: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Result<crate::TurnResult, crate::TurnError>, String> {
        use std::sync::atomic::Ordering::SeqCst;
        let shared = self.shared;
        let child_id = &self.child.id;
        let mut crashes = crate::supervision::Intensity::for_role(
            crate::supervision::Role::Session,
            &shared.config.config.supervision,
        );
        loop {
            let outcome = (&mut rx).await;
            shared
                .sessions
                .remove_if(child_id, |_, a| a.get_id() == actor.get_id());
            let crashed_in_turn = outcome.is_err() && started.load(SeqCst);
            if !crashed_in_turn || self.aborted.load(SeqCst) {
                return outcome.map_err(|_| STOPPED.to_string());
            }
            shared.counters.failure(crate::supervision::Role::Session);
            let (backoff, attempt) = match crashes.crash(std::time::Instant::now()) {
                crate::supervision::Verdict::Restart { backoff, attempt } => (backoff, attempt),
                crate::supervision::Verdict::Escalate { crashes } => {
                    return Err(format!(
                        "the subagent failed: its session actor crashed {crashes} times within {} s (supervision.session_restarts = {})",
                        shared.config.config.supervision.period().as_secs(),
                        shared.config.config.supervision.session_restarts()
                    ));
                }
            };
            tracing::warn!(
                "background subagent session {child_id}: restarting its actor from the store (restart {attempt})"
            );
            shared.counters.restart(crate::supervision::Role::Session);
            // Its running parts are swept before it goes on (as after any crash).
            let _ = crate::recover::load_swept(shared, child_id).await;
            tokio::time::sleep(backoff).await;
            if self.aborted.load(SeqCst) {
                return Err(STOPPED.to_string());
            }
            let restarted = async {
                let lease = retake_lease(
                    shared,
                    child_id,
                    &tokio_util::sync::CancellationToken::new(),
                )
                .await?;
                let next =
                    spawn_child(shared, self.child, self.tree_parent.clone(), lease, None).await?;
                let (next_rx, next_started) = prompt_child(&next, self.input.clone(), true)?;
                Ok::<_, ToolError>((next, next_rx, next_started))
            }
            .await;
            (actor, rx, started) = restarted
                .map_err(|e| format!("the subagent crashed and could not be restarted: {e}"))?;
            // Published after the prompt, so an abort of the parent that reads the new actor
            // reaches it after the turn began; one that read the old actor set `aborted`
            // first, which is checked here.
            if let Some(mut b) = shared.background.get_mut(child_id) {
                b.actor = actor.clone();
            }
            if self.aborted.load(SeqCst) {
                let _ = actor.cast(SessionMsg::Abort);
            }
        }
    }
}

/// The `<task>` block a background subagent's end delivers to its parent (OpenCode's
/// shape: a summary line, then `<task_result>` or `<task_error>`).
pub(super) fn background_result(
    child_id: &SessionId,
    description: &str,
    outcome: Result<Result<crate::TurnResult, crate::TurnError>, String>,
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
        Err(why) => ("error", format!("<task_error>\n{why}\n</task_error>")),
    };
    format!(
        "<task id=\"{child_id}\" state=\"{state}\">\n<summary>Background task {state}: {description}</summary>\n{body}\n</task>"
    )
}

/// `task_status {task_id, wait_ms?}`: the state of a background subagent this session
/// started: its result once it ended, else `running`; with `wait_ms` (at most
/// [`MAX_STATUS_WAIT_MS`]) it waits that long for the end first. Read-only; asks nothing.
pub struct TaskStatusTool {
    shared: Weak<RuntimeShared>,
}

/// Longest `task_status` wait: 10 minutes, ms.
pub const MAX_STATUS_WAIT_MS: u64 = 600_000;

impl TaskStatusTool {
    /// A task_status tool bound to a runtime.
    pub fn new(shared: Weak<RuntimeShared>) -> Self {
        Self { shared }
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
        let call = bound_call::<StatusArgs>(&self.shared, "task_status", args);
        Box::pin(async move {
            let (shared, args) = call?;
            let mut result = match shared.background.get(args.task_id.as_str()) {
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
