//! Permission asks: the pending requests and their answers (`/permission`, and OpenCode's
//! legacy `/session/{id}/permissions/{permissionID}`).

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use troupe_actors::permission::Reply;
use troupe_session::SessionId;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ErrorBody};
use crate::routes::{ApiResult, find_session};

/// OpenCode's legacy `POST /session/{id}/permissions/{permissionID}` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LegacyPermissionBody {
    /// `once`, `always` or `reject`.
    pub response: String,
}

/// `POST /permission/{requestID}/reply` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PermissionReplyBody {
    /// `once`, `always` or `reject`.
    pub reply: String,
    /// Feedback for the model (with `reject`).
    pub message: Option<String>,
}

/// Pending permission requests.
#[utoipa::path(get, path = "/permission", tag = "permission",
    responses((status = 200, description = "`[{id, sessionID, permission, patterns, always, metadata, tool?}]`", body = [Value])))]
pub async fn permissions(State(st): State<AppState>) -> Json<Vec<Value>> {
    Json(st.runtime.pending_permissions())
}

/// Answer a pending permission request.
#[utoipa::path(post, path = "/permission/{requestID}/reply", tag = "permission",
    request_body = PermissionReplyBody,
    params(("requestID" = String, Path, description = "Request id (`permission.asked` id)")),
    responses((status = 200, body = bool), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn reply_permission(
    State(st): State<AppState>,
    Path(request_id): Path<String>,
    ApiJson(body): ApiJson<PermissionReplyBody>,
) -> ApiResult<Json<bool>> {
    let reply = match body.reply.as_str() {
        "once" => Reply::Once,
        "always" => Reply::Always,
        "reject" => Reply::Reject(body.message.filter(|m| !m.trim().is_empty())),
        other => {
            return Err(ApiError::bad_request(format!(
                "reply must be \"once\", \"always\" or \"reject\", got {other:?}"
            )));
        }
    };
    if st.runtime.reply_permission(&request_id, reply) {
        Ok(Json(true))
    } else {
        Err(ApiError::not_found(format!(
            "permission request not found (already answered?): {request_id}"
        )))
    }
}

/// Answer a pending permission request: OpenCode's legacy route, `{response}` instead of
/// `{reply}`. The request must belong to the session.
#[utoipa::path(post, path = "/session/{id}/permissions/{permissionID}", tag = "permission",
    request_body = LegacyPermissionBody,
    params(("id" = String, Path, description = "Session id"),
           ("permissionID" = String, Path, description = "Request id (`permission.asked` id)")),
    responses((status = 200, body = bool), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn reply_permission_legacy(
    State(st): State<AppState>,
    Path((id, request_id)): Path<(SessionId, String)>,
    ApiJson(body): ApiJson<LegacyPermissionBody>,
) -> ApiResult<Json<bool>> {
    find_session(&st, &id).await?;
    let pending = st.runtime.pending_permissions().into_iter().any(|p| {
        p.get("id").and_then(Value::as_str) == Some(request_id.as_str())
            && p.get("sessionID").and_then(Value::as_str) == Some(id.as_str())
    });
    if !pending {
        return Err(ApiError::not_found(format!(
            "permission request not found in session {id} (already answered?): {request_id}"
        )));
    }
    reply_permission(
        State(st),
        Path(request_id),
        ApiJson(PermissionReplyBody {
            reply: body.response,
            message: None,
        }),
    )
    .await
}
