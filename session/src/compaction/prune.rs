//! Which old tool outputs to clear after a loop (OpenCode `prune`, opencode-engine.md §5.7), and
//! what the model sees in their place (§3.5).

use troupe_config::CompactionConfig;

use crate::types::{Message, MessageWithParts, Millis, Part, PartKind, ToolState};

use super::estimate_tokens;

/// Prune only when more than this many tokens of tool output would be cleared, tokens.
/// Source: OpenCode `PRUNE_MINIMUM` (opencode-engine.md §5.1, §5.7).
pub const PRUNE_MINIMUM: u64 = 20_000;

/// The newest this-many tokens of (older-turn) tool output are never pruned, tokens.
/// Source: OpenCode `PRUNE_PROTECT` (opencode-engine.md §5.1, §5.7).
pub const PRUNE_PROTECT: u64 = 40_000;

/// Tools whose outputs prune never clears (and does not count).
/// Source: OpenCode `PRUNE_PROTECTED_TOOLS` (opencode-engine.md §5.1).
pub const PRUNE_PROTECTED_TOOLS: &[&str] = &["skill"];

/// Number of most recent user turns prune never touches.
/// Source: OpenCode `prune` (`if (turns < 2) continue`, opencode-engine.md §5.7).
pub const PRUNE_PROTECTED_TURNS: usize = 2;

/// What the model sees instead of a pruned (`time.compacted`) tool output.
/// Source: OpenCode `toModelMessages` (opencode-engine.md §3.5).
pub const CLEARED_TOOL_OUTPUT: &str = "[Old tool result content cleared]";

/// Which completed tool outputs to clear (OpenCode `prune`, §5.7). Returns
/// `(message index, part index)` pairs into `history`, oldest first; empty when
/// `cfg.prune` is false or when the outputs found sum to no more than [`PRUNE_MINIMUM`] tokens.
///
/// Walks messages newest→oldest:
/// * messages of the last [`PRUNE_PROTECTED_TURNS`] user turns are skipped;
/// * a summary assistant message (a previous compaction) stops the walk;
/// * within a message, parts are walked newest→oldest; only `completed` tool parts whose
///   tool is not in `protected_tools` count (use [`PRUNE_PROTECTED_TOOLS`] for the default);
/// * an already compacted tool part stops the walk (everything older was handled before);
/// * each output is estimated as [`estimate_tokens`]; while the running total is
///   ≤ [`PRUNE_PROTECT`] the part is kept, past it the part is marked.
///
/// `now` is unused by the selection and kept so callers pass the same clock to
/// [`apply_prune`]; selection does not depend on time.
pub fn prune(
    history: &[MessageWithParts],
    cfg: &CompactionConfig,
    protected_tools: &[&str],
    _now: Millis,
) -> Vec<(usize, usize)> {
    if !cfg.prune {
        return Vec::new();
    }
    let mut turns = 0usize;
    let mut total = 0u64;
    let mut pruned = 0u64;
    let mut marks = Vec::new();
    'walk: for (mi, msg) in history.iter().enumerate().rev() {
        if matches!(msg.info, Message::User(_)) {
            turns += 1;
        }
        if turns < PRUNE_PROTECTED_TURNS {
            continue;
        }
        if let Message::Assistant(a) = &msg.info
            && a.summary
        {
            break;
        }
        for (pi, part) in msg.parts.iter().enumerate().rev() {
            let PartKind::Tool {
                tool,
                state: ToolState::Completed { output, time, .. },
                ..
            } = &part.kind
            else {
                continue;
            };
            if protected_tools.contains(&tool.as_str()) {
                continue;
            }
            if time.compacted.is_some() {
                break 'walk;
            }
            let estimate = estimate_tokens(output);
            total += estimate;
            if total > PRUNE_PROTECT {
                pruned += estimate;
                marks.push((mi, pi));
            }
        }
    }
    if pruned > PRUNE_MINIMUM {
        marks.reverse();
        marks
    } else {
        Vec::new()
    }
}

/// Sets `state.time.compacted = now` on each marked part (from [`prune`]) and returns copies
/// of the parts that changed, in `marks` order, for the caller to persist and publish.
/// Marks that are out of range, not completed tool parts, or already compacted are skipped.
pub fn apply_prune(
    history: &mut [MessageWithParts],
    marks: &[(usize, usize)],
    now: Millis,
) -> Vec<Part> {
    let mut changed = Vec::new();
    for &(mi, pi) in marks {
        let Some(part) = history.get_mut(mi).and_then(|m| m.parts.get_mut(pi)) else {
            continue;
        };
        if let PartKind::Tool {
            state: ToolState::Completed { time, .. },
            ..
        } = &mut part.kind
            && time.compacted.is_none()
        {
            time.compacted = Some(now);
            changed.push(part.clone());
        }
    }
    changed
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
