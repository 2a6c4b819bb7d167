//! `provider/model` → [`ResolvedModel`]: built-in provider, then embedded catalog, then the
//! user's `provider` block (later wins, field by field).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::catalog::{self, BuiltinProvider, CatalogProvider};
use crate::error::ConfigError;
use crate::load::{LoadedConfig, deep_merge};
use crate::model::{CostTier, ModelCost, ModelLimits, Prices, Protocol, ResolvedModel};
use crate::schema::{CostConfig, ModelConfig, PriceConfig, ProviderConfig, Timeout};

/// Context window assumed for a model no catalog knows, tokens. Conservative: the smallest
/// window of current mainstream models (gpt-4o: 128,000; llama.cpp servers are often started
/// with less, which then surfaces as a context-overflow error that triggers compaction).
pub const UNKNOWN_MODEL_CONTEXT: u64 = 128_000;

/// Max output assumed for a model no catalog knows, tokens (8,192: a limit every current
/// chat model and OpenAI-compatible server accepts).
pub const UNKNOWN_MODEL_OUTPUT: u64 = 8_192;

/// Model chosen by [`LoadedConfig::default_model`] when only `ANTHROPIC_API_KEY` is available
/// (present in the embedded catalog).
pub const DEFAULT_ANTHROPIC_MODEL: &str = "anthropic/claude-sonnet-4-5";

/// Model chosen by [`LoadedConfig::default_model`] when only `OPENAI_API_KEY` is available.
pub const DEFAULT_OPENAI_MODEL: &str = "openai/gpt-4.1";

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What is known about one provider id from the three layers.
struct ProviderLayers<'a> {
    id: &'a str,
    builtin: Option<&'static BuiltinProvider>,
    catalog: Option<&'static CatalogProvider>,
    user: Option<&'a ProviderConfig>,
    /// Key stored by `troupe auth login`.
    stored_key: Option<&'a str>,
}

impl LoadedConfig {
    /// Resolves `provider/model` (split at the FIRST `/`; model ids may contain `/`).
    /// API keys are read from the process environment.
    ///
    /// Errors: no `/` → [`ConfigError::InvalidModelSpec`]; unknown provider →
    /// [`ConfigError::UnknownProvider`]; a model missing from a provider that is neither built-in
    /// nor in the catalog but whose models the user listed → [`ConfigError::ModelNotFound`] with
    /// suggestions; a provider without base URL → [`ConfigError::MissingBaseUrl`]. A model
    /// missing from a built-in provider (or from a provider that lists no models) resolves with
    /// [`UNKNOWN_MODEL_CONTEXT`] / [`UNKNOWN_MODEL_OUTPUT`], no cost and `unknown: true`.
    pub fn resolve_model(&self, spec: &str) -> Result<ResolvedModel, ConfigError> {
        self.resolve_model_with_env(spec, &process_env)
    }

