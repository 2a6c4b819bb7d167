//! End-to-end test of the session timeline (issue 23): a scripted session with a tool call
//! and two parallel subagents, then `troupe session show ID --timeline` (text and JSON) and
//! `GET /session/{id}/timeline` from `troupe serve` on the same store. The rows are checked
//! against the stored parts, re-derived here from `session show --format json` of the
//! session and its subagent sessions: count, order, ids and times.

use serde_json::{Value, json};
use troupe_testkit::task::task_args;
use troupe_testkit::{Conversation, Script, Step};

mod common;
use common::*;

/// One expected row: kind, session, message, part, start, end (ms).
type Expected = (String, String, String, String, i64, i64);

/// The rows the timeline must have for `messages` (stored messages of `sid`, as `session show
/// --format json` prints them), derived from the parts the way the issue describes them:
/// per assistant message a step bar (its step-start part, message times), a request bar (the
/// step-start part's `request` times), a bar per tool part with times, and after each `task`
/// part the child session's bar and rows (only the child's messages created during the call).
async fn expected_rows(
    project: &Project,
    sid: &str,
    messages: &[Value],
    window: Option<(i64, i64)>,
    out: &mut Vec<Expected>,
) {
    for m in messages {
        let info = &m["info"];
        let created = info["time"]["created"].as_i64().expect("created");
        if let Some((from, to)) = window
            && (created < from || created > to)
        {
            continue;
        }
        if info["role"] != "assistant" {
            continue;
        }
        let mid = info["id"].as_str().expect("message id").to_string();
        let parts = m["parts"].as_array().expect("parts");
        let step_start = parts
            .iter()
            .find(|p| p["type"] == "step-start")
            .expect("every step has a step-start part");
        let ssid = step_start["id"].as_str().expect("part id").to_string();
        let completed = info["time"]["completed"]
            .as_i64()
            .expect("a finished session");
        let row = |kind: &str, part: &str, start: i64, end: i64| {
            (
                kind.to_string(),
                sid.to_string(),
                mid.clone(),
                part.to_string(),
                start,
                end,
            )
        };
        out.push(row("step", &ssid, created, completed));
        let req = &step_start["request"];
        assert!(
            req.is_object(),
            "the step-start part of {mid} has no request times: {step_start}"
        );
        let (rs, re) = (
            req["start"].as_i64().expect("request start"),
            req["end"].as_i64().expect("request end"),
        );
        assert!(
            created <= rs && rs <= re && re <= completed,
            "request {rs}..{re} outside its step {created}..{completed}"
        );
        if let Some(first) = req["firstToken"].as_i64() {
            assert!(
                rs <= first && first <= re,
                "first token {first} outside {rs}..{re}"
            );
        }
        out.push(row("request", &ssid, rs, re));
        for p in parts.iter().filter(|p| p["type"] == "tool") {
            let t = &p["state"]["time"];
            let (ts, te) = (
                t["start"].as_i64().expect("tool start"),
                t["end"].as_i64().expect("tool end"),
            );
            let pid = p["id"].as_str().expect("part id");
            out.push(row("tool", pid, ts, te));
            if p["tool"] == "task" {
                let child = p["state"]["metadata"]["sessionId"]
                    .as_str()
                    .expect("a task part names its child session")
                    .to_string();
                let child_messages = project.session_messages(&child).await;
                let in_call: Vec<&Value> = child_messages
                    .iter()
                    .filter(|m| {
                        let c = m["info"]["time"]["created"].as_i64().unwrap_or(0);
                        ts <= c && c <= te
                    })
                    .collect();
                let start = in_call[0]["info"]["time"]["created"]
                    .as_i64()
                    .expect("created");
                let end = in_call
                    .iter()
                    .filter_map(|m| m["info"]["time"]["completed"].as_i64())
                    .max()
                    .expect("a finished child step");
                out.push(row("subagent", pid, start, end));
                Box::pin(expected_rows(
                    project,
                    &child,
                    &child_messages,
                    Some((ts, te)),
                    out,
                ))
                .await;
            }
        }
    }
}

