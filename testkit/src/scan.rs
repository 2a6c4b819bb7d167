//! The routing facts of a completion request ([`RequestInfo`]) read straight from the raw
//! body bytes, without building a `serde_json::Value`.
//!
//! [`wire::analyze`] needs the body as a `Value`: every message, every string, every map of a
//! request that late in a long session carries hundreds of KB of history. The mock only
//! needs the message roles (the step index), the first user message's text and the system
//! text (the conversation), `model`, `stream` and `stream_options.include_usage`. [`scan`]
//! walks the same bytes with the same `serde_json` parser calls a `Value` parse makes
//! (`deserialize_any` everywhere, so the same syntax, UTF-8, escape, number-range and depth
//! checks apply), but keeps only those facts: nothing else is allocated, and only the contents
//! it needs are copied.
//!
//! It answers [`Scan::Unsure`] where it cannot be exact — invalid JSON (the caller's `Value`
//! parse words the error), or a message whose `role` key comes again after a `content` the
//! scan skipped — and the caller then takes the `Value` way. Elsewhere its answer equals
//! `analyze` of the parsed body, duplicate keys included (the last one wins, as in a `Value`
//! map); debug builds of the mock check that on every request whose body is recorded.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::wire::{Dialect, RequestInfo};

/// What [`scan`] made of a body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scan {
    /// The facts; equal to `wire::analyze` of the parsed body.
    Info(RequestInfo),
    /// Valid JSON that `wire::analyze` rejects, with its message.
    Rejected(String),
    /// Not decided here (invalid JSON, or a repeated `role` after a skipped `content`); parse
    /// a `Value` and use `wire::analyze`.
    Unsure,
}

/// Reads the routing facts of a `dialect` request from its raw `body` (see the module docs).
pub(crate) fn scan(body: &[u8], dialect: Dialect) -> Scan {
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = match (TopSeed { dialect }).deserialize(&mut de) {
        Ok(top) => top,
        Err(_) => return Scan::Unsure,
    };
    if de.end().is_err() {
        return Scan::Unsure;
    }
    let Some(top) = top else {
        return Scan::Rejected("request body must be a JSON object".into());
    };
    let Some(Some(messages)) = top.messages else {
        return Scan::Rejected("`messages` must be an array".into());
    };
    if messages.unsure {
        return Scan::Unsure;
    }
    let step_index = messages.assistants - usize::from(messages.last_is_assistant);
    let system_text = match dialect {
        Dialect::OpenAi => messages.system.join("\n"),
        Dialect::Anthropic => top.system.unwrap_or_default(),
    };
    Scan::Info(RequestInfo {
        model: top.model.unwrap_or_else(|| "mock-model".to_owned()),
        stream: top.stream.unwrap_or(false),
        include_usage: top.include_usage.unwrap_or(false),
        step_index,
        first_user_text: messages.first_user.unwrap_or_default(),
        system_text,
    })
}

/// Generates a visitor's `expecting` (any JSON value) and its methods for scalars (booleans,
/// numbers, `null`): each answers `$out`.
macro_rules! other_values {
    ($out:expr) => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}

/// The rest of a visitor that reads objects only: its `expecting`, and `None` for a scalar,
/// a string or an array (skipped). `$de` is the impl's deserializer lifetime.
macro_rules! objects_only {
    ($de:lifetime) => {
        other_values!(None);
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<$de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            skip_seq(seq).map(|()| None)
        }
    };
}

/// The rest of a visitor that reads arrays only: its `expecting`, and `None` for a scalar, a
/// string or an object (skipped). `$de` is the impl's deserializer lifetime.
macro_rules! arrays_only {
    ($de:lifetime) => {
        other_values!(None);
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<$de>>(self, map: A) -> Result<Self::Value, A::Error> {
            skip_map(map).map(|()| None)
        }
    };
}

/// `DeserializeSeed` for a visitor that is its own seed: it reads the value with
/// `deserialize_any`, so every check of a `Value` parse applies. `$seed => $value` pairs.
macro_rules! own_seed {
    ($($seed:ty => $value:ty),* $(,)?) => {$(
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = $value;
            fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
    )*};
}

own_seed!(
    ContentText => String,
    TopSeed => Option<Top>,
    MessagesSeed => Option<Messages>,
    MessageSeed => Message,
    RoleValue => Role,
);

/// Skips a sequence whose contents the caller does not need.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element_seed(SKIP)?.is_some() {}
    Ok(())
}

/// Skips a map whose contents the caller does not need.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_key_seed(SKIP)?.is_some() {
        map.next_value_seed(SKIP)?;
    }
    Ok(())
}

