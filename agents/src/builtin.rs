//! The built-in agents (OpenCode `agent/agent.ts`, reference §6.5, §12.1) and their prompt files.

use serde_json::Map;

use crate::permission::{self, Action, Rule, Ruleset, dir_glob};
use crate::{Agent, Mode};

const EXPLORE_PROMPT: &str = include_str!("../prompts/explore.txt");
const GENERAL_PROMPT: &str = include_str!("../prompts/general.txt");
const COMPACTION_PROMPT: &str = include_str!("../prompts/compaction.txt");
const TITLE_PROMPT: &str = include_str!("../prompts/title.txt");
/// System prompt of the `summary` agent, which describes a session's changes like a
/// pull-request text (`prompts/summary.txt`). Not to be confused with
/// [`crate::prompt::COMPACTION_REQUEST_PROMPT`], the request a compaction sends.
const SESSION_SUMMARY_PROMPT: &str = include_str!("../prompts/summary.txt");

/// Edit pattern the `plan` agent may write to (relative to the worktree).
pub const PLAN_FILES_GLOB: &str = ".troupe/plans/*.md";

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
                Some(SESSION_SUMMARY_PROMPT),
            ),
            rules(&[("*", "*", Deny)]),
        ),
    ]
}
