//! Typed ids: [`SessionId`], [`MessageId`], [`PartId`].
//!
//! Each is a `String` underneath, serialized as that plain string (`#[serde(transparent)]`),
//! stored as the same TEXT column and sorted the same way, so wire formats, stored rows and the
//! HTTP API are unchanged. What the types add is that a session id cannot be passed where a
//! message id is wanted: the mix-up fails to compile.
//!
//! They read like a string where that is harmless: `Deref<Target = str>` (`id.starts_with(..)`,
//! `&id` where a `&str` is taken), `Display`, `AsRef<str>`, `Borrow<str>` (a map keyed by ids is
//! looked up by `&str`), comparisons with `str`/`&str`/`String`, and `From<String>`/`From<&str>`.
//! The reverse (an id from a bare string) is always explicit (`.into()`, `::from`), since that
//! is where a mix-up would start.
//!
//! Any string is accepted as an id: ids in a request path, a CLI argument or an imported
//! session are taken as given (a missing one is a "not found", never a panic). troupe's own
//! are made by [`crate::id`], whose layout each type's doc gives.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's string, moved out.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                Self(s.clone())
            }
        }

        impl From<&$name> for $name {
            fn from(s: &$name) -> Self {
                s.clone()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(Self(s.to_string()))
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                self.0.to_sql()
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                String::column_result(value).map(Self)
            }
        }

        impl postgres::types::ToSql for $name {
            fn to_sql(
                &self,
                ty: &postgres::types::Type,
                out: &mut bytes::BytesMut,
            ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
                self.0.to_sql(ty, out)
            }

            fn accepts(ty: &postgres::types::Type) -> bool {
                <String as postgres::types::ToSql>::accepts(ty)
            }

            postgres::types::to_sql_checked!();
        }

        impl<'a> postgres::types::FromSql<'a> for $name {
            fn from_sql(
                ty: &postgres::types::Type,
                raw: &'a [u8],
            ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
                String::from_sql(ty, raw).map(Self)
            }

            fn accepts(ty: &postgres::types::Type) -> bool {
                <String as postgres::types::FromSql>::accepts(ty)
            }
        }
    };
}

string_id! {
    /// A session's id: `ses_` + 12 hex digits + 14 base62 characters (30 in all), made by
    /// [`crate::id::session`]. The hex digits are the creation time (ms × 4096 + a per-ms
    /// counter), so ids made by one process sort by creation as plain strings; the random
    /// tail keeps ids from different processes apart. Sessions are listed newest-updated first
    /// (`time.updated`, then id); a session's children by id.
    SessionId
}

string_id! {
    /// A message's id: `msg_` + 12 hex digits + 14 base62 characters, made by
    /// [`crate::id::message`]. Sortable by creation: a session's messages are ordered by id,
    /// and "the assistant answered the newest user message" is `last_user.id <
    /// last_assistant.id`.
    MessageId
}

string_id! {
    /// A part's id: `prt_` + 12 hex digits + 14 base62 characters, made by
    /// [`crate::id::part`]. Sortable by creation: a message's parts are ordered by id.
    PartId
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn an_id_is_its_plain_string_on_the_wire() {
        let id = SessionId::from("ses_0123456789abABCDEFGHIJKLMN");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"ses_0123456789abABCDEFGHIJKLMN\""
        );
        let back: SessionId = serde_json::from_str("\"ses_0123456789abABCDEFGHIJKLMN\"").unwrap();
        assert_eq!(back, id);
        let parts: Vec<PartId> = serde_json::from_str(r#"["prt_1","prt_2"]"#).unwrap();
        assert_eq!(parts, ["prt_1", "prt_2"]);
        assert_eq!(id.to_string(), "ses_0123456789abABCDEFGHIJKLMN");
    }

    #[test]
    fn ids_compare_sort_and_look_up_like_their_strings() {
        let a = MessageId::from("msg_a");
        let b = MessageId::from("msg_b".to_string());
        assert!(a < b);
        assert_eq!(a, "msg_a");
        assert_eq!("msg_a", a);
        assert_eq!(a, "msg_a".to_string());
        let map: HashMap<MessageId, u32> = [(a.clone(), 1), (b, 2)].into_iter().collect();
        assert_eq!(map.get("msg_b"), Some(&2));
        assert_eq!(map["msg_a"], 1);
        assert!(a.starts_with("msg_"));
    }

    #[test]
    fn ids_are_stored_as_text_in_sqlite() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute("CREATE TABLE t (id TEXT)", []).unwrap();
        let id = PartId::from("prt_x");
        conn.execute("INSERT INTO t VALUES (?1)", [&id]).unwrap();
        let (text, back): (String, PartId) = conn
            .query_row("SELECT id, id FROM t WHERE typeof(id) = 'text'", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((text.as_str(), back), ("prt_x", id));
    }
}
