//! `PromptInput::once` (a cluster task delivered again): a session that already holds its
//! prompt is resumed from the store, never asked twice.

mod support;

use serde_json::json;
use support::*;
use tempfile::TempDir;
use troupe_actors::PromptInput;
use troupe_session::Message;
use troupe_testkit::{Conversation, Script, Step};

fn users(history: &[troupe_session::MessageWithParts]) -> usize {
    history
        .iter()
        .filter(|m| matches!(m.info, Message::User(_)))
        .count()
}

fn once(text: &str, max_steps: Option<u32>) -> PromptInput {
    PromptInput {
        text: text.into(),
        once: true,
        max_steps,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_delivered_again_resumes_the_stored_turn_or_returns_its_result() {
    let server = start_mock(Script::new(vec![Conversation::new(vec![
        Step::tool("test_sleep", json!({"ms": 1})),
        Step::text("the answer"),
    ])]))
    .await;
    let dir = TempDir::new().unwrap();
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, dir.path()).await;

    // The first delivery stores the prompt; its turn stops after one step (a worker that
    // went away after its first step leaves the same history).
    let first = runtime
        .prompt(&sid, once("the task", Some(1)))
        .await
        .unwrap();
    assert!(first.error.is_some(), "stopped at its step limit");
    assert_eq!(users(&messages(&runtime, &sid).await), 1);
    assert_eq!(completions(&server).len(), 1);

    // The second delivery stores nothing and goes on from the store: one more step.
    let second = runtime.prompt(&sid, once("the task", None)).await.unwrap();
    assert_eq!(second.error, None);
    assert_eq!(second.text, "the answer");
    let history = messages(&runtime, &sid).await;
    assert_eq!(users(&history), 1, "the prompt is stored once");
    assert_eq!(completions(&server).len(), 2);

    // A third delivery of a finished task returns its result without a step.
    let third = runtime.prompt(&sid, once("the task", None)).await.unwrap();
    assert_eq!(third.text, "the answer");
    assert_eq!(third.error, None);
    assert_eq!(completions(&server).len(), 2, "no new request");
    assert_eq!(messages(&runtime, &sid).await.len(), history.len());

    // Without `once`, the same text is a new prompt.
    let fourth = runtime.prompt(&sid, prompt("the task")).await.unwrap();
    assert_eq!(users(&messages(&runtime, &sid).await), 2);
    assert_eq!(fourth.session_id, sid);
    runtime.shutdown().await;
}
