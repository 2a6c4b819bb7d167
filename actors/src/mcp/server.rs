//! The MCP actors: one [`McpSupervisor`] per runtime, one [`McpServerActor`] per enabled
//! server (its child, linked). See the module docs of [`crate::mcp`] for the policy.
//!
//! A server actor connects in its first message (never in `pre_start`, so the supervisor
//! is not held up by a slow server), then only waits: its connection task tells it when
//! the connection ended, and it fails with the reason. The supervisor turns each failure
//! (or a spawn error, or a hang it was told about) into a restart after a backoff, or,
//! past the intensity limit, into the `failed` state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio_util::sync::{CancellationToken, DropGuard};
use troupe_config::{McpServerConfig, SupervisionConfig};

use super::{McpHub, McpToolInfo, content};
use crate::supervision::{Intensity, Verdict};
use crate::tree::{ActorStatus, ActorTree, Kind, NodeGuard};

/// Most bytes of a local server's stderr kept for error messages (the tail).
const STDERR_TAIL: usize = 2_000;

/// Messages of the supervisor.
#[derive(Debug)]
pub enum SupervisorMsg {
    /// Start `0` again (after its backoff).
    Restart(String),
    /// `0` connected and listed its tools.
    Up(String),
    /// A call to `server` hung or lost its connection: restart it.
    Hung {
        /// Server name.
        server: String,
        /// What happened.
        reason: String,
    },
}

/// The supervisor of every MCP server actor.
pub struct McpSupervisor;

/// The supervisor's state.
pub struct SupervisorState {
    hub: Arc<McpHub>,
    cfg: SupervisionConfig,
    children: HashMap<ActorId, String>,
    running: HashMap<String, ActorRef<ServerMsg>>,
    intensity: HashMap<String, Intensity>,
    nodes: HashMap<String, NodeGuard>,
}

impl SupervisorState {
    async fn spawn(&mut self, myself: &ActorRef<SupervisorMsg>, name: &str) {
        let Some(cfg) = self
            .hub
            .enabled()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
        else {
            return;
        };
        let args = ServerArgs {
            name: name.to_string(),
            config: cfg,
            hub: self.hub.clone(),
        };
        match Actor::spawn_linked(None, McpServerActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                self.children.insert(actor.get_id(), name.to_string());
                self.running.insert(name.to_string(), actor);
            }
            Err(e) => self.crashed(myself, name, format!("could not start: {e}")),
        }
    }

    fn crashed(&mut self, myself: &ActorRef<SupervisorMsg>, name: &str, reason: String) {
        self.running.remove(name);
        if self.hub.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let (max, period) = (self.cfg.mcp_restarts(), self.cfg.period());
        let backoff = self.cfg.backoff();
        let verdict = self
            .intensity
            .entry(name.to_string())
            .or_insert_with(|| Intensity::new(max, period, backoff))
            .crash(Instant::now());
        let node = self.nodes.get(name);
        if let Some(n) = node {
            n.add_failure();
        }
        match verdict {
            Verdict::Restart { backoff, attempt } => {
                tracing::warn!(
                    server = name,
                    attempt,
                    "MCP server crashed, restarting: {reason}"
                );
                self.hub.restarting(name, reason);
                if let Some(n) = node {
                    n.update(|n| {
                        n.restarts += 1;
                        n.status = ActorStatus::Retry;
                    });
                }
                let name = name.to_string();
                myself.send_after(backoff, move || SupervisorMsg::Restart(name));
            }
            Verdict::Escalate { crashes } => {
                let msg = format!(
                    "{reason} (gave up after {crashes} crashes within {} s; its tools are withdrawn)",
                    period.as_secs()
                );
                tracing::error!(server = name, "MCP server failed: {msg}");
                self.hub.failed(name, msg);
                if let Some(n) = node {
                    n.set_status(ActorStatus::Failed);
                }
            }
        }
    }
}

