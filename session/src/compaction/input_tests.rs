use super::*;
use crate::test_support::*;

#[test]
fn truncates_long_tool_outputs_only() {
    let outputs = vec![
        tool_kind("bash", "a".repeat(2_500), None),
        tool_kind("bash", "b".repeat(2_000), None),
        tool_kind("bash", "c".repeat(10), Some(4)),
    ];
    let h = vec![user("u0"), assistant("a0", "u0", outputs)];
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
