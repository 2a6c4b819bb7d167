//! End-to-end tests of prompt inputs beyond plain text (issue 22): `@file` references read
//! through the `read` tool, `@agent` mentions, attached images, and commands (markdown files
//! and the `command` config key, `troupe run --command`, `GET /command`, `POST
//! /session/{id}/command`), through the real binary against the scripted provider.

use serde_json::{Value, json};
use troupe_testkit::{Conversation, MockServer, Script, Step};

mod common;
use common::*;

/// The text the model got as the last user message of request `i`.
fn user_text(server: &MockServer, i: usize) -> String {
    let req = &completions(server)[i];
    let msgs = req_messages(req);
    let user = msgs
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    content_text(user)
}

/// The stored messages of the only root session (a `task` call adds child sessions).
async fn root_messages(p: &Project) -> Vec<Value> {
    let sessions = p.sessions().await;
    let roots: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["parentID"].is_null())
        .collect();
    assert_eq!(roots.len(), 1, "one root session: {sessions:#?}");
    p.session_messages(roots[0]["id"].as_str().expect("id"))
        .await
}

/// The parts of the root session's first user message.
async fn first_user_parts(p: &Project) -> Vec<Value> {
    let messages = root_messages(p).await;
    let user = messages
        .iter()
        .find(|m| role(m) == "user")
        .expect("a user message");
    user["parts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_file_is_read_through_the_read_tool_and_a_missing_one_is_reported() {
    let server = mock(vec![Step::text("read them")]).await;
    let p = CliProject::new(&server.base_url());
    p.write_file("README.md", "project codename: heron\n");
    p.write_file("notes.txt", "line one\nline two\nline three\nline four\n");
    let out = p
        .troupe(
            &[
                "run",
                "summarize @README.md, lines @notes.txt#L2-3 and @missing.txt please",
            ],
            &[],
        )
        .await;
    assert_success(&out, "run with @ references");
    let sent = user_text(&server, 0);
    let readme = p.root.join("README.md").display().to_string();
    assert!(
        sent.starts_with("summarize @README.md, lines @notes.txt#L2-3 and @missing.txt please"),
        "{sent}"
    );
    assert!(
        sent.contains(&format!(
            "Called the Read tool with the following input: {}",
            json!({"filePath": readme})
        )),
        "{sent}"
    );
    assert!(sent.contains("project codename: heron"), "{sent}");
    assert!(
        sent.contains("line two") && sent.contains("line three"),
        "{sent}"
    );
    assert!(
        !sent.contains("line one") && !sent.contains("line four"),
        "the range keeps lines 2-3 only: {sent}"
    );
    assert!(
        sent.contains("Read tool failed to read")
            && sent.contains("missing.txt")
            && sent.contains("not found"),
        "{sent}"
    );
    let parts = first_user_parts(&p).await;
    let files: Vec<&Value> = parts.iter().filter(|p| p["type"] == "file").collect();
    assert_eq!(files.len(), 2, "{parts:#?}");
    assert_eq!(files[0]["mime"], "text/plain");
    assert_eq!(files[0]["url"], format!("file://{readme}"));
    assert!(
        files[1]["url"]
            .as_str()
            .unwrap_or("")
            .ends_with("notes.txt?start=2&end=3"),
        "{parts:#?}"
    );
    // The synthetic parts are marked so.
    assert!(
        parts
            .iter()
            .filter(|p| p["type"] == "text")
            .skip(1)
            .all(|p| p["synthetic"] == true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_file_outside_the_project_is_refused_without_approval() {
    let server = mock(vec![Step::text("ok")]).await;
    let p = CliProject::new(&server.base_url());
    std::fs::write(p.outside().join("secret.txt"), "the secret is 42\n").expect("secret");
    let reference = format!("@{}", p.outside().join("secret.txt").display());
    let out = p
        .troupe(&["run", &format!("what is in {reference}")], &[])
        .await;
    assert_success(&out, "run with an outside reference");
    let sent = user_text(&server, 0);
    assert!(!sent.contains("the secret is 42"), "{sent}");
    assert!(sent.contains("Read tool failed to read"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_directory_is_listed_and_at_agent_hands_work_to_the_subagent() {
    // The mock picks a step by the number of assistant messages in the request, so the
    // subagent's session (whose prompt is CHILD-FIND) gets a conversation of its own.
    let server = start_mock(Script::new(vec![
        Conversation::new(vec![Step::text("it is in src/config.rs")]).matching("CHILD-FIND"),
        Conversation::new(vec![
            Step::tool(
                "task",
                json!({"description": "find loader", "prompt": "CHILD-FIND the config loader", "subagent_type": "explore"}),
            ),
            Step::text("the loader is in src/config.rs"),
        ]),
    ])).await;
    let p = CliProject::new(&server.base_url());
    p.write_file("src/config.rs", "fn load() {}\n");
    let out = p
        .troupe(&["run", "@explore find the config loader in @src/"], &[])
        .await;
    assert_success(&out, "run with an @agent mention");
    let sent = user_text(&server, 0);
    assert!(
        sent.contains("config.rs"),
        "the directory is listed: {sent}"
    );
    assert!(
        sent.contains(
            "Use the above message and context to generate a prompt and call the task tool with subagent: explore"
        ),
        "{sent}"
    );
    let parts = first_user_parts(&p).await;
    let agent = parts
        .iter()
        .find(|p| p["type"] == "agent")
        .expect("an agent part");
    assert_eq!(agent["name"], "explore");
    assert_eq!(agent["source"]["value"], "@explore");
    assert!(
        parts
            .iter()
            .any(|p| p["type"] == "file" && p["mime"] == "application/x-directory")
    );
    let messages = root_messages(&p).await;
    let task = tool_parts(&messages)
        .into_iter()
        .find(|t| t["tool"] == "task")
        .expect("a task call");
    assert_eq!(task["state"]["input"]["subagent_type"], "explore");
    assert_eq!(task["state"]["status"], "completed");
    assert!(
        task["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("it is in src/config.rs"),
        "{task:#?}"
    );
    assert_eq!(completions(&server).len(), 3, "parent, child, parent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_image_goes_to_a_model_that_takes_images_and_is_refused_otherwise() {
    use base64::Engine as _;
    let server = mock(vec![Step::text("a dot")]).await;
    let vision = vision_model();
    let p = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"provider": {"mock": {"models": {"vision": vision}}}}),
    ));
    std::fs::write(p.root.join("dot.png"), TINY_PNG).expect("png");
    let out = p.troupe(&["run", "what is @dot.png?"], &[]).await;
    let line = assert_one_line_failure(&out, "@image to a text-only model");
    assert!(line.contains("does not accept images"), "{line}");
    assert!(completions(&server).is_empty());

    let out = p
        .troupe(&["run", "-m", "mock/vision", "what is @dot.png?"], &[])
        .await;
    assert_success(&out, "@image to a vision model");
    let req = &completions(&server)[0];
    let user = req_messages(req)
        .into_iter()
        .rfind(|m| m["role"] == "user")
        .expect("user");
    let b64 = base64::engine::general_purpose::STANDARD.encode(TINY_PNG);
    assert_eq!(
        user["content"][1],
        json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}})
    );
}

/// Writes a command file `.troupe/command/NAME.md` in the project.
fn command_file(p: &Project, name: &str, body: &str) {
    p.write_file(&format!(".troupe/command/{name}.md"), body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_file_expands_into_the_request_exactly() {
    let server = mock(vec![Step::text("done"), Step::text("done again")]).await;
    let p = CliProject::new(&server.base_url());
    command_file(
        &p,
        "greet",
        "---\ndescription: greet people\n---\nFirst $1, rest $2. All: $ARGUMENTS. Shell: !`echo hi`\n",
    );
    let out = p
        .troupe(&["run", "--command", "greet", "a", "b", "c"], &[])
        .await;
    assert_success(&out, "run --command greet");
    assert_eq!(
        user_text(&server, 0),
        "First a, rest b c. All: a b c. Shell: hi"
    );

    // Global commands and the config key, listed in the unknown-command error.
    std::fs::create_dir_all(p.config_dir().join("command")).expect("global command dir");
    std::fs::write(
        p.config_dir().join("command/global.md"),
        "Global says $ARGUMENTS",
    )
    .expect("global");
    let out = p.troupe(&["run", "--command", "nope", "x"], &[]).await;
    let line = assert_one_line_failure(&out, "unknown command");
    assert!(
        line.contains("unknown command \"nope\"") && line.contains("global, greet"),
        "{line}"
    );
    let out = p
        .troupe(&["run", "--command", "global", "hello there"], &[])
        .await;
    assert_success(&out, "run --command global");
    assert_eq!(user_text(&server, 1), "Global says hello there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subtask_command_runs_a_task_for_the_user_then_asks_for_a_summary() {
    let server = mock(vec![
        Step::text("the loader is in src/config.rs"),
        Step::text("the subagent found it: src/config.rs"),
    ])
    .await;
    // The model may not call `task` at all; the user's subtask is not asked for.
    let p = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"permission": {"task": "deny"}}),
    ));
    command_file(
        &p,
        "scout",
        "---\ndescription: scout the code\nagent: explore\nsubtask: true\n---\nFind $ARGUMENTS. Shell: !`echo hi`\n",
    );
    let out = p
        .troupe(&["run", "--command", "scout", "the config loader"], &[])
        .await;
    assert_success(&out, "run --command scout");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2, "the subagent's step, then the follow-up");
    // The subagent gets the filled template as its prompt.
    assert_eq!(user_text(&server, 0), "Find the config loader. Shell: hi");

    // The follow-up: the user's subtask, the task call and its result, then the synthetic
    // request to summarize.
    let msgs = req_messages(&reqs[1]);
    let n = msgs.len();
    assert!(n >= 4, "{msgs:#?}");
    assert_eq!(msgs[n - 4]["role"], "user", "{msgs:#?}");
    assert_eq!(
        content_text(&msgs[n - 4]),
        "The following tool was executed by the user"
    );
    assert_eq!(msgs[n - 3]["role"], "assistant");
    let call = &msgs[n - 3]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "task", "{msgs:#?}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or(""))
        .expect("task arguments are JSON");
    assert_eq!(args["subagent_type"], "explore");
    assert_eq!(args["prompt"], "Find the config loader. Shell: hi");
    assert_eq!(args["description"], "scout the code");
    assert_eq!(msgs[n - 2]["role"], "tool");
    assert_eq!(msgs[n - 2]["tool_call_id"], call["id"]);
    assert!(
        content_text(&msgs[n - 2]).contains("the loader is in src/config.rs"),
        "{msgs:#?}"
    );
    assert_eq!(msgs[n - 1]["role"], "user");
    assert_eq!(
        content_text(&msgs[n - 1]),
        "Summarize the task tool output above and continue with your task."
    );

    // Stored: the subtask part, the task part (completed, on the subagent's message), the
    // synthetic follow-up and the answer; the subagent's session is a child.
    let messages = root_messages(&p).await;
    assert_eq!(messages.len(), 4, "{messages:#?}");
    let subtask = parts_of_type(&messages[0], "subtask");
    assert_eq!(subtask.len(), 1, "{messages:#?}");
    assert_eq!(subtask[0]["agent"], "explore");
    assert_eq!(subtask[0]["command"], "scout");
    assert_eq!(subtask[0]["prompt"], "Find the config loader. Shell: hi");
    assert_eq!(messages[1]["info"]["agent"], "explore");
    let task = parts_of_type(&messages[1], "tool");
    assert_eq!(task.len(), 1);
    assert_eq!(task[0]["tool"], "task");
    assert_eq!(task[0]["state"]["status"], "completed", "{task:#?}");
    let follow = parts_of_type(&messages[2], "text");
    assert_eq!(follow.len(), 1, "{messages:#?}");
    assert_eq!(follow[0]["synthetic"], true);
    assert_eq!(role(&messages[3]), "assistant");
    let answer = parts_of_type(&messages[3], "text");
    assert_eq!(answer[0]["text"], "the subagent found it: src/config.rs");
    let sessions = p.sessions().await;
    assert_eq!(sessions.len(), 2, "{sessions:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_shell_snippet_goes_through_the_bash_permission_check() {
    let server = mock(vec![Step::text("never")]).await;
    let p = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"permission": {"bash": {"*": "allow", "rm *": "deny"}}}),
    ));
    p.write_file("victim.txt", "keep me\n");
    command_file(&p, "wipe", "Cleaned: !`rm victim.txt`");
    let out = p.troupe(&["run", "--command", "wipe"], &[]).await;
    let line = assert_one_line_failure(&out, "denied shell snippet");
    assert!(
        line.contains("rm victim.txt") && line.contains("rm *"),
        "{line}"
    );
    assert!(p.root.join("victim.txt").is_file(), "nothing ran");
    assert!(completions(&server).is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_file_parts_over_http() {
    let server = mock(vec![Step::text("listed"), Step::text("read")]).await;
    let p = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"command": {"cfg": {"template": "Config command for $ARGUMENTS", "description": "from config"}}}),
    ));
    command_file(&p, "review", "Review $1 carefully");
    p.write_file("README.md", "hello from the readme\n");
    let (_child, base) = p.serve().await;
    let api = Api::new(&base);
    let commands = api.get_json("/command").await;
    let names: Vec<&str> = commands
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["cfg", "review"], "{commands}");
    assert_eq!(commands[0]["description"], "from config");

    let sid = api.new_session().await;
    let command = format!("/session/{sid}/command");
    let (status, body) = api
        .post(
            &command,
            json!({"command": "review", "arguments": "src/lib.rs"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(user_text(&server, 0), "Review src/lib.rs carefully");

    let (status, body) = api.post(&command, json!({"command": "nope"})).await;
    assert_eq!(status, 400);
    assert!(body.to_string().contains("cfg, review"), "{body}");

    // A file part on the API takes the same path as `@path`.
    let readme = p.root.join("README.md").display().to_string();
    let message = format!("/session/{sid}/message");
    let (status, body) = api
        .post(
            &message,
            json!({"parts": [
                {"type": "text", "text": "what does it say?"},
                {"type": "file", "url": format!("file://{readme}"), "mime": "text/plain", "filename": "README.md"}
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let sent = user_text(&server, 1);
    assert!(
        sent.contains("Called the Read tool") && sent.contains("hello from the readme"),
        "{sent}"
    );
    let (status, _) = api
        .post(&message, json!({"parts": [{"type": "video", "text": "x"}]}))
        .await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_shell_command_is_recorded_and_refused_while_busy() {
    // The mock picks a step by the number of assistant messages in the request: the shell's
    // own (its `bash` call) makes the first model request step 1.
    let server = mock(vec![
        Step::text("step 0 is never asked for"),
        Step::text("I saw it"),
        Step::text("slow answer").with_first_byte_delay_ms(60_000),
    ])
    .await;
    let p = CliProject::new(&server.base_url());
    let (_child, base) = p.serve().await;
    let api = Api::new(&base);
    let sid = api.new_session().await;
    let shell = format!("/session/{sid}/shell");
    let (status, body) = api
        .post(&shell, json!({"command": "echo hello-$((40+2))"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let part = &body["parts"][0];
    assert_eq!(part["tool"], "bash");
    assert_eq!(part["state"]["status"], "completed");
    assert!(
        part["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("hello-42"),
        "{body}"
    );
    assert!(
        completions(&server).is_empty(),
        "no model step for a shell command"
    );

    // The model sees it on the next turn: the user text, then the bash call and its output.
    let (status, answer) = api
        .post(
            &format!("/session/{sid}/message"),
            json!({"text": "what did it print?"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 1, "one model step: {answer}");
    let sent = reqs[0].body.to_string();
    assert!(
        sent.contains("The following tool was executed by the user")
            && sent.contains("echo hello-$((40+2))")
            && sent.contains("hello-42"),
        "{sent}"
    );

    // While a turn runs, the shell is refused with 409.
    api.prompt_async(&sid, "take your time").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // The turn has started once its user message is stored (the model's answer is held back
    // for 60 s, and the mock records a request only when it answers).
    loop {
        let messages = api.get_json(&format!("/session/{sid}/message")).await;
        let started = messages
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| m.to_string().contains("take your time")));
        if started {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slow turn never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, _) = api.post(&shell, json!({"command": "echo nope"})).await;
    assert_eq!(status, 409);
    let _ = api
        .req(reqwest::Method::POST, &format!("/session/{sid}/abort"))
        .send()
        .await;
}
