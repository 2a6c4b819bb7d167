//! OpenCode's clients against `troupe serve`: the request bodies OpenCode's SDK sends
//! (session create, message with `model: {providerID, modelID}` and parts with ids,
//! prompt_async, abort, permission reply), and responses checked against the required fields
//! of OpenCode's schemas (`Session`, `UserMessage`, `AssistantMessage`, `Part`,
//! `PermissionRequest`; OpenCode v1.15 `packages/sdk/openapi.json`, as summarized in the
//! project's reference notes).

use serde_json::{Value, json};
use troupe_testkit::{Conversation, Fault, MockServer, Script, Step};

mod common;
use common::*;

fn is_str(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(Value::is_string)
}

fn is_num(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(Value::is_number)
}

/// OpenCode `Session`: `{id, projectID, directory, title, version, time{created, updated},
/// parentID?}`.
fn assert_session(v: &Value) {
    for k in ["id", "projectID", "directory", "title", "version"] {
        assert!(is_str(v, k), "Session.{k} must be a string: {v}");
    }
    assert!(v["id"].as_str().unwrap_or("").starts_with("ses_"), "{v}");
    assert!(
        is_num(&v["time"], "created") && is_num(&v["time"], "updated"),
        "{v}"
    );
    if let Some(p) = v.get("parentID") {
        assert!(p.is_string(), "{v}");
    }
}

fn assert_tokens(t: &Value) {
    for k in ["input", "output", "reasoning"] {
        assert!(is_num(t, k), "tokens.{k}: {t}");
    }
    assert!(
        is_num(&t["cache"], "read") && is_num(&t["cache"], "write"),
        "{t}"
    );
}

/// OpenCode `Message`: user `{id, sessionID, role, time{created}, agent, model{providerID,
/// modelID}}` or assistant `{id, sessionID, role, time{created}, parentID, modelID,
/// providerID, mode, agent, path{cwd, root}, cost, tokens}`.
fn assert_message(info: &Value) {
    for k in ["id", "sessionID", "role"] {
        assert!(is_str(info, k), "Message.{k}: {info}");
    }
    assert!(is_num(&info["time"], "created"), "{info}");
    match info["role"].as_str() {
        Some("user") => {
            assert!(is_str(info, "agent"), "{info}");
            assert!(
                is_str(&info["model"], "providerID") && is_str(&info["model"], "modelID"),
                "{info}"
            );
        }
        Some("assistant") => {
            for k in ["parentID", "modelID", "providerID", "mode", "agent"] {
                assert!(is_str(info, k), "AssistantMessage.{k}: {info}");
            }
            assert!(
                is_str(&info["path"], "cwd") && is_str(&info["path"], "root"),
                "{info}"
            );
            assert!(is_num(info, "cost"), "{info}");
            assert_tokens(&info["tokens"]);
            if let Some(e) = info.get("error") {
                assert!(is_str(e, "name") && e["data"].is_object(), "{info}");
            }
        }
        other => panic!("unknown role {other:?}: {info}"),
    }
}

/// OpenCode `Part`: `{id, sessionID, messageID, type}` plus the fields of its type.
fn assert_part(p: &Value) {
    for k in ["id", "sessionID", "messageID", "type"] {
        assert!(is_str(p, k), "Part.{k}: {p}");
    }
    match p["type"].as_str().unwrap_or("") {
        "text" | "reasoning" => assert!(is_str(p, "text"), "{p}"),
        "tool" => {
            assert!(is_str(p, "callID") && is_str(p, "tool"), "{p}");
            assert!(is_str(&p["state"], "status"), "{p}");
        }
        "step-start" => {}
        "step-finish" => {
            assert!(is_str(p, "reason") && is_num(p, "cost"), "{p}");
            assert_tokens(&p["tokens"]);
        }
        "compaction" => assert!(p["auto"].is_boolean(), "{p}"),
        other => panic!("part type {other:?} is not one of OpenCode's: {p}"),
    }
}

fn assert_with_parts(m: &Value) {
    assert_message(&m["info"]);
    for p in m["parts"].as_array().expect("parts array") {
        assert_part(p);
        assert_eq!(p["messageID"], m["info"]["id"], "{p}");
    }
}

/// The conversation for a prompt containing "run something": the model runs bash (asked
/// first, since the config says ask) and then answers "It ran.".
fn run_something() -> Conversation {
    Conversation::new(vec![
        Step::tool(
            "bash",
            json!({"command": "echo asked", "description": "ask first"}),
        ),
        Step::text("It ran."),
    ])
    .matching("run something")
}

