//! The `task` tool: run a subagent as a child session actor.
//!
//! `task {description, prompt, subagent_type, task_id?}` (OpenCode's parameters) creates a
//! child session (`parentID` = the calling session) — or continues `task_id` — with the
//! subagent's model (or the parent's) and a ruleset derived from the parent (its edit
//! denials and session denials carry down; `task`/`todowrite` are denied unless the subagent
//! has its own rule for them), spawns its SessionActor linked under the calling tool-call
//! actor, and waits for the child's turn. The result is the child's final text plus its
//! session id. While it runs, the parent's tool part shows the child's progress (current
//! tool, step count) as metadata.
//!
//! Failure isolation: a child that fails, panics or is killed becomes an error result for
//! this call only. Aborting the parent aborts the child (through the call's token); if the
//! call itself is stopped (timeout), a drop guard aborts the child and the supervision link
//! stops its actors.
//!
//! Background mode (`background: true`, OpenCode's background subagents, opencode-engine.md
//! §7 task 9): the call returns at once with a `state="running"` block and the task id; the
//! child runs on, shown in the tree under its parent session, and when it ends its result
//! (`<task … state="completed|error">` with a summary) is prompted into the parent: it
//! joins the parent's running turn at the next step boundary ([`crate::steer`]) or starts a
//! new turn of an idle parent. [`TaskStatusTool`] lets the model check on it or wait for it.
//! Aborting the parent aborts its background children ([`abort_background`]); their
//! results are then not delivered. With `supervision.abort_background: false` they run on
//! and their results start a new turn of the parent. A background child's session actor that
//! crashes during its turn is started again from the store, as a foreground child's is.

use std::sync::{Arc, Weak};
use troupe_session::SessionId;

use futures::future::BoxFuture;
use ractor::{Actor, ActorCell};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_session::{Event, PartKind, Session, ToolState, Write};
use troupe_tools::{PermissionReply, PermissionRequest, Tool, ToolContext, ToolError, ToolOutput};

use crate::session_actor::{PendingPrompt, SessionActor, SessionArgs, SessionMsg};
use crate::{PromptInput, RuntimeShared};

mod background;
mod remote;

use background::start_background;
pub(crate) use background::{Background, abort_background};
pub use background::{MAX_STATUS_WAIT_MS, TaskStatusTool};
use remote::{retake_lease, run_remote};

/// The task tool.
pub struct TaskTool {
    shared: Weak<RuntimeShared>,
}

