//! Issue 14's chaos test: 500+ scripted turns with panics injected at random points in tool
//! calls (read-only and side-effecting), processors, session actors and the compaction
//! worker. Every turn must end in a defined state (finished, or a clear error), a read-only
//! call that crashed once then succeeded is a completed part, no side-effecting call runs
//! twice, the store and the counters agree, and no actor is left alive.
//!
//! Faults come from a seeded generator (deterministic per draw order; the interleaving of
//! concurrent sessions varies between runs, the assertions hold for every interleaving).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::*;
use troupe_actors::faults::FaultPoint;
use troupe_session::ToolState;
use troupe_testkit::{Conversation, Exhausted, Script, Step, UsageSpec};
use troupe_tools::{Registry, ToolContext};

/// Turns in the test (one per session, run 16 at a time).
const TURNS: usize = 520;
/// Every this many turns overflows the context and compacts.
const COMPACT_EVERY: usize = 8;
/// Every this many turns (offset by half) delegates to a subagent, whose session actor,
/// processor and tools take the same faults.
const DELEGATE_EVERY: usize = 8;

/// A tiny seeded generator (xorshift64*), shared by the hooks.
struct Rng(AtomicU64);

impl Rng {
    /// True with probability `per_mille`/1000.
    fn chance(&self, per_mille: u64) -> bool {
        let mut x = self.0.load(Ordering::Relaxed);
        loop {
            let mut y = x;
            y ^= y >> 12;
            y ^= y << 25;
            y ^= y >> 27;
            match self
                .0
                .compare_exchange_weak(x, y, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return y.wrapping_mul(0x2545_F491_4F6C_DD1D) % 1000 < per_mille,
                Err(now) => x = now,
            }
        }
    }
}

/// Runs of a tool, by (assistant message id, call id).
type Runs = Arc<Mutex<HashMap<(String, String), usize>>>;

fn schema() -> Value {
    json!({"type": "object", "properties": {"crash_once": {"type": "boolean"}}})
}

/// `chaos_read`: read-only; panics on the first run of a call whose input says
/// `crash_once`, and at random otherwise.
fn chaos_read(runs: Runs, rng: Arc<Rng>, panics: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(
        "chaos_read",
        "Chaos test tool (read-only).",
        move |args, ctx: ToolContext| {
            let run = {
                let mut runs = runs.lock().unwrap();
                let n = runs.entry((ctx.message_id, ctx.call_id)).or_insert(0);
                *n += 1;
                *n
            };
            let crash = (run == 1 && args["crash_once"] == true) || rng.chance(50);
            if crash {
                panics.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async move {
                if crash {
                    panic!("chaos: read crashed on run {run}");
                }
                Ok(output("read", format!("read on run {run}")))
            })
        },
    )
    .with_parameters(schema())
}

/// `chaos_write`: side-effecting; panics at random; every run is recorded.
fn chaos_write(runs: Runs, rng: Arc<Rng>, panics: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(
        "chaos_write",
        "Chaos test tool (side-effecting).",
        move |_, ctx: ToolContext| {
            *runs
                .lock()
                .unwrap()
                .entry((ctx.message_id, ctx.call_id))
                .or_insert(0) += 1;
            let crash = rng.chance(150);
            if crash {
                panics.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async move {
                if crash {
                    panic!("chaos: write crashed");
                }
                Ok(output("write", "written"))
            })
        },
    )
    .with_parameters(schema())
}

