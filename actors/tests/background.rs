//! Background subagents (`task` with `background: true`, issue 17) against the scripted
//! provider: the parent's step ends before its children do, their results arrive as
//! messages that the parent's next step sees, and aborting the parent stops them.
//!
//! Each conversation of the mock is chosen by a token in the first user message (the
//! parent's prompt, or a child's task prompt).

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;
use troupe_session::{Message, MessageWithParts, PartKind, SessionId, ToolState};
use troupe_testkit::task::background_task_args;
use troupe_testkit::{Conversation, RecordedRequest, Script, Step};

/// The name of the last assistant message's error, if any.
fn last_error(history: &[MessageWithParts]) -> Option<String> {
    last_assistant(history)?
        .error
        .as_ref()
        .map(|e| e.name.to_string())
}

/// Wait (bounded by [`DEADLINE`]) until every background child of `sid` has ended.
async fn wait_background(runtime: &troupe_actors::Runtime, sid: &SessionId) {
    tokio::time::timeout(DEADLINE, runtime.wait_background(sid))
        .await
        .expect("the background children ended");
}

/// All message text of a request, joined.
fn request_text(r: &RecordedRequest) -> String {
    r.body["messages"]
        .as_array()
        .map(|ms| ms.iter().map(content_text).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_children_report_into_the_parents_next_step() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", background_task_args("BG-A"))
                .with_tool("task", background_task_args("BG-B"))
                .with_tool("task_status", json!({"task_id": "ses_not_mine"})),
            // The parent's own work outlasts both children.
            Step::text("my own part is done").with_first_byte_delay_ms(3000),
            Step::text("both children reported"),
        ])
        .matching("PARENT-BG"),
        Conversation::new(vec![
            Step::text("result from child A").with_first_byte_delay_ms(200),
        ])
        .matching("BG-A"),
        Conversation::new(vec![
            Step::text("result from child B").with_first_byte_delay_ms(300),
        ])
        .matching("BG-B"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "PARENT-BG: fan out in the background").await;
    assert_eq!(turn.error, None, "{turn:?}");
    assert_eq!(turn.text.trim(), "both children reported");

    // Step 1's task calls returned at once, running; the status of a foreign id is refused.
    let history = messages(&runtime, &sid).await;
    let parts = tool_parts(&history);
    let tasks: Vec<&ToolState> = parts
        .iter()
        .filter(|(t, _)| t == "task")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(tasks.len(), 2);
    for s in &tasks {
        match s {
            ToolState::Completed { output, .. } => {
                assert!(output.contains("state=\"running\""), "{output}")
            }
            other => panic!("task part: {other:?}"),
        }
    }
    assert!(
        parts.iter().any(|(t, s)| t == "task_status"
            && matches!(s, ToolState::Error { error, .. } if error.contains("not a background task of this session"))),
        "{parts:#?}"
    );
    // The parent's second request went out before any child had answered; its third
    // carries both results.
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 3, "parent requests");
    let second = request_text(&reqs[1]);
    assert!(!second.contains("result from child"), "{second}");
    let third = request_text(&reqs[2]);
    for want in ["result from child A", "result from child B"] {
        assert!(third.contains(want), "{want} missing from {third}");
    }
    assert_eq!(third.matches("state=\"completed\"").count(), 2, "{third}");
    // A result is not something the user typed: it is stored as synthetic text and sent
    // without the reminder that wraps a user's message sent into a running turn.
    assert!(
        !third.contains("The user sent the following message"),
        "{third}"
    );
    let carriers: Vec<&MessageWithParts> = history
        .iter()
        .filter(|m| {
            m.parts.iter().any(
                |p| matches!(&p.kind, PartKind::Text { text, .. } if text.contains("<task_result>")),
            )
        })
        .collect();
    assert_eq!(carriers.len(), 2, "{history:#?}");
    for m in carriers {
        assert!(matches!(m.info, Message::User(_)), "{m:#?}");
        for p in &m.parts {
            assert!(
                matches!(
                    &p.kind,
                    PartKind::Text {
                        synthetic: true,
                        ..
                    }
                ),
                "{p:#?}"
            );
        }
    }
    // The children are sessions of the parent and ended well.
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 2);
    for k in &kids {
        assert_eq!(
            last_error(&messages(&runtime, &k.id).await),
            None,
            "{}",
            k.id
        );
    }
    wait_background(&runtime, &sid).await;
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_parent_stops_its_background_children() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", background_task_args("HANG-A"))
                .with_tool("task", background_task_args("HANG-B")),
            hanging_text("waiting for them"),
        ])
        .matching("PARENT-ABORT-BG"),
        hanging("HANG-A"),
        hanging("HANG-B"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_turn(
        &runtime,
        &sid,
        prompt("PARENT-ABORT-BG: start two and wait"),
    );
    // Two parent requests and one per child.
    wait_until("the children's requests", || {
        completions(&server).len() >= 4
    })
    .await;
    // The children hang under the parent session in the tree.
    let tree = serde_json::to_value(runtime.actors()).expect("tree");
    let text = tree.to_string();
    assert!(text.matches("\"kind\":\"session\"").count() >= 3, "{text}");
    abort_and_wait(&runtime, &sid, turn, DEADLINE).await;
    wait_background(&runtime, &sid).await;
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 2);
    for k in &kids {
        assert_eq!(
            last_error(&messages(&runtime, &k.id).await).as_deref(),
            Some("MessageAbortedError"),
            "{}",
            k.id
        );
    }
    // Their results were not delivered: no new turn of the parent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(requests_of(&server, &sid).len(), 2);
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_abort_background_off_children_outlive_the_parents_abort() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", background_task_args("KEEP-A")),
            hanging_text("waiting for it"),
            Step::text("thanks for the report"),
        ])
        .matching("PARENT-KEEP-BG"),
        Conversation::new(vec![
            Step::text("result from the kept child").with_first_byte_delay_ms(800),
        ])
        .matching("KEEP-A"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime_config(
        &dir,
        &server.base_url(),
        json!({"supervision": {"abort_background": false}}),
    )
    .await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_turn(&runtime, &sid, prompt("PARENT-KEEP-BG: start one and wait"));
    wait_until("the parent's second request", || {
        requests_of(&server, &sid).len() >= 2
    })
    .await;
    abort_and_wait(&runtime, &sid, turn, DEADLINE).await;
    // The child was not aborted: it finishes and its result starts a new turn of the parent.
    wait_background(&runtime, &sid).await;
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 1);
    assert_eq!(last_error(&messages(&runtime, &kids[0].id).await), None);
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 3, "the child's result started one more turn");
    let third = request_text(&reqs[2]);
    assert!(third.contains("result from the kept child"), "{third}");
    let history = messages(&runtime, &sid).await;
    assert_eq!(
        last_assistant(&history).map(|a| a.error.is_none()),
        Some(true)
    );
    runtime.shutdown().await;
    server.shutdown().await;
}

