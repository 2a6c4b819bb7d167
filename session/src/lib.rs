//! troupe-session: ids, the Session/Message/Part model, bus events, the store with its SQLite
//! and PostgreSQL ([`pg`]) backends, session leases across processes ([`lease`]), a session's
//! todo list ([`todo`]), `troupe db vacuum` ([`vacuum`]), and pure policies on history: cost,
//! compaction (overflow, prune, filter-compacted, summarizer input, tail), a session's
//! file-change summary, its title and its timeline.

pub mod compaction;
pub mod cost;
pub mod event;
pub mod file_changes;
pub mod id;
pub mod lease;
pub mod pg;
pub mod store;
#[cfg(test)]
mod store_suite;
#[cfg(test)]
mod test_support;
pub mod timeline;
pub mod title;
pub mod todo;
pub mod types;
pub mod vacuum;

pub use event::{Bus, Event, PartRef};
pub use lease::{LeaseClaim, LeaseHolder, LeaseView, TakeOutcome};
pub use store::{Reader, Store, StoreError, Write};
pub use todo::Todo;
pub use types::*;

/// Format ms since epoch as an ISO-8601 UTC timestamp (`2026-11-30T02:42:40.123Z`).
pub fn iso_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_time_known_values() {
        assert_eq!(super::iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::iso_time(1_796_006_560_123),
            "2026-11-30T02:42:40.123Z"
        );
    }
}
