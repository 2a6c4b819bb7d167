//! End-to-end tests of subagents (`task`) and `troupe batch` through the real binary against
//! the scripted provider (`troupe-testkit`).
//!
//! Each test gets its own temp project directory (with a `troupe.json` pointing at its own
//! `MockServer`), its own SQLite store and an empty global config directory
//! (`tests/common/project.rs`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_testkit::task::{background_task_args, fan_out_three};
use troupe_testkit::{Conversation, Fault, Script, Step};

mod common;
use common::*;

/// The summary line `batch: N tasks, …` of a batch's stderr.
fn summary_line(stderr: &[u8]) -> String {
    text(stderr)
        .lines()
        .find(|l| l.starts_with("batch: "))
        .unwrap_or_else(|| panic!("no summary line in stderr:\n{}", text(stderr)))
        .to_string()
}

/// The number before `word` in a summary line (`…, 3 failed, …` → 3 for `failed`).
fn summary_count(line: &str, word: &str) -> u64 {
    line.split(',')
        .map(str::trim)
        .find_map(|part| {
            let part = part.strip_prefix("batch: ").unwrap_or(part);
            let (n, w) = part.split_once(' ')?;
            (w == word).then(|| n.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no `N {word}` in {line:?}"))
}

/// Lines of a batch out file, parsed (non-parseable lines are returned separately).
fn read_results(path: &std::path::Path) -> (Vec<Value>, Vec<String>) {
    let body = std::fs::read_to_string(path).unwrap_or_default();
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for l in body.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(l) {
            Ok(v) => ok.push(v),
            Err(_) => bad.push(l.to_string()),
        }
    }
    (ok, bad)
}

/// A batch's tasks file (holding `tasks`) and results file, outside the project.
struct BatchFiles {
    tasks: std::path::PathBuf,
    out: std::path::PathBuf,
}

impl BatchFiles {
    fn new(project: &Project, tasks: &[Value]) -> Self {
        let files = BatchFiles {
            tasks: project.outside().join("tasks.jsonl"),
            out: project.outside().join("results.jsonl"),
        };
        write_jsonl(&files.tasks, tasks);
        files
    }

    /// `batch TASKS --out RESULTS`, then `extra`.
    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "batch",
            self.tasks.to_str().expect("utf-8 path"),
            "--out",
            self.out.to_str().expect("utf-8 path"),
        ];
        args.extend_from_slice(extra);
        args
    }
}

/// A two-step script for batch tasks: read `file`, then answer. Without a matcher, so every
/// batch session uses it.
fn read_then_text(file: &str, delay_ms: u64) -> Script {
    Script::single(vec![
        Step::tool("read", json!({"filePath": file})).with_first_byte_delay_ms(delay_ms),
        Step::text("the file says hello").with_first_byte_delay_ms(delay_ms),
    ])
}

/// `troupe run` with a background subagent: the parent's turn ends first, the child's
/// result starts a new turn of the now idle parent, and the run waits for that turn and
/// prints it before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_a_background_subagent_and_its_result_turn() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let args = background_task_args("BG-CHILD");
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", args),
            Step::text("parent turn over, the child still works"),
            Step::text("the child reported: forty-two"),
        ])
        .matching("PARENT-BG-RUN"),
        Conversation::new(vec![
            Step::text("the answer is forty-two").with_first_byte_delay_ms(500),
        ])
        .matching("BG-CHILD"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let last_message = project.root.join("last.txt");
    let out = project
        .troupe(
            &[
                "run",
                "--output-last-message",
                &last_message.display().to_string(),
                "PARENT-BG-RUN: start a background child",
            ],
            &[],
        )
        .await;
    assert_success(&out, "troupe run");
    // The run reports its latest turn, the one the child's result started.
    assert_eq!(
        std::fs::read_to_string(&last_message).expect("--output-last-message file"),
        "the child reported: forty-two\n"
    );
    // Both turns' answers, each on its own line (they once ran together: "…worksthe child…").
    assert_eq!(
        text(&out.stdout),
        "parent turn over, the child still works\nthe child reported: forty-two\n"
    );
    // The parent's third request carried the child's result.
    let last = completions(&server)
        .into_iter()
        .rfind(|r| r.body.to_string().contains("PARENT-BG-RUN"))
        .expect("parent requests");
    let body = last.body.to_string();
    assert!(
        body.contains("the answer is forty-two") && body.contains("state=\\\"completed\\\""),
        "{body}"
    );
    server.shutdown().await;
}

