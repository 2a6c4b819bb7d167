//! `troupe session show ID --timeline`: the session's timeline as a text Gantt chart.
//!
//! The rows are [`troupe_session::timeline::load`]'s, the same the web view draws from `GET
//! /session/{id}/timeline`; this file only lays them out: one line per bar, the kind, the
//! label indented two spaces per subagent level, the duration, and the bar scaled to the
//! terminal's width (`COLUMNS`, else 120, when stdout is not a terminal).

use anyhow::{Result, anyhow};
use troupe_session::timeline::{RowKind, RowStatus, Timeline, TimelineRow};
use troupe_session::{SessionId, Store, now_ms};

/// Width used when stdout is not a terminal and `COLUMNS` is unset or not a number.
const DEFAULT_WIDTH: usize = 120;
/// Narrowest bar area, columns (a narrower terminal wraps the lines instead).
const MIN_BAR: usize = 20;
/// Widest label column, characters (longer labels end in `…`).
const MAX_LABEL: usize = 48;

/// Prints the timeline of `session_id` (an exact id): JSON (the API's document) or the chart.
pub async fn print(store: &Store, session_id: &SessionId, json: bool) -> Result<()> {
    let sid = session_id.clone();
    let now = now_ms();
    let timeline = store
        .read(move |r| troupe_session::timeline::load(r, &sid, now))
        .await
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| anyhow!("session not found: {session_id}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&timeline)?);
    } else {
        for line in render(&timeline, terminal_width()) {
            println!("{line}");
        }
    }
    Ok(())
}

