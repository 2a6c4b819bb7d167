//! MCP servers as supervised tool sources (issue 16).
//!
//! Each server configured under `mcp` (see [`troupe_config::McpServerConfig`]) is run by
//! an [`server::McpServerActor`] under one [`server::McpSupervisor`]: the actor starts the
//! process (or opens the streamable-HTTP session) with the official SDK `rmcp`, lists its
//! tools, and fails when the connection ends (the process crashed or was killed) or a call
//! hangs past the server's `timeout`. The supervisor restarts it with the runtime's backoff
//! and intensity rules ([`crate::supervision::Intensity`], `supervision.mcp_restarts` within
//! `supervision.period_secs`); past the limit the server is marked `failed`, its tools are
//! withdrawn and an `mcp.tools.changed` event says why.
//!
//! The [`McpHub`] is the shared state: per server its state, tools and live connection. It
//! is a [`troupe_tools::ToolSource`], so the tool registry offers each tool as
//! `<server>_<tool>` ([`content::tool_key`]) with the server's JSON input schema while the
//! server is connected or restarting, and never after it failed. A call
//! ([`McpTool`]) asks permission with the tool's name as the rule key and pattern `*`
//! (OpenCode engine §7.1, table §6), waits for a restarting server up to its timeout, and
//! turns a connection lost mid-call into an error the model sees (the outcome is unknown;
//! it is never re-run unless the server marked the tool `readOnlyHint`).

pub mod content;
pub mod server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::RoleClient;
use rmcp::service::Peer;
use serde::Serialize;
use serde_json::Value;
use troupe_config::McpServerConfig;
use troupe_session::{Bus, Event};
use troupe_tools::{
    PermissionReply, PermissionRequest, Tool, ToolContext, ToolError, ToolOutput, ToolSource,
};

/// State of one MCP server, as served by `GET /mcp` and `troupe mcp list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpState {
    /// `enabled: false` in the config: never started.
    Disabled,
    /// Starting for the first time.
    Connecting,
    /// Connected; its tools are offered.
    Connected,
    /// Crashed or hung; waiting for the backoff or reconnecting. Its tools stay offered
    /// and calls wait for the connection.
    Restarting,
    /// Past the restart limit: its tools are withdrawn.
    Failed,
}

impl McpState {
    /// Lower-case name (`connected`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            McpState::Disabled => "disabled",
            McpState::Connecting => "connecting",
            McpState::Connected => "connected",
            McpState::Restarting => "restarting",
            McpState::Failed => "failed",
        }
    }
}

/// One tool of a server, as listed by the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpToolInfo {
    /// Name the model calls it by (`<server>_<tool>`, sanitized).
    pub name: String,
    /// Name on the server.
    pub tool: String,
    /// Description from the server.
    pub description: String,
    /// JSON Schema of the arguments, from the server.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// The server marked it `readOnlyHint`: safe to re-run after a crash.
    #[serde(rename = "readOnly")]
    pub read_only: bool,
}

/// A server as served by `GET /mcp` and `troupe mcp list`.
#[derive(Debug, Clone, Serialize)]
pub struct McpServerInfo {
    /// Name (key under `mcp`).
    pub name: String,
    /// `local` or `remote`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where its connection stands (connecting, connected, restarting, failed, …).
    pub state: McpState,
    /// Why it failed or last restarted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Restarts so far.
    pub restarts: u64,
    /// Process id of a local server while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Tools offered (empty unless connected or restarting).
    pub tools: Vec<McpToolInfo>,
}

struct Slot {
    config: McpServerConfig,
    state: McpState,
    error: Option<String>,
    restarts: u64,
    pid: Option<u32>,
    tools: Vec<McpToolInfo>,
    peer: Option<Peer<RoleClient>>,
    /// Connection generation: bumped on each connect, so a hung report from an old
    /// connection does not restart a new one.
    generation: u64,
    /// `tools/list` refreshes after `tools/list_changed` still running.
    refreshing: u32,
}

