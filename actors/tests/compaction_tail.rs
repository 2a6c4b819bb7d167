//! Compaction that keeps the recent turns (issue 17): a 40-turn scripted session under a
//! small context limit compacts several times; after each compaction the last 2 turns are
//! still sent verbatim, and each summary request after the first is anchored on the
//! previous summary. Everything is read from the mock's request log and the store.

mod support;

use serde_json::{Value, json};
use support::*;
use troupe_actors::{RuntimeOptions, TurnResult};
use troupe_session::SessionId;
use troupe_session::{Message, PartKind};
use troupe_testkit::{Conversation, RecordedRequest, Script, Step};

/// Start of the compaction agent's system prompt (selects the summary conversation).
const COMPACTION_SYSTEM: &str = "You are summarising a coding conversation";
/// How the compaction request is sent.
const WHAT_SO_FAR: &str = "What did we do so far?";

fn messages_of(r: &RecordedRequest) -> Vec<Value> {
    r.body["messages"].as_array().cloned().unwrap_or_default()
}

fn is_summary_request(r: &RecordedRequest) -> bool {
    messages_of(r)
        .first()
        .is_some_and(|m| m["role"] == "system" && content_text(m).starts_with(COMPACTION_SYSTEM))
}

/// The prompt of turn `n`: distinct, and long enough that the context fills in a few turns.
fn turn_prompt(n: usize) -> String {
    format!(
        "turn {n:02}: {}",
        format!("note {n} about the parser and its error paths. ").repeat(40)
    )
}

/// The summary conversation (a distinct summary per step index) and the session's (always
/// a short answer).
fn script() -> Script {
    let summaries = (0..200)
        .map(|i| Step::text(format!("## Goal\n- keep going (summary v{i})\n")))
        .collect();
    Script::new(vec![
        Conversation::new(summaries).matching_system(COMPACTION_SYSTEM),
        Conversation::new(vec![Step::text("noted."); 400]),
    ])
}