fn counter(runtime: &troupe_actors::Runtime, name: &str, role: &str) -> u64 {
    labeled(runtime, name, &format!("role=\"{role}\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_turns_end_in_defined_states() {
    // The injected panics are expected: keep their messages out of the test output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !(msg.starts_with("chaos:") || msg.starts_with("injected fault")) {
            default_hook(info);
        }
    }));
    let started = std::time::Instant::now();
    let (dir, root) = scratch();
    let over = UsageSpec {
        prompt_tokens: Some(3_900),
        completion_tokens: Some(10),
        ..Default::default()
    };
    let tools_step = || {
        Step::tool("chaos_read", json!({"crash_once": true}))
            .with_tool("chaos_write", json!({}))
            .with_tool("chaos_read", json!({}))
    };
    let script = Script::new(vec![
        // Overflowing turns: answer past the context → compaction → summary → go on.
        Conversation::new(vec![
            Step::text("a long answer").with_usage(over),
            Step::text("## Goal\nthe summary"),
            Step::text("after the compaction"),
        ])
        .matching("OVERFLOW")
        .on_exhausted(Exhausted::Text),
        // Delegating turns: a task call to a subagent, then an answer.
        Conversation::new(vec![
            Step::tool(
                "task",
                json!({"description": "child job", "prompt": "CHILD-JOB: use the tools", "subagent_type": "general"}),
            ),
            Step::text("delegated"),
        ])
        .matching("DELEGATE")
        .on_exhausted(Exhausted::Text),
        // The subagents: tool calls, then an answer.
        Conversation::new(vec![tools_step(), Step::text("child done")])
            .matching("CHILD-JOB")
            .on_exhausted(Exhausted::Text),
        // Ordinary turns: tool calls, then an answer. A retried step may see more or fewer
        // assistant messages; past the end the mock answers with a plain text.
        Conversation::new(vec![tools_step(), Step::text("done")]),
    ]);
    let server = start_mock(script).await;
    let rng = Arc::new(Rng(AtomicU64::new(0x9E37_79B9_7F4A_7C15)));
    let read_runs: Runs = Default::default();
    let write_runs: Runs = Default::default();
    let read_panics = Arc::new(AtomicUsize::new(0));
    let write_panics = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::builtin();
    registry.register(Arc::new(chaos_read(
        read_runs.clone(),
        rng.clone(),
        read_panics.clone(),
    )));
    registry.register(Arc::new(chaos_write(
        write_runs.clone(),
        rng.clone(),
        write_panics.clone(),
    )));
    let mut f = Fixture::new(&server.base_url());
    f.config = config_limited(
        &server.base_url(),
        4096,
        512,
        json!({
            "supervision": {"read_only_tools": ["chaos_read"], "backoff_ms": 0, "tool_restarts": 3}
        }),
    );
    f.registry = registry;
    let runtime = f.start(&dir).await;
    let injected: Arc<Mutex<HashMap<&'static str, usize>>> = Default::default();
    {
        let rng = rng.clone();
        let injected = injected.clone();
        runtime.inject_faults(Arc::new(move |point, _key| {
            let (name, per_mille) = match point {
                FaultPoint::ProcessorEvent => ("processor", 8),
                FaultPoint::SessionStep => ("session", 40),
                FaultPoint::CompactionStart => ("compaction", 200),
            };
            let hit = rng.chance(per_mille);
            if hit {
                *injected.lock().unwrap().entry(name).or_insert(0) += 1;
            }
            hit
        }));
    }

    // Run the turns, 16 sessions at a time.
    let mut outcomes = Vec::new();
    let mut sessions = Vec::new();
    for chunk in (0..TURNS).collect::<Vec<_>>().chunks(16) {
        let mut set = tokio::task::JoinSet::new();
        for &i in chunk {
            let runtime = runtime.clone();
            let sid = new_session(&runtime, &root).await;
            sessions.push(sid.clone());
            let text = if i % COMPACT_EVERY == 0 {
                format!("OVERFLOW turn {i}")
            } else if i % DELEGATE_EVERY == DELEGATE_EVERY / 2 {
                format!("DELEGATE turn {i}")
            } else {
                format!("turn {i}")
            };
            set.spawn(async move {
                let r = tokio::time::timeout(DEADLINE, runtime.prompt(&sid, prompt(&text))).await;
                (sid, r)
            });
        }
        while let Some(j) = set.join_next().await {
            let (sid, r) = j.unwrap();
            let r = r.unwrap_or_else(|_| panic!("turn of {sid} hung"));
            outcomes.push((sid, r));
        }
    }
    assert_eq!(outcomes.len(), TURNS);

    // Every turn ended in a defined state: finished, or an error that says what happened.
    let mut finished = 0;
    let mut failed = 0;
    for (sid, r) in &outcomes {
        match r {
            Ok(t) => match &t.error {
                None => finished += 1,
                Some(e) => {
                    assert!(!e.message().is_empty(), "{sid}: error without a message");
                    failed += 1;
                }
            },
            Err(e) => {
                assert!(!e.to_string().is_empty(), "{sid}: error without a message");
                failed += 1;
            }
        }
    }

    // What the store holds.
    let mut completed_after_crash = 0;
    let mut unknown_outcome = 0;
    let mut running_left = 0;
    // The subagent sessions the delegating turns created hold tool parts too.
    let mut all_sessions = sessions.clone();
    let mut subagents = 0;
    for sid in &sessions {
        for child in children(&runtime, sid).await {
            all_sessions.push(child.id);
            subagents += 1;
        }
    }
    // Most delegating turns reach their task call (a crashed parent step may not).
    assert!(
        subagents >= TURNS / DELEGATE_EVERY / 2,
        "{subagents} subagent sessions"
    );
    for sid in &all_sessions {
        let history = messages(&runtime, sid).await;
        for m in &history {
            for p in &m.parts {
                let troupe_session::PartKind::Tool {
                    tool,
                    state,
                    call_id,
                    ..
                } = &p.kind
                else {
                    continue;
                };
                match state {
                    ToolState::Completed { input, .. }
                        if tool == "chaos_read" && input["crash_once"] == true =>
                    {
                        let runs =
                            read_runs.lock().unwrap()[&(p.message_id.to_string(), call_id.clone())];
                        assert!(runs >= 2, "a crash_once read completed after {runs} run(s)");
                        completed_after_crash += 1;
                    }
                    ToolState::Error { metadata, .. }
                        if tool == "chaos_write"
                            && metadata.as_ref().is_some_and(|m| m["outcome"] == "unknown") =>
                    {
                        unknown_outcome += 1;
                    }
                    ToolState::Pending { .. } | ToolState::Running { .. } => running_left += 1,
                    _ => {}
                }
            }
        }
    }
    assert_eq!(running_left, 0, "tool parts left pending or running");

    // No side-effecting call ran twice.
    let writes = write_runs.lock().unwrap().clone();
    assert!(!writes.is_empty());
    for (k, n) in &writes {
        assert_eq!(*n, 1, "side-effecting call {k:?} ran {n} times");
    }

    // The store and the counters agree.
    let write_panics = write_panics.load(Ordering::SeqCst) as u64;
    assert_eq!(
        counter(&runtime, "actor_failures_total", "side_effect_tool"),
        write_panics
    );
    assert_eq!(
        unknown_outcome as u64, write_panics,
        "every crashed write is one stored error part with an unknown outcome"
    );
    assert_eq!(
        counter(&runtime, "actor_failures_total", "read_only_tool"),
        read_panics.load(Ordering::SeqCst) as u64
    );
    let injected = injected.lock().unwrap().clone();
    for (name, role) in [
        ("processor", "processor"),
        ("session", "session"),
        ("compaction", "compaction"),
    ] {
        assert_eq!(
            counter(&runtime, "actor_failures_total", role),
            injected.get(name).copied().unwrap_or(0) as u64,
            "{role} failures"
        );
    }
    assert!(completed_after_crash > 0, "no read-only call recovered");
    for (name, _) in [("processor", 0), ("session", 0), ("compaction", 0)] {
        assert!(
            injected.get(name).copied().unwrap_or(0) > 0,
            "no {name} fault was injected"
        );
    }
    assert!(counter(&runtime, "actor_restarts_total", "processor") > 0);
    assert!(counter(&runtime, "actor_restarts_total", "session") > 0);

    wait_until("every actor to stop", || runtime.live_actors() == 0).await;
    eprintln!(
        "chaos: {TURNS} turns ({finished} finished, {failed} failed clearly, {subagents} subagents) in {:?}; injected {injected:?}, read panics {}, write panics {write_panics}, recovered reads {completed_after_crash}",
        started.elapsed(),
        read_panics.load(Ordering::SeqCst)
    );
}
