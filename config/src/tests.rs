//! Loader and resolver tests against temp directories (never the real home).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use rust_decimal::Decimal;
use serde_json::json;

use crate::*;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    global: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("repo");
    let global = tmp.path().join("global");
    fs::create_dir_all(root.join(".git")).expect("mkdir");
    fs::create_dir_all(&global).expect("mkdir");
    Fixture {
        _tmp: tmp,
        root,
        global,
    }
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("mkdir");
    }
    fs::write(path, text).expect("write");
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn load_str(text: &str) -> LoadedConfig {
    let f = fixture();
    write(&f.root.join("troupe.json"), text);
    load_with_env(&LoadOptions::isolated(&f.root), &no_env).expect("load")
}

fn load_err(name: &str, text: &str) -> String {
    let f = fixture();
    write(&f.root.join(name), text);
    load_with_env(&LoadOptions::isolated(&f.root), &no_env)
        .expect_err("should fail")
        .to_string()
}

// ---------------------------------------------------------------- merge order

#[test]
fn merge_order_global_project_dot_troupe_env() {
    let f = fixture();
    let sub = f.root.join("a").join("b");
    fs::create_dir_all(&sub).expect("mkdir");
    write(
        &f.global.join("troupe.json"),
        r#"{"model": "g/1", "small_model": "g/small", "instructions": ["x", "y"],
            "provider": {"mock": {"options": {"baseURL": "http://g", "apiKey": "gk"}}},
            "theme": "dark"}"#,
    );
    write(
        &f.root.join("troupe.json"),
        r#"{"model": "root/1", "instructions": ["z"],
            "provider": {"mock": {"options": {"baseURL": "http://root"}}}}"#,
    );
    write(
        &f.root.join("a").join("troupe.jsonc"),
        r#"{"model": "a/jsonc"}"#,
    );
    write(
        &f.root.join("a").join("troupe.json"),
        r#"{"model": "a/json"}"#,
    );
    write(&sub.join("troupe.json"), r#"{"default_agent": "sub"}"#);
    write(
        &f.root.join(".troupe").join("troupe.json"),
        r#"{"default_agent": "dot"}"#,
    );
    let opts = LoadOptions {
        cwd: sub.clone(),
        global_dir: Some(f.global.clone()),
        env_content: Some(r#"{"small_model": "env/small"}"#.to_owned()),
    };
    let loaded = load_with_env(&opts, &no_env).expect("load");
    let c = &loaded.config;
    assert_eq!(
        c.model.as_deref(),
        Some("a/json"),
        "json wins over jsonc; deeper dir wins"
    );
    assert_eq!(
        c.default_agent.as_deref(),
        Some("dot"),
        ".troupe wins over project files"
    );
    assert_eq!(
        c.small_model.as_deref(),
        Some("env/small"),
        "env content wins"
    );
    assert_eq!(c.instructions, vec!["z".to_owned()], "arrays are replaced");
    let mock = &c.provider["mock"].options;
    assert_eq!(mock.base_url.as_deref(), Some("http://root"));
    assert_eq!(
        mock.api_key.as_deref(),
        Some("gk"),
        "objects are deep-merged"
    );
    assert_eq!(
        c.extra.get("theme"),
        Some(&json!("dark")),
        "unknown keys kept"
    );
    assert_eq!(loaded.worktree, f.root);
    assert_eq!(
        loaded.sources,
        vec![
            f.global.join("troupe.json"),
            f.root.join("troupe.json"),
            f.root.join("a").join("troupe.jsonc"),
            f.root.join("a").join("troupe.json"),
            sub.join("troupe.json"),
            f.root.join(".troupe").join("troupe.json"),
        ]
    );
    let a_json = f.root.join("a").join("troupe.json").display().to_string();
    assert_eq!(loaded.origin("model"), Some(a_json.as_str()));
    assert_eq!(loaded.origin("small_model"), Some(ENV_CONTENT_LABEL));
    let global = f.global.join("troupe.json").display().to_string();
    assert_eq!(loaded.origin("theme"), Some(global.as_str()));
    assert_eq!(loaded.origin("permission"), None);
}

#[test]
fn project_search_stops_at_worktree_root() {
    let f = fixture();
    // A config above the worktree root must not be read.
    write(
        &f.root.parent().expect("parent").join("troupe.json"),
        r#"{"model": "outside/x"}"#,
    );
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &no_env).expect("load");
    assert_eq!(loaded.config.model, None);
    assert!(loaded.sources.is_empty());
}

#[test]
fn defaults_when_nothing_configured() {
    let f = fixture();
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &no_env).expect("load");
    assert!(loaded.config.compaction.auto);
    assert!(loaded.config.compaction.prune);
    assert_eq!(loaded.config.compaction.reserved, None);
}

// ---------------------------------------------------------------- JSONC, substitution

