//! The supervision tree of `GET /actors` (and the cluster's nodes) as rows: one per actor
//! with its depth, figures and age, the header's summary, and the plain-text rendering of
//! `--once`.

use super::*;

/// One node of `GET /actors`. Unknown fields are ignored and missing ones default, so a newer
/// server does not break an older monitor.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ActorNode {
    /// `runtime`, `session`, `processor`, `tool_call`, `compaction` or `title`.
    pub kind: String,
    /// Actor id (session id, call id, …).
    pub id: String,
    /// Session the actor works for, if any.
    #[serde(rename = "sessionID")]
    pub session_id: Option<String>,
    /// `idle`, `busy` or `retry`.
    pub status: String,
    /// Tool name of a `tool_call` node.
    pub tool: Option<String>,
    /// Agent name of a session/processor node.
    pub agent: Option<String>,
    /// Start time, Unix epoch milliseconds (0 = unknown).
    pub started: u64,
    /// LLM steps taken.
    pub steps: u64,
    /// Tokens used: a number, or an object whose numeric leaves are summed.
    pub tokens: Value,
    /// Cost in USD.
    pub cost: f64,
    /// Times the supervisor restarted this actor.
    pub restarts: u64,
    /// Failures seen by this actor.
    pub failures: u64,
    /// Messages waiting in its queue.
    pub queued: u64,
    /// Supervised children.
    pub children: Vec<ActorNode>,
    /// The cluster's other nodes (`troupe serve --cluster`; only on the root): each
    /// worker's state and tree from its last heartbeat.
    pub nodes: Vec<FleetNode>,
}

/// One worker of a cluster in `GET /actors` `nodes`, with its tree read as an [`ActorNode`].
pub type FleetNode = troupe_cluster::fleet::FleetNode<Option<ActorNode>>;

/// Sum of the numeric leaves of a JSON value (a bare number counts as itself).
pub(super) fn token_total(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().map(|f| f.max(0.0) as u64))
            .unwrap_or(0),
        Value::Object(m) => m.values().map(token_total).sum(),
        _ => 0,
    }
}

/// One flattened row of the tree, shared by the text and the terminal renderings.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TreeRow {
    pub(super) depth: usize,
    pub(super) kind: String,
    pub(super) id: String,
    /// A session's title, else its first prompt (empty for other actors or when unknown).
    pub(super) label: String,
    pub(super) status: String,
    pub(super) detail: String,
    pub(super) steps: u64,
    pub(super) tokens: u64,
    pub(super) cost: f64,
    pub(super) restarts: u64,
    pub(super) failures: u64,
    pub(super) queued: u64,
    pub(super) age: String,
}

/// Depth-first flattening of `root`; `now_ms` is the current Unix time in ms (for ages);
/// `labels` maps session ids to their title or first prompt.
pub(super) fn flatten(
    root: &ActorNode,
    now_ms: u64,
    labels: &HashMap<String, String>,
) -> Vec<TreeRow> {
    fn walk(
        n: &ActorNode,
        depth: usize,
        now_ms: u64,
        labels: &HashMap<String, String>,
        out: &mut Vec<TreeRow>,
    ) {
        let detail = match (&n.tool, &n.agent) {
            (Some(t), _) => t.clone(),
            (None, Some(a)) => format!("@{a}"),
            (None, None) => String::new(),
        };
        out.push(TreeRow {
            depth,
            kind: n.kind.clone(),
            id: n.id.clone(),
            label: if n.kind == "session" {
                labels.get(&n.id).cloned().unwrap_or_default()
            } else {
                String::new()
            },
            status: n.status.clone(),
            detail,
            steps: n.steps,
            tokens: token_total(&n.tokens),
            cost: n.cost,
            restarts: n.restarts,
            failures: n.failures,
            queued: n.queued,
            age: if n.started == 0 {
                String::new()
            } else {
                fmt_age(now_ms.saturating_sub(n.started))
            },
        });
        for c in &n.children {
            walk(c, depth + 1, now_ms, labels, out);
        }
    }
    let mut out = Vec::new();
    walk(root, 0, now_ms, labels, &mut out);
    // A cluster's workers: one `node` row each (its state from the last heartbeat), its
    // tree below it.
    for n in &root.nodes {
        let mut detail = format!("{}/{} tasks", n.running.len(), n.concurrency);
        if !n.host.is_empty() {
            let _ = write!(detail, " {}:{}", n.host, n.pid);
        }
        let _ = write!(detail, " heartbeat {} ago", fmt_age(n.last_heartbeat_ms));
        out.push(TreeRow {
            depth: 1,
            kind: "node".into(),
            id: n.node.clone(),
            label: String::new(),
            status: n.status.clone(),
            detail,
            steps: 0,
            tokens: 0,
            cost: 0.0,
            restarts: 0,
            failures: 0,
            queued: 0,
            age: String::new(),
        });
        if let Some(tree) = &n.tree {
            walk(tree, 2, now_ms, labels, &mut out);
        }
    }
    out
}

/// Metrics the header shows (each figure has one source): live counts come from the tree,
/// tokens and cost from the runtime's counters. They are left out of the counters panel so
/// no figure appears twice with two values.
pub(super) const HEADER_METRICS: &[&str] = &[
    "troupe_actors",
    "troupe_actor_nodes",
    "troupe_sessions",
    "troupe_tokens_total",
    "troupe_cost_usd_total",
];

