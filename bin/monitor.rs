//! `troupe monitor [URL]`: a live terminal view of a running `troupe serve`.
//!
//! It polls `GET /actors` (the supervision tree) and `GET /metrics` (Prometheus text, names
//! prefixed `troupe_`) every `--interval-ms` (default 500 ms) and draws them with ratatui on a
//! plain crossterm backend (no mouse, works over SSH). `q`, `Esc` or `Ctrl-C` quit; the terminal
//! is restored on exit and on panic (ratatui's `init` chains a restoring panic hook).
//! `--once` prints the tree and counters as plain text and exits (no terminal needed).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;

/// Arguments of `troupe monitor`.
#[derive(Parser, Debug)]
pub struct MonitorArgs {
    /// Base URL of a running `troupe serve`.
    #[arg(default_value = "http://127.0.0.1:4096")]
    pub url: String,
    /// Server password, sent as `Authorization: Bearer <password>`; default:
    /// $TROUPE_SERVER_PASSWORD (empty = none).
    #[arg(long)]
    pub password: Option<String>,
    /// Print the tree and counters once as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Poll period in milliseconds (minimum 100).
    #[arg(long, default_value_t = 500)]
    pub interval_ms: u64,
}

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

/// One worker of a cluster in `GET /actors` `nodes` (`troupe serve --cluster`), from its last
/// heartbeat. Unknown fields are ignored and missing ones default.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct FleetNode {
    /// The worker's `--name`.
    pub node: String,
    /// Host name the worker runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: u64,
    /// `alive`, `draining` (SIGTERM, finishing its tasks), `dead` (no heartbeat within its
    /// timeout) or `stopped` (it said goodbye).
    pub status: String,
    /// Time since its last heartbeat arrived, ms.
    pub last_heartbeat_ms: u64,
    /// Heartbeat timeout it announced, ms: past it the node is `dead`.
    pub timeout_ms: u64,
    /// Ids of the tasks it runs now.
    pub running: Vec<String>,
    /// Tasks it runs at most at once (`--concurrency`).
    pub concurrency: u64,
    /// Its supervision tree as of that heartbeat.
    pub tree: Option<ActorNode>,
}

