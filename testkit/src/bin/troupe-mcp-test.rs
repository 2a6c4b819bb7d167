//! `troupe-mcp-test`: a small MCP server written with the official SDK (`rmcp`), for tests
//! of troupe's MCP client. It speaks MCP over stdio by default, or streamable HTTP on
//! 127.0.0.1 with `--http PORT` (0 = any free port; the URL is printed on stdout as
//! `listening on http://127.0.0.1:<port>/mcp`).
//!
//! Tools:
//! - `echo {text}` → `echo: <text>` (marked `readOnlyHint`);
//! - `pid` → the server's process id;
//! - `image` → a text block and a 1×1 PNG image block;
//! - `crash` → the process exits at once, mid-call (a server that dies during a call);
//! - `add_tool` → adds the tool `extra` and sends `notifications/tools/list_changed`;
//! - `extra` (after `add_tool`) → `extra called`.
//!
//! `--exit-at-once` prints a message on stderr and exits with status 3 before speaking
//! MCP (a server that can never start). `--pid-file FILE` writes the process id there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::{Value, json};

/// A 1×1 transparent PNG, base64.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

#[derive(Clone, Default)]
struct TestServer {
    extra: Arc<AtomicBool>,
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

impl TestServer {
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
            Tool::new("image", "A small image.", schema(empty.clone())),
            Tool::new(
                "crash",
                "Exit the server process at once.",
                schema(empty.clone()),
            ),
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
        Ok(ListToolsResult::with_all_items(self.tools()))
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
            "pid" => CallToolResult::success(vec![text(std::process::id().to_string())]),
            "image" => CallToolResult::success(vec![
                text("here is a pixel"),
                ContentBlock::image(PNG_1X1, "image/png"),
            ]),
            "crash" => std::process::exit(7),
            "add_tool" => {
                self.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
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

fn usage() -> ! {
    eprintln!("usage: troupe-mcp-test [--http PORT] [--exit-at-once] [--pid-file FILE]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut http: Option<u16> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--http" => {
                http = Some(
                    args.next()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or_else(|| usage()),
                )
            }
            "--exit-at-once" => {
                eprintln!("troupe-mcp-test: refusing to start (--exit-at-once)");
                std::process::exit(3);
            }
            "--pid-file" => {
                let f = args.next().unwrap_or_else(|| usage());
                std::fs::write(f, std::process::id().to_string())?;
            }
            _ => usage(),
        }
    }
    match http {
        None => {
            let running = TestServer::default()
                .serve(rmcp::transport::stdio())
                .await?;
            running.waiting().await?;
        }
        Some(port) => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpServerConfig, StreamableHttpService,
                session::local::LocalSessionManager,
            };
            let service = StreamableHttpService::new(
                || Ok(TestServer::default()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            use std::io::Write;
            std::io::stdout().flush()?;
            axum::serve(listener, app).await?;
        }
    }
    Ok(())
}
