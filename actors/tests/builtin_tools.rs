//! Issue 16's built-in tools through the real runtime and the scripted provider: the todo
//! list (`todowrite` / `todoread`) and structured output at the runtime level.

mod support;

use serde_json::json;
use support::*;
use tempfile::TempDir;
use troupe_actors::PromptInput;
use troupe_session::ToolState;
use troupe_testkit::{MockServer, Script, Step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todowrite_stores_publishes_and_todoread_reads_back() {
    let dir = TempDir::new().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonicalize");
    let todos = json!([
        {"content": "write the parser", "status": "in_progress", "priority": "high"},
        {"content": "test it", "status": "pending", "priority": "medium"}
    ]);
    let script = Script::single(vec![
        Step::tool("todowrite", json!({"todos": todos})),
        Step::tool("todoread", json!({})),
        Step::text("planned"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let rt = start_runtime(&dir, &server.base_url()).await;
    let mut rx = rt.bus().subscribe();
    let sid = rt.create_session(&root, None).await.expect("session").id;
    let turn = run_prompt(&rt, &sid, "plan the work").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);

    let s = sid.clone();
    let stored = rt.store().read(move |r| r.todos(&s)).await.expect("todos");
    assert_eq!(serde_json::to_value(&stored).unwrap(), todos);
    let mut published = None;
    while let Ok(ev) = rx.try_recv() {
        if ev.type_name() == "todo.updated" {
            published = Some(serde_json::to_value(&*ev).unwrap());
        }
    }
    let published = published.expect("a todo.updated event");
    assert_eq!(published["properties"]["sessionID"], sid.as_str());
    assert_eq!(published["properties"]["todos"], todos);

    let parts = tool_parts(&messages(&rt, &sid).await);
    let ToolState::Completed { title, output, .. } = &parts[1].1 else {
        panic!("todoread failed: {parts:?}")
    };
    assert_eq!(title, "2 todos");
    let read: serde_json::Value = serde_json::from_str(output).expect("JSON output");
    assert_eq!(read, todos);
    // The list reached the model as the tool result.
    let reqs = server.requests();
    let last = reqs.last().expect("requests");
    assert!(last.body.to_string().contains("write the parser"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagents_are_denied_todowrite_by_default() {
    let dir = TempDir::new().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonicalize");
    let script = Script::single(vec![
        Step::tool(
            "todowrite",
            json!({"todos": [{"content": "x", "status": "pending", "priority": "low"}]}),
        ),
        Step::text("done"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let rt = start_runtime(&dir, &server.base_url()).await;
    let sid = rt.create_session(&root, None).await.expect("session").id;
    let input = PromptInput {
        text: "explore".into(),
        agent: Some("explore".into()),
        ..Default::default()
    };
    let turn = tokio::time::timeout(DEADLINE, rt.prompt(&sid, input))
        .await
        .expect("in time")
        .expect("ran");
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let first = &server.requests()[0];
    let offered: Vec<&str> = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(!offered.contains(&"todowrite"), "{offered:?}");
    let parts = tool_parts(&messages(&rt, &sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("todowrite ran for a subagent: {parts:?}")
    };
    assert!(error.contains("not available to this agent"), "{error}");
    let s = sid.clone();
    assert!(
        rt.store()
            .read(move |r| r.todos(&s))
            .await
            .unwrap()
            .is_empty()
    );
}
