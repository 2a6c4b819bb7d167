//! Issue 11: a user's plain "reject" (no feedback) stops the turn, as OpenCode's
//! `RejectedError` does; a reject with feedback sends the feedback to the model and the turn
//! goes on. Runs the real runtime against the scripted provider with a responder that answers
//! every ask.

mod support;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;
use support::*;
use troupe_session::ToolState;
use troupe_testkit::{Script, Step};
use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest, Registry};

/// Answers every ask with a fixed reply.
struct Answer(PermissionReply);

impl PermissionAsker for Answer {
    fn ask(&self, _req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        let r = self.0.clone();
        Box::pin(async move { r })
    }
}

/// Runs one turn whose model calls `bash ls` and would then answer "after"; returns the
/// number of model requests and the bash part's error.
async fn turn_with(reply: PermissionReply) -> (usize, String) {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        Step::tool("bash", json!({"command": "ls", "description": "list"})),
        Step::text("after"),
    ]);
    let server = start_mock(script).await;
    let mut f = Fixture::new(&server.base_url());
    f.config = config_with(&server.base_url(), json!({"permission": {"bash": "ask"}}));
    f.registry = Registry::builtin();
    f.responder = Arc::new(Answer(reply));
    let runtime = f.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    run_prompt(&runtime, &sid, "list").await;
    let error = tool_parts(&messages(&runtime, &sid).await)
        .into_iter()
        .find_map(|(_, state)| match state {
            ToolState::Error { error, .. } => Some(error),
            _ => None,
        })
        .expect("the bash part failed");
    let n = server.requests().len();
    server.shutdown().await;
    (n, error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_reject_stops_the_turn() {
    let (requests, error) = turn_with(PermissionReply::Reject(String::new())).await;
    assert!(error.contains("The user rejected permission"), "{error}");
    assert_eq!(
        requests, 1,
        "the model was asked again after a plain reject"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_with_feedback_goes_on() {
    let (requests, error) = turn_with(PermissionReply::Deny(
        "The user rejected this call and said: use dir".into(),
    ))
    .await;
    assert!(error.contains("use dir"), "{error}");
    assert_eq!(requests, 2, "the feedback did not reach the model");
}

/// Never answers: only a person (`Runtime::reply_permission`) does.
struct Nobody;

impl PermissionAsker for Nobody {
    fn ask(&self, _req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        Box::pin(std::future::pending())
    }
}

/// A permission ask waits for its person past the tool timeout: the timeout is a safety net
/// for hung tools, so the call's clock stands still while it waits, and the approved call
/// then runs and completes. (Before, the call timed out while the person was reading.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_ask_outwaits_the_tool_timeout() {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        Step::tool(
            "write",
            json!({"filePath": "approved.txt", "content": "written after approval"}),
        ),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let mut f = Fixture::new(&server.base_url());
    f.config = config_with(&server.base_url(), json!({"permission": {"edit": "ask"}}));
    f.responder = Arc::new(Nobody);
    f.opts.tool_timeout = std::time::Duration::from_millis(400);
    let runtime = f.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let turn = spawn_prompt(&runtime, &sid, "write it");
    let mut pending = None;
    wait_until("a pending permission ask", || {
        pending = runtime.pending_permissions().into_iter().next();
        pending.is_some()
    })
    .await;
    let ask = pending.expect("ask");
    // Five tool timeouts pass while nobody answers.
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    assert!(
        !turn.is_finished(),
        "the turn ended while its permission ask waited"
    );
    assert!(
        runtime.reply_permission(
            ask["id"].as_str().expect("id"),
            troupe_actors::permission::Reply::Once
        ),
        "the ask was no longer pending after the tool timeout: {ask}"
    );
    let turn = turn.await.expect("turn task");
    assert!(turn.error.is_none(), "{:?}", turn.error);
    assert_eq!(turn.text, "done");
    let parts = tool_parts(&messages(&runtime, &sid).await);
    assert!(
        matches!(&parts[0].1, ToolState::Completed { .. }),
        "{parts:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("approved.txt")).expect("file"),
        "written after approval"
    );
    runtime.shutdown().await;
    server.shutdown().await;
}
