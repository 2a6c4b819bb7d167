use super::*;
use crate::project_dirs;
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
    // Without a global rule the guarantee is still what decides (issue 21: it was shown
    // as `"guarantee": false`).
    let alone = plan(json!({}), json!({})).decisions();
    assert_eq!(alone["edit"]["action"], "deny");
    assert_eq!(alone["edit"]["guarantee"], true, "{alone}");
    assert!(alone["edit"].get("overrides").is_none(), "{alone}");
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
    let s = AgentSet::from_config_value(None, Some(&json!({"edit": "deny"})), None, "x").unwrap();
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
    let s = AgentSet::load_with_global(&cfg, &project_dirs(&sub, &root), Some(&global)).unwrap();
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

#[test]
fn editing_troupe_s_own_config_asks_whatever_the_global_rules_say() {
    let set = |global: Value| {
        AgentSet::from_config_value(Some(&json!({})), Some(&global), None, "troupe.json").unwrap()
    };
    for global in [json!({}), json!({"edit": "allow"}), json!("allow")] {
        let s = set(global.clone());
        for agent in ["build", "general"] {
            let a = s.get(agent).unwrap();
            for path in [
                "troupe.json",
                "troupe.jsonc",
                "sub/dir/troupe.json",
                ".troupe/troupe.json",
                ".troupe/agent/reviewer.md",
                "pkg/.troupe/command/x.md",
            ] {
                assert_eq!(
                    a.evaluate("edit", path, &[]),
                    Action::Ask,
                    "{agent} {path} {global}"
                );
            }
            // An ordinary file keeps the ordinary decision.
            assert_eq!(a.evaluate("edit", "src/troupe.rs", &[]), Action::Allow);
            // An "always" approval cannot turn the guarantee into an allow.
            let mut approvals = Ruleset::new();
            approvals.push("edit", "troupe.json", Action::Allow);
            assert_eq!(
                a.evaluate("edit", "troupe.json", &[&approvals]),
                Action::Ask
            );
        }
        // The plan agent still writes its plan files, and nothing else.
        let plan = s.get("plan").unwrap();
        assert_eq!(
            plan.evaluate("edit", ".troupe/plans/p.md", &[]),
            Action::Allow
        );
        assert_eq!(
            plan.evaluate("edit", ".troupe/troupe.json", &[]),
            Action::Deny
        );
    }
}

/// Trial on main: `permission.bash.ls: unknown action "alow"` and `agent.build.temperature:
/// expected a number` named the file but no line:column, unlike every other config error.
/// They now point at the key, in the file that set it (the global file here, not the project
/// file that set `permission` last).
#[test]
fn config_entry_errors_name_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    let global = d.path().join("global");
    write(&root.join(".git/HEAD"), "");
    let project = root.join("troupe.json");
    let global_file = global.join("troupe.json");
    let load = || {
        let cfg = troupe_config::load_with_env(
            &troupe_config::LoadOptions {
                cwd: root.clone(),
                global_dir: Some(global.clone()),
                env_content: None,
            },
            &|_| None,
        )
        .unwrap();
        AgentSet::load_with_global(&cfg, &[], None)
            .unwrap_err()
            .to_string()
    };
    write(
        &project,
        "{\n  \"agent\": {\"build\": {\n    \"temperature\": \"hot\"}}\n}\n",
    );
    assert_eq!(
        load(),
        format!(
            "{}:3:5: agent.build.temperature: expected a number, got a string",
            project.display()
        )
    );
    write(&project, "{\"permission\": {\"edit\": \"ask\"}}\n");
    write(
        &global_file,
        "{\n  // global rules\n  \"permission\": {\n    \"bash\": {\"ls\": \"alow\"}\n  }\n}\n",
    );
    assert_eq!(
        load(),
        format!(
            "{}:4:14: permission.bash.ls: unknown action \"alow\" (expected allow, ask or deny)",
            global_file.display()
        )
    );
}

/// The new-user trial: an agent entry's error from `TROUPE_CONFIG_CONTENT` named no position
/// (only files were searched). The content is applied after the files, so it is searched
/// first: a file that has the same key does not take the blame.
#[test]
fn config_content_entry_errors_name_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    write(&root.join(".git/HEAD"), "");
    write(
        &root.join("troupe.json"),
        "{\"agent\": {\"build\": {\"temperature\": \"warm\"}}}\n",
    );
    let content = "{\n  \"agent\": {\n    \"build\": {\"steps\": 3, \"temperature\": \"hot\"}}}";
    let cfg = troupe_config::load_with_env(
        &troupe_config::LoadOptions {
            cwd: root.clone(),
            global_dir: None,
            env_content: Some(content.into()),
        },
        &|_| None,
    )
    .unwrap();
    let e = AgentSet::load_with_global(&cfg, &[], None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "TROUPE_CONFIG_CONTENT:3:27: agent.build.temperature: expected a number, got a string"
    );
}
