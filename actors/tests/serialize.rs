//! Integration tests of the runtime against the scripted provider: prompts to one session are
//! serialized, and idle session actors are released.

mod support;

use std::time::{Duration, Instant};

use support::*;
use tempfile::TempDir;
use troupe_actors::Runtime;
use troupe_session::{Message, MessageWithParts, SessionId};
use troupe_testkit::{MockServer, Script, Step};

fn msg_id(m: &MessageWithParts) -> &str {
    match &m.info {
        Message::User(u) => &u.id,
        Message::Assistant(a) => &a.id,
    }
}

fn is_user(m: &MessageWithParts) -> bool {
    matches!(m.info, Message::User(_))
}

/// The texts of each user message of `history`, in order.
fn user_texts(history: &[MessageWithParts]) -> Vec<Vec<String>> {
    history.iter().filter(|m| is_user(m)).map(texts).collect()
}

/// A test's mock (serving `steps` as its one conversation), the temp dir of its store, a
/// runtime over that store, and a new session whose directory is the temp dir.
async fn start(steps: Vec<Step>) -> (MockServer, TempDir, Runtime, SessionId) {
    let server = start_mock(Script::single(steps)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = runtime
        .create_session(dir.path(), None)
        .await
        .expect("session")
        .id;
    (server, dir, runtime, sid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_prompts_to_one_session_run_one_after_the_other() {
    // Step 0 answers turn 1 (slowly: ~40 SSE events 15 ms apart); step 1 answers turn 2 (its
    // request holds turn 1's assistant message). Were the turns interleaved, turn 2's first
    // request would overlap turn 1's and would be answered by step 0.
    let slow = "turn one streams slowly, a few characters at a time, on purpose.";
    let (server, _dir, runtime, sid) = start(vec![
        Step::text(slow).with_chunk_size(2).with_delay_ms(15),
        Step::text("turn two answer"),
    ])
    .await;

    let t1 = spawn_prompt(&runtime, &sid, "first prompt");
    // Send the second prompt while turn 1's request is still streaming.
    wait_until("turn 1's request", || !completions(&server).is_empty()).await;
    assert!(
        completions(&server)[0].end_ms.is_none(),
        "turn 1 finished before the second prompt was sent; slow it down"
    );
    let t2 = spawn_prompt(&runtime, &sid, "second prompt");

    let r1 = t1.await.expect("turn 1 task");
    let r2 = t2.await.expect("turn 2 task");
    assert!(r1.error.is_none(), "turn 1 failed: {:?}", r1.error);
    assert!(r2.error.is_none(), "turn 2 failed: {:?}", r2.error);
    assert_eq!(r1.text, slow);
    assert_eq!(r2.text, "turn two answer");

    let history = messages(&runtime, &sid).await;
    let roles: Vec<bool> = history.iter().map(is_user).collect();
    assert_eq!(
        roles,
        [true, false, true, false],
        "user/assistant order: {history:#?}"
    );
    assert_eq!(texts(&history[0]), ["first prompt"]);
    assert_eq!(texts(&history[2]), ["second prompt"]);
    // Ids are ascending: everything of turn 1 < turn 2's user message < turn 2's assistant.
    let turn2_user = msg_id(&history[2]);
    for m in &history[..2] {
        assert!(
            msg_id(m) < turn2_user,
            "{} (turn 1) is not before {turn2_user}",
            msg_id(m)
        );
    }
    for m in &history[3..] {
        assert!(
            msg_id(m) > turn2_user,
            "{} (turn 2 assistant) is not after {turn2_user}",
            msg_id(m)
        );
    }
    if let Message::Assistant(a) = &history[3].info {
        assert_eq!(
            a.parent_id, turn2_user,
            "turn 2's assistant answers turn 2's user message"
        );
    }
    if let Message::Assistant(a) = &history[1].info {
        assert_eq!(
            a.parent_id,
            msg_id(&history[0]),
            "turn 1's assistant answers turn 1's user message"
        );
    }

    // The provider saw turn 2's request only after turn 1's ended, with turn 1 in it.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2, "requests: {reqs:#?}");
    let end1 = reqs[0].end_ms.expect("turn 1's request ended");
    assert!(
        reqs[1].start_ms >= end1,
        "turn 2 started at {} before turn 1 ended at {end1}",
        reqs[1].start_ms
    );
    assert_eq!(reqs[0].step, Some(0));
    assert_eq!(reqs[1].step, Some(1));
    let users = request_texts(&reqs[1], "user");
    assert_eq!(users.len(), 2, "turn 2's request users: {users:?}");
    assert!(
        users[0].contains("first prompt") && users[1].contains("second prompt"),
        "{users:?}"
    );

    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_actor_is_released_and_reloaded() {
    let (server, _dir, runtime, sid) = start(vec![
        Step::text("first answer"),
        Step::text("second answer"),
    ])
    .await;
    assert_eq!(
        runtime.live_sessions(),
        0,
        "no actor before the first prompt"
    );

    assert_eq!(
        run_ok(&runtime, &sid, "hello there").await.text,
        "first answer"
    );
    // The actor stops itself once idle; the supervisor forgets it right after.
    wait_until("the idle session actor to be released", || {
        runtime.live_sessions() == 0
    })
    .await;

    // A later prompt loads the session again and sees the whole history.
    assert_eq!(
        run_ok(&runtime, &sid, "and again").await.text,
        "second answer"
    );
    wait_until("the session actor to be released again", || {
        runtime.live_sessions() == 0
    })
    .await;

    let history = messages(&runtime, &sid).await;
    assert_eq!(
        history.iter().map(is_user).collect::<Vec<_>>(),
        [true, false, true, false]
    );
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].step,
        Some(1),
        "the reloaded actor sent turn 1's answer back"
    );
    let users = request_texts(&reqs[1], "user");
    assert_eq!(users.len(), 2, "{users:?}");

    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_prompts_run_in_arrival_order() {
    // Step i answers the request holding i assistant messages, so each turn's answer names
    // its position in the session, whatever prompt it answers.
    let (server, _dir, runtime, sid) = start(vec![
        Step::text("answer zero")
            .with_chunk_size(2)
            .with_delay_ms(10),
        Step::text("answer one"),
        Step::text("answer two"),
    ])
    .await;

    let spawn = |text: &'static str| spawn_prompt(&runtime, &sid, text);
    let t1 = spawn("prompt A");
    wait_until("turn A's request", || !completions(&server).is_empty()).await;
    let t2 = spawn("prompt B");
    // B is queued before C is sent.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t3 = spawn("prompt C");
    let (r1, r2, r3) = (
        t1.await.expect("A"),
        t2.await.expect("B"),
        t3.await.expect("C"),
    );
    assert_eq!(
        (r1.text.as_str(), r2.text.as_str(), r3.text.as_str()),
        ("answer zero", "answer one", "answer two")
    );

    let history = messages(&runtime, &sid).await;
    assert_eq!(
        user_texts(&history),
        [["prompt A"], ["prompt B"], ["prompt C"]]
    );
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3);
    for w in reqs.windows(2) {
        assert!(
            w[1].start_ms >= w[0].end_ms.expect("ended"),
            "requests overlap: {w:#?}"
        );
    }
    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_the_turn_drops_the_queue_and_the_session_stays_usable() {
    let (server, _dir, runtime, sid) = start(vec![
        Step::text("this stream hangs")
            .with_chunk_size(4)
            .with_fault(troupe_testkit::Fault::hang_after(2)),
        Step::text("after the abort"),
    ])
    .await;

    let t1 = spawn_turn(&runtime, &sid, prompt("hang please"));
    wait_until("the hanging request", || !completions(&server).is_empty()).await;
    let t2 = spawn_turn(&runtime, &sid, prompt("queued behind the hang"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    abort_and_wait(&runtime, &sid, t1, DEADLINE).await;
    eprintln!("abort took {:?}", started.elapsed());
    let r2 = tokio::time::timeout(DEADLINE, t2)
        .await
        .expect("queued prompt answered")
        .expect("task");
    assert!(
        r2.is_err(),
        "the queued prompt should be dropped by the abort: {r2:?}"
    );
    wait_until("the aborted session actor to be released", || {
        runtime.live_sessions() == 0
    })
    .await;

    // The session still works and the next turn sees the aborted step's history.
    assert_eq!(
        run_ok(&runtime, &sid, "try again").await.text,
        "after the abort"
    );
    let history = messages(&runtime, &sid).await;
    assert_eq!(
        user_texts(&history),
        [
            vec!["hang please".to_string()],
            vec!["try again".to_string()]
        ],
        "dropped prompt must not be stored"
    );
    stop(runtime, server).await;
}
