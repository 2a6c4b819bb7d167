//! Commands: reusable prompt templates the user runs by name (`/review src/`, `troupe run
//! --command review src/`), OpenCode's `command` (opencode-engine.md §1.7).
//!
//! Sources, later wins on a name: markdown files `{command,commands}/**/*.md` under the
//! global config directory, the `command` config key (`{"NAME": {"template", "description"?,
//! "agent"?, "model"?, "subtask"?}}`), then the same markdown folders under each project
//! `.troupe/` directory (worktree root down to the working directory). A markdown command's
//! name is its path below the folder minus `.md` (`git/commit.md` → `git/commit`); its
//! frontmatter holds the fields and its body is the template.
//!
//! A template takes `$1..$N` (the highest placeholder takes the rest of the arguments),
//! `$ARGUMENTS` (all of them as typed) and `` !`cmd` `` (the command's output, run by the
//! caller through the bash permission check); with no placeholder the arguments are
//! appended after a blank line. `@file` references are resolved like any prompt's.
//!
//! Reads files synchronously: call it inside `spawn_blocking`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agent_set::AgentError;
use crate::markdown::{MarkdownAgent, load_markdown_subdirs};
use crate::permission::json_kind;

/// One command.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Command {
    /// Name it is run by (`review`, `git/commit`).
    pub name: String,
    /// What it does, for lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Agent that runs it (default: the prompt's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Model as `provider/model` (default: the prompt's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Run as a subtask (a `task` call) instead of a prompt; `None`: only when the agent is a
    /// subagent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subtask: Option<bool>,
    /// The prompt template.
    pub template: String,
    /// Where it was defined: a file path, or the config file that holds the `command` key.
    pub source: String,
}

/// The commands of a project.
#[derive(Debug, Clone, Default)]
pub struct CommandSet {
    commands: BTreeMap<String, Command>,
}

impl CommandSet {
    /// Load the global folder (`global_dir`, `None` to skip), the config's `command` key and
    /// the project folders (`.troupe/` under the worktree and each of `project_dirs`).
    /// Errors name the file (and line) or the key.
    pub fn load(
        config: &troupe_config::LoadedConfig,
        project_dirs: &[PathBuf],
        global_dir: Option<&Path>,
    ) -> Result<CommandSet, AgentError> {
        let mut set = CommandSet::default();
        if let Some(g) = global_dir {
            set.add_markdown(g)?;
        }
        if let Some(v) = config.config.extra.get("command") {
            let label = config.origin("command").unwrap_or("config").to_string();
            set.add_config(v, &label)?;
        }
        let worktree = (!config.worktree.as_os_str().is_empty()).then(|| config.worktree.clone());
        let mut seen = Vec::new();
        for dir in worktree.iter().chain(project_dirs.iter()) {
            let troupe_dir = dir.join(".troupe");
            if !seen.contains(&troupe_dir) {
                set.add_markdown(&troupe_dir)?;
                seen.push(troupe_dir);
            }
        }
        Ok(set)
    }

    fn add_markdown(&mut self, config_dir: &Path) -> Result<(), AgentError> {
        let mut files = Vec::new();
        load_markdown_subdirs(config_dir, &["command", "commands"], &mut files)?;
        for f in files {
            let MarkdownAgent {
                name,
                label,
                mut fields,
                ..
            } = f;
            let template = fields
                .remove("prompt")
                .unwrap_or(Value::String(String::new()));
            fields.insert("template".into(), template);
            let c = command_from(&name, &Value::Object(fields), &label)?;
            self.commands.insert(name, c);
        }
        Ok(())
    }

    fn add_config(&mut self, v: &Value, label: &str) -> Result<(), AgentError> {
        let Value::Object(map) = v else {
            return Err(invalid(
                label,
                format!(
                    "\"command\" must be an object of commands, got {}",
                    json_kind(v)
                ),
            ));
        };
        for (name, entry) in map {
            let c = command_from(name, entry, label)?;
            self.commands.insert(name.clone(), c);
        }
        Ok(())
    }

    /// A set of the given commands (tests, clients).
    pub fn from_commands(commands: impl IntoIterator<Item = Command>) -> CommandSet {
        CommandSet {
            commands: commands.into_iter().map(|c| (c.name.clone(), c)).collect(),
        }
    }

    /// The command called `name`.
    pub fn get(&self, name: &str) -> Option<&Command> {
        self.commands.get(name)
    }