/// A background child is supervised like a foreground one: its session actor crashing during
/// its turn is started again from the store, the turn goes on, and the parent gets the
/// completed result (before, the parent got "the subagent stopped before it answered").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_background_child_is_restarted_and_its_result_delivered() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", background_task_args("BG-CRASH")),
            Step::text("started it"),
            Step::text("the child reported"),
        ])
        .matching("PARENT-CRASH-BG"),
        Conversation::new(vec![
            Step::tool("glob", json!({"pattern": "*"})),
            Step::text("child finished after the restart"),
        ])
        .matching("BG-CRASH"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime_config(
        &dir,
        &server.base_url(),
        json!({"supervision": {"backoff_ms": 1}}),
    )
    .await;
    let sid = new_session(&runtime, &root).await;
    // Only the child's actor crashes, once, as it takes its first finished step.
    runtime.inject_faults(child_step_crash_once(&sid));
    let turn = run_prompt(&runtime, &sid, "PARENT-CRASH-BG: start one").await;
    assert_eq!(turn.error, None, "{turn:?}");
    wait_background(&runtime, &sid).await;
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 3, "the child's result started one more turn");
    let third = request_text(&reqs[2]);
    assert!(
        third.contains("child finished after the restart"),
        "{third}"
    );
    assert!(third.contains("state=\"completed\""), "{third}");
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 1);
    assert_eq!(last_error(&messages(&runtime, &kids[0].id).await), None);
    assert_eq!(
        labeled(&runtime, "actor_restarts_total", "role=\"session\""),
        1
    );
    runtime.shutdown().await;
    server.shutdown().await;
}
