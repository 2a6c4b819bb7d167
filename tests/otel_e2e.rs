//! OpenTelemetry export of the binary (issue 23): with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing
//! at the testkit's OTLP/HTTP receiver, a scripted `troupe run` whose turn calls `read`, a
//! `task` subagent (which reads too) and a tool that runs past its timeout arrives as one
//! trace: the subagent's session span is a child of its task call's span, the spans carry
//! the ids stored in the session (`session_id`, `call_id`), every span lasts, the timed-out
//! call says `timeout`, and each provider request carried the W3C `traceparent` of its span.
//! A batch of two tasks is two traces, one per session, and a task past its `timeout` has
//! a turn whose outcome is `timeout`. `serve` sends its spans when it stops. A collector
//! that is down, silent or refusing costs a warning line, never the run.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use serde_json::json;
use troupe_testkit::{Conversation, OtlpReceiver, ReceivedSpan, Script, Step};

mod common;
use common::*;

/// The spans of `spans` by span id.
fn by_id(spans: &[ReceivedSpan]) -> BTreeMap<&str, &ReceivedSpan> {
    spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
}

/// The chain of span names from `s` up to its root (`s` first).
fn ancestry<'a>(s: &'a ReceivedSpan, ids: &BTreeMap<&str, &'a ReceivedSpan>) -> Vec<&'a str> {
    let mut out = vec![s.name.as_str()];
    let mut cur = s;
    while let Some(p) = cur.parent_span_id.as_deref() {
        let parent = ids
            .get(p)
            .unwrap_or_else(|| panic!("span {} has parent {p}, which was not exported", cur.name));
        out.push(parent.name.as_str());
        cur = parent;
    }
    out
}

fn parent<'a>(s: &ReceivedSpan, ids: &BTreeMap<&str, &'a ReceivedSpan>) -> &'a ReceivedSpan {
    ids[s.parent_span_id.as_deref().expect("a parent")]
}

