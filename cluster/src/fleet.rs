//! Fleet monitoring: each worker publishes a [`Heartbeat`] on `<prefix>.heartbeat.<name>`
//! every `--heartbeat` (core NATS, no stream: a monitor wants the present, not history), and
//! [`Fleet`] — what `troupe serve --cluster` runs — keeps the last heartbeat of every node,
//! marking a node `dead` once its last heartbeat is older than the timeout the node itself
//! announced (`--heartbeat-timeout`), and `stopped` when it said goodbye.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use troupe_actors::Runtime;

use crate::Names;
use crate::worker::Worker;

/// Default heartbeat period: 2 s.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);

/// Default heartbeat timeout: 3 periods (6 s), after which a silent node counts as dead.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(6);

/// One heartbeat, JSON on the wire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    /// The worker's name.
    pub node: String,
    /// Its process id.
    pub pid: u32,
    /// Its host.
    pub host: String,
    /// `running`, `draining` (stopping: finishing its tasks) or `stopped` (its last).
    pub state: String,
    /// When it started, ms since the epoch.
    pub started: i64,
    /// When this heartbeat was sent, ms since the epoch (the sender's clock).
    pub sent: i64,
    /// Its heartbeat period, ms.
    pub interval_ms: u64,
    /// After how long without a heartbeat it should count as dead, ms.
    pub timeout_ms: u64,
    /// Tasks it runs at most at once.
    pub concurrency: u64,
    /// Ids of the tasks it runs now.
    pub running: Vec<String>,
    /// Its task counters: `{received, completed, failed, resumed, handedBack}`.
    pub counters: serde_json::Value,
    /// Its runtime's counters ([`runtime_metrics`]).
    pub metrics: serde_json::Value,
    /// Its supervision tree (`GET /actors` of that process).
    pub tree: serde_json::Value,
}

/// One node of a cluster as `GET /actors` lists it under `nodes` (`troupe serve --cluster`),
/// from its last heartbeat: the one shape the server writes ([`Fleet::nodes`]) and `troupe
/// monitor` reads. `Tree` is how the node's supervision tree is held: raw JSON where it is
/// passed on (the default), a typed tree where it is read. Reading ignores unknown fields and
/// defaults missing ones, so a newer server does not break an older monitor.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct FleetNode<Tree = serde_json::Value> {
    /// The worker's `--name`.
    pub node: String,
    /// Host name the worker runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// `alive`, `draining` (SIGTERM, finishing its tasks), `dead` (no heartbeat within its
    /// timeout) or `stopped` (it said goodbye).
    pub status: String,
    /// Time since its last heartbeat arrived, ms.
    pub last_heartbeat_ms: u64,
    /// Heartbeat timeout it announced, ms: past it the node is `dead`.
    pub timeout_ms: u64,
    /// When it started, ms since the epoch (its clock).
    pub started: i64,
    /// Tasks it runs at most at once (`--concurrency`).
    pub concurrency: u64,
    /// Ids of the tasks it runs now.
    pub running: Vec<String>,
    /// Its task counters (see [`Heartbeat::counters`]).
    pub counters: serde_json::Value,
    /// Its runtime's counters ([`runtime_metrics`]).
    pub metrics: serde_json::Value,
    /// Its supervision tree as of that heartbeat (shaped as `GET /actors`).
    pub tree: Tree,
}

/// A runtime's counters for a heartbeat: `{steps, toolCrashes, processorCrashes, actors,
/// costUsd, counters: [[name, labels, value], …]}` (labels in Prometheus syntax).
pub fn runtime_metrics(runtime: &Runtime) -> serde_json::Value {
    use std::sync::atomic::Ordering;
    let c = &runtime.shared().counters;
    let cost = *c.cost.lock().unwrap_or_else(|e| e.into_inner());
    serde_json::json!({
        "steps": c.steps.load(Ordering::Relaxed),
        "toolCrashes": c.tool_crashes.load(Ordering::Relaxed),
        "processorCrashes": c.processor_crashes.load(Ordering::Relaxed),
        "actors": runtime.live_actors(),
        "costUsd": cost.normalize().to_string(),
        "counters": c.snapshot().into_iter().map(|(n, l, v)| serde_json::json!([n, l, v])).collect::<Vec<_>>(),
    })
}