    /// The command called `name`, or an error listing the available ones.
    pub fn require(&self, name: &str) -> Result<&Command, String> {
        self.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.commands.keys().map(String::as_str).collect();
            if names.is_empty() {
                format!(
                    "unknown command {name:?}: no commands are defined (add .troupe/command/{name}.md or a \"command\" entry in troupe.json)"
                )
            } else {
                format!(
                    "unknown command {name:?}; available commands: {}",
                    names.join(", ")
                )
            }
        })
    }

    /// All commands, sorted by name.
    pub fn list(&self) -> Vec<&Command> {
        self.commands.values().collect()
    }
}

fn invalid(location: &str, message: String) -> AgentError {
    AgentError::Invalid {
        location: location.to_string(),
        message,
    }
}

fn command_from(name: &str, v: &Value, label: &str) -> Result<Command, AgentError> {
    let where_ = format!("{label}: command {name:?}");
    let Value::Object(m) = v else {
        return Err(invalid(
            &where_,
            format!(
                "must be an object with a \"template\", got {}",
                json_kind(v)
            ),
        ));
    };
    let text = |key: &str| -> Result<Option<String>, AgentError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(
                &where_,
                format!("\"{key}\" must be a string, got {}", json_kind(other)),
            )),
        }
    };
    for key in m.keys() {
        if !["template", "description", "agent", "model", "subtask"].contains(&key.as_str()) {
            return Err(invalid(
                &where_,
                format!(
                    "unknown key {key:?} (known: template, description, agent, model, subtask)"
                ),
            ));
        }
    }
    let template = text("template")?
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                &where_,
                "has no template (the \"template\" key, or the markdown body)".into(),
            )
        })?;
    let subtask = match m.get("subtask") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(invalid(
                &where_,
                format!(
                    "\"subtask\" must be true or false, got {}",
                    json_kind(other)
                ),
            ));
        }
    };
    Ok(Command {
        name: name.to_string(),
        description: text("description")?,
        agent: text("agent")?,
        model: text("model")?,
        subtask,
        template,
        source: label.to_string(),
    })
}

/// Split a command's argument string into arguments: words, `"double"` or `'single'`
/// quoted strings (quotes removed), and `[Image N]` tokens (OpenCode's argument regex
/// `(?:\[Image\s+\d+\]|"[^"]*"|'[^']*'|[^\s"']+)`).
pub fn split_arguments(arguments: &str) -> Vec<String> {
    let re =
        regex::Regex::new(r#"(?:\[Image\s+\d+\]|"[^"]*"|'[^']*'|[^\s"']+)"#).expect("static regex");
    re.find_iter(arguments)
        .map(|m| {
            let s = m.as_str();
            let s = s.strip_prefix(['"', '\'']).unwrap_or(s);
            s.strip_suffix(['"', '\'']).unwrap_or(s).to_string()
        })
        .collect()
}

/// Fill a template with arguments (see the module docs): `$N` is the N-th argument (empty
/// when missing), the highest `$N` takes the remaining arguments joined by spaces,
/// `$ARGUMENTS` is `arguments` as given; with neither, non-blank arguments are appended after
/// a blank line. Shell snippets are left for [`shell_snippets`].
pub fn fill_template(template: &str, arguments: &str) -> String {
    let args = split_arguments(arguments);
    let placeholder = regex::Regex::new(r"\$(\d+)").expect("static regex");
    let last = placeholder
        .captures_iter(template)
        .filter_map(|c| c[1].parse::<usize>().ok())
        .max();
    let filled = placeholder.replace_all(template, |c: &regex::Captures| {
        let Ok(position) = c[1].parse::<usize>() else {
            return String::new();
        };
        if position == 0 || position > args.len() {
            return String::new();
        }
        if Some(position) == last {
            args[position - 1..].join(" ")
        } else {
            args[position - 1].clone()
        }
    });
    let uses_arguments = template.contains("$ARGUMENTS");
    let mut out = filled.replace("$ARGUMENTS", arguments);
    if last.is_none() && !uses_arguments && !arguments.trim().is_empty() {
        out.push_str("\n\n");
        out.push_str(arguments);
    }
    out
}

/// The `` !`cmd` `` snippets of a filled template, in order: (byte range of the whole
/// snippet, the command).
pub fn shell_snippets(text: &str) -> Vec<(std::ops::Range<usize>, String)> {
    let re = regex::Regex::new(r"!`([^`]+)`").expect("static regex");
    re.captures_iter(text)
        .filter_map(|c| {
            let whole = c.get(0)?;
            Some((whole.range(), c[1].to_string()))
        })
        .collect()
}

#[cfg(test)]
#[path = "command_tests.rs"]
mod tests;
