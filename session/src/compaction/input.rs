//! The copy of a history handed to the summarizer (OpenCode `process`, opencode-engine.md §5.5
//! step 7): long tool outputs cut, oldest whole turns dropped to fit a budget.

use crate::types::{Message, MessageWithParts, PartKind, ToolState};

use super::{CLEARED_TOOL_OUTPUT, chars_to_tokens, is_compaction_request, is_completed_summary};

/// Completed tool outputs longer than this are truncated in the summarizer's input, chars.
/// Source: OpenCode `TOOL_OUTPUT_MAX_CHARS` (opencode-engine.md §5.1, §5.5 step 7).
pub const TOOL_OUTPUT_MAX_CHARS: usize = 2_000;

/// Cut a tool output longer than `max_chars` chars to its first `max_chars` chars plus
/// `"\n[Tool output truncated for compaction: omitted N chars]"` (OpenCode
/// `toolOutputMaxChars`, §3.5). `None` when it fits.
pub fn truncate_tool_output(output: &str, max_chars: usize) -> Option<String> {
    let total = output.chars().count();
    if total <= max_chars {
        return None;
    }
    let cut = output
        .char_indices()
        .nth(max_chars)
        .map(|(i, _)| i)
        .unwrap_or(output.len());
    Some(format!(
        "{}\n[Tool output truncated for compaction: omitted {} chars]",
        &output[..cut],
        total - max_chars
    ))
}

/// Serialized size of a message's parts, chars (JSON of each part, summed).
pub(super) fn parts_chars(m: &MessageWithParts) -> u64 {
    m.parts
        .iter()
        .map(|p| {
            serde_json::to_string(p)
                .map(|s| s.chars().count() as u64)
                .unwrap_or(0)
        })
        .sum()
}

/// Estimated tokens of a history: `round(chars / 4)` of the JSON of all its parts, summed
/// over messages (the measure [`compaction_input`] compares with its budget).
pub fn estimate_history_tokens(history: &[MessageWithParts]) -> u64 {
    chars_to_tokens(history.iter().map(parts_chars).sum())
}

/// Whether `m` starts a turn: a user message that is not a compaction request.
pub(super) fn starts_turn(m: &MessageWithParts) -> bool {
    matches!(m.info, Message::User(_)) && !is_compaction_request(m)
}

/// A copy of `history` to hand to the summarizer (OpenCode `process`, §5.5 step 7):
///
/// 1. every completed tool output longer than `max_tool_chars` chars (normally
///    [`TOOL_OUTPUT_MAX_CHARS`]) is truncated by [`truncate_tool_output`]; an output that prune
///    already cleared is replaced by [`CLEARED_TOOL_OUTPUT`], which is what the model sees;
/// 2. while [`estimate_history_tokens`] of the copy exceeds `budget_tokens`, the oldest whole
///    turn is dropped. A turn is a user message that is not a compaction request plus every
///    message after it up to the next such user message. Messages before the first turn (for
///    example a previous compaction request and its summary) form a leading group: it is kept
///    when it holds a completed summary (the earlier context lives only there), otherwise it
///    is dropped first. The newest turn is always kept, even over budget: the summarizer
///    then fails with the provider's context error rather than summarizing nothing.
///
/// Whole messages are dropped, and a tool part carries both its call and its result, so no
/// tool call is ever left without its result. The caller passes only the messages to
/// summarize (normally [`filter_compacted`] minus the pending compaction request).
pub fn compaction_input(
    history: &[MessageWithParts],
    max_tool_chars: usize,
    budget_tokens: u64,
) -> Vec<MessageWithParts> {
    let mut copy: Vec<MessageWithParts> = history.to_vec();
    for m in &mut copy {
        for p in &mut m.parts {
            if let PartKind::Tool {
                state: ToolState::Completed { output, time, .. },
                ..
            } = &mut p.kind
            {
                if time.compacted.is_some() {
                    *output = CLEARED_TOOL_OUTPUT.to_string();
                } else if let Some(short) = truncate_tool_output(output, max_tool_chars) {
                    *output = short;
                }
            }
        }
    }

    // Group boundaries: each group is copy[starts[k]..starts[k+1]].
    let mut starts: Vec<usize> = copy
        .iter()
        .enumerate()
        .filter(|(_, m)| starts_turn(m))
        .map(|(i, _)| i)
        .collect();
    let lead_end = starts.first().copied().unwrap_or(copy.len());
    let keep_lead = copy[..lead_end].iter().any(is_completed_summary);
    if lead_end > 0 && !keep_lead {
        // The leading group is the oldest droppable unit.
        starts.insert(0, 0);
    }
    let sizes: Vec<u64> = copy.iter().map(parts_chars).collect();
    let lead_chars: u64 = if keep_lead {
        sizes[..lead_end].iter().sum()
    } else {
        0
    };
    let mut body_chars: u64 = sizes[if keep_lead { lead_end } else { 0 }..].iter().sum();

    // Drop groups from the oldest while over budget, always keeping the newest group.
    let mut first_kept = 0usize; // index into `starts`
    while chars_to_tokens(lead_chars + body_chars) > budget_tokens && first_kept + 1 < starts.len()
    {
        let (from, to) = (starts[first_kept], starts[first_kept + 1]);
        body_chars -= sizes[from..to].iter().sum::<u64>();
        first_kept += 1;
    }
    if first_kept == 0 {
        return copy;
    }
    let cut_from = if keep_lead { lead_end } else { 0 };
    let cut_to = starts[first_kept];
    copy.drain(cut_from..cut_to);
    copy
}

#[cfg(test)]
#[path = "input_tests.rs"]
mod tests;
