//! End-to-end tests of agents and permissions through the `troupe` binary against the scripted
//! provider (`troupe-testkit`): which tools are offered, plan mode, agent switch reminders, bash
//! sub-command rules, external directories, config errors, markdown agents, instruction files
//! and doom-loop detection.
//!
//! Each test gets its own project (`tests/common/project.rs`): a project dir, a directory
//! outside it, and a home holding the store, an empty global config dir and the binary's own
//! `TMPDIR` (the default ruleset allows `external_directory` under the temp dir, so it must not
//! contain the "outside" directory). The test tools are off: these tests check which tools
//! are offered.
//!
//! The mock picks the script step from the number of assistant messages in the request, so a
//! new session starts again at step 0 of its conversation (selected by `matching`).

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use troupe_testkit::{Conversation, MockServer, RecordedRequest, Script, Step};

mod common;
use common::*;

/// A project whose `troupe.json` is `config`, without the test tools.
fn agents_project(config: Value) -> Project {
    Project::with_config(&config).with_env("TROUPE_TEST_TOOLS", "0")
}

/// A git project (see [`agents_project`]) whose config points at the scripted provider
/// serving `script`; the provider and the project.
async fn git_project(script: Script) -> (MockServer, Project) {
    let server = start_mock(script).await;
    let project = agents_project(mock_config(&server.base_url()));
    project.git();
    (server, project)
}

/// All system-message text of a request, joined.
fn system_text(r: &RecordedRequest) -> String {
    req_messages(r)
        .iter()
        .filter(|m| m["role"] == "system")
        .map(content_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Text of the last user message of a request.
fn last_user_text(r: &RecordedRequest) -> String {
    req_messages(r)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(content_text)
        .unwrap_or_default()
}

/// The whole request body as text (for "never appears" checks).
fn body_text(r: &RecordedRequest) -> String {
    r.body.to_string()
}

/// Runs `troupe <args>` in `project`, which must succeed (`what` names the run in the
/// failure); the tool parts of its session, which must number `count`.
async fn run_tools(project: &Project, args: &[&str], what: &str, count: usize) -> Vec<Value> {
    let out = project.troupe(args, &[]).await;
    assert_success(&out, what);
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), count, "{tools:#?}");
    tools
}

/// Asserts that every one of the tool parts `tools` completed.
fn assert_completed(tools: &[Value]) {
    for t in tools {
        assert_eq!(t["state"]["status"], "completed", "{t:#}");
    }
}

fn tool_error(part: &Value) -> String {
    assert_eq!(part["state"]["status"], "error", "tool part: {part:#}");
    part["state"]["error"].as_str().unwrap_or("").to_string()
}

