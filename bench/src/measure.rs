//! Process measurements (CPU time, RSS) and the per-session overhead arithmetic.

use std::collections::HashMap;

use troupe_session::{Message, MessageWithParts, PartKind, ToolState};
use troupe_testkit::RecordedRequest;

/// Process resource usage from `getrusage(RUSAGE_SELF)`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// User + system CPU time of the whole process (all threads), seconds.
    pub cpu_s: f64,
    /// Peak resident set size so far (`ru_maxrss`; KiB on Linux), MiB.
    pub max_rss_mib: f64,
}

/// Read `getrusage(RUSAGE_SELF)`. `None` if the call fails (it does not on Linux).
pub fn usage() -> Option<Usage> {
    rusage(libc::RUSAGE_SELF)
}

/// Read `getrusage(RUSAGE_CHILDREN)`: CPU of the child processes that ended and were waited
/// for (bash calls, git for snapshots). `None` if the call fails.
pub fn children_usage() -> Option<Usage> {
    rusage(libc::RUSAGE_CHILDREN)
}

#[allow(unsafe_code)]
fn rusage(who: libc::c_int) -> Option<Usage> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the right size; getrusage only writes it.
    let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled the struct (and it was zeroed before).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(Usage {
        cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        max_rss_mib: ru.ru_maxrss as f64 / 1024.0,
    })
}

/// Parse the current RSS (`VmRSS:  1234 kB`) out of `/proc/self/status` text, in MiB.
pub fn parse_vm_rss_mib(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Current RSS in MiB from `/proc/self/status` (Linux); `None` elsewhere.
pub async fn current_rss_mib() -> Option<f64> {
    let text = tokio::fs::read_to_string("/proc/self/status").await.ok()?;
    parse_vm_rss_mib(&text)
}

/// Σ run-queue wait of the process's threads so far, ns: the second field of every
/// `/proc/self/task/<tid>/schedstat` (time runnable but not running). `None` when it cannot
/// be read (not Linux, or schedstats off). Threads that ended meanwhile drop out of the sum,
/// so a difference of two readings is a lower bound.
pub fn runqueue_wait_ns() -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        total += parse_schedstat_wait_ns(&text)?;
    }
    Some(total)
}

