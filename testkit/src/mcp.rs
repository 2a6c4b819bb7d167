//! A small MCP server written with the official SDK (`rmcp`), for tests of troupe's MCP
//! client: over stdio in a child process ([`child_main`], [`stdio_child_command`]) or over
//! streamable HTTP on 127.0.0.1 inside the test process ([`McpHttpServer`]).
//!
//! Tools:
//! - `echo {text}` → `echo: <text>` (annotated `readOnlyHint: true`);
//! - `pid` → the serving process's id;
//! - `big {lines}` → that many numbered lines (`line 1` …), for output truncation;
//! - `image` → a text block and a 1×1 PNG image block;
//! - `crash` → the process exits at once (status 7), mid-call (a server dying during a call;
//!   over HTTP it is an ordinary tool error instead, the test process must live);
//! - `hang` → never answers (a hung server; the client's call timeout must restart it);
//! - `add_tool` → adds the tool `extra`, sends `notifications/tools/list_changed` and answers
//!   only after the client listed the tools again (at most [`RELIST_WAIT`]), so a client that
//!   refreshes on the notification has the new list before it has this call's result;
//! - `extra` (after `add_tool`) → `extra called`.
//!
//! Why a child of the test binary: an integration test can locate only its own package's
//! binaries (`CARGO_BIN_EXE_*`), and this crate is not that package. So the test binary
//! itself is the server: [`stdio_child_command`] re-runs it with one ignored entry test
//! that calls [`child_main`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::{Value, json};

/// Environment variable that turns [`child_main`] on (value `1`); set it in the server's
/// `environment` in the config.
pub const CHILD_ENV: &str = "TROUPE_MCP_TEST_CHILD";

/// Environment variable naming a file [`child_main`] writes its process id to (replacing
/// the content) before it speaks MCP.
pub const PID_FILE_ENV: &str = "TROUPE_MCP_TEST_PID_FILE";

/// Longest `add_tool` waits for the client's `tools/list` after the notification.
pub const RELIST_WAIT: Duration = Duration::from_secs(10);

/// A 1×1 transparent PNG, base64.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The test server's handler (one per connection).
#[derive(Clone)]
pub struct TestServer {
    /// `add_tool` was called: `extra` is listed.
    extra: Arc<AtomicBool>,
    /// `tools/list` requests served so far.
    lists: Arc<AtomicU64>,
    /// Notified on each `tools/list`.
    listed: Arc<tokio::sync::Notify>,
    /// `crash` exits the process (stdio) instead of failing the call (HTTP).
    may_exit: bool,
}

impl TestServer {
    /// A fresh server; `may_exit`: whether `crash` may end the process.
    pub fn new(may_exit: bool) -> TestServer {
        TestServer {
            extra: Arc::default(),
            lists: Arc::default(),
            listed: Arc::default(),
            may_exit,
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let empty = json!({"type": "object", "properties": {}});
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echo the given text back.",
                schema(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "Text to echo"}},
                    "required": ["text"]
                })),
            )
            .annotate(ToolAnnotations::new().read_only(true)),
            Tool::new("pid", "The server's process id.", schema(empty.clone())),
            Tool::new(
                "big",
                "Print many numbered lines.",
                schema(json!({
                    "type": "object",
                    "properties": {"lines": {"type": "integer", "minimum": 0}},
                    "required": ["lines"]
                })),
            ),
            Tool::new("image", "A small image.", schema(empty.clone())),
            Tool::new(
                "crash",
                "Exit the server process at once.",
                schema(empty.clone()),
            ),
            Tool::new("hang", "Never answer.", schema(empty.clone())),
            Tool::new(
                "add_tool",
                "Add the tool `extra` and announce the change.",
                schema(empty.clone()),
            ),
        ];
        if self.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new("extra", "Added at run time.", schema(empty)));
        }
        tools
    }
}

fn schema(v: Value) -> Arc<serde_json::Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(serde_json::Map::new()),
    }
}

fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::text(t.into())
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools();
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.listed.notify_waiters();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => {
                let t = args.get("text").and_then(Value::as_str).unwrap_or("");
                CallToolResult::success(vec![text(format!("echo: {t}"))])
            }
            "big" => {
                let n = args.get("lines").and_then(Value::as_u64).unwrap_or(0);
                let body: Vec<String> = (1..=n).map(|i| format!("line {i}")).collect();
                CallToolResult::success(vec![text(body.join("\n"))])
            }
            "pid" => CallToolResult::success(vec![text(std::process::id().to_string())]),
            "image" => CallToolResult::success(vec![
                text("here is a pixel"),
                ContentBlock::image(PNG_1X1, "image/png"),
            ]),
            "crash" if self.may_exit => std::process::exit(7),
            "crash" => CallToolResult::error(vec![text("crash is only for stdio servers")]),
            "hang" => std::future::pending().await,
            "add_tool" => {
                let before = self.lists.load(Ordering::SeqCst);
                let listed = self.listed.notified();
                tokio::pin!(listed);
                listed.as_mut().enable();
                self.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                let _ = tokio::time::timeout(RELIST_WAIT, async {
                    while self.lists.load(Ordering::SeqCst) == before {
                        listed.as_mut().await;
                        listed.set(self.listed.notified());
                        listed.as_mut().enable();
                    }
                })
                .await;
                CallToolResult::success(vec![text("added extra")])
            }
            "extra" if self.extra.load(Ordering::SeqCst) => {
                CallToolResult::success(vec![text("extra called")])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// The command that makes the test binary `exe` an MCP server on stdio: `sh -c` re-runs it
/// with only the ignored test `entry` (which must call [`child_main`]), its stdout moved to
/// stderr (where libtest's own lines go) and the client's stdout pipe on fd 3. Put
/// [`CHILD_ENV`]`=1` in the server's `environment`. After `exec` the server has the pid the
/// client started.
pub fn stdio_child_command(exe: &std::path::Path, entry: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        "exec \"$0\" --ignored --exact \"$1\" --test-threads=1 --nocapture 3>&1 1>&2".into(),
        exe.display().to_string(),
        entry.into(),
    ]
}

/// Entry of the stdio server child (see [`stdio_child_command`]): without [`CHILD_ENV`]`=1`
/// it returns at once. Otherwise it writes its pid to [`PID_FILE_ENV`] (if set), serves MCP
/// reading stdin and writing fd 3 until the client closes stdin, and exits the process.
///
/// # Panics
/// When fd 3 cannot be opened or the runtime cannot start (the client then sees the
/// handshake fail with this process's stderr).
pub fn child_main() {
    if std::env::var(CHILD_ENV).ok().as_deref() != Some("1") {
        return;
    }
    if let Ok(f) = std::env::var(PID_FILE_ENV) {
        std::fs::write(&f, std::process::id().to_string()).expect("write the pid file");
    }
    let out = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/fd/3")
        .expect("fd 3 (the client's stdout pipe) is open");
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = tokio_rt.block_on(async move {
        let transport = (tokio::io::stdin(), tokio::fs::File::from_std(out));
        match TestServer::new(true).serve(transport).await {
            Ok(running) => match running.waiting().await {
                Ok(_) => 0,
                Err(e) => {
                    eprintln!("troupe-mcp-test: {e}");
                    1
                }
            },
            Err(e) => {
                eprintln!("troupe-mcp-test: handshake failed: {e}");
                1
            }
        }
    });
    std::process::exit(code);
}

/// The test server over streamable HTTP on 127.0.0.1 (a fresh [`TestServer`] per MCP
/// session), recording the request headers it sees. Stops when dropped.
pub struct McpHttpServer {
    url: String,
    headers: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl McpHttpServer {
    /// Binds 127.0.0.1 on a free port and serves `/mcp`.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub async fn start() -> std::io::Result<McpHttpServer> {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        };
        let service = StreamableHttpService::new(
            || Ok(TestServer::new(false)),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let headers: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
        let seen = headers.clone();
        let app =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |req: axum::extract::Request, next: axum::middleware::Next| {
                        if let Ok(mut h) = seen.lock() {
                            h.extend(req.headers().iter().map(|(k, v)| {
                                (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into())
                            }));
                        }
                        next.run(req)
                    },
                ));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(McpHttpServer { url, headers, task })
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Values of header `name` (lower-case) over every request so far.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .lock()
            .map(|h| {
                h.iter()
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
