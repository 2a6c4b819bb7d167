//! The `troupe.json` schema. The `provider` / `model` keys have the shape of OpenCode's
//! `opencode.json` (and model entries the shape of models.dev `api.json`), so a block copied
//! from `opencode.json` works unchanged. A key troupe does not know at the top level, in a
//! provider block, a model entry, its `limit` or `compaction` is an error naming the nearest
//! known key (see the `keys` module); OpenCode's own top-level keys are accepted and kept in
//! [`Config::extra`].

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Top-level keys that [`Config`] parses itself; every other top-level key goes to `extra`.
pub(crate) const KNOWN_TOP_LEVEL_KEYS: &[&str] = &[
    "$schema",
    "model",
    "small_model",
    "default_agent",
    "provider",
    "agent",
    "permission",
    "instructions",
    "compaction",
    "supervision",
    "tools",
    "server",
    "snapshot",
    "mcp",
    "hooks",
    "cluster",
];

/// The merged configuration (all sources; see [`crate::load`]).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// `$schema` URL (ignored).
    #[serde(rename = "$schema")]
    pub schema: Option<String>,
    /// Default model, `provider/model`.
    pub model: Option<String>,
    /// Model for small jobs (titles, summaries), `provider/model`.
    pub small_model: Option<String>,
    /// Name of the agent used when none is given.
    pub default_agent: Option<String>,
    /// Provider blocks by provider id (OpenCode `provider` shape); merged over the built-in
    /// providers and the embedded catalog at resolution time.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub provider: BTreeMap<String, ProviderConfig>,
    /// Agent definitions (OpenCode `agent` shape), raw; interpreted by troupe-agents.
    pub agent: Option<Value>,
    /// Permission rules (OpenCode `permission` shape), raw; interpreted by troupe-agents.
    pub permission: Option<Value>,
    /// Extra instruction files / globs added to the system prompt.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<String>,
    /// Compaction settings (OpenCode `compaction`).
    pub compaction: CompactionConfig,
    /// Supervision policy (restart limits of crashed actors; troupe's own block).
    pub supervision: SupervisionConfig,
    /// Legacy `tools: {name: bool}` switches, raw.
    pub tools: Option<Value>,
    /// HTTP server settings (`port`, `hostname`, …), raw.
    pub server: Option<Value>,
    /// `false` turns file snapshots off (no step snapshots, patch parts, session diff or file
    /// revert). Absent or `true`: on in git projects. Same key as OpenCode's.
    pub snapshot: Option<bool>,
    /// MCP servers by name (OpenCode `mcp` shape; see [`crate::McpServerConfig`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, crate::mcp::McpServerConfig>,
    /// Hook commands by hook point (troupe's own block; see [`crate::HooksConfig`]).
    #[serde(skip_serializing_if = "crate::HooksConfig::is_empty")]
    pub hooks: crate::HooksConfig,
    /// What a process that joined a cluster (`troupe worker`) hands to the cluster.
    #[serde(skip_serializing_if = "ClusterConfig::is_empty")]
    pub cluster: ClusterConfig,
    /// Every other top-level key, verbatim (filled by the loader; not read by `Deserialize`,
    /// written back flat by `Serialize`).
    #[serde(flatten, skip_deserializing)]
    pub extra: Map<String, Value>,
}

impl Config {
    /// Parses one JSON(C) document into a `Config` (no file merging, no substitution).
    /// Handy for tests of other crates. Errors name `label` and the position.
    pub fn from_jsonc(label: &str, text: &str) -> Result<Config, crate::ConfigError> {
        let map = crate::load::parse_document(label, text, None, &|_| None)?;
        crate::load::config_from_map(label, map)
    }
}

/// `compaction` block. Source: OpenCode engine §5.2 (`auto` default true; `prune` defaults to
/// true here as the OpenCode docs say; `reserved` = token buffer, default
/// `min(20_000, max output tokens)` applied by the overflow policy, not here).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionConfig {
    /// Compact automatically on overflow. Default true.
    pub auto: bool,
    /// Prune old tool outputs after each loop. Default true.
    pub prune: bool,
    /// Token buffer kept free below the input limit; `None` = policy default.
    pub reserved: Option<u64>,
    /// Number of recent turns kept verbatim after a compaction; `None` = policy default (2).
    pub tail_turns: Option<u32>,
    /// Token budget for the retained tail; `None` = policy default.
    pub preserve_recent_tokens: Option<u64>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            auto: true,
            prune: true,
            reserved: None,
            tail_turns: None,
            preserve_recent_tokens: None,
        }
    }
}

/// The `cluster` block: opt-ins that apply only in a process that joined a cluster (`troupe
/// worker`); elsewhere it is accepted and has no effect.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterConfig {
    /// Subagents whose `task` calls any worker of the cluster may run: agent names or
    /// wildcards (`*`, `explore`, `review-*`). A matching call publishes the child's turn to
    /// the cluster's work queue instead of running it here; the parent waits for its result
    /// and an abort of the parent reaches the child. Default: none (every subagent runs
    /// where its parent runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<String>,
}

