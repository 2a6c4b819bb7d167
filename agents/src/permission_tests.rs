use super::*;
use serde_json::json;

#[test]
fn opaque_bash_asks_when_paths_are_denied() {
    let rules = |v: serde_json::Value| from_config(&v).unwrap();
    let opaque = vec!["`python3 -c …` runs inline code".to_string()];
    let cases = [
        (json!({"*": "allow"}), Action::Allow),
        (
            json!({"*": "allow", "external_directory": "ask"}),
            Action::Allow,
        ),
        (
            json!({"*": "allow", "external_directory": "deny"}),
            Action::Ask,
        ),
        (
            json!({"*": "allow", "edit": {"*.lock": "deny"}}),
            Action::Ask,
        ),
        (json!({"*": "allow", "bash": {"rm *": "deny"}}), Action::Ask),
    ];
    for (cfg, want) in cases {
        let r = rules(cfg.clone());
        let v = decide_request("bash", &["python3 -c x".into()], &[], &opaque, &[&r]);
        assert_eq!(v.action, want, "{cfg}: {}", v.message);
    }
    // Other permissions keep their own rule: an opaque edit asks only when edit is
    // restricted.
    let r = rules(json!({"*": "allow", "external_directory": "deny"}));
    let v = decide_request("edit", &[], &[], &opaque, &[&r]);
    assert_eq!(v.action, Action::Allow);
}

#[test]
fn wildcard_table() {
    let cases: &[(&str, &str, bool)] = &[
        ("ls", "ls *", true),
        ("ls -la", "ls *", true),
        ("lsof", "ls *", false),
        ("git push --force origin", "git push *", true),
        ("git push", "git push *", true),
        ("git pushx", "git push *", false),
        ("git pull", "git push *", false),
        ("kill -9 123", "kill *", true),
        ("kill", "kill *", true),
        ("pkill x", "kill *", false),
        ("a.txt", "?.txt", true),
        ("ab.txt", "?.txt", false),
        ("axtxt", "a.txt", false),
        ("a+b(1).txt", "a+b(1).txt", true),
        ("aab(1).txt", "a+b(1).txt", false),
        ("a+b(1).txt", "a+b(?).txt", true),
        ("[x].md", "[x].md", true),
        ("x.md", "[x].md", false),
        ("[x].md", "[?].md", true),
        ("src/a/b.rs", "src/*", true),
        ("src\\a\\b.rs", "src/*.rs", true),
        ("line1\nline2", "line1*", true),
        ("echo $HOME^", "echo $HOME^", true),
        ("{a|b}", "{?|?}", true),
        ("anything", "*", true),
        ("", "*", true),
        ("x", "", false),
        (".env", "*.env", true),
        ("config/.env.local", "*.env.*", true),
        ("prefix-ls", "ls *", false),
        // Backtracking to the last `*` (the matcher has no regex).
        ("abcbd", "a*bd", true),
        ("abcbdx", "a*bd", false),
        ("a/b/c/d.rs", "a/*/d.rs", true),
        ("a/b/c/d.rs", "*/*/*/*.rs", true),
        ("aaa", "a*a*a*a", false),
        ("héllo wörld", "h?llo *", true),
        ("git", "git *", true),
        ("git ", "git *", true),
        ("gitx", "git *", false),
        ("x", "**", true),
    ];
    for (s, p, want) in cases {
        assert_eq!(wildcard_match(s, p), *want, "wildcard_match({s:?}, {p:?})");
    }
}

#[test]
fn from_config_keeps_order_and_shapes() {
    let v: Value = serde_json::from_str(
        r#"{"bash": {"*": "ask", "git *": "allow", "rm *": "deny"}, "edit": "deny", "*": "ask"}"#,
    )
    .unwrap();
    let r = from_config(&v).unwrap();
    let got: Vec<(&str, &str, Action)> =
        r.0.iter()
            .map(|r| (r.permission.as_str(), r.pattern.as_str(), r.action))
            .collect();
    assert_eq!(
        got,
        vec![
            ("bash", "*", Action::Ask),
            ("bash", "git *", Action::Allow),
            ("bash", "rm *", Action::Deny),
            ("edit", "*", Action::Deny),
            ("*", "*", Action::Ask),
        ]
    );
    assert_eq!(
        from_config(&json!("deny")).unwrap(),
        Ruleset(vec![Rule::new("*", "*", Action::Deny)])
    );
}