#[test]
fn jsonc_comments_and_trailing_commas() {
    let f = fixture();
    write(
        &f.root.join("troupe.jsonc"),
        "{\n  // the model\n  \"model\": \"mock/m\", /* block\n comment */\n  \"instructions\": [\"a\", \"b\",],\n  \"compaction\": {\"reserved\": 5000,},\n}\n",
    );
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &no_env).expect("load");
    assert_eq!(loaded.config.model.as_deref(), Some("mock/m"));
    assert_eq!(loaded.config.instructions, vec!["a", "b"]);
    assert_eq!(loaded.config.compaction.reserved, Some(5000));
    assert!(loaded.config.compaction.auto);
}

#[test]
fn env_and_file_substitution() {
    let f = fixture();
    write(&f.root.join("secrets").join("key.txt"), "  file-secret\n");
    write(
        &f.root.join("troupe.json"),
        r#"{
  // {file:does-not-exist} inside a comment is ignored
  "model": "{env:TROUPE_T_MODEL}",
  "small_model": "pre-{env:TROUPE_T_MISSING}-post",
  "provider": {"mock": {"options": {"apiKey": "{file:secrets/key.txt}", "baseURL": "http://x"}}}
}"#,
    );
    let env = env_of(&[("TROUPE_T_MODEL", "mock/from-env")]);
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &env).expect("load");
    assert_eq!(loaded.config.model.as_deref(), Some("mock/from-env"));
    assert_eq!(
        loaded.config.small_model.as_deref(),
        Some("pre--post"),
        "missing env → empty"
    );
    assert_eq!(
        loaded.config.provider["mock"].options.api_key.as_deref(),
        Some("file-secret")
    );
}

