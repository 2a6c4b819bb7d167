//! `GET /session/{id}/timeline`: where a session's time went, as Gantt rows built from its
//! stored part times by [`troupe_session::timeline::build`] — the same rows `troupe session
//! show ID --timeline` prints, so the web view's chart and the CLI's agree.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::Value;
use troupe_session::{SessionId, now_ms};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};

/// The session's timeline: `{sessionID, start, end, now, rows: [{kind, label, sessionID,
/// messageID, partID?, childSessionID?, start, end, depth, lane, status}]}`, times in ms
/// since the epoch, running rows extended to `now` (see `troupe_session::timeline`).
#[utoipa::path(get, path = "/session/{id}/timeline", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "`{sessionID, start, end, now, rows}`", body = Value),
        (status = 404, body = ErrorBody)))]
pub async fn timeline(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> Result<Json<Value>, ApiError> {
    let session = crate::routes::find_session(&st, &id).await?;
    let sid = session.id.clone();
    let now = now_ms();
    let timeline = st
        .runtime
        .store()
        .read(move |r| troupe_session::timeline::load(r, &sid, now))
        .await?
        .ok_or_else(|| ApiError::session_not_found(&id))?;
    Ok(Json(
        serde_json::to_value(timeline).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}
