//! The tracing spans of a scripted session mirror its actor tree (issue 23): an in-process
//! subscriber collects every span of a turn whose first step is retried after an HTTP 500,
//! calls the `task` tool, and whose subagent reads a file; the test checks the tree
//! session → turn → step → provider request / retry wait / tool call → subagent session →
//! turn → step → tool call, the ids each span carries, and that every span closed inside its
//! parent's interval.
//!
//! This file holds one test on purpose: the collecting subscriber is the process-global
//! default (actors run on every runtime thread), which a test binary can set only once.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    DEADLINE, Fixture, messages, new_session, run_prompt, scratch, start_mock, tool_parts,
};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use troupe_session::ToolState;
use troupe_testkit::{Conversation, Fault, Script, Step};

/// One collected span.
#[derive(Debug, Clone)]
struct Rec {
    name: &'static str,
    parent: Option<u64>,
    fields: HashMap<String, String>,
    opened: Instant,
    closed: Option<Instant>,
    /// Messages of events whose parent is this span.
    events: Vec<HashMap<String, String>>,
}

#[derive(Default, Clone)]
struct Collected(Arc<Mutex<HashMap<u64, Rec>>>);

struct Visit<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Visit<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collected {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Visit(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        self.0.lock().unwrap().insert(
            id.into_u64(),
            Rec {
                name: attrs.metadata().name(),
                parent,
                fields,
                opened: Instant::now(),
                closed: None,
                events: Vec::new(),
            },
        );
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(r) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Visit(&mut r.fields));
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut fields = HashMap::new();
        event.record(&mut Visit(&mut fields));
        if let Some(r) = self.0.lock().unwrap().get_mut(&span.id().into_u64()) {
            r.events.push(fields);
        }
    }
    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if let Some(r) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            r.closed = Some(Instant::now());
        }
    }
}

impl Collected {
    fn all(&self) -> HashMap<u64, Rec> {
        self.0.lock().unwrap().clone()
    }
}

/// The children of `parent` named `name`, in creation order.
fn kids<'a>(all: &'a HashMap<u64, Rec>, parent: u64, name: &str) -> Vec<(u64, &'a Rec)> {
    let mut v: Vec<(u64, &Rec)> = all
        .iter()
        .filter(|(_, r)| r.parent == Some(parent) && r.name == name)
        .map(|(id, r)| (*id, r))
        .collect();
    v.sort_by_key(|(_, r)| r.opened);
    v
}

fn only<'a>(all: &'a HashMap<u64, Rec>, parent: u64, name: &str) -> (u64, &'a Rec) {
    let v = kids(all, parent, name);
    assert_eq!(v.len(), 1, "one {name} under span {parent}: {v:#?}");
    v[0]
}

/// A span's field (panics with the span when it is missing).
fn field<'a>(r: &'a Rec, name: &str) -> &'a str {
    r.fields
        .get(name)
        .unwrap_or_else(|| panic!("{} span without {name}: {r:#?}", r.name))
}

