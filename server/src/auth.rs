//! Password check for every route.
//!
//! When the server has a password, a request must carry it as `Authorization: Bearer
//! <password>`, `Authorization: Basic base64(<any user>:<password>)`, or the query parameter
//! `?token=<password>` (browsers' `EventSource` cannot set headers). Otherwise: 401 JSON.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Middleware: pass the request on when `password` is `None` or the request carries it.
pub async fn require_password(
    State(password): State<Option<Arc<str>>>,
    req: Request,
    next: Next,
) -> Response {
    match password {
        Some(p) if !authorized(&req, &p) => ApiError::unauthorized().into_response(),
        _ => next.run(req).await,
    }
}

/// Whether `req` carries `password` in one of the accepted forms.
pub fn authorized(req: &Request, password: &str) -> bool {
    if let Some(h) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let h = h.trim();
        if let Some((scheme, rest)) = h.split_once(' ') {
            let rest = rest.trim();
            if scheme.eq_ignore_ascii_case("bearer") && ct_eq(rest.as_bytes(), password.as_bytes())
            {
                return true;
            }
            if scheme.eq_ignore_ascii_case("basic")
                && let Some(decoded) = base64_decode(rest)
                && let Some(pos) = decoded.iter().position(|&b| b == b':')
                && ct_eq(&decoded[pos + 1..], password.as_bytes())
            {
                return true;
            }
        }
    }
    if let Ok(Query(q)) = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        && let Some(t) = q.get("token")
    {
        return ct_eq(t.as_bytes(), password.as_bytes());
    }
    false
}

/// Compare without an early exit on the first differing byte (the length still leaks).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Decode standard base64 (RFC 4648 §4, `=` padding optional); `None` on a bad character.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim_end_matches('=').as_bytes();
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn req(uri: &str, auth: Option<&str>) -> Request {
        let mut b = axum::http::Request::builder().uri(uri);
        if let Some(a) = auth {
            b = b.header(AUTHORIZATION, a);
        }
        b.body(Body::empty()).expect("request")
    }

    #[test]
    fn base64_decodes_padded_and_unpadded() {
        assert_eq!(
            base64_decode("dXNlcjpzM2NyZXQ=").as_deref(),
            Some(&b"user:s3cret"[..])
        );
        assert_eq!(base64_decode("YQ").as_deref(), Some(&b"a"[..]));
        assert_eq!(base64_decode("YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64_decode("YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(base64_decode("a*b="), None);
    }

    #[test]
    fn accepts_bearer_basic_and_token_only_with_the_password() {
        assert!(authorized(&req("/", Some("Bearer s3cret")), "s3cret"));
        assert!(!authorized(&req("/", Some("Bearer nope")), "s3cret"));
        // "anyone:s3cret"
        assert!(authorized(
            &req("/", Some("Basic YW55b25lOnMzY3JldA==")),
            "s3cret"
        ));
        // "anyone:wrong"
        assert!(!authorized(
            &req("/", Some("Basic YW55b25lOndyb25n")),
            "s3cret"
        ));
        assert!(authorized(&req("/event?token=s3cret", None), "s3cret"));
        assert!(authorized(
            &req("/event?x=1&token=s%33cret", None),
            "s3cret"
        ));
        assert!(!authorized(&req("/event?token=s3cre", None), "s3cret"));
        assert!(!authorized(&req("/event", None), "s3cret"));
    }
}
