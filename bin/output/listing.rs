//! `troupe agent list` and `troupe debug config`: the agents and the resolved config, with
//! secrets redacted.

use super::*;

/// `troupe agent list`.
pub fn agent_list(agents: &troupe_agents::AgentSet, all: bool, json: bool) -> Result<()> {
    let list = agents.list(all);
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    println!("{:<14} {:<9} {:<32} DESCRIPTION", "NAME", "MODE", "MODEL");
    for a in list {
        let mut name = a.name.clone();
        if a.hidden {
            name.push_str(" (hidden)");
        }
        println!(
            "{:<14} {:<9} {:<32} {}",
            name,
            a.mode.as_str(),
            a.model.as_deref().unwrap_or("(session model)"),
            one_line(&a.description, 100)
        );
    }
    Ok(())
}

/// `troupe debug config`: the merged config, then the origin of each top-level key.
pub fn debug_config(config: &LoadedConfig) -> Result<()> {
    let mut shown = serde_json::to_value(&config.config)?;
    redact_config_secrets(&mut shown, false);
    println!("{}", serde_json::to_string_pretty(&shown)?);
    println!();
    println!("worktree: {}", config.worktree.display());
    for f in &config.sources {
        println!("source: {}", f.display());
    }
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&config.config) {
        for k in m.keys() {
            println!("{k}: {}", config.origin(k).unwrap_or("default"));
        }
    }
    Ok(())
}

/// Replaces secret values in a config printed for the user (`debug config`), so a pasted
/// bug report never carries a credential: every string under a `headers` or `environment`
/// object, and every string whose key names a credential (ends in `key`, `token`, `secret` or
/// `password`, or is `authorization`; any case, `_`/`-` ignored: `apiKey`, `accessToken`). A `{env:VAR}` / `{file:PATH}`
/// reference is kept: it names where the secret lives, not the secret. A redacted value reads
/// `<redacted: N chars>`.
pub fn redact_config_secrets(value: &mut serde_json::Value, secret: bool) {
    use serde_json::Value;
    match value {
        Value::String(s) if secret && !(s.starts_with("{env:") || s.starts_with("{file:")) => {
            *s = format!("<redacted: {} chars>", s.chars().count());
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| redact_config_secrets(v, secret)),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let key: String = k
                    .chars()
                    .filter(|c| *c != '_' && *c != '-')
                    .flat_map(char::to_lowercase)
                    .collect();
                let names_secret = ["apikey", "key", "token", "secret", "password"]
                    .iter()
                    .any(|w| key.ends_with(w))
                    || key == "authorization"
                    || key == "headers"
                    || key == "environment"
                    || key == "env";
                redact_config_secrets(v, secret || names_secret);
            }
        }
        _ => {}
    }
}
