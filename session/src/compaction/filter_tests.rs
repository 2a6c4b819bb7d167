use super::*;
use crate::test_support::*;

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
