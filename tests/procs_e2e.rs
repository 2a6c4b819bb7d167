//! End-to-end tests of process ownership, signals and tool edge cases through `troupe run`
//! against the scripted provider (issues 12.4, 12.5, 13.3, 13.4, 24.6, 24.8):
//! - SIGKILL of `troupe run` during a long bash call leaves no process of the call behind,
//!   and the session loaded afterwards says the call's outcome is unknown;
//! - SIGTERM aborts the turn like Ctrl-C and exits 143; a Ctrl-C in the first instants exits
//!   130 (not death by signal);
//! - edit with an empty oldString on an existing file fails and keeps the file;
//! - a long last line of bash output reaches the model as its tail;
//! - terminal escapes in a provider error are not printed.
//!
//! Same isolation as the other end-to-end files (`tests/common/project.rs`), plus a short
//! session lease (a killed run's lease expires quickly, so the next run takes over) and a tool
//! output dir in the test's home.

use std::time::Duration;

use serde_json::json;
use troupe_testkit::{Fault, MockServer, Script, Step};

mod common;
use common::*;

/// A project for `base_url` with a 1.5 s session lease and the tool output dir in its home.
/// `troupe run` started in a [`procs_project`] whose model runs `command` in bash (its
/// processes found by `needle`; none may run before) and then answers "after the crash".
async fn run_sleeping(needle: &str, command: &str) -> (MockServer, Project, tokio::process::Child) {
    let script = Script::single(vec![
        Step::tool("bash", json!({"command": command, "description": "sleep"})),
        Step::text("after the crash"),
    ]);
    let server = start_mock(script).await;
    let project = procs_project(&server.base_url());
    assert!(pgrep(needle).is_empty(), "stray processes before the test");
    let child = project.spawn(&["run", "sleep", "please"], &[]);
    (server, project, child)
}

fn procs_project(base_url: &str) -> Project {
    let p = Project::new(base_url).with_env("TROUPE_LEASE_TTL_MS", "1500");
    let out = p.home.path().join("out");
    p.with_env("TROUPE_TOOL_OUTPUT_DIR", out)
}

/// Whether `pid` has handlers for both SIGINT and SIGTERM (bits 2 and 15 of `SigCgt` in
/// `/proc/<pid>/status`): troupe installs them first thing in `main`.
fn catches_int_and_term(pid: u32) -> bool {
    const INT_AND_TERM: u64 = (1 << (2 - 1)) | (1 << (15 - 1));
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & INT_AND_TERM == INT_AND_TERM)
}

/// Issue 12.4 and 12.5: `kill -9` of `troupe run` during a long bash call takes the call's
/// processes with it (also one that left the process group), and the session loaded after
/// the crash says the bash outcome is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_run_leaves_no_bash_process() {
    // A duration no other test uses, so pgrep sees only this run's processes.
    let needle = "sleep 41.27";
    let command = format!("setsid {needle} & {needle} & {needle}; wait");
    let (server, project, child) = run_sleeping(needle, &command).await;
    let pid = child.id().expect("pid");
    wait_for("three sleeps", || pgrep(needle).len() >= 3).await;
    let running = pgrep(needle);
    signal(pid, "-KILL");
    let out = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output())
        .await
        .expect("troupe did not die")
        .expect("wait");
    assert_eq!(out.status.code(), None, "killed by the signal");
    let left = wait_gone(needle, Duration::from_secs(10)).await;
    assert!(
        left.is_empty(),
        "processes of the bash call survived kill -9 of troupe: {left:?} (were {running:?})"
    );

    // The next run sweeps the part: the outcome is unknown, not "aborted".
    let out = project
        .troupe(&["run", "--continue", "go", "on"], &[])
        .await;
    assert_success(&out, "continue after the crash");
    let sid = project.only_session_id().await;
    let tools = tool_parts(&project.session_messages(&sid).await);
    assert_eq!(tools.len(), 1, "{tools:#?}");
    let state = &tools[0]["state"];
    assert_eq!(state["status"], "error", "{state:#}");
    assert!(
        state["error"]
            .as_str()
            .is_some_and(|e| e.contains("outcome is unknown")),
        "{state:#}"
    );
    assert_eq!(state["metadata"]["outcome"], "unknown", "{state:#}");
    // The loader looked for the call's processes by their mark: the watchdog had already
    // stopped them all.
    assert!(
        state["error"]
            .as_str()
            .is_some_and(|e| e.ends_with("None of the processes it started is still running.")),
        "{state:#}"
    );
    assert_eq!(state["metadata"]["survivorsStopped"], 0, "{state:#}");
    server.shutdown().await;
}

