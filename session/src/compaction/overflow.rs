//! When the last step's tokens call for an automatic compaction (OpenCode `session/overflow.ts`,
//! opencode-engine.md §5.3).

use troupe_config::{CompactionConfig, ResolvedModel};

use crate::types::Tokens;

/// Default token buffer kept free below `limit.input`, tokens; the buffer is
/// `min(COMPACTION_BUFFER, max_output_tokens)` unless `compaction.reserved` is set.
/// Source: OpenCode `COMPACTION_BUFFER` (opencode-engine.md §5.1, §5.3).
pub const COMPACTION_BUFFER: u64 = 20_000;

/// Tokens the history of one request may use before compaction is due (OpenCode
/// `overflow.ts`, §5.3):
///
/// * `limits.context == 0` (unknown): 0;
/// * with `limits.input`: `input − reserved`, where `reserved = cfg.reserved` or
///   `min(COMPACTION_BUFFER, model.max_output_tokens())`;
/// * without: `context − model.max_output_tokens()`.
///
/// Saturates at 0. In tokens.
pub fn usable_context(model: &ResolvedModel, cfg: &CompactionConfig) -> u64 {
    let limits = &model.limits;
    if limits.context == 0 {
        return 0;
    }
    match limits.input {
        Some(input) => {
            let reserved = cfg
                .reserved
                .unwrap_or_else(|| COMPACTION_BUFFER.min(model.max_output_tokens()));
            input.saturating_sub(reserved)
        }
        None => limits.context.saturating_sub(model.max_output_tokens()),
    }
}

/// Whether the last step's `tokens` call for an automatic compaction (OpenCode
/// `isOverflow`, §5.3): `tokens.total() >= usable_context(model, cfg)`.
///
/// `tokens` are the exclusive counts of the last step (one assistant message);
/// the total is input + output + **reasoning** + cache read + cache write. Reasoning is
/// counted because OpenCode compares the provider's `totalTokens`, which includes it
/// (reasoning is part of the output a request produces).
///
/// Never true when `cfg.auto` is false, when the context limit is unknown (0), or when the
/// usable context is 0 (the reserve eats the whole input limit: compaction could not bring
/// the history under it and would only repeat every step; the provider's own
/// context-overflow error handles that case). The last guard is a deliberate difference:
/// OpenCode would report overflow for every step there.
pub fn is_overflow(tokens: &Tokens, model: &ResolvedModel, cfg: &CompactionConfig) -> bool {
    if !cfg.auto || model.limits.context == 0 {
        return false;
    }
    let usable = usable_context(model, cfg);
    usable > 0 && tokens.total() >= usable
}

#[cfg(test)]
#[path = "overflow_tests.rs"]
mod tests;
