//! Unit tests of the timeline (`timeline.rs`): rows from hand-built histories with known
//! times, and `load` against a real SQLite store.

use std::collections::HashMap;

use rust_decimal::Decimal;
use serde_json::{Value, json};

use super::*;
use crate::test_support::assistant_msg;
use crate::types::{
    AssistantMessage, AssistantTime, MessageError, RequestTime, SessionTime, Tokens, ToolTime,
};

const NOW: Millis = 10_000;

fn session(id: &str, parent: Option<&str>, title: &str) -> Session {
    let mut s = Session::new("/p", parent.map(SessionId::from));
    s.id = id.into();
    s.title = title.into();
    s.time = SessionTime {
        created: 100,
        updated: 100,
        compacting: None,
    };
    s
}

fn part(sid: &str, mid: &str, n: usize, kind: PartKind) -> Part {
    Part {
        id: format!("prt_{mid}_{n:03}").into(),
        session_id: sid.into(),
        message_id: mid.into(),
        kind,
    }
}

fn user(sid: &str, id: &str, created: Millis) -> MessageWithParts {
    MessageWithParts {
        info: crate::test_support::user_message(sid, id, created),
        parts: vec![],
    }
}

/// An assistant step `[created, completed]` whose parts are built by `parts(sid, mid)`; the
/// step-start part (with `request`) comes first and a step-finish part last when `finished`.
fn step(
    sid: &str,
    id: &str,
    created: Millis,
    completed: Option<Millis>,
    request: Option<RequestTime>,
    finished: bool,
    tools: Vec<(&str, ToolState)>,
) -> MessageWithParts {
    let mut parts = vec![part(
        sid,
        id,
        0,
        PartKind::StepStart {
            snapshot: None,
            request,
        },
    )];
    for (i, (tool, state)) in tools.into_iter().enumerate() {
        parts.push(part(
            sid,
            id,
            i + 1,
            PartKind::Tool {
                call_id: format!("call_{id}_{i}"),
                tool: tool.into(),
                state,
            },
        ));
    }
    if finished {
        parts.push(part(
            sid,
            id,
            99,
            PartKind::StepFinish {
                reason: "stop".into(),
                snapshot: None,
                cost: Decimal::ZERO,
                tokens: Tokens::default(),
            },
        ));
    }
    MessageWithParts {
        info: Message::Assistant(AssistantMessage {
            session_id: sid.into(),
            time: AssistantTime { created, completed },
            finish: finished.then(|| "stop".to_string()),
            ..assistant_msg(id, "msg_u")
        }),
        parts,
    }
}

/// A finished step `[created, completed]` (`span`) whose request ran `[start, end]`
/// (`request`, no first-token time) and which called `tools`: [`step`] for the common case.
fn ok_step(
    sid: &str,
    id: &str,
    span: (Millis, Option<Millis>),
    request: (Millis, Millis),
    tools: Vec<(&str, ToolState)>,
) -> MessageWithParts {
    let (created, completed) = span;
    let request = req(request.0, None, request.1);
    step(sid, id, created, completed, request, true, tools)
}

/// The timeline of session `s` with history `msgs` and no child sessions, at [`NOW`].
fn build_alone(s: &Session, msgs: &[MessageWithParts]) -> Timeline {
    build(s, msgs, &HashMap::new(), NOW)
}

fn req(start: Millis, first: Option<Millis>, end: Millis) -> Option<RequestTime> {
    Some(RequestTime {
        start,
        first_token: first,
        end,
        attempts: 1,
    })
}

fn done(input: Value, start: Millis, end: Millis) -> ToolState {
    ToolState::Completed {
        input,
        output: "ok".into(),
        title: "t".into(),
        metadata: json!({}),
        time: ToolTime {
            start,
            end: Some(end),
            compacted: None,
        },
    }
}

fn task(child: &str, start: Millis, end: Option<Millis>) -> ToolState {
    let input =
        json!({"description": format!("job {child}"), "prompt": "p", "subagent_type": "explore"});
    let time = ToolTime {
        start,
        end,
        compacted: None,
    };
    match end {
        Some(_) => ToolState::Completed {
            input,
            output: "done".into(),
            title: "job".into(),
            metadata: json!({"sessionId": child}),
            time,
        },
        None => ToolState::Running {
            input,
            title: None,
            metadata: Some(json!({"sessionId": child})),
            time,
        },
    }
}

