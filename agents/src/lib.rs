//! troupe-agents: agents as configuration records, the built-in agents and their prompt
//! files, and system-prompt layering.
//!
//! An agent is a record, not code: every agent runs through the one session loop.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Agent mode (OpenCode `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Selectable as the main agent.
    Primary,
    /// Only callable through the task tool.
    Subagent,
    /// Both.
    #[default]
    All,
}

/// An agent record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Name (`build`, `plan`, …).
    pub name: String,
    /// Shown to task callers.
    #[serde(default)]
    pub description: String,
    /// Mode.
    #[serde(default)]
    pub mode: Mode,
    /// Hidden from lists and the task tool.
    #[serde(default)]
    pub hidden: bool,
    /// Built in.
    #[serde(default)]
    pub native: bool,
    /// `provider/model` override.
    #[serde(default)]
    pub model: Option<String>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// System prompt replacing the default prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Extra request-body options.
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Maximum loop steps per turn; the last step is told to answer without tools.
    #[serde(default)]
    pub steps: Option<u32>,
}

/// Default system prompt (layer 1 when the agent has none).
pub const DEFAULT_PROMPT: &str = include_str!("../prompts/build.txt");

/// Text appended as an assistant prefill on the last allowed step (OpenCode `max-steps.txt`).
pub const MAX_STEPS_PROMPT: &str = include_str!("../prompts/max-steps.txt");

/// The built-in `build` agent: the default, all tools.
pub fn build_agent() -> Agent {
    Agent {
        name: "build".into(),
        description: "The default agent. Executes tools based on configured permissions.".into(),
        mode: Mode::Primary,
        hidden: false,
        native: true,
        model: None,
        temperature: None,
        top_p: None,
        prompt: None,
        options: Default::default(),
        steps: None,
    }
}

/// Look up an agent by name among the built-ins merged with config `agent.<name>` entries.
/// Config fields override built-in ones; an unknown name that config defines becomes a new
/// agent of mode `all`.
pub fn resolve(name: &str, config_agents: Option<&serde_json::Value>) -> Result<Agent, String> {
    let mut agent = match name {
        "build" => build_agent(),
        _ => {
            let defined = config_agents.and_then(|a| a.get(name)).is_some();
            if !defined {
                return Err(format!("agent not found: {name}. Available agents: build"));
            }
            Agent { name: name.to_string(), native: false, mode: Mode::All, ..build_agent() }
        }
    };
    if let Some(cfg) = config_agents.and_then(|a| a.get(name)).and_then(|v| v.as_object()) {
        if let Some(p) = cfg.get("prompt").and_then(|v| v.as_str()) {
            agent.prompt = Some(p.to_string());
        }
        if let Some(m) = cfg.get("model").and_then(|v| v.as_str()) {
            agent.model = Some(m.to_string());
        }
        if let Some(t) = cfg.get("temperature").and_then(|v| v.as_f64()) {
            agent.temperature = Some(t);
        }
        if let Some(t) = cfg.get("top_p").and_then(|v| v.as_f64()) {
            agent.top_p = Some(t);
        }
        if let Some(s) = cfg.get("steps").or_else(|| cfg.get("maxSteps")).and_then(|v| v.as_u64()) {
            agent.steps = Some(s.clamp(1, u32::MAX as u64) as u32);
        }
        if let Some(d) = cfg.get("description").and_then(|v| v.as_str()) {
            agent.description = d.to_string();
        }
        if let Some(o) = cfg.get("options").and_then(|v| v.as_object()) {
            agent.options.extend(o.clone());
        }
    }
    Ok(agent)
}

/// Environment block of the system prompt (layer 2).
pub fn environment(model_full_id: &str, directory: &Path, worktree: &Path, date: &str) -> String {
    let is_git = worktree.join(".git").exists();
    format!(
        "You are powered by the model named {model}.\nHere is some useful information about the environment you are running in:\n<env>\n  Working directory: {dir}\n  Workspace root folder: {root}\n  Is directory a git repo: {git}\n  Platform: {platform}\n  Today's date: {date}\n</env>",
        model = model_full_id,
        dir = directory.display(),
        root = worktree.display(),
        git = if is_git { "yes" } else { "no" },
        platform = std::env::consts::OS,
    )
}

/// Build the system prompt: layer 1 (agent prompt or default), layer 2 (environment),
/// layer 3 (the user message's own `system`), joined with newlines.
pub fn system_prompt(agent: &Agent, env_block: &str, user_system: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(agent.prompt.as_deref().unwrap_or(DEFAULT_PROMPT).trim_end());
    out.push('\n');
    out.push_str(env_block);
    if let Some(s) = user_system.filter(|s| !s.is_empty()) {
        out.push('\n');
        out.push_str(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_overrides_builtin_fields() {
        let cfg = serde_json::json!({"build": {"steps": 3, "temperature": 0.2}, "mine": {"prompt": "hi"}});
        let b = resolve("build", Some(&cfg)).unwrap();
        assert_eq!(b.steps, Some(3));
        assert_eq!(b.temperature, Some(0.2));
        let m = resolve("mine", Some(&cfg)).unwrap();
        assert_eq!(m.prompt.as_deref(), Some("hi"));
        assert!(resolve("nope", Some(&cfg)).unwrap_err().contains("agent not found: nope"));
    }

    #[test]
    fn system_prompt_layers_in_order() {
        let a = build_agent();
        let s = system_prompt(&a, "ENV", Some("USER"));
        let (i, e, u) = (s.find("troupe").unwrap(), s.find("ENV").unwrap(), s.find("USER").unwrap());
        assert!(i < e && e < u);
    }
}
