use super::*;
use crate::test_support::*;
use crate::types::ToolTime;
use serde_json::json;
use troupe_config::CompactionConfig;

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