/// When the turn a background result started fails, `troupe run` fails with its error, not
/// with the first turn's success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_fails_when_the_turn_a_background_result_started_fails() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let args = background_task_args("BG-CHILD-FAIL");
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", args),
            Step::text("parent turn over"),
            Step::text("").with_fault(Fault::http(400)),
        ])
        .matching("PARENT-BG-FAIL"),
        Conversation::new(vec![Step::text("child done").with_first_byte_delay_ms(300)])
            .matching("BG-CHILD-FAIL"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let out = project
        .troupe(&["run", "PARENT-BG-FAIL: start a background child"], &[])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("parent turn over"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("APIError"),
        "{}",
        text(&out.stderr)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_fan_out_via_cli() {
    let project = Project::new("http://127.0.0.1:1/v1");
    std::fs::write(project.root.join("notes.md"), "TODO: the secret is 42\n").expect("notes");
    let notes = project.root.join("notes.md").display().to_string();
    let script = fan_out_three(&notes);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());

    let started = Instant::now();
    let out = project
        .troupe(
            &["run", "--format", "json", "PARENT-FANOUT:", "fan", "out"],
            &[
                ("TROUPE_TASK_TIMEOUT_MS", "1500"),
                ("TROUPE_MAX_RETRIES", "0"),
            ],
        )
        .await;
    eprintln!("task_fan_out_via_cli: run took {:?}", started.elapsed());
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    assert!(!events.is_empty(), "no events printed");

    // One root session and three children pointing at it.
    let sessions = project.sessions().await;
    let roots: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["parentID"].is_null())
        .collect();
    assert_eq!(roots.len(), 1, "{sessions:#?}");
    let parent = roots[0]["id"].as_str().expect("id").to_string();
    let kids: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["parentID"] == parent.as_str())
        .collect();
    assert_eq!(kids.len(), 3, "children in session list: {sessions:#?}");
    assert_eq!(sessions.len(), 4, "{sessions:#?}");

    // The parent's three task parts: one completed, two errors; its turn finished.
    let doc = project.show(&parent).await;
    let messages = doc["messages"].as_array().expect("messages").clone();
    let tasks: Vec<&Value> = messages
        .iter()
        .flat_map(|m| parts_of_type(m, "tool"))
        .filter(|p| p["tool"] == "task")
        .collect();
    assert_eq!(tasks.len(), 3, "{tasks:#?}");
    let statuses: HashMap<String, String> = tasks
        .iter()
        .map(|p| {
            let prompt = p["state"]["input"]["prompt"].as_str().unwrap_or("");
            let token = prompt.split(':').next().unwrap_or("").to_string();
            (
                token,
                p["state"]["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(statuses["CHILD-A-READ"], "completed", "{tasks:#?}");
    assert_eq!(statuses["CHILD-B-PANIC"], "error", "{tasks:#?}");
    assert_eq!(statuses["CHILD-C-SLEEP"], "error", "{tasks:#?}");
    let last = messages.last().expect("last message");
    let final_texts: Vec<&str> = parts_of_type(last, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(final_texts, ["parent summarised the three children"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_200_parallel_32() {
    let project = Project::new("http://127.0.0.1:1/v1");
    std::fs::write(project.root.join("hello.txt"), "hello from the file\n").expect("hello");
    let file = project.root.join("hello.txt").display().to_string();
    let server = start_mock(read_then_text(&file, 0)).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let tasks: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("t{i:03}"), "prompt": format!("batch task number {i}")}))
        .collect();
    let files = BatchFiles::new(&project, &tasks);

    let started = Instant::now();
    let out = project
        .troupe(&files.args(&["--parallel", "32"]), &[])
        .await;
    let elapsed = started.elapsed();
    eprintln!(
        "batch_200_parallel_32: {elapsed:?}; {}",
        summary_line(&out.stderr)
    );
    assert_success(&out, "troupe batch");
    let (lines, bad) = read_results(&files.out);
    assert!(bad.is_empty(), "unparseable lines: {bad:#?}");
    assert_eq!(lines.len(), 200);
    let ids: HashSet<&str> = lines.iter().filter_map(|l| l["id"].as_str()).collect();
    assert_eq!(ids.len(), 200, "duplicate ids");
    let sessions: HashSet<&str> = lines
        .iter()
        .filter_map(|l| l["session_id"].as_str())
        .collect();
    assert_eq!(sessions.len(), 200, "each task has its own session");
    for l in &lines {
        assert_eq!(l["status"], "completed", "{l}");
        assert_eq!(l["text"], "the file says hello", "{l}");
        assert!(l["duration_ms"].is_u64(), "{l}");
        assert!(l.get("error").is_none(), "{l}");
    }
    let summary = summary_line(&out.stderr);
    assert_eq!(summary_count(&summary, "completed"), 200, "{summary}");
    assert_eq!(summary_count(&summary, "failed"), 0, "{summary}");
    assert_eq!(completions(&server).len(), 400, "two requests per task");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_kill_and_resume() {
    let project = Project::new("http://127.0.0.1:1/v1");
    std::fs::write(project.root.join("hello.txt"), "hello from the file\n").expect("hello");
    let file = project.root.join("hello.txt").display().to_string();
    // ~500 ms per task, 32 at a time: the whole batch takes a few seconds.
    let server = start_mock(read_then_text(&file, 250)).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let tasks: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("k{i:03}"), "prompt": format!("resumable task {i}")}))
        .collect();
    let files = BatchFiles::new(&project, &tasks);
    let args = files.args(&["--parallel", "32"]);

    let mut child = project.spawn(&args, &[]);
    let started = Instant::now();
    loop {
        let (lines, _) = read_results(&files.out);
        if lines.len() >= 30 {
            break;
        }
        assert!(
            started.elapsed() < CLI_RUN_DEADLINE,
            "fewer than 30 results after {CLI_RUN_DEADLINE:?}"
        );
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the batch ended before the kill: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.start_kill().expect("SIGKILL");
    let status = child.wait().await.expect("wait");
    assert!(!status.success(), "killed batch exited {status:?}");
    // Let the killed process's connections close, then count what the provider saw.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests_before = completions(&server).len();
    let (first_lines, first_bad) = read_results(&files.out);
    let raw = std::fs::read_to_string(&files.out).expect("out file");
    eprintln!(
        "batch_kill_and_resume: killed after {:?} with {} result lines, {} unparseable, ends with newline: {}",
        started.elapsed(),
        first_lines.len(),
        first_bad.len(),
        raw.ends_with('\n')
    );
    assert!(
        first_lines.len() < 200,
        "the batch finished before the kill"
    );
    let first_ids: HashSet<String> = first_lines
        .iter()
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        first_ids.len(),
        first_lines.len(),
        "duplicates before the resume"
    );

    let out = project
        .troupe(&[&args[..], &["--resume"]].concat(), &[])
        .await;
    let summary = summary_line(&out.stderr);
    eprintln!("batch_kill_and_resume: resume: {summary}");
    assert_success(&out, "troupe batch --resume");
    let skipped = summary_count(&summary, "skipped");
    assert_eq!(skipped as usize, first_ids.len(), "{summary}");
    assert_eq!(
        summary_count(&summary, "completed") as usize,
        200 - first_ids.len()
    );
    // Only the missing tasks ran again: two requests each.
    let resumed_requests = completions(&server).len() - requests_before;
    assert_eq!(resumed_requests, 2 * (200 - first_ids.len()));

    let (lines, bad) = read_results(&files.out);
    assert!(
        bad.len() <= first_bad.len(),
        "the resume wrote bad lines: {bad:#?}"
    );
    let mut seen: HashMap<String, usize> = HashMap::new();
    for l in &lines {
        *seen
            .entry(l["id"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
        assert_eq!(l["status"], "completed", "{l}");
    }
    let expected: HashSet<String> = (0..200).map(|i| format!("k{i:03}")).collect();
    let got: HashSet<String> = seen.keys().cloned().collect();
    assert_eq!(got, expected, "ids in the final file");
    let dups: Vec<(&String, &usize)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "duplicated ids: {dups:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_resume_after_a_cut_last_line() {
    // A process killed inside a write leaves a fragment without a newline. Simulate it: one
    // whole line, then a fragment of another task's line.
    let project = Project::new("http://127.0.0.1:1/v1");
    let server = mock(vec![Step::text("done")]).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let tasks: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("c{i}"), "prompt": format!("cut task {i}")}))
        .collect();
    let files = BatchFiles::new(&project, &tasks);
    let whole = json!({"id": "c0", "session_id": "ses_x", "status": "completed", "text": "done",
        "tokens": {}, "cost": 0.0, "duration_ms": 1});
    std::fs::write(&files.out, format!("{whole}\n{{\"id\":\"c1\",\"sess")).expect("out");

    let out = project.troupe(&files.args(&["--resume"]), &[]).await;
    assert_success(&out, "troupe batch --resume");
    let summary = summary_line(&out.stderr);
    assert_eq!(summary_count(&summary, "skipped"), 1, "{summary}");
    let (lines, bad) = read_results(&files.out);
    let ids: Vec<&str> = lines.iter().filter_map(|l| l["id"].as_str()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        unique,
        HashSet::from(["c0", "c1", "c2"]),
        "parseable ids {ids:?}; unparseable lines {bad:#?}"
    );
    assert_eq!(ids.len(), 3, "{ids:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_failures_exit_nonzero() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let server = mock(vec![Step::text("fine answer")]).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let tasks = vec![
        json!({"id": "good-1", "prompt": "a good task"}),
        json!({"id": "bad-model", "prompt": "a task for a missing model", "model": "nosuch/x"}),
        json!({"id": "good-2", "prompt": "another good task"}),
    ];
    let files = BatchFiles::new(&project, &tasks);
    let out = project.troupe(&files.args(&["--parallel", "2"]), &[]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let summary = summary_line(&out.stderr);
    eprintln!("batch_failures_exit_nonzero: {summary}");
    assert_eq!(summary_count(&summary, "failed"), 1, "{summary}");
    assert_eq!(summary_count(&summary, "completed"), 2, "{summary}");

    let (lines, bad) = read_results(&files.out);
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(lines.len(), 3);
    let by_id: HashMap<&str, &Value> = lines
        .iter()
        .map(|l| (l["id"].as_str().unwrap_or(""), l))
        .collect();
    let failed = by_id["bad-model"];
    assert_eq!(failed["status"], "failed", "{failed}");
    let err = failed["error"].as_str().unwrap_or("");
    assert!(
        err.contains("nosuch"),
        "the error should name the model: {failed}"
    );
    for id in ["good-1", "good-2"] {
        assert_eq!(by_id[id]["status"], "completed", "{}", by_id[id]);
        assert_eq!(by_id[id]["text"], "fine answer");
    }
    // The bad task never reached the provider.
    assert_eq!(completions(&server).len(), 2);
    // Resuming a file that holds a failure runs nothing and still exits 1: the batch as a
    // whole did not succeed.
    let out = project.troupe(&files.args(&["--resume"]), &[]).await;
    let summary = summary_line(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "resume: {summary}");
    assert_eq!(summary_count(&summary, "skipped"), 3, "{summary}");
    assert_eq!(summary_count(&summary, "failed earlier"), 1, "{summary}");
    assert_eq!(completions(&server).len(), 2);

    // The model is fixed and a task added; --retry-failed runs exactly the failed id (not the
    // new task, which is --resume's), appends its new result and exits 0.
    let mut tasks = tasks;
    tasks[1] = json!({"id": "bad-model", "prompt": "a task for a missing model"});
    tasks.push(json!({"id": "new-task", "prompt": "a task added later"}));
    write_jsonl(&files.tasks, &tasks);
    let retry = |extra: &'static [&'static str]| {
        let mut args = vec![
            "batch".to_string(),
            files.tasks.display().to_string(),
            "--out".into(),
            files.out.display().to_string(),
            "--retry-failed".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let args = retry(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = project.troupe(&args, &[]).await;
    let summary = summary_line(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "retry-failed: {}",
        text(&out.stderr)
    );
    assert_eq!(summary_count(&summary, "completed"), 1, "{summary}");
    assert_eq!(summary_count(&summary, "skipped"), 3, "{summary}");
    assert_eq!(completions(&server).len(), 3);
    let (lines, _) = read_results(&files.out);
    let ids: Vec<&str> = lines.iter().filter_map(|l| l["id"].as_str()).collect();
    assert_eq!(ids.len(), 4, "{lines:#?}");
    assert_eq!(ids[3], "bad-model");
    assert_eq!(lines[3]["status"], "completed");
    // The summary table: one row per outcome with tasks, tokens, cost and durations.
    let table = text(&out.stderr);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().next() == Some("completed")
                && l.split_whitespace().nth(1) == Some("1")),
        "{table}"
    );
    assert!(table.contains("p95"), "{table}");
    // Nothing failed is left: with --resume as well, only the new task runs.
    let args = retry(&["--resume"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = project.troupe(&args, &[]).await;
    let summary = summary_line(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert_eq!(summary_count(&summary, "completed"), 1, "{summary}");
    assert_eq!(completions(&server).len(), 4);
    let (lines, _) = read_results(&files.out);
    assert_eq!(
        lines.last().map(|l| l["id"].clone()),
        Some(json!("new-task"))
    );
    server.shutdown().await;
}

/// A task's `maxSteps` caps its turn: with 1, the step after the tool call is never asked
/// for and the task fails with the step-limit error; 0 is refused when the file is read.
#[tokio::test]
async fn batch_task_max_steps_caps_the_turn() {
    let project = Project::new("http://127.0.0.1:1/v1");
    std::fs::write(project.root.join("hello.txt"), "hello\n").expect("hello");
    let file = project.root.join("hello.txt").display().to_string();
    let server = start_mock(read_then_text(&file, 0)).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let files = BatchFiles::new(
        &project,
        &[json!({"id": "short", "prompt": "read the file", "maxSteps": 1})],
    );
    let out = project.troupe(&files.args(&[]), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (lines, _) = read_results(&files.out);
    assert_eq!(lines[0]["status"], "failed", "{}", lines[0]);
    let err = lines[0]["error"].as_str().unwrap_or("");
    assert!(
        err.contains("MaxStepsError") && err.contains("maximum of 1 steps"),
        "{err}"
    );
    assert_eq!(completions(&server).len(), 1, "one step asked for");

    write_jsonl(
        &files.tasks,
        &[json!({"id": "t", "prompt": "p", "maxSteps": 0})],
    );
    let out = project
        .troupe(&["batch", files.tasks.to_str().expect("utf-8 path")], &[])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("maxSteps"),
        "{}",
        text(&out.stderr)
    );
    server.shutdown().await;
}

/// A task past its `timeout` is aborted (the provider's slow answer is not waited for) and
/// fails saying so; a task file with a bad timeout is refused before anything runs.
#[tokio::test]
async fn batch_task_timeout_aborts_the_task() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let server = mock(vec![
        Step::text("too late").with_first_byte_delay_ms(60_000),
    ])
    .await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let files = BatchFiles::new(
        &project,
        &[json!({"id": "slow", "prompt": "a slow task", "timeout": 0.5})],
    );
    let out = project.troupe(&files.args(&[]), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (lines, _) = read_results(&files.out);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["status"], "failed");
    let err = lines[0]["error"].as_str().unwrap_or("");
    assert!(err.contains("timed out after 0.5s"), "{err}");
    // Aborted, not waited out: the provider would have answered after 60 s.
    assert!(
        lines[0]["duration_ms"]
            .as_u64()
            .is_some_and(|ms| ms < 60_000),
        "{}",
        lines[0]
    );
    assert!(
        lines[0]["session_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("ses_"))
    );

    for bad in [json!(0), json!(-1), json!("soon")] {
        write_jsonl(
            &files.tasks,
            &[json!({"id": "t", "prompt": "p", "timeout": bad})],
        );
        let out = project
            .troupe(&["batch", files.tasks.to_str().expect("utf-8 path")], &[])
            .await;
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains("tasks.jsonl:1"), "{bad}: {err}");
    }
    server.shutdown().await;
}
