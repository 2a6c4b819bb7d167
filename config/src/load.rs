//! Finding, parsing, substituting and merging config sources.
//!
//! Merge order (later wins; objects deep-merged, arrays and scalars replaced), modelled on
//! OpenCode's `config/config.ts` loader:
//! 1. global: `<global_dir>/troupe.jsonc`, then `<global_dir>/troupe.json`;
//! 2. project: `troupe.jsonc` then `troupe.json` in every directory from the search root down
//!    to `cwd` (root first); the search root is the nearest ancestor of `cwd` (or `cwd`
//!    itself) containing `.git`, else the filesystem root (the *worktree* reported in
//!    [`LoadedConfig::worktree`] is then `cwd` itself, see [`find_worktree`]);
//! 3. `.troupe/troupe.jsonc` then `.troupe/troupe.json` in the same directories, root first;
//! 4. `TROUPE_CONFIG_CONTENT` (JSON(C) text; `{file:…}` relative to `cwd`).
//!
//! Inside string values, `{env:NAME}` becomes the variable's value (empty when unset) and
//! `{file:path}` the file's content with surrounding whitespace trimmed (path relative to the
//! config file's directory, `~/` = home; a missing file is an error). Substitution happens after
//! comments are stripped, so tokens inside comments are ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::ConfigError;
use crate::jsonc;
use crate::schema::{Config, KNOWN_TOP_LEVEL_KEYS};

/// Label used for the `TROUPE_CONFIG_CONTENT` source in errors and [`LoadedConfig::origin`].
pub const ENV_CONTENT_LABEL: &str = "TROUPE_CONFIG_CONTENT";

/// Config file names looked up in each directory, in load order (`.json` wins over `.jsonc`).
pub const CONFIG_FILE_NAMES: &[&str] = &["troupe.jsonc", "troupe.json"];

/// Where to look for config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Working directory the project search starts from.
    pub cwd: PathBuf,
    /// Global config directory; `None` skips global config (tests). [`LoadOptions::from_env`]
    /// sets it to [`crate::global_config_dir`].
    pub global_dir: Option<PathBuf>,
    /// JSON(C) text applied last (normally the `TROUPE_CONFIG_CONTENT` env var).
    pub env_content: Option<String>,
}

impl LoadOptions {
    /// Options from the process environment: global dir from `TROUPE_CONFIG_DIR` /
    /// `XDG_CONFIG_HOME` / `~/.config/troupe`, content from `TROUPE_CONFIG_CONTENT`.
    pub fn from_env(cwd: impl Into<PathBuf>) -> LoadOptions {
        LoadOptions {
            cwd: cwd.into(),
            global_dir: Some(crate::global_config_dir()),
            env_content: crate::env_var(ENV_CONTENT_LABEL),
        }
    }

    /// Options that read only project files under `cwd` (no global dir, no env content).
    pub fn isolated(cwd: impl Into<PathBuf>) -> LoadOptions {
        LoadOptions {
            cwd: cwd.into(),
            global_dir: None,
            env_content: None,
        }
    }
}

/// The merged config plus where it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedConfig {
    /// Merged config.
    pub config: Config,
    /// Config files that were read, in merge order (the env content is not a file and is not
    /// listed; see [`LoadedConfig::origin`]).
    pub sources: Vec<PathBuf>,
    /// The [`ENV_CONTENT_LABEL`] text that was applied after the files, if any: errors found
    /// after loading (an agent's field) point into it as `TROUPE_CONFIG_CONTENT:line:col`.
    pub env_content: Option<String>,
    /// Worktree root (project root): nearest ancestor of `cwd` with `.git`, else `cwd`
    /// itself (see [`find_worktree`]).
    pub worktree: PathBuf,
    /// Top-level key → label of the last source that set it (file path, or
    /// [`ENV_CONTENT_LABEL`]).
    pub origins: BTreeMap<String, String>,
    /// Token limits read from the server itself (llama.cpp `GET /props`, `/v1/models`
    /// metadata) by `provider/model`. Used for a model no config or catalog gives limits to,
    /// instead of the [`crate::UNKNOWN_MODEL_CONTEXT`] / [`crate::UNKNOWN_MODEL_OUTPUT`]
    /// guesses; configured limits win. Filled by the CLI, empty after [`load`].
    pub detected_limits: BTreeMap<String, crate::model::ModelLimits>,
    /// API keys stored by `troupe auth login` (`<global dir>/auth.json`), by provider id; used
    /// after the config's `apiKey` and the provider's key variables.
    pub auth: BTreeMap<String, String>,
    /// Things worth a warning that are not errors, one sentence each with file:line:column:
    /// an `{env:NAME}` whose variable is unset or empty (it becomes an empty string); a
    /// `permission` key that is no built-in permission and no configured MCP server's tool
    /// (a typo such as `bsh` would make its rule do nothing).
    pub warnings: Vec<String>,
}

