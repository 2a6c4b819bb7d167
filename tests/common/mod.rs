//! Helpers shared by the end-to-end tests (each test binary uses a subset): the project
//! fixture and command builder ([`project`]), the client of a served API ([`http`]), the
//! scripted provider, assertions on a run's output, and readers of events, stored messages
//! and recorded provider requests.

#![allow(dead_code)]

mod http;
mod project;

use std::process::Output;

use serde_json::Value;
use troupe_testkit::{MockServer, RecordedRequest, Script, Step};

// Each test binary uses a subset: one that starts no server has no use for the client.
#[allow(unused_imports)]
pub use http::*;
pub use project::*;
#[allow(unused_imports)]
pub use troupe_testkit::content_text;

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Asserts a failed run: non-zero exit and exactly one non-empty stderr line starting with
/// `troupe: ` besides the tool lines (`✓ …` / `✗ …`, which `troupe run` prints on stderr) and
/// the once-per-run notice that snapshots are off outside git (issue 15); returns that line.
pub fn assert_one_line_failure(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what}: expected failure, got {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with("✓ ")
                && !l.starts_with("✗ ")
                && !l.starts_with("troupe: snapshots are off")
        })
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: stderr should be one line, got:\n{stderr}"
    );
    assert!(
        lines[0].starts_with("troupe: "),
        "{what}: stderr line should start with `troupe: `: {stderr}"
    );
    eprintln!("{what}: {}", lines[0]);
    lines[0].to_string()
}

/// `stderr` without the one-time notice that snapshots are off outside git (issue 15), for
/// tests of other stderr lines that run in plain temp directories.
pub fn without_snapshot_notice(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("troupe: snapshots are off"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Parses `--format json` stdout: every non-empty line must be a JSON bus event.
pub fn parse_events(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_event_line)
        .collect()
}

/// One `--format json` line as a bus event (`type` string, `properties` object); fails the
/// test otherwise.
pub fn parse_event_line(l: &str) -> Value {
    let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
    assert!(v["type"].is_string(), "event without type: {l}");
    assert!(v["properties"].is_object(), "event without properties: {l}");
    v
}

/// The session id from the `session.created` / first event carrying one.
pub fn session_id_of(events: &[Value]) -> String {
    events
        .iter()
        .find_map(|e| {
            e["properties"]["sessionID"]
                .as_str()
                .or_else(|| {
                    e["properties"]["info"]["id"]
                        .as_str()
                        .filter(|id| id.starts_with("ses"))
                })
                .map(str::to_string)
        })
        .expect("an event naming the session")
}

pub fn role(m: &Value) -> &str {
    m["info"]["role"].as_str().unwrap_or("")
}

pub fn parts_of_type<'a>(m: &'a Value, ty: &str) -> Vec<&'a Value> {
    m["parts"]
        .as_array()
        .map(|ps| ps.iter().filter(|p| p["type"] == ty).collect())
        .unwrap_or_default()
}

/// Owned copies of every `tool` part of `messages`, in order.
pub fn tool_parts(messages: &[Value]) -> Vec<Value> {
    all_parts_of_type(messages, "tool")
        .into_iter()
        .cloned()
        .collect()
}

pub fn all_parts_of_type<'a>(messages: &'a [Value], ty: &str) -> Vec<&'a Value> {
    messages.iter().flat_map(|m| parts_of_type(m, ty)).collect()
}

/// The `messages` array of a request body.
pub fn req_messages(r: &RecordedRequest) -> Vec<Value> {
    r.body["messages"].as_array().cloned().unwrap_or_default()
}

/// The non-system messages of a request as (role, text) pairs, in order: the conversation
/// the model was shown.
pub fn conversation(r: &RecordedRequest) -> Vec<(String, String)> {
    req_messages(r)
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                content_text(m),
            )
        })
        .collect()
}

/// Completion requests of either dialect only (the mock also records e.g. `GET /v1/models`).
pub fn completions(server: &MockServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.dialect.is_some())
        .collect()
}

/// The scripted provider serving `script` on 127.0.0.1.
pub async fn start_mock(script: Script) -> MockServer {
    MockServer::start(script).await.expect("mock")
}

/// The scripted provider answering every conversation with `steps` (one conversation
/// without a matcher).
pub async fn mock(steps: Vec<Step>) -> MockServer {
    start_mock(Script::single(steps)).await
}

/// The scripted provider answering every conversation with `steps` ([`mock`]) and a new
/// project configured for it ([`Project::new`]).
pub async fn mock_project(steps: Vec<Step>) -> (MockServer, Project) {
    let server = mock(steps).await;
    let project = Project::new(&server.base_url());
    (server, project)
}

/// A real (tiny) PNG: the 8-byte signature and an IHDR chunk.
pub const TINY_PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89,
];

/// A provider's model entry (`provider.X.models.NAME`) for a model that takes images: 128k
/// context, 8k output, text and image in, text out.
pub fn vision_model() -> Value {
    serde_json::json!({"name": "Vision", "limit": {"context": 128000, "output": 8192},
                       "modalities": {"input": ["text", "image"], "output": ["text"]}})
}

/// Writes `lines` to `path` as JSON lines (one value a line), e.g. a batch's tasks file.
pub fn write_jsonl(path: &std::path::Path, lines: &[Value]) {
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, body).expect("write a JSON lines file");
}

/// A mock whose model calls `test_sleep` for 30 s (and would then answer "never reached"):
/// a turn that stays in a tool until the test interrupts it.
pub async fn sleeping_tool_mock() -> MockServer {
    mock(vec![
        Step::tool("test_sleep", serde_json::json!({"ms": 30000})),
        Step::text("never reached"),
    ])
    .await
}

/// Waits until the first completion request has ended (the tool call was streamed), then
/// 300 ms more so the tool part starts running (a head start only, no timed assertion).
pub async fn wait_tool_started(server: &MockServer) {
    wait_for("the request to finish", || {
        completions(server)
            .first()
            .is_some_and(|r| r.end_ms.is_some())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
}
