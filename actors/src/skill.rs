//! `skill {name}`: load a skill's instructions into the conversation (OpenCode `tool/skill.ts`,
//! §7.3). Skills are found by [`troupe_agents::skill::discover`] (project `.troupe/skills`,
//! `.claude/skills`, `.agents/skills` from the session directory up to the worktree, then the
//! global config dir); the tool's description lists each one's name and description for the
//! session's directory, so the model knows what it can load.
//!
//! Permission: `skill` with the skill name as pattern and as the "always" pattern, so rules
//! like `"skill": {"internal-*": "deny"}` apply. An unknown name is an error listing the
//! available skills (and any `SKILL.md` that was skipped, with why).

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use troupe_agents::skill::{Skill, Skills, discover};
use troupe_tools::{DescribeContext, ToolContext, ToolError, ToolOutput, TypedTool};

/// The `skill` tool; `global_dir` is the global config directory (its `skills/` folder is
/// searched after the project's).
#[derive(Debug, Clone)]
pub struct SkillTool {
    global_dir: PathBuf,
}

impl SkillTool {
    /// A `skill` tool that also searches `<global_dir>/skills`.
    pub fn new(global_dir: PathBuf) -> Self {
        Self { global_dir }
    }
}

/// Arguments of `skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillArgs {
    /// The name of the skill to load, as listed in the tool description.
    name: String,
}

const INTRO: &str = "Load a skill: specialized instructions and workflows for a kind of task, with any scripts or reference files bundled beside it. When a task matches a skill's description, load the skill before starting and follow its instructions.";

/// The description for a set of skills: the intro, then `<available_skills>` with one
/// `- name: description` line each (or a note that there are none).
pub fn describe_skills(skills: &Skills) -> String {
    if skills.skills.is_empty() {
        return format!("{INTRO}\n\nNo skills are available in this project.");
    }
    let mut out = format!("{INTRO}\n\n<available_skills>\n");
    for s in &skills.skills {
        out.push_str(&format!("- {}: {}\n", s.name, s.description));
    }
    out.push_str("</available_skills>");
    out
}

/// The tool output of a loaded skill: `<skill_content name="…">`, `# Skill: <name>`, the
/// body, the base directory relative paths resolve against, and up to 10 bundled files.
pub fn skill_content(skill: &Skill, files: &[PathBuf]) -> String {
    let dir = skill.dir().display();
    let mut out = format!(
        "<skill_content name=\"{}\">\n# Skill: {}\n\n{}\n\nBase directory for this skill: {dir}\nRelative paths in this skill (e.g. scripts/, reference/) are relative to this base directory.",
        skill.name, skill.name, skill.body
    );
    if !files.is_empty() {
        out.push_str("\n\n<skill_files>\n");
        for f in files {
            out.push_str(&format!("<file>{}</file>\n", f.display()));
        }
        out.push_str("</skill_files>");
    }
    out.push_str("\n</skill_content>");
    out
}

/// The error for an unknown skill: the available names and the skipped files.
fn unknown(name: &str, skills: &Skills) -> ToolError {
    let available = if skills.skills.is_empty() {
        "none".to_string()
    } else {
        skills.names().join(", ")
    };
    let mut msg = format!("Skill \"{name}\" not found. Available skills: {available}.");
    for p in &skills.problems {
        msg.push_str(&format!("\nSkipped {p}"));
    }
    ToolError::Failed(msg)
}

fn find(dir: &Path, worktree: &Path, global: &Path) -> Skills {
    let found = discover(dir, worktree, global);
    for p in &found.problems {
        tracing::warn!(file = %p.location.display(), problem = %p.message, "skipped a skill");
    }
    found
}

impl TypedTool for SkillTool {
    type Args = SkillArgs;
    const NAME: &'static str = "skill";

    fn describe(&self) -> String {
        format!("{INTRO}\n\nThe skills available are listed here when a session starts a turn.")
    }

    fn describe_in(&self, cx: &DescribeContext<'_>) -> String {
        let mut skills = find(cx.directory, cx.worktree, &self.global_dir);
        // A skill the rules deny is not offered (OpenCode lists only the agent's skills).
        skills.skills.retain(|s| !(cx.denies)("skill", &s.name));
        describe_skills(&skills)
    }

