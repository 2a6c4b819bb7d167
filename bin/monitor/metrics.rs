//! The counters of `GET /metrics`: Prometheus text parsed into series and summed per name.

use super::*;

/// Parses Prometheus text exposition into `(series, value)` pairs in input order, where
/// `series` is the metric name with its label set as written (`troupe_x{kind="a"}`). Comment
/// and blank lines are skipped; lines whose value does not parse are ignored.
pub fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // The series ends at the closing brace if there are labels, else at the first space.
        let split = match (line.find('{'), line.rfind('}')) {
            (Some(o), Some(c)) if o < c => c + 1,
            _ => match line.find(char::is_whitespace) {
                Some(i) => i,
                None => continue,
            },
        };
        let (series, rest) = line.split_at(split);
        // `value [timestamp]`
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        let v = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => match other.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        out.push((series.trim().to_string(), v));
    }
    out
}

/// Counters per metric name (labels summed away), `troupe_` series only, skipping histogram
/// buckets; sorted by name.
pub(super) fn metric_totals(series: &[(String, f64)]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (s, v) in series {
        let name = s.split('{').next().unwrap_or(s);
        if !name.starts_with("troupe_") || name.ends_with("_bucket") || !v.is_finite() {
            continue;
        }
        *m.entry(name.to_string()).or_insert(0.0) += v;
    }
    m
}

pub(super) fn fmt_metric(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.4}")
    }
}
