//! Issue 16's built-in tools through the real runtime and the scripted provider: the todo
//! list (`todowrite` / `todoread`) and `webfetch` (against a page server on 127.0.0.1).

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

/// Serves `body` as `text/html` to every request on 127.0.0.1; returns the base URL.
async fn page_server(body: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = sock.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webfetch_returns_the_page_as_markdown_to_the_model() {
    let dir = TempDir::new().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonicalize");
    let base = page_server(
        "<html><head><script>track()</script></head><body><h1>Release notes</h1><p>Version <b>2.0</b> is out.</p></body></html>",
    )
    .await;
    let script = Script::single(vec![
        Step::tool("webfetch", json!({"url": format!("{base}/notes")})),
        Step::tool("webfetch", json!({"url": "ftp://example.com/x"})),
        Step::text("read it"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let rt = start_runtime(&dir, &server.base_url()).await;
    let sid = rt.create_session(&root, None).await.expect("session").id;
    let turn = run_prompt(&rt, &sid, "what is new?").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let parts = tool_parts(&messages(&rt, &sid).await);
    let ToolState::Completed { title, output, .. } = &parts[0].1 else {
        panic!("webfetch failed: {parts:?}")
    };
    assert_eq!(title, &format!("{base}/notes (text/html; charset=utf-8)"));
    assert_eq!(output, "# Release notes\n\nVersion **2.0** is out.");
    let ToolState::Error { error, .. } = &parts[1].1 else {
        panic!("ftp was fetched: {parts:?}")
    };
    assert!(
        error.contains("must start with http:// or https://"),
        "{error}"
    );
    let reqs = completions(&server);
    let body = reqs[1].body.to_string();
    assert!(body.contains("Version **2.0** is out."), "{body}");
    assert!(!body.contains("track()"), "{body}");
}