#[derive(Debug)]
/// Arguments of the supervisor.
pub struct SupervisorArgs {
    hub: Arc<McpHub>,
    tree: Arc<ActorTree>,
    cfg: SupervisionConfig,
}

impl Actor for McpSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut nodes = HashMap::new();
        for (name, _) in args.hub.enabled() {
            let node = args.tree.register(Kind::McpServer, &name, None, None);
            node.set_status(ActorStatus::Busy);
            nodes.insert(name.clone(), node);
            let _ = myself.cast(SupervisorMsg::Restart(name));
        }
        Ok(SupervisorState {
            hub: args.hub,
            cfg: args.cfg,
            children: HashMap::new(),
            running: HashMap::new(),
            intensity: HashMap::new(),
            nodes,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Restart(name) => {
                if !state.running.contains_key(&name) {
                    state.spawn(&myself, &name).await;
                }
            }
            SupervisorMsg::Up(name) => {
                if let Some(n) = state.nodes.get(&name) {
                    n.set_status(ActorStatus::Idle);
                }
            }
            SupervisorMsg::Hung { server, reason } => {
                if let Some(actor) = state.running.get(&server) {
                    actor.stop(Some(reason));
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (id, reason) = match &evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell.get_id(), err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => (
                cell.get_id(),
                reason.clone().unwrap_or_else(|| "stopped".into()),
            ),
            _ => return Ok(()),
        };
        let Some(name) = state.children.remove(&id) else {
            tracing::debug!("MCP supervisor: event from an unknown child {id}");
            return Ok(());
        };
        state.crashed(&myself, &name, reason);
        Ok(())
    }
}

/// Messages of a server actor.
#[derive(Debug)]
pub enum ServerMsg {
    /// Connect (the first message).
    Connect,
    /// The connection ended (the text says how).
    Closed(String),
}

/// Arguments of a server actor.
pub struct ServerArgs {
    name: String,
    config: McpServerConfig,
    hub: Arc<McpHub>,
}

/// The actor owning one server's connection (see the module docs).
pub struct McpServerActor;

/// A server actor's state: the connection task stops when this is dropped.
pub struct ServerState {
    args: ServerArgs,
    stop: Option<DropGuard>,
}

impl Actor for McpServerActor {
    type Msg = ServerMsg;
    type State = ServerState;
    type Arguments = ServerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(ServerMsg::Connect)?;
        Ok(ServerState { args, stop: None })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ServerMsg::Connect => {
                let a = &state.args;
                let conn = connect(&a.name, &a.config, a.hub.clone()).await?;
                let stop = CancellationToken::new();
                state.stop = Some(stop.clone().drop_guard());
                let Conn {
                    running,
                    pid,
                    stderr,
                    tools,
                } = conn;
                a.hub.connected(&a.name, running.peer().clone(), pid, tools);
                let me = myself.clone();
                tokio::spawn(async move {
                    let ct = running.cancellation_token();
                    let wait = running.waiting();
                    tokio::pin!(wait);
                    tokio::select! {
                        _ = &mut wait => {
                            let tail = stderr.lock().map(|s| s.trim().to_string()).unwrap_or_default();
                            let mut why = String::from("the connection closed (the server exited or was killed)");
                            if !tail.is_empty() {
                                why.push_str(&format!("; stderr: {tail}"));
                            }
                            let _ = me.cast(ServerMsg::Closed(why));
                        }
                        _ = stop.cancelled() => {
                            ct.cancel();
                            let _ = wait.await;
                        }
                    }
                });
                if let Some(sup) = myself.try_get_supervisor() {
                    let _ = sup.send_message(SupervisorMsg::Up(a.name.clone()));
                }
            }
            ServerMsg::Closed(why) => return Err(why.into()),
        }
        Ok(())
    }
}

/// The running client service with its handler.
type Running = RunningService<RoleClient, Notifier>;

struct Conn {
    running: Running,
    pid: Option<u32>,
    stderr: Arc<Mutex<String>>,
    tools: Vec<McpToolInfo>,
}

