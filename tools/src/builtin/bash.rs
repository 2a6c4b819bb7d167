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

use crate::paths;
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
    let cwd = match &args.workdir {
        Some(w) if !w.trim().is_empty() => paths::normalize(&ctx.resolve(w)),
        _ => paths::normalize(&ctx.directory),
    };

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
mod tests {
    use super::*;
    use crate::Tool;
    use crate::paths::test_support::Recorder;
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Progress(Mutex<Vec<serde_json::Map<String, Value>>>);
    impl crate::ProgressSink for Progress {
        fn update(&self, _t: Option<String>, m: serde_json::Map<String, Value>) {
            if let Ok(mut g) = self.0.lock() {
                g.push(m);
            }
        }
    }
    impl Progress {
        fn last_output(&self) -> String {
            self.0
                .lock()
                .ok()
                .and_then(|g| {
                    g.last()
                        .and_then(|m| m.get("output").and_then(|v| v.as_str()).map(String::from))
                })
                .unwrap_or_default()
        }
    }

    async fn bash(dir: &Path, args: Value) -> Result<ToolOutput, ToolError> {
        BashTool.execute(args, ToolContext::simple(dir)).await
    }

    /// Live (non-zombie) processes whose process group is `pgid`.
    fn live_in_group(pgid: i32) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in rd.flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" {
                out.push(stat);
            }
        }
        out
    }

    #[tokio::test]
    async fn exit_code_and_output() {
        let d = tempfile::tempdir().unwrap();
        let out = bash(
            d.path(),
            json!({"command": "echo hi; echo err >&2; exit 3", "description": "test"}),
        )
        .await
        .unwrap();
        assert!(
            out.output.contains("hi\n") && out.output.contains("err"),
            "{}",
            out.output
        );
        assert_eq!(out.metadata["exit"], json!(3));
        assert_eq!(out.title, "test");
        let out = bash(d.path(), json!({"command": "true", "description": "t"}))
            .await
            .unwrap();
        assert_eq!(out.output, "(no output)");
        assert_eq!(out.metadata["exit"], json!(0));
        let out = bash(
            d.path(),
            json!({"command": "pwd", "description": "t", "workdir": "."}),
        )
        .await
        .unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        assert_eq!(std::fs::canonicalize(out.output.trim()).unwrap(), real);
    }

    #[tokio::test]
    async fn negative_timeout_invalid() {
        let d = tempfile::tempdir().unwrap();
        let err = bash(
            d.path(),
            json!({"command": "true", "description": "t", "timeout": -5}),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }));
        let err = bash(d.path(), json!({"description": "t"}))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ToolError::InvalidArguments { ref detail, .. } if detail.contains("command"))
        );
    }

    #[tokio::test]
    async fn timeout_kills_and_notes() {
        let d = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let out = bash(
            d.path(),
            json!({"command": "echo start; sleep 30", "description": "t", "timeout": 300}),
        )
        .await
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(out.output.starts_with("start\n"));
        assert!(
            out.output.contains(
                "<shell_metadata>\nshell tool terminated command after exceeding timeout 300 ms."
            ),
            "{}",
            out.output
        );
        assert_eq!(out.metadata["exit"], Value::Null);
    }

    #[tokio::test]
    async fn abort_kills_whole_group() {
        let d = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let mut ctx = ToolContext::simple(d.path());
        ctx.progress = progress.clone();
        let abort = ctx.abort.clone();
        let task = tokio::spawn(BashTool.execute(
            json!({"command": "echo $$; sleep 30 & sleep 30; wait", "description": "sleepers"}),
            ctx,
        ));
        // Wait for the pid to show up in progress.
        let mut pgid = 0;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Ok(p) = progress.last_output().trim().parse::<i32>() {
                pgid = p;
                break;
            }
        }
        assert!(pgid > 1, "no pid published");
        // Both sleeps running.
        for _ in 0..50 {
            if live_in_group(pgid).len() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(live_in_group(pgid).len() >= 3, "{:?}", live_in_group(pgid));
        let t0 = std::time::Instant::now();
        abort.cancel();
        let res = task.await.unwrap();
        assert_eq!(res, Err(ToolError::Aborted));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let mut left = live_in_group(pgid);
        for _ in 0..20 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            left = live_in_group(pgid);
        }
        assert!(left.is_empty(), "survivors: {left:?}");
        assert!(t0.elapsed() < Duration::from_secs(1));
    }

    async fn wait_for_pid(progress: &Progress) -> i32 {
        for _ in 0..150 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(p) = progress
                .last_output()
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<i32>().ok())
            {
                return p;
            }
        }
        panic!("no pid published");
    }

    async fn wait_gone(pgid: i32) -> Vec<String> {
        let mut left = live_in_group(pgid);
        for _ in 0..20 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            left = live_in_group(pgid);
        }
        left
    }

    #[tokio::test]
    async fn abort_kills_term_ignoring_grandchildren() {
        let d = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let mut ctx = ToolContext::simple(d.path());
        ctx.progress = progress.clone();
        let abort = ctx.abort.clone();
        let task = tokio::spawn(BashTool.execute(
            json!({"command": "echo $$; trap '' TERM; sleep 30 & sleep 30; wait", "description": "stubborn"}),
            ctx,
        ));
        let pgid = wait_for_pid(&progress).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = std::time::Instant::now();
        abort.cancel();
        assert_eq!(task.await.unwrap(), Err(ToolError::Aborted));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let left = wait_gone(pgid).await;
        assert!(left.is_empty(), "survivors: {left:?}");
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let d = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let mut ctx = ToolContext::simple(d.path());
        ctx.progress = progress.clone();
        let task = tokio::spawn(BashTool.execute(
            json!({"command": "echo $$; sleep 30 & sleep 30; wait", "description": "dropped"}),
            ctx,
        ));
        let pgid = wait_for_pid(&progress).await;
        task.abort();
        let _ = task.await;
        let left = wait_gone(pgid).await;
        assert!(left.is_empty(), "survivors: {left:?}");
    }

    #[tokio::test]
    async fn stdout_and_stderr_interleave_in_order() {
        let d = tempfile::tempdir().unwrap();
        let out = bash(
            d.path(),
            json!({"command": "echo a; echo b >&2; echo c; echo d >&2", "description": "t"}),
        )
        .await
        .unwrap();
        assert_eq!(out.output, "a\nb\nc\nd\n");
    }

    #[tokio::test]
    async fn output_cap_keeps_tail() {
        let d = tempfile::tempdir().unwrap();
        let out = bash(
            d.path(),
            json!({"command": "seq 1 5000", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(
            out.output
                .starts_with("...output truncated...\n\nFull output saved to: "),
            "{}",
            &out.output[..200]
        );
        assert!(out.output.ends_with("5000\n"));
        assert!(!out.output.contains("\n1000\n"));
        assert_eq!(out.metadata["truncated"], json!(true));
        let path = out.metadata["outputPath"].as_str().unwrap().to_string();
        let full = std::fs::read_to_string(&path).unwrap();
        assert!(full.starts_with("1\n2\n") && full.ends_with("5000\n"));
        let _ = std::fs::remove_file(path);
        // Byte cap: 200 KB in a few lines.
        let out = bash(d.path(), json!({"command": "head -c 200000 /dev/zero | tr '\\0' a; echo; echo END", "description": "t"})).await.unwrap();
        assert!(out.output.ends_with("END\n"));
        assert!(out.output.len() < MAX_BYTES + 500);
        assert!(out.metadata["output"].as_str().unwrap().chars().count() <= MAX_METADATA_LENGTH);
        if let Some(p) = out.metadata["outputPath"].as_str() {
            assert_eq!(std::fs::metadata(p).unwrap().len(), 200_000 + 5);
            let _ = std::fs::remove_file(p);
        }
    }

    #[tokio::test]
    async fn background_child_does_not_block() {
        let d = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let out = bash(
            d.path(),
            json!({"command": "sleep 2 & echo done", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(out.output.contains("done"));
        assert!(start.elapsed() < Duration::from_millis(1500));
    }

    /// A process is alive when it exists and is not a zombie.
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
            .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
    }

    /// Wait (bounded) until none of `pids` is alive; returns the survivors.
    async fn survivors(pids: &[i32]) -> Vec<i32> {
        for _ in 0..100 {
            if pids.iter().all(|&p| !alive(p)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pids.iter().copied().filter(|&p| alive(p)).collect()
    }

    fn pids_in(text: &str) -> Vec<i32> {
        text.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    }

    /// Issue 24.5: `sleep 30 & echo started`, `(sleep 30 &); echo bg` and a command under
    /// `timeout` (which moves to its own process group) leave nothing running after the call.
    #[tokio::test]
    async fn leftovers_die_with_the_call() {
        let d = tempfile::tempdir().unwrap();
        let out = bash(
            d.path(),
            json!({"command": "sleep 30 & echo started $!", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(out.output.starts_with("started "), "{}", out.output);
        let pids = pids_in(out.output.lines().next().unwrap());
        assert_eq!(pids.len(), 1);
        assert_eq!(survivors(&pids).await, Vec::<i32>::new());
        assert!(
            out.output
                .contains("1 process(es) the command left running were stopped"),
            "{}",
            out.output
        );
        assert_eq!(out.metadata["stoppedLeftovers"], json!(1));

        let out = bash(
            d.path(),
            json!({"command": "(sleep 30 & echo $! > orphan.pid); echo bg", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(out.output.starts_with("bg\n"), "{}", out.output);
        let pids = pids_in(&std::fs::read_to_string(d.path().join("orphan.pid")).unwrap());
        assert_eq!(pids.len(), 1);
        assert_eq!(survivors(&pids).await, Vec::<i32>::new());

        // `timeout` and `setsid` leave the shell's process group; env -i drops the mark, but
        // its parent (in the group or marked) gives it away.
        let out = bash(
            d.path(),
            json!({"command": "timeout 60 sleep 30 & echo $!; setsid sleep 30 & echo $!; env -i /bin/sh -c 'sleep 30 & echo $!'", "description": "t"}),
        )
        .await
        .unwrap();
        let pids: Vec<i32> = out.output.lines().take(3).flat_map(pids_in).collect();
        assert_eq!(pids.len(), 3, "{}", out.output);
        assert_eq!(survivors(&pids).await, Vec::<i32>::new());
    }

    /// Issue 24.5: an interrupt kills the whole tree, grandchildren outside the group too.
    #[tokio::test]
    async fn abort_kills_escaped_grandchildren() {
        let d = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let mut ctx = ToolContext::simple(d.path());
        ctx.progress = progress.clone();
        let abort = ctx.abort.clone();
        let task = tokio::spawn(BashTool.execute(
            json!({"command": "echo $$; setsid sleep 30 & echo $! > a.pid; (timeout 60 sleep 30 &); sleep 30", "description": "t"}),
            ctx,
        ));
        wait_for_pid(&progress).await;
        let pidfile = d.path().join("a.pid");
        for _ in 0..100 {
            if std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let escaped = pids_in(&std::fs::read_to_string(&pidfile).unwrap());
        assert!(alive(escaped[0]));
        abort.cancel();
        assert_eq!(task.await.unwrap(), Err(ToolError::Aborted));
        assert_eq!(survivors(&escaped).await, Vec::<i32>::new());
    }

    /// `background: true` returns at once, keeps the process running and listed under the
    /// session, and stopping the session stops it.
    #[tokio::test]
    async fn background_runs_until_the_session_stops() {
        let d = tempfile::tempdir().unwrap();
        let mut ctx = ToolContext::simple(d.path());
        ctx.session_id = format!("ses_bg_{}", std::process::id());
        let out = BashTool
            .execute(
                json!({"command": "echo up; sleep 30", "description": "server", "background": true}),
                ctx.clone(),
            )
            .await
            .unwrap();
        assert!(
            out.output.starts_with("Started in the background: pid "),
            "{}",
            out.output
        );
        let pid = out.metadata["pid"].as_i64().unwrap() as i32;
        assert!(alive(pid));
        let listed = procs::background(&ctx.session_id);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].pid, pid);
        assert_eq!(listed[0].command, "echo up; sleep 30");
        let log = out.metadata["outputPath"].as_str().unwrap().to_string();
        for _ in 0..100 {
            if std::fs::read_to_string(&log).is_ok_and(|s| s == "up\n") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "up\n");
        // Another call ending does not touch it.
        bash(d.path(), json!({"command": "true", "description": "t"}))
            .await
            .unwrap();
        assert!(alive(pid));
        let sid = ctx.session_id.clone();
        let killed = tokio::task::spawn_blocking(move || procs::stop_session(&sid))
            .await
            .unwrap();
        assert!(killed >= 1);
        assert_eq!(survivors(&[pid]).await, Vec::<i32>::new());
        assert!(procs::background(&ctx.session_id).is_empty());
        let _ = std::fs::remove_file(log);
    }

    /// Issue 13.4: one long last line keeps its tail: the model sees `…xxxxEND` and the note.
    #[tokio::test]
    async fn long_last_line_keeps_its_tail() {
        let d = tempfile::tempdir().unwrap();
        let out = bash(
            d.path(),
            json!({"command": "head -c 60000 /dev/zero | tr '\\0' x; echo END", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(
            out.output
                .starts_with("...output truncated...\n\nFull output saved to: "),
            "{}",
            &out.output[..200]
        );
        assert!(
            out.output.ends_with("xxxxEND\n"),
            "{}",
            &out.output[out.output.len() - 50..]
        );
        assert!(out.output.contains("\n\n…xxxx"));
        let kept = out.output.matches('x').count();
        assert!(kept > 50_000, "{kept}");
        // Multi-byte: a huge line of 3-byte characters is cut on a character boundary.
        let out = bash(
            d.path(),
            json!({"command": "for i in $(seq 1 25000); do printf '€'; done; echo END", "description": "t"}),
        )
        .await
        .unwrap();
        assert!(out.output.ends_with("€€€END\n"));
        assert!(out.output.contains("\n\n…€€€"));
        assert!(!out.output.contains('\u{fffd}'));
        for p in [out.metadata["outputPath"].as_str()].into_iter().flatten() {
            let _ = std::fs::remove_file(p);
        }
    }

    #[tokio::test]
    async fn asks_bash_and_external() {
        let d = tempfile::tempdir().unwrap();
        let proj = d.path().join("p");
        std::fs::create_dir(&proj).unwrap();
        std::fs::create_dir(d.path().join("other")).unwrap();
        let rec = Recorder::new();
        let mut ctx = ToolContext::simple(&proj);
        ctx.permissions = rec.clone();
        BashTool
            .execute(
                json!({"command": "cd ../other && rm -rf y && ls", "description": "t"}),
                ctx.clone(),
            )
            .await
            .unwrap();
        let reqs = rec.requests();
        let perms: Vec<&str> = reqs.iter().map(|r| r.permission.as_str()).collect();
        assert_eq!(perms, ["external_directory", "edit", "bash"]);
        let other = std::fs::canonicalize(d.path().join("other")).unwrap();
        assert_eq!(reqs[0].patterns, vec![format!("{}/*", other.display())]);
        assert_eq!(reqs[1].patterns, vec!["../other/y"]);
        assert_eq!(reqs[2].patterns, vec!["rm -rf y", "ls"]);
        assert_eq!(reqs[2].always, vec!["rm *", "ls *"]);
        // What a command reads is asked as `read` (default rules ask for `*.env`); entering
        // a directory is not a read.
        let rec = Recorder::new();
        ctx.permissions = rec.clone();
        std::fs::write(proj.join(".env"), "KEY=1").unwrap();
        BashTool
            .execute(
                json!({"command": "cat .env README 2>/dev/null; cd sub 2>/dev/null", "description": "t"}),
                ctx.clone(),
            )
            .await
            .unwrap();
        let reqs = rec.requests();
        let read: Vec<_> = reqs.iter().filter(|r| r.permission == "read").collect();
        assert_eq!(read.len(), 1, "{reqs:?}");
        assert_eq!(read[0].patterns, vec![".env", "README"]);
        // Denied bash never runs.
        ctx.permissions = Recorder::denying("bash");
        let err = BashTool
            .execute(json!({"command": "touch made", "description": "t"}), ctx)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)));
        assert!(!proj.join("made").exists());
    }
}
