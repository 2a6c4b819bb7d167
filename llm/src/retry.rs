//! The retry delay policy (pure), after OpenCode `session/retry.ts` `delay()`
//! (opencode-engine.md §4). Which errors are retried is [`crate::LlmError::is_retryable`]; the
//! single retry loop lives in the caller, never in this crate.

use std::time::{Duration, SystemTime};

/// First backoff delay, ms (OpenCode `RETRY_INITIAL_DELAY`).
pub const RETRY_INITIAL_DELAY_MS: u64 = 2_000;
/// Backoff factor per attempt (OpenCode `RETRY_BACKOFF_FACTOR`).
pub const RETRY_BACKOFF_FACTOR: u64 = 2;
/// Cap of the computed backoff, ms (OpenCode `RETRY_MAX_DELAY_NO_HEADERS`).
pub const RETRY_MAX_BACKOFF_MS: u64 = 30_000;
/// Cap of any server hint, ms: 2^31 − 1 (OpenCode `RETRY_MAX_DELAY`, the `setTimeout` limit).
pub const RETRY_MAX_DELAY_MS: u64 = 2_147_483_647;

/// Delay before retry number `attempt` (1-based; 0 is treated as 1).
///
/// Order (opencode-engine.md §4):
/// 1. `retry-after-ms`: a float number of milliseconds, capped at [`RETRY_MAX_DELAY_MS`];
/// 2. `retry-after`: float seconds (rounded up to whole ms), else an HTTP-date strictly in the
///    future relative to `now` (rounded up to whole ms); capped at [`RETRY_MAX_DELAY_MS`];
/// 3. otherwise `2 s × 2^(attempt−1)`, capped at [`RETRY_MAX_BACKOFF_MS`] (30 s).
///
/// Header names are matched case-insensitively. Negative, non-finite, unparsable and past
/// values are ignored (fall through). Deliberate difference from OpenCode: when hint headers are
/// present but none is usable, OpenCode's backoff is NOT capped at 30 s; ours always is —
/// simpler, and a broken hint should not make us wait longer than no hint at all.
pub fn retry_delay(attempt: u32, retry_headers: &[(String, String)], now: SystemTime) -> Duration {
    let header = |name: &str| {
        retry_headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Duration::from_millis(cap_ms(ms.ceil()));
    }
    if let Some(v) = header("retry-after") {
        if let Some(secs) = parse_non_negative(v) {
            return Duration::from_millis(cap_ms((secs * 1000.0).ceil()));
        }
        if let Ok(when) = httpdate::parse_http_date(v)
            && let Ok(diff) = when.duration_since(now)
            && !diff.is_zero()
        {
            let ms = diff.as_nanos().div_ceil(1_000_000);
            return Duration::from_millis(
                u64::try_from(ms)
                    .unwrap_or(u64::MAX)
                    .min(RETRY_MAX_DELAY_MS),
            );
        }
    }
    let exp = attempt.max(1) - 1;
    let factor = RETRY_BACKOFF_FACTOR.checked_pow(exp).unwrap_or(u64::MAX);
    Duration::from_millis(
        RETRY_INITIAL_DELAY_MS
            .saturating_mul(factor)
            .min(RETRY_MAX_BACKOFF_MS),
    )
}

fn parse_non_negative(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|f| f.is_finite() && *f >= 0.0)
}

fn cap_ms(ms: f64) -> u64 {
    if ms >= RETRY_MAX_DELAY_MS as f64 {
        RETRY_MAX_DELAY_MS
    } else {
        ms as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn table() {
        // now = 2026-01-01T00:00:00Z
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        type Case = (u32, Vec<(String, String)>, u64);
        let cases: Vec<Case> = vec![
            // no headers: 2000, 4000, 8000, 16000, 30000 (cap), 30000
            (1, vec![], 2_000),
            (2, vec![], 4_000),
            (3, vec![], 8_000),
            (4, vec![], 16_000),
            (5, vec![], 30_000),
            (6, vec![], 30_000),
            (0, vec![], 2_000),
            (u32::MAX, vec![], 30_000),
            // retry-after-ms wins, float ms rounded up
            (
                1,
                h(&[("retry-after-ms", "1500.2"), ("retry-after", "9")]),
                1_501,
            ),
            (3, h(&[("Retry-After-Ms", "250")]), 250),
            // retry-after seconds, float, ceil to ms; hints above 30 s are honoured
            (1, h(&[("retry-after", "1.0005")]), 1_001),
            (1, h(&[("retry-after", "600")]), 600_000),
            // capped at 2^31-1 ms
            (1, h(&[("retry-after", "99999999")]), 2_147_483_647),
            (1, h(&[("retry-after-ms", "1e12")]), 2_147_483_647),
            // HTTP-date 90 s in the future
            (
                1,
                h(&[("retry-after", "Thu, 01 Jan 2026 00:01:30 GMT")]),
                90_000,
            ),
            // past date, negative, garbage: fall through to backoff, still capped at 30 s
            (
                2,
                h(&[("retry-after", "Wed, 31 Dec 2025 23:00:00 GMT")]),
                4_000,
            ),
            (2, h(&[("retry-after-ms", "-5")]), 4_000),
            (
                7,
                h(&[("retry-after", "soon"), ("retry-after-ms", "NaN")]),
                30_000,
            ),
            (1, h(&[("retry-after", "inf")]), 2_000),
            // unusable ms header falls through to a usable retry-after
            (
                1,
                h(&[("retry-after-ms", "x"), ("retry-after", "3")]),
                3_000,
            ),
        ];
        for (attempt, headers, want) in cases {
            assert_eq!(
                retry_delay(attempt, &headers, now),
                Duration::from_millis(want),
                "attempt {attempt} headers {headers:?}"
            );
        }
    }
}
