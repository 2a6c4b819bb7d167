//! End-to-end tests of compaction, prune and session titles: the `troupe` binary against the
//! scripted provider (`troupe-testkit`).
//!
//! Each test gets its own temp project directory (with a `troupe.json` pointing at its own
//! `MockServer`), its own SQLite store and an empty global config directory, so tests run in
//! parallel without sharing anything (the fixture is `tests/common/project.rs`).
//!
//! How the mock routes the requests of one session (see `testkit/README.md`):
//! * the summary request carries the `compaction` agent's system prompt
//!   ([`COMPACTION_SYSTEM`]) and the history being summarized, so its step index is the number
//!   of assistant messages in that history: summary conversations repeat the same step;
//! * requests after a compaction start with the user text [`WHAT_SO_FAR`], so they are
//!   matched on it, and their step index counts the summary assistant message;
//! * the title request carries the `title` agent's system prompt ([`TITLE_SYSTEM`]) and a
//!   first user message that *contains* the prompt, so title conversations are listed first.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_agents::prompt::COMPACTION_CONTINUE_PROMPT;
use troupe_session::compaction::CLEARED_TOOL_OUTPUT;
use troupe_testkit::{Conversation, Fault, MockServer, RecordedRequest, Script, Step, UsageSpec};

mod common;
use common::*;

/// Start of the hidden `compaction` agent's system prompt (agents/prompts/compaction.txt).
const COMPACTION_SYSTEM: &str = "You are summarising a coding conversation";
/// Start of the hidden `title` agent's system prompt (agents/prompts/title.txt).
const TITLE_SYSTEM: &str = "You write a title for a conversation";
/// The user text a compaction request is sent as (actors/src/history.rs).
const WHAT_SO_FAR: &str = "What did we do so far?";
/// Marker on every line of the big file; must never reach a post-compaction request.
const BIG_MARKER: &str = "BIGFILE-MARKER-7Q";
/// The small model context of the compaction tests: usable = 8000 − min(1000, 32000) = 7000.
const SMALL_CONTEXT: u64 = 8000;
const SMALL_OUTPUT: u64 = 1000;
const USABLE: u64 = SMALL_CONTEXT - SMALL_OUTPUT;

/// A `troupe.json` with the `mock` provider at `base_url`, model limits `context`/`output`,
/// and `compaction` (if not null) as the compaction block.
fn config_json(base_url: &str, context: u64, output: u64, compaction: Value) -> String {
    mock_config_with(
        base_url,
        json!({
            "provider": {"mock": {"models": {"mock-model": {"limit": {"context": context, "output": output}}}}},
            "compaction": compaction,
        }),
    )
    .to_string()
}

fn is_summary(m: &Value) -> bool {
    m["info"]["summary"] == true
}

/// The text parts of a stored message, joined.
fn message_text(m: &Value) -> String {
    parts_of_type(m, "text")
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

/// A compact "role[+summary|+compaction]" shape of a stored history, for messages.
fn shape(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let mut s = role(m).to_string();
            if is_summary(m) {
                s.push_str("+summary");
            }
            if !parts_of_type(m, "compaction").is_empty() {
                s.push_str("+compaction");
            }
            s
        })
        .collect()
}

