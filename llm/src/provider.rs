//! [`Provider`]: one model of one provider, spoken to over real HTTP (reqwest). `stream()` opens
//! one step and yields normalized [`StreamEvent`]s. No retries here: the caller owns the single
//! retry loop (see [`crate::retry`]).
//!
//! This file holds the provider, its deadlines and the HTTP exchange; `response` reads and
//! classifies error bodies ([`classify_http_error`]); `assemble` turns SSE events into
//! [`StreamEvent`]s ([`assemble_stream`]).

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
use crate::openai;
use crate::sse::sse_events;
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

/// The error a cancelled request or stream ends with.
fn aborted() -> LlmError {
    LlmError::new(ErrorKind::Aborted, "request cancelled")
}

mod assemble;
mod response;

pub use assemble::{assemble_stream, assemble_stream_capped};
pub use response::{ERROR_BODY_SHOWN_BYTES, classify_http_error};
use response::{ReadFailure, read_capped, retry_headers, root_cause};

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;