/// The run-queue wait (second field, ns) of one `schedstat` line: `run_ns wait_ns slices`.
pub fn parse_schedstat_wait_ns(line: &str) -> Option<u64> {
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Sum of provider time per session, µs: `end_us − start_us` of every finished recorded
/// request (the mock's microsecond clock), keyed by its `x-session-affinity` header.
/// Requests without the header or still open are skipped.
pub fn provider_us_by_session(requests: &[RecordedRequest]) -> HashMap<String, u64> {
    let mut out: HashMap<String, u64> = HashMap::new();
    for r in requests {
        let (Some(sid), Some(end)) = (r.headers.x_session_affinity.as_ref(), r.end_us) else {
            continue;
        };
        *out.entry(sid.clone()).or_default() += end.saturating_sub(r.start_us);
    }
    out
}

/// Tool time of a session's history, ms, and the first tool error text: Σ `time.end −
/// time.start` over tool parts in a final state (completed or error).
pub fn tool_ms(history: &[MessageWithParts]) -> (i64, Option<String>) {
    let mut total = 0i64;
    let mut first_error = None;
    for part in history.iter().flat_map(|m| &m.parts) {
        let PartKind::Tool { tool, state, .. } = &part.kind else {
            continue;
        };
        match state {
            ToolState::Completed { time, .. } => total += time.end.map_or(0, |e| e - time.start),
            ToolState::Error { time, error, .. } => {
                total += time.end.map_or(0, |e| e - time.start);
                first_error.get_or_insert_with(|| format!("tool {tool}: {error}"));
            }
            _ => {
                first_error
                    .get_or_insert_with(|| format!("tool {tool} left in state {}", state.status()));
            }
        }
    }
    (total, first_error)
}

/// Whether `history` holds a compaction (its request part, or a summary message).
pub fn compacted(history: &[MessageWithParts]) -> bool {
    history.iter().any(|m| {
        matches!(&m.info, Message::Assistant(a) if a.summary)
            || m.parts
                .iter()
                .any(|p| matches!(p.kind, PartKind::Compaction { .. }))
    })
}

/// Orchestrator overhead per step, ms: `(turn − provider − tools) / steps`, from the turn's
/// `Instant`, the mock's µs clock and the timed tools' `Instant`s (µs resolution). Can come
/// out slightly negative only through clock skew between the two clocks. `None` when
/// `steps` is 0.
pub fn overhead_per_step_ms(
    turn_ms: f64,
    provider_ms: f64,
    tool_ms: f64,
    steps: u32,
) -> Option<f64> {
    (steps > 0).then(|| (turn_ms - provider_ms - tool_ms) / f64::from(steps))
}

/// Nearest-rank percentile (`p` in 0..=100) of `values`; `None` when empty. NaNs sort last.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * v.len() as f64).ceil() as usize;
    v.get(rank.saturating_sub(1).min(v.len() - 1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_session::{Message, ModelRef, Part, ToolTime, UserMessage};

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[5.0, 1.0, 3.0], 50.0), Some(3.0));
    }

    #[test]
    fn schedstat_wait_parses_and_rejects() {
        assert_eq!(parse_schedstat_wait_ns("123 4567 8\n"), Some(4567));
        assert_eq!(parse_schedstat_wait_ns("123"), None);
        assert_eq!(parse_schedstat_wait_ns("1 x 2"), None);
    }

    #[test]
    fn vm_rss_parses_and_rejects() {
        let s = "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t   2048 kB\nThreads: 3\n";
        assert_eq!(parse_vm_rss_mib(s), Some(2.0));
        assert_eq!(parse_vm_rss_mib("Name: x\n"), None);
        assert_eq!(parse_vm_rss_mib("VmRSS: lots kB\n"), None);
    }

    #[test]
    fn usage_is_positive_and_monotonic() {
        let a = usage().expect("getrusage");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = usage().expect("getrusage");
        assert!(b.cpu_s >= a.cpu_s);
        assert!(b.max_rss_mib > 0.0);
    }

    #[test]
    fn overhead_arithmetic() {
        assert_eq!(overhead_per_step_ms(100.0, 60.0, 20.0, 4), Some(5.0));
        assert_eq!(overhead_per_step_ms(10.0, 9.0, 3.0, 2), Some(-1.0));
        assert_eq!(overhead_per_step_ms(10.0, 0.0, 0.0, 0), None);
    }

    fn tool_part(state: ToolState) -> Part {
        Part::new(
            &"ses_1".into(),
            &"msg_1".into(),
            PartKind::Tool {
                call_id: "c".into(),
                tool: "read".into(),
                state,
            },
        )
    }

    #[test]
    fn tool_time_sums_final_parts_and_reports_errors() {
        let t = |s, e| ToolTime {
            start: s,
            end: Some(e),
            compacted: None,
        };
        let done = ToolState::Completed {
            input: json!({}),
            output: "ok".into(),
            title: "t".into(),
            metadata: json!({}),
            time: t(100, 107),
        };
        let failed = ToolState::Error {
            input: json!({}),
            error: "boom".into(),
            metadata: None,
            time: t(200, 203),
        };
        let user = Message::User(UserMessage {
            id: "msg_1".into(),
            ..UserMessage::new(&"ses_1".into(), "build", ModelRef::parse("p/m").unwrap())
        });
        let history = vec![MessageWithParts {
            info: user,
            parts: vec![tool_part(done.clone())],
        }];
        assert_eq!(tool_ms(&history), (7, None));
        let history = vec![MessageWithParts {
            info: history[0].info.clone(),
            parts: vec![tool_part(done), tool_part(failed)],
        }];
        assert_eq!(tool_ms(&history), (10, Some("tool read: boom".into())));
        assert!(!compacted(&history), "tool parts are no compaction");
        let mut with_compaction = history.clone();
        with_compaction[0].parts.push(Part::new(
            &"ses_1".into(),
            &"msg_1".into(),
            PartKind::Compaction {
                auto: true,
                overflow: false,
                tail_start_id: None,
            },
        ));
        assert!(compacted(&with_compaction));
    }

    #[test]
    fn provider_time_grouped_by_session_header() {
        let rec = |sid: Option<&str>, start: u64, end: Option<u64>| -> RecordedRequest {
            serde_json::from_value(json!({
                "seq": 0, "dialect": "openai", "conversation": 0, "step": 0, "attempt": 1,
                "session_key": sid.unwrap_or("x"), "stream": true, "start_ms": start, "end_ms": end,
                "start_us": start * 1000, "end_us": end.map(|e| e * 1000),
                "method": "POST", "path": "/v1/chat/completions",
                "headers": {"authorization": null, "x_session_affinity": sid, "user_agent": null,
                            "anthropic_version": null, "x_api_key_present": false},
                "body": {}, "status": 200, "fault": null
            }))
            .expect("record")
        };
        let reqs = vec![
            rec(Some("a"), 10, Some(15)),
            rec(Some("a"), 20, Some(22)),
            rec(Some("b"), 5, Some(9)),
            rec(Some("b"), 30, None),
            rec(None, 1, Some(100)),
        ];
        let m = provider_us_by_session(&reqs);
        assert_eq!(m.get("a"), Some(&7000));
        assert_eq!(m.get("b"), Some(&4000));
        assert_eq!(m.len(), 2);
        let us = |sid: &str, start: u64, end: u64| {
            let mut r = rec(Some(sid), start / 1000, Some(end / 1000));
            r.start_us = start;
            r.end_us = Some(end);
            r
        };
        let m =
            provider_us_by_session(&[us("a", 1_000_100, 1_000_350), us("a", 2_000_000, 2_000_005)]);
        assert_eq!(m.get("a"), Some(&255));
    }
}
