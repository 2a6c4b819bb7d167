//! End-to-end tests of several `troupe` processes sharing one store: schema set-up when many
//! processes open a new file at once, and one owner per session (the session lease) when a
//! `troupe run` and a `troupe serve` drive the same session.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_testkit::{Conversation, Exhausted, Script, Step};

mod common;
use common::*;

/// Sixteen `troupe run`s create the same new store (and its directory) at once: each sets
/// up or finds the schema without an error, and the store then holds all sixteen sessions.
/// (Commands that only read a store refuse one that does not exist, so a run creates it.)
#[tokio::test]
async fn sixteen_processes_open_a_new_store_at_once() {
    let server = mock(vec![Step::text("done")]).await;
    let project = Project::new(&server.base_url());
    let db = project.base().join("sub").join("new.db");
    let children: Vec<_> = (0..16)
        .map(|_| {
            let db = db.display().to_string();
            project.spawn(&["run", "hi"], &[("TROUPE_DB", &db)])
        })
        .collect();
    let outs = tokio::time::timeout(
        CLI_RUN_DEADLINE,
        futures::future::join_all(children.into_iter().map(|c| c.wait_with_output())),
    )
    .await
    .expect("all 16 finish in time");
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.expect("wait");
        assert_success(&out, &format!("process {i} of 16"));
        assert_eq!(text(&out.stdout).trim(), "done", "process {i}");
    }
    let db_arg = db.display().to_string();
    let out = project
        .troupe(
            &["session", "list", "--format", "json"],
            &[("TROUPE_DB", &db_arg)],
        )
        .await;
    assert_success(&out, "session list");
    let v: Value = serde_json::from_slice(&out.stdout).expect("session list JSON");
    assert_eq!(v.as_array().map(Vec::len), Some(16), "{v}");
    server.shutdown().await;
}

/// A running `troupe serve` on a free port in `project`.
struct Served {
    child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
}

impl Served {
    async fn start(project: &Project, envs: &[(&str, &str)]) -> Served {
        let mut cmd = project.command(&["serve", "--port", "0"]);
        cmd.envs(envs.iter().copied());
        let (child, base) = serve_with(cmd).await;
        Served {
            child,
            base,
            http: reqwest::Client::new(),
        }
    }

    async fn get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status().as_u16(), 200, "GET {path}");
        r.json().await.expect("JSON")
    }

    /// `POST path` with a JSON body; (status, body).
    fn post(&self, path: &str, body: Value) -> impl Future<Output = (u16, Value)> + 'static {
        let req = self.http.post(format!("{}{path}", self.base)).json(&body);
        async move {
            let r = req.send().await.expect("POST");
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
    }

    /// Events of `/event` on a channel (after `server.connected`).
    async fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        subscribe_events(&self.base, None).await
    }

    /// Poll `GET /session/{sid}` until `pred` holds for it.
    async fn wait_session(&self, sid: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + CLI_RUN_DEADLINE;
        loop {
            let s = self.get(&format!("/session/{sid}")).await;
            if pred(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not seen in time; last {s}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The first `session.status` `waiting` event of `sid`.
async fn waiting_event(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, sid: &str) -> Value {
    loop {
        let v = tokio::time::timeout(CLI_RUN_DEADLINE, rx.recv())
            .await
            .expect("a waiting status in time")
            .expect("event stream open");
        if v["type"] == "session.status"
            && v["properties"]["sessionID"] == sid
            && v["properties"]["status"]["type"] == "waiting"
        {
            return v;
        }
    }
}

/// Waits (at most [`CLI_RUN_DEADLINE`]) for the served prompt `post`, which must answer 200
/// with `text` as its first text part.
async fn served_reply(post: tokio::task::JoinHandle<(u16, Value)>, text: &str) {
    let (status, reply) = tokio::time::timeout(CLI_RUN_DEADLINE, post)
        .await
        .expect("the served prompt finishes")
        .expect("join");
    assert_eq!(status, 200, "{reply}");
    assert_eq!(parts_of_type(&reply, "text")[0]["text"], text, "{reply}");
}

/// Asserts that the [`transcript`] of `messages` is `want`.
fn assert_transcript(messages: &Value, want: &[(&str, &str)]) {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(r, x)| (r.to_string(), x.to_string()))
        .collect();
    assert_eq!(transcript(messages), want, "{messages:#}");
}

/// `(role, text or tool summary)` of every message, in store order.
fn transcript(messages: &Value) -> Vec<(String, String)> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let parts: Vec<String> = m["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| match p["type"].as_str() {
                    Some("text") if p["synthetic"] != true => {
                        p["text"].as_str().map(str::to_string)
                    }
                    Some("tool") => Some(format!(
                        "{}:{}",
                        p["tool"].as_str().unwrap_or(""),
                        p["state"]["status"].as_str().unwrap_or("")
                    )),
                    _ => None,
                })
                .collect();
            (role(m).to_string(), parts.join("|"))
        })
        .collect()
}

