//! Compaction that keeps the recent turns (OpenCode `compaction.ts` `select` and
//! `filterCompacted` with `tail_start_id`, opencode-engine.md §5.5 steps 2–5 and §5.6).
//!
//! A compaction summarizes the *head* of the history and keeps its *tail* — the last
//! `tail_turns` turns, within a token budget — verbatim. The compaction part records where
//! the tail starts (`tail_start_id`), and a request after the compaction is sent as
//! `[compaction request, summary, ...tail..., ...messages after the summary]`
//! ([`compacted_view`]). A later compaction summarizes what that view holds besides the
//! request and its summary, anchored on that summary ([`previous_summary`]).

use troupe_config::CompactionConfig;

use crate::types::{MessageWithParts, PartKind};

use super::input::{parts_chars, starts_turn};
use super::{chars_to_tokens, is_compaction_request, is_completed_summary};

/// Turns kept verbatim when `compaction.tail_turns` is unset. Source: OpenCode
/// `DEFAULT_TAIL_TURNS` (opencode-engine.md §5.1).
pub const DEFAULT_TAIL_TURNS: u32 = 2;
/// Lower bound of the default tail budget, tokens. Source: OpenCode
/// `MIN_PRESERVE_RECENT_TOKENS` (§5.1).
pub const MIN_PRESERVE_RECENT_TOKENS: u64 = 2_000;
/// Upper bound of the default tail budget, tokens. Source: OpenCode
/// `MAX_PRESERVE_RECENT_TOKENS` (§5.1).
pub const MAX_PRESERVE_RECENT_TOKENS: u64 = 8_000;

/// Token budget of the kept tail: `compaction.preserve_recent_tokens`, else a quarter of
/// the usable context clamped to 2,000..=8,000 (OpenCode §5.5 step 5).
pub fn tail_budget(cfg: &CompactionConfig, usable: u64) -> u64 {
    cfg.preserve_recent_tokens.unwrap_or_else(|| {
        (usable / 4).clamp(MIN_PRESERVE_RECENT_TOKENS, MAX_PRESERVE_RECENT_TOKENS)
    })
}

/// Turns to keep: `compaction.tail_turns`, else [`DEFAULT_TAIL_TURNS`].
pub fn tail_turns(cfg: &CompactionConfig) -> u32 {
    cfg.tail_turns.unwrap_or(DEFAULT_TAIL_TURNS)
}

/// Estimated tokens of one message as it is sent: `round(chars / 4)` of the JSON of its
/// parts (the measure `compaction_input` also uses).
fn message_tokens(m: &MessageWithParts) -> u64 {
    chars_to_tokens(parts_chars(m))
}

/// Where the kept tail of `messages` (the ones a compaction would summarize, oldest first)
/// starts: an index into `messages`, or `None` when everything goes to the summary.
///
/// Walking the last `turns` turns newest to oldest, whole turns are kept while their
/// estimated tokens fit `budget`; the first turn that does not fit may still give a suffix
/// that starts at one of its later messages (a split turn). `None` when `turns` is 0, when
/// not even the newest turn's last message fits (one turn alone is too big: a full summary)
/// or when the tail would start at index 0 (nothing left to summarize).
///
/// A tail starts at a user message or an assistant message, never between a tool call and
/// its result (both live in one tool part).
pub fn select_tail(messages: &[MessageWithParts], turns: u32, budget: u64) -> Option<usize> {
    if turns == 0 {
        return None;
    }
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| starts_turn(m))
        .map(|(i, _)| i)
        .collect();
    let first_turn = starts.len().saturating_sub(turns as usize);
    let mut end = messages.len();
    let mut used = 0u64;
    let mut tail: Option<usize> = None;
    for &start in starts[first_turn..].iter().rev() {
        let size: u64 = messages[start..end].iter().map(message_tokens).sum();
        if used + size <= budget {
            used += size;
            tail = Some(start);
            end = start;
            continue;
        }
        // Split: the longest suffix of this turn that still fits.
        let mut from = end;
        let mut extra = 0u64;
        while from > start + 1 {
            let t = message_tokens(&messages[from - 1]);
            if used + extra + t > budget {
                break;
            }
            extra += t;
            from -= 1;
        }
        if from < end {
            tail = Some(from);
        }
        break;
    }
    tail.filter(|&t| t > 0)
}