fn actual_rows(timeline: &Value) -> Vec<Expected> {
    timeline["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().expect("kind").to_string(),
                r["sessionID"].as_str().expect("sessionID").to_string(),
                r["messageID"].as_str().expect("messageID").to_string(),
                r["partID"].as_str().expect("partID").to_string(),
                r["start"].as_i64().expect("start"),
                r["end"].as_i64().expect("end"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_rows_match_the_stored_parts_in_cli_and_api() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let notes = project.write_file("notes.md", "the codename is HERON\n");
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes}))
                .with_tool("task", task_args("CHILD-ONE", "explore"))
                .with_tool("task", task_args("CHILD-TWO", "explore"))
                .with_first_byte_delay_ms(30),
            Step::text("both subagents reported; the codename is HERON")
                .with_first_byte_delay_ms(30),
        ])
        .matching("TIMELINE-PARENT"),
        Conversation::new(vec![
            Step::tool("glob", json!({"pattern": "*.md"})).with_first_byte_delay_ms(250),
            Step::text("one: found notes.md").with_first_byte_delay_ms(100),
        ])
        .matching("CHILD-ONE"),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes})).with_first_byte_delay_ms(250),
            Step::text("two: read the notes").with_first_byte_delay_ms(100),
        ])
        .matching("CHILD-TWO"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());

    let out = project
        .troupe(
            &["run", "--format", "json", "TIMELINE-PARENT: look around"],
            &[],
        )
        .await;
    assert_success(&out, "troupe run");
    let sid = session_id_of(&parse_events(&out.stdout));
    let messages = project.session_messages(&sid).await;

    let mut expected = Vec::new();
    expected_rows(&project, &sid, &messages, None, &mut expected).await;
    // 2 parent steps (step + request), 3 tool calls, 2 subagents with 2 steps and 1 tool each.
    assert_eq!(
        expected.len(),
        2 * 2 + 3 + 2 * (1 + 2 * 2 + 1),
        "{expected:#?}"
    );

    // The JSON rows: exactly the stored parts, in order, with their stored times.
    let out = project
        .troupe(
            &["session", "show", &sid, "--timeline", "--format", "json"],
            &[],
        )
        .await;
    assert_success(&out, "session show --timeline --format json");
    let cli: Value = serde_json::from_slice(&out.stdout).expect("timeline JSON");
    assert_eq!(actual_rows(&cli), expected);
    assert_eq!(cli["sessionID"], sid.as_str());
    let rows = cli["rows"].as_array().expect("rows");
    assert!(rows.iter().all(|r| r["status"] == "completed"), "{rows:#?}");
    let starts: Vec<i64> = expected.iter().map(|r| r.4).collect();
    let ends: Vec<i64> = expected.iter().map(|r| r.5).collect();
    assert_eq!(cli["start"].as_i64(), starts.iter().min().copied());
    assert_eq!(cli["end"].as_i64(), ends.iter().max().copied());

    // Depths and lanes: the subagents ran at the same time, so they are on different lanes,
    // and their rows are one level deeper and carry their lane.
    let subagents: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "subagent").collect();
    assert_eq!(subagents.len(), 2);
    let (a, b) = (subagents[0], subagents[1]);
    let overlap =
        a["start"].as_i64() < b["end"].as_i64() && b["start"].as_i64() < a["end"].as_i64();
    assert!(
        overlap,
        "the two subagents did not run in parallel: {a} {b}"
    );
    let mut lanes = [a["lane"].as_u64(), b["lane"].as_u64()];
    lanes.sort();
    assert_eq!(lanes, [Some(0), Some(1)]);
    for r in rows {
        let own = r["sessionID"] == sid.as_str() && r["kind"] != "subagent";
        assert_eq!(r["depth"], if own { 0 } else { 1 }, "{r}");
        if let Some(child) = r["childSessionID"].as_str() {
            let lane = &r["lane"];
            assert!(
                rows.iter()
                    .filter(|x| x["sessionID"] == child)
                    .all(|x| &x["lane"] == lane),
                "the rows of {child} are not on its lane {lane}"
            );
        }
    }

    // The text chart: one line per row after the title and axis lines, each as wide as the
    // terminal, kinds in the same order, subagents marked and their rows indented.
    let out = project
        .troupe(
            &["session", "show", &sid, "--timeline"],
            &[("COLUMNS", "110")],
        )
        .await;
    assert_success(&out, "session show --timeline");
    let chart = text(&out.stdout);
    let lines: Vec<&str> = chart.lines().collect();
    assert!(
        lines[0].starts_with(&format!("timeline {sid}  {} bars", rows.len())),
        "{chart}"
    );
    let bars = &lines[2..];
    assert_eq!(bars.len(), rows.len(), "{chart}");
    for (line, r) in bars.iter().zip(rows) {
        let kind = r["kind"].as_str().unwrap_or_default();
        assert!(
            line.starts_with(kind),
            "{line:?} is not a {kind} row\n{chart}"
        );
        assert_eq!(line.chars().count(), 110, "{line:?}");
        assert!(line.ends_with('|'), "{line:?}");
        if kind == "subagent" {
            assert!(line.contains("↳ job CHILD-"), "{line:?}");
        } else if r["depth"] == 1 {
            assert!(
                line[10..].starts_with("  "),
                "child row not indented: {line:?}"
            );
        }
    }
    assert!(chart.contains("read "), "{chart}");
    assert!(chart.contains("task explore: job CHILD-ONE"), "{chart}");

    // The server answers the same rows from the same store.
    let (_child, base) = project.serve().await;
    let api: Value = reqwest::get(format!("{base}/session/{sid}/timeline"))
        .await
        .expect("GET timeline")
        .json()
        .await
        .expect("timeline JSON");
    let strip = |mut v: Value| {
        v.as_object_mut().expect("object").remove("now");
        v
    };
    assert_eq!(strip(api), strip(cli));
    let missing = reqwest::get(format!("{base}/session/ses_nope/timeline"))
        .await
        .expect("GET timeline");
    assert_eq!(missing.status().as_u16(), 404);
}
