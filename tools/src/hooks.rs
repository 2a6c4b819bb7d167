//! Hook commands (the config's `hooks` block, [`troupe_config::HooksConfig`]): run one
//! command per configured hook at a hook point, hand it a JSON payload on stdin, read a JSON
//! object from its stdout.
//!
//! A hook is a guard, so it fails closed: a hook that cannot start, exits non-zero, runs past
//! its timeout or replies with something other than a JSON object (or with a key its point
//! does not know) is a [`HookError`], and each point says what a failure means — a
//! `tool.execute.before` failure blocks the call, an `after` failure withholds the output, a
//! `chat.params` failure fails the step, a `shell.env` failure fails the command, a
//! `permission.asked` failure leaves the question to the user, a `session.idle` failure is
//! logged as a warning. Nothing is ever a silent pass.
//!
//! Every hook process runs in the session directory, in its own process group, marked like a
//! tool's processes ([`crate::procs`]) and killed with everything it started when it ends or
//! times out. Its environment is troupe's, minus `TROUPE_SERVER_PASSWORD`, plus the entry's
//! `environment` and `TROUPE_HOOK=<point>`.
//!
//! | point | payload (stdin) | reply (stdout, every key optional) |
//! |---|---|---|
//! | `tool.execute.before` | `hook, sessionID, callID, tool, args` | `block` (string: the reason the model sees) or `args` (object replacing the arguments) |
//! | `tool.execute.after` | `hook, sessionID, callID, tool, args, title, output, metadata` | `output` (string), `title` (string) |
//! | `chat.params` | `hook, sessionID, agent, model {providerID, modelID}, temperature, topP, options` | `temperature`, `topP` (number or null = unset), `options` (object merged into the request body) |
//! | `shell.env` | `hook, sessionID, callID, command, cwd` | `env` (object of strings) |
//! | `session.idle` | `hook, sessionID` | ignored |
//! | `permission.asked` | `hook, sessionID, permission, patterns, metadata` | `status`: `allow`, `deny` or `ask` |

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use troupe_config::{HookCommand, HooksConfig};

use crate::procs;

/// Largest reply read from a hook's stdout: 1 MiB (a rewritten tool output is bounded by the
/// tool output limits anyway); more is an error.
pub const MAX_REPLY_BYTES: usize = 1 << 20;

/// How much of a failing hook's stderr is quoted in its error: 2,000 bytes.
pub const MAX_STDERR_QUOTE: usize = 2_000;

/// Why a hook failed. The message names the hook point and the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The program could not be started.
    #[error("{point} hook `{command}` could not start: {message}")]
    Spawn {
        /// Hook point.
        point: &'static str,
        /// The command line.
        command: String,
        /// OS error.
        message: String,
    },
    /// It ran past its timeout and was killed.
    #[error("{point} hook `{command}` timed out after {ms} ms and was killed")]
    Timeout {
        /// Hook point.
        point: &'static str,
        /// The command line.
        command: String,
        /// The timeout, milliseconds.
        ms: u64,
    },
    /// It exited with a non-zero status (or a signal).
    #[error("{point} hook `{command}` failed ({status}){}", quote(stderr))]
    Exit {
        /// Hook point.
        point: &'static str,
        /// The command line.
        command: String,
        /// `exit code N` or `killed by a signal`.
        status: String,
        /// The start of its stderr.
        stderr: String,
    },
    /// Its reply is not what the point accepts.
    #[error("{point} hook `{command}` replied with {message}")]
    Reply {
        /// Hook point.
        point: &'static str,
        /// The command line.
        command: String,
        /// What was wrong.
        message: String,
    },
}

fn quote(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

/// What a `tool.execute.before` round decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Before {
    /// Run the tool with these arguments (the original or rewritten ones).
    Run(Value),
    /// Do not run it; the text is the tool's error for the model.
    Block(String),
}

/// The hooks of a `tool.execute.*` list that apply to `tool`, in order.
fn applying<'a>(
    hooks: &'a [HookCommand],
    tool: &'a str,
) -> impl Iterator<Item = &'a HookCommand> + 'a {
    hooks.iter().filter(move |h| h.applies_to(tool))
}

/// The hooks of one runtime (cheap to share behind an `Arc`).
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    config: HooksConfig,
}

/// Hook point names, as in the config.
pub mod point {
    /// Before a tool runs.
    pub const TOOL_BEFORE: &str = "tool.execute.before";
    /// After a tool returned.
    pub const TOOL_AFTER: &str = "tool.execute.after";
    /// Before a provider request.
    pub const CHAT_PARAMS: &str = "chat.params";
    /// Before a bash command.
    pub const SHELL_ENV: &str = "shell.env";
    /// A session went idle.
    pub const SESSION_IDLE: &str = "session.idle";
    /// A permission is about to be asked.
    pub const PERMISSION_ASKED: &str = "permission.asked";
}

