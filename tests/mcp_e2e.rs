//! End-to-end tests of MCP servers (issue 16): the `troupe` binary talks to the testkit's
//! MCP server (written with `rmcp`, [`troupe_testkit::mcp`]) over stdio, with this test
//! binary re-run as the server process, and over streamable HTTP on 127.0.0.1, while the
//! scripted provider drives the calls.

use serde_json::{Value, json};
use troupe_testkit::mcp::{CHILD_ENV, McpHttpServer, PID_FILE_ENV, stdio_child_command};
use troupe_testkit::{Script, Step};

mod common;
use common::*;

/// Not a test: the entry point of the stdio MCP server child the other tests configure
/// ([`stdio_server`]); without its environment variable it returns at once.
#[test]
#[ignore = "entry point of the MCP server child process the other tests start"]
fn mcp_server_child() {
    troupe_testkit::mcp::child_main();
}

/// A `local` server entry running the testkit server on stdio; `pid_file`: where each
/// server process writes its pid.
fn stdio_server(pid_file: Option<&std::path::Path>) -> Value {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut env = json!({CHILD_ENV: "1"});
    if let Some(p) = pid_file {
        env[PID_FILE_ENV] = json!(p.display().to_string());
    }
    json!({
        "type": "local",
        "command": stdio_child_command(&exe, "mcp_server_child"),
        "environment": env,
    })
}

/// Tool parts of the session's messages, in order.
async fn tools_of(project: &Project) -> Vec<Value> {
    let (_, messages) = project.messages().await;
    tool_parts(&messages)
}

/// The scripted provider answering with `steps`, and a config for it with the stdio test
/// MCP server as `t` (writing its pid to `pid_file`, if any), merged with `extra`.
async fn with_mcp(
    steps: Vec<Step>,
    pid_file: Option<&std::path::Path>,
    extra: Value,
) -> (troupe_testkit::MockServer, Value) {
    let server = mock(steps).await;
    let mut patch = json!({"mcp": {"t": stdio_server(pid_file)}});
    merge_patch(&mut patch, extra);
    let config = mock_config_with(&server.base_url(), patch);
    (server, config)
}

