//! Permission rulesets: format, parsing, wildcard matching and evaluation.
//!
//! Modelled on OpenCode's `permission/` module (reference `opencode-engine.md` §6):
//! a [`Rule`] is `{permission, pattern, action}`, a [`Ruleset`] is an ordered list of rules, and
//! [`evaluate`] picks the **last** matching rule across the concatenated layers (default
//! [`Action::Ask`]). Config has the shape `permission: action | {key: action | {pattern: action}}`
//! and the user's key order is precedence (serde_json `preserve_order` keeps it).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub(crate) use troupe_config::json_kind;

/// What to do when a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Run without asking.
    Allow,
    /// Ask the user (the default when no rule matches).
    Ask,
    /// Refuse: the tool fails with a message naming the rule, the turn goes on.
    Deny,
}

impl Action {
    /// Parses `"allow" | "ask" | "deny"` (exact, lowercase).
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "allow" => Some(Action::Allow),
            "ask" => Some(Action::Ask),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }

    /// The config spelling (`allow`, `ask`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule. Both `permission` and `pattern` are wildcard patterns (see [`wildcard_match`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// Permission key (`read`, `edit`, `bash`, `external_directory`, a tool name, or `*`).
    pub permission: String,
    /// What the rule applies to: a relative path, a bash command, a URL, … (`*` = everything).
    pub pattern: String,
    /// Action taken when the rule is the last match.
    pub action: Action,
    /// A guarantee ("floor") rule: among floor rules the last match wins too, and the result
    /// is the *stricter* of the floor decision and the ordinary one (see [`decide_one`]). Later
    /// ordinary rules (a global `permission` block, "always" approvals) can tighten it but
    /// never loosen it. The `plan` agent's `edit` deny is one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub floor: bool,
}

impl Rule {
    /// Convenience constructor (an ordinary rule).
    pub fn new(permission: impl Into<String>, pattern: impl Into<String>, action: Action) -> Rule {
        Rule {
            permission: permission.into(),
            pattern: pattern.into(),
            action,
            floor: false,
        }
    }

    /// A guarantee rule (see [`Rule::floor`]).
    pub fn guarantee(
        permission: impl Into<String>,
        pattern: impl Into<String>,
        action: Action,
    ) -> Rule {
        Rule {
            floor: true,
            ..Rule::new(permission, pattern, action)
        }
    }

    /// `permission "pattern": action`, e.g. `bash "rm *": deny`.
    pub fn describe(&self) -> String {
        format!("{} \"{}\": {}", self.permission, self.pattern, self.action)
    }
}

impl Action {
    /// Strictness order: allow < ask < deny.
    pub fn strictness(self) -> u8 {
        match self {
            Action::Allow => 0,
            Action::Ask => 1,
            Action::Deny => 2,
        }
    }
}

/// An ordered list of rules; later rules take precedence (OpenCode `PermissionV1.Ruleset`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ruleset(pub Vec<Rule>);

impl Ruleset {
    /// Empty ruleset.
    pub fn new() -> Ruleset {
        Ruleset(Vec::new())
    }

    /// Appends one rule.
    pub fn push(
        &mut self,
        permission: impl Into<String>,
        pattern: impl Into<String>,
        action: Action,
    ) {
        self.0.push(Rule::new(permission, pattern, action));
    }

    /// Appends all rules of `other` (OpenCode `merge` is concatenation).
    pub fn extend(&mut self, other: &Ruleset) {
        self.0.extend(other.0.iter().cloned());
    }

