//! `troupe models` and the model lines of `troupe debug config`: which models can run here,
//! which one runs by default and why.
//!
//! Rows, in order: the models listed in the config's `provider` blocks (source `config`), the
//! models a reachable local server lists (`local`/`ollama` and configured providers on a
//! loopback address without listed models; source `server <baseURL>`, limits read from the
//! server, see [`crate::local`]), the catalog models of providers with an API key (source
//! `catalog`; every catalog model with `--all`), and the default model when none of those
//! has it (source `default`).

use std::collections::BTreeSet;

use anyhow::Result;
use rust_decimal::Decimal;
use serde::Serialize;
use troupe_config::{LoadedConfig, ResolvedModel};

/// One row of `troupe models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    /// `provider/model`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Context window, tokens.
    pub context: u64,
    /// Max output per request, tokens.
    pub output: u64,
    /// Input price, USD per 1M tokens (absent when unknown).
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "rust_decimal::serde::float_option"
    )]
    pub input_cost: Option<Decimal>,
    /// Output price, USD per 1M tokens (absent when unknown).
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "rust_decimal::serde::float_option"
    )]
    pub output_cost: Option<Decimal>,
    /// Where the row comes from: `config`, `server <baseURL>`, `catalog`, `default`.
    pub source: String,
    /// Whether `troupe run` uses it when no `--model` is given.
    pub default: bool,
    /// Why it is the default (only on the default row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_from: Option<String>,
}

/// The model `troupe run` uses without `--model`, and why.
#[derive(Debug, Clone)]
pub struct DefaultModel {
    /// `provider/model`, `None` when no model is configured and no local server answers.
    pub spec: Option<String>,
    /// Where it came from, or what to do when there is none.
    pub from: String,
}

/// The default model: the default agent's own `model`, else the config's `model` (or the
/// hosted provider whose key is set), else the first model a local llama.cpp server lists.
pub async fn default_model(
    config: &LoadedConfig,
    agents: &troupe_agents::AgentSet,
) -> DefaultModel {
    if let Ok(agent) = agents.default_agent(config.config.default_agent.as_deref())
        && let Some(m) = &agent.model
    {
        return DefaultModel {
            spec: Some(m.clone()),
            from: format!("the model of the default agent {}", agent.name),
        };
    }
    if let Some((m, from)) = config.default_model_source() {
        return DefaultModel {
            spec: Some(m),
            from,
        };
    }
    let local = local_base(config);
    match crate::probe_local(&local).await {
        Some(id) => DefaultModel {
            spec: Some(format!("local/{id}")),
            from: format!(
                "the llama.cpp server at {local}, which lists it (no model is configured)"
            ),
        },
        None => DefaultModel {
            spec: None,
            from: format!(
                "none: set \"model\" in troupe.json, set OPENAI_API_KEY or ANTHROPIC_API_KEY, or start a llama.cpp server at {local}"
            ),
        },
    }
}

fn local_base(config: &LoadedConfig) -> String {
    config
        .resolve_model("local/default")
        .map(|m| m.base_url)
        .unwrap_or_else(|_| "http://127.0.0.1:8080/v1".into())
}

fn row(m: &ResolvedModel, source: &str) -> ModelRow {
    ModelRow {
        id: m.full_id(),
        name: m.name.clone(),
        context: m.limits.context,
        output: m.limits.output,
        input_cost: m.cost.as_ref().map(|c| c.base.input),
        output_cost: m.cost.as_ref().map(|c| c.base.output),
        source: source.to_string(),
        default: false,
        default_from: None,
    }
}

fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        matches!(
            u.host_str(),
            Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
        )
    })
}