impl LoadedConfig {
    /// Wraps an already-built `Config` (no sources; worktree = current dir or empty).
    pub fn from_config(config: Config) -> LoadedConfig {
        LoadedConfig {
            config,
            sources: Vec::new(),
            env_content: None,
            worktree: std::env::current_dir().unwrap_or_default(),
            origins: BTreeMap::new(),
            detected_limits: BTreeMap::new(),
            auth: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Label of the last source that set top-level `key` (a file path or
    /// `TROUPE_CONFIG_CONTENT`), `None` when no source set it (built-in default).
    pub fn origin(&self, key: &str) -> Option<&str> {
        self.origins.get(key).map(String::as_str)
    }
}

/// Loads and merges every config source; env vars come from the process environment.
pub fn load(opts: &LoadOptions) -> Result<LoadedConfig, ConfigError> {
    load_with_env(opts, &|name| std::env::var(name).ok())
}

/// [`load`] with `{env:NAME}` values looked up through `env` (for tests and embedding).
pub fn load_with_env(
    opts: &LoadOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let cwd = absolute(&opts.cwd);
    let git_root = find_git_root(&cwd);
    let worktree = git_root.clone().unwrap_or_else(|| cwd.clone());
    // Directories from the search root (git root, else the filesystem root) down to cwd.
    let mut dirs: Vec<&Path> = Vec::new();
    for dir in cwd.ancestors() {
        dirs.push(dir);
        if git_root.as_deref() == Some(dir) {
            break;
        }
    }
    dirs.reverse();

    let mut files: Vec<PathBuf> = Vec::new();
    if let Some(global) = &opts.global_dir {
        files.extend(CONFIG_FILE_NAMES.iter().map(|n| global.join(n)));
    }
    for dir in &dirs {
        files.extend(CONFIG_FILE_NAMES.iter().map(|n| dir.join(n)));
    }
    for dir in &dirs {
        files.extend(
            CONFIG_FILE_NAMES
                .iter()
                .map(|n| dir.join(".troupe").join(n)),
        );
    }

    let mut merged = Value::Object(Map::new());
    let mut origins = BTreeMap::new();
    let mut sources: Vec<PathBuf> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut permission_keys = Vec::new();
    for file in files {
        if !file.is_file() || sources.contains(&file) {
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Io {
            path: file.clone(),
            source,
        })?;
        let label = file.display().to_string();
        let map = parse_document(&label, &text, file.parent(), env)?;
        unset_env_warnings(&label, &text, env, &mut warnings);
        permission_keys.extend(crate::keys::permission_keys(&label, &jsonc::to_json(&text)));
        apply(&mut merged, &mut origins, &label, map);
        sources.push(file);
    }
    if let Some(content) = &opts.env_content {
        let map = parse_document(ENV_CONTENT_LABEL, content, Some(&cwd), env)?;
        unset_env_warnings(ENV_CONTENT_LABEL, content, env, &mut warnings);
        permission_keys.extend(crate::keys::permission_keys(
            ENV_CONTENT_LABEL,
            &jsonc::to_json(content),
        ));
        apply(&mut merged, &mut origins, ENV_CONTENT_LABEL, map);
    }

    // `merged` starts as an object and merging objects into it keeps it one.
    let map = match merged {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let config = config_from_map("merged config", map)?;
    // MCP servers of any source count: one file may name a server another configures.
    let servers: Vec<&str> = config.mcp.keys().map(String::as_str).collect();
    warnings.extend(
        permission_keys
            .iter()
            .filter_map(|k| crate::keys::unknown_permission_warning(k, &servers)),
    );
    let auth = match &opts.global_dir {
        Some(dir) => read_auth(&dir.join(AUTH_FILE_NAME))?,
        None => BTreeMap::new(),
    };
    Ok(LoadedConfig {
        config,
        sources,
        env_content: opts.env_content.clone(),
        worktree,
        origins,
        detected_limits: BTreeMap::new(),
        auth,
        warnings,
    })
}

/// One warning per `{env:NAME}` in `text` (comments aside) whose variable is unset or empty:
/// `troupe.json:3:20: {env:MY_KEY}: MY_KEY is not set, so the value is empty`.
fn unset_env_warnings(
    label: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<String>,
) {
    let json = jsonc::to_json(text);
    for cap in TOKEN.captures_iter(&json) {
        let (Some(whole), Some(kind), Some(arg)) = (cap.get(0), cap.get(1), cap.get(2)) else {
            continue;
        };
        let name = arg.as_str().trim();
        if kind.as_str() != "env" || env(name).is_some_and(|v| !v.is_empty()) {
            continue;
        }
        let (line, column) = jsonc::line_col(&json, whole.start());
        out.push(format!(
            "{label}:{line}:{column}: {}: {name} is not set, so the value is empty",
            whole.as_str()
        ));
    }
}

/// File in the global config directory holding the keys of `troupe auth login`:
/// `{"<provider>": {"type": "api", "key": "…"}}` (OpenCode's `auth.json` shape), mode 0600.
pub const AUTH_FILE_NAME: &str = "auth.json";

/// Reads an auth file: provider id → key. A missing file is empty; a file that is not that
/// shape is an error naming it.
pub fn read_auth(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(ConfigError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let label = path.display().to_string();
    let v: Value = serde_json::from_str(&text).map_err(|e| syntax_error(&label, &e))?;
    let Value::Object(map) = v else {
        return Err(ConfigError::Syntax {
            file: label,
            line: 1,
            column: 1,
            message: "expected an object of providers".to_owned(),
        });
    };
    let mut out = BTreeMap::new();
    for (provider, entry) in map {
        match entry.get("key").and_then(Value::as_str) {
            Some(k) if !k.trim().is_empty() => {
                out.insert(provider, k.trim().to_owned());
            }
            _ => {
                return Err(ConfigError::Type {
                    file: label,
                    line: 0,
                    column: 0,
                    path: format!("{provider}.key"),
                    message: "expected a non-empty string".to_owned(),
                });
            }
        }
    }
    Ok(out)
}

fn apply(
    merged: &mut Value,
    origins: &mut BTreeMap<String, String>,
    label: &str,
    map: Map<String, Value>,
) {
    for key in map.keys() {
        origins.insert(key.clone(), label.to_owned());
    }
    deep_merge(merged, Value::Object(map));
}

/// Deep merge: objects merge key by key; anything else in `src` replaces `dst`.
pub(crate) fn deep_merge(dst: &mut Value, src: Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(&k) {
                    Some(existing) => deep_merge(existing, v),
                    None => {
                        d.insert(k, v);
                    }
                }
            }
        }
        (dst, src) => *dst = src,
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Project root of `cwd`: the nearest ancestor of `cwd` (inclusive) containing `.git` (dir or
/// file, so linked worktrees and submodules count), else `cwd` itself: the root of a non-git
/// directory is the directory. Config discovery still walks up to the filesystem root in that
/// case (see the module docs).
pub fn find_worktree(cwd: &Path) -> PathBuf {
    find_git_root(cwd).unwrap_or_else(|| cwd.to_path_buf())
}

/// Nearest ancestor of `cwd` (inclusive) containing `.git`, or `None`.
fn find_git_root(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
}

fn strip_position(msg: String, line: usize, column: usize) -> String {
    let suffix = format!(" at line {line} column {column}");
    match msg.strip_suffix(&suffix) {
        Some(m) => m.to_owned(),
        None => msg,
    }
}

/// A serde_json syntax error as [`ConfigError::Syntax`]. serde_json says column 0 for a
/// position before a line's first character (the end of a file after its last newline);
/// columns count from 1 like everywhere else, so that is column 1.
fn syntax_error(label: &str, e: &serde_json::Error) -> ConfigError {
    ConfigError::Syntax {
        file: label.to_owned(),
        line: e.line(),
        column: e.column().max(1),
        message: strip_position(e.to_string(), e.line(), e.column()),
    }
}

/// Parses one source: JSONC → JSON, syntax check, type check with key paths, substitution.
pub(crate) fn parse_document(
    label: &str,
    text: &str,
    base_dir: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Map<String, Value>, ConfigError> {
    let json = jsonc::to_json(text);
    if json.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: Value = serde_json::from_str(&json).map_err(|e| syntax_error(label, &e))?;
    let Value::Object(mut map) = value else {
        let start = json.len() - json.trim_start().len();
        let (line, column) = jsonc::line_col(&json, start);
        return Err(ConfigError::Syntax {
            file: label.to_owned(),
            line,
            column,
            message: "expected an object at the top level".to_owned(),
        });
    };
    // Type check against the schema on the text itself, so errors carry line:column.
    let mut de = serde_json::Deserializer::from_str(&json);
    if let Err(e) = serde_path_to_error::deserialize::<_, Config>(&mut de) {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = (inner.line(), inner.column());
        return Err(ConfigError::Type {
            file: label.to_owned(),
            line,
            column,
            path,
            message: strip_position(inner.to_string(), line, column),
        });
    }
    crate::keys::check_unknown_keys(label, &json)?;
    for value in map.values_mut() {
        substitute(value, label, &json, base_dir, env)?;
    }
    Ok(map)
}

/// Deserializes a merged map into `Config` and fills `extra` with unknown top-level keys.
pub(crate) fn config_from_map(label: &str, map: Map<String, Value>) -> Result<Config, ConfigError> {
    let extra: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| !KNOWN_TOP_LEVEL_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut config: Config =
        serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| ConfigError::Type {
            file: label.to_owned(),
            line: 0,
            column: 0,
            path: e.path().to_string(),
            message: e.into_inner().to_string(),
        })?;
    config.extra = extra;
    Ok(config)
}

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    // A literal pattern; it is covered by tests, so construction cannot fail at runtime.
    Regex::new(r"\{(env|file):([^}]*)\}").unwrap_or_else(|e| panic!("bad token regex: {e}"))
});

fn substitute(
    value: &mut Value,
    label: &str,
    json: &str,
    base_dir: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match value {
        Value::String(s) if s.contains('{') => {
            *s = substitute_str(s, label, json, base_dir, env)?;
        }
        Value::Array(items) => {
            for v in items {
                substitute(v, label, json, base_dir, env)?;
            }
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                substitute(v, label, json, base_dir, env)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn substitute_str(
    s: &str,
    label: &str,
    json: &str,
    base_dir: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for cap in TOKEN.captures_iter(s) {
        let (Some(whole), Some(kind), Some(arg)) = (cap.get(0), cap.get(1), cap.get(2)) else {
            continue;
        };
        out.push_str(&s[last..whole.start()]);
        last = whole.end();
        let arg = arg.as_str().trim();
        if kind.as_str() == "env" {
            out.push_str(&env(arg).unwrap_or_default());
            continue;
        }
        let path = resolve_file_path(arg, base_dir);
        match std::fs::read_to_string(&path) {
            Ok(content) => out.push_str(content.trim()),
            Err(err) => {
                let offset = json.find(whole.as_str()).unwrap_or(0);
                let (line, column) = jsonc::line_col(json, offset);
                return Err(ConfigError::Substitution {
                    file: label.to_owned(),
                    line,
                    column,
                    message: format!("{}: cannot read {}: {err}", whole.as_str(), path.display()),
                });
            }
        }
    }
    out.push_str(&s[last..]);
    Ok(out)
}

fn resolve_file_path(arg: &str, base_dir: Option<&Path>) -> PathBuf {
    if let Some(rest) = arg.strip_prefix("~/")
        && let Some(home) = dirs::home_dir()
    {
        return home.join(rest);
    }
    let p = Path::new(arg);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match base_dir {
        Some(dir) => dir.join(p),
        None => absolute(p),
    }
}

#[cfg(test)]
mod worktree_tests {
    use super::*;

    /// True when some ancestor of `dir` has a `.git` (then the "no git" cases can't be
    /// observed on this machine).
    fn inside_git(dir: &Path) -> bool {
        find_git_root(dir).is_some()
    }

    #[test]
    fn non_git_directory_is_its_own_worktree() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let deep = tmp.path().join("a").join("b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        if inside_git(&deep) {
            return;
        }
        assert_eq!(find_worktree(&deep), deep);
        assert_ne!(find_worktree(&deep), PathBuf::from("/"));
    }

    #[test]
    fn git_root_wins_and_gitfile_counts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("repo");
        let deep = root.join("x").join("y");
        std::fs::create_dir_all(&deep).expect("mkdir");
        // A linked worktree has a `.git` *file*.
        std::fs::write(root.join(".git"), "gitdir: /elsewhere\n").expect("write");
        assert_eq!(find_worktree(&deep), root);
        assert_eq!(find_worktree(&root), root);
    }

    #[test]
    fn non_git_config_discovery_still_walks_up() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let deep = tmp.path().join("a").join("b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        if inside_git(&deep) {
            return;
        }
        let parent_cfg = tmp.path().join("a").join("troupe.json");
        std::fs::write(&parent_cfg, r#"{"model": "p/m"}"#).expect("write");
        let loaded = load_with_env(
            &LoadOptions {
                cwd: deep.clone(),
                global_dir: None,
                env_content: None,
            },
            &|_| None,
        )
        .expect("load");
        assert_eq!(loaded.worktree, deep);
        assert!(loaded.sources.contains(&parent_cfg), "{:?}", loaded.sources);
        assert_eq!(loaded.config.model.as_deref(), Some("p/m"));
    }
}
