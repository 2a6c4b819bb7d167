//! Pure compaction policies on a session's history (no I/O, no actors).
//!
//! Source: OpenCode `session/overflow.ts` and `session/compaction.ts`, summarised in
//! `opencode-engine.md` §5 (constants §5.1, overflow §5.3, process §5.5, filterCompacted §5.6,
//! prune §5.7) and §3.5 (how compacted / truncated tool outputs are sent).
//!
//! * [`usable_context`] / [`is_overflow`] (`overflow.rs`): when the last step's tokens call for
//!   a compaction.
//! * [`prune`] / [`apply_prune`] (`prune.rs`): which old tool outputs to clear after a loop.
//! * [`filter_compacted`] (`filter.rs`): the part of the history that is still sent to the model.
//! * [`compaction_input`] (`input.rs`): the copy of the history handed to the summarizer.
//! * [`select_tail`] / [`compacted_view`] (`tail.rs`): the recent turns a compaction keeps
//!   verbatim, and the history a request sends after it.
//!
//! The texts a compaction sends (the summary request and the continue message) live with the
//! other prompts in `troupe-agents` (`agents/prompts/compaction-*.txt`).

mod filter;
mod input;
mod overflow;
mod prune;
mod tail;

pub use filter::{
    filter_compacted, filter_compacted_start, is_compaction_request, is_completed_summary,
};
pub use input::{
    TOOL_OUTPUT_MAX_CHARS, compaction_input, estimate_history_tokens, truncate_tool_output,
};
pub use overflow::{COMPACTION_BUFFER, is_overflow, usable_context};
pub use prune::{
    CLEARED_TOOL_OUTPUT, PRUNE_MINIMUM, PRUNE_PROTECT, PRUNE_PROTECTED_TOOLS,
    PRUNE_PROTECTED_TURNS, apply_prune, prune,
};
pub use tail::{
    CompactedView, DEFAULT_TAIL_TURNS, MAX_PRESERVE_RECENT_TOKENS, MIN_PRESERVE_RECENT_TOKENS,
    compacted_view, previous_summary, replay_index, select_tail, tail_budget, tail_turns,
    to_summarize,
};

/// Characters per estimated token. Source: OpenCode `Token.CHARS_PER_TOKEN`
/// (opencode-engine.md §5.1).
pub const CHARS_PER_TOKEN: u64 = 4;

/// Estimated tokens of a text: `round(chars / 4)` (OpenCode `Token.estimate`, §5.1).
/// Counts Unicode scalar values, not bytes.
pub fn estimate_tokens(text: &str) -> u64 {
    chars_to_tokens(text.chars().count() as u64)
}

fn chars_to_tokens(chars: u64) -> u64 {
    // Math.round(chars / 4) for non-negative numbers: halves round up.
    (chars + CHARS_PER_TOKEN / 2) / CHARS_PER_TOKEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_rounds_like_math_round() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 0); // 0.25
        assert_eq!(estimate_tokens("ab"), 1); // 0.5 rounds up
        assert_eq!(estimate_tokens("abcdef"), 2); // 1.5 → 2
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("éééé"), 1); // chars, not bytes
    }
}
