//! troupe-server: the HTTP API of a running runtime (`troupe serve`).
//!
//! Routes (JSON unless noted; every error is `{"error": {"message", "type"}}`):
//!
//! | route | answer |
//! |---|---|
//! | `GET /session[?roots=true]` | `[Session + owner]`, newest first |
//! | `POST /session` `{title?, directory?, parentID?, agent?, model?}` | `Session` |
//! | `GET /session/{id}` / `DELETE /session/{id}` | `Session + owner` / `true` |
//! | `PATCH /session/{id}` `{title?, permission?}` | `Session` |
//! | `GET /session/{id}/children` | `[Session]` |
//! | `GET /session/status` | `{sessionID: status}` of every session that is not idle (busy, retry, waiting) |
//! | `GET /session/{id}/message[?limit=N&before=msg_…]` | `[{info, parts}]`, oldest first; with `limit`, the newest N (before `before`) |
//! | `GET /session/{id}/timeline` | `{sessionID, start, end, now, rows}`: Gantt rows (steps, provider requests, tool calls, subagents) from stored part times (`troupe_session::timeline`) |
//! | `POST /session/{id}/message` `{text?, parts?, agent?, model?, noReply?}` | waits; last assistant `{info, parts}` (with `noReply`, the stored user message); 409 when another process drives the session past the lease wait |
//! | `POST /session/{id}/prompt_async` (same body) | 204 |
//! | `POST /session/{id}/abort` / `summarize` | `true` |
//! | `GET /session/{id}/diff[?messageID=]` | `[{file, status, additions, deletions, patch}]` |
//! | `POST /session/{id}/revert` `{messageID, partID?}` / `unrevert` | `Session`; 409 when busy |
//! | `POST /session/{id}/fork` `{messageID?}` | the new `Session` |
//! | `GET /session/{id}/todo` | `[{content, status, priority}]`, in order |
//! | `GET /command[?directory=]` | the commands a session in that directory sees |
//! | `POST /session/{id}/command` `{command, arguments?, agent?, model?, parts?}` | waits |
//! | `POST /session/{id}/shell` `{command, agent?, model?}` | `{info, parts}`; 409 when busy |
//! | `GET /permission` | pending requests |
//! | `POST /permission/{requestID}/reply` `{reply: once/always/reject, message?}` | `true` |
//! | `POST /session/{id}/permissions/{permissionID}` `{response}` (OpenCode's legacy form) | `true` |
//! | `GET /question` | pending questions of the `question` tool |
//! | `POST /question/{requestID}/reply` `{answers: [[label…]…]}` / `…/reject` | `true` |
//! | `GET /agent`, `/models[?all=true]`, `/config` | agents, the models that can run here (as `troupe models`), merged config (secrets redacted) |
//! | `GET /event` | SSE of bus events (`server.connected` first, `server.heartbeat` every 10 s) |
//! | `GET /actors` | the supervision tree (`ActorNode`) |
//! | `GET /mcp` | the MCP servers with their state and tools |
//! | `GET /metrics` | Prometheus text |
//! | `GET /doc` | OpenAPI 3.1 JSON |
//! | `GET /` | the web page |
//!
//! `owner` is the process driving the session right now (`{sessionID, owner, pid, host,
//! label, acquired, heartbeat, expires}`, from its lease in the store) or `null`;
//! `interrupted` is true while the lease's holder is gone (expired, or a dead process of this
//! host) and its last turn is not yet repaired (the server repairs such sessions at start and
//! every 10 s). A prompt to a session another process drives waits for it (`session.status`
//! `waiting` on `/event`).
//!
//! Security: binding to anything but a loopback address needs a password, and a password
//! that is empty or only blanks is refused ([`check_bind`]); a browser guard ([`guard`])
//! refuses a foreign `Host` without a password (421, DNS rebinding), any cross-site `Origin`
//! (403) and any non-JSON body on a state-changing route (403) before anything else runs;
//! a model guard ([`peer`]) refuses state-changing requests from processes a troupe tool
//! started (403), so a model cannot loosen its own rules or answer its own asks;
//! with a password every route requires it ([`auth`]); no CORS headers unless origins are
//! configured (`--cors '*'` only with a password); request bodies are capped at
//! [`DEFAULT_BODY_LIMIT`].

pub mod auth;
pub mod client;
pub mod command_routes;
pub mod config_routes;
pub mod error;
pub mod events;
pub mod guard;
pub mod mcp_routes;
pub mod metrics;
pub mod peer;
pub mod permission_routes;
pub mod question_routes;
pub mod routes;
pub mod snapshot_routes;
pub mod timeline_routes;
pub mod todo_routes;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method};
use axum::routing::{get, post};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use troupe_actors::Runtime;
use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest};
use utoipa::OpenApi;

