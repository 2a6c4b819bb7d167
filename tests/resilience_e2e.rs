//! Resilience end-to-end tests of the `troupe` binary against the scripted provider
//! (`troupe-testkit`): provider errors and their classification, the retry layer (hints, status
//! events, discarded partial attempts), Ctrl-C during a running bash command, the Anthropic
//! protocol, tool-name repair / invalid arguments, and cost accounting up to `troupe stats`.
//!
//! Same isolation as the other end-to-end files (`tests/common/project.rs`): each test has its
//! own temp project (with a `troupe.json` pointing at its own `MockServer`), its own SQLite
//! store and an empty global config dir.
//! Retry waits are real, so faults carry short `retry-after(-ms)` hints wherever the protocol
//! allows one; only the stream-level faults (cut, error event) pay the 2 s default backoff.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use troupe_testkit::{Fault, Script, Step, UsageSpec};

mod common;
use common::*;

/// Prices used by the cost tests, USD per 1M tokens.
const PRICES: (f64, f64, f64, f64) = (3.0, 15.0, 0.3, 3.75);

// ---------------------------------------------------------------------------------------------
// Helpers for streaming output, costs and Anthropic.
// ---------------------------------------------------------------------------------------------

/// A config with one OpenAI-compatible provider `mock` (model `mock-model`), priced with
/// [`PRICES`] when `priced`.
fn config_json(base_url: &str, priced: bool) -> Value {
    let cost = if priced { prices_json() } else { Value::Null };
    mock_config_with(
        base_url,
        json!({"provider": {"mock": {"models": {"mock-model": {"cost": cost}}}}}),
    )
}

fn prices_json() -> Value {
    json!({
        "input": PRICES.0,
        "output": PRICES.1,
        "cache_read": PRICES.2,
        "cache_write": PRICES.3
    })
}

/// `session.status` types of the run, consecutive duplicates collapsed.
fn status_sequence(events: &[Value]) -> Vec<String> {
    let mut seq: Vec<String> = Vec::new();
    for e in events.iter().filter(|e| e["type"] == "session.status") {
        let t = e["properties"]["status"]["type"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        if seq.last() != Some(&t) {
            seq.push(t);
        }
    }
    seq
}

/// The `retry` status payloads, in order.
fn retry_statuses(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "session.status" && e["properties"]["status"]["type"] == "retry")
        .map(|e| e["properties"]["status"].clone())
        .collect()
}

/// The only assistant message's `error`, after asserting roles `[user, assistant]`.
fn only_assistant_error(messages: &[Value]) -> Value {
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant"], "{messages:#?}");
    let err = messages[1]["info"]["error"].clone();
    assert!(err.is_object(), "no error on {:#}", messages[1]);
    err
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A running `troupe` whose stdout lines are collected as they arrive.
struct Running {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Running {
    fn spawn(project: &Project, args: &[&str], envs: &[(&str, &str)]) -> Running {
        let mut child = project.spawn(args, envs);
        let stdout = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut rd = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(l)) = rd.next_line().await {
                sink.lock().expect("lines lock").push(l);
            }
        });
        let stderr = tokio::spawn(async move {
            let mut s = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut err, &mut s).await;
            s
        });
        Running {
            child,
            lines,
            reader,
            stderr,
        }
    }

    fn events(&self) -> Vec<Value> {
        self.lines
            .lock()
            .expect("lines lock")
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| parse_event_line(l))
            .collect()
    }
}

fn usage(prompt: u64, completion: u64, cached: u64, reasoning: u64) -> UsageSpec {
    UsageSpec {
        prompt_tokens: Some(prompt),
        completion_tokens: Some(completion),
        cached_tokens: Some(cached),
        reasoning_tokens: Some(reasoning),
    }
}