/// Publish the worker's heartbeat every period until `stop`, then a last one with state
/// `stopped`.
pub(crate) async fn heartbeat_loop(
    client: async_nats::Client,
    worker: Arc<Worker>,
    stop: CancellationToken,
) {
    let (subject, every) = crate::worker::beat_target(&worker);
    loop {
        let hb = crate::worker::heartbeat_of(&worker, "running");
        if let Ok(body) = serde_json::to_vec(&hb)
            && let Err(e) = client.publish(subject.clone(), body.into()).await
        {
            tracing::warn!("heartbeat not sent: {e}");
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    let hb = crate::worker::heartbeat_of(&worker, "stopped");
    if let Ok(body) = serde_json::to_vec(&hb) {
        let _ = client.publish(subject, body.into()).await;
    }
    let _ = client.flush().await;
}

/// What a monitor knows of one node.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    heartbeat: Heartbeat,
}

/// The fleet as seen by one monitor (`troupe serve --cluster`): the last heartbeat of every
/// node heard since it started.
#[derive(Clone, Default)]
pub struct Fleet {
    nodes: Arc<Mutex<BTreeMap<String, Seen>>>,
}

impl Fleet {
    /// Subscribe to the heartbeats of cluster `names` at `url`; the subscription lives
    /// until `stop`.
    pub async fn watch(url: &str, names: &Names, stop: CancellationToken) -> Result<Fleet> {
        let client = crate::connect(url).await?;
        let mut sub = client
            .subscribe(names.heartbeat_wildcard())
            .await
            .map_err(|e| anyhow::anyhow!("subscribe to heartbeats: {e}"))?;
        let fleet = Fleet::default();
        let f = fleet.clone();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    _ = stop.cancelled() => break,
                    m = sub.next() => match m { Some(m) => m, None => break },
                };
                match serde_json::from_slice::<Heartbeat>(&msg.payload) {
                    Ok(hb) => f.record(hb),
                    Err(e) => {
                        tracing::warn!("heartbeat that does not parse on {}: {e}", msg.subject)
                    }
                }
            }
            drop(client);
        });
        Ok(fleet)
    }

    /// Record a heartbeat received now.
    pub fn record(&self, hb: Heartbeat) {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).insert(
            hb.node.clone(),
            Seen {
                at: Instant::now(),
                heartbeat: hb,
            },
        );
    }

    /// Every node heard from, by name: `{node, host, pid, status: alive|draining|dead|
    /// stopped, lastHeartbeatMs (ms since it arrived), timeoutMs, running, counters,
    /// metrics, tree}`. A node is `dead` when its last heartbeat arrived longer ago than its
    /// announced timeout.
    pub fn nodes(&self) -> Vec<FleetNode> {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes
            .values()
            .map(|s| {
                let age = s.at.elapsed();
                let hb = &s.heartbeat;
                FleetNode {
                    node: hb.node.clone(),
                    host: hb.host.clone(),
                    pid: hb.pid,
                    status: status_of(hb, age).to_string(),
                    last_heartbeat_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                    timeout_ms: hb.timeout_ms,
                    started: hb.started,
                    concurrency: hb.concurrency,
                    running: hb.running.clone(),
                    counters: hb.counters.clone(),
                    metrics: hb.metrics.clone(),
                    tree: hb.tree.clone(),
                }
            })
            .collect()
    }

    /// Prometheus lines of the fleet, every series labelled `node`: `troupe_node_up` (1
    /// alive, 0 dead or stopped), `troupe_node_heartbeat_age_seconds`,
    /// `troupe_node_tasks_running`, `troupe_node_tasks_total{outcome}`,
    /// `troupe_node_steps_total`, `troupe_node_actors`, `troupe_node_cost_usd_total`, and each
    /// runtime counter of the node as `troupe_node_<name>{node, …}`.
    pub fn metrics(&self) -> String {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let mut o = String::new();
        type Row = (String, String, String);
        let mut families: BTreeMap<String, (String, &'static str, Vec<Row>)> = BTreeMap::new();
        let mut add =
            |name: &str, help: &str, kind: &'static str, labels: String, value: String| {
                families
                    .entry(name.to_string())
                    .or_insert_with(|| (help.to_string(), kind, Vec::new()))
                    .2
                    .push((name.to_string(), labels, value));
            };
        for s in nodes.values() {
            let hb = &s.heartbeat;
            let node = format!("node=\"{}\"", escape(&hb.node));
            let age = s.at.elapsed();
            let up = status_of(hb, age) == "alive" || status_of(hb, age) == "draining";
            add(
                "troupe_node_up",
                "Whether the node's last heartbeat is within its timeout (1) or not, or it stopped (0).",
                "gauge",
                node.clone(),
                (up as u8).to_string(),
            );
            add(
                "troupe_node_heartbeat_age_seconds",
                "Seconds since the node's last heartbeat arrived.",
                "gauge",
                node.clone(),
                format!("{:.3}", age.as_secs_f64()),
            );
            add(
                "troupe_node_tasks_running",
                "Tasks the node runs now.",
                "gauge",
                node.clone(),
                hb.running.len().to_string(),
            );
            for (key, outcome) in [
                ("completed", "completed"),
                ("failed", "failed"),
                ("resumed", "resumed"),
                ("handedBack", "handed_back"),
            ] {
                let v = hb.counters[key].as_u64().unwrap_or(0);
                add(
                    "troupe_node_tasks_total",
                    "Tasks the node finished or handed back, by outcome (resumed: sessions it continued after another worker).",
                    "counter",
                    format!("{node},outcome=\"{outcome}\""),
                    v.to_string(),
                );
            }
            let m = &hb.metrics;
            add(
                "troupe_node_steps_total",
                "Steps the node's runtime started.",
                "counter",
                node.clone(),
                m["steps"].as_u64().unwrap_or(0).to_string(),
            );
            add(
                "troupe_node_actors",
                "Live actors of the node's runtime.",
                "gauge",
                node.clone(),
                m["actors"].as_i64().unwrap_or(0).to_string(),
            );
            add(
                "troupe_node_cost_usd_total",
                "Cost of the steps the node ran, USD.",
                "counter",
                node.clone(),
                m["costUsd"].as_str().unwrap_or("0").to_string(),
            );
            for c in m["counters"].as_array().into_iter().flatten() {
                let (Some(name), Some(labels), Some(v)) =
                    (c[0].as_str(), c[1].as_str(), c[2].as_u64())
                else {
                    continue;
                };
                if !name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                {
                    continue;
                }
                let labels = if labels.is_empty() {
                    node.clone()
                } else {
                    format!("{node},{labels}")
                };
                add(
                    &format!("troupe_node_{name}"),
                    "A runtime counter of the node (see the troupe_ series of the same name).",
                    "counter",
                    labels,
                    v.to_string(),
                );
            }
        }
        for (name, (help, kind, rows)) in families {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (n, labels, v) in rows {
                let _ = writeln!(o, "{n}{{{labels}}} {v}");
            }
        }
        o
    }
}