/// The system text of a request (its `system` / `developer` messages joined).
fn req_system(r: &RecordedRequest) -> String {
    req_messages(r)
        .iter()
        .filter(|m| m["role"] == "system" || m["role"] == "developer")
        .map(content_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_summary_request(r: &RecordedRequest) -> bool {
    req_system(r).starts_with(COMPACTION_SYSTEM)
}

fn is_title_request(r: &RecordedRequest) -> bool {
    req_system(r).starts_with(TITLE_SYSTEM)
}

fn usage(prompt: u64, completion: u64) -> UsageSpec {
    UsageSpec {
        prompt_tokens: Some(prompt),
        completion_tokens: Some(completion),
        ..UsageSpec::default()
    }
}

/// The HTTP 400 an OpenAI-compatible provider answers a too-long request with.
fn overflow_fault() -> Fault {
    Fault::Http {
        status: 400,
        headers: Default::default(),
        body: Some(json!({"error": {
            "message": "This model's maximum context length is 8000 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
            "code": "context_length_exceeded",
            "type": "invalid_request_error",
            "param": "messages"
        }})),
    }
}

/// A summary in the structure the compaction agent is asked for.
const SUMMARY: &str = "## Goal\n- Inspect alpha.txt and big.txt.\n\n## Instructions\n- (none)\n\n\
## Discoveries\n- big.txt is a large generated data file.\n\n## Accomplished\n- Read both files; \
next: report.\n\n## Relevant files\n- alpha.txt: short notes\n- big.txt: large data\n";

const FINAL: &str = "Both files are inspected; done after compaction.";

/// The user prompt of the compaction scripts.
const PROMPT: &str = "inspect the data files";

/// Writes `alpha.txt` (small) and `big.txt` (~200 KB, [`BIG_MARKER`] on every line);
/// returns their absolute paths.
fn write_data_files(project: &Project) -> (String, String) {
    let alpha = project.write_file("alpha.txt", "ALPHA-NOTES: remember the milk\n");
    let mut big = String::with_capacity(210_000);
    let mut i = 0;
    while big.len() < 200_000 {
        big.push_str(&format!(
            "{BIG_MARKER} line {i:05} lorem ipsum dolor sit amet consectetur adipiscing elit\n"
        ));
        i += 1;
    }
    let big = project.write_file("big.txt", &big);
    (alpha, big)
}

/// The conversations of the compaction tests, in matching order:
/// 0. the summary request (system prompt of the compaction agent): `summary` at every step;
/// 1. requests after a compaction (first user text [`WHAT_SO_FAR`]): [`FINAL`];
/// 2. the session itself ([`PROMPT`]): read alpha (prompt 2000 tokens), read big (`step1`),
///    then a text that only shows up when no compaction happened.
fn compaction_script(alpha: &str, step1: Step, summary: Step) -> Script {
    Script::new(vec![
        Conversation::new(vec![summary; 6]).matching_system(COMPACTION_SYSTEM),
        Conversation::new(vec![Step::text(FINAL).with_usage(usage(900, 20)); 4])
            .matching(WHAT_SO_FAR),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": alpha})).with_usage(usage(2000, 20)),
            step1,
            Step::text("NO-COMPACTION-ANSWER").with_usage(usage(7600, 10)),
            Step::text("NO-COMPACTION-ANSWER again").with_usage(usage(7600, 10)),
        ])
        .matching(PROMPT),
    ])
}

/// A project with the data files and the scripted provider serving [`compaction_script`],
/// with step 1 (reading `big.txt`) made by `step1` from the bare read and `summary` as the
/// summary, configured with the small context and `compaction`.
async fn setup(
    step1: impl FnOnce(Step) -> Step,
    summary: Step,
    compaction: Value,
) -> (Project, MockServer) {
    let project = Project::empty();
    let (alpha, big) = write_data_files(&project);
    let step1 = step1(Step::tool("read", json!({"filePath": big})));
    let server = serve(
        &project,
        compaction_script(&alpha, step1, summary),
        compaction,
    )
    .await;
    (project, server)
}

/// The scripted provider serving `script`, and `project` configured for it with the small
/// context and `compaction`.
async fn serve(project: &Project, script: Script, compaction: Value) -> MockServer {
    let server = start_mock(script).await;
    project.write_config(&config_json(
        &server.base_url(),
        SMALL_CONTEXT,
        SMALL_OUTPUT,
        compaction,
    ));
    server
}

/// [`setup`] whose step 1 (reading `big.txt`) reports 7,500 prompt tokens, over the 7,000
/// the small context leaves usable.
async fn setup_over_budget(summary: Step, compaction: Value) -> (Project, MockServer) {
    setup(|read| read.with_usage(usage(7500, 20)), summary, compaction).await
}

/// [`setup`] with [`summary_step`] whose step 1 reports `prompt_tokens` and is rejected by
/// the provider as too long ([`overflow_fault`]).
async fn setup_rejected(prompt_tokens: u64, compaction: Value) -> (Project, MockServer) {
    let step1 = |read: Step| {
        read.with_usage(usage(prompt_tokens, 20))
            .with_fault(overflow_fault())
    };
    setup(step1, summary_step(), compaction).await
}

/// What `troupe session show <sid>` (plain) prints in `project`; it must succeed.
async fn plain_show(project: &Project, sid: &str) -> String {
    let out = project.troupe(&["session", "show", sid], &[]).await;
    assert_success(&out, "session show (plain)");
    text(&out.stdout)
}

/// Asserts that none of `reqs` asked for a summary (compaction.auto is false).
fn assert_no_summary(reqs: &[RecordedRequest]) {
    assert!(
        !reqs.iter().any(is_summary_request),
        "a summary was requested with compaction.auto false"
    );
}

