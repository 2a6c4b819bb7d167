//! The `mcp` block: MCP servers by name, in OpenCode's shape (`config/config.ts`
//! `McpLocal` / `McpRemote`, v1.15):
//!
//! ```jsonc
//! "mcp": {
//!   "files": {"type": "local", "command": ["npx", "-y", "server"], "environment": {"K": "v"},
//!             "enabled": true, "timeout": 5000},
//!   "docs":  {"type": "remote", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}
//! }
//! ```
//!
//! A bad entry is a config error naming the entry (`… at mcp.files`, via the loader's
//! `serde_path_to_error`; the entry is internally tagged, so the message names the field),
//! e.g. an empty `command` or a `type` that is neither `local` nor `remote`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Default timeout of one MCP request (connect handshake, `tools/list`, a tool call),
/// milliseconds. OpenCode's default for `timeout` is 5000 ms for listing tools; troupe uses
/// the same number for the handshake and listing. Tool calls have no timeout of their own
/// unless `timeout` is set: they are bounded by the runtime's tool timeout.
pub const DEFAULT_MCP_TIMEOUT_MS: u64 = 5_000;

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum McpServerConfig {
    /// A process speaking MCP over its stdin/stdout.
    Local(McpLocalConfig),
    /// A server reached over streamable HTTP.
    Remote(McpRemoteConfig),
}

/// `{"type": "local", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpLocalConfig {
    /// Program and arguments; at least the program.
    #[serde(deserialize_with = "non_empty_command")]
    pub command: Vec<String>,
    /// Extra environment variables for the process (added to troupe's own environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// `false` keeps the server configured but not started. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Request timeout, milliseconds (see [`DEFAULT_MCP_TIMEOUT_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `{"type": "remote", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpRemoteConfig {
    /// Endpoint URL (`http://` or `https://`).
    #[serde(deserialize_with = "http_url")]
    pub url: String,
    /// Extra request headers (e.g. `Authorization`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `false` keeps the server configured but not connected. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Request timeout, milliseconds (see [`DEFAULT_MCP_TIMEOUT_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// OpenCode's OAuth settings. Only `false` (no OAuth) is supported: troupe does not run
    /// OAuth flows; send a token in `headers` instead.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "no_oauth"
    )]
    pub oauth: Option<bool>,
}

impl McpServerConfig {
    /// Whether the server should be started (`enabled`, default true).
    pub fn enabled(&self) -> bool {
        match self {
            McpServerConfig::Local(l) => l.enabled,
            McpServerConfig::Remote(r) => r.enabled,
        }
        .unwrap_or(true)
    }

    /// The request timeout ([`DEFAULT_MCP_TIMEOUT_MS`] unless set).
    pub fn timeout(&self) -> std::time::Duration {
        let ms = match self {
            McpServerConfig::Local(l) => l.timeout,
            McpServerConfig::Remote(r) => r.timeout,
        };
        std::time::Duration::from_millis(ms.unwrap_or(DEFAULT_MCP_TIMEOUT_MS))
    }

    /// The configured call timeout, if any (`timeout` set explicitly).
    pub fn call_timeout(&self) -> Option<std::time::Duration> {
        match self {
            McpServerConfig::Local(l) => l.timeout,
            McpServerConfig::Remote(r) => r.timeout,
        }
        .map(std::time::Duration::from_millis)
    }

    /// `local` or `remote`.
    pub fn kind(&self) -> &'static str {
        match self {
            McpServerConfig::Local(_) => "local",
            McpServerConfig::Remote(_) => "remote",
        }
    }
}

fn non_empty_command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if v.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(serde::de::Error::custom(
            "command must be a non-empty array: the program, then its arguments",
        ));
    }
    Ok(v)
}

fn http_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    let lower = v.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) || v.len() < 8 {
        return Err(serde::de::Error::custom(format!(
            "url must start with http:// or https://, got {v:?}"
        )));
    }
    Ok(v)
}

fn no_oauth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    match v {
        serde_json::Value::Bool(false) => Ok(Some(false)),
        _ => Err(serde::de::Error::custom(
            "OAuth is not supported: set \"oauth\": false and pass a token in \"headers\"",
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn err(text: &str) -> String {
        Config::from_jsonc("troupe.json", text)
            .expect_err("must fail")
            .to_string()
    }

    #[test]
    fn both_shapes_parse() {
        let c = Config::from_jsonc(
            "troupe.json",
            r#"{"mcp": {
                "a": {"type": "local", "command": ["srv", "--x"], "environment": {"K": "v"}, "timeout": 900},
                "b": {"type": "remote", "url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}, "enabled": false}
            }}"#,
        )
        .expect("parses");
        let a = &c.mcp["a"];
        assert!(a.enabled());
        assert_eq!(a.kind(), "local");
        assert_eq!(a.timeout(), std::time::Duration::from_millis(900));
        let b = &c.mcp["b"];
        assert!(!b.enabled());
        assert_eq!(b.timeout().as_millis(), 5000);
        assert!(c.extra.get("mcp").is_none());
    }

    #[test]
    fn bad_entries_name_the_key_path() {
        let e = err(r#"{"mcp": {"a": {"type": "local", "command": []}}}"#);
        // Internally tagged entries: the path names the entry, the message the field.
        assert!(
            e.contains("at mcp.a") && e.contains("command must be a non-empty"),
            "{e}"
        );
        let e = err(r#"{"mcp": {"a": {"type": "locl", "command": ["x"]}}}"#);
        assert!(e.contains("mcp.a") && e.contains("locl"), "{e}");
        let e = err(r#"{"mcp": {"a": {"type": "remote", "url": "ftp://x"}}}"#);
        assert!(
            e.contains("at mcp.a") && e.contains("url must start with http://"),
            "{e}"
        );
        let e = err(r#"{"mcp": {"a": {"command": ["x"]}}}"#);
        assert!(e.contains("mcp.a") && e.contains("type"), "{e}");
        let e = err(r#"{"mcp": {"a": {"type": "remote", "url": "http://h/x", "oauth": {}}}}"#);
        assert!(e.contains("mcp.a") && e.contains("OAuth"), "{e}");
    }

    #[test]
    fn a_misspelt_key_is_an_unknown_key_error() {
        // The loader's key check (`keys.rs`) says "did you mean"; the entry's own decoding
        // refuses the key too, naming the entry and the keys it takes.
        let e = err(r#"{"mcp": {"a": {"type": "local", "comand": ["x"]}}}"#);
        assert!(
            e.contains("unknown field `comand`")
                && e.contains("`command`")
                && e.contains("at mcp.a"),
            "{e}"
        );
    }
}