/// Issue 12.4, second line of defence: if the watchdog is gone too (killed with troupe),
/// the process that loads the session next finds the survivors by their mark, stops them and
/// says so in the swept part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_stops_survivors_when_the_watchdog_died_too() {
    let needle = "sleep 41.29";
    let command = format!("setsid {needle} & {needle}; wait");
    let (server, project, child) = run_sleeping(needle, &command).await;
    let pid = child.id().expect("pid");
    wait_for("two sleeps", || pgrep(needle).len() >= 2).await;
    let watchdog = pgrep(&format!("troupe-watchdog {pid}."));
    assert_eq!(watchdog.len(), 1, "one watchdog per troupe process");
    signal(watchdog[0].parse().expect("pid"), "-KILL");
    signal(pid, "-KILL");
    let _ = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output()).await;
    // Nothing stopped them this time: the shell and both sleeps live on.
    let survivors = pgrep(needle).len();
    assert!(survivors >= 2, "the sleeps should have survived");

    let out = project
        .troupe(&["run", "--continue", "go", "on"], &[])
        .await;
    assert_success(&out, "continue after the crash");
    let left = pgrep(needle);
    for p in &left {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", p])
            .status();
    }
    assert!(left.is_empty(), "the loader left survivors: {left:?}");
    let sid = project.only_session_id().await;
    let tools = tool_parts(&project.session_messages(&sid).await);
    let state = &tools[0]["state"];
    assert!(
        state["error"]
            .as_str()
            .is_some_and(|e| e.ends_with(&format!(
                "{survivors} process(es) it started were still running and have been stopped."
            ))),
        "{state:#}"
    );
    assert_eq!(
        state["metadata"]["survivorsStopped"], survivors,
        "{state:#}"
    );
    server.shutdown().await;
}

/// Issue 24.6: SIGTERM during a tool aborts the turn cleanly (no part left running) and
/// exits 143.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_aborts_the_turn_and_exits_143() {
    let server = sleeping_tool_mock().await;
    let project = procs_project(&server.base_url());
    let child = project.spawn(&["run", "--format", "json", "sleep", "a", "while"], &[]);
    let pid = child.id().expect("pid");
    wait_tool_started(&server).await;
    signal(pid, "-TERM");
    let out = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output())
        .await
        .expect("troupe did not exit after SIGTERM")
        .expect("wait");
    assert_eq!(
        out.status.code(),
        Some(143),
        "stderr: {}",
        text(&out.stderr)
    );
    let sid = project.only_session_id().await;
    let messages = project.session_messages(&sid).await;
    let tools = tool_parts(&messages);
    assert_eq!(tools.len(), 1, "{messages:#?}");
    assert_eq!(tools[0]["state"]["status"], "error", "{:#}", tools[0]);
    assert_eq!(tools[0]["state"]["metadata"]["interrupted"], true);
    let last = messages.last().expect("messages");
    assert_eq!(
        last["info"]["error"]["name"], "MessageAbortedError",
        "{last:#}"
    );
    assert!(last["info"]["time"]["completed"].is_number(), "{last:#}");
    assert_eq!(completions(&server).len(), 1, "the loop went on");
    server.shutdown().await;
}

