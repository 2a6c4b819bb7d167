//! `troupe batch tasks.jsonl`: many independent prompts under one runtime, or through a
//! running `troupe serve` (`--attach URL`, so `troupe monitor` and the web view show it).
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
use serde::{Deserialize, Serialize};
use troupe_actors::{PromptInput, Runtime};
use troupe_session::Tokens;

/// One input line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchTask {
    /// Unique id of the task (any JSON string).
    pub id: String,
    /// The prompt.
    pub prompt: String,
    /// Agent name (default: the default agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// `provider/model` (default: config).
    #[serde(default)]
    pub model: Option<String>,
    /// Working directory, relative to the batch's directory.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// A JSON Schema the answer must satisfy (structured output): the validated value is
    /// the result's `output`; an answer that never validates fails the task with the last
    /// validation error. Checked when the file is read.
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
    /// Wall-time limit of the task, seconds (> 0; default `--timeout`, else none). Past it
    /// the task's turn is aborted and the task fails with `timed out after N s`, keeping the
    /// tokens and cost spent until then.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Step limit of the task's turn (JSON key `maxSteps`, ≥ 1; default: the agent's
    /// `steps`, else 100). A task that reaches it ends as any turn at its limit.
    #[serde(default, rename = "maxSteps")]
    pub max_steps: Option<u32>,
}

/// How long an aborted task may take to wind down (its running tool calls and provider
/// request are cancelled) before its result is written without waiting any longer.
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Parse a timeout in seconds: finite and > 0 (`what` names it in the error).
pub fn check_timeout(secs: f64, what: &str) -> Result<std::time::Duration> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(std::time::Duration::from_secs_f64(secs))
    } else {
        bail!("{what} must be a number of seconds > 0, got {secs}")
    }
}