#[test]
fn missing_substituted_file_is_an_error_with_position() {
    let err = load_err(
        "troupe.json",
        "{\n  \"model\": \"x\",\n  \"small_model\": \"{file:nope.txt}\"\n}",
    );
    assert!(err.contains("troupe.json:3:19:"), "{err}");
    assert!(err.contains("{file:nope.txt}"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn env_content_file_paths_are_relative_to_cwd() {
    let f = fixture();
    write(&f.root.join("p.txt"), "prompt");
    let opts = LoadOptions {
        cwd: f.root.clone(),
        global_dir: None,
        env_content: Some(r#"{"default_agent": "{file:p.txt}"}"#.to_owned()),
    };
    let loaded = load_with_env(&opts, &no_env).expect("load");
    assert_eq!(loaded.config.default_agent.as_deref(), Some("prompt"));
}

// ---------------------------------------------------------------- errors

#[test]
fn syntax_error_names_file_line_column() {
    let err = load_err(
        "troupe.json",
        "{\n  \"model\": \"a\"\n  \"small_model\": \"b\"\n}",
    );
    assert!(
        err.contains("troupe.json:3:3: invalid JSON: expected `,` or `}`"),
        "{err}"
    );
    let err = load_err("troupe.json", "{\"model\": \"a\"}\n\n\n\n}");
    assert!(
        err.contains("troupe.json:5:1: invalid JSON: trailing characters"),
        "{err}"
    );
    assert!(!err.contains("at line"), "{err}");
}

/// Trial on main: an unterminated file said `troupe.json:4:0:`; columns count from 1.
#[test]
fn unterminated_file_reports_column_one() {
    let err = load_err("troupe.json", "{\n  \"model\": \"a/b\"\n, \"x\": {\n");
    assert!(
        err.contains("troupe.json:4:1: invalid JSON: EOF while parsing an object"),
        "{err}"
    );
}

/// Trial on main: `"permission": {"bsh": "deny"}` loaded without a word, so the intended
/// deny did nothing. Unknown permission keys warn with their place and the nearest built-in;
/// wildcards, built-ins and configured MCP servers' tools do not.
#[test]
fn unknown_permission_key_warns() {
    let loaded = load_str(
        r#"{
  "permission": {"bsh": "deny", "bash": "ask", "edit": {"*": "ask"}, "mytools_*": "deny",
                 "docs_search": "ask", "zzzzqqqq": "deny"},
  "agent": {"build": {"permission": {"webfetc": "deny"}}},
  "mcp": {"docs": {"type": "remote", "url": "http://127.0.0.1:1/mcp"}}
}"#,
    );
    let w: Vec<&str> = loaded
        .warnings
        .iter()
        .map(|w| w.rsplit_once("troupe.json:").map_or(w.as_str(), |(_, r)| r))
        .collect();
    assert_eq!(
        w,
        vec![
            "2:18: permission.bsh: no built-in permission or configured tool has this name; \
             did you mean bash?",
            "3:40: permission.zzzzqqqq: no built-in permission or configured tool has this name \
             (a rule for a tool that does not exist never applies)",
            "4:38: agent.build.permission.webfetc: no built-in permission or configured tool has \
             this name; did you mean webfetch?",
        ]
    );
}

#[test]
fn syntax_error_line_after_block_comment() {
    let err = load_err("troupe.jsonc", "{\n/*\n\n\n*/\n  \"model\": x\n}");
    assert!(err.contains("troupe.jsonc:6:12: invalid JSON"), "{err}");
}

#[test]
fn type_error_names_key_path() {
    let err = load_err(
        "troupe.json",
        "{\n  \"provider\": {\n    \"mock\": {\"options\": {\"baseURL\": 5}}\n  }\n}",
    );
    assert!(err.contains("troupe.json:3:"), "{err}");
    assert!(
        err.ends_with("expected a string at provider.mock.options.baseURL"),
        "{err}"
    );
    assert!(!err.contains('\n'));
}

#[test]
fn compaction_auto_wrong_type() {
    let err = load_err("troupe.json", "{\n  \"compaction\": {\"auto\": \"yes\"}\n}");
    assert!(err.contains("troupe.json:2:"), "{err}");
    assert!(
        err.contains("expected a boolean at compaction.auto"),
        "{err}"
    );
}

#[test]
fn nested_model_type_error() {
    let err = load_err(
        "troupe.json",
        r#"{"provider": {"m": {"models": {"x": {"limit": {"context": "big"}}}}}}"#,
    );
    assert!(
        err.contains("at provider.m.models.x.limit.context"),
        "{err}"
    );
    let err = load_err(
        "troupe.json",
        r#"{"provider": {"m": {"options": {"timeout": true}}}}"#,
    );
    assert!(
        err.contains("milliseconds or false at provider.m.options.timeout"),
        "{err}"
    );
}

#[test]
fn top_level_must_be_object_and_empty_file_is_fine() {
    let err = load_err("troupe.json", "\n  [1]");
    assert!(
        err.contains("troupe.json:2:3: invalid JSON: expected an object"),
        "{err}"
    );
    let loaded = load_str("  \n");
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn env_content_errors_are_labelled() {
    let f = fixture();
    let opts = LoadOptions {
        cwd: f.root.clone(),
        global_dir: None,
        env_content: Some("{\"model\": 1}".to_owned()),
    };
    let err = load_with_env(&opts, &no_env)
        .expect_err("fails")
        .to_string();
    assert!(err.starts_with("TROUPE_CONFIG_CONTENT:1:"), "{err}");
    assert!(err.ends_with("at model"), "{err}");
}

// ---------------------------------------------------------------- resolve

const MOCK: &str = r#"{
  "model": "mock/mock-model",
  "provider": {
    "mock": {
      "name": "Mock",
      "npm": "@ai-sdk/openai-compatible",
      "env": ["MOCK_KEY"],
      "options": {"baseURL": "http://127.0.0.1:8765/v1/", "headers": {"X-A": "1"},
                  "timeout": 1000, "chunkTimeout": 500, "store": false},
      "models": {
        "mock-model": {"name": "Mock Model", "limit": {"context": 1000, "output": 100},
                       "cost": {"input": 1.0, "output": 2.0}, "options": {"top_k": 3},
                       "headers": {"x-a": "2"}},
        "mock-other": {"id": "wire-other"}
      }
    }
  }
}"#;

#[test]
fn user_provider_resolves() {
    let loaded = load_str(MOCK);
    let env = env_of(&[("MOCK_KEY", "k1")]);
    let m = loaded
        .resolve_model_with_env("mock/mock-model", &env)
        .expect("resolve");
    assert_eq!(m.provider_id, "mock");
    assert_eq!(m.model_id, "mock-model");
    assert_eq!(m.name, "Mock Model");
    assert_eq!(m.protocol, Protocol::OpenaiChat);
    assert_eq!(m.base_url, "http://127.0.0.1:8765/v1");
    assert_eq!(m.api_key.as_deref(), Some("k1"));
    assert_eq!(m.headers, vec![("x-a".to_owned(), "2".to_owned())]);
    assert_eq!(
        m.options,
        json!({"chunkTimeout": 500, "store": false, "top_k": 3, "timeout": 1000})
            .as_object()
            .cloned()
            .expect("obj")
    );
    assert_eq!(
        m.limits,
        ModelLimits {
            context: 1000,
            input: None,
            output: 100
        }
    );
    let cost = m.cost.expect("cost");
    assert_eq!(cost.base.input, Decimal::ONE);
    assert_eq!(cost.base.output, Decimal::TWO);
    assert!(!m.unknown);
    assert!(m.tool_call && m.temperature && !m.reasoning);
    assert_eq!(loaded.provider_timeout("mock"), Some(Timeout::Millis(1000)));

    let other = loaded
        .resolve_model_with_env("mock/mock-other", &no_env)
        .expect("resolve");
    assert_eq!(other.model_id, "wire-other");
    assert_eq!(other.api_key, None);
    assert_eq!(other.limits.context, UNKNOWN_MODEL_CONTEXT);
    assert_eq!(other.cost, None);
}

#[test]
fn explicit_models_miss_suggests() {
    let loaded = load_str(MOCK);
    let err = loaded
        .resolve_model_with_env("mock/mock-modle", &no_env)
        .expect_err("miss")
        .to_string();
    assert_eq!(
        err,
        "model not found: mock/mock-modle. Did you mean mock/mock-model?"
    );
    let err = loaded
        .resolve_model_with_env("mock/zzzzzzzzzzzzzz", &no_env)
        .expect_err("miss")
        .to_string();
    assert!(err.contains("Available: mock-model, mock-other"), "{err}");
}

#[test]
fn catalog_hit_with_prices_and_key_from_env() {
    let loaded = load_str("{}");
    let env = env_of(&[("ANTHROPIC_API_KEY", "sk-ant")]);
    let m = loaded
        .resolve_model_with_env("anthropic/claude-sonnet-4-5", &env)
        .expect("resolve");
    assert_eq!(m.protocol, Protocol::AnthropicMessages);
    assert_eq!(m.base_url, "https://api.anthropic.com/v1");
    assert_eq!(m.api_key.as_deref(), Some("sk-ant"));
    assert_eq!(
        m.limits,
        ModelLimits {
            context: 200_000,
            input: None,
            output: 64_000
        }
    );
    let cost = m.cost.expect("cost");
    assert_eq!(cost.base.input, Decimal::new(3, 0));
    assert_eq!(cost.base.output, Decimal::new(15, 0));
    assert_eq!(cost.base.cache_read, Decimal::new(3, 1));
    assert_eq!(cost.base.cache_write, Decimal::new(375, 2));
    assert!(cost.tiers.is_empty());
    assert!(m.reasoning && m.tool_call && !m.unknown);

    let g = loaded
        .resolve_model_with_env(
            "google/gemini-2.5-pro",
            &env_of(&[("GEMINI_API_KEY", "gk")]),
        )
        .expect("g");
    assert_eq!(g.api_key.as_deref(), Some("gk"));
    assert_eq!(
        g.base_url,
        "https://generativelanguage.googleapis.com/v1beta/openai"
    );
    let tiers = g.cost.expect("cost").tiers;
    assert_eq!(tiers.len(), 1);
    assert_eq!(tiers[0].size, 200_000);
    assert_eq!(tiers[0].prices.input, Decimal::new(25, 1));
    assert_eq!(tiers[0].prices.output, Decimal::new(15, 0));

    let d = loaded
        .resolve_model_with_env("deepseek/deepseek-chat", &no_env)
        .expect("d");
    assert_eq!(d.base_url, "https://api.deepseek.com/v1");
    assert_eq!(d.cost.expect("cost").base.cache_read, Decimal::new(28, 4));

    let o = loaded
        .resolve_model_with_env("openai/gpt-5", &no_env)
        .expect("o");
    assert_eq!(o.limits.input, Some(272_000));
    assert!(!o.temperature);
}

#[test]
fn user_fields_override_catalog() {
    let loaded = load_str(
        r#"{"provider": {"openai": {"options": {"apiKey": "{env:MY_OPENAI}", "baseURL": "http://proxy/v1"},
            "models": {"gpt-4o": {"limit": {"context": 5000}, "cost": {"input": 9}}}}}}"#,
    );
    // {env:} substitution happened at load time with no env: apiKey "" → fall back to env list.
    let env = env_of(&[("OPENAI_API_KEY", "sk-env")]);
    let m = loaded
        .resolve_model_with_env("openai/gpt-4o", &env)
        .expect("resolve");
    assert_eq!(m.api_key.as_deref(), Some("sk-env"));
    assert_eq!(m.base_url, "http://proxy/v1");
    assert_eq!(m.limits.context, 5000);
    assert_eq!(m.limits.output, 16_384, "catalog output kept");
    let cost = m.cost.expect("cost");
    assert_eq!(cost.base.input, Decimal::new(9, 0));
    assert_eq!(
        cost.base.output,
        Decimal::new(10, 0),
        "catalog output price kept"
    );
    assert_eq!(m.name, "GPT-4o");
    // Built-in provider: a model the user did not list and the catalog lacks still runs.
    let u = loaded
        .resolve_model_with_env("openai/gpt-99", &no_env)
        .expect("unknown ok");
    assert!(u.unknown);
}