/// The part of a history still sent to the model, after the newest completed compaction:
/// `prefix` (indices sent first, in order: the compaction request, its summary, then the
/// kept tail) and `body_start` (every message from there on follows). Without a
/// compaction, `prefix` is empty and `body_start` is 0; a compaction that kept no tail has
/// `prefix` empty and `body_start` at its request (the request, its summary and what
/// follows are contiguous). OpenCode `filterCompacted` with tail retention (§5.6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactedView {
    /// Indices sent before the body.
    pub prefix: Vec<usize>,
    /// First index of the body.
    pub body_start: usize,
}

impl CompactedView {
    /// A key that changes whenever the view starts elsewhere (the first index it sends).
    pub fn key(&self) -> usize {
        self.prefix.first().copied().unwrap_or(self.body_start)
    }

    /// Every index of the view, in the order sent.
    pub fn indices(&self, len: usize) -> impl Iterator<Item = usize> + '_ {
        self.prefix.iter().copied().chain(self.body_start..len)
    }
}

/// The compaction part's `tail_start_id`, if any.
fn tail_start_of(m: &MessageWithParts) -> Option<&str> {
    m.parts.iter().find_map(|p| match &p.kind {
        PartKind::Compaction { tail_start_id, .. } => tail_start_id.as_deref(),
        _ => None,
    })
}

/// The view of `history` sent to the model (see [`CompactedView`]).
pub fn compacted_view(history: &[MessageWithParts]) -> CompactedView {
    let request = super::filter_compacted_start(history);
    if request == 0 && !history.first().is_some_and(is_compaction_request) {
        return CompactedView::default();
    }
    let Some(tail_id) = tail_start_of(&history[request]) else {
        return CompactedView {
            prefix: Vec::new(),
            body_start: request,
        };
    };
    let Some(tail) = history[..request]
        .iter()
        .rposition(|m| m.info.id() == tail_id)
    else {
        // The tail's first message is gone (e.g. not in this slice): send no tail.
        return CompactedView {
            prefix: Vec::new(),
            body_start: request,
        };
    };
    // The summary answering the request comes right after it (or after failed attempts).
    let summary = history[request + 1..]
        .iter()
        .position(is_completed_summary)
        .map(|i| request + 1 + i)
        .unwrap_or(request);
    let mut prefix: Vec<usize> = (request..=summary).collect();
    prefix.extend(tail..request);
    CompactedView {
        prefix,
        body_start: summary + 1,
    }
}

/// The messages a new compaction summarizes from `history` (everything before its request,
/// oldest first): what the current view sends except the previous compaction request and
/// its summary (which the anchor carries instead). Indices into `history`.
pub fn to_summarize(history: &[MessageWithParts]) -> Vec<usize> {
    let view = compacted_view(history);
    view.indices(history.len())
        .filter(|&i| !is_compaction_request(&history[i]) && !is_completed_summary(&history[i]))
        .collect()
}

/// The text of the newest completed summary in `history`, the anchor of the next
/// compaction ("update the summary", OpenCode `previousSummary`, §5.5 step 4).
pub fn previous_summary(history: &[MessageWithParts]) -> Option<String> {
    let m = history.iter().rev().find(|m| is_completed_summary(m))?;
    let text: String = m
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("");
    (!text.trim().is_empty()).then_some(text)
}

/// The user message an overflowed request is replayed from (OpenCode §5.5 step 2): the
/// newest user message among `messages` that is not a compaction request and has something
/// before it to summarize. An index into `messages`.
pub fn replay_index(messages: &[MessageWithParts]) -> Option<usize> {
    messages.iter().rposition(starts_turn).filter(|&i| i > 0)
}

#[cfg(test)]
#[path = "tail_tests.rs"]
mod tests;
