//! troupe-agents: agents as configuration records, the built-in agents and their prompt
//! files, permission rulesets, system-prompt layering, commands and skills.
//!
//! An agent is a record, not code: every agent runs through the one session loop. What differs
//! between agents is data: the system prompt (layer 1), the permission ruleset (which tools are
//! offered and what they may touch), the model and sampling settings, and the step budget.
//!
//! - [`Agent`], [`Mode`]: the record (OpenCode `Agent.Info`, reference §12.1).
//! - [`AgentSet`]: built-ins + `agent.<name>` config + markdown agents (§6.5, §12.2).
//! - [`permission`]: rules, wildcard matching, evaluation, defaults, sub-agent derivation (§6).
//! - [`prompt`]: provider prompts, environment, instruction files, layering, reminders
//!   (§12.3–12.5).
//! - [`command`]: commands, prompt templates the user runs by name ([`Command`], [`CommandSet`]).
//! - [`skill`]: skills, `SKILL.md` folders an agent loads with the `skill` tool.

pub mod agent_set;
mod builtin;
pub mod command;
mod markdown;
mod patch;
pub mod permission;
pub mod prompt;
pub mod skill;

use serde::{Deserialize, Serialize};

pub use agent_set::{AgentError, AgentSet};
pub use builtin::{PLAN_FILES_GLOB, builtin_agents};
pub use command::{Command, CommandSet};
pub use markdown::project_dirs;
pub use permission::{Action, PermissionError, Rule, Ruleset};
pub use prompt::{
    build_system_prompt, environment, find_instruction_files, provider_prompt, switch_reminder,
    system_prompt,
};

/// Agent mode (OpenCode `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Selectable as the main agent.
    Primary,
    /// Only callable through the task tool.
    Subagent,
    /// Either: selectable as the main agent and callable through the task tool (the
    /// default for agents defined in config).
    #[default]
    All,
}

impl Mode {
    /// Parses `primary | subagent | all`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "primary" => Some(Mode::Primary),
            "subagent" => Some(Mode::Subagent),
            "all" => Some(Mode::All),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Primary => "primary",
            Mode::Subagent => "subagent",
            Mode::All => "all",
        }
    }
}

/// An agent record (OpenCode `Agent.Info`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Name (`build`, `plan`, …); for markdown agents the file path below `agent/` minus `.md`.
    pub name: String,
    /// Shown to task callers.
    #[serde(default)]
    pub description: String,
    /// Whether it can run a session, be a subagent, or both.
    #[serde(default)]
    pub mode: Mode,
    /// Hidden from lists and the task tool.
    #[serde(default)]
    pub hidden: bool,
    /// Built in (one of [`builtin_agents`]) rather than defined by config or markdown.
    #[serde(default)]
    pub native: bool,
    /// `provider/model` override.
    #[serde(default)]
    pub model: Option<String>,
    /// Model variant (e.g. a reasoning-effort preset); applies only with the agent's own model.
    #[serde(default)]
    pub variant: Option<String>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// System prompt replacing the provider prompt (layer 1).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Extra request-body options (config `options` plus unknown agent keys).
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Display colour: `#RRGGBB` or a theme colour name.
    #[serde(default)]
    pub color: Option<String>,
    /// Maximum loop steps per turn; the last step is told to answer without tools.
    #[serde(default)]
    pub steps: Option<u32>,
    /// Permission ruleset: `merge(defaults, agent-specific, user config, agent.<name>.permission)`
    /// (see [`AgentSet::load`]). Session rules and approvals are layered after it at evaluation.
    #[serde(default)]
    pub permission: Ruleset,
}

impl Agent {
    /// Whether the agent can be the main agent of a session (mode primary or all, not hidden).
    pub fn is_selectable(&self) -> bool {
        self.mode != Mode::Subagent && !self.hidden
    }

    /// Whether the task tool may start it (mode subagent or all, not hidden).
    pub fn is_subagent(&self) -> bool {
        self.mode != Mode::Primary && !self.hidden
    }