/// What `troupe mcp list --format json` prints in `project` (it must succeed), parsed.
async fn mcp_list_json(project: &Project) -> Value {
    let out = project
        .troupe(&["mcp", "list", "--format", "json"], &[])
        .await;
    assert_success(&out, "troupe mcp list");
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The text of the tool result for `call_id` in request `r`.
fn tool_result(r: &troupe_testkit::RecordedRequest, call_id: &str) -> Option<String> {
    req_messages(r)
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(content_text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tool_result_reaches_the_next_request_and_a_killed_server_restarts() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let pid_file = project.home.path().join("mcp.pid");
    let gate = project.home.path().join("gate");
    let (server, config) = with_mcp(
        vec![
            Step::tool("t_echo", json!({"text": "hello mcp"})),
            Step::tool("test_gate", json!({"path": gate.display().to_string()})),
            Step::tool("t_echo", json!({"text": "after kill"})),
            Step::tool("t_crash", json!({})),
            Step::tool("t_echo", json!({"text": "after crash"})),
            Step::tool("t_image", json!({})),
            Step::tool("t_add_tool", json!({})),
            Step::tool("t_extra", json!({})),
            Step::text("all done"),
        ],
        Some(&pid_file),
        json!({"supervision": {"backoff_ms": 10}}),
    )
    .await;
    project.write_config(&config.to_string());
    let child = project.spawn(&["run", "use the mcp tools"], &[]);

    // Once step 2 is requested, step 1's call is done: kill the server, wait for the
    // supervisor to start a new one (a new pid in the file), then open the gate.
    wait_for("the second provider request", || {
        completions(&server).len() >= 2
    })
    .await;
    let first = std::fs::read_to_string(&pid_file).expect("pid file");
    signal(first.trim().parse().expect("pid"), "-KILL");
    wait_for("a restarted server", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| !p.trim().is_empty() && p != first)
    })
    .await;
    std::fs::write(&gate, "").expect("gate");
    let out = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output())
        .await
        .expect("run ends")
        .expect("run output");
    assert_success(&out, "troupe run");

    let tools = tools_of(&project).await;
    let summary: Vec<(&str, &str)> = tools
        .iter()
        .map(|t| {
            (
                t["tool"].as_str().unwrap_or(""),
                t["state"]["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("t_echo", "completed"),
            ("test_gate", "completed"),
            ("t_echo", "completed"),
            ("t_crash", "error"),
            ("t_echo", "completed"),
            ("t_image", "completed"),
            ("t_add_tool", "completed"),
            ("t_extra", "completed"),
        ],
        "{tools:#?}"
    );
    assert_eq!(tools[0]["state"]["output"], "echo: hello mcp");
    assert_eq!(tools[2]["state"]["output"], "echo: after kill");
    let crash = tools[3]["state"]["error"].as_str().unwrap_or("");
    assert!(
        crash.contains("MCP server 't'") && crash.contains("outcome is unknown"),
        "{crash}"
    );
    assert_eq!(tools[4]["state"]["output"], "echo: after crash");
    let image = &tools[5]["state"];
    assert!(
        image["output"].as_str().is_some_and(
            |o| o.contains("here is a pixel") && o.contains("[image attached: image/png")
        ),
        "{image:#}"
    );
    assert_eq!(
        image["metadata"]["attachments"][0]["mime"], "image/png",
        "{image:#}"
    );
    assert_eq!(tools[7]["state"]["output"], "extra called");

    // The provider was offered the server's tools with their schemas, the result of
    // step 1 reached request 2, and `extra` was offered once the server announced it.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 9);
    let names = reqs[0].offered_tools();
    for t in ["t_echo", "t_pid", "t_image", "t_crash", "t_add_tool"] {
        assert!(names.contains(&t.to_string()), "{t} not offered: {names:?}");
    }
    assert!(!names.contains(&"t_extra".to_string()), "{names:?}");
    assert!(reqs[7].offered_tools().contains(&"t_extra".to_string()));
    let echo_spec = reqs[0].body["tools"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["function"]["name"] == "t_echo"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        echo_spec["function"]["parameters"]["required"],
        json!(["text"]),
        "{echo_spec:#}"
    );
    let call_id = tools[0]["callID"].as_str().expect("callID");
    assert_eq!(
        tool_result(&reqs[1], call_id).as_deref(),
        Some("echo: hello mcp")
    );
    assert!(tool_result(&reqs[0], call_id).is_none());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_restarted_and_the_next_call_works() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let pid_file = project.home.path().join("mcp.pid");
    let script = Script::single(vec![
        Step::tool("t_pid", json!({})),
        Step::tool("t_hang", json!({})),
        Step::tool("t_pid", json!({})),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let mut entry = stdio_server(Some(&pid_file));
    // The default, set explicitly: only an explicit timeout bounds calls.
    entry["timeout"] = json!(5000);
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"t": entry}, "supervision": {"backoff_ms": 10}}),
    );
    project.write_config(&config.to_string());
    let out = project.troupe(&["run", "hang it"], &[]).await;
    assert_success(&out, "troupe run");
    let tools = tools_of(&project).await;
    let status: Vec<&str> = tools
        .iter()
        .map(|t| t["state"]["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(status, ["completed", "error", "completed"], "{tools:#?}");
    let hung = tools[1]["state"]["error"].as_str().unwrap_or("");
    assert!(
        hung.contains("did not answer hang within 5000 ms") && hung.contains("restarted"),
        "{hung}"
    );
    let (before, after) = (&tools[0]["state"]["output"], &tools[2]["state"]["output"]);
    assert_ne!(before, after, "the second pid call reached a new process");
    let last = std::fs::read_to_string(&pid_file).expect("pid file");
    assert_eq!(after.as_str(), Some(last.trim()));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_crashing_past_its_limit_is_failed_and_its_tools_are_withdrawn() {
    let (server, config) = with_mcp(
        vec![
            Step::tool("t_crash", json!({})),
            Step::tool("t_crash", json!({})),
            Step::text("the server is gone"),
        ],
        None,
        json!({"supervision": {"mcp_restarts": 1, "backoff_ms": 10}}),
    )
    .await;
    let project = Project::with_config(&config);
    let out = project.troupe(&["run", "crash it twice"], &[]).await;
    assert_success(&out, "troupe run");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].offered_tools().contains(&"t_echo".to_string()));
    assert!(reqs[1].offered_tools().contains(&"t_echo".to_string()));
    let last = reqs[2].offered_tools();
    assert!(
        !last.iter().any(|n| n.starts_with("t_")),
        "tools of the failed server still offered: {last:?}"
    );
    let tools = tools_of(&project).await;
    assert!(
        tools.iter().all(|t| t["state"]["status"] == "error"),
        "{tools:#?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_once_is_listed_failed_with_its_stderr() {
    let config = json!({
        "mcp": {
            "bad": {"type": "local", "command": ["sh", "-c", "echo 'refusing to start' >&2; exit 3"]},
            "good": stdio_server(None),
            "off": {"type": "local", "command": ["/nonexistent"], "enabled": false},
            "missing": {"type": "local", "command": ["/nonexistent/mcp-server"]}
        },
        "supervision": {"mcp_restarts": 1, "backoff_ms": 10}
    });
    let project = Project::with_config(&config);
    let list = mcp_list_json(&project).await;
    let by_name = |n: &str| {
        list.as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == n))
            .cloned()
            .unwrap_or_default()
    };
    let bad = by_name("bad");
    assert_eq!(bad["state"], "failed", "{bad:#}");
    assert_eq!(bad["tools"], json!([]), "{bad:#}");
    let err = bad["error"].as_str().unwrap_or("");
    assert!(
        err.contains("refusing to start") && err.contains("its first start failed"),
        "{err}"
    );
    let good = by_name("good");
    assert_eq!(good["state"], "connected", "{good:#}");
    assert!(
        good["tools"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["name"] == "good_echo" && t["readOnly"] == true)),
        "{good:#}"
    );
    assert_eq!(by_name("off")["state"], "disabled");
    let missing = by_name("missing");
    assert_eq!(missing["state"], "failed");
    assert!(
        missing["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot start") && e.contains("/nonexistent/mcp-server")),
        "{missing:#}"
    );

    // The table form says the same.
    let out = project.troupe(&["mcp", "list"], &[]).await;
    assert_success(&out, "troupe mcp list");
    let table = text(&out.stdout);
    assert!(table.contains("bad  local  failed"), "{table}");
    assert!(table.contains("good  local  connected"), "{table}");
    assert!(table.contains("  good_echo [read-only]"), "{table}");
    // The failures are in the listing; the MCP library's own log lines are not on stderr.
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("rmcp"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_a_server_starts_do_not_outlive_troupe() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("grandchild.pid");
    // The server's shell starts a long sleep, then becomes the server.
    let quoted: Vec<String> = stdio_child_command(&exe, "mcp_server_child")
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "sleep 300 & echo $! > '{}'; exec {}",
        pid_file.display(),
        quoted.join(" ")
    );
    let config = json!({"mcp": {"forker": {
        "type": "local", "command": ["sh", "-c", script], "environment": {CHILD_ENV: "1"},
    }}});
    let project = Project::with_config(&config);
    let list = mcp_list_json(&project).await;
    assert_eq!(list[0]["state"], "connected", "{list:#}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the server's shell wrote the sleep's pid")
        .trim()
        .parse()
        .expect("pid");
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let survived = alive(pid);
    if survived {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(!survived, "the server's child {pid} outlived troupe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_mcp_entry_is_a_config_error_naming_its_path() {
    let project = Project::with_config(&json!({"mcp": {"x": {"type": "local", "command": []}}}));
    let out = project.troupe(&["mcp", "list"], &[]).await;
    let line = assert_one_line_failure(&out, "troupe mcp list");
    assert!(
        line.contains("at mcp.x") && line.contains("command must be a non-empty array"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_over_streamable_http() {
    let http = McpHttpServer::start().await.expect("MCP HTTP server");
    let script = Script::single(vec![
        Step::tool("web_echo", json!({"text": "over http"})),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"web": {"type": "remote", "url": http.url(), "headers": {"X-Test": "secret-1"}}}}),
    );
    let project = Project::with_config(&config);
    let out = project.troupe(&["run", "call it over http"], &[]).await;
    assert_success(&out, "troupe run");
    let tools = tools_of(&project).await;
    assert_eq!(tools.len(), 1, "{tools:#?}");
    assert_eq!(tools[0]["state"]["output"], "echo: over http", "{tools:#?}");
    let reqs = completions(&server);
    let call_id = tools[0]["callID"].as_str().expect("callID");
    assert_eq!(
        tool_result(&reqs[1], call_id).as_deref(),
        Some("echo: over http")
    );
    let sent = http.header_values("x-test");
    assert!(
        !sent.is_empty() && sent.iter().all(|v| v == "secret-1"),
        "{sent:?}"
    );

    let out = project
        .troupe(&["mcp", "list", "--format", "json"], &[])
        .await;
    assert_success(&out, "troupe mcp list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list[0]["name"], "web");
    assert_eq!(list[0]["type"], "remote");
    assert_eq!(list[0]["state"], "connected");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_key_of_an_mcp_tool_is_its_name() {
    let (server, config) = with_mcp(
        vec![
            Step::tool("t_echo", json!({"text": "denied"})),
            Step::tool("t_pid", json!({})),
            Step::tool("t_big", json!({"lines": 5000})),
            Step::text("done"),
        ],
        None,
        json!({"permission": {"t_echo": "deny"}}),
    )
    .await;
    let project = Project::with_config(&config);
    let out = project.troupe(&["run", "call both"], &[]).await;
    assert_success(&out, "troupe run");
    let tools = tools_of(&project).await;
    assert_eq!(tools.len(), 3, "{tools:#?}");
    assert_eq!(tools[0]["state"]["status"], "error", "{tools:#?}");
    let err = tools[0]["state"]["error"].as_str().unwrap_or("");
    assert!(err.contains("t_echo"), "{err}");
    assert_eq!(tools[1]["state"]["status"], "completed", "{tools:#?}");
    assert!(
        tools[1]["state"]["output"]
            .as_str()
            .is_some_and(|o| o.parse::<u32>().is_ok()),
        "{tools:#?}"
    );
    // Truncated like the built-in tools: the head, a marker, the full text saved.
    let big = &tools[2]["state"];
    assert_eq!(big["metadata"]["truncated"], true, "{big:#}");
    let shown = big["output"].as_str().unwrap_or("");
    assert!(shown.starts_with("line 1\n"), "{shown:.200}");
    assert!(!shown.contains("line 5000"), "{shown:.200}");
    let saved = big["metadata"]["outputPath"].as_str().expect("outputPath");
    let full = std::fs::read_to_string(saved).expect("the saved full output");
    assert!(full.ends_with("line 5000"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_runtime_lists_its_servers_in_get_mcp_and_actors() {
    let server = mock(vec![Step::text("unused")]).await;
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"t": stdio_server(None),
                       "off": {"type": "local", "command": ["/nonexistent"], "enabled": false}}}),
    );
    let project = Project::with_config(&config);
    let (_child, base) = project.serve().await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http.get(format!("{base}{path}"));
        async move {
            let r = req.send().await.expect("GET");
            assert_eq!(r.status().as_u16(), 200);
            r.json::<Value>().await.expect("JSON")
        }
    };
    let start = std::time::Instant::now();
    let list = loop {
        let list = get("/mcp").await;
        if list[1]["state"] == "connected" {
            break list;
        }
        assert!(
            start.elapsed() < CLI_RUN_DEADLINE && list[1]["state"] == "connecting",
            "{list:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(list[0]["name"], "off");
    assert_eq!(list[0]["state"], "disabled");
    assert_eq!(list[1]["name"], "t");
    let pid = list[1]["pid"].as_u64().expect("pid of a local server");
    assert!(pid > 0);
    let echo = list[1]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "t_echo"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(echo["tool"], "echo", "{list:#}");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]), "{list:#}");

    let tree = get("/actors").await;
    let mut found = Vec::new();
    fn find<'a>(n: &'a Value, out: &mut Vec<&'a Value>) {
        if n["kind"] == "mcp_server" {
            out.push(n);
        }
        for c in n["children"].as_array().into_iter().flatten() {
            find(c, out);
        }
    }
    find(&tree, &mut found);
    assert_eq!(found.len(), 1, "{tree:#}");
    assert_eq!(found[0]["id"], "t", "{tree:#}");
    assert_eq!(found[0]["status"], "idle", "{tree:#}");
    server.shutdown().await;
}
