//! The command line: `troupe`'s subcommands, their arguments and options (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::{auth, logging, monitor, serve, worker};

/// troupe: a multi-agent coding orchestrator built as a supervised actor system.
#[derive(Parser, Debug)]
#[command(name = "troupe", version, about)]
pub(crate) struct Cli {
    /// Session store: an SQLite file, or a PostgreSQL URL `postgres://user@host:port/db` (a
    /// store shared by several machines). Default: $TROUPE_DB, else
    /// ~/.local/share/troupe/troupe.db; an empty variable counts as unset, like every
    /// TROUPE_* variable.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub(crate) db: Option<PathBuf>,
    /// Log lines as `pretty` (one readable line per event) or `json` (one object per line,
    /// with the fields of the spans it happened in); what is logged: $TROUPE_LOG.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Pretty)]
    pub(crate) log_format: logging::LogFormat,
    /// Without a command, in a terminal: an interactive chat (`/help` lists its commands).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
        /// The shell to write the completion script for.
        shell: clap_complete::Shell,
    },
    /// Models that can run here: configured ones, a local server's, the catalog models of
    /// providers with a key; the default is marked with where it came from.
    Models {
        /// Output format and the directory whose config is used.
        #[command(flatten)]
        list: ListOpts,
        /// List every catalog model, also of providers without a key.
        #[arg(long)]
        all: bool,
    },
    /// MCP servers from the config (`mcp` key).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
}

