//! What an OpenAI-compatible server (llama.cpp, vLLM, …) says about its own limits, so a
//! local model runs with the server's real context size instead of the 128,000 / 8,192
//! guesses for unknown models.
//!
//! Sources, first found wins for the context:
//! 1. llama.cpp `GET /props` (at the server root, not under `/v1`):
//!    `default_generation_settings.n_ctx` (context per slot, tokens) and
//!    `default_generation_settings.params.n_predict` (output cap, `-1` = none);
//! 2. `GET {baseURL}/models`, the entry of the model (else the first): vLLM `max_model_len`,
//!    LM Studio / OpenRouter-style `context_length`, then llama.cpp `meta.n_ctx_train` (the
//!    training context: an upper bound when the server says nothing better).

use std::time::Duration;

use serde_json::Value;
use troupe_config::{LoadedConfig, ModelLimits, Protocol};

/// How long each probe may take; a server that does not answer this fast is left alone.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Max output for a detected context of `n_ctx` tokens when the server sets no cap: a quarter
/// of the context (so at least three quarters stay for the prompt), at most
/// [`troupe_config::UNKNOWN_MODEL_OUTPUT`].
fn default_output(n_ctx: u64) -> u64 {
    (n_ctx / 4).clamp(1, troupe_config::UNKNOWN_MODEL_OUTPUT)
}

fn positive(v: &Value) -> Option<u64> {
    v.as_u64().filter(|&n| n > 0)
}

/// Limits from the bodies of `GET /props` and `GET /v1/models` (either may be missing), for
/// `model_id`. `None` when neither names a context size.
pub fn limits_from(
    props: Option<&Value>,
    models: Option<&Value>,
    model_id: &str,
) -> Option<ModelLimits> {
    let settings = props.map(|p| &p["default_generation_settings"]);
    let from_props = settings
        .and_then(|s| positive(&s["n_ctx"]))
        .or_else(|| props.and_then(|p| positive(&p["n_ctx"])));
    let entry = models.and_then(|m| m["data"].as_array()).and_then(|list| {
        list.iter()
            .find(|e| e["id"].as_str() == Some(model_id))
            .or_else(|| list.first())
    });
    let from_models = entry.and_then(|e| {
        positive(&e["max_model_len"])
            .or_else(|| positive(&e["context_length"]))
            .or_else(|| positive(&e["meta"]["n_ctx_train"]))
    });
    let context = from_props.or(from_models)?;
    let n_predict = settings
        .and_then(|s| s["params"]["n_predict"].as_i64())
        .filter(|&n| n > 0)
        .map(|n| n as u64);
    let output = n_predict
        .map(|n| n.min(context))
        .unwrap_or_else(|| default_output(context));
    Some(ModelLimits {
        context,
        input: None,
        output,
    })
}

async fn get_json(client: &reqwest::Client, url: String) -> Option<Value> {
    let resp = client.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// Asks the server at `base_url` (e.g. `http://127.0.0.1:8080/v1`) for its limits.
pub async fn detect_limits(
    base_url: &str,
    api_key: Option<&str>,
    model_id: &str,
) -> Option<ModelLimits> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key
        && let Ok(v) = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
    {
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .default_headers(headers)
        .build()
        .ok()?;
    let base = base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let (props, models) = tokio::join!(
        get_json(&client, format!("{root}/props")),
        get_json(&client, format!("{base}/models")),
    );
    limits_from(props.as_ref(), models.as_ref(), model_id)
}

/// The model ids an OpenAI-compatible server at `base_url` lists (`GET /models`), empty when
/// it does not answer within the probe timeout.
pub async fn server_models(base_url: &str) -> Vec<String> {
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return Vec::new();
    };
    let base = base_url.trim_end_matches('/');
    get_json(&client, format!("{base}/models"))
        .await
        .and_then(|v| {
            v["data"].as_array().map(|list| {
                list.iter()
                    .filter_map(|e| e["id"].as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// When `spec` names a model of an OpenAI-compatible server with no configured or catalog
/// limits (hosted providers with a key variable are left alone), asks the server for its real
/// limits and records them in `config.detected_limits`; returns them. Configured limits always
/// win; nothing changes when the server does not say.
pub async fn apply_detected_limits(config: &mut LoadedConfig, spec: &str) -> Option<ModelLimits> {
    let m = config.resolve_model(spec).ok()?;
    if m.protocol != Protocol::OpenaiChat {
        return None;
    }
    if let Some(b) = troupe_config::builtin_provider(&m.provider_id)
        && !b.env.is_empty()
        && m.base_url == b.base_url
    {
        return None;
    }
    let (_, key) = spec.trim().split_once('/')?;
    let configured = config
        .config
        .provider
        .get(&m.provider_id)
        .and_then(|p| p.models.get(key))
        .and_then(|mc| mc.limit.as_ref())
        .and_then(|l| l.context)
        .is_some();
    if configured || !(m.unknown || m.limits.context == troupe_config::UNKNOWN_MODEL_CONTEXT) {
        return None;
    }
    let limits = detect_limits(&m.base_url, m.api_key.as_deref(), &m.model_id).await?;
    config
        .detected_limits
        .insert(format!("{}/{key}", m.provider_id), limits);
    Some(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn props_context_wins_and_output_is_a_quarter() {
        let props =
            json!({"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}}});
        let models = json!({"data": [{"id": "m", "meta": {"n_ctx_train": 131072}}]});
        let l = limits_from(Some(&props), Some(&models), "m").expect("limits");
        assert_eq!((l.context, l.output), (4096, 1024));
    }

    #[test]
    fn n_predict_caps_output() {
        let props =
            json!({"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": 256}}});
        let l = limits_from(Some(&props), None, "m").expect("limits");
        assert_eq!((l.context, l.output), (4096, 256));
    }

    #[test]
    fn models_metadata_when_no_props() {
        let vllm = json!({"data": [{"id": "a", "max_model_len": 1000}, {"id": "b", "max_model_len": 2048}]});
        let l = limits_from(None, Some(&vllm), "b").expect("vllm");
        assert_eq!((l.context, l.output), (2048, 512));
        let llama = json!({"data": [{"id": "x", "meta": {"n_ctx_train": 65536}}]});
        let l = limits_from(None, Some(&llama), "other").expect("first entry");
        assert_eq!((l.context, l.output), (65536, 8192));
        assert!(limits_from(None, Some(&json!({"data": [{"id": "x"}]})), "x").is_none());
        assert!(limits_from(Some(&json!({"n_ctx": 0})), None, "x").is_none());
    }
}
