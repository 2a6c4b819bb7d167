//! [`RuntimeOptions`]: the runtime's tuning (timeouts, step and retry limits, depth, caps).

use super::*;

/// Runtime tuning.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Safety-net timeout for one tool call (the actor is stopped past it). Default 10 min;
    /// `bash` gets at least its own `timeout` argument + 10 s, `question` none
    /// ([`RuntimeOptions::tool_timeout_for`]). Time a call spends waiting for a person to
    /// answer a permission ask does not count (the processor's call clock stops meanwhile).
    pub tool_timeout: Duration,
    /// Default maximum steps per turn for agents without `steps`. Default 100.
    pub max_steps: u32,
    /// Retries of a retryable provider failure per step. Default 8.
    pub max_retries: u32,
    /// Upper bound on one retry wait (a server may ask for hours). Default 5 min.
    pub max_retry_delay: Duration,
    /// Upper bound on the total of one step's retry waits: a retry whose wait would take the
    /// sum past it is not made and the failure is final (its message says so). `None` = no
    /// cap beyond [`RuntimeOptions::max_retries`] (default; the defaults allow
    /// 2+4+8+16+30×4 = 150 s). `troupe batch` sets one so a failing provider does not hold
    /// every task for minutes.
    pub max_retry_time: Option<Duration>,
    /// Timeout of one `task` call (a subagent's whole turn). Default 30 min.
    pub task_timeout: Duration,
    /// Maximum subagent nesting depth (a root session's children are depth 1). Default 3.
    pub max_depth: u32,
    /// Maximum concurrently running subagent sessions per runtime; more task calls wait.
    /// Default 32.
    pub max_subagents: usize,
    /// Generate a title for a root session after its first user message (one extra
    /// provider request beside the first turn). Default false in the library; the CLI turns
    /// it on unless `TROUPE_TITLE=0`.
    pub titles: bool,
    /// Summarise a turn that changed files with the `summary` agent (one extra tool-less
    /// provider request after the turn, stored on its user message). Default false in the
    /// library; the CLI turns it on unless `TROUPE_SUMMARY=0`.
    pub summaries: bool,
    /// How long a session lease lasts without a heartbeat ([`lease`]); a holder renews it
    /// every third of this. Default [`lease::DEFAULT_LEASE_TTL`] (30 s); the CLI reads
    /// `TROUPE_LEASE_TTL_MS`.
    pub lease_ttl: Duration,
    /// Longest wait for a session another process drives before the prompt fails with
    /// [`RuntimeError::SessionBusy`]; zero refuses at once. Default
    /// [`lease::DEFAULT_LEASE_WAIT`] (5 min); the CLI reads `TROUPE_LEASE_WAIT_MS`.
    pub lease_wait: Duration,
    /// What this process is, shown to other processes as the owner of the sessions it
    /// drives (`troupe run`, `troupe serve`). Default `troupe`.
    pub lease_label: String,
    /// troupe's data directory, under which file snapshots are kept (`<dir>/snapshot/…`,
    /// see `troupe-snapshot`). `None` (the library default): snapshots off. The CLI passes
    /// `troupe_config::data_dir()`; `"snapshot": false` in the config turns them off too.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// Files this process writes that are not the project's — the store file and its
    /// `-wal`/`-shm`/`-journal`, `batch --out`, `run -o` — kept out of snapshots, so a revert
    /// never rewinds them (relative paths are taken from the process's working directory).
    /// Default empty.
    pub own_files: Vec<std::path::PathBuf>,
    /// How long saved full tool outputs (`troupe_tools::truncate::output_dir`) are kept: the
    /// runtime's root actor deletes older ones when it starts and every
    /// [`OUTPUT_CLEANUP_INTERVAL`] (OpenCode keeps them 7 days and cleans hourly). `None`
    /// (the library default): never deleted. The CLI passes
    /// [`troupe_tools::truncate::RETENTION`] (7 days) unless `TROUPE_TOOL_OUTPUT_RETENTION_DAYS`
    /// says otherwise.
    pub output_retention: Option<Duration>,
    /// Whether someone can answer the model's questions (the HTTP API of `troupe serve`, the
    /// terminal of `troupe chat` or an interactive `run`). `false` (the library default, and
    /// non-interactive `run` and `batch`) adds OpenCode's non-interactive session rules:
    /// `question`, `plan_enter` and `plan_exit` are denied and not offered.
    pub interactive: bool,
}

/// Period of the saved-output cleanup ([`RuntimeOptions::output_retention`]): 1 hour, as
/// OpenCode's `Truncate` scheduler.
pub const OUTPUT_CLEANUP_INTERVAL: Duration = Duration::from_secs(3600);

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(600),
            max_steps: 100,
            max_retries: 8,
            max_retry_delay: Duration::from_secs(300),
            max_retry_time: None,
            task_timeout: Duration::from_secs(1800),
            max_depth: 3,
            max_subagents: 32,
            titles: false,
            summaries: false,
            lease_ttl: lease::DEFAULT_LEASE_TTL,
            lease_wait: lease::DEFAULT_LEASE_WAIT,
            lease_label: "troupe".into(),
            snapshot_dir: None,
            own_files: Vec::new(),
            output_retention: None,
            interactive: false,
        }
    }
}

impl RuntimeOptions {
    /// The timeout for one call of `tool` with `input`: `task` has its own, `question` none
    /// (it waits for a person, as OpenCode's does; an abort still ends it), `bash` at least
    /// its `timeout` argument (ms) + 10 s, every other tool [`Self::tool_timeout`].
    pub fn tool_timeout_for(&self, tool: &str, input: &serde_json::Value) -> Duration {
        if tool == "task" {
            return self.task_timeout;
        }
        if tool == "question" {
            // tokio's sleep takes a deadline past the clock's range as "never".
            return Duration::MAX;
        }
        if tool == "bash"
            && let Some(ms) = input.get("timeout").and_then(|v| v.as_u64())
        {
            return self
                .tool_timeout
                .max(Duration::from_millis(ms) + Duration::from_secs(10));
        }
        self.tool_timeout
    }
}
