//! `troupe-bench`: run N scripted sessions of M steps through ONE troupe runtime against an
//! in-process `troupe-mock`, and report wall time, CPU time, RSS, steps/s and the per-step
//! orchestrator overhead (step wall time − provider time − tool time).
//!
//! ```text
//! cargo run --release -p troupe-bench -- --sessions N --steps M [--parallel P] [--tools|--no-tools]
//!                                        [--db PATH] [--json] [--chunk-size C] [--delay-ms D]
//! ```
//!
//! See `bench/README.md` for what each number means and how precise it is.

// The report is one `json!` literal with many keys.
#![recursion_limit = "256"]

mod measure;
mod mockthread;
mod script;
mod step_cpu;
mod timed;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use troupe_actors::{PromptInput, Runtime, RuntimeOptions, TurnResult};
use troupe_config::{Config, LoadedConfig};
use troupe_session::{Bus, Store};
use troupe_testkit::MOCK_MODEL;
use troupe_tools::AllowAll;

use crate::script::ToolMix;

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "troupe-bench",
    about = "N scripted sessions of M steps through one troupe runtime against an in-process mock provider"
)]
struct Args {
    /// Number of sessions (N ≥ 1), each running one turn.
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Steps per session (M ≥ 1): M−1 tool steps, then a text step.
    #[arg(long, default_value_t = 6)]
    steps: usize,
    /// Maximum prompts in flight at once (default: N, i.e. all at once).
    #[arg(long)]
    parallel: Option<usize>,
    /// Tool steps call list, read, write, glob, grep in rotation (the default).
    #[arg(long, overrides_with = "no_tools")]
    tools: bool,
    /// Tool steps all call `read` on one small file (the cheapest tool).
    #[arg(long, overrides_with = "tools")]
    no_tools: bool,
    /// Store: an SQLite file or a `postgres://…` URL (default: a fresh SQLite file in a temp
    /// directory).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    json: bool,
    /// Characters per streamed text/argument delta of the mock (≥ 1).
    #[arg(long, default_value_t = troupe_testkit::DEFAULT_CHUNK_SIZE)]
    chunk_size: usize,
    /// Print the mock script for `--steps` / `--tools` as JSON (for a standalone `troupe-mock
    /// --script FILE`) and exit.
    #[arg(long)]
    print_script: bool,
    /// Create one session workspace (the files the tool steps use) in DIR and exit.
    #[arg(long, value_name = "DIR")]
    init_workspace: Option<PathBuf>,
    /// Mock delay between SSE events, ms (0 = stream as fast as possible).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Let the in-process mock keep every request body (its default for tests). Off by default:
    /// the bodies (~10 KB of JSON each, several times that parsed) would dominate the RSS and
    /// the bench would measure the mock's log instead of troupe.
    #[arg(long)]
    record_bodies: bool,
    /// Make every workspace a git repository and turn file snapshots on (issue 15): each
    /// step then snapshots the project before and after its tools.
    #[arg(long)]
    snapshots: bool,
    /// Extra small files per workspace (e.g. 1000, the project size the snapshot cost is
    /// stated for).
    #[arg(long, default_value_t = 0)]
    files: usize,
    /// After the run, read the first session's messages N times a page at a time (`limit`
    /// 50, `before` spread over the whole session, each page encoded to JSON as `GET
    /// /session/{id}/message?limit=50&before=` does) and report the time per page in µs.
    #[arg(long, default_value_t = 0, value_name = "N")]
    page_probe: usize,
    /// Turns per session (K ≥ 1), each of `--steps` steps. All sessions finish turn t before
    /// any starts turn t+1; with K ≥ 2 the RSS is read while every session is idle between
    /// its first and second turn.
    #[arg(long, default_value_t = 1)]
    turns: usize,
    /// Read the process's (and the mock thread's) CPU time at every step start and report
    /// the CPU per step of the first and the last 100 steps (long sessions: use with
    /// `--sessions 1`).
    #[arg(long)]
    step_cpu: bool,
}