impl TaskTool {
    /// A task tool bound to a runtime.
    pub fn new(shared: Weak<RuntimeShared>) -> Self {
        Self { shared }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    description: String,
    prompt: String,
    subagent_type: String,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    command: Option<String>,
    #[serde(default)]
    background: bool,
}

/// The runtime a tool is bound to, or an error once it is shutting down.
fn live_runtime(shared: &Weak<RuntimeShared>) -> Result<Arc<RuntimeShared>, ToolError> {
    shared
        .upgrade()
        .ok_or_else(|| ToolError::Failed("the runtime is shutting down".into()))
}

/// What a call of a runtime-bound tool (`task`, `task_status`) starts from: the runtime the
/// tool is bound to ([`live_runtime`]: an error once it is shutting down) and the call's
/// arguments parsed for tool `name` ([`troupe_tools::parse_args`]: an error naming the field
/// that does not fit).
fn bound_call<A: serde::de::DeserializeOwned>(
    shared: &Weak<RuntimeShared>,
    name: &str,
    args: Value,
) -> Result<(Arc<RuntimeShared>, A), ToolError> {
    let shared = live_runtime(shared)?;
    Ok((shared, troupe_tools::parse_args(name, args)?))
}

/// Cleans up after a task call that ended early (its future dropped, e.g. the call timed
/// out and its actor was killed, which also kills the linked child): aborts the child if it
/// still lives, forgets it in the runtime, and repairs its stored history (unfinished tool
/// parts become errors), since a killed actor runs no cleanup of its own.
struct AbortChild {
    shared: Arc<RuntimeShared>,
    session_id: SessionId,
    actor: Option<ractor::ActorRef<SessionMsg>>,
    armed: bool,
}

impl Drop for AbortChild {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(actor) = self.actor.take() else {
            return;
        };
        let _ = actor.cast(SessionMsg::Abort);
        let (shared, sid) = (self.shared.clone(), self.session_id.clone());
        tokio::spawn(async move {
            // Give a live child a moment to end its turn gracefully.
            for _ in 0..100 {
                if matches!(actor.get_status(), ractor::ActorStatus::Stopped) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            if matches!(actor.get_status(), ractor::ActorStatus::Stopped)
                && let Ok(Some(_)) = crate::recover::load_swept(&shared, &sid).await
            {
                let _ = shared.store.flush().await;
            }
            shared
                .sessions
                .remove_if(&sid, |_, a| a.get_id() == actor.get_id());
        });
    }
}

/// A `task` call's hold on its child session ([`crate::RuntimeShared::task_children`]),
/// released when the call ends, however it ends.
struct ChildClaim {
    shared: Arc<RuntimeShared>,
    session_id: SessionId,
}

impl ChildClaim {
    fn take(shared: &Arc<RuntimeShared>, session_id: &SessionId) -> Result<Self, ToolError> {
        match shared.task_children.entry(session_id.clone()) {
            dashmap::mapref::entry::Entry::Occupied(_) => Err(ToolError::Failed(format!(
                "task_id {session_id} is already running in another task call of this session; \
                 wait for its result before continuing it, or start a new subagent without task_id"
            ))),
            dashmap::mapref::entry::Entry::Vacant(v) => {
                v.insert(());
                Ok(ChildClaim {
                    shared: shared.clone(),
                    session_id: session_id.clone(),
                })
            }
        }
    }
}

impl Drop for ChildClaim {
    fn drop(&mut self) {
        self.shared.task_children.remove(&self.session_id);
    }
}

impl Tool for TaskTool {
    fn name(&self) -> &'static str {
        "task"
    }

    fn description(&self) -> String {
        let mut d = String::from(
            "Launch a subagent to handle a multi-step task on its own, in a separate session. Several task calls in one response run in parallel. The subagent does not see this conversation: give it a complete, self-contained prompt and say exactly what it should return. Its final message comes back to you as the result. Pass task_id to continue an earlier subagent session.\n\nAvailable agent types:",
        );
        if let Some(shared) = self.shared.upgrade() {
            for a in shared.agents.subagents() {
                d.push_str(&format!("\n- {}: {}", a.name, a.description));
            }
        }
        d
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 words) description of the task"},
                "prompt": {"type": "string", "description": "The task for the subagent to perform"},
                "subagent_type": {"type": "string", "description": "The type of specialized agent to use for this task"},
                "task_id": {"type": "string", "description": "Continue an earlier subagent session (the id a previous task call returned)"},
                "background": {"type": "boolean", "description": "Run the subagent in the background: this call returns at once with its task_id, and its result arrives later as a message. Use task_status to check on it or wait for it."}
            },
            "required": ["description", "prompt", "subagent_type"]
        })
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let call = bound_call::<Args>(&self.shared, "task", args);
        Box::pin(async move {
            let (shared, args) = call?;
            run_task(shared, args, ctx, None).await
        })
    }
}

/// A task the user asked for (a command that runs as a subtask, OpenCode's `handleSubtask`):
/// run like a model's `task` call, with the model's input `{description, prompt,
/// subagent_type, command}`, but without the `task` permission check (the user asked, as
/// OpenCode's `bypassAgentCheck`), with `model` (`provider/model`) over the agent's, and
/// with any visible agent (a primary one too), not only subagents.
/// The subagent's own tool calls still go through its derived ruleset.
pub async fn run_for_user(
    shared: Arc<RuntimeShared>,
    input: Value,
    model: Option<String>,
    ctx: ToolContext,
) -> Result<ToolOutput, ToolError> {
    let args: Args = serde_json::from_value(input).map_err(|e| ToolError::InvalidArguments {
        tool: "task".into(),
        detail: e.to_string(),
    })?;
    run_task(shared, args, ctx, Some(UserAsked { model })).await
}

