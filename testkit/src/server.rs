//! The HTTP server: routing, shared state and request recording; how a completion request
//! is answered (faults, streaming) is in [`respond`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::script::{EXHAUSTED_TEXT, Exhausted, Fault, Script, Stall, Step};
use crate::wire::{self, Dialect, Ending, Plan};

mod respond;

use respond::completion_handler;

/// Longest time a `hang_after` fault keeps a connection open: 10 minutes.
pub const HANG_LIMIT: Duration = Duration::from_secs(600);

/// How long [`MockServer::shutdown`] waits for in-flight responses before dropping them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause before a `cut_after` abort so the frames sent before it reach the client.
const ABORT_FLUSH_PAUSE: Duration = Duration::from_millis(20);

/// Model id listed by `GET /v1/models`.
pub const MOCK_MODEL: &str = "mock-model";

/// Selected request headers kept in a [`RecordedRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedHeaders {
    /// `authorization` value, verbatim.
    pub authorization: Option<String>,
    /// `x-session-affinity` value.
    pub x_session_affinity: Option<String>,
    /// `user-agent` value.
    pub user_agent: Option<String>,
    /// `anthropic-version` value.
    pub anthropic_version: Option<String>,
    /// Whether an `x-api-key` header was present (the value is not kept).
    pub x_api_key_present: bool,
    /// W3C trace context (`traceparent`), when the client sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// One request as the server saw it. Serialized as one JSONL line in the `--log` file and as an
/// element of `GET /_mock/requests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Arrival order, from 0.
    pub seq: u64,
    /// Dialect of a completion request (`openai` / `anthropic`); `None` for other endpoints.
    pub dialect: Option<Dialect>,
    /// Index of the conversation that answered, if one was selected.
    pub conversation: Option<usize>,
    /// Step index (number of assistant messages in the request, a trailing prefill not
    /// counted), if the body was understood.
    pub step: Option<usize>,
    /// 1-based attempt number for (session key, conversation, step); 0 when not counted.
    pub attempt: u32,
    /// `x-session-affinity` header, else the first user message text.
    pub session_key: String,
    /// Whether the request asked for streaming.
    pub stream: bool,
    /// Unix time in milliseconds when the request arrived.
    pub start_ms: u64,
    /// Unix time in milliseconds when the response finished (body fully sent, aborted, or
    /// dropped by the client); `None` while it is still streaming.
    pub end_ms: Option<u64>,
    /// [`RecordedRequest::start_ms`] in microseconds (for timing sub-millisecond requests).
    #[serde(default)]
    pub start_us: u64,
    /// [`RecordedRequest::end_ms`] in microseconds.
    #[serde(default)]
    pub end_us: Option<u64>,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Selected headers.
    pub headers: RecordedHeaders,
    /// Parsed JSON body (`null` for an empty body, a JSON string holding the raw text if it did
    /// not parse).
    pub body: Value,
    /// HTTP status sent.
    pub status: u16,
    /// The fault applied to this attempt, if any.
    pub fault: Option<Fault>,
}

impl RecordedRequest {
    /// Names of the tools the request offers, in order: OpenAI `tools[].function.name`,
    /// Anthropic `tools[].name`; empty without tools.
    pub fn offered_tools(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks cannot leave the data inconsistent
    // (single push / insert), so recover from poisoning.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum LogMsg {
    Line(String),
    Flush(tokio::sync::oneshot::Sender<()>),
}

struct Shared {
    script: Script,
    seq: AtomicU64,
    attempts: Mutex<HashMap<(String, usize, usize), u32>>,
    records: Mutex<Vec<RecordedRequest>>,
    /// Whether [`RecordedRequest::body`] is kept in `records` (see
    /// [`MockServer::set_record_bodies`]).
    record_bodies: AtomicBool,
    log: Option<mpsc::UnboundedSender<LogMsg>>,
    shutdown: watch::Receiver<bool>,
    /// [`MockOptions::props`].
    props: Option<Value>,
    /// [`MockOptions::model_meta`].
    model_meta: Option<Value>,
    /// Client connections (by peer address) whose next request is never answered
    /// ([`Stall::Reuse`]).
    stalled_connections: Mutex<std::collections::HashSet<SocketAddr>>,
}

impl Shared {
    /// Wait up to [`HANG_LIMIT`] or until the server shuts down.
    async fn hang(&self) {
        let mut rx = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(HANG_LIMIT) => {}
            _ = rx.wait_for(|down| *down) => {}
        }
    }

