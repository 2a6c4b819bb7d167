use super::*;
use serde_json::json;

#[test]
fn debug_config_hides_credentials_but_keeps_references() {
    let mut v = serde_json::json!({
        "model": "openai/gpt-4o",
        "provider": {"openai": {"options": {
            "apiKey": "sk-live-123456", "baseURL": "https://x",
            "headers": {"X-Custom": "tok-abc", "Authorization": "Bearer zz"}
        }}, "other": {"options": {"api_key": "{env:OTHER_KEY}"}}},
        "mcp": {"srv": {"command": ["srv", "--flag"], "environment": {"TOKEN": "t0k"}}},
        "server": {"password": "pw"},
        "maxTokens": 512
    });
    super::redact_config_secrets(&mut v, false);
    let text = v.to_string();
    for secret in ["sk-live-123456", "tok-abc", "Bearer zz", "t0k", "\"pw\""] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert_eq!(
        v["provider"]["openai"]["options"]["apiKey"],
        "<redacted: 14 chars>"
    );
    assert_eq!(
        v["provider"]["other"]["options"]["api_key"],
        "{env:OTHER_KEY}"
    );
    assert_eq!(v["provider"]["openai"]["options"]["baseURL"], "https://x");
    assert_eq!(v["mcp"]["srv"]["command"][1], "--flag");
    assert_eq!(v["model"], "openai/gpt-4o");
    // Numbers are not strings: "maxTokens" stays readable.
    assert_eq!(v["maxTokens"], 512);
}

#[test]
fn tool_summary_shows_what_was_asked() {
    assert_eq!(
        tool_line(
            "bash",
            &json!({"command": "sleep 3; echo done", "description": "d"}),
            100
        ),
        "bash sleep 3; echo done"
    );
    assert_eq!(
        tool_line("glob", &json!({"pattern": "**/*.rs"}), 100),
        "glob **/*.rs"
    );
    assert_eq!(
        tool_line("glob", &json!({"pattern": "*.md", "path": "docs"}), 100),
        "glob *.md in docs"
    );
    assert_eq!(
        tool_line("grep", &json!({"pattern": "TODO", "include": "*.rs"}), 100),
        "grep TODO --include *.rs"
    );
    assert_eq!(
        tool_line("read", &json!({"filePath": "/a/b.rs"}), 100),
        "read /a/b.rs"
    );
    assert_eq!(tool_line("list", &json!({}), 100), "list .");
    assert_eq!(
        tool_line(
            "task",
            &json!({"description": "scan", "subagent_type": "explore"}),
            100
        ),
        "task explore: scan"
    );
    assert_eq!(tool_line("other", &json!({"k": 1}), 100), "other k=1");
    assert_eq!(tool_line("x", &json!({}), 100), "x");
    // Multi-line commands are one line, cut at `max` characters.
    assert_eq!(
        tool_line("bash", &json!({"command": "a\nb"}), 100),
        "bash a b"
    );
    assert_eq!(
        tool_line("bash", &json!({"command": "abcdef"}), 3),
        "bash abc…"
    );
}
