use super::*;
use crate::AgentSet;
use crate::tests::build_agent;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn provider_prompt_table() {
    let cases = [
        ("anthropic/claude-sonnet-4-5", ANTHROPIC_PROMPT),
        ("openrouter/anthropic/claude-3.5", ANTHROPIC_PROMPT),
        ("openai/gpt-5", GPT_PROMPT),
        ("openai/o3-mini", GPT_PROMPT),
        ("openai/gpt-5-codex", GPT_PROMPT),
        ("google/gemini-2.5-pro", GEMINI_PROMPT),
        ("ollama/llama3", DEFAULT_PROMPT),
        ("mock/model", DEFAULT_PROMPT),
        ("deepseek/deepseek-coder", DEFAULT_PROMPT),
    ];
    for (m, want) in cases {
        assert_eq!(provider_prompt(m), want, "{m}");
    }
}

#[test]
fn layering_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("AGENTS.md"), "ROOT RULES\n");
    write(&root.join("empty.md"), "  \n");
    let files = vec![
        root.join("AGENTS.md"),
        root.join("missing.md"),
        root.join("empty.md"),
    ];
    let b = build_agent();
    let s = build_system_prompt(
        &b,
        "anthropic/claude-x",
        root,
        root,
        "Mon Jan 1 2024",
        &files,
        Some("USER SYS"),
    );
    let idx = |needle: &str| {
        s.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing in {s}"))
    };
    let base = idx(ANTHROPIC_PROMPT.lines().next().unwrap());
    let env = idx("<env>");
    let instr = idx(&format!(
        "Instructions from: {}\nROOT RULES",
        root.join("AGENTS.md").display()
    ));
    let user = idx("USER SYS");
    assert!(base < env && env < instr && instr < user, "{s}");
    assert!(s.contains("The exact model ID is anthropic/claude-x"));
    assert!(s.contains("model named claude-x."));
    assert!(!s.contains("missing.md") && !s.contains("empty.md"));
    // The agent's own prompt replaces the provider prompt.
    let set = AgentSet::from_config_value(None, None, None, "c").unwrap();
    let explore = set.get("explore").unwrap();
    let s2 = build_system_prompt(explore, "anthropic/claude-x", root, root, "d", &[], None);
    assert!(s2.starts_with("You are a read-only exploration agent"));
    assert!(!s2.contains(ANTHROPIC_PROMPT.lines().next().unwrap()));
    assert!(s2.ends_with("</env>"));
}

#[test]
fn instruction_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    let sub = root.join("crates/app");
    let global = dir.path().join("global");
    std::fs::create_dir_all(&sub).unwrap();
    write(&root.join("CLAUDE.md"), "claude root");
    // Only CLAUDE.md → fallback.
    assert_eq!(
        find_instruction_files(&sub, &root, &[], &global),
        vec![root.join("CLAUDE.md")]
    );
    // AGENTS.md anywhere on the way up wins over CLAUDE.md; all AGENTS.md matches, nearest first.
    write(&root.join("AGENTS.md"), "agents root");
    write(&sub.join("AGENTS.md"), "agents sub");
    write(&root.join("crates/CLAUDE.md"), "claude mid");
    assert_eq!(
        find_instruction_files(&sub, &root, &[], &global),
        vec![sub.join("AGENTS.md"), root.join("AGENTS.md")]
    );
    // Files above the worktree are not used.
    write(&dir.path().join("AGENTS.md"), "outside");
    assert_eq!(
        find_instruction_files(&root, &root, &[], &global),
        vec![root.join("AGENTS.md")]
    );
    // Global, then config instructions (paths and globs relative to the worktree), deduplicated.
    write(&global.join("AGENTS.md"), "global");
    write(&root.join("docs/rules/a.md"), "a");
    write(&root.join("docs/rules/b.md"), "b");
    write(&root.join("docs/rules/c.txt"), "c");
    write(&root.join("STYLE.md"), "style");
    let cfg = vec![
        "docs/rules/*.md".to_string(),
        "STYLE.md".to_string(),
        "AGENTS.md".to_string(),
        "nope/*.md".to_string(),
        "https://example.com/x.md".to_string(),
    ];
    assert_eq!(
        find_instruction_files(&root, &root, &cfg, &global),
        vec![
            root.join("AGENTS.md"),
            global.join("AGENTS.md"),
            root.join("docs/rules/a.md"),
            root.join("docs/rules/b.md"),
            root.join("STYLE.md"),
        ]
    );
    let abs = vec![format!("{}/docs/**/*.md", root.display())];
    assert_eq!(
        find_instruction_files(&sub, &root, &abs, &global).len(),
        2 + 1 + 2
    );
}

#[test]
fn reminders() {
    let plan = switch_reminder(Some("build"), "plan").unwrap();
    assert!(plan.starts_with("<system-reminder>") && plan.ends_with("</system-reminder>"));
    assert!(plan.contains("read-only"));
    assert!(switch_reminder(None, "plan").is_some());
    let back = switch_reminder(Some("plan"), "build").unwrap();
    assert!(back.starts_with("<system-reminder>") && back.contains("edits are allowed again"));
    assert!(back.contains("from plan to build"));
    assert_eq!(switch_reminder(Some("build"), "build"), None);
    assert_eq!(switch_reminder(None, "build"), None);
    assert_eq!(switch_reminder(Some("explore"), "general"), None);
}

#[test]
fn compaction_request_has_sections_in_order() {
    let heads = [
        "## Goal",
        "## Instructions",
        "## Discoveries",
        "## Accomplished",
        "## Relevant files",
    ];
    let pos: Vec<usize> = heads
        .iter()
        .map(|h| {
            COMPACTION_REQUEST_PROMPT
                .lines()
                .position(|l| l == *h)
                .unwrap_or_else(|| panic!("missing heading {h}"))
        })
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
    assert!(!COMPACTION_CONTINUE_PROMPT.trim().is_empty());
    assert_eq!(COMPACTION_UPDATE_PROMPT.matches("{summary}").count(), 1);
}
