//! CompactionWorker: summarizes a session's history with the hidden `compaction` agent.
//!
//! The session actor starts one when a step overflowed the model's usable context (or the
//! provider rejected a request as too large, or the user asked with `session compact`). The
//! worker builds a request that fits: the history since the last summary, with long tool
//! outputs cut to 2,000 chars and, if still too big, the oldest turns dropped (troupe-session
//! `compaction::compaction_input`, which never separates a tool call from its result), plus
//! the summary instructions (Goal / Instructions / Discoveries / Accomplished / Relevant
//! files), anchored on the previous summary when there is one (the model updates it). The
//! session actor keeps the last turns out of the input: they stay verbatim in later
//! requests (`troupe_session::compaction::select_tail`), and after a provider overflow the
//! last user turn is replayed from the summary ([`plan`]). It runs that request as a
//! tool-less step through a linked [`ProcessorActor`], whose assistant message is marked
//! `summary`. Its final state carries the outcome.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio_util::sync::CancellationToken;
use troupe_agents::prompt::{COMPACTION_REQUEST_PROMPT, COMPACTION_UPDATE_PROMPT};
use troupe_config::ResolvedModel;
use troupe_session::compaction::{
    TOOL_OUTPUT_MAX_CHARS, compaction_input, estimate_tokens, previous_summary, replay_index,
    select_tail, tail_budget, tail_turns, to_summarize, usable_context,
};
use troupe_session::{
    AssistantMessage, AssistantTime, Message, MessagePath, MessageWithParts, Part, PartKind,
    UserMessage, Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::RuntimeShared;
use crate::processor::{ProcessorActor, ProcessorArgs, ProcessorState, StepOutcome};

/// The user text of a summary request: [`COMPACTION_REQUEST_PROMPT`], after the
/// [`COMPACTION_UPDATE_PROMPT`] anchor holding the previous summary when there is one.
pub fn instructions(previous_summary: Option<&str>) -> String {
    match previous_summary {
        Some(prev) => format!(
            "{}\n\n{COMPACTION_REQUEST_PROMPT}",
            COMPACTION_UPDATE_PROMPT.replace("{summary}", prev.trim())
        ),
        None => COMPACTION_REQUEST_PROMPT.to_string(),
    }
}

/// Arguments of a compaction.
pub struct CompactionArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// Session id.
    pub session_id: String,
    /// The compaction request (user message) the summary answers.
    pub request_id: String,
    /// History to summarize: the head of what the session's requests send (without the
    /// previous compaction request and summary, the kept tail and the request itself).
    pub history: Vec<MessageWithParts>,
    /// The previous summary's text: the new summary updates it (an anchored compaction)
    /// instead of starting from scratch.
    pub previous_summary: Option<String>,
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
    shared: Arc<RuntimeShared>,
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
        let node = args.shared.tree.register_busy(
            crate::tree::Kind::Compaction,
            &args.request_id,
            &args.session_id,
            &args.tree_parent,
        );
        Ok(CompactionState {
            _gauge: crate::ActorGauge::new(&args.shared.counters.live_actors),
            node,
            step: None,
            shared: args.shared.clone(),
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
        let shared = args.shared.clone();
        shared
            .faults
            .check(crate::faults::FaultPoint::CompactionStart, &args.session_id);
        let agent = shared.agents.get("compaction").cloned();
        let system = agent
            .as_ref()
            .and_then(|a| a.prompt.clone())
            .unwrap_or_else(|| "Summarize the conversation for a handover.".to_string());
        let cfg = &shared.config.config.compaction;
        let usable = usable_context(&args.model, cfg);
        // Room for the instructions plus a safety margin of 10% of the usable context (at
        // least 200 tokens) for the token estimate's error.
        let instructions = instructions(args.previous_summary.as_deref());
        let overhead =
            estimate_tokens(&system) + estimate_tokens(&instructions) + (usable / 10).max(200);
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
            &instructions,
            &args.session_id,
        );
        let assistant = AssistantMessage {
            id: troupe_session::id::message(),
            session_id: args.session_id.clone().into(),
            parent_id: args.request_id.clone().into(),
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
        shared
            .store
            .write1(Write::Message(Message::Assistant(assistant.clone())));
        let span = crate::spans::step(&args.span, &args.session_id, &assistant.id, 0);
        let pargs = ProcessorArgs {
            span,
            shared: shared.clone(),
            assistant,
            request,
            model: args.model.clone(),
            cancel: args.cancel.clone(),
            tool_ctx: args.tool_ctx.clone(),
            prior_calls: Vec::new(),
            restarts: 0,
            tree_parent: Some(state.node.key().to_string()),
            registry: shared.registry.clone(),
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
                    .shared
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

/// What a compaction summarizes and keeps, decided from the history before its request.
#[derive(Debug, Default)]
pub struct CompactionPlan {
    /// The messages to summarize, oldest first.
    pub head: Vec<MessageWithParts>,
    /// The previous summary's text (the anchor), when the history follows one.
    pub previous_summary: Option<String>,
    /// After an overflow: the user message to send again once summarized (everything
    /// before it is summarized, it and what followed are not).
    pub replay: Option<troupe_session::MessageId>,
    /// The request's compaction part with `tail_start_id` set, when a tail is kept.
    pub request_part: Option<Part>,
}

/// Plan a compaction (OpenCode `process`, opencode-engine.md §5.5 steps 2–5): `before` is the
/// history up to the compaction request `request`. The messages the session's requests send
/// besides the previous request and summary are split into a head to summarize and a tail
/// of the last `compaction.tail_turns` turns (within `preserve_recent_tokens`) kept verbatim
/// ([`select_tail`]); when no tail fits, everything is summarized. After an overflow (the
/// provider rejected the request) nothing is kept: the newest user turn is replayed from the
/// summary instead, and only what came before it is summarized.
pub fn plan(
    before: &[MessageWithParts],
    request: Option<&MessageWithParts>,
    model: &ResolvedModel,
    cfg: &troupe_config::CompactionConfig,
) -> CompactionPlan {
    let mut head: Vec<MessageWithParts> = to_summarize(before)
        .into_iter()
        .map(|i| before[i].clone())
        .collect();
    let compaction_part = request.and_then(|m| {
        m.parts
            .iter()
            .find(|p| matches!(p.kind, PartKind::Compaction { .. }))
    });
    let overflow = compaction_part
        .is_some_and(|p| matches!(p.kind, PartKind::Compaction { overflow: true, .. }));
    let mut plan = CompactionPlan {
        previous_summary: previous_summary(before),
        ..Default::default()
    };
    if overflow {
        if let Some(r) = replay_index(&head) {
            plan.replay = Some(head[r].info.id().clone());
            head.truncate(r);
        }
    } else if let Some(t) = select_tail(
        &head,
        tail_turns(cfg),
        tail_budget(cfg, usable_context(model, cfg)),
    ) {
        let id = head[t].info.id().clone();
        head.truncate(t);
        plan.request_part = compaction_part.map(|p| {
            let mut p = p.clone();
            if let PartKind::Compaction { tail_start_id, .. } = &mut p.kind {
                *tail_start_id = Some(id);
            }
            p
        });
    }
    plan.head = head;
    plan
}

/// The copy of user message `m` sent again after an overflow's compaction, as `user` (a
/// new message of the turn): its text parts as they were, each attached file as a line
/// `[Attached <mime>: <name>]` (the file itself is what overflowed), nothing else.
pub fn replay_message(m: &MessageWithParts, mut user: UserMessage) -> (UserMessage, Vec<Part>) {
    if let Message::User(orig) = &m.info {
        user.agent = orig.agent.clone();
        user.model = orig.model.clone();
        user.system = orig.system.clone();
    }
    let parts = m
        .parts
        .iter()
        .filter_map(|p| {
            let kind = match &p.kind {
                PartKind::Text {
                    text, synthetic, ..
                } => PartKind::Text {
                    text: text.clone(),
                    synthetic: *synthetic,
                    time: None,
                },
                PartKind::File { mime, filename, .. } => PartKind::Text {
                    text: format!(
                        "[Attached {mime}: {}]",
                        filename.as_deref().unwrap_or("file")
                    ),
                    synthetic: false,
                    time: None,
                },
                _ => return None,
            };
            Some(Part::new(&user.session_id, &user.id, kind))
        })
        .collect();
    (user, parts)
}
