//! End-to-end tests of `troupe serve` (and `troupe run --attach`) against the scripted
//! provider (`troupe-testkit`). Each test starts its own server process on a free port with
//! its own project directory, store and empty global config.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use troupe_testkit::{Conversation, MockServer, Script, Step};

mod common;
use common::*;

/// A running `troupe serve` and its client ([`Api`], which it derefs to).
struct Served {
    /// Killed on drop.
    _child: tokio::process::Child,
    api: Api,
    /// The project the server runs in.
    project: Project,
}

impl std::ops::Deref for Served {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Served {
    /// Start `troupe serve --port 0 <args>` with a config pointing at `mock_url`.
    async fn start(mock_url: &str, extra_config: Value, args: &[&str]) -> Served {
        let project = Project::with_config(&mock_config_with(mock_url, extra_config));
        let mut cmd = project.command(&["serve", "--port", "0"]);
        cmd.args(args);
        let (child, base) = serve_with(cmd).await;
        let password = args
            .iter()
            .position(|a| *a == "--password")
            .and_then(|i| args.get(i + 1))
            .map(|s| s.to_string());
        Served {
            _child: child,
            api: Api::with_password(&base, password),
            project,
        }
    }

    /// Subscribe to /event; events arrive on the returned channel (after `server.connected`).
    async fn subscribe(&self) -> mpsc::UnboundedReceiver<Value> {
        subscribe_events(&self.base, self.password.clone()).await
    }

    /// The Prometheus text of `GET /metrics`.
    async fn metrics(&self) -> String {
        self.req(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    }
}

/// A server (no extra config, no flags) over a scripted provider answering one
/// conversation of `steps`; the provider must outlive the server's use.
async fn serving(steps: Vec<Step>) -> (MockServer, Served) {
    let mock = mock(steps).await;
    let srv = Served::start(&mock.base_url(), json!({}), &[]).await;
    (mock, srv)
}

/// A server started with `args` (no extra config) over a scripted provider that has no
/// conversation (the test never prompts a model); the provider must outlive the server.
async fn serving_idle(args: &[&str]) -> (MockServer, Served) {
    let mock = start_mock(Script::default()).await;
    let srv = Served::start(&mock.base_url(), json!({}), args).await;
    (mock, srv)
}

/// Waits for the first event of `sid` with type `kind` (a permission or question ask); the
/// id of the request it announces.
async fn asked_id(rx: &mut mpsc::UnboundedReceiver<Value>, sid: &str, kind: &str) -> String {
    let asked = wait_event(rx, sid, kind).await;
    asked["properties"]["id"]
        .as_str()
        .expect("request id")
        .to_string()
}

/// Collect events of `sid` until `session.idle` for it.
async fn until_idle(rx: &mut mpsc::UnboundedReceiver<Value>, sid: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let deadline = Instant::now() + CLI_RUN_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let v = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no session.idle in time; got {out:#?}"))
            .expect("event stream open");
        if event_session(&v).as_deref() != Some(sid) {
            continue;
        }
        let idle = v["type"] == "session.idle";
        out.push(v);
        if idle {
            return out;
        }
    }
}

/// Wait for the first event of `sid` with type `kind`.
async fn wait_event(rx: &mut mpsc::UnboundedReceiver<Value>, sid: &str, kind: &str) -> Value {
    let deadline = Instant::now() + CLI_RUN_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let v = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} in time"))
            .expect("event stream open");
        if v["type"] == kind && event_session(&v).as_deref() == Some(sid) {
            return v;
        }
    }
}

/// Sends `request` (which must get an answer); its status.
async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.expect("send").status().as_u16()
}

fn event_session(v: &Value) -> Option<String> {
    let p = &v["properties"];
    p["sessionID"]
        .as_str()
        .or(p["info"]["sessionID"].as_str())
        .or(p["part"]["sessionID"].as_str())
        .or(p["info"]["id"].as_str().filter(|id| id.starts_with("ses_")))
        .map(str::to_string)
}

fn position(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("event not found in {events:#?}"))
}

fn find_nodes<'a>(n: &'a Value, kind: &str, out: &mut Vec<&'a Value>) {
    if n["kind"] == kind {
        out.push(n);
    }
    for c in n["children"].as_array().into_iter().flatten() {
        find_nodes(c, kind, out);
    }
}

