//! End-to-end tests of MCP servers (issue 16): the `troupe` binary talks to the testkit's
//! `troupe-mcp-test` server (written with `rmcp`) over stdio and over streamable HTTP on
//! 127.0.0.1, while the scripted provider drives the calls.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use troupe_testkit::{MockServer, Script, Step};

mod common;
use common::*;

/// The testkit's MCP server binary, built once per test run (cargo builds only this
/// package's binaries for its tests; the server belongs to `troupe-testkit`).
fn mcp_server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let troupe = Path::new(env!("CARGO_BIN_EXE_troupe"));
        let profile_dir = troupe.parent().expect("bin dir");
        let target = profile_dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "troupe-testkit",
                "--bin",
                "troupe-mcp-test",
            ])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target)
            .status()
            .expect("run cargo build for troupe-mcp-test");
        assert!(status.success(), "building troupe-mcp-test failed");
        let bin = profile_dir.join("troupe-mcp-test");
        assert!(bin.is_file(), "{} missing", bin.display());
        bin
    })
    .clone()
}

fn bin_str() -> String {
    mcp_server_bin().display().to_string()
}

/// Tool parts of the session's messages, in order.
async fn tools_of(project: &Project) -> Vec<Value> {
    let (_, messages) = project.messages().await;
    tool_parts(&messages)
}

/// Names of the tools offered in a recorded request.
fn offered(r: &troupe_testkit::RecordedRequest) -> Vec<String> {
    r.body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
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
    let bin = bin_str();
    let project = Project::new("http://127.0.0.1:1/v1");
    let pid_file = project.home.path().join("mcp.pid");
    let gate = project.home.path().join("gate");
    let script = Script::single(vec![
        Step::tool("t_echo", json!({"text": "hello mcp"})),
        Step::tool("test_gate", json!({"path": gate.display().to_string()})),
        Step::tool("t_echo", json!({"text": "after kill"})),
        Step::tool("t_crash", json!({})),
        Step::tool("t_echo", json!({"text": "after crash"})),
        Step::tool("t_image", json!({})),
        Step::text("all done"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"t": {"type": "local", "command": [bin, "--pid-file", pid_file.display().to_string()]}},
               "supervision": {"backoff_ms": 10}}),
    );
    project.write_config(&config.to_string());
    let child = project.spawn(&["run", "use the mcp tools"], &[]);

    // Once step 2 is requested, step 1's call is done: kill the server, wait for the
    // supervisor to start a new one (a new pid in the file), then open the gate.
    wait_for("the second provider request", || {
        completions(&server).len() >= 2
    })
    .await;
    let first = std::fs::read_to_string(&pid_file).expect("pid file");
    signal(first.trim().parse().expect("pid"), "KILL");
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
    let summary: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            (
                t["tool"].as_str().unwrap_or("").to_string(),
                t["state"]["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("t_echo", "completed"),
        ("test_gate", "completed"),
        ("t_echo", "completed"),
        ("t_crash", "error"),
        ("t_echo", "completed"),
        ("t_image", "completed"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(summary, expected, "{tools:#?}");
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

    // The provider was offered the server's tools with their schemas, and the result of
    // step 1 reached request 2.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 7);
    let names = offered(&reqs[0]);
    for t in ["t_echo", "t_pid", "t_image", "t_crash", "t_add_tool"] {
        assert!(names.contains(&t.to_string()), "{t} not offered: {names:?}");
    }
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
async fn a_server_crashing_past_its_limit_is_failed_and_its_tools_are_withdrawn() {
    let bin = bin_str();
    let script = Script::single(vec![
        Step::tool("t_crash", json!({})),
        Step::tool("t_crash", json!({})),
        Step::text("the server is gone"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"t": {"type": "local", "command": [bin]}},
               "supervision": {"mcp_restarts": 1, "backoff_ms": 10}}),
    );
    let project = Project::with_config(&config);
    let out = project.troupe(&["run", "crash it twice"], &[]).await;
    assert_success(&out, "troupe run");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3);
    assert!(offered(&reqs[0]).contains(&"t_echo".to_string()));
    assert!(offered(&reqs[1]).contains(&"t_echo".to_string()));
    let last = offered(&reqs[2]);
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
    let bin = bin_str();
    let config = json!({
        "mcp": {
            "bad": {"type": "local", "command": [bin.clone(), "--exit-at-once"]},
            "good": {"type": "local", "command": [bin]},
            "off": {"type": "local", "command": ["/nonexistent"], "enabled": false},
            "missing": {"type": "local", "command": ["/nonexistent/mcp-server"]}
        },
        "supervision": {"mcp_restarts": 1, "backoff_ms": 10}
    });
    let project = Project::with_config(&config);
    let out = project
        .troupe(&["mcp", "list", "--format", "json"], &[])
        .await;
    assert_success(&out, "troupe mcp list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
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
        err.contains("refusing to start") && err.contains("gave up after 2 crashes"),
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
    let bin = mcp_server_bin();
    let mut http = tokio::process::Command::new(&bin)
        .args(["--http", "0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the HTTP MCP server");
    let stdout = http.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = tokio::time::timeout(CLI_RUN_DEADLINE, lines.next_line())
        .await
        .expect("server prints its URL")
        .expect("read")
        .expect("a line");
    let url = first
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_string();

    let script = Script::single(vec![
        Step::tool("web_echo", json!({"text": "over http"})),
        Step::text("done"),
    ]);
    let server = MockServer::start(script).await.expect("mock");
    let config = mock_config_with(
        &server.base_url(),
        json!({"mcp": {"web": {"type": "remote", "url": url, "headers": {"X-Test": "1"}}}}),
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

    let out = project
        .troupe(&["mcp", "list", "--format", "json"], &[])
        .await;
    assert_success(&out, "troupe mcp list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list[0]["name"], "web");
    assert_eq!(list[0]["type"], "remote");
    assert_eq!(list[0]["state"], "connected");
    server.shutdown().await;
    let _ = http.kill().await;
}
