//! `troupe stats`: token and cost totals per session, model and day.

use super::*;

/// Usage totals of one group (session, model or day).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct UsageRow {
    /// Group key.
    pub key: String,
    /// Directory of the session (rows grouped by session only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Assistant messages (steps).
    pub steps: u64,
    /// Tokens by category.
    pub tokens: troupe_session::Tokens,
    /// Cost, USD (decimal sum).
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: rust_decimal::Decimal,
}

/// `troupe stats`: tokens and cost per session, per model and per day (UTC), summed in
/// decimal from the stored assistant messages.
pub async fn stats(store: &Store, json: bool, dir: Option<&std::path::Path>) -> Result<()> {
    use std::collections::BTreeMap;
    let msgs = store
        .read(|r| r.assistant_messages())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    // Session id → directory, for the directory column and the --dir filter.
    let dirs: std::collections::HashMap<troupe_session::SessionId, String> = store
        .read(|r| r.sessions(usize::MAX, false))
        .await
        .map_err(|e| anyhow!("{e}"))?
        .into_iter()
        .map(|s| (s.id, s.directory))
        .collect();
    let msgs: Vec<_> = msgs
        .into_iter()
        .filter(|a| dir.is_none() || dirs.get(&a.session_id).is_some_and(|d| in_dir(d, dir)))
        .collect();
    let mut by: [BTreeMap<String, UsageRow>; 3] = Default::default();
    let mut total = UsageRow {
        key: "total".into(),
        ..Default::default()
    };
    for a in &msgs {
        let day = troupe_session::iso_time(a.time.created)
            .get(..10)
            .unwrap_or("")
            .to_string();
        let keys = [
            a.session_id.to_string(),
            format!("{}/{}", a.provider_id, a.model_id),
            day,
        ];
        for (map, key) in by.iter_mut().zip(keys) {
            let row = map.entry(key.clone()).or_insert_with(|| UsageRow {
                key,
                ..Default::default()
            });
            if row.directory.is_none() && row.key == a.session_id {
                row.directory = dirs.get(&a.session_id).cloned();
            }
            row.steps += 1;
            row.tokens.add(&a.tokens);
            row.cost += a.cost;
        }
        total.steps += 1;
        total.tokens.add(&a.tokens);
        total.cost += a.cost;
    }
    let [sessions, models, days] = by;
    if json {
        let doc = serde_json::json!({
            "sessions": sessions.into_values().collect::<Vec<_>>(),
            "models": models.into_values().collect::<Vec<_>>(),
            "days": days.into_values().collect::<Vec<_>>(),
            "total": total,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    for (title, map) in [("session", &sessions), ("model", &models), ("day", &days)] {
        println!(
            "{:<40} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  COST ${}",
            title.to_uppercase(),
            "STEPS",
            "INPUT",
            "OUTPUT",
            "REASON",
            "CACHE R",
            "CACHE W",
            if title == "session" {
                "       DIRECTORY"
            } else {
                ""
            }
        );
        for r in map.values() {
            print_usage_row(r);
        }
        println!();
    }
    print_usage_row(&total);
    Ok(())
}

pub(super) fn print_usage_row(r: &UsageRow) {
    println!(
        "{:<40} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  ${:<11}{}",
        r.key,
        r.steps,
        r.tokens.input,
        r.tokens.output,
        r.tokens.reasoning,
        r.tokens.cache.read,
        r.tokens.cache.write,
        r.cost.round_dp(6),
        r.directory
            .as_deref()
            .map(|d| format!("  {d}"))
            .unwrap_or_default()
    );
}
