//! Commands and the user's shell over HTTP (issue 22), in OpenCode's shapes: `GET
//! /command[?directory=]` lists the commands a session in that directory sees (default: the
//! server's directory); `POST /session/{id}/command {command, arguments?, agent?, model?,
//! parts?}` runs one and waits for its turn, answering like `POST /session/{id}/message`;
//! `POST /session/{id}/shell {command, agent?, model?}` runs the user's shell command in an
//! idle session (409 `session_busy` otherwise) and answers `{info, parts}` of the assistant
//! message holding its `bash` part.

use std::collections::HashMap;
use std::path::PathBuf;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::Value;
use troupe_session::SessionId;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ErrorBody};
use crate::routes::{ModelSpec, PromptPart, file_input, turn_response};

type ApiResult<T> = Result<T, ApiError>;

/// `POST /session/{id}/command` body (OpenCode's).
#[derive(Debug, Deserialize, ToSchema)]
pub struct CommandBody {
    /// The command's name (without `/`).
    pub command: String,
    /// Its arguments as typed.
    #[serde(default)]
    pub arguments: String,
    /// Agent when the command names none.
    pub agent: Option<String>,
    /// Model when the command names none.
    pub model: Option<ModelSpec>,
    /// `file` parts attached to the prompt.
    pub parts: Option<Vec<PromptPart>>,
    /// OpenCode's `messageID`; accepted, not reused.
    #[serde(rename = "messageID")]
    pub message_id: Option<String>,
}

/// The commands a session in `directory` sees: `[{name, description?, agent?, model?,
/// subtask?, template, source}]`, sorted by name.
#[utoipa::path(get, path = "/command", tag = "command",
    params(("directory" = Option<String>, Query, description = "Project directory (default: the server's)")),
    responses((status = 200, description = "`[{name, description?, agent?, model?, subtask?, template, source}]`", body = [Value]),
              (status = 400, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let dir = match q.get("directory") {
        Some(d) if PathBuf::from(d).is_absolute() => PathBuf::from(d),
        Some(d) => st.directory.join(d),
        None => st.directory.clone(),
    };
    let commands = st.runtime.commands(dir).await?;
    Ok(Json(
        serde_json::to_value(commands).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

/// Run a command in a session and wait for its turn; returns its last assistant message.
/// An unknown command is a 400 listing the available ones.
#[utoipa::path(post, path = "/session/{id}/command", tag = "session", request_body = CommandBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "`{info, parts}` of the turn's last assistant message", body = Value),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn run(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<CommandBody>,
) -> ApiResult<Json<Value>> {
    let mut files = Vec::new();
    for (i, p) in body.parts.unwrap_or_default().into_iter().enumerate() {
        if p.kind != "file" {
            return Err(ApiError::bad_request(format!(
                "parts[{i}]: a command takes only \"file\" parts, got {:?}",
                p.kind
            )));
        }
        files.push(file_input(i, p)?);
    }
    let input = troupe_actors::command::CommandInput {
        name: body.command.trim_start_matches('/').to_string(),
        arguments: body.arguments,
        agent: body.agent,
        model: body.model.as_ref().map(ModelSpec::full),
        files,
    };
    let result = st.runtime.command(&id, input).await?;
    turn_response(&st, &id, result).await
}

/// `POST /session/{id}/shell` body (OpenCode's).
#[derive(Debug, Deserialize, ToSchema)]
pub struct ShellBody {
    /// The shell command.
    pub command: String,
    /// Agent named on the messages (default: the session's).
    pub agent: Option<String>,
    /// Model named on the messages (default: the session's).
    pub model: Option<ModelSpec>,
}

/// Run the user's shell command in an idle session; the model sees it on the next turn.
#[utoipa::path(post, path = "/session/{id}/shell", tag = "session", request_body = ShellBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "`{info, parts}`: the assistant message and its completed `bash` part", body = Value),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "The session is busy", body = ErrorBody)))]
pub async fn shell(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<ShellBody>,
) -> ApiResult<Json<Value>> {
    if body.command.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty command: send {\"command\": \"...\"}",
        ));
    }
    let r = st
        .runtime
        .shell(
            &id,
            &body.command,
            body.agent,
            body.model.as_ref().map(ModelSpec::full),
        )
        .await?;
    Ok(Json(
        serde_json::json!({"info": r.message, "parts": [r.part]}),
    ))
}