/// Issue 24.6: a Ctrl-C (or SIGTERM) in the first instants, as soon as the handlers are
/// installed, ends with 130 (143), never with death by the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_signal_exits_with_a_code() {
    let server = sleeping_tool_mock().await;
    let project = procs_project(&server.base_url());
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        for delay_ms in [0u64, 10, 30] {
            let child = project.spawn(&["run", "hello"], &[]);
            let pid = child.id().expect("pid");
            wait_for("the signal handlers", || catches_int_and_term(pid)).await;
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            signal(pid, sig);
            let out = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output())
                .await
                .expect("troupe did not exit")
                .expect("wait");
            assert_eq!(
                out.status.code(),
                Some(code),
                "{sig} after {delay_ms} ms: {:?}, stderr: {}",
                out.status,
                text(&out.stderr)
            );
        }
    }
    server.shutdown().await;
}

/// Issue 13.3 end to end: edit with an empty oldString on an existing file is an error
/// result and the file is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_with_empty_old_string_keeps_the_file() {
    let script = Script::single(vec![
        Step::tool(
            "edit",
            json!({"filePath": "keep.txt", "oldString": "", "newString": "appended\n"}),
        ),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let project = procs_project(&server.base_url());
    std::fs::write(project.root.join("keep.txt"), "keep me\nsecond line\n").unwrap();
    let out = project
        .troupe(&["run", "--permission", "allow", "append", "please"], &[])
        .await;
    assert_success(&out, "run");
    assert_eq!(
        std::fs::read_to_string(project.root.join("keep.txt")).unwrap(),
        "keep me\nsecond line\n"
    );
    let sid = project.only_session_id().await;
    let tools = tool_parts(&project.session_messages(&sid).await);
    assert_eq!(tools[0]["state"]["status"], "error", "{:#}", tools[0]);
    let err = tools[0]["state"]["error"].as_str().unwrap_or_default();
    assert!(
        err.starts_with("oldString is empty but the file already exists."),
        "{err}"
    );
    // The model was told.
    let reqs = completions(&server);
    let tool_msg = req_messages(&reqs[1])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    assert!(content_text(&tool_msg).contains("use the write tool"));
    server.shutdown().await;
}

/// Issue 13.4 end to end: `head -c 60000 /dev/zero | tr '\0' x; echo END` reaches the model
/// as the truncation note and `…xxxxEND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_last_line_reaches_the_model_as_its_tail() {
    let script = Script::single(vec![
        Step::tool(
            "bash",
            json!({"command": "head -c 60000 /dev/zero | tr '\\0' x; echo END", "description": "long line"}),
        ),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let project = procs_project(&server.base_url());
    let out = project.troupe(&["run", "long", "line"], &[]).await;
    assert_success(&out, "run");
    let reqs = completions(&server);
    let tool_msg = req_messages(&reqs[1])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    let result = content_text(&tool_msg);
    assert!(
        result.starts_with("...output truncated...\n\nFull output saved to: "),
        "{}",
        &result[..result.len().min(300)]
    );
    assert!(
        result.trim_end().ends_with("xxxxEND"),
        "{}",
        &result[result.len().saturating_sub(80)..]
    );
    assert!(result.contains("\n\n…xxxx"));
    assert!(result.matches('x').count() > 50_000);
    server.shutdown().await;
}

/// Issue 24.8: terminal escapes in a provider's error message are not printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapes_in_a_provider_error_are_stripped() {
    let message = "bad key\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[31m red\u{1b}[0m";
    let script = Script::single(vec![Step::text("never").with_fault(Fault::Http {
        status: 401,
        headers: Default::default(),
        body: Some(json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})),
    })]);
    let server = start_mock(script).await;
    let project = procs_project(&server.base_url());
    let out = project.troupe(&["run", "hi"], &[]).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad key red"), "{err:?}");
    assert!(
        !err.contains('\u{1b}') && !err.contains('\u{7}'),
        "escape printed: {err:?}"
    );
    server.shutdown().await;
}

