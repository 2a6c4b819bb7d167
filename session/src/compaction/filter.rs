//! The part of a history that is still sent to the model (OpenCode `filterCompacted`,
//! opencode-engine.md §5.6).

use std::collections::HashSet;

use crate::types::{Message, MessageWithParts, PartKind};

/// Whether `m` is a finished, error-free compaction summary (`summary: true`, `finish` set,
/// no `error`): only such summaries complete a compaction (§5.6).
pub fn is_completed_summary(m: &MessageWithParts) -> bool {
    matches!(&m.info, Message::Assistant(a) if a.summary && a.finish.is_some() && a.error.is_none())
}

/// Whether `m` is a user message holding a compaction request part.
pub fn is_compaction_request(m: &MessageWithParts) -> bool {
    matches!(m.info, Message::User(_))
        && m.parts
            .iter()
            .any(|p| matches!(p.kind, PartKind::Compaction { .. }))
}

/// Index of the first message still sent to the model: the newest compaction request (user
/// message with a compaction part) answered by a completed summary
/// ([`is_completed_summary`], matched by `parentID`) that comes after it; 0 when there is none.
/// Source: OpenCode `filterCompacted` (§5.6) without tail retention.
pub fn filter_compacted_start(history: &[MessageWithParts]) -> usize {
    let mut completed: HashSet<&str> = HashSet::new();
    for (i, m) in history.iter().enumerate().rev() {
        match &m.info {
            Message::Assistant(a) if is_completed_summary(m) => {
                completed.insert(a.parent_id.as_str());
            }
            Message::User(u) if completed.contains(u.id.as_str()) && is_compaction_request(m) => {
                return i;
            }
            _ => {}
        }
    }
    0
}

/// The history from the newest completed compaction onward (see [`filter_compacted_start`]);
/// the whole history when there is none. Older messages stay in the store but are not sent.
pub fn filter_compacted(history: &[MessageWithParts]) -> &[MessageWithParts] {
    &history[filter_compacted_start(history)..]
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
