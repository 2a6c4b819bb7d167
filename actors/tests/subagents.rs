//! Integration tests of the `task` tool (subagents as child session actors) against the
//! scripted provider: parallel fan-out with failure isolation, abort propagation, resuming a
//! child with `task_id` (refused while another process drives the child), the
//! concurrent-subagent cap, and refused task calls.
//!
//! Each conversation of the mock is selected by a unique token in the first user message, so
//! the parent (whose first user message is the prompt) and every child (whose first user
//! message is its task prompt) get their own script.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;
use tempfile::TempDir;
use troupe_actors::{Runtime, RuntimeOptions};
use troupe_session::{LeaseClaim, Message, MessageWithParts, SessionId, TakeOutcome, ToolState};
use troupe_testkit::task::{fan_out_three, task_args};
use troupe_testkit::{Conversation, MockServer, RecordedRequest, Script, Step};

/// The first user message's text of a stored session.
fn first_user_text(history: &[MessageWithParts]) -> String {
    history
        .iter()
        .find(|m| matches!(m.info, Message::User(_)))
        .map(|m| texts(m).join("\n"))
        .unwrap_or_default()
}

fn outcome(state: &ToolState) -> Result<String, String> {
    match state {
        ToolState::Completed { output, .. } => Ok(output.clone()),
        ToolState::Error { error, .. } => Err(error.clone()),
        other => panic!("tool part not finished: {other:?}"),
    }
}

/// The task tool results of a session, in call order.
fn task_results(history: &[MessageWithParts]) -> Vec<(Value, Result<String, String>)> {
    tool_parts(history)
        .into_iter()
        .filter(|(t, _)| t == "task")
        .map(|(_, s)| (s.input().clone(), outcome(&s)))
        .collect()
}

fn live_session_ids(runtime: &Runtime) -> Vec<SessionId> {
    runtime
        .shared()
        .sessions
        .iter()
        .map(|e| e.key().clone())
        .collect()
}