/// What differs in a task the user asked for (see [`run_for_user`]).
struct UserAsked {
    model: Option<String>,
}

async fn run_task(
    shared: Arc<RuntimeShared>,
    args: Args,
    ctx: ToolContext,
    user: Option<UserAsked>,
) -> Result<ToolOutput, ToolError> {
    if user.is_none() {
        check_task_permission(&args, &ctx).await?;
    }
    let user_asked = user.is_some();
    run_checked(shared, args, ctx, user.and_then(|u| u.model), user_asked).await
}

/// The `task` permission for the subagent (asked for the model's calls only).
async fn check_task_permission(args: &Args, ctx: &ToolContext) -> Result<(), ToolError> {
    let req = PermissionRequest {
        permission: "task".into(),
        patterns: vec![args.subagent_type.clone()],
        always: vec!["*".into()],
        metadata: json!({"description": args.description, "subagent_type": args.subagent_type}),
        ..Default::default()
    };
    match ctx.permissions.ask(req).await {
        PermissionReply::Deny(m) => Err(ToolError::PermissionDenied(m)),
        PermissionReply::Reject(m) => Err(ToolError::PermissionRejected(m)),
        PermissionReply::Allow | PermissionReply::AllowAlways => Ok(()),
    }
}

async fn run_checked(
    shared: Arc<RuntimeShared>,
    args: Args,
    ctx: ToolContext,
    model: Option<String>,
    user_asked: bool,
) -> Result<ToolOutput, ToolError> {
    let sub = match shared.agents.get(&args.subagent_type) {
        Some(a) if a.is_subagent() => a.clone(),
        // The user may hand a subtask to a primary agent too (a `subtask: true` command
        // naming one), as OpenCode allows; hidden agents stay internal.
        Some(a) if user_asked && !a.hidden => a.clone(),
        _ => {
            let names: Vec<String> = shared
                .agents
                .subagents()
                .iter()
                .map(|a| a.name.clone())
                .collect();
            return Err(ToolError::Failed(format!(
                "Unknown agent type: {} is not a valid agent type. Available: {}",
                args.subagent_type,
                names.join(", ")
            )));
        }
    };
    // Parent rules for the child's derived ruleset.
    let parent_id = SessionId::from(ctx.session_id.as_str());
    let parent = shared
        .store
        .read(move |r| r.session(&parent_id))
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let parent = parent
        .ok_or_else(|| ToolError::Failed(format!("parent session {} not found", ctx.session_id)))?;
    if child_depth(&shared, &parent).await? > shared.opts.max_depth {
        return Err(ToolError::Failed(format!(
            "Subagent depth limit reached ({}): a subagent at this depth cannot start another one.",
            shared.opts.max_depth
        )));
    }
    // A parent ruleset that does not decode fails the call: deriving from an empty one would
    // give the child more than its parent may do.
    let parent_session_rules = parent
        .ruleset()
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let parent_agent_rules = shared
        .agents
        .get(&ctx.agent)
        .map(|a| a.permission.clone())
        .unwrap_or_default();
    let derived = troupe_agents::permission::derive_subagent_ruleset(
        &parent_agent_rules,
        &parent_session_rules,
        &sub.permission,
    );

    // Resume or create the child session.
    let child: Session = match &args.task_id {
        Some(id) => {
            let key = SessionId::from(id.as_str());
            let s = shared
                .store
                .read(move |r| r.session(&key))
                .await
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            match s {
                Some(s) if s.parent_id.as_deref() == Some(ctx.session_id.as_str()) => s,
                Some(_) => {
                    return Err(ToolError::Failed(format!(
                        "task_id {id} is not a subagent session of this session"
                    )));
                }
                None => return Err(ToolError::Failed(format!("task_id {id} not found"))),
            }
        }
        None => {
            let mut s = Session::new(
                &ctx.directory.display().to_string(),
                Some(ctx.session_id.clone().into()),
            );
            s.title = format!("{} (@{} subagent)", args.description, sub.name);
            s.permission = Some(derived.into());
            shared.store.write1(Write::Session {
                info: s.clone(),
                created: true,
            });
            s
        }
    };
    // One task call per child session at a time: a second call continuing the same task_id
    // while the first still runs is refused (its result would interleave the transcript).
    let _claim = ChildClaim::take(&shared, &child.id)?;
    let model_spec = model
        .or_else(|| sub.model.clone())
        .or_else(|| parent.model.as_ref().map(|m| m.full()));
    // A new, foreground child of a subagent the config hands to the cluster: any worker
    // runs its turn (see `remote`).
    if let Some(remote) = shared.remote.get()
        && args.task_id.is_none()
        && !args.background
        && crate::remote::is_remote(&shared.config.config.cluster.subagents, &sub.name)
    {
        let remote = remote.clone();
        return run_remote(
            &shared, remote, args, &ctx, &sub.name, &child.id, model_spec,
        )
        .await;
    }

    // Per-runtime cap on concurrent subagents: calls over it wait here.
    let _permit = tokio::select! {
        p = shared.subagent_slots.clone().acquire_owned() => p.map_err(|_| ToolError::Failed("the runtime is shutting down".into()))?,
        _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
    };

    // The child is driven under its own lease like any session, so no other process (or
    // parallel task call resuming the same child) drives it meanwhile. No waiting here:
    // the parent's turn would stall behind someone else's.
    let lease = match shared
        .store
        .lease_take(&child.id, &shared.identity.claim(), shared.opts.lease_ttl)
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?
    {
        troupe_session::TakeOutcome::Taken { lease, .. } => crate::lease::SessionLease::start(
            shared.store.clone(),
            &lease,
            shared.opts.lease_ttl,
            shared.leases.clone(),
        ),
        troupe_session::TakeOutcome::Held(h) => {
            return Err(ToolError::Failed(format!(
                "subagent session {} is driven by {} right now; resume it with this task_id once that ends",
                child.id,
                h.describe()
            )));
        }
    };

    if args.background {
        return start_background(
            shared, args, ctx, sub, child, model_spec, lease, _claim, _permit,
        )
        .await;
    }
    // Spawn the child's actor under the calling tool-call actor. A child actor that crashes
    // during its turn is started again from the store and its turn goes on (like a root
    // session's, within `supervision.session_restarts`); past the limit the call fails.
    let child_id = child.id.clone();
    let supervisor: Option<ActorCell> = ctx
        .extra
        .as_ref()
        .and_then(|e| e.downcast_ref::<ActorCell>().cloned());
    let input = PromptInput {
        text: args.prompt.clone(),
        agent: Some(sub.name.clone()),
        model: model_spec,
        system: None,
        synthetic: Vec::new(),
        compact: false,
        no_reply: false,
        schema: None,
        steer: false,
        ..Default::default()
    };
    let mut lease = Some(lease);
    let mut resume = false;
    let mut crashes = crate::supervision::Intensity::for_role(
        crate::supervision::Role::Session,
        &shared.config.config.supervision,
    );
    let mut steps = 0u64;
    let mut current_tool: Option<String> = None;
    let title = args.description.clone();
    let publish = |steps: u64, tool: &Option<String>| {
        let mut m = serde_json::Map::new();
        m.insert("sessionId".into(), json!(child_id));
        m.insert("agent".into(), json!(sub.name));
        m.insert("steps".into(), json!(steps));
        m.insert("currentTool".into(), json!(tool));
        ctx.progress.update(Some(title.clone()), m);
    };
    publish(0, &None);
    let (result, aborted) = loop {
        let lease = match lease.take() {
            Some(l) => l,
            None => retake_lease(&shared, &child_id, &ctx.abort).await?,
        };
        let actor = spawn_child(
            &shared,
            &child,
            crate::tree::node_key(crate::tree::Kind::ToolCall, &ctx.call_id),
            lease,
            supervisor.clone(),
        )
        .await?;
        let mut guard = AbortChild {
            shared: shared.clone(),
            session_id: child_id.clone(),
            actor: Some(actor.clone()),
            armed: true,
        };

        let mut bus = shared.store.bus().subscribe();
        let (mut rx, started) = prompt_child(&actor, input.clone(), resume)?;

        let mut aborted = false;
        let result = loop {
            tokio::select! {
                r = &mut rx => break r,
                _ = ctx.abort.cancelled(), if !aborted => {
                    aborted = true;
                    let _ = actor.cast(SessionMsg::Abort);
                }
                ev = bus.recv() => {
                    let Ok(ev) = ev else { continue };
                    match &*ev {
                        Event::PartUpdated { part } if part.session_id == child_id => match &part.kind {
                            PartKind::StepFinish { .. } => {
                                steps += 1;
                                publish(steps, &current_tool);
                            }
                            PartKind::Tool { tool, state: ToolState::Running { .. }, .. } => {
                                current_tool = Some(tool.clone());
                                publish(steps, &current_tool);
                            }
                            _ => {}
                        },
                        _ => {}
                    }
                }
            }
        };
        guard.armed = false;
        drop(guard);
        shared
            .sessions
            .remove_if(&child_id, |_, a| a.get_id() == actor.get_id());
        let crashed_in_turn = result.is_err()
            && started.load(std::sync::atomic::Ordering::SeqCst)
            && !aborted
            && !ctx.abort.is_cancelled();
        if !crashed_in_turn {
            break (result, aborted);
        }
        shared.counters.failure(crate::supervision::Role::Session);
        match crashes.crash(std::time::Instant::now()) {
            crate::supervision::Verdict::Restart { backoff, attempt } => {
                tracing::warn!(
                    "subagent session {child_id}: restarting its actor from the store (restart {attempt})"
                );
                shared.counters.restart(crate::supervision::Role::Session);
                // Its running parts are swept before it goes on (as after any crash).
                let _ = crate::recover::load_swept(&shared, &child_id).await;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = ctx.abort.cancelled() => {}
                }
                resume = true;
            }
            crate::supervision::Verdict::Escalate { crashes } => {
                return Err(ToolError::Failed(format!(
                    "The subagent {child_id} failed: its session actor crashed {crashes} times within {} s (supervision.session_restarts = {}).",
                    shared.config.config.supervision.period().as_secs(),
                    shared.config.config.supervision.session_restarts()
                )));
            }
        }
    };
    if aborted || ctx.abort.is_cancelled() {
        return Err(ToolError::Aborted);
    }
    let turn = match result {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            return Err(ToolError::Failed(format!(
                "The subagent {child_id} failed: {e}"
            )));
        }
        Err(_) => {
            return Err(ToolError::Failed(format!(
                "The subagent {child_id} stopped before it answered (it crashed or was killed)."
            )));
        }
    };
    if let Some(e) = &turn.error {
        return Err(ToolError::Failed(format!(
            "The subagent {child_id} failed: {}: {}\n(task_id: {child_id} to continue it)",
            e.name,
            e.message()
        )));
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("sessionId".into(), json!(child_id));
    metadata.insert("agent".into(), json!(sub.name));
    metadata.insert("steps".into(), json!(turn.steps));
    metadata.insert("cost".into(), json!(turn.cost.to_string()));
    Ok(ToolOutput {
        title: args.description,
        output: completed_output(&child_id, &turn.text),
        metadata,
    })
}

