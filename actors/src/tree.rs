//! The live supervision tree, for monitoring (`GET /actors`, `troupe monitor`).
//!
//! Every actor of the runtime registers a node while it lives ([`NodeGuard`], held in the
//! actor's state and removed when the state is dropped, however the actor ends). Actors
//! update their node's status, current tool, step count, tokens and cost as they work. The
//! tree is assembled on demand from the parent links, so reading it never touches an actor's
//! mailbox.

use std::sync::Arc;

use dashmap::DashMap;
use rust_decimal::Decimal;
use serde::Serialize;
use troupe_session::{Millis, Tokens, now_ms};

/// Kind of actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The root supervisor.
    Runtime,
    /// A session (root or subagent).
    Session,
    /// One step.
    Processor,
    /// One tool call.
    ToolCall,
    /// A compaction worker.
    Compaction,
    /// A title worker.
    Title,
    /// A summary worker (the `summary` agent after a turn that changed files).
    Summary,
    /// An MCP server (its process or HTTP session), supervised by the runtime's MCP
    /// supervisor; listed under the runtime root.
    McpServer,
    /// A process a tool started with `background: true` (not an actor: owned by its
    /// session, listed under it, or under the runtime once the session actor is idle).
    Process,
}

/// What an actor is doing, as served in `/actors` (a string: `idle`, `busy`, `retry`,
/// `running`, `exited <code>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActorStatus {
    /// Waiting for work.
    #[default]
    Idle,
    /// Working (a turn, a step, a tool call, a worker's request).
    Busy,
    /// A step waiting before a provider retry.
    Retry,
    /// A background process that still runs.
    Running,
    /// A background process that exited with this code.
    Exited(i32),
    /// Given up on after too many crashes (an MCP server past its restart limit).
    Failed,
}

impl ActorStatus {
    /// Whether the actor is idle.
    pub fn is_idle(self) -> bool {
        self == ActorStatus::Idle
    }
}

impl std::fmt::Display for ActorStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActorStatus::Idle => f.write_str("idle"),
            ActorStatus::Busy => f.write_str("busy"),
            ActorStatus::Retry => f.write_str("retry"),
            ActorStatus::Running => f.write_str("running"),
            ActorStatus::Exited(code) => write!(f, "exited {code}"),
            ActorStatus::Failed => f.write_str("failed"),
        }
    }
}

impl Serialize for ActorStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One node of the tree as served.
#[derive(Debug, Clone, Serialize)]
pub struct ActorNode {
    /// What kind of actor the node is (runtime, session, step, tool call, …).
    pub kind: Kind,
    /// Actor id (session id, message id, call id, …).
    pub id: String,
    /// Session the actor works for.
    #[serde(rename = "sessionID", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What it is doing.
    pub status: ActorStatus,
    /// Tool running (tool calls) or last tool seen (sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Agent (sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Start time, ms since epoch.
    pub started: Millis,
    /// Steps run (sessions: this actor's lifetime).
    pub steps: u64,
    /// Tokens so far.
    pub tokens: Tokens,
    /// Cost so far, USD.
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: Decimal,
    /// Restarts: how many times a supervisor started this actor again after a crash (a
    /// read-only tool call re-run, a retried step, a session restarted from the store).
    pub restarts: u64,
    /// Crashes of this actor's children seen by it (tools, steps, workers); the runtime node
    /// counts crashed sessions.
    pub failures: u64,
    /// Prompts waiting (sessions): queued behind the running turn, or steering it until its
    /// next step boundary.
    pub queued: u64,
    /// The actors this one supervises, as nodes of the same shape.
    pub children: Vec<ActorNode>,
}

