//! `troupe batch tasks.jsonl`: many independent prompts under one runtime, through a
//! running `troupe serve` (`--attach URL`, so `troupe monitor` and the web view show it), or
//! on a cluster of `troupe worker`s (`--cluster nats://…`, see `troupe_cluster::client`).
//!
//! Each input line is `{"id", "prompt", "agent"?, "model"?, "dir"?, "schema"?, "timeout"?,
//! "maxSteps"?}`.
//! At most `--parallel` sessions run at once. Each result is appended to `--out` (default
//! stdout) as one JSON line the moment its task ends, so a killed batch keeps what finished;
//! `--resume` skips ids already in the out file, `--retry-failed` runs again only the ids
//! whose last result there failed; otherwise an out file that already holds results is
//! refused (a second run would duplicate every id). A task's `timeout` (or `--timeout`) aborts
//! it after that many seconds; it fails with what it cost so far. On stderr: a progress bar in
//! a terminal and one line per finished task (`✓ id completed 1.2s $0.0012`, `✗ id failed
//! 3.4s $0: error`), then a summary line and a table (tasks, tokens, cost and p50/p95 duration
//! of the completed and the failed). Exit code 1 if any task failed.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use rust_decimal::Decimal;
use troupe_actors::Runtime;
use troupe_session::{SessionId, Tokens};

pub use troupe_cluster::task::{BatchResult, BatchTask, check_timeout, read_tasks};

/// Ids already present in an out file, and of those the ids whose result is not
/// `completed` (lines that do not parse, such as a line cut by a killed process, are
/// ignored). `--resume` skips them all; the failed ones still make the batch exit 1, so a
/// resumed batch never reports success for a file that holds failures.
pub fn done_ids(path: &Path) -> (HashSet<String>, HashSet<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Default::default();
    };
    let mut done = HashSet::new();
    let mut failed = HashSet::new();
    for v in text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let Some(id) = v.get("id").and_then(|i| i.as_str()) else {
            continue;
        };
        if v.get("status").and_then(|s| s.as_str()) != Some("completed") {
            failed.insert(id.to_string());
        } else {
            // A later completed line (a retried task) wins over an earlier failure.
            failed.remove(id);
        }
        done.insert(id.to_string());
    }
    (done, failed)
}

/// Where result lines go.
enum Sink {
    Stdout,
    File(std::fs::File),
}

impl Sink {
    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{line}")?;
                out.flush()
            }
            Sink::File(f) => {
                // One write per line: a killed batch leaves whole lines (or one cut last line,
                // which --resume ignores).
                f.write_all(format!("{line}\n").as_bytes())?;
                f.flush()
            }
        }
    }
}

/// Options of a batch run.
pub struct BatchOptions {
    /// Tasks file.
    pub file: PathBuf,
    /// Sessions at once.
    pub parallel: usize,
    /// Out file (None = stdout).
    pub out: Option<PathBuf>,
    /// Skip ids already in the out file.
    pub resume: bool,
    /// Run again the ids whose last result in the out file failed (with `resume`, also the
    /// ids not in it yet; without, only the failed ones).
    pub retry_failed: bool,
    /// Wall-time limit of a task without its own `timeout`.
    pub timeout: Option<std::time::Duration>,
    /// Default model for tasks without one.
    pub model: Option<String>,
    /// Default agent for tasks without one.
    pub agent: Option<String>,
    /// Base directory.
    pub cwd: PathBuf,
}

/// Where the tasks run.
#[derive(Clone)]
pub enum Exec {
    /// An in-process runtime.
    Local(Runtime),
    /// A running `troupe serve` (sessions are created and prompted over its HTTP API).
    Remote(troupe_server::client::Client),
    /// A cluster of `troupe worker`s: each task is published to its work queue and its
    /// result collected from the run's result subject.
    Cluster(Arc<troupe_cluster::client::ClusterBatch>),
}

/// The stderr line of a finished task: mark, id, status, duration, cost, error.
pub fn finished_line(r: &BatchResult) -> String {
    let mark = if r.status == "completed" {
        "✓"
    } else {
        "✗"
    };
    let mut line = format!(
        "{mark} {} {} {:.1}s ${}",
        r.id,
        r.status,
        r.duration_ms as f64 / 1000.0,
        r.cost.round_dp(6).normalize()
    );
    if r.error.is_none() && r.finish.as_deref() == Some("length") {
        // Completed, but the text may be cut short: say so where the user looks.
        line.push_str(": the answer stopped at the model's output limit (finish: length)");
    }
    if let Some(e) = &r.error {
        let e: String = e.split_whitespace().collect::<Vec<_>>().join(" ");
        let cut: String = e.chars().take(200).collect();
        line.push_str(": ");
        line.push_str(&cut);
        if cut.len() < e.len() {
            line.push('…');
        }
    }
    line
}

