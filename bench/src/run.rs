//! One measured run: workspaces, store, mock and runtime set up, the sessions' turns run
//! (at most `--parallel` at once, turn by turn), then everything `report` needs read off.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use troupe_actors::{PromptInput, Runtime, RuntimeOptions, TurnResult};
use troupe_config::{Config, LoadedConfig};
use troupe_session::{Bus, Store};
use troupe_testkit::MOCK_MODEL;
use troupe_tools::AllowAll;

use crate::options::Settings;
use crate::probe::page_probe;
use crate::report::{self, Measured, Report};
use crate::{measure, mockthread, script, step_cpu, timed};

/// One turn of one session: its index, its id (once created), the turn's wall time in ms,
/// the process's run-queue wait during it in ms (`--runqueue`) and its result.
type TurnDone = (usize, Option<String>, f64, f64, Result<TurnResult, String>);

/// One finished session (all its turns).
struct SessionRun {
    index: usize,
    session_id: Option<String>,
    /// Wall time of its `prompt` calls (the turns), ms.
    turn_ms: f64,
    /// `--runqueue`: run-queue wait of the process's threads during its turns, ms.
    runqueue_ms: f64,
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

/// The provider config pointing the `mock` provider (OpenAI Chat Completions) at `base_url`.
pub(crate) fn bench_config(base_url: &str) -> Result<LoadedConfig> {
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

pub(crate) async fn run(s: &Settings) -> Result<Report> {
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
        let (files, git, gitignore) = (s.files, s.snapshots, s.gitignore);
        tokio::task::spawn_blocking(move || {
            dirs.iter()
                .try_for_each(|d| script::prepare_workspace(d, files, gitignore, git))
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
    let step_cpu = s.step_cpu.then(|| {
        step_cpu::start(
            bus.clone(),
            mock.cpu_clock(),
            s.sessions * s.steps * s.turns,
            s.callgrind_window,
        )
    });
    let usage0 = measure::usage().unwrap_or_default();
    let mock_cpu0 = mock.cpu_s();
    let children0 = measure::children_usage().unwrap_or_default();
    let git0 = troupe_snapshot::git_processes();
    let t0 = Instant::now();
    let mut probe_time = Duration::ZERO;
    let mut rss_idle: Option<f64> = None;
    let mut rss_idle_untrimmed: Option<f64> = None;
    let mut mock_log = MockLog::default();
    let mut runs: Vec<SessionRun> = (0..s.sessions)
        .map(|index| SessionRun {
            index,
            session_id: None,
            turn_ms: 0.0,
            runqueue_ms: 0.0,
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
            let runqueue = s.runqueue;
            set.spawn(async move {
                let _permit = permit;
                let sid = match existing {
                    Some(id) => id,
                    None => match runtime.create_session(&dir, None).await {
                        Ok(session) => session.id.into_string(),
                        Err(e) => {
                            return (index, None, 0.0, 0.0, Err(format!("create session: {e}")));
                        }
                    },
                };
                let text = format!(
                    "bench session {index}, turn {turn}: list, read, write, glob and grep this workspace"
                );
                let wait0 = runqueue.then(measure::runqueue_wait_ns).flatten();
                let start = Instant::now();
                let result = runtime
                    .prompt(
                        &sid.as_str().into(),
                        PromptInput {
                            text,
                            ..Default::default()
                        },
                    )
                    .await;
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                let wait_ms = match (wait0, runqueue.then(measure::runqueue_wait_ns).flatten()) {
                    (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e6,
                    _ => 0.0,
                };
                if turn == 0 && finished.fetch_add(1, Ordering::SeqCst) + 1 == tenth {
                    let rss = measure::current_rss_mib().await;
                    if let Ok(mut slot) = rss_at_tenth.lock() {
                        *slot = rss;
                    }
                }
                (index, Some(sid), ms, wait_ms, result.map_err(|e| e.to_string()))
            });
        }
        while let Some(r) = set.join_next().await {
            match r {
                Ok((index, sid, ms, wait_ms, result)) => {
                    let run = &mut runs[index];
                    run.runqueue_ms += wait_ms;
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
            let idle_trims = runtime.shared().idle_trim.trims.load(Ordering::Relaxed);
            let p0 = Instant::now();
            settle(&runtime).await;
            store
                .flush()
                .await
                .map_err(|e| anyhow!("store flush: {e}"))?;
            // The mock's request log is the bench's, not the runtime's: read and freed first.
            mock_log.drain(server);
            rss_idle_untrimmed = measure::current_rss_mib().await;
            // As at rest below: the runtime returns freed heap to the kernel once no session
            // is live (an idle served runtime shows the RSS after that trim).
            wait_for_idle_trim(&runtime, idle_trims).await;
            rss_idle = measure::current_rss_mib().await;
            probe_time += p0.elapsed();
        }
    }
    let wall = t0.elapsed().saturating_sub(probe_time);
    let usage1 = measure::usage().unwrap_or_default();
    let mock_cpu1 = mock.cpu_s();
    let children1 = measure::children_usage().unwrap_or_default();
    let git_processes = troupe_snapshot::git_processes() - git0;
    let step_collected = match step_cpu {
        Some(h) => h.stop().await,
        None => step_cpu::Collected::default(),
    };
    runs.sort_by_key(|r| r.index);

    let trims = || runtime.shared().idle_trim.trims.load(Ordering::Relaxed);
    let trims_at_end = trims();
    settle(&runtime).await;
    let live_after = runtime.live_sessions();
    store
        .flush()
        .await
        .map_err(|e| anyhow!("store flush: {e}"))?;
    mock_log.drain(server);
    // Once no session is live the runtime returns freed heap to the kernel
    // (`troupe_actors::memory`, 200 ms after the last one stopped, at most once a second):
    // the RSS at rest is read after that trim, as a user's idle runtime would show it.
    wait_for_idle_trim(&runtime, trims_at_end).await;
    let rss_after = measure::current_rss_mib().await;
    // The same after handing freed heap memory back to the kernel: what is left is live
    // data (plus caches such as SQLite's pages), the rest was the allocator's free lists.
    troupe_actors::memory::trim();
    let rss_after_trim = measure::current_rss_mib().await;
    if s.exit_at_rest {
        // For heap profilers: everything the run left is still allocated at exit.
        eprintln!(
            "troupe-bench: exit at rest: RSS base {rss_base:?} MiB, after the run {rss_after:?} MiB, trimmed {rss_after_trim:?} MiB"
        );
        std::process::exit(0);
    }
    let peak_rss_mib = measure::usage().map_or(usage1.max_rss_mib, |u| u.max_rss_mib);
    let rss_tenth = rss_at_tenth.lock().ok().and_then(|g| *g);
    let counters = &runtime.shared().counters;
    let (steps_started, tool_crashes, processor_crashes) = (
        counters.steps.load(Ordering::Relaxed),
        counters.tool_crashes.load(Ordering::Relaxed),
        counters.processor_crashes.load(Ordering::Relaxed),
    );

    let MockLog {
        provider,
        requests: mock_requests,
        body_bytes,
        unfinished: mock_unfinished,
    } = mock_log;
    let mock_body_mib = body_bytes as f64 / (1024.0 * 1024.0);
    // The records were taken out of the mock before the RSS readings.
    let mock_rss_estimate = None;

    // Tool errors from the stored tool parts (tool time comes from the timed tools, in µs),
    // and compactions: the bench's context never fills, so a compaction means the session
    // and the mock's script are out of step (the mock counts the request's assistant
    // messages), and the session fails.
    let ids: Vec<String> = runs.iter().filter_map(|r| r.session_id.clone()).collect();
    let stored: Vec<(Option<String>, bool)> = store
        .read(move |r| {
            ids.iter()
                .map(|id| {
                    r.messages(&id.as_str().into())
                        .map(|h| (measure::tool_ms(&h).1, measure::compacted(&h)))
                })
                .collect()
        })
        .await
        .map_err(|e| anyhow!("store read: {e}"))?;
    let compacted = stored.iter().filter(|(_, c)| *c).count();
    let mut stored_iter = stored.into_iter();
    let tool_us = tool_times.lock().map(|t| t.clone()).unwrap_or_default();

    let mut failed = join_errors.len();
    let mut first_error = join_errors.into_iter().next();
    let mut total_steps: u64 = 0;
    let (mut overhead, mut prov_step, mut tool_step, mut turn_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut runqueue_step, mut worst) = (Vec::new(), Vec::new());
    for r in &runs {
        let stored_error = if r.session_id.is_some() {
            stored_iter.next().and_then(|(tool_error, compacted)| {
                if compacted {
                    Some("the session compacted: the mock's script is out of step".to_string())
                } else {
                    tool_error
                }
            })
        } else {
            None
        };
        total_steps += u64::from(r.steps);
        if let Some(e) = r.error.clone().or(stored_error) {
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
            worst.push(report::SessionTimes {
                index: r.index,
                overhead_ms_per_step: o,
                turn_ms: r.turn_ms,
                provider_ms: prov_ms,
                tool_ms: tools_ms,
                runqueue_ms: r.runqueue_ms,
            });
        }
        runqueue_step.push(r.runqueue_ms / steps);
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
    let step_cpu::Collected {
        samples: step_samples,
        lagged: step_lag,
        threads: step_threads,
    } = step_collected;
    let report = report::build(
        s,
        Measured {
            total_steps,
            failed,
            first_error,
            compacted,
            wall_s,
            cpu_s,
            mock_cpu_s,
            child_cpu_s: children1.cpu_s - children0.cpu_s,
            git_processes,
            rss_base,
            rss_idle,
            rss_idle_untrimmed,
            rss_tenth,
            rss_after,
            rss_after_trim,
            rss_after_probe,
            peak_rss_mib,
            mock_rss_estimate,
            mock_body_mib,
            tenth,
            step_samples,
            step_lag,
            step_threads,
            overhead,
            prov_step,
            tool_step,
            turn_ms,
            runqueue_step: s.runqueue.then_some(runqueue_step),
            worst: {
                worst.sort_by(|a, b| b.overhead_ms_per_step.total_cmp(&a.overhead_ms_per_step));
                worst.truncate(5);
                worst
            },
            live_after,
            mock_requests,
            mock_unfinished,
            counters: (steps_started, tool_crashes, processor_crashes),
            pages,
        },
    );
    runtime.shutdown().await;
    mock.shutdown().await;
    drop(store);
    drop(root);
    Ok(report)
}

/// What the bench keeps of the mock's request log, which it takes out of the mock (freeing
/// it) before each RSS reading: the mock is the bench's, not the runtime's.
#[derive(Default)]
struct MockLog {
    /// Σ provider µs per session ([`measure::provider_us_by_session`]).
    provider: std::collections::HashMap<String, u64>,
    /// Requests served.
    requests: usize,
    /// Serialized size of the recorded bodies (`--record-bodies`), bytes.
    body_bytes: usize,
    /// Records taken before their response had finished (their provider time is missing).
    unfinished: usize,
}

impl MockLog {
    fn drain(&mut self, server: &troupe_testkit::MockServer) {
        let records = server.take_requests();
        for (sid, us) in measure::provider_us_by_session(&records) {
            *self.provider.entry(sid).or_default() += us;
        }
        self.requests += records.len();
        self.unfinished += records.iter().filter(|r| r.end_us.is_none()).count();
        self.body_bytes += records
            .iter()
            .filter(|r| !r.body.is_null())
            .map(|r| serde_json::to_string(&r.body).map_or(0, |b| b.len()))
            .sum::<usize>();
    }
}

/// Wait (at most 3 s) until the runtime's idle trim counter moves past `before`.
async fn wait_for_idle_trim(runtime: &Runtime, before: u64) {
    let trims = || runtime.shared().idle_trim.trims.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(3);
    while trims() == before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait (at most 2 s) until the session actors have stopped: they stop themselves right
/// after replying.
async fn settle(runtime: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while runtime.live_sessions() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