/// Sum of the numeric leaves of a JSON value (a bare number counts as itself).
fn token_total(v: &Value) -> u64 {
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
struct TreeRow {
    depth: usize,
    kind: String,
    id: String,
    /// A session's title, else its first prompt (empty for other actors or when unknown).
    label: String,
    status: String,
    detail: String,
    steps: u64,
    tokens: u64,
    cost: f64,
    restarts: u64,
    failures: u64,
    queued: u64,
    age: String,
}

/// Depth-first flattening of `root`; `now_ms` is the current Unix time in ms (for ages);
/// `labels` maps session ids to their title or first prompt.
fn flatten(root: &ActorNode, now_ms: u64, labels: &HashMap<String, String>) -> Vec<TreeRow> {
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
const HEADER_METRICS: &[&str] = &[
    "troupe_actors",
    "troupe_actor_nodes",
    "troupe_sessions",
    "troupe_tokens_total",
    "troupe_cost_usd_total",
];

/// The header figures.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    /// Live actors below the root (tree rows minus the runtime).
    actors: usize,
    /// Live session actors.
    sessions: usize,
    /// Sessions not idle.
    busy: usize,
    /// Live tool calls.
    tools: usize,
    /// A cluster's workers (`node` rows), and how many of them are dead.
    nodes: usize,
    dead_nodes: usize,
    /// Tokens since the server started: `troupe_tokens_total`, else the runtime node's.
    tokens: u64,
    /// Cost since the server started, USD: `troupe_cost_usd_total`, else the runtime node's.
    cost: f64,
}

/// Computes the header figures and makes the runtime row agree with them.
fn summarize(rows: &mut [TreeRow], totals: &BTreeMap<String, f64>) -> Summary {
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

fn summary_line(s: &Summary) -> String {
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
fn fmt_thousands(n: u64) -> String {
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
fn session_label(title: &str, first_prompt: Option<&str>) -> String {
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
fn fmt_age(ms: u64) -> String {
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
fn fmt_tokens(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        format!("{:.2}M", n as f64 / 1e6)
    }
}

/// USD with 4 decimals, `$0.0123`.
fn fmt_cost(c: f64) -> String {
    format!("${c:.4}")
}

/// The tree as aligned plain text, one actor per line, children indented by two spaces:
/// `KIND ID STATUS TOOL/@AGENT steps=N tokens=N cost=$X [restarts=N failures=N queued=N] AGE
/// ["session label"]` (without labels; tests).
#[cfg(test)]
fn render_tree_text(root: &ActorNode, now_ms: u64) -> String {
    let rows = flatten(root, now_ms, &HashMap::new());
    render_rows_text(&rows)
}

fn render_rows_text(rows: &[TreeRow]) -> String {
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

/// Parses Prometheus text exposition into `(series, value)` pairs in input order, where
/// `series` is the metric name with its label set as written (`troupe_x{kind="a"}`). Comment
/// and blank lines are skipped; lines whose value does not parse are ignored.
pub fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // The series ends at the closing brace if there are labels, else at the first space.
        let split = match (line.find('{'), line.rfind('}')) {
            (Some(o), Some(c)) if o < c => c + 1,
            _ => match line.find(char::is_whitespace) {
                Some(i) => i,
                None => continue,
            },
        };
        let (series, rest) = line.split_at(split);
        // `value [timestamp]`
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        let v = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => match other.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        out.push((series.trim().to_string(), v));
    }
    out
}

/// Counters per metric name (labels summed away), `troupe_` series only, skipping histogram
/// buckets; sorted by name.
fn metric_totals(series: &[(String, f64)]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (s, v) in series {
        let name = s.split('{').next().unwrap_or(s);
        if !name.starts_with("troupe_") || name.ends_with("_bucket") || !v.is_finite() {
            continue;
        }
        *m.entry(name.to_string()).or_insert(0.0) += v;
    }
    m
}

fn fmt_metric(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.4}")
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// HTTP access to the server.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
    password: Option<String>,
    /// First prompt of each session seen (it never changes), so it is fetched once.
    first_prompts: std::sync::Arc<std::sync::Mutex<HashMap<String, String>>>,
}

impl Api {
    fn new(url: &str, password: Option<String>) -> Result<Api> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("monitor: URL must start with http:// or https://, got {url:?}");
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Api {
            client,
            base,
            password,
            first_prompts: Default::default(),
        })
    }

    async fn get(&self, path: &str) -> Result<reqwest::Response> {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(pw) = &self.password {
            req = req.bearer_auth(pw);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach the troupe server at {}: {e}", self.base))?;
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            bail!(
                "the troupe server at {} wants a password (--password or TROUPE_SERVER_PASSWORD)",
                self.base
            );
        }
        if !status.is_success() {
            bail!("GET {}{path}: HTTP {status}", self.base);
        }
        Ok(resp)
    }

    async fn actors(&self) -> Result<ActorNode> {
        let v: Value = self
            .get("/actors")
            .await?
            .json()
            .await
            .context("GET /actors: invalid JSON")?;
        serde_json::from_value(v).context("GET /actors: unexpected shape")
    }

    async fn metrics(&self) -> Result<Vec<(String, f64)>> {
        let text = self
            .get("/metrics")
            .await?
            .text()
            .await
            .context("GET /metrics")?;
        Ok(parse_metrics(&text))
    }

    /// Labels of the sessions in `tree`: titles from `GET /session`, first prompts (cached)
    /// from `GET /session/{id}/message` for sessions still on the default title.
    async fn labels(&self, tree: &ActorNode) -> HashMap<String, String> {
        fn ids(n: &ActorNode, out: &mut Vec<String>) {
            if n.kind == "session" {
                out.push(n.id.clone());
            }
            for c in n
                .children
                .iter()
                .chain(n.nodes.iter().filter_map(|f| f.tree.as_ref()))
            {
                ids(c, out);
            }
        }
        let mut live = Vec::new();
        ids(tree, &mut live);
        if live.is_empty() {
            return HashMap::new();
        }
        let titles: HashMap<String, String> = match self.get("/session").await {
            Ok(resp) => resp
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|s| {
                    Some((
                        s["id"].as_str()?.to_string(),
                        s["title"].as_str().unwrap_or("").to_string(),
                    ))
                })
                .collect(),
            Err(_) => HashMap::new(),
        };
        let mut out = HashMap::new();
        for id in live {
            let title = titles.get(&id).cloned().unwrap_or_default();
            let label = session_label(&title, None);
            if !label.is_empty() {
                out.insert(id, label);
                continue;
            }
            let cached = self
                .first_prompts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .cloned();
            let prompt = match cached {
                Some(p) => p,
                None => {
                    let Some(p) = self.first_prompt(&id).await else {
                        continue;
                    };
                    self.first_prompts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.clone(), p.clone());
                    p
                }
            };
            out.insert(id, session_label(&title, Some(&prompt)));
        }
        out
    }

    /// The text of a session's first user message, if it has one yet.
    async fn first_prompt(&self, id: &str) -> Option<String> {
        let v: Value = self
            .get(&format!("/session/{id}/message"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let first = v.as_array()?.iter().find(|m| m["info"]["role"] == "user")?;
        let text: Vec<&str> = first["parts"]
            .as_array()?
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        (!text.is_empty()).then(|| text.join(" "))
    }

    async fn snapshot(&self) -> Snapshot {
        let started = Instant::now();
        let (tree, metrics) = tokio::join!(self.actors(), self.metrics());
        let latency = started.elapsed();
        let labels = match &tree {
            Ok(t) => self.labels(t).await,
            Err(_) => HashMap::new(),
        };
        match (tree, metrics) {
            (Ok(tree), Ok(metrics)) => Snapshot {
                tree: Some(tree),
                metrics,
                labels,
                error: None,
                latency,
                at: Some(Instant::now()),
            },
            (Ok(tree), Err(e)) => Snapshot {
                tree: Some(tree),
                metrics: Vec::new(),
                labels,
                error: Some(format!("{e:#}")),
                latency,
                at: Some(Instant::now()),
            },
            (Err(e), _) => Snapshot {
                error: Some(format!("{e:#}")),
                latency,
                ..Snapshot::default()
            },
        }
    }
}

/// The latest poll result.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    tree: Option<ActorNode>,
    metrics: Vec<(String, f64)>,
    /// Session id → title or first prompt.
    labels: HashMap<String, String>,
    error: Option<String>,
    latency: Duration,
    at: Option<Instant>,
}