/// The client side's handler: refreshes the tool list on `notifications/tools/list_changed`.
#[derive(Clone)]
struct Notifier {
    hub: Arc<McpHub>,
    server: String,
    /// The server's `timeout`: bounds the refresh.
    timeout: Duration,
}

impl ClientHandler for Notifier {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        self.hub.refresh_started(&self.server);
        let listed = tokio::time::timeout(self.timeout, context.peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => self
                .hub
                .refresh_done(&self.server, Some(tool_infos(&self.server, tools))),
            Err(_) => {
                tracing::warn!(server = %self.server, "MCP tools/list after list_changed got no answer within {} ms", self.timeout.as_millis());
                self.hub.refresh_done(&self.server, None);
            }
            Ok(Err(e)) => {
                tracing::warn!(server = %self.server, "MCP tools/list after list_changed failed: {e}");
                self.hub.refresh_done(&self.server, None);
            }
        }
    }
}

/// Convert the server's tool list.
fn tool_infos(server: &str, tools: Vec<rmcp::model::Tool>) -> Vec<McpToolInfo> {
    tools
        .into_iter()
        .map(|t| McpToolInfo {
            name: content::tool_key(server, &t.name),
            tool: t.name.to_string(),
            description: t.description.as_deref().unwrap_or("").to_string(),
            input_schema: serde_json::Value::Object((*t.input_schema).clone()),
            read_only: t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
        })
        .collect()
}

/// The command that starts local server `l`: its argv and `environment` over troupe's own
/// environment, minus `TROUPE_SERVER_PASSWORD` unless `environment` sets it (removed as from bash: a server that runs
/// commands for the model would otherwise hand it the password of `troupe serve`, around
/// its permission checks). Precondition: `l.command` is non-empty (config validation).
///
/// The process carries a tool process mark (`TROUPE_PROC_OWNER`, [`troupe_tools::procs`]),
/// inherited by everything it starts: when troupe exits, in any way (kill -9 included), the
/// watchdog kills whatever the server left running, as it does for `bash` commands.
fn local_command(l: &troupe_config::McpLocalConfig) -> tokio::process::Command {
    use troupe_tools::procs;
    procs::init();
    let mut cmd = tokio::process::Command::new(&l.command[0]);
    cmd.args(&l.command[1..])
        .env_remove(troupe_tools::builtin::bash::SERVER_PASSWORD_ENV)
        .envs(&l.environment)
        .env(procs::OWNER_ENV, procs::new_call_tag());
    cmd
}

