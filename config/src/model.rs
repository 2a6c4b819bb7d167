//! Resolved model records: what the engine needs to talk to one model of one provider.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// OpenAI Chat Completions (`POST {baseURL}/chat/completions`, SSE). Also llama.cpp,
    /// vLLM, Ollama, OpenRouter, DeepSeek, Groq, Mistral, xAI.
    #[default]
    OpenaiChat,
    /// Anthropic Messages (`POST {baseURL}/messages`, SSE with named events).
    AnthropicMessages,
}

/// Token limits of a model, in tokens (models.dev `limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ModelLimits {
    /// Context window: input + output, tokens. 0 = unknown.
    pub context: u64,
    /// Input limit, tokens, when the provider states one separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<u64>,
    /// Maximum output tokens per request. 0 = unknown.
    pub output: u64,
}

/// A price tier that applies when a step's input exceeds `size` tokens
/// (models.dev `cost.tiers[]` / legacy `context_over_200k`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostTier {
    /// Threshold, tokens of context (input incl. cache); the tier applies when input > size.
    pub size: u64,
    /// Prices in this tier.
    pub prices: Prices,
}

/// Prices in USD per 1,000,000 tokens (models.dev `cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Prices {
    /// Uncached input, USD / 1M tokens.
    pub input: Decimal,
    /// Output (reasoning is billed at this price too), USD / 1M tokens.
    pub output: Decimal,
    /// Cache read, USD / 1M tokens.
    #[serde(default)]
    pub cache_read: Decimal,
    /// Cache write, USD / 1M tokens.
    #[serde(default)]
    pub cache_write: Decimal,
}

/// Cost table of a model: base prices plus optional context tiers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelCost {
    /// Base prices.
    #[serde(flatten)]
    pub base: Prices,
    /// Tiers chosen per step by that step's input tokens (largest matching size wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<CostTier>,
}

/// Everything needed to send a request to one model, after merging the embedded catalog,
/// the built-in providers and the user's `provider` config block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedModel {
    /// Provider id as written in `provider/model` (e.g. `openai`, `mock`).
    pub provider_id: String,
    /// Model id as sent on the wire (e.g. `gpt-4.1`).
    pub model_id: String,
    /// Human name.
    pub name: String,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Base URL without trailing slash, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// API key, already resolved from `options.apiKey` / `{env:NAME}` / the provider's env vars.
    /// `None` sends no auth header (local servers).
    #[serde(skip_serializing)]
    pub api_key: Option<String>,
    /// Extra HTTP headers (`options.headers`).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Request-body options merged into every request (provider `options` minus the known
    /// keys `baseURL`, `apiKey`, `headers`; then model `options`). The provider `timeout` is
    /// kept here as a number (ms) or `false`, for troupe-llm's response-header deadline; it
    /// and the other control keys are never sent in a request body.
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Token limits.
    pub limits: ModelLimits,
    /// Prices; `None` when unknown (cost is then 0).
    pub cost: Option<ModelCost>,
    /// Whether the model accepts tools. Unknown models default to true.
    pub tool_call: bool,
    /// Whether the model produces reasoning.
    pub reasoning: bool,
    /// Whether the model takes a `temperature`.
    pub temperature: bool,
    /// True when the model was not found in any catalog and runs on safe defaults.
    pub unknown: bool,
    /// Whether the model takes images: `modalities.input` lists `image` (config over
    /// catalog), else models.dev `attachment`; false for unknown models.
    #[serde(default)]
    pub image_input: bool,
    /// Whether the model takes PDF documents: `modalities.input` lists `pdf` (config over
    /// catalog); false when unknown.
    #[serde(default)]
    pub pdf_input: bool,
}

impl ResolvedModel {
    /// A model resolved without a catalog entry or config: `model_id` of `provider_id`
    /// (named as its id) speaking `protocol` at `base_url`; no API key, headers, options,
    /// limits or prices; takes tools and a temperature, no reasoning, images or PDFs. For
    /// callers (and tests) that talk to a server they know.
    pub fn new(provider_id: &str, model_id: &str, protocol: Protocol, base_url: &str) -> Self {
        ResolvedModel {
            provider_id: provider_id.to_string(),
            model_id: model_id.to_string(),
            name: model_id.to_string(),
            protocol,
            base_url: base_url.to_string(),
            api_key: None,
            headers: Vec::new(),
            options: serde_json::Map::new(),
            limits: ModelLimits::default(),
            cost: None,
            tool_call: true,
            reasoning: false,
            temperature: true,
            unknown: false,
            image_input: false,
            pdf_input: false,
        }
    }

    /// `provider/model`.
    pub fn full_id(&self) -> String {
        format!("{}/{}", self.provider_id, self.model_id)
    }

    /// Max output tokens to request: min(limit.output, 32,000), or 32,000 when unknown
    /// (OpenCode `OUTPUT_TOKEN_MAX`, provider/transform.ts).
    pub fn max_output_tokens(&self) -> u64 {
        const OUTPUT_TOKEN_MAX: u64 = 32_000;
        match self.limits.output {
            0 => OUTPUT_TOKEN_MAX,
            n => n.min(OUTPUT_TOKEN_MAX),
        }
    }
}
