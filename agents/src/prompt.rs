//! System-prompt layering, instruction files and mode-switch reminders.
//!
//! Per request (OpenCode `session/llm/request.ts`, reference §12.4), the system prompt is the
//! `\n`-join of:
//! 1. the agent's `prompt`, else the provider prompt chosen by model family ([`provider_prompt`]);
//! 2. the environment block ([`environment`]) and each instruction file as
//!    `Instructions from: <path>\n<content>` ([`find_instruction_files`]);
//! 3. the user message's own `system` text.
//!
//! Reminders for switching into or out of plan mode are not part of the system prompt: they are
//! appended to the user message as synthetic text ([`switch_reminder`], §12.5).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::{Agent, DEFAULT_PROMPT};

/// Provider prompt for Anthropic Claude models (`prompts/provider/anthropic.txt`).
pub const ANTHROPIC_PROMPT: &str = include_str!("../prompts/provider/anthropic.txt");
/// Provider prompt for OpenAI GPT / o-series models (`prompts/provider/gpt.txt`).
pub const GPT_PROMPT: &str = include_str!("../prompts/provider/gpt.txt");
/// Provider prompt for Google Gemini models (`prompts/provider/gemini.txt`).
pub const GEMINI_PROMPT: &str = include_str!("../prompts/provider/gemini.txt");
/// Reminder appended while the `plan` agent is active (`prompts/plan-reminder.txt`).
pub const PLAN_REMINDER: &str = include_str!("../prompts/plan-reminder.txt");
/// Reminder appended when leaving plan mode; `{agent}` is replaced by the new agent's name
/// (`prompts/build-switch.txt`).
pub const BUILD_SWITCH_REMINDER: &str = include_str!("../prompts/build-switch.txt");

/// The user text sent after the history to ask the compaction agent for a summary
/// (`prompts/compaction-request.txt`). The answer must use the Markdown headings `## Goal`,
/// `## Instructions`, `## Discoveries`, `## Accomplished` and `## Relevant files`, in that
/// order. (Structure after OpenCode's `SUMMARY_TEMPLATE`, opencode-engine.md §5.5 step 6; own
/// wording.) Not to be confused with the `summary` agent's prompt, which describes a session's
/// changes.
pub const COMPACTION_REQUEST_PROMPT: &str = include_str!("../prompts/compaction-request.txt");

/// The anchor put before [`COMPACTION_REQUEST_PROMPT`] when the history being summarized
/// follows an earlier summary (`prompts/compaction-update.txt`; `{summary}` is replaced by
/// that summary's text): the model updates the previous summary instead of writing one from
/// scratch (OpenCode's anchored `previousSummary` prompt, opencode-engine.md §5.5 step 6;
/// own wording).
pub const COMPACTION_UPDATE_PROMPT: &str = include_str!("../prompts/compaction-update.txt");

/// The synthetic user text added after an automatic compaction so the agent carries on
/// (`prompts/compaction-continue.txt`; behaviour of OpenCode's auto-continue message,
/// opencode-engine.md §5.5 step 11; own wording).
pub const COMPACTION_CONTINUE_PROMPT: &str = include_str!("../prompts/compaction-continue.txt");

/// Project instruction file names, in priority order: the first name with any match between the
/// directory and the worktree root wins, and all its matches are used (§12.3).
pub const INSTRUCTION_FILE_NAMES: &[&str] = &["AGENTS.md", "CLAUDE.md"];

/// Name of the global instruction file inside the global config dir.
pub const GLOBAL_INSTRUCTION_FILE: &str = "AGENTS.md";

/// The model id without its `provider/` prefix (`anthropic/claude-x` → `claude-x`).
fn api_id(model_full_id: &str) -> &str {
    model_full_id
        .split_once('/')
        .map(|(_, m)| m)
        .unwrap_or(model_full_id)
}