/// Entry point of `troupe monitor`.
pub async fn run(args: MonitorArgs) -> Result<ExitCode> {
    let api = Api::new(&args.url, args.password.clone())?;
    // Fail fast, with one line, when the server is not there.
    let tree = api.actors().await?;
    if args.once {
        let metrics = api.metrics().await.unwrap_or_default();
        let labels = api.labels(&tree).await;
        let totals = metric_totals(&metrics);
        let mut rows = flatten(&tree, now_ms(), &labels);
        let summary = summarize(&mut rows, &totals);
        let mut out = format!("{}\n\n", summary_line(&summary));
        out.push_str(&render_rows_text(&rows));
        let counters: Vec<_> = totals
            .iter()
            .filter(|(k, _)| !HEADER_METRICS.contains(&k.as_str()))
            .collect();
        if !counters.is_empty() {
            out.push('\n');
            for (k, v) in counters {
                let _ = writeln!(out, "{k} {}", fmt_metric(*v));
            }
        }
        print!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("monitor: standard output is not a terminal (use --once for plain text)");
    }
    let first = api.snapshot().await;
    let (tx, rx) = watch::channel(first);
    let period = Duration::from_millis(args.interval_ms.max(100));
    let poller = tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut snap = api.snapshot().await;
            if snap.tree.is_none() {
                // Keep showing the last good data, marked stale.
                let prev = tx.borrow();
                snap.tree = prev.tree.clone();
                snap.metrics = prev.metrics.clone();
                snap.labels = prev.labels.clone();
                snap.at = prev.at;
            }
            if tx.send(snap).is_err() {
                break;
            }
        }
    });
    let url = args.url.clone();
    let ui = tokio::task::spawn_blocking(move || ui_loop(&url, rx)).await;
    poller.abort();
    match ui {
        Ok(r) => r.map(|()| ExitCode::SUCCESS),
        Err(e) => Err(anyhow!("monitor: the terminal view failed: {e}")),
    }
}

/// Restores the terminal when dropped (normal exit, error return or unwinding).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn ui_loop(url: &str, mut rx: watch::Receiver<Snapshot>) -> Result<()> {
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let _guard = TerminalGuard;
    let mut state = TableState::default().with_selected(Some(0));
    let mut snap = rx.borrow_and_update().clone();
    let mut rows = snap
        .tree
        .as_ref()
        .map(|t| flatten(t, now_ms(), &snap.labels))
        .unwrap_or_default();
    loop {
        if rx.has_changed().unwrap_or(false) {
            snap = rx.borrow_and_update().clone();
            rows = snap
                .tree
                .as_ref()
                .map(|t| flatten(t, now_ms(), &snap.labels))
                .unwrap_or_default();
        }
        if let Some(sel) = state.selected()
            && sel >= rows.len()
        {
            state.select(Some(rows.len().saturating_sub(1)));
        }
        let page = terminal
            .draw(|f| draw(f, url, &snap, &mut rows, &mut state))
            .context("drawing the terminal")?
            .area
            .height
            .saturating_sub(8)
            .max(1) as usize;
        if event::poll(Duration::from_millis(100)).context("reading terminal events")? {
            let Event::Key(k) = event::read().context("reading terminal events")? else {
                continue;
            };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            let last = rows.len().saturating_sub(1);
            let sel = state.selected().unwrap_or(0);
            match k.code {
                KeyCode::Char('q') | KeyCode::Esc => break,
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => break,
                KeyCode::Down | KeyCode::Char('j') => state.select(Some((sel + 1).min(last))),
                KeyCode::Up | KeyCode::Char('k') => state.select(Some(sel.saturating_sub(1))),
                KeyCode::PageDown => state.select(Some((sel + page).min(last))),
                KeyCode::PageUp => state.select(Some(sel.saturating_sub(page))),
                KeyCode::Home | KeyCode::Char('g') => state.select(Some(0)),
                KeyCode::End | KeyCode::Char('G') => state.select(Some(last)),
                _ => {}
            }
        }
    }
    Ok(())
}