/// One output line.
#[derive(Debug, Clone, Serialize)]
pub struct BatchResult {
    /// Task id.
    pub id: String,
    /// Session id (empty when the session could not be created).
    pub session_id: String,
    /// `completed` or `failed`.
    pub status: &'static str,
    /// Final text of the turn.
    pub text: String,
    /// Tokens of the session.
    pub tokens: Tokens,
    /// Cost of the turn, USD.
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: Decimal,
    /// Wall time of the task, ms.
    pub duration_ms: u64,
    /// Error message when failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The validated answer of a task with a `schema`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

/// Parse the tasks file; errors name the file and line.
pub fn read_tasks(path: &Path) -> Result<Vec<BatchTask>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut tasks = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // One position, file:line:column (serde's own "at line 1 column N" would be a second
        // line number, counted within the task's line).
        let task: BatchTask = serde_json::from_str(line).map_err(|e| {
            let msg = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let msg = msg.strip_suffix(&suffix).unwrap_or(&msg);
            let indent = raw.len() - raw.trim_start().len();
            anyhow!(
                "{}:{}:{}: {msg}",
                path.display(),
                i + 1,
                e.column() + indent
            )
        })?;
        if task.id.trim().is_empty() {
            bail!(
                "{}:{}: task id is empty (results are matched and resumed by id)",
                path.display(),
                i + 1
            );
        }
        if task.prompt.trim().is_empty() {
            bail!(
                "{}:{}: task {} has an empty prompt",
                path.display(),
                i + 1,
                task.id
            );
        }
        if let Some(schema) = &task.schema
            && let Err(e) = troupe_tools::builtin::StructuredOutputTool::new(schema)
        {
            bail!("{}:{}: task {}: {e}", path.display(), i + 1, task.id);
        }
        if task.max_steps == Some(0) {
            bail!(
                "{}:{}: task {}: \"maxSteps\" must be 1 or more",
                path.display(),
                i + 1,
                task.id
            );
        }
        if let Some(t) = task.timeout {
            check_timeout(t, "\"timeout\"")
                .map_err(|e| anyhow!("{}:{}: task {}: {e}", path.display(), i + 1, task.id))?;
        }
        if !seen.insert(task.id.clone()) {
            bail!(
                "{}:{}: duplicate task id {}",
                path.display(),
                i + 1,
                task.id
            );
        }
        tasks.push(task);
    }
    Ok(tasks)
}

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
    let names: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>> =
        Default::default();
    let watcher = match &exec {
        Exec::Remote(_) => None,
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
                Exec::Local(rt) => run_one(rt, task, model, agent, &cwd, &names, timeout).await,
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

async fn run_one(
    rt: &Runtime,
    task: BatchTask,
    model: Option<String>,
    agent: Option<String>,
    cwd: &Path,
    names: &std::sync::Mutex<std::collections::HashMap<String, String>>,
    timeout: Option<std::time::Duration>,
) -> BatchResult {
    let t0 = Instant::now();
    let fail = |session_id: String, error: String, t0: Instant| BatchResult {
        id: task.id.clone(),
        session_id,
        status: "failed",
        text: String::new(),
        tokens: Tokens::default(),
        cost: Decimal::ZERO,
        duration_ms: t0.elapsed().as_millis() as u64,
        error: Some(error),
        output: None,
    };
    let dir = match &task.dir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => cwd.join(d),
        None => cwd.to_path_buf(),
    };
    if !dir.is_dir() {
        return fail(
            String::new(),
            format!("directory {} does not exist", dir.display()),
            t0,
        );
    }
    let session = match rt.create_session(&dir, None).await {
        Ok(s) => s,
        Err(e) => return fail(String::new(), e.to_string(), t0),
    };
    names
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(session.id.clone(), task.id.clone());
    let input = PromptInput {
        text: task.prompt.clone(),
        agent: task.agent.clone().or(agent),
        model: task.model.clone().or(model),
        system: None,
        synthetic: Vec::new(),
        compact: false,
        no_reply: false,
        schema: task.schema.clone(),
        steer: false,
        max_steps: task.max_steps,
        ..Default::default()
    };
    let prompt = rt.prompt(&session.id, input);
    tokio::pin!(prompt);
    let mut timed_out = None;
    let outcome = match timeout {
        None => prompt.await,
        Some(limit) => match tokio::time::timeout(limit, &mut prompt).await {
            Ok(r) => r,
            Err(_) => {
                // Abort the turn and wait for it to wind down, so the result carries what
                // the task cost until then and nothing of it runs on.
                timed_out = Some(limit);
                rt.abort_timed_out(&session.id);
                match tokio::time::timeout(ABORT_GRACE, &mut prompt).await {
                    Ok(r) => r,
                    Err(_) => Err(troupe_actors::RuntimeError::Turn(
                        "the aborted turn did not end".into(),
                    )),
                }
            }
        },
    };
    if let Some(limit) = timed_out {
        let mut r = match outcome {
            Ok(turn) => BatchResult {
                text: turn.text,
                tokens: turn.tokens,
                cost: turn.cost,
                ..fail(session.id.clone(), String::new(), t0)
            },
            Err(_) => fail(session.id.clone(), String::new(), t0),
        };
        r.error = Some(timeout_error(limit));
        return r;
    }
    match outcome {
        Ok(turn) => BatchResult {
            id: task.id.clone(),
            session_id: session.id.clone(),
            status: if turn.error.is_none() {
                "completed"
            } else {
                "failed"
            },
            text: turn.text,
            tokens: turn.tokens,
            cost: turn.cost,
            duration_ms: t0.elapsed().as_millis() as u64,
            error: turn.error.map(|e| format!("{}: {}", e.name, e.message())),
            output: turn.structured,
        },
        Err(e) => fail(session.id.clone(), e.to_string(), t0),
    }
}

/// The error of a task that ran past its timeout.
fn timeout_error(limit: std::time::Duration) -> String {
    format!(
        "timed out after {}s (the task's turn was aborted)",
        limit.as_secs_f64()
    )
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
    let fail = |session_id: String, error: String| BatchResult {
        id: task.id.clone(),
        session_id,
        status: "failed",
        text: String::new(),
        tokens: Tokens::default(),
        cost: Decimal::ZERO,
        duration_ms: t0.elapsed().as_millis() as u64,
        error: Some(error),
        output: None,
    };
    if task.schema.is_some() {
        return fail(
            String::new(),
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
            Some(id) => id.to_string(),
            None => {
                return fail(
                    String::new(),
                    "the server returned a session without an id".into(),
                );
            }
        },
        Err(e) => return fail(String::new(), e.to_string()),
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
                match tokio::time::timeout(ABORT_GRACE, &mut post).await {
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
        Some(limit) => Some(timeout_error(limit)),
        None => error,
    };
    BatchResult {
        id: task.id.clone(),
        session_id: sid,
        status: if error.is_none() {
            "completed"
        } else {
            "failed"
        },
        text,
        tokens,
        cost,
        duration_ms: t0.elapsed().as_millis() as u64,
        error,
        output: None,
    }
}
