//! Steering a running turn (issue 17): a prompt sent while a 5-step scripted turn is at
//! step 2 reaches the model in step 3's request, wrapped as a mid-run user message, inside
//! the same turn; with `queue` it runs as a turn of its own after the first.

mod support;

use serde_json::json;
use support::*;
use tempfile::TempDir;
use troupe_actors::{PromptInput, Runtime, TurnResult};
use troupe_session::{Message, SessionId};
use troupe_testkit::{MockServer, Script, Step};

const STEER: &str = "also count the blank lines";

/// Send [`STEER`] to the session in a task, steering (or queued with `steer: false`).
fn spawn_second(
    runtime: &Runtime,
    sid: &SessionId,
    steer: bool,
) -> tokio::task::JoinHandle<Result<TurnResult, troupe_actors::RuntimeError>> {
    spawn_turn(
        runtime,
        sid,
        PromptInput {
            text: STEER.into(),
            steer,
            ..Default::default()
        },
    )
}

/// Whether the session's tree node shows one prompt waiting.
fn one_waiting(runtime: &Runtime, sid: &str) -> bool {
    fn find(n: &troupe_actors::tree::ActorNode, sid: &str) -> bool {
        (n.session_id.as_deref() == Some(sid) && n.queued == 1)
            || n.children.iter().any(|c| find(c, sid))
    }
    find(&runtime.shared().tree.tree(), sid)
}

/// A 5-step turn whose step 2 waits at a gate (a file the test creates), then a sixth step
/// answering a second turn.
fn script(gate: &std::path::Path) -> Script {
    Script::single(vec![
        Step::tool("glob", json!({"pattern": "*.txt"})),
        Step::tool("test_gate", json!({"path": gate.display().to_string()})),
        Step::tool("glob", json!({"pattern": "*.md"})),
        Step::tool("glob", json!({"pattern": "*.rs"})),
        Step::text("five steps done"),
        Step::text("second turn answer"),
    ])
}

