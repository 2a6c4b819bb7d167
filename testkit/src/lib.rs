//! `troupe-testkit`: a scripted, OpenAI- and Anthropic-compatible streaming provider on
//! 127.0.0.1 for tests and benchmarks, with fault injection and request recording.
//!
//! This crate deliberately depends on no other troupe crate: it is an independent
//! implementation of the wire formats in `shared/reference/wire-formats.md` (§1 OpenAI Chat
//! Completions, §2 Anthropic Messages), so a bug in `troupe-llm`'s parser is not mirrored here.
//!
//! Endpoints: `POST /v1/chat/completions` (and `/chat/completions`), `POST /v1/messages` (and
//! `/messages`), `GET /v1/models` (and `/models`; lists [`MOCK_MODEL`]), `GET /props`
//! (llama.cpp's server properties when [`MockOptions`] sets them, else 404), `GET /health`,
//! `GET /_mock/requests` (the [`RecordedRequest`] list as JSON).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use troupe_testkit::{Fault, MockServer, Script, Step};
//! use serde_json::json;
//!
//! let script = Script::single(vec![
//!     Step::tool("bash", json!({"command": "ls"})).with_fault(Fault::rate_limited(1)),
//!     Step::text("done"),
//! ]);
//! let server = MockServer::start(script).await?;
//! let base = server.base_url(); // http://127.0.0.1:PORT/v1
//! # let _ = base;
//! // ... point the client at `base`, run, then inspect:
//! let reqs = server.requests();
//! # let _ = reqs;
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`OtlpReceiver`] is a small OTLP/HTTP trace receiver (protobuf and JSON) that records the
//! spans a traced client exports.
//!
//! [`pg::PgSchema`] gives a test a fresh schema on the local PostgreSQL server (or a printed
//! skip when there is none and `TROUPE_REQUIRE_SERVICES` is not `1`).
//!
//! [`task`] holds the `task`-tool (subagent) scripts the runtime's and the end-to-end tests
//! share.
//!
//! [`mcp`] is a small MCP server (stdio in a child process, or streamable HTTP in the test
//! process) for the tests of troupe's MCP client.
//!
//! [`mock_troupe_config`] is the troupe config every test that points troupe at the mock
//! starts from.
//!
//! The script format is documented on [`Script`], [`Step`] and [`Fault`] and in the crate
//! README.

pub mod mcp;
mod otlp;
pub mod pg;
mod scan;
mod script;
mod server;
pub mod task;
mod wire;

pub use otlp::{OtlpReceiver, ReceivedExport, ReceivedSpan};
pub use script::{
    Conversation, DEFAULT_CHUNK_SIZE, EXHAUSTED_TEXT, Exhausted, Fault, LineEnding, Script,
    ScriptError, Stall, Step, ToolCallSpec, UsageSpec,
};
pub use server::{
    HANG_LIMIT, MOCK_MODEL, MockOptions, MockServer, RecordedHeaders, RecordedRequest,
    SHUTDOWN_GRACE,
};
pub use wire::Dialect;

/// A troupe config (the JSON of `troupe.json`) whose default model is `mock/`[`MOCK_MODEL`],
/// an OpenAI-compatible provider served at `base_url` (a [`MockServer::base_url`]), with a
/// context window of `context` tokens and an output limit of `output` tokens. The one shape
/// every test that points troupe at the mock starts from.
pub fn mock_troupe_config(base_url: &str, context: u64, output: u64) -> serde_json::Value {
    serde_json::json!({
        "model": format!("mock/{MOCK_MODEL}"),
        "provider": {"mock": {
            "name": "Mock",
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": base_url, "apiKey": "test"},
            "models": {MOCK_MODEL: {"name": "Mock", "limit": {"context": context, "output": output}}}
        }}
    })
}

/// The text of one message of a recorded chat-completions request (an element of
/// `body["messages"]`): its `content` string, or the `text` of its content parts joined with
/// newlines; empty for anything else.
pub fn content_text(message: &serde_json::Value) -> String {
    wire::content_text(&message["content"])
}