    fn record(&self, mut rec: RecordedRequest) {
        if !self.record_bodies.load(Ordering::Relaxed) {
            // Summary only: the parsed body is by far the largest part of a record (several
            // KB of JSON per request, more as a `Value`). Dropping it keeps the mock's memory
            // at a few hundred bytes per request.
            rec.body = Value::Null;
        }
        let done = rec.end_ms.is_some();
        let line = if done && self.log.is_some() {
            serde_json::to_string(&rec).ok()
        } else {
            None
        };
        lock(&self.records).push(rec);
        if let (Some(tx), Some(line)) = (&self.log, line) {
            let _ = tx.send(LogMsg::Line(line));
        }
    }

    fn finish(&self, seq: u64) {
        let line = {
            let mut recs = lock(&self.records);
            let Some(rec) = recs.iter_mut().rev().find(|r| r.seq == seq) else {
                return;
            };
            if rec.end_ms.is_some() {
                return;
            }
            rec.end_ms = Some(now_ms());
            rec.end_us = Some(now_us());
            // Encoded only for the log file (a request's JSON costs more than its handling).
            self.log
                .as_ref()
                .and_then(|_| serde_json::to_string(rec).ok())
        };
        if let (Some(tx), Some(line)) = (&self.log, line) {
            let _ = tx.send(LogMsg::Line(line));
        }
    }

    fn next_attempt(&self, key: (String, usize, usize)) -> u32 {
        let mut map = lock(&self.attempts);
        let n = map.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }
}

/// Marks a record finished when dropped (body completed, aborted or dropped by the client).
struct FinishGuard {
    shared: Arc<Shared>,
    seq: u64,
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        self.shared.finish(self.seq);
    }
}

fn selected_headers(h: &HeaderMap) -> RecordedHeaders {
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    RecordedHeaders {
        authorization: get("authorization"),
        x_session_affinity: get("x-session-affinity"),
        user_agent: get("user-agent"),
        anthropic_version: get("anthropic-version"),
        x_api_key_present: h.contains_key("x-api-key"),
        traceparent: get("traceparent"),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        v.to_string(),
    )
        .into_response()
}

/// Everything a completion handler knows before it decides what to send.
struct Incoming {
    seq: u64,
    start_ms: u64,
    start_us: u64,
    method: Method,
    path: String,
    headers: RecordedHeaders,
    session_header: Option<String>,
}

/// Every handler's request start: its sequence number, times and recorded headers.
impl axum::extract::FromRequestParts<Arc<Shared>> for Incoming {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        shared: &Arc<Shared>,
    ) -> Result<Self, Self::Rejection> {
        Ok(Incoming::new(
            shared,
            parts.method.clone(),
            &parts.uri,
            &parts.headers,
        ))
    }
}

impl Incoming {
    fn new(shared: &Shared, method: Method, uri: &Uri, headers: &HeaderMap) -> Self {
        let rec_headers = selected_headers(headers);
        Incoming {
            seq: shared.seq.fetch_add(1, Ordering::Relaxed),
            start_ms: now_ms(),
            start_us: now_us(),
            method,
            path: uri.path().to_owned(),
            session_header: rec_headers.x_session_affinity.clone(),
            headers: rec_headers,
        }
    }

