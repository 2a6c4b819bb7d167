//! [`Provider`]: one model of one provider, spoken to over real HTTP (reqwest). `stream()` opens
//! one step and yields normalized [`StreamEvent`]s. No retries here: the caller owns the single
//! retry loop (see [`crate::retry`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_config::model::{Protocol, ResolvedModel};

use crate::anthropic;
use crate::body::RequestBody;
use crate::error::{ErrorKind, LlmError};
use crate::openai::{self, ChunkAssembler, excerpt, is_overflow_message, value_to_code};
use crate::sse::{SseStream, sse_events};
use crate::types::{ChatRequest, StreamEvent};

/// The events of one step; ends after the first error. A successful stream always ends with
/// exactly one [`StreamEvent::FinishStep`].
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>;

/// Default idle timeout between body bytes (SSE stream or JSON body): 120 s, used when the
/// model has no `chunkTimeout` option (ms).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default deadline for the response headers, from the moment the request is sent (connect
/// included): 30 s (issue 24.1), used when the provider has no `timeout` option (ms, or `false`
/// for none; OpenCode's option of the same name).
pub const DEFAULT_HEADERS_TIMEOUT: Duration = Duration::from_secs(30);
/// Default deadline for the TCP/TLS connection: 10 s, used when the provider has no
/// `connectTimeout` option (ms). Enforced by the HTTP client (the runtime's shared client has
/// it; a `connectTimeout` option gets the provider its own client).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default deadline for reading a whole HTTP error body: 10 s, used when the provider has no
/// `errorBodyTimeout` option (ms). An error body is small; a server that declares more bytes
/// than it sends must not hold the step.
pub const DEFAULT_ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Cap on an HTTP error body read for classification: 64 KiB.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Cap on a non-streamed (`application/json`) success body: 32 MiB.
pub const MAX_JSON_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Cap on the response body kept in [`LlmError::body`]: 4 KiB.
pub const MAX_KEPT_BODY_BYTES: usize = 4 * 1024;

/// The deadlines of one request's phases (issue 24.1). Each expiry is a retryable
/// [`ErrorKind::Transport`] error whose message names the phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// TCP/TLS connect ("could not connect to provider P at URL within N s"). Option
    /// `connectTimeout` (ms), default [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect: Duration,
    /// Request sent → response headers ("no response headers from provider P after N s").
    /// Option `timeout` (ms; `false` = none), default [`DEFAULT_HEADERS_TIMEOUT`].
    pub headers: Option<Duration>,
    /// Longest silence between two body bytes, SSE or JSON ("stream stalled: no data for N s",
    /// "response body stalled: no bytes for N s"). Option `chunkTimeout` (ms), default
    /// [`DEFAULT_IDLE_TIMEOUT`].
    pub idle: Duration,
    /// Whole HTTP error body ("HTTP 500 error body incomplete after N s"). Option
    /// `errorBodyTimeout` (ms), default [`DEFAULT_ERROR_BODY_TIMEOUT`].
    pub error_body: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            connect: DEFAULT_CONNECT_TIMEOUT,
            headers: Some(DEFAULT_HEADERS_TIMEOUT),
            idle: DEFAULT_IDLE_TIMEOUT,
            error_body: DEFAULT_ERROR_BODY_TIMEOUT,
        }
    }
}

impl Deadlines {
    /// Read the deadlines from model `options` (provider options merged with model options):
    /// `connectTimeout`, `timeout` (a number, or `false` for no header deadline),
    /// `chunkTimeout`, `errorBodyTimeout`, all in milliseconds; a missing, non-positive or
    /// non-numeric value keeps the default.
    pub fn from_options(options: &serde_json::Map<String, Value>) -> Self {
        let ms = |key: &str| {
            options
                .get(key)
                .and_then(Value::as_f64)
                .filter(|ms| ms.is_finite() && *ms > 0.0)
                .map(|ms| Duration::from_millis(ms as u64))
        };
        let d = Self::default();
        Self {
            connect: ms("connectTimeout").unwrap_or(d.connect),
            headers: match options.get("timeout") {
                Some(Value::Bool(false)) => None,
                _ => ms("timeout").or(d.headers),
            },
            idle: ms("chunkTimeout").unwrap_or(d.idle),
            error_body: ms("errorBodyTimeout").unwrap_or(d.error_body),
        }
    }
}