/// A session whose `troupe run` was killed mid-tool lists as `interrupted` (not `ok` with a
/// tool still `running`), and a `troupe serve` on the same store repairs it without being
/// prompted: the tool part becomes the "outcome unknown" error and the step's message is
/// closed, after which the list no longer says `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_lists_as_interrupted_and_serve_repairs_it_unprompted() {
    let needle = "sleep 41.31";
    let (server, project, child) = run_sleeping(needle, needle).await;
    let pid = child.id().expect("pid");
    wait_for("the sleep", || !pgrep(needle).is_empty()).await;
    signal(pid, "-KILL");
    let _ = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output()).await;
    let _ = wait_gone(needle, Duration::from_secs(10)).await;

    let listed = project.only_session().await;
    assert_eq!(listed["interrupted"], true, "{listed:#}");
    assert_eq!(
        listed["owner"],
        serde_json::Value::Null,
        "the dead run drives nothing: {listed:#}"
    );
    let sid = listed["id"].as_str().expect("id").to_string();
    let table = project.troupe(&["session", "list"], &[]).await;
    assert_success(&table, "session list");
    assert!(
        text(&table.stdout).contains("interrupted"),
        "{}",
        text(&table.stdout)
    );
    let tools = tool_parts(&project.session_messages(&sid).await);
    assert_eq!(
        tools[0]["state"]["status"], "running",
        "not repaired yet: {tools:#?}"
    );

    let (_serve, _base) = project.serve().await;
    let mut repaired = serde_json::Value::Null;
    for _ in 0..100 {
        let tools = tool_parts(&project.session_messages(&sid).await);
        if tools[0]["state"]["status"] == "error" {
            repaired = tools[0]["state"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        repaired["error"]
            .as_str()
            .is_some_and(|e| e.contains("outcome is unknown")),
        "serve did not repair the session: {repaired:#}"
    );
    let messages = project.session_messages(&sid).await;
    let last = messages.last().expect("messages");
    assert!(
        last["info"]["time"]["completed"].is_number(),
        "the step's message is closed: {last:#}"
    );
    let listed = project.only_session().await;
    assert_eq!(listed["interrupted"], false, "{listed:#}");
    // Nothing was prompted: the model was asked once (the request before the crash).
    assert_eq!(completions(&server).len(), 1);
    server.shutdown().await;
}

/// `GET /session/{id}` named a killed `troupe run` as the session's owner until that lease
/// expired or the server's next recovery look (up to 10 s): a dead holder on this host
/// drives nothing, so `owner` is null at once (and `interrupted` true until the repair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_session_never_names_a_dead_run_as_its_owner() {
    let needle = "sleep 41.33";
    let script = Script::single(vec![
        Step::tool("bash", json!({"command": needle, "description": "sleep"})),
        Step::text("after the crash"),
    ]);
    let server = start_mock(script).await;
    // A long lease: only the holder's death can make it ownerless during the test.
    let project = procs_project(&server.base_url()).with_env("TROUPE_LEASE_TTL_MS", "600000");
    let (_serve, base) = project.serve().await;
    let api = Api::new(&base);
    assert!(pgrep(needle).is_empty(), "stray processes before the test");
    let child = project.spawn(&["run", "sleep", "please"], &[]);
    let pid = child.id().expect("pid");
    wait_for("the sleep", || !pgrep(needle).is_empty()).await;
    let sid = project.only_session_id().await;
    let live = api.get_json(&format!("/session/{sid}")).await;
    assert_eq!(live["owner"]["pid"], pid, "{live:#}");
    assert_eq!(live["interrupted"], false, "{live:#}");

    signal(pid, "-KILL");
    let _ = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output()).await;
    let after = api.get_json(&format!("/session/{sid}")).await;
    assert_eq!(
        after["owner"],
        serde_json::Value::Null,
        "a dead run is no owner: {after:#}"
    );
    let listed = api.get_json("/session").await;
    let row = listed
        .as_array()
        .and_then(|a| a.iter().find(|s| s["id"] == sid.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["owner"], serde_json::Value::Null, "{row:#}");
    let _ = wait_gone(needle, Duration::from_secs(10)).await;
    server.shutdown().await;
}

