//! The set of available agents: built-ins, `agent.<name>` config entries and markdown agents.
//!
//! Layering (OpenCode `agent/agent.ts` and `config/agent.ts`, reference §6.5, §12.1, §12.2):
//! 1. built-ins, each with `permission = merge(defaults, <agent-specific>, user)` where `user` is
//!    the top-level legacy `tools` switches followed by the top-level `permission`;
//! 2. `agent.<name>` from the merged config (a name that is not built in becomes a new agent of
//!    mode `all` with `merge(defaults, user)`);
//! 3. markdown agents: `<global config dir>/{agent,agents}/**/*.md`, then
//!    `<dir>/.troupe/{agent,agents}/**/*.md` for the worktree root and each extra project dir,
//!    in order. Frontmatter = fields, body = prompt, name = path below `agent/` minus `.md`.
//!
//! Each entry overrides scalar fields, extends `options`, and appends its `tools` and
//! `permission` rules to the agent's ruleset. `disable: true` (last entry wins) removes the agent.
//! Finally every agent gets `external_directory <tool-output dir>/*: allow` appended unless it
//! has an explicit deny for exactly that glob.
//!
//! Loading reads files synchronously: call it at startup or inside `spawn_blocking`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::builtin::builtin_agents;
use crate::markdown::{MarkdownAgent, load_markdown_dir};
use crate::patch::{Origin, Patch};
use crate::permission::{
    self, Action, Ruleset, dir_glob, from_config_at, from_legacy_tools, json_kind, push_key_path,
};
use crate::{Agent, Mode};

/// `e` with the line and column of its key when it is a config entry's error (`troupe.json:
/// agent.build.temperature: …`, found after parsing, so without a position): the sources are
/// searched last applied first — the `TROUPE_CONFIG_CONTENT` text, then the files from the
/// last (the merged value came from the last source that has the key) — and the error then
/// names that source, `troupe.json:3:5: agent.build.temperature: …` or
/// `TROUPE_CONFIG_CONTENT:1:22: …`. Errors already placed (markdown frontmatter) are
/// unchanged.
fn with_position(e: AgentError, config: &troupe_config::LoadedConfig) -> AgentError {
    let AgentError::Invalid { location, message } = e else {
        return e;
    };
    let env_label = troupe_config::ENV_CONTENT_LABEL;
    let mut labels = config
        .sources
        .iter()
        .map(|p| p.display().to_string())
        .chain([env_label.to_string(), "config".to_string()]);
    let key_path = labels.find_map(|l| location.strip_prefix(&format!("{l}: ")).map(str::to_owned));
    // (label, text) of every source, the last applied first.
    let env = config
        .env_content
        .as_ref()
        .map(|text| (env_label.to_string(), text.clone()));
    let files = config.sources.iter().rev().filter_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        Some((file.display().to_string(), text))
    });
    let placed = key_path.and_then(|key_path| {
        env.into_iter().chain(files).find_map(|(label, text)| {
            let (line, column) = troupe_config::find_key(&text, |path, key| {
                let mut rendered = String::new();
                for seg in path.iter().map(String::as_str).chain([key]) {
                    rendered = push_key_path(&rendered, seg);
                }
                rendered == key_path
            })?;
            Some(format!("{label}:{line}:{column}: {key_path}"))
        })
    });
    AgentError::Invalid {
        location: placed.unwrap_or(location),
        message,
    }
}

/// Errors from building the agent set or looking agents up.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A bad field value. `location` names the source and key, e.g.
    /// `troupe.json: agent.foo.mode` or `.troupe/agent/review.md:3: mode`.
    #[error("{location}: {message}")]
    Invalid {
        /// Source file (and line for frontmatter) plus key path.
        location: String,
        /// What is wrong.
        message: String,
    },
    /// A markdown agent file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No agent with this name (or it was disabled).
    #[error("agent not found: {name}. Available agents: {available}")]
    NotFound {
        /// Requested name.
        name: String,
        /// Comma-separated names of the available agents.
        available: String,
    },
    /// An agent asked for as the main agent of a session that cannot be one.
    #[error("agent {name} {reason}. Primary agents: {available}")]
    NotSelectable {
        /// Requested name.
        name: String,
        /// Why (`is a subagent: …`, `is hidden: …`).
        reason: String,
        /// Comma-separated names of the selectable agents.
        available: String,
    },
    /// `default_agent` names an agent that cannot be the main agent.
    #[error("default agent {name:?} {reason}")]
    BadDefault {
        /// Configured name.
        name: String,
        /// Why it cannot be used (`is a subagent`, `is hidden`, `does not exist`).
        reason: String,
    },
}

/// The available agents, in definition order (built-ins first).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSet {
    agents: Vec<Agent>,
}