    fn record(&self, body: Value, status: StatusCode) -> RecordedRequest {
        RecordedRequest {
            seq: self.seq,
            dialect: None,
            conversation: None,
            step: None,
            attempt: 0,
            session_key: self.session_header.clone().unwrap_or_default(),
            stream: false,
            start_ms: self.start_ms,
            end_ms: Some(now_ms()),
            start_us: self.start_us,
            end_us: Some(now_us()),
            method: self.method.to_string(),
            path: self.path.clone(),
            headers: self.headers.clone(),
            body,
            status: status.as_u16(),
            fault: None,
        }
    }
}

async fn models(State(shared): State<Arc<Shared>>, inc: Incoming) -> Response {
    shared.record(inc.record(Value::Null, StatusCode::OK));
    let mut model =
        json!({"id": MOCK_MODEL, "object": "model", "created": 0, "owned_by": "troupe-testkit"});
    if let (Some(Value::Object(extra)), Value::Object(m)) = (&shared.model_meta, &mut model) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    json_response(StatusCode::OK, &json!({"object": "list", "data": [model]}))
}

/// `GET /props`: the configured llama.cpp-style server properties, else 404.
async fn props(State(shared): State<Arc<Shared>>, inc: Incoming) -> Response {
    match &shared.props {
        Some(body) => {
            shared.record(inc.record(Value::Null, StatusCode::OK));
            json_response(StatusCode::OK, body)
        }
        None => no_route(&shared, &inc, Value::Null),
    }
}

/// Records the request with status 404 and answers an OpenAI-shaped "no route" error.
fn no_route(shared: &Shared, inc: &Incoming, body: Value) -> Response {
    shared.record(inc.record(body, StatusCode::NOT_FOUND));
    let msg = format!("mock: no route for {} {}", inc.method, inc.path);
    json_response(
        StatusCode::NOT_FOUND,
        &wire::error_body(Dialect::OpenAi, 404, &msg, inc.seq),
    )
}

async fn list_requests(State(shared): State<Arc<Shared>>) -> Response {
    let recs = lock(&shared.records).clone();
    json_response(
        StatusCode::OK,
        &serde_json::to_value(recs).unwrap_or(Value::Null),
    )
}

async fn not_found(State(shared): State<Arc<Shared>>, inc: Incoming, body: Bytes) -> Response {
    let parsed = serde_json::from_slice(&body).unwrap_or(Value::Null);
    no_route(&shared, &inc, parsed)
}

/// Largest request body the mock reads: 256 MiB. axum's default of 2 MiB is far below what
/// real providers accept, and the client sees it as HTTP 413, which troupe rightly takes for
/// a context overflow — so a long scripted session (a 5,000-step bench run sends bodies of
/// several MiB) would compact against a mock limit no provider has and walk off its script.
pub const MAX_REQUEST_BODY: usize = 256 << 20;

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(completion_handler))
        .route("/chat/completions", post(completion_handler))
        .route("/v1/messages", post(completion_handler))
        .route("/messages", post(completion_handler))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/props", get(props))
        .route("/health", any(|| async { "ok" }))
        .route("/_mock/requests", get(list_requests))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY))
        .with_state(shared)
}

/// Server options beyond the script.
#[derive(Debug, Clone, Default)]
pub struct MockOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Append every finished request as one JSON line ([`RecordedRequest`]) to this file.
    pub log: Option<PathBuf>,
    /// Body of `GET /props` (llama.cpp's server properties, e.g.
    /// `{"default_generation_settings": {"n_ctx": 4096}}`); `None` answers 404 like a
    /// server without that route.
    pub props: Option<Value>,
    /// Fields merged into the model entry of `GET /v1/models` (e.g. llama.cpp's
    /// `{"meta": {"n_ctx_train": 8192}}` or vLLM's `{"max_model_len": 2048}`).
    pub model_meta: Option<Value>,
}