#[test]
fn api_key_from_config_env_substitution() {
    let f = fixture();
    write(
        &f.root.join("troupe.json"),
        r#"{"provider": {"mock": {"options": {"baseURL": "http://m", "apiKey": "{env:TROUPE_T_KEY}"}}}}"#,
    );
    let loaded = load_with_env(
        &LoadOptions::isolated(&f.root),
        &env_of(&[("TROUPE_T_KEY", "sekrit")]),
    )
    .expect("load");
    let m = loaded
        .resolve_model_with_env("mock/anything", &no_env)
        .expect("resolve");
    assert_eq!(m.api_key.as_deref(), Some("sekrit"));
    assert!(m.unknown, "provider without listed models → defaults");
}

#[test]
fn unknown_model_defaults_and_local() {
    let loaded = load_str("{}");
    let m = loaded
        .resolve_model_with_env("local/qwen3-coder", &no_env)
        .expect("resolve");
    assert!(m.unknown);
    assert_eq!(m.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(m.api_key, None);
    assert_eq!(
        m.limits,
        ModelLimits {
            context: UNKNOWN_MODEL_CONTEXT,
            input: None,
            output: UNKNOWN_MODEL_OUTPUT
        }
    );
    assert_eq!(m.cost, None);
    assert!(m.tool_call);
    let o = loaded
        .resolve_model_with_env("openrouter/meta-llama/llama-3.3-70b", &no_env)
        .expect("resolve");
    assert_eq!(
        o.model_id, "meta-llama/llama-3.3-70b",
        "split at the first slash"
    );
    assert_eq!(o.full_id(), "openrouter/meta-llama/llama-3.3-70b");
    let ol = loaded
        .resolve_model_with_env("ollama/llama3", &no_env)
        .expect("resolve");
    assert_eq!(ol.base_url, "http://127.0.0.1:11434/v1");
}

#[test]
fn bad_specs_and_unknown_provider() {
    let loaded = load_str(MOCK);
    let err = loaded
        .resolve_model_with_env("gpt-4o", &no_env)
        .expect_err("bad")
        .to_string();
    assert_eq!(err, "model must be provider/model, got \"gpt-4o\"");
    assert!(loaded.resolve_model_with_env("mock/", &no_env).is_err());
    assert!(loaded.resolve_model_with_env("/x", &no_env).is_err());
    let err = loaded
        .resolve_model_with_env("nope/x", &no_env)
        .expect_err("bad")
        .to_string();
    assert!(
        err.starts_with("unknown provider \"nope\" (known providers: anthropic, deepseek"),
        "{err}"
    );
    assert!(err.contains("mock"), "{err}");
}

#[test]
fn missing_base_url_for_new_provider() {
    let loaded = load_str(r#"{"provider": {"newp": {"models": {"m": {}}}}}"#);
    let err = loaded
        .resolve_model_with_env("newp/m", &no_env)
        .expect_err("no url")
        .to_string();
    assert_eq!(
        err,
        "provider \"newp\" has no base URL: set provider.newp.options.baseURL"
    );
    let loaded =
        load_str(r#"{"provider": {"newp": {"api": "http://api/v1", "models": {"m": {}}}}}"#);
    assert_eq!(
        loaded
            .resolve_model_with_env("newp/m", &no_env)
            .expect("ok")
            .base_url,
        "http://api/v1"
    );
}

#[test]
fn npm_anthropic_selects_anthropic_protocol() {
    let loaded = load_str(
        r#"{"provider": {"proxy": {"npm": "@ai-sdk/anthropic", "options": {"baseURL": "http://p/v1"}}}}"#,
    );
    let m = loaded
        .resolve_model_with_env("proxy/claude-x", &no_env)
        .expect("resolve");
    assert_eq!(m.protocol, Protocol::AnthropicMessages);
}

#[test]
fn default_model_rules() {
    let loaded = load_str(MOCK);
    assert_eq!(
        loaded.default_model_with_env(&no_env).as_deref(),
        Some("mock/mock-model")
    );
    let empty = load_str("{}");
    assert_eq!(empty.default_model_with_env(&no_env), None);
    assert_eq!(
        empty
            .default_model_with_env(&env_of(&[
                ("OPENAI_API_KEY", "x"),
                ("ANTHROPIC_API_KEY", "y")
            ]))
            .as_deref(),
        Some(DEFAULT_ANTHROPIC_MODEL)
    );
    assert_eq!(
        empty
            .default_model_with_env(&env_of(&[("OPENAI_API_KEY", "x")]))
            .as_deref(),
        Some(DEFAULT_OPENAI_MODEL)
    );
    assert_eq!(
        empty.default_model_with_env(&env_of(&[("OPENAI_API_KEY", "")])),
        None
    );
    // The default ids exist in the catalog.
    for spec in [DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL] {
        assert!(
            !empty
                .resolve_model_with_env(spec, &no_env)
                .expect("resolve")
                .unknown,
            "{spec}"
        );
    }
}

#[test]
fn models_lists_catalog_and_user_sorted() {
    let loaded = load_str(MOCK);
    let all = loaded.models();
    let ids: Vec<String> = all
        .iter()
        .map(|m| format!("{}/{}", m.provider_id, m.name))
        .collect();
    assert!(all.iter().any(|m| m.full_id() == "mock/mock-model"));
    assert!(
        all.iter()
            .any(|m| m.full_id() == "anthropic/claude-sonnet-4-5")
    );
    assert_eq!(all.len(), 13 + 2, "{ids:?}");
    let providers: Vec<&str> = all.iter().map(|m| m.provider_id.as_str()).collect();
    let mut sorted = providers.clone();
    sorted.sort();
    assert_eq!(providers, sorted);
}

// ---------------------------------------------------------------- opencode.json compatibility

const OPENCODE_JSON: &str = r#"{
  "$schema": "https://opencode.ai/config.json",
  "theme": "opencode",
  "autoupdate": true,
  "share": "manual",
  "model": "myprovider/my-model-name",
  "small_model": "anthropic/claude-haiku-4-5",
  "provider": {
    "myprovider": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "My AI ProviderDisplay Name",
      "options": {
        "baseURL": "https://api.myprovider.com/v1",
        "apiKey": "{env:MYPROVIDER_KEY}",
        "headers": { "Authorization": "Bearer custom-token" },
        "timeout": false,
        "setCacheKey": true
      },
      "models": {
        "my-model-name": {
          "name": "My Model Display Name",
          "attachment": false,
          "reasoning": true,
          "tool_call": true,
          "release_date": "2025-01-01",
          "modalities": { "input": ["text"], "output": ["text"] },
          "limit": { "context": 200000, "output": 65536 },
          "cost": { "input": 0.5, "output": 1.5, "cache_read": 0.05 },
          "options": { "reasoningEffort": "high" },
          "variants": { "fast": { "reasoningEffort": "low" } }
        }
      }
    },
    "ollama": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Ollama (local)",
      "options": { "baseURL": "http://localhost:11434/v1" },
      "models": { "llama2": { "name": "Llama 2" } }
    },
    "anthropic": { "options": { "timeout": 600000 } }
  },
  "mcp": { "fs": { "type": "local", "command": ["npx", "fs"], "enabled": true } },
  "permission": { "edit": "ask", "bash": { "git *": "allow", "*": "ask" } },
  "agent": { "review": { "description": "Reviews code", "mode": "subagent", "tools": { "write": false } } },
  "tools": { "write": true },
  "instructions": ["CONTRIBUTING.md", "docs/*.md"],
  "compaction": { "auto": false, "prune": true, "reserved": 10000 },
  "server": { "port": 4096 },
  "experimental": { "continue_loop_on_deny": true }
}"#;

