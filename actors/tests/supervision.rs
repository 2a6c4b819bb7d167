//! Issue 14: supervision by role. A crashed read-only tool call runs again with the same
//! input (within `supervision.tool_restarts`), a crashed side-effecting call is never run
//! again, the workers appear in the supervision tree while they run, restart and failure
//! counters move per node and per role, and a session whose permission ruleset does not
//! decode refuses to run. Runs the real runtime against the scripted provider.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use troupe_session::SessionId;

use serde_json::json;
use support::*;
use tempfile::TempDir;
use troupe_actors::tree::{ActorNode, Kind};
use troupe_actors::{Runtime, TurnResult};
use troupe_session::{SessionPermission, ToolState, Write};
use troupe_testkit::{Conversation, MockServer, Script, Step};
use troupe_tools::{Registry, Tool};

/// A tool `name` that panics on its first `crashes` runs, then succeeds; and the count of its
/// runs.
fn flaky(name: &'static str, crashes: usize) -> (Arc<dyn Tool>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tool = FnTool::new(name, "Test tool: panics on its first runs.", move |_, _| {
        let run = counted.fetch_add(1, Ordering::SeqCst);
        let crash = run < crashes;
        Box::pin(async move {
            if crash {
                panic!("injected crash {run}");
            }
            Ok(output("ok", format!("ran after {run} crashes")))
        })
    });
    (Arc::new(tool), runs)
}

/// A runtime whose registry has `tool` and whose `supervision` block lists `flaky_read` as
/// read-only, with a 1 ms backoff.
async fn runtime_with(dir: &TempDir, server: &MockServer, tool: Arc<dyn Tool>) -> Runtime {
    let mut f = Fixture::new(&server.base_url());
    f.config = config_with(
        &server.base_url(),
        json!({"supervision": {"read_only_tools": ["flaky_read"], "backoff_ms": 1}}),
    );
    let mut registry = Registry::builtin();
    registry.register(tool);
    f.registry = registry;
    f.start(dir).await
}

/// One finished turn of a model that calls the flaky tool `name` once (no arguments) and then
/// answers "done", on a runtime from [`runtime_with`].
struct FlakyTurn {
    /// Keep the store's directory and the mock alive for the test.
    _dir: TempDir,
    _server: MockServer,
    runtime: Runtime,
    sid: SessionId,
    r: TurnResult,
    /// How many times the tool ran.
    runs: Arc<AtomicUsize>,
}

impl FlakyTurn {
    /// How many times the tool ran so far.
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// The session's tool parts (name, state), in order.
    async fn tool_parts(&self) -> Vec<(String, ToolState)> {
        tool_parts(&messages(&self.runtime, &self.sid).await)
    }
}

