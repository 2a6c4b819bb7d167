//! Pure compaction policies on a session's history (no I/O, no actors).
//!
//! Source: OpenCode `session/overflow.ts` and `session/compaction.ts`, summarised in
//! `opencode-engine.md` §5 (constants §5.1, overflow §5.3, process §5.5, filterCompacted §5.6,
//! prune §5.7) and §3.5 (how compacted / truncated tool outputs are sent).
//!
//! * [`usable_context`] / [`is_overflow`]: when the last step's tokens call for a compaction.
//! * [`prune`] / [`apply_prune`]: which old tool outputs to clear after a loop.
//! * [`filter_compacted`]: the part of the history that is still sent to the model.
//! * [`compaction_input`]: the copy of the history handed to the summarizer.
//! * [`SUMMARY_PROMPT`] / [`CONTINUE_PROMPT`]: the synthetic user texts of a compaction.
//! * [`title_from_response`]: clean a title model's answer.
//! * [`file_changes`]: per-file line counts from `write` / `edit` tool parts.

use std::collections::HashSet;

use serde_json::Value;
use troupe_config::{CompactionConfig, ResolvedModel};

use crate::types::{
    FileDiff, Message, MessageWithParts, Millis, Part, PartKind, SessionSummary, Tokens, ToolState,
};

/// Default token buffer kept free below `limit.input`, tokens; the buffer is
/// `min(COMPACTION_BUFFER, max_output_tokens)` unless `compaction.reserved` is set.
/// Source: OpenCode `COMPACTION_BUFFER` (opencode-engine.md §5.1, §5.3).
pub const COMPACTION_BUFFER: u64 = 20_000;

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

/// Completed tool outputs longer than this are truncated in the summarizer's input, chars.
/// Source: OpenCode `TOOL_OUTPUT_MAX_CHARS` (opencode-engine.md §5.1, §5.5 step 7).
pub const TOOL_OUTPUT_MAX_CHARS: usize = 2_000;

/// Characters per estimated token. Source: OpenCode `Token.CHARS_PER_TOKEN`
/// (opencode-engine.md §5.1).
pub const CHARS_PER_TOKEN: u64 = 4;

/// What the model sees instead of a pruned (`time.compacted`) tool output.
/// Source: OpenCode `toModelMessages` (opencode-engine.md §3.5).
pub const CLEARED_TOOL_OUTPUT: &str = "[Old tool result content cleared]";

/// Longest title [`title_from_response`] returns, chars (longer ones become 97 chars +
/// `...`). Source: OpenCode `ensureTitle`.
pub const TITLE_MAX_CHARS: usize = 100;

/// The user text sent after the history to ask the compaction agent for a summary.
/// The answer must use the Markdown headings `## Goal`, `## Instructions`,
/// `## Discoveries`, `## Accomplished` and `## Relevant files`, in that order.
/// (Structure after OpenCode's `SUMMARY_TEMPLATE`, opencode-engine.md §5.5 step 6; own wording.)
pub const SUMMARY_PROMPT: &str = "\
Write a summary of the conversation above so that work can resume from it alone: the \
earlier messages will no longer be available. Answer with exactly the Markdown sections \
below, in this order, and nothing before or after them.

## Goal
What the user wants to achieve, in one or two sentences.