#[tokio::test]
async fn prompt_async_streams_events_in_order_and_sync_prompt_returns_the_reply() {
    let (_mock, srv) = serving(vec![
        Step::text("Hello from the served runtime").with_chunk_size(5),
    ])
    .await;
    let sid = srv.new_session().await;
    let mut rx = srv.subscribe().await;
    assert_eq!(
        status_of(
            srv.req(
                reqwest::Method::POST,
                &format!("/session/{sid}/prompt_async"),
            )
            .json(&json!({"parts": [{"type": "text", "text": "say hello"}]}))
        )
        .await,
        204
    );
    let events = until_idle(&mut rx, &sid).await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let busy = position(&events, |e| {
        e["type"] == "session.status" && e["properties"]["status"]["type"] == "busy"
    });
    let msg = position(&events, |e| e["type"] == "message.updated");
    let part = position(&events, |e| e["type"] == "message.part.updated");
    let delta = position(&events, |e| e["type"] == "message.part.delta");
    let idle_status = events
        .iter()
        .rposition(|e| e["type"] == "session.status" && e["properties"]["status"]["type"] == "idle")
        .expect("idle status");
    assert!(busy < delta && msg < delta && part < delta, "{types:?}");
    assert!(delta < idle_status, "{types:?}");
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "message.part.delta")
        .filter_map(|e| e["properties"]["delta"].as_str())
        .collect();
    assert_eq!(text, "Hello from the served runtime");

    // The stored messages, and a synchronous prompt that returns the reply.
    let (status, msgs) = srv.get(&format!("/session/{sid}/message")).await;
    assert_eq!(status, 200);
    assert_eq!(msgs.as_array().map(Vec::len), Some(2), "{msgs:#}");
    let (status, reply) = srv
        .post(&format!("/session/{sid}/message"), json!({"text": "again"}))
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["info"]["role"], "assistant");
    assert!(
        reply["parts"].as_array().is_some_and(|p| !p.is_empty()),
        "{reply:#}"
    );
    // Paging back through the four messages two at a time: newest first page, oldest first
    // within a page, the first id of a page is the cursor of the next, an empty page ends it.
    let (_, all) = srv.get(&format!("/session/{sid}/message")).await;
    let all_ids: Vec<&str> = all
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["info"]["id"].as_str())
        .collect();
    assert_eq!(all_ids.len(), 4, "{all:#}");
    let (status, newest) = srv.get(&format!("/session/{sid}/message?limit=2")).await;
    assert_eq!(status, 200, "{newest}");
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("page")
            .iter()
            .filter_map(|m| m["info"]["id"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(ids(&newest), all_ids[2..]);
    assert_eq!(newest[1]["info"]["id"], reply["info"]["id"]);
    assert!(newest[1]["parts"].as_array().is_some_and(|p| !p.is_empty()));
    let (_, older) = srv
        .get(&format!(
            "/session/{sid}/message?limit=2&before={}",
            all_ids[2]
        ))
        .await;
    assert_eq!(ids(&older), all_ids[..2]);
    let (_, none) = srv
        .get(&format!(
            "/session/{sid}/message?limit=2&before={}",
            all_ids[0]
        ))
        .await;
    assert_eq!(none, json!([]));
    for bad in ["limit=0", "limit=-1", "limit=two", "before=ses_x"] {
        let (status, body) = srv.get(&format!("/session/{sid}/message?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    // Listing, children, abort, agents, models, config.
    let (_, list) = srv.get("/session?roots=true").await;
    assert_eq!(list[0]["id"], sid.as_str());
    let (status, kids) = srv.get(&format!("/session/{sid}/children")).await;
    assert_eq!((status, kids), (200, json!([])));
    assert_eq!(
        srv.post(&format!("/session/{sid}/abort"), json!({})).await,
        (200, json!(true))
    );
    let (_, agents) = srv.get("/agent").await;
    assert!(
        agents
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["name"] == "build"))
    );
    // The models that can run here, as `troupe models` lists them: the configured one, not
    // the catalog of providers without a key; `?all=true` adds the catalog.
    let (_, models) = srv.get("/models").await;
    let ids: Vec<String> = models
        .as_array()
        .expect("models")
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["provider_id"].as_str().unwrap_or(""),
                m["model_id"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(ids.contains(&"mock/mock-model".to_string()), "{ids:?}");
    assert!(!ids.iter().any(|i| i.starts_with("openai/")), "{ids:?}");
    let (_, every) = srv.get("/models?all=true").await;
    assert!(
        every.to_string().contains("gpt-5"),
        "the whole catalog with all=true"
    );
    let (_, config) = srv.get("/config").await;
    assert_eq!(
        config["provider"]["mock"]["options"]["apiKey"],
        "<redacted>"
    );
    // Delete.
    assert_eq!(
        status_of(srv.req(reqwest::Method::DELETE, &format!("/session/{sid}"))).await,
        200
    );
    assert_eq!(srv.get(&format!("/session/{sid}")).await.0, 404);
}

#[tokio::test]
async fn actors_show_the_processor_and_tool_call_while_a_slow_tool_runs() {
    let (_mock, srv) = serving(vec![
        Step::tool("test_sleep", json!({"ms": 2000})),
        Step::text("slept well"),
    ])
    .await;
    let sid = srv.new_session().await;
    let mut rx = srv.subscribe().await;
    srv.prompt_async(&sid, "sleep").await;
    let deadline = Instant::now() + CLI_RUN_DEADLINE;
    let tree = loop {
        let (status, tree) = srv.get("/actors").await;
        assert_eq!(status, 200);
        let mut calls = Vec::new();
        find_nodes(&tree, "tool_call", &mut calls);
        if calls.iter().any(|c| c["tool"] == "test_sleep") {
            break tree;
        }
        assert!(
            Instant::now() < deadline,
            "no tool_call node in time: {tree:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut sessions = Vec::new();
    find_nodes(&tree, "session", &mut sessions);
    assert_eq!(sessions.len(), 1, "{tree:#}");
    assert_eq!(sessions[0]["id"], sid.as_str());
    assert_eq!(sessions[0]["status"], "busy");
    let mut procs = Vec::new();
    find_nodes(sessions[0], "processor", &mut procs);
    assert_eq!(procs.len(), 1, "{tree:#}");
    let mut calls = Vec::new();
    find_nodes(procs[0], "tool_call", &mut calls);
    assert_eq!(
        calls.len(),
        1,
        "the tool call hangs under the processor: {tree:#}"
    );
    assert_eq!(calls[0]["sessionID"], sid.as_str());
    let metrics = srv.metrics().await;
    assert!(
        metrics.contains("troupe_sessions{status=\"busy\"} 1"),
        "{metrics}"
    );
    // OpenCode's status map: the busy session, and only it.
    let (status, statuses) = srv.get("/session/status").await;
    assert_eq!(status, 200);
    assert_eq!(statuses, json!({ sid.as_str(): {"type": "busy"} }));

    until_idle(&mut rx, &sid).await;
    assert_eq!(srv.get("/session/status").await, (200, json!({})));
    let (_, tree) = srv.get("/actors").await;
    let (mut procs, mut calls) = (Vec::new(), Vec::new());
    find_nodes(&tree, "processor", &mut procs);
    find_nodes(&tree, "tool_call", &mut calls);
    assert!(procs.is_empty() && calls.is_empty(), "{tree:#}");
    let metrics = srv.metrics().await;
    for needle in [
        "troupe_tool_calls_total{tool=\"test_sleep\"",
        "troupe_steps_total 2",
        "troupe_provider_requests_total{",
        "troupe_tokens_total{",
        "troupe_session_queue_depth 0",
        "troupe_actors ",
        "troupe_cost_usd_total ",
    ] {
        assert!(metrics.contains(needle), "missing {needle}:\n{metrics}");
    }
}

#[tokio::test]
async fn permission_asks_wait_for_http_replies_once_and_reject_with_feedback() {
    // The model runs `command` in bash, then answers `answer`, in the session prompted with
    // `token`.
    let greet = |token: &str, command: &str, answer: &str| {
        Conversation::new(vec![
            Step::tool("bash", json!({"command": command, "description": "greet"})),
            Step::text(answer),
        ])
        .matching(token)
    };
    let mock = start_mock(Script::new(vec![
        greet("perm-once", "echo hi-there", "ran it"),
        greet("perm-reject", "echo nope", "ok, I will not"),
    ]))
    .await;
    let srv = Served::start(
        &mock.base_url(),
        json!({"permission": {"bash": "ask"}}),
        &[],
    )
    .await;

    // once
    let sid = srv.new_session().await;
    let mut rx = srv.subscribe().await;
    srv.prompt_async(&sid, "perm-once").await;
    let rid = asked_id(&mut rx, &sid, "permission.asked").await;
    let (_, pending) = srv.get("/permission").await;
    assert!(
        pending
            .as_array()
            .is_some_and(|p| p.iter().any(|r| r["id"] == rid.as_str()
                && r["permission"] == "bash"
                && r["sessionID"] == sid.as_str())),
        "{pending:#}"
    );
    // The ask waits: nothing answers it by itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        srv.get("/permission").await.1.as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(
        srv.post(
            &format!("/permission/{rid}/reply"),
            json!({"reply": "once"})
        )
        .await,
        (200, json!(true))
    );
    until_idle(&mut rx, &sid).await;
    let (_, msgs) = srv.get(&format!("/session/{sid}/message")).await;
    let tool = msgs
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .find(|p| p["type"] == "tool")
        .expect("tool part")
        .clone();
    assert_eq!(tool["state"]["status"], "completed", "{tool:#}");
    assert!(
        tool["state"]["output"]
            .as_str()
            .is_some_and(|o| o.contains("hi-there"))
    );
    // Answering twice: 404. A bad reply: 400.
    let (status, err) = srv
        .post(
            &format!("/permission/{rid}/reply"),
            json!({"reply": "once"}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["type"], "not_found");
    let (status, _) = srv
        .post("/permission/x/reply", json!({"reply": "sure"}))
        .await;
    assert_eq!(status, 400);

    // reject with feedback
    let sid = srv.new_session().await;
    srv.prompt_async(&sid, "perm-reject").await;
    let rid = asked_id(&mut rx, &sid, "permission.asked").await;
    assert_eq!(
        srv.post(
            &format!("/permission/{rid}/reply"),
            json!({"reply": "reject", "message": "use python-zebra instead"})
        )
        .await,
        (200, json!(true))
    );
    until_idle(&mut rx, &sid).await;
    let last = mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| {
            r.session_key.contains("perm-reject") || r.body.to_string().contains("perm-reject")
        })
        .expect("a request of the rejected session");
    assert!(
        last.body.to_string().contains("use python-zebra instead"),
        "the feedback did not reach the model: {}",
        last.body
    );
}

#[tokio::test]
async fn questions_wait_for_http_answers_and_a_rejected_one_stops_the_turn() {
    let question = |tag: &str| {
        Step::tool(
            "question",
            json!({"questions": [{"question": format!("Which color ({tag})?"), "header": "Color",
                "options": [{"label": "red", "description": ""}, {"label": "blue", "description": ""}]}]}),
        )
    };
    let mock = start_mock(Script::new(vec![
        Conversation::new(vec![question("a"), Step::text("blue it is")]).matching("q-answer"),
        Conversation::new(vec![question("r"), Step::text("never")]).matching("q-reject"),
    ]))
    .await;
    let srv = Served::start(&mock.base_url(), json!({}), &[]).await;
    let mut rx = srv.subscribe().await;

    let sid = srv.new_session().await;
    srv.prompt_async(&sid, "q-answer").await;
    let qid = asked_id(&mut rx, &sid, "question.asked").await;
    let (_, pending) = srv.get("/question").await;
    assert_eq!(pending[0]["id"], qid.as_str(), "{pending:#}");
    assert_eq!(pending[0]["questions"][0]["options"][1]["label"], "blue");
    // A body that does not fit: 400, and the question stays.
    let (status, _) = srv
        .post(&format!("/question/{qid}/reply"), json!({"answers": []}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        srv.post(
            &format!("/question/{qid}/reply"),
            json!({"answers": [["blue"]]})
        )
        .await,
        (200, json!(true))
    );
    until_idle(&mut rx, &sid).await;
    let (status, _) = srv
        .post(
            &format!("/question/{qid}/reply"),
            json!({"answers": [["red"]]}),
        )
        .await;
    assert_eq!(status, 404);
    let (_, msgs) = srv.get(&format!("/session/{sid}/message")).await;
    let text = msgs.to_string();
    assert!(text.contains("Which color (a)?: blue"), "{text}");
    assert!(text.contains("blue it is"), "{text}");

    let sid = srv.new_session().await;
    srv.prompt_async(&sid, "q-reject").await;
    let qid = asked_id(&mut rx, &sid, "question.asked").await;
    assert_eq!(
        srv.post(&format!("/question/{qid}/reject"), json!({}))
            .await,
        (200, json!(true))
    );
    until_idle(&mut rx, &sid).await;
    let (_, msgs) = srv.get(&format!("/session/{sid}/message")).await;
    let text = msgs.to_string();
    assert!(text.contains("dismissed"), "{text}");
    assert!(!text.contains("never"), "{text}");
    assert_eq!(srv.get("/question").await.1, json!([]));
}

#[tokio::test]
async fn non_loopback_bind_needs_a_password_and_the_password_guards_every_route() {
    let project = Project::empty();
    let out = tokio::time::timeout(
        CLI_RUN_DEADLINE,
        project
            .command(&["serve", "--hostname", "0.0.0.0", "--port", "0"])
            .output(),
    )
    .await
    .expect("in time")
    .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("password"), "{stderr}");

    let (_mock, srv) = serving_idle(&["--password", "s3cret"]).await;
    let raw = reqwest::Client::new();
    for path in [
        "/", "/event", "/session", "/actors", "/metrics", "/doc", "/nope",
    ] {
        let url = format!("{}{path}", srv.base);
        let r = raw.get(&url).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), 401, "{path} without the password");
        // RFC 9110 §11.6.1: a 401 names the schemes that are accepted.
        let challenge = r
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(
            challenge.contains("Bearer") && challenge.contains("Basic"),
            "{path}: WWW-Authenticate {challenge:?}"
        );
        let body: Value = r.json().await.expect("JSON 401");
        assert_eq!(body["error"]["type"], "unauthorized");
        assert_eq!(
            status_of(raw.get(&url).bearer_auth("wrong")).await,
            401,
            "{path} with a wrong password"
        );
        if path == "/nope" {
            continue;
        }
        for (request, how) in [
            (raw.get(&url).bearer_auth("s3cret"), "with the password"),
            (
                raw.get(&url).basic_auth("anyone", Some("s3cret")),
                "with basic auth",
            ),
            (raw.get(format!("{url}?token=s3cret")), "with ?token="),
        ] {
            assert_eq!(status_of(request).await, 200, "{path} {how}");
        }
    }
    // No CORS headers unless --cors was given.
    let r = raw
        .get(format!("{}/session", srv.base))
        .bearer_auth("s3cret")
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("GET");
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn web_pages_cannot_drive_or_read_the_server_and_create_nothing() {
    let (mock, srv) = serving_idle(&[]).await;
    let port = srv.base.rsplit(':').next().expect("port").to_string();
    let own_origin = format!("http://127.0.0.1:{port}");
    let sid = srv.new_session().await;
    let raw = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", srv.base);
    let expect = async |request: reqwest::RequestBuilder, status: u16, kind: &str, what: &str| {
        let r = request.send().await.expect("send");
        assert_eq!(r.status().as_u16(), status, "{what}");
        let body: Value = r.json().await.expect("JSON error");
        assert_eq!(body["error"]["type"], kind, "{what}: {body}");
        eprintln!("{what}: {}", body["error"]["message"]);
    };

    // Clickjacking: the web view (and every other answer) refuses to be framed.
    for path in ["/", "/session"] {
        let r = raw.get(url(path)).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), 200, "GET {path}");
        let h = r.headers();
        assert_eq!(h["x-frame-options"], "DENY", "GET {path}");
        assert_eq!(
            h["content-security-policy"], "frame-ancestors 'none'",
            "GET {path}"
        );
    }

    // DNS rebinding: the page's own name in Host.
    for host in [format!("evil.example:{port}"), "evil.example".to_string()] {
        expect(
            raw.post(url("/session"))
                .header("host", host)
                .json(&json!({"title": "rebound"})),
            421,
            "misdirected_request",
            "foreign Host",
        )
        .await;
    }
    expect(
        raw.get(url("/event"))
            .header("host", format!("evil.example:{port}")),
        421,
        "misdirected_request",
        "foreign Host on /event",
    )
    .await;
    // Loopback names of the bound port are served.
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        assert_eq!(
            status_of(raw.get(url("/session")).header("host", host)).await,
            200
        );
    }

    // A cross-site page: JSON with a foreign Origin, and the preflight-free simple forms.
    expect(
        raw.post(url("/session"))
            .header("origin", "http://evil.example")
            .json(&json!({"title": "cross-site"})),
        403,
        "forbidden",
        "foreign Origin",
    )
    .await;
    for ct in ["text/plain", "application/x-www-form-urlencoded"] {
        expect(
            raw.post(url("/session"))
                .header("content-type", ct)
                .body("{\"title\": \"form\"}"),
            403,
            "forbidden",
            "non-JSON POST /session",
        )
        .await;
        expect(
            raw.post(url(&format!("/session/{sid}/prompt_async")))
                .header("content-type", ct)
                .header("origin", "http://evil.example")
                .body("{\"text\": \"run rm -rf ~\"}"),
            403,
            "forbidden",
            "non-JSON prompt_async",
        )
        .await;
        expect(
            raw.post(url(&format!("/session/{sid}/prompt_async")))
                .header("content-type", ct)
                .body("{\"text\": \"run rm -rf ~\"}"),
            403,
            "forbidden",
            "non-JSON prompt_async without Origin",
        )
        .await;
    }
    // An untyped body (a Blob sent by fetch) is no better.
    expect(
        raw.post(url(&format!("/session/{sid}/message")))
            .body("{\"text\": \"hi\"}"),
        403,
        "forbidden",
        "untyped body",
    )
    .await;
    // Reading cross-site is refused too: the event stream, messages, config.
    for path in [
        "/event".to_string(),
        format!("/session/{sid}/message"),
        "/config".into(),
    ] {
        let r = raw
            .get(url(&path))
            .header("origin", "http://evil.example")
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status().as_u16(), 403, "cross-site GET {path}");
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }
    expect(
        raw.delete(url(&format!("/session/{sid}")))
            .header("origin", "null"),
        403,
        "forbidden",
        "opaque origin",
    )
    .await;

    // Nothing was created, nothing was prompted, the provider never called.
    let (_, list) = srv.get("/session").await;
    let ids: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![sid.as_str()], "{list}");
    let (_, msgs) = srv.get(&format!("/session/{sid}/message")).await;
    assert_eq!(msgs, json!([]));
    assert!(common::completions(&mock).is_empty());

    // What the web view sends (same origin, JSON bodies, empty-bodied abort) still works.
    assert_eq!(
        status_of(
            raw.post(url("/session"))
                .header("origin", &own_origin)
                .json(&json!({"title": "from the page"}))
        )
        .await,
        200
    );
    assert_eq!(
        status_of(
            raw.post(url(&format!("/session/{sid}/abort")))
                .header("origin", &own_origin)
                .json(&json!({}))
        )
        .await,
        200
    );
    assert_eq!(
        status_of(raw.post(url(&format!("/session/{sid}/abort")))).await,
        200,
        "curl -X POST without a body"
    );
    assert_eq!(
        status_of(raw.get(url("/event")).header("origin", &own_origin)).await,
        200
    );
}

