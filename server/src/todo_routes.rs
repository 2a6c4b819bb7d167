//! `GET /session/{id}/todo`: a session's todo list (OpenCode's route and shape:
//! `[{content, status, priority}]`, in order). Live changes arrive as `todo.updated` events
//! on `/event`.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::Value;
use troupe_session::SessionId;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// The session's todo list, in order (empty when the model never wrote one).
#[utoipa::path(get, path = "/session/{id}/todo", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "`[{content, status, priority}]`", body = [Value]),
        (status = 404, body = ErrorBody)))]
pub async fn todos(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> Result<Json<Value>, ApiError> {
    let session = crate::routes::find_session(&st, &id).await?;
    let todos = st
        .runtime
        .store()
        .read(move |r| r.todos(&session.id))
        .await?;
    Ok(Json(
        serde_json::to_value(todos).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}