/// Run a batch.
pub async fn run(exec: Exec, opts: BatchOptions) -> Result<ExitCode> {
    let tasks = read_tasks(&opts.file)?;
    let (skip, failed_before) = match (&opts.out, opts.resume || opts.retry_failed) {
        (Some(out), true) if opts.retry_failed => {
            if !out.exists() {
                bail!(
                    "--retry-failed: {} does not exist (it reads the results of an earlier run)",
                    out.display()
                );
            }
            let (done, failed) = done_ids(out);
            let mut skip: HashSet<String> = done.difference(&failed).cloned().collect();
            if !opts.resume {
                // Only the failed ids: tasks the earlier run never reached stay for --resume.
                skip.extend(
                    tasks
                        .iter()
                        .filter(|t| !done.contains(&t.id))
                        .map(|t| t.id.clone()),
                );
            }
            (skip, HashSet::new())
        }
        (Some(out), true) => done_ids(out),
        (None, true) => {
            bail!("--resume and --retry-failed need --out FILE (the results of the earlier run)")
        }
        (Some(out), false) => {
            // Appending a second run's rows would duplicate every id: refuse, lose nothing.
            if std::fs::metadata(out).is_ok_and(|m| m.len() > 0) {
                bail!(
                    "--out {}: the file already holds results; pass --resume to finish that run (--retry-failed to run its failed tasks again), or choose another file (or delete it) to start a new one",
                    out.display()
                );
            }
            Default::default()
        }
        (None, false) => Default::default(),
    };
    // Failures recorded by the earlier run for tasks of this file.
    let failed_before = tasks
        .iter()
        .filter(|t| failed_before.contains(&t.id))
        .count();
    let todo: Vec<BatchTask> = tasks
        .iter()
        .filter(|t| !skip.contains(&t.id))
        .cloned()
        .collect();
    let skipped = tasks.len() - todo.len();
    let sink = match &opts.out {
        Some(p) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow!("{}: {e}", p.display()))?;
            // A killed batch may have left a cut last line: end it, so the next result
            // starts on a line of its own (the cut line itself is ignored by --resume).
            let ends_cut = std::fs::read(p)
                .map(|b| b.last().is_some_and(|&c| c != b'\n'))
                .unwrap_or(false);
            if ends_cut {
                f.write_all(b"\n")
                    .map_err(|e| anyhow!("{}: {e}", p.display()))?;
            }
            Sink::File(f)
        }
        None => Sink::Stdout,
    };
    let sink = Arc::new(std::sync::Mutex::new(sink));
    let total = todo.len() as u64;
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let stats = Arc::new(Stats::default());
    // Retries are reported as they happen, so a task waiting on a failing provider does not
    // look hung.
    let names: Arc<std::sync::Mutex<std::collections::HashMap<SessionId, String>>> =
        Default::default();
    let watcher = match &exec {
        Exec::Remote(_) | Exec::Cluster(_) => None,
        Exec::Local(runtime) => Some({
            let mut bus = runtime.bus().subscribe();
            let (names, bar) = (names.clone(), bar.clone());
            tokio::spawn(async move {
                loop {
                    let ev = match bus.recv().await {
                        Ok(ev) => ev,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    };
                    if let troupe_session::Event::SessionStatus {
                        session_id,
                        status:
                            troupe_session::SessionStatus::Retry {
                                attempt,
                                message,
                                next,
                            },
                    } = &*ev
                    {
                        let id = names
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get(session_id)
                            .cloned();
                        let wait = (next - troupe_session::now_ms()).max(0) as f64 / 1000.0;
                        let line = format!(
                            "task {}: attempt {attempt} failed ({}); retrying in {wait:.1}s",
                            id.as_deref().unwrap_or(session_id),
                            message.chars().take(160).collect::<String>()
                        );
                        match &bar {
                            Some(b) => b.println(line),
                            None => eprintln!("{line}"),
                        }
                    }
                }
            })
        }),
    };
    let sem = Arc::new(tokio::sync::Semaphore::new(opts.parallel.max(1)));
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in todo {
        let permit = sem
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let (exec, sink, stats, bar) = (exec.clone(), sink.clone(), stats.clone(), bar.clone());
        let (model, agent, cwd) = (opts.model.clone(), opts.agent.clone(), opts.cwd.clone());
        let names = names.clone();
        // Checked when the file was read.
        let timeout = task
            .timeout
            .map(std::time::Duration::from_secs_f64)
            .or(opts.timeout);
        stats.running.fetch_add(1, Ordering::Relaxed);
        update_bar(&bar, &stats);
        handles.push(tokio::spawn(async move {
            let result = match &exec {
                Exec::Local(runtime) => {
                    let defaults = troupe_cluster::task::TaskDefaults {
                        model,
                        agent,
                        cwd,
                        timeout,
                    };
                    troupe_cluster::task::run_task(
                        runtime,
                        &task,
                        &defaults,
                        &troupe_cluster::task::TaskSession::New,
                        Some(names.as_ref()),
                    )
                    .await
                }
                Exec::Cluster(c) => c.run_task(&task).await,
                Exec::Remote(client) => {
                    run_one_remote(client, task, model, agent, &cwd, timeout).await
                }
            };
            drop(permit);
            stats.running.fetch_sub(1, Ordering::Relaxed);
            if result.status == "completed" {
                stats.done.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.failed.fetch_add(1, Ordering::Relaxed);
            }
            stats
                .tokens
                .fetch_add(result.tokens.total(), Ordering::Relaxed);
            {
                let mut c = stats.cost.lock().unwrap_or_else(|e| e.into_inner());
                *c += result.cost;
            }
            stats
                .finished
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Finished {
                    completed: result.status == "completed",
                    duration_ms: result.duration_ms,
                    tokens: result.tokens.total(),
                    cost: result.cost,
                });
            let line = serde_json::to_string(&result).unwrap_or_default();
            if let Err(e) = sink
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_line(&line)
            {
                eprintln!("troupe: cannot write the result of {}: {e}", result.id);
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
            }
            let done_line = finished_line(&result);
            match &bar {
                Some(b) => {
                    b.println(done_line);
                    b.inc(1);
                }
                None => eprintln!("{done_line}"),
            }
            update_bar(&bar, &stats);
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    if let Some(w) = watcher {
        w.abort();
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let (done, failed) = (
        stats.done.load(Ordering::Relaxed),
        stats.failed.load(Ordering::Relaxed),
    );
    let cost = *stats.cost.lock().unwrap_or_else(|e| e.into_inner());
    let earlier = if failed_before > 0 {
        format!(", {failed_before} failed earlier")
    } else {
        String::new()
    };
    eprintln!(
        "batch: {} tasks, {done} completed, {failed} failed, {skipped} skipped{earlier}, {} tokens, ${}, {:.1}s",
        tasks.len(),
        stats.tokens.load(Ordering::Relaxed),
        cost.round_dp(6),
        started.elapsed().as_secs_f64()
    );
    let finished = std::mem::take(&mut *stats.finished.lock().unwrap_or_else(|e| e.into_inner()));
    if !finished.is_empty() {
        eprint!("{}", summary_table(&finished));
    }
    if let Exec::Local(runtime) = exec {
        runtime.shutdown().await;
    }
    Ok(
        if failed > 0 || failed_before > 0 || stats.write_errors.load(Ordering::Relaxed) > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

#[derive(Default)]
struct Stats {
    done: AtomicU64,
    failed: AtomicU64,
    running: AtomicU64,
    tokens: AtomicU64,
    write_errors: AtomicU64,
    cost: std::sync::Mutex<Decimal>,
    finished: std::sync::Mutex<Vec<Finished>>,
}

/// What the summary table needs of one finished task.
#[derive(Debug, Clone)]
struct Finished {
    completed: bool,
    duration_ms: u64,
    tokens: u64,
    cost: Decimal,
}

/// The nearest-rank percentile `p` (0–100) of sorted values (0 when empty).
fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as u64).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The table printed after the summary line: one row each for the completed and the failed
/// tasks of this run (tasks, tokens, cost in USD, p50 and p95 wall time in seconds), then
/// all of them.
fn summary_table(finished: &[Finished]) -> String {
    let mut out = format!(
        "{:<10} {:>6} {:>10} {:>12} {:>8} {:>8}\n",
        "", "tasks", "tokens", "cost", "p50", "p95"
    );
    type Keep = fn(&Finished) -> bool;
    let rows: [(&str, Keep); 3] = [
        ("completed", |f| f.completed),
        ("failed", |f| !f.completed),
        ("all", |_| true),
    ];
    for (name, keep) in rows {
        let sel: Vec<&Finished> = finished.iter().filter(|f| keep(f)).collect();
        let mut ms: Vec<u64> = sel.iter().map(|f| f.duration_ms).collect();
        ms.sort_unstable();
        let cost: Decimal = sel.iter().map(|f| f.cost).sum();
        out.push_str(&format!(
            "{:<10} {:>6} {:>10} {:>12} {:>7.1}s {:>7.1}s\n",
            name,
            sel.len(),
            sel.iter().map(|f| f.tokens).sum::<u64>(),
            format!("${}", cost.round_dp(6).normalize()),
            percentile(&ms, 50) as f64 / 1000.0,
            percentile(&ms, 95) as f64 / 1000.0,
        ));
    }
    out
}

fn update_bar(bar: &Option<indicatif::ProgressBar>, s: &Stats) {
    if let Some(b) = bar {
        let cost = *s.cost.lock().unwrap_or_else(|e| e.into_inner());
        b.set_message(format!(
            "done {} running {} failed {} | {} tok ${}",
            s.done.load(Ordering::Relaxed),
            s.running.load(Ordering::Relaxed),
            s.failed.load(Ordering::Relaxed),
            s.tokens.load(Ordering::Relaxed),
            cost.round_dp(4)
        ));
    }
}

/// One task through a server: `POST /session` (its directory and a `batch <id>` title), then
/// `POST /session/{id}/message`, which waits for the turn; tokens and cost from the session.
/// Past `timeout`, `POST /session/{id}/abort` ends the turn and the task fails.
async fn run_one_remote(
    client: &troupe_server::client::Client,
    task: BatchTask,
    model: Option<String>,
    agent: Option<String>,
    cwd: &Path,
    timeout: Option<std::time::Duration>,
) -> BatchResult {
    let t0 = Instant::now();
    let fail =
        |session_id: SessionId, error: String| BatchResult::failed(&task.id, session_id, error, t0);
    if task.schema.is_some() {
        return fail(
            SessionId::default(),
            "a task \"schema\" cannot run with --attach yet; run the batch without --attach".into(),
        );
    }
    let dir = match &task.dir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => cwd.join(d),
        None => cwd.to_path_buf(),
    };
    let created = client
        .post(
            "/session",
            &serde_json::json!({"directory": dir.display().to_string(), "title": format!("batch {}", task.id)}),
        )
        .await;
    let sid = match created {
        Ok(s) => match s["id"].as_str() {
            Some(id) => SessionId::from(id),
            None => {
                return fail(
                    SessionId::default(),
                    "the server returned a session without an id".into(),
                );
            }
        },
        Err(e) => return fail(SessionId::default(), e.to_string()),
    };
    let mut body = serde_json::json!({"text": task.prompt});
    if let Some(a) = task.agent.clone().or(agent) {
        body["agent"] = serde_json::json!(a);
    }
    if let Some(m) = task.model.clone().or(model) {
        body["model"] = serde_json::json!(m);
    }
    if let Some(n) = task.max_steps {
        body["maxSteps"] = serde_json::json!(n);
    }
    let path = format!("/session/{sid}/message");
    let post = client.post(&path, &body);
    tokio::pin!(post);
    let mut timed_out = None;
    let reply = match timeout {
        None => post.await.map_err(|e| e.to_string()),
        Some(limit) => match tokio::time::timeout(limit, &mut post).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => {
                timed_out = Some(limit);
                let _ = client
                    .post(&format!("/session/{sid}/abort"), &serde_json::json!({}))
                    .await;
                match tokio::time::timeout(troupe_cluster::task::ABORT_GRACE, &mut post).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err("the aborted turn did not end".to_string()),
                }
            }
        },
    };
    let reply = match reply {
        Ok(v) => v,
        Err(e) if timed_out.is_none() => return fail(sid, e),
        Err(_) => serde_json::Value::Null,
    };
    let text = reply["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p["type"] == "text" && p["synthetic"] != serde_json::json!(true))
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let error = reply["info"]["error"].as_object().map(|e| {
        format!(
            "{}: {}",
            e.get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("UnknownError"),
            e.get("data")
                .and_then(|d| d.get("message"))
                .and_then(|m| m.as_str())
                .unwrap_or("")
        )
    });
    let session = client
        .get(&format!("/session/{sid}"))
        .await
        .unwrap_or_default();
    let tokens: Tokens = serde_json::from_value(session["tokens"].clone()).unwrap_or_default();
    let cost = session["cost"]
        .as_f64()
        .and_then(|c| Decimal::try_from(c).ok())
        .or_else(|| session["cost"].as_str().and_then(|c| c.parse().ok()))
        .unwrap_or_default();
    let error = match timed_out {
        Some(limit) => Some(troupe_cluster::task::timeout_error(limit)),
        None => error,
    };
    BatchResult {
        id: task.id.clone(),
        session_id: sid,
        status: if error.is_none() {
            "completed".into()
        } else {
            "failed".into()
        },
        text,
        tokens,
        cost,
        duration_ms: t0.elapsed().as_millis() as u64,
        error,
        finish: reply["info"]["finish"].as_str().map(str::to_string),
        output: None,
    }
}