/// The first span named `name` of session `sid` (its `session_id`); panics saying `what`
/// is missing when there is none.
fn span_of<'a>(spans: &'a [ReceivedSpan], name: &str, sid: &str, what: &str) -> &'a ReceivedSpan {
    named(spans, name)
        .into_iter()
        .find(|s| s.attr("session_id").as_deref() == Some(sid))
        .unwrap_or_else(|| panic!("no {what}"))
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_one_trace_with_its_subagent_nested() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let project = Project::new("http://127.0.0.1:1/v1");
    let notes = project.write_file("notes.md", "the codename is HERON\n");
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes}))
                .with_tool(
                    "task",
                    json!({
                        "description": "look it up",
                        "prompt": "CHILD-LOOKUP: find the codename",
                        "subagent_type": "explore",
                    }),
                )
                .with_tool("test_sleep", json!({"ms": 60000})),
            Step::text("the codename is HERON"),
        ])
        .matching("PARENT-TRACE"),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes})).with_first_byte_delay_ms(20),
            Step::text("child: HERON"),
        ])
        .matching("CHILD-LOOKUP"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let endpoint = receiver.endpoint();
    let started = Instant::now();
    let out = project
        .troupe(
            &["run", "PARENT-TRACE: what is the codename?"],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_SERVICE_NAME", "troupe-e2e"),
                ("TROUPE_TOOL_TIMEOUT_MS", "1500"),
                ("TROUPE_MAX_RETRIES", "0"),
            ],
        )
        .await;
    let took = started.elapsed();
    assert_success(&out, "troupe run");
    assert_eq!(text(&out.stdout).trim(), "the codename is HERON");
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );

    // Flushed at exit: everything is there the moment the process has ended (the batch
    // processor's own schedule, 5 s, is longer than this run).
    let spans = receiver.spans();
    eprintln!(
        "run took {took:?}; {} spans in {:?}",
        spans.len(),
        receiver.exports()
    );
    assert!(!spans.is_empty(), "no spans were exported");

    let sessions = project.sessions().await;
    let root_id = sessions
        .iter()
        .find(|s| s["parentID"].is_null())
        .and_then(|s| s["id"].as_str())
        .expect("root session")
        .to_string();
    let child_id = sessions
        .iter()
        .find(|s| s["parentID"] == root_id.as_str())
        .and_then(|s| s["id"].as_str())
        .expect("child session")
        .to_string();
    assert_eq!(sessions.len(), 2, "{sessions:#?}");

    // One trace, one root: the top-level session.
    let traces: HashSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(traces.len(), 1, "one trace expected: {traces:?}");
    let trace_id = spans[0].trace_id.clone();
    let roots: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:#?}");
    let root = roots[0];
    assert_eq!(root.name, "session");
    assert_eq!(root.attr("session_id").as_deref(), Some(root_id.as_str()));
    for s in &spans {
        assert_eq!(s.resource["service.name"], "troupe-e2e", "{s:?}");
        assert_eq!(s.scope, "troupe");
    }

    let ids = by_id(&spans);
    // Every tool call stored in either session is a span with its call id and session id.
    let mut stored_calls = Vec::new();
    for (sid, want) in [(&root_id, 3), (&child_id, 1)] {
        let doc = project.show(sid).await;
        let msgs = doc["messages"].as_array().expect("messages").clone();
        let calls = tool_parts(&msgs);
        assert_eq!(calls.len(), want, "{calls:#?}");
        for c in calls {
            stored_calls.push((
                sid.clone(),
                c["callID"].as_str().expect("callID").to_string(),
                c["tool"].as_str().expect("tool").to_string(),
                c["state"]["status"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    let tool_spans = named(&spans, "tool.call");
    assert_eq!(tool_spans.len(), stored_calls.len(), "{tool_spans:#?}");
    for (sid, call_id, tool, status) in &stored_calls {
        let s = tool_spans
            .iter()
            .find(|s| s.attr("call_id").as_deref() == Some(call_id.as_str()))
            .unwrap_or_else(|| panic!("no tool.call span for {call_id} ({tool})"));
        assert_eq!(s.attr("tool").as_deref(), Some(tool.as_str()));
        assert_eq!(s.attr("session_id").as_deref(), Some(sid.as_str()));
        let outcome = s.attr("outcome").unwrap_or_default();
        match tool.as_str() {
            "test_sleep" => {
                assert_eq!(status, "error");
                assert_eq!(outcome, "timeout", "{s:?}");
                assert_eq!(s.status_code, 2, "a timed-out call is an error span");
            }
            _ => {
                assert_eq!(status, "completed");
                assert_eq!(outcome, "completed", "{s:?}");
                assert_ne!(s.status_code, 2);
            }
        }
        let chain = ancestry(s, &ids);
        if sid == &root_id {
            assert_eq!(chain, ["tool.call", "step", "turn", "session"], "{tool}");
        } else {
            // The subagent's call, nested under the parent's task call.
            assert_eq!(
                chain,
                [
                    "tool.call",
                    "step",
                    "turn",
                    "session",
                    "tool.call",
                    "step",
                    "turn",
                    "session"
                ],
                "{tool}"
            );
        }
    }

    // The subagent session span is a child of the task call's span.
    let task_call = tool_spans
        .iter()
        .find(|s| s.attr("tool").as_deref() == Some("task"))
        .expect("task span");
    let child_session = span_of(&spans, "session", &child_id, "the subagent's session span");
    assert_eq!(
        child_session.parent_span_id.as_deref(),
        Some(task_call.span_id.as_str())
    );
    assert_eq!(
        child_session.attr("parent_session_id").as_deref(),
        Some(root_id.as_str())
    );

    // Provider requests: client spans under steps, one per request the mock saw, each
    // request carrying its own span's trace context.
    let requests = named(&spans, "provider.request");
    let recorded = completions(&server);
    assert_eq!(requests.len(), recorded.len(), "{requests:#?}");
    assert_eq!(recorded.len(), 4, "2 steps per session");
    let sent: HashSet<String> = recorded
        .iter()
        .map(|r| r.headers.traceparent.clone().expect("a traceparent header"))
        .collect();
    let expected: HashSet<String> = requests
        .iter()
        .map(|s| format!("00-{trace_id}-{}-01", s.span_id))
        .collect();
    assert_eq!(sent, expected);
    for r in &requests {
        assert_eq!(r.kind, 3, "provider.request is a client span");
        assert_eq!(parent(r, &ids).name, "step");
        assert_eq!(r.attr("status").as_deref(), Some("ok"));
        assert_eq!(r.attr("model").as_deref(), Some("mock/mock-model"));
        assert!(r.attributes.contains_key("ttft_ms"), "{r:?}");
    }

    // Every span lasts, and lies within its parent (a 2 ms allowance for clock reads).
    let slack = 2_000_000;
    for s in &spans {
        assert!(s.duration_nanos() > 0, "{} has no duration: {s:?}", s.name);
        if let Some(p) = s.parent_span_id.as_deref().map(|p| ids[p]) {
            assert!(
                s.start_unix_nano + slack >= p.start_unix_nano
                    && s.end_unix_nano <= p.end_unix_nano + slack,
                "{} [{}, {}] is outside its parent {} [{}, {}]",
                s.name,
                s.start_unix_nano,
                s.end_unix_nano,
                p.name,
                p.start_unix_nano,
                p.end_unix_nano
            );
        }
    }
    // The timed-out call lasted its timeout (1.5 s; 0.1 s allowance for the two clocks).
    let sleep = tool_spans
        .iter()
        .find(|s| s.attr("tool").as_deref() == Some("test_sleep"))
        .expect("test_sleep span");
    assert!(
        sleep.duration_nanos() >= 1_400_000_000,
        "{}",
        sleep.duration_nanos()
    );
    // Two turns (parent, child), each with two steps, and the turn result as an event.
    assert_eq!(named(&spans, "turn").len(), 2);
    assert_eq!(named(&spans, "step").len(), 4);
    for t in named(&spans, "turn") {
        assert_eq!(t.attr("steps").as_deref(), Some("2"), "{t:?}");
        assert!(
            t.events.iter().any(|(name, _)| name == "turn finished"),
            "{t:?}"
        );
    }
    server.shutdown().await;
    receiver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_trace_per_session_and_a_timed_out_task_says_so() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let project = Project::new("http://127.0.0.1:1/v1");
    let notes = project.write_file("notes.md", "the codename is HERON\n");
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool(
                "task",
                json!({
                    "description": "look it up",
                    "prompt": "CHILD-OF-A: find the codename",
                    "subagent_type": "explore",
                }),
            ),
            Step::text("a: HERON"),
        ])
        .matching("TASK-A"),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes})),
            Step::text("child: HERON"),
        ])
        .matching("CHILD-OF-A"),
        Conversation::new(vec![Step::tool("test_sleep", json!({"ms": 60000}))]).matching("TASK-B"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    std::fs::write(
        project.root.join("tasks.jsonl"),
        format!(
            "{}\n{}\n",
            json!({"id": "a", "prompt": "TASK-A: what is the codename?"}),
            json!({"id": "b", "prompt": "TASK-B: wait", "timeout": 1}),
        ),
    )
    .expect("tasks");
    let endpoint = receiver.endpoint();
    let out = project
        .troupe(
            &[
                "batch",
                "tasks.jsonl",
                "--permission",
                "allow",
                "--out",
                "results.jsonl",
            ],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "task b timed out: {out:?}");
    let results: BTreeMap<String, serde_json::Value> =
        std::fs::read_to_string(project.root.join("results.jsonl"))
            .expect("results")
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("result line");
                (v["id"].as_str().expect("id").to_string(), v)
            })
            .collect();
    assert_eq!(results["a"]["status"], "completed", "{results:#?}");
    assert_eq!(results["b"]["status"], "failed", "{results:#?}");
    let sid = |id: &str| {
        results[id]["session_id"]
            .as_str()
            .expect("session_id")
            .to_string()
    };
    let (a, b) = (sid("a"), sid("b"));

    // Flushed at exit: two root session spans, each the root of its own trace.
    let spans = receiver.spans();
    let ids = by_id(&spans);
    let roots: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none())
        .collect();
    let mut root_sessions: Vec<String> = roots
        .iter()
        .map(|r| {
            assert_eq!(r.name, "session", "{r:?}");
            r.attr("session_id").expect("session_id")
        })
        .collect();
    root_sessions.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(root_sessions, want, "one root per batch session");
    let traces: HashSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(traces.len(), 2, "one trace per session: {traces:?}");
    let trace_of = |sid: &str| {
        roots
            .iter()
            .find(|r| r.attr("session_id").as_deref() == Some(sid))
            .map(|r| r.trace_id.clone())
            .expect("root")
    };
    assert_ne!(trace_of(&a), trace_of(&b));

    // Task a: its subagent's session (and the subagent's read) are in a's trace, under the
    // task call.
    let sessions = project.sessions().await;
    let child = sessions
        .iter()
        .find(|s| s["parentID"] == a.as_str())
        .and_then(|s| s["id"].as_str())
        .expect("a's subagent")
        .to_string();
    let child_span = span_of(&spans, "session", &child, "the subagent's session span");
    assert_eq!(child_span.trace_id, trace_of(&a));
    assert_eq!(
        ancestry(child_span, &ids),
        ["session", "tool.call", "step", "turn", "session"]
    );
    assert_eq!(
        parent(child_span, &ids).attr("tool").as_deref(),
        Some("task")
    );
    let child_read = span_of(&spans, "tool.call", &child, "the subagent's read");
    assert_eq!(child_read.attr("tool").as_deref(), Some("read"));
    assert_eq!(child_read.trace_id, trace_of(&a));
    // Every span of a trace belongs to its session or that session's subagent.
    for s in &spans {
        let owner = s.attr("session_id").expect("session_id");
        let expected = if s.trace_id == trace_of(&a) {
            vec![a.as_str(), child.as_str()]
        } else {
            vec![b.as_str()]
        };
        assert!(
            expected.contains(&owner.as_str()),
            "{} of {owner} in the wrong trace",
            s.name
        );
    }

    // Task b ran past its 1 s timeout: its turn's outcome is `timeout` (an error span), and
    // the sleeping call was aborted with it.
    let turn_b = span_of(&spans, "turn", &b, "b's turn");
    assert_eq!(
        turn_b.attr("outcome").as_deref(),
        Some("timeout"),
        "{turn_b:?}"
    );
    assert_eq!(turn_b.status_code, 2, "{turn_b:?}");
    let sleep_b = span_of(&spans, "tool.call", &b, "b's call");
    assert_eq!(
        sleep_b.attr("outcome").as_deref(),
        Some("aborted"),
        "{sleep_b:?}"
    );
    for t in named(&spans, "turn") {
        if t.attr("session_id").as_deref() != Some(b.as_str()) {
            assert_eq!(t.attr("outcome").as_deref(), Some("completed"), "{t:?}");
            assert_ne!(t.status_code, 2, "{t:?}");
        }
    }
    server.shutdown().await;
    receiver.shutdown().await;
}