impl ClusterConfig {
    /// True when nothing is set (the default).
    pub fn is_empty(&self) -> bool {
        self.subagents.is_empty()
    }
}

/// `supervision` block: how the runtime treats crashed actors (troupe-actors `supervision`).
/// Every key is optional; an absent key takes the default shown. Restarts are counted in a
/// sliding window of `period_secs` (Erlang/OTP's `intensity` within `period`): the crash past
/// the limit escalates (the tool call becomes an error part, the turn fails).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SupervisionConfig {
    /// Restarts of a crashed read-only tool call with the same input. Default 2.
    pub tool_restarts: Option<u32>,
    /// Retries of a step whose processor crashed, from the committed history. Default 1.
    pub step_retries: Option<u32>,
    /// Restarts of a crashed session actor (its in-flight turn continues). Default 3.
    pub session_restarts: Option<u32>,
    /// Window of the restart limits, seconds. Default 60.
    pub period_secs: Option<u64>,
    /// First backoff before a restart, milliseconds; doubles per restart in the window
    /// (at most 5 s). Default 100.
    pub backoff_ms: Option<u64>,
    /// Tools safe to run again after a crash (they only read). Default `read`, `glob`,
    /// `grep`, `list`. Every other tool is side-effecting and never re-run.
    pub read_only_tools: Option<Vec<String>>,
    /// Restarts of a crashed or hung MCP server within the period before it is marked
    /// failed and its tools are withdrawn. Default 3.
    pub mcp_restarts: Option<u32>,
    /// Whether aborting a session aborts its running background subagents (`task` with
    /// `background: true`). Default true, as OpenCode's cancel does; false lets them run to
    /// the end and deliver their results to the parent, which starts a new turn for them.
    pub abort_background: Option<bool>,
}

impl SupervisionConfig {
    /// Default read-only tools (source: issue 14; fetch-like tools join when they exist).
    pub const DEFAULT_READ_ONLY_TOOLS: &'static [&'static str] = &["read", "glob", "grep", "list"];

    /// `tool_restarts` or 2.
    pub fn tool_restarts(&self) -> u32 {
        self.tool_restarts.unwrap_or(2)
    }
    /// `step_retries` or 1.
    pub fn step_retries(&self) -> u32 {
        self.step_retries.unwrap_or(1)
    }
    /// `session_restarts` or 3.
    pub fn session_restarts(&self) -> u32 {
        self.session_restarts.unwrap_or(3)
    }
    /// `mcp_restarts` or 3.
    pub fn mcp_restarts(&self) -> u32 {
        self.mcp_restarts.unwrap_or(3)
    }
    /// `period_secs` or 60 s.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.period_secs.unwrap_or(60))
    }
    /// `backoff_ms` or 100 ms.
    pub fn backoff(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.backoff_ms.unwrap_or(100))
    }
    /// `abort_background` or true.
    pub fn abort_background(&self) -> bool {
        self.abort_background.unwrap_or(true)
    }
    /// `read_only_tools` or the default list.
    pub fn read_only_tools(&self) -> Vec<String> {
        match &self.read_only_tools {
            Some(v) => v.clone(),
            None => Self::DEFAULT_READ_ONLY_TOOLS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// One `provider.<id>` block (OpenCode shape). All fields optional so a later config file can
/// override a single key.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    /// Display name.
    pub name: Option<String>,
    /// AI-SDK package name. Only `@ai-sdk/anthropic` means something here (Anthropic Messages
    /// protocol); any other value means OpenAI Chat Completions.
    pub npm: Option<String>,
    /// Base URL (models.dev `api`); `options.baseURL` wins over it.
    pub api: Option<String>,
    /// Env vars holding the API key, tried in order.
    pub env: Option<Vec<String>>,
    /// Connection options plus request-body options.
    pub options: ProviderOptions,
    /// Models by the id used in `provider/model`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ModelConfig>,
}

/// Request timeout (OpenCode `options.timeout`: milliseconds, or `false` to disable; OpenCode's
/// default is 300,000 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Timeout in milliseconds.
    Millis(u64),
    /// `false`: no timeout.
    Disabled,
}

