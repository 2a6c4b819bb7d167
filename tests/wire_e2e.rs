//! End-to-end tests of the provider wire through `troupe run` (issues 13.1, 13.2, 24.1, 24.3,
//! 24.4): SSE framings the spec allows, keep-alives written as data lines, stalled providers,
//! a `tool_calls` finish without a call, and absurd usage reports.
//!
//! Same isolation as the other end-to-end files (`tests/common/project.rs`): each test has its
//! own temp project (with a `troupe.json` pointing at its own `MockServer`), its own SQLite
//! store and an empty global config dir.

use serde_json::{Value, json};
use troupe_testkit::{Fault, LineEnding, Stall, Step, UsageSpec};

mod common;
use common::*;

/// A project whose `mock` provider (npm package `npm`, extra provider `options`) is
/// `base_url`, with retries off.
fn wire_project(base_url: &str, npm: &str, options: Value) -> Project {
    let mut config = mock_config_with(base_url, json!({"provider": {"mock": {"npm": npm}}}));
    merge_patch(&mut config["provider"]["mock"]["options"], options);
    Project::with_config(&config).with_env("TROUPE_MAX_RETRIES", "0")
}

const OPENAI: &str = "@ai-sdk/openai-compatible";
const ANTHROPIC: &str = "@ai-sdk/anthropic";

/// Issue 13.1 (and 24.2): a stream framed with bare CRs (or CRLF, or LF), optionally starting
/// with a BOM, on a connection the server keeps open after the last event, finishes at once:
/// one request, the whole text, exit 0, although the idle deadline (10 min here) never fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_line_ending_on_a_kept_open_connection_finishes_at_once() {
    for npm in [OPENAI, ANTHROPIC] {
        for (ending, bom) in [
            (LineEnding::Cr, true),
            (LineEnding::Cr, false),
            (LineEnding::Crlf, true),
            (LineEnding::Lf, true),
        ] {
            let mut step = Step::text("framed with any line ending").with_chunk_size(5);
            step.line_ending = Some(ending);
            step.bom = bom;
            step.keep_open = true;
            let server = mock(vec![step]).await;
            let project = wire_project(&server.base_url(), npm, json!({"chunkTimeout": 600000}));
            let out = project.troupe(&["run", "say it"], &[]).await;
            let what = format!("{npm} {ending:?} bom={bom}");
            assert_success(&out, &what);
            assert!(
                text(&out.stdout).contains("framed with any line ending"),
                "{what}: {}",
                text(&out.stdout)
            );
            assert_eq!(completions(&server).len(), 1, "{what}: retried");
            server.shutdown().await;
        }
    }
}

/// Issue 13.2: `data: : keepalive` between every two events is skipped; the text is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_data_lines_are_skipped_and_the_turn_goes_on() {
    for npm in [OPENAI, ANTHROPIC] {
        let mut step = Step::text("kept alive all the way").with_chunk_size(4);
        step.data_keepalive = true;
        let server = mock(vec![step]).await;
        let project = wire_project(&server.base_url(), npm, json!({}));
        let out = project.troupe(&["run", "say it"], &[]).await;
        assert_success(&out, npm);
        assert!(
            text(&out.stdout).contains("kept alive all the way"),
            "{npm}: {}",
            text(&out.stdout)
        );
        assert_eq!(completions(&server).len(), 1, "{npm}");
        server.shutdown().await;
    }
}

/// Issue 24.1: the provider `timeout` option is the response-header deadline; a provider that
/// never sends headers fails the run with an error naming the phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_provider_fails_with_the_named_phase() {
    let server = mock(vec![
        Step::text("never").with_fault(Fault::stall(Stall::Headers)),
    ])
    .await;
    let project = wire_project(&server.base_url(), OPENAI, json!({"timeout": 500}));
    let out = project.troupe(&["run", "say it"], &[]).await;
    let line = assert_one_line_failure(&out, "stalled headers");
    assert!(
        line.contains("no response headers from provider mock after 0.5 s"),
        "{line}"
    );
    server.shutdown().await;
}

/// Issue 24.3: finish reason `tool_calls` with no tool call ends the turn after one request:
/// a finished reply when there is text, a named error when there is nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_finish_without_a_call_ends_the_turn() {
    for npm in [OPENAI, ANTHROPIC] {
        let server = mock(vec![Step::text("all done").with_finish("tool_calls")]).await;
        let project = wire_project(&server.base_url(), npm, json!({}));
        let out = project.troupe(&["run", "finish"], &[]).await;
        assert_success(&out, npm);
        assert!(text(&out.stdout).contains("all done"), "{npm}");
        assert_eq!(completions(&server).len(), 1, "{npm}: re-sent");
        server.shutdown().await;

        let server = mock(vec![Step::default().with_finish("tool_calls")]).await;
        let project = wire_project(&server.base_url(), npm, json!({}));
        let out = project.troupe(&["run", "finish"], &[]).await;
        let line = assert_one_line_failure(&out, npm);
        assert!(line.contains("tool-calls but sent no tool call"), "{line}");
        assert_eq!(completions(&server).len(), 1, "{npm}: re-sent");
        server.shutdown().await;
    }
}

/// Issue 24.4: `prompt_tokens: 18446744073709551615` neither wraps nor inflates the stored
/// tokens: the impossible count is 0, the sane one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_usage_is_clamped_not_wrapped() {
    let server = mock(vec![Step::text("counted").with_usage(UsageSpec {
        prompt_tokens: Some(u64::MAX),
        completion_tokens: Some(7),
        ..UsageSpec::default()
    })])
    .await;
    let project = wire_project(&server.base_url(), OPENAI, json!({}));
    let out = project
        .troupe(&["run", "--format", "json", "count"], &[])
        .await;
    assert_success(&out, "absurd usage");
    let events = parse_events(&out.stdout);
    let sid = session_id_of(&events);
    let out = project
        .troupe(&["session", "show", &sid, "--format", "json"], &[])
        .await;
    assert_success(&out, "show");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    let tokens = &doc["messages"][1]["info"]["tokens"];
    assert_eq!(tokens["input"], 0, "{tokens}");
    assert_eq!(tokens["output"], 7, "{tokens}");
    server.shutdown().await;
}

/// Issue 24.4: a tool call whose streamed arguments pass `maxToolArgumentBytes` is not run: its
/// part ends as an error naming the cap, the file is not written, and the turn goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_tool_arguments_end_the_call_with_an_error() {
    let content = "x".repeat(5000);
    let server = mock(vec![
        Step::tool("write", json!({"filePath": "big.txt", "content": content}))
            .with_chunk_size(512),
        Step::text("gave up on the big file"),
    ])
    .await;
    let project = wire_project(
        &server.base_url(),
        OPENAI,
        json!({"maxToolArgumentBytes": 1024}),
    );
    let out = project
        .troupe(&["run", "--format", "json", "write it"], &[])
        .await;
    assert_success(&out, "oversized arguments");
    assert!(!project.root.join("big.txt").exists(), "the call ran");
    let events = parse_events(&out.stdout);
    let errors: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.part.updated")
        .map(|e| &e["properties"]["part"])
        .filter(|p| p["type"] == "tool" && p["state"]["status"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{events:#?}");
    let err = errors[0]["state"]["error"].as_str().unwrap_or("");
    assert!(err.contains("limit of 1024 bytes"), "{err}");
    assert!(
        text(&out.stdout).len() < 64 * 1024,
        "the arguments were echoed: {} bytes",
        text(&out.stdout).len()
    );
    assert_eq!(completions(&server).len(), 2);
    server.shutdown().await;
}
