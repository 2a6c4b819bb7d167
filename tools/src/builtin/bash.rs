//! `bash {command, description, timeout?, workdir?}`: run a shell command in its own process
//! group (OpenCode `tool/shell.ts`, §6.4 and §7.3 "bash, in detail").
//!
//! The command runs under `/bin/bash -c` (or `/bin/sh -c` when bash is absent) with stdin
//! null and stdout+stderr combined in arrival order. On timeout or abort the whole process
//! group gets SIGTERM, then SIGKILL after [`KILL_GRACE`]; if the future is dropped while the
//! command runs, the group is SIGKILLed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::procs;
use crate::truncate::{self, Direction, MAX_BYTES, MAX_LINES};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Environment variable holding `troupe serve`'s password (troupe_server::PASSWORD_ENV;
/// this crate sits below the server). Removed from every shell the tool starts, and from
/// every local MCP server (which may run commands the model asks for).
pub const SERVER_PASSWORD_ENV: &str = "TROUPE_SERVER_PASSWORD";
/// Default timeout in ms (OpenCode 120_000).
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Chars of output kept in `metadata.output` (OpenCode `MAX_METADATA_LENGTH`).
pub const MAX_METADATA_LENGTH: usize = 30_000;
/// Grace between SIGTERM and SIGKILL of the process group (OpenCode uses 3 s; we cancel
/// interactively, so shorter).
pub const KILL_GRACE: Duration = Duration::from_millis(200);
/// Minimum interval between progress updates.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// After the shell exits, output is still collected until the pipe has been quiet this long
/// (background children may hold it open; their later output is dropped).
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(150);
/// Upper bound on collecting output after the shell exits.
pub const DRAIN_MAX: Duration = Duration::from_secs(1);

/// The `bash` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct BashTool;

/// Arguments of the `bash` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BashArgs {
    /// The command to execute
    command: String,
    /// Clear, concise description of what this command does in 5-10 words
    // Asked of the model, not enforced: a call without one still runs (serde reads a
    // missing `Option` field as `None`).
    #[schemars(required)]
    description: Option<String>,
    /// Optional timeout in milliseconds
    // Advertised as an integer ≥ 1; a fractional or non-positive value is parsed and
    // refused by `run` with a clear message.
    #[schemars(with = "Option<u64>", range(min = 1))]
    timeout: Option<f64>,
    /// Working directory for the command (default: the project directory)
    workdir: Option<String>,
    /// Start the command in the background and return at once (for servers and watchers); it is stopped with the session
    #[serde(default)]
    background: Option<bool>,
}

impl TypedTool for BashTool {
    type Args = BashArgs;
    const NAME: &'static str = "bash";

    fn describe(&self) -> String {
        format!(
            "Run a shell command (bash -c) and return its combined stdout/stderr and exit code.\n\
             - `command`: the command line. Chain dependent steps with `&&`; quote paths with spaces.\n\
             - `description`: 5-10 words saying what the command does (shown to the user).\n\
             - `workdir`: directory to run in (default: the project directory); prefer it over `cd`.\n\
             - `timeout`: milliseconds before the command is killed (default {DEFAULT_TIMEOUT_MS}).\n\
             - Processes the command leaves running (`cmd &`) are stopped when it ends. For a \
             server or watcher that must keep running, set `background: true`: the call returns \
             at once with the process id and a log file; the process is stopped with the session.\n\
             - Output longer than {MAX_LINES} lines or {} KB is cut to its tail; the full text is saved to a file.\n\
             - stdin is closed: do not run interactive commands. Use the read/glob/grep/edit tools \
             instead of cat/find/grep/sed where possible.",
            MAX_BYTES / 1024
        )
    }

    fn run(
        &self,
        args: BashArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move { run(args, ctx).await })
    }
}

/// Send `sig` to every process of group `pgid` (no-op for pgid ≤ 1).
#[allow(unsafe_code)]
pub fn kill_group(pgid: i32, sig: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a negative pid
    // addresses the process group. Errors (ESRCH when the group is gone) are ignored.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Owns a running shell: on drop it unregisters the shell and, unless disarmed, SIGKILLs
/// its group at once and every other process of the call (found by its mark, off-thread)
/// — the tool future was dropped mid-run.
struct GroupGuard {
    pgid: i32,
    tag: String,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pgid, libc::SIGKILL);
            let (tag, pgid) = (self.tag.clone(), self.pgid);
            let _ = std::thread::Builder::new()
                .name("troupe-kill-call".into())
                .spawn(move || procs::kill_call(&tag, pgid));
        }
        procs::unregister_child(self.pgid);
    }
}

