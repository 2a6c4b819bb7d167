//! Provider stream events → part updates, as a pure function.
//!
//! The processor actor receives a step's [`StreamEvent`]s one by one. What each one does to the
//! assistant message's parts (open a text, reasoning or tool part, append to one, close one,
//! record a complete tool call, end the step with its usage) is decided here, from the event and
//! the step's [`OpenBlocks`] only; the actor carries the [`PartAction`]s out (creating parts,
//! stamping times, writing to the store, publishing deltas, pricing usage). Unit tests:
//! `stream_parts_tests.rs`.
//!
//! Streams are not always well formed, and the rules for that are part of the decision:
//! - a delta for a block that never started opens it (some servers skip the start);
//! - a start under an id that is still open closes the old part and opens a new one;
//! - an end for a block that is not open does nothing;
//! - a complete tool call whose input never started streaming opens its part;
//! - a second input start for the same call keeps its one part.

use std::collections::HashMap;

use troupe_llm::{FinishReason, StreamEvent, Usage};

/// Index of a part in the step's part list (the order parts were opened in).
pub type PartIndex = usize;

/// The step's open stream blocks, by the provider's block or call id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpenBlocks {
    /// Text blocks still open.
    pub text: HashMap<String, PartIndex>,
    /// Reasoning blocks still open.
    pub reasoning: HashMap<String, PartIndex>,
    /// Tool parts by call id (kept after the call completes: tool results find their part
    /// here).
    pub tool: HashMap<String, PartIndex>,
}

/// A part the actor creates; it gets the next index ([`step`]'s `parts` + the parts opened
/// before it by the same event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewPart {
    /// An empty text part, started now.
    Text,
    /// An empty reasoning part, started now.
    Reasoning,
    /// A pending tool part.
    Tool {
        /// Call id.
        call_id: String,
        /// Tool name as the model wrote it.
        name: String,
    },
}

/// One thing to do to the step's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartAction {
    /// Create a part (it gets the next index).
    Open(NewPart),
    /// Append to a text or reasoning part's text, and publish the delta.
    Append {
        /// The part.
        part: PartIndex,
        /// The text.
        delta: String,
    },
    /// End a text part now.
    CloseText(PartIndex),
    /// End a reasoning part now, keeping the provider's signature if it sent one.
    CloseReasoning {
        /// The part.
        part: PartIndex,
        /// The Anthropic thinking signature.
        signature: Option<String>,
    },
    /// A tool call is complete: keep its raw input on the pending part and queue it to run
    /// once the stream ends.
    Call {
        /// Its pending tool part.
        part: PartIndex,
        /// Call id.
        call_id: String,
        /// Tool name as the model wrote it.
        name: String,
        /// Raw argument text.
        input: String,
        /// Cut off by the output limit.
        truncated: bool,
        /// Why it must not run.
        error: Option<String>,
    },
    /// The step finished: price the usage, set the message's tokens, cost and finish
    /// reason, and add a step-finish part.
    Finish {
        /// Normalized reason.
        reason: FinishReason,
        /// The step's token usage (input, output, reasoning, cache read/write tokens).
        usage: Usage,
    },
}

/// What `event` does to a step that has `parts` parts and the open blocks `blocks`: the
/// actions, in order, and `blocks` updated to match.
pub fn step(blocks: &mut OpenBlocks, parts: usize, event: StreamEvent) -> Vec<PartAction> {
    let mut out = Vec::new();
    let mut next = parts;
    let mut open = |out: &mut Vec<PartAction>, p: NewPart| {
        out.push(PartAction::Open(p));
        next += 1;
        next - 1
    };
    match event {
        StreamEvent::TextStart { id } => {
            if let Some(old) = blocks.text.remove(&id) {
                out.push(PartAction::CloseText(old));
            }
            let i = open(&mut out, NewPart::Text);
            blocks.text.insert(id, i);
        }
        StreamEvent::TextDelta { id, text } => {
            let i = match blocks.text.get(&id) {
                Some(&i) => i,
                None => {
                    let i = open(&mut out, NewPart::Text);
                    blocks.text.insert(id, i);
                    i
                }
            };
            out.push(PartAction::Append {
                part: i,
                delta: text,
            });
        }
        StreamEvent::TextEnd { id } => {
            if let Some(i) = blocks.text.remove(&id) {
                out.push(PartAction::CloseText(i));
            }
        }
        StreamEvent::ReasoningStart { id } => {
            if let Some(old) = blocks.reasoning.remove(&id) {
                out.push(PartAction::CloseReasoning {
                    part: old,
                    signature: None,
                });
            }
            let i = open(&mut out, NewPart::Reasoning);
            blocks.reasoning.insert(id, i);
        }
        StreamEvent::ReasoningDelta { id, text } => {
            let i = match blocks.reasoning.get(&id) {
                Some(&i) => i,
                None => {
                    let i = open(&mut out, NewPart::Reasoning);
                    blocks.reasoning.insert(id, i);
                    i
                }
            };
            out.push(PartAction::Append {
                part: i,
                delta: text,
            });
        }
        StreamEvent::ReasoningEnd { id, signature } => {
            if let Some(i) = blocks.reasoning.remove(&id) {
                out.push(PartAction::CloseReasoning { part: i, signature });
            }
        }
        StreamEvent::ToolInputStart { id, name } => {
            tool_part(blocks, &mut out, &mut open, id, name);
        }
        StreamEvent::ToolInputDelta { .. } | StreamEvent::Warning { .. } => {}
        StreamEvent::ToolCall {
            id,
            name,
            input,
            truncated,
            error,
        } => {
            let part = tool_part(blocks, &mut out, &mut open, id.clone(), name.clone());
            out.push(PartAction::Call {
                part,
                call_id: id,
                name,
                input,
                truncated,
                error,
            });
        }
        StreamEvent::FinishStep { reason, usage, .. } => {
            out.push(PartAction::Finish { reason, usage });
        }
    }
    out
}

/// The tool part of `call_id`, opened when the call has none yet.
fn tool_part(
    blocks: &mut OpenBlocks,
    out: &mut Vec<PartAction>,
    open: &mut impl FnMut(&mut Vec<PartAction>, NewPart) -> PartIndex,
    call_id: String,
    name: String,
) -> PartIndex {
    if let Some(&i) = blocks.tool.get(&call_id) {
        return i;
    }
    let i = open(
        out,
        NewPart::Tool {
            call_id: call_id.clone(),
            name,
        },
    );
    blocks.tool.insert(call_id, i);
    i
}

#[cfg(test)]
#[path = "stream_parts_tests.rs"]
mod tests;