/// `3 s`, `0.3 s`: a deadline as shown in error messages.
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{s:.1} s")
    }
}

/// One model of one provider.
#[derive(Debug)]
pub struct Provider {
    client: reqwest::Client,
    /// A client without a connection pool, for the one retry of a request whose pooled
    /// connection failed; built on first use.
    fresh: OnceLock<reqwest::Client>,
    model: ResolvedModel,
    deadlines: Deadlines,
    /// Cap on one tool call's argument text, bytes (option `maxToolArgumentBytes`).
    max_tool_argument_bytes: usize,
    /// A response has arrived through `client` before, so its pool may hold a kept-alive
    /// connection that the next request reuses.
    pooled: AtomicBool,
}

impl Clone for Provider {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            fresh: OnceLock::new(),
            model: self.model.clone(),
            deadlines: self.deadlines,
            max_tool_argument_bytes: self.max_tool_argument_bytes,
            pooled: AtomicBool::new(self.pooled.load(Ordering::Relaxed)),
        }
    }
}

impl Provider {
    /// Wrap `model`, with the [`Deadlines`] read from its options and the tool-argument cap
    /// from option `maxToolArgumentBytes` (bytes, default
    /// [`crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES`]). With a `connectTimeout`
    /// option the provider builds its own client with that connect timeout; otherwise `client`
    /// (whose own connect timeout applies) is used.
    pub fn new(client: reqwest::Client, model: ResolvedModel) -> Self {
        let deadlines = Deadlines::from_options(&model.options);
        let client = if model.options.contains_key("connectTimeout") {
            reqwest::Client::builder()
                .connect_timeout(deadlines.connect)
                .build()
                .unwrap_or(client)
        } else {
            client
        };
        let max_tool_argument_bytes = model
            .options
            .get("maxToolArgumentBytes")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .unwrap_or(crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES);
        Self {
            client,
            fresh: OnceLock::new(),
            model,
            deadlines,
            max_tool_argument_bytes,
            pooled: AtomicBool::new(false),
        }
    }