/// Kill every process of the call still running (its group, its mark, their descendants);
/// returns how many there were.
async fn kill_leftovers(tag: &str, pgid: i32) -> usize {
    let tag = tag.to_string();
    tokio::task::spawn_blocking(move || procs::kill_call(&tag, pgid))
        .await
        .unwrap_or(0)
}

fn shell_path() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// Output collected so far: a bounded tail in memory, spilled to a file once it exceeds
/// [`MAX_BYTES`].
struct OutputBuf {
    tail: Vec<u8>,
    total: usize,
    newlines: usize,
    last_byte: Option<u8>,
    spill: Option<(PathBuf, tokio::fs::File)>,
    dirty: bool,
}

impl OutputBuf {
    fn new() -> Self {
        Self {
            tail: Vec::new(),
            total: 0,
            newlines: 0,
            last_byte: None,
            spill: None,
            dirty: false,
        }
    }

    async fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        self.dirty = true;
        self.total += chunk.len();
        self.newlines += chunk.iter().filter(|&&b| b == b'\n').count();
        self.last_byte = chunk.last().copied();
        self.tail.extend_from_slice(chunk);
        if let Some((_, file)) = &mut self.spill {
            if file.write_all(chunk).await.is_err() {
                self.spill = None;
            }
        } else if self.total > MAX_BYTES {
            let path = truncate::new_output_path();
            let opened = async {
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir).await?;
                }
                let mut f = tokio::fs::File::create(&path).await?;
                f.write_all(&self.tail).await?;
                Ok::<_, std::io::Error>(f)
            }
            .await;
            match opened {
                Ok(f) => self.spill = Some((path, f)),
                Err(e) => tracing::warn!(error = %e, "cannot spill bash output"),
            }
        }
        if self.tail.len() > 4 * MAX_BYTES {
            let mut cut = self.tail.len() - 2 * MAX_BYTES;
            // Do not start inside a UTF-8 sequence.
            while cut < self.tail.len() && (self.tail[cut] & 0xC0) == 0x80 {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.tail).into_owned()
    }

    fn lines(&self) -> usize {
        self.newlines + usize::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    /// Final output text (tail-truncated with the saved-file note) and the saved path.
    async fn finish(mut self) -> (String, bool, Option<PathBuf>) {
        let text = self.text();
        if self.total <= MAX_BYTES && self.lines() <= MAX_LINES {
            return (text, false, None);
        }
        let path = match self.spill.take() {
            Some((path, mut file)) => {
                let _ = file.flush().await;
                Some(path)
            }
            None => truncate::save_full_output(&text).await,
        };
        let preview = match truncate::cut(&text, MAX_LINES, MAX_BYTES, Direction::Tail) {
            Some((p, _, _)) => p,
            None => text,
        };
        let saved = path
            .as_ref()
            .map(|p| format!("Full output saved to: {}\n\n", p.display()))
            .unwrap_or_default();
        (
            format!("...output truncated...\n\n{saved}{preview}"),
            true,
            path,
        )
    }
}

/// Last `max` chars of `s`.
fn last_chars(s: &str, max: usize) -> String {
    let count = s.chars().count();
    if count <= max {
        s.to_string()
    } else {
        s.chars().skip(count - max).collect()
    }
}

