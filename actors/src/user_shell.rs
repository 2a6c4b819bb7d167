//! The user's own shell command in a session (issue 22; OpenCode's `shell()`, HTTP `POST
//! /session/{id}/shell`, opencode-engine.md §1.4): it runs outside the model loop, only while
//! the session is idle, and is recorded as a user message (synthetic text "The following tool
//! was executed by the user") plus an assistant message holding a completed `bash` tool part
//! whose output streamed into `metadata.output`; the model sees it on the next turn.
//!
//! Idle means: no session actor of this runtime lives for it and this runtime can take its
//! lease at once. The lease is held while the command runs, so a prompt sent meanwhile (here
//! or in another process) waits for it, as OpenCode's runner queues a run behind a shell.
//! [`Runtime::abort`] stops it (the process group is killed); the part then ends completed
//! with what the command printed and a note that the user aborted it.

use std::sync::Arc;
use troupe_session::SessionId;

use serde_json::json;
use troupe_session::{
    AssistantMessage, Event, Message, MessagePath, ModelRef, Part, PartKind, SessionStatus,
    ToolState, ToolTime, UserMessage, Write, now_ms,
};
use troupe_tools::ToolContext;

use crate::{Runtime, RuntimeError};

/// The synthetic text of the user message a shell command makes (OpenCode's).
pub const USER_SHELL_TEXT: &str = "The following tool was executed by the user";

/// Appended to the output of a command the user aborted (OpenCode's).
pub const ABORTED_NOTE: &str = "\n\n<metadata>\nUser aborted the command\n</metadata>";

/// What [`Runtime::shell`] recorded.
#[derive(Debug, Clone)]
pub struct ShellResult {
    /// The assistant message holding the `bash` part.
    pub message: AssistantMessage,
    /// The `bash` tool part, completed.
    pub part: Part,
}

