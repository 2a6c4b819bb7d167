//! Running commands (issue 22, OpenCode's `command()`, opencode-engine.md §1.7): a
//! command's template is filled with the arguments, each `` !`cmd` `` is run through the
//! `bash` tool (so through the bash permission check, as the user's agent) and replaced by
//! its output, and the result is prompted with the command's agent and model; its `@file`
//! references are resolved like any prompt's. A `command.executed` event names the user
//! message it made.

use std::path::PathBuf;
use std::sync::Arc;
use troupe_session::SessionId;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_agents::{Command, CommandSet};
use troupe_session::{Event, Write};

use crate::inputs::FileInput;
use crate::{PromptInput, Runtime, RuntimeError, TurnResult};

/// A command to run in a session.
#[derive(Debug, Clone, Default)]
pub struct CommandInput {
    /// The command's name (without the `/`).
    pub name: String,
    /// The arguments as typed (split like a shell's words for `$1..$N`).
    pub arguments: String,
    /// Agent when the command names none (default: the config's default agent).
    pub agent: Option<String>,
    /// Model as `provider/model` when the command names none.
    pub model: Option<String>,
    /// Files attached to the prompt, as for [`PromptInput::files`].
    pub files: Vec<FileInput>,
}

/// The commands a session in `directory` sees (global folder, config, project folders),
/// read on the blocking pool.
pub async fn load_commands(
    runtime: &Runtime,
    directory: PathBuf,
) -> Result<CommandSet, RuntimeError> {
    let config = runtime.shared().config.clone();
    tokio::task::spawn_blocking(move || {
        let worktree = crate::session_actor::worktree_of(&directory);
        let dirs = troupe_agents::project_dirs(&directory, &worktree);
        CommandSet::load(&config, &dirs, Some(&troupe_config::global_config_dir()))
            .map_err(|e| RuntimeError::Turn(e.to_string()))
    })
    .await
    .map_err(|e| RuntimeError::Turn(format!("could not load the commands: {e}")))?
}

impl Runtime {
    /// The commands of a session's directory.
    pub async fn commands(&self, directory: PathBuf) -> Result<Vec<Command>, RuntimeError> {
        Ok(load_commands(self, directory)
            .await?
            .list()
            .into_iter()
            .cloned()
            .collect())
    }

    /// Run a command in a session and wait for its turn (see the module docs). An unknown
    /// command is an error listing the available ones; a `` !`cmd` `` that is denied or
    /// fails to start is an error naming it, before anything is stored.
    pub async fn command(
        &self,
        session_id: &SessionId,
        input: CommandInput,
    ) -> Result<TurnResult, RuntimeError> {
        let sid = session_id.clone();
        let session = self
            .store()
            .read(move |r| r.session(&sid))
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.clone()))?;
        let set = load_commands(self, PathBuf::from(&session.directory)).await?;
        let cmd = set
            .require(&input.name)
            .map_err(RuntimeError::Turn)?
            .clone();
        let agent = cmd.agent.clone().or(input.agent.clone());
        let model = cmd.model.clone().or(input.model.clone());
        let shared = self.shared();
        // OpenCode's rule: a subtask when the command says so, or when its agent is a
        // subagent and the command does not say otherwise.
        let subtask = match &cmd.agent {
            Some(a) => {
                let found = shared
                    .agents
                    .require(a)
                    .map_err(|e| RuntimeError::Turn(format!("command {}: {e}", cmd.name)))?;
                cmd.subtask
                    .unwrap_or(found.mode == troupe_agents::Mode::Subagent)
            }
            None => cmd.subtask == Some(true),
        };
        let mut text = troupe_agents::command::fill_template(&cmd.template, &input.arguments);
        let abort = CancellationToken::new();
        let snippets = troupe_agents::command::shell_snippets(&text);
        if !snippets.is_empty() {
            // The snippets run with the permissions of the agent that prompts: the command's
            // own agent for a prompt, the user's for a subtask (whose agent runs elsewhere).
            let runs_as = if subtask {
                input.agent.as_deref()
            } else {
                agent.as_deref()
            };
            let ctx = crate::inputs::user_tool_context(shared, session_id, runs_as, &abort)
                .await
                .map_err(RuntimeError::Turn)?;
            let bash = shared.registry.get("bash").ok_or_else(|| {
                RuntimeError::Turn(format!(
                    "command {}: the bash tool is not available",
                    cmd.name
                ))
            })?;
            // Replace from the end so earlier ranges stay valid.
            let mut outputs = Vec::with_capacity(snippets.len());
            for (_, command) in &snippets {
                let args = json!({"command": command, "description": format!("/{} runs {command}", cmd.name)});
                let out = bash.execute(args, ctx.clone()).await.map_err(|e| {
                    RuntimeError::Turn(format!("command {}: !`{command}`: {e}", cmd.name))
                })?;
                outputs.push(out.output);
            }
            for ((range, _), out) in snippets.iter().zip(outputs).rev() {
                text.replace_range(range.clone(), out.trim_end_matches('\n'));
            }
        }
        let text = text.trim().to_string();
        if subtask {
            return self.subtask(session_id, &cmd, text, input).await;
        }
        let result = self
            .prompt(
                session_id,
                PromptInput {
                    text,
                    agent,
                    model,
                    files: input.files,
                    ..Default::default()
                },
            )
            .await?;
        if let Some(message_id) = &result.user_message_id {
            self.store().write1(Write::Publish(Event::CommandExecuted {
                name: cmd.name.clone(),
                session_id: session_id.clone(),
                arguments: input.arguments.clone(),
                message_id: message_id.clone(),
            }));
        }
        Ok(result)
    }
}

