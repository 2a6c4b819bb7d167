//! `troupe`: the command-line interface. Wires config → runtime → output; no business logic.

mod activity;
mod asker;
mod attach;
mod auth;
mod batch;
mod chat;
mod cli;
mod local;
mod logging;
mod mcp;
mod models;
mod monitor;
mod output;
mod run;
mod sanitize;
mod serve;
mod signals;
mod structured;
mod telemetry;
mod timeline;
mod worker;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use troupe_actors::inputs::FileInput;
use troupe_actors::{PromptInput, Runtime, RuntimeOptions};
use troupe_config::{LoadOptions, LoadedConfig};
use troupe_session::{Bus, Store};
use troupe_tools::Registry;

pub(crate) use cli::*;

// jemalloc with small thread caches, as every troupe binary (`troupe_actors::memory`).
troupe_actors::troupe_allocator!();

fn main() -> ExitCode {
    // First thing: a Ctrl-C or SIGTERM from here on ends with 130/143, never by the signal.
    signals::install();
    let cli = Cli::parse();
    let log_file = match &cli.command {
        Some(Command::Serve(a)) => a.log_file.clone(),
        _ => None,
    };
    let otlp = match logging::init(cli.log_format, log_file.as_deref()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("troupe: {e:#}");
            return ExitCode::from(2);
        }
    };
    // A panic inside an actor is caught by its supervisor and becomes an error part or a
    // failed step; log it as one line instead of a backtrace on the user's terminal.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        tracing::warn!("panic{location}: {payload}");
    }));
    let tokio_rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(tokio_rt) => tokio_rt,
        Err(e) => {
            eprintln!("troupe: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = tokio_rt.block_on(dispatch(cli));
    // Processes started with `background: true` stop with troupe; then never wait on a
    // blocking task that is still running (a search that ignores its abort, a stuck read).
    troupe_tools::procs::stop_all();
    tokio_rt.shutdown_timeout(SHUTDOWN_GRACE);
    // Every actor (and so every span) has ended with the runtime: send the spans still
    // queued before the process exits.
    if let Some(o) = otlp {
        o.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain joined.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("troupe: {}", sanitize::terminal_safe(&msg));
            ExitCode::from(1)
        }
    }
}

/// How long the exit waits for blocking tasks still running before leaving them behind.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// The store target: `--db`, else `$TROUPE_DB`, else the default file. A file path or a
/// `postgres://…` URL (see [`Store::open_target`]).
fn db_path(cli_db: Option<PathBuf>) -> PathBuf {
    cli_db
        .or_else(|| troupe_config::env_path("TROUPE_DB"))
        .unwrap_or_else(|| troupe_config::data_dir().join("troupe.db"))
}

/// The files this process writes beside the project's, for [`RuntimeOptions::own_files`]:
/// the SQLite store `db` names (see [`db_path`]) with its `-wal`, `-shm` and `-journal`
/// (nothing for a PostgreSQL URL), and `extra` (`batch --out`, `run -o`).
pub(crate) fn own_files(db: Option<PathBuf>, extra: &[&Path]) -> Vec<PathBuf> {
    let store = db_path(db);
    let mut files: Vec<PathBuf> = extra.iter().map(|p| p.to_path_buf()).collect();
    if !store.to_string_lossy().contains("://") {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = store.clone().into_os_string();
            name.push(suffix);
            files.push(PathBuf::from(name));
        }
    }
    files
}

/// `--password`, else `$TROUPE_SERVER_PASSWORD` (empty = no password).
fn server_password(flag: Option<String>) -> Option<String> {
    flag.or_else(|| troupe_config::env_var(troupe_server::PASSWORD_ENV))
}

/// Open the store `db` names (see [`db_path`]): SQLite for a path, PostgreSQL for a
/// `postgres://` URL. Errors name the backend's target, never a password.
pub(crate) fn open_store(db: Option<PathBuf>) -> Result<Store> {
    let target = db_path(db);
    Store::open_target(target.as_os_str(), Bus::new()).map_err(|e| anyhow!("{e}"))
}

