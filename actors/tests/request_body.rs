//! Step request bodies are built incrementally (each history message serialized once, issue
//! 19); in debug builds the session actor also builds every body from scratch and compares
//! the bytes (`history::check_body_from_scratch`). These tests drive real sessions through
//! the cases that invalidate the cache — tool steps appending to the history, a compaction
//! (the view restarts at the summary), a revert (the history shrinks) and turns after each —
//! for both wire formats, and assert that every step was checked and none differed.

#![cfg(debug_assertions)]

mod support;

use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use support::*;
use troupe_actors::RuntimeOptions;
use troupe_actors::history::{BODY_CHECKS, BODY_MISMATCHES};
use troupe_session::{Message, PartKind};
use troupe_testkit::{Conversation, RecordedRequest, Script, Step};

/// Start of the compaction agent's system prompt (selects the summary conversation).
const COMPACTION_SYSTEM: &str = "You are summarising a coding conversation";
const SUMMARY: &str = "## Goal\n- the summary of turns 0 to 2";

/// The session's conversation alternates a `read` step and a text answer (the mock picks the
/// step from the number of assistant messages sent, which a compaction changes); summaries
/// come from their own conversation.
fn script() -> Script {
    let steps = (0..200)
        .map(|i| {
            if i % 2 == 0 {
                Step::tool("read", json!({"filePath": "notes.md"}))
            } else {
                Step::text(format!("answer {i}: \"quoted\", ünïcode\nsecond line"))
            }
        })
        .collect();
    Script::new(vec![
        Conversation::new(vec![Step::text(SUMMARY); 20]).matching_system(COMPACTION_SYSTEM),
        Conversation::new(steps),
    ])
}

fn wire_config(base_url: &str, anthropic: bool) -> troupe_config::LoadedConfig {
    let npm = if anthropic {
        "@ai-sdk/anthropic"
    } else {
        "@ai-sdk/openai-compatible"
    };
    config_with(
        base_url,
        json!({
            "model": "wire/model-x",
            "provider": {"wire": {
                "name": "Wire", "npm": npm,
                "options": {"baseURL": base_url, "apiKey": "test"},
                "models": {"model-x": {"name": "X", "limit": {"context": 200000, "output": 4096}}}
            }}
        }),
    )
}

/// Every text the request sends, whatever the wire format (for what-is-in-it checks).
fn body_text(r: &RecordedRequest) -> String {
    r.body["messages"].to_string()
}

fn is_summary_request(r: &RecordedRequest) -> bool {
    let b = r.body.to_string();
    b.contains(COMPACTION_SYSTEM)
}

async fn scenario(anthropic: bool) {
    let server = start_mock(script()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = tempfile::tempdir().expect("workspace");
    std::fs::write(
        ws.path().join("notes.md"),
        "# Notes\nthe codename is \"kestrel\"\n",
    )
    .expect("notes");
    let mut fx = Fixture::new(&server.base_url());
    fx.config = wire_config(&server.base_url(), anthropic);
    fx.opts = RuntimeOptions {
        titles: false,
        summaries: false,
        ..Default::default()
    };
    let runtime = fx.start(&dir).await;
    let sid = new_session(&runtime, ws.path()).await;
    let checks_before = BODY_CHECKS.load(Ordering::SeqCst);

    for t in 0..3 {
        let r = run_prompt(&runtime, &sid, &format!("turn {t}: read the notes")).await;
        assert!(r.error.is_none(), "turn {t}: {:?}", r.error);
    }
    // Compaction: later requests start from the summary.
    let r = runtime.compact(&sid).await.expect("compact");
    assert!(r.error.is_none(), "compaction: {:?}", r.error);
    for t in 3..5 {
        let r = run_prompt(&runtime, &sid, &format!("turn {t}: read the notes again")).await;
        assert!(r.error.is_none(), "turn {t}: {:?}", r.error);
    }
    // Revert to the prompt of turn 3: it and everything after are dropped from requests.
    let history = messages(&runtime, &sid).await;
    let turn3 = history
        .iter()
        .find(|m| {
            matches!(m.info, Message::User(_))
                && m.parts.iter().any(|p| {
                    matches!(&p.kind, PartKind::Text { text, .. } if text.starts_with("turn 3:"))
                })
        })
        .map(|m| m.info.id().clone())
        .expect("turn 3 prompt");
    runtime.revert(&sid, &turn3, None).await.expect("revert");
    for t in 5..7 {
        let r = run_prompt(&runtime, &sid, &format!("turn {t}: after the revert")).await;
        assert!(r.error.is_none(), "turn {t}: {:?}", r.error);
    }

    let session_steps: Vec<RecordedRequest> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions") || r.path.ends_with("/messages"))
        .filter(|r| !is_summary_request(r))
        .filter(|r| r.headers.x_session_affinity.as_deref() == Some(sid.as_str()))
        .collect();
    assert!(session_steps.len() >= 10, "{} steps", session_steps.len());
    let checked = BODY_CHECKS.load(Ordering::SeqCst) - checks_before;
    assert!(
        checked >= session_steps.len() as u64,
        "{checked} bodies checked for {} step requests",
        session_steps.len()
    );
    assert_eq!(BODY_MISMATCHES.load(Ordering::SeqCst), 0);

    // What the requests carried: the summary after the compaction, not the reverted turns
    // after the revert, and the history grew by appending within a turn.
    let last = session_steps.last().expect("a request");
    let text = body_text(last);
    assert!(text.contains("the summary of turns 0 to 2"), "{text}");
    assert!(text.contains("turn 6: after the revert"), "{text}");
    assert!(
        !text.contains("turn 3:") && !text.contains("turn 4:"),
        "{text}"
    );
    let first: Value = session_steps[0].body.clone();
    assert!(
        first["messages"]
            .to_string()
            .contains("turn 0: read the notes")
    );
    runtime.shutdown().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_bodies_match_a_build_from_scratch_across_compaction_and_revert() {
    scenario(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_bodies_match_a_build_from_scratch_across_compaction_and_revert() {
    scenario(true).await;
}