/// Largest request body accepted, bytes (8 MiB); larger bodies get 413.
pub const DEFAULT_BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Default port of `troupe serve` (OpenCode's default too).
pub const DEFAULT_PORT: u16 = 4096;

/// Environment variable holding the server password.
pub const PASSWORD_ENV: &str = "TROUPE_SERVER_PASSWORD";

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to bind (default `127.0.0.1`).
    pub hostname: String,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// Password required on every route, if set.
    pub password: Option<String>,
    /// Origins allowed by CORS (`*` for any); empty sends no CORS headers.
    pub cors: Vec<String>,
    /// Request body cap, bytes.
    pub body_limit: usize,
    /// Interval of `server.heartbeat` on `/event`.
    pub heartbeat: Duration,
    /// Default directory of new sessions.
    pub directory: PathBuf,
    /// The other nodes of a cluster (`troupe serve --cluster`): listed in `/actors` under
    /// `nodes` and in `/metrics` with a `node` label. `None`: this process only.
    pub fleet: Option<Fleet>,
}

/// What the server shows of a cluster's other nodes (implemented over their heartbeats by
/// the CLI; the server knows nothing of how they are collected).
pub trait FleetView: Send + Sync {
    /// One JSON object per node: `{node, status: alive|draining|dead|stopped, …, tree}`
    /// (`tree`: the node's supervision tree, shaped as `/actors`).
    fn nodes(&self) -> Vec<serde_json::Value>;
    /// Prometheus text of the nodes' series, each with a `node` label (complete families,
    /// named apart from this process's own).
    fn metrics(&self) -> String;
}

/// A shared [`FleetView`].
#[derive(Clone)]
pub struct Fleet(pub Arc<dyn FleetView>);

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fleet")
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            hostname: "127.0.0.1".into(),
            port: DEFAULT_PORT,
            password: None,
            cors: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            heartbeat: events::HEARTBEAT,
            directory: PathBuf::from("."),
            fleet: None,
        }
    }
}

/// Why the server would not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Non-loopback bind without a password.
    #[error(
        "refusing to listen on {0} without a password: set {PASSWORD_ENV} or pass --password (or bind to 127.0.0.1)"
    )]
    NeedsPassword(String),
    /// A password that is empty or only blanks (it would guard nothing).
    #[error(
        "refusing an empty or blank password: set a real one in {PASSWORD_ENV} or --password, or unset both to serve on 127.0.0.1 without one"
    )]
    BlankPassword,
    /// `--cors '*'` without a password: any web page could drive the server.
    #[error(
        "refusing --cors '*' without a password: any web page could drive this server; list origins or set {PASSWORD_ENV}"
    )]
    AnyOriginNeedsPassword,
    /// Bad `--cors` origin.
    #[error("invalid --cors origin {0:?}")]
    BadOrigin(String),
    /// Could not bind.
    #[error("cannot listen on {addr}: {err}")]
    Bind {
        /// The address asked for (`host:port`).
        addr: String,
        /// Why it could not be bound (in use, not permitted, …).
        err: std::io::Error,
    },
    /// Serving failed.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether `hostname` only accepts local connections (`localhost`, 127.0.0.0/8, `::1`, and