/// Rows of `troupe models` (see the module docs). `all` lists every catalog model.
pub async fn rows(config: &LoadedConfig, default: &DefaultModel, all: bool) -> Vec<ModelRow> {
    let mut out: Vec<ModelRow> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    // 1. Listed in config.
    for (pid, p) in &config.config.provider {
        for key in p.models.keys() {
            if let Ok(m) = config.resolve_model(&format!("{pid}/{key}"))
                && seen.insert(m.full_id())
            {
                out.push(row(&m, "config"));
            }
        }
    }
    // 2. Local servers that answer.
    let mut servers: Vec<(String, String)> = Vec::new();
    for pid in config.provider_ids() {
        let listed = config
            .config
            .provider
            .get(&pid)
            .is_some_and(|p| !p.models.is_empty());
        let builtin_local = troupe_config::builtin_provider(&pid).is_some_and(|b| b.env.is_empty());
        let configured = config.config.provider.contains_key(&pid);
        if listed || !(builtin_local || configured) {
            continue;
        }
        let Ok(m) = config.resolve_model(&format!("{pid}/default")) else {
            continue;
        };
        if m.protocol == troupe_config::Protocol::OpenaiChat && is_loopback(&m.base_url) {
            servers.push((pid, m.base_url));
        }
    }
    let probes = servers.iter().map(|(pid, base)| async move {
        let ids = crate::local::server_models(base).await;
        let mut found = Vec::new();
        for id in ids {
            let limits = crate::local::detect_limits(base, None, &id).await;
            found.push((pid.clone(), base.clone(), id, limits));
        }
        found
    });
    for found in futures::future::join_all(probes).await {
        for (pid, base, id, limits) in found {
            let spec = format!("{pid}/{id}");
            let mut cfg = config.clone();
            if let Some(l) = limits {
                cfg.detected_limits.insert(spec.clone(), l);
            }
            if let Ok(m) = cfg.resolve_model(&spec)
                && seen.insert(m.full_id())
            {
                out.push(row(&m, &format!("server {base}")));
            }
        }
    }
    // 3. Catalog models of providers with a key (or all of them).
    for m in config.models() {
        if seen.contains(&m.full_id()) {
            continue;
        }
        if all || m.api_key.is_some() {
            seen.insert(m.full_id());
            out.push(row(&m, "catalog"));
        }
    }
    // 4. The default, wherever it comes from.
    if let Some(spec) = &default.spec {
        let id = config
            .resolve_model(spec)
            .map(|m| m.full_id())
            .unwrap_or_else(|_| spec.clone());
        match out.iter_mut().find(|r| r.id == id) {
            Some(r) => {
                r.default = true;
                r.default_from = Some(default.from.clone());
            }
            None => {
                if let Ok(m) = config.resolve_model(spec) {
                    let mut r = row(&m, "default");
                    r.default = true;
                    r.default_from = Some(default.from.clone());
                    out.insert(0, r);
                }
            }
        }
    }
    out
}

/// `troupe models`: a table (default marked `*`, then a line saying why) or JSON rows.
pub async fn print(
    config: &LoadedConfig,
    agents: &troupe_agents::AgentSet,
    json: bool,
    all: bool,
) -> Result<()> {
    let default = default_model(config, agents).await;
    let rows = rows(config, &default, all).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no models can run here yet: none is configured, no provider has a key, and no local server answers"
        );
    } else {
        println!(
            "  {:<46} {:>9} {:>8} {:>9} {:>9}  SOURCE",
            "MODEL", "CONTEXT", "OUTPUT", "$IN/1M", "$OUT/1M"
        );
    }
    let price = |p: &Option<Decimal>| p.map(|d| d.normalize().to_string()).unwrap_or("-".into());
    for r in &rows {
        println!(
            "{} {:<46} {:>9} {:>8} {:>9} {:>9}  {}",
            if r.default { "*" } else { " " },
            r.id,
            r.context,
            r.output,
            price(&r.input_cost),
            price(&r.output_cost),
            r.source
        );
    }
    println!();
    match &default.spec {
        Some(m) => println!("* default: {m} (from {})", default.from),
        None => println!("default model: {}", default.from),
    }
    if !all {
        println!("(troupe models --all lists every catalog model)");
    }
    Ok(())
}

/// The model lines of `troupe debug config`.
pub async fn debug_lines(config: &LoadedConfig, agents: &troupe_agents::AgentSet) -> Vec<String> {
    let default = default_model(config, agents).await;
    let Some(spec) = &default.spec else {
        return vec![format!("resolved model: {}", default.from)];
    };
    let mut cfg = config.clone();
    crate::local::apply_detected_limits(&mut cfg, spec).await;
    match cfg.resolve_model(spec) {
        Ok(m) => vec![
            format!("resolved model: {} (from {})", m.full_id(), default.from),
            format!(
                "  {} at {}, context {} tokens, output {} tokens{}",
                m.name,
                m.base_url,
                m.limits.context,
                m.limits.output,
                if cfg.detected_limits.is_empty() {
                    ""
                } else {
                    " (limits read from the server)"
                }
            ),
        ],
        Err(e) => vec![format!(
            "resolved model: {spec} (from {}): {e}",
            default.from
        )],
    }
}