/// Validated settings.
#[derive(Debug, Clone)]
struct Settings {
    sessions: usize,
    steps: usize,
    parallel: usize,
    mix: ToolMix,
    db: Option<PathBuf>,
    json: bool,
    chunk_size: usize,
    delay_ms: u64,
    record_bodies: bool,
    snapshots: bool,
    files: usize,
    page_probe: usize,
    turns: usize,
    step_cpu: bool,
}

impl Args {
    fn settings(self) -> Result<Settings> {
        if self.sessions == 0 {
            bail!("--sessions must be at least 1");
        }
        if self.steps == 0 {
            bail!("--steps must be at least 1");
        }
        if self.steps > u32::MAX as usize {
            bail!("--steps is too large (at most {})", u32::MAX);
        }
        let parallel = self.parallel.unwrap_or(self.sessions);
        if parallel == 0 {
            bail!("--parallel must be at least 1");
        }
        if self.chunk_size == 0 {
            bail!("--chunk-size must be at least 1");
        }
        if self.turns == 0 {
            bail!("--turns must be at least 1");
        }
        if self.steps.saturating_mul(self.turns) > u32::MAX as usize {
            bail!("--steps × --turns is too large (at most {})", u32::MAX);
        }
        Ok(Settings {
            sessions: self.sessions,
            steps: self.steps,
            parallel: parallel.min(self.sessions),
            mix: if self.no_tools {
                ToolMix::ReadOnly
            } else {
                ToolMix::Rotate
            },
            db: self.db,
            json: self.json,
            chunk_size: self.chunk_size,
            delay_ms: self.delay_ms,
            record_bodies: self.record_bodies,
            snapshots: self.snapshots,
            files: self.files,
            page_probe: self.page_probe,
            turns: self.turns,
            step_cpu: self.step_cpu,
        })
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (print_script, init_workspace) = (args.print_script, args.init_workspace.clone());
    let settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("troupe-bench: {e}");
            return ExitCode::from(2);
        }
    };
    if print_script {
        let script = script::build_script(
            settings.steps,
            settings.turns,
            settings.mix,
            settings.chunk_size,
            settings.delay_ms,
        );
        println!("{}", script.to_json());
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = init_workspace {
        return match script::create_workspace(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "troupe-bench: cannot create the workspace {}: {e}",
                    dir.display()
                );
                ExitCode::from(1)
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("troupe-bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(&settings)) {
        Ok(report) => {
            if settings.json {
                println!("{}", report.json);
            } else {
                print!("{}", report.human);
            }
            match report.first_error {
                None => ExitCode::SUCCESS,
                Some(e) => {
                    eprintln!(
                        "troupe-bench: {} of {} sessions failed; first error: {e}",
                        report.failed, settings.sessions
                    );
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("troupe-bench: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::from(1)
        }
    }
}

/// One turn of one session: its index, its id (once created), the turn's wall time in ms
/// and its result.
type TurnDone = (usize, Option<String>, f64, Result<TurnResult, String>);

/// One finished session (all its turns).
struct SessionRun {
    index: usize,
    session_id: Option<String>,
    /// Wall time of its `prompt` calls (the turns), ms.
    turn_ms: f64,
    /// Steps run, over all turns.
    steps: u32,
    /// Why the session failed (the first failed turn), if it did.
    error: Option<String>,
}

impl SessionRun {
    /// Fold one turn's result in: steps add up; a failed turn, or one that ran a different
    /// number of steps than scripted, fails the session.
    fn add_turn(&mut self, ms: f64, result: Result<TurnResult, String>, expected: usize) {
        self.turn_ms += ms;
        match result {
            Err(e) => self.error = Some(e),
            Ok(t) => {
                self.steps += t.steps;
                if let Some(e) = &t.error {
                    self.error = Some(format!("{}: {}", e.name, e.message()));
                } else if t.steps as usize != expected {
                    self.error = Some(format!("ran {} steps, expected {expected}", t.steps));
                }
            }
        }
    }
}

/// What `run` hands back to `main`.
struct Report {
    json: Value,
    human: String,
    failed: usize,
    first_error: Option<String>,
}

/// The provider config pointing the `mock` provider (OpenAI Chat Completions) at `base_url`.
fn bench_config(base_url: &str) -> Result<LoadedConfig> {
    let doc = json!({
        "model": format!("mock/{MOCK_MODEL}"),
        "provider": {
            "mock": {
                "name": "troupe-mock",
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base_url, "apiKey": "sk-bench"},
                // A context no bench session fills: a long run (--steps 5000) measures
                // steps, not compactions (which would also put the mock's step count,
                // taken from the request's assistant messages, out of step).
                "models": {MOCK_MODEL: {"name": "Mock model", "limit": {"context": 1_000_000_000u64, "output": 8192}}}
            }
        }
    });
    let config =
        Config::from_jsonc("bench", &doc.to_string()).map_err(|e| anyhow!("bench config: {e}"))?;
    Ok(LoadedConfig::from_config(config))
}

/// Distribution summary of per-session values.
fn dist(values: &[f64]) -> Value {
    let mean = if values.is_empty() {
        None
    } else {
        Some(values.iter().sum::<f64>() / values.len() as f64)
    };
    json!({
        "p50": measure::percentile(values, 50.0).map(round3),
        "p99": measure::percentile(values, 99.0).map(round3),
        "max": measure::percentile(values, 100.0).map(round3),
        "mean": mean.map(round3),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn fmt_dist(v: &Value) -> String {
    let f = |k: &str| v[k].as_f64().map_or("-".to_string(), |x| format!("{x:.3}"));
    format!(
        "p50 {}  p99 {}  max {}  mean {}",
        f("p50"),
        f("p99"),
        f("max"),
        f("mean")
    )
}

async fn run(s: &Settings) -> Result<Report> {
    let root = tempfile::Builder::new()
        .prefix("troupe-bench-")
        .tempdir()
        .context("cannot create a temp directory")?;
    let root_path = root.path().to_path_buf();
    let workspaces: Vec<PathBuf> = (0..s.sessions)
        .map(|k| root_path.join("ws").join(format!("ws-{k}")))
        .collect();
    {
        let dirs = workspaces.clone();
        let (files, git) = (s.files, s.snapshots);
        tokio::task::spawn_blocking(move || {
            dirs.iter().try_for_each(|d| {
                script::create_workspace(d)?;
                script::add_files(d, files)?;
                if git {
                    script::git_init(d)?;
                }
                Ok::<(), std::io::Error>(())
            })
        })
        .await
        .context("workspace setup task failed")?
        .context("cannot create the session workspaces")?;
    }
    if s.snapshots {
        // Files written in the same second as a git index are "racily clean": git re-hashes
        // them on every later `git add` until the index is rewritten. A user's project files
        // are older than that; wait so the bench's are too (not part of the measured span).
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let db_path = s.db.clone().unwrap_or_else(|| root_path.join("bench.db"));
    let bus = Bus::new();
    let store = Store::open_target(db_path.as_os_str(), bus.clone()).map_err(|e| anyhow!("{e}"))?;

    let mock = mockthread::MockThread::start(script::build_script(
        s.steps,
        s.turns,
        s.mix,
        s.chunk_size,
        s.delay_ms,
    ))?;
    let server = mock.server();
    server.set_record_bodies(s.record_bodies);
    let mut config = bench_config(&server.base_url())?;
    // Agents are looked up under the worktree's `.troupe/`: point it at the (empty) bench root
    // so the directory the bench is started from cannot change the workload.
    config.worktree = root_path.clone();
    // No retries: the mock injects no faults, so any provider failure is a bug to surface now.
    // The step limit is raised to the scripted length (a long-session run, e.g. --steps
    // 5000, is one turn).
    let opts = RuntimeOptions {
        max_retries: 0,
        max_steps: u32::try_from(s.steps)
            .unwrap_or(u32::MAX)
            .max(RuntimeOptions::default().max_steps),
        snapshot_dir: s.snapshots.then(|| root_path.join("data")),
        ..RuntimeOptions::default()
    };
    let (registry, tool_times) = timed::builtin();
    let runtime = Runtime::start(store.clone(), config, registry, Arc::new(AllowAll), opts)
        .await
        .map_err(|e| anyhow!("runtime: {e}"))?;

    let tenth = s.sessions.div_ceil(10).max(1);
    let finished = Arc::new(AtomicUsize::new(0));
    let rss_at_tenth: Arc<Mutex<Option<f64>>> = Arc::new(Mutex::new(None));
    let sem = Arc::new(Semaphore::new(s.parallel));
    // Memory baseline: the runtime and the mock started, no session yet.
    let rss_base = measure::current_rss_mib().await;
    let step_cpu = s
        .step_cpu
        .then(|| step_cpu::start(bus.clone(), mock.cpu_clock()));
    let usage0 = measure::usage().unwrap_or_default();
    let mock_cpu0 = mock.cpu_s();
    let children0 = measure::children_usage().unwrap_or_default();
    let t0 = Instant::now();
    let mut probe_time = Duration::ZERO;
    let mut rss_idle: Option<f64> = None;
    let mut runs: Vec<SessionRun> = (0..s.sessions)
        .map(|index| SessionRun {
            index,
            session_id: None,
            turn_ms: 0.0,
            steps: 0,
            error: None,
        })
        .collect();
    let mut join_errors: Vec<String> = Vec::new();
    // Turn by turn: every session runs turn t before any runs turn t+1, so between turns all
    // sessions are idle at once (the idle-session memory reading).
    for turn in 0..s.turns {
        let mut set: JoinSet<TurnDone> = JoinSet::new();
        for (index, dir) in workspaces.iter().cloned().enumerate() {
            if runs[index].error.is_some() {
                continue;
            }
            let permit = sem
                .clone()
                .acquire_owned()
                .await
                .context("semaphore closed")?;
            let runtime = runtime.clone();
            let finished = finished.clone();
            let rss_at_tenth = rss_at_tenth.clone();
            let existing = runs[index].session_id.clone();
            set.spawn(async move {
                let _permit = permit;
                let sid = match existing {
                    Some(id) => id,
                    None => match runtime.create_session(&dir, None).await {
                        Ok(session) => session.id,
                        Err(e) => return (index, None, 0.0, Err(format!("create session: {e}"))),
                    },
                };
                let text = format!(
                    "bench session {index}, turn {turn}: list, read, write, glob and grep this workspace"
                );
                let start = Instant::now();
                let result = runtime
                    .prompt(
                        &sid,
                        PromptInput {
                            text,
                            ..Default::default()
                        },
                    )
                    .await;
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                if turn == 0 && finished.fetch_add(1, Ordering::SeqCst) + 1 == tenth {
                    let rss = measure::current_rss_mib().await;
                    if let Ok(mut slot) = rss_at_tenth.lock() {
                        *slot = rss;
                    }
                }
                (index, Some(sid), ms, result.map_err(|e| e.to_string()))
            });
        }
        while let Some(r) = set.join_next().await {
            match r {
                Ok((index, sid, ms, result)) => {
                    let run = &mut runs[index];
                    if sid.is_some() {
                        run.session_id = sid;
                    }
                    run.add_turn(ms, result, s.steps);
                }
                Err(e) => join_errors.push(format!("session task failed: {e}")),
            }
        }
        if turn == 0 && s.turns > 1 {
            // Every session is between its turns: actors stopped, store flushed.
            let p0 = Instant::now();
            settle(&runtime).await;
            store
                .flush()
                .await
                .map_err(|e| anyhow!("store flush: {e}"))?;
            rss_idle = measure::current_rss_mib().await;
            probe_time += p0.elapsed();
        }
    }
    let wall = t0.elapsed().saturating_sub(probe_time);
    let usage1 = measure::usage().unwrap_or_default();
    let mock_cpu1 = mock.cpu_s();
    let children1 = measure::children_usage().unwrap_or_default();
    let step_samples = match step_cpu {
        Some(h) => h.stop().await,
        None => (Vec::new(), 0),
    };
    runs.sort_by_key(|r| r.index);

    settle(&runtime).await;
    let live_after = runtime.live_sessions();
    store
        .flush()
        .await
        .map_err(|e| anyhow!("store flush: {e}"))?;
    let rss_after = measure::current_rss_mib().await;
    // The same after handing freed heap memory back to the kernel: what is left is live
    // data (plus caches such as SQLite's pages), the rest was the allocator's free lists.
    measure::trim_heap();
    let rss_after_trim = measure::current_rss_mib().await;
    // Peak RSS before the request snapshot below (which clones every recorded body).
    let peak_rss_mib = measure::usage().map_or(usage1.max_rss_mib, |u| u.max_rss_mib);
    let rss_tenth = rss_at_tenth.lock().ok().and_then(|g| *g);
    let counters = &runtime.shared().counters;
    let (steps_started, tool_crashes, processor_crashes) = (
        counters.steps.load(Ordering::Relaxed),
        counters.tool_crashes.load(Ordering::Relaxed),
        counters.processor_crashes.load(Ordering::Relaxed),
    );

    // Provider time per session from the mock's request log (after the RSS readings: the
    // snapshot clones every recorded request body).
    let requests = server.requests();
    // The snapshot is a deep copy of the mock's records, so the RSS it adds estimates what the
    // mock holds (an underestimate when the allocator reuses freed memory).
    let rss_after_snapshot = measure::current_rss_mib().await;
    let mock_rss_estimate = match (rss_after, rss_after_snapshot) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    let provider = measure::provider_us_by_session(&requests);
    let mock_requests = requests.len();
    // What the mock keeps in memory (it records every request body): serialized size, a lower
    // bound of its share of the RSS.
    let mock_body_mib = requests
        .iter()
        .map(|r| serde_json::to_string(&r.body).map_or(0, |b| b.len()))
        .sum::<usize>() as f64
        / (1024.0 * 1024.0);
    drop(requests);

    // Tool errors from the stored tool parts (tool time comes from the timed tools, in µs).
    let ids: Vec<String> = runs.iter().filter_map(|r| r.session_id.clone()).collect();
    let tool_errors: Vec<Option<String>> = store
        .read(move |r| {
            ids.iter()
                .map(|id| r.messages(id).map(|h| measure::tool_ms(&h).1))
                .collect()
        })
        .await
        .map_err(|e| anyhow!("store read: {e}"))?;
    let mut tool_iter = tool_errors.into_iter();
    let tool_us = tool_times.lock().map(|t| t.clone()).unwrap_or_default();

    let mut failed = join_errors.len();
    let mut first_error = join_errors.into_iter().next();
    let mut total_steps: u64 = 0;
    let (mut overhead, mut prov_step, mut tool_step, mut turn_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in &runs {
        let tool_error = if r.session_id.is_some() {
            tool_iter.next().flatten()
        } else {
            None
        };
        total_steps += u64::from(r.steps);
        if let Some(e) = r.error.clone().or(tool_error) {
            failed += 1;
            first_error.get_or_insert_with(|| {
                format!(
                    "session {} ({}): {e}",
                    r.index,
                    r.session_id.as_deref().unwrap_or("not created")
                )
            });
            continue;
        }
        let Some(sid) = &r.session_id else {
            continue;
        };
        let prov_ms = provider.get(sid).copied().unwrap_or(0) as f64 / 1000.0;
        let tools_ms = tool_us.get(sid).copied().unwrap_or(0) as f64 / 1000.0;
        let steps = f64::from(r.steps.max(1));
        if let Some(o) = measure::overhead_per_step_ms(r.turn_ms, prov_ms, tools_ms, r.steps) {
            overhead.push(o);
        }
        prov_step.push(prov_ms / steps);
        tool_step.push(tools_ms / steps);
        turn_ms.push(r.turn_ms / s.turns as f64);
    }

    let pages = match runs.first().and_then(|r| r.session_id.clone()) {
        Some(sid) if s.page_probe > 0 => Some(page_probe(&store, sid, s.page_probe).await?),
        _ => None,
    };
    let rss_after_probe = measure::current_rss_mib().await;

    let wall_s = wall.as_secs_f64();
    let cpu_s = usage1.cpu_s - usage0.cpu_s;
    let mock_cpu_s = mock_cpu1 - mock_cpu0;
    let troupe_cpu_s = cpu_s - mock_cpu_s;
    let per_step = |x: f64| {
        if total_steps > 0 {
            x * 1000.0 / total_steps as f64
        } else {
            0.0
        }
    };
    // Memory at rest: what the run left in the process, per session (all actors stopped).
    let per_session_kib = |rss: Option<f64>| match (rss, rss_base) {
        (Some(r), Some(b)) => Some((r - b) * 1024.0 / s.sessions as f64),
        _ => None,
    };
    let (step_samples, step_lag) = step_samples;
    let step_window = step_cpu::first_last(&step_samples, 100);
    let steps_per_s = if wall_s > 0.0 {
        total_steps as f64 / wall_s
    } else {
        0.0
    };
    let cpu_ms_per_step = if total_steps > 0 {
        cpu_s * 1000.0 / total_steps as f64
    } else {
        0.0
    };
    // Child processes: git for snapshots (and bash, which the bench's tool mix does not call).
    let child_cpu_s = children1.cpu_s - children0.cpu_s;
    let child_cpu_ms_per_step = if total_steps > 0 {
        child_cpu_s * 1000.0 / total_steps as f64
    } else {
        0.0
    };
    let growth = match (rss_tenth, rss_after) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let later = s.sessions.saturating_sub(tenth);
    // Growth minus the mock's records of the later sessions (records are per request, and every
    // session sends the same number of requests).
    let growth_troupe = match (growth, mock_rss_estimate) {
        (Some(g), Some(m)) => Some(g - m * later as f64 / s.sessions as f64),
        _ => None,
    };
    let growth_per_session_kib = growth
        .filter(|_| later > 0)
        .map(|g| g * 1024.0 / later as f64);
    let mix = match s.mix {
        ToolMix::Rotate => "rotate (list, read, write, glob, grep)",
        ToolMix::ReadOnly => "read only",
    };
    let db_shown =
        s.db.as_ref()
            .map_or("(temp file)".to_string(), |p| p.display().to_string());
    let j = json!({
        "sessions": s.sessions,
        "steps_per_session": s.steps,
        "parallel": s.parallel,
        "tool_mix": mix,
        "chunk_size": s.chunk_size,
        "delay_ms": s.delay_ms,
        "mock_records_bodies": s.record_bodies,
        "db": db_shown,
        "total_steps": total_steps,
        "failed_sessions": failed,
        "first_error": first_error,
        "wall_s": round3(wall_s),
        "cpu_s": round3(cpu_s),
        "cpu_ms_per_step": round3(cpu_ms_per_step),
        "mock_cpu_s": round3(mock_cpu_s),
        "troupe_cpu_s": round3(troupe_cpu_s),
        "troupe_cpu_ms_per_step": round3(per_step(troupe_cpu_s)),
        "turns_per_session": s.turns,
        "rss_base_mib": rss_base.map(round3),
        "rss_idle_between_turns_mib": rss_idle.map(round3),
        "idle_kib_per_session": per_session_kib(rss_idle).map(round3),
        "at_rest_kib_per_session": per_session_kib(rss_after).map(round3),
        "rss_after_run_trimmed_mib": rss_after_trim.map(round3),
        "at_rest_trimmed_kib_per_session": per_session_kib(rss_after_trim).map(round3),
        "step_cpu": s.step_cpu.then(|| json!({
            "samples": step_samples.len(),
            "bus_events_lagged": step_lag,
            "first_last_100": step_window.clone(),
        })),
        "snapshots": s.snapshots,
        "extra_files": s.files,
        "child_cpu_s": round3(child_cpu_s),
        "child_cpu_ms_per_step": round3(child_cpu_ms_per_step),
        "steps_per_s": round3(steps_per_s),
        "peak_rss_mib": round3(peak_rss_mib),
        "mock_recorded_body_mib": round3(mock_body_mib),
        "rss_after_first_10pct_mib": rss_tenth.map(round3),
        "rss_after_run_mib": rss_after.map(round3),
        "rss_growth_mib": growth.map(round3),
        "rss_growth_kib_per_later_session": growth_per_session_kib.map(round3),
        "mock_records_rss_estimate_mib": mock_rss_estimate.map(round3),
        "rss_growth_excluding_mock_mib": growth_troupe.map(round3),
        "overhead_ms_per_step": dist(&overhead),
        "provider_ms_per_step": dist(&prov_step),
        "tool_ms_per_step": dist(&tool_step),
        "turn_ms": dist(&turn_ms),
        "live_sessions_after": live_after,
        "mock_requests": mock_requests,
        "counters": {"steps": steps_started, "tool_crashes": tool_crashes, "processor_crashes": processor_crashes},
        "page_probe": pages.as_ref().map(|p| json!({
            "reads": p.us.len(),
            "messages_in_session": p.messages,
            "page_read_us": dist(&p.us),
            "session_read_us": dist(&p.baseline_us),
            "rss_after_probe_mib": rss_after_probe.map(round3),
        })),
    });
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut h = String::new();
    h.push_str(&format!(
        "troupe-bench: {} sessions x {} steps, parallel {}, tools: {mix}\n",
        s.sessions, s.steps, s.parallel
    ));
    h.push_str(&format!("  steps          {total_steps} total, {failed} failed sessions, {mock_requests} provider requests\n"));
    h.push_str(&format!(
        "  wall           {wall_s:.3} s   ({steps_per_s:.1} steps/s)\n"
    ));
    h.push_str(&format!("  cpu            {cpu_s:.3} s user+sys   ({cpu_ms_per_step:.3} ms/step, includes the in-process mock)\n"));
    h.push_str(&format!(
        "  troupe cpu     {troupe_cpu_s:.3} s   ({:.3} ms/step; the mock thread took {mock_cpu_s:.3} s)\n",
        per_step(troupe_cpu_s)
    ));
    h.push_str(&format!(
        "  child cpu      {child_cpu_s:.3} s   ({child_cpu_ms_per_step:.3} ms/step; snapshots {}, {} extra files)\n",
        if s.snapshots { "on" } else { "off" },
        s.files
    ));
    if s.record_bodies {
        h.push_str(&format!(
            "  peak rss       {peak_rss_mib:.1} MiB   (the in-process mock holds {mock_body_mib:.1} MiB of recorded request JSON, more as parsed values)\n"
        ));
    } else {
        h.push_str(&format!(
            "  peak rss       {peak_rss_mib:.1} MiB   (mock keeps request summaries only)\n"
        ));
    }
    h.push_str(&format!(
        "  rss            {} MiB after first 10% ({tenth} sessions), {} MiB after the run (growth {} MiB, {} KiB per later session)\n",
        opt(rss_tenth),
        opt(rss_after),
        opt(growth),
        opt(growth_per_session_kib)
    ));
    h.push_str(&format!(
        "  mock records   ~{} MiB of RSS (snapshot copy); growth without them ~{} MiB\n",
        opt(mock_rss_estimate),
        opt(growth_troupe)
    ));
    h.push_str(&format!(
        "  at rest        {} MiB before the sessions; after the run {} KiB per session ({} after malloc_trim){}\n",
        opt(rss_base),
        opt(per_session_kib(rss_after)),
        opt(per_session_kib(rss_after_trim)),
        match rss_idle {
            Some(_) => format!(
                "; idle between turns {} MiB, {} KiB per session",
                opt(rss_idle),
                opt(per_session_kib(rss_idle))
            ),
            None => String::new(),
        }
    ));
    if let Some(w) = &step_window {
        h.push_str(&format!(
            "  step cpu       first 100 steps {} ms/step, last 100 {} ms/step (troupe only: {} → {}, ×{}); {} samples, {step_lag} bus events lagged\n",
            w["first_cpu_ms_per_step"], w["last_cpu_ms_per_step"],
            w["first_troupe_cpu_ms_per_step"], w["last_troupe_cpu_ms_per_step"],
            w["troupe_last_over_first"], step_samples.len()
        ));
    } else if s.step_cpu {
        h.push_str(&format!(
            "  step cpu       {} samples: too few for first/last 100 steps\n",
            step_samples.len()
        ));
    }
    for (label, key, note) in [
        (
            "overhead/step",
            "overhead_ms_per_step",
            "   (turn - provider - tools) / steps, provider and tool time in µs",
        ),
        ("provider/step", "provider_ms_per_step", ""),
        ("tools/step", "tool_ms_per_step", ""),
        ("turn", "turn_ms", ""),
    ] {
        h.push_str(&format!("  {label:<15}{} ms{note}\n", fmt_dist(&j[key])));
    }
    h.push_str(&format!(
        "  live sessions  {live_after} after the run; counters: {steps_started} steps, {tool_crashes} tool crashes, {processor_crashes} processor crashes\n"
    ));
    h.push_str(&format!("  db             {db_shown}\n"));
    if let Some(p) = &pages {
        h.push_str(&format!(
            "  message pages  {} reads of 50 from {} messages, µs: {}\n",
            p.us.len(),
            p.messages,
            fmt_dist(&dist(&p.us))
        ));
        h.push_str(&format!(
            "  session reads  (the store round trip alone), µs: {}\n",
            fmt_dist(&dist(&p.baseline_us))
        ));
    }
    if let Some(e) = &first_error {
        h.push_str(&format!("  FIRST ERROR    {e}\n"));
    }

    runtime.shutdown().await;
    mock.shutdown().await;
    drop(store);
    drop(root);
    Ok(Report {
        json: j,
        human: h,
        failed,
        first_error,
    })
}

/// Wait (at most 2 s) until the session actors have stopped: they stop themselves right
/// after replying.
async fn settle(runtime: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while runtime.live_sessions() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What `--page-probe` measured.
struct PageProbe {
    /// Messages stored in the probed session.
    messages: usize,
    /// Time of each page read (store read + JSON encoding), µs.
    us: Vec<f64>,
    /// Time of a trivial store read (the session row) before each page read, µs: the
    /// round trip to the store's reader thread that every read pays, for comparison.
    baseline_us: Vec<f64>,
}

/// Read pages of 50 messages of `sid` `n` times, each `before` a message spread evenly over
/// the session (the first read takes the newest page), as the paged message API does, and
/// time each read plus its JSON encoding in µs.
async fn page_probe(store: &Store, sid: String, n: usize) -> Result<PageProbe> {
    const LIMIT: usize = 50;
    let ids: Vec<String> = {
        let sid = sid.clone();
        store
            .read(move |r| r.messages(&sid))
            .await
            .map_err(|e| anyhow!("store read: {e}"))?
            .iter()
            .map(|m| m.info.id().to_string())
            .collect()
    };
    let mut us = Vec::with_capacity(n);
    let mut baseline_us = Vec::with_capacity(n);
    for i in 0..n {
        let key = sid.clone();
        let start = Instant::now();
        store
            .read(move |r| r.session(&key))
            .await
            .map_err(|e| anyhow!("session read: {e}"))?;
        baseline_us.push(start.elapsed().as_secs_f64() * 1e6);
        let before = (i > 0 && !ids.is_empty()).then(|| ids[(i * 7919) % ids.len()].clone());
        let sid = sid.clone();
        let start = Instant::now();
        let bytes = store
            .read(move |r| {
                r.messages_page(&sid, LIMIT, before.as_deref())
                    .map(|page| serde_json::to_vec(&page).map_or(0, |b| b.len()))
            })
            .await
            .map_err(|e| anyhow!("page read: {e}"))?;
        us.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(bytes);
    }
    Ok(PageProbe {
        messages: ids.len(),
        us,
        baseline_us,
    })
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