/// Start the 5-step turn, wait until step 2 runs its gated tool, send `second` with
/// `steer`, wait until the session shows it waiting, open the gate; both results.
async fn run_with_second_prompt(
    dir: &TempDir,
    server: &MockServer,
    steer: bool,
) -> (Runtime, SessionId, TurnResult, TurnResult) {
    let gate = dir.path().join("gate");
    let runtime = start_runtime(dir, &server.base_url()).await;
    let sid = new_session(&runtime, dir.path()).await;
    let first = spawn_prompt(&runtime, &sid, "list the files");
    wait_until("step 2's gated tool", || completions(server).len() == 2).await;
    let second = spawn_second(&runtime, &sid, steer);
    wait_until("the second prompt to wait on the session", || {
        one_waiting(&runtime, &sid)
    })
    .await;
    assert_eq!(
        completions(server).len(),
        2,
        "the turn moved past step 2 before the gate opened"
    );
    std::fs::write(&gate, "open").expect("open the gate");
    let first = tokio::time::timeout(DEADLINE, first)
        .await
        .expect("first prompt in time")
        .expect("task");
    let second = join_turn(second, DEADLINE, "the second prompt").await;
    (runtime, sid, first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sent_at_step_2_reaches_step_3_of_the_same_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_mock(script(&dir.path().join("gate"))).await;
    let (runtime, sid, first, second) = run_with_second_prompt(&dir, &server, true).await;
    assert!(first.error.is_none(), "{:?}", first.error);
    assert_eq!(first.text, "five steps done");
    assert_eq!(first.steps, 5, "one turn of five steps");
    // The steering caller gets the same turn's result, naming its own message.
    assert_eq!(second.text, "five steps done");
    assert_ne!(second.user_message_id, first.user_message_id);

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 5, "no second turn: {reqs:#?}");
    for r in &reqs[..2] {
        assert!(
            !request_texts(r, "user").iter().any(|t| t.contains(STEER)),
            "steps 1-2 cannot know the prompt yet"
        );
    }
    let step3 = request_texts(&reqs[2], "user");
    assert_eq!(step3.len(), 2, "{step3:?}");
    assert_eq!(step3[0], "list the files");
    assert_eq!(
        step3[1],
        troupe_actors::steer::wrap(STEER),
        "step 3 sees the prompt wrapped"
    );
    assert!(step3[1].contains("The user sent the following message:"));
    // Later steps see it as the user wrote it, after step 2's tool result.
    assert_eq!(request_texts(&reqs[3], "user"), ["list the files", STEER]);
    let last_roles: Vec<&str> = reqs[2].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        last_roles.last().copied(),
        Some("user"),
        "the prompt comes after step 2's tool result: {last_roles:?}"
    );

    // Stored as the user typed it, between step 2 and step 3.
    let history = messages(&runtime, &sid).await;
    let shape: Vec<String> = history
        .iter()
        .map(|m| match &m.info {
            Message::User(_) => format!("user:{}", texts(m).join("")),
            Message::Assistant(_) => "assistant".to_string(),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "user:list the files",
            "assistant",
            "assistant",
            &format!("user:{STEER}"),
            "assistant",
            "assistant",
            "assistant"
        ]
    );
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_waits_for_a_turn_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_mock(script(&dir.path().join("gate"))).await;
    let (runtime, sid, first, second) = run_with_second_prompt(&dir, &server, false).await;
    assert!(first.error.is_none(), "{:?}", first.error);
    assert_eq!(first.text, "five steps done");
    assert_eq!(second.text, "second turn answer");
    assert_eq!(second.steps, 1);

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 6, "{reqs:#?}");
    for r in &reqs[..5] {
        assert!(!request_texts(r, "user").iter().any(|t| t.contains(STEER)));
    }
    assert_eq!(request_texts(&reqs[5], "user"), ["list the files", STEER]);
    let history = messages(&runtime, &sid).await;
    let users: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.info, Message::User(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        users,
        [0, 6],
        "the second prompt comes after the whole turn"
    );
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_arrives_while_the_model_answers_keeps_the_turn_going() {
    // Step 2 answers without a tool call (the turn would end) while the prompt waits: the
    // turn goes on and step 3 answers the prompt.
    let dir = tempfile::tempdir().expect("tempdir");
    let answer = "done with the listing, nothing else to do here.".repeat(2);
    let server = start_mock(Script::single(vec![
        Step::tool("glob", json!({"pattern": "*"})),
        Step::text(answer.clone())
            .with_chunk_size(1)
            .with_delay_ms(15),
        Step::text("answered the follow-up"),
    ]))
    .await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, dir.path()).await;
    let first = spawn_prompt(&runtime, &sid, "go");
    wait_until("step 2's request", || completions(&server).len() == 2).await;
    let second = spawn_second(&runtime, &sid, true);
    wait_until("the prompt to wait on the session", || {
        one_waiting(&runtime, &sid)
    })
    .await;
    assert!(
        completions(&server)[1].end_ms.is_none(),
        "step 2 ended before the prompt arrived; slow it down"
    );
    let r1 = tokio::time::timeout(DEADLINE, first)
        .await
        .expect("in time")
        .expect("task");
    let r2 = join_turn(second, DEADLINE, "the second prompt").await;
    assert!(r1.error.is_none(), "{:?}", r1.error);
    assert_eq!(r1.steps, 3);
    assert_eq!(r1.text, "answered the follow-up");
    assert_eq!(r2.text, "answered the follow-up");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        request_texts(&reqs[2], "user"),
        ["go".to_string(), troupe_actors::steer::wrap(STEER)]
    );
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_drops_a_prompt_waiting_to_steer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = dir.path().join("gate");
    let server = start_mock(script(&gate)).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, dir.path()).await;
    let first = spawn_turn(&runtime, &sid, prompt("list the files"));
    wait_until("step 2's gated tool", || completions(&server).len() == 2).await;
    let second = spawn_second(&runtime, &sid, true);
    wait_until("the prompt to wait on the session", || {
        one_waiting(&runtime, &sid)
    })
    .await;
    abort_and_wait(&runtime, &sid, first, DEADLINE).await;
    let r2 = tokio::time::timeout(DEADLINE, second)
        .await
        .expect("in time")
        .expect("task");
    assert!(r2.is_err(), "the waiting prompt is dropped: {r2:?}");
    let history = messages(&runtime, &sid).await;
    assert!(
        !history.iter().any(|m| texts(m).iter().any(|t| t == STEER)),
        "nothing stored for the dropped prompt"
    );
    runtime.shutdown().await;
    server.shutdown().await;
}
