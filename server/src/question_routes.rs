//! The `question` tool's routes (OpenCode's): `GET /question` lists the pending questions
//! (`question.asked` payloads: `{id, sessionID, questions, tool}`), `POST
//! /question/{requestID}/reply` `{answers}` answers one (one list of picked labels or typed
//! text per question, in order), `POST /question/{requestID}/reject` dismisses one (its turn
//! stops). `question.replied` / `question.rejected` follow on `/event`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ErrorBody};
use troupe_actors::question::ReplyError;

/// `POST /question/{requestID}/reply` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionReplyBody {
    /// One list per question, in order: the picked option labels, or text the user typed.
    pub answers: Vec<Vec<String>>,
}

/// Pending questions, oldest first.
#[utoipa::path(get, path = "/question", tag = "question",
    responses((status = 200, description = "`[{id, sessionID, questions, tool}]`", body = [Value])))]
pub async fn list(State(st): State<AppState>) -> Json<Vec<Value>> {
    Json(st.runtime.pending_questions())
}

/// Answer a pending question.
#[utoipa::path(post, path = "/question/{requestID}/reply", tag = "question",
    request_body = QuestionReplyBody,
    params(("requestID" = String, Path, description = "Question id (`question.asked` id)")),
    responses((status = 200, body = bool), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn reply(
    State(st): State<AppState>,
    Path(request_id): Path<String>,
    ApiJson(body): ApiJson<QuestionReplyBody>,
) -> Result<Json<bool>, ApiError> {
    match st.runtime.reply_question(&request_id, body.answers) {
        Ok(()) => Ok(Json(true)),
        Err(e @ ReplyError::NotFound(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ ReplyError::Invalid(_)) => Err(ApiError::bad_request(e.to_string())),
    }
}

/// Dismiss a pending question: the turn that asked it stops.
#[utoipa::path(post, path = "/question/{requestID}/reject", tag = "question",
    params(("requestID" = String, Path, description = "Question id (`question.asked` id)")),
    responses((status = 200, body = bool), (status = 404, body = ErrorBody)))]
pub async fn reject(
    State(st): State<AppState>,
    Path(request_id): Path<String>,
) -> Result<Json<bool>, ApiError> {
    if st.runtime.reject_question(&request_id) {
        Ok(Json(true))
    } else {
        Err(ApiError::not_found(format!(
            "question not found (already answered?): {request_id}"
        )))
    }
}
