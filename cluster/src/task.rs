//! One batch task and its result: the input line of `troupe batch`, the result line of
//! `results.jsonl`, and [`run_task`], the one code path that runs a task in a local
//! runtime — for the local batch and for `troupe worker` alike, so a cluster's results have
//! the shape and meaning of a local batch's.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use troupe_actors::{PromptInput, Runtime};
use troupe_session::{SessionId, Tokens, Write};

/// One input line: `{"id", "prompt", "agent"?, "model"?, "dir"?, "schema"?, "timeout"?,
/// "maxSteps"?}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchTask {
    /// Unique id of the task (any JSON string).
    pub id: String,
    /// The prompt.
    pub prompt: String,
    /// Agent name (default: the default agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `provider/model` (default: config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Working directory, relative to the batch's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// A JSON Schema the answer must satisfy (structured output): the validated value is
    /// the result's `output`; an answer that never validates fails the task with the last
    /// validation error. Checked when the file is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// Wall-time limit of the task, seconds (> 0; default `--timeout`, else none). Past it
    /// the task's turn is aborted and the task fails with `timed out after N s`, keeping the
    /// tokens and cost spent until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Step limit of the task's turn (JSON key `maxSteps`, ≥ 1; default: the agent's
    /// `steps`, else 100). A task that reaches it ends as any turn at its limit.
    #[serde(default, rename = "maxSteps", skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
}

/// How long an aborted task may take to wind down (its running tool calls and provider
/// request are cancelled) before its result is written without waiting any longer.
pub const ABORT_GRACE: Duration = Duration::from_secs(10);

/// Parse a timeout in seconds: finite and > 0 (`what` names it in the error).
pub fn check_timeout(secs: f64, what: &str) -> Result<Duration> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        bail!("{what} must be a number of seconds > 0, got {secs}")
    }
}

/// One output line of `results.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BatchResult {
    /// Task id.
    pub id: String,
    /// Session id (empty when the session could not be created).
    pub session_id: SessionId,
    /// `completed` or `failed`.
    pub status: String,
    /// Final text of the turn.
    pub text: String,
    /// Tokens of the session.
    pub tokens: Tokens,
    /// Cost of the task, USD.
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: Decimal,
    /// Wall time of the task, ms.
    pub duration_ms: u64,
    /// Error message when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The finish reason of the turn's last step (`stop`; `length` when the answer was cut at
    /// the model's output limit, so a `completed` task's text may be cut short); absent when
    /// no step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// The validated answer of a task with a `schema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

impl BatchResult {
    /// A failed result of `id` with `error`, nothing spent.
    pub fn failed(id: &str, session_id: SessionId, error: String, t0: Instant) -> BatchResult {
        BatchResult {
            id: id.to_string(),
            session_id,
            status: "failed".into(),
            text: String::new(),
            tokens: Tokens::default(),
            cost: Decimal::ZERO,
            duration_ms: t0.elapsed().as_millis() as u64,
            error: Some(error),
            finish: None,
            output: None,
        }
    }

    /// Whether the task completed.
    pub fn completed(&self) -> bool {
        self.status == "completed"
    }
}

/// Parse the tasks file; errors name the file and line.
pub fn read_tasks(path: &Path) -> Result<Vec<BatchTask>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut tasks = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // One position, file:line:column (serde's own "at line 1 column N" would be a second
        // line number, counted within the task's line).
        let task: BatchTask = serde_json::from_str(line).map_err(|e| {
            let msg = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let msg = msg.strip_suffix(&suffix).unwrap_or(&msg);
            let indent = raw.len() - raw.trim_start().len();
            let at = format!("{}:{}:{}", path.display(), i + 1, e.column() + indent);
            if e.is_syntax() || e.is_eof() {
                // serde's own words (`expected ident`) do not say what was expected: one JSON
                // object per line. Show how the line starts, so the user finds it.
                anyhow!(
                    "{at}: the line is not valid JSON ({msg}); each task line must be one JSON \
                     object like {{\"id\": \"t1\", \"prompt\": \"…\"}}. The line starts: {}",
                    line_start(line)
                )
            } else {
                anyhow!("{at}: {msg}")
            }
        })?;
        if task.id.trim().is_empty() {
            bail!(
                "{}:{}: task id is empty (results are matched and resumed by id)",
                path.display(),
                i + 1
            );
        }
        if task.prompt.trim().is_empty() {
            bail!(
                "{}:{}: task {} has an empty prompt",
                path.display(),
                i + 1,
                task.id
            );
        }
        if let Some(schema) = &task.schema
            && let Err(e) = troupe_tools::builtin::StructuredOutputTool::new(schema)
        {
            bail!("{}:{}: task {}: {e}", path.display(), i + 1, task.id);
        }
        if task.max_steps == Some(0) {
            bail!(
                "{}:{}: task {}: \"maxSteps\" must be 1 or more",
                path.display(),
                i + 1,
                task.id
            );
        }
        if let Some(t) = task.timeout {
            check_timeout(t, "\"timeout\"")
                .map_err(|e| anyhow!("{}:{}: task {}: {e}", path.display(), i + 1, task.id))?;
        }
        if !seen.insert(task.id.clone()) {
            bail!(
                "{}:{}: duplicate task id {}",
                path.display(),
                i + 1,
                task.id
            );
        }
        tasks.push(task);
    }
    Ok(tasks)
}