impl Runtime {
    /// Hold `session_id` for work done outside a turn (the user's shell command, a
    /// command's subtask): take its lease (which a running turn of any process holds) and
    /// load the session as a prompt would (a pending revert's hidden messages deleted, tool
    /// parts a dead process left running swept). `wait`: wait for the lease like a prompt
    /// (up to [`crate::RuntimeOptions::lease_wait`], ended by the token, which
    /// [`Runtime::abort`] cancels); `None`: refuse at once. A refusal is
    /// [`RuntimeError::SessionBusy`] whose outcome is `outcome`.
    pub(crate) async fn hold_session(
        &self,
        session_id: &SessionId,
        wait: Option<&tokio_util::sync::CancellationToken>,
        outcome: &str,
    ) -> Result<(crate::lease::SessionLease, troupe_session::Session), RuntimeError> {
        let shared = self.shared().clone();
        let sid = session_id.clone();
        if self.store().read(move |r| r.session(&sid)).await?.is_none() {
            return Err(RuntimeError::SessionNotFound(session_id.clone()));
        }
        let started = std::time::Instant::now();
        let lease = loop {
            match self
                .store()
                .lease_take(session_id, &shared.identity.claim(), shared.opts.lease_ttl)
                .await?
            {
                troupe_session::TakeOutcome::Taken { lease, .. } => {
                    break crate::lease::SessionLease::start(
                        self.store().clone(),
                        &lease,
                        shared.opts.lease_ttl,
                        shared.leases.clone(),
                    );
                }
                troupe_session::TakeOutcome::Held(h) => {
                    let busy = |outcome: String| RuntimeError::SessionBusy {
                        session_id: session_id.clone(),
                        owner: h.describe(),
                        since: troupe_session::iso_time(h.acquired),
                        outcome,
                    };
                    let Some(token) = wait else {
                        return Err(busy(outcome.to_string()));
                    };
                    if started.elapsed() >= shared.opts.lease_wait {
                        return Err(busy(format!(
                            "{outcome} (gave up after waiting {:.1} s; TROUPE_LEASE_WAIT_MS sets the wait)",
                            started.elapsed().as_secs_f64()
                        )));
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(crate::lease::LEASE_POLL) => {}
                        _ = token.cancelled() => {
                            return Err(RuntimeError::Turn(format!(
                                "aborted while waiting for session {session_id}, which {} drives",
                                h.describe()
                            )));
                        }
                    }
                }
            }
        };
        let swept = crate::recover::load_swept(&shared, session_id)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.clone()))?;
        let (session, _) = crate::revert::cleanup(&shared, swept.session, swept.history);
        Ok((lease, session))
    }

    /// Run the user's `command` in an idle session (see the module docs). `agent` and
    /// `model` name the messages (default: the session's last, else the config's). Errors:
    /// [`RuntimeError::SessionBusy`] while a turn runs or another process drives the session,
    /// [`RuntimeError::SessionNotFound`], or a bad agent/model.
    pub async fn shell(
        &self,
        session_id: &SessionId,
        command: &str,
        agent: Option<String>,
        model: Option<String>,
    ) -> Result<ShellResult, RuntimeError> {
        let shared = self.shared().clone();
        let abort = shared.leases.wait_guard(session_id);
        let (lease, session) = self
            .hold_session(
                session_id,
                None,
                "the shell command was not run; wait for the session to be idle",
            )
            .await?;
        let agent = match agent.or_else(|| session.agent.clone()) {
            Some(a) => shared
                .agents
                .require(&a)
                .map_err(|e| RuntimeError::Turn(e.to_string()))?
                .clone(),
            None => shared
                .agents
                .default_agent(shared.config.config.default_agent.as_deref())
                .map_err(|e| RuntimeError::Turn(e.to_string()))?
                .clone(),
        };
        let model = model
            .or_else(|| agent.model.clone())
            .or_else(|| session.model.as_ref().map(ModelRef::full))
            .or_else(|| shared.config.default_model())
            .ok_or_else(|| RuntimeError::Turn("no model configured".into()))?;
        let model = shared
            .config
            .resolve_model(&model)
            .map_err(|e| RuntimeError::Turn(e.to_string()))?;
        let model_ref = ModelRef {
            provider_id: model.provider_id.clone(),
            model_id: model.model_id.clone(),
        };
        let user = UserMessage::new(&session.id, &agent.name, model_ref.clone());
        let user_part = Part::new(
            &session.id,
            &user.id,
            PartKind::Text {
                text: USER_SHELL_TEXT.into(),
                synthetic: true,
                time: None,
            },
        );
        let directory = std::path::PathBuf::from(&session.directory);
        let worktree = crate::session_actor::worktree_of(&directory);
        let mut assistant = AssistantMessage::begun(
            &session.id,
            &user.id,
            &agent.name,
            &model_ref,
            MessagePath {
                cwd: directory.display().to_string(),
                root: worktree.display().to_string(),
            },
        );
        let input = json!({"command": command, "description": ""});
        let start = now_ms();
        let mut part = Part::new(
            &session.id,
            &assistant.id,
            PartKind::Tool {
                call_id: format!("call_{}", troupe_session::id::part()),
                tool: "bash".into(),
                state: ToolState::Running {
                    input: input.clone(),
                    title: Some(command.to_string()),
                    metadata: None,
                    time: ToolTime {
                        start,
                        end: None,
                        compacted: None,
                    },
                },
            },
        );
        self.store().write(vec![
            Write::Publish(Event::SessionStatus {
                session_id: session.id.clone(),
                status: SessionStatus::Busy,
            }),
            Write::Message(Message::User(user)),
            Write::Part(user_part),
            Write::Message(Message::Assistant(assistant.clone())),
            Write::Part(part.clone()),
        ]);
        let pending = abort;
        let progress = Arc::new(crate::progress::PartProgress::new(
            self.store().clone(),
            part.clone(),
        ));
        let ctx = ToolContext {
            session_id: session.id.to_string(),
            message_id: assistant.id.to_string(),
            call_id: String::new(),
            agent: agent.name.clone(),
            directory,
            worktree,
            abort: pending.token.clone(),
            // The user typed it: no permission check, as in OpenCode.
            permissions: Arc::new(troupe_tools::AllowAll),
            progress: progress.clone(),
            extra: None,
            // `shell.env` hooks apply to the user's own commands too.
            hooks: shared.hooks.clone(),
        };
        let outcome = match shared.registry.get("bash") {
            Some(bash) => bash.execute(input.clone(), ctx).await,
            None => Err(troupe_tools::ToolError::Failed(
                "the bash tool is not available".into(),
            )),
        };
        let aborted = pending.token.is_cancelled();
        drop(pending);
        let end = now_ms();
        let time = ToolTime::ended(start, end);
        let state = match outcome {
            Ok(out) => {
                let mut metadata = out.metadata;
                metadata.insert("output".into(), json!(out.output));
                metadata.insert("description".into(), json!(""));
                ToolState::Completed {
                    input,
                    output: out.output,
                    title: String::new(),
                    metadata: serde_json::Value::Object(metadata),
                    time,
                }
            }
            Err(_) if aborted => {
                let so_far = match &progress.current().kind {
                    PartKind::Tool {
                        state: ToolState::Running { metadata, .. },
                        ..
                    } => metadata
                        .as_ref()
                        .and_then(|m| m.get("output"))
                        .and_then(|o| o.as_str())
                        .unwrap_or("")
                        .to_string(),
                    _ => String::new(),
                };
                let output = format!("{so_far}{ABORTED_NOTE}");
                ToolState::Completed {
                    input,
                    output: output.clone(),
                    title: String::new(),
                    metadata: json!({"output": output, "description": ""}),
                    time,
                }
            }
            Err(e) => ToolState::Error {
                input,
                error: e.to_string(),
                metadata: None,
                time,
            },
        };
        if let PartKind::Tool { state: s, .. } = &mut part.kind {
            *s = state;
        }
        assistant.time.completed = Some(end);
        assistant.finish = Some("stop".into());
        self.store().write(vec![
            Write::Part(part.clone()),
            Write::Message(Message::Assistant(assistant.clone())),
            Write::Publish(Event::SessionStatus {
                session_id: session.id.clone(),
                status: SessionStatus::Idle,
            }),
            Write::Publish(Event::SessionIdle {
                session_id: session.id.clone(),
            }),
        ]);
        self.store().flush().await?;
        drop(lease);
        Ok(ShellResult {
            message: assistant,
            part,
        })
    }
}
