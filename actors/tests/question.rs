//! Issue 16's `question` tool through the real runtime and the scripted provider: the
//! question is published and listed, answered through the runtime (as `POST
//! /question/{id}/reply` does), dismissed (the turn stops), and denied and not offered when
//! nobody can answer (non-interactive runs).

mod support;

use serde_json::{Value, json};
use support::*;
use tempfile::TempDir;
use troupe_actors::{Runtime, RuntimeOptions};
use troupe_session::{SessionId, ToolState};
use troupe_testkit::{MockServer, Script, Step};

fn ask_db() -> Step {
    Step::tool(
        "question",
        json!({"questions": [
            {"question": "Which database should the service use?", "header": "Database",
             "options": [{"label": "SQLite", "description": "embedded, recommended"},
                         {"label": "PostgreSQL", "description": "a server"}]},
            {"question": "Which features?", "header": "Features", "multiple": true,
             "options": [{"label": "auth"}, {"label": "billing"}, {"label": "search"}]}
        ]}),
    )
}

/// A runtime that can ask the user, over a provider that asks [`ask_db`] and then answers
/// `then`, with one session in which a turn "set it up" has started.
struct Asking {
    _dir: TempDir,
    server: MockServer,
    runtime: Runtime,
    sid: SessionId,
    turn: tokio::task::JoinHandle<troupe_actors::TurnResult>,
    /// The bus, subscribed before the turn started.
    events: tokio::sync::broadcast::Receiver<std::sync::Arc<troupe_session::Event>>,
}

/// A runtime over `server` that can ask the user (as `troupe run` in a terminal).
async fn interactive(dir: &TempDir, server: &MockServer) -> Runtime {
    start_runtime_with(
        dir,
        &server.base_url(),
        RuntimeOptions {
            interactive: true,
            ..Default::default()
        },
    )
    .await
}

async fn asking(then: &str) -> Asking {
    let (dir, root) = scratch();
    let script = Script::single(vec![ask_db(), Step::text(then)]);
    let server = start_mock(script).await;
    let runtime = interactive(&dir, &server).await;
    let sid = new_session(&runtime, &root).await;
    let events = runtime.bus().subscribe();
    let turn = spawn_prompt(&runtime, &sid, "set it up");
    Asking {
        _dir: dir,
        server,
        runtime,
        sid,
        turn,
        events,
    }
}

/// Wait for the one pending question and return its payload.
async fn pending_question(runtime: &Runtime) -> Value {
    let mut found = None;
    wait_until("a pending question", || {
        found = runtime.pending_questions().into_iter().next();
        found.is_some()
    })
    .await;
    found.expect("question")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_published_answered_and_the_answers_reach_the_model() {
    let mut a = asking("going with it").await;
    let q = pending_question(&a.runtime).await;
    assert_eq!(q["sessionID"], a.sid.as_str());
    assert!(q["id"].as_str().unwrap().starts_with("que_"), "{q}");
    assert_eq!(q["questions"][1]["multiple"], true);
    assert_eq!(q["questions"][0]["options"][1]["label"], "PostgreSQL");
    let id = q["id"].as_str().unwrap().to_string();
    // One list per question: a wrong count is refused and the question stays pending.
    let e = a
        .runtime
        .reply_question(&id, vec![vec!["SQLite".into()]])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "answers: expected 2 lists (one per question), got 1"
    );
    a.runtime
        .reply_question(
            &id,
            vec![
                vec!["PostgreSQL".into()],
                vec!["auth".into(), "search".into()],
            ],
        )
        .expect("answered");
    assert!(a.runtime.reply_question(&id, vec![vec![], vec![]]).is_err());
    let turn = a.turn.await.expect("turn task");
    assert!(turn.error.is_none(), "{:?}", turn.error);
    assert_eq!(turn.text, "going with it");

    let parts = tool_parts(&messages(&a.runtime, &a.sid).await);
    let ToolState::Completed { output, title, .. } = &parts[0].1 else {
        panic!("{parts:?}")
    };
    assert_eq!(title, "Asked 2 questions");
    assert_eq!(
        output,
        "The user answered:\n- Which database should the service use?: PostgreSQL\n- Which features?: auth, search\nContinue with these answers in mind."
    );
    let reqs = requests_of(&a.server, &a.sid);
    assert!(
        request_texts(&reqs[1], "tool")
            .iter()
            .any(|t| t.contains("Which features?: auth, search"))
    );
    let mut names = Vec::new();
    while let Ok(ev) = a.events.try_recv() {
        if ev.type_name().starts_with("question.") {
            names.push(ev.type_name());
        }
    }
    assert_eq!(names, ["question.asked", "question.replied"]);
    a.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_question_stops_the_turn() {
    let a = asking("never sent").await;
    let q = pending_question(&a.runtime).await;
    assert!(a.runtime.reject_question(q["id"].as_str().unwrap()));
    let turn = a.turn.await.expect("turn task");
    assert_ne!(turn.text, "never sent");
    assert_eq!(requests_of(&a.server, &a.sid).len(), 1);
    let parts = tool_parts(&messages(&a.runtime, &a.sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("{parts:?}")
    };
    assert!(error.contains("dismissed"), "{error}");
    assert!(a.runtime.pending_questions().is_empty());
    a.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_turn_drops_its_question() {
    let a = asking("x").await;
    let q = pending_question(&a.runtime).await;
    a.runtime.abort(&a.sid);
    a.turn.await.expect("turn task");
    assert!(a.runtime.pending_questions().is_empty());
    assert!(
        a.runtime
            .reply_question(q["id"].as_str().unwrap(), vec![vec![], vec![]])
            .is_err()
    );
    a.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_anyone_to_answer_the_question_tool_is_neither_offered_nor_run() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![ask_db(), Step::text("fine")])).await;
    // The library default: not interactive (non-interactive `run`, `batch`).
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "set it up").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let reqs = requests_of(&server, &sid);
    let offered = reqs[0].offered_tools();
    assert!(!offered.is_empty());
    assert!(!offered.contains(&"question".to_string()), "{offered:?}");
    let parts = tool_parts(&messages(&runtime, &sid).await);
    assert!(
        matches!(&parts[0].1, ToolState::Error { .. }),
        "the question ran: {parts:?}"
    );
    assert!(runtime.pending_questions().is_empty());

    // With someone to answer, it is offered.
    let dir2 = TempDir::new().expect("tempdir");
    let server2 = start_mock(Script::single(vec![Step::text("hi")])).await;
    let rt2 = interactive(&dir2, &server2).await;
    let root2 = dir2.path().canonicalize().expect("canonicalize");
    let sid2 = new_session(&rt2, &root2).await;
    run_prompt(&rt2, &sid2, "hello").await;
    let body = requests_of(&server2, &sid2)[0].body.to_string();
    assert!(body.contains("\"name\":\"question\""), "not offered");
    runtime.shutdown().await;
    rt2.shutdown().await;
}

