//! Browser guard: what keeps a web page from driving (or reading) a local `troupe serve`.
//!
//! A server on 127.0.0.1 runs tools on the user's machine, and any web page the user opens
//! can send it requests. Three routes in, three checks, in this order, before the password
//! check of [`crate::auth`]:
//!
//! 1. **DNS rebinding** — a page on `evil.example` re-points its own name at 127.0.0.1 and
//!    then talks to the server "same-origin". Its requests still carry `Host: evil.example`.
//!    Without a password, a request whose `Host` is not a loopback name of the bound port
//!    (`localhost:P`, `127.0.0.1:P`, `[::1]:P`, or the bound address itself; the bare name
//!    when the port is 80) gets **421 Misdirected Request** (RFC 9110 §15.5.20: the server
//!    is not configured to answer for that authority). A missing `Host` is refused too. With
//!    a password the check is skipped: a reverse proxy or a LAN name may front the server,
//!    and a rebinding page does not know the password.
//! 2. **Cross-site requests** — browsers send `Origin` on every cross-origin request and on
//!    every non-GET request. An `Origin` that is neither this server itself (`http://` or
//!    `https://` + the request's `Host`) nor listed with `--cors` gets **403**, on every
//!    route and method (so no page can read `/event`, `/session/…/message` or `/config`
//!    either, even where a browser would send the request and only hide the answer). The
//!    opaque origin `null` (sandboxed frames, `file://`) is cross-site. This holds with a
//!    password as well: a browser replays cached Basic credentials on cross-site requests.
//!    `Sec-Fetch-Site: cross-site` on a state-changing request is refused the same way.
//! 3. **Form and beacon bodies** — a page can POST `text/plain`, form-encoded or untyped
//!    (`Blob`) bodies cross-site without a CORS preflight. Every request that can change
//!    state (any method but GET, HEAD, OPTIONS) that has a body or a `Content-Type` must
//!    declare `application/json` (parameters such as `charset` allowed); anything else gets
//!    **403**, not 415: the request is refused as unsafe before its body is read, whatever
//!    it contains, and the issue that asked for this (#12) names 403. A request with no body
//!    and no `Content-Type` (e.g. `curl -X POST …/abort`) passes: a browser sends `Origin`
//!    with it, which check 2 covers.
//!
//! Refused requests never reach a handler, so they create nothing. Errors are the usual JSON
//! `{"error": {"message", "type"}}` with type `misdirected_request` or `forbidden`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// What the guard lets through. Built once per server from its options and bound address.
#[derive(Debug, Clone)]
pub struct Guard {
    /// Accepted `Host` values, lower case; `None` accepts any (a password is set).
    hosts: Option<Vec<String>>,
    /// Origins allowed by `--cors`, exactly as given (`*` allows any).
    cors: Vec<String>,
}

impl Guard {
    /// The guard of a server bound to `addr` as `hostname`. `password_set`: whether every
    /// route requires a (non-blank) password; `cors`: the `--cors` origins.
    pub fn new(hostname: &str, addr: SocketAddr, password_set: bool, cors: &[String]) -> Guard {
        let hosts = (!password_set).then(|| {
            let port = addr.port();
            let bound = hostname.trim_start_matches('[').trim_end_matches(']');
            let bound = if bound.contains(':') {
                format!("[{bound}]")
            } else {
                bound.to_string()
            };
            let mut names = vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                "[::1]".to_string(),
                bound.to_ascii_lowercase(),
            ];
            names.sort();
            names.dedup();
            let mut out: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
            if port == 80 {
                out.extend(names);
            }
            out
        });
        Guard {
            hosts,
            cors: cors.to_vec(),
        }
    }

    /// Check one request's headers; `Err` is the response to send instead.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        // A repeated Host, Origin or Content-Type is ambiguous: checking one copy while a
        // later layer reads another would let the other through (RFC 9112 §3.2: a request
        // with more than one Host gets 400).
        for name in [header::HOST, header::ORIGIN, header::CONTENT_TYPE] {
            let copies = headers.get_all(&name).iter().count();
            if copies > 1 {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("refused a request with {copies} {name} headers (send one)"),
                ));
            }
        }
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(|h| h.trim().to_ascii_lowercase());
        if let Some(allowed) = &self.hosts {
            match &host {
                Some(h) if allowed.iter().any(|a| a == h) => {}
                Some(h) => {
                    return Err(ApiError::new(
                        StatusCode::MISDIRECTED_REQUEST,
                        "misdirected_request",
                        format!(
                            "refused Host {h:?}: this server answers only to {} (DNS-rebinding guard; set a password to serve other names)",
                            allowed.join(", ")
                        ),
                    ));
                }
                None => {
                    return Err(ApiError::new(
                        StatusCode::MISDIRECTED_REQUEST,
                        "misdirected_request",
                        "refused a request without a Host header",
                    ));
                }
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("<not text>").trim();
            if !self.origin_allowed(origin, host.as_deref()) {
                return Err(forbidden(format!(
                    "refused cross-site request from origin {origin:?}: only this server's own page{} may call it",
                    if self.cors.is_empty() {
                        String::new()
                    } else {
                        format!(" and --cors {}", self.cors.join(", "))
                    }
                )));
            }
        }
        if changes_state(method) {
            if headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("cross-site"))
                && !self.cors.iter().any(|c| c == "*")
                && headers.get(header::ORIGIN).is_none()
            {
                return Err(forbidden(
                    "refused cross-site request (Sec-Fetch-Site: cross-site)",
                ));
            }
            check_json_body(headers)?;
        }
        Ok(())
    }

    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self.cors.iter().any(|c| c == "*" || c == origin) {
            return true;
        }
        let Some(host) = host else {
            return false;
        };
        let origin = origin.to_ascii_lowercase();
        origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| rest == host)
    }
}

/// Whether `method` may change state (everything but GET, HEAD, OPTIONS).
fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

/// A state-changing request with a body or a `Content-Type` must be `application/json`.
fn check_json_body(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE);
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    match content_type {
        None if !has_body => Ok(()),
        None => Err(forbidden(
            "refused a request body without Content-Type: send Content-Type: application/json",
        )),
        Some(ct) => {
            let ct = ct.to_str().unwrap_or("");
            let essence = ct.split(';').next().unwrap_or("").trim();
            if essence.eq_ignore_ascii_case("application/json") {
                Ok(())
            } else {
                Err(forbidden(format!(
                    "refused Content-Type {ct:?}: this route accepts only application/json"
                )))
            }
        }
    }
}

/// Middleware running [`Guard::check`] on every request.
///
/// Every response, refused or not, also says it must not be framed by another page
/// (`X-Frame-Options: DENY`, RFC 7034, and CSP `frame-ancestors 'none'`): a page that frames
/// the web view could otherwise trick the user into clicking its permission buttons
/// (clickjacking).
pub async fn guard(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let mut response = match g.check(req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::warn!("{} {}: {}", req.method(), req.uri().path(), e.message);
            e.into_response()
        }
    };
    let h = response.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