/// Shared state of every MCP server of a runtime (see the module docs).
pub struct McpHub {
    slots: Mutex<BTreeMap<String, Slot>>,
    /// Bumped after every [`McpHub::with_slots`] (any access that may change a slot: its
    /// state, its tools; reads go through `read_slots`), so [`ToolSource::generation`] moves whenever the offered tools may
    /// have; [`ToolSource::tools`] reads the slots without bumping it.
    version: std::sync::atomic::AtomicU64,
    /// Wakes calls waiting for a server to connect or fail.
    changed: tokio::sync::watch::Sender<u64>,
    bus: Bus,
    /// The supervisor, for hung reports (set once it runs).
    supervisor: Mutex<Option<ractor::ActorRef<server::SupervisorMsg>>>,
    /// Set by [`server::stop`]: servers that end now are not restarted.
    stopping: std::sync::atomic::AtomicBool,
    /// Tool names already reported as clashing (each is logged once).
    clashes: Mutex<std::collections::BTreeSet<String>>,
    me: Weak<McpHub>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").finish_non_exhaustive()
    }
}

impl McpHub {
    /// A hub for the servers of `config` (disabled ones are listed as such), publishing
    /// state changes on `bus`. Nothing is started: see [`server::start`].
    pub fn new(config: &BTreeMap<String, McpServerConfig>, bus: Bus) -> Arc<McpHub> {
        let slots = config
            .iter()
            .map(|(name, cfg)| {
                let state = if cfg.enabled() {
                    McpState::Connecting
                } else {
                    McpState::Disabled
                };
                (
                    name.clone(),
                    Slot {
                        config: cfg.clone(),
                        state,
                        error: None,
                        restarts: 0,
                        pid: None,
                        tools: Vec::new(),
                        peer: None,
                        generation: 0,
                        refreshing: 0,
                    },
                )
            })
            .collect();
        Arc::new_cyclic(|me| McpHub {
            slots: Mutex::new(slots),
            version: std::sync::atomic::AtomicU64::new(0),
            changed: tokio::sync::watch::channel(0).0,
            bus,
            supervisor: Mutex::new(None),
            stopping: std::sync::atomic::AtomicBool::new(false),
            clashes: Mutex::new(Default::default()),
            me: me.clone(),
        })
    }

    /// Read the slots (under their lock); not a change of the offered tools.
    fn read_slots<R>(&self, f: impl FnOnce(&BTreeMap<String, Slot>) -> R) -> R {
        let g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        f(&g)
    }

