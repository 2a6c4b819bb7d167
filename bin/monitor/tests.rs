use super::*;
use serde_json::json;

fn sample() -> ActorNode {
    serde_json::from_str(
        r#"{
            "kind": "runtime", "id": "troupe", "status": "busy", "started": 1000,
            "steps": 3, "tokens": 1500, "cost": 0.0125, "restarts": 0, "failures": 0,
            "queued": 0,
            "children": [
                {"kind": "session", "id": "ses_a", "sessionID": "ses_a", "status": "busy",
                 "agent": "build", "started": 61000, "steps": 3, "tokens": 1500,
                 "cost": 0.0125, "restarts": 1, "failures": 2, "queued": 1,
                 "children": [
                    {"kind": "processor", "id": "msg_1", "sessionID": "ses_a", "status": "busy",
                     "agent": "build", "started": 90000, "steps": 3,
                     "tokens": {"input": 1000, "output": 400, "reasoning": 0,
                                "cache": {"read": 100, "write": 0}},
                     "cost": 0.0125, "children": [
                        {"kind": "tool_call", "id": "call_1", "sessionID": "ses_a",
                         "status": "busy", "tool": "bash", "started": 99500, "children": []}
                     ]}
                 ]},
                {"kind": "session", "id": "ses_b", "status": "idle", "children": [],
                 "unknown_field": true}
            ]
        }"#,
    )
    .expect("sample tree")
}

#[test]
fn text_rendering_of_sample_tree() {
    let text = render_tree_text(&sample(), 100_000);
    let expected = "\
runtime troupe          busy          steps=3 tokens=1500 cost=$0.0125 age=1m39s
  session ses_a         busy  @build  steps=3 tokens=1500 cost=$0.0125 restarts=1 failures=2 queued=1 age=39s
    processor msg_1     busy  @build  steps=3 tokens=1500 cost=$0.0125 age=10s
      tool_call call_1  busy  bash    steps=0 tokens=0 cost=$0.0000 age=500ms
  session ses_b         idle          steps=0 tokens=0 cost=$0.0000
";
    assert_eq!(text, expected, "got:\n{text}");
}

#[test]
fn header_figures_have_one_source() {
    let mut labels = HashMap::new();
    labels.insert("ses_a".to_string(), "fix the bug".to_string());
    let mut rows = flatten(&sample(), 100_000, &labels);
    let mut totals = BTreeMap::new();
    totals.insert("troupe_tokens_total".to_string(), 11_216.0);
    totals.insert("troupe_cost_usd_total".to_string(), 0.5);
    totals.insert("troupe_actors".to_string(), 7.0);
    let s = summarize(&mut rows, &totals);
    assert_eq!(
        s,
        Summary {
            actors: 4,
            sessions: 2,
            busy: 1,
            tools: 1,
            nodes: 0,
            dead_nodes: 0,
            tokens: 11_216,
            cost: 0.5
        }
    );
    // The runtime row says the same as the header.
    assert_eq!((rows[0].tokens, rows[0].cost), (11_216, 0.5));
    assert_eq!(
        summary_line(&s),
        "actors 4  sessions 2 (busy 1)  tool calls 1  tokens 11,216  cost $0.5000"
    );
    let text = render_rows_text(&rows);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.ends_with("age=39s \"fix the bug\"")),
        "{text}"
    );
    // Without counters, the tree's own figures.
    let mut rows = flatten(&sample(), 100_000, &HashMap::new());
    let s = summarize(&mut rows, &BTreeMap::new());
    assert_eq!((s.tokens, s.cost), (1500, 0.0125));
}

#[test]
fn session_label_prefers_a_real_title() {
    assert_eq!(session_label("Fix login", Some("p")), "Fix login");
    assert_eq!(
        session_label(
            "New session - 2026-01-01T00:00:00Z",
            Some("find the\nTODOs")
        ),
        "find the TODOs"
    );
    assert_eq!(session_label("New session - x", None), "");
    let long = "x".repeat(70);
    assert_eq!(session_label("", Some(&long)).chars().count(), 61);
}

#[test]
fn missing_fields_default() {
    let n: ActorNode =
        serde_json::from_value(json!({"kind": "runtime", "id": "r"})).expect("minimal node");
    assert_eq!(n.children.len(), 0);
    assert_eq!(
        render_tree_text(&n, 0),
        "runtime r      steps=0 tokens=0 cost=$0.0000\n"
    );
}

#[test]
fn parses_prometheus_text() {
    let text = "\
# HELP troupe_steps_total LLM steps.
# TYPE troupe_steps_total counter
troupe_steps_total 12
troupe_tool_calls_total{tool=\"bash\",status=\"completed\"} 3
troupe_tool_calls_total{tool=\"read\",status=\"error\"} 2 1700000000000
troupe_cost_usd 0.5
troupe_latency_seconds_bucket{le=\"+Inf\"} 4
other_metric 7
broken_line
troupe_bad nope
";
    let series = parse_metrics(text);
    assert_eq!(series.len(), 6, "{series:?}");
    assert_eq!(
        series[1],
        (
            "troupe_tool_calls_total{tool=\"bash\",status=\"completed\"}".to_string(),
            3.0
        )
    );
    let totals = metric_totals(&series);
    assert_eq!(totals.get("troupe_steps_total"), Some(&12.0));
    assert_eq!(totals.get("troupe_tool_calls_total"), Some(&5.0));
    assert_eq!(totals.get("troupe_cost_usd"), Some(&0.5));
    assert!(!totals.contains_key("other_metric"));
    assert!(!totals.contains_key("troupe_latency_seconds_bucket"));
    assert_eq!(fmt_metric(12.0), "12");
    assert_eq!(fmt_metric(0.5), "0.5000");
}

#[test]
fn formats() {
    assert_eq!(fmt_tokens(999), "999");
    assert_eq!(fmt_thousands(0), "0");
    assert_eq!(fmt_thousands(999), "999");
    assert_eq!(fmt_thousands(1_000), "1,000");
    assert_eq!(fmt_thousands(1_234_567), "1,234,567");
    assert_eq!(fmt_tokens(12_345), "12.3k");
    assert_eq!(fmt_tokens(4_500_000), "4.50M");
    assert_eq!(fmt_age(3_725_000), "1h02m");
    assert_eq!(token_total(&json!({"a": 1, "b": {"c": 2}})), 3);
}

#[tokio::test]
async fn unreachable_server_is_one_error() {
    // Port 9 (discard) on localhost is closed on test machines.
    let api = Api::new("http://127.0.0.1:9", None).expect("api");
    let err = api.actors().await.expect_err("must fail");
    let msg = format!("{err:#}");
    assert!(msg.contains("cannot reach the troupe server"), "{msg}");
    assert!(Api::new("localhost:4096", None).is_err());
}