#[test]
fn opencode_json_block_works_verbatim() {
    let f = fixture();
    write(&f.root.join("troupe.json"), OPENCODE_JSON);
    let env = env_of(&[("MYPROVIDER_KEY", "mp-key")]);
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &env).expect("load");
    let c = &loaded.config;
    assert_eq!(c.schema.as_deref(), Some("https://opencode.ai/config.json"));
    assert!(!c.compaction.auto);
    assert_eq!(c.compaction.reserved, Some(10_000));
    assert_eq!(
        c.permission.as_ref().and_then(|p| p.get("edit")),
        Some(&json!("ask"))
    );
    assert!(c.agent.is_some() && c.tools.is_some() && c.server.is_some());
    for key in ["theme", "autoupdate", "share", "experimental"] {
        assert!(c.extra.contains_key(key), "{key}");
    }
    // `mcp` is read (issue 16), in OpenCode's shape.
    assert_eq!(c.mcp["fs"].kind(), "local");
    assert!(c.mcp["fs"].enabled());
    let spec = loaded.default_model_with_env(&no_env).expect("model");
    let m = loaded
        .resolve_model_with_env(&spec, &no_env)
        .expect("resolve");
    assert_eq!(m.base_url, "https://api.myprovider.com/v1");
    assert_eq!(m.api_key.as_deref(), Some("mp-key"));
    assert_eq!(
        m.headers,
        vec![("Authorization".to_owned(), "Bearer custom-token".to_owned())]
    );
    assert_eq!(m.options.get("setCacheKey"), Some(&json!(true)));
    assert_eq!(m.options.get("reasoningEffort"), Some(&json!("high")));
    // `timeout: false` travels with the model (troupe-llm: no response-header deadline).
    assert_eq!(m.options.get("timeout"), Some(&json!(false)));
    assert!(!m.options.contains_key("baseURL"));
    assert_eq!(m.limits.context, 200_000);
    assert!(m.reasoning);
    assert_eq!(m.cost.expect("cost").base.cache_read, Decimal::new(5, 2));
    assert_eq!(
        loaded.provider_timeout("myprovider"),
        Some(Timeout::Disabled)
    );
    assert_eq!(
        loaded.provider_timeout("anthropic"),
        Some(Timeout::Millis(600_000))
    );

    let ol = loaded
        .resolve_model_with_env("ollama/llama2", &no_env)
        .expect("ollama");
    assert_eq!(ol.base_url, "http://localhost:11434/v1");
    assert_eq!(ol.name, "Llama 2");
    // Built-in provider keeps accepting models the user did not list.
    assert!(
        loaded
            .resolve_model_with_env("ollama/qwen3", &no_env)
            .expect("ok")
            .unknown
    );
    let a = loaded
        .resolve_model_with_env("anthropic/claude-haiku-4-5", &no_env)
        .expect("anthropic");
    assert_eq!(a.protocol, Protocol::AnthropicMessages);
}

