//! JSON errors and the JSON body extractor.
//!
//! Every error the API returns has the shape `{"error": {"message": "...", "type": "..."}}`
//! with a status code matching its type: `bad_request` 400, `unauthorized` 401,
//! `forbidden` 403 (browser guard), `not_found` 404, `method_not_allowed` 405,
//! `session_busy` 409 (another process drives the session), `aborted` 409 (the prompt was
//! aborted before it ran), `payload_too_large` 413, `misdirected_request` 421 (browser guard),
//! `internal` 500, `unavailable` 503 (the runtime is shutting down).

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

/// An API error: HTTP status, machine-readable type and a human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Error type (`bad_request`, `not_found`, …).
    pub kind: &'static str,
    /// What went wrong, for people.
    pub message: String,
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Inside [`ErrorBody`].
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong.
    pub message: String,
    /// Error type: `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `session_busy`, `aborted`, `payload_too_large`,
    /// `misdirected_request`, `internal`, `unavailable`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl ApiError {
    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong password: send `Authorization: Bearer <password>`, HTTP Basic auth, or `?token=<password>`",
        )
    }

    /// 500 `internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 404 for an unknown session id.
    pub fn session_not_found(id: &str) -> Self {
        Self::not_found(format!("session not found: {id}"))
    }

    /// An error with any status and type.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.message,
                kind: self.kind.to_string(),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 9110 §11.6.1: a 401 must say which schemes the server takes.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static(WWW_AUTHENTICATE_SCHEMES),
            );
        }
        response
    }
}

/// The `WWW-Authenticate` value of every 401: Bearer (the password as a token) and HTTP Basic
/// (any user name, the password), the two schemes `auth` accepts besides `?token=`.
pub const WWW_AUTHENTICATE_SCHEMES: &str = "Bearer realm=\"troupe\", Basic realm=\"troupe\"";

impl From<troupe_actors::RuntimeError> for ApiError {
    fn from(e: troupe_actors::RuntimeError) -> Self {
        use troupe_actors::RuntimeError as E;
        match e {
            E::SessionNotFound(id) => ApiError::session_not_found(&id),
            E::Turn(m) => ApiError::bad_request(m),
            E::Prompt(e) => turn_error(e),
            E::Store(e) => ApiError::internal(format!("store: {e}")),
            E::Spawn(m) => ApiError::internal(format!("could not start actor: {m}")),
            e @ E::SessionBusy { .. } => {
                ApiError::new(StatusCode::CONFLICT, "session_busy", e.to_string())
            }
        }
    }
}

/// The status of a prompt that got no result, by its reason: the caller's input 400; an
/// abort (this or another client's `POST /abort`, `DELETE`) or another process holding the
/// session 409 `session_busy`/`aborted`; a runtime shutting down 503 `unavailable`; a stored
/// ruleset that does not decode and the session actor's crashes 500 `internal` — the server's
/// state, not the request, is at fault (RFC 9110 §15.5.1, §15.5.10, §15.6.1, §15.6.4).
fn turn_error(e: troupe_actors::TurnError) -> ApiError {
    use troupe_actors::TurnError as T;
    let message = e.to_string();
    match e {
        T::Refused(_) => ApiError::bad_request(message),
        T::LeaseLost => ApiError::new(StatusCode::CONFLICT, "session_busy", message),
        T::AbortedBeforeStart | T::AbortedBeforeDelivery => {
            ApiError::new(StatusCode::CONFLICT, "aborted", message)
        }
        T::Stopped => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
        T::Ruleset(_)
        | T::StoppedDuringTurn
        | T::CrashedThenAborted { .. }
        | T::Failed { .. }
        | T::AbortDidNotEnd => ApiError::internal(message),
    }
}

impl From<troupe_session::StoreError> for ApiError {
    fn from(e: troupe_session::StoreError) -> Self {
        ApiError::internal(format!("store: {e}"))
    }
}

/// A JSON request body whose every failure is an [`ApiError`]: a body over the size cap is
/// 413, a body that is not JSON or not the expected shape is 400 naming the problem
/// (serde's message with line and column). An empty body parses as `{}`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| {
                let status = e.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        status,
                        "payload_too_large",
                        format!("request body too large: {}", e.body_text()),
                    )
                } else {
                    ApiError::new(status, "bad_request", e.body_text())
                }
            })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(text)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_map_to_statuses() {
        let e: ApiError = troupe_actors::RuntimeError::SessionNotFound("ses_x".into()).into();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert!(e.message.contains("ses_x"));
        let e: ApiError = troupe_actors::RuntimeError::Turn("agent not found".into()).into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    /// Every reason a prompt got no result has the status of whose fault it is; the message
    /// is the reason's text.
    #[test]
    fn turn_errors_map_to_the_status_of_their_cause() {
        use troupe_actors::TurnError as T;
        let cases = [
            (T::Refused("agent not found".into()), 400, "bad_request"),
            (T::LeaseLost, 409, "session_busy"),
            (T::AbortedBeforeStart, 409, "aborted"),
            (T::AbortedBeforeDelivery, 409, "aborted"),
            (T::Stopped, 503, "unavailable"),
            (T::StoppedDuringTurn, 500, "internal"),
            (
                T::CrashedThenAborted {
                    cause: "boom".into(),
                },
                500,
                "internal",
            ),
            (
                T::Failed {
                    crashes: 3,
                    period_secs: 60,
                    limit: 2,
                    cause: "boom".into(),
                },
                500,
                "internal",
            ),
            (T::AbortDidNotEnd, 500, "internal"),
            (
                troupe_session::UndecodableRuleset {
                    session_id: "ses_a".into(),
                    error: "bad".into(),
                }
                .into(),
                500,
                "internal",
            ),
        ];
        for (e, status, kind) in cases {
            let text = e.to_string();
            let api: ApiError = troupe_actors::RuntimeError::Prompt(e).into();
            assert_eq!(api.status.as_u16(), status, "{text}");
            assert_eq!(api.kind, kind, "{text}");
            assert_eq!(api.message, text);
        }
    }
}
