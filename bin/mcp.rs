//! `troupe mcp list`: start the configured MCP servers as the runtime would (same actors),
//! wait for each one's first connection attempt, and print their state and tools.
//! `--format json` prints what `GET /mcp` serves. A server whose first start failed is
//! listed `failed` with that error at once: the one-shot listing does not sit through the
//! restarts (`supervision.mcp_restarts` × backoff and timeout, ~20 s for a server that hangs)
//! that `troupe serve` and `troupe run` would try.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use troupe_actors::mcp::{McpHub, McpServerInfo, McpState, server};
use troupe_config::LoadedConfig;

/// Start the servers of `config`, wait for each one's first connection attempt (bounded by
/// twice the longest server `timeout` plus 1 s), return their state; stops them.
pub async fn probe(config: &LoadedConfig) -> Result<Vec<McpServerInfo>> {
    let hub = McpHub::new(&config.config.mcp, troupe_session::Bus::new());
    let tree = Arc::new(troupe_actors::tree::ActorTree::default());
    // No restart within the listing: a failed first start waits (as `restarting`) for a
    // backoff longer than the listing lasts, so every server reports its first attempt.
    let mut supervision = config.config.supervision.clone();
    supervision.backoff_ms = Some(3_600_000);
    server::start(hub.clone(), tree, supervision)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the MCP supervisor: {e}"))?;
    hub.first_connects().await;
    let list = hub.list().into_iter().map(first_attempt).collect();
    server::stop(&hub, Duration::from_secs(3)).await;
    Ok(list)
}

/// A server's state as the listing reports it: one waiting to restart after its first
/// start failed is `failed` with that start's error (its tools were never listed).
fn first_attempt(mut s: McpServerInfo) -> McpServerInfo {
    if s.state == McpState::Restarting && s.tools.is_empty() {
        s.state = McpState::Failed;
        let why = s.error.take().unwrap_or_else(|| "no reason given".into());
        s.error = Some(format!(
            "{why} (its first start failed; troupe serve and troupe run retry it up to supervision.mcp_restarts times)"
        ));
    }
    s
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