impl Hooks {
    /// Hooks from the config block.
    pub fn new(config: HooksConfig) -> Self {
        Hooks { config }
    }

    /// The configured block.
    pub fn config(&self) -> &HooksConfig {
        &self.config
    }

    /// True when there is no `tool.execute.*` hook for `tool` (the tool-call path then skips
    /// hooks without allocating).
    pub fn has_tool_hooks(&self, tool: &str) -> bool {
        self.config
            .tool_execute_before
            .iter()
            .chain(&self.config.tool_execute_after)
            .any(|h| h.applies_to(tool))
    }

    /// Run the `tool.execute.before` hooks matching `tool`, in order. Each sees the arguments
    /// the previous one left. A failing hook blocks the call (fail closed) with its error.
    pub async fn tool_before(
        &self,
        cwd: &Path,
        session_id: &str,
        call_id: &str,
        tool: &str,
        args: Value,
    ) -> Before {
        let mut args = args;
        for hook in applying(&self.config.tool_execute_before, tool) {
            let payload = json!({
                "hook": point::TOOL_BEFORE, "sessionID": session_id, "callID": call_id,
                "tool": tool, "args": args,
            });
            let reply = match run(point::TOOL_BEFORE, hook, cwd, &payload).await {
                Ok(r) => r,
                Err(e) => return Before::Block(format!("Blocked: {e}")),
            };
            if let Err(e) = only_keys(point::TOOL_BEFORE, hook, &reply, &["block", "args"]) {
                return Before::Block(format!("Blocked: {e}"));
            }
            match reply.get("block") {
                None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                Some(Value::String(reason)) => {
                    return Before::Block(format!(
                        "Blocked by a tool.execute.before hook: {reason}"
                    ));
                }
                Some(other) => {
                    let e = reply_error(
                        point::TOOL_BEFORE,
                        hook,
                        format!("`block` = {other}, not a string"),
                    );
                    return Before::Block(format!("Blocked: {e}"));
                }
            }
            match reply.get("args") {
                None | Some(Value::Null) => {}
                Some(v @ Value::Object(_)) => args = v.clone(),
                Some(other) => {
                    let e = reply_error(
                        point::TOOL_BEFORE,
                        hook,
                        format!("`args` = {other}, not an object"),
                    );
                    return Before::Block(format!("Blocked: {e}"));
                }
            }
        }
        Before::Run(args)
    }

    /// Run the `tool.execute.after` hooks matching `tool` over a successful result: each may
    /// replace `output` and `title`. A failing hook is an error (the output is withheld: the
    /// hook may exist to redact it).
    #[allow(clippy::too_many_arguments)]
    pub async fn tool_after(
        &self,
        cwd: &Path,
        session_id: &str,
        call_id: &str,
        tool: &str,
        args: &Value,
        mut out: crate::ToolOutput,
    ) -> Result<crate::ToolOutput, HookError> {
        for hook in applying(&self.config.tool_execute_after, tool) {
            let payload = json!({
                "hook": point::TOOL_AFTER, "sessionID": session_id, "callID": call_id,
                "tool": tool, "args": args, "title": out.title, "output": out.output,
                "metadata": out.metadata,
            });
            let reply = run(point::TOOL_AFTER, hook, cwd, &payload).await?;
            only_keys(point::TOOL_AFTER, hook, &reply, &["output", "title"])?;
            if let Some(v) = reply.get("output").filter(|v| !v.is_null()) {
                out.output = string_field(point::TOOL_AFTER, hook, "output", v)?;
            }
            if let Some(v) = reply.get("title").filter(|v| !v.is_null()) {
                out.title = string_field(point::TOOL_AFTER, hook, "title", v)?;
            }
        }
        Ok(out)
    }

