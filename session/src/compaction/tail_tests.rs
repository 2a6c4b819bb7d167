use super::*;
use crate::test_support::*;

fn with_tail(id: &str, tail: &str) -> MessageWithParts {
    let mut m = compaction_request(id);
    m.parts = vec![part(
        id,
        PartKind::Compaction {
            auto: true,
            overflow: false,
            tail_start_id: Some(tail.into()),
        },
    )];
    m
}

/// A turn: a user message and an assistant answer with a tool output of `tokens` tokens.
fn turn(n: u32, tokens: u64) -> Vec<MessageWithParts> {
    let (u, a) = (format!("u{n}"), format!("a{n}"));
    vec![user(&u), assistant(&a, &u, vec![tool_tokens(tokens)])]
}

#[test]
fn budget_defaults_to_a_quarter_of_the_usable_context_within_bounds() {
    let mut cfg = CompactionConfig::default();
    assert_eq!(tail_budget(&cfg, 4_000), MIN_PRESERVE_RECENT_TOKENS);
    assert_eq!(tail_budget(&cfg, 20_000), 5_000);
    assert_eq!(tail_budget(&cfg, 200_000), MAX_PRESERVE_RECENT_TOKENS);
    cfg.preserve_recent_tokens = Some(123);
    assert_eq!(tail_budget(&cfg, 200_000), 123);
    assert_eq!(tail_turns(&cfg), 2);
    cfg.tail_turns = Some(5);
    assert_eq!(tail_turns(&cfg), 5);
}

#[test]
fn keeps_the_last_turns_that_fit() {
    let h: Vec<_> = (0..5).flat_map(|n| turn(n, 100)).collect();
    // Two turns of ~110 tokens each fit 1,000: the tail starts at u3.
    assert_eq!(select_tail(&h, 2, 1_000), Some(6));
    assert_eq!(select_tail(&h, 3, 1_000), Some(4));
    // No turns asked: no tail.
    assert_eq!(select_tail(&h, 0, 1_000), None);
    // Everything fits: the tail would start at 0, so no tail (nothing to summarize).
    assert_eq!(select_tail(&h, 9, 100_000), None);
}

#[test]
fn a_turn_too_big_for_the_budget_is_split_or_summarized_whole() {
    // One turn: user, a big tool step, then a small answer.
    let mut h = turn(0, 100);
    h.push(user("u1"));
    h.push(assistant("big", "u1", vec![tool_tokens(5_000)]));
    h.push(assistant("small", "u1", vec![tool_tokens(50)]));
    // The newest turn does not fit whole: its suffix from the small answer does.
    let t = select_tail(&h, 2, 200).expect("a split tail");
    assert_eq!(h[t].info.id(), "small");
    // Not even the last message fits: a full summary.
    assert_eq!(select_tail(&h, 2, 10), None);
}

#[test]
fn view_sends_request_summary_tail_then_the_rest() {
    let mut h: Vec<_> = (0..3).flat_map(|n| turn(n, 10)).collect();
    h.push(with_tail("c1", "u2"));
    h.push(summary("s1", "c1", Some("stop"), false));
    h.push(user("u3"));
    let v = compacted_view(&h);
    let order: Vec<&str> = v
        .indices(h.len())
        .map(|i| h[i].info.id().as_str())
        .collect();
    assert_eq!(order, ["c1", "s1", "u2", "a2", "u3"]);
    // What a next compaction summarizes: the tail and what followed, not the pair.
    let next: Vec<&str> = to_summarize(&h)
        .into_iter()
        .map(|i| h[i].info.id().as_str())
        .collect();
    assert_eq!(next, ["u2", "a2", "u3"]);
    assert_eq!(previous_summary(&h).as_deref(), Some("## Goal\n- x"));

    // Without a tail the request starts a contiguous view.
    let mut plain: Vec<_> = (0..2).flat_map(|n| turn(n, 10)).collect();
    plain.push(compaction_request("c1"));
    plain.push(summary("s1", "c1", Some("stop"), false));
    let v = compacted_view(&plain);
    assert!(v.prefix.is_empty());
    assert_eq!(v.body_start, 4);
    // No compaction at all.
    assert_eq!(compacted_view(&turn(0, 1)), CompactedView::default());
    assert_eq!(previous_summary(&turn(0, 1)), None);
}

#[test]
fn view_ignores_a_tail_whose_first_message_is_gone() {
    let mut h = turn(0, 10);
    h.push(with_tail("c1", "missing"));
    h.push(summary("s1", "c1", Some("stop"), false));
    let v = compacted_view(&h);
    assert!(v.prefix.is_empty());
    assert_eq!(v.body_start, 2);
}

#[test]
fn replay_is_the_newest_turn_with_something_before_it() {
    let h: Vec<_> = (0..3).flat_map(|n| turn(n, 10)).collect();
    assert_eq!(replay_index(&h), Some(4));
    assert_eq!(replay_index(&turn(0, 10)), None, "nothing before it");
}
