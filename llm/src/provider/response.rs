//! A failed exchange in words: reading an error (or JSON) body under a byte cap and an idle
//! deadline, the one-line cause of a transport error, the retry headers kept, and
//! [`classify_http_error`], which turns an HTTP error response into an [`LlmError`] of the
//! right [`ErrorKind`].

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use troupe_config::model::ResolvedModel;

use super::MAX_KEPT_BODY_BYTES;
use crate::error::{ErrorKind, LlmError};
use crate::openai::{excerpt, is_overflow_message, value_to_code};

/// A one-line reason from an error's source chain: I/O error kinds get short lowercase names
/// ("connection refused", "connection reset"), others the innermost message.
pub(super) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
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

/// The `retry-after-ms` and `retry-after` headers of a response, as sent (for
/// [`crate::retry_delay`]).
pub(super) fn retry_headers(h: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    ["retry-after-ms", "retry-after"]
        .iter()
        .filter_map(|name| {
            h.get(*name)
                .and_then(|v| v.to_str().ok())
                .map(|v| (name.to_string(), v.to_string()))
        })
        .collect()
}

/// Why [`read_capped`] stopped before the body ended.
pub(super) enum ReadFailure {
    /// No byte for the idle deadline.
    Idle,
    /// The connection broke.
    Broken(reqwest::Error),
}

/// A body read by [`read_capped`].
pub(super) struct Capped {
    /// What arrived (lossy UTF-8), at most the cap.
    pub(super) body: String,
    /// Why the body is incomplete, if it is.
    pub(super) failure: Option<ReadFailure>,
}

/// Read at most `cap` bytes of `resp`'s body, failing when no byte arrives for `idle`.
/// What arrived before a failure is kept.
pub(super) async fn read_capped(resp: reqwest::Response, cap: usize, idle: Duration) -> Capped {
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
