//! Shared fixture of the runtime's integration tests: a config pointing at the scripted
//! provider on 127.0.0.1, a runtime over a real SQLite store in a temp dir, and readers of
//! what the store holds. Each test file includes it with `mod support;` and uses what it
//! needs.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use troupe_actors::{PromptInput, Runtime, RuntimeOptions, TurnResult};
use troupe_config::{Config, LoadedConfig};
use troupe_session::{
    AssistantMessage, Bus, Message, MessageWithParts, PartKind, Session, SessionId, Store,
    ToolState,
};
use troupe_testkit::{Conversation, Fault, Step};
use troupe_tools::{AllowAll, PermissionAsker, Registry};

/// Bound on any single wait in these tests, so a deadlock fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Config with the mock provider at `base_url` as the default model (`mock/mock-model`,
/// 128k context, 8k output), with the top-level keys of `extra` merged over it.
pub fn config_with(base_url: &str, extra: Value) -> LoadedConfig {
    config_limited(base_url, 128_000, 8_192, extra)
}

/// [`config_with`] whose mock model has a context window of `context` tokens and an output
/// limit of `output` tokens.
pub fn config_limited(base_url: &str, context: u64, output: u64, extra: Value) -> LoadedConfig {
    let mut cfg = troupe_testkit::mock_troupe_config(base_url, context, output);
    if let (Some(dst), Value::Object(src)) = (cfg.as_object_mut(), extra) {
        for (k, v) in src {
            dst.insert(k, v);
        }
    }
    LoadedConfig::from_config(
        Config::from_jsonc("test", &cfg.to_string()).expect("test config parses"),
    )
}

/// [`config_with`] without extra keys.
pub fn config(base_url: &str) -> LoadedConfig {
    config_with(base_url, json!({}))
}

/// A temp dir for a test's store and project, and its canonical path (the session root).
pub fn scratch() -> (TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonicalize");
    (dir, root)
}

/// A text step that streams `text` 4 bytes a chunk and hangs after the second chunk (until
/// the client drops the response): a model still answering when the test acts.
pub fn hanging_text(text: &str) -> Step {
    Step::text(text)
        .with_chunk_size(4)
        .with_fault(Fault::hang_after(2))
}

/// A conversation for the request containing `token` that hangs mid-answer (see
/// [`hanging_text`]): a child still working when the test acts.
pub fn hanging(token: &str) -> Conversation {
    Conversation::new(vec![hanging_text("working on it, please hold the line")]).matching(token)
}

/// The store of a test: `troupe.db` in `dir`.
pub fn open_store(dir: &TempDir) -> Store {
    Store::open(dir.path().join("troupe.db"), Bus::new()).expect("store")
}

/// How to start a test runtime; [`Fixture::start`] fills the defaults.
pub struct Fixture {
    /// Config (default: [`config`] of the mock).
    pub config: LoadedConfig,
    /// Tools (default: the built-ins plus the test tools).
    pub registry: Registry,
    /// Who answers permission asks (default: allow all).
    pub responder: Arc<dyn PermissionAsker>,
    /// Options (default: the library defaults).
    pub opts: RuntimeOptions,
}

impl Fixture {
    /// Defaults for the mock at `base_url`.
    pub fn new(base_url: &str) -> Self {
        Self {
            config: config(base_url),
            registry: Registry::builtin().with_test_tools(),
            responder: Arc::new(AllowAll),
            opts: RuntimeOptions::default(),
        }
    }

    /// Start the runtime over the store in `dir`.
    pub async fn start(self, dir: &TempDir) -> Runtime {
        Runtime::start(
            open_store(dir),
            self.config,
            self.registry,
            self.responder,
            self.opts,
        )
        .await
        .expect("runtime")
    }
}

/// A runtime with every default for the mock at `base_url`.
pub async fn start_runtime(dir: &TempDir, base_url: &str) -> Runtime {
    Fixture::new(base_url).start(dir).await
}

/// A runtime with `opts` and every other default for the mock at `base_url`.
pub async fn start_runtime_with(dir: &TempDir, base_url: &str, opts: RuntimeOptions) -> Runtime {
    Fixture {
        opts,
        ..Fixture::new(base_url)
    }
    .start(dir)
    .await
}

/// The stored child sessions (subagents) of `parent` (after a flush).
pub async fn children(runtime: &Runtime, parent: &SessionId) -> Vec<Session> {
    let parent = parent.clone();
    runtime.store().flush().await.expect("flush");
    runtime
        .store()
        .read(move |r| r.children(&parent))
        .await
        .expect("children")
}

/// The last assistant message of a history.
pub fn last_assistant(history: &[MessageWithParts]) -> Option<&AssistantMessage> {
    history.iter().rev().find_map(|m| match &m.info {
        Message::Assistant(a) => Some(a),
        _ => None,
    })
}

/// A plain prompt.
pub fn prompt(text: &str) -> PromptInput {
    PromptInput {
        text: text.into(),
        ..Default::default()
    }
}

/// Run one prompt to its end (bounded by [`DEADLINE`]).
pub async fn run_prompt(runtime: &Runtime, sid: &SessionId, text: &str) -> TurnResult {
    tokio::time::timeout(DEADLINE, runtime.prompt(sid, prompt(text)))
        .await
        .expect("turn finished in time")
        .expect("turn ran")
}

/// Start [`run_prompt`] on a task of its own, for a test that acts while the turn runs.
pub fn spawn_prompt(
    runtime: &Runtime,
    sid: &SessionId,
    text: &str,
) -> tokio::task::JoinHandle<TurnResult> {
    let (runtime, sid, text) = (runtime.clone(), sid.clone(), text.to_string());
    tokio::spawn(async move { run_prompt(&runtime, &sid, &text).await })
}

/// The stored messages of a session (after a flush).
pub async fn messages(runtime: &Runtime, sid: &SessionId) -> Vec<MessageWithParts> {
    let sid = sid.clone();
    runtime.store().flush().await.expect("flush");
    runtime
        .store()
        .read(move |r| r.messages(&sid))
        .await
        .expect("messages")
}

/// Every tool part of a history: (tool name, state), oldest first.
pub fn tool_parts(history: &[MessageWithParts]) -> Vec<(String, ToolState)> {
    history
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.kind {
            PartKind::Tool { tool, state, .. } => Some((tool.clone(), state.clone())),
            _ => None,
        })
        .collect()
}

/// The text parts of a message.
pub fn texts(m: &MessageWithParts) -> Vec<String> {
    m.parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Wait until `cond` holds, failing after [`DEADLINE`] (checked every 5 ms).
pub async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(what, DEADLINE, cond).await
}

/// Wait until `cond` holds, failing after `limit` (checked every 5 ms).
pub async fn wait_until_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The chat-completion requests the mock received, in arrival order.
pub fn completions(server: &troupe_testkit::MockServer) -> Vec<troupe_testkit::RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect()
}

/// Completion requests sent for session `sid` (by the `x-session-affinity` header), in
/// arrival order.
pub fn requests_of(
    server: &troupe_testkit::MockServer,
    sid: &str,
) -> Vec<troupe_testkit::RecordedRequest> {
    completions(server)
        .into_iter()
        .filter(|r| r.headers.x_session_affinity.as_deref() == Some(sid))
        .collect()
}

/// The text of every message with `role` in a recorded request.
pub fn request_texts(r: &troupe_testkit::RecordedRequest, role: &str) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter(|m| m["role"] == role)
                .map(content_text)
                .collect()
        })
        .unwrap_or_default()
}

/// The text of a request message's `content`: the string, or its text parts joined with
/// newlines.
pub fn content_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(ps) => ps
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
