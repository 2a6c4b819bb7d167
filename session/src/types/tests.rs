use super::*;
use crate::test_support::user_message;

#[test]
fn part_json_shape_matches_opencode() {
    let p = Part::new(
        &"ses_a".into(),
        &"msg_b".into(),
        PartKind::Tool {
            call_id: "call_1".into(),
            tool: "bash".into(),
            state: ToolState::Completed {
                input: serde_json::json!({"command": "ls"}),
                output: "x".into(),
                title: "ls".into(),
                metadata: serde_json::json!({"exit": 0}),
                time: ToolTime {
                    start: 1,
                    end: Some(2),
                    compacted: None,
                },
            },
        },
    );
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["type"], "tool");
    assert_eq!(v["callID"], "call_1");
    assert_eq!(v["sessionID"], "ses_a");
    assert_eq!(v["state"]["status"], "completed");
    let back: Part = serde_json::from_value(v).unwrap();
    assert_eq!(back, p);
}

#[test]
fn message_roundtrip() {
    let m = user_message("ses_1", "msg_1".to_string(), 5);
    let s = serde_json::to_string(&m).unwrap();
    assert!(s.contains("\"role\":\"user\""));
    assert_eq!(serde_json::from_str::<Message>(&s).unwrap(), m);
}

#[test]
fn error_names_serialize_as_opencode_names_and_unknown_ones_survive() {
    let known = [
        (MessageErrorName::Api, "APIError"),
        (MessageErrorName::ProviderAuth, "ProviderAuthError"),
        (MessageErrorName::ContextOverflow, "ContextOverflowError"),
        (MessageErrorName::MessageAborted, "MessageAbortedError"),
        (
            MessageErrorName::MessageOutputLength,
            "MessageOutputLengthError",
        ),
        (MessageErrorName::StructuredOutput, "StructuredOutputError"),
        (MessageErrorName::DoomLoop, "DoomLoopError"),
        (MessageErrorName::EmptyToolCalls, "EmptyToolCallsError"),
        (MessageErrorName::MaxSteps, "MaxStepsError"),
        (MessageErrorName::SessionBusy, "SessionBusyError"),
        (MessageErrorName::Store, "StoreError"),
        (MessageErrorName::Unknown, "UnknownError"),
    ];
    for (name, text) in known {
        let e = MessageError::new(name.clone(), "m");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["name"], text);
        assert_eq!(
            serde_json::from_value::<MessageError>(json).unwrap().name,
            name
        );
        assert_eq!(MessageErrorName::from(text.to_string()), name);
        assert_eq!(name.to_string(), text);
    }
    // A name from a newer build or another writer is kept verbatim, never guessed.
    let raw = serde_json::json!({"name": "QuotaExceededError", "data": {"message": "later"}});
    let e: MessageError = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(e.name, MessageErrorName::Other("QuotaExceededError".into()));
    assert_eq!(serde_json::to_value(&e).unwrap(), raw);
    assert_eq!(e.message(), "later");
}

#[test]
fn a_session_ruleset_round_trips_typed() {
    let mut s = Session::new("/tmp", Some("ses_parent".into()));
    let mut rules = troupe_agents::Ruleset::new();
    rules.push("bash", "*", troupe_agents::Action::Deny);
    s.permission = Some(rules.clone().into());
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        json["permission"],
        serde_json::json!([{"permission": "bash", "pattern": "*", "action": "deny"}])
    );
    let back: Session = serde_json::from_value(json).unwrap();
    assert_eq!(back.ruleset().unwrap(), rules);
    assert_eq!(
        Session::new("/tmp", None).ruleset().unwrap(),
        Default::default()
    );
}

#[test]
fn a_stored_permission_that_does_not_decode_loads_but_fails_every_use_and_is_kept() {
    let mut json = serde_json::to_value(Session::new("/tmp", Some("ses_p".into()))).unwrap();
    json["permission"] = serde_json::json!({"bash": "deny"});
    // The session itself still loads (it must stay listable and deletable)…
    let s: Session = serde_json::from_value(json).unwrap();
    // …but its rules are never read as "none".
    let err = s
        .ruleset()
        .expect_err("an unreadable ruleset must not widen to no rules");
    assert_eq!(err.session_id, s.id);
    assert!(err.to_string().contains("does not decode"), "{err}");
    // Writing it back stores the value unchanged.
    assert_eq!(
        serde_json::to_value(&s).unwrap()["permission"],
        serde_json::json!({"bash": "deny"})
    );
}