    /// Run the `chat.params` hooks. `params` holds `temperature`, `topP` (number or null) and
    /// `options` (object); each hook may replace the first two and add `options` keys. The
    /// returned object has the same three keys.
    pub async fn chat_params(
        &self,
        cwd: &Path,
        session_id: &str,
        agent: &str,
        provider_id: &str,
        model_id: &str,
        mut params: Map<String, Value>,
    ) -> Result<Map<String, Value>, HookError> {
        for hook in &self.config.chat_params {
            let mut payload = json!({
                "hook": point::CHAT_PARAMS, "sessionID": session_id, "agent": agent,
                "model": {"providerID": provider_id, "modelID": model_id},
            });
            if let Value::Object(p) = &mut payload {
                p.extend(params.clone());
            }
            let reply = run(point::CHAT_PARAMS, hook, cwd, &payload).await?;
            only_keys(
                point::CHAT_PARAMS,
                hook,
                &reply,
                &["temperature", "topP", "options"],
            )?;
            for key in ["temperature", "topP"] {
                match reply.get(key) {
                    None => {}
                    Some(v @ (Value::Null | Value::Number(_))) => {
                        params.insert(key.into(), v.clone());
                    }
                    Some(other) => {
                        return Err(reply_error(
                            point::CHAT_PARAMS,
                            hook,
                            format!("`{key}` = {other}, not a number or null"),
                        ));
                    }
                }
            }
            match reply.get("options") {
                None | Some(Value::Null) => {}
                Some(Value::Object(o)) => {
                    let entry = params
                        .entry("options")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if !entry.is_object() {
                        *entry = Value::Object(Map::new());
                    }
                    if let Value::Object(opts) = entry {
                        opts.extend(o.clone());
                    }
                }
                Some(other) => {
                    return Err(reply_error(
                        point::CHAT_PARAMS,
                        hook,
                        format!("`options` = {other}, not an object"),
                    ));
                }
            }
        }
        Ok(params)
    }

    /// Run the `shell.env` hooks for a bash command; returns the variables to add, later hooks
    /// overriding earlier ones.
    pub async fn shell_env(
        &self,
        cwd: &Path,
        session_id: &str,
        call_id: &str,
        command: &str,
    ) -> Result<Vec<(String, String)>, HookError> {
        let mut env: Vec<(String, String)> = Vec::new();
        for hook in &self.config.shell_env {
            let payload = json!({
                "hook": point::SHELL_ENV, "sessionID": session_id, "callID": call_id,
                "command": command, "cwd": cwd,
            });
            let reply = run(point::SHELL_ENV, hook, cwd, &payload).await?;
            only_keys(point::SHELL_ENV, hook, &reply, &["env"])?;
            match reply.get("env") {
                None | Some(Value::Null) => {}
                Some(Value::Object(vars)) => {
                    for (k, v) in vars {
                        let Value::String(v) = v else {
                            return Err(reply_error(
                                point::SHELL_ENV,
                                hook,
                                format!("`env.{k}` = {v}, not a string"),
                            ));
                        };
                        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                            return Err(reply_error(
                                point::SHELL_ENV,
                                hook,
                                format!("`env` has an invalid variable name {k:?}"),
                            ));
                        }
                        env.retain(|(name, _)| name != k);
                        env.push((k.clone(), v.clone()));
                    }
                }
                Some(other) => {
                    return Err(reply_error(
                        point::SHELL_ENV,
                        hook,
                        format!("`env` = {other}, not an object"),
                    ));
                }
            }
        }
        Ok(env)
    }

    /// Run the `session.idle` hooks (notifications). Returns the failures, for the caller to
    /// report.
    pub async fn session_idle(&self, cwd: &Path, session_id: &str) -> Vec<HookError> {
        let mut failed = Vec::new();
        for hook in &self.config.session_idle {
            let payload = json!({"hook": point::SESSION_IDLE, "sessionID": session_id});
            if let Err(e) = run(point::SESSION_IDLE, hook, cwd, &payload).await {
                failed.push(e);
            }
        }
        failed
    }

    /// Run the `permission.asked` hooks for one request. `Ok(Some(decision))` when a hook
    /// decided (the first that does wins), `Ok(None)` when every hook left it to the user.
    pub async fn permission_asked(
        &self,
        cwd: &Path,
        session_id: &str,
        permission: &str,
        patterns: &[String],
        metadata: &Value,
    ) -> Result<Option<PermissionDecision>, HookError> {
        for hook in &self.config.permission_asked {
            let payload = json!({
                "hook": point::PERMISSION_ASKED, "sessionID": session_id,
                "permission": permission, "patterns": patterns, "metadata": metadata,
            });
            let reply = run(point::PERMISSION_ASKED, hook, cwd, &payload).await?;
            only_keys(point::PERMISSION_ASKED, hook, &reply, &["status"])?;
            match reply.get("status") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s == "ask" => {}
                Some(Value::String(s)) if s == "allow" => {
                    return Ok(Some(PermissionDecision::Allow));
                }
                Some(Value::String(s)) if s == "deny" => return Ok(Some(PermissionDecision::Deny)),
                Some(other) => {
                    return Err(reply_error(
                        point::PERMISSION_ASKED,
                        hook,
                        format!("`status` = {other}, not \"allow\", \"deny\" or \"ask\""),
                    ));
                }
            }
        }
        Ok(None)
    }
}

/// What a `permission.asked` hook decided for a request (`status` `"allow"` or `"deny"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionDecision {
    /// Let the call run without asking the user.
    Allow,
    /// Refuse the call without asking the user.
    Deny,
}

fn reply_error(point: &'static str, hook: &HookCommand, message: String) -> HookError {
    HookError::Reply {
        point,
        command: hook.display(),
        message,
    }
}

