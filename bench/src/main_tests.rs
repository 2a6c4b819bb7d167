use anyhow::{Result, anyhow};
use clap::Parser;
use troupe_testkit::MOCK_MODEL;

use crate::options::{Args, Settings};
use crate::run::{bench_config, run};
use crate::script::ToolMix;

fn parse(args: &[&str]) -> Result<Settings> {
    let mut v = vec!["troupe-bench"];
    v.extend_from_slice(args);
    Args::try_parse_from(v)
        .map_err(|e| anyhow!("{e}"))?
        .settings()
}

/// Runs the bench with `args` on a 2-worker runtime, as `main` does (debug build).
fn run_with(args: &[&str]) -> crate::report::Report {
    let s = parse(args).expect("settings");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(&s)).expect("run")
}

#[test]
fn defaults_and_validation() {
    let s = parse(&[]).expect("defaults");
    assert_eq!(
        (s.sessions, s.steps, s.parallel, s.mix),
        (1, 6, 1, ToolMix::Rotate)
    );
    let s = parse(&["--sessions", "1000", "--steps", "10", "--parallel", "200"]).expect("ok");
    assert_eq!((s.sessions, s.steps, s.parallel), (1000, 10, 200));
    assert_eq!(parse(&["--sessions", "5"]).expect("ok").parallel, 5);
    assert_eq!(
        parse(&["--sessions", "5", "--parallel", "50"])
            .expect("ok")
            .parallel,
        5
    );
    assert!(!parse(&[]).expect("ok").record_bodies);
    assert!(parse(&["--record-bodies"]).expect("ok").record_bodies);
    assert_eq!(parse(&["--no-tools"]).expect("ok").mix, ToolMix::ReadOnly);
    assert_eq!(
        parse(&["--no-tools", "--tools"]).expect("ok").mix,
        ToolMix::Rotate
    );
    assert!(parse(&["--sessions", "0"]).is_err());
    assert!(parse(&["--steps", "0"]).is_err());
    assert!(parse(&["--parallel", "0"]).is_err());
    assert!(parse(&["--chunk-size", "0"]).is_err());
    assert!(parse(&["--sessions", "-3"]).is_err());
}

#[test]
fn config_resolves_the_mock_model() {
    let c = bench_config("http://127.0.0.1:9/v1").expect("config");
    let m = c
        .resolve_model(&format!("mock/{MOCK_MODEL}"))
        .expect("resolve");
    assert_eq!(m.base_url, "http://127.0.0.1:9/v1");
}

/// End to end: 3 sessions of the 6-step script through one runtime (debug build).
#[test]
fn three_sessions_run_clean() {
    let report = run_with(&["--sessions", "3", "--steps", "6", "--parallel", "2"]);
    assert_eq!(report.first_error, None, "{}", report.human);
    assert_eq!(report.json["total_steps"], 18);
    assert_eq!(report.json["mock_requests"], 18);
    assert_eq!(report.json["live_sessions_after"], 0);
    assert_eq!(report.json["compacted_sessions"], 0);
    assert!(report.json["overhead_ms_per_step"]["p50"].is_number());
    assert!(report.json["wall_s"].as_f64().is_some_and(|w| w > 0.0));
    assert!(report.json["page_probe"].is_null());
}

/// A session longer than the default step limit (100) runs to its scripted end in one
/// turn, and the page probe reads it 50 messages at a time.
#[test]
fn a_long_session_runs_past_the_default_step_limit_and_is_paged() {
    let report = run_with(&["--steps", "130", "--no-tools", "--page-probe", "20"]);
    assert_eq!(report.first_error, None, "{}", report.human);
    assert_eq!(report.json["total_steps"], 130);
    let probe = &report.json["page_probe"];
    // The prompt and one assistant message per step.
    assert_eq!(probe["messages_in_session"], 131, "{probe}");
    assert_eq!(probe["reads"], 20);
    assert!(
        probe["page_read_us"]["p99"]
            .as_f64()
            .is_some_and(|us| us > 0.0)
    );
    assert!(
        report.human.contains("message pages  20 reads"),
        "{}",
        report.human
    );
}