/// Open the store `db` names for a command that works on what is already stored (`session
/// list|show|export|delete|compact|diff|revert|unrevert|fork`, `stats`, `db vacuum`): an
/// SQLite file that does not exist is an error naming it, never a new empty store (and its
/// directories) created as a side effect of a typo in `--db`. A PostgreSQL URL opens as in
/// [`open_store`].
pub(crate) fn open_existing_store(db: Option<PathBuf>) -> Result<Store> {
    if let Some(path) = missing_store(db.clone()) {
        bail!(
            "no store at {}: nothing has run with this store yet (check --db or $TROUPE_DB)",
            path.display()
        );
    }
    open_store(db)
}

/// The SQLite file `db` names (see [`db_path`]) when it does not exist; `None` when it does
/// or when `db` is a PostgreSQL URL.
pub(crate) fn missing_store(db: Option<PathBuf>) -> Option<PathBuf> {
    let target = db_path(db);
    let is_url = target.to_str().is_some_and(troupe_session::pg::is_url);
    (!is_url && !target.exists()).then_some(target)
}

async fn dispatch(cli: Cli) -> Result<ExitCode> {
    let Some(command) = cli.command else {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stdin())
            && std::io::IsTerminal::is_terminal(&std::io::stdout());
        if terminal {
            return chat::run(cli.db).await;
        }
        let mut cmd = <Cli as clap::CommandFactory>::command();
        eprintln!("{}", cmd.render_help());
        eprintln!("troupe: no command given (the interactive chat needs a terminal)");
        return Ok(ExitCode::from(2));
    };
    match command {
        Command::Run(args) => run::run(cli.db, args).await,
        // `serve` reads TROUPE_SERVER_PASSWORD itself: there an empty value is refused, not
        // taken as "no password" (a guard fails closed).
        Command::Serve(args) => serve::serve(cli.db, args).await,
        Command::Monitor(mut args) => {
            args.password = server_password(args.password.take());
            monitor::run(args).await
        }
        Command::Batch(args) => run_batch(cli.db, args).await,
        Command::Worker(args) => worker::worker(cli.db, args).await,
        Command::Session {
            command: SessionCommand::Compact { id },
        } => compact(cli.db, &id).await,
        Command::Session {
            command:
                command @ (SessionCommand::Diff { .. }
                | SessionCommand::Revert { .. }
                | SessionCommand::Unrevert { .. }
                | SessionCommand::Fork { .. }),
        } => snapshot_command(cli.db, command).await,
        Command::Session {
            command: SessionCommand::List { format, limit, dir },
        } => {
            let dir = dir.map(filter_dir).transpose()?;
            let store = open_existing_store(cli.db)?;
            output::session_list(&store, format == Format::Json, limit, dir.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Session { command } => {
            let store = open_existing_store(cli.db)?;
            output::session_command(&store, command).await
        }
        Command::Agent { command } => {
            match command {
                AgentCommand::List {
                    list: ListOpts { format, dir },
                    all,
                } => {
                    let cwd = resolve_dir(dir)?;
                    let (_, agents) = load_agents(&cwd)?;
                    output::agent_list(&agents, all, format == Format::Json)?;
                }
                AgentCommand::Show { name, dir } => {
                    let cwd = resolve_dir(dir)?;
                    let (_, agents) = load_agents(&cwd)?;
                    let agent = agents.require(&name).map_err(|e| anyhow!("{e}"))?;
                    // The record plus how its rules decide each permission (issue 11: which
                    // rule decides `edit` for plan, and whether it overrode a global rule).
                    let mut v = serde_json::to_value(agent)?;
                    v["decisions"] = agent.decisions();
                    println!("{}", serde_json::to_string_pretty(&v)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Debug {
            command: DebugCommand::Config { dir },
        } => {
            let cwd = resolve_dir(dir)?;
            let (config, agents) = load_agents(&cwd)?;
            output::debug_config(&config)?;
            for line in models::debug_lines(&config, &agents).await {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Db {
            command: DbCommand::Vacuum,
        } => {
            let store = open_existing_store(cli.db)?;
            let r = store.vacuum().await.map_err(|e| anyhow!("{e}"))?;
            let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
            println!(
                "vacuum {}: {} events removed from {} finished sessions; {:.2} MiB -> {:.2} MiB",
                store.target(),
                r.events_removed,
                r.sessions,
                mib(r.bytes_before),
                mib(r.bytes_after)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { format, dir } => {
            let dir = dir.map(filter_dir).transpose()?;
            let store = open_existing_store(cli.db)?;
            output::stats(&store, format == Format::Json, dir.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Auth { command } => {
            let cwd = resolve_dir(None)?;
            auth::run(|| load_config(&cwd), command)
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "troupe", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Models {
            list: ListOpts { format, dir },
            all,
        } => {
            let cwd = resolve_dir(dir)?;
            let (config, agents) = load_agents(&cwd)?;
            models::print(&config, &agents, format == Format::Json, all).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp {
            command:
                McpCommand::List {
                    list: ListOpts { format, dir },
                },
        } => {
            let config = load_config(&resolve_dir(dir)?)?;
            let servers = mcp::probe(&config).await?;
            mcp::print(&servers, format == Format::Json)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn resolve_dir(dir: Option<PathBuf>) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let d = match dir {
        Some(d) if d.is_absolute() => d,
        Some(d) => cwd.join(d),
        None => cwd,
    };
    d.canonicalize()
        .map_err(|e| anyhow!("directory {}: {e}", d.display()))
}

/// A `--dir` used only to filter stored sessions (`session list`, `stats`): the canonical
/// path when the directory exists, else the absolute path with `.`/`..` applied, so the
/// sessions of a directory deleted since can still be listed.
fn filter_dir(dir: PathBuf) -> Result<PathBuf> {
    resolve_dir(Some(dir.clone())).or_else(|_| {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let mut out = PathBuf::new();
        for c in cwd.join(&dir).components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        Ok(out)
    })
}

fn load_config(cwd: &Path) -> Result<LoadedConfig> {
    let config =
        troupe_config::load(&LoadOptions::from_env(cwd)).map_err(|e| anyhow!("config: {e}"))?;
    logging::add_config_secrets(&config);
    for w in &config.warnings {
        eprintln!("troupe: warning: config: {w}");
    }
    Ok(config)
}

fn load_agents(cwd: &Path) -> Result<(LoadedConfig, troupe_agents::AgentSet)> {
    let config = load_config(cwd)?;
    let dirs = troupe_agents::project_dirs(cwd, &config.worktree);
    let agents = troupe_agents::AgentSet::load(&config, &dirs).map_err(|e| anyhow!("{e}"))?;
    Ok((config, agents))
}

/// The `-f` files, checked ([`troupe_actors::inputs::check_attachment`]) and made absolute
/// against the process's directory, as file inputs the runtime resolves like `@path`; with
/// the media type of each image or PDF among them.
fn attachments(files: &[PathBuf]) -> Result<(Vec<FileInput>, Vec<&'static str>)> {
    let mut inputs = Vec::new();
    let mut media = Vec::new();
    for f in files {
        let kind = troupe_actors::inputs::check_attachment(f)
            .map_err(|e| anyhow!("-f {}: {e}", f.display()))?;
        media.extend(kind);
        let abs = std::path::absolute(f).map_err(|e| anyhow!("-f {}: {e}", f.display()))?;
        inputs.push(FileInput {
            url: format!("file://{}", abs.display()),
            mime: None,
            filename: Some(f.display().to_string()),
        });
    }
    Ok((inputs, media))
}

/// Pick the model: flag, config, API-key defaults, else a local llama.cpp server if one answers.
async fn choose_model(flag: Option<String>, config: &LoadedConfig) -> Result<Option<String>> {
    if flag.is_some() {
        return Ok(flag);
    }
    if let Some(m) = config.default_model() {
        return Ok(Some(m));
    }
    let local = config
        .resolve_model("local/default")
        .map(|m| m.base_url)
        .unwrap_or_else(|_| "http://127.0.0.1:8080/v1".into());
    match probe_local(&local).await {
        Some(id) => Ok(Some(format!("local/{id}"))),
        None => bail!(
            "no model configured: set \"model\" in troupe.json, pass --model provider/model, set OPENAI_API_KEY or ANTHROPIC_API_KEY, or start a llama.cpp server at {local}"
        ),
    }
}

/// Fail early, in one line, when a hosted provider's API key is missing (instead of sending
/// an unauthenticated request).
fn check_api_key(config: &LoadedConfig, model: &str) -> Result<()> {
    let resolved = config.resolve_model(model).map_err(|e| anyhow!("{e}"))?;
    if resolved.api_key.is_some() {
        return Ok(());
    }
    if let Some(b) = troupe_config::builtin_provider(&resolved.provider_id)
        && !b.env.is_empty()
        && resolved.base_url == b.base_url
    {
        bail!(
            "no API key for provider {}: set {} or options.apiKey in troupe.json",
            resolved.provider_id,
            b.env.join(" or ")
        );
    }
    Ok(())
}

/// The first model id an OpenAI-compatible server at `base` lists, if it answers quickly.
async fn probe_local(base: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(800))
        .build()
        .ok()?;
    let resp = client.get(format!("{base}/models")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: serde_json::Value = resp.json().await.ok()?;
    v["data"][0]["id"].as_str().map(str::to_string)
}

/// `session diff|revert|unrevert|fork`: through a runtime of the session's directory (its
/// config decides whether snapshots are on).
async fn snapshot_command(db: Option<PathBuf>, command: SessionCommand) -> Result<ExitCode> {
    let (SessionCommand::Diff { id, .. }
    | SessionCommand::Revert { id, .. }
    | SessionCommand::Unrevert { id }
    | SessionCommand::Fork { id, .. }) = &command
    else {
        return Err(anyhow!("not a snapshot command"));
    };
    let (runtime, session) = session_runtime(db, id).await?;
    let result = output::snapshot_command(&runtime, &session.id, command).await;
    runtime.shutdown_within(Duration::ZERO).await;
    result
}

async fn compact(db: Option<PathBuf>, id: &str) -> Result<ExitCode> {
    let (runtime, session) = session_runtime(db, id).await?;
    let result = runtime.compact(&session.id).await;
    runtime.shutdown().await;
    match result.map_err(|e| anyhow!("{e}"))?.error {
        None => {
            println!("compacted session {}", session.id);
            Ok(ExitCode::SUCCESS)
        }
        Some(e) => {
            eprintln!("troupe: {}: {}", e.name, e.message().replace('\n', " "));
            Ok(ExitCode::from(1))
        }
    }
}

/// A runtime for a command on one stored session (`id`: an id or a unique prefix): started
/// in the session's directory (the current one when that is gone) with its configuration and
/// agents, asking no one (every permission that would ask is denied). Errors: no such
/// session, the store, configuration or agents.
async fn session_runtime(
    db: Option<PathBuf>,
    id: &str,
) -> Result<(Runtime, troupe_session::Session)> {
    let store = open_existing_store(db)?;
    let session = output::find_session(&store, id).await?;
    let cwd = PathBuf::from(&session.directory);
    let cwd = if cwd.is_dir() {
        cwd
    } else {
        resolve_dir(None)?
    };
    let (config, agents) = load_agents(&cwd)?;
    let responder: Arc<dyn troupe_tools::PermissionAsker> =
        Arc::new(troupe_actors::permission::Policy::Deny);
    let runtime = Runtime::start_with_agents(
        store,
        config,
        agents,
        registry(),
        responder,
        runtime_options()?,
    )
    .await?;
    Ok((runtime, session))
}

/// Runtime limits from the environment (`TROUPE_TOOL_TIMEOUT_MS`, `TROUPE_MAX_RETRIES`,
/// `TROUPE_TASK_TIMEOUT_MS`, `TROUPE_MAX_SUBAGENTS`, `TROUPE_TITLE`, `TROUPE_SUMMARY`,
/// `TROUPE_TOOL_OUTPUT_RETENTION_DAYS`). Empty = unset; a value
/// that is not a whole number is an error naming the variable.
fn runtime_options() -> Result<RuntimeOptions> {
    let env_u64 = |k: &str| troupe_config::env_u64(k).map_err(|e| anyhow!("{e}"));
    let mut opts = RuntimeOptions {
        // File snapshots (issue 15) live beside the store's default place.
        snapshot_dir: Some(troupe_config::data_dir()),
        output_retention: Some(troupe_tools::truncate::RETENTION),
        ..RuntimeOptions::default()
    };
    // Saved full tool outputs are deleted after this many days (default 7; 0 keeps them).
    if let Some(days) = env_u64("TROUPE_TOOL_OUTPUT_RETENTION_DAYS")? {
        opts.output_retention =
            (days > 0).then(|| Duration::from_secs(days.min(100_000) * 24 * 3600));
    }
    if let Some(ms) = env_u64("TROUPE_TOOL_TIMEOUT_MS")? {
        opts.tool_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = env_u64("TROUPE_MAX_RETRIES")? {
        opts.max_retries = n.min(u32::MAX as u64) as u32;
    }
    if let Some(ms) = env_u64("TROUPE_TASK_TIMEOUT_MS")? {
        opts.task_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = env_u64("TROUPE_MAX_SUBAGENTS")? {
        opts.max_subagents = (n as usize).max(1);
    }
    // Session leases (issue 12): how long one lasts without a heartbeat, and how long to
    // wait for a session another process drives.
    if let Some(ms) = env_u64("TROUPE_LEASE_TTL_MS")? {
        opts.lease_ttl = Duration::from_millis(ms.max(1));
    }
    if let Some(ms) = env_u64("TROUPE_LEASE_WAIT_MS")? {
        opts.lease_wait = Duration::from_millis(ms);
    }
    // Shown to other processes as the owner of the sessions this one drives.
    opts.lease_label = std::env::args()
        .skip(1)
        .find(|a| matches!(a.as_str(), "run" | "serve" | "batch" | "session"))
        .map(|c| format!("troupe {c}"))
        .unwrap_or_else(|| "troupe".into());
    // Session titles from the `title` agent; TROUPE_TITLE=0 turns them off.
    opts.titles = troupe_config::env_var("TROUPE_TITLE").is_none_or(|v| v.trim() != "0");
    // Turn summaries from the `summary` agent after a turn that changed files;
    // TROUPE_SUMMARY=0 turns them off.
    opts.summaries = troupe_config::env_var("TROUPE_SUMMARY").is_none_or(|v| v.trim() != "0");
    Ok(opts)
}

/// The built-in tools; with `TROUPE_TEST_TOOLS=1` also the fault-injection tools
/// (`test_panic`, `test_sleep`) the end-to-end tests use. Those exist only in debug builds
/// (what `cargo test` runs): a release binary ignores the variable and says so, so a user's
/// installed troupe never offers a model a tool that panics on purpose.
fn registry() -> Registry {
    let r = Registry::builtin();
    if troupe_config::env_var("TROUPE_TEST_TOOLS").is_some_and(|v| v == "1") {
        if cfg!(debug_assertions) {
            return r.with_test_tools();
        }
        eprintln!("troupe: TROUPE_TEST_TOOLS=1 is ignored: test tools exist only in debug builds");
    }
    r
}

async fn run_batch(db: Option<PathBuf>, args: BatchArgs) -> Result<ExitCode> {
    let cwd = resolve_dir(args.opts.dir.clone())?;
    if !(args.max_retry_time.is_finite() && args.max_retry_time >= 0.0) {
        bail!(
            "--max-retry-time must be a number of seconds ≥ 0, got {}",
            args.max_retry_time
        );
    }
    let timeout = args
        .timeout
        .map(|t| batch::check_timeout(t, "--timeout"))
        .transpose()?;
    // The same for every place the tasks run, but for how many run at once and the model.
    let options = batch::BatchOptions {
        file: args.file.clone(),
        parallel: args.parallel,
        out: args.out.clone(),
        resume: args.resume,
        retry_failed: args.retry_failed,
        timeout,
        model: args.opts.model.clone(),
        agent: args.opts.agent.clone(),
        cwd: cwd.clone(),
    };
    if let Some(url) = &args.cluster {
        // The workers validate agents and models per task; the file is checked here.
        let tasks = batch::read_tasks(&args.file)?;
        let exec = worker::cluster_batch(
            url,
            &args.cluster_opts,
            args.out.as_deref(),
            args.resume,
            args.retry_failed,
            troupe_cluster::task::TaskDefaults {
                model: args.opts.model.clone(),
                agent: args.opts.agent.clone(),
                cwd: cwd.clone(),
                timeout,
            },
        )
        .await?;
        return batch::run(
            batch::Exec::Cluster(exec),
            batch::BatchOptions {
                parallel: tasks.len().max(1),
                ..options
            },
        )
        .await;
    }
    if let Some(url) = &args.opts.attach {
        // The server validates agents and models per task; the file is checked here.
        batch::read_tasks(&args.file)?;
        let client =
            troupe_server::client::Client::new(url, server_password(args.opts.password.clone()))?;
        client.get("/session?roots=true").await.map_err(|e| {
            anyhow!("no troupe server answers at {url} ({e}); start one with `troupe serve`")
        })?;
        return batch::run(batch::Exec::Remote(client), options).await;
    }
    let (mut config, agents) = load_agents(&cwd)?;
    // Validate the file before starting anything.
    let tasks = batch::read_tasks(&args.file)?;
    if let Some(a) = &args.opts.agent {
        agents.require_selectable(a).map_err(|e| anyhow!("{e}"))?;
    }
    for t in &tasks {
        if let Some(a) = &t.agent {
            agents
                .require_selectable(a)
                .map_err(|e| anyhow!("{}: task {}: {e}", args.file.display(), t.id))?;
        }
    }
    let model = match args.opts.model.clone() {
        Some(m) => Some(m),
        // With no configured model, the local server if it answers.
        None if config.default_model().is_none() => {
            choose_model(None, &config).await.ok().flatten()
        }
        None => None,
    };
    if let Some(m) = &model {
        config.resolve_model(m).map_err(|e| anyhow!("{e}"))?;
    }
    if let Some(m) = model.clone().or_else(|| config.default_model()) {
        local::apply_detected_limits(&mut config, &m).await;
    }
    let own = own_files(
        db.clone(),
        &args.out.as_deref().into_iter().collect::<Vec<_>>(),
    );
    let store = open_store(db)?;
    let responder: Arc<dyn troupe_tools::PermissionAsker> = match args.opts.permission {
        Some(PermissionMode::Allow) => Arc::new(troupe_actors::permission::Policy::Allow),
        _ => Arc::new(troupe_actors::permission::Policy::Deny),
    };
    let mut opts = runtime_options()?;
    opts.max_retry_time = Some(Duration::from_secs_f64(args.max_retry_time));
    // The results file a batch appends to is its own, not a task's change to revert.
    opts.own_files = own;
    let runtime =
        Runtime::start_with_agents(store, config, agents, registry(), responder, opts).await?;
    let rt2 = runtime.clone();
    let mut sigs = signals::Signals::take_over()?;
    tokio::spawn(async move {
        let mut n = 0;
        while let Some(sig) = sigs.next().await {
            n += 1;
            if n >= 2 {
                std::process::exit(128 + sig);
            }
            eprintln!("\ntroupe: interrupting the batch (Ctrl-C again to exit at once)");
            rt2.abort_all();
        }
    });
    batch::run(
        batch::Exec::Local(runtime),
        batch::BatchOptions { model, ..options },
    )
    .await
}