impl AgentSet {
    /// Builds the set from the loaded config, markdown agents in the global config dir
    /// ([`troupe_config::global_config_dir`]) and in `.troupe/` of the worktree root and each of
    /// `extra_dirs` (in order, later wins; e.g. [`crate::project_dirs`]`(cwd, worktree)`).
    /// Blocking file I/O. Errors name the file (and frontmatter line) and the key.
    pub fn load(
        config: &troupe_config::LoadedConfig,
        extra_dirs: &[PathBuf],
    ) -> Result<AgentSet, AgentError> {
        Self::load_with_global(
            config,
            extra_dirs,
            Some(&troupe_config::global_config_dir()),
        )
    }

    /// [`AgentSet::load`] with an explicit global config dir (`None` = skip global agents).
    pub fn load_with_global(
        config: &troupe_config::LoadedConfig,
        extra_dirs: &[PathBuf],
        global_dir: Option<&Path>,
    ) -> Result<AgentSet, AgentError> {
        let mut markdown = Vec::new();
        if let Some(g) = global_dir {
            load_markdown_dir(g, &mut markdown)?;
        }
        let mut seen = HashSet::new();
        let worktree = (!config.worktree.as_os_str().is_empty()).then(|| config.worktree.clone());
        for dir in worktree.iter().chain(extra_dirs.iter()) {
            let troupe_dir = dir.join(".troupe");
            if seen.insert(troupe_dir.clone()) {
                load_markdown_dir(&troupe_dir, &mut markdown)?;
            }
        }
        let cfg = &config.config;
        let label = |key: &str| config.origin(key).unwrap_or("config").to_string();
        let mut set = Self::build(
            cfg.agent.as_ref(),
            cfg.permission.as_ref(),
            cfg.tools.as_ref(),
            &label("agent"),
            &label("permission"),
            &label("tools"),
            markdown,
        )
        .map_err(|e| with_position(e, config))?;
        set.finish();
        Ok(set)
    }

    /// Builds the set from raw config values only (no markdown agents): `agents` = the
    /// `agent` object, `permission` / `tools` = the top-level keys; `label` names the source in
    /// errors.
    pub fn from_config_value(
        agents: Option<&Value>,
        permission: Option<&Value>,
        tools: Option<&Value>,
        label: &str,
    ) -> Result<AgentSet, AgentError> {
        let mut set = Self::build(agents, permission, tools, label, label, label, Vec::new())?;
        set.finish();
        Ok(set)
    }

