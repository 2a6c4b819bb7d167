//! Provider error classes (see opencode-engine.md §3.4, wire-formats.md §1.5, §2.3).

/// Class of a provider failure. Decides retry and what the user sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 401/403, missing or bad key. Not retried.
    Auth,
    /// The request does not fit the model's context (400/413 with overflow codes or
    /// messages). Not retried; hands over to compaction.
    ContextOverflow,
    /// 429 rate limit. Retried.
    RateLimit,
    /// 429 `insufficient_quota` / billing. Not retried.
    QuotaExceeded,
    /// 529 / `overloaded_error` / `server_is_overloaded`. Retried.
    Overloaded,
    /// 5xx. Retried.
    Server,
    /// An error event inside a 200 stream. Retried as a transport error.
    StreamError,
    /// Connection refused/reset, stream cut before the finish, idle past the timeout. Retried.
    Transport,
    /// A stream chunk that is not valid for the protocol. Not retried.
    MalformedChunk,
    /// Other 4xx (bad request, unknown model, …). Not retried.
    BadRequest,
    /// Cancelled by the caller.
    Aborted,
}

/// A provider failure, with what is needed to classify, retry and report it.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{message}")]
pub struct LlmError {
    /// What kind of failure it is; decides whether the request is retried.
    pub kind: ErrorKind,
    /// One-line human message, preferably the provider's own (`error.message`).
    pub message: String,
    /// HTTP status, when the failure was an HTTP response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Retry hint headers (`retry-after-ms`, `retry-after`), lowercase names, as received.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_headers: Vec<(String, String)>,
    /// Response body (truncated to 4 KiB), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Whether a deadline of the request passed (connect, response headers, a body or
    /// stream silent past the idle timeout): the failure is a timeout, whatever its class.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeout: bool,
}

impl LlmError {
    /// Build an error without HTTP details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            retry_headers: Vec::new(),
            body: None,
            timeout: false,
        }
    }

    /// A `Transport` error for a deadline that passed (see [`LlmError::timeout`]).
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self {
            timeout: true,
            ..Self::new(ErrorKind::Transport, message)
        }
    }

    /// Whether the retry layer may try again (rate limit, overloaded, 5xx, stream error,
    /// transport). Auth, overflow, quota, malformed chunks, other 4xx and aborts are final.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::RateLimit
                | ErrorKind::Overloaded
                | ErrorKind::Server
                | ErrorKind::StreamError
                | ErrorKind::Transport
        )
    }

    /// Convenience: a `Duration`-free check used by callers that only need the class.
    pub fn is_context_overflow(&self) -> bool {
        self.kind == ErrorKind::ContextOverflow
    }
}