/// Runs the turn of [`FlakyTurn`] with a tool that crashes its first `crashes` runs.
async fn flaky_turn(name: &'static str, crashes: usize) -> FlakyTurn {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![
        Step::tool(name, json!({})),
        Step::text("done"),
    ]))
    .await;
    let (tool, runs) = flaky(name, crashes);
    let runtime = runtime_with(&dir, &server, tool).await;
    let sid = new_session(&runtime, &root).await;
    let r = run_prompt(&runtime, &sid, "go").await;
    FlakyTurn {
        _dir: dir,
        _server: server,
        runtime,
        sid,
        r,
        runs,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tool_that_crashed_once_is_rerun_and_completes() {
    let turn = flaky_turn("flaky_read", 1).await;
    let FlakyTurn { runtime, r, .. } = &turn;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.text, "done");
    assert_eq!(turn.runs(), 2, "one crash, one good run");
    let parts = turn.tool_parts().await;
    assert_eq!(parts.len(), 1);
    match &parts[0].1 {
        ToolState::Completed { output, .. } => assert_eq!(output, "ran after 1 crashes"),
        other => panic!("expected a completed part, got {other:?}"),
    }
    assert_eq!(role_counts(runtime, "read_only_tool"), (1, 1));
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
    // The runtime node counts the steps of the sessions it ran though they stopped (it
    // once summed its live children only and said 0 while /metrics said 2).
    let tree = runtime.actors();
    assert!(tree.children.is_empty(), "{tree:?}");
    assert_eq!(tree.steps, 2);
    // No session is live: the runtime returns the freed heap to the kernel, once (not again
    // every interval while it stays idle).
    let trims = || runtime.shared().idle_trim.trims.load(Ordering::Relaxed);
    wait_until("the idle trim", || trims() == 1).await;
    tokio::time::sleep(troupe_actors::memory::TRIM_INTERVAL * 2).await;
    assert_eq!(trims(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tool_that_keeps_crashing_gives_up_at_the_limit() {
    let turn = flaky_turn("flaky_read", usize::MAX).await;
    let FlakyTurn { runtime, r, .. } = &turn;
    assert!(
        r.error.is_none(),
        "a crashed tool is an error part, not a failed turn"
    );
    // Default limit: 2 restarts, so 3 runs.
    assert_eq!(turn.runs(), 3);
    let parts = turn.tool_parts().await;
    match &parts[0].1 {
        ToolState::Error { error, .. } => {
            assert!(error.contains("crashed 3 times"), "{error}");
            assert!(error.contains("injected crash 2"), "{error}");
        }
        other => panic!("expected an error part, got {other:?}"),
    }
    assert_eq!(role_counts(runtime, "read_only_tool"), (3, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_effecting_tool_that_crashed_is_never_rerun() {
    let turn = flaky_turn("flaky_write", 1).await;
    let FlakyTurn { runtime, r, .. } = &turn;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(turn.runs(), 1, "ran exactly once");
    let parts = turn.tool_parts().await;
    match &parts[0].1 {
        ToolState::Error {
            error, metadata, ..
        } => {
            assert!(error.contains("outcome is unknown"), "{error}");
            assert_eq!(metadata.as_ref().unwrap()["outcome"], "unknown");
        }
        other => panic!("expected an error part, got {other:?}"),
    }
    assert_eq!(role_counts(runtime, "side_effect_tool"), (1, 0));
}

/// The (failures, restarts) the runtime counted for actors of `role`.
fn role_counts(runtime: &Runtime, role: &str) -> (u64, u64) {
    let labels = format!("role=\"{role}\"");
    (
        labeled(runtime, "actor_failures_total", &labels),
        labeled(runtime, "actor_restarts_total", &labels),
    )
}

fn find(n: &ActorNode, kind: Kind) -> Option<&ActorNode> {
    if n.kind == kind {
        return Some(n);
    }
    n.children.iter().find_map(|c| find(c, kind))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn title_and_compaction_workers_appear_in_the_tree_while_they_run() {
    let (dir, root) = scratch();
    // The title and the summary answer slowly, so the workers are seen while they run; the
    // first step reports usage past the 4k context, which starts a compaction.
    let over = troupe_testkit::UsageSpec {
        prompt_tokens: Some(3_900),
        completion_tokens: Some(10),
        ..Default::default()
    };
    let server = start_mock(Script::new(vec![
        Conversation::new(vec![Step::text("A title").with_first_byte_delay_ms(1_500)])
            .matching_system("You write a title"),
        // Step i answers a request with i assistant messages: the summary request carries
        // the overflowing answer.
        Conversation::new(vec![
            Step::text("unused"),
            Step::text("## Goal\nsummary").with_first_byte_delay_ms(1_500),
        ])
        .matching_system("You are summarising a coding conversation"),
        Conversation::new(vec![Step::text("big answer").with_usage(over)]),
    ]))
    .await;
    let mut f = Fixture::new(&server.base_url());
    f.config = config_limited(&server.base_url(), 4096, 512, json!({}));
    f.opts.titles = true;
    let runtime = f.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_turn(&runtime, &sid, prompt("make it big"));
    let mut seen_title = None;
    let mut seen_compaction = None;
    wait_until("the title and compaction workers in the tree", || {
        let tree = runtime.actors();
        if seen_title.is_none() {
            seen_title = find(&tree, Kind::Title).cloned();
        }
        if seen_compaction.is_none() {
            seen_compaction = find(&tree, Kind::Compaction).cloned();
        }
        (seen_title.is_some() && seen_compaction.is_some()) || turn.is_finished()
    })
    .await;
    assert!(
        seen_title.is_some() && seen_compaction.is_some(),
        "title seen: {}, compaction seen: {}; turn: {:?}",
        seen_title.is_some(),
        seen_compaction.is_some(),
        turn.await
    );
    let title = seen_title.unwrap();
    assert_eq!(title.session_id.as_deref(), Some(sid.as_str()));
    assert_eq!(title.status.to_string(), "busy");
    let compaction = seen_compaction.unwrap();
    assert_eq!(compaction.session_id.as_deref(), Some(sid.as_str()));
    let r = join_turn(turn, DEADLINE, "the turn").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    wait_until("the workers to end", || runtime.live_actors() == 0).await;
    assert!(find(&runtime.actors(), Kind::Title).is_none());
    assert!(find(&runtime.actors(), Kind::Compaction).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_ruleset_that_does_not_decode_fails_the_turn() {
    an_undecodable_ruleset_fails_the_turn(false).await;
}

/// A subagent session's stored ruleset is its restriction: one that does not decode fails its
/// turn instead of running the subagent with its agent's wider rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_ruleset_that_does_not_decode_fails_the_turn() {
    an_undecodable_ruleset_fails_the_turn(true).await;
}

async fn an_undecodable_ruleset_fails_the_turn(subagent: bool) {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![Step::text("should not run")])).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let parent = if subagent {
        Some(new_session(&runtime, &root).await)
    } else {
        None
    };
    let mut s = runtime.create_session(&root, parent).await.unwrap();
    s.permission = Some(SessionPermission::from_value(json!("not a ruleset")));
    runtime.store().write1(Write::Session {
        info: s.clone(),
        created: false,
    });
    runtime.store().flush().await.unwrap();
    let err = tokio::time::timeout(DEADLINE, runtime.prompt(&s.id, prompt("hi")))
        .await
        .unwrap()
        .expect_err("the turn must not run without the session's restrictions");
    assert!(
        err.to_string()
            .contains("permission ruleset that does not decode"),
        "{err}"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.path.ends_with("/chat/completions")),
        "no request went to the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patching_rules_onto_a_ruleset_that_does_not_decode_fails_and_keeps_it() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![Step::text("unused")])).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let mut s = runtime.create_session(&root, None).await.unwrap();
    s.permission = Some(SessionPermission::from_value(json!({"bash": "deny"})));
    runtime.store().write1(Write::Session {
        info: s.clone(),
        created: false,
    });
    runtime.store().flush().await.unwrap();
    let extra: troupe_agents::Ruleset =
        serde_json::from_value(json!([{"permission": "read", "pattern": "*", "action": "allow"}]))
            .unwrap();
    let err = runtime
        .update_session(
            &s.id,
            troupe_actors::SessionPatch {
                title: Some("renamed".into()),
                permission: Some(extra),
            },
        )
        .await
        .expect_err("merging onto an unreadable ruleset would drop its restrictions");
    assert!(err.to_string().contains("does not decode"), "{err}");
    let id = s.id.clone();
    let stored = runtime
        .store()
        .read(move |r| r.session(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        serde_json::to_value(&stored.permission).unwrap(),
        json!({"bash": "deny"}),
        "the unreadable value is kept verbatim"
    );
    assert_eq!(
        stored.title, s.title,
        "nothing of a refused patch is applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_step_is_retried_once_from_the_committed_history() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![Step::text("the answer")])).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    runtime.inject_faults(once_at(troupe_actors::faults::FaultPoint::ProcessorEvent));
    let sid = new_session(&runtime, &root).await;
    let r = run_prompt(&runtime, &sid, "go").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.text, "the answer");
    let history = messages(&runtime, &sid).await;
    // The crashed step stays stored with its error; the retry answered.
    let errors: Vec<String> = history
        .iter()
        .filter_map(|m| match &m.info {
            troupe_session::Message::Assistant(a) => a.error.as_ref().map(|e| e.message()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("the step crashed"), "{errors:?}");
    assert_eq!(role_counts(&runtime, "processor"), (1, 1));
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
}

/// A crashed step's backoff is a timer, not a wait in the session actor's handler: the actor
/// answers meanwhile, and an abort ends the turn at once instead of after the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_actor_answers_during_a_step_retry_backoff_and_an_abort_ends_it() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![Step::text("never sent")])).await;
    let mut f = Fixture::new(&server.base_url());
    f.config = config_with(
        &server.base_url(),
        json!({"supervision": {"backoff_ms": 4000}}),
    );
    let runtime = f.start(&dir).await;
    runtime.inject_faults(once_at(troupe_actors::faults::FaultPoint::ProcessorEvent));
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_turn(&runtime, &sid, prompt("go"));
    wait_until("the step to crash", || {
        labeled(&runtime, "actor_restarts_total", "role=\"processor\"") == 1
    })
    .await;
    let t0 = std::time::Instant::now();
    let s = runtime
        .update_session(
            &sid,
            troupe_actors::SessionPatch {
                title: Some("renamed during the backoff".into()),
                permission: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(s.title, "renamed during the backoff");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "the actor answered within the 4 s backoff ({:?})",
        t0.elapsed()
    );
    // The abort ends the turn before the backoff is over.
    abort_and_wait(&runtime, &sid, turn, Duration::from_secs(2)).await;
    // The timer fires later and finds no turn: nothing starts.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert_eq!(completions(&server).len(), 1, "the retried step never ran");
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_session_actor_is_restarted_and_its_turn_goes_on() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![
        Step::tool("flaky_write", json!({})),
        Step::text("finished after the restart"),
    ]))
    .await;
    let (tool, runs) = flaky("flaky_write", 0);
    let runtime = runtime_with(&dir, &server, tool).await;
    // The session actor crashes as it takes the first finished step (the tool already ran).
    runtime.inject_faults(once_at(troupe_actors::faults::FaultPoint::SessionStep));
    let sid = new_session(&runtime, &root).await;
    let r = run_prompt(&runtime, &sid, "go").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.text, "finished after the restart");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool did not run again");
    let history = messages(&runtime, &sid).await;
    let users = history
        .iter()
        .filter(|m| matches!(m.info, troupe_session::Message::User(_)))
        .count();
    assert_eq!(users, 1, "the resumed turn added no user message");
    assert_eq!(role_counts(&runtime, "session"), (1, 1));
    let tree = runtime.actors();
    assert_eq!((tree.failures, tree.restarts), (1, 1));
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
}

/// A subagent session is supervised like a root one: its actor crashing during its turn is
/// restarted from the store and the turn goes on, so the parent's task call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_subagent_session_is_restarted_and_the_task_completes() {
    let (dir, root) = scratch();
    let server = start_mock(Script::new(vec![
        Conversation::new(vec![
            Step::tool("flaky_write", json!({})),
            Step::text("child finished after the restart"),
        ])
        .matching("CHILD-JOB"),
        Conversation::new(vec![
            Step::tool(
                "task",
                json!({"description": "job", "prompt": "CHILD-JOB: do it", "subagent_type": "general"}),
            ),
            Step::text("parent done"),
        ]),
    ])).await;
    let (tool, runs) = flaky("flaky_write", 0);
    let runtime = runtime_with(&dir, &server, tool).await;
    let sid = new_session(&runtime, &root).await;
    // Only the child's actor crashes, once, as it takes its first finished step.
    runtime.inject_faults(child_step_crash_once(&sid));
    let r = run_prompt(&runtime, &sid, "delegate").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.text, "parent done");
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let task = parts
        .iter()
        .find(|(t, _)| t == "task")
        .expect("a task part");
    match &task.1 {
        ToolState::Completed { output, .. } => {
            assert!(
                output.contains("child finished after the restart"),
                "{output}"
            )
        }
        other => panic!("the task call did not complete: {other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the child's tool did not run again"
    );
    assert_eq!(role_counts(&runtime, "session"), (1, 1));
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_keeps_crashing_fails_with_the_cause() {
    let (dir, root) = scratch();
    // Every step calls a tool, so each restarted turn runs one more step and crashes again.
    let mut steps: Vec<Step> = (0..6)
        .map(|_| Step::tool("flaky_write", json!({})))
        .collect();
    steps.push(Step::text("never reached"));
    let server = start_mock(Script::single(steps)).await;
    let (tool, runs) = flaky("flaky_write", 0);
    // Default limit: 3 restarts within the period.
    let runtime = runtime_with(&dir, &server, tool).await;
    runtime.inject_faults(Arc::new(|p, _| {
        p == troupe_actors::faults::FaultPoint::SessionStep
    }));
    let sid = new_session(&runtime, &root).await;
    let err = tokio::time::timeout(DEADLINE, runtime.prompt(&sid, prompt("go")))
        .await
        .unwrap()
        .expect_err("the session fails past its restart limit");
    let msg = err.to_string();
    assert!(msg.contains("crashed 4 times"), "{msg}");
    assert!(msg.contains("injected fault"), "{msg}");
    assert_eq!(
        labeled(&runtime, "actor_restarts_total", "role=\"session\""),
        3
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        4,
        "one tool run per step, none repeated"
    );
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_changed_files_gets_a_summary_from_the_summary_worker() {
    let (dir, root) = scratch();
    let file = root.join("notes.txt");
    // The summary request carries the turn (two assistant messages): its step 2 answers,
    // slowly, so the worker is seen in the tree.
    let server = start_mock(Script::new(vec![
        Conversation::new(vec![
            Step::text("unused"),
            Step::text("unused"),
            Step::text("I wrote notes.txt.\nIt holds the notes.").with_first_byte_delay_ms(1_500),
        ])
        .matching_system("Summarise what was done"),
        Conversation::new(vec![
            Step::tool(
                "write",
                json!({"filePath": file.display().to_string(), "content": "notes"}),
            ),
            Step::text("wrote it"),
        ]),
    ]))
    .await;
    let mut f = Fixture::new(&server.base_url());
    f.opts.summaries = true;
    let runtime = f.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let r = run_prompt(&runtime, &sid, "write the notes").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "notes");
    let mut seen = None;
    wait_until("the summary worker in the tree", || {
        seen = find(&runtime.actors(), Kind::Summary).cloned();
        seen.is_some()
    })
    .await;
    assert_eq!(seen.unwrap().session_id.as_deref(), Some(sid.as_str()));
    wait_until("the summary worker to end", || runtime.live_actors() == 0).await;
    let history = messages(&runtime, &sid).await;
    let summary = match &history[0].info {
        troupe_session::Message::User(u) => u.summary.clone(),
        other => panic!("{other:?}"),
    }
    .expect("a summary on the turn's user message");
    assert!(
        summary.title.starts_with("I wrote notes.txt"),
        "{summary:?}"
    );
    assert_eq!(summary.body, "I wrote notes.txt.\nIt holds the notes.");
    // A turn that changed nothing gets none.
    let r = run_prompt(&runtime, &sid, "thanks").await;
    assert!(r.error.is_none());
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
    let history = messages(&runtime, &sid).await;
    let last_user = history
        .iter()
        .rev()
        .find_map(|m| match &m.info {
            troupe_session::Message::User(u) => Some(u.clone()),
            _ => None,
        })
        .unwrap();
    assert!(last_user.summary.is_none());
}