impl ActorNode {
    /// A node that has done nothing yet: no tool, agent, steps, tokens, cost, restarts,
    /// failures, queued prompts or children.
    fn fresh(
        kind: Kind,
        id: String,
        session_id: Option<String>,
        status: ActorStatus,
        started: Millis,
    ) -> Self {
        ActorNode {
            kind,
            id,
            session_id,
            status,
            tool: None,
            agent: None,
            started,
            steps: 0,
            tokens: Tokens::default(),
            cost: Decimal::ZERO,
            restarts: 0,
            failures: 0,
            queued: 0,
            children: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    node: ActorNode,
    parent: Option<String>,
}

/// The live actors of a runtime, by registry key, with their parent links. (Named apart from
/// the tool registry, `troupe_tools::Registry`.)
#[derive(Debug, Default)]
pub struct ActorTree {
    nodes: DashMap<String, Entry>,
    /// Crashed sessions seen by the runtime root (the root has no node of its own).
    root_failures: std::sync::atomic::AtomicU64,
    /// Session restarts by the runtime root.
    root_restarts: std::sync::atomic::AtomicU64,
    /// Wakes [`ActorTree::changed`] waiters on every status change and removal.
    changed: tokio::sync::Notify,
}

impl ActorTree {
    /// Registers a worker's node already [`ActorStatus::Busy`] (a worker is busy from its
    /// first message to its end); see [`ActorTree::register`].
    pub fn register_busy(
        self: &Arc<Self>,
        kind: Kind,
        id: &str,
        session_id: &str,
        parent: &str,
    ) -> NodeGuard {
        let node = self.register(kind, id, Some(session_id), Some(parent));
        node.set_status(ActorStatus::Busy);
        node
    }

    /// Register a node; the guard removes it when dropped.
    pub fn register(
        self: &Arc<Self>,
        kind: Kind,
        id: &str,
        session_id: Option<&str>,
        parent: Option<&str>,
    ) -> NodeGuard {
        let key = format!("{}:{}", key_prefix(kind), id);
        let node = ActorNode::fresh(
            kind,
            id.to_string(),
            session_id.map(str::to_string),
            ActorStatus::Idle,
            now_ms(),
        );
        self.nodes.insert(
            key.clone(),
            Entry {
                node,
                parent: parent.map(str::to_string),
            },
        );
        NodeGuard {
            registry: self.clone(),
            key,
        }
    }

    /// Count a crashed session (the runtime root's failures).
    pub fn root_failure(&self) {
        self.root_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count a session restarted by the runtime root.
    pub fn root_restart(&self) {
        self.root_restarts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Resolves at the next status change or node removal (for waiters that would otherwise
    /// poll, e.g. shutdown waiting for idle sessions to finish background work). Create the
    /// future before checking the condition, so no change is missed in between.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Whether session `session_id` has no turn running (its actor idle, or not live).
    pub fn session_idle(&self, session_id: &str) -> bool {
        self.nodes
            .get(&node_key(Kind::Session, session_id))
            .is_none_or(|e| e.node.status.is_idle())
    }

    /// Whether every live session is idle (a session with only background work left).
    pub fn sessions_idle(&self) -> bool {
        self.nodes
            .iter()
            .all(|e| e.node.kind != Kind::Session || e.node.status.is_idle())
    }

    /// Number of live nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no actor is registered.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Assemble the tree under a synthetic runtime root.
    pub fn tree(&self) -> ActorNode {
        let mut entries: Vec<(String, Entry)> = self
            .nodes
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        entries.sort_by(|a, b| a.1.node.started.cmp(&b.1.node.started).then(a.0.cmp(&b.0)));
        let mut children: std::collections::HashMap<Option<String>, Vec<(String, ActorNode)>> =
            std::collections::HashMap::new();
        let keys: std::collections::HashSet<String> =
            entries.iter().map(|(k, _)| k.clone()).collect();
        for (k, e) in entries {
            // A node whose parent is gone hangs under the root rather than disappearing.
            let parent = e.parent.filter(|p| keys.contains(p));
            children.entry(parent).or_default().push((k, e.node));
        }
        fn build(
            key: Option<String>,
            children: &mut std::collections::HashMap<Option<String>, Vec<(String, ActorNode)>>,
        ) -> Vec<ActorNode> {
            let list = children.remove(&key).unwrap_or_default();
            list.into_iter()
                .map(|(k, mut n)| {
                    n.children = build(Some(k), children);
                    n
                })
                .collect()
        }
        let mut kids = build(None, &mut children);
        // MCP servers run for the runtime's lifetime: they do not make it busy.
        let status = if kids
            .iter()
            .filter(|k| k.kind != Kind::McpServer)
            .all(|k| k.status.is_idle())
        {
            ActorStatus::Idle
        } else {
            ActorStatus::Busy
        };
        attach_background(&mut kids, troupe_tools::procs::all_background());
        ActorNode {
            kind: Kind::Runtime,
            id: "runtime".into(),
            session_id: None,
            status,
            tool: None,
            agent: None,
            started: 0,
            steps: kids.iter().map(|k| k.steps).sum(),
            tokens: kids.iter().fold(Tokens::default(), |mut t, k| {
                t.add(&k.tokens);
                t
            }),
            cost: kids.iter().map(|k| k.cost).sum(),
            restarts: self
                .root_restarts
                .load(std::sync::atomic::Ordering::Relaxed),
            failures: self
                .root_failures
                .load(std::sync::atomic::Ordering::Relaxed),
            queued: 0,
            children: kids,
        }
    }
}

/// Add the background processes of each session (`background`, as
/// [`troupe_tools::procs::all_background`] lists them) as [`Kind::Process`] nodes: under the
/// session's node when its actor lives, else at the top level. Status `running` or
/// `exited <code>`; `tool` is the command line.
fn attach_background(
    kids: &mut Vec<ActorNode>,
    background: Vec<(String, Vec<troupe_tools::procs::Background>)>,
) {
    fn find<'a>(nodes: &'a mut [ActorNode], sid: &str) -> Option<&'a mut ActorNode> {
        for n in nodes {
            if n.kind == Kind::Session && n.id == sid {
                return Some(n);
            }
            if let Some(f) = find(&mut n.children, sid) {
                return Some(f);
            }
        }
        None
    }
    for (sid, procs) in background {
        for b in procs {
            let exited = b.exited.lock().ok().and_then(|e| *e);
            let status = match exited {
                None => ActorStatus::Running,
                Some(code) => ActorStatus::Exited(code),
            };
            let mut node = ActorNode::fresh(
                Kind::Process,
                b.pid.to_string(),
                Some(sid.clone()),
                status,
                b.started_ms as Millis,
            );
            node.tool = Some(b.command.clone());
            match find(kids, &sid) {
                Some(parent) => parent.children.push(node),
                None => kids.push(node),
            }
        }
    }
}

fn key_prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::Runtime => "shared",
        Kind::Session => "ses",
        Kind::Processor => "step",
        Kind::ToolCall => "call",
        Kind::Compaction => "compaction",
        Kind::Title => "title",
        Kind::Summary => "summary",
        Kind::Process => "proc",
        Kind::McpServer => "mcp",
    }
}

/// Key of a node in the registry (`<kind>:<id>`), for parent links.
pub fn node_key(kind: Kind, id: &str) -> String {
    format!("{}:{}", key_prefix(kind), id)
}

/// Keeps a node registered; updates go through it.
#[derive(Debug)]
pub struct NodeGuard {
    registry: Arc<ActorTree>,
    key: String,
}

impl NodeGuard {
    /// Change the node.
    pub fn update(&self, f: impl FnOnce(&mut ActorNode)) {
        let changed = match self.registry.nodes.get_mut(&self.key) {
            Some(mut e) => {
                let before = e.node.status;
                f(&mut e.node);
                before != e.node.status
            }
            None => false,
        };
        if changed {
            self.registry.changed.notify_waiters();
        }
    }