/// The scalar types [`Maybe`] reads: each says what it makes of a JSON string and a boolean
/// (`None` where the value is of the other kind).
trait Scalar: Sized {
    fn from_str(s: &str) -> Option<Self>;
    fn from_bool(b: bool) -> Option<Self>;
}

/// `Value::as_str`: an owned copy of a string.
impl Scalar for String {
    fn from_str(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
}

/// `Value::as_bool`.
impl Scalar for bool {
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

/// A value of scalar type `T`, anything else as `None` (`Value::as_str` / `Value::as_bool`);
/// arrays and objects are skipped (checked, not kept).
struct Maybe<T>(PhantomData<T>);

impl<T> Maybe<T> {
    const SEED: Self = Maybe(PhantomData);
}

impl<T> Clone for Maybe<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Maybe<T> {}

impl<'de, T: Scalar> DeserializeSeed<'de> for Maybe<T> {
    type Value = Option<T>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Scalar> Visitor<'de> for Maybe<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(T::from_bool(b))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(T::from_str(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        skip_map(map).map(|()| None)
    }
}

/// No value at all: what [`SKIP`] keeps of whatever it reads.
enum Nothing {}

impl Scalar for Nothing {
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
}

/// Any JSON value, checked the way a `Value` parse checks it (`deserialize_any` all the way
/// down) and then dropped.
const SKIP: Maybe<Nothing> = Maybe::SEED;

/// The value of one `key` of an object read with `seed` (the last such key wins): `None` for
/// a value that is not an object, or has no such key. `stream_options.include_usage` (a
/// boolean) and a content part's `text` (a string) are read with it.
struct ValueAt<S> {
    key: KeyName,
    seed: S,
}

impl<'de, S, T> DeserializeSeed<'de> for ValueAt<S>
where
    S: DeserializeSeed<'de, Value = Option<T>> + Copy,
{
    type Value = Option<T>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S, T> Visitor<'de> for ValueAt<S>
where
    S: DeserializeSeed<'de, Value = Option<T>> + Copy,
{
    type Value = Option<T>;
    objects_only!('de);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = None;
        while let Some(key) = map.next_key::<Key>()? {
            if key.0 == self.key {
                out = map.next_value_seed(self.seed)?;
            } else {
                map.next_value_seed(SKIP)?;
            }
        }
        Ok(out)
    }
}

/// The object keys the scan looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyName {
    Messages,
    System,
    Model,
    Stream,
    StreamOptions,
    IncludeUsage,
    Role,
    Content,
    Text,
    Other,
}

/// An object key, classified without being kept.
struct Key(KeyName);

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, s: &str) -> Result<Key, E> {
        Ok(Key(match s {
            "messages" => KeyName::Messages,
            "system" => KeyName::System,
            "model" => KeyName::Model,
            "stream" => KeyName::Stream,
            "stream_options" => KeyName::StreamOptions,
            "include_usage" => KeyName::IncludeUsage,
            "role" => KeyName::Role,
            "content" => KeyName::Content,
            "text" => KeyName::Text,
            _ => KeyName::Other,
        }))
    }
}

/// The text of a message `content`, as `wire::content_text` gives it: a string; the string
/// `text` of each object part of an array, joined by `\n`; empty for anything else.
struct ContentText;

impl<'de> Visitor<'de> for ContentText {
    type Value = String;
    other_values!(String::new());
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(s.to_owned())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut texts: Vec<String> = Vec::new();
        while let Some(text) = seq.next_element_seed(ValueAt {
            key: KeyName::Text,
            seed: Maybe::<String>::SEED,
        })? {
            texts.extend(text);
        }
        Ok(texts.join("\n"))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        skip_map(map).map(|()| String::new())
    }
}

/// The top-level object's facts; `None` for a body that is not an object.
struct TopSeed {
    dialect: Dialect,
}

#[derive(Default)]
struct Top {
    /// `None`: no `messages` key; `Some(None)`: not an array.
    messages: Option<Option<Messages>>,
    system: Option<String>,
    model: Option<String>,
    stream: Option<bool>,
    include_usage: Option<bool>,
}

impl<'de> Visitor<'de> for TopSeed {
    type Value = Option<Top>;
    objects_only!('de);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Every key may come again; the last value wins, as in a `Value` map.
        let mut top = Top::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key.0 {
                KeyName::Messages => {
                    top.messages = Some(map.next_value_seed(MessagesSeed {
                        dialect: self.dialect,
                    })?);
                }
                KeyName::System if self.dialect == Dialect::Anthropic => {
                    top.system = Some(map.next_value_seed(ContentText)?);
                }
                KeyName::Model => top.model = map.next_value_seed(Maybe::<String>::SEED)?,
                KeyName::Stream => top.stream = map.next_value_seed(Maybe::<bool>::SEED)?,
                KeyName::StreamOptions => {
                    top.include_usage = map.next_value_seed(ValueAt {
                        key: KeyName::IncludeUsage,
                        seed: Maybe::<bool>::SEED,
                    })?;
                }
                _ => {
                    map.next_value_seed(SKIP)?;
                }
            }
        }
        Ok(Some(top))
    }
}