## Instructions
Every instruction, constraint and preference the user gave that still applies \
(write \"(none)\" if there are none).

## Discoveries
Facts learned while working: how the code is organised, causes of errors, commands that \
work or fail, open questions (write \"(none)\" if there are none).

## Accomplished
What is done, what is in progress, and the concrete next steps in order.

## Relevant files
Each file or directory that matters, one per bullet, with a few words on why.

Use short bullet points. Keep exact file paths, commands, identifiers and error messages. \
Do not mention that this is a summary or that the conversation was shortened.";

/// The synthetic user text added after an automatic compaction so the agent carries on.
/// (Behaviour of OpenCode's auto-continue message, opencode-engine.md §5.5 step 11; own
/// wording.)
pub const CONTINUE_PROMPT: &str = "Pick up the work where it stopped if there are \
next steps left. If it is unclear how to proceed, stop and ask the user instead of guessing.";

/// Estimated tokens of a text: `round(chars / 4)` (OpenCode `Token.estimate`, §5.1).
/// Counts Unicode scalar values, not bytes.
pub fn estimate_tokens(text: &str) -> u64 {
    chars_to_tokens(text.chars().count() as u64)
}

fn chars_to_tokens(chars: u64) -> u64 {
    // Math.round(chars / 4) for non-negative numbers: halves round up.
    (chars + CHARS_PER_TOKEN / 2) / CHARS_PER_TOKEN
}

// ---------------------------------------------------------------------------------------
// 1. Overflow
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 2. Prune
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 3. filterCompacted
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 4. Summarizer input
// ---------------------------------------------------------------------------------------

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
fn parts_chars(m: &MessageWithParts) -> u64 {
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
fn starts_turn(m: &MessageWithParts) -> bool {
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

// ---------------------------------------------------------------------------------------
// 6. Title
// ---------------------------------------------------------------------------------------

/// Remove `<think>…</think>` blocks; an unclosed `<think>` drops the rest of the text.
fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "<think>".len()..];
        match after.find("</think>") {
            Some(end) => rest = &after[end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Strip one matching pair of surrounding quote/backtick/emphasis marks, if present.
fn strip_wrapping(s: &str) -> Option<&str> {
    const PAIRS: &[(&str, &str)] = &[
        ("\"", "\""),
        ("'", "'"),
        ("`", "`"),
        ("**", "**"),
        ("*", "*"),
        ("_", "_"),
        ("\u{201c}", "\u{201d}"),
        ("\u{2018}", "\u{2019}"),
    ];
    PAIRS.iter().find_map(|(open, close)| {
        (s.len() >= open.len() + close.len() && s.starts_with(open) && s.ends_with(close))
            .then(|| &s[open.len()..s.len() - close.len()])
    })
}

/// Strip a leading `Title:` (any case).
fn strip_title_label(s: &str) -> Option<&str> {
    let head = s.get(..6)?;
    head.eq_ignore_ascii_case("title:").then(|| &s[6..])
}

/// A session title from a title model's answer (after OpenCode `ensureTitle`): remove
/// `<think>…</think>` blocks, take the first non-empty line, strip leading Markdown `#`s,
/// surrounding quotes / backticks / emphasis marks and a leading `Title:` (repeatedly, in any
/// order), collapse runs of whitespace to one space, and cut to [`TITLE_MAX_CHARS`] chars
/// (97 chars + `...` when longer). `None` when nothing is left.
pub fn title_from_response(text: &str) -> Option<String> {
    let cleaned = strip_think(text);
    let line = cleaned.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut s = line;
    loop {
        let before = s;
        s = s.trim().trim_start_matches('#').trim();
        if let Some(inner) = strip_wrapping(s) {
            s = inner;
        }
        if let Some(inner) = strip_title_label(s) {
            s = inner;
        }
        if s == before {
            break;
        }
    }
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    if collapsed.chars().count() > TITLE_MAX_CHARS {
        let head: String = collapsed.chars().take(TITLE_MAX_CHARS - 3).collect();
        return Some(format!("{}...", head.trim_end()));
    }
    Some(collapsed)
}

// ---------------------------------------------------------------------------------------
// 7. File changes
// ---------------------------------------------------------------------------------------

/// Tools whose completed parts carry `additions` / `deletions` metadata.
pub const FILE_CHANGE_TOOLS: &[&str] = &["write", "edit"];

fn count(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}

/// Files changed in a history, from completed [`FILE_CHANGE_TOOLS`] parts: the path is
/// `metadata.filepath`, else `metadata.filediff.file`, else `input.filePath` (parts without
/// any are skipped); line counts are `metadata.additions` / `metadata.deletions`, else the
/// same keys of `metadata.filediff`, else 0. Per-file totals are listed in order of first
/// change; `files` is the number of distinct paths. Pruned parts still count (prune clears
/// only the output).
pub fn file_changes(history: &[MessageWithParts]) -> SessionSummary {
    let mut summary = SessionSummary::default();
    for m in history {
        for p in &m.parts {
            let PartKind::Tool {
                tool,
                state:
                    ToolState::Completed {
                        input, metadata, ..
                    },
                ..
            } = &p.kind
            else {
                continue;
            };
            if !FILE_CHANGE_TOOLS.contains(&tool.as_str()) {
                continue;
            }
            let filediff = metadata.get("filediff");
            let path = metadata
                .get("filepath")
                .and_then(Value::as_str)
                .or_else(|| filediff.and_then(|d| d.get("file")).and_then(Value::as_str))
                .or_else(|| input.get("filePath").and_then(Value::as_str))
                .filter(|p| !p.is_empty());
            let Some(path) = path else { continue };
            let pick = |key: &str| {
                metadata
                    .get(key)
                    .or_else(|| filediff.and_then(|d| d.get(key)))
            };
            let (add, del) = (count(pick("additions")), count(pick("deletions")));
            summary.additions += add;
            summary.deletions += del;
            match summary.diffs.iter_mut().find(|d| d.file == path) {
                Some(d) => {
                    d.additions += add;
                    d.deletions += del;
                }
                None => summary.diffs.push(FileDiff {
                    file: path.to_string(),
                    additions: add,
                    deletions: del,
                }),
            }
        }
    }
    summary.files = summary.diffs.len() as u64;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        AssistantMessage, AssistantTime, MessageError, MessagePath, ModelRef, ToolTime,
        UserMessage, UserTime,
    };
    use rust_decimal::Decimal;
    use serde_json::json;
    use troupe_config::{ModelLimits, Protocol};

    // ---- builders -------------------------------------------------------------------

    fn model(context: u64, input: Option<u64>, output: u64) -> ResolvedModel {
        ResolvedModel {
            provider_id: "mock".into(),
            model_id: "m".into(),
            name: "M".into(),
            protocol: Protocol::OpenaiChat,
            base_url: "http://127.0.0.1".into(),
            api_key: None,
            headers: vec![],
            options: Default::default(),
            limits: ModelLimits {
                context,
                input,
                output,
            },
            cost: None,
            tool_call: true,
            reasoning: false,
            temperature: true,
            unknown: false,
        }
    }

    fn part(msg: &str, kind: PartKind) -> Part {
        Part {
            id: format!("prt_{msg}_{}", crate::id::part()),
            session_id: "ses_1".into(),
            message_id: msg.into(),
            kind,
        }
    }

    fn text(msg: &str, t: &str) -> Part {
        part(
            msg,
            PartKind::Text {
                text: t.into(),
                synthetic: false,
                time: None,
            },
        )
    }

    fn user(id: &str) -> MessageWithParts {
        MessageWithParts {
            info: Message::User(UserMessage {
                id: id.into(),
                session_id: "ses_1".into(),
                time: UserTime { created: 1 },
                agent: "build".into(),
                model: ModelRef {
                    provider_id: "mock".into(),
                    model_id: "m".into(),
                },
                system: None,
            }),
            parts: vec![text(id, "do it")],
        }
    }

    fn compaction_request(id: &str) -> MessageWithParts {
        let mut m = user(id);
        m.parts = vec![part(
            id,
            PartKind::Compaction {
                auto: true,
                overflow: false,
            },
        )];
        m
    }

    fn assistant_msg(id: &str, parent: &str) -> AssistantMessage {
        AssistantMessage {
            id: id.into(),
            session_id: "ses_1".into(),
            parent_id: parent.into(),
            time: AssistantTime {
                created: 2,
                completed: Some(3),
            },
            agent: "build".into(),
            model_id: "m".into(),
            provider_id: "mock".into(),
            path: MessagePath::default(),
            summary: false,
            cost: Decimal::ZERO,
            tokens: Tokens::default(),
            finish: Some("stop".into()),
            error: None,
        }
    }

    fn assistant(id: &str, parent: &str, kinds: Vec<PartKind>) -> MessageWithParts {
        MessageWithParts {
            info: Message::Assistant(assistant_msg(id, parent)),
            parts: kinds.into_iter().map(|k| part(id, k)).collect(),
        }
    }

    fn summary(id: &str, parent: &str, finish: Option<&str>, error: bool) -> MessageWithParts {
        let mut a = assistant_msg(id, parent);
        a.summary = true;
        a.finish = finish.map(str::to_string);
        a.error = error.then(|| MessageError::new("APIError", "boom"));
        MessageWithParts {
            info: Message::Assistant(a),
            parts: vec![text(id, "## Goal\n- x")],
        }
    }

    fn tool_kind(tool: &str, output: String, compacted: Option<Millis>) -> PartKind {
        PartKind::Tool {
            call_id: format!("call_{}", crate::id::part()),
            tool: tool.into(),
            state: ToolState::Completed {
                input: json!({}),
                output,
                title: tool.into(),
                metadata: json!({}),
                time: ToolTime {
                    start: 1,
                    end: Some(2),
                    compacted,
                },
            },
        }
    }

    /// A completed `bash` tool part whose output estimates to exactly `tokens` tokens.
    fn tool_tokens(tokens: u64) -> PartKind {
        tool_kind("bash", "x".repeat((tokens * 4) as usize), None)
    }

    fn output_of(p: &Part) -> &str {
        match &p.kind {
            PartKind::Tool {
                state: ToolState::Completed { output, .. },
                ..
            } => output,
            _ => panic!("not a completed tool part"),
        }
    }

    fn compacted_at(p: &Part) -> Option<Millis> {
        match &p.kind {
            PartKind::Tool {
                state: ToolState::Completed { time, .. },
                ..
            } => time.compacted,
            _ => None,
        }
    }

    fn ids(h: &[MessageWithParts]) -> Vec<&str> {
        h.iter().map(|m| m.info.id()).collect()
    }

    /// `[U0, A0(a), U1, A1(b), U2, A2(100k), U3, A3(100k)]`: the last two turns hold huge
    /// outputs that must never count.
    fn four_turns(a: Vec<PartKind>, b: Vec<PartKind>) -> Vec<MessageWithParts> {
        vec![
            user("u0"),
            assistant("a0", "u0", a),
            user("u1"),
            assistant("a1", "u1", b),
            user("u2"),
            assistant("a2", "u2", vec![tool_tokens(100_000)]),
            user("u3"),
            assistant("a3", "u3", vec![tool_tokens(100_000)]),
        ]
    }

    fn prune_cfg() -> CompactionConfig {
        CompactionConfig::default()
    }

    // ---- 1. overflow ------------------------------------------------------------------

    #[test]
    fn estimate_rounds_like_math_round() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 0); // 0.25
        assert_eq!(estimate_tokens("ab"), 1); // 0.5 rounds up
        assert_eq!(estimate_tokens("abcdef"), 2); // 1.5 → 2
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("éééé"), 1); // chars, not bytes
    }

    #[test]
    fn usable_with_input_limit_uses_default_reserve() {
        // max_output = min(64_000, 32_000) = 32_000; reserve = min(20_000, 32_000) = 20_000.
        let m = model(200_000, Some(150_000), 64_000);
        assert_eq!(usable_context(&m, &CompactionConfig::default()), 130_000);
        // Small output limit: reserve = min(20_000, 8_000) = 8_000.
        let m = model(200_000, Some(150_000), 8_000);
        assert_eq!(usable_context(&m, &CompactionConfig::default()), 142_000);
        // Explicit reserve wins.
        let cfg = CompactionConfig {
            reserved: Some(50_000),
            ..Default::default()
        };
        assert_eq!(
            usable_context(&model(200_000, Some(150_000), 64_000), &cfg),
            100_000
        );
    }

    #[test]
    fn usable_without_input_limit_subtracts_max_output() {
        // 128_000 − min(16_384, 32_000)
        assert_eq!(
            usable_context(&model(128_000, None, 16_384), &CompactionConfig::default()),
            111_616
        );
        // Unknown output limit → 32_000.
        assert_eq!(
            usable_context(&model(128_000, None, 0), &CompactionConfig::default()),
            96_000
        );
        // Unknown context → 0.
        assert_eq!(
            usable_context(&model(0, Some(100), 10), &CompactionConfig::default()),
            0
        );
    }

    #[test]
    fn overflow_boundary_with_input_limit() {
        let m = model(200_000, Some(150_000), 64_000); // usable 130_000
        let cfg = CompactionConfig::default();
        let mut t = Tokens {
            input: 100_000,
            output: 10_000,
            reasoning: 5_000,
            cache: crate::types::CacheTokens {
                read: 10_000,
                write: 5_000,
            },
        };
        assert_eq!(t.total(), 130_000);
        assert!(is_overflow(&t, &m, &cfg), "exactly at usable overflows");
        t.input -= 1;
        assert!(!is_overflow(&t, &m, &cfg), "one below does not");
        // Reasoning counts: moving one token back as reasoning overflows again.
        t.reasoning += 1;
        assert!(is_overflow(&t, &m, &cfg));
    }

    #[test]
    fn overflow_boundary_without_input_limit() {
        let m = model(128_000, None, 16_384); // usable 111_616
        let cfg = CompactionConfig::default();
        let at = Tokens {
            input: 111_000,
            output: 616,
            ..Default::default()
        };
        assert!(is_overflow(&at, &m, &cfg));
        let below = Tokens {
            input: 111_000,
            output: 615,
            ..Default::default()
        };
        assert!(!is_overflow(&below, &m, &cfg));
    }

    #[test]
    fn overflow_never_when_auto_off_unknown_context_or_no_room() {
        let at = Tokens {
            input: 130_000,
            ..Default::default()
        };
        let off = CompactionConfig {
            auto: false,
            ..Default::default()
        };
        assert!(!is_overflow(
            &at,
            &model(200_000, Some(150_000), 64_000),
            &off
        ));
        let huge = Tokens {
            input: 10_000_000,
            ..Default::default()
        };
        assert!(!is_overflow(
            &huge,
            &model(0, None, 0),
            &CompactionConfig::default()
        ));
        // input 10_000 − reserve 20_000 saturates to 0 → never (documented deviation).
        let tiny = model(16_000, Some(10_000), 0);
        assert_eq!(usable_context(&tiny, &CompactionConfig::default()), 0);
        assert!(!is_overflow(&huge, &tiny, &CompactionConfig::default()));
    }

    // ---- 2. prune ---------------------------------------------------------------------

    #[test]
    fn prune_exactly_minimum_is_not_enough() {
        // Walk: b = 40_000 (total 40_000 ≤ PROTECT, kept); a = 20_000 (total 60_000, pruned
        // 20_000) → 20_000 is not > PRUNE_MINIMUM → nothing.
        let h = four_turns(vec![tool_tokens(20_000)], vec![tool_tokens(40_000)]);
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9).is_empty());
    }

    #[test]
    fn prune_one_token_over_minimum_marks() {
        let h = four_turns(vec![tool_tokens(20_001)], vec![tool_tokens(40_000)]);
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(1, 0)]
        );
    }

    #[test]
    fn prune_protect_boundary() {
        // b = 40_001 alone passes PROTECT → b pruned (40_001) and a pruned (20_000).
        let h = four_turns(vec![tool_tokens(20_000)], vec![tool_tokens(40_001)]);
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(1, 0), (3, 0)]
        );
    }

    #[test]
    fn prune_walks_parts_newest_first() {
        // a1 = [p0 30_000, p1 30_000]: p1 total 30_000 kept; p0 total 60_000 → pruned 30_000.
        let h = four_turns(vec![], vec![tool_tokens(30_000), tool_tokens(30_000)]);
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(3, 0)]
        );
    }

    #[test]
    fn prune_never_touches_last_two_turns() {
        // Only the protected turns hold output: nothing, despite 200_000 tokens.
        let h = four_turns(vec![], vec![]);
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9).is_empty());
        // The turn just before them counts: 100_000 > PROTECT → pruned 100_000.
        let h = four_turns(vec![], vec![tool_tokens(100_000)]);
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(3, 0)]
        );
        // With only two turns in total, nothing is eligible.
        let h = vec![
            user("u0"),
            assistant("a0", "u0", vec![tool_tokens(100_000)]),
            user("u1"),
            assistant("a1", "u1", vec![tool_tokens(100_000)]),
        ];
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9).is_empty());
    }

    #[test]
    fn prune_skips_protected_tools() {
        let skill = tool_kind("skill", "x".repeat(400_000), None); // 100_000 tokens
        let h = four_turns(vec![skill.clone()], vec![tool_tokens(40_000)]);
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9).is_empty());
        // Without protection the same part is pruned.
        let h = four_turns(vec![skill], vec![tool_tokens(40_000)]);
        assert_eq!(prune(&h, &prune_cfg(), &[], 9), vec![(1, 0)]);
    }

    #[test]
    fn prune_stops_at_compacted_part_and_summary() {
        // a1 = [old compacted, b 60_000]: b pruned (60_000 > PROTECT, pruned 60_000), then the
        // compacted part stops the walk before a0's 100_000.
        let h = four_turns(
            vec![tool_tokens(100_000)],
            vec![
                tool_kind("bash", "y".repeat(40), Some(5)),
                tool_tokens(60_000),
            ],
        );
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(3, 1)]
        );

        // A summary assistant stops the walk too.
        let h = vec![
            user("u0"),
            assistant("a0", "u0", vec![tool_tokens(100_000)]),
            compaction_request("uc"),
            summary("s", "uc", Some("stop"), false),
            user("u1"),
            assistant("a1", "u1", vec![tool_tokens(60_000)]),
            user("u2"),
            assistant("a2", "u2", vec![]),
            user("u3"),
            assistant("a3", "u3", vec![]),
        ];
        assert_eq!(
            prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9),
            vec![(5, 0)]
        );
    }

    #[test]
    fn prune_ignores_non_completed_and_respects_cfg() {
        let running = PartKind::Tool {
            call_id: "c".into(),
            tool: "bash".into(),
            state: ToolState::Error {
                input: json!({}),
                error: "e".repeat(400_000),
                metadata: None,
                time: ToolTime::default(),
            },
        };
        let h = four_turns(vec![running], vec![tool_tokens(40_000)]);
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 9).is_empty());
        let h = four_turns(vec![tool_tokens(100_000)], vec![]);
        let off = CompactionConfig {
            prune: false,
            ..Default::default()
        };
        assert!(prune(&h, &off, PRUNE_PROTECTED_TOOLS, 9).is_empty());
    }

    #[test]
    fn apply_prune_marks_once() {
        let mut h = four_turns(vec![tool_tokens(20_000)], vec![tool_tokens(40_001)]);
        let marks = prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 77);
        let mut with_junk = marks.clone();
        with_junk.extend([(99, 0), (0, 5), (0, 0)]); // out of range, out of range, text part
        let changed = apply_prune(&mut h, &with_junk, 77);
        assert_eq!(changed.len(), 2);
        assert_eq!(changed[0].id, h[1].parts[0].id);
        assert!(changed.iter().all(|p| compacted_at(p) == Some(77)));
        assert_eq!(compacted_at(&h[1].parts[0]), Some(77));
        assert_eq!(compacted_at(&h[3].parts[0]), Some(77));
        assert_eq!(compacted_at(&h[5].parts[0]), None);
        // Output is kept in the store; only the flag changes.
        assert_eq!(output_of(&h[1].parts[0]).len(), 80_000);
        // Second application changes nothing, and a fresh prune stops at the compacted part.
        assert!(apply_prune(&mut h, &marks, 88).is_empty());
        assert!(prune(&h, &prune_cfg(), PRUNE_PROTECTED_TOOLS, 99).is_empty());
    }

    // ---- 3. filterCompacted ------------------------------------------------------------

    #[test]
    fn filter_compacted_starts_at_newest_completed_compaction() {
        let plain = vec![user("u0"), assistant("a0", "u0", vec![])];
        assert_eq!(filter_compacted(&plain).len(), 2);
        assert!(filter_compacted(&[]).is_empty());

        let h = vec![
            user("u0"),
            assistant("a0", "u0", vec![]),
            compaction_request("c1"),
            summary("s1", "c1", Some("stop"), false),
            user("u1"),
            assistant("a1", "u1", vec![]),
            compaction_request("c2"),
            summary("s2", "c2", Some("stop"), false),
            user("u2"),
        ];
        assert_eq!(ids(filter_compacted(&h)), vec!["c2", "s2", "u2"]);
        assert_eq!(filter_compacted_start(&h), 6);
    }

    #[test]
    fn filter_compacted_ignores_failed_or_unfinished_summaries() {
        let base = vec![
            user("u0"),
            compaction_request("c1"),
            summary("s1", "c1", Some("stop"), false),
            user("u1"),
            compaction_request("c2"),
        ];
        for bad in [
            summary("s2", "c2", Some("error"), true),
            summary("s2", "c2", None, false),
        ] {
            let mut h = base.clone();
            h.push(bad);
            h.push(user("u2"));
            assert_eq!(
                filter_compacted_start(&h),
                1,
                "falls back to the earlier one"
            );
        }
        // Only a failed one: everything is sent.
        let h = vec![
            user("u0"),
            compaction_request("c1"),
            summary("s1", "c1", Some("stop"), true),
        ];
        assert_eq!(filter_compacted_start(&h), 0);
        // A summary pointing at a plain user message does not count as a compaction.
        let h = vec![user("u0"), summary("s", "u0", Some("stop"), false)];
        assert_eq!(filter_compacted_start(&h), 0);
    }

    // ---- 4. summarizer input -----------------------------------------------------------

    #[test]
    fn truncates_long_tool_outputs_only() {
        let h = vec![
            user("u0"),
            assistant(
                "a0",
                "u0",
                vec![
                    tool_kind("bash", "a".repeat(2_500), None),
                    tool_kind("bash", "b".repeat(2_000), None),
                    tool_kind("bash", "c".repeat(10), Some(4)),
                ],
            ),
        ];
        let out = compaction_input(&h, TOOL_OUTPUT_MAX_CHARS, u64::MAX);
        assert_eq!(out.len(), 2);
        assert_eq!(
            output_of(&out[1].parts[0]),
            format!(
                "{}\n[Tool output truncated for compaction: omitted 500 chars]",
                "a".repeat(2_000)
            )
        );
        assert_eq!(output_of(&out[1].parts[1]), "b".repeat(2_000));
        assert_eq!(output_of(&out[1].parts[2]), CLEARED_TOOL_OUTPUT);
        // The source is untouched.
        assert_eq!(output_of(&h[1].parts[0]).len(), 2_500);
        // Multi-byte text is cut on char boundaries.
        assert_eq!(
            truncate_tool_output("ééé", 2).as_deref(),
            Some("éé\n[Tool output truncated for compaction: omitted 1 chars]")
        );
    }

    fn three_turns() -> Vec<MessageWithParts> {
        vec![
            user("u0"),
            assistant("a0", "u0", vec![tool_tokens(300)]),
            user("u1"),
            assistant("a1", "u1", vec![tool_tokens(200)]),
            assistant("a1b", "u1", vec![tool_tokens(10)]),
            user("u2"),
            assistant("a2", "u2", vec![tool_tokens(100)]),
        ]
    }

    #[test]
    fn drops_oldest_whole_turns_to_fit_budget() {
        let h = three_turns();
        let full = estimate_history_tokens(&h);
        let last_two = estimate_history_tokens(&h[2..]);
        let last_one = estimate_history_tokens(&h[5..]);
        assert!(full > last_two && last_two > last_one);

        assert_eq!(
            compaction_input(&h, 2_000, full).len(),
            7,
            "at budget: no drop"
        );
        assert_eq!(
            ids(&compaction_input(&h, 2_000, full - 1)),
            vec!["u1", "a1", "a1b", "u2", "a2"]
        );
        assert_eq!(
            ids(&compaction_input(&h, 2_000, last_two)),
            vec!["u1", "a1", "a1b", "u2", "a2"]
        );
        assert_eq!(
            ids(&compaction_input(&h, 2_000, last_two - 1)),
            vec!["u2", "a2"]
        );
        // Newest turn always kept, even over budget.
        assert_eq!(ids(&compaction_input(&h, 2_000, 0)), vec!["u2", "a2"]);
        // Kept messages keep every part: no tool call loses its result.
        let out = compaction_input(&h, 2_000, last_two - 1);
        assert_eq!(out[1], h[6]);
    }

    #[test]
    fn budget_is_measured_after_truncation() {
        // 100_000-char output truncates to ~2_055 chars, so the whole history fits 1_000.
        let h = vec![
            user("u0"),
            assistant(
                "a0",
                "u0",
                vec![tool_kind("bash", "z".repeat(100_000), None)],
            ),
            user("u1"),
        ];
        assert_eq!(compaction_input(&h, 2_000, 1_000).len(), 3);
    }

    #[test]
    fn leading_summary_is_kept_and_orphans_are_dropped_first() {
        let mut h = vec![
            compaction_request("c1"),
            summary("s1", "c1", Some("stop"), false),
        ];
        h.extend(three_turns());
        assert_eq!(
            ids(&compaction_input(&h, 2_000, 0)),
            vec!["c1", "s1", "u2", "a2"]
        );

        // A leading assistant with no user message and no summary goes first.
        let mut h = vec![assistant("orphan", "gone", vec![tool_tokens(50)])];
        h.extend(three_turns());
        let budget = estimate_history_tokens(&h[1..]);
        assert_eq!(compaction_input(&h, 2_000, budget).len(), 7);
        assert_eq!(compaction_input(&h, 2_000, budget)[0].info.id(), "u0");
        assert_eq!(ids(&compaction_input(&h, 2_000, 0)), vec!["u2", "a2"]);
        assert!(compaction_input(&[], 2_000, 0).is_empty());
    }

    // ---- 5. prompts --------------------------------------------------------------------

    #[test]
    fn summary_prompt_has_sections_in_order() {
        let heads = [
            "## Goal",
            "## Instructions",
            "## Discoveries",
            "## Accomplished",
            "## Relevant files",
        ];
        let pos: Vec<usize> = heads
            .iter()
            .map(|h| {
                SUMMARY_PROMPT
                    .lines()
                    .position(|l| l == *h)
                    .unwrap_or_else(|| panic!("missing heading {h}"))
            })
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
        assert!(!CONTINUE_PROMPT.is_empty());
    }

    // ---- 6. title ----------------------------------------------------------------------

    #[test]
    fn title_cleanup() {
        assert_eq!(
            title_from_response("<think>hmm\nlong</think>\n\n  Fix the   parser \n second")
                .as_deref(),
            Some("Fix the parser")
        );
        assert_eq!(
            title_from_response("\"Add retry logic\"").as_deref(),
            Some("Add retry logic")
        );
        assert_eq!(
            title_from_response("Title: `Refactor store`").as_deref(),
            Some("Refactor store")
        );
        assert_eq!(
            title_from_response("\"title: Debug CI\"").as_deref(),
            Some("Debug CI")
        );
        assert_eq!(
            title_from_response("# **Plan tests**").as_deref(),
            Some("Plan tests")
        );
        assert_eq!(
            title_from_response("Don't panic").as_deref(),
            Some("Don't panic")
        );
        assert_eq!(
            title_from_response("a<think>x</think>b<think>y</think>c").as_deref(),
            Some("abc")
        );
        assert_eq!(
            title_from_response("ok <think>never closed\nTitle"),
            Some("ok".into())
        );
        assert_eq!(title_from_response(""), None);
        assert_eq!(
            title_from_response("<think>only thoughts</think>\n \n"),
            None
        );
        assert_eq!(title_from_response("\"\""), None);
        assert_eq!(title_from_response("Title:"), None);
    }

    #[test]
    fn title_is_cut_at_100_chars() {
        let exactly = "w".repeat(100);
        assert_eq!(title_from_response(&exactly), Some(exactly.clone()));
        let long = "w".repeat(101);
        let t = title_from_response(&long).unwrap_or_default();
        assert_eq!(t.chars().count(), 100);
        assert_eq!(t, format!("{}...", "w".repeat(97)));
        let long_multi = "é".repeat(150);
        assert_eq!(
            title_from_response(&long_multi),
            Some(format!("{}...", "é".repeat(97)))
        );
    }

    // ---- 7. file changes ---------------------------------------------------------------

    fn change(tool: &str, input: Value, metadata: Value) -> PartKind {
        PartKind::Tool {
            call_id: "c".into(),
            tool: tool.into(),
            state: ToolState::Completed {
                input,
                output: "ok".into(),
                title: tool.into(),
                metadata,
                time: ToolTime::default(),
            },
        }
    }

    #[test]
    fn file_changes_sums_per_file() {
        let h = vec![
            user("u0"),
            assistant(
                "a0",
                "u0",
                vec![
                    change(
                        "write",
                        json!({"filePath": "/p/a.rs"}),
                        json!({"filepath": "a.rs", "additions": 10, "deletions": 0}),
                    ),
                    change(
                        "edit",
                        json!({}),
                        json!({"filepath": "a.rs", "additions": 2, "deletions": 3}),
                    ),
                    change(
                        "edit",
                        json!({"filePath": "b.rs"}),
                        json!({"additions": 1, "deletions": 1}),
                    ),
                    change(
                        "edit",
                        json!({}),
                        json!({"filediff": {"file": "c.rs", "additions": 4, "deletions": 5}}),
                    ),
                    change("bash", json!({"filePath": "x"}), json!({"additions": 99})),
                    change("edit", json!({}), json!({"additions": 7})), // no path: skipped
                    PartKind::Tool {
                        call_id: "e".into(),
                        tool: "edit".into(),
                        state: ToolState::Error {
                            input: json!({"filePath": "d.rs"}),
                            error: "no".into(),
                            metadata: Some(json!({"additions": 3})),
                            time: ToolTime::default(),
                        },
                    },
                ],
            ),
        ];
        let s = file_changes(&h);
        assert_eq!(s.additions, 17);
        assert_eq!(s.deletions, 9);
        assert_eq!(s.files, 3);
        assert_eq!(
            s.diffs,
            vec![
                FileDiff {
                    file: "a.rs".into(),
                    additions: 12,
                    deletions: 3
                },
                FileDiff {
                    file: "b.rs".into(),
                    additions: 1,
                    deletions: 1
                },
                FileDiff {
                    file: "c.rs".into(),
                    additions: 4,
                    deletions: 5
                },
            ]
        );
        assert_eq!(file_changes(&[]), SessionSummary::default());
    }
}