fn terminal_width() -> usize {
    if std::io::IsTerminal::is_terminal(&std::io::stdout())
        && let Ok((w, _)) = crossterm::terminal::size()
        && w > 0
    {
        return w as usize;
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// `850 ms`, `1.25 s`, `2m 03s`, `1h 02m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.2} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000)
    } else {
        format!("{}h {:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000)
    }
}

/// The bar's fill character by kind: step `░`, request `▒`, tool `█`, subagent `▓`.
fn fill(kind: RowKind) -> char {
    match kind {
        RowKind::Step => '░',
        RowKind::Request => '▒',
        RowKind::Tool => '█',
        RowKind::Subagent => '▓',
    }
}

/// The chart's lines for a terminal `width` columns wide: a header, an axis line, then one
/// line per row in the timeline's order (`kind  label  duration mark |bar|`, where the mark
/// is `✗` for an error and `…` for a row still running).
pub fn render(t: &Timeline, width: usize) -> Vec<String> {
    let span = (t.end - t.start).max(1);
    let mut out = vec![format!(
        "timeline {}  {} bar{}  {} (from {} UTC)",
        t.session_id,
        t.rows.len(),
        if t.rows.len() == 1 { "" } else { "s" },
        duration(t.end - t.start),
        troupe_session::iso_time(t.start)
            .get(11..23)
            .unwrap_or_default()
    )];
    if t.rows.is_empty() {
        out.push("  (no steps yet)".into());
        return out;
    }
    let labels: Vec<String> = t.rows.iter().map(label).collect();
    let label_w = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(12, MAX_LABEL);
    let durations: Vec<String> = t.rows.iter().map(|r| duration(r.duration_ms())).collect();
    let dur_w = durations.iter().map(|d| d.len()).max().unwrap_or(0);
    // kind (8) + 2 + label + 2 + duration + mark (2) + 1 + bar + 2 bar edges.
    let fixed = 8 + 2 + label_w + 2 + dur_w + 2 + 1 + 2;
    let bar_w = width.saturating_sub(fixed).max(MIN_BAR);
    let axis_end = duration(t.end - t.start);
    let pad = bar_w.saturating_sub(1 + axis_end.chars().count());
    out.push(format!(
        "{:<8}  {:<label_w$}  {:>dur_w$}   |0{:>pad$}{axis_end}|",
        "KIND", "LABEL", "TIME", ""
    ));
    for ((r, l), d) in t.rows.iter().zip(&labels).zip(&durations) {
        // Columns from the chart's start: the start rounded down, the end rounded up, so a
        // bar covers every column its time touches.
        let offset = |ms: i64| (ms - t.start).clamp(0, span) as u128 * bar_w as u128;
        let from = (offset(r.start) / span as u128) as usize;
        let to = offset(r.end).div_ceil(span as u128) as usize;
        let from = from.min(bar_w - 1);
        let to = to.clamp(from + 1, bar_w);
        let mut bar = String::with_capacity(bar_w * 3);
        bar.extend(std::iter::repeat_n(' ', from));
        bar.extend(std::iter::repeat_n(fill(r.kind), to - from));
        bar.extend(std::iter::repeat_n(' ', bar_w - to));
        let mark = match r.status {
            RowStatus::Error => '✗',
            RowStatus::Running => '…',
            RowStatus::Completed => ' ',
        };
        out.push(format!(
            "{:<8}  {:<label_w$}  {d:>dur_w$} {mark} |{bar}|",
            r.kind.as_str(),
            clip(l, label_w),
        ));
    }
    out
}

/// The row's label as printed: terminal-safe, indented two spaces per level, subagents
/// marked `↳`.
fn label(r: &TimelineRow) -> String {
    let text = crate::output::one_line(&r.label, MAX_LABEL * 2);
    let indent = "  ".repeat(r.depth as usize);
    match r.kind {
        RowKind::Subagent => format!(
            "{}↳ {text}",
            "  ".repeat(r.depth.saturating_sub(1) as usize)
        ),
        _ => format!("{indent}{text}"),
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        format!("{}…", s.chars().take(max - 1).collect::<String>())
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: RowKind, label: &str, start: i64, end: i64, depth: u32) -> TimelineRow {
        TimelineRow {
            kind,
            label: label.into(),
            session_id: "ses_a".into(),
            message_id: "msg_1".into(),
            part_id: Some("prt_1".into()),
            child_session_id: None,
            start,
            end,
            depth,
            lane: 0,
            status: RowStatus::Completed,
        }
    }

    fn timeline(rows: Vec<TimelineRow>) -> Timeline {
        Timeline {
            session_id: "ses_a".into(),
            start: rows.iter().map(|r| r.start).min().unwrap_or(0),
            end: rows.iter().map(|r| r.end).max().unwrap_or(0),
            now: 0,
            rows,
        }
    }

    /// The bar between the `|` edges of a row line.
    fn bar(line: &str) -> &str {
        let open = line.find('|').expect("bar start");
        &line[open + 1..line.len() - 1]
    }

    #[test]
    fn bars_scale_to_the_width_and_keep_their_order() {
        let mut failed = row(RowKind::Tool, "bash false", 500, 1000, 0);
        failed.status = RowStatus::Error;
        let t = timeline(vec![
            row(RowKind::Step, "step 1 · build", 0, 1000, 0),
            row(RowKind::Request, "mock/m", 0, 500, 0),
            failed,
            row(RowKind::Subagent, "job (@explore subagent)", 500, 750, 1),
            row(RowKind::Step, "step 1 · explore", 500, 750, 1),
        ]);
        let lines = render(&t, 100);
        assert_eq!(lines.len(), 2 + 5, "{lines:#?}");
        for l in &lines[1..] {
            assert_eq!(l.chars().count(), 100, "{l:?}");
        }
        let bars: Vec<&str> = lines[2..].iter().map(|l| bar(l)).collect();
        let w = bars[0].chars().count();
        assert!(bars[0].chars().all(|c| c == '░'), "{}", bars[0]);
        let req: Vec<char> = bars[1].chars().collect();
        assert_eq!(req.iter().filter(|&&c| c == '▒').count(), w / 2);
        assert_eq!(req[0], '▒');
        let tool: Vec<char> = bars[2].chars().collect();
        assert_eq!(tool.iter().position(|&c| c == '█'), Some(w / 2));
        assert!(lines[4].contains("500 ms ✗"), "{}", lines[4]);
        assert!(lines[5].starts_with("subagent  ↳ job"), "{}", lines[5]);
        assert!(
            lines[6].starts_with("step        step 1 · explore"),
            "{}",
            lines[6]
        );
        assert!(lines[3].starts_with("request   mock/m"), "{}", lines[3]);
    }

    #[test]
    fn short_rows_still_show_and_narrow_terminals_keep_a_minimum_bar() {
        let t = timeline(vec![
            row(RowKind::Step, "step 1", 0, 100_000, 0),
            row(RowKind::Tool, "read a", 50_000, 50_000, 0),
        ]);
        let lines = render(&t, 30);
        assert_eq!(bar(&lines[3]).chars().filter(|&c| c == '█').count(), 1);
        assert_eq!(bar(&lines[2]).chars().count(), MIN_BAR);
        assert!(lines[2].contains("1m 40s"), "{}", lines[2]);
    }

    #[test]
    fn labels_are_terminal_safe_and_clipped() {
        let t = timeline(vec![row(
            RowKind::Tool,
            &format!("bash echo \u{1b}]0;pwned\u{7}{}", "y".repeat(200)),
            0,
            10,
            0,
        )]);
        let lines = render(&t, 200);
        assert!(!lines[2].contains('\u{1b}'), "{:?}", lines[2]);
        assert!(lines[2].contains('…'));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(0), "0 ms");
        assert_eq!(duration(999), "999 ms");
        assert_eq!(duration(1250), "1.25 s");
        assert_eq!(duration(123_000), "2m 03s");
        assert_eq!(duration(3_720_000), "1h 02m");
        assert_eq!(duration(-5), "0 ms");
    }

    #[test]
    fn an_empty_timeline_says_so() {
        let lines = render(&timeline(vec![]), 80);
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains("no steps yet"));
    }
}
