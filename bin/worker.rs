//! `troupe worker` and the cluster options of `troupe batch` and `troupe serve`: wiring of
//! troupe-cluster (NATS JetStream) into the CLI.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use troupe_actors::Runtime;
use troupe_cluster::Names;

/// The cluster options shared by `worker`, `batch --cluster` and `serve --cluster`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Prefix of the cluster's NATS streams, consumer and subjects (`<PREFIX>_TASKS`,
    /// `<prefix>.tasks`, …): processes with the same NATS URL and prefix form one cluster.
    #[arg(long, value_name = "PREFIX", default_value = troupe_cluster::DEFAULT_PREFIX)]
    pub cluster_prefix: String,
    /// How long a task may go without a progress ack before JetStream delivers it to
    /// another worker, seconds (applies when the workers' consumer is created: by the
    /// first worker or batch of the cluster). Workers ack progress every third of it.
    #[arg(long, value_name = "SECONDS", default_value_t = troupe_cluster::DEFAULT_ACK_WAIT.as_secs_f64())]
    pub ack_wait: f64,
    /// Window within which a task published again with the same id is dropped as a copy,
    /// seconds (applies when the tasks stream is created).
    #[arg(long, value_name = "SECONDS", default_value_t = troupe_cluster::DEFAULT_DEDUP_WINDOW.as_secs_f64())]
    pub dedup_window: f64,
}

impl ClusterArgs {
    fn names(&self) -> Result<Names> {
        Names::new(&self.cluster_prefix)
    }

    fn ack_wait(&self) -> Result<Duration> {
        troupe_cluster::task::check_timeout(self.ack_wait, "--ack-wait")
    }

    fn dedup_window(&self) -> Result<Duration> {
        troupe_cluster::task::check_timeout(self.dedup_window, "--dedup-window")
    }
}

/// `troupe worker` options.
#[derive(clap::Parser, Debug)]
pub struct WorkerArgs {
    /// NATS server with JetStream (e.g. nats://127.0.0.1:4222).
    #[arg(long, value_name = "URL")]
    pub nats: String,
    /// This worker's name in the cluster (letters, digits, `_`, `-`; default: worker-<pid>).
    #[arg(long)]
    pub name: Option<String>,
    /// Tasks run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Cluster options.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Heartbeat period, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = troupe_cluster::fleet::DEFAULT_HEARTBEAT.as_secs_f64())]
    pub heartbeat: f64,
    /// After how long without a heartbeat monitors mark this worker dead, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = troupe_cluster::fleet::DEFAULT_HEARTBEAT_TIMEOUT.as_secs_f64())]
    pub heartbeat_timeout: f64,
    /// On SIGTERM or Ctrl-C: how long running tasks may take to finish, seconds; the rest
    /// are aborted and handed back to the cluster (another worker resumes their sessions).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// A task delivered more often than this fails instead of running again.
    #[arg(long, default_value_t = 5)]
    pub max_deliver: i64,
    /// How to answer permission asks: `allow`, or `deny` (the default; a worker never
    /// prompts).
    #[arg(long, value_enum)]
    pub permission: Option<crate::PermissionMode>,
    /// Cap on the total time one step waits to retry a failing provider, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub max_retry_time: f64,
    /// Working directory: its config is used (tasks run in the directory the batch names).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Run a worker until SIGTERM / Ctrl-C (drain) or a second signal (exit at once).
pub async fn worker(db: Option<PathBuf>, args: WorkerArgs) -> Result<ExitCode> {
    let names = args.cluster.names()?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("worker-{}", std::process::id()));
    troupe_cluster::check_node_name(&name)?;
    if args.concurrency == 0 {
        bail!("--concurrency must be 1 or more");
    }
    if !(args.max_retry_time.is_finite() && args.max_retry_time >= 0.0) {
        bail!(
            "--max-retry-time must be a number of seconds ≥ 0, got {}",
            args.max_retry_time
        );
    }
    let heartbeat = troupe_cluster::task::check_timeout(args.heartbeat, "--heartbeat")?;
    let heartbeat_timeout =
        troupe_cluster::task::check_timeout(args.heartbeat_timeout, "--heartbeat-timeout")?;
    if heartbeat_timeout <= heartbeat {
        bail!("--heartbeat-timeout must be longer than --heartbeat");
    }
    let drain = if args.drain_timeout == 0.0 {
        Duration::ZERO
    } else {
        troupe_cluster::task::check_timeout(args.drain_timeout, "--drain-timeout")?
    };
    if args.max_deliver < 1 {
        bail!("--max-deliver must be 1 or more");
    }
    let opts = troupe_cluster::worker::WorkerOptions {
        nats: args.nats.clone(),
        names,
        name,
        concurrency: args.concurrency,
        ack_wait: args.cluster.ack_wait()?,
        dedup_window: args.cluster.dedup_window()?,
        heartbeat,
        heartbeat_timeout,
        drain,
        max_deliver: args.max_deliver,
    };
    let cwd = crate::resolve_dir(args.dir.clone())?;
    let (mut config, agents) = crate::load_agents(&cwd)?;
    if let Some(m) = config.default_model() {
        crate::local::apply_detected_limits(&mut config, &m).await;
    }
    let store = crate::open_store(db)?;
    let responder: Arc<dyn troupe_tools::PermissionAsker> = match args.permission {
        Some(crate::PermissionMode::Allow) => Arc::new(troupe_actors::permission::Policy::Allow),
        _ => Arc::new(troupe_actors::permission::Policy::Deny),
    };
    let mut ropts = crate::runtime_options()?;
    ropts.max_retry_time = Some(Duration::from_secs_f64(args.max_retry_time));
    ropts.lease_label = format!("troupe worker {}", opts.name);
    let runtime =
        Runtime::start_with_agents(store, config, agents, crate::registry(), responder, ropts)
            .await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut sigs = crate::signals::Signals::take_over()?;
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while let Some(sig) = sigs.next().await {
                n += 1;
                if n >= 2 {
                    eprintln!("troupe: second signal: exiting now");
                    std::process::exit(128 + sig);
                }
                stop.cancel();
            }
        });
    }
    let result = troupe_cluster::worker::run(runtime.clone(), opts, stop.clone()).await;
    runtime.shutdown().await;
    result?;
    Ok(if stop.is_cancelled() {
        ExitCode::from(crate::signals::abort_exit_code())
    } else {
        ExitCode::SUCCESS
    })
}

/// Start the cluster side of a batch (`--cluster URL`).
pub async fn cluster_batch(
    url: &str,
    cluster: &ClusterArgs,
    out: Option<&std::path::Path>,
    resume: bool,
    retry_failed: bool,
    defaults: troupe_cluster::task::TaskDefaults,
) -> Result<Arc<troupe_cluster::client::ClusterBatch>> {
    let names = cluster.names()?;
    let run = troupe_cluster::client::run_id(out, resume, retry_failed, &names)?;
    let batch =
        troupe_cluster::client::ClusterBatch::start(troupe_cluster::client::ClusterOptions {
            url: url.to_string(),
            names: names.clone(),
            run,
            ack_wait: cluster.ack_wait()?,
            dedup_window: cluster.dedup_window()?,
            cwd: defaults.cwd,
            model: defaults.model,
            agent: defaults.agent,
            timeout: defaults.timeout,
        })
        .await?;
    eprintln!(
        "batch: run {} on cluster {} at {url}; tasks wait in the queue until workers take them",
        batch.run(),
        names.prefix()
    );
    Ok(Arc::new(batch))
}