fn shape(t: &Timeline) -> Vec<(RowKind, String, Millis, Millis, u32, u32, RowStatus)> {
    t.rows
        .iter()
        .map(|r| {
            (
                r.kind,
                r.part_id.clone().map(String::from).unwrap_or_default(),
                r.start,
                r.end,
                r.depth,
                r.lane,
                r.status,
            )
        })
        .collect()
}

#[test]
fn a_finished_step_gives_step_request_and_tool_rows_in_part_order() {
    let s = session("ses_a", None, "A");
    let msgs = vec![
        user("ses_a", "msg_1", 1000),
        step(
            "ses_a",
            "msg_2",
            1001,
            Some(1500),
            req(1010, Some(1040), 1200),
            true,
            vec![
                ("bash", done(json!({"command": "ls -la"}), 1210, 1300)),
                ("read", done(json!({"filePath": "/p/a.rs"}), 1210, 1250)),
            ],
        ),
    ];
    let t = build_alone(&s, &msgs);
    use RowKind::*;
    use RowStatus::*;
    assert_eq!(
        shape(&t),
        vec![
            (Step, "prt_msg_2_000".into(), 1001, 1500, 0, 0, Completed),
            (Request, "prt_msg_2_000".into(), 1010, 1200, 0, 0, Completed),
            (Tool, "prt_msg_2_001".into(), 1210, 1300, 0, 0, Completed),
            (Tool, "prt_msg_2_002".into(), 1210, 1250, 0, 0, Completed),
        ]
    );
    assert_eq!(t.rows[0].label, "step 1 · build · stop");
    assert_eq!(t.rows[1].label, "mock/m · first token 30 ms");
    assert_eq!(t.rows[2].label, "bash ls -la");
    assert_eq!(t.rows[3].label, "read /p/a.rs");
    assert_eq!((t.start, t.end), (1001, 1500));
    assert!(
        t.rows
            .iter()
            .all(|r| r.message_id == "msg_2" && r.session_id == "ses_a")
    );
}

#[test]
fn running_parts_extend_to_now_and_pending_calls_have_no_bar() {
    let s = session("ses_a", None, "A");
    let pending = ToolState::Pending {
        input: json!({}),
        raw: String::new(),
    };
    let running = ToolState::Running {
        input: json!({"command": "sleep 9"}),
        title: None,
        metadata: None,
        time: ToolTime {
            start: 2000,
            end: None,
            compacted: None,
        },
    };
    let msgs = vec![
        // Still streaming: no request times yet, the request bar runs from the step's start.
        step(
            "ses_a",
            "msg_1",
            1000,
            None,
            None,
            false,
            vec![("bash", pending)],
        ),
    ];
    let t = build_alone(&s, &msgs);
    use RowKind::*;
    use RowStatus::*;
    assert_eq!(
        shape(&t),
        vec![
            (Step, "prt_msg_1_000".into(), 1000, NOW, 0, 0, Running),
            (Request, "prt_msg_1_000".into(), 1000, NOW, 0, 0, Running),
        ]
    );
    // Stream done, a tool runs: the request has its end, the tool runs to now.
    let msgs = vec![ok_step(
        "ses_a",
        "msg_1",
        (1000, None),
        (1000, 1900),
        vec![("bash", running)],
    )];
    let t = build_alone(&s, &msgs);
    assert_eq!(
        shape(&t),
        vec![
            (Step, "prt_msg_1_000".into(), 1000, NOW, 0, 0, Running),
            (Request, "prt_msg_1_000".into(), 1000, 1900, 0, 0, Completed),
            (Tool, "prt_msg_1_001".into(), 2000, NOW, 0, 0, Running),
        ]
    );
    assert_eq!(t.end, NOW);
}

