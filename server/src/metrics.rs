//! `GET /metrics`: the runtime's counters in the Prometheus text exposition format (0.0.4).
//!
//! Every name is prefixed `troupe_`. Sources: the supervision tree (sessions by status,
//! queue depth), `Counters` (steps, labelled counters, cost) and the live actor gauge.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use troupe_actors::Runtime;
use troupe_actors::tree::{ActorNode, Kind};

/// HELP text of the labelled counters the runtime keeps (name without the prefix).
fn help_for(name: &str) -> &'static str {
    match name {
        "tool_calls_total" => "Tool calls finished, by tool and outcome.",
        "provider_requests_total" => "Provider requests finished, by provider and status.",
        "provider_requests_started_total" => "Provider requests started, by provider.",
        "retries_total" => "Retries of failed provider requests, by provider.",
        "stream_data_skipped_total" => {
            "Stream data lines skipped as not JSON (e.g. `data: : keepalive`), by provider."
        }
        "actor_restarts_total" => {
            "Actors started again by their supervisor after a crash, by role (read_only_tool, processor, session)."
        }
        "actor_failures_total" => {
            "Actors that crashed, by role (read_only_tool, side_effect_tool, processor, session, compaction, title, summary)."
        }
        "tokens_total" => {
            "Tokens used, by type (input, output, reasoning, cache_read, cache_write)."
        }
        _ => "Runtime counter.",
    }
}

fn visit<'a>(n: &'a ActorNode, out: &mut Vec<&'a ActorNode>) {
    out.push(n);
    for c in &n.children {
        visit(c, out);
    }
}

/// Render the metrics of `runtime`.
pub fn render(runtime: &Runtime) -> String {
    let tree = runtime.actors();
    let mut nodes = Vec::new();
    visit(&tree, &mut nodes);
    let mut by_status: BTreeMap<String, u64> = ["idle", "busy", "retry"]
        .iter()
        .map(|s| (s.to_string(), 0))
        .collect();
    let mut queued = 0u64;
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    for n in &nodes {
        let kind = match n.kind {
            Kind::Runtime => continue,
            Kind::Session => "session",
            Kind::Processor => "processor",
            Kind::ToolCall => "tool_call",
            Kind::Compaction => "compaction",
            Kind::Title => "title",
            Kind::Summary => "summary",
            Kind::Process => "process",
            Kind::McpServer => "mcp_server",
        };
        *by_kind.entry(kind).or_insert(0) += 1;
        if n.kind == Kind::Session {
            *by_status.entry(n.status.to_string()).or_insert(0) += 1;
            queued += n.queued;
        }
    }
    let shared = runtime.shared();
    let c = &shared.counters;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HELP troupe_sessions Live session actors by status (from the supervision tree).\n# TYPE troupe_sessions gauge"
    );
    for (status, v) in &by_status {
        let _ = writeln!(o, "troupe_sessions{{status=\"{status}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP troupe_steps_total Steps started.\n# TYPE troupe_steps_total counter\ntroupe_steps_total {}",
        c.steps.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        o,
        "# HELP troupe_tool_crashes_total Tool call actors that crashed.\n# TYPE troupe_tool_crashes_total counter\ntroupe_tool_crashes_total {}",
        c.tool_crashes.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        o,
        "# HELP troupe_processor_crashes_total Step actors that crashed.\n# TYPE troupe_processor_crashes_total counter\ntroupe_processor_crashes_total {}",
        c.processor_crashes.load(Ordering::Relaxed)
    );
    let mut last = "";
    for (name, labels, value) in c.snapshot() {
        if name != last {
            let _ = writeln!(
                o,
                "# HELP troupe_{name} {}\n# TYPE troupe_{name} counter",
                help_for(name)
            );
            last = name;
        }
        if labels.is_empty() {
            let _ = writeln!(o, "troupe_{name} {value}");
        } else {
            let _ = writeln!(o, "troupe_{name}{{{labels}}} {value}");
        }
    }
    let cost = *c.cost.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(
        o,
        "# HELP troupe_cost_usd_total Cost of the steps this runtime ran, USD.\n# TYPE troupe_cost_usd_total counter\ntroupe_cost_usd_total {}",
        cost.normalize()
    );
    let _ = writeln!(
        o,
        "# HELP troupe_actors Live actors below the root (sessions, steps, tool calls).\n# TYPE troupe_actors gauge\ntroupe_actors {}",
        runtime.live_actors()
    );
    let _ = writeln!(
        o,
        "# HELP troupe_actor_nodes Live actors in the supervision tree, by kind.\n# TYPE troupe_actor_nodes gauge"
    );
    for (k, v) in &by_kind {
        let _ = writeln!(o, "troupe_actor_nodes{{kind=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP troupe_session_queue_depth Prompts waiting behind running turns, summed over sessions. ractor does not expose mailbox depth, so this is the sum of the sessions' queued prompts from the supervision tree, not the actors' mailbox length.\n# TYPE troupe_session_queue_depth gauge\ntroupe_session_queue_depth {queued}"
    );
    o
}