async fn run(args: BashArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    let timeout_ms = match args.timeout {
        None => DEFAULT_TIMEOUT_MS,
        Some(t) if t.is_finite() && t > 0.0 => t.round() as u64,
        Some(t) => {
            return Err(crate::args::invalid(
                "bash",
                format!("timeout must be a positive number of milliseconds, got {t}"),
            ));
        }
    };
    let description = args.description.unwrap_or_default();
    let cwd = ctx.resolve_or_directory(args.workdir.as_deref())?;

    // Permissions (issue 11): the tree-sitter analysis in `bash_permission`.
    super::bash_permission::check(&ctx, &args.command, &cwd, &description).await?;
    if ctx.abort.is_cancelled() {
        return Err(ToolError::Aborted);
    }
    match tokio::fs::metadata(&cwd).await {
        Ok(m) if m.is_dir() => {}
        _ => {
            return Err(ToolError::Failed(format!(
                "Working directory does not exist: {}",
                cwd.display()
            )));
        }
    }

    // `shell.env` hooks add variables; a failing one means the command does not run.
    let hook_env = match ctx.hooks.as_ref() {
        Some(h) if !h.config().shell_env.is_empty() => h
            .shell_env(&cwd, &ctx.session_id, &ctx.call_id, &args.command)
            .await
            .map_err(|e| ToolError::Failed(format!("{e}; the command was not run")))?,
        _ => Vec::new(),
    };
    procs::init();
    let tag = procs::new_call_tag();
    if args.background == Some(true) {
        return start_background(&args.command, &cwd, &tag, &hook_env, description, &ctx).await;
    }
    let (mut child, reader, pgid) = {
        let _spawning = procs::spawn_guard();
        let (child, reader) = spawn_shell(&args.command, &cwd, &tag, &hook_env, None)
            .map_err(|e| ToolError::Failed(format!("Failed to start shell: {e}")))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        procs::register_child(pgid);
        (child, reader, pgid)
    };
    let mut guard = GroupGuard {
        pgid,
        tag: tag.clone(),
        armed: true,
    };

    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let readers: Vec<_> = reader
        .into_iter()
        .map(|r| tokio::spawn(pump(r, tx.clone())))
        .collect();
    drop(tx);

    let publish = |buf: &OutputBuf| {
        let mut m = serde_json::Map::new();
        m.insert(
            "output".into(),
            Value::String(last_chars(&buf.text(), MAX_METADATA_LENGTH)),
        );
        m.insert("description".into(), Value::String(description.clone()));
        // The call's process mark, on the stored running part: if troupe dies, the next
        // process that loads the session finds what survived by it (issue 12.4).
        m.insert(procs::OWNER_METADATA_KEY.into(), Value::String(tag.clone()));
        ctx.progress.update(Some(description.clone()), m);
    };

    let mut buf = OutputBuf::new();
    publish(&buf);
    let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms.saturating_add(100)));
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rx_open = true;
    let mut status = None;
    let mut timed_out = false;
    let mut aborted = false;
    loop {
        tokio::select! {
            chunk = rx.recv(), if rx_open => match chunk {
                Some(c) => buf.push(&c).await,
                None => rx_open = false,
            },
            st = child.wait() => {
                status = st.ok();
                break;
            }
            _ = &mut deadline => { timed_out = true; break; }
            _ = ctx.abort.cancelled() => { aborted = true; break; }
            _ = ticker.tick() => {
                if buf.dirty {
                    buf.dirty = false;
                    publish(&buf);
                }
            }
        }
    }

    if timed_out || aborted {
        kill_group(pgid, libc::SIGTERM);
        status = tokio::time::timeout(KILL_GRACE, child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        kill_group(pgid, libc::SIGKILL);
        if status.is_none() {
            status = child.wait().await.ok();
        }
    }
    // Whatever the call started and left running dies with it: `cmd &`, `(cmd &)`, and
    // commands that moved to another process group (issue 24.5).
    let leftovers = kill_leftovers(&tag, pgid).await;
    guard.armed = false;
    drop(guard);

    // Collect what is still in the pipe: until it closes, or goes quiet for
    // DRAIN_AFTER_EXIT (a background child may keep it open), or DRAIN_MAX has passed.
    let drain_cap = tokio::time::Instant::now() + DRAIN_MAX;
    while rx_open {
        let until = (tokio::time::Instant::now() + DRAIN_AFTER_EXIT).min(drain_cap);
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(c)) => buf.push(&c).await,
            Ok(None) | Err(_) => rx_open = false,
        }
    }
    for r in readers {
        r.abort();
    }

    if aborted {
        publish(&buf);
        return Err(ToolError::Aborted);
    }

    let meta_output = last_chars(&buf.text(), MAX_METADATA_LENGTH);
    let (mut output, truncated, output_path) = buf.finish().await;
    if output.is_empty() {
        output = "(no output)".into();
    }
    if timed_out {
        output.push_str(&format!(
            "\n\n<shell_metadata>\nshell tool terminated command after exceeding timeout {timeout_ms} ms. If this command is expected to take longer and is not waiting for interactive input, retry with a larger timeout value in milliseconds.\n</shell_metadata>"
        ));
    } else if leftovers > 0 {
        output.push_str(&format!(
            "\n\n<shell_metadata>\n{leftovers} process(es) the command left running were stopped when it ended. To keep a server or watcher running, call bash with background: true.\n</shell_metadata>"
        ));
    }
    let exit = if timed_out {
        None
    } else {
        status.and_then(|s| s.code())
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert("output".into(), Value::String(meta_output));
    metadata.insert("exit".into(), exit.map_or(Value::Null, |c| json!(c)));
    metadata.insert("description".into(), Value::String(description.clone()));
    metadata.insert("truncated".into(), Value::Bool(truncated));
    if leftovers > 0 {
        metadata.insert("stoppedLeftovers".into(), json!(leftovers));
    }
    if let Some(p) = output_path {
        metadata.insert(
            "outputPath".into(),
            Value::String(p.to_string_lossy().into_owned()),
        );
    }
    Ok(ToolOutput {
        title: description,
        output,
        metadata,
    })
}

