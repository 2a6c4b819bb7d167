use super::*;

#[test]
fn arguments_split_on_spaces_and_keep_quoted_strings() {
    assert_eq!(
        split_arguments(r#"src/a.rs "two words" 'single one' [Image 1] x"#),
        ["src/a.rs", "two words", "single one", "[Image 1]", "x"]
    );
    assert!(split_arguments("   ").is_empty());
}

#[test]
fn numbered_placeholders_and_the_last_takes_the_rest() {
    assert_eq!(
        fill_template("fix $1 in $2", "bug src/a.rs src/b.rs"),
        "fix bug in src/a.rs src/b.rs"
    );
    assert_eq!(fill_template("a=$1 b=$2", "x"), "a=x b=");
    assert_eq!(fill_template("$1 and $1", "x y"), "x y and x y");
    assert_eq!(fill_template("$2 then $1", "a b c"), "b c then a");
}

#[test]
fn arguments_placeholder_and_appending() {
    assert_eq!(
        fill_template("review $ARGUMENTS now", "a \"b c\""),
        "review a \"b c\" now"
    );
    assert_eq!(
        fill_template("first $1; all: $ARGUMENTS", "p q"),
        "first p q; all: p q"
    );
    assert_eq!(
        fill_template("just do it", "extra words"),
        "just do it\n\nextra words"
    );
    assert_eq!(fill_template("just do it", "  "), "just do it");
}

#[test]
fn shell_snippets_are_found_in_order() {
    let t = "branch: !`git branch --show-current` files: !`ls` not `this`";
    let s = shell_snippets(t);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].1, "git branch --show-current");
    assert_eq!(&t[s[0].0.clone()], "!`git branch --show-current`");
    assert_eq!(s[1].1, "ls");
}

fn config(json: &str) -> troupe_config::LoadedConfig {
    troupe_config::LoadedConfig::from_config(
        troupe_config::Config::from_jsonc("troupe.json", json).unwrap(),
    )
}

/// The error of loading commands from the config `json` alone (no project, no global
/// directory), as text.
fn load_error(json: &str) -> String {
    CommandSet::load(&config(json), &[], None)
        .unwrap_err()
        .to_string()
}

#[test]
fn commands_load_from_global_config_and_project_later_wins() {
    let global = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(global.path().join("command")).unwrap();
    std::fs::write(
        global.path().join("command/hello.md"),
        "---\ndescription: say hello\n---\nSay hello to $1.\n",
    )
    .unwrap();
    std::fs::write(global.path().join("command/shared.md"), "global version").unwrap();
    let cmds = project.path().join(".troupe/commands/git");
    std::fs::create_dir_all(&cmds).unwrap();
    std::fs::write(
        cmds.join("commit.md"),
        "---\nagent: plan\nsubtask: true\nmodel: mock/m\n---\nCommit: $ARGUMENTS\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join(".troupe/commands/shared.md"),
        "project version",
    )
    .unwrap();
    let cfg = config(
        r#"{"command": {"cfg": {"template": "from config", "description": "c"},
                                      "shared": {"template": "config version"}}}"#,
    );
    let set = CommandSet::load(&cfg, &[project.path().to_path_buf()], Some(global.path())).unwrap();
    let names: Vec<&str> = set.list().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cfg", "git/commit", "hello", "shared"]);
    let hello = set.get("hello").unwrap();
    assert_eq!(hello.description.as_deref(), Some("say hello"));
    assert_eq!(hello.template, "Say hello to $1.");
    let commit = set.get("git/commit").unwrap();
    assert_eq!(commit.agent.as_deref(), Some("plan"));
    assert_eq!(commit.subtask, Some(true));
    assert_eq!(commit.model.as_deref(), Some("mock/m"));
    assert_eq!(set.get("shared").unwrap().template, "project version");
    let e = set.require("nope").unwrap_err();
    assert!(
        e.contains("\"nope\"") && e.contains("cfg, git/commit, hello, shared"),
        "{e}"
    );
}

#[test]
fn bad_commands_are_errors_naming_the_place() {
    let e = load_error(r#"{"command": {"x": {"templat": "t"}}}"#);
    assert!(
        e.contains("command \"x\"") && e.contains("unknown key \"templat\""),
        "{e}"
    );
    let e = load_error(r#"{"command": {"x": {"description": "d"}}}"#);
    assert!(e.contains("has no template"), "{e}");
    let e = load_error(r#"{"command": {"x": {"template": "t", "subtask": "yes"}}}"#);
    assert!(e.contains("\"subtask\" must be true or false"), "{e}");
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join(".troupe/command")).unwrap();
    std::fs::write(
        d.path().join(".troupe/command/bad.md"),
        "---\nagent: [\n---\nbody",
    )
    .unwrap();
    let e = CommandSet::load(&config("{}"), &[d.path().to_path_buf()], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.md"), "{e}");
}