/// A running mock provider on 127.0.0.1. Dropping it without [`MockServer::shutdown`] signals
/// shutdown but does not wait.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    serve: Option<JoinHandle<std::io::Result<()>>>,
    logger: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MockServer {
    /// Starts serving `script` on `127.0.0.1:0` (a free port).
    pub async fn start(script: Script) -> std::io::Result<MockServer> {
        Self::start_with(script, MockOptions::default()).await
    }

    /// Starts serving `script` on `127.0.0.1:port` (0 = any free port).
    pub async fn start_on(script: Script, port: u16) -> std::io::Result<MockServer> {
        Self::start_with(
            script,
            MockOptions {
                port,
                ..MockOptions::default()
            },
        )
        .await
    }

    /// Starts with explicit [`MockOptions`]. Fails if the script is invalid
    /// (`InvalidInput`), the log file cannot be opened, or the port cannot be bound.
    pub async fn start_with(script: Script, opts: MockOptions) -> std::io::Result<MockServer> {
        script
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let (log, logger) = match &opts.log {
            Some(path) => {
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .await?;
                let (tx, mut rx) = mpsc::unbounded_channel::<LogMsg>();
                let task = tokio::spawn(async move {
                    let mut failed = false;
                    while let Some(msg) = rx.recv().await {
                        match msg {
                            LogMsg::Line(mut line) if !failed => {
                                line.push('\n');
                                failed = file.write_all(line.as_bytes()).await.is_err()
                                    || file.flush().await.is_err();
                            }
                            LogMsg::Line(_) => {}
                            LogMsg::Flush(ack) => {
                                let _ = ack.send(());
                            }
                        }
                    }
                });
                (Some(tx), Some(task))
            }
            None => (None, None),
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", opts.port)).await?;
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            script,
            seq: AtomicU64::new(0),
            attempts: Mutex::new(HashMap::new()),
            records: Mutex::new(Vec::new()),
            record_bodies: AtomicBool::new(true),
            log,
            shutdown: shutdown_rx.clone(),
            props: opts.props.clone(),
            model_meta: opts.model_meta.clone(),
            stalled_connections: Mutex::new(Default::default()),
        });
        let app = router(Arc::clone(&shared));
        let mut rx = shutdown_rx;
        let serve = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = rx.wait_for(|down| *down).await;
            })
            .await
        });
        Ok(MockServer {
            addr,
            shared,
            shutdown_tx,
            serve: Some(serve),
            logger,
        })
    }

    /// OpenAI-style base URL, `http://127.0.0.1:PORT/v1` (append `/chat/completions` or
    /// `/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether later requests keep their parsed body in [`RecordedRequest::body`] (default
    /// `true`: tests inspect bodies). With `false`, records keep only the summary (seq, session
    /// key, step, attempt, start/end ms, status, headers, fault) and `body` is `null`, so a long
    /// benchmark does not hold every request body in memory. Requests already recorded are not
    /// changed. The `--log` file also gets `body: null` for requests recorded while off.
    pub fn set_record_bodies(&self, keep: bool) {
        self.shared.record_bodies.store(keep, Ordering::Relaxed);
    }

    /// A snapshot of all recorded requests, in arrival order (also `GET /_mock/requests`).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.records).clone()
    }

    /// Takes every recorded request out of the log, in arrival order, leaving it empty (a
    /// benchmark reads its records and frees them before it measures memory). A response
    /// still streaming when its record is taken does not get its end time.
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *lock(&self.shared.records))
    }

    /// Stops accepting, ends hanging responses, waits up to [`SHUTDOWN_GRACE`] for in-flight
    /// responses, and flushes the log file.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(serve) = self.serve.take() {
            let abort = serve.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, serve).await.is_err() {
                abort.abort();
            }
        }
        // Every finished record was queued before its response ended; wait until the writer
        // has flushed everything queued so far.
        if let Some(tx) = &self.shared.log {
            let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
            if tx.send(LogMsg::Flush(ack_tx)).is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(5), ack_rx).await;
            }
        }
        if let Some(logger) = self.logger.take() {
            logger.abort();
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