/// the IPv4-mapped `::ffff:127.x.y.z`).
pub fn is_loopback(hostname: &str) -> bool {
    if hostname.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let h = hostname.trim_start_matches('[').trim_end_matches(']');
    h.parse::<IpAddr>()
        .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Refuse a password that is empty or only blanks ([`ServeError::BlankPassword`]), then a
/// non-loopback bind without a password ([`ServeError::NeedsPassword`]).
pub fn check_bind(hostname: &str, password: Option<&str>) -> Result<(), ServeError> {
    if password.is_some_and(|p| p.trim().is_empty()) {
        return Err(ServeError::BlankPassword);
    }
    if is_loopback(hostname) || password.is_some() {
        Ok(())
    } else {
        Err(ServeError::NeedsPassword(hostname.to_string()))
    }
}

/// Every start-up check of `opts`: [`check_bind`], and `--cors '*'` only with a password.
pub fn check_options(opts: &ServerOptions) -> Result<(), ServeError> {
    check_bind(&opts.hostname, opts.password.as_deref())?;
    if opts.password.is_none() && opts.cors.iter().any(|o| o == "*") {
        return Err(ServeError::AnyOriginNeedsPassword);
    }
    Ok(())
}

/// A [`PermissionAsker`] that never answers: every ask waits for
/// `POST /permission/{id}/reply` (or the turn's abort).
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverAsk;

impl PermissionAsker for NeverAsk {
    fn ask(&self, _req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        Box::pin(futures::future::pending())
    }
}

/// State shared by the handlers.
#[derive(Clone)]
pub struct AppState {
    /// The runtime.
    pub runtime: Runtime,
    /// Default directory of new sessions.
    pub directory: PathBuf,
    /// Cancelled at shutdown (ends the SSE streams).
    pub shutdown: CancellationToken,
    /// Heartbeat interval of `/event`.
    pub heartbeat: Duration,
    /// The cluster's other nodes, if any ([`ServerOptions::fleet`]).
    pub fleet: Option<Fleet>,
}

/// The OpenAPI description, generated from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "troupe server", description = "Sessions, permissions, events and the live actor tree of a troupe runtime."),
    paths(
        routes::list_sessions, routes::create_session, routes::get_session, routes::delete_session,
        routes::patch_session, permission_routes::reply_permission_legacy,
        routes::children, routes::messages, routes::session_statuses, routes::prompt, routes::prompt_async, routes::abort,
        routes::summarize, permission_routes::permissions, permission_routes::reply_permission, config_routes::agents,
        config_routes::models, config_routes::config, routes::actors, routes::metrics, routes::events,
        snapshot_routes::diff, snapshot_routes::revert, snapshot_routes::unrevert,
        snapshot_routes::fork, todo_routes::todos, timeline_routes::timeline,
        command_routes::list, command_routes::run, command_routes::shell, mcp_routes::list,
        question_routes::list, question_routes::reply, question_routes::reject,
    ),
    components(schemas(error::ErrorBody, error::ErrorDetail, routes::CreateSession, routes::PromptBody,
        routes::PromptPart, permission_routes::PermissionReplyBody, routes::PatchSession,
        permission_routes::LegacyPermissionBody, snapshot_routes::RevertBody, snapshot_routes::ForkBody,
        command_routes::CommandBody, command_routes::ShellBody)),
    modifiers(&Security),
    security(("bearer" = []), ("basic" = []))
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        c.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
    }
}

