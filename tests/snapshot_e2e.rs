//! End-to-end tests of file snapshots (issue 15): patch parts per step, the session diff,
//! revert / unrevert, fork, and snapshots off outside git — through the real binary, the
//! scripted provider, a real git repository and the real `git` program.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use troupe_testkit::{Conversation, Script, Step};

mod common;
use common::*;

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
}

/// A git project with everything allowed (the script's bash commands need no approval).
fn git_project(base_url: &str) -> CliProject {
    let p = CliProject::empty();
    let mut config = mock_config(base_url);
    config["permission"] = json!({"bash": "allow", "edit": "allow"});
    p.write_config(&config.to_string());
    git(&p.root, &["init", "-q"]);
    p
}

fn set_url(p: &CliProject, base_url: &str) {
    let mut config = mock_config(base_url);
    config["permission"] = json!({"bash": "allow", "edit": "allow"});
    p.write_config(&config.to_string());
}

/// Every file of the project (except `.git/`) with its bytes.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

async fn show(p: &CliProject, sid: &str) -> Value {
    let out = p
        .troupe(&["session", "show", sid, "--format", "json"], &[])
        .await;
    assert_success(&out, "session show");
    serde_json::from_slice(&out.stdout).expect("show JSON")
}

fn patch_files(doc: &Value) -> Vec<Vec<String>> {
    let messages = doc["messages"].as_array().expect("messages");
    all_parts_of_type(messages, "patch")
        .iter()
        .map(|p| {
            let mut f: Vec<String> = p["files"]
                .as_array()
                .expect("files")
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            f.sort();
            f
        })
        .collect()
}

