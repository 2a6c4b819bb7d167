//! Session diff, revert, unrevert and fork (issue 15), in OpenCode's request and response
//! shapes (`GET /session/{id}/diff?messageID=`, `POST /session/{id}/revert {messageID,
//! partID?}`, `POST /session/{id}/unrevert`, `POST /session/{id}/fork {messageID?}`). A busy
//! session answers 409 (`session_busy`), as OpenCode's `SessionBusyError`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::Value;
use troupe_session::{MessageId, PartId, SessionId};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ErrorBody};
use crate::routes::session_value;

type ApiResult<T> = Result<T, ApiError>;

/// `POST /session/{id}/revert` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevertBody {
    /// Message to revert to.
    #[serde(rename = "messageID")]
    #[schema(value_type = String)]
    pub message_id: MessageId,
    /// Part of that message to revert to (the parts before it stay).
    #[serde(rename = "partID", default)]
    #[schema(value_type = Option<String>)]
    pub part_id: Option<PartId>,
}

/// `POST /session/{id}/fork` body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// Copy only the messages before this one (all when absent).
    #[serde(rename = "messageID", default)]
    #[schema(value_type = Option<String>)]
    pub message_id: Option<MessageId>,
}

/// The session's file changes from its first snapshot to its last (with `messageID`: that
/// user message's turn only): `[{file, status, additions, deletions, patch}]`.
#[utoipa::path(get, path = "/session/{id}/diff", tag = "session",
    params(("id" = String, Path, description = "Session id"),
        ("messageID" = Option<String>, Query, description = "Only this user message's turn")),
    responses((status = 200, description = "`[{file, status: added|deleted|modified, additions, deletions, binary?, patch}]`", body = [Value]),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn diff(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let (_, changes) = st
        .runtime
        .session_diff(&id, q.get("messageID").map(MessageId::from).as_ref())
        .await?;
    Ok(Json(
        serde_json::to_value(changes).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

/// Revert the session to a message (or part): the files changed after it are restored, the
/// later messages hidden until the next prompt. 409 while the session is busy.
#[utoipa::path(post, path = "/session/{id}/revert", tag = "session", request_body = RevertBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The session, with `revert`", body = Value),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn revert(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<RevertBody>,
) -> ApiResult<Json<Value>> {
    let s = st
        .runtime
        .revert(&id, &body.message_id, body.part_id.as_ref())
        .await?;
    session_value(&s).map(Json)
}

/// Undo the session's pending revert. 409 while the session is busy.
#[utoipa::path(post, path = "/session/{id}/unrevert", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The session", body = Value),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn unrevert(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> ApiResult<Json<Value>> {
    let s = st.runtime.unrevert(&id).await?;
    session_value(&s).map(Json)
}

/// Copy the session's history (before `messageID`, or all of it) into a new session with
/// fresh ids.
#[utoipa::path(post, path = "/session/{id}/fork", tag = "session", request_body = ForkBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The new session", body = Value),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn fork(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<ForkBody>,
) -> ApiResult<Json<Value>> {
    let s = st.runtime.fork(&id, body.message_id.as_ref()).await?;
    session_value(&s).map(Json)
}