async fn run(runtime: &troupe_actors::Runtime, sid: &SessionId, text: &str) -> TurnResult {
    let r = run_prompt(runtime, sid, text).await;
    assert!(r.error.is_none(), "turn failed: {:?}", r.error);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_turns_compact_several_times_and_keep_the_last_two_turns() {
    let server = start_mock(script()).await;
    let opts = RuntimeOptions {
        titles: false,
        summaries: false,
        ..Default::default()
    };
    // The size of a first request (system prompt, tools, one turn), measured on a runtime
    // with a large context, so the limit below does not depend on the prompts' length.
    let probe_dir = tempfile::tempdir().expect("tempdir");
    let mut probe = Fixture::new(&server.base_url());
    probe.opts = opts.clone();
    let probe = probe.start(&probe_dir).await;
    let psid = new_session(&probe, probe_dir.path()).await;
    run(&probe, &psid, &turn_prompt(0)).await;
    let base = completions(&server)[0].body.to_string().len() as u64 / 4;
    probe.shutdown().await;
    let probed = completions(&server).len();

    // Room for about ten turns above the first request: usable = context − output.
    let (context, output) = (base + 6_000 + 1_000, 1_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut fx = Fixture::new(&server.base_url());
    fx.opts = opts;
    fx.config = config_limited(
        &server.base_url(),
        context,
        output,
        json!({
            "compaction": {"tail_turns": 2}
        }),
    );
    let runtime = fx.start(&dir).await;
    let sid = new_session(&runtime, dir.path()).await;
    for n in 0..40 {
        run(&runtime, &sid, &turn_prompt(n)).await;
    }

    let reqs: Vec<RecordedRequest> = completions(&server).split_off(probed);
    let summary_at: Vec<usize> = reqs
        .iter()
        .enumerate()
        .filter(|(_, r)| is_summary_request(r))
        .map(|(i, _)| i)
        .collect();
    assert!(
        summary_at.len() >= 3,
        "expected several compactions in 40 turns, got {}",
        summary_at.len()
    );

    // The stored summaries, in order (their text is what the next summary request anchors on).
    let history = messages(&runtime, &sid).await;
    let summaries: Vec<String> = history
        .iter()
        .filter(|m| matches!(&m.info, Message::Assistant(a) if a.summary))
        .map(|m| texts(m).join(""))
        .collect();
    assert_eq!(summaries.len(), summary_at.len());
    let requests: Vec<&troupe_session::MessageWithParts> = history
        .iter()
        .filter(|m| troupe_session::compaction::is_compaction_request(m))
        .collect();
    assert_eq!(requests.len(), summary_at.len());

    for (k, &at) in summary_at.iter().enumerate() {
        let sreq = messages_of(&reqs[at]);
        let instructions = content_text(sreq.last().expect("summary request messages"));
        // Anchored: every summary after the first updates the previous one.
        if k == 0 {
            assert!(
                !instructions.contains("<previous-summary>"),
                "the first summary has nothing to update"
            );
        } else {
            assert!(
                instructions.contains(&format!(
                    "<previous-summary>\n{}\n</previous-summary>",
                    summaries[k - 1].trim()
                )),
                "summary request {k} is not anchored on summary {}: {instructions}",
                k - 1
            );
        }
        // The compaction recorded where its kept tail starts.
        let tail_start = requests[k].parts.iter().find_map(|p| match &p.kind {
            PartKind::Compaction { tail_start_id, .. } => tail_start_id.clone(),
            _ => None,
        });
        let tail_start = tail_start.unwrap_or_else(|| panic!("compaction {k} kept no tail"));
        let tail_pos = history
            .iter()
            .position(|m| *m.info.id() == tail_start)
            .expect("tail start is stored");
        // The tail holds the last 2 turns' prompts.
        let tail_prompts: Vec<String> = history[tail_pos..]
            .iter()
            .take_while(|m| m.info.id() != requests[k].info.id())
            .filter(|m| matches!(m.info, Message::User(_)))
            .map(|m| texts(m).join(""))
            .filter(|t| t.starts_with("turn "))
            .collect();
        assert_eq!(tail_prompts.len(), 2, "compaction {k}: {tail_prompts:?}");
        // The summarizer does not get the kept tail.
        let sreq_text: String = sreq.iter().map(content_text).collect();
        for p in &tail_prompts {
            assert!(
                !sreq_text.contains(p.as_str()),
                "summary {k} was sent a kept turn"
            );
        }
        // The request right after the summary (the answer that overflowed ended its turn,
        // so it is the next turn's): compaction request, summary, both kept turns verbatim,
        // then the next turn's prompt.
        let Some(next) = reqs.get(at + 1) else {
            assert_eq!(k, summary_at.len() - 1, "no request after summary {k}");
            continue;
        };
        assert!(!is_summary_request(next));
        let msgs = messages_of(next);
        assert_eq!(content_text(&msgs[1]), WHAT_SO_FAR);
        assert_eq!(msgs[2]["role"], "assistant");
        assert_eq!(content_text(&msgs[2]), summaries[k]);
        let users: Vec<String> = msgs
            .iter()
            .filter(|m| m["role"] == "user")
            .map(content_text)
            .collect();
        for p in &tail_prompts {
            assert!(
                users.contains(p),
                "request after compaction {k} lacks a kept turn verbatim"
            );
        }
        // And nothing older than the tail: the kept turns and the new one.
        let turns_sent: Vec<&String> = users.iter().filter(|u| u.starts_with("turn ")).collect();
        assert_eq!(
            turns_sent.len(),
            3,
            "request after compaction {k}: {users:?}"
        );
        assert!(
            !tail_prompts.contains(turns_sent[2]),
            "the last turn sent after compaction {k} is a new one"
        );
    }
    runtime.shutdown().await;
    server.shutdown().await;
}
