//! Issue 16's hooks through the real runtime and the scripted provider: commands from the
//! config's `hooks` block run at `tool.execute.before` / `after`, `shell.env`, `chat.params`,
//! `permission.asked` and `session.idle`, and a failing or slow hook is an error the model or
//! the user sees, never a silent pass.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::*;
use tempfile::TempDir;
use troupe_actors::Runtime;
use troupe_session::{SessionId, ToolState};
use troupe_testkit::{MockServer, Script, Step};

/// A hook entry running `script` with `sh -c` (the payload arrives on its stdin).
fn sh(script: &str) -> Value {
    json!({"command": ["sh", "-c", script]})
}

fn bash(command: &str) -> Step {
    Step::tool("bash", json!({"command": command, "description": "run it"}))
}

/// The mock serving `script`, a runtime over the store in `dir` whose config has the keys of
/// `config` (the `hooks` block and what a test needs besides), and a session in `root`.
async fn hooked(
    dir: &TempDir,
    root: &Path,
    script: Script,
    config: Value,
) -> (MockServer, Runtime, SessionId) {
    let server = start_mock(script).await;
    let runtime = start_runtime_config(dir, &server.base_url(), config).await;
    let sid = new_session(&runtime, root).await;
    (server, runtime, sid)
}

/// The text of every tool-result message in a request.
fn tool_results(r: &troupe_testkit::RecordedRequest) -> Vec<String> {
    request_texts(r, "tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_hooks_block_rewrite_output_and_add_shell_environment() {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        bash("rm -rf build"),
        bash("echo SECRET=hunter2"),
        bash("echo var=$HOOK_VAR"),
        Step::text("done"),
    ]);
    let mut before = sh(
        r#"p=$(cat); case "$p" in *'rm -rf'*) echo '{"block":"destructive commands need a review"}';; *) echo '{}';; esac"#,
    );
    before["tools"] = json!(["bash"]);
    let after = sh(
        r#"p=$(cat); case "$p" in *'"output":"SECRET='*) echo '{"output":"[redacted by hook]"}';; *) echo '{}';; esac"#,
    );
    let env = sh(r#"cat >/dev/null; echo '{"env":{"HOOK_VAR":"from-hook"}}'"#);
    let (server, runtime, sid) = hooked(
        &dir,
        &root,
        script,
        json!({"hooks": {
            "tool.execute.before": [before],
            "tool.execute.after": [after],
            "shell.env": [env],
        }}),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "clean up").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    assert_eq!(turn.text, "done");

    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("the blocked call ran: {parts:?}")
    };
    assert_eq!(
        error,
        "Blocked by a tool.execute.before hook: destructive commands need a review"
    );
    let ToolState::Completed { output, .. } = &parts[1].1 else {
        panic!("{parts:?}")
    };
    assert_eq!(output, "[redacted by hook]");
    let ToolState::Completed { output, .. } = &parts[2].1 else {
        panic!("{parts:?}")
    };
    assert!(output.contains("var=from-hook"), "{output}");

    // What the model saw: the block reason, the rewritten output, never the secret.
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 4);
    assert!(
        tool_results(&reqs[1])
            .iter()
            .any(|t| t.contains("destructive commands need a review")),
        "{:?}",
        tool_results(&reqs[1])
    );
    let last = tool_results(&reqs[3]);
    assert!(last.iter().any(|t| t.contains("[redacted by hook]")));
    assert!(!last.iter().any(|t| t.contains("hunter2")), "{last:?}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_times_out_blocks_and_a_failing_after_hook_withholds_the_output() {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        Step::tool("read", json!({"filePath": "notes.txt"})),
        bash("echo visible-output"),
        Step::text("done"),
    ]);
    std::fs::write(root.join("notes.txt"), "notes\n").expect("write");
    let mut slow = sh("sleep 5");
    slow["tools"] = json!(["read"]);
    slow["timeout"] = json!(200);
    let mut failing = sh("cat >/dev/null; echo 'redactor crashed' >&2; exit 4");
    failing["tools"] = json!(["bash"]);
    let (server, runtime, sid) = hooked(
        &dir,
        &root,
        script,
        json!({"hooks": {"tool.execute.before": [slow], "tool.execute.after": [failing]}}),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "look").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);

    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("the read ran past its slow hook: {parts:?}")
    };
    assert_eq!(
        error,
        "Blocked: tool.execute.before hook `sh -c sleep 5` timed out after 200 ms and was killed"
    );
    let ToolState::Error { error, .. } = &parts[1].1 else {
        panic!("the output passed a failing after hook: {parts:?}")
    };
    assert!(
        error.contains("exit code 4") && error.contains("redactor crashed"),
        "{error}"
    );
    assert!(error.ends_with("the tool's output is withheld"), "{error}");
    let reqs = requests_of(&server, &sid);
    assert!(
        !tool_results(reqs.last().unwrap())
            .iter()
            .any(|t| t.contains("visible-output"))
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_params_hook_sets_temperature_and_options_in_the_request_body() {
    let (dir, root) = scratch();
    // Two steps (a tool call, then the answer): the hooks run before each step's body is
    // built, and the second body is built incrementally like any other (debug builds check
    // it against a build from scratch).
    // Answers only for the build agent on the mock model: anything else fails the step.
    let hook = sh(
        r#"p=$(cat); case "$p" in *'"agent":"build"'*'"modelID":"mock-model"'*) echo '{"temperature":0.25,"options":{"seed":42}}';; *) echo "unexpected payload: $p" >&2; exit 1;; esac"#,
    );
    let (server, runtime, sid) = hooked(
        &dir,
        &root,
        Script::single(vec![bash("echo one"), Step::text("hi")]),
        json!({"hooks": {"chat.params": [hook]}}),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "hello").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.body["temperature"], json!(0.25));
        assert_eq!(r.body["seed"], json!(42));
    }
    assert!(
        tool_results(&reqs[1]).iter().any(|t| t.contains("one")),
        "the second body carries the first step's history"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_chat_params_hook_fails_the_turn_without_a_request() {
    let (dir, root) = scratch();
    let hook = sh("cat >/dev/null; echo 'params service down' >&2; exit 2");
    let (server, runtime, sid) = hooked(
        &dir,
        &root,
        Script::single(vec![Step::text("hi")]),
        json!({"hooks": {"chat.params": [hook]}}),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "hello").await;
    let error = turn.error.expect("the turn failed").message();
    assert!(
        error.contains("chat.params hook") && error.contains("params service down"),
        "{error}"
    );
    assert!(requests_of(&server, &sid).is_empty());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_hook_denies_and_a_broken_one_leaves_the_question_to_the_user() {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        bash("echo one"),
        Step::tool(
            "write",
            json!({"filePath": root.join("a.txt"), "content": "x"}),
        ),
        Step::text("done"),
    ]);
    // Denies bash; replies garbage for anything else (a broken hook must not allow: the
    // question goes to the user, here the test's allow-all responder).
    let hook = sh(
        r#"p=$(cat); case "$p" in *'"permission":"bash"'*) echo '{"status":"deny"}';; *) echo 'not json';; esac"#,
    );
    let (_server, runtime, sid) = hooked(
        &dir,
        &root,
        script,
        json!({
            "permission": {"bash": "ask", "edit": "ask"},
            "hooks": {"permission.asked": [hook]},
        }),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "go").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("bash ran although the hook denied it: {parts:?}")
    };
    assert!(
        error.contains("denied by a permission.asked hook"),
        "{error}"
    );
    assert!(
        matches!(&parts[1].1, ToolState::Completed { .. }),
        "{parts:?}"
    );
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "x");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_idle_hook_runs_after_the_turn_and_shutdown_waits_for_it() {
    let (dir, root) = scratch();
    // Slow enough that only a shutdown that waits sees the file.
    let hook = sh("p=$(cat); sleep 0.3; printf '%s' \"$p\" > idle.json");
    let (_server, runtime, sid) = hooked(
        &dir,
        &root,
        Script::single(vec![Step::text("hi")]),
        json!({"hooks": {"session.idle": [hook]}}),
    )
    .await;
    let turn = run_prompt(&runtime, &sid, "hello").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    runtime.shutdown().await;
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("idle.json")).expect("idle.json"))
            .expect("JSON payload");
    assert_eq!(payload, json!({"hook": "session.idle", "sessionID": sid}));
}

/// A step waiting for its `chat.params` hooks waits off the session actor's handler: an abort
/// ends the turn at once, and the hook's late answer starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_while_chat_params_hooks_run_ends_the_turn_at_once() {
    let (dir, root) = scratch();
    let hook = sh("cat >/dev/null; sleep 3; echo '{}'");
    let (server, runtime, sid) = hooked(
        &dir,
        &root,
        Script::single(vec![Step::text("never sent")]),
        json!({"hooks": {"chat.params": [hook]}}),
    )
    .await;
    let turn = spawn_turn(&runtime, &sid, prompt("hello"));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let t0 = std::time::Instant::now();
    // The abort ends the turn before the hook answers.
    abort_and_wait(&runtime, &sid, turn, std::time::Duration::from_secs(2)).await;
    assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(requests_of(&server, &sid).is_empty(), "no request was sent");
    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
    runtime.shutdown().await;
}
