//! Shared fixture of the runtime's integration tests: a config pointing at the scripted
//! provider on 127.0.0.1, a runtime over a real SQLite store in a temp dir, and readers of
//! what the store holds. Each test file includes it with `mod support;` and uses what it
//! needs.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use troupe_actors::faults::{FaultHook, FaultPoint};
use troupe_actors::{PromptInput, Runtime, RuntimeError, RuntimeOptions, TurnResult};
use troupe_config::{Config, LoadedConfig};
use troupe_session::{
    AssistantMessage, Bus, Message, MessageErrorName, MessageWithParts, PartKind, Session,
    SessionId, Store, ToolState,
};
pub use troupe_testkit::content_text;
use troupe_testkit::{Conversation, Fault, MockServer, Script, Step};
use troupe_tools::{AllowAll, PermissionAsker, Registry, Tool, ToolContext, ToolError, ToolOutput};

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

/// A conversation for the request containing `token` whose model calls `test_sleep` for 60 s
/// (and would then answer "never reached"): a session still in a tool call when the test
/// acts.
pub fn sleeping(token: &str) -> Conversation {
    Conversation::new(vec![
        Step::tool("test_sleep", json!({"ms": 60000})),
        Step::text("never reached"),
    ])
    .matching(token)
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

/// A runtime whose config is [`config_with`]`(base_url, extra)`, every other default.
pub async fn start_runtime_config(dir: &TempDir, base_url: &str, extra: Value) -> Runtime {
    Fixture {
        config: config_with(base_url, extra),
        ..Fixture::new(base_url)
    }
    .start(dir)
    .await
}

/// The scripted provider serving `script` on 127.0.0.1.
pub async fn start_mock(script: Script) -> MockServer {
    MockServer::start(script).await.expect("mock")
}

/// A new root session whose directory is `root`; its id.
pub async fn new_session(runtime: &Runtime, root: &Path) -> SessionId {
    runtime
        .create_session(root, None)
        .await
        .expect("session")
        .id
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

/// [`run_prompt`], asserting the turn ended without an error; the turn.
pub async fn run_ok(runtime: &Runtime, sid: &SessionId, text: &str) -> TurnResult {
    let turn = run_prompt(runtime, sid, text).await;
    assert!(turn.error.is_none(), "{:?}", turn.error);
    turn
}

/// Shut a test's runtime and then its mock provider down.
pub async fn stop(runtime: Runtime, server: MockServer) {
    runtime.shutdown().await;
    server.shutdown().await;
}

/// Run `input` to its end (bounded by [`DEADLINE`]), for a prompt with more than a text.
pub async fn run_input(runtime: &Runtime, sid: &SessionId, input: PromptInput) -> TurnResult {
    tokio::time::timeout(DEADLINE, runtime.prompt(sid, input))
        .await
        .expect("turn finished in time")
        .expect("turn ran")
}

/// Start `runtime.prompt(sid, input)` on a task of its own and hand back what it returns
/// (an error included), for a test that aborts or refuses the turn while it runs.
pub fn spawn_turn(
    runtime: &Runtime,
    sid: &SessionId,
    input: PromptInput,
) -> JoinHandle<Result<TurnResult, RuntimeError>> {
    let (runtime, sid) = (runtime.clone(), sid.clone());
    tokio::spawn(async move { runtime.prompt(&sid, input).await })
}

/// The result of a turn started with [`spawn_turn`], awaited at most `limit` (`what` names
/// the wait in the failure); fails the test when the turn did not run.
pub async fn join_turn(
    turn: JoinHandle<Result<TurnResult, RuntimeError>>,
    limit: Duration,
    what: &str,
) -> TurnResult {
    tokio::time::timeout(limit, turn)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {limit:?}"))
        .expect("join")
        .expect("turn ran")
}

/// Abort session `sid` and wait at most `limit` for its turn, started with [`spawn_turn`],
/// to return; asserts the turn ended with `MessageAbortedError` and returns it.
pub async fn abort_and_wait(
    runtime: &Runtime,
    sid: &SessionId,
    turn: JoinHandle<Result<TurnResult, RuntimeError>>,
    limit: Duration,
) -> TurnResult {
    runtime.abort(sid);
    let result = join_turn(turn, limit, "the aborted turn returned").await;
    assert_eq!(
        result.error.as_ref().map(|e| &e.name),
        Some(&MessageErrorName::MessageAborted),
        "{result:?}"
    );
    result
}

/// The value of the runtime's counter `name` with the label set `labels` (e.g.
/// `role="session"`), 0 when it was never counted.
pub fn labeled(runtime: &Runtime, name: &str, labels: &str) -> u64 {
    runtime
        .shared()
        .counters
        .snapshot()
        .into_iter()
        .find(|(n, l, _)| *n == name && l == labels)
        .map(|(_, _, v)| v)
        .unwrap_or(0)
}

/// A fault hook that injects one panic at `point`, the first time it is asked.
pub fn once_at(point: FaultPoint) -> FaultHook {
    let fired = Arc::new(AtomicBool::new(false));
    Arc::new(move |p, _key| p == point && !fired.swap(true, Ordering::SeqCst))
}

/// A fault hook that crashes a session actor other than `parent`'s once, as it takes its
/// first finished step: a subagent's actor crashing during its turn.
pub fn child_step_crash_once(parent: &SessionId) -> FaultHook {
    let parent = parent.clone();
    let fired = Arc::new(AtomicBool::new(false));
    Arc::new(move |p, key| {
        p == FaultPoint::SessionStep && key != parent && !fired.swap(true, Ordering::SeqCst)
    })
}

/// The body of a test tool's call: gets the arguments and context as
/// [`Tool::execute`] does and returns its future.
type Run =
    dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A test tool made of a name, a description, an argument schema and a closure that runs a
/// call (the one way these tests write a tool; see [`Tool`]).
pub struct FnTool {
    name: &'static str,
    description: String,
    parameters: Value,
    run: Box<Run>,
}

impl FnTool {
    /// The tool `name` described as `description`, taking no arguments, whose calls `run`
    /// runs.
    pub fn new(
        name: &'static str,
        description: &str,
        run: impl Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            name,
            description: description.to_string(),
            parameters: json!({"type": "object", "properties": {}}),
            run: Box::new(run),
        }
    }

    /// The same tool with the argument schema `parameters`.
    pub fn with_parameters(mut self, parameters: Value) -> Self {
        self.parameters = parameters;
        self
    }
}

impl Tool for FnTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> String {
        self.description.clone()
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        (self.run)(args, ctx)
    }
}

/// A tool's output with `title` and `output` and no metadata.
pub fn output(title: &str, output: impl Into<String>) -> ToolOutput {
    ToolOutput {
        title: title.into(),
        output: output.into(),
        metadata: Default::default(),
    }
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
