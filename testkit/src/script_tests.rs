use super::*;

#[test]
fn parses_full_example() {
    let s = Script::from_json(
        r#"{"conversations":[
              {"match":"fix","match_system":"coder","exhausted":"error","steps":[
                {"text":"hi","reasoning":"think","tool_calls":[
                   {"name":"bash","arguments":{"command":"ls"}},
                   {"id":"x","name":"read","arguments":"{bad"}],
                 "finish_reason":"length","usage":{"prompt_tokens":5},
                 "chunk_size":2,"delay_ms":1,"first_byte_delay_ms":3,
                 "faults":[{"status":429,"headers":{"retry-after":"2"},"body":"slow"},
                           {"cut_after":1},{"malformed_after":2},
                           {"error_event_after":3,"error":{"message":"m","type":"server_error"}},
                           {"hang_after":4}]}]},
              {"steps":[{"text":"default"}]}]}"#,
    )
    .expect("valid script");
    let c = &s.conversations[0];
    assert_eq!(c.exhausted, Exhausted::Error);
    let st = &c.steps[0];
    assert_eq!(st.tool_calls[0].arguments_string(), r#"{"command":"ls"}"#);
    assert_eq!(st.tool_calls[1].arguments_string(), "{bad");
    assert_eq!(st.faults.len(), 5);
    assert_eq!(st.faults[1], Fault::CutAfter(1));
    assert_eq!(st.faults[4], Fault::HangAfter(4));
    assert!(
        matches!(&st.faults[0], Fault::Http { status: 429, headers, .. } if headers["retry-after"] == "2")
    );
    // Round trip.
    let again = Script::from_json(&s.to_json()).expect("round trip");
    assert_eq!(again, s);
}

#[test]
fn rejects_bad_input_with_clear_errors() {
    let e = Script::from_json(r#"{"conversations":[{"steps":[{"txt":"x"}]}]}"#)
        .expect_err("unknown field");
    assert!(e.to_string().contains("txt"), "{e}");
    let e = Script::from_json(r#"{"conversations":[{"steps":[{"faults":[{"cut":1}]}]}]}"#)
        .expect_err("bad fault");
    assert!(e.to_string().contains("unrecognised fault"), "{e}");
    let e = Script::from_json(r#"{"conversations":[{"steps":[{"chunk_size":0}]}]}"#)
        .expect_err("chunk 0");
    assert!(e.to_string().contains("chunk_size"), "{e}");
    let e = Script::from_json(r#"{"conversations":[{"steps":[{"faults":[{"status":200}]}]}]}"#)
        .expect_err("status 200");
    assert!(e.to_string().contains("400..=599"), "{e}");
    let e =
        Script::from_json(r#"{"conversations":[{"steps":[{"faults":[{"cut_after":1,"x":2}]}]}]}"#)
            .expect_err("extra field");
    assert!(e.to_string().contains("unknown fault field `x`"), "{e}");
}

#[test]
fn selection_prefers_matchers_then_default() {
    let s = Script::new(vec![
        Conversation::new(vec![]),
        Conversation::new(vec![]).matching("alpha"),
        Conversation::new(vec![])
            .matching("beta")
            .matching_system("SYS"),
    ]);
    assert_eq!(s.select("say alpha", ""), Some(1));
    assert_eq!(s.select("beta", "no"), Some(0));
    assert_eq!(s.select("beta", "a SYS b"), Some(2));
    let only = Script::new(vec![Conversation::new(vec![]).matching("x")]);
    assert_eq!(only.select("y", ""), None);
}

#[test]
fn finish_defaults() {
    assert_eq!(Step::text("a").effective_finish_reason(), "stop");
    assert_eq!(
        Step::tool("bash", json!({})).effective_finish_reason(),
        "tool_calls"
    );
    assert_eq!(
        Step::text("a")
            .with_finish("length")
            .effective_finish_reason(),
        "length"
    );
}

#[test]
fn stall_faults_and_framing_options_round_trip() {
    let json = r#"{"conversations":[{"steps":[{"text":"x","line_ending":"cr","bom":true,
            "data_keepalive":true,"keep_open":true,
            "faults":[{"stall":"headers"},{"stall":"body"},{"stall":"error_body"},{"stall":"reuse"}]}]}]}"#;
    let script = Script::from_json(json).expect("parse");
    let st = &script.conversations[0].steps[0];
    assert_eq!(st.line_ending, Some(LineEnding::Cr));
    assert!(st.bom && st.data_keepalive && st.keep_open);
    assert_eq!(
        st.faults,
        vec![
            Fault::stall(Stall::Headers),
            Fault::stall(Stall::Body),
            Fault::stall(Stall::ErrorBody),
            Fault::stall(Stall::Reuse)
        ]
    );
    let again = Script::from_json(&script.to_json()).expect("round trip");
    assert_eq!(again, script);
    let err =
        Script::from_json(r#"{"conversations":[{"steps":[{"faults":[{"stall":"later"}]}]}]}"#)
            .expect_err("bad stall");
    assert!(err.to_string().contains("\"error_body\""), "{err}");
}