#[test]
fn failed_steps_and_requests_are_errors_and_old_steps_have_no_request_bar() {
    let s = session("ses_a", None, "A");
    let mut failed = step(
        "ses_a",
        "msg_1",
        1000,
        Some(1300),
        Some(RequestTime {
            start: 1100,
            first_token: None,
            end: 1250,
            attempts: 3,
        }),
        false,
        vec![],
    );
    if let Message::Assistant(a) = &mut failed.info {
        a.error = Some(MessageError::new(crate::MessageErrorName::Api, "boom"));
    }
    let old = step("ses_a", "msg_2", 2000, Some(2100), None, true, vec![]);
    let t = build(&s, &[failed, old], &HashMap::new(), NOW);
    use RowKind::*;
    use RowStatus::*;
    assert_eq!(
        shape(&t),
        vec![
            (Step, "prt_msg_1_000".into(), 1000, 1300, 0, 0, Error),
            (Request, "prt_msg_1_000".into(), 1100, 1250, 0, 0, Error),
            (Step, "prt_msg_2_000".into(), 2000, 2100, 0, 0, Completed),
        ]
    );
    assert_eq!(t.rows[1].label, "mock/m · attempt 3");
    assert_eq!(t.rows[2].label, "step 2 · build · stop");
}

fn child(sid: &str, parent: &str, msgs: Vec<MessageWithParts>) -> (SessionId, ChildHistory) {
    (
        sid.into(),
        ChildHistory {
            session: session(sid, Some(parent), &format!("job {sid} (@explore subagent)")),
            messages: msgs,
        },
    )
}

fn child_turn(sid: &str, n: usize, created: Millis, end: Millis) -> Vec<MessageWithParts> {
    vec![
        user(sid, &format!("msg_{n}u"), created),
        step(
            sid,
            &format!("msg_{n}a"),
            created + 1,
            Some(end),
            req(created + 2, Some(created + 3), end - 10),
            true,
            vec![("glob", done(json!({"pattern": "*.rs"}), end - 9, end - 5))],
        ),
    ]
}

#[test]
fn parallel_subagents_get_their_own_lanes_and_nest_under_their_task_calls() {
    let s = session("ses_p", None, "P");
    let msgs = vec![
        user("ses_p", "msg_1", 1000),
        ok_step(
            "ses_p",
            "msg_2",
            (1001, Some(3000)),
            (1002, 1100),
            vec![
                ("task", task("ses_c1", 1200, Some(2000))),
                ("task", task("ses_c2", 1200, Some(2500))),
            ],
        ),
        user("ses_p", "msg_3", 3100),
        ok_step(
            "ses_p",
            "msg_4",
            (3101, Some(4000)),
            (3102, 3150),
            vec![("task", task("ses_c3", 3200, Some(3900)))],
        ),
    ];
    let children: HashMap<SessionId, ChildHistory> = [
        child("ses_c1", "ses_p", child_turn("ses_c1", 1, 1210, 1990)),
        child("ses_c2", "ses_p", child_turn("ses_c2", 2, 1220, 2490)),
        child("ses_c3", "ses_p", child_turn("ses_c3", 3, 3210, 3890)),
    ]
    .into_iter()
    .collect();
    let t = build(&s, &msgs, &children, NOW);
    let kinds: Vec<(RowKind, u32, u32, &str)> = t
        .rows
        .iter()
        .map(|r| (r.kind, r.depth, r.lane, r.session_id.as_str()))
        .collect();
    use RowKind::*;
    assert_eq!(
        kinds,
        vec![
            (Step, 0, 0, "ses_p"),
            (Request, 0, 0, "ses_p"),
            (Tool, 0, 0, "ses_p"),
            (Subagent, 1, 0, "ses_p"),
            (Step, 1, 0, "ses_c1"),
            (Request, 1, 0, "ses_c1"),
            (Tool, 1, 0, "ses_c1"),
            (Tool, 0, 0, "ses_p"),
            (Subagent, 1, 1, "ses_p"),
            (Step, 1, 1, "ses_c2"),
            (Request, 1, 1, "ses_c2"),
            (Tool, 1, 1, "ses_c2"),
            (Step, 0, 0, "ses_p"),
            (Request, 0, 0, "ses_p"),
            (Tool, 0, 0, "ses_p"),
            // Sequential to the others: back in lane 0.
            (Subagent, 1, 0, "ses_p"),
            (Step, 1, 0, "ses_c3"),
            (Request, 1, 0, "ses_c3"),
            (Tool, 1, 0, "ses_c3"),
        ]
    );
    let sub = &t.rows[3];
    assert_eq!(sub.child_session_id.as_deref(), Some("ses_c1"));
    assert_eq!(sub.part_id.as_deref(), Some("prt_msg_2_001"));
    assert_eq!(sub.label, "job ses_c1 (@explore subagent)");
    // From the child's first message to its last step's completion.
    assert_eq!((sub.start, sub.end), (1210, 1990));
    assert_eq!(t.rows[2].label, "task explore: job ses_c1");
}