fn user_ids(doc: &Value) -> Vec<String> {
    doc["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| role(m) == "user")
        .map(|m| m["info"]["id"].as_str().unwrap().to_string())
        .collect()
}

async fn run_json(p: &CliProject, args: &[&str]) -> (Output, Vec<Value>) {
    let out = p.troupe(args, &[]).await;
    assert_success(&out, &format!("troupe {args:?}"));
    let events = parse_events(&out.stdout);
    (out, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_diff_revert_unrevert_and_cleanup() {
    let p = git_project("http://127.0.0.1:1/v1");
    let root = p.root.clone();
    let at = |f: &str| root.join(f).display().to_string();
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(root.join("b.txt"), "b1\nb2\n").unwrap();
    std::fs::write(root.join("c.txt"), "c1\nc2\nc3\n").unwrap();
    std::fs::write(root.join("keep.log"), "before\n").unwrap();
    // The scripted server picks a step by the number of assistant messages in the request,
    // so the prompt after the revert (whose history is gone) has its own conversation.
    let script =
        Script::new(vec![
            Conversation::new(vec![Step::text("after the revert")]).matching("again"),
            Conversation::new(vec![
        Step::tool("write", json!({"filePath": at("a.txt"), "content": "a1\na2\n"})),
        // The edit, plus changes to an ignored file and a file over 2 MiB: neither is
        // snapshotted, so neither is in the patch nor touched by a revert.
        Step::tool(
            "edit",
            json!({"filePath": at("b.txt"), "oldString": "b2\n", "newString": "B2\nb3\n"}),
        )
        .with_tool(
            "bash",
            json!({"command": "echo agent > keep.log && head -c 3000000 /dev/zero > big.bin",
                   "description": "ignored and big files"}),
        ),
        Step::tool(
            "bash",
            json!({"command": "rm c.txt && echo new > d.txt", "description": "rm and create"}),
        ),
        Step::text("all done"),
    ])
            .matching("change files"),
        ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());

    let (_, events) = run_json(&p, &["run", "--format", "json", "change", "files"]).await;
    let sid = session_id_of(&events);
    assert!(
        events.iter().any(|e| e["type"] == "session.diff"),
        "a session.diff event is published"
    );
    assert!(!events.iter().any(|e| e["type"] == "session.notice"));

    // One patch part per step that changed files, naming exactly those files.
    let doc = show(&p, &sid).await;
    assert_eq!(
        patch_files(&doc),
        vec![
            vec![at("a.txt")],
            vec![at("b.txt")],
            vec![at("c.txt"), at("d.txt")],
        ]
    );
    let messages = doc["messages"].as_array().unwrap();
    for m in messages.iter().filter(|m| role(m) == "assistant") {
        let start = parts_of_type(m, "step-start");
        let finish = parts_of_type(m, "step-finish");
        assert!(
            start[0]["snapshot"].is_string(),
            "step-start snapshot: {m:#}"
        );
        assert!(
            finish[0]["snapshot"].is_string(),
            "step-finish snapshot: {m:#}"
        );
    }
    // The patch's hash is the tree before its step.
    let first_patch = &all_parts_of_type(messages, "patch")[0];
    let first_start = &all_parts_of_type(messages, "step-start")[0];
    assert_eq!(first_patch["hash"], first_start["snapshot"]);
    // The session summary counts all four files (bash's too).
    let summary = &doc["info"]["summary"];
    assert_eq!(summary["files"], 4, "{summary:#}");
    assert_eq!(summary["additions"], 5);
    assert_eq!(summary["deletions"], 4);

    // session diff --format json
    let out = p
        .troupe(&["session", "diff", &sid, "--format", "json"], &[])
        .await;
    assert_success(&out, "session diff");
    let diff: Value = serde_json::from_slice(&out.stdout).expect("diff JSON");
    let by: BTreeMap<String, (String, u64, u64)> = diff
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                (
                    f["status"].as_str().unwrap().to_string(),
                    f["additions"].as_u64().unwrap(),
                    f["deletions"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let expect: BTreeMap<String, (String, u64, u64)> = [
        ("a.txt", ("added", 2, 0)),
        ("b.txt", ("modified", 2, 1)),
        ("c.txt", ("deleted", 0, 3)),
        ("d.txt", ("added", 1, 0)),
    ]
    .into_iter()
    .map(|(f, (s, a, d))| (f.to_string(), (s.to_string(), a, d)))
    .collect();
    assert_eq!(by, expect);
    // The unified diff and --stat.
    let out = p.troupe(&["session", "diff", &sid], &[]).await;
    assert_success(&out, "session diff");
    let unified = text(&out.stdout);
    assert!(unified.contains("diff --git a/b.txt b/b.txt"), "{unified}");
    assert!(
        unified.contains("+B2\n+b3\n") && unified.contains("-b2\n"),
        "{unified}"
    );
    let out = p.troupe(&["session", "diff", &sid, "--stat"], &[]).await;
    assert_success(&out, "session diff --stat");
    let stat = text(&out.stdout);
    assert!(stat.contains("b.txt | +2 -1"), "{stat}");
    assert!(
        stat.contains("4 files changed, 5 insertions(+), 4 deletions(-)"),
        "{stat}"
    );

    // Revert to the first user message.
    let after_run = files(&root);
    let first_user = user_ids(&doc)[0].clone();
    let out = p
        .troupe(&["session", "revert", &sid, &first_user], &[])
        .await;
    assert_success(&out, "session revert");
    assert!(!root.join("a.txt").exists(), "a.txt deleted");
    assert!(!root.join("d.txt").exists(), "d.txt deleted");
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "b1\nb2\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("c.txt")).unwrap(),
        "c1\nc2\nc3\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("keep.log")).unwrap(),
        "agent\n"
    );
    assert_eq!(
        std::fs::metadata(root.join("big.bin")).unwrap().len(),
        3_000_000,
        "a file over 2 MiB is left alone"
    );
    let reverted = show(&p, &sid).await;
    assert_eq!(reverted["info"]["revert"]["messageID"], first_user.as_str());
    // Hidden, not deleted yet: `session show` lists them apart, under `reverted`.
    assert!(reverted["messages"].as_array().unwrap().is_empty());
    assert_eq!(
        reverted["reverted"].as_array().unwrap().len(),
        messages.len()
    );

    // Unrevert: everything back byte for byte.
    let out = p.troupe(&["session", "unrevert", &sid], &[]).await;
    assert_success(&out, "session unrevert");
    assert_eq!(
        files(&root),
        after_run,
        "unrevert restores every file byte for byte"
    );
    assert!(show(&p, &sid).await["info"]["revert"].is_null());

    // Revert again, then a prompt deletes the hidden messages.
    let out = p
        .troupe(&["session", "revert", &sid, &first_user], &[])
        .await;
    assert_success(&out, "second revert");
    assert!(!root.join("a.txt").exists());
    let (_, _) = run_json(&p, &["run", "--format", "json", "-s", &sid, "again"]).await;
    let after = show(&p, &sid).await;
    assert!(after["info"]["revert"].is_null());
    let ids: Vec<&str> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["info"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "only the new turn remains: {after:#}");
    assert!(!ids.contains(&first_user.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_edit_between_steps_survives_reverting_the_later_step() {
    let p = git_project("http://127.0.0.1:1/v1");
    let root = p.root.clone();
    let at = |f: &str| root.join(f).display().to_string();
    std::fs::write(root.join("user.txt"), "mine\n").unwrap();
    let script = Script::single(vec![
        Step::tool(
            "write",
            json!({"filePath": at("one.txt"), "content": "1\n"}),
        ),
        Step::text("first"),
        Step::tool(
            "write",
            json!({"filePath": at("two.txt"), "content": "2\n"}),
        ),
        Step::text("second"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let (_, events) = run_json(&p, &["run", "--format", "json", "first"]).await;
    let sid = session_id_of(&events);
    // The user edits a file between the two turns.
    std::fs::write(root.join("user.txt"), "mine, edited by me\n").unwrap();
    run_json(&p, &["run", "--format", "json", "-s", &sid, "second"]).await;
    let doc = show(&p, &sid).await;
    assert_eq!(
        patch_files(&doc),
        vec![vec![at("one.txt")], vec![at("two.txt")]],
        "the user's edit is in no patch"
    );
    let second_user = user_ids(&doc)[1].clone();
    let out = p
        .troupe(&["session", "revert", &sid, &second_user], &[])
        .await;
    assert_success(&out, "revert");
    assert!(!root.join("two.txt").exists());
    assert!(root.join("one.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("user.txt")).unwrap(),
        "mine, edited by me\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_while_busy_is_refused() {
    let p = git_project("http://127.0.0.1:1/v1");
    // The model never answers within the test: the session stays busy.
    let script = Script::single(vec![Step::text("late").with_first_byte_delay_ms(120_000)]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let mut cmd = p.command(&["run", "--format", "json", "slow"]);
    cmd.stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn run");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let (sid, user) = loop {
        let line = lines
            .next_line()
            .await
            .expect("read")
            .expect("the run prints events");
        let ev: Value = serde_json::from_str(&line).expect("event");
        if ev["type"] == "message.updated" && ev["properties"]["info"]["role"] == "user" {
            break (
                ev["properties"]["info"]["sessionID"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                ev["properties"]["info"]["id"].as_str().unwrap().to_string(),
            );
        }
    };
    let out = p.troupe(&["session", "revert", &sid, &user], &[]).await;
    let line = assert_one_line_failure(&out, "revert while busy");
    assert!(line.contains("is driven by"), "{line}");
    assert!(line.contains("nothing reverted"), "{line}");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_git_snapshots_are_off_and_said_once() {
    let p = CliProject::empty();
    let mut config = mock_config("http://127.0.0.1:1/v1");
    let at = |f: &str| p.root.join(f).display().to_string();
    let script = Script::single(vec![
        Step::tool("write", json!({"filePath": at("x.txt"), "content": "x\n"})),
        Step::tool("write", json!({"filePath": at("y.txt"), "content": "y\n"})),
        Step::text("done"),
        Step::tool("write", json!({"filePath": at("z.txt"), "content": "z\n"})),
        Step::text("done again"),
    ]);
    let server = start_mock(script).await;
    config["provider"]["mock"]["options"]["baseURL"] = json!(server.base_url());
    p.write_config(&config.to_string());
    let (_, events) = run_json(&p, &["run", "--format", "json", "three", "steps"]).await;
    let notices: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "session.notice")
        .collect();
    assert_eq!(notices.len(), 1, "said once: {notices:?}");
    let msg = notices[0]["properties"]["message"].as_str().unwrap();
    assert!(msg.contains("not in a git repository"), "{msg}");
    let sid = session_id_of(&events);
    let doc = show(&p, &sid).await;
    let messages = doc["messages"].as_array().unwrap();
    assert!(all_parts_of_type(messages, "patch").is_empty());
    assert!(
        all_parts_of_type(messages, "step-start")
            .iter()
            .all(|s| s["snapshot"].is_null())
    );
    // Said once: the next run in the directory does not repeat it.
    let out = p.troupe(&["run", "-s", &sid, "more"], &[]).await;
    assert_success(&out, "second run");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("snapshots are off"), "stderr: {stderr}");
    // In text mode the notice is one stderr line (another directory, said there once).
    let other = CliProject::empty();
    let mut config = mock_config(&server.base_url());
    config["permission"] = json!({"bash": "allow"});
    other.write_config(&config.to_string());
    let out = other.troupe(&["run", "text", "mode"], &[]).await;
    assert_success(&out, "text run");
    let stderr = text(&out.stderr);
    let notices: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("snapshots are off"))
        .collect();
    assert_eq!(notices.len(), 1, "stderr: {stderr}");
    assert!(
        notices[0].starts_with("troupe: snapshots are off: "),
        "{stderr}"
    );
    // No snapshots: the session diff is empty.
    let out = p.troupe(&["session", "diff", &sid], &[]).await;
    assert_success(&out, "session diff");
    assert!(text(&out.stdout).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_copies_history_with_new_ids_and_runs() {
    let p = git_project("http://127.0.0.1:1/v1");
    // The scripted server picks a step by the number of assistant messages in the request:
    // the fork's first prompt (one copied answer) gets the second step.
    let script = Script::single(vec![Step::text("answer one"), Step::text("answer two")]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let (_, events) = run_json(&p, &["run", "--format", "json", "one"]).await;
    let sid = session_id_of(&events);
    run_json(&p, &["run", "--format", "json", "-s", &sid, "two"]).await;
    let doc = show(&p, &sid).await;
    let second_user = user_ids(&doc)[1].clone();
    let out = p
        .troupe(&["session", "fork", &sid, "--message", &second_user], &[])
        .await;
    assert_success(&out, "fork");
    let fork_id = text(&out.stdout).trim().to_string();
    assert!(fork_id.starts_with("ses_") && fork_id != sid, "{fork_id}");
    let fork = show(&p, &fork_id).await;
    assert!(
        fork["info"]["title"]
            .as_str()
            .unwrap()
            .ends_with("(fork #1)"),
        "{fork:#}"
    );
    let orig: Vec<&Value> = doc["messages"].as_array().unwrap().iter().take(2).collect();
    let copied = fork["messages"].as_array().unwrap();
    assert_eq!(copied.len(), 2, "history up to the message: {fork:#}");
    for (o, c) in orig.iter().zip(copied) {
        assert_eq!(role(o), role(c));
        assert_ne!(o["info"]["id"], c["info"]["id"], "fresh message ids");
        assert_eq!(c["info"]["sessionID"], fork_id.as_str());
        for (op, cp) in o["parts"]
            .as_array()
            .unwrap()
            .iter()
            .zip(c["parts"].as_array().unwrap())
        {
            assert_ne!(op["id"], cp["id"], "fresh part ids");
            assert_eq!(cp["messageID"], c["info"]["id"]);
            assert_eq!(op["type"], cp["type"]);
        }
    }
    assert_eq!(copied[1]["info"]["parentID"], copied[0]["info"]["id"]);
    // The fork runs, and the original is unchanged.
    let out = p.troupe(&["run", "-s", &fork_id, "go on"], &[]).await;
    assert_success(&out, "run in the fork");
    assert!(text(&out.stdout).contains("answer two"));
    assert_eq!(
        show(&p, &fork_id).await["messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        show(&p, &sid).await["messages"].as_array().unwrap().len(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_diff_revert_unrevert_fork_and_busy_409() {
    use reqwest::Method;
    let p = git_project("http://127.0.0.1:1/v1");
    let at = |f: &str| p.root.join(f).display().to_string();
    let script = Script::new(vec![
        Conversation::new(vec![Step::text("late").with_first_byte_delay_ms(120_000)])
            .matching("slow"),
        Conversation::new(vec![
            Step::tool(
                "write",
                json!({"filePath": at("w.txt"), "content": "w1\nw2\n"}),
            ),
            Step::text("written"),
        ])
        .matching("write it"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let (_child, base) = p.serve().await;
    let api = Api::new(&base);
    let (st, s) = api.send(Method::POST, "/session", Some(json!({}))).await;
    assert_eq!(st, 200, "{s}");
    let sid = s["id"].as_str().unwrap().to_string();
    let (st, reply) = api
        .send(
            Method::POST,
            &format!("/session/{sid}/message"),
            Some(json!({"parts": [{"type": "text", "text": "write it"}]})),
        )
        .await;
    assert_eq!(st, 200, "{reply}");
    assert!(p.root.join("w.txt").exists());

    let (st, diff) = api
        .send(Method::GET, &format!("/session/{sid}/diff"), None)
        .await;
    assert_eq!(st, 200, "{diff}");
    assert_eq!(diff[0]["file"], "w.txt", "{diff}");
    assert_eq!(diff[0]["status"], "added");
    assert_eq!(diff[0]["additions"], 2);
    assert!(diff[0]["patch"].as_str().unwrap().contains("+w2"));

    let (_, msgs) = api
        .send(Method::GET, &format!("/session/{sid}/message"), None)
        .await;
    let user = msgs[0]["info"]["id"].as_str().unwrap().to_string();
    let (st, s) = api
        .send(
            Method::POST,
            &format!("/session/{sid}/revert"),
            Some(json!({"messageID": user})),
        )
        .await;
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["revert"]["messageID"], user.as_str());
    assert!(!p.root.join("w.txt").exists());
    let (st, s) = api
        .send(Method::POST, &format!("/session/{sid}/unrevert"), None)
        .await;
    assert_eq!(st, 200, "{s}");
    assert!(s["revert"].is_null());
    assert_eq!(
        std::fs::read_to_string(p.root.join("w.txt")).unwrap(),
        "w1\nw2\n"
    );
    let (st, bad) = api
        .send(
            Method::POST,
            &format!("/session/{sid}/revert"),
            Some(json!({"messageID": "msg_nope"})),
        )
        .await;
    assert_eq!(st, 400, "{bad}");

    let (st, fork) = api
        .send(
            Method::POST,
            &format!("/session/{sid}/fork"),
            Some(json!({})),
        )
        .await;
    assert_eq!(st, 200, "{fork}");
    assert_ne!(fork["id"], sid.as_str());
    let fid = fork["id"].as_str().unwrap();
    let (_, fmsgs) = api
        .send(Method::GET, &format!("/session/{fid}/message"), None)
        .await;
    assert_eq!(
        fmsgs.as_array().unwrap().len(),
        msgs.as_array().unwrap().len()
    );

    // Busy: a turn that waits for the model.
    let (st, s2) = api.send(Method::POST, "/session", Some(json!({}))).await;
    assert_eq!(st, 200);
    let sid2 = s2["id"].as_str().unwrap().to_string();
    let (st, _) = api
        .send(
            Method::POST,
            &format!("/session/{sid2}/prompt_async"),
            Some(json!({"parts": [{"type": "text", "text": "slow"}]})),
        )
        .await;
    assert_eq!(st, 204);
    // The user message is stored once the turn runs.
    let user2 = loop {
        let (_, m) = api
            .send(Method::GET, &format!("/session/{sid2}/message"), None)
            .await;
        if let Some(id) = m[0]["info"]["id"].as_str() {
            break id.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let (st, err) = api
        .send(
            Method::POST,
            &format!("/session/{sid2}/revert"),
            Some(json!({"messageID": user2})),
        )
        .await;
    assert_eq!(st, 409, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing reverted"),
        "{err}"
    );
    let (st, _) = api
        .send(Method::POST, &format!("/session/{sid2}/abort"), None)
        .await;
    assert_eq!(st, 200);
}

/// The process's own files inside the project — a store given there, `run -o` — are not the
/// project's: they never show in a session's diff (and so a revert never rewinds them, which
/// for a live store file would corrupt it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_files_in_the_project_are_not_snapshotted() {
    let p = git_project("http://127.0.0.1:1/v1");
    let root = p.root.clone();
    let at = |f: &str| root.join(f).display().to_string();
    let script = Script::single(vec![
        Step::tool("write", json!({"filePath": at("a.txt"), "content": "a\n"})),
        Step::text("written"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    std::fs::create_dir_all(root.join("state")).unwrap();
    let db = root.join("state").join("troupe.db").display().to_string();
    let env = [("TROUPE_DB", db.as_str())];
    let out = p
        .troupe(
            &["run", "--format", "json", "-o", "answer.txt", "write", "it"],
            &env,
        )
        .await;
    assert_success(&out, "troupe run");
    let sid = session_id_of(&parse_events(&out.stdout));
    assert!(root.join("answer.txt").exists());
    let out = p
        .troupe(&["session", "diff", &sid, "--format", "json"], &env)
        .await;
    assert_success(&out, "session diff");
    let diff: Value = serde_json::from_slice(&out.stdout).expect("diff JSON");
    let files: Vec<&str> = diff
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|f| f["file"].as_str())
        .collect();
    assert_eq!(files, vec!["a.txt"], "{diff:#}");
    server.shutdown().await;
}

fn ids_of(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["info"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// `session revert` to an assistant message goes back to the user message of its turn
/// (OpenCode's rule) and says so, naming that user message rather than the one given; with
/// `--part`, file changes go per step, and the output says that too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_output_names_the_message_it_really_went_back_to() {
    let p = git_project("http://127.0.0.1:1/v1");
    let root = p.root.clone();
    let at = |f: &str| root.join(f).display().to_string();
    let script = Script::new(vec![
        // Turn 1: two steps, each writing a file, then the answer.
        Conversation::new(vec![
            Step::tool("write", json!({"filePath": at("a.txt"), "content": "a\n"})),
            Step::tool("write", json!({"filePath": at("b.txt"), "content": "b\n"})),
            Step::text("two files"),
        ])
        .matching("two steps"),
        // Turn 2 (own session): one step with two tool calls.
        Conversation::new(vec![
            Step::tool("write", json!({"filePath": at("c.txt"), "content": "c\n"}))
                .with_tool("write", json!({"filePath": at("d.txt"), "content": "d\n"})),
            Step::text("one step"),
        ])
        .matching("one step"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());

    let (_, events) = run_json(&p, &["run", "--format", "json", "two steps"]).await;
    let sid = session_id_of(&events);
    let doc = show(&p, &sid).await;
    let user = user_ids(&doc)[0].clone();
    let assistants: Vec<String> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| role(m) == "assistant")
        .map(|m| m["info"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(assistants.len(), 3, "{doc:#}");
    // The second step's message: the revert still undoes the first step's write.
    let second = &assistants[1];
    let out = p.troupe(&["session", "revert", &sid, second], &[]).await;
    assert_success(&out, "revert to an assistant message");
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "reverted session {sid} to user message {user}: {second} is an assistant message"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("the whole turn from {user} on is undone")),
        "{said}"
    );
    assert!(said.contains("2 files restored"), "{said}");
    assert!(!said.contains(&format!("to {second}")), "{said}");
    assert!(!root.join("a.txt").exists() && !root.join("b.txt").exists());
    assert_eq!(
        show(&p, &sid).await["info"]["revert"]["messageID"],
        user.as_str()
    );

    // --part at the second tool call of a step: the first one's write is undone too.
    let (_, events) = run_json(&p, &["run", "--format", "json", "one step"]).await;
    let sid = session_id_of(&events);
    let doc = show(&p, &sid).await;
    let messages = doc["messages"].as_array().unwrap();
    let step = messages
        .iter()
        .find(|m| role(m) == "assistant" && parts_of_type(m, "tool").len() == 2)
        .expect("the step with two tool calls");
    let mid = step["info"]["id"].as_str().unwrap();
    let second_tool = parts_of_type(step, "tool")[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(root.join("c.txt").exists() && root.join("d.txt").exists());
    let out = p
        .troupe(
            &["session", "revert", &sid, mid, "--part", &second_tool],
            &[],
        )
        .await;
    assert_success(&out, "revert to a part");
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "reverted session {sid} to part {second_tool} of message {mid}"
        )),
        "{said}"
    );
    assert!(said.contains("file changes are undone per step"), "{said}");
    assert!(said.contains("2 files restored"), "{said}");
    assert!(
        !root.join("c.txt").exists() && !root.join("d.txt").exists(),
        "the whole step's changes are undone"
    );

    // The help says both rules.
    let out = p.troupe(&["session", "revert", "--help"], &[]).await;
    assert_success(&out, "revert --help");
    let help = text(&out.stdout);
    assert!(help.contains("the whole turn is undone"), "{help}");
    assert!(help.contains("File changes are undone per"), "{help}");
    server.shutdown().await;
}

/// After a revert, `session show` leaves out what it hides (whole messages, and a message's
/// parts from the reverted part on), says so in its header, and `--format json` keeps them
/// apart under `reverted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_show_leaves_out_what_a_revert_hides() {
    let p = git_project("http://127.0.0.1:1/v1");
    let at = |f: &str| p.root.join(f).display().to_string();
    let script = Script::single(vec![
        Step::text("ANSWER-ONE"),
        Step::tool("write", json!({"filePath": at("x.txt"), "content": "x\n"}))
            .with_text("WRITING-NOW"),
        Step::text("ANSWER-TWO"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let (_, events) = run_json(&p, &["run", "--format", "json", "PROMPT-ONE"]).await;
    let sid = session_id_of(&events);
    run_json(&p, &["run", "--format", "json", "-s", &sid, "PROMPT-TWO"]).await;
    let doc = show(&p, &sid).await;
    assert!(doc["reverted"].as_array().unwrap().is_empty(), "{doc:#}");
    let all = ids_of(&doc["messages"]);
    assert_eq!(all.len(), 5, "{doc:#}");

    // Whole messages: revert the second turn.
    let second_user = user_ids(&doc)[1].clone();
    let out = p
        .troupe(&["session", "revert", &sid, &second_user], &[])
        .await;
    assert_success(&out, "revert");
    let out = p.troupe(&["session", "show", &sid], &[]).await;
    assert_success(&out, "session show");
    let shown = text(&out.stdout);
    assert!(shown.contains("ANSWER-ONE"), "{shown}");
    for hidden in ["PROMPT-TWO", "WRITING-NOW", "ANSWER-TWO", "[tool write"] {
        assert!(!shown.contains(hidden), "{hidden} is reverted: {shown}");
    }
    assert!(
        shown.contains(&format!(
            "reverted: message {second_user} and the 2 messages after it are undone and not shown below"
        )),
        "{shown}"
    );
    let json = show(&p, &sid).await;
    assert_eq!(ids_of(&json["messages"]), all[..2]);
    assert_eq!(ids_of(&json["reverted"]), all[2..]);

    // A part: its message is split between `messages` and `reverted`.
    let out = p.troupe(&["session", "unrevert", &sid], &[]).await;
    assert_success(&out, "unrevert");
    let step = &doc["messages"][3];
    let mid = step["info"]["id"].as_str().unwrap();
    let tool = parts_of_type(step, "tool")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = p
        .troupe(&["session", "revert", &sid, mid, "--part", &tool], &[])
        .await;
    assert_success(&out, "revert to a part");
    let out = p.troupe(&["session", "show", &sid], &[]).await;
    assert_success(&out, "session show");
    let shown = text(&out.stdout);
    assert!(
        shown.contains("PROMPT-TWO") && shown.contains("WRITING-NOW"),
        "{shown}"
    );
    for hidden in ["ANSWER-TWO", "[tool write", "[patch]"] {
        assert!(!shown.contains(hidden), "{hidden} is reverted: {shown}");
    }
    assert!(
        shown.contains(&format!(
            "reverted: part {tool} of message {mid}, the parts after it and the 1 message after it are undone"
        )),
        "{shown}"
    );
    let json = show(&p, &sid).await;
    assert_eq!(ids_of(&json["messages"]), all[..4]);
    assert_eq!(ids_of(&json["reverted"]), all[3..]);
    let kept = &json["messages"][3];
    assert!(parts_of_type(kept, "tool").is_empty(), "{kept:#}");
    assert_eq!(parts_of_type(kept, "text").len(), 1, "{kept:#}");
    let split = &json["reverted"][0];
    assert_eq!(split["parts"][0]["id"], tool.as_str(), "{split:#}");
    server.shutdown().await;
}

/// `session unrevert` with no pending revert fails like the other "nothing to do" and
/// not-found errors: one `troupe: …` line on stderr, nothing on stdout, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrevert_with_nothing_pending_says_so_and_fails() {
    let p = git_project("http://127.0.0.1:1/v1");
    let at = |f: &str| p.root.join(f).display().to_string();
    let script = Script::single(vec![
        Step::tool("write", json!({"filePath": at("u.txt"), "content": "u\n"})),
        Step::text("written"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let (_, events) = run_json(&p, &["run", "--format", "json", "write"]).await;
    let sid = session_id_of(&events);

    let out = p.troupe(&["session", "unrevert", &sid], &[]).await;
    let line = assert_one_line_failure(&out, "unrevert with no revert");
    assert_eq!(
        line,
        format!("troupe: nothing to unrevert: session {sid} has no pending revert")
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    // The same exit code as a session that does not exist.
    let missing = p.troupe(&["session", "unrevert", "ses_nope"], &[]).await;
    assert_one_line_failure(&missing, "unrevert of no session");
    assert_eq!(missing.status.code(), out.status.code());

    // A revert, its unrevert, and then nothing is left to unrevert.
    let user = user_ids(&show(&p, &sid).await)[0].clone();
    assert_success(
        &p.troupe(&["session", "revert", &sid, &user], &[]).await,
        "revert",
    );
    let out = p.troupe(&["session", "unrevert", &sid], &[]).await;
    assert_success(&out, "unrevert");
    assert!(text(&out.stdout).starts_with(&format!("unreverted session {sid}")));
    assert_eq!(
        std::fs::read_to_string(p.root.join("u.txt")).unwrap(),
        "u\n"
    );
    let out = p.troupe(&["session", "unrevert", &sid], &[]).await;
    let line = assert_one_line_failure(&out, "second unrevert");
    assert!(line.contains("nothing to unrevert"), "{line}");
    assert_eq!(
        std::fs::read_to_string(p.root.join("u.txt")).unwrap(),
        "u\n"
    );
    server.shutdown().await;
}

/// A hand edit made while a step runs (here: while its tool runs) lands in that step's patch,
/// and reverting the step undoes it — unlike an edit between two steps (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_edit_while_a_step_runs_is_undone_with_it() {
    let p = git_project("http://127.0.0.1:1/v1");
    let root = p.root.clone();
    std::fs::write(root.join("user.txt"), "mine\n").unwrap();
    let script = Script::single(vec![
        Step::tool(
            "bash",
            json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done; rm -f go started",
                   "description": "wait for the test"}),
        ),
        Step::text("done"),
    ]);
    let server = start_mock(script).await;
    set_url(&p, &server.base_url());
    let child = p.spawn(&["run", "--format", "json", "wait"], &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !root.join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The user edits a file while the step's tool runs.
    std::fs::write(root.join("user.txt"), "edited during the step\n").unwrap();
    std::fs::write(root.join("go"), "").unwrap();
    let out = child.wait_with_output().await.expect("run finishes");
    assert_success(&out, "run");
    let sid = session_id_of(&parse_events(&out.stdout));
    let doc = show(&p, &sid).await;
    assert_eq!(
        patch_files(&doc),
        vec![vec![root.join("user.txt").display().to_string()]],
        "the edit is in the step's patch"
    );
    let user = user_ids(&doc)[0].clone();
    assert_success(
        &p.troupe(&["session", "revert", &sid, &user], &[]).await,
        "revert",
    );
    assert_eq!(
        std::fs::read_to_string(root.join("user.txt")).unwrap(),
        "mine\n",
        "reverting the step undoes the edit made while it ran"
    );
    server.shutdown().await;
}