/// The OpenAPI document served at `/doc`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Build the router for a server bound to `addr`: routes, JSON fallbacks, browser guard,
/// password check, body cap, optional CORS. Fails on options [`check_options`] refuses.
pub fn router(
    state: AppState,
    opts: &ServerOptions,
    addr: SocketAddr,
) -> Result<Router, ServeError> {
    use routes as r;
    check_options(opts)?;
    let password: Option<Arc<str>> = opts.password.as_deref().map(Arc::from);
    let browser_guard = Arc::new(guard::Guard::new(
        &opts.hostname,
        addr,
        password.is_some(),
        &opts.cors,
    ));
    let app = Router::new()
        .route("/", get(r::index))
        .route("/doc", get(r::doc))
        .route("/session", get(r::list_sessions).post(r::create_session))
        .route("/session/status", get(r::session_statuses))
        .route(
            "/session/{id}",
            get(r::get_session)
                .delete(r::delete_session)
                .patch(r::patch_session),
        )
        .route(
            "/session/{id}/permissions/{permission_id}",
            post(crate::permission_routes::reply_permission_legacy),
        )
        .route("/session/{id}/children", get(r::children))
        .route("/session/{id}/message", get(r::messages).post(r::prompt))
        .route("/session/{id}/prompt_async", post(r::prompt_async))
        .route("/session/{id}/abort", post(r::abort))
        .route("/session/{id}/summarize", post(r::summarize))
        .route("/session/{id}/diff", get(crate::snapshot_routes::diff))
        .route("/session/{id}/todo", get(crate::todo_routes::todos))
        .route(
            "/session/{id}/timeline",
            get(crate::timeline_routes::timeline),
        )
        .route("/session/{id}/revert", post(crate::snapshot_routes::revert))
        .route(
            "/session/{id}/unrevert",
            post(crate::snapshot_routes::unrevert),
        )
        .route("/session/{id}/fork", post(crate::snapshot_routes::fork))
        .route("/permission", get(crate::permission_routes::permissions))
        .route(
            "/permission/{id}/reply",
            post(crate::permission_routes::reply_permission),
        )
        .route("/question", get(crate::question_routes::list))
        .route("/question/{id}/reply", post(crate::question_routes::reply))
        .route(
            "/question/{id}/reject",
            post(crate::question_routes::reject),
        )
        .route("/agent", get(crate::config_routes::agents))
        .route("/command", get(crate::command_routes::list))
        .route("/session/{id}/command", post(crate::command_routes::run))
        .route("/session/{id}/shell", post(crate::command_routes::shell))
        .route("/models", get(crate::config_routes::models))
        .route("/config", get(crate::config_routes::config))
        .route("/actors", get(r::actors))
        .route("/mcp", get(mcp_routes::list))
        .route("/metrics", get(r::metrics))
        .route("/event", get(r::events))
        .fallback(r::not_found)
        .method_not_allowed_fallback(r::method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(opts.body_limit))
        .layer(axum::middleware::from_fn_with_state(
            (password.is_some(), addr),
            peer::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            password,
            auth::require_password,
        ))
        .layer(axum::middleware::from_fn_with_state(
            browser_guard,
            guard::guard,
        ));
    if opts.cors.is_empty() {
        return Ok(app);
    }
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    let cors = if opts.cors.iter().any(|o| o == "*") {
        CorsLayer::new().allow_origin(Any).allow_headers(Any)
    } else {
        let origins = opts
            .cors
            .iter()
            .map(|o| HeaderValue::from_str(o).map_err(|_| ServeError::BadOrigin(o.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_headers([
                axum::http::header::AUTHORIZATION,
                axum::http::header::CONTENT_TYPE,
            ])
            .allow_credentials(true)
    };
    // Every method a route takes (PATCH /session/{id} included), so a browser's preflight for it
    // succeeds.
    Ok(app.layer(cors.allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])))
}

/// A bound, ready server.
pub struct Server {
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: CancellationToken,
}

impl Server {
    /// Check the options, bind, and build the router for `runtime`.
    pub async fn bind(runtime: Runtime, opts: &ServerOptions) -> Result<Server, ServeError> {
        check_options(opts)?;
        let host = opts.hostname.trim_start_matches('[').trim_end_matches(']');
        let addr = if host.contains(':') {
            format!("[{host}]:{}", opts.port)
        } else {
            format!("{host}:{}", opts.port)
        };
        let shutdown = CancellationToken::new();
        let state = AppState {
            runtime,
            directory: opts.directory.clone(),
            shutdown: shutdown.clone(),
            heartbeat: opts.heartbeat,
            fleet: opts.fleet.clone(),
        };
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|err| ServeError::Bind { addr, err })?;
        // The guard needs the real port (0 asks for a free one).
        let app = router(state, opts, listener.local_addr()?)?;
        Ok(Server {
            listener,
            app,
            shutdown,
        })
    }

    /// The bound address (the real port when 0 was asked).
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        Ok(self.listener.local_addr()?)
    }

    /// A token that stops the server (and ends every `/event` stream) when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serve until the shutdown token is cancelled.
    pub async fn run(self) -> Result<(), ServeError> {
        let token = self.shutdown.clone();
        // Connect info gives the model guard ([`peer`]) each request's client address.
        axum::serve(
            self.listener,
            self.app
                .into_make_service_with_connect_info::<peer::Connection>(),
        )
        .with_graceful_shutdown(async move { token.cancelled().await })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_binds_need_no_password_others_do() {
        assert!(check_bind("127.0.0.1", None).is_ok());
        assert!(check_bind("localhost", None).is_ok());
        assert!(check_bind("::1", None).is_ok());
        assert!(check_bind("[::1]", None).is_ok());
        assert!(check_bind("::ffff:127.0.0.1", None).is_ok());
        assert!(check_bind("::ffff:192.0.2.2", None).is_err());
        assert!(check_bind("0.0.0.0", None).is_err());
        assert!(check_bind("0.0.0.0", Some("")).is_err());
        assert!(check_bind("0.0.0.0", Some("pw")).is_ok());
        assert!(check_bind("192.168.1.2", None).is_err());
    }

    #[test]
    fn blank_passwords_and_any_origin_without_one_are_refused() {
        for blank in ["", " ", "\t \n"] {
            let e = check_bind("127.0.0.1", Some(blank)).unwrap_err();
            assert!(matches!(e, ServeError::BlankPassword), "{blank:?}: {e}");
            assert!(!e.to_string().contains('\n'));
        }
        assert!(check_bind("127.0.0.1", Some(" pw ")).is_ok());
        let mut o = ServerOptions {
            cors: vec!["*".into()],
            ..ServerOptions::default()
        };
        assert!(matches!(
            check_options(&o),
            Err(ServeError::AnyOriginNeedsPassword)
        ));
        o.password = Some("pw".into());
        assert!(check_options(&o).is_ok());
        o.cors = vec!["http://ui.example".into()];
        o.password = None;
        assert!(check_options(&o).is_ok());
    }

    #[test]
    fn openapi_lists_the_routes() {
        let doc = serde_json::to_value(openapi()).unwrap_or_default();
        for p in [
            "/session",
            "/session/{id}/prompt_async",
            "/permission/{requestID}/reply",
            "/session/{id}/permissions/{permissionID}",
            "/question/{requestID}/reply",
            "/question/{requestID}/reject",
            "/actors",
            "/mcp",
            "/event",
        ] {
            assert!(doc["paths"].get(p).is_some(), "missing {p}");
        }
    }
}
