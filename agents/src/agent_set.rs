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

use crate::permission::{
    self, Action, Rule, Ruleset, dir_glob, from_config_at, from_legacy_tools, json_kind,
    push_key_path,
};
use crate::{Agent, Mode};

const EXPLORE_PROMPT: &str = include_str!("../prompts/explore.txt");
const GENERAL_PROMPT: &str = include_str!("../prompts/general.txt");
const COMPACTION_PROMPT: &str = include_str!("../prompts/compaction.txt");
const TITLE_PROMPT: &str = include_str!("../prompts/title.txt");
const SUMMARY_PROMPT: &str = include_str!("../prompts/summary.txt");

/// Edit pattern the `plan` agent may write to (relative to the worktree).
pub const PLAN_FILES_GLOB: &str = ".troupe/plans/*.md";

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

/// The built-in agents in their fixed order (`build`, `plan`, `general`, `explore`,
/// `compaction`, `title`, `summary`) with `permission = merge(defaults, specific, user)`
/// (OpenCode §6.5 table; `plan` may edit only [`PLAN_FILES_GLOB`]).
pub fn builtin_agents(user: &Ruleset) -> Vec<Agent> {
    let defaults = permission::default_ruleset();
    let agent =
        |name: &str, description: &str, mode: Mode, hidden: bool, prompt: Option<&str>| Agent {
            name: name.to_string(),
            description: description.to_string(),
            mode,
            hidden,
            native: true,
            model: None,
            variant: None,
            temperature: None,
            top_p: None,
            prompt: prompt.map(|p| p.trim_end().to_string()),
            options: Map::new(),
            color: None,
            steps: None,
            permission: Ruleset::new(),
        };
    let with = |mut a: Agent, specific: Ruleset| {
        // The agent's guarantees ([`Rule::floor`]) come last so they read as what they are;
        // being floors, their position does not matter.
        let (floors, ordinary): (Vec<Rule>, Vec<Rule>) =
            specific.0.into_iter().partition(|r| r.floor);
        a.permission = Ruleset::merge(&[&defaults, &Ruleset(ordinary), user, &Ruleset(floors)]);
        a
    };
    let rules = |list: &[(&str, &str, Action)]| {
        let mut r = Ruleset::new();
        for (p, pat, a) in list {
            r.push(*p, *pat, *a);
        }
        r
    };
    use Action::{Allow, Deny};
    let mut explore_rules = rules(&[("*", "*", Deny)]);
    for t in [
        "grep",
        "glob",
        "list",
        "read",
        "bash",
        "webfetch",
        "websearch",
    ] {
        explore_rules.push(t, "*", Allow);
    }
    explore_rules.push("external_directory", "*", Action::Ask);
    explore_rules.push(
        "external_directory",
        dir_glob(&permission::tool_output_dir()),
        Allow,
    );
    explore_rules.push("external_directory", dir_glob(&std::env::temp_dir()), Allow);

    let mut title = agent(
        "title",
        "Generates a short session title.",
        Mode::Primary,
        true,
        Some(TITLE_PROMPT),
    );
    title.temperature = Some(0.5);
    vec![
        with(
            agent(
                "build",
                "The default agent. Executes tools based on configured permissions.",
                Mode::Primary,
                false,
                None,
            ),
            rules(&[("question", "*", Allow), ("plan_enter", "*", Allow)]),
        ),
        with(
            agent(
                "plan",
                "Plan mode. Disallows all edit tools except writing plan files under .troupe/plans/.",
                Mode::Primary,
                false,
                None,
            ),
            {
                let mut r = rules(&[
                    ("question", "*", Allow),
                    ("plan_exit", "*", Allow),
                    ("edit", "*", Deny),
                    ("edit", PLAN_FILES_GLOB, Allow),
                ]);
                // Plan mode's read-only promise: a global `permission` block can tighten it
                // but not loosen it; only `agent.plan.permission` can (issue 11).
                r.0.push(Rule::guarantee("edit", "*", Deny));
                r.0.push(Rule::guarantee("edit", PLAN_FILES_GLOB, Allow));
                r
            },
        ),
        with(
            agent(
                "general",
                "General-purpose agent for researching complex questions and executing multi-step tasks. Use it to run several independent units of work in parallel.",
                Mode::Subagent,
                false,
                Some(GENERAL_PROMPT),
            ),
            rules(&[("todowrite", "*", Deny)]),
        ),
        with(
            agent(
                "explore",
                "Fast read-only agent for exploring codebases: find files by pattern, search code for keywords, answer questions about how the code works. Say how thorough it should be: \"quick\", \"medium\" or \"very thorough\".",
                Mode::Subagent,
                false,
                Some(EXPLORE_PROMPT),
            ),
            explore_rules,
        ),
        with(
            agent(
                "compaction",
                "Summarises a conversation for context compaction.",
                Mode::Primary,
                true,
                Some(COMPACTION_PROMPT),
            ),
            rules(&[("*", "*", Deny)]),
        ),
        with(title, rules(&[("*", "*", Deny)])),
        with(
            agent(
                "summary",
                "Summarises the changes of a session.",
                Mode::Primary,
                true,
                Some(SUMMARY_PROMPT),
            ),
            rules(&[("*", "*", Deny)]),
        ),
    ]
}