/// Waits until the runtime holds no live actor (sessions, processors, tool calls).
async fn wait_no_actors(runtime: &Runtime, limit: Duration) {
    let start = Instant::now();
    while runtime.live_actors() != 0 {
        assert!(
            start.elapsed() < limit,
            "actors still alive after {limit:?}: live_actors={}",
            runtime.live_actors()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the runtime holds no live actor and no live session (panics with the counts
/// after `limit`).
async fn wait_idle(runtime: &Runtime, limit: Duration) {
    let start = Instant::now();
    while runtime.live_actors() != 0 || runtime.live_sessions() != 0 {
        assert!(
            start.elapsed() < limit,
            "runtime not idle after {limit:?}: live_actors={} live_sessions={} {:?}",
            runtime.live_actors(),
            runtime.live_sessions(),
            live_session_ids(runtime)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `task_id: <id>` a successful task result starts with.
fn task_id_of(output: &str) -> SessionId {
    let line = output.lines().next().unwrap_or("");
    let id = line
        .strip_prefix("task_id: ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("task output does not start with `task_id: `: {output}"));
    id.into()
}

/// Matches each child session to the token of its task prompt.
async fn child_by_token(runtime: &Runtime, parent: &SessionId, tokens: &[&str]) -> Vec<SessionId> {
    let kids = children(runtime, parent).await;
    let mut out = Vec::new();
    for token in tokens {
        let mut found = None;
        for k in &kids {
            if first_user_text(&messages(runtime, &k.id).await).contains(token) {
                found = Some(k.id.clone());
            }
        }
        out.push(found.unwrap_or_else(|| panic!("no child session for {token}: {kids:#?}")));
    }
    out
}

/// A conversation for the request containing `token` whose model calls `task` once per
/// `(child prompt, agent)` of `calls` (all in one step, as [`task_args`]) and then answers
/// `answer`.
fn delegates(token: &str, calls: &[(&str, &str)], answer: &str) -> Conversation {
    let mut step = Step::tool("task", task_args(calls[0].0, calls[0].1));
    for (child, agent) in &calls[1..] {
        step = step.with_tool("task", task_args(child, agent));
    }
    Conversation::new(vec![step, Step::text(answer)]).matching(token)
}

/// The mock serving `script`, a runtime with `opts` over the store in `dir`, and a new root
/// session in `root`.
async fn start_parent(
    dir: &TempDir,
    root: &Path,
    script: Script,
    opts: RuntimeOptions,
) -> (MockServer, Runtime, SessionId) {
    let server = start_mock(script).await;
    let runtime = start_runtime_with(dir, &server.base_url(), opts).await;
    let sid = new_session(&runtime, root).await;
    (server, runtime, sid)
}

/// Waits (at most 5 s) until the runtime is idle, then shuts it and the mock down.
async fn stop_idle(runtime: Runtime, server: MockServer) {
    wait_idle(&runtime, Duration::from_secs(5)).await;
    stop(runtime, server).await;
}

/// For each stored message of `history`, whether it is a user message.
fn user_roles(history: &[MessageWithParts]) -> Vec<bool> {
    history
        .iter()
        .map(|m| matches!(m.info, Message::User(_)))
        .collect()
}

/// The (start, end) milliseconds of each request, for failure messages.
fn spans(reqs: &[RecordedRequest]) -> Vec<(u64, Option<u64>)> {
    reqs.iter().map(|r| (r.start_ms, r.end_ms)).collect()
}

/// Whether any user message of any request the mock served contains `text`.
fn any_user_text_contains(server: &MockServer, text: &str) -> bool {
    completions(server)
        .iter()
        .any(|r| request_texts(r, "user").iter().any(|t| t.contains(text)))
}

/// The arguments of a `task` call continuing the explore child `child` with `prompt`.
fn resume_args(child: &SessionId, prompt: &str) -> Value {
    json!({
        "description": "continue helper",
        "prompt": prompt,
        "subagent_type": "explore",
        "task_id": child,
    })
}

/// The mock of turn 2 of a resume test (after [`first_child_turn`] with `tag`): the parent's
/// conversation skips the two requests of turn 1 and then plays `parent`; the child's skips
/// its first request and then plays `child_answer`.
async fn second_mock(tag: &str, parent: Vec<Step>, child_answer: Step) -> MockServer {
    let filler = || Step::text("unused");
    let mut parent_steps = vec![filler(), filler()];
    parent_steps.extend(parent);
    MockServer::start(Script::new(vec![
        Conversation::new(parent_steps).matching(format!("PARENT-{tag}")),
        Conversation::new(vec![filler(), child_answer]).matching(format!("CHILD-{tag}")),
    ]))
    .await
    .expect("mock 2")
}

/// Turn 1 of a resume test, on a runtime and mock of its own over the store in `dir`: the
/// parent (prompt `PARENT-{tag}: start a helper`) starts an explore child (`CHILD-{tag}`)
/// that answers `child_answer`. Returns the parent's session id and the task call's output
/// (which names the child's `task_id`), after the runtime shut down.
async fn first_child_turn(
    dir: &TempDir,
    root: &Path,
    tag: &str,
    child_answer: &str,
) -> (SessionId, String) {
    let server = MockServer::start(Script::new(vec![
        delegates(
            &format!("PARENT-{tag}"),
            &[(&format!("CHILD-{tag}"), "explore")],
            "parent turn one done",
        ),
        Conversation::new(vec![Step::text(child_answer)]).matching(format!("CHILD-{tag}")),
    ]))
    .await
    .expect("mock 1");
    let runtime = start_runtime(dir, &server.base_url()).await;
    let sid = new_session(&runtime, root).await;
    run_ok(&runtime, &sid, &format!("PARENT-{tag}: start a helper")).await;
    let results = task_results(&messages(&runtime, &sid).await);
    assert_eq!(results.len(), 1);
    let out = results[0].1.clone().expect("first task call succeeds");
    stop_idle(runtime, server).await;
    (sid, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_parallel_children() {
    let (dir, root) = scratch();
    std::fs::write(root.join("notes.md"), "TODO: the secret is 42\n").expect("notes");
    let notes = root.join("notes.md").display().to_string();

    let script = fan_out_three(&notes);
    let opts = RuntimeOptions {
        task_timeout: Duration::from_millis(1500),
        ..Default::default()
    };
    let (server, runtime, sid) = start_parent(&dir, &root, script, opts).await;

    let started = Instant::now();
    let turn = run_prompt(&runtime, &sid, "PARENT-FANOUT: fan out to three helpers").await;
    eprintln!(
        "three_parallel_children: parent turn took {:?}",
        started.elapsed()
    );
    assert!(turn.error.is_none(), "parent turn failed: {:?}", turn.error);
    assert_eq!(turn.text, "parent summarised the three children");

    // The parent's three task parts: A succeeded, B and C failed.
    let history = messages(&runtime, &sid).await;
    let results = task_results(&history);
    assert_eq!(results.len(), 3, "task parts: {results:#?}");
    let by_token = |t: &str| {
        results
            .iter()
            .find(|(input, _)| input["prompt"].as_str().unwrap_or("").contains(t))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no task part for {t}"))
    };
    let (a, b, c) = (
        by_token("CHILD-A-READ"),
        by_token("CHILD-B-PANIC"),
        by_token("CHILD-C-SLEEP"),
    );
    let a = a.unwrap_or_else(|e| panic!("A should succeed: {e}"));
    assert!(a.contains("A found: the secret is 42"), "A output: {a}");
    assert!(
        a.contains("state=\"completed\"") && a.contains("<task_result>"),
        "A output format: {a}"
    );
    let b = b.expect_err("B should fail");
    assert!(b.contains("failed"), "B error: {b}");
    let c = c.expect_err("C should time out");
    assert!(
        c.to_lowercase().contains("timed out") || c.to_lowercase().contains("timeout"),
        "C error: {c}"
    );
    assert_eq!(
        results.iter().filter(|(_, r)| r.is_err()).count(),
        2,
        "{results:#?}"
    );

    // Three child sessions, each with the parent as parent.
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 3, "children: {kids:#?}");
    for k in &kids {
        assert_eq!(k.parent_id.as_deref(), Some(sid.as_str()));
    }
    let ids = child_by_token(
        &runtime,
        &sid,
        &["CHILD-A-READ", "CHILD-B-PANIC", "CHILD-C-SLEEP"],
    )
    .await;
    assert_eq!(
        task_id_of(&a),
        ids[0],
        "A's task_id names its child session"
    );

    // The children's first requests were all in flight at the same time.
    let firsts: Vec<RecordedRequest> = ids
        .iter()
        .map(|id| {
            requests_of(&server, id)
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("no request for child {id}"))
        })
        .collect();
    let latest_start = firsts.iter().map(|r| r.start_ms).max().unwrap_or(0);
    let earliest_end = firsts
        .iter()
        .map(|r| r.end_ms.expect("ended"))
        .min()
        .unwrap_or(0);
    assert!(
        latest_start < earliest_end,
        "children's requests did not overlap: {:?}",
        spans(&firsts)
    );
    // A read the file and answered in a second request.
    let a_reqs = requests_of(&server, &ids[0]);
    assert_eq!(a_reqs.len(), 2, "A's requests");
    // B's second request was the failing one.
    let b_reqs = requests_of(&server, &ids[1]);
    assert_eq!(b_reqs.len(), 2, "B's requests");
    assert_eq!(b_reqs[1].status, 400);
    let b_hist = messages(&runtime, &ids[1]).await;
    assert!(
        last_assistant(&b_hist)
            .and_then(|m| m.error.as_ref())
            .is_some(),
        "B's last assistant message has no error: {b_hist:#?}"
    );

    // Every actor of the fan-out ends. (live_sessions() does not return to 0 after a task
    // timeout: see `timed_out_child_is_released`, ignored as a bug.)
    wait_no_actors(&runtime, Duration::from_secs(5)).await;
    let c_hist = messages(&runtime, &ids[2]).await;
    eprintln!(
        "three_parallel_children: C's tool parts after the timeout: {:?}; live sessions {:?}",
        tool_parts(&c_hist)
            .iter()
            .map(|(t, s)| (t.clone(), s.status()))
            .collect::<Vec<_>>(),
        live_session_ids(&runtime)
    );
    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_fan_out() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        delegates(
            "PARENT-ABORT",
            &[
                ("HANG-A", "explore"),
                ("HANG-B", "explore"),
                ("SLEEP-C", "general"),
            ],
            "never reached",
        ),
        hanging("HANG-A"),
        hanging("HANG-B"),
        sleeping("SLEEP-C"),
    ]);
    let (server, runtime, sid) = start_parent(&dir, &root, script, Default::default()).await;

    let turn = spawn_turn(&runtime, &sid, prompt("PARENT-ABORT: start three and hang"));
    // The parent's request plus one per child.
    wait_until("the three children's requests", || {
        completions(&server).len() >= 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let live_before = runtime.live_actors();
    assert!(
        live_before >= 7,
        "expected parent + processor + 3 tool calls + children alive, got {live_before}"
    );
    let aborted_at = Instant::now();
    abort_and_wait(&runtime, &sid, turn, Duration::from_secs(1)).await;
    eprintln!(
        "abort_during_fan_out: parent returned {:?} after the abort",
        aborted_at.elapsed()
    );
    wait_idle(&runtime, Duration::from_secs(1)).await;
    eprintln!(
        "abort_during_fan_out: idle {:?} after the abort",
        aborted_at.elapsed()
    );

    // Every task part of the parent is an aborted error.
    let history = messages(&runtime, &sid).await;
    let results = task_results(&history);
    assert_eq!(results.len(), 3, "{results:#?}");
    for (input, r) in &results {
        assert_eq!(
            r.as_ref().err().map(String::as_str),
            Some("Tool execution aborted"),
            "task {input}"
        );
    }
    // Every child's turn ended aborted: its last assistant message is aborted, or its tool
    // part is an aborted error.
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 3, "{kids:#?}");
    for k in &kids {
        let h = messages(&runtime, &k.id).await;
        let aborted_msg = last_assistant(&h)
            .and_then(|a| a.error.as_ref())
            .is_some_and(|e| e.name == troupe_session::MessageErrorName::MessageAborted);
        let aborted_tool = tool_parts(&h)
            .iter()
            .any(|(_, s)| matches!(s, ToolState::Error { error, .. } if error == "Tool execution aborted"));
        assert!(
            aborted_msg || aborted_tool,
            "child {} ({}) did not end aborted: {h:#?}",
            k.id,
            first_user_text(&h)
        );
    }
    // The hung responses were dropped by the client.
    wait_until_within("the hung responses to end", Duration::from_secs(2), || {
        completions(&server).iter().all(|r| r.end_ms.is_some())
    })
    .await;
    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_task_id() {
    let (dir, root) = scratch();

    // Turn 1 (first runtime, first mock): the parent starts a child.
    let (sid, out1) = first_child_turn(&dir, &root, "RESUME", "child first answer: 17 files").await;
    let child = task_id_of(&out1);
    assert!(out1.contains("child first answer: 17 files"), "{out1}");

    // Turn 2 (a fresh runtime on the same store; its mock knows the child's id): the parent
    // continues the child, and tries a bogus task_id in the same step.
    let resume = resume_args(&child, "now count the directories too");
    let bogus = json!({
        "description": "bogus helper",
        "prompt": "BOGUS-TASK-ID continue something that does not exist",
        "subagent_type": "explore",
        "task_id": "ses_doesnotexist0000000000",
    });
    let server2 = second_mock(
        "RESUME",
        vec![
            Step::tool("task", resume.clone()).with_tool("task", bogus),
            Step::text("parent turn two done"),
            Step::tool("task", resume),
            Step::text("parent turn three done"),
        ],
        Step::text("child second answer: 4 directories"),
    )
    .await;
    let runtime = start_runtime(&dir, &server2.base_url()).await;
    let t2 = run_ok(&runtime, &sid, "continue the helper").await;
    assert_eq!(t2.text, "parent turn two done");

    let r2 = task_results(&messages(&runtime, &sid).await);
    assert_eq!(r2.len(), 3, "{r2:#?}");
    let resumed = r2[1].1.clone().expect("resumed task call succeeds");
    assert_eq!(task_id_of(&resumed), child, "same child session: {resumed}");
    assert!(
        resumed.contains("child second answer: 4 directories"),
        "{resumed}"
    );
    let err = r2[2].1.clone().expect_err("bogus task_id fails");
    assert!(err.contains("ses_doesnotexist0000000000"), "{err}");

    // Still one child, now holding both turns.
    let kids = children(&runtime, &sid).await;
    assert_eq!(kids.len(), 1, "{kids:#?}");
    assert_eq!(kids[0].id, child);
    let h = messages(&runtime, &child).await;
    assert_eq!(user_roles(&h), [true, false, true, false], "{h:#?}");
    // The child's second request carried its first turn.
    let reqs = requests_of(&server2, &child);
    assert_eq!(reqs.len(), 1, "{reqs:#?}");
    assert_eq!(reqs[0].step, Some(1));
    let users = request_texts(&reqs[0], "user");
    assert!(
        users.len() == 2
            && users[0].contains("CHILD-RESUME")
            && users[1].contains("now count the directories too"),
        "{users:#?}"
    );
    let assistants = request_texts(&reqs[0], "assistant");
    assert!(
        assistants
            .iter()
            .any(|t| t.contains("child first answer: 17 files")),
        "{assistants:#?}"
    );
    wait_idle(&runtime, Duration::from_secs(5)).await;

    // Turn 3: another process drives the child meanwhile (holds its lease): resuming it is
    // refused, naming that process, and the child's history is left alone.
    let other = open_store(&dir);
    let claim = LeaseClaim {
        owner: "own_other".into(),
        pid: 4242,
        host: "elsewhere".into(),
        label: "troupe run".into(),
    };
    // The child's actor released its lease when it stopped; that may still be under way.
    let deadline = Instant::now() + DEADLINE;
    while !matches!(
        other
            .lease_take(&child, &claim, Duration::from_secs(60))
            .await
            .expect("lease_take"),
        TakeOutcome::Taken { .. }
    ) {
        assert!(
            Instant::now() < deadline,
            "the child's lease was never released"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t3 = run_prompt(&runtime, &sid, "continue the helper once more").await;
    assert_eq!(t3.text, "parent turn three done");
    let r3 = task_results(&messages(&runtime, &sid).await);
    assert_eq!(r3.len(), 4, "{r3:#?}");
    let err = r3[3]
        .1
        .clone()
        .expect_err("resuming a child driven elsewhere fails");
    assert!(
        err.contains(&format!(
            "subagent session {child} is driven by troupe run (pid 4242 on elsewhere)"
        )),
        "{err}"
    );
    assert_eq!(messages(&runtime, &child).await.len(), 4);
    other
        .lease_release(&child, "own_other")
        .await
        .expect("release");
    stop_idle(runtime, server2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_cap_queues() {
    let (dir, root) = scratch();
    let child = |token: &str| {
        Conversation::new(vec![
            Step::text(format!("{token} answered")).with_first_byte_delay_ms(150),
        ])
        .matching(token)
    };
    let script = Script::new(vec![
        delegates(
            "PARENT-CAP",
            &[
                ("CAP-ONE", "explore"),
                ("CAP-TWO", "explore"),
                ("CAP-THREE", "general"),
            ],
            "all three answered",
        ),
        child("CAP-ONE"),
        child("CAP-TWO"),
        child("CAP-THREE"),
    ]);
    let opts = RuntimeOptions {
        max_subagents: 1,
        ..Default::default()
    };
    let (server, runtime, sid) = start_parent(&dir, &root, script, opts).await;
    let turn = run_ok(&runtime, &sid, "PARENT-CAP: three helpers, one at a time").await;
    assert_eq!(turn.text, "all three answered");

    let results = task_results(&messages(&runtime, &sid).await);
    assert_eq!(results.len(), 3);
    for (input, r) in &results {
        let token = input["prompt"]
            .as_str()
            .unwrap_or("")
            .split(':')
            .next()
            .unwrap_or("");
        let out = r.clone().unwrap_or_else(|e| panic!("{token} failed: {e}"));
        assert!(out.contains(&format!("{token} answered")), "{out}");
    }
    let ids = child_by_token(&runtime, &sid, &["CAP-ONE", "CAP-TWO", "CAP-THREE"]).await;
    let mut reqs: Vec<RecordedRequest> =
        ids.iter().flat_map(|id| requests_of(&server, id)).collect();
    assert_eq!(reqs.len(), 3);
    reqs.sort_by_key(|r| r.start_ms);
    for w in reqs.windows(2) {
        let end = w[0].end_ms.expect("ended");
        assert!(
            w[1].start_ms >= end,
            "children ran concurrently despite max_subagents = 1: {:?}",
            spans(&reqs)
        );
    }
    stop_idle(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_subagent_and_nested_task_are_refused() {
    let (dir, root) = scratch();
    let nesting = |token: &str| {
        delegates(
            token,
            &[("GRANDCHILD", "explore")],
            &format!("{token} was refused"),
        )
    };
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", task_args("NOSUCH-AGENT", "nosuch"))
                .with_tool("task", task_args("NEST-GENERAL", "general"))
                .with_tool("task", task_args("NEST-EXPLORE", "explore")),
            Step::text("parent done"),
        ])
        .matching("PARENT-REFUSED"),
        nesting("NEST-GENERAL"),
        nesting("NEST-EXPLORE"),
        Conversation::new(vec![Step::text("a grandchild ran")]).matching("GRANDCHILD"),
    ]);
    let (server, runtime, sid) = start_parent(&dir, &root, script, Default::default()).await;
    let turn = run_ok(&runtime, &sid, "PARENT-REFUSED: try bad task calls").await;
    assert_eq!(turn.text, "parent done");

    let results = task_results(&messages(&runtime, &sid).await);
    assert_eq!(results.len(), 3, "{results:#?}");
    let unknown = results[0].1.clone().expect_err("unknown agent fails");
    assert!(unknown.contains("nosuch"), "{unknown}");
    assert!(
        unknown.contains("explore") && unknown.contains("general"),
        "the error should name the available agents: {unknown}"
    );
    assert!(
        !unknown.contains("build"),
        "primary agents are not subagents: {unknown}"
    );
    // Only the two valid calls created children; both ran, and their own task calls were
    // refused without creating grandchildren.
    let ids = child_by_token(&runtime, &sid, &["NEST-GENERAL", "NEST-EXPLORE"]).await;
    assert_eq!(children(&runtime, &sid).await.len(), 2);
    for (id, token) in ids.iter().zip(["NEST-GENERAL", "NEST-EXPLORE"]) {
        let h = messages(&runtime, id).await;
        let nested = task_results(&h);
        assert_eq!(nested.len(), 1, "{token}: {h:#?}");
        let e = nested[0]
            .1
            .clone()
            .expect_err("nested task call is refused");
        eprintln!("{token}: nested task error: {e}");
        assert!(
            e.to_lowercase().contains("denied")
                || e.to_lowercase().contains("permission")
                || e.to_lowercase().contains("not allowed"),
            "{token}: nested task error should say it was denied: {e}"
        );
        assert!(
            children(&runtime, id).await.is_empty(),
            "{token} has a grandchild"
        );
        assert!(results.iter().any(|(_, r)| {
            r.as_ref()
                .is_ok_and(|o| o.contains(&format!("{token} was refused")))
        }));
    }
    assert!(
        !any_user_text_contains(&server, "GRANDCHILD:"),
        "a grandchild request was sent"
    );
    stop_idle(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_child_is_released() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        delegates(
            "PARENT-TIMEOUT",
            &[("SLOW-CHILD", "general")],
            "parent went on",
        ),
        sleeping("SLOW-CHILD"),
    ]);
    let opts = RuntimeOptions {
        task_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let (server, runtime, sid) = start_parent(&dir, &root, script, opts).await;
    let turn = run_ok(&runtime, &sid, "PARENT-TIMEOUT: one slow helper").await;
    assert_eq!(turn.text, "parent went on");
    let results = task_results(&messages(&runtime, &sid).await);
    assert!(results[0].1.is_err(), "{results:#?}");
    // Idle = no actor and no session left: the runtime has forgotten the child, which it
    // does only after repairing the child's stored history.
    wait_idle(&runtime, Duration::from_secs(5)).await;
    // The killed child's stored step is finished: its tool part is not left `running`.
    let ids = child_by_token(&runtime, &sid, &["SLOW-CHILD"]).await;
    let parts = tool_parts(&messages(&runtime, &ids[0]).await);
    assert!(
        parts.iter().all(|(_, s)| s.status() == "error"),
        "the timed-out child's tool parts: {:?}",
        parts
            .iter()
            .map(|(t, s)| (t, s.status()))
            .collect::<Vec<_>>()
    );
    // The session map must not keep the killed child.
    wait_idle(&runtime, Duration::from_secs(2)).await;
    stop(runtime, server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_tool_is_not_executed_by_a_subagent() {
    // explore's ruleset is `* deny` + read-only allows, so test_sleep is not advertised to it.
    let (dir, root) = scratch();
    let script = Script::new(vec![
        delegates(
            "PARENT-DISABLED",
            &[("EXPLORE-SLEEP", "explore")],
            "parent done",
        ),
        Conversation::new(vec![
            Step::tool("test_sleep", json!({"ms": 1})),
            Step::text("explore done"),
        ])
        .matching("EXPLORE-SLEEP"),
    ]);
    let (server, runtime, sid) = start_parent(&dir, &root, script, Default::default()).await;
    run_ok(
        &runtime,
        &sid,
        "PARENT-DISABLED: explore calls a disabled tool",
    )
    .await;
    let ids = child_by_token(&runtime, &sid, &["EXPLORE-SLEEP"]).await;
    // The tool was not advertised to explore...
    let reqs = requests_of(&server, &ids[0]);
    let advertised = reqs[0].offered_tools();
    assert!(
        !advertised.iter().any(|n| n == "test_sleep"),
        "test_sleep advertised to explore: {advertised:?}"
    );
    // ...so calling it must not run it.
    let parts = tool_parts(&messages(&runtime, &ids[0]).await);
    assert_eq!(parts.len(), 1, "{parts:#?}");
    assert!(
        outcome(&parts[0].1).is_err(),
        "explore ran a tool its permissions disable: {parts:#?}"
    );
    stop(runtime, server).await;
}

/// Issue 24.7: two task calls in one step continuing the same `task_id` never run two actors
/// on the child session: one continues it, the other is refused with a clear error, and the
/// child's transcript is two whole turns (user, assistant, user, assistant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_with_one_task_id_do_not_share_the_child() {
    let (dir, root) = scratch();
    let (sid, out1) = first_child_turn(&dir, &root, "TWICE", "child first answer").await;
    let child = task_id_of(&out1);

    // The child's answer waits a little before its headers so that both calls overlap.
    let server2 = second_mock(
        "TWICE",
        vec![
            Step::tool("task", resume_args(&child, "first continuation"))
                .with_tool("task", resume_args(&child, "second continuation")),
            Step::text("parent turn two done"),
        ],
        Step::text("child second answer").with_first_byte_delay_ms(300),
    )
    .await;
    let runtime = start_runtime(&dir, &server2.base_url()).await;
    run_ok(&runtime, &sid, "continue the helper twice").await;
    let r2 = task_results(&messages(&runtime, &sid).await);
    assert_eq!(r2.len(), 3, "{r2:#?}");
    let outcomes = [r2[1].1.clone(), r2[2].1.clone()];
    let ok: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    let refused: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert_eq!((ok.len(), refused.len()), (1, 1), "{outcomes:#?}");
    assert!(ok[0].contains("child second answer"), "{}", ok[0]);
    assert!(
        refused[0].contains(&format!("task_id {child} is already running")),
        "{}",
        refused[0]
    );
    let h = messages(&runtime, &child).await;
    assert_eq!(user_roles(&h), [true, false, true, false], "{h:#?}");
    stop_idle(runtime, server2).await;
}

/// The subagent depth limit is read from the store's parent chain: a chain of subagents that
/// may call `task` stops at `max_depth`, and a subagent session prompted directly (a new turn
/// in the child, as `POST /session/{child}/message` sends) is still at its depth — an
/// in-memory count, set only while the parent's task call ran, let it start a chain anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_depth_limit_holds_along_the_chain_and_for_a_child_prompted_directly() {
    let (dir, root) = scratch();
    let script = Script::new(vec![
        delegates("PARENT-DEPTH", &[("LEVEL-ONE", "general")], "parent done"),
        delegates("LEVEL-ONE", &[("LEVEL-TWO", "general")], "level one done"),
        Conversation::new(vec![
            Step::tool("task", task_args("LEVEL-THREE", "general")),
            Step::text("level two was refused"),
            Step::tool("task", task_args("LEVEL-THREE-DIRECT", "general")),
            Step::text("level two was refused again"),
        ])
        .matching("LEVEL-TWO"),
        Conversation::new(vec![Step::text("too deep")]).matching("LEVEL-THREE"),
    ]);
    let server = start_mock(script).await;
    let runtime = support::Fixture {
        config: support::config_with(
            &server.base_url(),
            json!({"agent": {"general": {"permission": {"task": "allow"}}}}),
        ),
        opts: RuntimeOptions {
            max_depth: 2,
            ..RuntimeOptions::default()
        },
        ..support::Fixture::new(&server.base_url())
    }
    .start(&dir)
    .await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_ok(&runtime, &sid, "PARENT-DEPTH: delegate as deep as you can").await;
    assert_eq!(turn.text, "parent done");

    let one = child_by_token(&runtime, &sid, &["LEVEL-ONE"])
        .await
        .remove(0);
    let two = child_by_token(&runtime, &one, &["LEVEL-TWO"])
        .await
        .remove(0);
    let refused = |history: &[MessageWithParts]| -> Vec<String> {
        task_results(history)
            .into_iter()
            .filter_map(|(_, r)| r.err())
            .collect()
    };
    let errors = refused(&messages(&runtime, &two).await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("depth limit reached (2)"), "{errors:?}");
    assert!(
        children(&runtime, &two).await.is_empty(),
        "depth 3 was created"
    );

    // A new turn sent straight to the depth-2 child: it is still at depth 2.
    let turn = run_ok(&runtime, &two, "go on").await;
    assert_eq!(turn.text, "level two was refused again");
    let errors = refused(&messages(&runtime, &two).await);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[1].contains("depth limit reached (2)"), "{errors:?}");
    assert!(
        children(&runtime, &two).await.is_empty(),
        "depth 3 was created"
    );
    assert!(
        !any_user_text_contains(&server, "LEVEL-THREE"),
        "a depth-3 request was sent"
    );
    stop_idle(runtime, server).await;
}
