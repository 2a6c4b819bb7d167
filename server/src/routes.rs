//! Route handlers. Every handler returns JSON or an [`ApiError`]; paths and shapes are the
//! API contract the web view and `troupe monitor` are written against (see the crate docs).

use std::collections::HashMap;
use std::path::PathBuf;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response, Sse};
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_actors::PromptInput;
use troupe_session::{LeaseView, MessageWithParts, Session, SessionId, Write};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ErrorBody};

/// Most sessions `GET /session` returns.
pub const SESSION_LIST_LIMIT: usize = 1_000;

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// A model in a request body: troupe's `"provider/model"` or OpenCode's
/// `{"providerID", "modelID"}` (`POST /session` also sends `{"providerID", "id"}`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    /// `provider/model`.
    Text(String),
    /// OpenCode's model reference.
    Ref {
        /// Provider id.
        #[serde(rename = "providerID")]
        provider_id: String,
        /// Model id (`modelID`, or `id` in OpenCode's session-create body).
        #[serde(rename = "modelID", alias = "id")]
        model_id: String,
    },
}

impl ModelSpec {
    /// `provider/model`.
    pub fn full(&self) -> String {
        match self {
            ModelSpec::Text(s) => s.clone(),
            ModelSpec::Ref {
                provider_id,
                model_id,
            } => format!("{provider_id}/{model_id}"),
        }
    }
}

/// `POST /session` body (troupe's fields plus OpenCode's `agent` and `model`; OpenCode's
/// `?directory=` query or `x-opencode-directory` header also name the directory).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateSession {
    /// Title (default `New session - <ISO time>`).
    pub title: Option<String>,
    /// Working directory (default: the server's directory). Must exist.
    pub directory: Option<String>,
    /// Parent session id (makes a child session). Must exist.
    #[serde(rename = "parentID")]
    #[schema(value_type = Option<String>)]
    pub parent_id: Option<SessionId>,
    /// OpenCode's `agent`: must be a primary agent; stored as the session's agent, which a
    /// prompt without `agent` uses (default: the config's default agent).
    pub agent: Option<String>,
    /// Model of the session's prompts (stored as the session's model).
    pub model: Option<ModelSpec>,
}

/// One part of a prompt, in OpenCode's shapes: `text` (`text`, `synthetic?`), `file`
/// (`url`: `file:///abs/path[?start=&end=]` or `data:<mime>;base64,…`, `mime?`, `filename?`)
/// and `agent` (`name` of a subagent). Clients' `id`s are accepted, not reused.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PromptPart {
    /// Part id the client chose (`prt_…`); accepted, not reused.
    pub id: Option<String>,
    /// Part type: `text`, `file` or `agent`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text (`text` parts).
    #[serde(default)]
    pub text: String,
    /// A synthetic part (context the client adds, not typed by the user).
    #[serde(default)]
    pub synthetic: bool,
    /// Where the file is (`file` parts).
    pub url: Option<String>,
    /// Its MIME type (`file` parts).
    pub mime: Option<String>,
    /// Its name to show (`file` parts).
    pub filename: Option<String>,
    /// The agent (`agent` parts).
    pub name: Option<String>,
}

/// `POST /session/{id}/message` and `/prompt_async` body: troupe's `text` and
/// `model: "provider/model"`, or OpenCode's `parts` with ids and
/// `model: {providerID, modelID}`. `text` and the text parts are joined with newlines; the
/// result must not be blank.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct PromptBody {
    /// The prompt text.
    pub text: Option<String>,
    /// Prompt parts (`[{"type": "text", "text": "..."}]`, OpenCode's with `id`).
    pub parts: Option<Vec<PromptPart>>,
    /// Agent name (default `build`).
    pub agent: Option<String>,
    /// Model of this message (`provider/model` or OpenCode's `{providerID, modelID}`).
    pub model: Option<ModelSpec>,
    /// Extra system prompt for this message.
    pub system: Option<String>,
    /// OpenCode's `messageID` for the new user message; accepted, not reused.
    #[serde(rename = "messageID")]
    pub message_id: Option<String>,
    /// OpenCode's `noReply`: store the user message and run no turn (`/message` then
    /// returns that user message as `{info, parts}`). Queued behind a running turn.
    #[serde(rename = "noReply", default)]
    pub no_reply: bool,
    /// To a busy session: `false` (default) delivers the prompt into the running turn at
    /// its next step boundary (wrapped as a reminder that the user sent it while the agent
    /// worked; the call then answers with that turn's result); `true` waits for a turn of
    /// its own after the running one.
    #[serde(default)]
    pub queue: bool,
    /// Step limit of this prompt's turn, 1 or more (troupe's; over the agent's `steps`).
    #[serde(rename = "maxSteps", default)]
    pub max_steps: Option<u32>,
}