#[test]
fn a_resumed_subagent_shows_only_each_calls_own_work_and_running_calls_run_to_now() {
    let s = session("ses_p", None, "P");
    let msgs = vec![
        user("ses_p", "msg_1", 1000),
        ok_step(
            "ses_p",
            "msg_2",
            (1001, Some(2000)),
            (1002, 1100),
            vec![("task", task("ses_c", 1200, Some(1900)))],
        ),
        user("ses_p", "msg_3", 3000),
        ok_step(
            "ses_p",
            "msg_4",
            (3001, None),
            (3002, 3100),
            vec![("task", task("ses_c", 3200, None))],
        ),
    ];
    let mut turns = child_turn("ses_c", 1, 1210, 1890);
    let mut second = child_turn("ses_c", 2, 3210, 3890);
    if let Message::Assistant(a) = &mut second[1].info {
        a.time.completed = None;
    }
    turns.append(&mut second);
    let children: HashMap<SessionId, ChildHistory> =
        [child("ses_c", "ses_p", turns)].into_iter().collect();
    let t = build(&s, &msgs, &children, NOW);
    let child_steps: Vec<(&str, &str)> = t
        .rows
        .iter()
        .filter(|r| r.session_id == "ses_c" && r.kind == RowKind::Step)
        .map(|r| (r.message_id.as_str(), r.part_id.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        child_steps,
        vec![("msg_1a", "prt_msg_1a_000"), ("msg_2a", "prt_msg_2a_000")]
    );
    let subs: Vec<(Millis, Millis, RowStatus)> = t
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Subagent)
        .map(|r| (r.start, r.end, r.status))
        .collect();
    assert_eq!(
        subs,
        vec![
            (1210, 1890, RowStatus::Completed),
            (3210, NOW, RowStatus::Running)
        ]
    );
    // Each call's child rows directly follow its own subagent row.
    let order: Vec<&str> = t.rows.iter().map(|r| r.message_id.as_str()).collect();
    assert_eq!(
        order,
        vec![
            "msg_2", "msg_2", "msg_2", "msg_2", "msg_1a", "msg_1a", "msg_1a", "msg_4", "msg_4",
            "msg_4", "msg_4", "msg_2a", "msg_2a", "msg_2a"
        ]
    );
}

#[test]
fn foreign_or_cyclic_child_links_are_not_followed() {
    let s = session("ses_p", None, "P");
    let msgs = vec![ok_step(
        "ses_p",
        "msg_2",
        (1001, Some(2000)),
        (1002, 1100),
        vec![
            ("task", task("ses_other", 1200, Some(1900))),
            ("task", task("ses_c", 1200, Some(1900))),
            ("task", task("ses_missing", 1200, Some(1900))),
        ],
    )];
    // ses_c's own task part points back at the parent: shown once, never followed.
    let back = vec![ok_step(
        "ses_c",
        "msg_c",
        (1300, Some(1800)),
        (1301, 1400),
        vec![("task", task("ses_p", 1500, Some(1700)))],
    )];
    let children: HashMap<SessionId, ChildHistory> = [
        child(
            "ses_other",
            "ses_somewhere_else",
            child_turn("ses_other", 1, 1210, 1890),
        ),
        child("ses_c", "ses_p", back),
    ]
    .into_iter()
    .collect();
    let t = build(&s, &msgs, &children, NOW);
    let kinds: Vec<(RowKind, &str)> = t
        .rows
        .iter()
        .map(|r| (r.kind, r.session_id.as_str()))
        .collect();
    use RowKind::*;
    assert_eq!(
        kinds,
        vec![
            (Step, "ses_p"),
            (Request, "ses_p"),
            (Tool, "ses_p"),
            (Tool, "ses_p"),
            (Subagent, "ses_p"),
            (Step, "ses_c"),
            (Request, "ses_c"),
            (Tool, "ses_c"),
            (Tool, "ses_p"),
        ]
    );
}