    /// How the agent's ruleset decides each permission it mentions (plus `bash`, `edit`,
    /// `read`, `external_directory`) for the pattern `*`, for `troupe agent show`: a JSON
    /// object `{permission: {action, rule, guarantee, overrides?, note?}}` where `rule` is the
    /// deciding rule (`edit "*": deny`, or `none (default ask)`), `guarantee` says it is an
    /// agent guarantee ([`permission::Rule::floor`]), and `overrides`/`note` name the looser
    /// rule (from the config's `permission` block) that the guarantee overrode.
    pub fn decisions(&self) -> serde_json::Value {
        let mut keys: Vec<String> = ["bash", "edit", "read", "external_directory"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for r in &self.permission.0 {
            if r.permission != "*" && !keys.contains(&r.permission) {
                keys.push(r.permission.clone());
            }
        }
        let mut out = serde_json::Map::new();
        for k in keys {
            let d = permission::decide_one(&k, "*", &[&self.permission]);
            let mut v = serde_json::json!({
                "action": d.action,
                "rule": d.rule.map_or_else(|| "none (default ask)".to_string(), |r| r.describe()),
                "guarantee": d.rule.is_some_and(|r| r.floor),
            });
            if let Some(o) = d.overridden {
                v["overrides"] = serde_json::Value::String(o.describe());
                v["note"] = serde_json::Value::String(format!(
                    "the rule {} (from the config's permission block) is overridden by the {} agent's guarantee; only agent.{}.permission can loosen it",
                    o.describe(),
                    self.name,
                    self.name
                ));
            }
            out.insert(k, v);
        }
        serde_json::Value::Object(out)
    }

    /// Evaluates one request against the agent's ruleset plus extra `layers` (session rules,
    /// approvals), last match wins, default ask (see [`permission::evaluate`]).
    pub fn evaluate(&self, permission: &str, pattern: &str, layers: &[&Ruleset]) -> Action {
        let mut all: Vec<&Ruleset> = Vec::with_capacity(layers.len() + 1);
        all.push(&self.permission);
        all.extend_from_slice(layers);
        permission::evaluate(permission, pattern, &all)
    }

    /// Tools of `tool_names` not to offer to the model under `merge(agent.permission, session)`
    /// (see [`permission::disabled_tools`]).
    pub fn disabled_tools<S: AsRef<str>>(
        &self,
        tool_names: &[S],
        session: &Ruleset,
    ) -> std::collections::BTreeSet<String> {
        permission::disabled_tools(tool_names, &Ruleset::merge(&[&self.permission, session]))
    }
}

/// Default system prompt (layer 1 when the agent has no prompt and the model family has no
/// specific prompt); `prompts/provider/default.txt`.
pub const DEFAULT_PROMPT: &str = include_str!("../prompts/provider/default.txt");

/// Text appended as an assistant prefill on the last allowed step (OpenCode `max-steps.txt`).
pub const MAX_STEPS_PROMPT: &str = include_str!("../prompts/max-steps.txt");

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in `build` agent with no user config.
    pub(crate) fn build_agent() -> Agent {
        AgentSet::from_config_value(None, None, None, "config")
            .unwrap()
            .require("build")
            .unwrap()
            .clone()
    }

    #[test]
    fn config_overrides_builtin_fields() {
        let lookup = |cfg: &serde_json::Value, name: &str| {
            AgentSet::from_config_value(Some(cfg), None, None, "config")
                .map_err(|e| e.to_string())
                .and_then(|set| set.require(name).cloned().map_err(|e| e.to_string()))
        };
        let cfg = serde_json::json!({"build": {"steps": 3, "temperature": 0.2}, "mine": {"prompt": "hi"}});
        let b = lookup(&cfg, "build").unwrap();
        assert_eq!(b.steps, Some(3));
        assert_eq!(b.temperature, Some(0.2));
        let m = lookup(&cfg, "mine").unwrap();
        assert_eq!(m.prompt.as_deref(), Some("hi"));
        assert_eq!(m.mode, Mode::All);
        assert!(!m.native);
        assert!(
            lookup(&cfg, "nope")
                .unwrap_err()
                .contains("agent not found: nope")
        );
        let bad = serde_json::json!({"foo": {"mode": "primry"}});
        assert_eq!(
            lookup(&bad, "foo").unwrap_err(),
            r#"config: agent.foo.mode: unknown mode "primry" (expected primary, subagent or all)"#
        );
    }

    #[test]
    fn system_prompt_layers_in_order() {
        let a = build_agent();
        let s = system_prompt(&a, "ENV", Some("USER"));
        let (i, e, u) = (
            s.find("troupe").unwrap(),
            s.find("ENV").unwrap(),
            s.find("USER").unwrap(),
        );
        assert!(i < e && e < u);
    }

    #[test]
    fn build_agent_has_defaults() {
        let b = build_agent();
        assert_eq!(b.mode, Mode::Primary);
        assert!(b.native);
        assert_eq!(b.evaluate("edit", "src/main.rs", &[]), Action::Allow);
        assert_eq!(b.evaluate("question", "*", &[]), Action::Allow);
        assert_eq!(b.evaluate("read", ".env", &[]), Action::Ask);
        let session = permission::noninteractive_session_ruleset();
        assert_eq!(b.evaluate("question", "*", &[&session]), Action::Deny);
        let dis = b.disabled_tools(&["question", "bash", "plan_enter"], &session);
        assert_eq!(
            dis.into_iter().collect::<Vec<_>>(),
            ["plan_enter", "question"]
        );
    }
}
