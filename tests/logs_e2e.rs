//! Log output of the binary (issue 23): `serve --log-file` with `--log-format json` writes one
//! JSON object per line, carrying the fields of the spans an event happened in, and never the
//! configured API key, even when the provider echoes the key back in an error.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_testkit::{Fault, Script, Step};

mod common;
use common::*;

/// The configured key; the mock's 401 error body repeats it, as some providers do.
const SECRET_KEY: &str = "sk-obs-test-7f3a9c1e5b2d";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_file_parses_and_never_holds_the_api_key() {
    let echo = json!({"error": {
        "message": format!("Incorrect API key provided: {SECRET_KEY}"),
        "type": "invalid_request_error",
    }});
    let script = Script::single(vec![Step::text("never sent").with_fault(Fault::Http {
        status: 401,
        headers: Default::default(),
        body: Some(echo),
    })]);
    let server = start_mock(script).await;
    let project = Project::with_config(&mock_config_with(
        &server.base_url(),
        json!({"provider": {"mock": {"options": {"apiKey": SECRET_KEY}}}}),
    ))
    .with_env("TROUPE_LOG", "trace")
    .with_env("TROUPE_SERVER_PASSWORD", "a-long-server-password");
    let log = project.home.path().join("logs/troupe.log");
    let log_arg = log.display().to_string();
    let (_child, base) = serve_with(project.command(&[
        "--log-format",
        "json",
        "serve",
        "--port",
        "0",
        "--log-file",
        &log_arg,
    ]))
    .await;
    let client = troupe_server::client::Client::new(&base, Some("a-long-server-password".into()))
        .expect("client");
    let session = client.post("/session", &json!({})).await.expect("session");
    let sid = session["id"].as_str().expect("id").to_string();
    // The turn fails with the provider's 401; the reply may be an error.
    let _ = client
        .post(
            &format!("/session/{sid}/message"),
            &json!({"text": "hello"}),
        )
        .await;

    // Wait until the failed turn is logged (lines are written as events happen).
    let start = Instant::now();
    let lines: Vec<Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains(SECRET_KEY),
            "the API key is in the log file:\n{text}"
        );
        assert!(
            !text.contains("a-long-server-password"),
            "the password is in the log"
        );
        let parsed: Vec<Value> = text
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}"))
            })
            .collect();
        if parsed
            .iter()
            .any(|v| v["fields"]["message"] == "turn failed")
        {
            break parsed;
        }
        assert!(
            start.elapsed() < CLI_RUN_DEADLINE,
            "no `turn failed` line in the log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failed = lines
        .iter()
        .find(|v| v["fields"]["message"] == "turn failed")
        .expect("turn failed line");
    // The provider's message is there, with the key redacted.
    let error = failed["fields"]["error"].as_str().expect("error field");
    assert!(
        error.contains("Incorrect API key provided: [REDACTED]"),
        "{failed}"
    );
    // The event carries its span (the turn) with the ids users see. (`spans` is the
    // thread's entered stack, ractor's `Actor` span, not the event's explicit parents.)
    assert_eq!(failed["span"]["name"], "turn", "{failed}");
    assert_eq!(failed["span"]["session_id"], sid.as_str(), "{failed}");
    assert!(failed["spans"].is_array(), "{failed}");
    for l in &lines {
        assert!(l["level"].is_string() && l["timestamp"].is_string(), "{l}");
    }
}