#[test]
fn config_serializes_with_extra_and_redacts_keys() {
    let loaded = load_str(OPENCODE_JSON);
    let v = serde_json::to_value(&loaded.config).expect("serialize");
    assert_eq!(v["theme"], json!("opencode"));
    assert_eq!(
        v["provider"]["myprovider"]["options"]["apiKey"],
        json!("<redacted>")
    );
    assert_eq!(v["compaction"]["auto"], json!(false));
}

#[test]
fn config_from_jsonc_helper() {
    let c = Config::from_jsonc("inline", "{\"model\": \"a/b\", // c\n}").expect("parse");
    assert_eq!(c.model.as_deref(), Some("a/b"));
    let err = Config::from_jsonc("inline", "{\"model\": 3}")
        .expect_err("type")
        .to_string();
    assert!(err.starts_with("inline:1:"), "{err}");
}

#[test]
fn worktree_detection() {
    let f = fixture();
    let deep = f.root.join("x").join("y");
    fs::create_dir_all(&deep).expect("mkdir");
    assert_eq!(find_worktree(&deep), f.root);
}

#[test]
fn unknown_top_level_key_names_file_line_and_nearest_key() {
    let err = load_err("troupe.json", "{\n  \"modle\": \"openai/gpt-4.1\"\n}\n");
    assert!(
        err.ends_with("troupe.json:2:3: unknown key \"modle\" (did you mean \"model\"?)"),
        "{err}"
    );
}

