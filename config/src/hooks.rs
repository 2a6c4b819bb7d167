//! The `hooks` block: commands run at OpenCode's plugin hook points, with a JSON payload on
//! stdin and a JSON reply on stdout (troupe's own block; OpenCode runs JavaScript plugins at
//! the same points, `plugin/index.ts` `Hooks`):
//!
//! ```jsonc
//! "hooks": {
//!   "tool.execute.before": [{"command": ["./hooks/guard.sh"], "tools": ["bash"], "timeout": 5000}],
//!   "tool.execute.after":  [{"command": ["python3", "redact.py"]}],
//!   "chat.params":         [{"command": ["./hooks/params.sh"]}],
//!   "shell.env":           [{"command": ["./hooks/env.sh"], "environment": {"K": "v"}}],
//!   "session.idle":        [{"command": ["notify-send", "done"]}],
//!   "permission.asked":    [{"command": ["./hooks/approve.sh"]}]
//! }
//! ```
//!
//! An unknown hook point or key is a config error naming it (a misspelt guard must never be a
//! silently ignored guard). The payloads and replies are documented in the README ("Hooks")
//! and in `troupe_tools::hooks`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Default time one hook command may take before it is killed and counts as failed,
/// milliseconds: 10,000 (troupe's choice; a hook sits on the path of every matching call).
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 10_000;

/// The hook points and their commands, each list run in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// Before a tool runs: may block it (with a reason the model sees) or rewrite its
    /// arguments.
    #[serde(
        rename = "tool.execute.before",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_execute_before: Vec<HookCommand>,
    /// After a tool returned: may rewrite its output (and title).
    #[serde(
        rename = "tool.execute.after",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_execute_after: Vec<HookCommand>,
    /// Before each provider request: may set `temperature`, `topP` and request `options`.
    #[serde(rename = "chat.params", default, skip_serializing_if = "Vec::is_empty")]
    pub chat_params: Vec<HookCommand>,
    /// Before a `bash` command runs: may add environment variables.
    #[serde(rename = "shell.env", default, skip_serializing_if = "Vec::is_empty")]
    pub shell_env: Vec<HookCommand>,
    /// After a turn ended and the session is idle (notification; the reply is ignored).
    #[serde(
        rename = "session.idle",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub session_idle: Vec<HookCommand>,
    /// Before the user is asked for a permission: may answer `allow`, `deny` or leave it to
    /// the user (`ask`).
    #[serde(
        rename = "permission.asked",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub permission_asked: Vec<HookCommand>,
}

impl HooksConfig {
    /// True when no hook is configured at any point.
    pub fn is_empty(&self) -> bool {
        self.tool_execute_before.is_empty()
            && self.tool_execute_after.is_empty()
            && self.chat_params.is_empty()
            && self.shell_env.is_empty()
            && self.session_idle.is_empty()
            && self.permission_asked.is_empty()
    }
}

/// One hook command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookCommand {
    /// Program and arguments (no shell: write `["sh", "-c", "…"]` for one). A relative
    /// program path resolves against the session directory, where the command runs.
    #[serde(deserialize_with = "non_empty_command")]
    pub command: Vec<String>,
    /// Extra environment variables (added to troupe's environment, which loses
    /// `TROUPE_SERVER_PASSWORD` as `bash` does).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Tool names the hook applies to (`*` and `?` wildcards), for `tool.execute.*`;
    /// empty = every tool. Ignored at the other points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Milliseconds before the command is killed and counts as failed (see
    /// [`DEFAULT_HOOK_TIMEOUT_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

impl HookCommand {
    /// The timeout in milliseconds (configured or [`DEFAULT_HOOK_TIMEOUT_MS`]).
    pub fn timeout_ms(&self) -> u64 {
        self.timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT_MS)
    }

    /// Whether the hook applies to `tool` (always when `tools` is empty).
    pub fn applies_to(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|p| wildcard_match(p, tool))
    }

    /// The command as one line for messages (`./guard.sh --strict`).
    pub fn display(&self) -> String {
        self.command.join(" ")
    }
}

/// `*` matches any run of characters, `?` one character; everything else literally.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Classic two-pointer match with backtracking to the last `*`.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn non_empty_command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let command = Vec::<String>::deserialize(d)?;
    match command.first() {
        None => Err(serde::de::Error::custom(
            "`command` is empty: give at least the program, e.g. [\"./hook.sh\"]",
        )),
        Some(p) if p.trim().is_empty() => Err(serde::de::Error::custom(
            "`command` starts with an empty program name",
        )),
        Some(_) => Ok(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_point_and_refuses_unknown_points_and_keys() {
        let c: HooksConfig = serde_json::from_str(
            r#"{"tool.execute.before": [{"command": ["a"], "tools": ["ba*"], "timeout": 5}],
                "tool.execute.after": [{"command": ["b"]}], "chat.params": [{"command": ["c"]}],
                "shell.env": [{"command": ["d"], "environment": {"K": "v"}}],
                "session.idle": [{"command": ["e"]}], "permission.asked": [{"command": ["f"]}]}"#,
        )
        .unwrap();
        assert_eq!(c.tool_execute_before[0].timeout_ms(), 5);
        assert_eq!(c.chat_params[0].timeout_ms(), DEFAULT_HOOK_TIMEOUT_MS);
        assert!(!c.is_empty());
        let e = serde_json::from_str::<HooksConfig>(r#"{"tool.execute.befor": []}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tool.execute.befor"), "{e}");
        let e = serde_json::from_str::<HooksConfig>(
            r#"{"shell.env": [{"command": ["x"], "matcher": "bash"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("matcher"), "{e}");
        let e = serde_json::from_str::<HooksConfig>(r#"{"shell.env": [{"command": []}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn tool_patterns_use_wildcards() {
        let h = |tools: &[&str]| HookCommand {
            command: vec!["x".into()],
            environment: BTreeMap::new(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            timeout: None,
        };
        assert!(h(&[]).applies_to("bash"));
        assert!(h(&["bash"]).applies_to("bash"));
        assert!(!h(&["bash"]).applies_to("bash2"));
        assert!(h(&["files_*"]).applies_to("files_read"));
        assert!(h(&["?ead"]).applies_to("read"));
        assert!(!h(&["edit", "write"]).applies_to("read"));
        assert!(h(&["*"]).applies_to(""));
        assert!(h(&["a*b*c"]).applies_to("aXbYbc"));
        assert!(!h(&["a*b*c"]).applies_to("aXbYb"));
    }
}