/// `PATCH /session/{id}` body (OpenCode's): any of `title` and `permission`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct PatchSession {
    /// New title (not blank).
    pub title: Option<String>,
    /// Rules appended to the session's ruleset (later rules win): OpenCode's
    /// `[{permission, pattern, action}]` or the config form (`{"bash": "deny"}`).
    pub permission: Option<Value>,
    /// OpenCode's `time.archived`: archiving is not supported, so a value is refused.
    pub time: Option<Value>,
}

pub(crate) fn bool_param(q: &HashMap<String, String>, key: &str) -> ApiResult<bool> {
    match q.get(key).map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(v) => Err(ApiError::bad_request(format!(
            "query parameter `{key}` must be true or false, got {v:?}"
        ))),
    }
}

pub(crate) async fn find_session(st: &AppState, id: &SessionId) -> ApiResult<Session> {
    let key = id.clone();
    st.runtime
        .store()
        .read(move |r| r.session(&key))
        .await?
        .ok_or_else(|| ApiError::session_not_found(id))
}

/// A session as JSON plus `owner`: who drives it right now (its live lease, see
/// `troupe_session::lease`) as `{sessionID, owner, pid, host, label, acquired, heartbeat,
/// expires}` (times ms since epoch, store clock), or `null` when no process does; and
/// `interrupted`: its lease was left by a holder that is gone (expired, or a dead process of
/// this host), so its last turn may have stopped mid-step until the server's recovery
/// repairs it (`troupe_actors::recover`).
fn with_owner(s: &Session, drivers: &LeaseView) -> ApiResult<Value> {
    let mut v = session_value(s)?;
    if let Value::Object(m) = &mut v {
        m.insert(
            "owner".into(),
            serde_json::to_value(drivers.live.get(&s.id))
                .map_err(|e| ApiError::internal(e.to_string()))?,
        );
        m.insert(
            "interrupted".into(),
            Value::Bool(drivers.abandoned.contains_key(&s.id)),
        );
    }
    Ok(v)
}

/// The lease table as this server's process sees it (one read of the store's small table).
async fn lease_view(st: &AppState) -> ApiResult<LeaseView> {
    let claim = st.runtime.shared().identity.claim();
    Ok(st.runtime.store().lease_view(&claim).await?)
}

/// A session as JSON in OpenCode's `Session.Info` shape as well: troupe's fields plus
/// `projectID` (a hash of the session's worktree, `global` outside git, as OpenCode) and
/// `version` (troupe's).
pub(crate) fn session_value(s: &Session) -> ApiResult<Value> {
    let mut v = serde_json::to_value(s).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Value::Object(m) = &mut v {
        m.insert("projectID".into(), json!(project_id(&s.directory)));
        m.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    }
    Ok(v)
}

/// `global` for a directory outside git, else 16 hex digits of the FNV-1a hash of its
/// worktree path (stable across runs and builds).
fn project_id(directory: &str) -> String {
    let dir = std::path::Path::new(directory);
    let root = troupe_config::find_worktree(dir);
    if !root.join(".git").exists() {
        return "global".into();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in root.to_string_lossy().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A message `{info, parts}` in OpenCode's shape as well: assistant messages get `mode` (the
/// agent, which OpenCode still sends).
fn message_value(m: &MessageWithParts) -> ApiResult<Value> {
    let mut v = serde_json::to_value(m).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(info) = v.get_mut("info").and_then(Value::as_object_mut)
        && info.get("role").and_then(Value::as_str) == Some("assistant")
        && let Some(agent) = info.get("agent").cloned()
    {
        info.insert("mode".into(), agent);
    }
    Ok(v)
}

/// The web page.
pub async fn index() -> Html<&'static str> {
    Html(include_str!("../static/index.html"))
}

/// List sessions, newest first.
#[utoipa::path(get, path = "/session", tag = "session",
    params(("roots" = Option<bool>, Query, description = "Only root sessions")),
    responses((status = 200, description = "Sessions, newest first, each with `owner` (the process driving it, or null) and `lastError` (the error of its last turn, or null)", body = [Value])))]