/// A listener that accepts connections and never answers (a collector that hangs).
async fn silent_listener() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    (format!("http://{addr}"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_silent_or_refusing_never_fails_a_run() {
    let (server, project) = mock_project(vec![Step::text("still answered")]).await;
    // A port nothing listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let (silent, silent_task) = silent_listener().await;
    let refusing = OtlpReceiver::start_failing(503).await.expect("receiver");
    for (what, endpoint, expect_in_warning) in [
        ("down", closed.clone(), "cannot send traces"),
        ("silent", silent.clone(), "cannot send traces"),
        ("refusing", refusing.endpoint(), "HTTP 503"),
    ] {
        let started = Instant::now();
        let out = project
            .troupe(
                &["run", "hello"],
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
                ],
            )
            .await;
        let took = started.elapsed();
        eprintln!("{what} collector: run took {took:?}");
        assert_success(&out, what);
        assert_eq!(text(&out.stdout).trim(), "still answered", "{what}");
        let stderr = without_snapshot_notice(&text(&out.stderr));
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("troupe: warning:"))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "{what}: one warning line expected:\n{stderr}"
        );
        assert!(
            warnings[0].contains(expect_in_warning) && warnings[0].contains(&endpoint),
            "{what}: {}",
            warnings[0]
        );
        // The flush at exit waits at most about the exporter timeout (1 s here); a flush
        // that hung would trip the fixture's deadline on `troupe`.
    }
    // The refusing collector was really asked (and retried).
    let exports = refusing.exports();
    assert!(
        !exports.is_empty() && exports.iter().all(|e| e.status == 503),
        "{exports:?}"
    );
    silent_task.abort();
    refusing.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_flushes_its_spans_when_it_stops() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let server = mock(vec![Step::text("served answer")]).await;
    let endpoint = receiver.endpoint();
    let project = Project::new(&server.base_url())
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "60000");
    let (mut child, base) = project.serve().await;
    let client = troupe_server::client::Client::new(&base, None).expect("client");
    let session = client.post("/session", &json!({})).await.expect("session");
    let sid = session["id"].as_str().expect("id").to_string();
    client
        .post(&format!("/session/{sid}/message"), &json!({"text": "hi"}))
        .await
        .expect("message");
    // Nothing is due before the (long) schedule: the spans leave when the server stops.
    signal(child.id().expect("pid"), "-TERM");
    let status = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait())
        .await
        .expect("serve exits")
        .expect("wait");
    assert!(status.success(), "{status:?}");
    let spans = receiver.spans();
    let session_span = spans
        .iter()
        .find(|s| s.name == "session" && s.attr("session_id").as_deref() == Some(sid.as_str()))
        .unwrap_or_else(|| panic!("no session span for {sid}: {spans:#?}"));
    assert!(session_span.parent_span_id.is_none());
    let in_trace: Vec<&str> = spans
        .iter()
        .filter(|s| s.trace_id == session_span.trace_id)
        .map(|s| s.name.as_str())
        .collect();
    for name in ["session", "turn", "step", "provider.request"] {
        assert!(in_trace.contains(&name), "{name} missing from {in_trace:?}");
    }
    receiver.shutdown().await;
    server.shutdown().await;
}