    /// [`LoadedConfig::resolve_model`] with env vars read through `env`.
    pub fn resolve_model_with_env(
        &self,
        spec: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ResolvedModel, ConfigError> {
        let spec = spec.trim();
        let (provider_id, model_key) = match spec.split_once('/') {
            Some((p, m)) if !p.is_empty() && !m.is_empty() => (p, m),
            _ => return Err(ConfigError::InvalidModelSpec(spec.to_owned())),
        };
        let layers = self
            .layers(provider_id)
            .ok_or_else(|| ConfigError::UnknownProvider {
                provider: provider_id.to_owned(),
                known: self.provider_ids(),
            })?;
        let user_model = layers.user.and_then(|u| u.models.get(model_key));
        let catalog_model = layers.catalog.and_then(|c| {
            c.models.get(model_key).or_else(|| {
                user_model
                    .and_then(|m| m.id.as_ref())
                    .and_then(|id| c.models.get(id))
            })
        });
        if user_model.is_none() && catalog_model.is_none() {
            let user_listed = layers.user.is_some_and(|u| !u.models.is_empty());
            let builtin_or_catalog = layers.builtin.is_some() || layers.catalog.is_some();
            if user_listed && !builtin_or_catalog {
                let available = model_keys(&layers);
                return Err(ConfigError::ModelNotFound {
                    provider: provider_id.to_owned(),
                    model: model_key.to_owned(),
                    suggestions: suggest(model_key, &available),
                    available,
                });
            }
        }
        let detected = self
            .detected_limits
            .get(&format!("{provider_id}/{model_key}"));
        build(&layers, model_key, catalog_model, user_model, detected, env)
    }

    /// Every model known from the catalog and the user's `provider` blocks, resolved, sorted by
    /// provider id then model key. Providers without listed models (`local`, `ollama`) add
    /// nothing; models that fail to resolve (e.g. no base URL) are left out.
    pub fn models(&self) -> Vec<ResolvedModel> {
        let mut out = Vec::new();
        for id in self.provider_ids() {
            let Some(layers) = self.layers(&id) else {
                continue;
            };
            for key in model_keys(&layers) {
                let user = layers.user.and_then(|u| u.models.get(&key));
                let cat = layers.catalog.and_then(|c| c.models.get(&key));
                let detected = self.detected_limits.get(&format!("{id}/{key}"));
                if let Ok(m) = build(&layers, &key, cat, user, detected, &process_env) {
                    out.push(m);
                }
            }
        }
        out
    }

    /// Default model spec: config `model`, else [`DEFAULT_ANTHROPIC_MODEL`] when an Anthropic
    /// key is available (config `apiKey` or `ANTHROPIC_API_KEY`), else [`DEFAULT_OPENAI_MODEL`]
    /// when an OpenAI key is, else `None` (the CLI then probes `local`).
    pub fn default_model(&self) -> Option<String> {
        self.default_model_with_env(&process_env)
    }

    /// [`LoadedConfig::default_model`] with env vars read through `env`.
    pub fn default_model_with_env(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        self.default_model_source_with_env(env).map(|(m, _)| m)
    }

    /// [`LoadedConfig::default_model`] and where it came from, for people: `"model" in
    /// <file>`, `ANTHROPIC_API_KEY is set`, `provider.openai.options.apiKey in config`.
    pub fn default_model_source(&self) -> Option<(String, String)> {
        self.default_model_source_with_env(&process_env)
    }

    /// [`LoadedConfig::default_model_source`] with env vars read through `env`.
    pub fn default_model_source_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<(String, String)> {
        if let Some(m) = self
            .config
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        {
            let from = self.origin("model").unwrap_or("config");
            return Some((m.to_owned(), format!("\"model\" in {from}")));
        }
        for (provider, model) in [
            ("anthropic", DEFAULT_ANTHROPIC_MODEL),
            ("openai", DEFAULT_OPENAI_MODEL),
        ] {
            let Some(layers) = self.layers(provider) else {
                continue;
            };
            if api_key(&layers, env).is_none() {
                continue;
            }
            let configured = non_empty(layers.user.and_then(|u| u.options.api_key.as_ref()));
            let why = match configured {
                Some(_) => format!(
                    "the default for {provider}, whose provider.{provider}.options.apiKey is set in config"
                ),
                None => {
                    let var = layers
                        .builtin
                        .map(|b| b.env)
                        .unwrap_or_default()
                        .iter()
                        .find(|v| non_empty(env(v).as_ref()).is_some())
                        .map(|v| format!("the default for {provider}, whose {v} is set"));
                    var.unwrap_or_else(|| {
                        format!(
                            "the default for {provider}, whose key is stored (troupe auth login {provider})"
                        )
                    })
                }
            };
            return Some((model.to_owned(), why));
        }
        None
    }

    /// All known provider ids (built-in, catalog, user), sorted.
    pub fn provider_ids(&self) -> Vec<String> {
        let mut ids: BTreeSet<String> = catalog::BUILTIN_PROVIDERS
            .iter()
            .map(|p| p.id.to_owned())
            .collect();
        ids.extend(catalog::catalog().keys().cloned());
        ids.extend(self.config.provider.keys().cloned());
        ids.into_iter().collect()
    }

    /// The provider's configured request timeout (`options.timeout`), if any.
    pub fn provider_timeout(&self, provider_id: &str) -> Option<Timeout> {
        self.config
            .provider
            .get(provider_id)
            .and_then(|p| p.options.timeout)
    }

    fn layers<'a>(&'a self, id: &'a str) -> Option<ProviderLayers<'a>> {
        let layers = ProviderLayers {
            id,
            builtin: catalog::builtin_provider(id),
            catalog: catalog::catalog().get(id),
            user: self.config.provider.get(id),
            stored_key: self.auth.get(id).map(String::as_str),
        };
        (layers.builtin.is_some() || layers.catalog.is_some() || layers.user.is_some())
            .then_some(layers)
    }
}

fn model_keys(layers: &ProviderLayers<'_>) -> Vec<String> {
    let mut keys: BTreeSet<String> = BTreeSet::new();
    if let Some(u) = layers.user {
        keys.extend(u.models.keys().cloned());
    }
    if let Some(c) = layers.catalog {
        keys.extend(c.models.keys().cloned());
    }
    keys.into_iter().collect()
}

fn non_empty(s: Option<&String>) -> Option<String> {
    s.map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn api_key(layers: &ProviderLayers<'_>, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(key) = non_empty(layers.user.and_then(|u| u.options.api_key.as_ref())) {
        return Some(key);
    }
    let vars: Vec<String> = if let Some(list) = layers.user.and_then(|u| u.env.as_ref()) {
        list.clone()
    } else if let Some(b) = layers.builtin {
        b.env.iter().map(|s| (*s).to_owned()).collect()
    } else if let Some(c) = layers.catalog {
        c.env.clone()
    } else {
        Vec::new()
    };
    vars.iter()
        .find_map(|v| non_empty(env(v).as_ref()))
        .or_else(|| layers.stored_key.map(str::to_owned))
}

fn build(
    layers: &ProviderLayers<'_>,
    model_key: &str,
    catalog_model: Option<&ModelConfig>,
    user_model: Option<&ModelConfig>,
    detected: Option<&ModelLimits>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ResolvedModel, ConfigError> {
    let user = layers.user;
    let protocol = if let Some(npm) = user.and_then(|u| u.npm.as_deref()) {
        catalog::protocol_for_npm(npm)
    } else if let Some(b) = layers.builtin {
        b.protocol
    } else if let Some(npm) = layers.catalog.and_then(|c| c.npm.as_deref()) {
        catalog::protocol_for_npm(npm)
    } else {
        Protocol::OpenaiChat
    };
    let base_url = non_empty(user.and_then(|u| u.options.base_url.as_ref()))
        .or_else(|| non_empty(user.and_then(|u| u.api.as_ref())))
        .or_else(|| layers.builtin.map(|b| b.base_url.to_owned()))
        .or_else(|| non_empty(layers.catalog.and_then(|c| c.api.as_ref())))
        .ok_or_else(|| ConfigError::MissingBaseUrl(layers.id.to_owned()))?;
    let base_url = base_url.trim_end_matches('/').to_owned();

    let mut headers: Vec<(String, String)> = Vec::new();
    let header_sources = user
        .map(|u| &u.options.headers)
        .into_iter()
        .chain(user_model.map(|m| &m.headers));
    for map in header_sources {
        for (k, v) in map {
            headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(k));
            headers.push((k.clone(), v.clone()));
        }
    }

    let mut options = Value::Object(user.map(|u| u.options.extra.clone()).unwrap_or_default());
    if let Some(m) = user_model {
        deep_merge(&mut options, Value::Object(m.options.clone()));
    }
    let mut options = match options {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    // The provider's request timeout travels with the model (troupe-llm applies it as the
    // response-header deadline and never sends it); a model-level `timeout` wins.
    if let Some(t) = user.and_then(|u| u.options.timeout)
        && !options.contains_key("timeout")
    {
        options.insert(
            "timeout".into(),
            match t {
                Timeout::Millis(ms) => Value::from(ms),
                Timeout::Disabled => Value::Bool(false),
            },
        );
    }

    let pick = |f: fn(&ModelConfig) -> Option<bool>| {
        user_model.and_then(f).or_else(|| catalog_model.and_then(f))
    };
    let limit = |f: fn(&crate::schema::LimitConfig) -> Option<u64>| {
        user_model
            .and_then(|m| m.limit.as_ref())
            .and_then(f)
            .or_else(|| catalog_model.and_then(|m| m.limit.as_ref()).and_then(f))
    };
    // Configured or catalog limits, else what the server said about itself, else the guesses.
    let limits = ModelLimits {
        context: limit(|l| l.context)
            .or(detected.map(|d| d.context).filter(|&c| c > 0))
            .unwrap_or(UNKNOWN_MODEL_CONTEXT),
        input: limit(|l| l.input).or(detected.and_then(|d| d.input)),
        output: limit(|l| l.output)
            .or(detected.map(|d| d.output).filter(|&o| o > 0))
            .unwrap_or(UNKNOWN_MODEL_OUTPUT),
    };

    let name = non_empty(user_model.and_then(|m| m.name.as_ref()))
        .or_else(|| non_empty(catalog_model.and_then(|m| m.name.as_ref())))
        .unwrap_or_else(|| model_key.to_owned());
    let model_id =
        non_empty(user_model.and_then(|m| m.id.as_ref())).unwrap_or_else(|| model_key.to_owned());

    Ok(ResolvedModel {
        provider_id: layers.id.to_owned(),
        model_id,
        name,
        protocol,
        base_url,
        api_key: api_key(layers, env),
        headers,
        options,
        limits,
        cost: merge_cost(
            catalog_model.and_then(|m| m.cost.as_ref()),
            user_model.and_then(|m| m.cost.as_ref()),
        ),
        tool_call: pick(|m| m.tool_call).unwrap_or(true),
        reasoning: pick(|m| m.reasoning).unwrap_or(false),
        temperature: pick(|m| m.temperature).unwrap_or(true),
        unknown: user_model.is_none() && catalog_model.is_none(),
        image_input: pick(|m| {
            m.modalities
                .as_ref()
                .map(|x| x.input.iter().any(|k| k == "image"))
        })
        .or_else(|| pick(|m| m.attachment))
        .unwrap_or(false),
        pdf_input: pick(|m| {
            m.modalities
                .as_ref()
                .map(|x| x.input.iter().any(|k| k == "pdf"))
        })
        .unwrap_or(false),
    })
}

/// User cost fields override catalog cost fields one by one; tiers come from the user when it
/// gives `tiers` or `context_over_200k`, else from the catalog (`tiers` preferred over the
/// legacy `context_over_200k`, which becomes a tier of size 200,000). Missing tier prices fall
/// back to the base prices.
fn merge_cost(catalog: Option<&CostConfig>, user: Option<&CostConfig>) -> Option<ModelCost> {
    if catalog.is_none() && user.is_none() {
        return None;
    }
    // User price fields override catalog price fields one by one, then default to 0.
    let user_prices = user.map(|c| &c.prices).cloned().unwrap_or_default();
    let catalog_prices = catalog.map(|c| &c.prices).cloned().unwrap_or_default();
    let base = user_prices.or(&catalog_prices.or(&Prices::default()));
    let tiers_of = |c: &CostConfig| -> Option<Vec<CostTier>> {
        if let Some(tiers) = &c.tiers {
            return Some(
                tiers
                    .iter()
                    .map(|t| CostTier {
                        size: t.tier.size,
                        prices: t.prices.or(&base),
                    })
                    .collect(),
            );
        }
        c.context_over_200k.as_ref().map(|p: &PriceConfig| {
            vec![CostTier {
                size: 200_000,
                prices: p.or(&base),
            }]
        })
    };
    let mut tiers = user
        .and_then(tiers_of)
        .or_else(|| catalog.and_then(tiers_of))
        .unwrap_or_default();
    tiers.sort_by_key(|t| t.size);
    Some(ModelCost { base, tiers })
}

/// Up to 3 candidates closest to `wanted` by edit distance (or containing it), best first.
fn suggest(wanted: &str, candidates: &[String]) -> Vec<String> {
    let wanted_lc = wanted.to_lowercase();
    let max = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &String)> = candidates
        .iter()
        .filter_map(|c| {
            let c_lc = c.to_lowercase();
            let d = levenshtein(&wanted_lc, &c_lc);
            let contains = c_lc.contains(&wanted_lc) || wanted_lc.contains(&c_lc);
            (d <= max || contains).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c.clone()).collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    #[test]
    fn suggest_orders_by_distance() {
        let c = vec![
            "mock-model".to_owned(),
            "mock-modal-2".to_owned(),
            "other".to_owned(),
        ];
        assert_eq!(
            suggest("mock-modle", &c),
            vec!["mock-model".to_owned(), "mock-modal-2".to_owned()]
        );
        assert!(suggest("zzzzzzzzzz", &c).is_empty());
    }
}