pub async fn list_sessions(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<Value>>> {
    let roots = bool_param(&q, "roots")?;
    // Each session with the error of its last turn (one indexed lookup per session).
    let v = st
        .runtime
        .store()
        .read(move |r| {
            r.sessions(SESSION_LIST_LIMIT, roots)?
                .into_iter()
                .map(|s| r.last_error(&s.id).map(|e| (s, e)))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    let drivers = lease_view(&st).await?;
    v.iter()
        .map(|(s, e)| with_last_error(with_owner(s, &drivers)?, e.as_ref()))
        .collect::<ApiResult<Vec<_>>>()
        .map(Json)
}

/// Adds `lastError`: the `{name, data}` error of the session's last assistant message, or
/// `null` when its last turn ended without one (the web view marks failed sessions with it).
fn with_last_error(mut v: Value, error: Option<&troupe_session::MessageError>) -> ApiResult<Value> {
    if let Value::Object(m) = &mut v {
        m.insert(
            "lastError".into(),
            serde_json::to_value(error).map_err(|e| ApiError::internal(e.to_string()))?,
        );
    }
    Ok(v)
}

/// Create a session.
#[utoipa::path(post, path = "/session", tag = "session", request_body = CreateSession,
    responses((status = 200, description = "The new session", body = Value),
              (status = 400, body = ErrorBody), (status = 404, description = "Unknown parent", body = ErrorBody)))]
pub async fn create_session(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<CreateSession>,
) -> ApiResult<Json<Value>> {
    // OpenCode names the directory in the query or a header; the body wins.
    let directory = body
        .directory
        .clone()
        .or_else(|| q.get("directory").cloned())
        .or_else(|| {
            headers
                .get("x-opencode-directory")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
    let shared = st.runtime.shared();
    if let Some(a) = &body.agent {
        shared
            .agents
            .require_selectable(a)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let model = match &body.model {
        Some(m) => Some(
            shared
                .config
                .resolve_model(&m.full())
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
        None => None,
    };
    let dir = match &directory {
        Some(d) => {
            let p = PathBuf::from(d);
            let p = if p.is_absolute() {
                p
            } else {
                st.directory.join(p)
            };
            match tokio::fs::metadata(&p).await {
                Ok(m) if m.is_dir() => p,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "directory does not exist: {}",
                        p.display()
                    )));
                }
            }
        }
        None => st.directory.clone(),
    };
    if let Some(parent) = &body.parent_id {
        find_session(&st, parent)
            .await
            .map_err(|_| ApiError::not_found(format!("parent session not found: {parent}")))?;
    }
    let mut s = st
        .runtime
        .create_session(&dir, body.parent_id.clone())
        .await?;
    let mut changed = false;
    if let Some(t) = body.title.filter(|t| !t.trim().is_empty()) {
        s.title = t;
        changed = true;
    }
    if let Some(m) = model {
        s.model = Some(troupe_session::ModelRef {
            provider_id: m.provider_id,
            model_id: m.model_id,
        });
        changed = true;
    }
    if let Some(a) = body.agent {
        s.agent = Some(a);
        changed = true;
    }
    if changed {
        st.runtime.store().write1(Write::Session {
            info: s.clone(),
            created: false,
        });
        st.runtime.store().flush().await?;
    }
    session_value(&s).map(Json)
}

/// One session, with `owner` (the process driving it, or null).
#[utoipa::path(get, path = "/session/{id}", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The session with `owner`: `{sessionID, owner, pid, host, label, acquired, heartbeat, expires}` or null, and `interrupted`: its lease holder is gone (its last turn may have stopped mid-step)", body = Value), (status = 404, body = ErrorBody)))]
pub async fn get_session(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> ApiResult<Json<Value>> {
    let s = find_session(&st, &id).await?;
    let drivers = lease_view(&st).await?;
    let key = id.clone();
    let error = st.runtime.store().read(move |r| r.last_error(&key)).await?;
    with_last_error(with_owner(&s, &drivers)?, error.as_ref()).map(Json)
}

/// Change a session's title or permission rules (OpenCode's `PATCH /session/{id}`).
#[utoipa::path(patch, path = "/session/{id}", tag = "session", request_body = PatchSession,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The updated session", body = Value),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn patch_session(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<PatchSession>,
) -> ApiResult<Json<Value>> {
    find_session(&st, &id).await?;
    if let Some(t) = &body.time
        && t.get("archived").is_some_and(|a| !a.is_null())
    {
        return Err(ApiError::bad_request(
            "time.archived: archiving sessions is not supported",
        ));
    }
    let title = match body.title {
        Some(t) if t.trim().is_empty() => {
            return Err(ApiError::bad_request("title must not be blank"));
        }
        t => t,
    };
    let permission = match body.permission {
        None | Some(Value::Null) => None,
        Some(v @ Value::Array(_)) => Some(
            serde_json::from_value::<troupe_agents::Ruleset>(v).map_err(|e| {
                ApiError::bad_request(format!(
                    "permission: expected [{{permission, pattern, action}}] with action allow, ask or deny: {e}"
                ))
            })?,
        ),
        Some(v) => Some(
            troupe_agents::permission::from_config(&v)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
    };
    let s = st
        .runtime
        .update_session(&id, troupe_actors::SessionPatch { title, permission })
        .await?;
    session_value(&s).map(Json)
}

/// Delete a session (aborting it) with its children, messages and parts.
#[utoipa::path(delete, path = "/session/{id}", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = bool), (status = 404, body = ErrorBody)))]
pub async fn delete_session(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> ApiResult<Json<bool>> {
    if st.runtime.delete_session(&id).await? {
        Ok(Json(true))
    } else {
        Err(ApiError::session_not_found(&id))
    }
}

/// Child sessions (subagents).
#[utoipa::path(get, path = "/session/{id}/children", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = [Value]), (status = 404, body = ErrorBody)))]
pub async fn children(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> ApiResult<Json<Vec<Value>>> {
    find_session(&st, &id).await?;
    let v = st.runtime.store().read(move |r| r.children(&id)).await?;
    v.iter()
        .map(session_value)
        .collect::<ApiResult<Vec<_>>>()
        .map(Json)
}

/// Messages with their parts, oldest first; paged with `limit` and `before` (OpenCode's
/// `GET /session/{id}/message?limit=&before=`).
///
/// Without `limit` every message (before `before`, if given) is returned. With it, the newest
/// `limit` messages whose id sorts before `before` come back, still oldest first; the first
/// message's id is the `before` of the next (older) page, and an empty page means there is
/// nothing older. A page costs what it holds, not what the session holds.
#[utoipa::path(get, path = "/session/{id}/message", tag = "session",
    params(("id" = String, Path, description = "Session id"),
        ("limit" = Option<u32>, Query, description = "At most this many messages (the newest), 1 or more"),
        ("before" = Option<String>, Query, description = "Only messages whose id sorts before this message id (`msg_…`)")),
    responses((status = 200, description = "`[{info, parts}]`", body = [Value]), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn messages(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<Value>>> {
    let limit = match q.get("limit").map(String::as_str) {
        None => None,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "query parameter `limit` must be a whole number of messages, 1 or more, got {v:?}"
                )));
            }
        },
    };
    let before = q.get("before").map(troupe_session::MessageId::from);
    if let Some(b) = &before
        && !b.starts_with("msg_")
    {
        return Err(ApiError::bad_request(format!(
            "query parameter `before` must be a message id (msg_…), got {b:?}"
        )));
    }
    find_session(&st, &id).await?;
    let v = match (limit, before) {
        (None, None) => st.runtime.store().read(move |r| r.messages(&id)).await?,
        (limit, before) => {
            st.runtime
                .store()
                .read(move |r| r.messages_page(&id, limit.unwrap_or(usize::MAX), before.as_ref()))
                .await?
        }
    };
    v.iter()
        .map(message_value)
        .collect::<ApiResult<Vec<_>>>()
        .map(Json)
}

/// The status of every session that is not idle, by session id: `{"ses_…": {"type":
/// "busy"}, "ses_…": {"type": "retry", "attempt": 2, "message": "…", "next": ms}}`
/// (OpenCode's `GET /session/status`; idle sessions are absent). troupe adds `waiting`
/// (another process holds the session's lease: `{"type": "waiting", "owner", "until"}`).
#[utoipa::path(get, path = "/session/status", tag = "session",
    responses((status = 200, description = "Map of session id to status", body = Value)))]