/// Start the session actor of subagent session `child` from the store (its stored row, or
/// `child` itself when none is stored yet, and its stored history) under `lease`, shown
/// under `tree_parent` in the tree and linked to `supervisor` when given (a foreground
/// child lives under its tool-call actor; a background one outlives the call and is
/// spawned unlinked). The actor is registered in [`RuntimeShared::sessions`].
/// Errors: a store read failure or an actor that cannot start.
pub(super) async fn spawn_child(
    shared: &Arc<RuntimeShared>,
    child: &Session,
    tree_parent: String,
    lease: crate::lease::SessionLease,
    supervisor: Option<ActorCell>,
) -> Result<ractor::ActorRef<SessionMsg>, ToolError> {
    let cid = child.id.clone();
    let (session, history) = shared
        .store
        .read(move |r| Ok((r.session(&cid)?, r.messages(&cid)?)))
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let actor_args = SessionArgs {
        shared: shared.clone(),
        session: session.unwrap_or_else(|| child.clone()),
        history,
        tree_parent: Some(tree_parent),
        lease: Some(lease),
        // The task tool runs inside its call's span (see `tool_call`).
        span_parent: Some(tracing::Span::current()),
    };
    let spawned = match supervisor {
        Some(cell) => Actor::spawn_linked(None, SessionActor, actor_args, cell).await,
        None => Actor::spawn(None, SessionActor, actor_args).await,
    };
    let (actor, _) =
        spawned.map_err(|e| ToolError::Failed(format!("could not start the subagent: {e}")))?;
    shared.sessions.insert(child.id.clone(), actor.clone());
    Ok(actor)
}

