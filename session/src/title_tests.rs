use super::*;

#[test]
fn title_cleanup() {
    assert_eq!(
        title_from_response("<think>hmm\nlong</think>\n\n  Fix the   parser \n second").as_deref(),
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