#[tokio::test]
async fn blank_passwords_and_any_origin_without_a_password_are_refused_at_start() {
    let project = Project::empty();
    let cases: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (vec!["--password", ""], None, "blank"),
        (vec!["--password", "   "], None, "blank"),
        (vec![], Some(""), "blank"),
        (vec![], Some(" \t"), "blank"),
        (
            vec!["--hostname", "0.0.0.0", "--password", " "],
            None,
            "blank",
        ),
        (vec!["--cors", "*"], None, "--cors '*'"),
    ];
    for (args, env, needle) in cases {
        let mut cmd = project.command(&["serve", "--port", "0"]);
        cmd.args(&args);
        if let Some(v) = env {
            cmd.env("TROUPE_SERVER_PASSWORD", v);
        }
        let out = tokio::time::timeout(CLI_RUN_DEADLINE, cmd.output())
            .await
            .expect("in time")
            .expect("run");
        let what = format!("serve {args:?} env {env:?}");
        let line = assert_one_line_failure(&out, &what);
        assert!(line.contains(needle), "{what}: {line}");
    }
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let (_mock, srv) = serving_idle(&["--cors", "http://ui.example"]).await;
    let (status, err) = srv.get("/session/ses_nope").await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["type"], "not_found");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ses_nope"))
    );
    let (status, err) = srv
        .post("/session/ses_nope/prompt_async", json!({"text": "x"}))
        .await;
    assert_eq!(
        (status, err["error"]["type"].clone()),
        (404, json!("not_found"))
    );

    let sid = srv.new_session().await;
    let r = srv
        .req(reqwest::Method::POST, &format!("/session/{sid}/message"))
        .header("content-type", "application/json")
        .body("{\"text\": ")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 400);
    let err: Value = r.json().await.expect("JSON error");
    assert_eq!(err["error"]["type"], "bad_request");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("JSON")),
        "{err}"
    );
    let (status, err) = srv
        .post(&format!("/session/{sid}/prompt_async"), json!({"text": 5}))
        .await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = srv
        .post(
            &format!("/session/{sid}/prompt_async"),
            json!({"text": "  "}),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = srv
        .post(
            &format!("/session/{sid}/prompt_async"),
            json!({"text": "x", "agent": "nobody"}),
        )
        .await;
    assert_eq!(status, 400, "{err}");

    // A fresh client: the server answers 413 without reading the body and closes that
    // connection, which must not break the pooled one.
    let r = reqwest::Client::new()
        .post(format!("{}/session", srv.base))
        .header("content-type", "application/json")
        .body(vec![b' '; 9 * 1024 * 1024])
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 413);
    let err: Value = r.json().await.expect("JSON error");
    assert_eq!(err["error"]["type"], "payload_too_large");

    let (status, err) = srv.get("/no/such/route").await;
    assert_eq!(
        (status, err["error"]["type"].clone()),
        (404, json!("not_found"))
    );
    let (_, doc) = srv.get("/doc").await;
    assert!(doc["paths"]["/session/{id}/prompt_async"].is_object());
    // --cors: the allowed origin gets CORS headers.
    let r = srv
        .req(reqwest::Method::GET, "/session")
        .header("origin", "http://ui.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://ui.example")
    );
    // The preflight of a PATCH (rename a session from another origin) is allowed.
    let r = srv
        .req(reqwest::Method::OPTIONS, "/session/x")
        .header("origin", "http://ui.example")
        .header("access-control-request-method", "PATCH")
        .send()
        .await
        .expect("OPTIONS");
    let methods = r
        .headers()
        .get("access-control-allow-methods")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(methods.contains("PATCH"), "preflight allows {methods:?}");
}

