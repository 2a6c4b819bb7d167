//! Session, Message and Part: the persisted shape of a conversation.
//!
//! JSON field names follow OpenCode's (`sessionID`, `messageID`, `callID`, `providerID`, …) so
//! exported sessions and `--format json` output read the same as OpenCode's.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Cache token counts, tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CacheTokens {
    /// Input tokens read from the provider's prompt cache.
    pub read: u64,
    /// Input tokens written to the provider's prompt cache.
    pub write: u64,
}

/// Token counts split by category (OpenCode `tokens`): `input` excludes cache reads and
/// writes; `output` excludes reasoning. All in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Tokens {
    /// Uncached input tokens.
    pub input: u64,
    /// Output tokens excluding reasoning.
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Cache tokens.
    pub cache: CacheTokens,
}

impl Tokens {
    /// input + output + reasoning + cache read + cache write.
    pub fn total(&self) -> u64 {
        self.input + self.output + self.reasoning + self.cache.read + self.cache.write
    }

    /// Add another count into this one. Sums saturate at `u64::MAX` instead of wrapping
    /// (a provider's absurd usage report must not wrap a session's totals, issue 24.4).
    pub fn add(&mut self, o: &Tokens) {
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.reasoning = self.reasoning.saturating_add(o.reasoning);
        self.cache.read = self.cache.read.saturating_add(o.cache.read);
        self.cache.write = self.cache.write.saturating_add(o.cache.write);
    }
}

/// A model reference `{providerID, modelID}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRef {
    /// Provider id.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Model id.
    #[serde(rename = "modelID")]
    pub model_id: String,
}

impl From<&troupe_config::model::ResolvedModel> for ModelRef {
    fn from(m: &troupe_config::model::ResolvedModel) -> Self {
        ModelRef {
            provider_id: m.provider_id.clone(),
            model_id: m.model_id.clone(),
        }
    }
}

impl ModelRef {
    /// Parse `provider/model` (split at the first `/`).
    pub fn parse(spec: &str) -> Option<Self> {
        let (p, m) = spec.split_once('/')?;
        (!p.is_empty() && !m.is_empty()).then(|| Self {
            provider_id: p.to_string(),
            model_id: m.to_string(),
        })
    }

    /// `provider/model`.
    pub fn full(&self) -> String {
        format!("{}/{}", self.provider_id, self.model_id)
    }
}

mod ids;
mod message;
mod part;
mod session;

pub use ids::*;
pub use message::*;
pub use part::*;
pub use session::*;

#[cfg(test)]
mod tests;
