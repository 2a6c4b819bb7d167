use super::*;
use crate::test_support::*;
use crate::types::ToolTime;
use serde_json::{Value, json};

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
    let changes = vec![
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
    ];
    let h = vec![user("u0"), assistant("a0", "u0", changes)];
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