#[test]
fn rows_serialize_with_the_api_field_names() {
    let s = session("ses_a", None, "A");
    let msgs = vec![ok_step("ses_a", "msg_1", (5, Some(9)), (6, 7), vec![])];
    let v = serde_json::to_value(build_alone(&s, &msgs)).expect("json");
    assert_eq!(v["sessionID"], "ses_a");
    assert_eq!(v["now"], NOW);
    let r = &v["rows"][1];
    assert_eq!(r["kind"], "request");
    assert_eq!(r["partID"], "prt_msg_1_000");
    assert_eq!(r["messageID"], "msg_1");
    assert_eq!(r["status"], "completed");
    assert_eq!((r["start"].as_i64(), r["end"].as_i64()), (Some(6), Some(7)));
    assert!(r.get("childSessionID").is_none());
    // An empty session spans its creation instant.
    let t = build(&s, &[], &HashMap::new(), NOW);
    assert_eq!((t.start, t.end, t.rows.len()), (100, 100, 0));
}

#[test]
fn labels_are_one_line_and_clipped() {
    let s = session("ses_a", None, "A");
    let long = format!("echo {}\nsecond line", "x".repeat(300));
    let msgs = vec![step(
        "ses_a",
        "msg_1",
        5,
        Some(9),
        None,
        true,
        vec![("bash", done(json!({"command": long}), 6, 8))],
    )];
    let t = build_alone(&s, &msgs);
    let label = &t.rows[1].label;
    assert_eq!(label.chars().count(), LABEL_MAX);
    assert!(label.ends_with('…') && !label.contains('\n'), "{label}");
}

#[tokio::test]
async fn load_follows_task_parts_through_the_store() {
    use crate::{Bus, Store, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path().join("t.db"), Bus::new()).expect("store");
    let parent = session("ses_p", None, "P");
    let kid = session("ses_k", Some("ses_p"), "kid (@explore subagent)");
    let grandkid = session("ses_g", Some("ses_k"), "grandkid (@general subagent)");
    let mut writes = Vec::new();
    for s in [&parent, &kid, &grandkid] {
        writes.push(Write::Session {
            info: s.clone(),
            created: true,
        });
    }
    let histories = vec![
        vec![ok_step(
            "ses_p",
            "msg_1",
            (1000, Some(5000)),
            (1001, 1100),
            vec![("task", task("ses_k", 1200, Some(4900)))],
        )],
        vec![ok_step(
            "ses_k",
            "msg_2",
            (1300, Some(4800)),
            (1301, 1400),
            vec![("task", task("ses_g", 1500, Some(4700)))],
        )],
        child_turn("ses_g", 3, 1600, 4600),
    ];
    for m in histories.into_iter().flatten() {
        writes.push(Write::Message(m.info.clone()));
        for p in m.parts {
            writes.push(Write::Part(p));
        }
    }
    store.write(writes);
    store.flush().await.expect("flush");
    let t = store
        .read(|r| load(r, &"ses_p".into(), NOW))
        .await
        .expect("load")
        .expect("the session exists");
    let rows: Vec<(RowKind, u32, &str)> = t
        .rows
        .iter()
        .map(|r| (r.kind, r.depth, r.session_id.as_str()))
        .collect();
    use RowKind::*;
    assert_eq!(
        rows,
        vec![
            (Step, 0, "ses_p"),
            (Request, 0, "ses_p"),
            (Tool, 0, "ses_p"),
            (Subagent, 1, "ses_p"),
            (Step, 1, "ses_k"),
            (Request, 1, "ses_k"),
            (Tool, 1, "ses_k"),
            (Subagent, 2, "ses_k"),
            (Step, 2, "ses_g"),
            (Request, 2, "ses_g"),
            (Tool, 2, "ses_g"),
        ]
    );
    let none = store
        .read(|r| load(r, &"ses_nope".into(), NOW))
        .await
        .expect("load");
    assert!(none.is_none());
}