/// Layer-1 prompt for a model when the agent has none, chosen by substring of the lowercase
/// model id without the provider (own adaptation of OpenCode `SystemPrompt.provider`, §12.4):
/// `claude` → Anthropic-style; `gpt`, or an id starting with `o1`/`o3`/`o4` → GPT-style;
/// `gemini` → Gemini-style; anything else → [`DEFAULT_PROMPT`].
pub fn provider_prompt(model_full_id: &str) -> &'static str {
    let id = api_id(model_full_id).to_ascii_lowercase();
    if id.contains("claude") {
        ANTHROPIC_PROMPT
    } else if id.contains("gpt") || ["o1", "o3", "o4"].iter().any(|p| id.starts_with(p)) {
        GPT_PROMPT
    } else if id.contains("gemini") {
        GEMINI_PROMPT
    } else {
        DEFAULT_PROMPT
    }
}

/// Environment block of the system prompt (layer 2; OpenCode `SystemPrompt.environment`
/// wording): model name and full id, working directory, worktree root, whether the worktree is a
/// git repo (has `.git`; one `stat`), platform and `date` (pre-formatted by the caller).
pub fn environment(model_full_id: &str, directory: &Path, worktree: &Path, date: &str) -> String {
    let is_git = worktree.join(".git").exists();
    format!(
        "You are powered by the model named {model}. The exact model ID is {full}\nHere is some useful information about the environment you are running in:\n<env>\n  Working directory: {dir}\n  Workspace root folder: {root}\n  Is directory a git repo: {git}\n  Platform: {platform}\n  Today's date: {date}\n</env>",
        model = api_id(model_full_id),
        full = model_full_id,
        dir = directory.display(),
        root = worktree.display(),
        git = if is_git { "yes" } else { "no" },
        platform = std::env::consts::OS,
    )
}

/// Three-layer join with a pre-built layer 2: the agent prompt (else [`DEFAULT_PROMPT`]),
/// `env_block`, then `user_system` when non-empty, joined with `\n`.
pub fn system_prompt(agent: &Agent, env_block: &str, user_system: Option<&str>) -> String {
    join_layers(
        agent.prompt.as_deref().unwrap_or(DEFAULT_PROMPT),
        &[env_block.to_string()],
        user_system,
    )
}

fn join_layers(base: &str, middle: &[String], user_system: Option<&str>) -> String {
    let mut parts: Vec<&str> = vec![base.trim_end()];
    parts.extend(middle.iter().map(String::as_str).filter(|s| !s.is_empty()));
    if let Some(s) = user_system.filter(|s| !s.trim().is_empty()) {
        parts.push(s);
    }
    parts.join("\n")
}

/// One instruction file as a system entry: `Instructions from: <path>\n<content>`.
pub fn instruction_entry(path: &Path, content: &str) -> String {
    format!(
        "Instructions from: {}\n{}",
        path.display(),
        content.trim_end()
    )
}

/// Reads instruction files, skipping ones that cannot be read or are empty. Blocking I/O.
pub fn load_instructions(paths: &[PathBuf]) -> Vec<(PathBuf, String)> {
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok().map(|c| (p.clone(), c)))
        .filter(|(_, c)| !c.trim().is_empty())
        .collect()
}

/// Full system prompt (§12.4): layer 1 = `agent.prompt` or [`provider_prompt`]`(model_full_id)`;
/// layer 2 = [`environment`] then each readable file of `instructions` as
/// [`instruction_entry`]; layer 3 = `user_system`. Joined with `\n`.
/// Reads the instruction files (blocking I/O: call from `spawn_blocking` on async paths, or
/// use [`build_system_prompt_with`] with pre-read contents).
pub fn build_system_prompt(
    agent: &Agent,
    model_full_id: &str,
    directory: &Path,
    worktree: &Path,
    date: &str,
    instructions: &[PathBuf],
    user_system: Option<&str>,
) -> String {
    let env = environment(model_full_id, directory, worktree, date);
    build_system_prompt_with(
        agent,
        model_full_id,
        &env,
        &load_instructions(instructions),
        user_system,
    )
}

/// [`build_system_prompt`] without I/O: `env_block` from [`environment`], `instructions` as
/// `(path, content)` pairs (e.g. from [`load_instructions`]).
pub fn build_system_prompt_with(
    agent: &Agent,
    model_full_id: &str,
    env_block: &str,
    instructions: &[(PathBuf, String)],
    user_system: Option<&str>,
) -> String {
    let base = agent
        .prompt
        .as_deref()
        .unwrap_or_else(|| provider_prompt(model_full_id));
    let mut middle = vec![env_block.to_string()];
    middle.extend(instructions.iter().map(|(p, c)| instruction_entry(p, c)));
    join_layers(base, &middle, user_system)
}