fn assert_denied(part: &Value) {
    let err = tool_error(part).to_lowercase();
    assert!(
        err.contains("denied") || err.contains("permission") || err.contains("reject"),
        "tool error does not mention a permission denial: {part:#}"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Blanket denials remove tools from the request.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_tool_is_not_offered() {
    let script = Script::single(vec![Step::text("one"), Step::text("two")]);
    let server = start_mock(script).await;
    let url = server.base_url();
    let project = agents_project(mock_config(&url));
    // Runs `troupe run hello` under the `permission` config (which must succeed); how many
    // requests the provider has seen by then, and the tools the last one offered.
    let offered = async |permission: Value| {
        project
            .write_config(&mock_config_with(&url, json!({"permission": permission})).to_string());
        let out = project.troupe(&["run", "hello"], &[]).await;
        assert_success(&out, &format!("run with permission {permission}"));
        let reqs = completions(&server);
        (reqs.len(), reqs.last().expect("a request").offered_tools())
    };

    let (count, tools) = offered(json!({"bash": "deny"})).await;
    assert_eq!(count, 1);
    assert!(
        tools.iter().any(|t| t == "read"),
        "read not offered: {tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t == "bash"),
        "bash offered despite a blanket deny: {tools:?}"
    );

    // Observed rule (agents/src/permission.rs `disabled_tools`): the *last* rule whose
    // permission matches the tool decides, its pattern is ignored for the lookup; the tool is
    // hidden only when that rule is `"*": deny`. Here the last bash rule is
    // `"git status": allow`, so bash stays offered (and `bash ls` would be denied at call time).
    let (count, tools) = offered(json!({"bash": {"*": "deny", "git status": "allow"}})).await;
    assert_eq!(count, 2);
    assert!(
        tools.iter().any(|t| t == "bash"),
        "bash not offered although a later rule allows `git status`: {tools:?}"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 2. Plan mode is read-only except for plan files.
// ---------------------------------------------------------------------------------------------

/// Runs `--agent plan` twice in `project`: a write to `x.txt` (refused) and a write to
/// `.troupe/plans/p.md`; returns the stored tool parts of both runs.
async fn plan_writes(project: &Project, server: &MockServer) -> (Value, Value) {
    let out = project
        .troupe(&["run", "--agent", "plan", "alpha", "write", "x"], &[])
        .await;
    assert_success(&out, "plan run writing x.txt");
    assert!(
        !project.root.join("x.txt").exists(),
        "plan mode wrote x.txt"
    );
    let first = tool_parts(&project.latest_messages().await);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(completions(server).len(), 2);

    let out = project
        .troupe(
            &["run", "--agent", "plan", "beta", "write", "the", "plan"],
            &[],
        )
        .await;
    assert_success(&out, "plan run writing the plan file");
    let second = tool_parts(&project.latest_messages().await);
    assert_eq!(second.len(), 1, "{second:#?}");
    (first[0].clone(), second[0].clone())
}

fn plan_script() -> Script {
    Script::new(vec![
        Conversation::new(vec![
            Step::tool("write", json!({"filePath": "x.txt", "content": "hi"})),
            Step::text("could not write"),
        ])
        .matching("alpha"),
        Conversation::new(vec![
            Step::tool(
                "write",
                json!({"filePath": ".troupe/plans/p.md", "content": "# Plan\n1. do it\n"}),
            ),
            Step::text("plan written"),
        ])
        .matching("beta"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_cannot_write() {
    let (server, project) = git_project(plan_script()).await;
    let (denied, plan) = plan_writes(&project, &server).await;
    assert_eq!(denied["tool"], "write");
    assert_denied(&denied);
    // The refusal reached the model as the tool result.
    let reqs = completions(&server);
    let call_id = denied["callID"].as_str().expect("callID");
    assert!(
        req_messages(&reqs[1])
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == call_id),
        "the denial was not sent back to the model"
    );
    assert_eq!(
        plan["state"]["status"], "completed",
        "plan file write: {plan:#}"
    );
    assert_eq!(
        std::fs::read_to_string(project.root.join(".troupe/plans/p.md")).expect("plan file"),
        "# Plan\n1. do it\n"
    );
    server.shutdown().await;
}

/// Same as [`plan_mode_cannot_write`] in a project that is not a git repository (the common
/// "scratch directory" case): config's worktree is then `/`, but the session actor uses the
/// session directory as the worktree, so the plan-file pattern still matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_plan_file_without_git() {
    let server = start_mock(plan_script()).await;
    let project = agents_project(mock_config(&server.base_url()));
    let (denied, plan) = plan_writes(&project, &server).await;
    assert_denied(&denied);
    assert_eq!(
        plan["state"]["status"], "completed",
        "plan file write: {plan:#}"
    );
    assert!(project.root.join(".troupe/plans/p.md").is_file());
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Plan → build switch carries the history and the build-switch reminder.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_then_build_switch() {
    let plan_text = "Plan: 1. edit main.rs 2. run tests";
    let script = Script::single(vec![Step::text(plan_text), Step::text("done")]);
    let (server, project) = git_project(script).await;

    let out = project
        .troupe(&["run", "--agent", "plan", "make", "a", "plan"], &[])
        .await;
    assert_success(&out, "plan run");
    let out = project
        .troupe(
            &["run", "--agent", "build", "--continue", "now", "do", "it"],
            &[],
        )
        .await;
    assert_success(&out, "build --continue run");

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2);
    // First request: plan reminder in the user message.
    let first_user = last_user_text(&reqs[0]);
    assert!(first_user.contains("make a plan"), "{first_user}");
    assert!(
        first_user.contains("Plan mode is active"),
        "plan reminder missing from the first request: {first_user}"
    );
    // Second request: the whole first turn, then the new user message with the switch reminder.
    let convo = conversation(&reqs[1]);
    assert_eq!(
        convo.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
        ["user", "assistant", "user"],
        "{convo:#?}"
    );
    assert!(convo[0].1.contains("make a plan"), "{convo:#?}");
    assert!(convo[1].1.contains(plan_text), "{convo:#?}");
    let last = &convo[2].1;
    assert!(last.contains("now do it"), "{last}");
    assert!(
        last.contains("The operating mode changed from plan to build"),
        "build-switch reminder missing: {last}"
    );
    assert!(
        !last.contains("Plan mode is active"),
        "plan reminder still sent in build mode: {last}"
    );

    // Stored: the second user message has the reminder as a synthetic text part.
    let messages = project.latest_messages().await;
    let roles: Vec<&str> = messages.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    let texts = parts_of_type(&messages[2], "text");
    let synthetic: Vec<&&Value> = texts.iter().filter(|p| p["synthetic"] == true).collect();
    assert_eq!(synthetic.len(), 1, "{:#}", messages[2]);
    assert!(
        synthetic[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("Read-only mode is over"),
        "{:#}",
        synthetic[0]
    );
    assert!(
        texts
            .iter()
            .any(|p| p["text"] == "now do it" && p["synthetic"] != true),
        "{:#}",
        messages[2]
    );
    assert_eq!(messages[1]["info"]["agent"], "plan", "{:#}", messages[1]);
    assert_eq!(messages[3]["info"]["agent"], "build", "{:#}", messages[3]);
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Bash rules apply per sub-command.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_subcommand_rules() {
    let script = Script::single(vec![
        Step::tool(
            "bash",
            json!({"command": "cd sub && rm -rf victim", "description": "delete"}),
        ),
        Step::tool("bash", json!({"command": "ls", "description": "list"})),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    let project = agents_project(mock_config_with(
        &server.base_url(),
        json!({"permission": {"bash": {"*": "allow", "rm *": "deny"}}}),
    ));
    project.write_file("sub/victim/keep.txt", "precious");

    let out = project.troupe(&["run", "clean", "up"], &[]).await;
    assert_success(&out, "run");
    assert!(
        project.root.join("sub/victim/keep.txt").is_file(),
        "rm ran despite `rm *: deny`"
    );
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), 2, "{tools:#?}");
    assert_denied(&tools[0]);
    assert!(
        tool_error(&tools[0]).contains("rm"),
        "denial does not name the rule: {:#}",
        tools[0]
    );
    assert_eq!(tools[1]["state"]["status"], "completed", "{:#}", tools[1]);
    assert!(
        tools[1]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("sub"),
        "{:#}",
        tools[1]
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 5. Paths outside the project ask `external_directory`.
// ---------------------------------------------------------------------------------------------

const SECRET: &str = "s3cr3t-payload-91c4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_directory_asks() {
    // Each run is a new session, so both start at step 0 of the same conversation.
    let script = Script::single(vec![
        Step::tool("read", json!({"filePath": "../outside/secret.txt"})),
        Step::tool(
            "bash",
            json!({"command": "cat ../outside/secret.txt", "description": "cat"}),
        ),
        Step::text("finished"),
    ]);
    let (server, project) = git_project(script).await;
    std::fs::write(project.outside().join("secret.txt"), SECRET).expect("secret");

    let tools = run_tools(&project, &["run", "peek"], "default-policy run", 2).await;
    for t in &tools {
        assert_denied(t);
    }
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert!(
            !body_text(r).contains(SECRET),
            "secret reached the provider under the deny policy"
        );
    }

    let tools = run_tools(
        &project,
        &["run", "--permission", "allow", "peek", "again"],
        "allow-policy run",
        2,
    )
    .await;
    assert_completed(&tools);
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 6);
    for (i, what) in [(4, "read"), (5, "bash cat")] {
        let call_id = tools[i - 4]["callID"].as_str().expect("callID");
        let result = req_messages(&reqs[i])
            .into_iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .unwrap_or_else(|| panic!("request {i} lacks the {what} result"));
        assert!(
            content_text(&result).contains(SECRET),
            "the allowed {what}'s content is not in the next request"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_directory_bash_cd() {
    let project = agents_project(mock_config("http://127.0.0.1:1/v1"));
    project.git();
    let outside = project.outside();
    std::fs::write(outside.join("secret.txt"), SECRET).expect("secret");
    let cmd = format!("cd {} && cat secret.txt", outside.display());
    // Both runs are new sessions and start at step 0.
    let script = Script::single(vec![
        Step::tool("bash", json!({"command": cmd, "description": "cd out"})),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());

    let tools = run_tools(&project, &["run", "peek"], "default-policy run", 1).await;
    assert_denied(&tools[0]);
    assert!(
        completions(&server)
            .iter()
            .all(|r| !body_text(r).contains(SECRET)),
        "secret reached the provider under the deny policy"
    );

    let out = project
        .troupe(&["run", "--permission", "allow", "peek"], &[])
        .await;
    assert_success(&out, "allow-policy run");
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools[0]["state"]["status"], "completed", "{:#}", tools[0]);
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 4);
    assert!(
        body_text(&reqs[3]).contains(SECRET),
        "the allowed cat's output is not in the next request"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 6. Config errors and the agent / debug commands.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_name_file_line_and_key() {
    let project = agents_project(mock_config("http://127.0.0.1:1/v1"));

    // Bad JSON on line 3.
    project.write_config("{\n  \"model\": \"mock/mock-model\",\n  \"agent\": nope,\n}\n");
    let out = project.troupe(&["run", "hi"], &[]).await;
    let line = assert_one_line_failure(&out, "bad JSON");
    assert!(line.contains("troupe.json"), "{line}");
    assert!(
        line.contains("troupe.json:3") || line.contains("line 3"),
        "line number missing: {line}"
    );
    let out = project.troupe(&["agent", "list"], &[]).await;
    assert_one_line_failure(&out, "agent list with bad JSON");

    // Unknown agent mode.
    let base = mock_config("http://127.0.0.1:1/v1");
    let mut c = base.clone();
    c["agent"] = json!({"x": {"mode": "primry"}});
    project.write_config(&c.to_string());
    let out = project.troupe(&["run", "hi"], &[]).await;
    let line = assert_one_line_failure(&out, "bad agent mode");
    assert!(line.contains("agent.x.mode"), "{line}");
    assert!(line.contains("primry"), "{line}");

    // Unknown permission action.
    let mut c = base.clone();
    c["permission"] = json!({"bash": "dney"});
    project.write_config(&c.to_string());
    let out = project.troupe(&["run", "hi"], &[]).await;
    let line = assert_one_line_failure(&out, "bad permission action");
    assert!(line.contains("permission.bash"), "{line}");
    assert!(line.contains("dney"), "{line}");
    let out = project.troupe(&["agent", "show", "build"], &[]).await;
    let line = assert_one_line_failure(&out, "agent show with bad permission");
    assert!(line.contains("permission.bash"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_list_show_and_debug_config() {
    let project = agents_project(mock_config("http://127.0.0.1:1/v1"));
    // No config at all: an empty directory next to the project.
    let empty = project.base().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");

    // The names `troupe agent list --format json <extra>` prints in `empty` (which must
    // succeed).
    let listed = async |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["agent", "list", "--format", "json"];
        args.extend_from_slice(extra);
        let out = project.troupe_in(&empty, &args, &[]).await;
        assert_success(&out, &format!("agent list {extra:?} (no config)"));
        let list: Value = serde_json::from_slice(&out.stdout).expect("agent list JSON");
        list.as_array()
            .expect("array")
            .iter()
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect()
    };
    let names = listed(&[]).await;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for n in ["build", "plan", "explore", "general"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    for n in ["compaction", "title", "summary"] {
        assert!(!names.contains(&n), "hidden {n} listed: {names:?}");
    }
    let names = listed(&["--all"]).await;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for n in ["build", "plan", "compaction", "title", "summary"] {
        assert!(names.contains(&n), "{n} missing from --all {names:?}");
    }
    // Plain listing too.
    let out = project.troupe_in(&empty, &["agent", "list"], &[]).await;
    assert_success(&out, "agent list plain");
    let plain = text(&out.stdout);
    assert!(
        plain.contains("plan") && !plain.contains("compaction"),
        "{plain}"
    );

    // `agent show plan`: JSON with its ruleset; edit denied except plan files.
    let out = project
        .troupe_in(&empty, &["agent", "show", "plan"], &[])
        .await;
    assert_success(&out, "agent show plan");
    let plan: Value = serde_json::from_slice(&out.stdout).expect("agent show JSON");
    assert_eq!(plan["name"], "plan");
    let rules = plan["permission"].as_array().expect("permission rules");
    assert!(
        rules
            .iter()
            .any(|r| r["permission"] == "edit" && r["pattern"] == "*" && r["action"] == "deny"),
        "{rules:#?}"
    );
    assert!(
        rules.iter().any(|r| r["permission"] == "edit"
            && r["pattern"] == ".troupe/plans/*.md"
            && r["action"] == "allow"),
        "{rules:#?}"
    );
    let out = project
        .troupe_in(&empty, &["agent", "show", "nosuch"], &[])
        .await;
    let line = assert_one_line_failure(&out, "agent show unknown");
    assert!(line.contains("nosuch"), "{line}");

    // `debug config` names where `model` came from.
    let out = project.troupe(&["debug", "config"], &[]).await;
    assert_success(&out, "debug config");
    let dbg = text(&out.stdout);
    let model_line = dbg
        .lines()
        .find(|l| l.starts_with("model:"))
        .unwrap_or_else(|| panic!("no `model:` origin line:\n{dbg}"));
    assert!(model_line.contains("troupe.json"), "{model_line}");
}

// ---------------------------------------------------------------------------------------------
// 7. Markdown agents.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_agent() {
    let body = "You are Reviewer-7, a meticulous code reviewer. Never edit files.";
    let server = mock(vec![Step::text("looks fine")]).await;
    let project = agents_project(mock_config(&server.base_url()));
    project.git();
    project.write_file(
        ".troupe/agent/reviewer.md",
        &format!(
            "---\ndescription: Reviews code for bugs\nmode: primary\ntemperature: 0.3\npermission:\n  edit: deny\n---\n{body}\n"
        ),
    );

    let out = project
        .troupe(&["agent", "list", "--format", "json"], &[])
        .await;
    assert_success(&out, "agent list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("agent list JSON");
    let reviewer = list
        .as_array()
        .expect("array")
        .iter()
        .find(|a| a["name"] == "reviewer")
        .unwrap_or_else(|| panic!("reviewer not listed: {list:#}"))
        .clone();
    assert_eq!(reviewer["description"], "Reviews code for bugs");
    assert_eq!(reviewer["mode"], "primary");

    let out = project
        .troupe(&["run", "--agent", "reviewer", "review", "please"], &[])
        .await;
    assert_success(&out, "run --agent reviewer");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 1);
    let sys = system_text(&reqs[0]);
    assert!(sys.contains(body), "body not in the system prompt:\n{sys}");
    let t = reqs[0].body["temperature"].as_f64();
    assert!(
        t.is_some_and(|t| (t - 0.3).abs() < 1e-9),
        "temperature: {:?}",
        reqs[0].body["temperature"]
    );
    // `edit: deny` hides the edit tools.
    let tools = reqs[0].offered_tools();
    assert!(tools.iter().any(|t| t == "read"), "{tools:?}");
    for t in ["edit", "write"] {
        assert!(!tools.iter().any(|x| x == t), "{t} offered: {tools:?}");
    }
    let messages = project.latest_messages().await;
    assert_eq!(
        messages[1]["info"]["agent"], "reviewer",
        "{:#}",
        messages[1]
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 8. Instruction files.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_from_agents_md() {
    let rule = "Always answer in haiku (rule 4f2a).";
    let server = mock(vec![Step::text("ok")]).await;
    let project = agents_project(mock_config(&server.base_url()));
    project.git();
    project.write_file("AGENTS.md", &format!("# Rules\n{rule}\n"));

    let out = project.troupe(&["run", "hi"], &[]).await;
    assert_success(&out, "run");
    let reqs = completions(&server);
    let sys = system_text(&reqs[0]);
    let agents_md = project.root.join("AGENTS.md");
    let header = format!("Instructions from: {}", agents_md.display());
    let at = sys
        .find(&header)
        .unwrap_or_else(|| panic!("no `{header}` in the system prompt:\n{sys}"));
    assert!(
        sys[at..].contains(rule),
        "AGENTS.md content not after its header:\n{sys}"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 9. Doom loop.
// ---------------------------------------------------------------------------------------------

/// A git project holding `a.txt` whose model reads `a.txt` three times in a row and then
/// answers "finally done"; its provider.
async fn doom_project() -> (MockServer, Project) {
    let read = || Step::tool("read", json!({"filePath": "a.txt"}));
    let script = Script::single(vec![read(), read(), read(), Step::text("finally done")]);
    let (server, project) = git_project(script).await;
    project.write_file("a.txt", "alpha\n");
    (server, project)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doom_loop_is_refused_without_a_terminal() {
    let (server, project) = doom_project().await;

    let out = project.troupe(&["run", "read", "a"], &[]).await;
    let line = assert_one_line_failure(&out, "doom loop");
    assert!(line.to_lowercase().contains("doom loop"), "{line}");
    let messages = project.latest_messages().await;
    let tools = tool_parts(&messages);
    assert_eq!(tools.len(), 3, "{tools:#?}");
    assert_eq!(tools[0]["state"]["status"], "completed");
    assert_eq!(tools[1]["state"]["status"], "completed");
    assert!(
        tool_error(&tools[2]).to_lowercase().contains("doom loop"),
        "{:#}",
        tools[2]
    );
    let last = messages.last().expect("assistant");
    assert_eq!(last["info"]["error"]["name"], "DoomLoopError", "{last:#}");
    assert_eq!(
        completions(&server).len(),
        3,
        "the loop went on after the refused doom loop"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doom_loop_allowed_by_policy_finishes() {
    let (server, project) = doom_project().await;

    let out = project
        .troupe(&["run", "--permission", "allow", "read", "a"], &[])
        .await;
    assert_success(&out, "doom loop allowed");
    assert!(
        text(&out.stdout).contains("finally done"),
        "{}",
        text(&out.stdout)
    );
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), 3);
    assert_completed(&tools);
    assert_eq!(completions(&server).len(), 4);
    server.shutdown().await;
}

/// Runs each of `commands` as one bash call in a single turn under
/// `bash: {"*": allow, "rm *": deny}`; each command tries to delete its own `v<i>/` directory.
/// Returns, per command, (tool status, whether `v<i>` still exists).
async fn rm_variants(commands: &[&str]) -> Vec<(String, bool)> {
    let mut steps: Vec<Step> = commands
        .iter()
        .map(|c| Step::tool("bash", json!({"command": c, "description": "variant"})))
        .collect();
    steps.push(Step::text("done"));
    let server = mock(steps).await;
    let project = agents_project(mock_config_with(
        &server.base_url(),
        json!({"permission": {"bash": {"*": "allow", "rm *": "deny"}}}),
    ));
    for i in 1..=commands.len() {
        project.write_file(&format!("v{i}/keep.txt"), "precious");
    }
    let out = project.troupe(&["run", "variants"], &[]).await;
    assert_success(&out, "run");
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), commands.len(), "{tools:#?}");
    server.shutdown().await;
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            (
                t["state"]["status"].as_str().unwrap_or("").to_string(),
                project.root.join(format!("v{}", i + 1)).exists(),
            )
        })
        .collect()
}

/// Runs `commands` as [`rm_variants`] does and asserts that each call failed and its
/// target is still there.
async fn assert_rm_denied(commands: &[&str]) {
    let got = rm_variants(commands).await;
    let leaks: Vec<String> = commands
        .iter()
        .zip(&got)
        .filter(|(_, (status, exists))| status != "error" || !exists)
        .map(|(c, (status, exists))| format!("{c:?}: status {status}, target kept: {exists}"))
        .collect();
    assert!(
        leaks.is_empty(),
        "`rm *: deny` did not stop:\n{}",
        leaks.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_deny_applies_to_every_list_member() {
    assert_rm_denied(&[
        "ls; rm -rf v1",
        "false || rm -rf v2",
        "(rm -rf v3)",
        "ls\nrm -rf v4",
        "ls | rm -rf v5",
    ])
    .await;
}

/// OpenCode checks every `command` node of the tree-sitter parse (reference §6.4), including
/// commands inside `$(…)`, backticks, `{ …; }` groups and `if`/`while` bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_deny_applies_to_nested_commands() {
    assert_rm_denied(&[
        "echo $(rm -rf v1)",
        "echo `rm -rf v2`",
        "{ rm -rf v3; }",
        "if true; then rm -rf v4; fi",
        "for d in x; do rm -rf v5; done",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_directory_through_a_symlink() {
    let script = Script::single(vec![
        Step::tool("read", json!({"filePath": "link/secret.txt"})),
        Step::tool("grep", json!({"pattern": "s3cr3t", "path": "link"})),
        Step::text("done"),
    ]);
    let (server, project) = git_project(script).await;
    std::fs::write(project.outside().join("secret.txt"), SECRET).expect("secret");
    std::os::unix::fs::symlink(project.outside(), project.root.join("link")).expect("symlink");

    let tools = run_tools(&project, &["run", "peek"], "run", 2).await;
    for t in &tools {
        assert_denied(t);
    }
    assert!(
        completions(&server)
            .iter()
            .all(|r| !body_text(r).contains(SECRET)),
        "the secret behind the symlink reached the provider"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Issue 11: permissions that fail closed.
// ---------------------------------------------------------------------------------------------

fn git_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git")
}

/// Runs `table` (one bash call per row, then `ls d`) through `troupe run --permission deny`
/// with `bash: {"*": "allow", "rm *": "deny", "git push *": "deny"}` and
/// `external_directory: "deny"` in a git project with a bare remote, and checks that `d`
/// still exists, none of `outside_files` (relative to the directory holding the project)
/// was created, the remote received no push, each refused part's error contains its text,
/// and the turn went on (the last command ran). Returns the tool parts.
async fn refused_under_issue_rules(table: &[(&str, &str)], outside_files: &[&str]) -> Vec<Value> {
    let mut steps: Vec<Step> = table
        .iter()
        .map(|(c, _)| Step::tool("bash", json!({"command": c, "description": "try"})))
        .collect();
    steps.push(Step::tool(
        "bash",
        json!({"command": "ls d", "description": "still there"}),
    ));
    steps.push(Step::text("done"));
    let server = mock(steps).await;
    let project = agents_project(mock_config_with(
        &server.base_url(),
        json!({"permission": {
            "bash": {"*": "allow", "rm *": "deny", "git push *": "deny"},
            "external_directory": "deny",
        }}),
    ));
    project.write_file("d/keep.txt", "precious");
    project.write_file(".gitignore", "troupe.json\n");
    let remote = project.base().join("remote.git");
    assert!(
        git_in(&project.base(), &["init", "-q", "--bare", "remote.git"])
            .status
            .success()
    );
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["add", "-A"],
        vec!["commit", "-q", "-m", "init"],
    ] {
        let out = git_in(&project.root, &args);
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    }
    let remote_s = remote.to_string_lossy().to_string();
    assert!(
        git_in(&project.root, &["remote", "add", "origin", &remote_s])
            .status
            .success()
    );

    let out = project
        .troupe(&["run", "--permission", "deny", "try", "them"], &[])
        .await;
    assert_success(&out, "run with --permission deny");

    assert!(project.root.join("d/keep.txt").is_file(), "d was deleted");
    for f in outside_files {
        assert!(!project.base().join(f).exists(), "{f} was created outside");
    }
    let refs = git_in(&remote, &["for-each-ref"]);
    assert!(
        text(&refs.stdout).trim().is_empty(),
        "the bare remote received a push: {}",
        text(&refs.stdout)
    );
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), table.len() + 1, "{tools:#?}");
    for (part, (cmd, says)) in tools.iter().zip(table) {
        assert_eq!(part["state"]["input"]["command"], *cmd);
        let err = tool_error(part);
        assert!(err.contains(says), "{cmd:?}: {err:?} lacks {says:?}");
    }
    let last = &tools[table.len()];
    assert_eq!(last["state"]["status"], "completed", "{last:#}");
    server.shutdown().await;
    tools
}

/// The issue's table: nothing outside the project is created, `d` still exists, the bare
/// remote receives no push, each refused part names what refused it, and the turn goes on
/// after each refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_table_is_refused_and_names_the_rule() {
    // (command, text its tool error must contain)
    let table: &[(&str, &str)] = &[
        ("/bin/rm -rf d", "denied by rule \"rm *\": /bin/rm -rf d"),
        ("\\rm -rf d", "denied by rule \"rm *\""),
        ("\"rm\" -rf d", "denied by rule \"rm *\""),
        (
            "$(echo rm) -rf d",
            "the command word `$(echo rm)` is not a literal",
        ),
        (
            "git -C . push origin main",
            "denied by rule \"git push *\": git -C . push origin main",
        ),
        (
            "echo X > ../outside.txt",
            "external_directory: denied by rule \"*\"",
        ),
        (
            "printf x | tee ../outside2.txt",
            "external_directory: denied by rule \"*\"",
        ),
    ];
    let tools = refused_under_issue_rules(table, &["outside.txt", "outside2.txt"]).await;
    // The ask (not a literal) was refused because nobody could approve it, saying so.
    assert!(
        tool_error(&tools[3]).contains("non-interactive"),
        "{:#}",
        tools[3]
    );
}

/// The hostile probe's most dangerous bypasses (issue 11, second round): a `cd` that fails
/// leaves `..` outside, a push renamed by an alias, inline interpreter code, a script written
/// and run in one call, and a link made in the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_probe_bypasses_are_refused() {
    let table: &[(&str, &str)] = &[
        (
            "cd nope; echo x > ../outside/x1.txt",
            "external_directory: denied by rule \"*\"",
        ),
        ("git config alias.p push; git p origin main", "a git alias"),
        (
            "python3 -c 'import shutil; shutil.rmtree(\"d\")'",
            "runs inline code",
        ),
        (
            "echo 'rm -rf d' > s.sh; bash s.sh",
            "a file written by the same command",
        ),
        (
            "ln -s .. l; echo x > l/outside/x2.txt",
            "external_directory: denied by rule \"*\"",
        ),
    ];
    let tools = refused_under_issue_rules(table, &["outside/x1.txt", "outside/x2.txt"]).await;
    for t in &tools[..table.len()] {
        assert_eq!(t["state"]["status"], "error", "{t:#}");
    }
}

fn plan_bash_script() -> Script {
    Script::single(vec![
        Step::tool("write", json!({"filePath": "src.txt", "content": "hi"})),
        Step::tool(
            "bash",
            json!({"command": "echo x > notes.txt", "description": "redirect"}),
        ),
        Step::tool(
            "bash",
            json!({"command": "printf y | tee -a old.txt", "description": "tee"}),
        ),
        Step::text("done"),
    ])
}

/// With the common global `"permission": {"edit": "allow"}`, plan mode still cannot write or
/// redirect into a project file; the refusal names the guarantee and the overridden rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_guarantee_beats_global_edit_allow() {
    let server = start_mock(plan_bash_script()).await;
    let project = agents_project(mock_config_with(
        &server.base_url(),
        json!({"permission": {"edit": "allow"}}),
    ));
    project.git();
    project.write_file("old.txt", "old\n");
    let out = project
        .troupe(&["run", "--agent", "plan", "write", "things"], &[])
        .await;
    assert_success(&out, "plan run");
    assert!(!project.root.join("src.txt").exists(), "plan wrote src.txt");
    assert!(
        !project.root.join("notes.txt").exists(),
        "plan redirected into notes.txt"
    );
    assert_eq!(
        std::fs::read_to_string(project.root.join("old.txt")).unwrap(),
        "old\n",
        "plan appended to old.txt"
    );
    let tools = tool_parts(&project.latest_messages().await);
    assert_eq!(tools.len(), 3, "{tools:#?}");
    for t in &tools {
        let err = tool_error(t);
        assert!(
            err.contains("edit: denied by rule \"*\" (a guarantee of the agent, overriding edit \"*\": allow)"),
            "{err}"
        );
    }
    server.shutdown().await;
}

/// `agent.plan.permission.edit: "allow"` is the explicit per-agent choice that can loosen it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_per_agent_edit_allow_writes() {
    let server = start_mock(plan_bash_script()).await;
    let project = agents_project(mock_config_with(
        &server.base_url(),
        json!({"permission": {"edit": "deny"}, "agent": {"plan": {"permission": {"edit": "allow"}}}}),
    ));
    project.git();
    project.write_file("old.txt", "old\n");
    let tools = run_tools(
        &project,
        &["run", "--agent", "plan", "write", "things"],
        "plan run",
        3,
    )
    .await;
    assert_completed(&tools);
    assert_eq!(
        std::fs::read_to_string(project.root.join("src.txt")).unwrap(),
        "hi"
    );
    assert_eq!(
        std::fs::read_to_string(project.root.join("notes.txt")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.root.join("old.txt")).unwrap(),
        "old\ny"
    );
    server.shutdown().await;
}

/// `troupe agent show plan` names the rule that decides `edit` and says that the global rule
/// was overridden by the agent's guarantee.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_show_plan_names_the_deciding_edit_rule() {
    let project = agents_project(mock_config_with(
        "http://127.0.0.1:1/v1",
        json!({"permission": {"edit": "allow"}}),
    ));
    let out = project.troupe(&["agent", "show", "plan"], &[]).await;
    assert_success(&out, "agent show plan");
    let v: Value = serde_json::from_slice(&out.stdout).expect("agent show JSON");
    let edit = &v["decisions"]["edit"];
    assert_eq!(edit["action"], "deny", "{edit:#}");
    assert_eq!(edit["rule"], "edit \"*\": deny", "{edit:#}");
    assert_eq!(edit["guarantee"], true, "{edit:#}");
    assert_eq!(edit["overrides"], "edit \"*\": allow", "{edit:#}");
    assert!(
        edit["note"].as_str().unwrap_or("").contains("overridden"),
        "{edit:#}"
    );
    // build follows the global rule, nothing overridden.
    let out = project.troupe(&["agent", "show", "build"], &[]).await;
    let v: Value = serde_json::from_slice(&out.stdout).expect("agent show JSON");
    assert_eq!(v["decisions"]["edit"]["action"], "allow");
    assert!(v["decisions"]["edit"].get("overrides").is_none());
}
