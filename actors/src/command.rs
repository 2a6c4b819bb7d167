//! Running commands (issue 22, OpenCode's `command()`, opencode-engine.md §1.7): a
//! command's template is filled with the arguments, each `` !`cmd` `` is run through the
//! `bash` tool (so through the bash permission check, as the user's agent) and replaced by
//! its output, and the result is prompted with the command's agent and model; its `@file`
//! references are resolved like any prompt's. A `command.executed` event names the user
//! message it made.

use std::path::PathBuf;

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
pub async fn load_commands(rt: &Runtime, directory: PathBuf) -> Result<CommandSet, RuntimeError> {
    let config = rt.shared().config.clone();
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
        session_id: &str,
        input: CommandInput,
    ) -> Result<TurnResult, RuntimeError> {
        let sid = session_id.to_string();
        let session = self
            .store()
            .read(move |r| r.session(&sid))
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(session_id.to_string()))?;
        let set = load_commands(self, PathBuf::from(&session.directory)).await?;
        let cmd = set
            .require(&input.name)
            .map_err(RuntimeError::Turn)?
            .clone();
        let agent = cmd.agent.clone().or(input.agent.clone());
        let model = cmd.model.clone().or(input.model.clone());
        let shared = self.shared();
        if let Some(a) = &agent {
            let found = shared
                .agents
                .require(a)
                .map_err(|e| RuntimeError::Turn(format!("command {}: {e}", cmd.name)))?;
            let subtask = cmd
                .subtask
                .unwrap_or(found.mode == troupe_agents::Mode::Subagent);
            if subtask {
                return Err(RuntimeError::Turn(format!(
                    "command {}: subtask commands (subtask: true, or a subagent's) cannot run yet; set \"subtask\": false to run it as a prompt",
                    cmd.name
                )));
            }
        } else if cmd.subtask == Some(true) {
            return Err(RuntimeError::Turn(format!(
                "command {}: subtask commands cannot run yet; set \"subtask\": false to run it as a prompt",
                cmd.name
            )));
        }
        let mut text = troupe_agents::command::fill_template(&cmd.template, &input.arguments);
        let abort = CancellationToken::new();
        let snippets = troupe_agents::command::shell_snippets(&text);
        if !snippets.is_empty() {
            let ctx =
                crate::inputs::user_tool_context(&shared, session_id, agent.as_deref(), &abort)
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
                session_id: session_id.to_string(),
                arguments: input.arguments.clone(),
                message_id: message_id.clone(),
            }));
        }
        Ok(result)
    }
}
