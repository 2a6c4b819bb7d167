//! End-to-end tests of prompt inputs beyond plain text (issue 22): `@file` references read
//! through the `read` tool, `@agent` mentions, attached images, and commands (markdown files
//! and the `command` config key, `troupe run --command`, `GET /command`, `POST
//! /session/{id}/command`), through the real binary against the scripted provider.

use serde_json::{Value, json};
use troupe_testkit::{MockServer, Script, Step};

mod common;
use common::*;

async fn mock(steps: Vec<Step>) -> MockServer {
    MockServer::start(Script::single(steps))
        .await
        .expect("mock server")
}

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

/// The parts of the session's first user message.
async fn first_user_parts(p: &Project) -> Vec<Value> {
    let (_, messages) = p.messages().await;
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
    let server = mock(vec![
        Step::tool(
            "task",
            json!({"description": "find loader", "prompt": "find the config loader", "subagent_type": "explore"}),
        ),
        Step::text("it is in src/config.rs"),
        Step::text("the loader is in src/config.rs"),
    ])
    .await;
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
    let (_, messages) = p.messages().await;
    let task = tool_parts(&messages)
        .into_iter()
        .find(|t| t["tool"] == "task")
        .expect("a task call");
    assert_eq!(task["state"]["input"]["subagent_type"], "explore");
    assert_eq!(task["state"]["status"], "completed");
}

/// A real (tiny) PNG: the 8-byte signature and an IHDR chunk.
const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_image_goes_to_a_model_that_takes_images_and_is_refused_otherwise() {
    use base64::Engine as _;
    let server = mock(vec![Step::text("a dot")]).await;
    let vision = json!({"name": "Vision", "limit": {"context": 128000, "output": 8192},
                        "modalities": {"input": ["text", "image"], "output": ["text"]}});
    let p = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"provider": {"mock": {"models": {"vision": vision}}}}),
    ));
    std::fs::write(p.root.join("dot.png"), PNG).expect("png");
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
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
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
    let http = reqwest::Client::new();
    let commands: Value = http
        .get(format!("{base}/command"))
        .send()
        .await
        .expect("GET /command")
        .json()
        .await
        .expect("JSON");
    let names: Vec<&str> = commands
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["cfg", "review"], "{commands}");
    assert_eq!(commands[0]["description"], "from config");

    let session: Value = http
        .post(format!("{base}/session"))
        .json(&json!({}))
        .send()
        .await
        .expect("POST /session")
        .json()
        .await
        .expect("JSON");
    let sid = session["id"].as_str().expect("id");
    let r = http
        .post(format!("{base}/session/{sid}/command"))
        .json(&json!({"command": "review", "arguments": "src/lib.rs"}))
        .send()
        .await
        .expect("POST command");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(user_text(&server, 0), "Review src/lib.rs carefully");

    let r = http
        .post(format!("{base}/session/{sid}/command"))
        .json(&json!({"command": "nope"}))
        .send()
        .await
        .expect("POST command");
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.expect("JSON");
    assert!(body.to_string().contains("cfg, review"), "{body}");

    // A file part on the API takes the same path as `@path`.
    let readme = p.root.join("README.md").display().to_string();
    let r = http
        .post(format!("{base}/session/{sid}/message"))
        .json(&json!({"parts": [
            {"type": "text", "text": "what does it say?"},
            {"type": "file", "url": format!("file://{readme}"), "mime": "text/plain", "filename": "README.md"}
        ]}))
        .send()
        .await
        .expect("POST message");
    assert_eq!(r.status().as_u16(), 200);
    let sent = user_text(&server, 1);
    assert!(
        sent.contains("Called the Read tool") && sent.contains("hello from the readme"),
        "{sent}"
    );
    let r = http
        .post(format!("{base}/session/{sid}/message"))
        .json(&json!({"parts": [{"type": "video", "text": "x"}]}))
        .send()
        .await
        .expect("POST message");
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_shell_command_is_recorded_and_refused_while_busy() {
    let server = mock(vec![
        Step::text("I saw it"),
        Step::text("slow answer").with_first_byte_delay_ms(60_000),
    ])
    .await;
    let p = CliProject::new(&server.base_url());
    let (_child, base) = p.serve().await;
    let http = reqwest::Client::new();
    let session: Value = http
        .post(format!("{base}/session"))
        .json(&json!({}))
        .send()
        .await
        .expect("POST /session")
        .json()
        .await
        .expect("JSON");
    let sid = session["id"].as_str().expect("id").to_string();
    let r = http
        .post(format!("{base}/session/{sid}/shell"))
        .json(&json!({"command": "echo hello-$((40+2))"}))
        .send()
        .await
        .expect("POST shell");
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.expect("JSON");
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
    let r = http
        .post(format!("{base}/session/{sid}/message"))
        .json(&json!({"text": "what did it print?"}))
        .send()
        .await
        .expect("POST message");
    assert_eq!(r.status().as_u16(), 200);
    let sent = completions(&server)[0].body.to_string();
    assert!(
        sent.contains("The following tool was executed by the user")
            && sent.contains("echo hello-$((40+2))")
            && sent.contains("hello-42"),
        "{sent}"
    );

    // While a turn runs, the shell is refused with 409.
    let r = http
        .post(format!("{base}/session/{sid}/prompt_async"))
        .json(&json!({"text": "take your time"}))
        .send()
        .await
        .expect("POST prompt_async");
    assert_eq!(r.status().as_u16(), 204);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while completions(&server).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow step never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = http
        .post(format!("{base}/session/{sid}/shell"))
        .json(&json!({"command": "echo nope"}))
        .send()
        .await
        .expect("POST shell");
    assert_eq!(r.status().as_u16(), 409);
    let _ = http
        .post(format!("{base}/session/{sid}/abort"))
        .send()
        .await;
}
