//! CompactionWorker: summarizes a session's history with the hidden `compaction` agent.
//!
//! The session actor starts one when a step overflowed the model's usable context (or the
//! provider rejected a request as too large, or the user asked with `session compact`). The
//! worker builds a request that fits: the history since the last summary, with long tool
//! outputs cut to 2,000 chars and, if still too big, the oldest turns dropped (troupe-session
//! `compaction::compaction_input`, which never separates a tool call from its result), plus
//! the summary instructions (Goal / Instructions / Discoveries / Accomplished / Relevant
//! files). It runs that request as a tool-less step through a linked [`ProcessorActor`],
//! whose assistant message is marked `summary`. Its final state carries the outcome.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio_util::sync::CancellationToken;
use troupe_agents::prompt::COMPACTION_REQUEST_PROMPT;
use troupe_config::ResolvedModel;
use troupe_session::compaction::{
    TOOL_OUTPUT_MAX_CHARS, compaction_input, estimate_tokens, usable_context,
};
use troupe_session::{
    AssistantMessage, AssistantTime, Message, MessagePath, MessageWithParts, Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::RuntimeShared;
use crate::processor::{ProcessorActor, ProcessorArgs, ProcessorState, StepOutcome};

/// Arguments of a compaction.
pub struct CompactionArgs {
    /// Shared runtime parts.
    pub rt: Arc<RuntimeShared>,
    /// Session id.
    pub session_id: String,
    /// The compaction request (user message) the summary answers.
    pub request_id: String,
    /// History to summarize (already filtered from the previous summary, without the
    /// compaction request itself).
    pub history: Vec<MessageWithParts>,
    /// Model to summarize with.
    pub model: Arc<ResolvedModel>,
    /// Share of the usable context the input may take (1.0 first; smaller on a retry after
    /// the summary request itself overflowed).
    pub budget_share: f64,
    /// Cancellation of the turn.
    pub cancel: CancellationToken,
    /// Tool context template (no tools are offered; needed by the processor).
    pub tool_ctx: ToolContext,
    /// Paths for the assistant message.
    pub path: MessagePath,
    /// Registry key of the parent node in the supervision tree (the session's).
    pub tree_parent: String,
    /// The worker's span ([`crate::spans::worker`]); the summary step nests inside.
    pub span: tracing::Span,
}

/// Final state: the summary step's outcome (None if it could not run).
pub struct CompactionState {
    _gauge: crate::ActorGauge,
    node: crate::tree::NodeGuard,
    /// The summary step's processor (the only child; matched by identity).
    step: Option<ractor::ActorId>,
    rt: Arc<RuntimeShared>,
    /// The summary message, when the step ran.
    pub outcome: Option<StepOutcome>,
    /// Why it could not run.
    pub error: Option<String>,
    args: Option<CompactionArgs>,
}

/// The compaction worker actor.
pub struct CompactionWorker;

/// Messages (only its own start signal).
#[derive(Debug)]
pub enum CompactionMsg {
    /// Build the request and start the summary step.
    Start,
}

impl Actor for CompactionWorker {
    type Msg = CompactionMsg;
    type State = CompactionState;
    type Arguments = CompactionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<CompactionMsg>,
        args: CompactionArgs,
    ) -> Result<CompactionState, ActorProcessingErr> {
        myself.cast(CompactionMsg::Start)?;
        let node = args.rt.tree.register_busy(
            crate::tree::Kind::Compaction,
            &args.request_id,
            &args.session_id,
            &args.tree_parent,
        );
        Ok(CompactionState {
            _gauge: crate::ActorGauge::new(&args.rt.counters.live_actors),
            node,
            step: None,
            rt: args.rt.clone(),
            outcome: None,
            error: None,
            args: Some(args),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<CompactionMsg>,
        _msg: CompactionMsg,
        state: &mut CompactionState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(args) = state.args.take() else {
            return Ok(());
        };
        let rt = args.rt.clone();
        rt.faults
            .check(crate::faults::FaultPoint::CompactionStart, &args.session_id);
        let agent = rt.agents.get("compaction").cloned();
        let system = agent
            .as_ref()
            .and_then(|a| a.prompt.clone())
            .unwrap_or_else(|| "Summarize the conversation for a handover.".to_string());
        let cfg = &rt.config.config.compaction;
        let usable = usable_context(&args.model, cfg);
        // Room for the instructions plus a safety margin of 10% of the usable context (at
        // least 200 tokens) for the token estimate's error.
        let overhead = estimate_tokens(&system)
            + estimate_tokens(COMPACTION_REQUEST_PROMPT)
            + (usable / 10).max(200);
        let max_out = crate::request::summary_max_tokens(&args.model);
        let budget = if usable == 0 {
            u64::MAX
        } else {
            ((usable.saturating_sub(overhead + max_out)) as f64 * args.budget_share) as u64
        };
        let input = compaction_input(&args.history, TOOL_OUTPUT_MAX_CHARS, budget);
        let mut history = Vec::new();
        for m in &input {
            crate::history::convert(m, &mut history);
        }
        let request = crate::request::summary_request(
            &args.model,
            &system,
            history,
            COMPACTION_REQUEST_PROMPT,
            &args.session_id,
        );
        let assistant = AssistantMessage {
            id: troupe_session::id::message(),
            session_id: args.session_id.clone(),
            parent_id: args.request_id.clone(),
            time: AssistantTime {
                created: now_ms(),
                completed: None,
            },
            agent: "compaction".into(),
            model_id: args.model.model_id.clone(),
            provider_id: args.model.provider_id.clone(),
            path: args.path.clone(),
            summary: true,
            cost: Default::default(),
            tokens: Default::default(),
            finish: None,
            error: None,
            structured: None,
        };
        rt.store
            .write1(Write::Message(Message::Assistant(assistant.clone())));
        let span = crate::spans::step(&args.span, &args.session_id, &assistant.id, 0);
        let pargs = ProcessorArgs {
            span,
            rt: rt.clone(),
            assistant,
            request,
            model: args.model.clone(),
            cancel: args.cancel.clone(),
            tool_ctx: args.tool_ctx.clone(),
            prior_calls: Vec::new(),
            restarts: 0,
            tree_parent: Some(state.node.key().to_string()),
            registry: rt.registry.clone(),
        };
        match Actor::spawn_linked(None, ProcessorActor, pargs, myself.get_cell()).await {
            Ok((a, _)) => state.step = Some(a.get_id()),
            Err(e) => {
                state.error = Some(format!("could not start the summary step: {e}"));
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<CompactionMsg>,
        evt: SupervisionEvent,
        state: &mut CompactionState,
    ) -> Result<(), ActorProcessingErr> {
        let child = match &evt {
            SupervisionEvent::ActorTerminated(cell, _, _)
            | SupervisionEvent::ActorFailed(cell, _) => cell.get_id(),
            _ => return Ok(()),
        };
        if state.step != Some(child) {
            tracing::warn!(actor = %child, "supervision event from an unknown child of a compaction; ignored");
            return Ok(());
        }
        state.step = None;
        match evt {
            SupervisionEvent::ActorTerminated(_, boxed, _) => {
                state.outcome = boxed
                    .and_then(|mut b| b.take::<ProcessorState>().ok())
                    .map(ProcessorState::into_outcome);
                if state.outcome.is_none() {
                    state.error = Some("the summary step was stopped".into());
                }
                myself.stop(None);
            }
            SupervisionEvent::ActorFailed(_, err) => {
                state
                    .rt
                    .counters
                    .failure(crate::supervision::Role::Processor);
                state.node.add_failure();
                state.error = Some(format!("the summary step crashed: {err}"));
                myself.stop(None);
            }
            _ => {}
        }
        Ok(())
    }
}
