//! The turn loop's decision after each step, as pure functions of plain data (OpenCode's
//! `runLoop` exit rules plus troupe's compaction and step limit). The session actor gathers
//! [`StepFacts`] and [`LoopFacts`] and carries out the [`AfterStep`] it gets back; the
//! decision table is unit-tested in `turn_tests.rs` without starting an actor.

use troupe_session::{Message, MessageError, MessageErrorName, MessageWithParts, PartKind};

/// Most compactions in a row without a step that made progress.
pub const MAX_COMPACTIONS_IN_A_ROW: u32 = 2;

/// What a finished step left: its assistant message and parts, reduced to what the loop
/// decides on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepFacts {
    /// The message's error (a provider failure, an abort, a doom loop, a crash).
    pub error: Option<MessageError>,
    /// Finish reason (`stop`, `tool-calls`, `length`, …); `None` when the stream never said.
    pub finish: Option<String>,
    /// Whether it has tool parts (the model called tools).
    pub tool_parts: bool,
    /// Whether it has non-empty text.
    pub text: bool,
    /// Whether its usage passed the model's usable context (`compaction::is_overflow`).
    pub overflowed: bool,
    /// Whether the step asked to stop the turn (a plain permission reject, a doom loop, an
    /// abort).
    pub stop: bool,
}

impl StepFacts {
    /// Facts of a stored step; `overflowed` and `stop` come from the caller (the model's
    /// limits and the processor's outcome).
    pub fn of(m: &MessageWithParts, overflowed: bool, stop: bool) -> Self {
        let (error, finish) = match &m.info {
            Message::Assistant(a) => (a.error.clone(), a.finish.clone()),
            Message::User(_) => (None, None),
        };
        Self {
            error,
            finish,
            tool_parts: m
                .parts
                .iter()
                .any(|p| matches!(p.kind, PartKind::Tool { .. })),
            text: m
                .parts
                .iter()
                .any(|p| matches!(&p.kind, PartKind::Text { text, .. } if !text.trim().is_empty())),
            overflowed,
            stop,
        }
    }
}

/// The loop's own state when it decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopFacts {
    /// The turn was aborted.
    pub aborted: bool,
    /// `compaction.auto` is on.
    pub auto_compact: bool,
    /// Compactions since the last step that made progress.
    pub compactions: u32,
    /// Steps run so far in the turn.
    pub steps: u32,
    /// The agent's step limit.
    pub max_steps: u32,
    /// The agent (named in the step-limit error).
    pub agent: String,
    /// The turn was resumed after its session actor crashed: the interrupted step's error
    /// does not end it.
    pub resumed: bool,
}

/// Why a turn finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The model answered (finished for a reason other than tool calls).
    Answered,
    /// The step failed (its message carries the error).
    StepFailed,
    /// The turn was aborted.
    Aborted,
    /// The step asked to stop (reject, doom loop).
    Stopped,
    /// `tool-calls` without a tool call and without text.
    EmptyToolCalls,
    /// The agent's step limit.
    MaxSteps,
    /// Still over the context after compacting twice in a row.
    StillOverflowing,
}

/// What the loop does next.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterStep {
    /// Run another step.
    NextStep,
    /// Compact the history, then do `then`. `overflow_error`: the provider rejected the
    /// request as too large (rather than the usage passing the limit).
    Compact {
        /// The provider said the context overflowed.
        overflow_error: bool,
        /// What the turn does once the summary is stored.
        then: AfterSummary,
    },
    /// End the turn; `error` is the turn's error beyond the step's own.
    Finish {
        /// Why the turn ends (the model stopped, a step limit, a doom loop, …).
        why: Why,
        /// The turn's error, if the decision itself is one.
        error: Option<MessageError>,
    },
}

