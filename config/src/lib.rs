//! Configuration for troupe: `troupe.json(c)` loading and merging, the provider settings and the
//! embedded models.dev catalog, and `provider/model` resolution into a [`ResolvedModel`].
//!
//! ```no_run
//! let loaded = troupe_config::load(&troupe_config::LoadOptions::from_env(".")).unwrap();
//! let spec = loaded.default_model().unwrap_or_else(|| "local/default".into());
//! let model = loaded.resolve_model(&spec).unwrap();
//! println!("{} at {}", model.full_id(), model.base_url);
//! ```

pub mod model;

mod catalog;
mod error;
mod hooks;
mod jsonc;
mod keys;
mod load;
mod mcp;
mod resolve;
mod schema;
#[cfg(test)]
mod tests;

pub use catalog::{
    BUILTIN_PROVIDERS, BuiltinProvider, CATALOG_JSON, CatalogProvider, builtin_provider, catalog,
    parse_catalog, protocol_for_npm,
};
pub use error::ConfigError;
pub use hooks::{DEFAULT_HOOK_TIMEOUT_MS, HookCommand, HooksConfig};
pub use keys::{BUILTIN_PERMISSION_KEYS, find_key};
pub use load::{
    AUTH_FILE_NAME, CONFIG_FILE_NAMES, ENV_CONTENT_LABEL, LoadOptions, LoadedConfig, find_worktree,
    load, load_with_env, read_auth,
};
pub use mcp::{DEFAULT_MCP_TIMEOUT_MS, McpLocalConfig, McpRemoteConfig, McpServerConfig};
pub use model::*;
pub use resolve::{
    DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL, UNKNOWN_MODEL_CONTEXT, UNKNOWN_MODEL_OUTPUT,
};
pub use schema::{
    ClusterConfig, CompactionConfig, Config, CostConfig, LimitConfig, ModelConfig, PriceConfig,
    ProviderConfig, ProviderOptions, SupervisionConfig, TierConfig, TierSpec, Timeout,
};

use std::path::PathBuf;

/// What kind of JSON value `v` is, with its article, for error messages: `null`, `a
/// boolean`, `a number`, `a string`, `an array`, `an object`.
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The value of environment variable `name`, or `None` when it is unset, empty, only
/// whitespace or not UTF-8. Every `TROUPE_*` variable is read through this (or
/// [`env_path`]), so `TROUPE_DB=` means the same as no `TROUPE_DB` at all.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// [`env_var`] for paths: the raw OS value (need not be UTF-8), `None` when unset or empty.
pub fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty() && !v.to_string_lossy().trim().is_empty())
        .map(PathBuf::from)
}

/// A positive integer from environment variable `name`: `Ok(None)` when unset or empty, an
/// error naming the variable and the value when it is not a whole number.
pub fn env_u64(name: &str) -> Result<Option<u64>, String> {
    match env_var(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not a whole number")),
    }
}

fn env_dir(name: &str) -> Option<PathBuf> {
    env_path(name).filter(|p| p.is_absolute())
}

fn home() -> PathBuf {
    dirs::home_dir().unwrap_or_else(std::env::temp_dir)
}

/// Global config directory: `$TROUPE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/troupe`, else
/// `~/.config/troupe` (the XDG layout on every OS, like OpenCode's `~/.config/opencode`).
/// Relative env values are ignored (XDG spec); with no home directory, the temp dir stands in.
pub fn global_config_dir() -> PathBuf {
    if let Some(dir) = env_path("TROUPE_CONFIG_DIR") {
        return dir;
    }
    env_dir("XDG_CONFIG_HOME")
        .map(|d| d.join("troupe"))
        .unwrap_or_else(|| home().join(".config").join("troupe"))
}

/// Data directory (session store, logs): `$TROUPE_DATA_DIR`, else `$XDG_DATA_HOME/troupe`,
/// else `~/.local/share/troupe`.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = env_path("TROUPE_DATA_DIR") {
        return dir;
    }
    env_dir("XDG_DATA_HOME")
        .map(|d| d.join("troupe"))
        .unwrap_or_else(|| home().join(".local").join("share").join("troupe"))
}