fn gate_script(gate: &Path, second_turn_text: &str) -> Script {
    Script::new(vec![Conversation {
        steps: vec![
            // Turn 1 (from `troupe run`): a tool that waits for the gate, then text.
            Step::tool("test_gate", json!({"path": gate.display().to_string()})),
            Step::text("first done"),
            // Turn 2 (from the server): its request holds both assistant messages of turn 1.
            Step::text(second_turn_text),
        ],
        exhausted: Exhausted::Error,
        ..Default::default()
    }])
}

#[tokio::test]
async fn a_run_and_a_served_prompt_on_one_session_take_turns() {
    let gates = tempfile::tempdir().expect("tempdir");
    let gate = gates.path().join("open");
    let mock = start_mock(gate_script(&gate, "second done")).await;
    let project = Project::new(&mock.base_url());
    let ttl = [("TROUPE_LEASE_TTL_MS", "2000")];
    let srv = Served::start(&project, &ttl).await;
    let (status, s) = srv.post("/session", json!({})).await;
    assert_eq!(status, 200, "{s}");
    let sid = s["id"].as_str().expect("id").to_string();
    assert_eq!(
        s.get("owner"),
        None,
        "POST /session answers the plain session"
    );
    assert_eq!(
        srv.get(&format!("/session/{sid}")).await["owner"],
        Value::Null
    );
    let mut events = srv.subscribe().await;

    // `troupe run --session` drives turn 1 and holds the session while its tool waits.
    let mut run = project.command(&["run", "--session", &sid, "--format", "json", "first"]);
    run.env("TROUPE_LEASE_TTL_MS", "2000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = run.spawn().expect("spawn troupe run");
    let run_pid = run.id().expect("pid");
    let owned = srv
        .wait_session(&sid, "the run's lease", |s| s["owner"]["pid"] == run_pid)
        .await;
    assert_eq!(owned["owner"]["label"], "troupe run", "{owned}");
    let listed = srv.get("/session").await;
    assert_eq!(listed[0]["owner"]["pid"], run_pid, "{listed}");

    // A served prompt meanwhile waits for the run, and says whom it waits for.
    let post = tokio::spawn(srv.post(
        &format!("/session/{sid}/message"),
        json!({"text": "second"}),
    ));
    let waiting = waiting_event(&mut events, &sid).await;
    let owner = waiting["properties"]["status"]["owner"]
        .as_str()
        .unwrap_or("");
    assert!(
        owner.starts_with(&format!("troupe run (pid {run_pid} on ")),
        "{waiting}"
    );
    std::fs::write(&gate, "").expect("open the gate");

    let out = tokio::time::timeout(CLI_RUN_DEADLINE, run.wait_with_output())
        .await
        .expect("run finishes")
        .expect("wait");
    assert_success(&out, "troupe run --session");
    served_reply(post, "second done").await;

    // One history, the two turns one after the other, every step once.
    let msgs = srv.get(&format!("/session/{sid}/message")).await;
    assert_transcript(
        &msgs,
        &[
            ("user", "first"),
            ("assistant", "test_gate:completed"),
            ("assistant", "first done"),
            ("user", "second"),
            ("assistant", "second done"),
        ],
    );
    assert_eq!(completions(&mock).len(), 3);
    // The server let go of the session after its turn.
    srv.wait_session(&sid, "no owner after both turns", |s| s["owner"].is_null())
        .await;
}

#[tokio::test]
async fn a_killed_owner_s_lease_expires_and_a_new_driver_takes_over() {
    let gates = tempfile::tempdir().expect("tempdir");
    // This gate never opens: the run is killed inside the tool.
    let gate = gates.path().join("never");
    let mock = start_mock(gate_script(&gate, "unused")).await;
    // The server's turn is the second request: one assistant message in it (the killed
    // run's), so it gets step 1.
    let project = Project::new(&mock.base_url());
    let ttl = [("TROUPE_LEASE_TTL_MS", "1500")];
    let srv = Served::start(&project, &ttl).await;
    let (_, s) = srv.post("/session", json!({})).await;
    let sid = s["id"].as_str().expect("id").to_string();
    let mut events = srv.subscribe().await;

    let mut run = project.command(&["run", "--session", &sid, "--format", "json", "first"]);
    run.env("TROUPE_LEASE_TTL_MS", "1500")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut run = run.spawn().expect("spawn troupe run");
    let run_pid = run.id().expect("pid");
    srv.wait_session(&sid, "the run's lease", |s| s["owner"]["pid"] == run_pid)
        .await;
    // Wait until the run is inside its tool.
    let deadline = tokio::time::Instant::now() + CLI_RUN_DEADLINE;
    while !transcript(&srv.get(&format!("/session/{sid}/message")).await)
        .iter()
        .any(|(_, x)| x == "test_gate:running")
    {
        assert!(tokio::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A driver that will not wait is refused with one line naming the owner.
    let out = project
        .troupe(
            &["run", "--session", &sid, "not now"],
            &[("TROUPE_LEASE_WAIT_MS", "0")],
        )
        .await;
    let line = assert_one_line_failure(&out, "run on a session another process drives");
    assert!(
        line.contains(&format!("is driven by troupe run (pid {run_pid} on ")),
        "{line}"
    );

    // Nobody deletes a session another process drives.
    let r = srv
        .http
        .delete(format!("{}/session/{sid}", srv.base))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(r.status().as_u16(), 409);
    let err: Value = r.json().await.expect("JSON error");
    assert_eq!(err["error"]["type"], "session_busy", "{err}");
    let out = project.troupe(&["session", "delete", &sid], &[]).await;
    let line = assert_one_line_failure(&out, "session delete while driven elsewhere");
    assert!(line.contains(&format!("(pid {run_pid} on ")), "{line}");
    srv.get(&format!("/session/{sid}")).await;

    // A driver waiting for the session says so, and Ctrl-C ends its wait.
    let mut waiter = project.command(&["run", "--session", &sid, "third"]);
    waiter.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut waiter = waiter.spawn().expect("spawn a waiting troupe run");
    let mut lines = {
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(waiter.stderr.take().expect("stderr")).lines()
    };
    // Other activity may come first; the waiting line names the owner.
    loop {
        let line = tokio::time::timeout(CLI_RUN_DEADLINE, lines.next_line())
            .await
            .expect("a waiting line in time")
            .expect("read stderr")
            .expect("a waiting line before the end of stderr");
        if line.contains("is driven by") {
            assert!(
                line.contains(&format!("is driven by troupe run (pid {run_pid} on "))
                    && line.contains("waiting"),
                "{line}"
            );
            break;
        }
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &waiter.id().expect("pid").to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let mut rest = Vec::new();
    while let Some(l) = tokio::time::timeout(CLI_RUN_DEADLINE, lines.next_line())
        .await
        .expect("the waiter ends in time")
        .expect("read stderr")
    {
        rest.push(l);
    }
    let status = waiter.wait().await.expect("wait");
    assert!(!status.success());
    assert!(
        rest.iter().any(|l| l.starts_with("troupe: ")
            && l.contains(&format!(
                "gave up waiting for session {sid}, which troupe run (pid {run_pid} "
            ))),
        "{rest:?}"
    );

    // The server's prompt waits for the run; the run dies without releasing anything.
    let post = tokio::spawn(srv.post(
        &format!("/session/{sid}/message"),
        json!({"text": "second"}),
    ));
    let waiting = waiting_event(&mut events, &sid).await;
    assert!(
        waiting["properties"]["status"]["owner"]
            .as_str()
            .is_some_and(|o| o.contains(&format!("pid {run_pid} "))),
        "{waiting}"
    );
    run.start_kill().expect("SIGKILL");
    let status = run.wait().await.expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    // Once the dead run's lease expires the server takes the session over.
    served_reply(post, "first done").await;
    let msgs = srv.get(&format!("/session/{sid}/message")).await;
    assert_transcript(
        &msgs,
        &[
            ("user", "first"),
            ("assistant", "test_gate:error"),
            ("user", "second"),
            ("assistant", "first done"),
        ],
    );
    // The refused and the interrupted runs created nothing; the provider saw the run's
    // step and the server's.
    assert_eq!(completions(&mock).len(), 2);
    srv.wait_session(&sid, "no owner after the takeover", |s| {
        s["owner"].is_null()
    })
    .await;
    drop(srv.child);
}