/// The span closed, and within its parent's life.
fn assert_nested(all: &HashMap<u64, Rec>, id: u64) {
    let r = &all[&id];
    let closed = r
        .closed
        .unwrap_or_else(|| panic!("{} span never closed: {r:#?}", r.name));
    if let Some(p) = r.parent.and_then(|p| all.get(&p)) {
        assert!(
            r.opened >= p.opened,
            "{} opened before its parent {}",
            r.name,
            p.name
        );
        if let Some(pc) = p.closed {
            assert!(
                closed <= pc,
                "{} closed after its parent {}",
                r.name,
                p.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_mirror_the_actor_tree() {
    let collected = Collected::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(collected.clone()).with(
            tracing_subscriber::filter::Targets::new().with_target("troupe", tracing::Level::INFO),
        ),
    )
    .expect("the only global subscriber of this test binary");

    let (dir, root) = scratch();
    std::fs::write(root.join("notes.md"), "the secret is 42\n").expect("notes");
    let notes = root.join("notes.md").display().to_string();
    let task = json!({
        "description": "read the notes",
        "prompt": "SPAN-CHILD: read notes.md and report",
        "subagent_type": "explore",
    });
    let script = Script::new(vec![
        Conversation::new(vec![
            // The first attempt gets an HTTP 500; the retry gets the task call.
            Step::tool("task", task).with_fault(Fault::http(500)),
            Step::text("parent done"),
        ])
        .matching("SPAN-PARENT"),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes})),
            Step::text("the secret is 42"),
        ])
        .matching("SPAN-CHILD"),
    ]);
    let server = start_mock(script).await;
    let mut fx = Fixture::new(&server.base_url());
    fx.opts.max_retry_delay = Duration::from_millis(20);
    fx.opts.titles = false;
    let runtime = fx.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
    let turn = run_prompt(&runtime, &sid, "SPAN-PARENT: ask a helper").await;
    assert!(turn.error.is_none(), "turn failed: {:?}", turn.error);
    assert_eq!(turn.text, "parent done");

    // The stored ids the spans must carry.
    let history = messages(&runtime, &sid).await;
    let task_part = tool_parts(&history)
        .into_iter()
        .find(|(t, _)| t == "task")
        .expect("task part");
    let child_sid = match &task_part.1 {
        ToolState::Completed { metadata, .. } => metadata["sessionId"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("task metadata without sessionId: {metadata}")),
        other => panic!("task did not complete: {other:?}"),
    };
    let call_ids: Vec<String> = history
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.kind {
            troupe_session::PartKind::Tool { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();

    // The session actors stop when idle, closing their spans: wait for the root's.
    let start = Instant::now();
    let root_id = loop {
        let all = collected.all();
        let found = all.iter().find(|(_, r)| {
            r.name == "session"
                && r.parent.is_none()
                && r.fields.get("session_id").map(String::as_str) == Some(sid.as_str())
        });
        if let Some((id, r)) = found
            && r.closed.is_some()
        {
            break *id;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the root session span never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let all = collected.all();
    for id in all.keys() {
        assert_nested(&all, *id);
    }

    // session → turn (the user message) → two steps.
    let (turn_id, turn_span) = only(&all, root_id, "turn");
    assert_eq!(field(turn_span, "session_id"), sid);
    assert_eq!(
        field(turn_span, "message_id"),
        turn.user_message_id.as_deref().unwrap()
    );
    assert_eq!(field(turn_span, "model"), "mock/mock-model");
    assert_eq!(field(turn_span, "steps"), "2");
    assert_eq!(field(turn_span, "outcome"), "completed");
    let steps = kids(&all, turn_id, "step");
    assert_eq!(steps.len(), 2, "{steps:#?}");
    let assistant_ids: Vec<&str> = history
        .iter()
        .filter(|m| matches!(m.info, troupe_session::Message::Assistant(_)))
        .map(|m| m.info.id().as_str())
        .collect();
    for ((_, s), mid) in steps.iter().zip(&assistant_ids) {
        assert_eq!(field(s, "message_id"), *mid);
    }
    let (step1, step1_span) = steps[0];
    assert_eq!(field(step1_span, "finish"), "tool-calls");

    // Step 1: a failed attempt, the retry wait, the good attempt, the task call.
    let reqs = kids(&all, step1, "provider.request");
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(field(reqs[0].1, "attempt"), "1");
    assert_ne!(field(reqs[0].1, "status"), "ok");
    assert_eq!(field(reqs[1].1, "attempt"), "2");
    assert_eq!(field(reqs[1].1, "status"), "ok");
    assert!(field(reqs[1].1, "ttft_ms").parse::<u64>().is_ok());
    assert!(field(reqs[1].1, "tokens_output").parse::<u64>().unwrap() > 0);
    let (_, wait) = only(&all, step1, "retry.wait");
    assert_eq!(field(wait, "attempt"), "1");
    let (call_id, call) = only(&all, step1, "tool.call");
    assert_eq!(field(call, "tool"), "task");
    assert_eq!(field(call, "outcome"), "completed");
    assert!(call_ids.iter().any(|c| c == field(call, "call_id")));

    // The subagent session nests under the task call, with its own turn, steps and call.
    let (child_root, child) = only(&all, call_id, "session");
    assert_eq!(field(child, "session_id"), child_sid);
    assert_eq!(field(child, "parent_session_id"), sid);
    let (child_turn, _) = only(&all, child_root, "turn");
    let child_steps = kids(&all, child_turn, "step");
    assert_eq!(child_steps.len(), 2, "{child_steps:#?}");
    let (_, read) = only(&all, child_steps[0].0, "tool.call");
    assert_eq!(field(read, "tool"), "read");
    assert_eq!(field(read, "outcome"), "completed");
    assert_eq!(field(read, "session_id"), child_sid);
    only(&all, child_steps[0].0, "provider.request");

    // Step 2 answered without tools.
    let (_, step2) = steps[1];
    assert_eq!(field(step2, "finish"), "stop");
    assert!(kids(&all, steps[1].0, "tool.call").is_empty());
}
