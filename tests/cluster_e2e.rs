//! End-to-end tests of troupe on a cluster (issue 18): `troupe worker` processes, a cluster
//! batch and `serve --cluster`, over the real NATS JetStream server on this machine
//! (`TROUPE_TEST_NATS`, default nats://127.0.0.1:4222), all sharing one store file.
//!
//! Without a NATS server the tests say they were skipped and pass, unless
//! `TROUPE_REQUIRE_SERVICES=1` (CI) makes them fail. Each test uses its own cluster prefix
//! (streams, consumer, subjects) and deletes its streams at the end.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use troupe_testkit::{Conversation, MockServer, Script, Step};

/// The NATS URL to test against, or `None` (after saying why) when no server answers and
/// services are not required.
fn nats_or_skip(test: &str) -> Option<String> {
    let url = std::env::var("TROUPE_TEST_NATS")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let addr = url.trim_start_matches("nats://").to_string();
    let reachable = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    if reachable {
        return Some(url);
    }
    let why = format!(
        "no NATS server answers at {url} (start one with `nats-server -js`, or set TROUPE_TEST_NATS)"
    );
    if std::env::var("TROUPE_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
        panic!("{test}: {why}, and TROUPE_REQUIRE_SERVICES=1 requires it");
    }
    eprintln!("{test}: SKIPPED: {why}");
    None
}

/// A cluster prefix no other test (or run) uses.
fn unique_prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("t{tag}{}x{nanos}", std::process::id())
}

/// The NATS URL, a fresh stream prefix tagged `tag`, and the guard that deletes the
/// prefix's streams at the end of the test; `None` (the test is skipped) when NATS does not
/// answer.
fn nats_stage(test: &str, tag: &str) -> Option<(String, String, Cleanup)> {
    let nats = nats_or_skip(test)?;
    let prefix = unique_prefix(tag);
    let cleanup = Cleanup {
        url: nats.clone(),
        prefix: prefix.clone(),
    };
    Some((nats, prefix, cleanup))
}

/// Deletes the test's streams when dropped (also when the test fails).
struct Cleanup {
    url: String,
    prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        // A runtime of its own: the test's may be shutting down.
        let _ = std::thread::spawn(move || {
            let tokio_rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            tokio_rt.block_on(async {
                if let Ok(c) = troupe_cluster::connect(&url).await {
                    let js = troupe_cluster::jetstream(&c);
                    let names = troupe_cluster::Names::new(&prefix).expect("names");
                    let _ = troupe_cluster::delete_streams(&js, &names).await;
                }
            });
        })
        .join();
    }
}

const TASKS: usize = 60;
/// Tool steps per task before its answer; each sleeps [`SLEEP_MS`].
const TOOL_STEPS: usize = 3;
const SLEEP_MS: u64 = 400;

fn task_id(i: usize) -> String {
    format!("t{i:02}")
}

/// One conversation per task: `TOOL_STEPS` steps calling `test_sleep`, then the answer.
fn script() -> Script {
    let convs = (0..TASKS)
        .map(|i| {
            let id = task_id(i);
            let mut steps: Vec<Step> = (0..TOOL_STEPS)
                // Different inputs, or the doom-loop guard stops the third call.
                .map(|k| Step::tool("test_sleep", json!({"ms": SLEEP_MS + k as u64})))
                .collect();
            steps.push(Step::text(format!("answer {id}")));
            Conversation::new(steps).matching(format!("[{id}]"))
        })
        .collect();
    Script::new(convs)
}

/// Writes the first `count` of the scripted tasks to `<root>/tasks.jsonl`; returns its path.
fn write_tasks(p: &Project, count: usize) -> std::path::PathBuf {
    let lines: Vec<Value> = (0..count)
        .map(|i| {
            let id = task_id(i);
            json!({"id": id, "prompt": format!("do job [{id}]")})
        })
        .collect();
    let path = p.root.join("tasks.jsonl");
    write_jsonl(&path, &lines);
    path
}