#[tokio::test]
async fn run_attach_prints_the_reply_and_exits_zero() {
    let mock = mock(vec![Step::text("Attached answer here")]).await;
    let srv = Served::start(&mock.base_url(), json!({}), &["--password", "pw1"]).await;
    let out = tokio::time::timeout(
        CLI_RUN_DEADLINE,
        srv.project
            .command(&["run", "--attach", &srv.base, "--password", "pw1", "hi"])
            .output(),
    )
    .await
    .expect("in time")
    .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Attached answer here"), "{stdout}");
    // Without the password: a one-line failure.
    let out = srv
        .project
        .command(&["run", "--attach", &srv.base, "hi"])
        .output()
        .await
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));
}

/// Measures (does not assert tight bounds): 200 concurrent scripted sessions through
/// prompt_async while one /event subscriber reads and /actors is polled.
#[tokio::test]
async fn load_200_sessions_with_one_subscriber_and_actor_polling() {
    const N: usize = 200;
    let mock = mock(vec![
        Step::text("a reply streamed in a few chunks for the load test").with_chunk_size(10),
    ])
    .await;
    mock.set_record_bodies(false);
    let srv = Served::start(&mock.base_url(), json!({}), &[]).await;
    let mut sids = Vec::with_capacity(N);
    for _ in 0..N {
        sids.push(srv.new_session().await);
    }
    let mut rx = srv.subscribe().await;
    let wanted: std::collections::HashSet<String> = sids.iter().cloned().collect();
    let reader = tokio::spawn(async move {
        let mut total = 0u64;
        let mut idle = std::collections::HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while idle.len() < wanted.len() && Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
                Ok(Some(v)) => {
                    total += 1;
                    if v["type"] == "session.idle"
                        && let Some(s) = event_session(&v)
                        && wanted.contains(&s)
                    {
                        idle.insert(s);
                    }
                }
                _ => break,
            }
        }
        (total, idle.len())
    });
    let start = Instant::now();
    let paths: Vec<String> = sids
        .iter()
        .map(|sid| format!("/session/{sid}/prompt_async"))
        .collect();
    let posts =
        futures::future::join_all(paths.iter().map(|p| srv.post(p, json!({"text": "load"})))).await;
    let refused: Vec<&(u16, Value)> = posts.iter().filter(|(s, _)| *s != 204).collect();
    assert!(
        refused.is_empty(),
        "{} of 200 not accepted: {refused:?}",
        refused.len()
    );
    let mut lat = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        let (status, _) = srv.get("/actors").await;
        lat.push(t.elapsed());
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (events, idled) = reader.await.expect("reader");
    let elapsed = start.elapsed();
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    // Sessions completed per the store (independent of the subscriber).
    let mut completed = 0;
    for sid in &sids {
        let (_, msgs) = srv.get(&format!("/session/{sid}/message")).await;
        if msgs.as_array().is_some_and(|m| {
            m.iter().any(|x| {
                x["info"]["role"] == "assistant" && x["info"]["time"]["completed"].is_number()
            })
        }) {
            completed += 1;
        }
    }
    eprintln!(
        "load: {N} sessions, {completed} completed, subscriber saw {idled} session.idle and {events} events in {:.2}s; GET /actors p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        elapsed.as_secs_f64(),
        p(0.50).as_secs_f64() * 1e3,
        p(0.99).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3,
    );
    assert_eq!(completed, N);
    assert_eq!(idled, N, "the subscriber missed session.idle events");
}

