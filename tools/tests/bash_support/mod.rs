//! Shared by the bash permission tests: rules decided without a terminal, the rulesets the
//! rows name, the project directory they run in, and the check itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;
use troupe_agents::AgentSet;
use troupe_agents::permission::{self, Action, Ruleset, Verdict};
use troupe_tools::builtin::bash_permission;
use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest, ToolContext, ToolError};

/// Decides with the rules alone; an "ask" is refused with an `ASK ` prefix (as a run without
/// a terminal would refuse it).
pub struct Rules(Ruleset);

impl Rules {
    fn verdict(&self, req: &PermissionRequest) -> Verdict {
        permission::decide_request(
            &req.permission,
            &req.patterns,
            &req.sources,
            &req.opaque,
            &[&self.0],
        )
    }
}

impl PermissionAsker for Rules {
    fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        let v = self.verdict(&req);
        Box::pin(async move {
            match v.action {
                Action::Allow => PermissionReply::Allow,
                Action::Ask => PermissionReply::Deny(format!("ASK {}", v.message)),
                Action::Deny => PermissionReply::Deny(v.message),
            }
        })
    }

    fn precheck(&self, req: &PermissionRequest) -> BoxFuture<'static, Option<PermissionReply>> {
        let v = self.verdict(req);
        Box::pin(
            async move { (v.action == Action::Deny).then_some(PermissionReply::Deny(v.message)) },
        )
    }
}

/// The issue's rules: `bash: {"*": "allow", "rm *": "deny", "git push *": "deny"}`,
/// `external_directory: "deny"`, everything else allowed.
pub fn issue_rules() -> Ruleset {
    permission::from_config(&json!({
        "*": "allow",
        "bash": {"*": "allow", "rm *": "deny", "git push *": "deny"},
        "external_directory": "deny",
    }))
    .unwrap()
}

pub fn ruleset(name: &str) -> Ruleset {
    match name {
        "issue" => issue_rules(),
        // Nothing restricts bash: what cannot be known is not asked about.
        "allow" => permission::from_config(&json!({"*": "allow"})).unwrap(),
        "ask" => permission::from_config(&json!({"*": "allow", "bash": "ask"})).unwrap(),
        // bash allowed wholesale, but nothing outside the project.
        "extdeny" => {
            permission::from_config(&json!({"*": "allow", "external_directory": "deny"})).unwrap()
        }
        // The attacker trial's configuration over the build agent's defaults (`read`
        // asks for `*.env`, `external_directory` asks).
        "attack" => AgentSet::from_config_value(
            None,
            Some(&json!({"bash": {"*": "allow", "rm *": "deny"}})),
            None,
            "t",
        )
        .unwrap()
        .get("build")
        .unwrap()
        .permission
        .clone(),
        // The plan agent under the common global `"permission": {"edit": "allow"}`.
        "plan" => AgentSet::from_config_value(None, Some(&json!({"edit": "allow"})), None, "t")
            .unwrap()
            .get("plan")
            .unwrap()
            .permission
            .clone(),
        other => panic!("unknown ruleset {other}"),
    }
}

pub fn project() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("proj");
    for dir in ["sub", "src", ".troupe/plans", "emptydir"] {
        std::fs::create_dir_all(proj.join(dir)).unwrap();
    }
    std::fs::write(proj.join("src/a.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(d.path().join("outside")).unwrap();
    (d, proj)
}

pub async fn decide(rules: Ruleset, proj: &Path, command: &str) -> (Action, String) {
    let mut ctx = ToolContext::simple(proj);
    ctx.permissions = Arc::new(Rules(rules));
    match bash_permission::check(&ctx, command, proj, "t").await {
        Ok(()) => (Action::Allow, String::new()),
        Err(ToolError::PermissionDenied(m)) => match m.strip_prefix("ASK ") {
            Some(rest) => (Action::Ask, rest.to_string()),
            None => (Action::Deny, m),
        },
        Err(e) => panic!("{command:?}: unexpected {e:?}"),
    }
}

/// A row of a decision table: (ruleset name for [`ruleset`], command, the action the check
/// must reach, text its message must contain).
pub type Row = (&'static str, &'static str, Action, &'static str);

/// The message of a command denied by the `rm *` rule.
pub const RM: &str = "bash: denied by rule \"rm *\"";
/// The message of a command denied by the `git push *` rule.
pub const PUSH: &str = "bash: denied by rule \"git push *\"";
/// The message of a path outside the project denied by `external_directory`.
pub const EXT: &str = "external_directory: denied by rule \"*\"";
/// The message of a write refused by the plan agent's guarantee.
pub const PLAN_EDIT: &str =
    "edit: denied by rule \"*\" (a guarantee of the agent, overriding edit \"*\": allow)";

/// Decides every row in `proj` and fails the test listing every row whose action or message
/// differs (all rows are checked before failing, so one run shows every regression).
pub async fn check_rows(proj: &Path, rows: &[Row]) {
    let mut failures = Vec::new();
    for (rules, cmd, want, says) in rows {
        let (got, msg) = decide(ruleset(rules), proj, cmd).await;
        if got != *want || !msg.contains(says) {
            failures.push(format!(
                "[{rules}] {cmd:?}: want {want} containing {says:?}, got {got}: {msg}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
