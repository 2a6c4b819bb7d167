//! `troupe`: the command-line interface. Wires config → runtime → output; no business logic.

mod activity;
mod attach;
mod auth;
mod batch;
mod chat;
mod local;
mod logging;
mod mcp;
mod models;
mod monitor;
mod output;
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
use clap::{Parser, Subcommand, ValueEnum};
use troupe_actors::inputs::FileInput;
use troupe_actors::{PromptInput, Runtime, RuntimeOptions};
use troupe_config::{LoadOptions, LoadedConfig};
use troupe_session::{Bus, Store};
use troupe_tools::Registry;

/// troupe: a multi-agent coding orchestrator built as a supervised actor system.
#[derive(Parser, Debug)]
#[command(name = "troupe", version, about)]
struct Cli {
    /// Session store: an SQLite file, or a PostgreSQL URL `postgres://user@host:port/db` (a
    /// store shared by several machines). Default: $TROUPE_DB, else
    /// ~/.local/share/troupe/troupe.db; an empty variable counts as unset, like every
    /// TROUPE_* variable.
    #[arg(long, global = true, value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// Log lines as `pretty` (one readable line per event) or `json` (one object per line,
    /// with the fields of the spans it happened in); what is logged: $TROUPE_LOG.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Pretty)]
    log_format: logging::LogFormat,
    /// Without a command, in a terminal: an interactive chat (`/help` lists its commands).
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one prompt to completion, streaming text and tool calls.
    Run(RunArgs),
    /// Serve the runtime over HTTP: JSON API, SSE events, actor tree, metrics, web view.
    Serve(serve::ServeArgs),
    /// Live terminal view of a running `troupe serve`: actor tree and counters.
    Monitor(monitor::MonitorArgs),
    /// Run many independent prompts from a JSONL file under one runtime (or on a cluster of
    /// workers with --cluster).
    Batch(BatchArgs),
    /// Join a cluster: run tasks of cluster batches from a NATS JetStream work queue.
    Worker(worker::WorkerArgs),
    /// Inspect stored sessions.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Agents: list them or show one with its effective permission ruleset.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Debugging aids.
    Debug {
        #[command(subcommand)]
        command: DebugCommand,
    },
    /// Tokens and cost per session, model and day.
    Stats {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// Only sessions in this directory or below it.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Maintenance of the session store.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// API keys stored in the user's config directory (auth.json, mode 0600).
    Auth {
        #[command(subcommand)]
        command: auth::AuthCommand,
    },
    /// Print a shell completion script: `troupe completions bash > ~/.local/share/bash-completion/completions/troupe`,
    /// `troupe completions zsh > ~/.zfunc/_troupe`, `troupe completions fish > ~/.config/fish/completions/troupe.fish`.
    Completions {
        /// Shell.
        shell: clap_complete::Shell,
    },
    /// Models that can run here: configured ones, a local server's, the catalog models of
    /// providers with a key; the default is marked with where it came from.
    Models {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// List every catalog model, also of providers without a key.
        #[arg(long)]
        all: bool,
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// MCP servers from the config (`mcp` key).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
}

#[derive(Subcommand, Debug)]
enum McpCommand {
    /// Start each configured server, then list its state (connected, failed, disabled)
    /// and tools as the model sees them (`<server>_<tool>`).
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// Cut the event log of every session no process drives to its last event and give
    /// the space back to the file system (SQLite VACUUM). Messages and parts stay, so
    /// `session show` and the API return the same as before.
    Vacuum,
}

#[derive(Subcommand, Debug)]
enum AgentCommand {
    /// List agents: name, mode, model, description.
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// Include hidden agents.
        #[arg(long)]
        all: bool,
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Show the resolved record of one agent and its effective ruleset.
    Show {
        /// Agent name.
        name: String,
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Print the merged config and where each top-level key came from.
    Config {
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum SessionCommand {
    /// List sessions, newest first.
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// Maximum number of sessions.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only sessions in this directory or below it.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Delete a session with its messages and its subagent sessions.
    Delete {
        /// Session id (or a unique prefix).
        id: String,
    },
    /// Show a session with its messages and parts.
    Show {
        /// Session id (or a unique prefix).
        id: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
        /// Print where the session's time went instead: a text Gantt chart of its steps,
        /// provider requests, tool calls and subagents (`--format json`: the rows of `GET
        /// /session/{id}/timeline`).
        #[arg(long)]
        timeline: bool,
    },
    /// Export a session as one JSON document (session, messages, parts).
    Export {
        /// Session id (or a unique prefix).
        id: String,
    },
    /// Compact a session's history now: the hidden compaction agent writes a summary that
    /// later requests start from (the full history stays in the store).
    Compact {
        /// Session id (or a unique prefix).
        id: String,
    },
    /// The files a session changed, from its first snapshot to its last: a unified diff.
    Diff {
        /// Session id (or a unique prefix).
        id: String,
        /// Only the turn of this user message.
        #[arg(long)]
        message: Option<String>,
        /// One line per file with added/deleted line counts instead of the diff.
        #[arg(long)]
        stat: bool,
        /// Output format (`json`: `[{file, status, additions, deletions, patch}]`).
        #[arg(long, value_enum, default_value_t = Format::Default)]
        format: Format,
    },
    /// Undo the file changes made after a message (or a part of it) and hide the later
    /// messages until the next prompt deletes them.
    Revert {
        /// Session id (or a unique prefix).
        id: String,
        /// Message id to revert to.
        message: String,
        /// Part id in that message to revert to (the parts before it stay).
        #[arg(long)]
        part: Option<String>,
    },
    /// Undo the last revert: the files come back as they were before it.
    Unrevert {
        /// Session id (or a unique prefix).
        id: String,
    },
    /// Copy a session's history (before a message, or all of it) into a new session.
    Fork {
        /// Session id (or a unique prefix).
        id: String,
        /// Copy only the messages before this one.
        #[arg(long)]
        message: Option<String>,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Human-readable.
    Default,
    /// Machine-readable JSON.
    Json,
}

#[derive(Parser, Debug)]
struct RunArgs {
    /// The prompt (words are joined with spaces; piped stdin is appended).
    message: Vec<String>,
    /// `default` streams text; `json` prints every bus event as one JSON line.
    #[arg(long, value_enum, default_value_t = Format::Default)]
    format: Format,
    /// Continue the most recent session in this directory.
    #[arg(short = 'c', long = "continue")]
    continue_: bool,
    /// Run a command (`.troupe/command/NAME.md`, the `command` config key, the same under
    /// the global config dir) with the message words as its arguments.
    #[arg(long, value_name = "NAME")]
    command: Option<String>,
    /// Continue a given session.
    #[arg(short = 's', long)]
    session: Option<String>,
    /// With --session or -c, to a session whose turn is running (in a `troupe serve` given
    /// with --attach, or this process): wait for a turn of its own after that one. Without
    /// it, the prompt joins the running turn at its next step (steering).
    #[arg(long)]
    queue: bool,
    /// Title of the session (instead of a generated one).
    #[arg(long)]
    title: Option<String>,
    /// Attach a file to the prompt (repeatable), as `@path` in the prompt does: a text file
    /// is read through the `read` tool (its permission checks; `path#L10-20` for a range), a
    /// directory is listed, a PNG, JPEG, GIF, WebP image or a PDF goes to a model that takes
    /// it (its `modalities.input` lists `image` / `pdf`), else it is an error.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Model as provider/model.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Agent name.
    #[arg(long)]
    agent: Option<String>,
    /// Working directory (default: current).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How to answer permission asks: `ask` prompts in a terminal (the default when stdin
    /// and stderr are terminals), `allow` or `deny` answer by policy (no terminal: deny).
    #[arg(long, value_enum)]
    permission: Option<PermissionMode>,
    /// Run through a running `troupe serve` at this URL (e.g. http://127.0.0.1:4096).
    #[arg(long, value_name = "URL")]
    attach: Option<String>,
    /// Write the last message of the turn (its text, without tool lines) to FILE as well.
    #[arg(short = 'o', long = "output-last-message", value_name = "FILE")]
    output_last_message: Option<PathBuf>,
    /// The answer must be a JSON value valid against the JSON Schema in FILE: the model
    /// gives it through the `StructuredOutput` tool, and it is printed on stdout (with
    /// `--format json`: a last `structured.output` line). A value that never validates fails
    /// the run with the last validation error.
    #[arg(long = "json-schema", value_name = "FILE")]
    json_schema: Option<PathBuf>,
    /// Print only the answer (and errors): no tool lines, no activity line, no notices.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Password of the server given with --attach; default: $TROUPE_SERVER_PASSWORD.
    #[arg(long)]
    password: Option<String>,
}

#[derive(Parser, Debug)]
struct BatchArgs {
    /// Tasks file: one JSON object per line, {"id", "prompt", "agent"?, "model"?, "dir"?,
    /// "schema"?, "timeout"? (seconds)}.
    file: PathBuf,
    /// Sessions at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Append results here as JSONL (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip task ids already present in --out.
    #[arg(long)]
    resume: bool,
    /// Run again the tasks whose last result in --out failed (only those; with --resume
    /// also the tasks not in --out yet). New results are appended; the latest line of an id
    /// is its result.
    #[arg(long)]
    retry_failed: bool,
    /// Wall-time limit of each task without its own "timeout", seconds; past it the task's
    /// turn is aborted and the task fails.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Default model for tasks without one.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Default agent for tasks without one.
    #[arg(long)]
    agent: Option<String>,
    /// Base directory (task `dir`s are relative to it; default: current).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How to answer permission asks: `allow`, or `deny` (the default; a batch never
    /// prompts, so `ask` also denies).
    #[arg(long, value_enum)]
    permission: Option<PermissionMode>,
    /// Cap on the total time one step of a task spends waiting to retry a failing provider,
    /// seconds (0: no retries); past it the task fails. Local batches only (with --attach the
    /// server's settings apply).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    max_retry_time: f64,
    /// Run the tasks through a running `troupe serve` at this URL, so `troupe monitor` and
    /// the web view show them.
    #[arg(long, value_name = "URL")]
    attach: Option<String>,
    /// Password of the server given with --attach; default: $TROUPE_SERVER_PASSWORD.
    #[arg(long)]
    password: Option<String>,
    /// Run the tasks on a cluster of `troupe worker`s through this NATS server (JetStream),
    /// e.g. nats://127.0.0.1:4222: every task is published at once (--parallel does not
    /// apply; the workers' --concurrency does) and the results are collected into --out.
    #[arg(long, value_name = "URL", conflicts_with = "attach")]
    cluster: Option<String>,
    /// Cluster options (with --cluster).
    #[command(flatten)]
    cluster_opts: worker::ClusterArgs,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum PermissionMode {
    /// Prompt in the terminal.
    Ask,
    /// Allow every ask once.
    Allow,
    /// Reject every ask.
    Deny,
}

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
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("troupe: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(dispatch(cli));
    // Processes started with `background: true` stop with troupe; then never wait on a
    // blocking task that is still running (a search that ignores its abort, a stuck read).
    troupe_tools::procs::stop_all();
    rt.shutdown_timeout(SHUTDOWN_GRACE);
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
        Command::Run(args) => run(cli.db, args).await,
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
            let store = open_store(cli.db)?;
            output::session_list(&store, format == Format::Json, limit, dir.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Session { command } => {
            let store = open_store(cli.db)?;
            output::session_command(&store, command).await
        }
        Command::Agent { command } => {
            match command {
                AgentCommand::List { format, all, dir } => {
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
            let store = open_store(cli.db)?;
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
            let store = open_store(cli.db)?;
            output::stats(&store, format == Format::Json, dir.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Auth { command } => {
            let cwd = resolve_dir(None)?;
            let config = load_config(&cwd)?;
            auth::run(&config, command)
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "troupe", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Models { format, all, dir } => {
            let cwd = resolve_dir(dir)?;
            let (config, agents) = load_agents(&cwd)?;
            models::print(&config, &agents, format == Format::Json, all).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp {
            command: McpCommand::List { format, dir },
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
    let store = open_store(db)?;
    let (SessionCommand::Diff { id, .. }
    | SessionCommand::Revert { id, .. }
    | SessionCommand::Unrevert { id }
    | SessionCommand::Fork { id, .. }) = &command
    else {
        return Err(anyhow!("not a snapshot command"));
    };
    let key = id.clone();
    let session = store
        .read(move |r| r.find_session(&key))
        .await?
        .ok_or_else(|| anyhow!("session not found: {id}"))?;
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
    let result = output::snapshot_command(&runtime, &session.id, command).await;
    runtime.shutdown_within(Duration::ZERO).await;
    result
}

async fn compact(db: Option<PathBuf>, id: &str) -> Result<ExitCode> {
    let store = open_store(db)?;
    let key = id.to_string();
    let session = store
        .read(move |r| r.find_session(&key))
        .await?
        .ok_or_else(|| anyhow!("session not found: {id}"))?;
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
    let cwd = resolve_dir(args.dir.clone())?;
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
                model: args.model.clone(),
                agent: args.agent.clone(),
                cwd: cwd.clone(),
                timeout,
            },
        )
        .await?;
        return batch::run(
            batch::Exec::Cluster(exec),
            batch::BatchOptions {
                file: args.file,
                parallel: tasks.len().max(1),
                out: args.out,
                resume: args.resume,
                retry_failed: args.retry_failed,
                timeout,
                model: args.model,
                agent: args.agent,
                cwd,
            },
        )
        .await;
    }
    if let Some(url) = &args.attach {
        // The server validates agents and models per task; the file is checked here.
        batch::read_tasks(&args.file)?;
        let client =
            troupe_server::client::Client::new(url, server_password(args.password.clone()))?;
        client.get("/session?roots=true").await.map_err(|e| {
            anyhow!("no troupe server answers at {url} ({e}); start one with `troupe serve`")
        })?;
        return batch::run(
            batch::Exec::Remote(client),
            batch::BatchOptions {
                file: args.file,
                parallel: args.parallel,
                out: args.out,
                resume: args.resume,
                retry_failed: args.retry_failed,
                timeout,
                model: args.model,
                agent: args.agent,
                cwd,
            },
        )
        .await;
    }
    let (mut config, agents) = load_agents(&cwd)?;
    // Validate the file before starting anything.
    let tasks = batch::read_tasks(&args.file)?;
    if let Some(a) = &args.agent {
        agents.require_selectable(a).map_err(|e| anyhow!("{e}"))?;
    }
    for t in &tasks {
        if let Some(a) = &t.agent {
            agents
                .require_selectable(a)
                .map_err(|e| anyhow!("{}: task {}: {e}", args.file.display(), t.id))?;
        }
    }
    let model = match args.model.clone() {
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
    let store = open_store(db)?;
    let responder: Arc<dyn troupe_tools::PermissionAsker> = match args.permission {
        Some(PermissionMode::Allow) => Arc::new(troupe_actors::permission::Policy::Allow),
        _ => Arc::new(troupe_actors::permission::Policy::Deny),
    };
    let mut opts = runtime_options()?;
    opts.max_retry_time = Some(Duration::from_secs_f64(args.max_retry_time));
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
        batch::BatchOptions {
            file: args.file,
            parallel: args.parallel,
            out: args.out,
            resume: args.resume,
            retry_failed: args.retry_failed,
            timeout,
            model,
            agent: args.agent,
            cwd,
        },
    )
    .await
}

/// `troupe run`. With `--format json`, an error that ends the command (a start-up error such
/// as a missing session, an unknown model, provider or agent) is also printed on stdout as one
/// `{"type":"error","properties":{"timestamp","message","error":{"name":"StartupError",
/// "data":{"message"}}}}` line (the shape of the bus events around it), so a script reading
/// stdout sees why it ended; the same message goes to stderr.
async fn run(db: Option<PathBuf>, args: RunArgs) -> Result<ExitCode> {
    let json = args.format == Format::Json;
    let result = run_inner(db, args).await;
    if json && let Err(e) = &result {
        let message = format!("{e:#}").replace('\n', " ");
        let line = serde_json::json!({
            "type": "error",
            "properties": {
                "timestamp": troupe_session::now_ms(),
                "message": message,
                "error": {"name": "StartupError", "data": {"message": message}},
            },
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    result
}

async fn run_inner(db: Option<PathBuf>, args: RunArgs) -> Result<ExitCode> {
    let cwd = resolve_dir(args.dir.clone())?;
    let mut text = args.message.join(" ");
    if !std::io::IsTerminal::is_terminal(&std::io::stdin())
        && troupe_config::env_path("TROUPE_NO_STDIN").is_none()
    {
        let mut piped = String::new();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut piped);
            piped
        })
        .await
        .map(|p| {
            if !p.trim().is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(p.trim_end());
            }
        });
    }
    if text.trim().is_empty() && args.command.is_none() {
        bail!("no prompt given: troupe run \"what to do\"");
    }
    let (files, media) = attachments(&args.files)?;
    let schema = args
        .json_schema
        .as_deref()
        .map(structured::load_schema)
        .transpose()?;
    if args.attach.is_some() && schema.is_some() {
        bail!("--json-schema cannot be used with --attach yet; run without --attach");
    }
    if args.command.is_some() && schema.is_some() {
        bail!("--json-schema cannot be used with --command yet; run the prompt without --command");
    }
    if let Some(url) = args.attach.clone() {
        if args.command.is_some() {
            bail!("--command cannot be used with --attach yet; run it without --attach");
        }
        return attach::run(attach::AttachRun {
            url,
            password: server_password(args.password.clone()),
            text,
            files,
            session: args.session.clone(),
            continue_: args.continue_,
            queue: args.queue,
            agent: args.agent.clone(),
            model: args.model.clone(),
            dir: args.dir.as_ref().map(|_| cwd.clone()),
            json: args.format == Format::Json,
            print: output::PrintOptions {
                quiet: args.quiet,
                activity: activity::Activity::on_stderr(
                    std::io::IsTerminal::is_terminal(&std::io::stderr())
                        && args.format != Format::Json
                        && !args.quiet,
                ),
            },
            output_last_message: args.output_last_message.clone(),
        })
        .await;
    }
    let (mut config, agents) = load_agents(&cwd)?;
    if let Some(a) = &args.agent {
        agents.require_selectable(a).map_err(|e| anyhow!("{e}"))?;
    }
    let chosen = choose_model(args.model.clone(), &config).await?;
    if let Some(m) = &chosen {
        // Fail before touching the store when the model cannot be resolved.
        config.resolve_model(m).map_err(|e| anyhow!("{e}"))?;
        // A local server's real context size instead of the unknown-model guesses.
        local::apply_detected_limits(&mut config, m).await;
    }
    if let Some(m) = &chosen {
        check_api_key(&config, m)?;
    }
    if !media.is_empty() {
        // Refuse before a session is created when the model that will run does not take
        // these media (the runtime checks again before storing the message).
        let agent_model = match &args.agent {
            Some(a) => agents.require(a).ok().and_then(|a| a.model.clone()),
            None => agents
                .default_agent(config.config.default_agent.as_deref())
                .ok()
                .and_then(|a| a.model.clone()),
        };
        if let Some(m) = args.model.clone().or(agent_model).or(chosen.clone())
            && let Ok(resolved) = config.resolve_model(&m)
        {
            for mime in &media {
                troupe_actors::inputs::check_mime(mime, &resolved)
                    .map_err(|e| anyhow!("-f: {e}"))?;
            }
        }
    }
    // Only an explicit --model (or the probed local server, when nothing is configured)
    // overrides the agent's own model; otherwise the runtime applies the usual precedence
    // (agent model, session model, config model).
    let model = args
        .model
        .clone()
        .or_else(|| chosen.filter(|_| config.default_model().is_none()));
    let store = open_store(db)?;
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let json = args.format == Format::Json;
    // The activity line: only on a terminal, never in JSON or quiet mode.
    let activity = activity::Activity::on_stderr(
        std::io::IsTerminal::is_terminal(&std::io::stderr()) && !json && !args.quiet,
    );
    // In a terminal that answers permission asks, the model's questions are asked there
    // too; anywhere else nobody could answer them (the `question` tool is then denied).
    let terminal = match args.permission {
        Some(PermissionMode::Ask) | None if interactive => {
            Some(Arc::new(output::TerminalAsker::new(activity.clone())))
        }
        _ => None,
    };
    let responder: Arc<dyn troupe_tools::PermissionAsker> = match (&terminal, args.permission) {
        (Some(t), _) => t.clone(),
        (None, Some(PermissionMode::Allow)) => Arc::new(troupe_actors::permission::Policy::Allow),
        _ => Arc::new(troupe_actors::permission::Policy::Deny),
    };
    let runtime = Runtime::start_with_agents(
        store.clone(),
        config,
        agents,
        registry(),
        responder,
        RuntimeOptions {
            interactive: terminal.is_some(),
            ..runtime_options()?
        },
    )
    .await?;
    if let Some(t) = terminal {
        runtime.set_question_asker(t);
    }

    let session = if let Some(id) = &args.session {
        let id = id.clone();
        store
            .read(move |r| r.find_session(&id))
            .await?
            .ok_or_else(|| {
                anyhow!(
                    "session not found: {}",
                    args.session.clone().unwrap_or_default()
                )
            })?
    } else if args.continue_ {
        let d = cwd.display().to_string();
        match store.read(move |r| r.latest_root(Some(&d))).await? {
            Some(s) => s,
            None => {
                eprintln!(
                    "troupe: no earlier session in {} to continue; starting a new one",
                    cwd.display()
                );
                runtime.create_session(&cwd, None).await?
            }
        }
    } else {
        runtime.create_session(&cwd, None).await?
    };

    if let Some(title) = args
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let mut info = session.clone();
        info.title = title.to_string();
        store.write1(troupe_session::Write::Session {
            info,
            created: false,
        });
        store.flush().await?;
    }
    let mut rx = runtime.bus().subscribe();
    let printer = output::Printer::new(
        json,
        session.id.clone(),
        output::PrintOptions {
            quiet: args.quiet,
            activity: activity.clone(),
        },
    );
    let sid = session.id.clone();
    let input = PromptInput {
        text,
        agent: args.agent.clone(),
        model,
        system: None,
        files,
        schema,
        steer: !args.queue,
        ..Default::default()
    };
    let rt2 = runtime.clone();
    // Listen before the turn starts, so no signal falls between the early handler and ours.
    let mut sigs = signals::Signals::take_over()?;
    let command = args.command.clone();
    let mut turn = tokio::spawn(async move {
        let r = match command {
            Some(name) => {
                let command = troupe_actors::command::CommandInput {
                    name,
                    arguments: input.text,
                    agent: input.agent,
                    model: input.model,
                    files: input.files,
                };
                rt2.command(&sid, command).await
            }
            None => rt2.prompt(&sid, input).await,
        };
        // Background subagents the turn started run on after it; their results start
        // turns of their own (printed like this one), which the run waits for first. The
        // run then reports the latest turn: its error decides the exit code and its text
        // is the last message.
        let later = rt2.wait_background(&sid).await;
        match (r, later) {
            (Ok(first), Some(later)) if later.ends_after(&first) => Ok(later),
            (r, _) => r,
        }
    });

    // Ctrl-C or SIGTERM: the first aborts the turn (partial output is kept, parts closed),
    // a second exits at once, whatever the process is doing by then (e.g. waiting for a
    // title at shutdown).
    let interrupts = Arc::new(std::sync::atomic::AtomicU32::new(0));
    {
        let (rt3, sid3, n) = (runtime.clone(), session.id.clone(), interrupts.clone());
        tokio::spawn(async move {
            while let Some(sig) = sigs.next().await {
                if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
                    let _ = std::io::stdout().flush();
                    eprintln!("\ntroupe: interrupted twice, exiting now");
                    std::process::exit(128 + sig);
                }
                if sig == libc::SIGTERM {
                    eprintln!("\ntroupe: SIGTERM: aborting the turn");
                } else {
                    eprintln!("\ntroupe: interrupting (press Ctrl-C again to exit at once)");
                }
                // A signal in the first instants can arrive before the session actor has
                // the prompt: repeat the abort until the turn has ended (the process exits
                // right after).
                let (rt4, sid4) = (rt3.clone(), sid3.clone());
                tokio::spawn(async move {
                    loop {
                        rt4.abort(&sid4);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
            }
        });
    }
    let mut printer = printer;
    printer.start();
    let result = loop {
        tokio::select! {
            r = &mut turn => break r,
            ev = rx.recv() => match ev {
                Ok(ev) => printer.event(&ev),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("troupe: output fell behind; {n} events skipped");
                }
                Err(_) => {}
            },
        }
    };
    // Everything the turn wrote is committed and published; print the rest.
    let _ = runtime.store().flush().await;
    while let Ok(ev) = rx.try_recv() {
        printer.event(&ev);
    }
    printer.finish();
    let result = result.map_err(|e| anyhow!("the turn task failed: {e}"))?;
    if let Ok(turn) = &result
        && let Some(value) = &turn.structured
    {
        structured::print_output(json, &turn.session_id, value);
    }
    if let (Some(path), Ok(turn)) = (&args.output_last_message, &result) {
        // The turn's last assistant text (or its structured answer), ending with a newline
        // like a text file.
        let mut text = match &turn.structured {
            Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
            None => turn.text.clone(),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        std::fs::write(path, text)
            .map_err(|e| anyhow!("--output-last-message {}: {e}", path.display()))?;
    }
    if interrupts.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        runtime.shutdown_within(Duration::ZERO).await;
    } else {
        runtime.shutdown().await;
    }
    match result {
        Ok(turn) => match turn.error {
            None => Ok(ExitCode::SUCCESS),
            Some(e) if e.name == troupe_session::MessageErrorName::MessageAborted => {
                eprintln!(
                    "troupe: aborted; session {} can be continued with --continue",
                    turn.session_id
                );
                Ok(ExitCode::from(signals::abort_exit_code()))
            }
            Some(e) => {
                let msg = e.message().replace('\n', " ");
                eprintln!("troupe: {}: {}", e.name, sanitize::terminal_safe(&msg));
                Ok(ExitCode::from(1))
            }
        },
        // Interrupted before the turn started ("aborted before it started").
        Err(e) if interrupts.load(std::sync::atomic::Ordering::SeqCst) > 0 => {
            eprintln!("troupe: aborted ({e})");
            Ok(ExitCode::from(signals::abort_exit_code()))
        }
        Err(e) => Err(anyhow!("{e}")),
    }
}