/// The options of the commands that list what a directory's config gives (models, agents,
/// MCP servers).
#[derive(clap::Args, Debug)]
pub(crate) struct ListOpts {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Default)]
    pub(crate) format: Format,
    /// Working directory whose config is used.
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum McpCommand {
    /// Start each configured server, then list its state (connected, failed, disabled)
    /// and tools as the model sees them (`<server>_<tool>`).
    List {
        /// Output format and the directory whose config is used.
        #[command(flatten)]
        list: ListOpts,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum DbCommand {
    /// Cut the event log of every session no process drives to its last event and give
    /// the space back to the file system (SQLite VACUUM). Messages and parts stay, so
    /// `session show` and the API return the same as before.
    Vacuum,
}

#[derive(Subcommand, Debug)]
pub(crate) enum AgentCommand {
    /// List agents: name, mode, model, description.
    List {
        /// Output format and the directory whose config is used.
        #[command(flatten)]
        list: ListOpts,
        /// Include hidden agents.
        #[arg(long)]
        all: bool,
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
pub(crate) enum DebugCommand {
    /// Print the merged config and where each top-level key came from.
    Config {
        /// Working directory whose config is used.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum SessionCommand {
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
    ///
    /// After a revert, the messages (or the parts of a message) it undid are not printed: the
    /// header says from where on they are hidden and how many there are. `--format json` gives
    /// `{info, messages, reverted, todos}`: `messages` is what the session shows, `reverted` what
    /// the revert hides (a message reverted from a part is split: its earlier parts in
    /// `messages`, the rest in `reverted`), empty without a pending revert. `session export`
    /// keeps everything in `messages`.
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
    /// Undo a session from a message on: the files its steps changed are restored and the
    /// messages are hidden until the next prompt deletes them (`unrevert` brings them back).
    ///
    /// A revert always goes back to a user message and undoes everything from it on (OpenCode's
    /// rule). Given a user message, that is the message itself: its whole turn and every later
    /// one are undone. Given an assistant message, it is the user message that started that
    /// message's turn: the whole turn is undone, not only the steps from the given message on.
    /// The output names the message the revert really went back to.
    ///
    /// With `--part`, the revert goes to that part of the message instead: the parts before it
    /// stay, the part and everything after it are undone (a part with no text or tool part
    /// before it goes back to the start of the turn, as above). File changes are undone per
    /// step, not per tool call: a step's changes are recorded together in its `patch` part, at
    /// the step's end, so reverting to a tool call also undoes what an earlier tool call of the
    /// same step changed.
    ///
    /// Each file goes back to how it was before the first undone step that changed it (a file
    /// created since is deleted); nothing else is touched. A hand edit made between two steps
    /// stays; one made while an undone step ran (the model answering, a tool running) is part
    /// of that step's changes and is undone with it.
    Revert {
        /// Session id (or a unique prefix).
        id: String,
        /// Message id to revert to (an assistant message: the user message of its turn).
        message: String,
        /// Part id in that message to revert to (the parts before it stay).
        #[arg(long)]
        part: Option<String>,
    },
    /// Undo the pending revert: the files come back as they were before it and the hidden
    /// messages show again.
    ///
    /// With no pending revert there is nothing to undo: it says so on stderr and exits 1.
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
pub(crate) enum Format {
    /// Human-readable.
    Default,
    /// Machine-readable JSON.
    Json,
}

/// The options `troupe run` and `troupe batch` share: which model and agent take the turn,
/// where, how permission asks are answered, and the server to run it through. The help
/// below is `run`'s; `batch` words its own (see [`BatchArgs`]).
#[derive(clap::Args, Debug)]
pub(crate) struct TurnOpts {
    /// Model as provider/model.
    #[arg(short = 'm', long)]
    pub(crate) model: Option<String>,
    /// Agent name.
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// Working directory (default: current).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// How to answer permission asks: `ask` prompts in a terminal (the default when stdin
    /// and stderr are terminals), `allow` or `deny` answer by policy (no terminal: deny).
    #[arg(long, value_enum)]
    pub(crate) permission: Option<PermissionMode>,
    /// Run through a running `troupe serve` at this URL (e.g. http://127.0.0.1:4096).
    #[arg(long, value_name = "URL")]
    pub(crate) attach: Option<String>,
    /// Password of the server given with --attach; default: $TROUPE_SERVER_PASSWORD.
    #[arg(long)]
    pub(crate) password: Option<String>,
}

#[derive(Parser, Debug)]
pub(crate) struct RunArgs {
    /// The prompt (words are joined with spaces; piped stdin is appended).
    pub(crate) message: Vec<String>,
    /// `default` streams text; `json` prints every bus event as one JSON line.
    #[arg(long, value_enum, default_value_t = Format::Default)]
    pub(crate) format: Format,
    /// Continue the most recent session in this directory.
    #[arg(short = 'c', long = "continue")]
    pub(crate) continue_: bool,
    /// Run a command (`.troupe/command/NAME.md`, the `command` config key, the same under
    /// the global config dir) with the message words as its arguments.
    #[arg(long, value_name = "NAME")]
    pub(crate) command: Option<String>,
    /// Continue a given session.
    #[arg(short = 's', long)]
    pub(crate) session: Option<String>,
    /// With --session or -c, to a session whose turn is running (in a `troupe serve` given
    /// with --attach, or this process): wait for a turn of its own after that one. Without
    /// it, the prompt joins the running turn at its next step (steering).
    #[arg(long)]
    pub(crate) queue: bool,
    /// Title of the session (instead of a generated one).
    #[arg(long)]
    pub(crate) title: Option<String>,
    /// Attach a file to the prompt (repeatable), as `@path` in the prompt does: a text file
    /// is read through the `read` tool (its permission checks; `path#L10-20` for a range), a
    /// directory is listed, a PNG, JPEG, GIF, WebP image or a PDF goes to a model that takes
    /// it (its `modalities.input` lists `image` / `pdf`), else it is an error.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
    /// Model, agent, directory, permission answers and server.
    #[command(flatten)]
    pub(crate) opts: TurnOpts,
    /// Write the last message of the turn (its text, without tool lines) to FILE as well.
    #[arg(short = 'o', long = "output-last-message", value_name = "FILE")]
    pub(crate) output_last_message: Option<PathBuf>,
    /// The answer must be a JSON value valid against the JSON Schema in FILE: the model
    /// gives it through the `StructuredOutput` tool, and it is printed on stdout (with
    /// `--format json`: a last `structured.output` line). A value that never validates fails
    /// the run with the last validation error.
    #[arg(long = "json-schema", value_name = "FILE")]
    pub(crate) json_schema: Option<PathBuf>,
    /// Print only the answer (and errors): no tool lines, no activity line, no notices.
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
}

#[derive(Parser, Debug)]
// The shared options (`TurnOpts`) say what they do for one run; a batch words five of them
// for its tasks.
#[command(
    mut_arg("model", |a| a.help("Default model for tasks without one")),
    mut_arg("agent", |a| a.help("Default agent for tasks without one")),
    mut_arg("dir", |a| a.help("Base directory (task `dir`s are relative to it; default: current)")),
    mut_arg("permission", |a| a.help(
        "How to answer permission asks: `allow`, or `deny` (the default; a batch never prompts, so `ask` also denies)"
    )),
    mut_arg("attach", |a| a.help(
        "Run the tasks through a running `troupe serve` at this URL, so `troupe monitor` and the web view show them"
    )),
)]
pub(crate) struct BatchArgs {
    /// Tasks file: one JSON object per line, {"id", "prompt", "agent"?, "model"?, "dir"?,
    /// "schema"?, "timeout"? (seconds), "maxSteps"? (the step limit of the task's turn)}.
    pub(crate) file: PathBuf,
    /// Sessions at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) parallel: usize,
    /// Append results here as JSONL (default: standard output).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Skip task ids already present in --out.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Run again the tasks whose last result in --out failed (only those; with --resume
    /// also the tasks not in --out yet). New results are appended; the latest line of an id
    /// is its result.
    #[arg(long)]
    pub(crate) retry_failed: bool,
    /// Wall-time limit of each task without its own "timeout", seconds; past it the task's
    /// turn is aborted and the task fails.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<f64>,
    /// Model, agent, directory, permission answers and server (each worded for a batch
    /// above).
    #[command(flatten)]
    pub(crate) opts: TurnOpts,
    /// Cap on the total time one step of a task spends waiting to retry a failing provider,
    /// seconds (0: no retries); past it the task fails. Local batches only (with --attach the
    /// server's settings apply).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub(crate) max_retry_time: f64,
    /// Run the tasks on a cluster of `troupe worker`s through this NATS server (JetStream),
    /// e.g. nats://127.0.0.1:4222: every task is published at once (--parallel does not
    /// apply; the workers' --concurrency does) and the results are collected into --out.
    #[arg(long, value_name = "URL", conflicts_with = "attach")]
    pub(crate) cluster: Option<String>,
    /// Cluster options (with --cluster).
    #[command(flatten)]
    pub(crate) cluster_opts: worker::ClusterArgs,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PermissionMode {
    /// Prompt in the terminal.
    Ask,
    /// Allow every ask once.
    Allow,
    /// Reject every ask.
    Deny,
}