/// Characters of a bad line shown in its error.
const LINE_START_CHARS: usize = 60;

/// The first [`LINE_START_CHARS`] characters of `line`, quoted with control characters
/// escaped (Rust `{:?}`), and `…` when cut.
fn line_start(line: &str) -> String {
    let head: String = line.chars().take(LINE_START_CHARS).collect();
    let cut = head.len() < line.len();
    format!("{head:?}{}", if cut { "…" } else { "" })
}

/// The error of a task that ran past its timeout.
pub fn timeout_error(limit: Duration) -> String {
    format!(
        "timed out after {}s (the task's turn was aborted)",
        limit.as_secs_f64()
    )
}

/// Which session a task runs in.
#[derive(Debug, Clone)]
pub enum TaskSession {
    /// A new session (the local batch).
    New,
    /// The session with this id, created (titled `batch <task id>`) unless it exists: a
    /// cluster task, whose id the batch fixed when it published the task, so every delivery
    /// of the task drives the same session. The prompt is delivered once
    /// ([`PromptInput::once`]): a delivery after a worker died resumes the turn the store
    /// holds instead of starting a second one.
    Cluster {
        /// The session id (`ses_…`).
        id: SessionId,
    },
}

/// Defaults of the batch that apply to a task.
#[derive(Debug, Clone, Default)]
pub struct TaskDefaults {
    /// Model for a task without one.
    pub model: Option<String>,
    /// Agent for a task without one.
    pub agent: Option<String>,
    /// Base directory of the task's `dir` (absolute).
    pub cwd: PathBuf,
    /// Wall-time limit of a task without its own `timeout`.
    pub timeout: Option<Duration>,
}

/// Session id → task id of the tasks running, so retries on the bus are reported by task.
pub type TaskNames = Mutex<HashMap<SessionId, String>>;