    /// Override the idle timeout (no byte for this long → `Transport` error).
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.deadlines.idle = idle;
        self
    }

    /// Override all deadlines.
    pub fn with_deadlines(mut self, deadlines: Deadlines) -> Self {
        self.deadlines = deadlines;
        self
    }

    /// The deadlines in use.
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    /// The model this provider talks to.
    pub fn model(&self) -> &ResolvedModel {
        &self.model
    }

    /// The idle timeout in use.
    pub fn idle_timeout(&self) -> Duration {
        self.deadlines.idle
    }

    /// The request URL: `{base_url}/chat/completions` (OpenAI) or `{base_url}/messages`
    /// (Anthropic); a trailing `/` on `base_url` is tolerated.
    pub fn endpoint(&self) -> String {
        let base = self.model.base_url.trim_end_matches('/');
        match self.model.protocol {
            Protocol::OpenaiChat => format!("{base}/chat/completions"),
            Protocol::AnthropicMessages => format!("{base}/messages"),
        }
    }

    /// Open one step: POST the request and return its event stream.
    ///
    /// Errors before the stream: HTTP errors classified by [`classify_http_error`]; connection
    /// failures as `Transport` ("cannot reach provider P at URL: reason"); the phase deadlines
    /// of [`Deadlines`] as `Transport` errors naming the phase; `Aborted` when `cancel` fires.
    /// A request that fails before its headers while a pooled (kept-alive) connection may have
    /// carried it is sent once more on a fresh connection. Inside the stream: `Transport` on a
    /// cut connection, idle timeout or EOF before the finish; `StreamError`/`ContextOverflow`
    /// for in-stream error payloads; `MalformedChunk`; `Aborted` on cancel (events already
    /// yielded stay valid).
    pub async fn stream(
        &self,
        req: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, LlmError> {
        let url = self.endpoint();
        let body = match &req.body {
            Some(prebuilt) => prebuilt.clone(),
            None => crate::body::full_body(&self.model, &req).into(),
        };
        tracing::debug!(url = %url, model = %self.model.full_id(), "opening provider stream");

        let reused = self.pooled.load(Ordering::Relaxed);
        let resp = match self
            .send(&self.client, &url, &req, body.clone(), &cancel)
            .await
        {
            Ok(r) => r,
            Err(e) if reused && e.kind == ErrorKind::Transport => {
                tracing::warn!(
                    provider = %self.model.provider_id,
                    error = %e,
                    "request failed on a pooled connection; retrying once on a fresh one"
                );
                let fresh = self.fresh.get_or_init(|| {
                    reqwest::Client::builder()
                        .pool_max_idle_per_host(0)
                        .connect_timeout(self.deadlines.connect)
                        .build()
                        .unwrap_or_else(|_| self.client.clone())
                });
                self.send(fresh, &url, &req, body, &cancel).await?
            }
            Err(e) => return Err(e),
        };
        self.pooled.store(true, Ordering::Relaxed);
        let status = resp.status();
        let headers = retry_headers(resp.headers());
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !status.is_success() {
            let read = tokio::time::timeout(
                self.deadlines.error_body,
                read_capped(resp, MAX_ERROR_BODY_BYTES, self.deadlines.idle),
            );
            // (body, why it is incomplete, whether that was a deadline)
            let (body, stalled, timed_out) = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(aborted()),
                b = read => match b {
                    Ok(r) => {
                        let timed_out = matches!(r.failure, Some(ReadFailure::Idle));
                        (r.body, r.failure.map(|f| match f {
                            ReadFailure::Idle => format!("stalled: no bytes for {}", secs(self.deadlines.idle)),
                            ReadFailure::Broken(e) => format!("broken: {}", root_cause(&e)),
                        }), timed_out)
                    }
                    Err(_) => (String::new(), Some(format!("incomplete after {}", secs(self.deadlines.error_body))), true),
                },
            };
            let mut err = classify_http_error(status.as_u16(), &body, headers, &self.model);
            if let Some(why) = stalled {
                // What arrived may be a fragment: the status decides, and the message says the
                // body never completed. A 4xx whose body stalled is not trusted as final.
                err.message = format!(
                    "HTTP {} from provider {}: error body {why}",
                    status.as_u16(),
                    self.model.provider_id
                );
                if !err.is_retryable() && !matches!(err.kind, ErrorKind::Auth) {
                    err.kind = ErrorKind::Transport;
                }
                err.timeout = timed_out;
            }
            return Err(err);
        }
        let provider_id = self.model.provider_id.clone();
        if content_type.starts_with("application/json") {
            let read = read_capped(resp, MAX_JSON_BODY_BYTES, self.deadlines.idle);
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(aborted()),
                r = read => r,
            };
            match r.failure {
                None => {}
                Some(ReadFailure::Idle) => {
                    return Err(LlmError::timed_out(format!(
                        "response body from provider {} stalled: no bytes for {}",
                        self.model.provider_id,
                        secs(self.deadlines.idle)
                    )));
                }
                Some(ReadFailure::Broken(e)) => return Err(self.read_error(&e)),
            }
            let body = r.body;
            let events = match self.model.protocol {
                Protocol::OpenaiChat => openai::events_from_completion(&body, &provider_id)?,
                Protocol::AnthropicMessages => anthropic::events_from_message(&body)?,
            };
            return Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))));
        }
        let url_for_err = url.clone();
        let bytes = resp
            .bytes_stream()
            .map(move |r: Result<Bytes, reqwest::Error>| {
                r.map_err(|e| {
                    LlmError::new(
                        ErrorKind::Transport,
                        format!("stream from {url_for_err} broke: {}", root_cause(&e)),
                    )
                })
            });
        let sse = sse_events(bytes, self.deadlines.idle);
        Ok(assemble_stream_capped(
            sse,
            self.model.protocol,
            &provider_id,
            self.max_tool_argument_bytes,
            cancel,
        ))
    }

    /// Send the request through `client` and wait for the response headers, within the
    /// connect and header deadlines.
    async fn send(
        &self,
        client: &reqwest::Client,
        url: &str,
        req: &ChatRequest,
        body: RequestBody,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, LlmError> {
        let mut b = client.post(url);
        match self.model.protocol {
            Protocol::OpenaiChat => {
                if let Some(key) = &self.model.api_key {
                    b = b.bearer_auth(key);
                }
            }
            Protocol::AnthropicMessages => {
                b = b.header("anthropic-version", anthropic::ANTHROPIC_VERSION);
                if let Some(key) = &self.model.api_key {
                    b = b.header("x-api-key", key);
                }
            }
        }
        b = b
            .header("accept", "text/event-stream")
            .header("content-type", "application/json");
        for (k, v) in self.model.headers.iter().chain(req.headers.iter()) {
            b = b.header(k.as_str(), v.as_str());
        }
        let send = b.body(body.into_http()).send();
        let headers_deadline = async {
            match self.deadlines.headers {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(aborted()),
            r = send => r.map_err(|e| self.connect_error(&e)),
            _ = headers_deadline => Err(LlmError::timed_out(
                format!(
                    "no response headers from provider {} after {}",
                    self.model.provider_id,
                    secs(self.deadlines.headers.unwrap_or_default())
                ),
            )),
        }
    }

    fn connect_error(&self, e: &reqwest::Error) -> LlmError {
        if e.is_connect() && e.is_timeout() {
            return LlmError::timed_out(format!(
                "cannot reach provider {} at {}: no connection after {}",
                self.model.provider_id,
                self.model.base_url,
                secs(self.deadlines.connect)
            ));
        }
        let what = if e.is_timeout() {
            "timed out".to_string()
        } else {
            root_cause(e)
        };
        LlmError {
            timeout: e.is_timeout(),
            ..LlmError::new(
                ErrorKind::Transport,
                format!(
                    "cannot reach provider {} at {}: {what}",
                    self.model.provider_id, self.model.base_url
                ),
            )
        }
    }

    fn read_error(&self, e: &reqwest::Error) -> LlmError {
        LlmError::new(
            ErrorKind::Transport,
            format!(
                "reading the response of provider {} failed: {}",
                self.model.provider_id,
                root_cause(e)
            ),
        )
    }
}

fn aborted() -> LlmError {
    LlmError::new(ErrorKind::Aborted, "request cancelled")
}

/// A one-line reason from an error's source chain: I/O error kinds get short lowercase names
/// ("connection refused", "connection reset"), others the innermost message.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut last = e.to_string();
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            let s = match io.kind() {
                K::ConnectionRefused => "connection refused",
                K::ConnectionReset => "connection reset",
                K::ConnectionAborted => "connection aborted",
                K::TimedOut => "timed out",
                K::UnexpectedEof => "connection closed early",
                K::NotFound => "host not found",
                _ => "",
            };
            if !s.is_empty() {
                return s.to_string();
            }
        }
        last = err.to_string();
        cur = err.source();
    }
    last.lines().next().unwrap_or("").to_string()
}

