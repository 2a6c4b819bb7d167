use super::*;
use serde_json::json;

#[test]
fn terminal_question_answers_pick_numbers_or_take_the_text() {
    let q = |multiple: bool| troupe_actors::question::Question {
        question: "Which?".into(),
        header: String::new(),
        options: ["red", "blue", "green"]
            .iter()
            .map(|l| troupe_actors::question::QuestionOption {
                label: l.to_string(),
                description: String::new(),
            })
            .collect(),
        multiple,
    };
    let s = |v: &[&str]| Some(v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(super::parse_question_answer("2\n", &q(false)), s(&["blue"]));
    assert_eq!(
        super::parse_question_answer(" 1, 3 ", &q(true)),
        s(&["red", "green"])
    );
    // Several numbers for a single-choice question, or a number out of range: the text.
    assert_eq!(super::parse_question_answer("1,3", &q(false)), s(&["1,3"]));
    assert_eq!(super::parse_question_answer("4", &q(false)), s(&["4"]));
    assert_eq!(super::parse_question_answer("0", &q(false)), s(&["0"]));
    assert_eq!(
        super::parse_question_answer("purple please", &q(false)),
        s(&["purple please"])
    );
    assert_eq!(super::parse_question_answer("  \n", &q(false)), None);
}

#[test]
fn permission_question_shows_the_command_as_written() {
    let req = |patterns: &[&str], metadata: serde_json::Value| troupe_tools::PermissionRequest {
        permission: "bash".into(),
        patterns: patterns.iter().map(|s| s.to_string()).collect(),
        always: vec![],
        metadata,
        ..Default::default()
    };
    assert_eq!(
        permission_question(&req(
            &["sleep 3", "echo done"],
            json!({"command": "sleep 3; echo done"})
        )),
        "bash: sleep 3; echo done\n  (checked as: sleep 3, echo done)"
    );
    assert_eq!(
        permission_question(&req(&["ls -la"], json!({"command": "ls -la"}))),
        "bash: ls -la"
    );
    let mut r = req(&["src/*.rs"], json!({}));
    r.permission = "edit".into();
    assert_eq!(permission_question(&r), "edit: src/*.rs");
}
