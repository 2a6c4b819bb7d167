//! End-to-end tests of the `troupe` binary against the scripted provider (`troupe-testkit`).
//!
//! Each test gets its own temp project directory (with a `troupe.json` pointing at its own
//! `MockServer`), its own SQLite store and an empty global config directory, so tests run in
//! parallel without sharing anything.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_testkit::{Fault, Script, Step};

mod common;
use common::*;

fn contains_file(dir: &Path, name: &str) -> bool {
    dir.join(name).is_file()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_step_session() {
    // The project files are created before the mock so the script can use absolute paths.
    let project = Project::new("http://127.0.0.1:1/v1");

    let root = project.root.display().to_string();
    std::fs::write(project.root.join("notes.md"), "TODO: fix it\n").expect("notes.md");
    let notes = format!("{root}/notes.md");
    let out_file = format!("{root}/out.txt");
    let written = "written by troupe\nsecond line\n";
    let final_text = "All six steps are done.";
    let script = Script::single(vec![
        Step::tool(
            "bash",
            json!({"command": "ls", "description": "list files"}),
        ),
        Step::tool("read", json!({"filePath": notes})),
        Step::tool("write", json!({"filePath": out_file, "content": written})),
        Step::tool("glob", json!({"pattern": "**/*.md"})),
        Step::tool("grep", json!({"pattern": "TODO"})),
        Step::text(final_text),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());

    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", "please", "work"], &[])
        .await;
    let elapsed = started.elapsed();
    assert_success(&out, "troupe run");
    eprintln!("six_step_session: run took {elapsed:?}");

    // The write tool wrote the file.
    assert!(contains_file(&project.root, "out.txt"), "out.txt missing");
    assert_eq!(
        std::fs::read_to_string(project.root.join("out.txt")).expect("read out.txt"),
        written
    );

    // Every stdout line is a JSON bus event of this session.
    let events = parse_events(&out.stdout);
    assert!(!events.is_empty(), "no events printed");
    let sid = session_id_of(&events);
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for expected in ["message.updated", "message.part.updated", "session.status"] {
        assert!(
            types.contains(&expected),
            "no {expected} event in {types:?}"
        );
    }

    // Stored session: 1 user + 6 assistant messages.
    let doc = project.show(&sid).await;
    assert_eq!(doc["info"]["id"], sid.as_str());
    let messages = doc["messages"].as_array().expect("messages").clone();
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "assistant",
            "assistant",
            "assistant",
            "assistant",
            "assistant"
        ]
    );
    for (i, m) in messages.iter().enumerate().skip(1) {
        assert_eq!(
            parts_of_type(m, "step-start").len(),
            1,
            "assistant {i} step-start: {m:#}"
        );
        assert_eq!(
            parts_of_type(m, "step-finish").len(),
            1,
            "assistant {i} step-finish: {m:#}"
        );
        assert!(
            m["info"]["error"].is_null(),
            "assistant {i} has an error: {m:#}"
        );
        let parts = m["parts"].as_array().expect("parts");
        assert_eq!(
            parts.first().map(|p| &p["type"]),
            Some(&json!("step-start")),
            "assistant {i} starts with step-start"
        );
        assert_eq!(
            parts.last().map(|p| &p["type"]),
            Some(&json!("step-finish")),
            "assistant {i} ends with step-finish"
        );
    }
    let tools = all_parts_of_type(&messages, "tool");
    let names: Vec<&str> = tools.iter().filter_map(|p| p["tool"].as_str()).collect();
    assert_eq!(names, ["bash", "read", "write", "glob", "grep"]);
    for t in &tools {
        assert_eq!(
            t["state"]["status"], "completed",
            "tool part not completed: {t:#}"
        );
        assert!(t["callID"].is_string(), "tool part without callID: {t:#}");
    }
    for (i, needle, tool) in [
        (1, "TODO: fix it", "read"),
        (3, "notes.md", "glob"),
        (4, "notes.md", "grep"),
    ] {
        assert!(
            tools[i]["state"]["output"]
                .as_str()
                .unwrap_or("")
                .contains(needle),
            "{tool} output: {:#}",
            tools[i]
        );
    }
    let last = messages.last().expect("last message");
    let last_texts: Vec<&str> = parts_of_type(last, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(last_texts, [final_text]);
    assert_eq!(last["info"]["finish"], "stop");

    // Human view names the tools.
    let out = project.troupe(&["session", "show", &sid], &[]).await;
    assert_success(&out, "session show (plain)");
    let plain = text(&out.stdout);
    for name in ["bash", "read", "write", "glob", "grep"] {
        assert!(
            plain.contains(&format!("[tool {name} ")),
            "plain show lacks tool {name}:\n{plain}"
        );
    }
    assert!(
        plain.contains(final_text),
        "plain show lacks the final text:\n{plain}"
    );

    // The session is listed.
    let sessions = project.sessions().await;
    assert!(
        sessions.iter().any(|s| s["id"] == sid.as_str()),
        "session {sid} not listed: {sessions:#?}"
    );
    // The session's file-change summary counts the written file (two new lines).
    let listed = sessions
        .iter()
        .find(|s| s["id"] == sid.as_str())
        .expect("listed");
    assert_eq!(listed["summary"]["files"], 1, "{listed:#}");
    assert_eq!(listed["summary"]["additions"], 2, "{listed:#}");
    assert_eq!(
        listed["summary"]["diffs"][0]["file"],
        out_file.as_str(),
        "{listed:#}"
    );

    // The provider saw 6 requests; request k+1 carries the tool result of request k.
    let reqs = completions(&server);
    assert_eq!(
        reqs.len(),
        6,
        "requests: {:#?}",
        reqs.iter().map(|r| (r.seq, r.step)).collect::<Vec<_>>()
    );
    for (k, tool) in tools.iter().enumerate() {
        let call_id = tool["callID"].as_str().expect("callID");
        let next = req_messages(&reqs[k + 1]);
        let result = next
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .unwrap_or_else(|| {
                panic!(
                    "request {} lacks the tool result {call_id}: {next:#?}",
                    k + 1
                )
            });
        let output = tool["state"]["output"].as_str().unwrap_or("");
        assert!(
            content_text(result).contains(output.lines().next().unwrap_or("")),
            "tool result in request {} does not carry the output of {call_id}",
            k + 1
        );
        // And the request before does not have it yet.
        assert!(
            !req_messages(&reqs[k])
                .iter()
                .any(|m| m["role"] == "tool" && m["tool_call_id"] == call_id),
            "request {k} already has the result of {call_id}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_and_timed_out_tools_become_error_parts() {
    let panic_message = "kaboom-7f3a";
    let (server, project) = mock_project(vec![
        Step::tool("test_panic", json!({"message": panic_message}))
            .with_tool("test_sleep", json!({"ms": 30000})),
        Step::text("recovered after the tool errors"),
    ])
    .await;

    let started = Instant::now();
    let out = project
        .troupe(
            &["run", "--format", "json", "break", "things"],
            &[("TROUPE_TOOL_TIMEOUT_MS", "500")],
        )
        .await;
    let elapsed = started.elapsed();
    eprintln!("panicking_and_timed_out_tools: run took {elapsed:?}");
    assert_success(&out, "troupe run");
    assert!(elapsed < Duration::from_secs(10), "run took {elapsed:?}");

    let sid = session_id_of(&parse_events(&out.stdout));
    let doc = project.show(&sid).await;
    let messages = doc["messages"].as_array().expect("messages").clone();
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 2, "tool parts: {tools:#?}");
    let by_name = |n: &str| {
        *tools
            .iter()
            .find(|p| p["tool"] == n)
            .unwrap_or_else(|| panic!("no {n} part"))
    };
    let panicked = by_name("test_panic");
    let slept = by_name("test_sleep");
    assert_eq!(panicked["state"]["status"], "error", "{panicked:#}");
    assert_eq!(slept["state"]["status"], "error", "{slept:#}");
    let perr = panicked["state"]["error"].as_str().unwrap_or("");
    assert!(
        perr.contains(panic_message),
        "panic error does not mention the panic message: {perr}"
    );
    let serr = slept["state"]["error"]
        .as_str()
        .unwrap_or("")
        .to_lowercase();
    assert!(
        serr.contains("timeout") || serr.contains("timed out"),
        "sleep error does not mention a timeout: {serr}"
    );

    let last = messages.last().expect("last");
    assert_eq!(role(last), "assistant");
    let texts: Vec<&str> = parts_of_type(last, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, ["recovered after the tool errors"]);

    // The model was told about both errors.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    let tool_msgs: Vec<Value> = req_messages(&reqs[1])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(
        tool_msgs.len(),
        2,
        "second request tool messages: {tool_msgs:#?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_keeps_history() {
    let (server, project) = mock_project(vec![
        Step::text("first answer"),
        Step::text("second answer"),
    ])
    .await;

    let out = project.troupe(&["run", "first", "prompt"], &[]).await;
    assert_success(&out, "first run");
    assert!(
        text(&out.stdout).contains("first answer"),
        "stdout: {}",
        text(&out.stdout)
    );
    let first = project.only_session().await;
    let sid = first["id"].as_str().expect("id").to_string();

    let out = project
        .troupe(&["run", "--continue", "second", "prompt"], &[])
        .await;
    assert_success(&out, "continued run");
    assert!(
        text(&out.stdout).contains("second answer"),
        "stdout: {}",
        text(&out.stdout)
    );

    // Still one session, now with both turns.
    let again = project.only_session().await;
    assert_eq!(again["id"], sid.as_str());
    let doc = project.show(&sid).await;
    let messages = doc["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);

    // The second run's first request carries the first turn.
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    let convo = conversation(&reqs[1]);
    let expect = [
        ("user", "first prompt"),
        ("assistant", "first answer"),
        ("user", "second prompt"),
    ];
    assert_eq!(convo.len(), expect.len(), "conversation: {convo:#?}");
    for ((r, t), (er, et)) in convo.iter().zip(expect) {
        assert_eq!(r, er, "conversation: {convo:#?}");
        assert!(t.contains(et), "{r} message {t:?} should contain {et:?}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_bad_config_names_file_and_line() {
    let (server, project) = mock_project(vec![Step::text("never")]).await;
    // Line 3 has the error (a bare word where a value belongs).
    project.write_config("{\n  \"model\": \"mock/mock-model\",\n  \"provider\": nope\n}\n");
    let out = project.troupe(&["run", "hello"], &[]).await;
    let line = assert_one_line_failure(&out, "bad config");
    assert!(line.contains("troupe.json"), "no file name: {line}");
    assert!(
        line.contains("troupe.json:3") || line.contains("line 3"),
        "no line number 3: {line}"
    );
    assert!(
        completions(&server).is_empty(),
        "a request was sent despite the bad config"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_unreachable_provider_keeps_user_message() {
    let url = "http://127.0.0.1:1/v1";
    let project = Project::new(url);
    let started = Instant::now();
    let out = project
        .troupe(
            &["run", "are", "you", "there"],
            &[("TROUPE_MAX_RETRIES", "0")],
        )
        .await;
    eprintln!("unreachable provider: run took {:?}", started.elapsed());
    let line = assert_one_line_failure(&out, "unreachable provider");
    let lower = line.to_lowercase();
    assert!(
        lower.contains("127.0.0.1:1") || lower.contains("connect"),
        "line names neither URL nor connect: {line}"
    );

    let session = project.only_session().await;
    let sid = session["id"].as_str().expect("id");
    // `session list` marks the failed session (JSON: lastError; table: a STATUS column).
    assert_eq!(session["lastError"]["name"], "APIError", "{session}");
    let out = project.troupe(&["session", "list"], &[]).await;
    assert_success(&out, "session list");
    let table = text(&out.stdout);
    assert!(
        table.lines().next().unwrap_or("").contains("STATUS"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with(sid))
        .expect("the session's row");
    assert!(row.contains("failed: APIError"), "{table}");
    let doc = project.show(sid).await;
    let messages = doc["messages"].as_array().expect("messages");
    let user = messages
        .iter()
        .find(|m| role(m) == "user")
        .expect("user message stored");
    let texts: Vec<&str> = parts_of_type(user, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, ["are you there"]);
    // The failed step is recorded too, with its error.
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant"], "{doc:#}");
    assert_eq!(
        messages[1]["info"]["error"]["name"], "APIError",
        "{:#}",
        messages[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_unknown_model_is_named() {
    let (server, project) = mock_project(vec![Step::text("never")]).await;
    let out = project
        .troupe(&["run", "--model", "nosuch/x", "hello"], &[])
        .await;
    let line = assert_one_line_failure(&out, "unknown model");
    assert!(line.contains("nosuch"), "model not named: {line}");
    assert!(
        completions(&server).is_empty(),
        "a request was sent for an unknown model"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_malformed_chunk_keeps_failed_message() {
    let (server, project) = mock_project(vec![
        Step::text("this answer will be cut by a malformed chunk")
            .with_chunk_size(4)
            .with_fault(Fault::malformed_after(2)),
    ])
    .await;
    let out = project
        .troupe(
            &["run", "--format", "json", "stream", "please"],
            &[("TROUPE_MAX_RETRIES", "0")],
        )
        .await;
    let line = assert_one_line_failure(&out, "malformed chunk");
    let events = parse_events(&out.stdout);
    assert!(
        events.iter().any(|e| e["type"] == "session.error"),
        "no session.error event: {events:#?}"
    );
    let lower = line.to_lowercase();
    assert!(
        lower.contains("malformed")
            || lower.contains("not json")
            || lower.contains("parse")
            || lower.contains("invalid json"),
        "line does not mention the malformed chunk: {line}"
    );

    let (_, messages) = project.messages().await;
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant"], "{messages:#?}");
    let user_texts: Vec<&str> = text_parts(&messages[0]);
    assert_eq!(user_texts, ["stream please"]);
    let err = &messages[1]["info"]["error"];
    assert!(
        err.is_object(),
        "assistant message has no error: {:#}",
        messages[1]
    );
    assert!(err["name"].is_string(), "error without name: {err}");
    assert_eq!(err["name"], "APIError", "{err}");
    // The text streamed before the bad chunk (role chunk, then "this") is kept.
    let partial: Vec<&str> = text_parts(&messages[1]);
    assert_eq!(
        partial,
        ["this"],
        "partial text before the malformed chunk: {:#}",
        messages[1]
    );
    assert!(
        messages[1]["info"]["time"]["completed"].is_number(),
        "failed assistant message not completed: {:#}",
        messages[1]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_then_success() {
    let (server, project) = mock_project(vec![
        Step::text("made it after a retry").with_fault(Fault::rate_limited(1)),
    ])
    .await;
    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", "retry", "me"], &[])
        .await;
    let elapsed = started.elapsed();
    eprintln!("retry_then_success: run took {elapsed:?}");
    assert_success(&out, "troupe run");
    assert!(
        elapsed >= Duration::from_millis(900),
        "retry-after 1 s was not honoured ({elapsed:?})"
    );

    let events = parse_events(&out.stdout);
    let retry_at = events
        .iter()
        .position(|e| e["type"] == "session.status" && e["properties"]["status"]["type"] == "retry")
        .unwrap_or_else(|| panic!("no retry status event: {events:#?}"));
    let retry = &events[retry_at]["properties"]["status"];
    assert_eq!(retry["attempt"], 1, "{retry}");
    assert!(retry["message"].is_string(), "{retry}");
    assert!(retry["next"].is_number(), "{retry}");
    let idle_at = events
        .iter()
        .rposition(|e| {
            e["type"] == "session.idle"
                || (e["type"] == "session.status" && e["properties"]["status"]["type"] == "idle")
        })
        .expect("an idle event");
    assert!(retry_at < idle_at, "retry event after the final idle");

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].status, 429);
    assert_eq!(reqs[1].status, 200);
    let waited = reqs[1].start_ms.saturating_sub(reqs[0].start_ms);
    assert!(
        waited >= 900,
        "second attempt only {waited} ms after the first"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_flag_export_and_models() {
    let (server, project) = mock_project(vec![Step::text("one"), Step::text("two")]).await;

    let out = project.troupe(&["run", "start", "here"], &[]).await;
    assert_success(&out, "first run");
    let sid = project.only_session().await["id"]
        .as_str()
        .expect("id")
        .to_string();

    // Continue by explicit id (a unique prefix is accepted too, per the CLI help).
    let out = project
        .troupe(&["run", "--session", &sid, "more"], &[])
        .await;
    assert_success(&out, "run --session");
    assert!(
        text(&out.stdout).contains("two"),
        "stdout: {}",
        text(&out.stdout)
    );
    project.only_session().await;

    // Export is one JSON document with both turns.
    let out = project.troupe(&["session", "export", &sid], &[]).await;
    assert_success(&out, "session export");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("export JSON");
    assert_eq!(doc["info"]["id"], sid.as_str());
    assert_eq!(doc["messages"].as_array().map(Vec::len), Some(4));

    // An unknown session id is one line naming it.
    let out = project
        .troupe(&["run", "--session", "ses_doesnotexist", "hi"], &[])
        .await;
    let line = assert_one_line_failure(&out, "unknown session");
    assert!(line.contains("ses_doesnotexist"), "{line}");
    let out = project
        .troupe(&["session", "show", "ses_doesnotexist"], &[])
        .await;
    assert_one_line_failure(&out, "show unknown session");

    // The configured model is in the catalog.
    let out = project.troupe(&["models"], &[]).await;
    assert_success(&out, "models");
    assert!(
        text(&out.stdout).contains("mock/mock-model"),
        "models:\n{}",
        text(&out.stdout)
    );

    // An empty prompt is refused before anything is stored.
    let out = project.troupe(&["run"], &[]).await;
    assert_one_line_failure(&out, "empty prompt");
    assert_eq!(completions(&server).len(), 2);
    server.shutdown().await;
}

/// Sends Ctrl-C to the running `troupe` `child` and waits (at most 10 s) for it to exit,
/// which it must do with code 130 (interrupted); its output. `what` names the case in the
/// log.
async fn interrupt_run(child: tokio::process::Child, what: &str) -> std::process::Output {
    let started = Instant::now();
    interrupt(child.id().expect("pid"));
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("troupe did not exit after Ctrl-C")
        .expect("wait");
    eprintln!(
        "ctrl_c ({what}): exited {:?} after {:?}; stderr: {}",
        out.status.code(),
        started.elapsed(),
        text(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        text(&out.stderr)
    );
    out
}

/// The texts of the text parts of stored message `m`, in order.
fn text_parts(m: &Value) -> Vec<&str> {
    parts_of_type(m, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_hung_stream_aborts_and_keeps_partial_text() {
    let (server, project) = mock_project(vec![
        Step::text("partial words then silence")
            .with_chunk_size(8)
            .with_fault(Fault::hang_after(2)),
    ])
    .await;
    let child = project.spawn(&["run", "hang", "now"], &[]);
    wait_for("the request", || !completions(&server).is_empty()).await;
    // Let the two chunks reach the client and the store.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = interrupt_run(child, "stream").await;
    assert!(
        text(&out.stderr).contains("aborted"),
        "stderr: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("partial "),
        "streamed text not printed: {}",
        text(&out.stdout)
    );

    let (_, messages) = project.messages().await;
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant"], "{messages:#?}");
    assert_eq!(
        messages[1]["info"]["error"]["name"], "MessageAbortedError",
        "{:#}",
        messages[1]
    );
    let partial: Vec<&str> = text_parts(&messages[1]);
    assert_eq!(partial, ["partial "], "{:#}", messages[1]);
    // The client dropped the hung response.
    wait_for("the hung response to end", || {
        completions(&server)[0].end_ms.is_some()
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_tool_marks_it_interrupted() {
    let server = sleeping_tool_mock().await;
    let project = Project::new(&server.base_url());
    let child = project.spawn(&["run", "sleep", "a", "while"], &[]);
    wait_tool_started(&server).await;
    interrupt_run(child, "tool").await;

    let (_, messages) = project.messages().await;
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 1, "{messages:#?}");
    assert_eq!(tools[0]["state"]["status"], "error", "{:#}", tools[0]);
    assert_eq!(
        tools[0]["state"]["metadata"]["interrupted"], true,
        "{:#}",
        tools[0]
    );
    assert_eq!(
        completions(&server).len(),
        1,
        "the loop went on after the abort"
    );

    // The aborted session can be continued: the next request carries the interrupted call's
    // result so the history stays valid for the provider.
    let out = project
        .troupe(&["run", "--continue", "go", "on"], &[])
        .await;
    assert_success(&out, "continue after abort");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    let call_id = tools[0]["callID"].as_str().expect("callID");
    assert!(
        req_messages(&reqs[1])
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == call_id),
        "continued request lacks the result of the interrupted call: {:#?}",
        req_messages(&reqs[1])
    );
    server.shutdown().await;
}

/// With no model configured and no API key, `troupe run` uses the `local` provider when a
/// server answers at its base URL (the model id comes from its `/models` list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_model_configured_uses_the_local_server() {
    let server = mock(vec![Step::text("hello from local")]).await;
    let project = Project::new("http://127.0.0.1:1/v1");
    project.write_config(
        &json!({"provider": {"local": {"options": {"baseURL": server.base_url()}}}}).to_string(),
    );
    let out = project.troupe(&["run", "hi"], &[]).await;
    assert_success(&out, "run against local");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello from local"));
    let reqs = server.requests();
    let chat: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(chat.len(), 1, "one step");
    assert_eq!(
        chat[0].body["model"], "mock-model",
        "the model listed by the local server"
    );
    server.shutdown().await;
}

/// With no model configured, no API key and no local server, the error says in one line how
/// to configure a provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_model_and_no_local_server_explains_how_to_configure() {
    let project = Project::new("http://127.0.0.1:1/v1");
    project.write_config(
        &json!({"provider": {"local": {"options": {"baseURL": "http://127.0.0.1:1/v1"}}}})
            .to_string(),
    );
    let out = project.troupe(&["run", "hi"], &[]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    for needle in [
        "no model configured",
        "--model",
        "OPENAI_API_KEY",
        "llama.cpp",
    ] {
        assert!(
            lines[0].contains(needle),
            "missing {needle:?} in {:?}",
            lines[0]
        );
    }
}

/// `run --session` with an id nothing has: "session not found" comes first, before the
/// missing model is reported (the id is what the user got wrong), with and without a store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_session_is_reported_before_a_missing_model() {
    let project = Project::new("http://127.0.0.1:1/v1");
    project.write_config(
        &json!({"provider": {"local": {"options": {"baseURL": "http://127.0.0.1:1/v1"}}}})
            .to_string(),
    );
    let out = project
        .troupe(&["run", "--session", "ses_nope", "hi"], &[])
        .await;
    let line = assert_one_line_failure(&out, "--session with no store");
    assert_eq!(
        line,
        format!(
            "troupe: session not found: ses_nope (nothing has run with the store at {} yet)",
            project.db().display()
        )
    );
    // With a store holding another session, the id is not found.
    let server = mock(vec![Step::text("first")]).await;
    let seeded = Project::new(&server.base_url());
    let out = seeded.troupe(&["run", "hi"], &[]).await;
    assert_success(&out, "seed a session");
    let db = seeded.db();
    let db_arg = db.to_str().expect("utf-8");
    let out = project
        .troupe(&["--db", db_arg, "run", "--session", "ses_nope", "hi"], &[])
        .await;
    let line = assert_one_line_failure(&out, "--session unknown id");
    assert!(
        line.contains("ses_nope") && !line.contains("model"),
        "{line}"
    );
    server.shutdown().await;
}

/// `firstStep` options steer only the first request of a turn: `tool_choice`/`stop` go into
/// its body, `prefill` becomes a trailing assistant message, and `toolSchema` is merged into
/// that request's tool schema as a JSON Merge Patch (here an `enum` of the one real path,
/// which llama.cpp compiles into the grammar of the call's arguments, and `null` dropping an
/// optional property). The follow-up request carries none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_step_options_constrain_only_the_first_request() {
    let project = Project::new("http://127.0.0.1:1/v1");
    std::fs::write(project.root.join("NOTES.md"), "The codename is Bluebird.\n").expect("notes");
    let script = Script::single(vec![
        Step::tool("read", json!({"filePath": "NOTES.md"})),
        Step::text("The codename is Bluebird."),
    ]);
    let server = start_mock(script).await;
    let mut config = mock_config(&server.base_url());
    config["agent"] = json!({"demo": {
        "mode": "primary",
        "permission": {"*": "deny", "read": "allow"},
        "options": {"firstStep": {
            "tool_choice": "required",
            "stop": ["</tool_call>"],
            "prefill": "<tool_call>\n",
            "toolSchema": {"read": {
                "properties": {"filePath": {"enum": ["NOTES.md"]}, "offset": null},
                "additionalProperties": false
            }}
        }}
    }});
    project.write_config(&config.to_string());
    let out = project
        .troupe(&["run", "--agent", "demo", "What is the codename?"], &[])
        .await;
    assert_success(&out, "run with firstStep");
    assert!(
        text(&out.stdout).contains("Bluebird"),
        "{}",
        text(&out.stdout)
    );

    let reqs = completions(&server);
    assert_eq!(
        reqs.len(),
        2,
        "a tool step and an answer step; stderr: {}",
        text(&out.stderr)
    );
    let read_schema = |body: &Value| -> Value {
        body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["function"]["name"] == "read")
            .expect("read tool")["function"]["parameters"]
            .clone()
    };
    let first = &reqs[0].body;
    assert_eq!(first["tool_choice"], "required");
    assert_eq!(first["stop"], json!(["</tool_call>"]));
    let params = read_schema(first);
    assert_eq!(
        params["properties"]["filePath"]["enum"],
        json!(["NOTES.md"])
    );
    assert_eq!(
        params["properties"]["filePath"]["type"], "string",
        "the rest of the schema is kept"
    );
    assert!(params["required"].as_array().is_some_and(|r| !r.is_empty()));
    let props = params["properties"].as_object().expect("properties");
    assert!(
        !props.contains_key("offset") && props.contains_key("limit"),
        "null removes a property (JSON Merge Patch), others stay: {props:?}"
    );
    assert_eq!(params["additionalProperties"], false);
    let msgs = req_messages(&reqs[0]);
    let last = msgs.last().expect("messages");
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"], "<tool_call>\n");
    assert!(first.get("toolSchema").is_none() && first.get("firstStep").is_none());

    let second = &reqs[1].body;
    assert!(second.get("tool_choice").is_none() && second.get("stop").is_none());
    let params = read_schema(second);
    assert!(params["properties"]["filePath"].get("enum").is_none());
    assert!(params["properties"].get("offset").is_some());
    let msgs = req_messages(&reqs[1]);
    assert_eq!(msgs.last().expect("messages")["role"], "tool");
    server.shutdown().await;
}
