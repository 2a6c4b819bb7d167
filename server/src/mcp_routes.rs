//! `GET /mcp`: the runtime's MCP servers with their state and tools (what `troupe mcp
//! list --format json` prints).

use axum::Json;
use axum::extract::State;

use crate::AppState;

/// MCP servers: state and tools.
#[utoipa::path(get, path = "/mcp", tag = "monitor",
    responses((status = 200, description = "[{name, type, state (disabled|connecting|connected|restarting|failed), error?, restarts, pid?, tools: [{name, tool, description, inputSchema, readOnly}]}]", body = serde_json::Value)))]
pub async fn list(State(st): State<AppState>) -> Json<Vec<troupe_actors::mcp::McpServerInfo>> {
    Json(st.runtime.shared().mcp.list())
}