#[tokio::test]
async fn metrics_count_crashed_actors_by_role() {
    let (_mock, srv) = serving(vec![
        Step::tool("test_panic", json!({"message": "kaboom"})),
        Step::text("recovered"),
    ])
    .await;
    let sid = srv.new_session().await;
    let mut rx = srv.subscribe().await;
    srv.prompt_async(&sid, "crash a tool").await;
    until_idle(&mut rx, &sid).await;
    let metrics = srv.metrics().await;
    // test_panic is side-effecting: one failure, never restarted.
    for needle in [
        "# TYPE troupe_actor_failures_total counter",
        "troupe_actor_failures_total{role=\"side_effect_tool\"} 1",
    ] {
        assert!(metrics.contains(needle), "missing {needle}:\n{metrics}");
    }
    assert!(
        !metrics.contains("troupe_actor_restarts_total{role=\"side_effect_tool\"}"),
        "{metrics}"
    );
}

/// What the model's bash runs against the server it works for (issue 11's promise kept on
/// the server side): reads work, every state-changing request is refused, also from a
/// process that cleared its environment or detached itself.
const PROBE: &str = r#"
import json, sys, urllib.request, urllib.error
base, sid = open("server.txt").read().split()
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
tag = sys.argv[1]
print(tag, "get", call("GET", "/session/" + sid))
print(tag, "patch", call("PATCH", "/session/" + sid, {"permission": {"bash": "allow"}}))
print(tag, "reply", call("POST", "/permission/per_x/reply", {"reply": "always"}))
print(tag, "prompt", call("POST", "/session/" + sid + "/prompt_async", {"text": "hi"}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_s_own_processes_cannot_change_the_server_s_state() {
    let cmd = "PY=$(python3 -c 'import sys; print(sys.executable)'); \
               $PY probe.py plain; env -i $PY probe.py cleared; \
               setsid -f env -i $PY probe.py detached > detached.txt 2>&1; \
               for i in $(seq 200); do grep -q prompt detached.txt 2>/dev/null && break; sleep 0.1; done; \
               cat detached.txt; echo pw=${TROUPE_SERVER_PASSWORD:-none}";
    let (_mock, srv) = serving(vec![
        Step::tool("bash", json!({"command": cmd, "description": "probe"})),
        Step::text("done"),
    ])
    .await;
    let sid = srv.new_session().await;
    srv.project.write_file("probe.py", PROBE);
    srv.project
        .write_file("server.txt", &format!("{} {sid}", srv.base));
    let (status, reply) = srv
        .post(&format!("/session/{sid}/message"), json!({"text": "probe"}))
        .await;
    assert_eq!(
        status, 200,
        "the user's own client drives the server: {reply}"
    );
    let msgs = srv.project.session_messages(&sid).await;
    let tools = tool_parts(&msgs);
    let out = tools[0]["state"]["output"].as_str().unwrap_or_default();
    for tag in ["plain", "cleared", "detached"] {
        assert!(
            out.contains(&format!("{tag} get 200")),
            "{tag}: reads stay open\n{out}"
        );
        for call in ["patch", "reply", "prompt"] {
            assert!(
                out.contains(&format!("{tag} {call} 403")),
                "{tag} {call} must be refused\n{out}"
            );
        }
    }
    // Nothing of the refused PATCH reached the session.
    let (_, s) = srv.get(&format!("/session/{sid}")).await;
    assert!(s.get("permission").is_none_or(Value::is_null), "{s:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_password_never_reaches_the_model_s_shell() {
    let mock = mock(vec![
        Step::tool(
            "bash",
            json!({"command": "echo pw=${TROUPE_SERVER_PASSWORD:-none}", "description": "env"}),
        ),
        Step::text("done"),
    ])
    .await;
    let project = Project::with_config(&mock_config(&mock.base_url()));
    let out = project
        .troupe(&["run", "env"], &[("TROUPE_SERVER_PASSWORD", "s3cret")])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, msgs) = project.messages().await;
    let tools = tool_parts(&msgs);
    let output = tools[0]["state"]["output"].as_str().unwrap_or_default();
    assert!(output.contains("pw=none"), "{output}");
}

/// Saved full tool outputs past their retention (7 days by default, in days from
/// `TROUPE_TOOL_OUTPUT_RETENTION_DAYS`) are deleted by the runtime's cleanup when it starts;
/// younger ones and files that are not saved outputs stay.
#[tokio::test]
async fn saved_tool_outputs_past_their_retention_are_deleted() {
    let project = Project::with_config(&mock_config_with("http://127.0.0.1:1/v1", json!({})));
    let dir = project.home.path().join("tool-output");
    std::fs::create_dir_all(&dir).expect("output dir");
    let day = Duration::from_secs(24 * 3600);
    let now = std::time::SystemTime::now();
    let aged = |name: &str, age: Duration| {
        let path = dir.join(name);
        std::fs::write(&path, "saved output").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(now - age))
            .expect("set mtime");
        path
    };
    let old = aged("tool_0000000000001_000000_1", day * 8);
    let young = aged("tool_0000000000002_000000_1", day * 6);
    let other = aged("notes.txt", day * 30);
    // Serves with the outputs in `dir` (and `envs`) until `gone` was deleted (at most 20 s);
    // the server is stopped on return.
    let serve_until_deleted = async |envs: &[(&str, &str)], gone: &std::path::Path| {
        let mut cmd = project.command(&["serve", "--port", "0"]);
        cmd.env("TROUPE_TOOL_OUTPUT_DIR", &dir)
            .envs(envs.iter().copied());
        let (_child, _base) = serve_with(cmd).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while gone.exists() {
            assert!(
                Instant::now() < deadline,
                "{} was not deleted",
                gone.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    serve_until_deleted(&[], &old).await;
    assert!(young.exists() && other.exists());

    // A shorter retention from the environment deletes the 6-day-old output too.
    serve_until_deleted(&[("TROUPE_TOOL_OUTPUT_RETENTION_DAYS", "5")], &young).await;
    assert!(other.exists());
}

/// A non-loopback IPv4 address of this machine (from `hostname -I`), if it has one.
fn local_lan_ipv4() -> Option<String> {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
        .map(|a| a.to_string())
}

/// `curl -X POST <url>/session` with `headers`, under `env`; the HTTP status it got.
fn curl_post_session(url: &str, headers: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"]);
    cmd.args(["-H", "content-type: application/json", "-d", "{}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.arg(format!("{url}/session"));
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run curl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The port of a base URL `http://host:port`.
fn port_of(base: &str) -> &str {
    base.rsplit(':').next().expect("a port")
}

/// A tool process of this machine that connects to one of the machine's non-loopback
/// addresses (`--hostname 0.0.0.0`) is traced like one on 127.0.0.1: the model that read the
/// password from the server's command line still cannot change state.
#[tokio::test]
async fn a_tool_process_is_refused_over_a_non_loopback_local_address() {
    let Some(ip) = local_lan_ipv4() else {
        eprintln!("skipped: this machine has no non-loopback IPv4 address");
        return;
    };
    let (_mock, srv) = serving_idle(&["--hostname", "0.0.0.0", "--password", "s3cret"]).await;
    let url = format!("http://{ip}:{}", port_of(&srv.base));
    let auth = "Authorization: Bearer s3cret";
    let mark = [(troupe_tools::procs::OWNER_ENV, "model-1")];
    assert_eq!(curl_post_session(&url, &[auth], &[]), "200", "the user");
    assert_eq!(
        curl_post_session(&url, &[auth], &mark),
        "403",
        "a tool process over {ip}"
    );
}

/// A tool process that knows the password and sends a state-changing request, then closes
/// its connection at once (fire and forget), changes nothing: the server either traces it in
/// time (a tool), finds its socket gone (a local client that cannot be traced: refused since
/// the guard fails closed; unit test `a_local_client_that_cannot_be_traced_may_not_change_state`)
/// or, as hyper does for a connection closed before its answer, drops the request.
#[tokio::test]
async fn a_tool_process_that_closes_its_connection_at_once_changes_nothing() {
    let (_mock, srv) = serving_idle(&["--password", "s3cret"]).await;
    let port = port_of(&srv.base);
    let request = format!(
        "POST /session HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer s3cret\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    for _ in 0..5 {
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port} && printf '%s' \"$1\" >&3 && exec 3>&-"
            ))
            .arg("bash")
            .arg(&request)
            .env(troupe_tools::procs::OWNER_ENV, "model-1")
            .status()
            .expect("run bash");
        assert!(status.success());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, list) = srv.get("/session").await;
    assert_eq!(code, 200);
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    // The same request from the user's client, which waits for its answer, creates one.
    assert_eq!(srv.post("/session", json!({})).await.0, 200);
    assert_eq!(
        srv.get("/session").await.1.as_array().map(Vec::len),
        Some(1)
    );
}

/// Without a password, another local account cannot drive the server (its `curl` of the
/// shell route would run commands as the serve user): 403. Needs root to run a client as
/// `nobody`; skipped otherwise.
#[tokio::test]
async fn without_a_password_another_user_is_refused() {
    let (_mock, srv) = serving_idle(&[]).await;
    assert_eq!(curl_post_session(&srv.base, &[], &[]), "200", "the user");
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("skipped the other-user part: not root, cannot run a client as nobody");
        return;
    }
    let url = format!("{}/session", srv.base);
    let script = format!(
        "curl -s -w ' %{{http_code}}' -X POST -H 'content-type: application/json' -d '{{}}' {url}"
    );
    let out = std::process::Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c", &script])
        .output()
        .expect("run su");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with(" 403"), "{text} {out:?}");
    assert!(text.contains("--password"), "{text}");
}

/// `timeout 2 troupe serve … 2>&1 | head -1`: once the reader of stderr is gone, SIGTERM
/// still stops the server (writing the shutdown line to the closed pipe used to panic the
/// signal task, and the server ran on).
#[tokio::test]
async fn sigterm_stops_the_server_when_its_stderr_pipe_is_closed() {
    use std::process::Stdio;
    use tokio::io::AsyncBufReadExt;
    let mock = start_mock(Script::default()).await;
    let project = Project::with_config(&mock_config_with(&mock.base_url(), json!({})));
    let mut cmd = project.command(&["serve", "--port", "0"]);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn troupe serve");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(CLI_RUN_DEADLINE, lines.next_line())
        .await
        .expect("startup line in time")
        .expect("read stdout")
        .expect("a startup line");
    assert!(line.starts_with("troupe server listening on "), "{line}");
    drop(child.stderr.take());
    signal(child.id().expect("pid"), "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("troupe serve exits after SIGTERM with a closed stderr")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}