/// Recovery under repeated `kill -9`: rounds of `troupe run --session` on one session, each
/// killed inside its bash call, while `troupe serve` looks for abandoned leases; every other
/// round the next run starts at once (it and the server's recovery race for the dead
/// holder's lease), the others wait until the server has repaired the round. A last run
/// then finishes the session: every tool part ended (the killed ones as "outcome unknown"),
/// every assistant message closed, no process of any round left, and the model saw each
/// round's prompt once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_kills_under_serve_leave_a_consistent_session() {
    const ROUNDS: usize = 4;
    let needle = |i: usize| format!("sleep 41.4{i}");
    // One conversation: each killed round leaves one (aborted) assistant message, so round i
    // is step i and the last run is step ROUNDS.
    let mut steps: Vec<Step> = (0..ROUNDS)
        .map(|i| {
            Step::tool(
                "bash",
                json!({"command": needle(i), "description": "sleep"}),
            )
        })
        .collect();
    steps.push(Step::text("all done"));
    let server = start_mock(Script::single(steps)).await;
    let project = procs_project(&server.base_url()).with_env("TROUPE_LEASE_TTL_MS", "600000");
    let (_serve, base) = project.serve().await;
    let api = Api::new(&base);
    let mut sid = String::new();
    for i in 0..ROUNDS {
        let prompt = format!("ROUND-{i}");
        let mut args = vec!["run", prompt.as_str()];
        if i > 0 {
            args.extend(["--session", sid.as_str()]);
        }
        let child = project.spawn(&args, &[]);
        let pid = child.id().expect("pid");
        let n = needle(i);
        wait_for("the round's sleep", || !pgrep(&n).is_empty()).await;
        if i == 0 {
            sid = project.only_session_id().await;
        }
        signal(pid, "-KILL");
        let _ = tokio::time::timeout(CLI_RUN_DEADLINE, child.wait_with_output()).await;
        assert!(
            wait_gone(&n, Duration::from_secs(10)).await.is_empty(),
            "round {i}'s bash outlived its run"
        );
        if i % 2 == 1 {
            // Let the server's recovery (every 10 s) repair this round first.
            let mut repaired = false;
            for _ in 0..150 {
                let s = api.get_json(&format!("/session/{sid}")).await;
                if s["interrupted"] == false && s["owner"].is_null() {
                    repaired = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(repaired, "round {i} was not repaired by the server");
        }
    }
    let last = project
        .troupe(&["run", "ROUND-END", "--session", &sid], &[])
        .await;
    assert_success(&last, "the run after the kills");
    assert!(
        text(&last.stdout).contains("all done"),
        "{}",
        text(&last.stdout)
    );

    let messages = project.session_messages(&sid).await;
    let tools = tool_parts(&messages);
    assert_eq!(tools.len(), ROUNDS, "{tools:#?}");
    for t in &tools {
        assert_eq!(t["state"]["status"], "error", "{t:#}");
        assert!(
            t["state"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("outcome is unknown")),
            "{t:#}"
        );
    }
    for m in &messages {
        if m["info"]["role"] == "assistant" {
            assert!(m["info"]["time"]["completed"].is_number(), "{m:#}");
        }
    }
    let steps: Vec<Option<usize>> = completions(&server).iter().map(|r| r.step).collect();
    assert_eq!(
        steps,
        (0..=ROUNDS).map(Some).collect::<Vec<_>>(),
        "each round's step reached the model once, in order"
    );
    assert!(api.get_json(&format!("/session/{sid}")).await["interrupted"] == false);
    server.shutdown().await;
}