fn retry_headers(h: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    ["retry-after-ms", "retry-after"]
        .iter()
        .filter_map(|name| {
            h.get(*name)
                .and_then(|v| v.to_str().ok())
                .map(|v| (name.to_string(), v.to_string()))
        })
        .collect()
}

enum ReadFailure {
    /// No byte for the idle deadline.
    Idle,
    /// The connection broke.
    Broken(reqwest::Error),
}

struct Capped {
    /// What arrived (lossy UTF-8), at most the cap.
    body: String,
    /// Why the body is incomplete, if it is.
    failure: Option<ReadFailure>,
}

/// Read at most `cap` bytes of `resp`'s body, failing when no byte arrives for `idle`.
/// What arrived before a failure is kept.
async fn read_capped(resp: reqwest::Response, cap: usize, idle: Duration) -> Capped {
    let mut out = Vec::new();
    let mut s = resp.bytes_stream();
    let mut failure = None;
    loop {
        match tokio::time::timeout(idle, s.next()).await {
            Err(_) => {
                failure = Some(ReadFailure::Idle);
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                failure = Some(ReadFailure::Broken(e));
                break;
            }
            Ok(Some(Ok(chunk))) => {
                let room = cap.saturating_sub(out.len());
                out.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if out.len() >= cap {
                    break;
                }
            }
        }
    }
    Capped {
        body: String::from_utf8_lossy(&out).into_owned(),
        failure,
    }
}