fn status_style(status: &str) -> Style {
    match status {
        "busy" => Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        "retry" => Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        "error" | "failed" | "dead" => Style::new().fg(Color::Red),
        "alive" => Style::new().fg(Color::Green),
        "draining" => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::DarkGray),
    }
}

fn draw(
    f: &mut ratatui::Frame<'_>,
    url: &str,
    snap: &Snapshot,
    rows: &mut [TreeRow],
    state: &mut TableState,
) {
    let mut totals = metric_totals(&snap.metrics);
    let summary = summarize(rows, &totals);
    totals.retain(|k, _| !HEADER_METRICS.contains(&k.as_str()));
    let metric_lines = totals.len().div_ceil(3).min(6) as u16;
    let [header, metrics_area, tree_area, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(metric_lines + 2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());

    // Header: URL, connection state, the figures of `summarize`.
    let conn = match &snap.error {
        None => Span::styled(" live ", Style::new().fg(Color::Black).bg(Color::Green)),
        Some(_) => Span::styled(
            match snap.at {
                Some(at) => format!(" stale {}s ", at.elapsed().as_secs()),
                None => " stale ".to_string(),
            },
            Style::new().fg(Color::Black).bg(Color::Red),
        ),
    };
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                " troupe monitor ",
                Style::new().add_modifier(Modifier::BOLD),
            ),
            conn,
            Span::raw(format!(
                "  {url}  {}  poll {}ms",
                summary_line(&summary),
                snap.latency.as_millis()
            )),
        ])),
        header,
    );

    // Counters, three per line.
    let entries: Vec<String> = totals
        .iter()
        .map(|(k, v)| format!("{} {}", k.trim_start_matches("troupe_"), fmt_metric(*v)))
        .collect();
    let width = (metrics_area.width.saturating_sub(2) / 3) as usize;
    let lines: Vec<Line> = entries
        .chunks(3)
        .take(metric_lines as usize)
        .map(|c| Line::from(c.iter().map(|e| format!("{e:<width$}")).collect::<String>()))
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" counters (/metrics) ")),
        metrics_area,
    );

    // Tree.
    let table_rows: Vec<Row> = rows
        .iter()
        .map(|r| {
            let mut extra = Vec::new();
            if r.restarts > 0 {
                extra.push(format!("r{}", r.restarts));
            }
            if r.failures > 0 {
                extra.push(format!("f{}", r.failures));
            }
            if r.queued > 0 {
                extra.push(format!("q{}", r.queued));
            }
            Row::new(vec![
                Cell::from(format!("{}{}", "  ".repeat(r.depth), r.kind)),
                Cell::from(if r.label.is_empty() {
                    r.id.clone()
                } else {
                    format!("{}  {}", r.id, r.label)
                }),
                Cell::from(r.status.clone()).style(status_style(&r.status)),
                Cell::from(r.detail.clone()),
                Cell::from(r.steps.to_string()),
                Cell::from(fmt_tokens(r.tokens)),
                Cell::from(fmt_cost(r.cost)),
                Cell::from(extra.join(" ")),
                Cell::from(r.age.clone()),
            ])
        })
        .collect();
    let table = Table::new(
        table_rows,
        [
            Constraint::Length(22),
            Constraint::Min(16),
            Constraint::Length(6),
            Constraint::Length(14),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(8),
        ],
    )
    .header(
        Row::new([
            "kind",
            "id",
            "status",
            "tool/agent",
            "steps",
            "tokens",
            "cost",
            "r/f/q",
            "age",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)),
    )
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .block(Block::bordered().title(format!(" supervision tree ({} actors) ", summary.actors)));
    f.render_stateful_widget(table, tree_area, state);

    let foot = match &snap.error {
        Some(e) => Line::from(Span::styled(format!(" {e}"), Style::new().fg(Color::Red))),
        None => Line::from(Span::styled(
            " q/Esc quit  ↑↓/j k move  PgUp/PgDn page  g/G top/bottom",
            Style::new().fg(Color::DarkGray),
        )),
    };
    f.render_widget(Paragraph::new(foot), footer);
}

#[cfg(test)]
#[path = "monitor_fleet_tests.rs"]
mod fleet_tests;

#[cfg(test)]
#[path = "monitor_tests.rs"]
mod tests;