    /// Run `f` on the slots (under their lock). Counts as a change of the offered tools
    /// (see `version`), whether or not `f` changed anything.
    fn with_slots<R>(&self, f: impl FnOnce(&mut BTreeMap<String, Slot>) -> R) -> R {
        let mut g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut g);
        // Inside the lock: a reader that saw the old version before listing the tools
        // either listed them before `f` (and will see the new version next time) or after.
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        r
    }

    /// Every server, sorted by name.
    pub fn list(&self) -> Vec<McpServerInfo> {
        self.read_slots(|slots| {
            slots
                .iter()
                .map(|(name, s)| McpServerInfo {
                    name: name.clone(),
                    kind: s.config.kind().into(),
                    state: s.state,
                    error: s.error.clone(),
                    restarts: s.restarts,
                    pid: s.pid,
                    tools: s.tools.clone(),
                })
                .collect()
        })
    }

    /// Names of the servers to start (enabled ones).
    pub fn enabled(&self) -> Vec<(String, McpServerConfig)> {
        self.read_slots(|slots| {
            slots
                .iter()
                .filter(|(_, s)| s.config.enabled())
                .map(|(n, s)| (n.clone(), s.config.clone()))
                .collect()
        })
    }

    /// Wait until no server is still making its first connection (each is connected,
    /// restarting after a failed start, failed or disabled), so the first step's request
    /// offers their tools. Bounded by twice the longest `timeout` of those servers (the
    /// handshake and `tools/list` are each bounded by it) plus one second.
    pub async fn first_connects(&self) {
        let longest = self.read_slots(|slots| {
            slots
                .values()
                .filter(|s| s.state == McpState::Connecting)
                .map(|s| s.config.timeout())
                .max()
        });
        let Some(longest) = longest else {
            return;
        };
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(longest * 2 + Duration::from_secs(1), async {
            loop {
                let starting = self
                    .read_slots(|slots| slots.values().any(|s| s.state == McpState::Connecting));
                if !starting || rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    /// Record a state change, notify waiters and publish `mcp.tools.changed`.
    fn set(&self, name: &str, f: impl FnOnce(&mut Slot)) {
        let ev = self.with_slots(|slots| {
            let s = slots.get_mut(name)?;
            f(s);
            // Only a connected server has a connection; a failed or disabled one offers no
            // tools either (a restarting one keeps its list until it reconnects).
            if s.state != McpState::Connected {
                s.peer = None;
                s.pid = None;
            }
            if s.state == McpState::Failed || s.state == McpState::Disabled {
                s.tools.clear();
            }
            Some(Event::McpToolsChanged {
                server: name.to_string(),
                status: s.state.as_str().into(),
                tools: s.tools.iter().map(|t| t.name.clone()).collect(),
                error: s.error.clone(),
            })
        });
        self.changed.send_modify(|g| *g += 1);
        if let Some(ev) = ev {
            self.bus.publish(ev);
        }
    }

    fn connected(
        &self,
        name: &str,
        peer: Peer<RoleClient>,
        pid: Option<u32>,
        tools: Vec<McpToolInfo>,
    ) -> u64 {
        let mut generation = 0;
        self.set(name, |s| {
            s.state = McpState::Connected;
            s.peer = Some(peer);
            s.pid = pid;
            s.tools = tools;
            s.generation += 1;
            generation = s.generation;
        });
        generation
    }

    /// A `tools/list_changed` arrived: a refresh of the list starts (see
    /// [`McpHub::refreshed`]).
    fn refresh_started(&self, name: &str) {
        self.with_slots(|slots| {
            if let Some(s) = slots.get_mut(name) {
                s.refreshing += 1;
            }
        });
    }

    /// A refresh ended: with the new list, or `None` when listing failed.
    fn refresh_done(&self, name: &str, tools: Option<Vec<McpToolInfo>>) {
        self.set(name, |s| {
            s.refreshing = s.refreshing.saturating_sub(1);
            if let Some(tools) = tools
                && s.state == McpState::Connected
            {
                s.tools = tools;
            }
        });
    }

    /// Wait (at most `wait`) until no refresh of `server`'s tool list runs, so a call
    /// whose server announced new tools before answering returns after the registry
    /// offers them (the next step's request lists them).
    async fn refreshed(&self, server: &str, wait: Duration) {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(wait, async {
            loop {
                let busy = self.read_slots(|s| s.get(server).is_some_and(|s| s.refreshing > 0));
                if !busy || rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    fn restarting(&self, name: &str, error: String) {
        self.set(name, |s| {
            s.state = McpState::Restarting;
            s.error = Some(error);
            s.restarts += 1;
        });
    }

    fn failed(&self, name: &str, error: String) {
        self.set(name, |s| {
            s.state = McpState::Failed;
            s.error = Some(error);
        });
    }

    /// The connection of `server`, waiting up to `wait` while it (re)connects. Errors are
    /// the text the model sees.
    async fn peer(&self, server: &str, wait: Duration) -> Result<(Peer<RoleClient>, u64), String> {
        let mut rx = self.changed.subscribe();
        let look = || {
            self.read_slots(|slots| match slots.get(server) {
                None => Some(Err(format!("MCP server '{server}' is not configured"))),
                Some(s) => match s.state {
                    McpState::Connected => s.peer.clone().map(|p| Ok((p, s.generation))),
                    McpState::Failed => Some(Err(format!(
                        "MCP server '{server}' failed: {}",
                        s.error.as_deref().unwrap_or("unknown error")
                    ))),
                    McpState::Disabled => Some(Err(format!("MCP server '{server}' is disabled"))),
                    McpState::Connecting | McpState::Restarting => None,
                },
            })
        };
        let waited = tokio::time::timeout(wait, async {
            loop {
                if let Some(r) = look() {
                    return r;
                }
                if rx.changed().await.is_err() {
                    return Err(format!("MCP server '{server}' stopped"));
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            Err(format!(
                "MCP server '{server}' did not come back within {} ms (it is restarting)",
                wait.as_millis()
            ))
        })
    }

    /// Wait (at most `wait`) until connection `generation` of `server` is no longer the
    /// live one (it closed: the server is restarting, failed or reconnected).
    async fn wait_past(&self, server: &str, generation: u64, wait: Duration) {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(wait, async {
            loop {
                let live = self.read_slots(|s| {
                    s.get(server).is_some_and(|s| {
                        s.state == McpState::Connected && s.generation == generation
                    })
                });
                if !live || rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    /// A call to `server` hung past its timeout (or its connection broke): restart that
    /// connection (if it is still the current one).
    fn report_hung(&self, server: &str, generation: u64, after: Duration) {
        let current = self.read_slots(|s| s.get(server).map(|s| s.generation)) == Some(generation);
        if !current {
            return;
        }
        let sup = self
            .supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(sup) = sup {
            let _ = sup.cast(server::SupervisorMsg::Hung {
                server: server.to_string(),
                reason: if after.is_zero() {
                    "its connection broke during a call".to_string()
                } else {
                    format!("a call got no answer within {} ms", after.as_millis())
                },
            });
        }
    }
}

impl ToolSource for McpHub {
    fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>> {
        let Some(me) = self.me.upgrade() else {
            return BTreeMap::new();
        };
        let (mut out, owners) = self.read_slots(|slots| {
            let mut out: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
            // Who offers each name: `<server>_<tool>` after sanitizing can be the same for
            // two tools (`a` + `b_c` and `a_b` + `c`, or `x.y` and `x_y` on one server).
            let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (server, s) in slots.iter() {
                if !matches!(s.state, McpState::Connected | McpState::Restarting) {
                    continue;
                }
                for t in &s.tools {
                    owners
                        .entry(t.name.clone())
                        .or_default()
                        .push(format!("{server}/{}", t.tool));
                    out.insert(
                        t.name.clone(),
                        Arc::new(McpTool {
                            hub: me.clone(),
                            server: server.clone(),
                            info: t.clone(),
                            wait: s.config.timeout(),
                            call_timeout: s.config.call_timeout(),
                        }),
                    );
                }
            }
            (out, owners)
        });
        // A clashing name is withheld from every server: the model could not say which tool
        // it calls, and a permission rule (keyed by the name) could not tell them apart.
        for (name, who) in owners.iter().filter(|(_, w)| w.len() > 1) {
            out.remove(name);
            let new = self
                .clashes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone());
            if new {
                tracing::warn!(
                    "MCP tool name {name} is offered by {}: withheld (rename a server so the names differ)",
                    who.join(" and ")
                );
            }
        }
        out
    }

    fn generation(&self) -> Option<u64> {
        Some(self.version.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// One MCP tool as a [`Tool`].
pub struct McpTool {
    hub: Arc<McpHub>,
    server: String,
    info: McpToolInfo,
    /// How long a call waits for a restarting server.
    wait: Duration,
    /// The server's `timeout`, when set: a call without an answer by then is a hang.
    call_timeout: Option<Duration>,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn description(&self) -> String {
        self.info.description.clone()
    }

    fn parameters(&self) -> Value {
        self.info.input_schema.clone()
    }

    fn read_only(&self) -> bool {
        self.info.read_only
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let hub = self.hub.clone();
        let server = self.server.clone();
        let info = self.info.clone();
        let (wait, call_timeout) = (self.wait, self.call_timeout);
        Box::pin(async move {
            let arguments = match args {
                Value::Object(m) => m,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::InvalidArguments {
                        tool: info.name.clone(),
                        detail: format!("expected a JSON object, got {other}"),
                    });
                }
            };
            let req = PermissionRequest {
                permission: info.name.clone(),
                patterns: vec!["*".into()],
                always: vec!["*".into()],
                metadata: serde_json::json!({"server": server, "tool": info.tool}),
                ..Default::default()
            };
            match ctx.permissions.ask(req).await {
                PermissionReply::Allow | PermissionReply::AllowAlways => {}
                PermissionReply::Deny(m) => return Err(ToolError::PermissionDenied(m)),
                PermissionReply::Reject(m) => return Err(ToolError::PermissionRejected(m)),
            }
            let (peer, generation) = tokio::select! {
                p = hub.peer(&server, wait) => p.map_err(ToolError::Failed)?,
                _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
            };
            let params = rmcp::model::CallToolRequestParams::new(info.tool.clone())
                .with_arguments(arguments);
            let call = peer.call_tool(params);
            let result = tokio::select! {
                r = async {
                    match call_timeout {
                        Some(t) => tokio::time::timeout(t, call).await.map_err(|_| t),
                        None => Ok(call.await),
                    }
                } => r,
                _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
            };
            let result = match result {
                Err(t) => {
                    hub.report_hung(&server, generation, t);
                    // As below: the next step must not reach the hung connection.
                    hub.wait_past(&server, generation, wait).await;
                    return Err(ToolError::Failed(format!(
                        "MCP server '{server}' did not answer {} within {} ms; it is considered hung and is being restarted. The outcome of this call is unknown.",
                        info.tool,
                        t.as_millis()
                    )));
                }
                Ok(Err(rmcp::ServiceError::McpError(e))) => {
                    return Err(ToolError::Failed(format!(
                        "MCP server '{server}' refused {}: {}",
                        info.tool, e.message
                    )));
                }
                Ok(Err(e)) => {
                    // The connection is gone (or broken): make sure it is restarted, and
                    // let the hub catch up first so the next step sees the server's new
                    // state (restarting, or failed with its tools withdrawn).
                    hub.report_hung(&server, generation, Duration::ZERO);
                    hub.wait_past(&server, generation, wait).await;
                    return Err(ToolError::Failed(format!(
                        "MCP server '{server}' stopped during the call to {} ({e}); the outcome is unknown. The server is being restarted.",
                        info.tool
                    )));
                }
                Ok(Ok(r)) => r,
            };
            hub.refreshed(&server, wait).await;
            let json = serde_json::to_value(&result).unwrap_or(Value::Null);
            let c = content::convert(&json);
            if c.is_error {
                return Err(ToolError::Failed(if c.text.is_empty() {
                    format!("MCP tool {} reported an error", info.tool)
                } else {
                    c.text
                }));
            }
            let out = ToolOutput {
                title: format!("{server}: {}", info.tool),
                output: c.text.clone(),
                metadata: content::metadata(&server, &info.tool, &c),
            };
            Ok(troupe_tools::apply_truncation(out).await)
        })
    }
}

#[cfg(test)]
mod clash_tests {
    use super::*;

    fn info(server: &str, tool: &str) -> McpToolInfo {
        McpToolInfo {
            name: content::tool_key(server, tool),
            tool: tool.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            read_only: false,
        }
    }

    #[test]
    fn clashing_tool_names_are_withheld_from_every_server() {
        let cfg: BTreeMap<String, McpServerConfig> = serde_json::from_value(serde_json::json!({
            "a": {"type": "local", "command": ["x"]},
            "a_b": {"type": "local", "command": ["y"]},
        }))
        .unwrap();
        let hub = McpHub::new(&cfg, Bus::new());
        hub.with_slots(|slots| {
            let a = slots.get_mut("a").unwrap();
            a.state = McpState::Connected;
            // `b_c` on `a` and `c` on `a_b` are both `a_b_c`; `x.y` and `x_y` on `a` are both
            // `a_x_y`.
            a.tools = vec![
                info("a", "b_c"),
                info("a", "x.y"),
                info("a", "x_y"),
                info("a", "ok"),
            ];
            let ab = slots.get_mut("a_b").unwrap();
            ab.state = McpState::Connected;
            ab.tools = vec![info("a_b", "c"), info("a_b", "fine")];
        });
        let names: Vec<String> = hub.tools().into_keys().collect();
        assert_eq!(names, ["a_b_fine", "a_ok"]);
    }

    #[test]
    fn the_generation_moves_when_a_slot_changes_and_not_when_tools_are_listed() {
        let cfg: BTreeMap<String, McpServerConfig> = serde_json::from_value(serde_json::json!({
            "a": {"type": "local", "command": ["x"]},
        }))
        .unwrap();
        let hub = McpHub::new(&cfg, Bus::new());
        let g0 = hub.generation();
        assert!(g0.is_some());
        assert!(hub.tools().is_empty());
        assert_eq!(hub.generation(), g0, "listing is not a change");
        hub.with_slots(|slots| {
            let a = slots.get_mut("a").unwrap();
            a.state = McpState::Connected;
            a.tools = vec![info("a", "new")];
        });
        let g1 = hub.generation();
        assert_ne!(g1, g0);
        assert_eq!(hub.tools().into_keys().collect::<Vec<_>>(), ["a_new"]);
        assert_eq!(hub.generation(), g1);
    }
}