#[test]
fn from_config_errors_name_the_key() {
    let cases: &[(Value, &str)] = &[
        (
            json!({"bash": {"rm *": "dney"}}),
            r#"permission.bash."rm *": unknown action "dney""#,
        ),
        (
            json!({"edit": "alow"}),
            r#"permission.edit: unknown action "alow""#,
        ),
        (json!({"edit": 3}), "permission.edit: expected"),
        (json!(["allow"]), "permission: expected an action"),
        (json!("nope"), r#"permission: unknown action "nope""#),
    ];
    for (v, want) in cases {
        let e = from_config(v).unwrap_err().to_string();
        assert!(e.starts_with(want), "{e:?} should start with {want:?}");
    }
}

#[test]
fn home_expansion() {
    let Some(home) = dirs::home_dir() else { return };
    let home = home.to_string_lossy().trim_end_matches('/').to_string();
    assert_eq!(expand_home("~/x/*"), format!("{home}/x/*"));
    assert_eq!(expand_home("$HOME/y"), format!("{home}/y"));
    assert_eq!(expand_home("~"), home);
    assert_eq!(expand_home("a/~/b"), "a/~/b");
    let r = from_config(&json!({"external_directory": {"~/code/*": "allow"}})).unwrap();
    assert_eq!(r.0[0].pattern, format!("{home}/code/*"));
}

#[test]
fn last_match_wins_across_layers() {
    let agent = from_config(&json!({"bash": {"*": "allow", "rm *": "deny"}})).unwrap();
    let session = from_config(&json!({"bash": {"rm -rf /tmp/x": "ask"}})).unwrap();
    let approved = Ruleset(vec![Rule::new("bash", "git *", Action::Allow)]);
    let cases: &[(&str, &str, Action)] = &[
        ("bash", "ls", Action::Allow),
        ("bash", "rm -rf y", Action::Deny),
        ("bash", "rm -rf /tmp/x", Action::Ask),
        ("bash", "git push", Action::Allow),
        ("edit", "a.rs", Action::Ask), // nothing matches → ask
    ];
    for (perm, pat, want) in cases {
        assert_eq!(
            evaluate(perm, pat, &[&agent, &session, &approved]),
            *want,
            "{perm} {pat}"
        );
    }
    // Order of layers matters: the same rules reversed give the agent's deny the last word.
    assert_eq!(
        evaluate("bash", "rm -rf /tmp/x", &[&session, &agent]),
        Action::Deny
    );
    // The permission field itself may be a wildcard.
    let all = from_config(&json!({"*": "deny"})).unwrap();
    assert_eq!(
        evaluate("webfetch", "https://x", &[&agent, &all]),
        Action::Deny
    );
}

#[test]
fn defaults_env_files_ask() {
    let d = default_ruleset_with(Path::new("/data/tool-output"), Path::new("/tmp"));
    let cases: &[(&str, &str, Action)] = &[
        ("read", "src/main.rs", Action::Allow),
        ("read", ".env", Action::Ask),
        ("read", "app/.env", Action::Ask),
        ("read", ".env.local", Action::Ask),
        ("read", ".env.example", Action::Allow),
        ("read", "web/.env.example", Action::Allow),
        ("edit", "x.rs", Action::Allow),
        ("bash", "ls", Action::Allow),
        ("doom_loop", "bash", Action::Ask),
        ("question", "*", Action::Deny),
        ("plan_exit", "*", Action::Deny),
        ("external_directory", "/etc/*", Action::Ask),
        ("external_directory", "/tmp/foo/*", Action::Allow),
        ("external_directory", "/data/tool-output/*", Action::Allow),
    ];
    for (perm, pat, want) in cases {
        assert_eq!(d.evaluate(perm, pat), *want, "{perm} {pat}");
    }
}

#[test]
fn blanket_deny_disables_tool() {
    let tools = [
        "read",
        "edit",
        "write",
        "apply_patch",
        "bash",
        "todowrite",
        "question",
    ];
    let base = default_ruleset_with(Path::new("/o"), Path::new("/t"));
    let user = from_config(&json!({"edit": "deny", "bash": {"rm *": "deny"}, "todowrite": {"*": "deny", "x": "allow"}})).unwrap();
    let merged = Ruleset::merge(&[&base, &user]);
    let got = disabled_tools(&tools, &merged);
    let want: BTreeSet<String> = ["edit", "write", "apply_patch", "question"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
    // A later allow re-enables.
    let again = Ruleset::merge(&[
        &merged,
        &from_config(&json!({"edit": {"*.md": "allow"}})).unwrap(),
    ]);
    assert!(!disabled_tools(&tools, &again).contains("edit"));
    // `"*": deny` disables everything.
    let none = from_config(&json!({"*": "deny"})).unwrap();
    assert_eq!(disabled_tools(&tools, &none).len(), tools.len());
}

#[test]
fn legacy_tools_map_to_edit() {
    let r = from_legacy_tools(&json!({"write": false, "bash": true}), "tools").unwrap();
    assert_eq!(
        r.0,
        vec![
            Rule::new("edit", "*", Action::Deny),
            Rule::new("bash", "*", Action::Allow)
        ]
    );
    let e = from_legacy_tools(&json!({"bash": "yes"}), "agent.x.tools").unwrap_err();
    assert_eq!(
        e.to_string(),
        "agent.x.tools.bash: expected a boolean, got a string"
    );
}

#[test]
fn subagent_inherits_edit_denials() {
    let plan = from_config(
        &json!({"edit": {"*": "deny", ".troupe/plans/*.md": "allow"}, "bash": {"rm *": "deny"}}),
    )
    .unwrap();
    let session = from_config(
        &json!({"external_directory": {"/x/*": "allow"}, "webfetch": "deny", "read": "allow"}),
    )
    .unwrap();
    let sub = from_config(&json!({"*": "allow", "todowrite": "allow"})).unwrap();
    let d = derive_subagent_ruleset(&plan, &session, &sub);
    assert_eq!(
        d.0,
        vec![
            Rule::new("edit", "*", Action::Deny),
            Rule::new("external_directory", "/x/*", Action::Allow),
            Rule::new("webfetch", "*", Action::Deny),
            Rule::new("task", "*", Action::Deny),
        ]
    );
    assert_eq!(evaluate("edit", "src/main.rs", &[&sub, &d]), Action::Deny);
    assert_eq!(evaluate("todowrite", "*", &[&sub, &d]), Action::Allow);
    assert_eq!(evaluate("task", "general", &[&sub, &d]), Action::Deny);
}
