//! `troupe mcp list`: start the configured MCP servers as the runtime would (same actors,
//! same restart rules), wait until each is connected or failed, and print their state and
//! tools. `--format json` prints what `GET /mcp` serves.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use troupe_actors::mcp::{McpHub, McpServerInfo, McpState, server};
use troupe_config::LoadedConfig;

/// Upper bound on waiting for servers to settle: their own timeouts and restart backoffs
/// normally end it much sooner.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);

/// Start the servers of `config`, wait until they settle, return their state; stops them.
pub async fn probe(config: &LoadedConfig) -> Result<Vec<McpServerInfo>> {
    let hub = McpHub::new(&config.config.mcp, troupe_session::Bus::new());
    let tree = Arc::new(troupe_actors::tree::ActorTree::default());
    server::start(hub.clone(), tree, config.config.supervision.clone())
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the MCP supervisor: {e}"))?;
    hub.settled(SETTLE_DEADLINE).await;
    let list = hub.list();
    server::stop(&hub, Duration::from_secs(3)).await;
    Ok(list)
}

/// Print `servers` as a table (or JSON).
pub fn print(servers: &[McpServerInfo], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(servers)?);
        return Ok(());
    }
    if servers.is_empty() {
        println!("No MCP servers configured (add them under \"mcp\" in troupe.json).");
        return Ok(());
    }
    for s in servers {
        let mut line = format!("{}  {}  {}", s.name, s.kind, s.state.as_str());
        if s.state == McpState::Connected || s.state == McpState::Restarting {
            line.push_str(&format!("  {} tools", s.tools.len()));
        }
        if let Some(e) = &s.error {
            line.push_str(&format!("  ({e})"));
        }
        println!("{line}");
        for t in &s.tools {
            let ro = if t.read_only { " [read-only]" } else { "" };
            let desc = t.description.lines().next().unwrap_or("");
            println!("  {}{ro}  {desc}", t.name);
        }
    }
    Ok(())
}