/// The header figures.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Summary {
    /// Live actors below the root (tree rows minus the runtime).
    pub(super) actors: usize,
    /// Live session actors.
    pub(super) sessions: usize,
    /// Sessions not idle.
    pub(super) busy: usize,
    /// Live tool calls.
    pub(super) tools: usize,
    /// A cluster's workers (`node` rows), and how many of them are dead.
    pub(super) nodes: usize,
    pub(super) dead_nodes: usize,
    /// Tokens since the server started: `troupe_tokens_total`, else the runtime node's.
    pub(super) tokens: u64,
    /// Cost since the server started, USD: `troupe_cost_usd_total`, else the runtime node's.
    pub(super) cost: f64,
}

/// Computes the header figures and makes the runtime row agree with them.
pub(super) fn summarize(rows: &mut [TreeRow], totals: &BTreeMap<String, f64>) -> Summary {
    let root = rows.first();
    let tokens = totals
        .get("troupe_tokens_total")
        .map(|v| v.max(0.0) as u64)
        .or(root.map(|r| r.tokens))
        .unwrap_or(0);
    let cost = totals
        .get("troupe_cost_usd_total")
        .copied()
        .or(root.map(|r| r.cost))
        .unwrap_or(0.0);
    if let Some(r) = rows.first_mut()
        && r.kind == "runtime"
    {
        r.tokens = tokens;
        r.cost = cost;
    }
    Summary {
        // Every actor row but runtimes (this one and the workers') and node rows.
        actors: rows
            .iter()
            .filter(|r| r.kind != "runtime" && r.kind != "node")
            .count(),
        sessions: rows.iter().filter(|r| r.kind == "session").count(),
        busy: rows
            .iter()
            .filter(|r| r.kind == "session" && r.status != "idle")
            .count(),
        tools: rows.iter().filter(|r| r.kind == "tool_call").count(),
        nodes: rows.iter().filter(|r| r.kind == "node").count(),
        dead_nodes: rows
            .iter()
            .filter(|r| r.kind == "node" && r.status == "dead")
            .count(),
        tokens,
        cost,
    }
}

pub(super) fn summary_line(s: &Summary) -> String {
    let mut line = format!(
        "actors {}  sessions {} (busy {})  tool calls {}  tokens {}  cost {}",
        s.actors,
        s.sessions,
        s.busy,
        s.tools,
        fmt_thousands(s.tokens),
        fmt_cost(s.cost)
    );
    if s.nodes > 0 {
        let _ = write!(line, "  nodes {} (dead {})", s.nodes, s.dead_nodes);
    }
    line
}

/// `11,216`: an exact count with thousands separators.
pub(super) fn fmt_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A session's label: its title unless it is the default `New session - …`, else its first
/// prompt, on one line of at most 60 characters.
pub(super) fn session_label(title: &str, first_prompt: Option<&str>) -> String {
    let default_title = title.is_empty()
        || title.starts_with("New session - ")
        || title.starts_with("Child session - ");
    let raw = if default_title {
        first_prompt.unwrap_or("")
    } else {
        title
    };
    let one: String = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 60 {
        format!("{}…", one.chars().take(60).collect::<String>())
    } else {
        one
    }
}

/// `950ms`, `12s`, `3m04s`, `2h05m`.
pub(super) fn fmt_age(ms: u64) -> String {
    let s = ms / 1000;
    if s == 0 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// `999`, `12.3k`, `4.50M`.
pub(super) fn fmt_tokens(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        format!("{:.2}M", n as f64 / 1e6)
    }
}

/// USD with 4 decimals, `$0.0123`.
pub(super) fn fmt_cost(c: f64) -> String {
    format!("${c:.4}")
}

/// The tree as aligned plain text, one actor per line, children indented by two spaces:
/// `KIND ID STATUS TOOL/@AGENT steps=N tokens=N cost=$X [restarts=N failures=N queued=N] AGE
/// ["session label"]` (without labels; tests).
#[cfg(test)]
pub(super) fn render_tree_text(root: &ActorNode, now_ms: u64) -> String {
    let rows = flatten(root, now_ms, &HashMap::new());
    render_rows_text(&rows)
}

pub(super) fn render_rows_text(rows: &[TreeRow]) -> String {
    let label = |r: &TreeRow| format!("{}{} {}", "  ".repeat(r.depth), r.kind, r.id);
    let w_label = rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0);
    let w_status = rows.iter().map(|r| r.status.len()).max().unwrap_or(0);
    let w_detail = rows.iter().map(|r| r.detail.len()).max().unwrap_or(0);
    let mut out = String::new();
    for r in rows {
        let mut line = format!(
            "{:<w_label$}  {:<w_status$}  {:<w_detail$}  steps={} tokens={} cost={}",
            label(r),
            r.status,
            r.detail,
            r.steps,
            r.tokens,
            fmt_cost(r.cost),
        );
        if r.restarts > 0 {
            let _ = write!(line, " restarts={}", r.restarts);
        }
        if r.failures > 0 {
            let _ = write!(line, " failures={}", r.failures);
        }
        if r.queued > 0 {
            let _ = write!(line, " queued={}", r.queued);
        }
        if !r.age.is_empty() {
            let _ = write!(line, " age={}", r.age);
        }
        if !r.label.is_empty() {
            let _ = write!(line, " {:?}", r.label);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