impl Serialize for Timeout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Timeout::Millis(ms) => s.serialize_u64(*ms),
            Timeout::Disabled => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Timeout;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timeout in milliseconds or false")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Timeout, E> {
                Ok(Timeout::Millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Timeout, E> {
                u64::try_from(v)
                    .map(Timeout::Millis)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Timeout, E> {
                if v {
                    Err(E::invalid_value(de::Unexpected::Bool(true), &self))
                } else {
                    Ok(Timeout::Disabled)
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `provider.<id>.options`: the known connection keys, plus every other key, which is sent in
/// the request body (`extra`). `chunkTimeout` is parsed AND kept in `extra` (troupe-llm reads
/// it from the resolved options).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderOptions {
    /// `baseURL`.
    pub base_url: Option<String>,
    /// `apiKey` (after `{env:…}` substitution).
    pub api_key: Option<String>,
    /// `headers`: extra HTTP headers.
    pub headers: BTreeMap<String, String>,
    /// `timeout`.
    pub timeout: Option<Timeout>,
    /// `chunkTimeout`: max milliseconds between two stream chunks.
    pub chunk_timeout: Option<u64>,
    /// Every other key (and `chunkTimeout`), in file order.
    pub extra: Map<String, Value>,
}

impl Serialize for ProviderOptions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(v) = &self.base_url {
            m.serialize_entry("baseURL", v)?;
        }
        if self.api_key.is_some() {
            // Never write secrets back out (e.g. `troupe debug config`).
            m.serialize_entry("apiKey", "<redacted>")?;
        }
        if !self.headers.is_empty() {
            m.serialize_entry("headers", &self.headers)?;
        }
        if let Some(v) = &self.timeout {
            m.serialize_entry("timeout", v)?;
        }
        if let (Some(v), false) = (self.chunk_timeout, self.extra.contains_key("chunkTimeout")) {
            m.serialize_entry("chunkTimeout", &v)?;
        }
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for ProviderOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProviderOptions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an options object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProviderOptions, A::Error> {
                let mut out = ProviderOptions::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "baseURL" => out.base_url = map.next_value()?,
                        "apiKey" => out.api_key = map.next_value()?,
                        "headers" => out.headers = map.next_value()?,
                        "timeout" => out.timeout = map.next_value()?,
                        "chunkTimeout" => {
                            let ms: u64 = map.next_value()?;
                            out.chunk_timeout = Some(ms);
                            out.extra.insert(key, Value::from(ms));
                        }
                        _ => {
                            let v: Value = map.next_value()?;
                            out.extra.insert(key, v);
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// One model entry: user `provider.<id>.models.<model>` or a models.dev catalog model.
/// Every field is optional; resolution fills gaps from the catalog, then from safe defaults.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// Model id sent on the wire, when it differs from the key.
    pub id: Option<String>,
    /// Human name.
    pub name: Option<String>,
    /// Token limits.
    pub limit: Option<LimitConfig>,
    /// Prices, USD per 1M tokens.
    pub cost: Option<CostConfig>,
    /// Request-body options for this model, merged over the provider's.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub options: Map<String, Value>,
    /// Extra HTTP headers for this model, merged over the provider's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Accepts tools.
    pub tool_call: Option<bool>,
    /// Produces reasoning.
    pub reasoning: Option<bool>,
    /// Accepts `temperature`.
    pub temperature: Option<bool>,
    /// models.dev `attachment`: accepts file attachments (used for images when `modalities`
    /// is absent).
    pub attachment: Option<bool>,
    /// models.dev `modalities`: what the model takes and produces.
    pub modalities: Option<Modalities>,
}

/// models.dev `modalities` (`{"input": ["text", "image"], "output": ["text"]}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Modalities {
    /// Input kinds: `text`, `image`, `pdf`, `audio`, `video`.
    #[serde(default)]
    pub input: Vec<String>,
    /// Output kinds.
    #[serde(default)]
    pub output: Vec<String>,
}

/// models.dev `limit`, tokens.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LimitConfig {
    /// Context window (input + output), tokens.
    pub context: Option<u64>,
    /// Max prompt, tokens.
    pub input: Option<u64>,
    /// Max completion, tokens.
    pub output: Option<u64>,
}

/// models.dev `cost`, USD per 1M tokens.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostConfig {
    /// Base prices (`input`, `output`, `cache_read`, `cache_write` beside the other keys).
    #[serde(flatten)]
    pub prices: PriceConfig,
    /// Legacy models.dev tier for input > 200,000 tokens.
    pub context_over_200k: Option<PriceConfig>,
    /// models.dev `tiers` (`[{tier: {type: "context", size}, input, output, …}]`).
    pub tiers: Option<Vec<TierConfig>>,
}

/// A set of prices, USD per 1M tokens; missing cache prices are 0.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PriceConfig {
    /// Input price.
    pub input: Option<Decimal>,
    /// Output price.
    pub output: Option<Decimal>,
    /// Cache-read price.
    pub cache_read: Option<Decimal>,
    /// Cache-write price.
    pub cache_write: Option<Decimal>,
}

impl PriceConfig {
    /// These prices with each missing one taken from `base` (USD per 1M tokens).
    pub fn or(&self, base: &crate::model::Prices) -> crate::model::Prices {
        crate::model::Prices {
            input: self.input.unwrap_or(base.input),
            output: self.output.unwrap_or(base.output),
            cache_read: self.cache_read.unwrap_or(base.cache_read),
            cache_write: self.cache_write.unwrap_or(base.cache_write),
        }
    }
}

/// One models.dev `cost.tiers[]` entry.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierConfig {
    /// `{type: "context", size: N}`.
    pub tier: TierSpec,
    /// Prices in this tier (beside `tier`); a missing one is the base price.
    #[serde(flatten)]
    pub prices: PriceConfig,
}

/// Tier condition.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSpec {
    /// Tier kind; only `"context"` exists in models.dev.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Threshold in tokens; the tier applies when the step's input exceeds it.
    pub size: u64,
}
