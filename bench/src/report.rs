//! The report of a run: what `run` measured (`Measured`), turned into the JSON object and
//! the human-readable text (`build`), and the distribution summaries they use.

use serde_json::{Value, json};

use crate::measure;
use crate::options::Settings;
use crate::probe::PageProbe;
use crate::script::ToolMix;
use crate::step_cpu::{self, Sample};

/// What `run` hands back to `main`.
pub(crate) struct Report {
    pub(crate) json: Value,
    pub(crate) human: String,
    pub(crate) failed: usize,
    pub(crate) first_error: Option<String>,
}

/// What one run measured, before any arithmetic on it.
pub(crate) struct Measured {
    /// Σ steps of every turn.
    pub(crate) total_steps: u64,
    /// Sessions that failed (a failed turn, a different step count, a tool error, a
    /// compaction), plus session tasks that died.
    pub(crate) failed: usize,
    /// The first failure.
    pub(crate) first_error: Option<String>,
    /// Sessions whose history holds a compaction.
    pub(crate) compacted: usize,
    /// Wall time of the turns, s.
    pub(crate) wall_s: f64,
    /// Process CPU (user+sys) over the same span, s.
    pub(crate) cpu_s: f64,
    /// The mock thread's share of `cpu_s`, s.
    pub(crate) mock_cpu_s: f64,
    /// CPU of child processes that ended during the run, s.
    pub(crate) child_cpu_s: f64,
    /// Git processes the snapshots ran on shadow repositories during the run
    /// (`troupe_snapshot::git_processes`).
    pub(crate) git_processes: u64,
    /// RSS readings, MiB: runtime started (base), idle between turns 1 and 2, after the
    /// first 10 % of sessions, after the run, after the heap trim
    /// (`troupe_actors::memory::trim`: jemalloc purge, glibc `malloc_trim`), after the page
    /// probe.
    pub(crate) rss_base: Option<f64>,
    pub(crate) rss_idle: Option<f64>,
    /// The idle reading before the runtime's idle trim.
    pub(crate) rss_idle_untrimmed: Option<f64>,
    pub(crate) rss_tenth: Option<f64>,
    pub(crate) rss_after: Option<f64>,
    pub(crate) rss_after_trim: Option<f64>,
    pub(crate) rss_after_probe: Option<f64>,
    /// `ru_maxrss`, MiB.
    pub(crate) peak_rss_mib: f64,
    /// RSS the snapshot of the mock's records added, MiB.
    pub(crate) mock_rss_estimate: Option<f64>,
    /// Serialized size of the mock's recorded bodies, MiB.
    pub(crate) mock_body_mib: f64,
    /// Sessions in the first 10 %.
    pub(crate) tenth: usize,
    /// `--step-cpu`: one sample per step start, and bus events missed.
    pub(crate) step_samples: Vec<Sample>,
    pub(crate) step_lag: u64,
    /// `--step-cpu`: every thread's CPU at the edges of the first and last 100 steps.
    pub(crate) step_threads: Vec<(usize, crate::threads::Reading)>,
    /// Per successful session: overhead, provider and tool time per step, turn time; ms.
    pub(crate) overhead: Vec<f64>,
    pub(crate) prov_step: Vec<f64>,
    pub(crate) tool_step: Vec<f64>,
    pub(crate) turn_ms: Vec<f64>,
    /// `--runqueue`: per successful session, the process's run-queue wait during its turns
    /// per step, ms.
    pub(crate) runqueue_step: Option<Vec<f64>>,
    /// The sessions of the highest overhead per step (at most 5, highest first).
    pub(crate) worst: Vec<SessionTimes>,
    /// Session actors alive after the run.
    pub(crate) live_after: usize,
    /// Requests the mock served.
    pub(crate) mock_requests: usize,
    /// Of them, records taken from the mock before their response finished.
    pub(crate) mock_unfinished: usize,
    /// The runtime's counters: steps started, tool crashes, processor crashes.
    pub(crate) counters: (u64, u64, u64),
    /// `--page-probe`.
    pub(crate) pages: Option<PageProbe>,
}