    /// Concatenation of `layers` in order.
    pub fn merge(layers: &[&Ruleset]) -> Ruleset {
        Ruleset(layers.iter().flat_map(|r| r.0.iter().cloned()).collect())
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.0
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// [`evaluate`] against this ruleset alone.
    pub fn evaluate(&self, permission: &str, pattern: &str) -> Action {
        evaluate(permission, pattern, &[self])
    }
}

/// A malformed `permission` config value. `path` is the dotted key path (`permission.bash."rm *"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PermissionError {
    /// Dotted key path of the bad value, e.g. `permission.bash."rm *"`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Appends `key` to a dotted path, quoting it unless it is a plain identifier
/// (`[A-Za-z0-9_-]+`): `permission` + `rm *` → `permission."rm *"`.
pub fn push_key_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let seg = if plain {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if path.is_empty() {
        seg
    } else {
        format!("{path}.{seg}")
    }
}

fn parse_action(v: &Value, path: &str) -> Result<Action, PermissionError> {
    match v {
        Value::String(s) => Action::parse(s).ok_or_else(|| PermissionError {
            path: path.to_string(),
            message: format!("unknown action {s:?} (expected allow, ask or deny)"),
        }),
        other => Err(PermissionError {
            path: path.to_string(),
            message: format!(
                "expected \"allow\", \"ask\" or \"deny\", got {}",
                json_kind(other)
            ),
        }),
    }
}

/// Parses a `permission` config value into rules, in the user's key order
/// (OpenCode `Permission.fromConfig`, §6.1). Errors are reported under the path `permission`.
///
/// Shapes: `"deny"` → `{*, *, deny}`; `{"bash": "ask"}` → `{bash, *, ask}`;
/// `{"bash": {"rm *": "deny"}}` → `{bash, "rm *", deny}`. Patterns starting with `~/`, `~`,
/// `$HOME/` or `$HOME` are expanded to the home directory.
pub fn from_config(value: &Value) -> Result<Ruleset, PermissionError> {
    from_config_at(value, "permission")
}

/// [`from_config`] reporting errors under `path` (e.g. `agent.plan.permission`).
pub fn from_config_at(value: &Value, path: &str) -> Result<Ruleset, PermissionError> {
    let mut out = Ruleset::new();
    match value {
        Value::String(_) => out.push("*", "*", parse_action(value, path)?),
        Value::Object(map) => {
            for (key, v) in map {
                let kpath = push_key_path(path, key);
                match v {
                    Value::Object(patterns) => {
                        for (pattern, a) in patterns {
                            let ppath = push_key_path(&kpath, pattern);
                            out.push(key.clone(), expand_home(pattern), parse_action(a, &ppath)?);
                        }
                    }
                    _ => out.push(key.clone(), "*", parse_action(v, &kpath)?),
                }
            }
        }
        other => {
            return Err(PermissionError {
                path: path.to_string(),
                message: format!(
                    "expected an action or an object of actions, got {}",
                    json_kind(other)
                ),
            });
        }
    }
    Ok(out)
}

/// Converts legacy `tools: {name: bool}` switches to rules (`true` → allow, `false` → deny,
/// pattern `*`); `write`, `edit`, `patch`, `apply_patch` and `multiedit` map to `edit`
/// (OpenCode §6.5 "Legacy tools"). Errors are reported under `path`.
pub fn from_legacy_tools(value: &Value, path: &str) -> Result<Ruleset, PermissionError> {
    let map = value.as_object().ok_or_else(|| PermissionError {
        path: path.to_string(),
        message: format!(
            "expected an object of tool name → boolean, got {}",
            json_kind(value)
        ),
    })?;
    let mut out = Ruleset::new();
    for (tool, v) in map {
        let enabled = v.as_bool().ok_or_else(|| PermissionError {
            path: push_key_path(path, tool),
            message: format!("expected a boolean, got {}", json_kind(v)),
        })?;
        let action = if enabled { Action::Allow } else { Action::Deny };
        out.push(tool_permission(tool), "*", action);
    }
    Ok(out)
}

/// The permission key a tool is checked under: `edit`, `write`, `patch`, `apply_patch` and
/// `multiedit` share `edit`; every other tool uses its own name (§6.2 `disabled`).
pub fn tool_permission(tool: &str) -> &str {
    match tool {
        "edit" | "write" | "patch" | "apply_patch" | "multiedit" => "edit",
        other => other,
    }
}

fn home_dir() -> Option<PathBuf> {
    dirs::home_dir()
}

/// Expands a leading `~/`, `~`, `$HOME/` or `$HOME` to the home directory (unchanged when the
/// home directory is unknown or the pattern has none of these prefixes).
pub fn expand_home(pattern: &str) -> String {
    let Some(home) = home_dir() else {
        return pattern.to_string();
    };
    let home = home.to_string_lossy().trim_end_matches('/').to_string();
    for prefix in ["~/", "$HOME/"] {
        if let Some(rest) = pattern.strip_prefix(prefix) {
            return format!("{home}/{rest}");
        }
    }
    if pattern == "~" || pattern == "$HOME" {
        return home;
    }
    pattern.to_string()
}

/// Wildcard match (OpenCode `Wildcard.match`, §6.2): `\` in both is normalised to `/`;
/// `*` matches any run of characters (including `/` and newlines), `?` exactly one; every other
/// character is literal; a pattern ending in `" *"` also matches the text without that tail
/// (`"ls *"` matches `ls` and `ls -la`). The match is anchored at both ends; case-insensitive on
/// Windows.
///
/// Matched directly (no regex is built: every permission check runs this once or twice per
/// rule, and compiling a regex per call was the largest cost of a `read` step).
pub fn wildcard_match(s: &str, pattern: &str) -> bool {
    // Fast paths.
    if pattern == "*" {
        return true;
    }
    let norm = |c: char| if c == '\\' { '/' } else { c };
    if !pattern.contains(['*', '?']) {
        let same = s.chars().map(norm).eq(pattern.chars().map(norm));
        return same
            || (cfg!(windows)
                && s.replace('\\', "/")
                    .eq_ignore_ascii_case(&pattern.replace('\\', "/")));
    }
    let text: Vec<char> = s.chars().map(norm).collect();
    let pat: Vec<char> = pattern.chars().map(norm).collect();
    if glob_chars(&text, &pat) {
        return true;
    }
    // `"ls *"` also matches `ls`: the pattern without its `" *"` tail.
    match pat.strip_suffix(&[' ', '*']) {
        Some(body) => glob_chars(&text, body),
        None => false,
    }
}

/// `text` matches `pat` in full: `*` any run of characters (newlines included), `?` exactly
/// one, anything else itself (case-insensitively on Windows). Greedy with backtracking to the
/// last `*` only: O(|text| × |pat|) at worst, linear in practice.
fn glob_chars(text: &[char], pat: &[char]) -> bool {
    let same =
        |p: char, t: char| p == t || (cfg!(windows) && p.to_lowercase().eq(t.to_lowercase()));
    let (mut t, mut p) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pat.len() && pat[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if p < pat.len() && (pat[p] == '?' || same(pat[p], text[t])) {
            t += 1;
            p += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` take one more character and retry after it.
            star = Some((sp, st + 1));
            p = sp + 1;
            t = st + 1;
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == '*')
}

/// The last ordinary (non-guarantee) rule across `layers` (concatenated in order) whose
/// permission and pattern both match, or `None`.
pub fn find_rule<'a>(permission: &str, pattern: &str, layers: &[&'a Ruleset]) -> Option<&'a Rule> {
    find(permission, pattern, layers, false)
}

fn find<'a>(
    permission: &str,
    pattern: &str,
    layers: &[&'a Ruleset],
    floor: bool,
) -> Option<&'a Rule> {
    layers
        .iter()
        .rev()
        .flat_map(|r| r.0.iter().rev())
        .filter(|r| r.floor == floor)
        .find(|r| wildcard_match(permission, &r.permission) && wildcard_match(pattern, &r.pattern))
}

/// How one `(permission, pattern)` was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleDecision<'a> {
    /// The action.
    pub action: Action,
    /// The deciding rule; `None` when no rule matches (default ask).
    pub rule: Option<&'a Rule>,
    /// An ordinary rule that would have been looser but a guarantee rule ([`Rule::floor`])
    /// overrode it.
    pub overridden: Option<&'a Rule>,
}

impl RuleDecision<'_> {
    /// `rule "rm *"` / `rule "*" (a guarantee of the agent, overriding edit "*": allow)` /
    /// `no rule (default ask)`.
    pub fn describe_rule(&self) -> String {
        match (self.rule, self.overridden) {
            (Some(r), Some(o)) => format!(
                "rule \"{}\" (a guarantee of the agent, overriding {})",
                r.pattern,
                o.describe()
            ),
            (Some(r), None) => format!("rule \"{}\"", r.pattern),
            (None, _) => "no matching rule (default ask)".to_string(),
        }
    }
}

/// Decides one `(permission, pattern)`: the last matching ordinary rule across `layers`
/// (default ask), unless the last matching guarantee rule is stricter, which then decides.
pub fn decide_one<'a>(permission: &str, pattern: &str, layers: &[&'a Ruleset]) -> RuleDecision<'a> {
    let rule = find(permission, pattern, layers, false);
    let action = rule.map(|r| r.action).unwrap_or(Action::Ask);
    match find(permission, pattern, layers, true) {
        Some(f) if f.action.strictness() > action.strictness() => RuleDecision {
            action: f.action,
            rule: Some(f),
            overridden: rule,
        },
        // The same decision as the ordinary rules: the guarantee is what holds it (a later
        // looser rule could not change it), so it is the deciding rule.
        Some(f) if f.action == action => RuleDecision {
            action,
            rule: Some(f),
            overridden: None,
        },
        _ => RuleDecision {
            action,
            rule,
            overridden: None,
        },
    }
}

/// Evaluates one request (OpenCode `evaluate`, §6.2): the last matching rule across the
/// concatenated `layers` wins; [`Action::Ask`] when nothing matches; a stricter guarantee rule
/// ([`Rule::floor`]) overrides. Typical layers: `[agent.permission, session rules, approvals]`.
pub fn evaluate(permission: &str, pattern: &str, layers: &[&Ruleset]) -> Action {
    decide_one(permission, pattern, layers).action
}

/// Whether `layers` restrict `permission` at all: some rule for it asks or denies, or
/// nothing allows it wholesale (then the default is ask). A permission allowed everywhere
/// (`bash: allow`) is not restricted, so an opaque command is not asked about.
pub fn restricts(permission: &str, layers: &[&Ruleset]) -> bool {
    let any_strict = layers
        .iter()
        .flat_map(|r| r.0.iter())
        .any(|r| r.action != Action::Allow && wildcard_match(permission, &r.permission));
    any_strict || evaluate(permission, "*", layers) != Action::Allow
}

/// Whether an opaque part of a `permission` request must ask: [`restricts`] holds for it,
/// or — for `bash`, whose unknown command may touch any file — some rule denies
/// `external_directory` or `edit` (issue 11: code the analysis cannot see, such as
/// `python -c …`, asks whenever the user forbids anything it could do, and runs only under
/// a plain allow-all with no denied paths).
pub fn opaque_restricted(permission: &str, layers: &[&Ruleset]) -> bool {
    restricts(permission, layers)
        || (permission == "bash"
            && layers.iter().flat_map(|r| r.0.iter()).any(|r| {
                r.action == Action::Deny
                    && (wildcard_match("external_directory", &r.permission)
                        || wildcard_match("edit", &r.permission))
            }))
}

/// The decision for a whole request and the sentence explaining it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The strictest action over the request's patterns (and opaque parts).
    pub action: Action,
    /// Names the permission, the deciding rule and the part it decided, e.g.
    /// `bash: denied by rule "rm *": /bin/rm -rf d`. Empty for allow.
    pub message: String,
}

/// Decides a request of `patterns` (each with the `sources` text it came from, same order;
/// missing sources fall back to the pattern) under `permission`: the strictest part decides
/// (the first one among equals). Each `opaque` reason (something only known when the command
/// runs) makes the request at least ask when [`restricts`] holds.
pub fn decide_request(
    permission: &str,
    patterns: &[String],
    sources: &[String],
    opaque: &[String],
    layers: &[&Ruleset],
) -> Verdict {
    let mut best: Option<(RuleDecision<'_>, usize)> = None;
    for (i, p) in patterns.iter().enumerate() {
        let d = decide_one(permission, p, layers);
        if best
            .as_ref()
            .is_none_or(|(b, _)| d.action.strictness() > b.action.strictness())
        {
            best = Some((d, i));
        }
    }
    let part = |i: usize| {
        sources
            .get(i)
            .filter(|s| !s.is_empty())
            .unwrap_or(&patterns[i])
            .clone()
    };
    match best {
        Some((d, i)) if d.action == Action::Deny => Verdict {
            action: Action::Deny,
            message: format!("{permission}: denied by {}: {}", d.describe_rule(), part(i)),
        },
        _ if !opaque.is_empty() && opaque_restricted(permission, layers) => Verdict {
            action: Action::Ask,
            message: format!(
                "{permission}: needs approval because its meaning is only known when it runs: {}",
                opaque.join("; ")
            ),
        },
        Some((d, i)) if d.action == Action::Ask => Verdict {
            action: Action::Ask,
            message: format!(
                "{permission}: needs approval by {}: {}",
                d.describe_rule(),
                part(i)
            ),
        },
        _ => Verdict {
            action: Action::Allow,
            message: String::new(),
        },
    }
}

/// Tools that must not be offered to the model (OpenCode `disabled`, §6.2): for each tool, the
/// last rule whose permission matches the tool's permission key ([`tool_permission`]; the
/// pattern is ignored) is looked up, and the tool is disabled iff that rule is a blanket
/// `pattern "*" → deny`. Returns the disabled tool names.
pub fn disabled_tools<S: AsRef<str>>(tool_names: &[S], ruleset: &Ruleset) -> BTreeSet<String> {
    tool_names
        .iter()
        .map(AsRef::as_ref)
        .filter(|tool| {
            let perm = tool_permission(tool);
            ruleset
                .0
                .iter()
                .rev()
                .find(|r| !r.floor && wildcard_match(perm, &r.permission))
                .is_some_and(|r| r.pattern == "*" && r.action == Action::Deny)
        })
        .map(str::to_string)
        .collect()
}

/// Env var naming the saved-tool-output directory; mirrors `troupe_tools::truncate::OUTPUT_DIR_ENV`
/// (agents cannot depend on tools, so the rule is repeated here).
pub const TOOL_OUTPUT_DIR_ENV: &str = "TROUPE_TOOL_OUTPUT_DIR";

/// Directory where truncated tool outputs are saved: `$TROUPE_TOOL_OUTPUT_DIR`, else
/// `<temp_dir>/troupe-tool-output` (same rule as `troupe_tools::truncate::output_dir`).
pub fn tool_output_dir() -> PathBuf {
    match std::env::var_os(TOOL_OUTPUT_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join("troupe-tool-output"),
    }
}

/// `<dir>/*` with forward slashes, as used in `external_directory` rules.
pub fn dir_glob(dir: &Path) -> String {
    format!(
        "{}/*",
        dir.to_string_lossy()
            .replace('\\', "/")
            .trim_end_matches('/')
    )
}

/// The default ruleset every agent starts from (OpenCode `agent.ts` defaults, §6.5, in this
/// exact order), with the saved-tool-output glob and temp dir given explicitly:
///
/// ```text
/// "*": allow
/// doom_loop: ask
/// external_directory: { "*": ask, <tool_output_dir>/*: allow, <tmp_dir>/*: allow }
/// question, plan_enter, plan_exit, repo_clone, repo_overview: deny
/// read: { "*": allow, "*.env": ask, "*.env.*": ask, "*.env.example": allow }
/// ```
pub fn default_ruleset_with(tool_output_dir: &Path, tmp_dir: &Path) -> Ruleset {
    let mut r = Ruleset::new();
    r.push("*", "*", Action::Allow);
    r.push("doom_loop", "*", Action::Ask);
    r.push("external_directory", "*", Action::Ask);
    r.push(
        "external_directory",
        dir_glob(tool_output_dir),
        Action::Allow,
    );
    r.push("external_directory", dir_glob(tmp_dir), Action::Allow);
    for p in [
        "question",
        "plan_enter",
        "plan_exit",
        "repo_clone",
        "repo_overview",
    ] {
        r.push(p, "*", Action::Deny);
    }
    r.push("read", "*", Action::Allow);
    r.push("read", "*.env", Action::Ask);
    r.push("read", "*.env.*", Action::Ask);
    r.push("read", "*.env.example", Action::Allow);
    // troupe's own configuration decides what the model may do: a model that may edit it
    // could grant itself anything from the next run on. Editing it always asks, whatever
    // a global `edit: allow` says (a guarantee: only an agent's own `permission` loosens it).
    for pat in CONFIG_EDIT_PATTERNS {
        r.0.push(Rule::guarantee("edit", *pat, Action::Ask));
    }
    r
}

/// `edit` patterns (worktree-relative) of troupe's own configuration: config files in any
/// directory (`troupe.json`, `troupe.jsonc`) and everything under `.troupe/` (config, agents,
/// commands, skills, plans). Editing them asks by default, by guarantee rules; the `plan`
/// agent's own guarantee re-allows its plan files.
pub const CONFIG_EDIT_PATTERNS: &[&str] = &[
    "troupe.json",
    "troupe.jsonc",
    "*/troupe.json",
    "*/troupe.jsonc",
    ".troupe/*",
    "*/.troupe/*",
];

/// [`default_ruleset_with`] using [`tool_output_dir`] and `std::env::temp_dir()`.
pub fn default_ruleset() -> Ruleset {
    default_ruleset_with(&tool_output_dir(), &std::env::temp_dir())
}

/// Rules for a sub-agent's child session (OpenCode `agent/subagent-permissions.ts`, §6.5):
///
/// 1. the parent agent's `edit` denials (plan-mode read-only is inherited);
/// 2. the parent session's `external_directory` rules and all its denials;
/// 3. `todowrite * deny` unless the sub-agent has any `todowrite` rule;
/// 4. `task * deny` unless the sub-agent has any `task` rule.
///
/// The result is the child *session* ruleset: evaluate with
/// `[&subagent.permission, &derived, approvals]`.
pub fn derive_subagent_ruleset(
    parent_agent_rules: &Ruleset,
    parent_session_rules: &Ruleset,
    subagent_rules: &Ruleset,
) -> Ruleset {
    let mut out = Ruleset::new();
    out.0.extend(
        parent_agent_rules
            .0
            .iter()
            .filter(|r| r.action == Action::Deny && r.permission == "edit")
            .cloned(),
    );
    out.0.extend(
        parent_session_rules
            .0
            .iter()
            .filter(|r| r.permission == "external_directory" || r.action == Action::Deny)
            .cloned(),
    );
    for key in ["todowrite", "task"] {
        if !subagent_rules.0.iter().any(|r| r.permission == key) {
            out.push(key, "*", Action::Deny);
        }
    }
    out
}

/// Session rules for non-interactive runs (`troupe run`; OpenCode §6.5): nobody can answer a
/// question or approve a mode switch, so `question`, `plan_enter` and `plan_exit` are denied.
pub fn noninteractive_session_ruleset() -> Ruleset {
    let mut r = Ruleset::new();
    for p in ["question", "plan_enter", "plan_exit"] {
        r.push(p, "*", Action::Deny);
    }
    r
}

#[cfg(test)]
#[path = "permission_tests.rs"]
mod tests;