/// One `multiple` question with eight options.
fn ask_many() -> Step {
    let options: Vec<Value> = (0..8).map(|i| json!({"label": format!("o{i}")})).collect();
    Step::tool(
        "question",
        json!({"questions": [
            {"question": "Which ones?", "header": "Pick", "multiple": true, "options": options},
        ]}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_capped_and_the_output_is_truncated_like_any_tool_s() {
    use troupe_actors::question::{MAX_ANSWER_BYTES, MAX_REPLY_BYTES};
    let (dir, root) = scratch();
    let script = Script::single(vec![ask_db(), ask_many(), Step::text("ok")]);
    let server = start_mock(script).await;
    let runtime = interactive(&dir, &server).await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_prompt(&runtime, &sid, "set it up");
    let q = pending_question(&runtime).await;
    let id = q["id"].as_str().unwrap().to_string();
    // Two picks for a question that is not `multiple`.
    let e = runtime
        .reply_question(
            &id,
            vec![vec!["SQLite".into(), "PostgreSQL".into()], vec![]],
        )
        .unwrap_err();
    assert!(e.to_string().contains("not `multiple`"), "{e}");
    // More picks than options plus one typed answer.
    let five = vec!["auth".to_string(); 5];
    let e = runtime.reply_question(&id, vec![vec![], five]).unwrap_err();
    assert!(e.to_string().contains("at most 4"), "{e}");
    // One answer too large (the tester's 7 MB answer).
    let huge = "x".repeat(7 * 1024 * 1024);
    let e = runtime
        .reply_question(&id, vec![vec![huge], vec![]])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("at most {MAX_ANSWER_BYTES}")),
        "{e}"
    );
    runtime
        .reply_question(&id, vec![vec!["SQLite".into()], vec![]])
        .expect("a fitting answer");

    // The second question: the answers together may not pass the reply cap; within it, the
    // output is still cut to the tool-output limits.
    let mut q2 = pending_question(&runtime).await;
    while q2["id"] == id.as_str() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        q2 = pending_question(&runtime).await;
    }
    let id2 = q2["id"].as_str().unwrap().to_string();
    let big = "y".repeat(MAX_ANSWER_BYTES);
    let e = runtime
        .reply_question(&id2, vec![vec![big.clone(); 9]])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("at most {MAX_REPLY_BYTES}")),
        "{e}"
    );
    runtime
        .reply_question(&id2, vec![vec![big; 7]])
        .expect("56 KiB of answers");
    let turn = turn.await.expect("turn task");
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Completed { output, .. } = &parts[1].1 else {
        panic!("{parts:?}")
    };
    assert!(
        output.len() < 51 * 1024 && output.contains("truncated"),
        "{} bytes",
        output.len()
    );
    runtime.shutdown().await;
}

/// A question waits for its person past the tool timeout (a safety net for hung tools, not
/// for people; OpenCode's question waits as long as it takes) and the answer still reaches
/// the model. (A question whose call ended otherwise is removed: `aborting_the_turn_drops_its_question`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_outwaits_the_tool_timeout() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![ask_db(), Step::text("answered late")])).await;
    let runtime = start_runtime_with(
        &dir,
        &server.base_url(),
        RuntimeOptions {
            interactive: true,
            tool_timeout: std::time::Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_prompt(&runtime, &sid, "set it up");
    let q = pending_question(&runtime).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert!(
        !turn.is_finished(),
        "the turn ended while its question waited"
    );
    runtime
        .reply_question(
            q["id"].as_str().unwrap(),
            vec![vec!["SQLite".into()], vec!["auth".into()]],
        )
        .expect("still answerable after four tool timeouts");
    let turn = turn.await.expect("turn task");
    assert!(turn.error.is_none(), "{:?}", turn.error);
    assert_eq!(turn.text, "answered late");
    let parts = tool_parts(&messages(&runtime, &sid).await);
    assert!(
        matches!(&parts[0].1, ToolState::Completed { output, .. } if output.contains("SQLite")),
        "{parts:?}"
    );
    runtime.shutdown().await;
}
