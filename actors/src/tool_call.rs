//! ToolCall actor: one per tool invocation, linked under its Processor.
//!
//! The tool runs inside the actor's handler, so a panic in the tool is caught by ractor and
//! reaches the Processor as `ActorFailed` (→ an error part). The result travels back as the
//! actor's final state in `ActorTerminated`, which avoids any race between a result message
//! and the termination event (supervision events outrank user messages in ractor's mailbox).
//! Cancellation goes through the context's token, never through the mailbox; the Processor
//! enforces the timeout and kills the actor when it runs over.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tracing::Instrument;
use troupe_tools::hooks::Before;
use troupe_tools::{Tool, ToolContext, ToolError, ToolOutput};

/// Messages of a tool-call actor.
#[derive(Debug)]
pub enum ToolCallMsg {
    /// Run the tool (sent to itself once started).
    Run,
}

/// The tool-call actor (configuration only; state lives in [`ToolCallState`]).
pub struct ToolCallActor;

/// Arguments to start a tool call.
pub struct ToolCallArgs {
    /// Provider call id.
    pub call_id: String,
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Parsed arguments.
    pub args: Value,
    /// What the tool runs with: session, directory, permissions, abort token, progress.
    pub ctx: ToolContext,
    /// Live-actor count for this actor.
    pub gauge: crate::ActorGauge,
    /// Node in the supervision tree.
    pub node: crate::tree::NodeGuard,
    /// The call's span ([`crate::spans::tool_call`]): the tool runs inside it, so a
    /// permission ask or a subagent session nests under the call.
    pub span: tracing::Span,
}

/// State of a tool-call actor; its final value is the call's result.
pub struct ToolCallState {
    /// Provider call id.
    pub call_id: String,
    /// Result once the tool returned.
    pub result: Option<Result<ToolOutput, ToolError>>,
    pending: Option<(Arc<dyn Tool>, Value, ToolContext)>,
    span: tracing::Span,
    _gauge: crate::ActorGauge,
    _node: crate::tree::NodeGuard,
}

/// Run the tool between its `tool.execute.before` and `tool.execute.after` hooks (when the
/// config has any for it). A blocking or failing `before` hook means the tool never runs: the
/// model gets the reason as a permission-style error and the turn goes on. A failing `after`
/// hook withholds the output (the hook may exist to redact it).
async fn run_with_hooks(
    tool: Arc<dyn Tool>,
    args: Value,
    ctx: ToolContext,
) -> Result<ToolOutput, ToolError> {
    let Some(hooks) = ctx.hooks.clone().filter(|h| h.has_tool_hooks(tool.name())) else {
        return tool.execute(args, ctx).await;
    };
    let name = tool.name().to_string();
    let (cwd, session_id, call_id) = (
        ctx.directory.clone(),
        ctx.session_id.clone(),
        ctx.call_id.clone(),
    );
    let args = match hooks
        .tool_before(&cwd, &session_id, &call_id, &name, args)
        .await
    {
        Before::Run(args) => args,
        Before::Block(reason) => return Err(ToolError::PermissionDenied(reason)),
    };
    let out = tool.execute(args.clone(), ctx).await?;
    hooks
        .tool_after(&cwd, &session_id, &call_id, &name, &args, out)
        .await
        .map_err(|e| ToolError::Failed(format!("{e}; the tool's output is withheld")))
}

impl Actor for ToolCallActor {
    type Msg = ToolCallMsg;
    type State = ToolCallState;
    type Arguments = ToolCallArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ToolCallArgs,
    ) -> Result<ToolCallState, ActorProcessingErr> {
        // Keep pre_start trivial: a panic here would never reach the supervisor.
        myself.cast(ToolCallMsg::Run)?;
        Ok(ToolCallState {
            call_id: args.call_id,
            result: None,
            pending: Some((args.tool, args.args, args.ctx)),
            span: args.span,
            _gauge: args.gauge,
            _node: args.node,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: ToolCallMsg,
        state: &mut ToolCallState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolCallMsg::Run => {
                if let Some((tool, args, mut ctx)) = state.pending.take() {
                    // Subagent sessions started by this call are supervised by this actor.
                    ctx.extra = Some(Arc::new(myself.get_cell()));
                    // Boxed: ractor moves this handler's future by value on every message
                    // (bench README, tenth pass); the tool's run is most of its size.
                    let result =
                        Box::pin(run_with_hooks(tool, args, ctx).instrument(state.span.clone()))
                            .await;
                    let outcome = match &result {
                        Ok(_) => "completed",
                        Err(ToolError::Aborted) => "aborted",
                        Err(_) => "error",
                    };
                    crate::spans::tool_call_end(&state.span, outcome);
                    state.result = Some(result);
                }
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        _evt: ractor::SupervisionEvent,
        _state: &mut ToolCallState,
    ) -> Result<(), ActorProcessingErr> {
        // A subagent session ending (normally or not) is seen by the task tool through its
        // reply channel; the tool-call actor itself must never stop because of it.
        Ok(())
    }
}