/// Classify an HTTP error response (status + body, body already capped) into an [`LlmError`].
///
/// Message: the provider's `error.message` (also a string `error`, vLLM's flat
/// `{"object":"error","message":…}`, or the first line of a plain-text body). Class:
/// 401/403 → `Auth`; 413, `error.code == "context_length_exceeded"`, llama.cpp
/// `exceed_context_size_error`, or a message matching the overflow patterns → `ContextOverflow`;
/// 429 with code/type `insufficient_quota` → `QuotaExceeded`, else `RateLimit`; 402 →
/// `QuotaExceeded` (billing/credits); 529 or "overloaded" in type/code/message → `Overloaded`;
/// other 5xx → `Server`; other 4xx → `BadRequest` (404 without a body message says "model X not
/// found at URL"). `retry_headers` are kept; the body is kept up to 4 KiB.
pub fn classify_http_error(
    status: u16,
    body: &str,
    retry_headers: Vec<(String, String)>,
    model: &ResolvedModel,
) -> LlmError {
    let parsed: Option<Value> = serde_json::from_str(body.trim()).ok();
    let mut message = String::new();
    let mut code = String::new();
    let mut typ = String::new();
    if let Some(Value::Object(o)) = &parsed {
        match o.get("error") {
            Some(Value::Object(e)) => {
                message = e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                code = e.get("code").map(value_to_code).unwrap_or_default();
                typ = e
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
            }
            Some(Value::String(s)) => message = s.clone(),
            _ => {}
        }
        if message.is_empty() {
            message = o
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        if code.is_empty() {
            code = o.get("code").map(value_to_code).unwrap_or_default();
        }
        if typ.is_empty() {
            typ = o
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| *t != "error")
                .unwrap_or("")
                .to_string();
        }
    }
    let plain = if parsed.is_none() {
        body.trim()
            .lines()
            .next()
            .map(|l| excerpt(l.trim(), 300))
            .unwrap_or_default()
    } else {
        String::new()
    };
    let looks_html = plain.starts_with('<');
    if message.is_empty() {
        message = match status {
            404 => {
                let mut m = format!("model {} not found at {}", model.model_id, model.base_url);
                if !plain.is_empty() && !looks_html {
                    m.push_str(&format!(" ({plain})"));
                }
                m
            }
            401 | 403 if plain.is_empty() || looks_html => {
                format!(
                    "authentication failed for provider {} (HTTP {status})",
                    model.provider_id
                )
            }
            _ if !plain.is_empty() && !looks_html => plain.clone(),
            _ if body.trim().is_empty() => {
                format!("HTTP {status} from provider {}", model.provider_id)
            }
            // An HTML page (a proxy's, a gateway's) or JSON without a message: the start of
            // the body is the only clue to what went wrong.
            _ => format!(
                "HTTP {status} from provider {}; the response body starts: {}",
                model.provider_id,
                body_start(body)
            ),
        };
    }
    let lower = |s: &str| s.to_ascii_lowercase();
    let overloaded = status == 529
        || lower(&typ).contains("overloaded")
        || lower(&code).contains("overloaded")
        || lower(&message).contains("overloaded");
    let kind = if status == 401 || status == 403 {
        ErrorKind::Auth
    } else if status == 413
        || code == "context_length_exceeded"
        || typ == "exceed_context_size_error"
        || (status < 500 && is_overflow_message(&message))
    {
        ErrorKind::ContextOverflow
    } else if status == 429 {
        if code == "insufficient_quota" || typ == "insufficient_quota" {
            ErrorKind::QuotaExceeded
        } else {
            ErrorKind::RateLimit
        }
    } else if status == 402 {
        ErrorKind::QuotaExceeded
    } else if overloaded {
        ErrorKind::Overloaded
    } else if status >= 500 {
        ErrorKind::Server
    } else {
        ErrorKind::BadRequest
    };
    LlmError {
        kind,
        message,
        status: Some(status),
        retry_headers,
        body: if body.is_empty() {
            None
        } else {
            Some(excerpt(body, MAX_KEPT_BODY_BYTES))
        },
        timeout: false,
    }
}