/// Directories from `worktree` down to `cwd` (root first, both included) when `cwd` is inside
/// `worktree`; otherwise just `[cwd]`. Suitable as `extra_dirs` for [`AgentSet::load`].
pub fn project_dirs(cwd: &Path, worktree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if cwd.starts_with(worktree) {
        let mut cur = Some(cwd);
        while let Some(d) = cur {
            out.push(d.to_path_buf());
            if d == worktree {
                break;
            }
            cur = d.parent();
        }
        out.reverse();
    } else {
        out.push(cwd.to_path_buf());
    }
    out
}

/// Where a patch came from, for error messages.
struct Origin<'a> {
    /// File label (config path, `config`, or markdown file path).
    label: &'a str,
    /// Key prefix for JSON entries (`agent.foo`), empty for frontmatter.
    key_prefix: String,
    /// Frontmatter text and the file line number of its first line.
    frontmatter: Option<(&'a str, usize)>,
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
struct Patch {
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
    disable: Option<bool>,
}

impl Patch {
    fn parse(obj: &Map<String, Value>, origin: &Origin<'_>) -> Result<Patch, AgentError> {
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

    fn apply(self, a: &mut Agent) {
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

/// Splits a markdown file into (frontmatter text, line number of its first line, body).
/// Without a leading `---` line the whole text is the body.
fn split_frontmatter(text: &str) -> Option<(&str, usize, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n')?;
    if text[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &text[first_end + 1..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let fm = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((fm, 2, body));
        }
        offset += line.len();
    }
    None
}

/// A parsed markdown agent file.
struct MarkdownAgent {
    name: String,
    label: String,
    fields: Map<String, Value>,
    frontmatter: String,
}

fn parse_markdown_agent(
    name: String,
    label: String,
    text: &str,
) -> Result<MarkdownAgent, AgentError> {
    let (fm, first_line, body) = match split_frontmatter(text) {
        Some((fm, l, body)) => (fm, l, body),
        None => {
            if text.trim_start().starts_with("---") && text.trim_start().lines().count() > 0 {
                // Opening marker without a closing one.
                if text.trim_start().lines().next().map(str::trim_end) == Some("---") {
                    return Err(AgentError::Invalid {
                        location: format!("{label}:1"),
                        message: "frontmatter is not closed with a `---` line".into(),
                    });
                }
            }
            ("", 2, text)
        }
    };
    let value: Value = if fm.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        // Pad with blank lines so YAML line numbers (also inside the message) are file lines.
        let padded = format!("{}{fm}", "\n".repeat(first_line - 1));
        serde_norway::from_str(&padded).map_err(|e| {
            let line = e.location().map(|l| l.line());
            AgentError::Invalid {
                location: match line {
                    Some(l) => format!("{label}:{l}"),
                    None => label.clone(),
                },
                message: format!("invalid YAML frontmatter: {e}"),
            }
        })?
    };
    let mut fields = match value {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => {
            return Err(AgentError::Invalid {
                location: format!("{label}:{first_line}"),
                message: format!(
                    "frontmatter must be a mapping of fields, got {}",
                    json_kind(&other)
                ),
            });
        }
    };
    let body = body.trim();
    if !body.is_empty() {
        fields.insert("prompt".into(), Value::String(body.to_string()));
    }
    Ok(MarkdownAgent {
        name,
        label,
        fields,
        frontmatter: fm.to_string(),
    })
}

/// `.md` files under `root` (recursive, sorted), with names relative to `root` minus `.md`.
fn markdown_files(root: &Path) -> Result<Vec<(String, PathBuf)>, AgentError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(AgentError::Io { path: dir, source }),
        };
        for entry in entries {
            let entry = entry.map_err(|source| AgentError::Io {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            let ft = entry.file_type().map_err(|source| AgentError::Io {
                path: path.clone(),
                source,
            })?;
            if ft.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path.strip_prefix(root).unwrap_or(&path).with_extension("");
                let name = rel.to_string_lossy().replace('\\', "/");
                out.push((name, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn load_markdown_dir(config_dir: &Path, out: &mut Vec<MarkdownAgent>) -> Result<(), AgentError> {
    for sub in ["agent", "agents"] {
        for (name, path) in markdown_files(&config_dir.join(sub))? {
            let text = std::fs::read_to_string(&path).map_err(|source| AgentError::Io {
                path: path.clone(),
                source,
            })?;
            out.push(parse_markdown_agent(
                name,
                path.display().to_string(),
                &text,
            )?);
        }
    }
    Ok(())
}

/// The available agents, in definition order (built-ins first).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSet {
    agents: Vec<Agent>,
}

impl AgentSet {
    /// Builds the set from the loaded config, markdown agents in the global config dir
    /// ([`troupe_config::global_config_dir`]) and in `.troupe/` of the worktree root and each of
    /// `extra_dirs` (in order, later wins; e.g. [`project_dirs`]`(cwd, worktree)`).
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
        )?;
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

    /// The agent called `name`, or [`AgentError::NotFound`] listing the available names.
    pub fn require(&self, name: &str) -> Result<&Agent, AgentError> {
        self.get(name).ok_or_else(|| AgentError::NotFound {
            name: name.to_string(),
            available: self
                .list(true)
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn require_selectable_names_only_primary_agents() {
        let s = set(json!({"mine": {"prompt": "p"}, "helper": {"mode": "subagent"}}));
        assert_eq!(s.require_selectable("plan").unwrap().name, "plan");
        assert_eq!(s.require_selectable("mine").unwrap().name, "mine");
        let err = s.require_selectable("nope").unwrap_err().to_string();
        assert_eq!(
            err,
            "agent not found: nope. Available agents: build, mine, plan"
        );
        let err = s.require_selectable("explore").unwrap_err().to_string();
        assert_eq!(
            err,
            "agent explore is a subagent: a primary agent starts it through the task tool, it cannot run a session itself. Primary agents: build, mine, plan"
        );
        let err = s.require_selectable("title").unwrap_err().to_string();
        assert!(err.starts_with("agent title is hidden"), "{err}");
        assert!(s.require_selectable("helper").is_err());
    }

    fn set(agents: Value) -> AgentSet {
        AgentSet::from_config_value(Some(&agents), None, None, "troupe.json").unwrap()
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn builtins_and_their_permissions() {
        let s = set(json!({}));
        let names: Vec<&str> = s.all().iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "build",
                "plan",
                "general",
                "explore",
                "compaction",
                "title",
                "summary"
            ]
        );
        let get = |n: &str| s.get(n).unwrap();
        // (agent, permission, pattern, expected)
        let cases: &[(&str, &str, &str, Action)] = &[
            ("build", "edit", "src/main.rs", Action::Allow),
            ("build", "bash", "rm -rf x", Action::Allow),
            ("plan", "edit", "src/main.rs", Action::Deny),
            ("plan", "edit", ".troupe/plans/x.md", Action::Allow),
            ("plan", "edit", ".troupe/plans/x.rs", Action::Deny),
            ("plan", "read", "src/main.rs", Action::Allow),
            ("plan", "plan_exit", "*", Action::Allow),
            ("explore", "edit", "a.rs", Action::Deny),
            ("explore", "task", "general", Action::Deny),
            ("explore", "todowrite", "*", Action::Deny),
            ("explore", "grep", "foo", Action::Allow),
            ("explore", "bash", "ls", Action::Allow),
            ("explore", "read", "a.rs", Action::Allow),
            ("explore", "read", ".env", Action::Allow), // explore's read allow comes after defaults
            ("general", "todowrite", "*", Action::Deny),
            ("general", "edit", "a.rs", Action::Allow),
            ("compaction", "read", "a.rs", Action::Deny),
            ("title", "bash", "ls", Action::Deny),
            ("summary", "read", "x", Action::Deny),
        ];
        for (agent, perm, pat, want) in cases {
            assert_eq!(
                get(agent).evaluate(perm, pat, &[]),
                *want,
                "{agent} {perm} {pat}"
            );
        }
        assert_eq!(get("title").temperature, Some(0.5));
        assert!(get("title").hidden && get("compaction").hidden && get("summary").hidden);
        assert!(
            get("compaction")
                .prompt
                .as_deref()
                .unwrap()
                .contains("## Relevant files")
        );
        let tools = ["edit", "write", "read", "task", "bash"];
        let dis = permission::disabled_tools(&tools, &get("explore").permission);
        assert!(dis.contains("edit") && dis.contains("write") && dis.contains("task"));
        assert!(!dis.contains("read") && !dis.contains("bash"));
        // plan still offers edit (plan files are allowed), only blanket denials remove tools.
        assert!(permission::disabled_tools(&tools, &get("plan").permission).is_empty());
    }

    #[test]
    fn list_default_and_subagents() {
        let s = set(json!({"zeta": {"mode": "subagent", "description": "z"}, "alpha": {}}));
        let visible: Vec<&str> = s.list(false).iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            visible,
            ["alpha", "build", "explore", "general", "plan", "zeta"]
        );
        let all: Vec<&str> = s.list(true).iter().map(|a| a.name.as_str()).collect();
        assert_eq!(&all[6..], ["compaction", "summary", "title"]);
        let subs: Vec<&str> = s.subagents().iter().map(|a| a.name.as_str()).collect();
        assert_eq!(subs, ["alpha", "explore", "general", "zeta"]);
        assert_eq!(s.default_agent(None).unwrap().name, "build");
        assert_eq!(s.default_agent(Some("plan")).unwrap().name, "plan");
        assert_eq!(s.default_agent(Some("alpha")).unwrap().name, "alpha");
        for (name, msg) in [
            ("explore", "default agent \"explore\" is a subagent"),
            ("title", "default agent \"title\" is hidden"),
            ("nope", "default agent \"nope\" does not exist"),
        ] {
            assert_eq!(s.default_agent(Some(name)).unwrap_err().to_string(), msg);
        }
        let no_build = set(json!({"build": {"disable": true}}));
        assert!(no_build.get("build").is_none());
        assert_eq!(no_build.default_agent(None).unwrap().name, "plan");
    }

    #[test]
    fn config_fields_and_layering() {
        let s = AgentSet::from_config_value(
            Some(&json!({
                "build": {"model": "anthropic/claude-x", "variant": "high", "top_p": 0.9, "color": "#ff0000",
                          "maxSteps": 7, "reasoningEffort": "high", "options": {"a": 1},
                          "permission": {"bash": {"git push *": "ask"}}, "tools": {"webfetch": false}},
                "plan": {"permission": {"edit": {"docs/*.md": "allow"}}},
            })),
            Some(&json!({"bash": {"rm *": "deny", "git *": "allow"}, "edit": {"*": "allow"}})),
            Some(&json!({"websearch": false})),
            "troupe.json",
        )
        .unwrap();
        let b = s.get("build").unwrap();
        assert_eq!(b.model.as_deref(), Some("anthropic/claude-x"));
        assert_eq!(b.variant.as_deref(), Some("high"));
        assert_eq!(b.top_p, Some(0.9));
        assert_eq!(b.color.as_deref(), Some("#ff0000"));
        assert_eq!(b.steps, Some(7));
        assert_eq!(b.options.get("reasoningEffort"), Some(&json!("high")));
        assert_eq!(b.options.get("a"), Some(&json!(1)));
        let cases: &[(&str, &str, &str, Action)] = &[
            ("build", "bash", "rm -rf /", Action::Deny),
            ("build", "bash", "git status", Action::Allow),
            ("build", "bash", "git push origin", Action::Ask),
            ("build", "webfetch", "https://x", Action::Deny),
            ("build", "websearch", "q", Action::Deny),
            // The global `edit: allow` cannot loosen plan's read-only guarantee (issue 11);
            // `agent.plan.permission` can, for what it names.
            ("plan", "edit", "src/main.rs", Action::Deny),
            ("plan", "edit", "docs/a.md", Action::Allow),
            ("plan", "edit", ".troupe/plans/p.md", Action::Allow),
            ("explore", "bash", "rm x", Action::Deny),
        ];
        for (agent, perm, pat, want) in cases {
            assert_eq!(
                s.get(agent).unwrap().evaluate(perm, pat, &[]),
                *want,
                "{agent} {perm} {pat}"
            );
        }
        // Every agent ends with the tool-output allow.
        let last = s.get("build").unwrap().permission.0.last().unwrap().clone();
        assert_eq!(last.permission, "external_directory");
        assert_eq!(last.action, Action::Allow);
    }

    #[test]
    fn plan_edit_guarantee_against_global_rules() {
        let plan = |agents: Value, global: Value| {
            AgentSet::from_config_value(Some(&agents), Some(&global), None, "troupe.json")
                .unwrap()
                .get("plan")
                .unwrap()
                .clone()
        };
        // A global allow is overridden, and the decision says so.
        let p = plan(json!({}), json!({"edit": "allow"}));
        let d = permission::decide_one("edit", "src/a.rs", &[&p.permission]);
        assert_eq!(d.action, Action::Deny);
        assert!(d.rule.unwrap().floor);
        assert_eq!(d.overridden.unwrap().action, Action::Allow);
        assert!(
            d.describe_rule().contains("overriding edit \"*\": allow"),
            "{}",
            d.describe_rule()
        );
        let shown = p.decisions();
        assert_eq!(shown["edit"]["action"], "deny");
        assert_eq!(shown["edit"]["rule"], "edit \"*\": deny");
        assert_eq!(shown["edit"]["guarantee"], true);
        assert_eq!(shown["edit"]["overrides"], "edit \"*\": allow");
        assert!(
            shown["edit"]["note"]
                .as_str()
                .unwrap()
                .contains("agent.plan.permission")
        );
        assert_eq!(shown["bash"]["action"], "allow");
        assert!(shown["bash"].get("overrides").is_none());
        // `"permission": "allow"` (every key) does not loosen it either.
        let p = plan(json!({}), json!("allow"));
        assert_eq!(p.evaluate("edit", "src/a.rs", &[]), Action::Deny);
        // An "always" approval layered later cannot loosen it.
        let mut approvals = Ruleset::new();
        approvals.push("edit", "*", Action::Allow);
        assert_eq!(p.evaluate("edit", "src/a.rs", &[&approvals]), Action::Deny);
        // A global rule may tighten plan files.
        let p = plan(json!({}), json!({"edit": {".troupe/*": "deny"}}));
        assert_eq!(p.evaluate("edit", ".troupe/plans/x.md", &[]), Action::Deny);
        let p = plan(json!({}), json!({"edit": "ask"}));
        assert_eq!(p.evaluate("edit", ".troupe/plans/x.md", &[]), Action::Ask);
        assert_eq!(p.evaluate("edit", "src/a.rs", &[]), Action::Deny);
        // The per-agent block can loosen it.
        let p = plan(
            json!({"plan": {"permission": {"edit": "allow"}}}),
            json!({"edit": "deny"}),
        );
        assert_eq!(p.evaluate("edit", "src/a.rs", &[]), Action::Allow);
        let p = plan(
            json!({"plan": {"permission": {"edit": "ask"}}}),
            json!({"edit": "allow"}),
        );
        assert_eq!(p.evaluate("edit", "src/a.rs", &[]), Action::Ask);
        // Other agents are unaffected: the global allow wins for build.
        let s =
            AgentSet::from_config_value(None, Some(&json!({"edit": "deny"})), None, "x").unwrap();
        assert_eq!(
            s.get("build").unwrap().evaluate("edit", "a", &[]),
            Action::Deny
        );
        // A subagent started from plan inherits the guarantee (edit denials are copied).
        let p = plan(json!({}), json!({"edit": "allow"}));
        let derived =
            permission::derive_subagent_ruleset(&p.permission, &Ruleset::new(), &Ruleset::new());
        let mut general_user = Ruleset::new();
        general_user.push("edit", "*", Action::Allow);
        assert_eq!(
            permission::evaluate("edit", "src/a.rs", &[&general_user, &derived]),
            Action::Deny
        );
    }

    #[test]
    fn config_error_messages() {
        let cases: &[(Value, Option<Value>, &str)] = &[
            (
                json!({"foo": {"mode": "primry"}}),
                None,
                r#"troupe.json: agent.foo.mode: unknown mode "primry" (expected primary, subagent or all)"#,
            ),
            (
                json!({"foo": {"permission": {"bash": {"rm *": "dney"}}}}),
                None,
                r#"troupe.json: agent.foo.permission.bash."rm *": unknown action "dney" (expected allow, ask or deny)"#,
            ),
            (
                json!({"foo": {"steps": 0}}),
                None,
                "troupe.json: agent.foo.steps: expected a positive integer, got 0",
            ),
            (
                json!({"foo": {"temperature": "hot"}}),
                None,
                "troupe.json: agent.foo.temperature: expected a number, got a string",
            ),
            (
                json!({"my agent": 3}),
                None,
                r#"troupe.json: agent."my agent": expected an object of agent fields, got a number"#,
            ),
            (
                json!({}),
                Some(json!({"edit": "alow"})),
                r#"troupe.json: permission.edit: unknown action "alow" (expected allow, ask or deny)"#,
            ),
        ];
        for (agents, perm, want) in cases {
            let e = AgentSet::from_config_value(Some(agents), perm.as_ref(), None, "troupe.json")
                .unwrap_err();
            assert_eq!(e.to_string(), *want);
        }
    }

    #[test]
    fn markdown_agents_frontmatter_and_disable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let global = dir.path().join("global");
        write(&root.join(".git/HEAD"), "");
        write(
            &global.join("agent/review.md"),
            "---\ndescription: Reviews code\nmode: subagent\ntemperature: 0.1\n---\nGLOBAL PROMPT\n",
        );
        write(
            &root.join(".troupe/agents/review.md"),
            "---\nmodel: openai/gpt-5\npermission:\n  edit: deny\n  bash:\n    \"git diff *\": allow\ntools:\n  webfetch: false\ncustomKey: 42\n---\n\n  Review carefully.\n\n",
        );
        write(
            &root.join(".troupe/agent/nested/deep.md"),
            "Just a prompt, no frontmatter.\n",
        );
        write(
            &root.join(".troupe/agent/plan.md"),
            "---\ndisable: true\n---\n",
        );
        write(&root.join(".troupe/agent/notes.txt"), "ignored");
        let sub = root.join("pkg");
        write(
            &sub.join(".troupe/agent/sub.md"),
            "---\nhidden: true\n---\nsub prompt",
        );
        let cfg = troupe_config::LoadedConfig {
            worktree: root.clone(),
            config: troupe_config::Config {
                agent: Some(json!({"review": {"color": "blue", "temperature": 0.9}})),
                ..Default::default()
            },
            ..Default::default()
        };
        let s =
            AgentSet::load_with_global(&cfg, &project_dirs(&sub, &root), Some(&global)).unwrap();
        let r = s.get("review").unwrap();
        assert_eq!(r.description, "Reviews code");
        assert_eq!(r.mode, Mode::Subagent);
        // Markdown (global) comes after JSON config, so its temperature wins.
        assert_eq!(r.temperature, Some(0.1));
        assert_eq!(r.color.as_deref(), Some("blue"));
        assert_eq!(r.model.as_deref(), Some("openai/gpt-5"));
        assert_eq!(r.prompt.as_deref(), Some("Review carefully."));
        assert_eq!(r.options.get("customKey"), Some(&json!(42)));
        assert!(!r.native);
        assert_eq!(r.evaluate("edit", "a.rs", &[]), Action::Deny);
        assert_eq!(r.evaluate("webfetch", "u", &[]), Action::Deny);
        assert_eq!(r.evaluate("bash", "git diff HEAD", &[]), Action::Allow);
        assert_eq!(
            s.get("nested/deep").unwrap().prompt.as_deref(),
            Some("Just a prompt, no frontmatter.")
        );
        assert_eq!(s.get("nested/deep").unwrap().mode, Mode::All);
        assert!(s.get("plan").is_none(), "disable: true removes the agent");
        assert!(s.get("notes").is_none());
        assert!(s.get("sub").unwrap().hidden);
    }

    #[test]
    fn markdown_errors_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let cases = [
            (
                "---\ndescription: x\nmode: primry\n---\nbody",
                ":3: mode: unknown mode \"primry\"",
            ),
            (
                "---\ndescription: x\npermission:\n  bash:\n    \"rm *\": dney\n---\n",
                ":3: permission.bash.\"rm *\": unknown action \"dney\"",
            ),
            (
                "---\ndescription: x\nmode: [unclosed\n---\n",
                ": invalid YAML frontmatter: did not find expected ',' or ']' at line 4 column 1, while parsing a flow sequence at line 3",
            ),
            (
                "---\nmode: primary\nno closing marker\n",
                ":1: frontmatter is not closed",
            ),
            ("---\n- a\n- b\n---\n", ":2: frontmatter must be a mapping"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = root.join(format!("case{i}/.troupe/agent/bad.md"));
            write(&path, text);
            let cfg = troupe_config::LoadedConfig {
                worktree: root.join(format!("case{i}")),
                ..Default::default()
            };
            let e = AgentSet::load_with_global(&cfg, &[], None)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&path.display().to_string()), "{e}");
            assert!(e.contains(want), "{e:?} should contain {want:?}");
        }
    }

    #[test]
    fn project_dirs_chain() {
        let d = project_dirs(Path::new("/r/a/b"), Path::new("/r"));
        assert_eq!(
            d,
            [
                PathBuf::from("/r"),
                PathBuf::from("/r/a"),
                PathBuf::from("/r/a/b")
            ]
        );
        assert_eq!(
            project_dirs(Path::new("/x"), Path::new("/r")),
            [PathBuf::from("/x")]
        );
    }
}