pub async fn session_statuses(State(st): State<AppState>) -> Json<Value> {
    let map: serde_json::Map<String, Value> = st
        .runtime
        .bus()
        .statuses()
        .into_iter()
        .filter_map(|(k, v)| serde_json::to_value(v).ok().map(|v| (k.into_string(), v)))
        .collect();
    Json(Value::Object(map))
}

/// The file input of `parts[i]`, a `file` part (its `url` is required).
pub(crate) fn file_input(i: usize, p: PromptPart) -> ApiResult<troupe_actors::inputs::FileInput> {
    Ok(troupe_actors::inputs::FileInput {
        url: p.url.filter(|u| !u.is_empty()).ok_or_else(|| {
            ApiError::bad_request(format!("parts[{i}]: a file part needs a \"url\""))
        })?,
        mime: p.mime,
        filename: p.filename,
    })
}

/// Validate a prompt body against the session, agents and models.
async fn prompt_input(st: &AppState, id: &SessionId, body: PromptBody) -> ApiResult<PromptInput> {
    let session = find_session(st, id).await?;
    let mut pieces: Vec<String> = Vec::new();
    let mut synthetic: Vec<String> = Vec::new();
    if let Some(t) = body.text {
        pieces.push(t);
    }
    let mut files = Vec::new();
    let mut agents = Vec::new();
    for (i, p) in body.parts.unwrap_or_default().into_iter().enumerate() {
        match p.kind.as_str() {
            "text" if p.synthetic => synthetic.push(p.text),
            "text" => pieces.push(p.text),
            "file" => files.push(file_input(i, p)?),
            "agent" => agents.push(p.name.filter(|n| !n.is_empty()).ok_or_else(|| {
                ApiError::bad_request(format!("parts[{i}]: an agent part needs a \"name\""))
            })?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "parts[{i}]: unsupported part type {other:?}: \"text\", \"file\" and \"agent\" parts are accepted"
                )));
            }
        }
    }
    let text = pieces.join("\n");
    if text.trim().is_empty() && files.is_empty() && agents.is_empty() {
        return Err(ApiError::bad_request(
            "empty prompt: send {\"text\": \"...\"} or {\"parts\": [{\"type\": \"text\", \"text\": \"...\"}]}",
        ));
    }
    let shared = st.runtime.shared();
    if let Some(a) = &body.agent {
        shared
            .agents
            .require(a)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    // Without `agent`, the session's agent (given on create, or its last turn's) when it
    // still exists; else the default agent.
    let agent = body
        .agent
        .or_else(|| session.agent.filter(|a| shared.agents.require(a).is_ok()));
    let model = body.model.as_ref().map(ModelSpec::full);
    if let Some(m) = &model {
        shared
            .config
            .resolve_model(m)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    Ok(PromptInput {
        text,
        agent,
        model,
        system: body.system,
        synthetic,
        compact: false,
        no_reply: body.no_reply,
        schema: None,
        steer: !body.queue,
        files,
        agents,
        parts: Vec::new(),
        max_steps: match body.max_steps {
            Some(0) => return Err(ApiError::bad_request("`maxSteps` must be 1 or more")),
            n => n,
        },
        once: false,
    })
}

/// Send a prompt and wait for the turn; returns its last assistant message (with
/// `noReply`, the stored user message).
#[utoipa::path(post, path = "/session/{id}/message", tag = "session", request_body = PromptBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "`{info, parts}` of the turn's last assistant message, or of the user message with `noReply`", body = Value),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "`session_busy`: another process drives the session and did not finish in time, or took it over; `aborted`: the prompt was aborted before it ran", body = ErrorBody),
              (status = 500, description = "The session's stored ruleset does not decode, or its actor crashed past its restart limit", body = ErrorBody),
              (status = 503, description = "The runtime is shutting down", body = ErrorBody)))]
