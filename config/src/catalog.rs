//! Built-in providers and the embedded models.dev catalog.
//!
//! The catalog is `data/models.json`, a subset of `https://models.dev/api.json`
//! (github.com/anomalyco/models.dev at f3fc6922, 2026-07-02, MIT, see
//! `data/LICENSE-models.dev-MIT.txt`): `{ "<provider>": { id, name, env[], npm, doc, api?,
//! models: { "<model-id>": Model } } }` plus a `_source` provenance key, which is skipped.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::model::Protocol;
use crate::schema::ModelConfig;

/// A provider troupe knows without any config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinProvider {
    /// Provider id (`openai`, …).
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// Base URL without trailing slash.
    pub base_url: &'static str,
    /// Env vars holding the API key, tried in order; empty = no key (local servers).
    pub env: &'static [&'static str],
    /// Wire protocol.
    pub protocol: Protocol,
}

/// The built-in providers. Base URLs are the providers' documented OpenAI-compatible (or, for
/// Anthropic, Messages) endpoints; `local` is llama.cpp `llama-server`'s default port 8080,
/// `ollama` Ollama's default port 11434 with its `/v1` OpenAI-compatible API.
pub const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    BuiltinProvider {
        id: "anthropic",
        name: "Anthropic",
        base_url: "https://api.anthropic.com/v1",
        env: &["ANTHROPIC_API_KEY"],
        protocol: Protocol::AnthropicMessages,
    },
    BuiltinProvider {
        id: "deepseek",
        name: "DeepSeek",
        base_url: "https://api.deepseek.com/v1",
        env: &["DEEPSEEK_API_KEY"],
        protocol: Protocol::OpenaiChat,
    },
    BuiltinProvider {
        id: "google",
        name: "Google",
        base_url: "https://generativelanguage.googleapis.com/v1beta/openai",
        env: &["GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"],
        protocol: Protocol::OpenaiChat,
    },
    BuiltinProvider {
        id: "local",
        name: "Local (llama.cpp server)",
        base_url: "http://127.0.0.1:8080/v1",
        env: &[],
        protocol: Protocol::OpenaiChat,
    },
    BuiltinProvider {
        id: "ollama",
        name: "Ollama",
        base_url: "http://127.0.0.1:11434/v1",
        env: &[],
        protocol: Protocol::OpenaiChat,
    },
    BuiltinProvider {
        id: "openai",
        name: "OpenAI",
        base_url: "https://api.openai.com/v1",
        env: &["OPENAI_API_KEY"],
        protocol: Protocol::OpenaiChat,
    },
    BuiltinProvider {
        id: "openrouter",
        name: "OpenRouter",
        base_url: "https://openrouter.ai/api/v1",
        env: &["OPENROUTER_API_KEY"],
        protocol: Protocol::OpenaiChat,
    },
];

/// The built-in provider with this id.
pub fn builtin_provider(id: &str) -> Option<&'static BuiltinProvider> {
    BUILTIN_PROVIDERS.iter().find(|p| p.id == id)
}

/// One provider of the models.dev catalog.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CatalogProvider {
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Env vars holding the API key.
    #[serde(default)]
    pub env: Vec<String>,
    /// AI-SDK package (`@ai-sdk/anthropic` → Anthropic protocol).
    #[serde(default)]
    pub npm: Option<String>,
    /// Base URL, when models.dev states one.
    #[serde(default)]
    pub api: Option<String>,
    /// Models by id.
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
}

/// The embedded catalog text (models.dev `api.json` subset).
pub const CATALOG_JSON: &str = include_str!("../data/models.json");

static CATALOG: LazyLock<BTreeMap<String, CatalogProvider>> =
    LazyLock::new(|| parse_catalog(CATALOG_JSON).unwrap_or_default());

/// The embedded catalog, by provider id (parsed once; a unit test checks it parses).
pub fn catalog() -> &'static BTreeMap<String, CatalogProvider> {
    &CATALOG
}

/// Parses a models.dev `api.json` document, skipping keys starting with `_` (`_source`).
pub fn parse_catalog(text: &str) -> Result<BTreeMap<String, CatalogProvider>, serde_json::Error> {
    let raw: BTreeMap<String, Value> = serde_json::from_str(text)?;
    let mut out = BTreeMap::new();
    for (id, value) in raw {
        if id.starts_with('_') {
            continue;
        }
        out.insert(id, serde_json::from_value(value)?);
    }
    Ok(out)
}

/// Protocol named by an AI-SDK npm package: `@ai-sdk/anthropic` → Anthropic Messages,
/// anything else → OpenAI Chat Completions.
pub fn protocol_for_npm(npm: &str) -> Protocol {
    if npm == "@ai-sdk/anthropic" {
        Protocol::AnthropicMessages
    } else {
        Protocol::OpenaiChat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_catalog_parses_and_skips_source() {
        let cat = parse_catalog(CATALOG_JSON).expect("embedded catalog parses");
        assert!(!cat.contains_key("_source"));
        assert_eq!(catalog().len(), cat.len());
        for p in ["anthropic", "openai", "google", "deepseek"] {
            assert!(cat.contains_key(p), "{p} missing");
        }
        let sonnet = &cat["anthropic"].models["claude-sonnet-4-5"];
        assert_eq!(sonnet.limit.and_then(|l| l.context), Some(200_000));
        let gemini = &cat["google"].models["gemini-2.5-pro"];
        let tiers = gemini
            .cost
            .as_ref()
            .and_then(|c| c.tiers.as_ref())
            .expect("tiers");
        assert_eq!(tiers[0].tier.size, 200_000);
    }

    #[test]
    fn builtins_are_sorted_and_unique() {
        let ids: Vec<&str> = BUILTIN_PROVIDERS.iter().map(|p| p.id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted);
        assert_eq!(
            builtin_provider("anthropic").map(|p| p.protocol),
            Some(Protocol::AnthropicMessages)
        );
    }
}