fn expand_tilde(p: &str) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/")
        && let Some(home) = dirs::home_dir()
    {
        return home.join(rest);
    }
    PathBuf::from(p)
}

/// Instruction files for a session (§12.3, adapted), in this order, without duplicates:
/// 1. project: for the first name in [`INSTRUCTION_FILE_NAMES`] found in any directory from
///    `directory` up to `worktree` (both included; only `directory` when it is outside the
///    worktree), every match of that name, nearest first — so `CLAUDE.md` is used only when no
///    `AGENTS.md` exists on the way up;
/// 2. global: `<global_dir>/AGENTS.md` when it exists;
/// 3. `config_instructions`: paths or globs (`*`, `?`, `[…]`, `**`); relative ones are resolved
///    against `worktree`, `~/` against the home directory; matches sorted per entry; only files.
///
/// Blocking file-system access (a few `stat`s and glob walks).
pub fn find_instruction_files(
    directory: &Path,
    worktree: &Path,
    config_instructions: &[String],
    global_dir: &Path,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut add = |p: PathBuf, out: &mut Vec<PathBuf>| {
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if seen.insert(key) {
            out.push(p);
        }
    };
    let mut chain = Vec::new();
    let mut cur = Some(directory);
    while let Some(d) = cur {
        chain.push(d);
        if d == worktree || !directory.starts_with(worktree) {
            break;
        }
        cur = d.parent();
    }
    for name in INSTRUCTION_FILE_NAMES {
        let found: Vec<PathBuf> = chain
            .iter()
            .map(|d| d.join(name))
            .filter(|p| p.is_file())
            .collect();
        if !found.is_empty() {
            for p in found {
                add(p, &mut out);
            }
            break;
        }
    }
    let global = global_dir.join(GLOBAL_INSTRUCTION_FILE);
    if global.is_file() {
        add(global, &mut out);
    }
    for entry in config_instructions {
        let entry = entry.trim();
        if entry.is_empty() || entry.starts_with("http://") || entry.starts_with("https://") {
            continue;
        }
        let expanded = expand_tilde(entry);
        let is_glob = entry.contains(['*', '?', '[']);
        if !is_glob {
            let p = if expanded.is_absolute() {
                expanded
            } else {
                worktree.join(expanded)
            };
            if p.is_file() {
                add(p, &mut out);
            }
            continue;
        }
        let pattern = if expanded.is_absolute() {
            expanded.to_string_lossy().into_owned()
        } else {
            format!(
                "{}/{}",
                glob::Pattern::escape(&worktree.to_string_lossy()).trim_end_matches('/'),
                expanded.to_string_lossy()
            )
        };
        let Ok(paths) = glob::glob(&pattern) else {
            continue;
        };
        let mut matches: Vec<PathBuf> = paths
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect();
        matches.sort();
        for p in matches {
            add(p, &mut out);
        }
    }
    out
}

/// Reminder to append (as a synthetic text part of the user message) when the turn runs with
/// `new_agent` after `previous_agent` (the agent of the previous assistant message; OpenCode
/// `session/reminders.ts`, §12.5):
/// - `new_agent == "plan"` → [`PLAN_REMINDER`] (a read-only notice in `<system-reminder>`),
///   on every plan turn, as OpenCode does, so the constraint survives long conversations;
/// - leaving `plan` for any other agent → [`BUILD_SWITCH_REMINDER`] naming the new agent
///   ("edits are allowed again");
/// - otherwise `None`.
pub fn switch_reminder(previous_agent: Option<&str>, new_agent: &str) -> Option<String> {
    if new_agent == "plan" {
        return Some(PLAN_REMINDER.trim_end().to_string());
    }
    if previous_agent == Some("plan") {
        return Some(
            BUILD_SWITCH_REMINDER
                .trim_end()
                .replace("{agent}", new_agent),
        );
    }
    None
}

#[cfg(test)]
#[path = "prompt_tests.rs"]
mod tests;