/// A `troupe serve` (in a new project whose config asks before bash) over a scripted
/// provider answering `conversations`: the provider, the project, the server (killed on
/// drop) and a client of it.
async fn serve_asking(
    conversations: Vec<Conversation>,
) -> (MockServer, CliProject, tokio::process::Child, Api) {
    let server = start_mock(Script::new(conversations)).await;
    let p = CliProject::empty();
    let mut config = mock_config(&server.base_url());
    config["permission"] = json!({"bash": "ask"});
    p.write_config(&config.to_string());
    let (serve, base) = p.serve().await;
    (server, p, serve, Api::new(&base))
}

/// A message body of one text part with the client's part id `id`.
fn text_part(id: &str, text: &str) -> Value {
    json!({"parts": [{"id": id, "type": "text", "text": text}]})
}

/// Whether message `m` (`{info, parts}`) has a part whose text is `text`.
fn has_text(m: &Value, text: &str) -> bool {
    m["parts"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["text"] == text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_request_and_response_shapes() {
    let (server, p, _serve, api) = serve_asking(vec![
        Conversation::new(vec![Step::text("Hello, OpenCode.")]).matching("greet me"),
        run_something(),
        Conversation::new(vec![
            Step::text("never ends").with_fault(Fault::hang_after(0)),
        ])
        .matching("hang please"),
    ])
    .await;

    // Session create with OpenCode's body; the directory in OpenCode's query parameter.
    let (status, s) = api
        .post(
            &format!("/session?directory={}", p.root.display()),
            json!({"title": "from opencode", "agent": "build",
               "model": {"id": "mock-model", "providerID": "mock"}}),
        )
        .await;
    assert_eq!(status, 200, "{s}");
    assert_session(&s);
    assert_eq!(s["title"], "from opencode");
    assert_eq!(s["directory"], json!(p.root.display().to_string()));
    let sid = s["id"].as_str().expect("id").to_string();

    // Message with OpenCode's model object, parts with ids, agent and system.
    let (status, m) = api
        .post(
            &format!("/session/{sid}/message"),
            json!({
                "messageID": "msg_client_chosen",
                "model": {"providerID": "mock", "modelID": "mock-model"},
                "agent": "build",
                "system": "Answer in one line.",
                "parts": [{"id": "prt_client_1", "type": "text", "text": "greet me"}]
            }),
        )
        .await;
    assert_eq!(status, 200, "{m}");
    assert_with_parts(&m);
    assert_eq!(m["info"]["role"], "assistant");
    assert_eq!(m["info"]["providerID"], "mock");
    assert_eq!(m["info"]["modelID"], "mock-model");
    assert_eq!(m["info"]["mode"], "build");
    let texts: Vec<&str> = m["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["Hello, OpenCode."]);
    let req = completions(&server).pop().expect("a request");
    assert!(
        req.body.to_string().contains("Answer in one line."),
        "system reached the model"
    );

    // The listing parses too.
    let list = api.get_json(&format!("/session/{sid}/message")).await;
    for m in list.as_array().expect("messages") {
        assert_with_parts(m);
    }
    for s in api.get_json("/session").await.as_array().expect("sessions") {
        assert_session(s);
    }

    // prompt_async, a permission ask, OpenCode's reply body.
    let sid2 = api.new_session().await;
    let (status, _) = api
        .post(
            &format!("/session/{sid2}/prompt_async"),
            json!({"parts": [{"id": "prt_client_2", "type": "text", "text": "run something"}],
               "model": {"providerID": "mock", "modelID": "mock-model"}}),
        )
        .await;
    assert_eq!(status, 204);
    let pending = pending_where(&api, |_| true).await;
    // OpenCode `PermissionRequest`: {id, sessionID, permission, patterns, metadata, always}.
    for k in ["id", "sessionID", "permission"] {
        assert!(is_str(&pending, k), "PermissionRequest.{k}: {pending}");
    }
    assert!(
        pending["patterns"].is_array() && pending["always"].is_array(),
        "{pending}"
    );
    assert!(pending["metadata"].is_object(), "{pending}");
    assert_eq!(pending["sessionID"], json!(sid2));
    let rid = pending["id"].as_str().expect("id");
    let (status, ok) = api
        .post(
            &format!("/permission/{rid}/reply"),
            json!({"reply": "once"}),
        )
        .await;
    assert_eq!((status, ok), (200, json!(true)));
    let last = finished_turn(&api, &sid2).await;
    assert!(
        has_text(&last, "It ran."),
        "the turn finished after the permission reply: {last}"
    );
    let list = api.get_json(&format!("/session/{sid2}/message")).await;
    for m in list.as_array().expect("messages") {
        assert_with_parts(m);
    }

    // abort.
    let sid3 = api.new_session().await;
    let (status, _) = api
        .post(
            &format!("/session/{sid3}/prompt_async"),
            text_part("prt_client_3", "hang please"),
        )
        .await;
    assert_eq!(status, 204);
    let (status, aborted) = api.post(&format!("/session/{sid3}/abort"), json!({})).await;
    assert_eq!((status, aborted), (200, json!(true)));
}

/// The first pending permission request of `sid` (polls until one appears).
async fn pending_of(api: &Api, sid: &str) -> Value {
    pending_where(api, |p| p["sessionID"] == sid).await
}

/// The first pending permission request for which `wanted` holds (polls for 10 s until one
/// appears).
async fn pending_where(api: &Api, wanted: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..400 {
        let list = api.get_json("/permission").await;
        if let Some(p) = list.as_array().and_then(|l| l.iter().find(|p| wanted(p))) {
            return p.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no such permission request");
}

/// The session's last message once it is a finished assistant message (polls).
async fn finished_turn(api: &Api, sid: &str) -> Value {
    for _ in 0..400 {
        let list = api.get_json(&format!("/session/{sid}/message")).await;
        // A completed step that called tools is not the turn's end: the next step's message
        // follows it (reading between the two once returned the tool step).
        if let Some(last) = list.as_array().and_then(|l| l.last())
            && last["info"]["role"] == "assistant"
            && is_num(&last["info"]["time"], "completed")
            && last["info"]["finish"] != "tool-calls"
        {
            return last.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the turn of {sid} did not finish");
}

/// `PATCH /session/{id}` (title, permission merged onto the session's rules), `noReply` on
/// message and prompt_async, the `agent` given on create as the prompts' default, and the
/// legacy `POST /session/{id}/permissions/{permissionID}` reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_patch_no_reply_session_agent_and_legacy_permission() {
    let (server, _p, _serve, api) = serve_asking(vec![
        Conversation::new(vec![Step::text("Planned.")]).matching("which agent"),
        run_something(),
        Conversation::new(vec![Step::text("Answer after the notes.")]).matching("note one"),
    ])
    .await;

    // PATCH the title with OpenCode's body; the response is a Session and the change is kept.
    let sid = api.new_session().await;
    let (status, s) = api
        .patch(
            &format!("/session/{sid}"),
            json!({"title": "Renamed by OpenCode"}),
        )
        .await;
    assert_eq!(status, 200, "{s}");
    assert_session(&s);
    assert_eq!(s["title"], "Renamed by OpenCode");
    let again = api.get_json(&format!("/session/{sid}")).await;
    assert_eq!(again["title"], "Renamed by OpenCode");
    for (body, what) in [
        (json!({"title": "  "}), "blank title"),
        (json!({"time": {"archived": 1}}), "archiving"),
        (
            json!({"permission": [{"permission": "bash", "pattern": "*", "action": "maybe"}]}),
            "bad action",
        ),
    ] {
        let (status, e) = api.patch(&format!("/session/{sid}"), body).await;
        assert_eq!(status, 400, "{what}: {e}");
        assert!(e.to_string().len() > 20, "{what}: the error says why: {e}");
    }
    let (status, _) = api
        .patch("/session/ses_nosuch", json!({"title": "x"}))
        .await;
    assert_eq!(status, 404);

    // A bad model is named once ("model not found: …", not "model: model not found").
    let (status, e) = api
        .post(
            "/session",
            json!({"model": {"providerID": "mock", "id": "nosuch"}}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    let msg = e["error"]["message"].as_str().unwrap_or("").to_string();
    assert!(msg.starts_with("model not found: mock/nosuch"), "{msg}");
    let (status, e) = api
        .post(
            &format!("/session/{sid}/message"),
            json!({"model": {"providerID": "mock", "modelID": "nosuch"}, "text": "x"}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("model not found: mock/nosuch")),
        "{e}"
    );

    // noReply: the user message is stored and returned, no model request is made.
    let before = completions(&server).len();
    let (status, m) = api.post(
        &format!("/session/{sid}/message"),
        json!({"noReply": true, "parts": [{"id": "prt_n1", "type": "text", "text": "note one"}]}),
    )
    .await;
    assert_eq!(status, 200, "{m}");
    assert_with_parts(&m);
    assert_eq!(m["info"]["role"], "user");
    assert_eq!(m["parts"][0]["text"], "note one");
    let (status, _) = api.post(
        &format!("/session/{sid}/prompt_async"),
        json!({"noReply": true, "parts": [{"id": "prt_n2", "type": "text", "text": "note two"}]}),
    )
    .await;
    assert_eq!(status, 204);
    let mut texts = Vec::new();
    for _ in 0..400 {
        let list = api.get_json(&format!("/session/{sid}/message")).await;
        texts = list
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                assert_with_parts(m);
                (
                    m["info"]["role"].as_str().unwrap_or("").to_string(),
                    m["parts"][0]["text"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        if texts.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let expect = [("user", "note one"), ("user", "note two")];
    assert_eq!(
        texts,
        expect.map(|(r, t)| (r.to_string(), t.to_string())),
        "two stored user messages and no reply"
    );
    assert_eq!(completions(&server).len(), before, "noReply ran no turn");
    // A later prompt answers with the notes in the history.
    let (status, m) = api
        .post(
            &format!("/session/{sid}/message"),
            text_part("prt_n3", "and now answer"),
        )
        .await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["parts"].as_array().map(Vec::len), Some(3), "{m}");
    let req = completions(&server).pop().expect("a request");
    let sent: Vec<String> = req_messages(&req)
        .iter()
        .filter(|m| m["role"] == "user")
        .map(content_text)
        .collect();
    assert!(
        sent.iter().any(|t| t.contains("note one")) && sent.iter().any(|t| t.contains("note two")),
        "{sent:?}"
    );

    // The agent given on create is stored and used by a prompt that names none.
    let (status, s) = api.post("/session", json!({"agent": "plan"})).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["agent"], "plan");
    let sid_plan = s["id"].as_str().expect("id").to_string();
    let (status, m) = api
        .post(
            &format!("/session/{sid_plan}/message"),
            text_part("prt_p", "which agent"),
        )
        .await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["info"]["agent"], "plan", "{m}");
    assert_eq!(m["info"]["mode"], "plan", "{m}");

    // PATCH permission: OpenCode's rules are merged onto the session's; bash is then allowed
    // without asking in this session although the config says ask.
    let sid_allow = api.new_session().await;
    let (status, s) = api
        .patch(
            &format!("/session/{sid_allow}"),
            json!({"permission": [{"permission": "bash", "pattern": "*", "action": "allow"}]}),
        )
        .await;
    assert_eq!(status, 200, "{s}");
    let (status, m) = api
        .post(
            &format!("/session/{sid_allow}/message"),
            text_part("prt_a", "run something"),
        )
        .await;
    assert_eq!(status, 200, "{m}");
    assert!(has_text(&m, "It ran."), "{m}");
    let all = api.get_json(&format!("/session/{sid_allow}/message")).await;
    let tool = all
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .find(|p| p["type"] == "tool")
        .expect("a tool part");
    assert_eq!(tool["state"]["status"], "completed", "{tool}");

    // The legacy reply route: `{response}`, and the request must belong to the session.
    let sid_ask = api.new_session().await;
    let (status, _) = api
        .post(
            &format!("/session/{sid_ask}/prompt_async"),
            text_part("prt_l", "run something"),
        )
        .await;
    assert_eq!(status, 204);
    let pending = pending_of(&api, &sid_ask).await;
    let rid = pending["id"].as_str().expect("id");
    let legacy_reply = async |session: &str, response: &str| {
        api.post(
            &format!("/session/{session}/permissions/{rid}"),
            json!({"response": response}),
        )
        .await
    };
    let (status, e) = legacy_reply(&sid, "once").await;
    assert_eq!(status, 404, "another session's request: {e}");
    let (status, e) = legacy_reply(&sid_ask, "sure").await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(legacy_reply(&sid_ask, "once").await, (200, json!(true)));
    let last = finished_turn(&api, &sid_ask).await;
    assert_with_parts(&last);
    assert!(has_text(&last, "It ran."), "{last}");
}
