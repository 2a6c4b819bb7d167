//! The command line (`Args`) and the settings it validates into (`Settings`).

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Parser;

use crate::script::ToolMix;

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "troupe-bench",
    about = "N scripted sessions of M steps through one troupe runtime against an in-process mock provider"
)]
pub(crate) struct Args {
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
    pub(crate) print_script: bool,
    /// Create one session workspace (the files the tool steps use; with `--files`,
    /// `--gitignore` and `--snapshots` as a run makes it: extra files, a `.gitignore`, a git
    /// repository) in DIR and exit.
    #[arg(long, value_name = "DIR")]
    pub(crate) init_workspace: Option<PathBuf>,
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
    /// With `--snapshots`: give every workspace a `.gitignore` (`target/`, `*.log`,
    /// `node_modules/`), as most projects have: snapshots then ask git which new files its
    /// rules ignore.
    #[arg(long, requires = "snapshots")]
    gitignore: bool,
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
    /// Read the run-queue wait of every thread of the process (`/proc/self/task/*/schedstat`,
    /// ns) at each turn's start and end and report it per step beside the overhead: the
    /// time the process's threads were runnable but had no CPU during the turn.
    #[arg(long)]
    runqueue: bool,
    /// With `--step-cpu`, under `valgrind --tool=callgrind --instr-atstart=no`: instrument
    /// only the first or the last 100 steps (one run per window).
    #[arg(long, value_enum)]
    callgrind_window: Option<crate::callgrind::Window>,
    /// Exit right after the at-rest RSS readings, without dropping anything: under a heap
    /// profiler (`heaptrack`, `valgrind --tool=massif`) what the run left live shows as
    /// memory not freed at exit.
    #[arg(long)]
    exit_at_rest: bool,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) sessions: usize,
    pub(crate) steps: usize,
    pub(crate) parallel: usize,
    pub(crate) mix: ToolMix,
    pub(crate) db: Option<PathBuf>,
    pub(crate) json: bool,
    pub(crate) chunk_size: usize,
    pub(crate) delay_ms: u64,
    pub(crate) record_bodies: bool,
    pub(crate) snapshots: bool,
    pub(crate) files: usize,
    pub(crate) gitignore: bool,
    pub(crate) page_probe: usize,
    pub(crate) turns: usize,
    pub(crate) step_cpu: bool,
    pub(crate) runqueue: bool,
    pub(crate) callgrind_window: Option<crate::callgrind::Window>,
    pub(crate) exit_at_rest: bool,
}

impl Args {
    pub(crate) fn settings(self) -> Result<Settings> {
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
        if self.callgrind_window.is_some() && !self.step_cpu {
            bail!("--callgrind-window needs --step-cpu");
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
            gitignore: self.gitignore,
            page_probe: self.page_probe,
            turns: self.turns,
            step_cpu: self.step_cpu,
            runqueue: self.runqueue,
            callgrind_window: self.callgrind_window,
            exit_at_rest: self.exit_at_rest,
        })
    }
}