    fn run(
        &self,
        args: SkillArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let global = self.global_dir.clone();
        Box::pin(async move {
            let (dir, wt) = (ctx.directory.clone(), ctx.worktree.clone());
            let skills = tokio::task::spawn_blocking(move || find(&dir, &wt, &global))
                .await
                .map_err(|e| ToolError::Failed(format!("internal error: {e}")))?;
            let Some(skill) = skills.get(&args.name).cloned() else {
                return Err(unknown(&args.name, &skills));
            };
            troupe_tools::paths::ask(
                &ctx,
                "skill",
                vec![skill.name.clone()],
                vec![skill.name.clone()],
                json!({"name": skill.name, "location": skill.location.display().to_string()}),
            )
            .await?;
            let s = skill.clone();
            let files = tokio::task::spawn_blocking(move || s.bundled_files())
                .await
                .map_err(|e| ToolError::Failed(format!("internal error: {e}")))?;
            let mut metadata = Map::new();
            metadata.insert("name".into(), Value::String(skill.name.clone()));
            metadata.insert(
                "dir".into(),
                Value::String(skill.dir().display().to_string()),
            );
            Ok(ToolOutput {
                title: format!("Loaded skill: {}", skill.name),
                output: skill_content(&skill, &files),
                metadata,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest, Tool};

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    struct Rec(std::sync::Mutex<Vec<PermissionRequest>>, bool);
    impl PermissionAsker for Rec {
        fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
            self.0.lock().unwrap().push(req);
            let deny = self.1;
            Box::pin(async move {
                if deny {
                    PermissionReply::Deny("no skills".into())
                } else {
                    PermissionReply::Allow
                }
            })
        }
    }

    fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let wt = root.join("repo");
        let global = root.join("global");
        write(
            &wt.join(".claude/skills/pdf/SKILL.md"),
            "---\nname: pdf\ndescription: Work with PDF files\n---\nRun scripts/extract.py first.\n",
        );
        write(&wt.join(".claude/skills/pdf/scripts/extract.py"), "print()");
        write(
            &global.join("skills/bad/SKILL.md"),
            "---\nname: bad\ndescription: [\n---\n",
        );
        (tmp, wt, global)
    }

    #[tokio::test]
    async fn description_lists_and_call_loads_with_permission() {
        let (_tmp, wt, global) = project();
        let tool = SkillTool::new(global.clone());
        let desc = tool.description_in(&DescribeContext::plain(&wt));
        assert!(
            desc.contains("<available_skills>\n- pdf: Work with PDF files\n</available_skills>"),
            "{desc}"
        );
        // A skill the turn's rules deny is not listed.
        let denies = |perm: &str, pat: &str| perm == "skill" && pat == "pdf";
        let desc = tool.description_in(&DescribeContext {
            directory: &wt,
            worktree: &wt,
            denies: &denies,
        });
        assert!(
            desc.ends_with("No skills are available in this project."),
            "{desc}"
        );
        let rec = std::sync::Arc::new(Rec(Default::default(), false));
        let mut ctx = ToolContext::simple(&wt);
        ctx.permissions = rec.clone();
        let out = tool.execute(json!({"name": "pdf"}), ctx).await.unwrap();
        assert_eq!(out.title, "Loaded skill: pdf");
        let dir = wt.join(".claude/skills/pdf");
        assert_eq!(
            out.output,
            format!(
                "<skill_content name=\"pdf\">\n# Skill: pdf\n\nRun scripts/extract.py first.\n\nBase directory for this skill: {}\nRelative paths in this skill (e.g. scripts/, reference/) are relative to this base directory.\n\n<skill_files>\n<file>{}</file>\n</skill_files>\n</skill_content>",
                dir.display(),
                dir.join("scripts/extract.py").display()
            )
        );
        let reqs = rec.0.lock().unwrap().clone();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].permission, "skill");
        assert_eq!(reqs[0].patterns, vec!["pdf".to_string()]);
        assert_eq!(reqs[0].always, vec!["pdf".to_string()]);
    }

    #[tokio::test]
    async fn unknown_names_list_skills_and_skipped_files_and_denial_loads_nothing() {
        let (_tmp, wt, global) = project();
        let tool = SkillTool::new(global.clone());
        let e = tool
            .execute(json!({"name": "docx"}), ToolContext::simple(&wt))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Skill \"docx\" not found. Available skills: pdf.\nSkipped "),
            "{e}"
        );
        assert!(
            e.contains(&global.join("skills/bad/SKILL.md").display().to_string())
                && e.contains("invalid YAML front matter at line "),
            "{e}"
        );
        let rec = std::sync::Arc::new(Rec(Default::default(), true));
        let mut ctx = ToolContext::simple(&wt);
        ctx.permissions = rec;
        let e = tool.execute(json!({"name": "pdf"}), ctx).await.unwrap_err();
        assert_eq!(e, ToolError::PermissionDenied("no skills".into()));
        let empty = tempfile::tempdir().unwrap();
        let none = SkillTool::new(empty.path().join("g"))
            .description_in(&DescribeContext::plain(empty.path()));
        assert!(
            none.ends_with("No skills are available in this project."),
            "{none}"
        );
    }
}