/// Bytes of an error body quoted in an error message whose body gave no message of its own.
pub const ERROR_BODY_SHOWN_BYTES: usize = 500;

/// The first [`ERROR_BODY_SHOWN_BYTES`] of `body` (surrounding whitespace trimmed, cut on a
/// character boundary), quoted with control characters escaped (Rust `{:?}`: `\n`, `\u{1b}`),
/// `…` after the quote when cut.
fn body_start(body: &str) -> String {
    let body = body.trim();
    let mut end = body.len().min(ERROR_BODY_SHOWN_BYTES);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < body.len() { "…" } else { "" };
    format!("{:?}{cut}", &body[..end])
}

enum Assembler {
    OpenAi(ChunkAssembler),
    Anthropic(anthropic::MessageAssembler),
}

impl Assembler {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>, LlmError> {
        match self {
            Self::OpenAi(a) => a.push(data),
            Self::Anthropic(a) => a.push(event, data),
        }
    }
    fn finish(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        match self {
            Self::OpenAi(a) => a.finish(),
            Self::Anthropic(a) => a.finish(),
        }
    }
    fn is_done(&self) -> bool {
        match self {
            Self::OpenAi(a) => a.is_done(),
            Self::Anthropic(a) => a.is_done(),
        }
    }
}

struct Drive {
    sse: SseStream,
    asm: Assembler,
    queue: VecDeque<Result<StreamEvent, LlmError>>,
    cancel: CancellationToken,
    done: bool,
}

/// Turn framed SSE events into normalized events with the assembler of `protocol`
/// (`provider_id` selects provider quirks, e.g. xAI usage). This is what [`Provider::stream`]
/// does after the HTTP exchange; exposed for replaying recorded streams. The stream ends with
/// exactly one `FinishStep`, or with the first error; `cancel` ends it with `Aborted`.
pub fn assemble_stream(
    sse: SseStream,
    protocol: Protocol,
    provider_id: &str,
    cancel: CancellationToken,
) -> EventStream {
    assemble_stream_capped(
        sse,
        protocol,
        provider_id,
        crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
        cancel,
    )
}

/// [`assemble_stream`] with a cap on each tool call's argument text (bytes): a call whose
/// arguments pass it is emitted with an error and not executed.
pub fn assemble_stream_capped(
    sse: SseStream,
    protocol: Protocol,
    provider_id: &str,
    max_tool_argument_bytes: usize,
    cancel: CancellationToken,
) -> EventStream {
    let asm = match protocol {
        Protocol::OpenaiChat => Assembler::OpenAi(
            ChunkAssembler::new(provider_id).with_max_tool_argument_bytes(max_tool_argument_bytes),
        ),
        Protocol::AnthropicMessages => Assembler::Anthropic(
            anthropic::MessageAssembler::new()
                .with_max_tool_argument_bytes(max_tool_argument_bytes),
        ),
    };
    let st = Drive {
        sse,
        asm,
        queue: VecDeque::new(),
        cancel,
        done: false,
    };
    Box::pin(futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            if st.cancel.is_cancelled() {
                st.done = true;
                return Some((Err(aborted()), st));
            }
            let next = tokio::select! {
                biased;
                _ = st.cancel.cancelled() => {
                    st.done = true;
                    return Some((Err(aborted()), st));
                }
                n = st.sse.next() => n,
            };
            let result = match next {
                Some(Ok(ev)) => match st.asm.push(&ev.event, &ev.data) {
                    // A cut-off last fragment (no terminating blank line) is not a protocol
                    // error: the end-of-stream check below decides.
                    Err(e) if ev.at_eof && e.kind == ErrorKind::MalformedChunk => Ok(Vec::new()),
                    r => r,
                },
                Some(Err(e)) => Err(e),
                None => {
                    st.done = true;
                    st.asm.finish()
                }
            };
            match result {
                Ok(events) => {
                    st.queue.extend(events.into_iter().map(Ok));
                    if st.asm.is_done() {
                        st.done = true;
                    }
                }
                Err(e) => {
                    st.done = true;
                    st.queue.push_back(Err(e));
                }
            }
        }
    }))
}

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;