/// Starts `troupe worker NAME` of the cluster `prefix`, stderr to `<home>/NAME.log`.
fn start_worker(
    p: &Project,
    nats: &str,
    prefix: &str,
    name: &str,
    extra: &[&str],
) -> std::process::Child {
    let log = std::fs::File::create(p.home.path().join(format!("{name}.log"))).expect("log");
    let concurrency = if extra.contains(&"--concurrency") {
        &[][..]
    } else {
        &["--concurrency", "4"][..]
    };
    let mut args = vec![
        "worker",
        "--nats",
        nats,
        "--cluster-prefix",
        prefix,
        "--name",
        name,
    ];
    args.extend_from_slice(concurrency);
    args.extend_from_slice(&[
        "--ack-wait",
        "2",
        "--heartbeat",
        "0.3",
        "--heartbeat-timeout",
        "1.5",
    ]);
    args.extend_from_slice(extra);
    p.std_command(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn worker")
}

fn log_of(p: &Project, name: &str) -> String {
    std::fs::read_to_string(p.home.path().join(format!("{name}.log"))).unwrap_or_default()
}

/// Task ids a worker's log says it started (`task tNN started`) and finished (`task tNN
/// completed|failed`).
fn started_and_finished(log: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut started = BTreeSet::new();
    let mut finished = BTreeSet::new();
    for l in log.lines() {
        let Some(rest) = l.split_once(": task ").map(|(_, r)| r) else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(id), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        match what {
            "started" => {
                started.insert(id.to_string());
            }
            "completed" | "failed" => {
                finished.insert(id.to_string());
            }
            _ => {}
        }
    }
    (started, finished)
}

/// The arguments of a `task` call giving the `explore` subagent the prompt
/// `<token>: find the answer`.
fn explore_task(token: &str) -> Value {
    json!({"description": "look around", "prompt": format!("{token}: find the answer"),
           "subagent_type": "explore"})
}

/// A project whose config points at `mock` and sends `explore` subagents to the cluster.
fn subagents_project(mock: &MockServer) -> Project {
    Project::with_config(&mock_config_with(
        &mock.base_url(),
        json!({"cluster": {"subagents": ["explore"]}}),
    ))
}

/// Runs `troupe batch` over the one task `line` (written to `<name>.jsonl`) on the cluster
/// `prefix` at `nats`, results to `<name>-results.jsonl`; the run's output and its result
/// lines.
async fn batch_of_one(
    p: &Project,
    nats: &str,
    prefix: &str,
    name: &str,
    line: Value,
) -> (Output, Vec<Value>) {
    let tasks = p.root.join(format!("{name}.jsonl"));
    std::fs::write(&tasks, format!("{line}\n")).unwrap();
    let out = p.root.join(format!("{name}-results.jsonl"));
    let (tasks_arg, out_arg) = (tasks.display().to_string(), out.display().to_string());
    let args = [
        "batch",
        &tasks_arg,
        "--cluster",
        nats,
        "--cluster-prefix",
        prefix,
        "--out",
        &out_arg,
    ];
    let done = p.troupe(&args, &[]).await;
    (done, result_lines(&out))
}

/// The body of the last request `mock` received whose body contains `token` (a parent's).
fn last_body_with(mock: &MockServer, token: &str) -> String {
    mock.requests()
        .into_iter()
        .rfind(|r| r.body.to_string().contains(token))
        .expect("the parent's requests")
        .body
        .to_string()
}

/// Kills a worker process and reaps it.
fn kill_worker(w: &mut std::process::Child) {
    let _ = w.kill();
    let _ = w.wait();
}

fn result_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("result line {l}: {e}")))
        .collect()
}