fn string_field(
    point: &'static str,
    hook: &HookCommand,
    key: &str,
    v: &Value,
) -> Result<String, HookError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(reply_error(
            point,
            hook,
            format!("`{key}` = {other}, not a string"),
        )),
    }
}

/// Refuse reply keys the point does not know: a misspelt `blok` must not pass as "no
/// objection".
fn only_keys(
    point: &'static str,
    hook: &HookCommand,
    reply: &Map<String, Value>,
    known: &[&str],
) -> Result<(), HookError> {
    match reply.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(reply_error(
            point,
            hook,
            format!(
                "an unknown key `{k}` (this point takes {})",
                known.join(", ")
            ),
        )),
    }
}

/// Run one hook command with `payload` on stdin; its reply object (an empty stdout is `{}`).
pub async fn run(
    point: &'static str,
    hook: &HookCommand,
    cwd: &Path,
    payload: &Value,
) -> Result<Map<String, Value>, HookError> {
    let command = hook.display();
    let spawn_err = |message: String| HookError::Spawn {
        point,
        command: command.clone(),
        message,
    };
    let program = resolve_program(&hook.command[0], cwd);
    procs::init();
    let tag = procs::new_call_tag();
    let mut child = {
        let _spawning = procs::spawn_guard();
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&hook.command[1..])
            .current_dir(cwd)
            .env_remove(crate::builtin::bash::SERVER_PASSWORD_ENV)
            .envs(&hook.environment)
            .env("TROUPE_HOOK", point)
            .env(procs::OWNER_ENV, &tag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| spawn_err(format!("{}: {e}", program.display())))?;
        if let Some(pid) = child.id() {
            procs::register_child(pid as i32);
        }
        child
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let input = serde_json::to_vec(payload).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let ms = hook.timeout_ms();
    let work = async {
        // Write stdin and read both outputs at once, so a hook that replies before reading
        // all of a large payload (or fills stderr first) never deadlocks with us.
        let write = async {
            if let Some(mut s) = stdin.take() {
                // A hook that ignores its stdin may close it early: not an error.
                let _ = s.write_all(&input).await;
                let _ = s.write_all(b"\n").await;
            }
        };
        let read_out = async {
            let mut buf = Vec::new();
            if let Some(s) = stdout.as_mut() {
                let _ = s
                    .take(MAX_REPLY_BYTES as u64 + 1)
                    .read_to_end(&mut buf)
                    .await;
            }
            buf
        };
        let read_err = async {
            let mut buf = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.take(64 * 1024).read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), out, err) = tokio::join!(write, read_out, read_err);
        let status = child.wait().await;
        (out, err, status)
    };
    let outcome = tokio::time::timeout(Duration::from_millis(ms), work).await;
    // Whatever the hook started goes with it (also when it timed out).
    if pgid > 0 {
        procs::unregister_child(pgid);
        let _ = tokio::task::spawn_blocking(move || procs::kill_call(&tag, pgid)).await;
    }
    let (out, err, status) = match outcome {
        Ok(v) => v,
        Err(_) => {
            return Err(HookError::Timeout { point, command, ms });
        }
    };
    let status = status.map_err(|e| spawn_err(e.to_string()))?;
    if !status.success() {
        let mut stderr = String::from_utf8_lossy(&err).into_owned();
        if stderr.len() > MAX_STDERR_QUOTE {
            let mut cut = MAX_STDERR_QUOTE;
            while !stderr.is_char_boundary(cut) {
                cut -= 1;
            }
            stderr.truncate(cut);
            stderr.push('…');
        }
        return Err(HookError::Exit {
            point,
            command,
            status: match status.code() {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".into(),
            },
            stderr,
        });
    }
    if out.len() > MAX_REPLY_BYTES {
        return Err(HookError::Reply {
            point,
            command,
            message: format!("more than {MAX_REPLY_BYTES} bytes"),
        });
    }
    let text = String::from_utf8_lossy(&out);
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(HookError::Reply {
            point,
            command,
            message: format!("{}, not a JSON object", troupe_config::json_kind(&other)),
        }),
        Err(e) => Err(HookError::Reply {
            point,
            command,
            message: format!("invalid JSON ({e})"),
        }),
    }
}

/// A program with a `/` in it and not absolute resolves against the session directory (the
/// OS would resolve it against troupe's); a bare name is looked up in `PATH` by the OS.
fn resolve_program(program: &str, cwd: &Path) -> PathBuf {
    let p = Path::new(program);
    if !p.is_absolute() && program.contains('/') {
        cwd.join(p)
    } else {
        p.to_path_buf()
    }
}

#[cfg(test)]
#[path = "hooks_tests.rs"]
mod tests;