/// The end of a subagent's turn: its result, or a closed channel when its actor stopped
/// before it answered.
pub(super) type ChildReply =
    tokio::sync::oneshot::Receiver<Result<crate::TurnResult, crate::TurnError>>;

/// Send `input` to a subagent's session actor (`resume`: go on with the stored turn after a
/// restart instead of adding the prompt again). Returns the reply channel and a flag set
/// once the turn has started (a crash after it is restarted; one before is not).
pub(super) fn prompt_child(
    actor: &ractor::ActorRef<SessionMsg>,
    input: PromptInput,
    resume: bool,
) -> Result<(ChildReply, Arc<std::sync::atomic::AtomicBool>), ToolError> {
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel();
    actor
        .cast(SessionMsg::Prompt(Box::new(PendingPrompt {
            input,
            accepted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            started: started.clone(),
            resume,
            reply: tx,
        })))
        .map_err(|e| ToolError::Failed(format!("could not start the subagent: {e}")))?;
    Ok((rx, started))
}

/// The `task` output of a child that answered `text` (OpenCode's `<task>` block, with the
/// task_id to continue it).
fn completed_output(child_id: &SessionId, text: &str) -> String {
    format!(
        "task_id: {child_id} (pass it as task_id to continue this subagent)\n\n<task id=\"{child_id}\" state=\"completed\">\n<task_result>\n{}\n</task_result>\n</task>",
        text.trim()
    )
}
/// The nesting depth a child of `parent` would have (a root session's children are depth 1):
/// one more than the number of `parent`'s ancestors, read from the store's `parent_id` chain.
/// The store, not process memory, is the source, so the limit holds for a child continued
/// with `task_id`, prompted directly, resumed after a restart, or running on another cluster
/// worker. The walk stops once past [`crate::RuntimeOptions::max_depth`]; an ancestor that is
/// gone (deleted) still counts as one level, and a store error fails the call (closed).
async fn child_depth(shared: &RuntimeShared, parent: &Session) -> Result<u32, ToolError> {
    let mut depth = 1;
    let mut next = parent.parent_id.clone();
    while let Some(id) = next {
        depth += 1;
        if depth > shared.opts.max_depth {
            break;
        }
        next = shared
            .store
            .read(move |r| r.session(&id))
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?
            .and_then(|s| s.parent_id);
    }
    Ok(depth)
}