pub async fn prompt(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<PromptBody>,
) -> ApiResult<Json<Value>> {
    let input = prompt_input(&st, &id, body).await?;
    let no_reply = input.no_reply;
    let result = st.runtime.prompt(&id, input).await?;
    if no_reply {
        st.runtime.store().flush().await?;
        let sid = id.clone();
        let all = st.runtime.store().read(move |r| r.messages(&sid)).await?;
        let user = all
            .into_iter()
            .find(|m| Some(m.info.id()) == result.user_message_id.as_ref())
            .ok_or_else(|| ApiError::internal("the stored user message was not found"))?;
        return message_value(&user).map(Json);
    }
    turn_response(&st, &id, result).await
}

/// A finished turn's answer: `{info, parts}` of its last assistant message (`info: null`
/// when it made none).
pub(crate) async fn turn_response(
    st: &AppState,
    id: &SessionId,
    result: troupe_actors::TurnResult,
) -> ApiResult<Json<Value>> {
    let Some(msg) = result.message else {
        return Ok(Json(json!({"info": null, "parts": []})));
    };
    let sid = id.clone();
    let all = st.runtime.store().read(move |r| r.messages(&sid)).await?;
    let found = all.into_iter().find(|m| *m.info.id() == msg.id);
    Ok(Json(match found {
        Some(m) => message_value(&m)?,
        None => json!({"info": msg, "parts": []}),
    }))
}