#[test]
fn unknown_keys_in_provider_model_and_limit_blocks() {
    let err = load_err(
        "troupe.jsonc",
        r#"{
  // a comment keeps line numbers
  "provider": {
    "mock": {
      "option": { "baseURL": "http://127.0.0.1:1/v1" }
    }
  }
}"#,
    );
    assert!(
        err.ends_with(
            "troupe.jsonc:5:7: unknown key \"option\" in provider.mock (did you mean \"options\"?)"
        ),
        "{err}"
    );
    let err = load_err(
        "troupe.json",
        r#"{"provider": {"mock": {"models": {"m": {"limit": {"contxt": 4096}}}}}}"#,
    );
    assert!(
        err.ends_with(
            "troupe.json:1:51: unknown key \"contxt\" in provider.mock.models.m.limit (did you mean \"context\"?)"
        ),
        "{err}"
    );
    // Far from every known key: no suggestion, still an error.
    let err = load_err("troupe.json", r#"{"zzzzzzzz": 1}"#);
    assert!(
        err.ends_with("troupe.json:1:2: unknown key \"zzzzzzzz\""),
        "{err}"
    );
}

#[test]
fn supervision_block_parses_and_its_unknown_keys_are_errors() {
    let loaded = load_str(
        r#"{"supervision": {"tool_restarts": 5, "period_secs": 10, "read_only_tools": ["read"]}}"#,
    );
    let s = &loaded.config.supervision;
    assert_eq!(s.tool_restarts(), 5);
    assert_eq!(s.period(), std::time::Duration::from_secs(10));
    assert_eq!(s.read_only_tools(), vec!["read".to_string()]);
    // Absent keys take the documented defaults.
    assert_eq!(s.step_retries(), 1);
    assert_eq!(s.session_restarts(), 3);
    assert_eq!(s.backoff(), std::time::Duration::from_millis(100));
    assert!(s.abort_background());
    let keep = load_str(r#"{"supervision": {"abort_background": false}}"#);
    assert!(!keep.config.supervision.abort_background());
    let d = load_str("{}").config.supervision;
    assert_eq!(d.read_only_tools(), vec!["read", "glob", "grep", "list"]);
    let err = load_err("troupe.json", r#"{"supervision": {"tool_restart": 1}}"#);
    assert!(
        err.ends_with(
            "troupe.json:1:18: unknown key \"tool_restart\" in supervision (did you mean \"tool_restarts\"?)"
        ),
        "{err}"
    );
}

#[test]
fn cluster_block_parses_and_its_unknown_keys_are_errors() {
    let loaded = load_str(r#"{"cluster": {"subagents": ["explore", "review-*"]}}"#);
    assert_eq!(loaded.config.cluster.subagents, vec!["explore", "review-*"]);
    assert!(load_str("{}").config.cluster.subagents.is_empty());
    let err = load_err("troupe.json", r#"{"cluster": {"subagent": ["*"]}}"#);
    assert!(
        err.ends_with(
            "troupe.json:1:14: unknown key \"subagent\" in cluster (did you mean \"subagents\"?)"
        ),
        "{err}"
    );
}

#[test]
fn open_places_and_opencode_keys_stay_accepted() {
    // Request-body options, agent and permission blocks take any key; OpenCode-only top-level
    // keys are accepted and kept.
    let loaded = load_str(
        r#"{
  "theme": "dark",
  "keybinds": {},
  "provider": {"mock": {"options": {"baseURL": "http://x/v1", "grammar": "root ::= \"a\""},
            "models": {"m": {"options": {"anything": 1}, "modalities": {"input": ["text"]}}}}},
  "agent": {"mine": {"whatever": true}},
  "compaction": {"auto": false}
}"#,
    );
    assert_eq!(loaded.config.extra.get("theme"), Some(&json!("dark")));
}

#[test]
fn unknown_key_in_env_content_names_the_variable() {
    let f = fixture();
    let opts = LoadOptions {
        cwd: f.root.clone(),
        global_dir: None,
        env_content: Some(r#"{"small_modle": "a/b"}"#.into()),
    };
    let err = load_with_env(&opts, &no_env)
        .expect_err("unknown key")
        .to_string();
    assert_eq!(
        err,
        "TROUPE_CONFIG_CONTENT:1:2: unknown key \"small_modle\" (did you mean \"small_model\"?)"
    );
}

#[test]
fn object_key_scanner_reports_paths_and_offsets() {
    let json = r#"{"a": [{"b": 1}, "x"], "c": {"d\"e": {}}}"#;
    let keys = crate::keys::object_keys(json);
    let got: Vec<(String, String, usize)> = keys
        .into_iter()
        .map(|k| (k.path.join("."), k.key, k.offset))
        .collect();
    assert_eq!(
        got,
        vec![
            ("".into(), "a".into(), 1),
            ("a.[]".into(), "b".into(), 8),
            ("".into(), "c".into(), 23),
            ("c".into(), "d\"e".into(), 29),
        ]
    );
}

#[test]
fn nearest_key_counts_swaps_and_prefers_troupe_keys() {
    let known = ["model", "small_model", "mode"];
    assert_eq!(crate::keys::nearest("modle", &known), Some("model"));
    assert_eq!(crate::keys::nearest("MODEL", &known), Some("model"));
    assert_eq!(
        crate::keys::nearest("smal_model", &known),
        Some("small_model")
    );
    assert_eq!(crate::keys::nearest("zzzzzzzz", &known), None);
}

#[test]
fn detected_limits_fill_in_for_unknown_models_only() {
    let mut loaded = load_str(
        r#"{"provider": {"local": {"models": {"sized": {"limit": {"context": 2048, "output": 100}}}}}}"#,
    );
    let limits = ModelLimits {
        context: 4096,
        input: None,
        output: 1024,
    };
    loaded.detected_limits.insert("local/served".into(), limits);
    loaded.detected_limits.insert("local/sized".into(), limits);
    let m = loaded
        .resolve_model_with_env("local/served", &no_env)
        .expect("resolve");
    assert_eq!((m.limits.context, m.limits.output), (4096, 1024));
    let m = loaded
        .resolve_model_with_env("local/sized", &no_env)
        .expect("resolve");
    assert_eq!(
        (m.limits.context, m.limits.output),
        (2048, 100),
        "configured limits win"
    );
    let m = loaded
        .resolve_model_with_env("local/other", &no_env)
        .expect("resolve");
    assert_eq!(m.limits.context, UNKNOWN_MODEL_CONTEXT);
}

#[test]
fn default_model_says_where_it_came_from() {
    let f = fixture();
    write(&f.root.join("troupe.json"), r#"{"model": "mock/m"}"#);
    let loaded = load_with_env(&LoadOptions::isolated(&f.root), &no_env).expect("load");
    let (m, from) = loaded
        .default_model_source_with_env(&no_env)
        .expect("default");
    assert_eq!(m, "mock/m");
    assert_eq!(
        from,
        format!("\"model\" in {}", f.root.join("troupe.json").display())
    );
    let bare = load_str("{}");
    let env = env_of(&[("OPENAI_API_KEY", "k")]);
    assert_eq!(
        bare.default_model_source_with_env(&env),
        Some((
            DEFAULT_OPENAI_MODEL.to_owned(),
            "the default for openai, whose OPENAI_API_KEY is set".to_owned()
        ))
    );
    assert_eq!(bare.default_model_source_with_env(&no_env), None);
}

#[test]
fn stored_auth_keys_come_after_config_and_env() {
    let f = fixture();
    write(
        &f.global.join(AUTH_FILE_NAME),
        r#"{"openai": {"type": "api", "key": "stored-key"}}"#,
    );
    let opts = LoadOptions {
        cwd: f.root.clone(),
        global_dir: Some(f.global.clone()),
        env_content: None,
    };
    let loaded = load_with_env(&opts, &no_env).expect("load");
    let m = loaded
        .resolve_model_with_env("openai/gpt-4.1", &no_env)
        .expect("resolve");
    assert_eq!(m.api_key.as_deref(), Some("stored-key"));
    assert_eq!(
        loaded.default_model_source_with_env(&no_env),
        Some((
            DEFAULT_OPENAI_MODEL.to_owned(),
            "the default for openai, whose key is stored (troupe auth login openai)".to_owned()
        ))
    );
    let env = env_of(&[("OPENAI_API_KEY", "env-key")]);
    let m = loaded
        .resolve_model_with_env("openai/gpt-4.1", &env)
        .expect("resolve");
    assert_eq!(m.api_key.as_deref(), Some("env-key"), "the variable wins");
    // A malformed auth file names itself.
    write(&f.global.join(AUTH_FILE_NAME), r#"{"openai": {"key": 3}}"#);
    let err = load_with_env(&opts, &no_env)
        .expect_err("bad auth")
        .to_string();
    assert!(
        err.contains("auth.json") && err.contains("openai.key"),
        "{err}"
    );
}

#[test]
fn an_error_without_a_position_shows_none() {
    let e = crate::ConfigError::Type {
        file: "auth.json".into(),
        line: 0,
        column: 0,
        path: "openai.key".into(),
        message: "expected a non-empty string".into(),
    };
    assert_eq!(
        e.to_string(),
        "auth.json: expected a non-empty string at openai.key"
    );
}

#[test]
fn snapshot_key_is_a_bool() {
    assert_eq!(
        load_str(r#"{"snapshot": false}"#).config.snapshot,
        Some(false)
    );
    assert_eq!(load_str("{}").config.snapshot, None);
    assert!(
        !load_str(r#"{"snapshot": true}"#)
            .config
            .extra
            .contains_key("snapshot")
    );
    let err = load_err("troupe.json", r#"{"snapshot": "no"}"#);
    assert!(err.contains("snapshot"), "{err}");
}
