//! Sortable, prefixed identifiers (`ses_…`, `msg_…`, `prt_…`, `per_…`, `evt_…`).
//!
//! Layout (after OpenCode `id/id.ts`): `prefix + "_" + 12 hex + 14 base62`. The hex part is
//! 6 bytes of `(unix_ms * 0x1000 + counter)`, the counter resetting each millisecond, so ids
//! made in one process sort by creation time as plain strings; the random tail keeps ids
//! from different processes unique. "The assistant answered the newest user message" is
//! therefore the string comparison `last_user.id < last_assistant.id`.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::types::{MessageId, PartId, SessionId};

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// What an id names; its prefix (`ses`, `msg`, `prt`, `per`, `evt`) starts the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    /// A session: `ses_…`.
    Session,
    /// A message: `msg_…`.
    Message,
    /// A part of a message: `prt_…`.
    Part,
    /// A permission request: `per_…`.
    Permission,
    /// Bus/store event.
    Event,
    /// A question the `question` tool asks the user: `que_…`.
    Question,
}

impl Prefix {
    fn as_str(self) -> &'static str {
        match self {
            Prefix::Session => "ses",
            Prefix::Message => "msg",
            Prefix::Part => "prt",
            Prefix::Permission => "per",
            Prefix::Event => "evt",
            Prefix::Question => "que",
        }
    }
}

static CLOCK: Mutex<(u64, u64)> = Mutex::new((0, 0));

/// Make a new ascending id with the given prefix.
pub fn ascending(prefix: Prefix) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let value = {
        let mut guard = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (last_ms, counter) = *guard;
        // Never go backwards, even if the wall clock does.
        let (ms, c) = if now > last_ms {
            (now, 0)
        } else {
            (last_ms, counter + 1)
        };
        // Counter overflow (>4095 ids in one ms): borrow the next millisecond.
        let (ms, c) = if c >= 0x1000 { (ms + 1, 0) } else { (ms, c) };
        *guard = (ms, c);
        ms.wrapping_mul(0x1000).wrapping_add(c)
    };
    let bytes = value.to_be_bytes();
    let mut out = String::with_capacity(4 + 26);
    out.push_str(prefix.as_str());
    out.push('_');
    push_hex(&mut out, &bytes[2..8]);
    let mut rng = rand::rng();
    for _ in 0..14 {
        out.push(BASE62[rng.random_range(0..BASE62.len())] as char);
    }
    out
}

/// Append two lowercase hex digits per byte of `bytes` to `out`, written directly (a
/// `format!` per byte allocated six strings per id; ids are made for every part of every
/// step).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

/// New session id (`ses_…`, see [`SessionId`]).
pub fn session() -> SessionId {
    ascending(Prefix::Session).into()
}

/// New message id (`msg_…`, see [`MessageId`]).
pub fn message() -> MessageId {
    ascending(Prefix::Message).into()
}

/// New part id (`prt_…`, see [`PartId`]).
pub fn part() -> PartId {
    ascending(Prefix::Part).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_creation() {
        let ids: Vec<MessageId> = (0..5000).map(|_| message()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(ids[0].starts_with("msg_"));
        assert_eq!(ids[0].len(), 4 + 26);
    }

    #[test]
    fn hex_digits_are_what_format_writes_for_every_byte() {
        for b in 0..=u8::MAX {
            let mut out = String::new();
            push_hex(&mut out, &[b]);
            assert_eq!(out, format!("{b:02x}"));
        }
        let mut out = String::new();
        push_hex(&mut out, &[0x00, 0x0f, 0xa0, 0xff]);
        assert_eq!(out, "000fa0ff");
        let id = ascending(Prefix::Part);
        assert!(
            id[4..16]
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
            "{id}"
        );
        assert!(id[16..].bytes().all(|c| BASE62.contains(&c)), "{id}");
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<PartId> = (0..10000).map(|_| part()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 10000);
    }
}
