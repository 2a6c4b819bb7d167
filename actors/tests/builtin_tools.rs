//! Issue 16's built-in tools through the real runtime and the scripted provider: the todo
//! list (`todowrite` / `todoread`), `webfetch` (against a page server on 127.0.0.1), `skill`
//! and `apply_patch` (offered instead of `edit`/`write` to GPT models).

mod support;

use serde_json::json;
use support::*;
use tempfile::TempDir;
use troupe_actors::PromptInput;
use troupe_session::ToolState;
use troupe_testkit::{Script, Step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todowrite_stores_publishes_and_todoread_reads_back() {
    let (dir, root) = scratch();
    let todos = json!([
        {"content": "write the parser", "status": "in_progress", "priority": "high"},
        {"content": "test it", "status": "pending", "priority": "medium"}
    ]);
    let script = Script::single(vec![
        Step::tool("todowrite", json!({"todos": todos})),
        Step::tool("todoread", json!({})),
        Step::text("planned"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let mut rx = runtime.bus().subscribe();
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "plan the work").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);

    let s = sid.clone();
    let stored = runtime
        .store()
        .read(move |r| r.todos(&s))
        .await
        .expect("todos");
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

    let parts = tool_parts(&messages(&runtime, &sid).await);
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
    let (dir, root) = scratch();
    let script = Script::single(vec![
        Step::tool(
            "todowrite",
            json!({"todos": [{"content": "x", "status": "pending", "priority": "low"}]}),
        ),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let input = PromptInput {
        text: "explore".into(),
        agent: Some("explore".into()),
        ..Default::default()
    };
    let turn = run_input(&runtime, &sid, input).await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let first = &server.requests()[0];
    let offered = first.offered_tools();
    assert!(!offered.is_empty());
    assert!(!offered.iter().any(|t| t == "todowrite"), "{offered:?}");
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Error { error, .. } = &parts[0].1 else {
        panic!("todowrite ran for a subagent: {parts:?}")
    };
    assert!(error.contains("not available to this agent"), "{error}");
    let s = sid.clone();
    assert!(
        runtime
            .store()
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
    let (dir, root) = scratch();
    let base = page_server(
        "<html><head><script>track()</script></head><body><h1>Release notes</h1><p>Version <b>2.0</b> is out.</p></body></html>",
    )
    .await;
    let script = Script::single(vec![
        Step::tool("webfetch", json!({"url": format!("{base}/notes")})),
        Step::tool("webfetch", json!({"url": "ftp://example.com/x"})),
        Step::text("read it"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "what is new?").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let parts = tool_parts(&messages(&runtime, &sid).await);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_listed_loaded_on_demand_and_permission_checked() {
    let (dir, root) = scratch();
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        ".troupe/skills/release/SKILL.md",
        "---\nname: release\ndescription: Cut a release of this project\n---\nBump the version, then tag it v<version>.\n",
    );
    write(
        ".claude/skills/secret-keys/SKILL.md",
        "---\nname: secret-keys\ndescription: Rotate the signing keys\n---\nNever shown.\n",
    );
    write(".agents/skills/broken/SKILL.md", "no front matter here\n");
    let global = TempDir::new().expect("tempdir");
    let gwrite = |rel: &str, text: &str| {
        let p = global.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    gwrite(
        "skills/notes/SKILL.md",
        "---\nname: notes\ndescription: Keep release notes\n---\nGlobal.\n",
    );
    // The project's `release` wins over the global one.
    gwrite(
        "skills/release/SKILL.md",
        "---\nname: release\ndescription: global release\n---\nGlobal release.\n",
    );
    let script = Script::single(vec![
        Step::tool("skill", json!({"name": "release"})),
        Step::tool("skill", json!({"name": "secret-keys"})),
        Step::tool("skill", json!({"name": "nope"})),
        Step::text("released"),
    ]);
    let server = start_mock(script).await;
    let mut fx = Fixture::new(&server.base_url());
    fx.config = config_with(
        &server.base_url(),
        json!({"permission": {"skill": {"*": "allow", "secret-*": "deny"}}}),
    );
    fx.registry
        .register(std::sync::Arc::new(troupe_actors::skill::SkillTool::new(
            global.path().to_path_buf(),
        )));
    let runtime = fx.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "cut a release").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);

    let reqs = completions(&server);
    let skill = reqs[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["function"]["name"] == "skill")
        .expect("skill offered")
        .clone();
    let desc = skill["function"]["description"].as_str().unwrap();
    assert!(
        desc.contains("<available_skills>\n- notes: Keep release notes\n- release: Cut a release of this project\n</available_skills>"),
        "{desc}"
    );
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Completed { title, output, .. } = &parts[0].1 else {
        panic!("skill failed: {parts:?}")
    };
    assert_eq!(title, "Loaded skill: release");
    assert!(
        output.starts_with("<skill_content name=\"release\">\n# Skill: release\n\nBump the version, then tag it v<version>."),
        "{output}"
    );
    assert!(
        reqs[1].body.to_string().contains("Bump the version"),
        "the skill reached the model"
    );
    let ToolState::Error { error, .. } = &parts[1].1 else {
        panic!("a denied skill loaded: {parts:?}")
    };
    assert!(error.contains("secret-*"), "{error}");
    let ToolState::Error { error, .. } = &parts[2].1 else {
        panic!("an unknown skill loaded: {parts:?}")
    };
    assert!(
        error.starts_with(
            "Skill \"nope\" not found. Available skills: notes, release, secret-keys.\nSkipped "
        ) && error.contains(".agents/skills/broken/SKILL.md: no front matter"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpt_models_get_apply_patch_instead_of_edit_and_write() {
    let (dir, root) = scratch();
    std::fs::write(root.join("app.py"), "def answer():\n    return 41\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: app.py\n@@ def answer():\n-    return 41\n+    return 42\n*** Add File: README.md\n+# App\n*** End Patch";
    let script = Script::single(vec![
        Step::tool("apply_patch", json!({"patchText": patch})),
        Step::tool(
            "edit",
            json!({"filePath": "app.py", "oldString": "42", "newString": "43"}),
        ),
        Step::text("patched"),
        Step::text("plain model"),
    ]);
    let server = start_mock(script).await;
    let base = server.base_url();
    let mut fx = Fixture::new(&base);
    fx.config = config_with(
        &base,
        json!({
            "model": "mock/gpt-5",
            "provider": {"mock": {
                "name": "Mock",
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base, "apiKey": "test"},
                "models": {
                    "gpt-5": {"name": "GPT", "limit": {"context": 128000, "output": 8192}},
                    "mock-model": {"name": "Mock", "limit": {"context": 128000, "output": 8192}}
                }
            }}
        }),
    );
    let runtime = fx.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "fix the answer").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let reqs = completions(&server);
    let tools = reqs[0].offered_tools();
    assert!(tools.iter().any(|t| t == "apply_patch"), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t == "edit" || t == "write"),
        "{tools:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("app.py")).unwrap(),
        "def answer():\n    return 42\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "# App\n"
    );
    let parts = tool_parts(&messages(&runtime, &sid).await);
    let ToolState::Completed { title, output, .. } = &parts[0].1 else {
        panic!("apply_patch failed: {parts:?}")
    };
    assert_eq!(title, "2 files");
    assert_eq!(
        output,
        "Success. Updated the following files:\nM app.py\nA README.md"
    );
    assert!(
        reqs[1]
            .body
            .to_string()
            .contains("Success. Updated the following files")
    );
    // edit is not offered to this model, so its call fails and changes nothing.
    let ToolState::Error { error, .. } = &parts[1].1 else {
        panic!("edit ran for a GPT model: {parts:?}")
    };
    assert!(error.contains("not available"), "{error}");

    // Another model is offered edit and write, not apply_patch.
    let input = PromptInput {
        text: "again".into(),
        model: Some("mock/mock-model".into()),
        ..Default::default()
    };
    let turn = run_input(&runtime, &sid, input).await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let tools = completions(&server)
        .last()
        .expect("request")
        .offered_tools();
    assert!(
        tools.iter().any(|t| t == "edit") && tools.iter().any(|t| t == "write"),
        "{tools:?}"
    );
    assert!(!tools.iter().any(|t| t == "apply_patch"), "{tools:?}");
}

/// A call to a tool that does not exist is answered with the tools this step offered — not
/// every registered one (the trial saw `invalid`, `apply_patch` for a non-GPT model and
/// `question` in a run that cannot ask).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_answered_with_the_tools_the_step_offered() {
    let (dir, root) = scratch();
    let script = Script::single(vec![
        Step::tool("reed", json!({"filePath": "x"})),
        Step::text("sorry"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "read x").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let offered = completions(&server)[0].offered_tools();
    for hidden in ["invalid", "apply_patch", "question"] {
        assert!(!offered.iter().any(|t| t == hidden), "{offered:?}");
    }
    let parts = tool_parts(&messages(&runtime, &sid).await);
    match &parts[0].1 {
        ToolState::Error { error, .. } => assert_eq!(
            error,
            &format!(
                "Unknown tool 'reed'. Available tools: {}.",
                offered.join(", ")
            )
        ),
        other => panic!("{other:?}"),
    }
    runtime.shutdown().await;
    server.shutdown().await;
}

/// Trial on main: under the default rules (`read`: `*.env` ask) `grep {pattern: "SECRETVAL"}`
/// sent `.env: Line 1: SECRETVAL=1` to the model unasked. Through the real runtime (the turn's
/// rules, `TurnPermissions::allowed`) the guarded files are left out and named, nothing is
/// asked for them, and their lines never reach the provider; `read .env` still asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_leaves_out_files_the_read_rules_guard() {
    let (dir, root) = scratch();
    std::fs::write(root.join(".env"), "SECRETVAL=1\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/.env"), "SECRETVAL=2\n").unwrap();
    std::fs::write(root.join("notes.txt"), "see SECRETVAL in the docs\n").unwrap();
    let script = Script::single(vec![
        Step::tool("grep", json!({"pattern": "SECRETVAL"})),
        Step::tool("grep", json!({"pattern": "SECRETVAL", "include": "*"})),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let rt = start_runtime(&dir, &server.base_url()).await;
    let mut rx = rt.bus().subscribe();
    let sid = new_session(&rt, &root).await;
    let turn = run_prompt(&rt, &sid, "find the secret").await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    let parts = tool_parts(&messages(&rt, &sid).await);
    assert_eq!(parts.len(), 2, "{parts:?}");
    for (_, state) in &parts {
        let ToolState::Completed { output, .. } = state else {
            panic!("grep failed: {state:?}")
        };
        assert!(output.starts_with("Found 1 matches"), "{output}");
        assert!(
            output.contains("Line 1: see SECRETVAL in the docs"),
            "{output}"
        );
        assert!(
            output.contains("(2 matching files were left out because the read rules"),
            "{output}"
        );
        assert!(output.contains(&root.join("sub/.env").display().to_string()));
    }
    for req in server.requests() {
        let body = req.body.to_string();
        assert!(
            !body.contains("SECRETVAL=1") && !body.contains("SECRETVAL=2"),
            "{body}"
        );
    }
    while let Ok(ev) = rx.try_recv() {
        assert_ne!(
            ev.type_name(),
            "permission.asked",
            "grep asked for permission"
        );
    }
}