fn status_of(hb: &Heartbeat, age: Duration) -> &'static str {
    if hb.state == "stopped" {
        "stopped"
    } else if age > Duration::from_millis(hb.timeout_ms.max(1)) {
        "dead"
    } else if hb.state == "draining" {
        "draining"
    } else {
        "alive"
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(node: &str, state: &str, timeout_ms: u64) -> Heartbeat {
        Heartbeat {
            node: node.into(),
            pid: 1,
            host: "h".into(),
            state: state.into(),
            started: 0,
            sent: 0,
            interval_ms: 10,
            timeout_ms,
            concurrency: 2,
            running: vec!["t1".into()],
            counters: serde_json::json!({"completed": 3, "failed": 1, "resumed": 0, "handedBack": 0}),
            metrics: serde_json::json!({"steps": 7, "actors": 2, "costUsd": "0.5", "counters": [["tool_calls_total", "tool=\"bash\",outcome=\"completed\"", 4]]}),
            tree: serde_json::json!({"kind": "runtime"}),
        }
    }

    #[test]
    fn nodes_turn_dead_after_their_own_timeout_and_stopped_when_they_say_so() {
        let f = Fleet::default();
        f.record(hb("w1", "running", 60_000));
        f.record(hb("w2", "running", 30));
        f.record(hb("w3", "stopped", 60_000));
        std::thread::sleep(Duration::from_millis(60));
        let by: BTreeMap<String, String> =
            f.nodes().into_iter().map(|n| (n.node, n.status)).collect();
        assert_eq!(by["w1"], "alive");
        assert_eq!(by["w2"], "dead");
        assert_eq!(by["w3"], "stopped");
        // A new heartbeat brings a dead node back.
        f.record(hb("w2", "running", 60_000));
        assert_eq!(f.nodes()[1].status, "alive");
    }

    #[test]
    fn metrics_carry_a_node_label_and_one_type_line_per_family() {
        let f = Fleet::default();
        f.record(hb("w1", "running", 60_000));
        f.record(hb("w\"2", "running", 60_000));
        let m = f.metrics();
        assert!(m.contains("troupe_node_up{node=\"w1\"} 1\n"), "{m}");
        assert!(m.contains("troupe_node_up{node=\"w\\\"2\"} 1\n"), "{m}");
        assert!(
            m.contains("troupe_node_tasks_total{node=\"w1\",outcome=\"completed\"} 3\n"),
            "{m}"
        );
        assert!(
            m.contains(
                "troupe_node_tool_calls_total{node=\"w1\",tool=\"bash\",outcome=\"completed\"} 4\n"
            ),
            "{m}"
        );
        assert!(
            m.contains("troupe_node_steps_total{node=\"w1\"} 7\n"),
            "{m}"
        );
        assert_eq!(m.matches("# TYPE troupe_node_up gauge").count(), 1);
        // Samples of a family follow its TYPE line without another family in between.
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for l in m.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(current.clone()), "family {current} twice");
            } else if !l.starts_with('#') {
                assert!(
                    l.starts_with(&format!("{current}{{")),
                    "{l} outside its family {current}"
                );
            }
        }
    }
}