/// Spawn `<shell> -c command` in `cwd` as the leader of a new process group, stdin null,
/// marked with `OWNER_ENV=tag` ([`procs`]). Output: stdout and stderr both to `log` when
/// given (background mode, no reader returned), else to one pipe (so their output
/// interleaves exactly as written) whose read end is returned.
fn spawn_shell(
    command: &str,
    cwd: &Path,
    tag: &str,
    hook_env: &[(String, String)],
    log: Option<std::fs::File>,
) -> std::io::Result<(
    tokio::process::Child,
    Option<tokio::net::unix::pipe::Receiver>,
)> {
    let (reader, writer) = match log {
        Some(f) => (None, std::os::fd::OwnedFd::from(f)),
        None => {
            let (r, w) = std::io::pipe()?;
            (Some(r), std::os::fd::OwnedFd::from(w))
        }
    };
    let writer_err = writer.try_clone()?;
    let child = {
        // The Command owns the write ends; dropping it right after spawn closes the parent's
        // copies so EOF arrives when the command's processes close theirs.
        let mut cmd = tokio::process::Command::new(shell_path());
        cmd.arg("-c")
            .arg(command)
            .current_dir(cwd)
            // `shell.env` hook variables first: the mark and the removals below win.
            .envs(hook_env.iter().map(|(k, v)| (k, v)))
            .env(procs::OWNER_ENV, tag)
            // With CDPATH set, `cd x` may enter a directory elsewhere than `./x`, which the
            // permission check would not see (issue 11).
            .env_remove("CDPATH")
            // The password of a `troupe serve` this process runs: with it the model could
            // drive the server around its own permission checks.
            .env_remove(SERVER_PASSWORD_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer_err))
            .process_group(0);
        procs::close_inherited_fds(&mut cmd);
        cmd.spawn()?
    };
    let reader = match reader {
        Some(r) => Some(tokio::net::unix::pipe::Receiver::from_owned_fd(
            std::os::fd::OwnedFd::from(r),
        )?),
        None => None,
    };
    Ok((child, reader))
}

/// `background: true`: start the command with its output going to a log file, record it as
/// a background process of the session ([`procs::add_background`]) and return at once.
async fn start_background(
    command: &str,
    cwd: &Path,
    tag: &str,
    hook_env: &[(String, String)],
    description: String,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let log = truncate::new_output_path().with_extension("log");
    if let Some(dir) = log.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| ToolError::Failed(format!("Cannot create {}: {e}", dir.display())))?;
    }
    let file = std::fs::File::create(&log)
        .map_err(|e| ToolError::Failed(format!("Cannot create log {}: {e}", log.display())))?;
    let (mut child, pid) = {
        let _spawning = procs::spawn_guard();
        let (child, _) = spawn_shell(command, cwd, tag, hook_env, Some(file))
            .map_err(|e| ToolError::Failed(format!("Failed to start shell: {e}")))?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        procs::register_child(pid);
        (child, pid)
    };
    let exited = std::sync::Arc::new(std::sync::Mutex::new(None));
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    procs::add_background(
        &ctx.session_id,
        procs::Background {
            pid,
            tag: tag.to_string(),
            command: command.to_string(),
            log: log.clone(),
            started_ms,
            exited: exited.clone(),
        },
    );
    tokio::spawn(async move {
        let code = child.wait().await.ok().map(|s| s.code().unwrap_or(-1));
        if let Ok(mut e) = exited.lock() {
            *e = Some(code.unwrap_or(-1));
        }
        procs::unregister_child(pid);
    });
    let mut metadata = serde_json::Map::new();
    metadata.insert("background".into(), Value::Bool(true));
    metadata.insert("pid".into(), json!(pid));
    metadata.insert("description".into(), Value::String(description.clone()));
    metadata.insert(
        "outputPath".into(),
        Value::String(log.to_string_lossy().into_owned()),
    );
    metadata.insert("truncated".into(), Value::Bool(false));
    metadata.insert("exit".into(), Value::Null);
    Ok(ToolOutput {
        title: description,
        output: format!(
            "Started in the background: pid {pid}. Its output (stdout and stderr) goes to {}; \
             read that file to see it. It keeps running after this call and is stopped when \
             the session ends or troupe exits (or stop it with `kill -- -{pid}`).",
            log.display()
        ),
        metadata,
    })
}

async fn pump(mut r: impl tokio::io::AsyncRead + Unpin, tx: mpsc::Sender<Vec<u8>>) {
    let mut b = vec![0u8; 8192];
    loop {
        match r.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send(b[..n].to_vec()).await.is_err() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "bash_tests.rs"]
mod tests;