/// The issue's "Done when": 3 workers, a cluster batch of 60 multi-step tasks; one worker
/// SIGKILLed mid-run, another SIGTERMed. All 60 results arrive exactly once, no session is
/// duplicated, the killed worker's tasks are finished by other workers in the same session
/// (swept part, then the continued turn), and the results match a local batch's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_tasks_survive_a_killed_and_a_stopped_worker() {
    let Some((nats, prefix, _cleanup)) =
        nats_stage("sixty_tasks_survive_a_killed_and_a_stopped_worker", "k")
    else {
        return;
    };
    // The workers share the store as machines would: one PostgreSQL database (a fresh schema).
    let Some(pg) = troupe_testkit::pg::PgSchema::create("sixty_tasks_cluster") else {
        return;
    };
    let mock = start_mock(script()).await;
    let p = Project::new(&mock.base_url()).with_env("TROUPE_DB", pg.url());
    let tasks = write_tasks(&p, TASKS);
    let out = p.root.join("results.jsonl");

    // Two workers before the batch, one after it: both must work.
    let mut w1 = start_worker(&p, &nats, &prefix, "w1", &[]);
    let mut w2 = start_worker(&p, &nats, &prefix, "w2", &["--drain-timeout", "0.3"]);
    let batch = p
        .command(&[
            "batch",
            tasks.to_str().unwrap(),
            "--cluster",
            &nats,
            "--cluster-prefix",
            &prefix,
            "--ack-wait",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn batch");
    let mut w3 = start_worker(&p, &nats, &prefix, "w3", &[]);

    // SIGKILL w1 in the middle of its second round of tasks: once it has finished one and
    // taken new ones, half a step in (its tasks end together, so killing as results come
    // in would catch them between their last step and their result).
    wait_for_within("w1 in its second round", Duration::from_secs(60), || {
        let (started, finished) = started_and_finished(&log_of(&p, "w1"));
        !finished.is_empty() && started.difference(&finished).count() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(SLEEP_MS + SLEEP_MS / 2)).await;
    w1.kill().expect("SIGKILL w1");
    let _ = w1.wait();
    let (w1_started, w1_finished) = started_and_finished(&log_of(&p, "w1"));
    let killed: BTreeSet<String> = w1_started.difference(&w1_finished).cloned().collect();
    assert!(!killed.is_empty());
    eprintln!("w1 killed while running {killed:?}");

    // Then SIGTERM w2 while it runs tasks: it finishes or hands them back.
    wait_for_within("w2 running tasks", Duration::from_secs(60), || {
        let (started, finished) = started_and_finished(&log_of(&p, "w2"));
        started.difference(&finished).count() >= 1
    })
    .await;
    signal(w2.id(), "-TERM");
    let w2_status = tokio::task::spawn_blocking(move || w2.wait())
        .await
        .unwrap()
        .expect("wait w2");
    assert_eq!(
        w2_status.code(),
        Some(143),
        "w2 after SIGTERM:\n{}",
        log_of(&p, "w2")
    );
    let w2_log = log_of(&p, "w2");
    assert!(w2_log.contains("w2: stopping: no new tasks"), "{w2_log}");

    let output = tokio::time::timeout(Duration::from_secs(120), batch.wait_with_output())
        .await
        .expect("the batch finishes")
        .expect("batch output");
    let stderr = text(&output.stderr);
    assert!(
        output.status.success(),
        "batch failed: {stderr}\nw2:\n{w2_log}\nw3:\n{}",
        log_of(&p, "w3")
    );
    assert!(
        stderr.contains(&format!(
            "batch: {TASKS} tasks, {TASKS} completed, 0 failed"
        )),
        "{stderr}"
    );
    kill_worker(&mut w3);

    // Every result exactly once.
    let results = result_lines(&out);
    let by_id: BTreeMap<String, Value> = results
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r.clone()))
        .collect();
    assert_eq!(results.len(), TASKS, "one line per task: {results:#?}");
    assert_eq!(by_id.len(), TASKS);
    for (id, r) in &by_id {
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["text"], format!("answer {id}"), "{r}");
    }

    // No session duplicated: one session per task, the one its result names.
    let sessions = p.sessions_with(&["--limit", "1000"]).await;
    assert_eq!(sessions.len(), TASKS, "one session per task");
    // They are in PostgreSQL: no process fell back to a SQLite file.
    assert!(!p.home.path().join("troupe.db").exists());
    assert_eq!(
        pg.query_text("SELECT count(*)::text FROM session")
            .as_deref(),
        Some("60")
    );
    let ids: BTreeSet<&str> = sessions.iter().map(|s| s["id"].as_str().unwrap()).collect();
    for r in by_id.values() {
        assert!(ids.contains(r["session_id"].as_str().unwrap()), "{r}");
    }

    // The killed worker's tasks: finished by another worker, resuming the same session,
    // which shows the swept part and then the continued turn.
    let others = format!("{}{}", log_of(&p, "w2"), log_of(&p, "w3"));
    // Tasks w2 handed back when it stopped ran in two workers too.
    let handed_back: BTreeSet<String> = w2_log
        .lines()
        .filter_map(|l| {
            l.split_once("handed back task ")
                .map(|(_, id)| id.trim().to_string())
        })
        .collect();
    eprintln!("w2 handed back {handed_back:?}");
    let mut tasks_swept = 0;
    for id in &killed {
        let sid = by_id[id]["session_id"].as_str().unwrap();
        // Delivered again to another worker, in the same session ("resuming" unless w1 died
        // before it stored anything).
        let redelivered = others.lines().any(|l| {
            l.split_once(&format!("task {id} started (session {sid}, delivery "))
                .and_then(|(_, rest)| rest.split([',', ')']).next())
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n >= 2)
        });
        assert!(
            redelivered,
            "task {id} was not delivered again to another worker:\n{others}"
        );
        let messages = p.session_messages(sid).await;
        let users = messages.iter().filter(|m| role(m) == "user").count();
        assert_eq!(users, 1, "task {id}: one prompt, never asked twice");
        let tools = tool_parts(&messages);
        let swept: Vec<&Value> = tools
            .iter()
            .filter(|t| t["state"]["metadata"]["interrupted"] == true)
            .collect();
        // Swept: the call the dead worker was running (or, killed between two calls, its
        // unfinished step).
        let swept_step = messages.iter().any(|m| {
            m["info"]["error"]["data"]["message"]
                .as_str()
                .is_some_and(|e| e.contains("ended before it finished"))
        });
        if !swept.is_empty() || swept_step {
            tasks_swept += 1;
        } else {
            // Killed in the instant between its last step and its result: the turn had
            // ended, and the next worker returned it without a step.
            assert!(
                messages.iter().filter(|m| role(m) == "assistant").count() == TOOL_STEPS + 1,
                "task {id}: neither swept nor finished: {messages:#?}"
            );
        }
        let completed = tools
            .iter()
            .filter(|t| t["state"]["status"] == "completed")
            .count();
        // The turn continued past the swept call to the end of the script.
        let last = messages.last().unwrap();
        assert_eq!(role(last), "assistant");
        let last_text: String = parts_of_type(last, "text")
            .iter()
            .filter_map(|t| t["text"].as_str())
            .collect();
        assert_eq!(last_text, format!("answer {id}"));
        assert!(
            completed + swept.len() >= TOOL_STEPS,
            "task {id}: {tools:#?}"
        );
    }

    assert!(
        tasks_swept >= 1,
        "no task of the killed worker was cut mid-run: {killed:?}"
    );

    // The same tasks in a local batch: the fields that do not depend on where and when a
    // task ran match.
    let local = Project::new(&mock.base_url());
    let local_tasks = write_tasks(&local, TASKS);
    let local_out = local.root.join("local.jsonl");
    let out = local
        .troupe(
            &[
                "batch",
                local_tasks.to_str().unwrap(),
                "--parallel",
                "12",
                "--out",
                local_out.to_str().unwrap(),
            ],
            &[],
        )
        .await;
    assert_success(&out, "local batch");
    let local_by_id: BTreeMap<String, Value> = result_lines(&local_out)
        .into_iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r))
        .collect();
    assert_eq!(local_by_id.len(), TASKS);
    let keys = |r: &Value| {
        let o = r.as_object().unwrap();
        o.keys().cloned().collect::<BTreeSet<String>>()
    };
    for (id, r) in &by_id {
        let l = &local_by_id[id];
        assert_eq!(keys(r), keys(l), "the same fields: {r} vs {l}");
        for f in ["status", "text", "error", "output"] {
            assert_eq!(r[f], l[f], "task {id}: {f}: cluster {r} vs local {l}");
        }
        if !killed.contains(id) && !handed_back.contains(id) {
            // A task no worker died in spent what the local one did.
            assert_eq!(r["tokens"], l["tokens"], "task {id}: tokens");
            assert_eq!(r["cost"], l["cost"], "task {id}: cost");
        }
    }
}