    fn build(
        agents: Option<&Value>,
        permission: Option<&Value>,
        tools: Option<&Value>,
        agent_label: &str,
        permission_label: &str,
        tools_label: &str,
        markdown: Vec<MarkdownAgent>,
    ) -> Result<AgentSet, AgentError> {
        let invalid = |label: &str, e: permission::PermissionError| AgentError::Invalid {
            location: format!("{label}: {}", e.path),
            message: e.message,
        };
        let mut user = Ruleset::new();
        if let Some(t) = tools {
            user.extend(&from_legacy_tools(t, "tools").map_err(|e| invalid(tools_label, e))?);
        }
        if let Some(p) = permission {
            user.extend(
                &from_config_at(p, "permission").map_err(|e| invalid(permission_label, e))?,
            );
        }
        let mut set = AgentSet {
            agents: builtin_agents(&user),
        };
        let mut disabled: BTreeMap<String, bool> = BTreeMap::new();
        let mut apply = |set: &mut AgentSet, name: &str, patch: Patch| {
            if let Some(d) = patch.disable {
                disabled.insert(name.to_string(), d);
            }
            let idx = match set.agents.iter().position(|a| a.name == name) {
                Some(i) => i,
                None => {
                    set.agents.push(Agent {
                        name: name.to_string(),
                        description: String::new(),
                        mode: Mode::All,
                        hidden: false,
                        native: false,
                        model: None,
                        variant: None,
                        temperature: None,
                        top_p: None,
                        prompt: None,
                        options: Map::new(),
                        color: None,
                        steps: None,
                        permission: Ruleset::merge(&[&permission::default_ruleset(), &user]),
                    });
                    set.agents.len() - 1
                }
            };
            patch.apply(&mut set.agents[idx]);
        };
        match agents {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, v) in map {
                    let origin = Origin {
                        label: agent_label,
                        key_prefix: push_key_path("agent", name),
                        frontmatter: None,
                    };
                    let obj = v.as_object().ok_or_else(|| AgentError::Invalid {
                        location: format!("{agent_label}: {}", origin.key_prefix),
                        message: format!(
                            "expected an object of agent fields, got {}",
                            json_kind(v)
                        ),
                    })?;
                    let patch = Patch::parse(obj, &origin)?;
                    apply(&mut set, name, patch);
                }
            }
            Some(other) => {
                return Err(AgentError::Invalid {
                    location: format!("{agent_label}: agent"),
                    message: format!("expected an object of agents, got {}", json_kind(other)),
                });
            }
        }
        for md in markdown {
            let origin = Origin {
                label: &md.label,
                key_prefix: String::new(),
                frontmatter: Some((&md.frontmatter, 2)),
            };
            let patch = Patch::parse(&md.fields, &origin)?;
            apply(&mut set, &md.name, patch);
        }
        set.agents
            .retain(|a| !disabled.get(&a.name).copied().unwrap_or(false));
        Ok(set)
    }

    /// Appends `external_directory <tool-output>/*: allow` to every agent without an explicit
    /// deny for exactly that glob (OpenCode §6.5, last paragraph).
    fn finish(&mut self) {
        let glob = dir_glob(&permission::tool_output_dir());
        for a in &mut self.agents {
            let denied = a.permission.0.iter().any(|r| {
                r.permission == "external_directory"
                    && r.pattern == glob
                    && r.action == Action::Deny
            });
            if !denied {
                a.permission
                    .push("external_directory", glob.clone(), Action::Allow);
            }
        }
    }

    /// The agent called `name`.
    pub fn get(&self, name: &str) -> Option<&Agent> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The agent called `name` (hidden ones too), or [`AgentError::NotFound`] listing the
    /// names a user can pick (hidden agents are not advertised).
    pub fn require(&self, name: &str) -> Result<&Agent, AgentError> {
        self.get(name).ok_or_else(|| AgentError::NotFound {
            name: name.to_string(),
            available: self
                .list(false)
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The agent called `name` as the main agent of a session (`troupe run --agent`): it must
    /// exist and be selectable (mode `primary` or `all`, not hidden). Errors list only the
    /// selectable agents: [`AgentError::NotFound`] for an unknown name,
    /// [`AgentError::NotSelectable`] for a subagent or a hidden agent.
    pub fn require_selectable(&self, name: &str) -> Result<&Agent, AgentError> {
        let available = || {
            self.list(false)
                .iter()
                .filter(|a| a.is_selectable())
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let agent = self.get(name).ok_or_else(|| AgentError::NotFound {
            name: name.to_string(),
            available: available(),
        })?;
        let reason = if agent.hidden {
            "is hidden: troupe uses it internally"
        } else if agent.mode == Mode::Subagent {
            "is a subagent: a primary agent starts it through the task tool, it cannot run a session itself"
        } else {
            return Ok(agent);
        };
        Err(AgentError::NotSelectable {
            name: name.to_string(),
            reason: reason.to_string(),
            available: available(),
        })
    }

    /// Agents sorted by name, visible ones first then hidden ones; hidden agents are left out
    /// unless `include_hidden`.
    pub fn list(&self, include_hidden: bool) -> Vec<&Agent> {
        let mut v: Vec<&Agent> = self
            .agents
            .iter()
            .filter(|a| include_hidden || !a.hidden)
            .collect();
        v.sort_by(|a, b| (a.hidden, &a.name).cmp(&(b.hidden, &b.name)));
        v
    }

    /// All agents in definition order (built-ins first, then config, then markdown).
    pub fn all(&self) -> &[Agent] {
        &self.agents
    }

    /// The agent used when none is given (OpenCode `defaultAgent`, §6.5): `configured` (config
    /// `default_agent`) must exist, not be a subagent and not be hidden; without it, the first
    /// non-subagent, non-hidden agent in definition order (`build` unless disabled).
    pub fn default_agent(&self, configured: Option<&str>) -> Result<&Agent, AgentError> {
        if let Some(name) = configured {
            let bad = |reason: &str| AgentError::BadDefault {
                name: name.to_string(),
                reason: reason.to_string(),
            };
            let a = self.get(name).ok_or_else(|| bad("does not exist"))?;
            if a.mode == Mode::Subagent {
                return Err(bad("is a subagent"));
            }
            if a.hidden {
                return Err(bad("is hidden"));
            }
            return Ok(a);
        }
        self.agents
            .iter()
            .find(|a| a.is_selectable())
            .ok_or_else(|| AgentError::NotFound {
                name: "(default)".into(),
                available: "no primary agent is enabled".into(),
            })
    }

    /// Agents the task tool may start (mode `subagent` or `all`, not hidden), sorted by name.
    pub fn subagents(&self) -> Vec<&Agent> {
        let mut v: Vec<&Agent> = self.agents.iter().filter(|a| a.is_subagent()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }
}

#[cfg(test)]
#[path = "agent_set_tests.rs"]
mod tests;