fn headers(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Retried failures.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_429_retry_after_2() {
    let script = Script::single(vec![
        Step::text("made it after waiting two seconds").with_fault(Fault::rate_limited(2)),
    ]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", "slow", "down"], &[])
        .await;
    eprintln!(
        "rate_limit_429_retry_after_2: run took {:?}",
        started.elapsed()
    );
    assert_success(&out, "troupe run");

    let events = parse_events(&out.stdout);
    let retries = retry_statuses(&events);
    assert_eq!(retries.len(), 1, "retry statuses: {retries:#?}");
    let retry = &retries[0];
    assert_eq!(retry["attempt"], 1, "{retry}");
    assert!(
        retry["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{retry}"
    );
    let next = retry["next"].as_u64().expect("next is a ms epoch");

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!((reqs[0].status, reqs[0].attempt), (429, 1));
    assert_eq!((reqs[1].status, reqs[1].attempt), (200, 2));
    // `next` is ≈ 2000 ms after the 429 arrived at the client (≈ the end of request 0).
    let failed_at = reqs[0].end_ms.unwrap_or(reqs[0].start_ms);
    let ahead = next as i64 - failed_at as i64;
    assert!(
        (1500..=2600).contains(&ahead),
        "next is {ahead} ms after the 429 (want ≈ 2000)"
    );
    let waited = reqs[1].start_ms - reqs[0].start_ms;
    assert!(
        waited >= 1900,
        "second attempt only {waited} ms after the first"
    );
    assert!(
        reqs[1].start_ms + 50 >= next,
        "second attempt started before `next` ({} < {next})",
        reqs[1].start_ms
    );

    assert_eq!(
        status_sequence(&events),
        ["busy", "retry", "busy", "idle"],
        "status sequence"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_529_then_success() {
    let script = Script::single(vec![Step::text("no longer overloaded").with_fault(
        Fault::Http {
            status: 529,
            headers: headers(&[("retry-after-ms", "300")]),
            body: None,
        },
    )]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let out = project
        .troupe(&["run", "--format", "json", "are", "you", "busy"], &[])
        .await;
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    let retries = retry_statuses(&events);
    assert_eq!(retries.len(), 1, "{retries:#?}");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].status, 529);
    let waited = reqs[1].start_ms - reqs[0].start_ms;
    assert!(
        (280..2000).contains(&waited),
        "retry-after-ms 300 not honoured: waited {waited} ms"
    );
    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let texts: Vec<&str> = all_parts_of_type(&messages[1..], "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, ["no longer overloaded"]);
    assert!(messages[1]["info"]["error"].is_null(), "{:#}", messages[1]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_500_three_times_then_success() {
    let fault = || Fault::Http {
        status: 500,
        headers: headers(&[("retry-after-ms", "100")]),
        body: None,
    };
    let script = Script::single(vec![
        Step::text("fourth time lucky")
            .with_fault(fault())
            .with_fault(fault())
            .with_fault(fault()),
    ]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let out = project
        .troupe(&["run", "--format", "json", "server", "errors"], &[])
        .await;
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    let attempts: Vec<u64> = retry_statuses(&events)
        .iter()
        .filter_map(|r| r["attempt"].as_u64())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    let reqs = completions(&server);
    let step0: Vec<(u32, u16)> = reqs
        .iter()
        .filter(|r| r.step == Some(0))
        .map(|r| (r.attempt, r.status))
        .collect();
    assert_eq!(step0, [(1, 500), (2, 500), (3, 500), (4, 200)]);
    assert!(text(&out.stdout).contains("fourth time lucky"));
    server.shutdown().await;
}

/// `troupe run … > answer.txt` captures the answer once: the text an attempt streamed
/// before it was cut (or ended by an error event) is streamed again by the retry, so stdout
/// that is not a terminal holds a step's text until the step finishes. And a reply cut at the
/// output limit is warned about once, though its step-finish part is updated twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_attempts_text_reaches_stdout_once() {
    let project = Project::with_config(&config_json("http://127.0.0.1:1/v1", false));
    project.git();
    let script = Script::single(vec![
        Step::text("will be cut and then told in full")
            .with_chunk_size(4)
            .with_fault(Fault::cut_after(3)),
        Step::text("unused"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(&server.base_url(), false).to_string());
    let out = project.troupe(&["run", "say", "it"], &[]).await;
    assert_success(&out, "troupe run");
    assert_eq!(text(&out.stdout), "will be cut and then told in full\n");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("retrying"), "{stderr}");

    let script = Script::single(vec![
        Step::text("stopped at the lim")
            .with_finish("length")
            .with_fault(Fault::error_event_after(2, "overloaded")),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(&server.base_url(), false).to_string());
    let out = project.troupe(&["run", "say", "more"], &[]).await;
    assert_success(&out, "troupe run");
    assert_eq!(text(&out.stdout), "stopped at the lim\n");
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("finish_reason: length").count(),
        1,
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_mid_stream_after_half_a_tool_call() {
    let project = Project::with_config(&config_json("http://127.0.0.1:1/v1", false));
    let long_name = format!("{}.txt", "a_rather_long_file_name_".repeat(4));
    std::fs::write(project.root.join(&long_name), "content of the long file\n").expect("file");
    let path = project.root.join(&long_name).display().to_string();
    // OpenAI chunks (no text): 0 = role + tool-call opening, 1.. = 8-char argument fragments.
    // The argument JSON is > 100 chars, so cutting after 4 chunks lands inside it.
    let script = Script::single(vec![
        Step::tool("read", json!({"filePath": path}))
            .with_chunk_size(8)
            .with_fault(Fault::cut_after(4)),
        Step::text("read it once"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(&server.base_url(), false).to_string());
    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", "read", "the", "file"], &[])
        .await;
    eprintln!(
        "cut_mid_stream_after_half_a_tool_call: run took {:?}",
        started.elapsed()
    );
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    assert_eq!(retry_statuses(&events).len(), 1, "one retry expected");

    let reqs = completions(&server);
    let shape: Vec<(Option<usize>, u32)> = reqs.iter().map(|r| (r.step, r.attempt)).collect();
    assert_eq!(shape, [(Some(0), 1), (Some(0), 2), (Some(1), 1)]);

    // The partial tool part of the failed attempt was published and then removed.
    let call_id = "call_0_0_0";
    let retry_at = events
        .iter()
        .position(|e| e["type"] == "session.status" && e["properties"]["status"]["type"] == "retry")
        .expect("retry event");
    // The failed attempt's tool part, as published before the retry status.
    let partial_ids: Vec<String> = events[..retry_at]
        .iter()
        .filter(|e| e["type"] == "message.part.updated")
        .filter(|e| e["properties"]["part"]["type"] == "tool")
        .filter(|e| e["properties"]["part"]["callID"] == call_id)
        .filter_map(|e| e["properties"]["part"]["id"].as_str().map(str::to_string))
        .collect();
    assert!(
        !partial_ids.is_empty(),
        "the failed attempt published no tool part before the cut"
    );
    let removed: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "message.part.removed")
        .map(|e| e["properties"].to_string())
        .collect();
    for id in &partial_ids {
        assert!(
            removed.iter().any(|r| r.contains(id.as_str())),
            "part {id} of the failed attempt was not removed; removed: {removed:#?}"
        );
    }

    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"], "{messages:#?}");
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 1, "tool parts: {tools:#?}");
    assert_eq!(tools[0]["callID"], call_id);
    assert_eq!(tools[0]["state"]["status"], "completed", "{:#}", tools[0]);
    assert!(
        tools[0]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("content of the long file"),
        "{:#}",
        tools[0]
    );
    // One step-start / step-finish per assistant message, no leftover text.
    for m in &messages[1..] {
        assert_eq!(parts_of_type(m, "step-start").len(), 1, "{m:#}");
        assert_eq!(parts_of_type(m, "step-finish").len(), 1, "{m:#}");
    }
    assert!(
        parts_of_type(&messages[1], "text").is_empty(),
        "{:#}",
        messages[1]
    );
    // The tool ran once: the follow-up request carries exactly one tool result.
    let results: Vec<Value> = req_messages(&reqs[2])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(results[0]["tool_call_id"], call_id);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_event_inside_200_stream_then_success() {
    let script = Script::single(vec![
        Step::text("second attempt streams fine")
            .with_chunk_size(6)
            .with_fault(Fault::error_event_after(2, "upstream hiccup")),
    ]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let out = project
        .troupe(&["run", "--format", "json", "error", "event"], &[])
        .await;
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    let retries = retry_statuses(&events);
    assert_eq!(retries.len(), 1, "{retries:#?}");
    assert!(
        retries[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("upstream hiccup"),
        "retry message should be the provider's: {}",
        retries[0]
    );
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.status == 200));

    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let texts: Vec<&str> = all_parts_of_type(&messages[1..], "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    // The partial text of the failed attempt ("second") is gone.
    assert_eq!(texts, ["second attempt streams fine"], "{messages:#?}");
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Final failures: not retried.
// ---------------------------------------------------------------------------------------------

/// An OpenAI-style error answer: HTTP `status` with `headers` and the body
/// `{"error": {"message", "type": kind, "param": null, "code"}}`.
fn provider_error(
    status: u16,
    response_headers: &[(&str, &str)],
    message: &str,
    kind: &str,
    code: &str,
) -> Fault {
    Fault::Http {
        status,
        headers: headers(response_headers),
        body: Some(json!({"error": {
            "message": message,
            "type": kind,
            "param": null,
            "code": code
        }})),
    }
}

/// Runs `prompt` (with the environment `env`) against a provider whose one answer is `fault`,
/// and checks what every final (not retried) provider error gives: a one-line failure, one
/// request and no retry status, and a stored `[user, assistant]` whose error says it is not
/// retryable. The failure line and that error.
async fn run_final_fault(fault: Fault, prompt: &str, env: &[(&str, &str)]) -> (String, Value) {
    let script = Script::single(vec![Step::text("never shown").with_fault(fault)]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", prompt], env)
        .await;
    eprintln!("{prompt}: run took {:?}", started.elapsed());
    let events = parse_events(&out.stdout);
    assert!(
        retry_statuses(&events).is_empty(),
        "{prompt}: a final error was retried"
    );
    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let reqs = completions(&server);
    server.shutdown().await;
    let line = assert_one_line_failure(&out, prompt);
    assert_eq!(reqs.len(), 1, "{prompt}: the error was retried");
    let err = only_assistant_error(&messages);
    assert_eq!(err["data"]["isRetryable"], false, "{err:#}");
    (line, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_401_is_final() {
    let provider_message =
        "Incorrect API key provided: test. You can find your API key at the dashboard.";
    let fault = provider_error(
        401,
        &[("retry-after-ms", "100")],
        provider_message,
        "invalid_request_error",
        "invalid_api_key",
    );
    let (line, err) = run_final_fault(fault, "auth please", &[]).await;
    assert!(line.contains(provider_message), "{line}");
    assert_eq!(err["name"], "ProviderAuthError", "{err:#}");
    assert_eq!(err["data"]["statusCode"], 401, "{err:#}");
    assert_eq!(err["data"]["message"], provider_message, "{err:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_overflow_400_is_final() {
    let provider_message = "This model's maximum context length is 4097 tokens. However, your messages resulted in 5000 tokens.";
    // With automatic compaction off the overflow is shown as a typed error (with it on, the
    // session compacts instead: tests/compaction_e2e.rs).
    let fault = provider_error(
        400,
        &[],
        provider_message,
        "invalid_request_error",
        "context_length_exceeded",
    );
    let no_compaction = [(
        "TROUPE_CONFIG_CONTENT",
        r#"{"compaction": {"auto": false}}"#,
    )];
    let (line, err) = run_final_fault(fault, "too long", &no_compaction).await;
    assert!(line.contains("maximum context length"), "{line}");
    assert_eq!(err["name"], "ContextOverflowError", "{err:#}");
    assert!(
        err["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("maximum context length"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_429_insufficient_quota_is_final() {
    let provider_message =
        "You exceeded your current quota, please check your plan and billing details.";
    // A retry hint must not turn a quota error into a retry.
    let fault = provider_error(
        429,
        &[("retry-after", "1")],
        provider_message,
        "insufficient_quota",
        "insufficient_quota",
    );
    let (line, err) = run_final_fault(fault, "out of money", &[]).await;
    assert!(line.contains("exceeded your current quota"), "{line}");
    assert_eq!(err["name"], "APIError", "{err:#}");
    assert_eq!(err["data"]["kind"], "quota_exceeded", "{err:#}");
    assert_eq!(err["data"]["statusCode"], 429, "{err:#}");
}

// ---------------------------------------------------------------------------------------------
// Ctrl-C during a running bash command.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_long_bash() {
    // A duration no other test uses, so `pgrep` sees only this run's processes.
    let needle = "sleep 31.37";
    let command = format!("{needle} & {needle}; wait");
    let script = Script::single(vec![
        Step::tool(
            "bash",
            json!({"command": command, "description": "sleep for a long time"}),
        ),
        Step::text("continued after the interruption"),
    ]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), false));
    let before = pgrep(needle);
    assert!(
        before.is_empty(),
        "stray processes before the test: {before:?}"
    );

    let mut run = Running::spawn(
        &project,
        &["run", "--format", "json", "sleep", "please"],
        &[],
    );
    let pid = run.child.id().expect("pid");
    wait_for("the bash part to be running", || {
        run.events().iter().any(|e| {
            e["type"] == "message.part.updated"
                && e["properties"]["part"]["tool"] == "bash"
                && e["properties"]["part"]["state"]["status"] == "running"
        })
    })
    .await;
    wait_for("both sleeps to start", || pgrep(needle).len() >= 2).await;
    let running_pids = pgrep(needle);
    let started = Instant::now();
    interrupt(pid);
    let status = tokio::time::timeout(Duration::from_secs(10), run.child.wait())
        .await
        .expect("troupe did not exit after SIGINT")
        .expect("wait");
    let took = started.elapsed();
    let _ = (&mut run.reader).await;
    let stderr = (&mut run.stderr).await.unwrap_or_default();
    eprintln!(
        "sigint_during_long_bash: exit {:?} after {took:?}; stderr: {stderr}",
        status.code()
    );
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(
        took <= Duration::from_secs(1),
        "exit took {took:?} after SIGINT"
    );

    // Every process of the bash command is gone (the group was killed).
    let left = wait_gone(needle, Duration::from_secs(1)).await;
    assert!(
        left.is_empty(),
        "processes of the interrupted bash survive: {left:?} (were {running_pids:?})"
    );

    let events = run.events();
    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 1, "{messages:#?}");
    let state = &tools[0]["state"];
    assert_eq!(state["status"], "error", "{:#}", tools[0]);
    assert_eq!(state["error"], "Tool execution aborted", "{:#}", tools[0]);
    assert_eq!(state["metadata"]["interrupted"], true, "{:#}", tools[0]);
    let call_id = tools[0]["callID"].as_str().expect("callID").to_string();

    let out = project
        .troupe(&["run", "--continue", "go", "on"], &[])
        .await;
    assert_success(&out, "continue after SIGINT");
    assert!(text(&out.stdout).contains("continued after the interruption"));
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    let results: Vec<Value> = req_messages(&reqs[1])
        .into_iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == call_id.as_str())
        .collect();
    assert_eq!(results.len(), 1, "{:#?}", req_messages(&reqs[1]));
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Anthropic protocol, tool-name repair, cost.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_provider_end_to_end() {
    let config = |base_url: &str| {
        json!({
            "model": "anth/claude-mock",
            "provider": {"anth": {
                "name": "Anthropic mock",
                "npm": "@ai-sdk/anthropic",
                "options": {"baseURL": base_url, "apiKey": "test-key"},
                "models": {"claude-mock": {
                    "name": "Claude mock",
                    "limit": {"context": 200000, "output": 8192},
                    "cost": prices_json()
                }}
            }}
        })
    };
    let project = Project::with_config(&config("http://127.0.0.1:1/v1"));
    std::fs::write(project.root.join("hello.txt"), "hello from the file\n").expect("file");
    let path = project.root.join("hello.txt").display().to_string();
    let script = Script::single(vec![
        // Step 0 (no cache): input 500, output 20.
        Step::tool("read", json!({"filePath": path})).with_usage(usage(500, 20, 0, 0)),
        // Step 1: prompt 1200 of which 1000 cache reads (wire: input_tokens 200,
        // cache_read_input_tokens 1000), output 30.
        Step::text("The file says hello.").with_usage(usage(1200, 30, 1000, 0)),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config(&server.base_url()).to_string());

    let out = project
        .troupe(&["run", "--format", "json", "read", "hello"], &[])
        .await;
    assert_success(&out, "anthropic run");
    let events = parse_events(&out.stdout);
    let sid = session_id_of(&events);

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    for r in &reqs {
        assert_eq!(r.path, "/v1/messages");
        assert!(
            r.headers.anthropic_version.is_some(),
            "no anthropic-version header: {:?}",
            r.headers
        );
        assert!(r.headers.x_api_key_present, "no x-api-key header");
        assert_eq!(r.status, 200);
    }
    // The tool result goes back as a `tool_result` block with the `tool_use` id.
    let msgs = req_messages(&reqs[1]);
    let tool_use_id = msgs
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_use")
        .and_then(|b| b["id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no tool_use block in {msgs:#?}"));
    let result = msgs
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result block in {msgs:#?}"));
    assert_eq!(result["tool_use_id"], tool_use_id.as_str());
    assert!(
        result.to_string().contains("hello from the file"),
        "tool_result lacks the file content: {result:#}"
    );

    let messages = project.session_messages(&sid).await;
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"]);
    // Step 0: (500·3 + 20·15) / 1e6 = (1500 + 300) / 1e6 = 0.0018
    // Step 1: exclusive input 1200 − 1000 = 200;
    //         (200·3 + 30·15 + 1000·0.3) / 1e6 = (600 + 450 + 300) / 1e6 = 0.00135
    let expected = [
        (
            0.0018,
            json!({"input": 500, "output": 20, "reasoning": 0, "cache": {"read": 0, "write": 0}}),
        ),
        (
            0.00135,
            json!({"input": 200, "output": 30, "reasoning": 0, "cache": {"read": 1000, "write": 0}}),
        ),
    ];
    for (m, (cost, tokens)) in messages[1..].iter().zip(expected) {
        assert_eq!(m["info"]["cost"].as_f64(), Some(cost), "{:#}", m["info"]);
        assert_eq!(m["info"]["tokens"], tokens, "{:#}", m["info"]);
        let finish = parts_of_type(m, "step-finish");
        assert_eq!(finish.len(), 1);
        assert_eq!(finish[0]["cost"].as_f64(), Some(cost), "{:#}", finish[0]);
        assert_eq!(finish[0]["tokens"], tokens, "{:#}", finish[0]);
    }
    assert_eq!(messages[1]["info"]["finish"], "tool-calls");
    assert_eq!(messages[2]["info"]["finish"], "stop");
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["state"]["status"], "completed");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_name_repair_and_invalid_args() {
    let project = Project::with_config(&config_json("http://127.0.0.1:1/v1", false));
    std::fs::write(project.root.join("repair.md"), "repaired read works\n").expect("file");
    let path = project.root.join("repair.md").display().to_string();
    let script = Script::single(vec![
        Step::tool("Read", json!({"filePath": path}))
            .with_tool("  glob ", json!({"pattern": "*.md"}))
            .with_tool("nosuchtool", json!({"x": 1}))
            .with_tool("read", Value::String("{not json".into())),
        Step::text("handled all four"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(&server.base_url(), false).to_string());
    let out = project
        .troupe(&["run", "--format", "json", "four", "calls"], &[])
        .await;
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    let sid = session_id_of(&events);
    let messages = project.session_messages(&sid).await;
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 4, "{tools:#?}");
    let by_id = |id: &str| {
        *tools
            .iter()
            .find(|t| t["callID"] == id)
            .unwrap_or_else(|| panic!("no tool part {id}: {tools:#?}"))
    };
    let read = by_id("call_0_0_0");
    assert_eq!(read["tool"], "read", "{read:#}");
    assert_eq!(read["state"]["status"], "completed", "{read:#}");
    assert!(
        read["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("repaired read works")
    );
    let glob = by_id("call_0_0_1");
    assert_eq!(glob["tool"], "glob", "{glob:#}");
    assert_eq!(glob["state"]["status"], "completed", "{glob:#}");
    assert!(
        glob["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("repair.md")
    );
    let unknown = by_id("call_0_0_2");
    assert_eq!(unknown["state"]["status"], "error", "{unknown:#}");
    let uerr = unknown["state"]["error"].as_str().unwrap_or("");
    assert!(uerr.contains("nosuchtool"), "{uerr}");
    for name in ["bash", "read", "glob", "grep"] {
        assert!(
            uerr.contains(name),
            "available tools not listed ({name}): {uerr}"
        );
    }
    let bad = by_id("call_0_0_3");
    assert_eq!(bad["state"]["status"], "error", "{bad:#}");
    let berr = bad["state"]["error"].as_str().unwrap_or("").to_lowercase();
    assert!(berr.contains("not valid json"), "{berr}");

    // The next request carries all four results, errors included.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    let results: Vec<(String, String)> = req_messages(&reqs[1])
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or("").to_string(),
                content_text(m),
            )
        })
        .collect();
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["call_0_0_0", "call_0_0_1", "call_0_0_2", "call_0_0_3"],
        "{results:#?}"
    );
    assert!(results[2].1.contains("nosuchtool"), "{results:#?}");
    assert!(
        results[3].1.to_lowercase().contains("not valid json"),
        "{results:#?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_stats() {
    let script = troupe_testkit::Script::new(vec![
        troupe_testkit::Conversation::new(vec![
            // Exclusive: input 2000 − 1500 = 500, output 100 − 40 = 60, reasoning 40, cache
            // read 1500. Cost: (500·3 + 60·15 + 40·15 + 1500·0.3) / 1e6
            //                = (1500 + 900 + 600 + 450) / 1e6 = 0.00345
            Step::text("first session answer").with_usage(usage(2000, 100, 1500, 40)),
        ])
        .matching("first session"),
        troupe_testkit::Conversation::new(vec![
            // (1000·3 + 10·15) / 1e6 = 3150 / 1e6 = 0.00315
            Step::text("second session answer").with_usage(usage(1000, 10, 0, 0)),
        ])
        .matching("second session"),
    ]);
    let server = start_mock(script).await;
    let project = Project::with_config(&config_json(&server.base_url(), true));
    let out = project
        .troupe(&["run", "--format", "json", "first session"], &[])
        .await;
    assert_success(&out, "first run");
    let first = session_id_of(&parse_events(&out.stdout));
    let out = project
        .troupe(&["run", "--format", "json", "second session"], &[])
        .await;
    assert_success(&out, "second run");
    let second = session_id_of(&parse_events(&out.stdout));
    assert_ne!(first, second);

    let out = project.troupe(&["stats", "--format", "json"], &[]).await;
    assert_success(&out, "stats");
    let stats: Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    let sessions = stats["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{stats:#}");
    let row = |key: &str| {
        sessions
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("no stats row for {key}: {stats:#}"))
            .clone()
    };
    let a = row(&first);
    assert_eq!(a["steps"], 1);
    assert_eq!(a["cost"].as_f64(), Some(0.00345), "{a:#}");
    assert_eq!(
        a["tokens"],
        json!({"input": 500, "output": 60, "reasoning": 40, "cache": {"read": 1500, "write": 0}}),
        "{a:#}"
    );
    let b = row(&second);
    assert_eq!(b["cost"].as_f64(), Some(0.00315), "{b:#}");
    assert_eq!(
        b["tokens"],
        json!({"input": 1000, "output": 10, "reasoning": 0, "cache": {"read": 0, "write": 0}}),
        "{b:#}"
    );
    // Per model and per day: one row each with the decimal sum 0.00345 + 0.00315 = 0.0066.
    let totals =
        json!({"input": 1500, "output": 70, "reasoning": 40, "cache": {"read": 1500, "write": 0}});
    let models = stats["models"].as_array().expect("models");
    assert_eq!(models.len(), 1, "{stats:#}");
    assert_eq!(models[0]["key"], "mock/mock-model");
    assert_eq!(models[0]["steps"], 2);
    assert_eq!(models[0]["cost"].as_f64(), Some(0.0066), "{:#}", models[0]);
    assert_eq!(models[0]["tokens"], totals);
    let days = stats["days"].as_array().expect("days");
    assert!(!days.is_empty() && days.len() <= 2, "{stats:#}");
    let day_cost: f64 = days.iter().filter_map(|d| d["cost"].as_f64()).sum();
    assert!((day_cost - 0.0066).abs() < 1e-12, "{stats:#}");
    let today = utc_today();
    assert!(
        days.iter()
            .any(|d| d["key"].as_str() == Some(today.as_str())),
        "no row for today {today}: {stats:#}"
    );
    assert_eq!(stats["total"]["cost"].as_f64(), Some(0.0066), "{stats:#}");
    assert_eq!(stats["total"]["tokens"], totals);
    assert_eq!(stats["total"]["steps"], 2);
    server.shutdown().await;
}

/// Today's UTC date as `YYYY-MM-DD`.
fn utc_today() -> String {
    troupe_session::iso_time(now_ms() as i64)[..10].to_string()
}
