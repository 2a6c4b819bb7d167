//! What the runtime is configured with: agents, models and the merged config, credentials
//! redacted.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;
use crate::routes::{ApiResult, bool_param};

/// Agents, including hidden ones.
#[utoipa::path(get, path = "/agent", tag = "config", responses((status = 200, body = [Value])))]
pub async fn agents(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let list = st.runtime.shared().agents.list(true);
    serde_json::to_value(list)
        .map(Json)
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Whether a config key's name says its value is a credential (`apiKey`, `grammarToken`,
/// `client_secret`, `password`, `Authorization`, …): its value is never shown.
fn is_credential_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "credential",
        "cookie",
    ]
    .iter()
    .any(|w| k.contains(w))
}

/// Replace with `<redacted>` every value of a `headers` or `environment` object (they often
/// carry credentials) and every string under a credential-like key name
/// ([`is_credential_name`]), at any depth (numbers stay: `preserve_recent_tokens` is a count).
fn redact_credentials(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if is_credential_name(k) && val.is_string() {
                    *val = Value::from("<redacted>");
                } else if k == "headers" || k == "environment" {
                    match val {
                        Value::Object(h) => {
                            for hv in h.values_mut() {
                                *hv = Value::from("<redacted>");
                            }
                        }
                        Value::Array(h) => {
                            for pair in h.iter_mut() {
                                if let Value::Array(p) = pair
                                    && p.len() == 2
                                {
                                    p[1] = Value::from("<redacted>");
                                }
                            }
                        }
                        _ => {}
                    }
                } else {
                    redact_credentials(val);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_credentials),
        _ => {}
    }
}

/// Models that can run here, as `troupe models` lists them: those listed in the config's
/// `provider` blocks, then the catalog models of providers with an API key; `?all=true`
/// adds the whole catalog. (A local server's own models, which `troupe models` probes for,
/// are not listed.) API keys never included; header values redacted.
#[utoipa::path(get, path = "/models", tag = "config",
    params(("all" = Option<bool>, Query, description = "Every catalog model")),
    responses((status = 200, body = [Value])))]
pub async fn models(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let all = bool_param(&q, "all")?;
    let config = &st.runtime.shared().config;
    let mut seen = std::collections::BTreeSet::new();
    let mut list = Vec::new();
    for (pid, p) in &config.config.provider {
        for key in p.models.keys() {
            if let Ok(m) = config.resolve_model(&format!("{pid}/{key}"))
                && seen.insert(m.full_id())
            {
                list.push(m);
            }
        }
    }
    for m in config.models() {
        if (all || m.api_key.is_some()) && seen.insert(m.full_id()) {
            list.push(m);
        }
    }
    let mut v = serde_json::to_value(list).map_err(|e| ApiError::internal(e.to_string()))?;
    redact_credentials(&mut v);
    Ok(Json(v))
}

/// The merged config (`apiKey` and header values redacted).
#[utoipa::path(get, path = "/config", tag = "config", responses((status = 200, body = Value)))]
pub async fn config(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let mut v = serde_json::to_value(&st.runtime.shared().config.config)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    redact_credentials(&mut v);
    Ok(Json(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_are_redacted_everywhere() {
        let mut v = json!({"provider": {"x": {"options": {"headers": {"Authorization": "k"}}}},
                           "list": [{"headers": [["X-Key", "k"]]}]});
        redact_credentials(&mut v);
        assert_eq!(
            v["provider"]["x"]["options"]["headers"]["Authorization"],
            "<redacted>"
        );
        assert_eq!(v["list"][0]["headers"][0][1], "<redacted>");
    }

    #[test]
    fn credential_like_option_values_are_redacted_and_the_rest_kept() {
        let mut v = json!({"provider": {"x": {"options": {
            "baseURL": "http://127.0.0.1:8765/v1", "temperature": 0.2,
            "apiKey": "sk-1", "grammarToken": "sk-abc", "client_secret": "s",
            "X-Api-Key": "12345", "extraBody": {"password": "p", "mode": "fast"}
        }}}});
        redact_credentials(&mut v);
        let o = &v["provider"]["x"]["options"];
        for k in ["apiKey", "grammarToken", "client_secret", "X-Api-Key"] {
            assert_eq!(o[k], "<redacted>", "{k}");
        }
        assert_eq!(o["extraBody"]["password"], "<redacted>");
        assert_eq!(o["extraBody"]["mode"], "fast");
        assert_eq!(o["baseURL"], "http://127.0.0.1:8765/v1");
        assert_eq!(o["temperature"], 0.2);
        let mut c = json!({"compaction": {"preserve_recent_tokens": 8000}});
        redact_credentials(&mut c);
        assert_eq!(c["compaction"]["preserve_recent_tokens"], 8000);
    }
}