/// Start the server and list its tools, within the server's timeout each.
async fn connect(name: &str, cfg: &McpServerConfig, hub: Arc<McpHub>) -> Result<Conn, String> {
    let timeout = cfg.timeout();
    let handler = Notifier {
        hub,
        server: name.to_string(),
        timeout,
    };
    let stderr = Arc::new(Mutex::new(String::new()));
    let within =
        |what: &'static str| move |_| format!("{what} took longer than {} ms", timeout.as_millis());
    let (running, pid) = match cfg {
        McpServerConfig::Local(l) => {
            let cmd = local_command(l);
            let (proc, err) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {:?}: {e}", l.command.join(" ")))?;
            let pid = proc.id();
            let reader = err.map(|err| tokio::spawn(keep_tail(err, stderr.clone())));
            let served = tokio::time::timeout(timeout, handler.serve(proc))
                .await
                .map_err(within("the MCP handshake"))?;
            let running = match served {
                Ok(running) => running,
                Err(e) => {
                    // A server that exits at once breaks the pipe before its stderr has been
                    // read: give the reader a moment to reach EOF, so the error says why.
                    if let Some(r) = reader {
                        let _ = tokio::time::timeout(STDERR_SETTLE, r).await;
                    }
                    let tail = stderr
                        .lock()
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default();
                    return Err(if tail.is_empty() {
                        format!("the MCP handshake failed: {e}")
                    } else {
                        format!("the MCP handshake failed: {e}; stderr: {tail}")
                    });
                }
            };
            (running, pid)
        }
        McpServerConfig::Remote(r) => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut headers = HashMap::new();
            for (k, v) in &r.headers {
                let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| format!("bad header name {k:?}: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(v)
                    .map_err(|e| format!("bad value of header {k:?}: {e}"))?;
                headers.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(r.url.as_str())
                .custom_headers(headers);
            let client = reqwest::Client::builder()
                .connect_timeout(timeout)
                .build()
                .map_err(|e| e.to_string())?;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let running = tokio::time::timeout(timeout, handler.serve(transport))
                .await
                .map_err(within("the MCP handshake"))?
                .map_err(|e| format!("the MCP handshake with {} failed: {e}", r.url))?;
            (running, None)
        }
    };
    let tools = tokio::time::timeout(timeout, running.peer().list_all_tools())
        .await
        .map_err(within("tools/list"))?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    Ok(Conn {
        tools: tool_infos(name, tools),
        running,
        pid,
        stderr,
    })
}

/// Keep the last [`STDERR_TAIL`] bytes of a server's stderr (for error messages).
/// How long a failed handshake waits for the server's stderr to be read to its end: 500 ms.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

async fn keep_tail(err: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(err).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!("mcp stderr: {line}");
        if let Ok(mut t) = tail.lock() {
            t.push_str(&line);
            t.push('\n');
            if t.len() > STDERR_TAIL {
                let mut cut = t.len() - STDERR_TAIL;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
    }
}

/// Start the supervisor of `hub`'s enabled servers (none: nothing starts). The servers
/// connect in the background; [`McpHub::first_connects`] waits for their first attempt.
pub async fn start(
    hub: Arc<McpHub>,
    tree: Arc<ActorTree>,
    cfg: SupervisionConfig,
) -> Result<(), String> {
    if hub.enabled().is_empty() {
        return Ok(());
    }
    let (sup, _) = Actor::spawn(
        None,
        McpSupervisor,
        SupervisorArgs {
            hub: hub.clone(),
            tree,
            cfg,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    *hub.supervisor.lock().unwrap_or_else(|e| e.into_inner()) = Some(sup);
    Ok(())
}

/// Stop the supervisor and every server (local processes are closed, then killed), waiting
/// at most `grace`.
pub async fn stop(hub: &McpHub, grace: Duration) {
    let sup = hub
        .supervisor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    hub.stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(sup) = sup {
        let _ = sup.stop_children_and_wait(None, Some(grace)).await;
        let _ = sup.stop_and_wait(None, Some(grace)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ffi::OsStr;

    use super::local_command;
    use troupe_config::McpLocalConfig;
    use troupe_tools::builtin::bash::SERVER_PASSWORD_ENV;

    fn local(environment: &[(&str, &str)]) -> McpLocalConfig {
        McpLocalConfig {
            command: vec!["srv".into(), "--flag".into()],
            environment: environment
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            enabled: None,
            timeout: None,
        }
    }

    fn env_of<'a>(cmd: &'a tokio::process::Command, key: &str) -> Option<Option<&'a OsStr>> {
        cmd.as_std()
            .get_envs()
            .find(|(k, _)| *k == OsStr::new(key))
            .map(|(_, v)| v)
    }

    #[test]
    fn local_server_does_not_inherit_the_serve_password() {
        let cmd = local_command(&local(&[("A", "1")]));
        assert_eq!(env_of(&cmd, SERVER_PASSWORD_ENV), Some(None), "removed");
        assert_eq!(env_of(&cmd, "A"), Some(Some(OsStr::new("1"))));
        let args: Vec<_> = cmd.as_std().get_args().collect();
        assert_eq!(args, vec![OsStr::new("--flag")]);
    }

    #[test]
    fn an_explicit_password_in_the_config_environment_is_kept() {
        let cmd = local_command(&local(&[(SERVER_PASSWORD_ENV, "given")]));
        assert_eq!(
            env_of(&cmd, SERVER_PASSWORD_ENV),
            Some(Some(OsStr::new("given")))
        );
    }
}
