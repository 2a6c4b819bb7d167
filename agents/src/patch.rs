//! One `agent.<name>` config entry or markdown frontmatter, parsed into typed fields and applied
//! over an agent; errors name the source, line and key.

use serde_json::{Map, Value};

use crate::agent_set::AgentError;
use crate::permission::{
    self, Rule, Ruleset, from_config_at, from_legacy_tools, json_kind, push_key_path,
};
use crate::{Agent, Mode};

/// Where a patch came from, for error messages.
pub(crate) struct Origin<'a> {
    /// File label (config path, `config`, or markdown file path).
    pub(crate) label: &'a str,
    /// Key prefix for JSON entries (`agent.foo`), empty for frontmatter.
    pub(crate) key_prefix: String,
    /// Frontmatter text and the file line number of its first line.
    pub(crate) frontmatter: Option<(&'a str, usize)>,
}

impl Origin<'_> {
    fn err(&self, top_key: &str, rel_path: &str, message: impl Into<String>) -> AgentError {
        let path = if self.key_prefix.is_empty() {
            rel_path.to_string()
        } else {
            format!("{}.{rel_path}", self.key_prefix)
        };
        let location = match self
            .frontmatter
            .and_then(|(text, first)| line_of_key(text, top_key).map(|l| l + first))
        {
            Some(line) => format!("{}:{line}: {path}", self.label),
            None => format!("{}: {path}", self.label),
        };
        AgentError::Invalid {
            location,
            message: message.into(),
        }
    }

    fn key_err(&self, key: &str, message: impl Into<String>) -> AgentError {
        self.err(key, &push_key_path("", key), message)
    }
}

/// 0-based index of the frontmatter line defining top-level `key`.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines().position(|l| {
        let l = l.trim_end();
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|p| l.starts_with(p.as_str()))
    })
}

/// Typed fields of one `agent.<name>` entry or markdown frontmatter.
#[derive(Default)]
pub(crate) struct Patch {
    model: Option<String>,
    variant: Option<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    prompt: Option<String>,
    description: Option<String>,
    mode: Option<Mode>,
    hidden: Option<bool>,
    options: Map<String, Value>,
    color: Option<String>,
    steps: Option<u32>,
    permission: Ruleset,
    pub(crate) disable: Option<bool>,
}

impl Patch {
    pub(crate) fn parse(
        obj: &Map<String, Value>,
        origin: &Origin<'_>,
    ) -> Result<Patch, AgentError> {
        let mut p = Patch::default();
        let string = |k: &str, v: &Value| -> Result<String, AgentError> {
            v.as_str().map(str::to_string).ok_or_else(|| {
                origin.key_err(k, format!("expected a string, got {}", json_kind(v)))
            })
        };
        let number = |k: &str, v: &Value| -> Result<f64, AgentError> {
            v.as_f64().ok_or_else(|| {
                origin.key_err(k, format!("expected a number, got {}", json_kind(v)))
            })
        };
        let boolean = |k: &str, v: &Value| -> Result<bool, AgentError> {
            v.as_bool().ok_or_else(|| {
                origin.key_err(k, format!("expected true or false, got {}", json_kind(v)))
            })
        };
        let mut tools_rules = Ruleset::new();
        let mut perm_rules = Ruleset::new();
        let mut max_steps = None;
        for (k, v) in obj {
            if v.is_null() {
                continue;
            }
            match k.as_str() {
                "model" => p.model = Some(string(k, v)?),
                "variant" => p.variant = Some(string(k, v)?),
                "prompt" => p.prompt = Some(string(k, v)?),
                "description" => p.description = Some(string(k, v)?),
                "color" => p.color = Some(string(k, v)?),
                "temperature" => p.temperature = Some(number(k, v)?),
                "top_p" => p.top_p = Some(number(k, v)?),
                "hidden" => p.hidden = Some(boolean(k, v)?),
                "disable" => p.disable = Some(boolean(k, v)?),
                "mode" => {
                    let s = string(k, v)?;
                    p.mode = Some(Mode::parse(&s).ok_or_else(|| {
                        origin.key_err(
                            k,
                            format!("unknown mode {s:?} (expected primary, subagent or all)"),
                        )
                    })?);
                }
                "steps" | "maxSteps" => {
                    let n = v
                        .as_u64()
                        .filter(|n| *n >= 1)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            origin.key_err(k, format!("expected a positive integer, got {v}"))
                        })?;
                    if k == "steps" {
                        p.steps = Some(n)
                    } else {
                        max_steps = Some(n)
                    }
                }
                "options" => match v {
                    Value::Object(o) => p.options.extend(o.clone()),
                    other => {
                        return Err(origin
                            .key_err(k, format!("expected an object, got {}", json_kind(other))));
                    }
                },
                "tools" => {
                    tools_rules = from_legacy_tools(v, "tools")
                        .map_err(|e| origin.err(k, &e.path, e.message))?;
                }
                "permission" => {
                    perm_rules = from_config_at(v, "permission")
                        .map_err(|e| origin.err(k, &e.path, e.message))?;
                }
                // The name comes from the key / file path.
                "name" => {}
                _ => {
                    p.options.insert(k.clone(), v.clone());
                }
            }
        }
        if p.steps.is_none() {
            p.steps = max_steps;
        }
        // Legacy switches first so explicit permission rules win (OpenCode merges them that way).
        p.permission = Ruleset::merge(&[&tools_rules, &perm_rules]);
        Ok(p)
    }

    pub(crate) fn apply(self, a: &mut Agent) {
        macro_rules! set {
            ($($f:ident),*) => { $( if self.$f.is_some() { a.$f = self.$f; } )* };
        }
        set!(model, variant, temperature, top_p, prompt, color, steps);
        if let Some(d) = self.description {
            a.description = d;
        }
        if let Some(m) = self.mode {
            a.mode = m;
        }
        if let Some(h) = self.hidden {
            a.hidden = h;
        }
        a.options.extend(self.options);
        // An explicit per-agent choice may change the agent's own guarantees: its rules for a
        // guaranteed permission are repeated as guarantee rules (see `Rule::floor`).
        let guarded: Vec<String> = a
            .permission
            .0
            .iter()
            .filter(|r| r.floor)
            .map(|r| r.permission.clone())
            .fold(Vec::new(), |mut v, p| {
                if !v.contains(&p) {
                    v.push(p);
                }
                v
            });
        let mut extra = Vec::new();
        for r in &self.permission.0 {
            for g in &guarded {
                if permission::wildcard_match(g, &r.permission) {
                    extra.push(Rule::guarantee(g.clone(), r.pattern.clone(), r.action));
                }
            }
        }
        a.permission.extend(&self.permission);
        a.permission.0.extend(extra);
    }
}