/// Run one task to its end in `runtime` and describe it as a result line: the turn's final text,
/// the session's tokens, the cost (the turn's; for a cluster session, the session's, which
/// counts the steps an earlier worker ran before it died), the wall time of this run, the
/// error of a failed turn (`Name: message`), the structured `output`. A task past its
/// timeout has its turn aborted and fails with [`timeout_error`]. Never panics; any error
/// is a failed result.
pub async fn run_task(
    runtime: &Runtime,
    task: &BatchTask,
    defaults: &TaskDefaults,
    which: &TaskSession,
    names: Option<&TaskNames>,
) -> BatchResult {
    let t0 = Instant::now();
    let fail =
        |session_id: SessionId, error: String| BatchResult::failed(&task.id, session_id, error, t0);
    let dir = match &task.dir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => defaults.cwd.join(d),
        None => defaults.cwd.clone(),
    };
    if !dir.is_dir() {
        return fail(
            SessionId::default(),
            format!("directory {} does not exist", dir.display()),
        );
    }
    let (session_id, once) = match which {
        TaskSession::New => match runtime.create_session(&dir, None).await {
            Ok(s) => (s.id, false),
            Err(e) => return fail(SessionId::default(), e.to_string()),
        },
        TaskSession::Cluster { id } => match ensure_session(runtime, id, &dir, &task.id).await {
            Ok(()) => (id.clone(), true),
            Err(e) => return fail(id.clone(), e.to_string()),
        },
    };
    if let Some(names) = names {
        names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.clone(), task.id.clone());
    }
    let input = PromptInput {
        text: task.prompt.clone(),
        agent: task.agent.clone().or(defaults.agent.clone()),
        model: task.model.clone().or(defaults.model.clone()),
        schema: task.schema.clone(),
        max_steps: task.max_steps,
        once,
        ..Default::default()
    };
    let timeout = task
        .timeout
        .map(Duration::from_secs_f64)
        .or(defaults.timeout);
    let prompt = runtime.prompt(&session_id, input);
    tokio::pin!(prompt);
    let mut timed_out = None;
    let outcome = match timeout {
        None => prompt.await,
        Some(limit) => match tokio::time::timeout(limit, &mut prompt).await {
            Ok(r) => r,
            Err(_) => {
                // Abort the turn and wait for it to wind down, so the result carries what
                // the task cost until then and nothing of it runs on.
                timed_out = Some(limit);
                runtime.abort_timed_out(&session_id);
                match tokio::time::timeout(ABORT_GRACE, &mut prompt).await {
                    Ok(r) => r,
                    Err(_) => Err(troupe_actors::TurnError::AbortDidNotEnd.into()),
                }
            }
        },
    };
    let mut result = match outcome {
        Ok(turn) => BatchResult {
            id: task.id.clone(),
            session_id: session_id.clone(),
            status: if turn.error.is_none() && timed_out.is_none() {
                "completed".into()
            } else {
                "failed".into()
            },
            text: turn.text,
            tokens: turn.tokens,
            cost: turn.cost,
            duration_ms: t0.elapsed().as_millis() as u64,
            error: turn.error.map(|e| format!("{}: {}", e.name, e.message())),
            finish: turn.message.and_then(|m| m.finish),
            output: turn.structured,
        },
        Err(e) => fail(session_id.clone(), e.to_string()),
    };
    if let Some(limit) = timed_out {
        result.error = Some(timeout_error(limit));
        result.output = None;
    }
    if once {
        // The whole task's cost: a resumed turn's own cost leaves out the steps the
        // worker that died had run.
        let sid = session_id.clone();
        if let Ok(Some(s)) = runtime.store().read(move |r| r.session(&sid)).await {
            result.cost = s.cost;
            result.tokens = s.tokens;
        }
    }
    result
}

/// Create the cluster session `id` in `dir` unless the store already has it (an earlier
/// delivery of the task created it).
async fn ensure_session(
    runtime: &Runtime,
    id: &SessionId,
    dir: &Path,
    task_id: &str,
) -> Result<()> {
    let key = id.clone();
    if runtime
        .store()
        .read(move |r| r.session(&key))
        .await?
        .is_some()
    {
        return Ok(());
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut s = troupe_session::Session::new(&dir.display().to_string(), None);
    s.id = id.clone();
    s.title = format!("batch {task_id}");
    runtime.store().write1(Write::Session {
        info: s,
        created: true,
    });
    runtime.store().flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trial on main: a non-JSON task line said only `tasks.jsonl:2:2: expected ident`. It now
    /// says the line is not valid JSON and shows how it starts; a JSON line of the wrong
    /// shape keeps serde's message.
    #[test]
    fn bad_task_lines_say_what_is_wrong() {
        let path = std::env::temp_dir().join(format!("troupe-tasks-{}.jsonl", std::process::id()));
        let err = |text: &str| {
            std::fs::write(&path, text).unwrap();
            let e = read_tasks(&path).unwrap_err().to_string();
            let shown = format!("{}:", path.display());
            e.strip_prefix(&shown).unwrap_or(&e).to_string()
        };
        let ok = "{\"id\": \"a\", \"prompt\": \"x\"}\n";
        let e = err(&format!("{ok}  nope this is text\n"));
        assert!(
            e.starts_with("2:4: the line is not valid JSON (expected ident)"),
            "{e}"
        );
        assert!(e.ends_with("The line starts: \"nope this is text\""), "{e}");
        let long = format!("{ok}id=a\tprompt={}\n", "y".repeat(200));
        let e = err(&long);
        assert!(e.contains("The line starts: \"id=a\\tprompt=yyy"), "{e}");
        assert!(e.ends_with("…"), "{e}");
        let e = err(&format!("{ok}{{\"id\": \"b\", \"prompt\": \"x\"\n"));
        assert!(e.contains("not valid JSON (EOF while parsing"), "{e}");
        let e = err(&format!("{ok}{{\"id\": \"b\", \"prompt\": 5}}\n"));
        assert!(e.starts_with("2:"), "{e}");
        assert!(!e.contains("not valid JSON"), "{e}");
        assert!(e.contains("invalid type: integer `5`"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