/// Start a prompt without waiting; progress arrives on `/event`.
#[utoipa::path(post, path = "/session/{id}/prompt_async", tag = "session", request_body = PromptBody,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 204, description = "Accepted"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn prompt_async(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
    ApiJson(body): ApiJson<PromptBody>,
) -> ApiResult<StatusCode> {
    let input = prompt_input(&st, &id, body).await?;
    st.runtime.prompt_async(&id, input);
    Ok(StatusCode::NO_CONTENT)
}

/// Abort the running turn and queued prompts (no-op when idle).
#[utoipa::path(post, path = "/session/{id}/abort", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = bool), (status = 404, body = ErrorBody)))]
pub async fn abort(State(st): State<AppState>, Path(id): Path<SessionId>) -> ApiResult<Json<bool>> {
    find_session(&st, &id).await?;
    st.runtime.abort(&id);
    Ok(Json(true))
}

/// Compact the session's history now; returns after the summary is written.
#[utoipa::path(post, path = "/session/{id}/summarize", tag = "session",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = bool), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
pub async fn summarize(
    State(st): State<AppState>,
    Path(id): Path<SessionId>,
) -> ApiResult<Json<bool>> {
    find_session(&st, &id).await?;
    let r = st.runtime.compact(&id).await?;
    match r.error {
        None => Ok(Json(true)),
        Some(e) => Err(ApiError::internal(format!(
            "compaction failed: {}: {}",
            e.name,
            e.message()
        ))),
    }
}

/// The live supervision tree.
#[utoipa::path(get, path = "/actors", tag = "monitor",
    responses((status = 200, description = "ActorNode: {kind, id, sessionID?, status, tool?, agent?, started, steps, tokens, cost, restarts, failures, queued, children}; with `serve --cluster` also `nodes: [{node, host, pid, status: alive|draining|dead|stopped, lastHeartbeatMs, timeoutMs, running, counters, metrics, tree}]`", body = Value)))]
pub async fn actors(State(st): State<AppState>) -> Json<Value> {
    let mut v = serde_json::to_value(st.runtime.actors()).unwrap_or_default();
    // With a cluster: one subtree per node, from its last heartbeat (dead nodes marked).
    if let Some(fleet) = &st.fleet {
        v["nodes"] = Value::Array(fleet.0.nodes());
    }
    Json(v)
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "monitor",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        {
            let mut text = crate::metrics::render(&st.runtime);
            if let Some(fleet) = &st.fleet {
                text.push_str(&fleet.0.metrics());
            }
            text
        },
    )
        .into_response()
}

/// Every bus event as Server-Sent Events.
#[utoipa::path(get, path = "/event", tag = "monitor",
    responses((status = 200, description = "`data: {\"type\", \"properties\"}` messages; first `server.connected`, `server.heartbeat` every 10 s", content_type = "text/event-stream")))]
pub async fn events(State(st): State<AppState>) -> Response {
    let rx = st.runtime.bus().subscribe();
    let s = crate::events::stream(rx, st.shutdown.clone(), st.heartbeat);
    ([("x-accel-buffering", "no")], Sse::new(s)).into_response()
}

/// The OpenAPI document.
pub async fn doc() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi())
}

/// 404 for unknown routes.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

/// 405 for a known route with the wrong method.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bool_params_parse_or_fail_clearly() {
        let q: HashMap<String, String> = [("roots".to_string(), "true".to_string())].into();
        assert!(bool_param(&q, "roots").unwrap_or(false));
        let q: HashMap<String, String> = [("roots".to_string(), "maybe".to_string())].into();
        assert!(bool_param(&q, "roots").is_err());
    }
}