/// `serve --cluster` lists the workers in `/actors` (one subtree each) and marks a killed
/// one dead once its heartbeat is older than its timeout; `/metrics` has a `node` label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_cluster_shows_the_workers_and_a_dead_one() {
    let Some((nats, prefix, _cleanup)) =
        nats_stage("serve_cluster_shows_the_workers_and_a_dead_one", "f")
    else {
        return;
    };
    let mock = start_mock(script()).await;
    let p = Project::new(&mock.base_url());
    let (_serve, base) = serve_with(p.command(&[
        "serve",
        "--port",
        "0",
        "--cluster",
        &nats,
        "--cluster-prefix",
        &prefix,
    ]))
    .await;
    let mut workers: Vec<std::process::Child> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| start_worker(&p, &nats, &prefix, n, &[]))
        .collect();
    let client = troupe_server::client::Client::new(&base, None).expect("client");
    let statuses = |v: &Value| -> BTreeMap<String, String> {
        v["nodes"]
            .as_array()
            .map(|ns| {
                ns.iter()
                    .map(|n| {
                        (
                            n["node"].as_str().unwrap_or("").to_string(),
                            n["status"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let start = std::time::Instant::now();
    let actors = loop {
        let actors = client.get("/actors").await.expect("/actors");
        let s = statuses(&actors);
        if s.len() == 3 && s.values().all(|v| v == "alive") {
            break actors;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "3 alive workers: {actors:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Each node carries its own supervision tree and its announced timeout.
    for n in actors["nodes"].as_array().unwrap() {
        assert_eq!(n["tree"]["kind"], "runtime", "{n}");
        assert_eq!(n["timeoutMs"], 1500);
    }
    // The local tree is still the document's root.
    assert_eq!(actors["kind"], "runtime");

    workers[1].kill().expect("SIGKILL n2");
    let _ = workers[1].wait();
    let killed_at = std::time::Instant::now();
    loop {
        let v = client.get("/actors").await.expect("/actors");
        let s = statuses(&v);
        if s.get("n2").map(String::as_str) == Some("dead") {
            // Dead because its last heartbeat is older than the timeout it announced.
            let n2 = v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["node"] == "n2")
                .unwrap();
            // (`as_millis` truncates: 1,500.4 ms past a 1,500 ms timeout reads 1500.)
            assert!(n2["lastHeartbeatMs"].as_u64().unwrap() >= 1500, "{n2}");
            assert_eq!(s["n1"], "alive");
            assert_eq!(s["n3"], "alive");
            break;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "n2 never marked dead: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("/metrics")
        .text()
        .await
        .expect("/metrics body");
    assert!(
        metrics.contains("troupe_node_up{node=\"n1\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("troupe_node_up{node=\"n2\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("troupe_node_tasks_running{node=\"n3\"} 0"),
        "{metrics}"
    );
    // This process's own series are still there, unlabelled.
    assert!(metrics.contains("troupe_steps_total "), "{metrics}");
    // `troupe monitor` shows the fleet: a row per worker with its state, the dead one
    // marked, and the count in the header.
    let out = p.troupe(&["monitor", "--once", &base], &[]).await;
    assert_success(&out, "troupe monitor --once");
    let shown = text(&out.stdout);
    for (node, status) in [("n1", "alive"), ("n2", "dead"), ("n3", "alive")] {
        assert!(
            shown.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 2 && w[0] == "node" && w[1] == node && w[2] == status
            }),
            "{node} {status} not shown:\n{shown}"
        );
    }
    assert!(shown.contains("nodes 3 (dead 1)"), "{shown}");

    // A worker that stops says so.
    signal(workers[0].id(), "-TERM");
    let _ = workers[0].wait();
    let start = std::time::Instant::now();
    loop {
        let v = client.get("/actors").await.expect("/actors");
        if statuses(&v).get("n1").map(String::as_str) == Some("stopped") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "n1 never stopped: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    workers.iter_mut().for_each(kill_worker);
}

/// A cluster batch killed mid-run and started again with `--resume` continues the same run:
/// the results the worker published meanwhile are collected, the unfinished tasks are not
/// run a second time (same message ids, same sessions), and every id is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_batch_resumes_its_run() {
    let Some((nats, prefix, _cleanup)) = nats_stage("a_killed_cluster_batch_resumes_its_run", "r")
    else {
        return;
    };
    let mock = start_mock(script()).await;
    let p = Project::new(&mock.base_url());
    // 12 of the 60 scripted tasks.
    let tasks = write_tasks(&p, 12);
    let out = p.root.join("results.jsonl");
    let batch_args = |resume: bool| {
        let mut a = vec![
            "batch".to_string(),
            tasks.display().to_string(),
            "--cluster".into(),
            nats.clone(),
            "--cluster-prefix".into(),
            prefix.clone(),
            "--out".into(),
            out.display().to_string(),
        ];
        if resume {
            a.push("--resume".into());
        }
        a
    };
    let mut w = start_worker(&p, &nats, &prefix, "solo", &[]);
    let args = batch_args(false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = p
        .std_command(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn batch");
    wait_for_within("3 results", Duration::from_secs(60), || {
        result_lines(&out).len() >= 3
    })
    .await;
    first.kill().expect("SIGKILL the batch");
    let _ = first.wait();
    let before = result_lines(&out).len();
    assert!(before < 12, "the batch was killed before the end");
    let run = std::fs::read_to_string(p.root.join("results.jsonl.run")).expect("run file");
    // The worker goes on meanwhile; then the batch comes back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let args = batch_args(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out2 = p.troupe(&args, &[]).await;
    assert_success(&out2, "resumed batch");
    let stderr = text(&out2.stderr);
    assert!(stderr.contains(&format!("{before} skipped")), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(p.root.join("results.jsonl.run")).unwrap(),
        run,
        "the same run"
    );
    let results = result_lines(&out);
    let ids: BTreeSet<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(results.len(), 12, "{results:#?}");
    assert_eq!(ids.len(), 12);
    assert!(results.iter().all(|r| r["status"] == "completed"));
    // Each task ran once, in one session.
    let log = log_of(&p, "solo");
    for i in 0..12 {
        let id = task_id(i);
        let starts = log.matches(&format!("task {id} started")).count();
        assert_eq!(starts, 1, "task {id} started {starts} times:\n{log}");
    }
    assert_eq!(p.sessions_with(&["--limit", "100"]).await.len(), 12);
    kill_worker(&mut w);
}

/// Subagents across the cluster (config `cluster.subagents`): a task's `explore` subagent
/// runs on the other worker (each worker takes one task at a time, and the parent holds its
/// own), its answer reaches the parent's next step; when the parent is aborted (its batch
/// `timeout`), the cancellation reaches the child on the other worker, whose turn stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_runs_on_another_worker_and_the_parents_abort_reaches_it() {
    let Some((nats, prefix, _cleanup)) = nats_stage(
        "a_subagent_runs_on_another_worker_and_the_parents_abort_reaches_it",
        "s",
    ) else {
        return;
    };
    let child = explore_task;
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", child("CHILD-REMOTE")),
            Step::text("the parent heard back"),
        ])
        .matching("[parent-ok]"),
        Conversation::new(vec![
            Step::text("the answer is 42").with_first_byte_delay_ms(300),
        ])
        .matching("CHILD-REMOTE"),
        Conversation::new(vec![
            Step::tool("task", child("CHILD-SLOW")),
            Step::text("not reached"),
        ])
        .matching("[parent-abort]"),
        Conversation::new(vec![
            Step::text("too late").with_first_byte_delay_ms(60_000),
        ])
        .matching("CHILD-SLOW"),
    ]);
    let mock = start_mock(script).await;
    let p = subagents_project(&mock);
    let mut workers = [
        start_worker(&p, &nats, &prefix, "wa", &["--concurrency", "1"]),
        start_worker(&p, &nats, &prefix, "wb", &["--concurrency", "1"]),
    ];

    // The child runs on the worker that does not hold the parent; its answer comes back.
    let ok = json!({"id": "ok", "prompt": "[parent-ok] delegate"});
    let (done, results) = batch_of_one(&p, &nats, &prefix, "ok", ok).await;
    assert_eq!(results.len(), 1, "{}", text(&done.stderr));
    assert_eq!(results[0]["status"], "completed", "{:#}", results[0]);
    assert_eq!(results[0]["text"], "the parent heard back");
    assert!(
        last_body_with(&mock, "[parent-ok]").contains("the answer is 42"),
        "the child's answer is not in the parent's next request"
    );
    let (parent_node, child_node) = {
        let (a, b) = (log_of(&p, "wa"), log_of(&p, "wb"));
        let holds = |log: &str, what: &str| log.lines().any(|l| l.contains(what));
        let parent = if holds(&a, "task ok started") {
            "wa"
        } else {
            "wb"
        };
        (parent, if parent == "wa" { b } else { a })
    };
    assert!(
        child_node
            .lines()
            .any(|l| l.contains(" started (session ses_") && !l.contains("task ok ")),
        "the child did not run on the other worker than {parent_node}:\n{child_node}"
    );
    // The child is a session of the parent's, in the shared store.
    let sessions = p.sessions().await;
    let parent = sessions
        .iter()
        .find(|s| s["parentID"].is_null())
        .expect("the parent session");
    assert!(
        sessions.iter().any(|s| s["parentID"] == parent["id"]),
        "{sessions:#?}"
    );

    // The parent's abort (its timeout) reaches the child on the other worker.
    let abort = json!({"id": "abort", "prompt": "[parent-abort] delegate", "timeout": 3});
    let t0 = std::time::Instant::now();
    let (done, results) = batch_of_one(&p, &nats, &prefix, "abort", abort).await;
    assert_eq!(results.len(), 1, "{}", text(&done.stderr));
    assert_eq!(results[0]["status"], "failed");
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("timed out"),
        "{:#}",
        results[0]
    );
    // The child's worker ends the child's turn long before its model would have answered.
    let stopped = std::time::Instant::now();
    loop {
        let logs = log_of(&p, "wa") + &log_of(&p, "wb");
        let children_ended = logs
            .lines()
            .filter(|l| !l.contains("task abort ") && !l.contains("task ok "))
            .filter(|l| l.contains(" failed ") || l.contains(" completed "))
            .count();
        if children_ended >= 2 {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "the remote child did not stop:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
    let slow_child = p
        .sessions()
        .await
        .into_iter()
        .find(|s| {
            s["title"]
                .as_str()
                .is_some_and(|t| t.contains("look around"))
                && s["id"] != parent["id"]
                && s["parentID"] != parent["id"]
        })
        .expect("the second child");
    let history = p.session_messages(slow_child["id"].as_str().unwrap()).await;
    let last = history.last().expect("the child's messages");
    assert_eq!(
        last["info"]["error"]["name"], "MessageAbortedError",
        "{last:#}"
    );
    workers.iter_mut().for_each(kill_worker);
}

/// One worker with one slot, a parent that hands two parallel children to the cluster: the
/// parent's slot is lent while it waits (one loan for both children), so the worker runs the
/// children one after the other and the parent finishes. Before, the parent held the only
/// slot and the children waited in the stream until the parent's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_worker_with_one_slot_runs_the_remote_children_of_its_own_parent() {
    let Some((nats, prefix, _cleanup)) = nats_stage(
        "a_single_worker_with_one_slot_runs_the_remote_children_of_its_own_parent",
        "l",
    ) else {
        return;
    };
    let child = explore_task;
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", child("CHILD-ONE")).with_tool("task", child("CHILD-TWO")),
            Step::text("both children answered"),
        ])
        .matching("[lone-parent]"),
        Conversation::new(vec![Step::text("one says 41")]).matching("CHILD-ONE"),
        Conversation::new(vec![Step::text("two says 43")]).matching("CHILD-TWO"),
    ]);
    let mock = start_mock(script).await;
    let p = subagents_project(&mock);
    let mut worker = start_worker(&p, &nats, &prefix, "solo", &["--concurrency", "1"]);
    let lone = json!({"id": "lone", "prompt": "[lone-parent] delegate twice", "timeout": 60});
    let (done, results) = batch_of_one(&p, &nats, &prefix, "lone", lone).await;
    assert_eq!(
        results.len(),
        1,
        "{}\n{}",
        text(&done.stderr),
        log_of(&p, "solo")
    );
    assert_eq!(results[0]["status"], "completed", "{:#}", results[0]);
    assert_eq!(results[0]["text"], "both children answered");
    let body = last_body_with(&mock, "[lone-parent]");
    assert!(
        body.contains("one says 41") && body.contains("two says 43"),
        "the children's answers are not in the parent's next request"
    );
    let log = log_of(&p, "solo");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(" started (session ses_"))
            .count(),
        3,
        "the parent and both children ran on the one worker:\n{log}"
    );
    kill_worker(&mut worker);
}