/// What the messages array decides.
#[derive(Default)]
struct Messages {
    /// Messages whose role is `"assistant"`.
    assistants: usize,
    /// Whether the last message's role is `"assistant"` (a prefill).
    last_is_assistant: bool,
    /// The first `"user"` message's content text (`Some("")` when it has no content).
    first_user: Option<String>,
    /// Content texts of the `"system"` / `"developer"` messages that have a `content` key
    /// (OpenAI).
    system: Vec<String>,
    /// A message the scan could not read exactly.
    unsure: bool,
}

struct MessagesSeed {
    dialect: Dialect,
}

impl<'de> Visitor<'de> for MessagesSeed {
    type Value = Option<Messages>;
    arrays_only!('de);
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Messages::default();
        loop {
            let seed = MessageSeed {
                dialect: self.dialect,
                want_user: out.first_user.is_none(),
            };
            let Some(m) = seq.next_element_seed(seed)? else {
                break;
            };
            out.last_is_assistant = m.role == Role::Assistant;
            match m.role {
                Role::Assistant => out.assistants += 1,
                Role::User if out.first_user.is_none() => match m.content {
                    Content::Missing => out.first_user = Some(String::new()),
                    Content::Text(t) => out.first_user = Some(t),
                    Content::Skipped => out.unsure = true,
                },
                Role::System if self.dialect == Dialect::OpenAi => match m.content {
                    Content::Missing => {}
                    Content::Text(t) => out.system.push(t),
                    Content::Skipped => out.unsure = true,
                },
                _ => {}
            }
        }
        Ok(Some(out))
    }
}

/// A message's role, as far as the routing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Assistant,
    User,
    /// `"system"` or `"developer"`.
    System,
    /// Any other string, a non-string, no `role` key, or a message that is not an object.
    Other,
}

impl Role {
    fn of(s: &str) -> Role {
        match s {
            "assistant" => Role::Assistant,
            "user" => Role::User,
            "system" | "developer" => Role::System,
            _ => Role::Other,
        }
    }
}

/// A message's `content` as the scan kept it.
enum Content {
    /// No `content` key.
    Missing,
    /// Read: it may be needed.
    Text(String),
    /// Passed over: the role known then did not need it.
    Skipped,
}

struct Message {
    role: Role,
    content: Content,
}

struct MessageSeed {
    dialect: Dialect,
    /// No `"user"` message came before this one (its content would be the first user text).
    want_user: bool,
}

impl MessageSeed {
    /// Whether a message of `role` needs its content text.
    fn needs(&self, role: Role) -> bool {
        match role {
            Role::User => self.want_user,
            Role::System => self.dialect == Dialect::OpenAi,
            Role::Assistant | Role::Other => false,
        }
    }
}

/// The role of a `role` value: a string's, else [`Role::Other`].
struct RoleValue;

impl<'de> Visitor<'de> for RoleValue {
    type Value = Role;
    other_values!(Role::Other);
    fn visit_str<E>(self, s: &str) -> Result<Role, E> {
        Ok(Role::of(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Role, A::Error> {
        skip_seq(seq).map(|()| Role::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Role, A::Error> {
        skip_map(map).map(|()| Role::Other)
    }
}

impl<'de> Visitor<'de> for MessageSeed {
    type Value = Message;
    other_values!(Message {
        role: Role::Other,
        content: Content::Missing,
    });
    fn visit_str<E>(self, _: &str) -> Result<Message, E> {
        Ok(Message {
            role: Role::Other,
            content: Content::Missing,
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Message, A::Error> {
        skip_seq(seq).map(|()| Message {
            role: Role::Other,
            content: Content::Missing,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        // `None` until a `role` key is read.
        let mut role: Option<Role> = None;
        let mut content = Content::Missing;
        while let Some(key) = map.next_key::<Key>()? {
            match key.0 {
                KeyName::Role => role = Some(map.next_value_seed(RoleValue)?),
                KeyName::Content => {
                    // Read it unless the role read so far does not need it; a later `role`
                    // key that needs it finds `Skipped` and the scan gives up (`Unsure`).
                    content = match role {
                        Some(r) if !self.needs(r) => {
                            map.next_value_seed(SKIP)?;
                            Content::Skipped
                        }
                        _ => Content::Text(map.next_value_seed(ContentText)?),
                    };
                }
                _ => {
                    map.next_value_seed(SKIP)?;
                }
            }
        }
        Ok(Message {
            role: role.unwrap_or(Role::Other),
            content,
        })
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