/// Where one session's turn time went (the tail of the overhead distribution).
#[derive(Debug, Clone)]
pub(crate) struct SessionTimes {
    pub(crate) index: usize,
    pub(crate) overhead_ms_per_step: f64,
    /// Σ wall time of its turns, provider time, tool time, run-queue wait (`--runqueue`), ms.
    pub(crate) turn_ms: f64,
    pub(crate) provider_ms: f64,
    pub(crate) tool_ms: f64,
    pub(crate) runqueue_ms: f64,
}

/// The JSON object and the text report of `m`, run with settings `s`.
pub(crate) fn build(s: &Settings, m: Measured) -> Report {
    let troupe_cpu_s = m.cpu_s - m.mock_cpu_s;
    let per_step = |x: f64| {
        if m.total_steps > 0 {
            x * 1000.0 / m.total_steps as f64
        } else {
            0.0
        }
    };
    // Memory at rest: what the run left in the process, per session (all actors stopped).
    let per_session_kib = |rss: Option<f64>| match (rss, m.rss_base) {
        (Some(r), Some(b)) => Some((r - b) * 1024.0 / s.sessions as f64),
        _ => None,
    };
    let step_window = step_cpu::first_last(&m.step_samples, step_cpu::WINDOW);
    // The thread readings were taken at the sample indices of a run without lag.
    let thread_windows = (m.step_lag == 0)
        .then(|| step_cpu::thread_windows(&m.step_threads, m.step_samples.len()))
        .flatten();
    let steps_per_s = if m.wall_s > 0.0 {
        m.total_steps as f64 / m.wall_s
    } else {
        0.0
    };
    let cpu_ms_per_step = if m.total_steps > 0 {
        m.cpu_s * 1000.0 / m.total_steps as f64
    } else {
        0.0
    };
    // Child processes: git for snapshots (and bash, which the bench's tool mix does not call).
    let child_cpu_ms_per_step = if m.total_steps > 0 {
        m.child_cpu_s * 1000.0 / m.total_steps as f64
    } else {
        0.0
    };
    let growth = match (m.rss_tenth, m.rss_after) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let later = s.sessions.saturating_sub(m.tenth);
    // Growth minus the mock's records of the later sessions (records are per request, and every
    // session sends the same number of requests).
    let growth_troupe = match (growth, m.mock_rss_estimate) {
        (Some(g), Some(mock)) => Some(g - mock * later as f64 / s.sessions as f64),
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
        "total_steps": m.total_steps,
        "failed_sessions": m.failed,
        "compacted_sessions": m.compacted,
        "first_error": m.first_error,
        "wall_s": round3(m.wall_s),
        "cpu_s": round3(m.cpu_s),
        "cpu_ms_per_step": round3(cpu_ms_per_step),
        "mock_cpu_s": round3(m.mock_cpu_s),
        "troupe_cpu_s": round3(troupe_cpu_s),
        "troupe_cpu_ms_per_step": round3(per_step(troupe_cpu_s)),
        "turns_per_session": s.turns,
        "rss_base_mib": m.rss_base.map(round3),
        "rss_idle_between_turns_mib": m.rss_idle.map(round3),
        "idle_kib_per_session": per_session_kib(m.rss_idle).map(round3),
        "idle_untrimmed_kib_per_session": per_session_kib(m.rss_idle_untrimmed).map(round3),
        "at_rest_kib_per_session": per_session_kib(m.rss_after).map(round3),
        "rss_after_run_trimmed_mib": m.rss_after_trim.map(round3),
        "at_rest_trimmed_kib_per_session": per_session_kib(m.rss_after_trim).map(round3),
        "step_cpu": s.step_cpu.then(|| json!({
            "samples": m.step_samples.len(),
            "bus_events_lagged": m.step_lag,
            "first_last_100": step_window.clone(),
            "threads_first_last_100": thread_windows.clone(),
        })),
        "snapshots": s.snapshots,
        "extra_files": s.files,
        "gitignore": s.gitignore,
        "child_cpu_s": round3(m.child_cpu_s),
        "child_cpu_ms_per_step": round3(child_cpu_ms_per_step),
        "git_processes_per_step": round3(per_step_count(m.git_processes, m.total_steps)),
        "steps_per_s": round3(steps_per_s),
        "peak_rss_mib": round3(m.peak_rss_mib),
        "mock_recorded_body_mib": round3(m.mock_body_mib),
        "rss_after_first_10pct_mib": m.rss_tenth.map(round3),
        "rss_after_run_mib": m.rss_after.map(round3),
        "rss_growth_mib": growth.map(round3),
        "rss_growth_kib_per_later_session": growth_per_session_kib.map(round3),
        "mock_records_rss_estimate_mib": m.mock_rss_estimate.map(round3),
        "rss_growth_excluding_mock_mib": growth_troupe.map(round3),
        "overhead_ms_per_step": dist(&m.overhead),
        "provider_ms_per_step": dist(&m.prov_step),
        "tool_ms_per_step": dist(&m.tool_step),
        "turn_ms": dist(&m.turn_ms),
        "runqueue_ms_per_step": m.runqueue_step.as_deref().map(dist),
        "worst_overhead_sessions": m.worst.iter().map(|w| json!({
            "session": w.index,
            "overhead_ms_per_step": round3(w.overhead_ms_per_step),
            "turn_ms": round3(w.turn_ms),
            "provider_ms": round3(w.provider_ms),
            "tool_ms": round3(w.tool_ms),
            "runqueue_ms": s.runqueue.then(|| round3(w.runqueue_ms)),
        })).collect::<Vec<_>>(),
        "live_sessions_after": m.live_after,
        "mock_requests": m.mock_requests,
        "mock_requests_unfinished_when_read": m.mock_unfinished,
        "counters": {"steps": m.counters.0, "tool_crashes": m.counters.1, "processor_crashes": m.counters.2},
        "page_probe": m.pages.as_ref().map(|p| json!({
            "reads": p.us.len(),
            "messages_in_session": p.messages,
            "page_read_us": dist(&p.us),
            "session_read_us": dist(&p.baseline_us),
            "rss_after_probe_mib": m.rss_after_probe.map(round3),
        })),
    });
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut h = String::new();
    h.push_str(&format!(
        "troupe-bench: {} sessions x {} steps, parallel {}, tools: {mix}\n",
        s.sessions, s.steps, s.parallel
    ));
    h.push_str(&format!("  steps          {total_steps} total, {failed} failed sessions, {mock_requests} provider requests\n", failed = m.failed, mock_requests = m.mock_requests, total_steps = m.total_steps));
    h.push_str(&format!(
        "  wall           {wall_s:.3} s   ({steps_per_s:.1} steps/s)\n",
        wall_s = m.wall_s
    ));
    h.push_str(&format!("  cpu            {cpu_s:.3} s user+sys   ({cpu_ms_per_step:.3} ms/step, includes the in-process mock)\n", cpu_s = m.cpu_s));
    h.push_str(&format!(
        "  troupe cpu     {troupe_cpu_s:.3} s   ({:.3} ms/step; the mock thread took {mock_cpu_s:.3} s)\n",
        per_step(troupe_cpu_s), mock_cpu_s = m.mock_cpu_s
    ));
    h.push_str(&format!(
        "  child cpu      {child_cpu_s:.3} s   ({child_cpu_ms_per_step:.3} ms/step; snapshots {}, {} extra files; {:.2} git processes/step)\n",
        match (s.snapshots, s.gitignore) {
            (false, _) => "off",
            (true, false) => "on",
            (true, true) => "on (.gitignore)",
        },
        s.files,
        per_step_count(m.git_processes, m.total_steps),
        child_cpu_s = m.child_cpu_s
    ));
    if s.record_bodies {
        h.push_str(&format!(
            "  peak rss       {peak_rss_mib:.1} MiB   (the in-process mock holds {mock_body_mib:.1} MiB of recorded request JSON, more as parsed values)\n", mock_body_mib = m.mock_body_mib, peak_rss_mib = m.peak_rss_mib
        ));
    } else {
        h.push_str(&format!(
            "  peak rss       {peak_rss_mib:.1} MiB   (mock keeps request summaries only)\n",
            peak_rss_mib = m.peak_rss_mib
        ));
    }
    h.push_str(&format!(
        "  rss            {} MiB after first 10% ({tenth} sessions), {} MiB after the run (growth {} MiB, {} KiB per later session)\n",
        opt(m.rss_tenth),
        opt(m.rss_after),
        opt(growth),
        opt(growth_per_session_kib), tenth = m.tenth
    ));
    h.push_str(&format!(
        "  mock records   taken out of the mock (freed) before the idle and at-rest readings; {mock_unfinished} read before their response ended\n", mock_unfinished = m.mock_unfinished
    ));
    h.push_str(&format!(
        "  at rest        {} MiB before the sessions; after the run {} KiB per session ({} after the heap trim){}\n",
        opt(m.rss_base),
        opt(per_session_kib(m.rss_after)),
        opt(per_session_kib(m.rss_after_trim)),
        match m.rss_idle {
            Some(_) => format!(
                "; idle between turns {} MiB, {} KiB per session ({} before the runtime's idle trim)",
                opt(m.rss_idle),
                opt(per_session_kib(m.rss_idle)),
                opt(per_session_kib(m.rss_idle_untrimmed))
            ),
            None => String::new(),
        }
    ));
    if let Some(w) = &step_window {
        h.push_str(&format!(
            "  step cpu       first 100 steps {} ms/step, last 100 {} ms/step (troupe only: {} → {}, ×{}); {} samples, {step_lag} bus events lagged\n",
            w["first_cpu_ms_per_step"], w["last_cpu_ms_per_step"],
            w["first_troupe_cpu_ms_per_step"], w["last_troupe_cpu_ms_per_step"],
            w["troupe_last_over_first"], m.step_samples.len(), step_lag = m.step_lag
        ));
        if let Some(t) = &thread_windows {
            for (label, key) in [("first", "first"), ("last ", "last")] {
                let w = &t[key];
                let groups = w["groups"]
                    .as_object()
                    .map(|g| {
                        g.iter()
                            .map(|(name, v)| {
                                format!(
                                    "{name} {}+{} (run {})",
                                    v["user_ms_per_step"],
                                    v["sys_ms_per_step"],
                                    v["run_ms_per_step"]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                h.push_str(&format!(
                    "  {label} 100     user+sys ms/step: troupe {}+{}, process {}+{}; threads {groups}\n",
                    w["troupe_user_ms_per_step"], w["troupe_sys_ms_per_step"],
                    w["process_user_ms_per_step"], w["process_sys_ms_per_step"]
                ));
            }
        }
    } else if s.step_cpu {
        h.push_str(&format!(
            "  step cpu       {} samples: too few for first/last 100 steps\n",
            m.step_samples.len()
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
        (
            "run queue/step",
            "runqueue_ms_per_step",
            "   (the process's threads runnable without a CPU during the turn)",
        ),
    ] {
        if !j[key].is_null() {
            h.push_str(&format!("  {label:<15}{} ms{note}\n", fmt_dist(&j[key])));
        }
    }
    for w in m.worst.iter().take(3) {
        h.push_str(&format!(
            "  worst overhead session {}: {:.3} ms/step; turn {:.3} ms = provider {:.3} + tools {:.3} + the rest{}\n",
            w.index,
            w.overhead_ms_per_step,
            w.turn_ms,
            w.provider_ms,
            w.tool_ms,
            if s.runqueue {
                format!("; run-queue wait {:.3} ms", w.runqueue_ms)
            } else {
                String::new()
            }
        ));
    }
    h.push_str(&format!(
        "  live sessions  {live_after} after the run; counters: {steps_started} steps, {tool_crashes} tool crashes, {processor_crashes} processor crashes\n", live_after = m.live_after, processor_crashes = m.counters.2, steps_started = m.counters.0, tool_crashes = m.counters.1
    ));
    h.push_str(&format!("  db             {db_shown}\n"));
    if let Some(p) = &m.pages {
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
    if m.compacted > 0 {
        h.push_str(&format!(
            "  COMPACTED      {compacted} sessions compacted: the mock is out of step (counted as failures)\n", compacted = m.compacted
        ));
    }
    if let Some(e) = &m.first_error {
        h.push_str(&format!("  FIRST ERROR    {e}\n"));
    }

    Report {
        json: j,
        human: h,
        failed: m.failed,
        first_error: m.first_error,
    }
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

/// `count` / `steps` (0 without steps).
fn per_step_count(count: u64, steps: u64) -> f64 {
    if steps == 0 {
        0.0
    } else {
        count as f64 / steps as f64
    }
}