    /// Set the node's status.
    pub fn set_status(&self, status: ActorStatus) {
        self.update(|n| n.status = status);
    }

    /// Count one crashed child of this node.
    pub fn add_failure(&self) {
        self.update(|n| n.failures += 1);
    }

    /// The node's registry key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for NodeGuard {
    fn drop(&mut self) {
        self.registry.nodes.remove(&self.key);
        self.registry.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_follows_parent_links_and_guards_remove_nodes() {
        let r = Arc::new(ActorTree::default());
        let s = r.register(Kind::Session, "ses_1", Some("ses_1"), None);
        let p = r.register(Kind::Processor, "msg_1", Some("ses_1"), Some(s.key()));
        let t = r.register(Kind::ToolCall, "call_1", Some("ses_1"), Some(p.key()));
        t.update(|n| n.tool = Some("bash".into()));
        let tree = r.tree();
        assert_eq!(tree.children.len(), 1);
        assert_eq!(
            tree.children[0].children[0].children[0].tool.as_deref(),
            Some("bash")
        );
        drop(t);
        drop(p);
        assert!(r.tree().children[0].children.is_empty());
        drop(s);
        assert!(r.is_empty());
    }

    /// The runtime node sums its sessions' steps, cost and tokens (tokens stayed 0 while
    /// `/metrics` counted them).
    #[test]
    fn the_runtime_node_sums_its_sessions() {
        let r = Arc::new(ActorTree::default());
        let a = r.register(Kind::Session, "ses_a", Some("ses_a"), None);
        let b = r.register(Kind::Session, "ses_b", Some("ses_b"), None);
        let step = |input, output, read| {
            let mut t = Tokens {
                input,
                output,
                ..Default::default()
            };
            t.cache.read = read;
            t
        };
        a.update(|n| {
            n.steps = 2;
            n.cost = Decimal::new(15, 3);
            n.tokens.add(&step(100, 10, 5));
        });
        b.update(|n| {
            n.steps = 1;
            n.cost = Decimal::new(5, 3);
            n.tokens.add(&step(40, 2, 0));
        });
        let root = r.tree();
        assert_eq!(root.steps, 3);
        assert_eq!(root.cost, Decimal::new(20, 3));
        assert_eq!(
            (
                root.tokens.input,
                root.tokens.output,
                root.tokens.cache.read
            ),
            (140, 12, 5)
        );
    }

    #[test]
    fn background_processes_hang_under_their_session() {
        let r = Arc::new(ActorTree::default());
        let _s = r.register(Kind::Session, "ses_live", Some("ses_live"), None);
        let mut kids = r.tree().children;
        let bg = |pid: i32, exited: Option<i32>| troupe_tools::procs::Background {
            pid,
            tag: "t".into(),
            command: format!("server {pid}"),
            log: "/tmp/x.log".into(),
            started_ms: 5,
            exited: Arc::new(std::sync::Mutex::new(exited)),
        };
        attach_background(
            &mut kids,
            vec![
                ("ses_live".into(), vec![bg(11, None)]),
                ("ses_idle".into(), vec![bg(12, Some(3))]),
            ],
        );
        assert_eq!(kids.len(), 2);
        let under = &kids[0].children[0];
        assert_eq!(
            (under.kind, under.id.as_str(), under.status),
            (Kind::Process, "11", ActorStatus::Running)
        );
        assert_eq!(under.tool.as_deref(), Some("server 11"));
        assert_eq!(under.session_id.as_deref(), Some("ses_live"));
        // The idle session's actor is gone: its process is listed at the top.
        assert_eq!(
            (kids[1].kind, kids[1].id.as_str(), kids[1].status),
            (Kind::Process, "12", ActorStatus::Exited(3))
        );
        let json = serde_json::to_value(&kids[1]).unwrap();
        assert_eq!(json["kind"], "process");
        assert_eq!(json["status"], "exited 3");
    }
}