/// The synthetic text of the user message that follows a command's subtask (OpenCode's).
pub const SUBTASK_FOLLOW_UP: &str =
    "Summarize the task tool output above and continue with your task.";

impl Runtime {
    /// Run `cmd` (its template filled into `prompt`) as a subtask, OpenCode's
    /// `handleSubtask`: once the session is idle (waiting for a running turn like a prompt),
    /// store a user message holding a `subtask` part and an assistant message (the
    /// subagent's) holding a `task` tool part, run that task on the user's behalf (no `task`
    /// permission check; see [`crate::task::run_for_user`]) with its progress on the part,
    /// then prompt the session with the synthetic [`SUBTASK_FOLLOW_UP`] as the user's agent,
    /// so the model summarizes the result and goes on. A failed task is recorded as the
    /// part's error and the follow-up still runs (the model sees the error); an aborted one
    /// ends the command with an error. Returns the follow-up turn.
    async fn subtask(
        &self,
        session_id: &SessionId,
        cmd: &Command,
        prompt: String,
        input: CommandInput,
    ) -> Result<TurnResult, RuntimeError> {
        use troupe_session::{
            AssistantMessage, Message, MessagePath, ModelRef, Part, PartKind, SessionStatus,
            ToolState, ToolTime, UserMessage, now_ms,
        };
        let shared = self.shared().clone();
        let pending = shared.leases.wait_guard(session_id);
        // The agent that runs it: the command's, else the prompt's, else the default (as
        // OpenCode picks it).
        let sub = match cmd.agent.as_ref().or(input.agent.as_ref()) {
            Some(a) => shared.agents.require(a),
            None => shared
                .agents
                .default_agent(shared.config.config.default_agent.as_deref()),
        }
        .map_err(|e| RuntimeError::Turn(format!("command {}: {e}", cmd.name)))?
        .clone();
        let (lease, session) = self
            .hold_session(
                session_id,
                Some(&pending.token),
                &format!("command {} was not run", cmd.name),
            )
            .await?;
        // The user message is the user's (their agent and model, as the follow-up's).
        let user_agent = match &input.agent {
            Some(a) => shared.agents.require(a),
            None => shared
                .agents
                .default_agent(shared.config.config.default_agent.as_deref()),
        }
        .map_err(|e| RuntimeError::Turn(e.to_string()))?
        .clone();
        let resolve = |spec: Option<String>| -> Result<_, RuntimeError> {
            let spec = spec
                .or_else(|| session.model.as_ref().map(ModelRef::full))
                .or_else(|| shared.config.default_model())
                .ok_or_else(|| {
                    RuntimeError::Turn(
                        "no model configured: set \"model\" in troupe.json or pass --model provider/model"
                            .into(),
                    )
                })?;
            shared
                .config
                .resolve_model(&spec)
                .map_err(|e| RuntimeError::Turn(e.to_string()))
        };
        let user_model = resolve(input.model.clone().or_else(|| user_agent.model.clone()))?;
        let task_model = resolve(cmd.model.clone().or_else(|| sub.model.clone()))?;
        let model_ref = |m: &troupe_config::model::ResolvedModel| ModelRef::from(m);
        let description = cmd.description.clone().unwrap_or_else(|| cmd.name.clone());
        let user = UserMessage::new(&session.id, &user_agent.name, model_ref(&user_model));
        let subtask_part = Part::new(
            &session.id,
            &user.id,
            PartKind::Subtask {
                prompt: prompt.clone(),
                description: description.clone(),
                agent: sub.name.clone(),
                model: cmd.model.as_ref().map(|_| model_ref(&task_model)),
                command: Some(cmd.name.clone()),
            },
        );
        let directory = PathBuf::from(&session.directory);
        let worktree = crate::session_actor::worktree_of(&directory);
        let mut assistant = AssistantMessage::begun(
            &session.id,
            &user.id,
            &sub.name,
            &model_ref(&task_model),
            MessagePath {
                cwd: directory.display().to_string(),
                root: worktree.display().to_string(),
            },
        );
        let task_input = json!({
            "description": description,
            "prompt": prompt,
            "subagent_type": sub.name,
            "command": cmd.name,
        });
        let call_id = format!("call_{}", troupe_session::id::part());
        let start = now_ms();
        let mut part = Part::new(
            &session.id,
            &assistant.id,
            PartKind::Tool {
                call_id: call_id.clone(),
                tool: "task".into(),
                state: ToolState::Running {
                    input: task_input.clone(),
                    title: Some(description.clone()),
                    metadata: None,
                    time: ToolTime {
                        start,
                        end: None,
                        compacted: None,
                    },
                },
            },
        );
        let mut session_row = session.clone();
        session_row.agent = Some(user_agent.name.clone());
        session_row.model = Some(user.model.clone());
        session_row.time.updated = now_ms();
        self.store().write(vec![
            Write::Publish(Event::SessionStatus {
                session_id: session.id.clone(),
                status: SessionStatus::Busy,
            }),
            Write::Session {
                info: session_row,
                created: false,
            },
            Write::Message(Message::User(user.clone())),
            Write::Part(subtask_part),
            Write::Message(Message::Assistant(assistant.clone())),
            Write::Part(part.clone()),
        ]);
        let mut ctx = crate::inputs::user_tool_context(
            &shared,
            session_id,
            Some(&user_agent.name),
            &pending.token,
        )
        .await
        .map_err(RuntimeError::Turn)?;
        ctx.message_id = assistant.id.to_string();
        ctx.call_id = call_id.clone();
        ctx.progress = Arc::new(crate::progress::PartProgress::new(
            self.store().clone(),
            part.clone(),
        ));
        // The subagent's session shows under this call in the actor tree.
        let node = shared.tree.register(
            crate::tree::Kind::ToolCall,
            &call_id,
            Some(session_id),
            None,
        );
        node.update(|n| {
            n.status = crate::tree::ActorStatus::Busy;
            n.tool = Some("task".into());
        });
        let outcome =
            crate::task::run_for_user(shared.clone(), task_input.clone(), cmd.model.clone(), ctx)
                .await;
        drop(node);
        let aborted = pending.token.is_cancelled();
        let end = now_ms();
        let time = ToolTime::ended(start, end);
        let state = match outcome {
            Ok(out) => ToolState::Completed {
                input: task_input,
                output: out.output,
                title: out.title,
                metadata: serde_json::Value::Object(out.metadata),
                time,
            },
            Err(e) => ToolState::Error {
                input: task_input,
                error: if aborted {
                    "Cancelled".to_string()
                } else {
                    format!("Tool execution failed: {e}")
                },
                metadata: None,
                time,
            },
        };
        if let PartKind::Tool { state: s, .. } = &mut part.kind {
            *s = state;
        }
        assistant.time.completed = Some(end);
        assistant.finish = Some("tool-calls".into());
        let mut writes = vec![
            Write::Part(part),
            Write::Message(Message::Assistant(assistant)),
        ];
        if aborted {
            writes.push(Write::Publish(Event::SessionStatus {
                session_id: session.id.clone(),
                status: SessionStatus::Idle,
            }));
            writes.push(Write::Publish(Event::SessionIdle {
                session_id: session.id.clone(),
            }));
        }
        self.store().write(writes);
        self.store().flush().await?;
        // The follow-up prompt takes the lease again (a driver waiting meanwhile may go
        // first; its turn then sees the subtask, and so does ours after it).
        drop(lease);
        drop(pending);
        self.store().write1(Write::Publish(Event::CommandExecuted {
            name: cmd.name.clone(),
            session_id: session_id.clone(),
            arguments: input.arguments.clone(),
            message_id: user.id.clone(),
        }));
        if aborted {
            return Err(RuntimeError::Turn(format!(
                "command {}: the subtask was aborted",
                cmd.name
            )));
        }
        let result = self
            .prompt(
                session_id,
                PromptInput {
                    text: String::new(),
                    agent: Some(user_agent.name.clone()),
                    model: input.model,
                    synthetic: vec![SUBTASK_FOLLOW_UP.to_string()],
                    files: input.files,
                    ..Default::default()
                },
            )
            .await;
        // A follow-up refused before its turn started leaves no one to end the `busy`
        // status published above (a busy session is another driver's, which ends its own).
        if let Err(e) = &result
            && !matches!(e, RuntimeError::SessionBusy { .. })
            && !self.shared().sessions.contains_key(session_id)
        {
            self.store().write1(Write::Publish(Event::SessionStatus {
                session_id: session_id.clone(),
                status: SessionStatus::Idle,
            }));
        }
        result
    }
}