/// What a turn does after the compaction a step's overflow asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterSummary {
    /// Ask the model to go on from the summary (the synthetic "continue", or the request
    /// the provider rejected, sent again).
    GoOn,
    /// End the turn as the step alone would have ended it: the step was complete (an
    /// answer, a stop, the step limit), so a "continue" would only make the model talk on.
    /// A local model with a 4,096-token context answered over its usable context and was
    /// sent on for five steps until the compactions gave up; troupe's rule, not OpenCode's
    /// (which always continues).
    Finish {
        /// Why the turn ends.
        why: Why,
        /// The turn's error, if that decision is one.
        error: Option<MessageError>,
    },
}

fn finish(why: Why, error: Option<MessageError>) -> AfterStep {
    AfterStep::Finish { why, error }
}

/// The decision after a step finished: compact on overflow (unless aborted, auto-compaction
/// is off, or it already compacted twice in a row), stop when the step asked to, otherwise
/// [`continue_or_finish`]. A compaction after a complete step (usage over the limit, no
/// provider error) ends the turn once the summary is stored ([`AfterSummary::Finish`]);
/// after a rejected request, or a step that would go on anyway, the turn goes on.
pub fn after_step(step: &StepFacts, lp: &LoopFacts) -> AfterStep {
    let overflow_error = step
        .error
        .as_ref()
        .is_some_and(|e| e.name == MessageErrorName::ContextOverflow);
    let overflowed = overflow_error || (step.error.is_none() && step.overflowed);
    if !lp.aborted && lp.auto_compact && overflowed {
        if lp.compactions >= MAX_COMPACTIONS_IN_A_ROW {
            return finish(
                Why::StillOverflowing,
                Some(MessageError::new(
                    MessageErrorName::ContextOverflow,
                    "stopped: the conversation is still over the model's context limit after 2 compactions in a row",
                )),
            );
        }
        let then = match without_overflow(step, lp) {
            AfterStep::Finish { why, error } if !overflow_error => {
                AfterSummary::Finish { why, error }
            }
            _ => AfterSummary::GoOn,
        };
        return AfterStep::Compact {
            overflow_error,
            then,
        };
    }
    without_overflow(step, lp)
}

/// [`after_step`]'s decision when the context is not the question: stop when the step asked
/// to, otherwise [`continue_or_finish`].
fn without_overflow(step: &StepFacts, lp: &LoopFacts) -> AfterStep {
    if step.stop {
        return finish(Why::Stopped, None);
    }
    continue_or_finish(Some(step), lp)
}

/// OpenCode's loop condition, checked before each step: `last` is the newest assistant
/// message answering the turn's current user message (`None` before the first step or after
/// a compaction). The turn ends when aborted, when that message failed, when it finished for
/// a reason other than tool calls without tool parts (`tool-calls` with neither a call nor
/// text is an `EmptyToolCallsError`), or at the step limit (`MaxStepsError`).
pub fn continue_or_finish(last: Option<&StepFacts>, lp: &LoopFacts) -> AfterStep {
    if lp.aborted {
        return finish(Why::Aborted, None);
    }
    if let Some(s) = last.filter(|s| !(lp.resumed && s.error.is_some())) {
        if s.error.is_some() {
            return finish(Why::StepFailed, None);
        }
        if let Some(f) = &s.finish
            && !s.tool_parts
        {
            if f == "tool-calls" && !s.text {
                return finish(
                    Why::EmptyToolCalls,
                    Some(MessageError::new(
                        MessageErrorName::EmptyToolCalls,
                        "the model ended its step with finish reason tool-calls but sent no tool call and no text",
                    )),
                );
            }
            return finish(Why::Answered, None);
        }
    }
    if lp.steps >= lp.max_steps {
        return finish(
            Why::MaxSteps,
            Some(max_steps_error(lp.max_steps, &lp.agent)),
        );
    }
    AfterStep::NextStep
}

/// The error of a turn stopped by its agent's step limit.
pub fn max_steps_error(max_steps: u32, agent: &str) -> MessageError {
    MessageError::new(
        MessageErrorName::MaxSteps,
        format!("stopped after the maximum of {max_steps} steps for agent {agent}"),
    )
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