/// The summary whose first `times` requests are answered with [`overflow_fault`].
fn overflowing_summary(times: usize) -> Step {
    (0..times).fold(Step::text(SUMMARY), |step, _| {
        step.with_fault(overflow_fault())
    })
}

/// The summary requests among those `server` received, in order.
fn summary_requests(server: &MockServer) -> Vec<RecordedRequest> {
    completions(server)
        .into_iter()
        .filter(is_summary_request)
        .collect()
}

/// The stored shape (see [`shape`]) of a session that compacted automatically and went on:
/// prompt, two steps, compaction request, summary, continue message, final answer.
const COMPACTED_AND_CONTINUED: [&str; 7] = [
    "user",
    "assistant",
    "assistant",
    "user+compaction",
    "assistant+summary",
    "user",
    "assistant",
];

fn summary_step() -> Step {
    Step::text(SUMMARY).with_usage(usage(1500, 120))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compaction() {
    let (project, server) = setup_over_budget(summary_step(), Value::Null).await;

    let started = Instant::now();
    let out = project
        .troupe(&["run", "--format", "json", PROMPT], &[])
        .await;
    eprintln!("auto_compaction: run took {:?}", started.elapsed());
    assert_success(&out, "troupe run");
    let events = parse_events(&out.stdout);
    assert!(
        events.iter().any(|e| e["type"] == "session.compacted"),
        "no session.compacted event: {:?}",
        events.iter().map(|e| &e["type"]).collect::<Vec<_>>()
    );

    // Store: prompt, two steps, compaction request, summary, continue message, final answer.
    let (sid, messages) = project.messages().await;
    assert_eq!(shape(&messages), COMPACTED_AND_CONTINUED, "{messages:#?}");
    let compaction = parts_of_type(&messages[3], "compaction");
    assert_eq!(compaction[0]["auto"], true, "{:#}", messages[3]);
    let summary = &messages[4];
    assert_eq!(summary["info"]["agent"], "compaction", "{summary:#}");
    assert!(summary["info"]["error"].is_null(), "{summary:#}");
    assert_eq!(
        summary["info"]["parentID"], messages[3]["info"]["id"],
        "summary answers the compaction request"
    );
    let summary_text = message_text(summary);
    let mut last = 0;
    for section in [
        "## Goal",
        "## Instructions",
        "## Discoveries",
        "## Accomplished",
        "## Relevant files",
    ] {
        let at = summary_text
            .find(section)
            .unwrap_or_else(|| panic!("summary lacks {section}: {summary_text}"));
        assert!(at >= last, "{section} out of order: {summary_text}");
        last = at;
    }
    let cont = parts_of_type(&messages[5], "text");
    assert_eq!(cont.len(), 1, "{:#}", messages[5]);
    assert_eq!(cont[0]["text"], COMPACTION_CONTINUE_PROMPT);
    assert_eq!(cont[0]["synthetic"], true, "{:#}", cont[0]);
    assert_eq!(message_text(&messages[6]), FINAL);
    assert!(messages[6]["info"]["error"].is_null(), "{:#}", messages[6]);

    // Provider side: 2 session steps, 1 summary request, 1 request after the compaction.
    let reqs = completions(&server);
    let convs: Vec<Option<usize>> = reqs.iter().map(|r| r.conversation).collect();
    assert_eq!(convs, [Some(2), Some(2), Some(0), Some(1)], "conversations");

    // The summary request: compaction system prompt, the history (tool outputs cut to
    // 2,000 chars), then the summary instructions.
    let sreq = &reqs[2];
    assert!(is_summary_request(sreq), "system: {}", req_system(sreq));
    assert_eq!(sreq.step, Some(2), "summary request step index");
    let smsgs = req_messages(sreq);
    let last_user = smsgs.last().expect("summary request messages");
    assert_eq!(last_user["role"], "user");
    assert!(
        content_text(last_user).contains("## Relevant files"),
        "summary instructions: {last_user:#}"
    );
    assert!(
        smsgs.iter().any(|m| content_text(m).contains(PROMPT)),
        "summary request lacks the history: {smsgs:#?}"
    );
    // Both reads of the turn (alpha.txt, then the 200 kB big.txt) reach the summarizer, the
    // big one cut to 2,000 chars plus the truncation note.
    let tool_msgs: Vec<&Value> = smsgs.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(
        tool_msgs.len(),
        2,
        "tool results in the summary request: {smsgs:#?}"
    );
    for m in &tool_msgs {
        assert!(
            content_text(m).chars().count() < 2_200,
            "tool output not cut for the summary: {} chars",
            content_text(m).chars().count()
        );
    }
    assert!(
        tool_msgs
            .iter()
            .any(|m| content_text(m).contains("[Tool output truncated for compaction")),
        "big.txt not truncated: {tool_msgs:#?}"
    );

    // The request after the compaction starts from it.
    let post = &reqs[3];
    let msgs = req_messages(post);
    let roles: Vec<&str> = msgs
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{msgs:#?}");
    assert_eq!(content_text(&msgs[1]), WHAT_SO_FAR);
    assert!(
        content_text(&msgs[2]).contains("## Goal"),
        "summary not sent as assistant text: {msgs:#?}"
    );
    assert_eq!(content_text(&msgs[3]), COMPACTION_CONTINUE_PROMPT);
    let body = post.body.to_string();
    assert!(
        !body.contains(BIG_MARKER),
        "the big file still reaches the model after compaction"
    );
    assert!(!body.contains("ALPHA-NOTES"), "old tool output still sent");
    let tokens = body.chars().count() as u64 / 4;
    eprintln!("auto_compaction: post-compaction request ≈ {tokens} tokens");
    assert!(
        tokens < USABLE,
        "post-compaction request is {tokens} tokens, over {USABLE}"
    );

    // The human view marks the summary.
    let shown = plain_show(&project, &sid).await;
    assert!(
        shown.contains("[summary]"),
        "plain show lacks [summary]:\n{shown}"
    );
    server.shutdown().await;
}

/// The default view prints the answer on stdout, never the compaction summary the model
/// wrote for itself in between (a new user's `troupe run … > answer.txt` caught it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_view_prints_the_answer_not_the_summary() {
    let (project, server) = setup_over_budget(summary_step(), Value::Null).await;
    let out = project.troupe(&["run", PROMPT], &[]).await;
    server.shutdown().await;
    assert_success(&out, "troupe run");
    let stdout = text(&out.stdout);
    assert!(stdout.contains(FINAL), "the answer is missing: {stdout}");
    assert!(
        !stdout.contains("## Goal") && !stdout.contains("big.txt is a large generated"),
        "the summary reached stdout: {stdout}"
    );
    // The run did compact (so the summary was there to leak).
    let (_, messages) = project.messages().await;
    assert!(messages.iter().any(is_summary), "no summary was stored");
}

/// A complete answer whose usage passes the usable context is compacted and the turn ends
/// there: no synthetic "continue" makes the model talk on (a new user's 4,096-token local
/// model answered over its budget and was sent on for five steps until the compactions gave
/// up). The next prompt starts from the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_answer_over_the_budget_is_compacted_and_the_turn_ends() {
    const ANSWER: &str = "The answer, complete, over the budget.";
    const NEXT: &str = "and one more question";
    let project = Project::empty();
    let script = Script::new(vec![
        Conversation::new(vec![summary_step(); 4]).matching_system(COMPACTION_SYSTEM),
        Conversation::new(vec![
            Step::text("AFTER-SUMMARY").with_usage(usage(900, 20)),
            Step::text("AFTER-SUMMARY again").with_usage(usage(900, 20)),
        ])
        .matching(WHAT_SO_FAR),
        Conversation::new(vec![
            Step::text(ANSWER).with_usage(usage(7500, 20)),
            Step::text("TALKED-ON").with_usage(usage(7600, 20)),
        ])
        .matching(PROMPT),
    ]);
    let server = serve(&project, script, Value::Null).await;
    let last = project.home.path().join("answer.txt");
    let out = project
        .troupe(&["run", "-o", &last.to_string_lossy(), PROMPT], &[])
        .await;
    assert_success(&out, "troupe run");
    let stdout = text(&out.stdout);
    assert!(stdout.contains(ANSWER), "the answer is missing: {stdout}");
    // The turn's result is the answer, not the summary that followed it.
    let saved = std::fs::read_to_string(&last).expect("run -o wrote its file");
    assert_eq!(saved, format!("{ANSWER}\n"));
    assert!(
        !stdout.contains("AFTER-SUMMARY") && !stdout.contains("TALKED-ON"),
        "the turn went on after its answer: {stdout}"
    );
    // Stored: prompt, the answer, the compaction request, the summary; nothing after it.
    let (sid, messages) = project.messages().await;
    assert_eq!(
        shape(&messages),
        ["user", "assistant", "user+compaction", "assistant+summary"],
        "{messages:#?}"
    );
    assert_eq!(message_text(&messages[1]), ANSWER);
    assert!(messages[3]["info"]["error"].is_null(), "{:#}", messages[3]);
    // Provider side: the answer, then the summary request; no step after it.
    let reqs = completions(&server);
    let convs: Vec<Option<usize>> = reqs.iter().map(|r| r.conversation).collect();
    assert_eq!(convs, [Some(2), Some(0)], "conversations");

    let out = project.troupe(&["run", "--session", &sid, NEXT], &[]).await;
    assert_success(&out, "troupe run --session");
    // The next prompt is sent from the summary: the old answer's budget is gone.
    let reqs = completions(&server);
    let next = reqs.last().expect("the next prompt's request");
    assert_eq!(
        next.conversation,
        Some(1),
        "the next prompt starts from the summary"
    );
    let msgs = req_messages(next);
    assert!(
        msgs.iter().any(|m| content_text(m).contains("## Goal")),
        "the summary is not in the next request: {msgs:#?}"
    );
    assert!(
        msgs.iter().any(|m| content_text(m).contains(NEXT)),
        "the next prompt is not in its request: {msgs:#?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_off_shows_overflow_error() {
    // Fault variant: the provider rejects step 1 as too long; with auto off it is shown.
    let (project, server) = setup_rejected(7500, json!({"auto": false})).await;
    let out = project.troupe(&["run", PROMPT], &[]).await;
    let line = assert_one_line_failure(&out, "overflow with auto off");
    let lower = line.to_lowercase();
    assert!(
        lower.contains("context") || lower.contains("overflow"),
        "line does not name the overflow: {line}"
    );
    let reqs = completions(&server);
    assert_no_summary(&reqs);
    assert_eq!(reqs.len(), 2, "one request per step, no retry of a 400");
    let (_, messages) = project.messages().await;
    assert!(!messages.iter().any(is_summary), "{messages:#?}");
    assert!(
        all_parts_of_type(&messages, "compaction").is_empty(),
        "{messages:#?}"
    );
    assert_eq!(
        messages.last().map(|m| &m["info"]["error"]["name"]),
        Some(&json!("ContextOverflowError")),
        "{messages:#?}"
    );
    server.shutdown().await;

    // Token-count variant: step 1 reports 7,500 tokens (≥ 7,000 usable) but succeeds; with
    // auto off the loop just goes on.
    let (project, server) = setup_over_budget(summary_step(), json!({"auto": false})).await;
    let out = project.troupe(&["run", PROMPT], &[]).await;
    assert_success(&out, "token overflow with auto off");
    assert!(
        text(&out.stdout).contains("NO-COMPACTION-ANSWER"),
        "stdout: {}",
        text(&out.stdout)
    );
    let reqs = completions(&server);
    assert_no_summary(&reqs);
    assert_eq!(reqs.len(), 3);
    let (_, messages) = project.messages().await;
    assert_eq!(
        shape(&messages),
        ["user", "assistant", "assistant", "assistant"],
        "{messages:#?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_overflow_error_compacts() {
    // The step's own usage is small: only the provider's error calls for the compaction.
    let (project, server) = setup_rejected(3000, Value::Null).await;
    let out = project
        .troupe(&["run", "--format", "json", PROMPT], &[])
        .await;
    assert_success(&out, "run with a provider overflow");
    let events = parse_events(&out.stdout);
    assert!(
        events.iter().any(|e| e["type"] == "session.compacted"),
        "no session.compacted event"
    );

    let reqs = completions(&server);
    let convs: Vec<Option<usize>> = reqs.iter().map(|r| r.conversation).collect();
    assert_eq!(convs, [Some(2), Some(2), Some(0), Some(1)], "conversations");
    assert_eq!(reqs[1].status, 400);
    // The failed step is not part of the summarized history: one assistant message.
    assert_eq!(reqs[2].step, Some(1), "summary request step index");

    let (_, messages) = project.messages().await;
    assert_eq!(shape(&messages), COMPACTED_AND_CONTINUED, "{messages:#?}");
    assert_eq!(
        messages[2]["info"]["error"]["name"], "ContextOverflowError",
        "{:#}",
        messages[2]
    );
    let compaction = parts_of_type(&messages[3], "compaction");
    assert_eq!(compaction[0]["auto"], true);
    assert_eq!(compaction[0]["overflow"], true, "{:#}", messages[3]);
    assert_eq!(message_text(&messages[6]), FINAL);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_that_overflows_stops_after_two_attempts() {
    let (project, server) = setup_over_budget(overflowing_summary(4), Value::Null).await;
    let started = Instant::now();
    let out = project.troupe(&["run", PROMPT], &[]).await;
    let elapsed = started.elapsed();
    eprintln!("summary overflow: run took {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(15),
        "took {elapsed:?}: a loop?"
    );
    let line = assert_one_line_failure(&out, "summary overflow");
    let lower = line.to_lowercase();
    assert!(
        lower.contains("compact") && lower.contains("too large"),
        "line does not say the conversation is too large to compact: {line}"
    );
    assert!(line.contains("ContextOverflowError"), "{line}");

    let reqs = completions(&server);
    assert_eq!(summary_requests(&server).len(), 2, "summary attempts");
    assert!(
        !reqs.iter().any(|r| r.conversation == Some(1)),
        "the session went on after the failed compaction"
    );
    let (_, messages) = project.messages().await;
    assert!(
        !messages
            .iter()
            .any(|m| is_summary(m) && m["info"]["error"].is_null()),
        "a failed summary is stored as a good one: {messages:#?}"
    );
    server.shutdown().await;
}

/// The retried summary request (after the first one overflowed) must summarize the same
/// history as the first, with at most as much input: not the compaction request itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_retry_summarizes_the_same_history() {
    let (project, server) = setup_over_budget(overflowing_summary(3), Value::Null).await;
    let out = project.troupe(&["run", PROMPT], &[]).await;
    assert_one_line_failure(&out, "summary overflow");
    let summaries = summary_requests(&server);
    assert_eq!(summaries.len(), 2, "summary attempts");
    let users = |r: &RecordedRequest| -> Vec<String> {
        req_messages(r)
            .iter()
            .filter(|m| m["role"] == "user")
            .map(content_text)
            .collect()
    };
    for (i, r) in summaries.iter().enumerate() {
        assert!(
            !users(r).iter().any(|u| u == WHAT_SO_FAR),
            "summary attempt {} summarizes its own compaction request: {:?}",
            i + 1,
            users(r)
        );
    }
    assert!(
        summaries[1].body.to_string().len() <= summaries[0].body.to_string().len(),
        "the retry (half the budget) is bigger than the first attempt"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_two_compactions_in_a_row_stop() {
    let project = Project::empty();
    let (alpha, big) = write_data_files(&project);
    let step1 = Step::tool("read", json!({"filePath": big})).with_usage(usage(7500, 20));
    let still_too_big = Step::tool("read", json!({"filePath": big})).with_usage(usage(7800, 20));
    let script = Script::new(vec![
        Conversation::new(vec![summary_step(); 6]).matching_system(COMPACTION_SYSTEM),
        // Every step after a compaction is over the usable context again.
        Conversation::new(vec![still_too_big; 6]).matching(WHAT_SO_FAR),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": alpha})).with_usage(usage(2000, 20)),
            step1,
        ])
        .matching(PROMPT),
    ]);
    let server = serve(&project, script, Value::Null).await;
    let started = Instant::now();
    let out = project.troupe(&["run", PROMPT], &[]).await;
    eprintln!("compaction loop: run took {:?}", started.elapsed());
    let line = assert_one_line_failure(&out, "compactions in a row");
    assert!(line.contains("ContextOverflowError"), "{line}");
    assert!(line.contains("2 compactions"), "{line}");
    let reqs = completions(&server);
    let convs: Vec<Option<usize>> = reqs.iter().map(|r| r.conversation).collect();
    assert_eq!(
        convs,
        [Some(2), Some(2), Some(0), Some(1), Some(0), Some(1)],
        "two compactions, then the stop"
    );
    let (_, messages) = project.messages().await;
    assert_eq!(messages.iter().filter(|m| is_summary(m)).count(), 2);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_compact() {
    let project = Project::empty();
    let (alpha, _big) = write_data_files(&project);
    let script = Script::new(vec![
        Conversation::new(vec![summary_step(); 4]).matching_system(COMPACTION_SYSTEM),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": alpha})),
            Step::text("alpha says remember the milk"),
            Step::text("after the manual compaction"),
        ])
        .matching("look at alpha"),
        Conversation::new(vec![Step::text("continued from the summary"); 4]).matching(WHAT_SO_FAR),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(&server.base_url(), 128_000, 8192, Value::Null));
    let out = project.troupe(&["run", "look at alpha"], &[]).await;
    assert_success(&out, "first run");
    let sid = project.only_session().await["id"]
        .as_str()
        .expect("id")
        .to_string();

    let out = project.troupe(&["session", "compact", &sid], &[]).await;
    assert_success(&out, "session compact");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 3, "one summary request");
    assert!(is_summary_request(&reqs[2]));
    assert_eq!(reqs[2].step, Some(2));

    let doc = project.show(&sid).await;
    let messages = doc["messages"].as_array().expect("messages").clone();
    assert_eq!(
        shape(&messages),
        [
            "user",
            "assistant",
            "assistant",
            "user+compaction",
            "assistant+summary"
        ],
        "a manual compaction does not continue: {messages:#?}"
    );
    assert_eq!(parts_of_type(&messages[3], "compaction")[0]["auto"], false);
    assert!(message_text(&messages[4]).contains("## Relevant files"));
    assert!(
        serde_json::to_string(&doc)
            .expect("json")
            .contains("\"summary\":true"),
        "show --format json lacks \"summary\": true"
    );

    // The next turn starts from the summary.
    let out = project
        .troupe(&["run", "--continue", "and", "now"], &[])
        .await;
    assert_success(&out, "run after compact");
    let reqs = completions(&server);
    let last = reqs.last().expect("request");
    assert_eq!(
        last.conversation,
        Some(2),
        "next turn not matched on the summary"
    );
    let msgs = req_messages(last);
    let users: Vec<String> = msgs
        .iter()
        .filter(|m| m["role"] == "user")
        .map(content_text)
        .collect();
    assert_eq!(users, [WHAT_SO_FAR, "and now"], "{msgs:#?}");
    assert!(!last.body.to_string().contains("ALPHA-NOTES"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_marks_old_outputs() {
    let project = Project::empty();
    // Six ~200 KB files; read returns ≤ 50 KB of each (≈ 12,800 tokens), so turn 1 holds
    // ≈ 77,000 tokens of tool output: past the 40,000 protected, ≥ 20,000 to clear.
    let mut calls = Step::text("reading");
    for k in 0..6 {
        let mut content = String::with_capacity(210_000);
        let mut i = 0;
        while content.len() < 200_000 {
            content.push_str(&format!(
                "FILE{k}-LINE {i:05} the quick brown fox jumps over the lazy dog again\n"
            ));
            i += 1;
        }
        let path = project.write_file(&format!("data{k}.txt"), &content);
        calls = calls.with_tool("read", json!({"filePath": path}));
    }
    let script = Script::single(vec![
        calls,
        Step::text("turn one done"),
        Step::text("turn two done"),
        Step::text("turn three done"),
        Step::text("turn four done"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&config_json(
        &server.base_url(),
        1_000_000,
        8192,
        Value::Null,
    ));

    let out = project.troupe(&["run", "read", "all", "data"], &[]).await;
    assert_success(&out, "turn 1");
    for (n, prompt) in ["second", "third"].iter().enumerate() {
        let out = project
            .troupe(&["run", "--continue", prompt, "turn"], &[])
            .await;
        assert_success(&out, &format!("turn {}", n + 2));
    }

    let (sid, messages) = project.messages().await;
    let tools = all_parts_of_type(&messages, "tool");
    assert_eq!(tools.len(), 6, "{messages:#?}");
    for t in &tools {
        assert_eq!(t["state"]["status"], "completed", "{t:#}");
    }
    assert!(
        tools[0]["state"]["time"]["compacted"].is_number(),
        "oldest tool output not pruned after turn 3: {:#}",
        tools[0]["state"]["time"]
    );
    assert!(
        tools[5]["state"]["time"]["compacted"].is_null(),
        "the newest 40,000 tokens of tool output must stay: {:#}",
        tools[5]["state"]["time"]
    );
    // The output itself stays in the store.
    assert!(
        tools[0]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("FILE0-LINE"),
        "pruned output removed from the store"
    );
    let shown = plain_show(&project, &sid).await;
    assert!(
        shown.contains("[compacted]"),
        "plain show lacks [compacted]:\n{shown}"
    );

    // Turn 4 sends the marker instead of the pruned output.
    let out = project
        .troupe(&["run", "--continue", "fourth", "turn"], &[])
        .await;
    assert_success(&out, "turn 4");
    let reqs = completions(&server);
    assert_eq!(reqs.len(), 5);
    let msgs = req_messages(&reqs[4]);
    let call0 = tools[0]["callID"].as_str().expect("callID");
    let result0 = msgs
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call0)
        .unwrap_or_else(|| panic!("turn 4 request lacks the result of {call0}"));
    assert_eq!(content_text(result0), CLEARED_TOOL_OUTPUT);
    let call5 = tools[5]["callID"].as_str().expect("callID");
    let result5 = msgs
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call5)
        .unwrap_or_else(|| panic!("turn 4 request lacks the result of {call5}"));
    assert!(content_text(result5).contains("FILE5-LINE"));
    // Before the prune (turn 3's request) the output was still sent.
    let before = req_messages(&reqs[3]);
    assert!(
        before
            .iter()
            .any(|m| m["tool_call_id"] == call0 && content_text(m).contains("FILE0-LINE")),
        "output cleared too early"
    );
    server.shutdown().await;
}

/// The main conversation of the title tests.
const TITLE_PROMPT: &str = "please fix the todo list";

/// Runs [`TITLE_PROMPT`] with titles on in a new project whose title model answers with
/// `title` and whose main model answers "The TODO list is fixed."; the run must succeed
/// (`what` names it) and print that answer. The provider and the project.
async fn titled_run(title: Step, what: &str) -> (MockServer, Project) {
    let script = Script::new(vec![
        Conversation::new(vec![title]).matching_system(TITLE_SYSTEM),
        Conversation::new(vec![Step::text("The TODO list is fixed.")]).matching(TITLE_PROMPT),
    ]);
    let server = start_mock(script).await;
    let project = Project::empty();
    project.write_config(&config_json(&server.base_url(), 128_000, 8192, Value::Null));
    let out = project
        .troupe(&["run", TITLE_PROMPT], &[("TROUPE_TITLE", "1")])
        .await;
    assert_success(&out, what);
    assert!(
        text(&out.stdout).contains("The TODO list is fixed."),
        "stdout: {}",
        text(&out.stdout)
    );
    (server, project)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn title_arrives() {
    let title =
        Step::text("\"Fix the TODO list\"\nsecond line is ignored").with_first_byte_delay_ms(300);
    let (server, project) = titled_run(title, "run with titles").await;

    let session = project.only_session().await;
    assert_eq!(session["title"], "Fix the TODO list", "{session:#}");
    let reqs = completions(&server);
    let titles: Vec<&RecordedRequest> = reqs.iter().filter(|r| is_title_request(r)).collect();
    assert_eq!(titles.len(), 1, "one title request");
    let first_user = req_messages(titles[0])
        .iter()
        .find(|m| m["role"] == "user")
        .map(content_text)
        .unwrap_or_default();
    assert!(first_user.contains(TITLE_PROMPT), "{first_user}");
    assert!(
        titles[0].body["tools"].as_array().is_none_or(Vec::is_empty),
        "the title request offers tools"
    );

    // A second turn does not ask again.
    let out = project
        .troupe(&["run", "--continue", "thanks"], &[("TROUPE_TITLE", "1")])
        .await;
    assert_success(&out, "second turn");
    let n = completions(&server)
        .iter()
        .filter(|r| is_title_request(r))
        .count();
    assert_eq!(n, 1, "a title was asked for again");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn title_failure_keeps_default_title() {
    let title = Step::text("Never used title").with_fault(Fault::http(500));
    let (server, project) = titled_run(title, "run with a failing title").await;
    let (_, messages) = project.messages().await;
    assert_eq!(shape(&messages), ["user", "assistant"]);
    assert_eq!(message_text(&messages[1]), "The TODO list is fixed.");
    assert!(messages[1]["info"]["error"].is_null());

    let session = project.only_session().await;
    let title = session["title"].as_str().unwrap_or("");
    assert!(
        title.starts_with("New session - "),
        "title changed after a failed title request: {title}"
    );
    let reqs = completions(&server);
    let titles: Vec<&RecordedRequest> = reqs.iter().filter(|r| is_title_request(r)).collect();
    assert_eq!(titles.len(), 1, "the title worker must not retry");
    assert_eq!(titles[0].status, 500);
    server.shutdown().await;
}
