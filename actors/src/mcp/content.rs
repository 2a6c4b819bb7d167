//! What an MCP `tools/call` result becomes for the model: pure functions over the result's
//! JSON (MCP spec `CallToolResult`: `content` blocks of type `text`, `image`, `audio`,
//! `resource`, `resource_link`; `structuredContent`; `isError`).
//!
//! As OpenCode does (engine §7.1), text blocks are joined by a blank line; image and
//! binary resource blocks are kept as attachments (in `metadata.attachments`, each
//! `{"mime", "url": "data:<mime>;base64,…"}`) and described in the text so the model knows
//! they exist; text resources are inlined with their URI.

use serde_json::{Map, Value, json};

/// Name the model sees for tool `tool` of server `server`: `<server>_<tool>` with every
/// character outside `[A-Za-z0-9_-]` replaced by `_` (OpenCode `mcp/index.ts`).
pub fn tool_key(server: &str, tool: &str) -> String {
    format!("{}_{}", sanitize(server), sanitize(tool))
}

/// `s` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The converted result: text for the model, attachments, and whether the server flagged
/// the result as an error (`isError`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Converted {
    /// Text blocks and descriptions joined by a blank line.
    pub text: String,
    /// `{"mime", "url"}` objects (data URLs) of images and binary resources.
    pub attachments: Vec<Value>,
    /// The server set `isError: true`.
    pub is_error: bool,
}

/// Convert a `CallToolResult` serialized as JSON.
pub fn convert(result: &Value) -> Converted {
    let mut texts: Vec<String> = Vec::new();
    let mut attachments = Vec::new();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for b in &blocks {
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match kind {
            "text" => texts.push(s("text")),
            "image" | "audio" => {
                let mime = s("mimeType");
                let data = s("data");
                texts.push(format!(
                    "[{kind} attached: {mime}, {} bytes]",
                    base64_len(&data)
                ));
                attachments
                    .push(json!({"mime": mime, "url": format!("data:{mime};base64,{data}")}));
            }
            "resource" => {
                let r = b.get("resource").cloned().unwrap_or(Value::Null);
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
                let mime = r
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("application/octet-stream");
                if let Some(t) = r.get("text").and_then(Value::as_str) {
                    texts.push(format!("Resource {uri}:\n{t}"));
                } else if let Some(blob) = r.get("blob").and_then(Value::as_str) {
                    texts.push(format!(
                        "[resource attached: {uri} ({mime}, {} bytes)]",
                        base64_len(blob)
                    ));
                    attachments.push(json!({"mime": mime, "url": format!("data:{mime};base64,{blob}"), "uri": uri}));
                }
            }
            "resource_link" => {
                let name = s("name");
                let uri = s("uri");
                texts.push(format!("Resource link: {name} ({uri})"));
            }
            other => texts.push(format!("[content of type {other:?} omitted]")),
        }
    }
    if texts.is_empty()
        && let Some(sc) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        texts.push(sc.to_string());
    }
    Converted {
        text: texts.join("\n\n"),
        attachments,
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
    }
}

/// Decoded size of a base64 text, bytes (approximate for malformed input).
fn base64_len(data: &str) -> usize {
    let pad = data.bytes().rev().take_while(|&c| c == b'=').count();
    (data.len() / 4 * 3).saturating_sub(pad)
}

/// Metadata of a converted result for the tool part.
pub fn metadata(server: &str, tool: &str, c: &Converted) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("mcpServer".into(), Value::String(server.into()));
    m.insert("mcpTool".into(), Value::String(tool.into()));
    if !c.attachments.is_empty() {
        m.insert("attachments".into(), Value::Array(c.attachments.clone()));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitized() {
        assert_eq!(tool_key("my server", "get.file"), "my_server_get_file");
        assert_eq!(tool_key("a-b", "c_d"), "a-b_c_d");
        assert_eq!(sanitize("ü/x"), "__x");
    }

    #[test]
    fn text_joined_images_attached_resources_inlined() {
        let r = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "text", "text": "two"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA", "mimeType": "application/pdf"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
            {"type": "weird"}
        ]});
        let c = convert(&r);
        assert_eq!(
            c.text,
            "one\n\n[image attached: image/png, 5 bytes]\n\ntwo\n\nResource file:///a:\nbody\n\n[resource attached: file:///b (application/pdf, 3 bytes)]\n\nResource link: c (file:///c)\n\n[content of type \"weird\" omitted]"
        );
        assert_eq!(c.attachments.len(), 2);
        assert_eq!(c.attachments[0]["url"], "data:image/png;base64,aGVsbG8=");
        assert!(!c.is_error);
        let m = metadata("s", "t", &c);
        assert_eq!(m["attachments"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn errors_and_structured_content() {
        let c = convert(&json!({"content": [{"type": "text", "text": "bad"}], "isError": true}));
        assert!(c.is_error);
        assert_eq!(c.text, "bad");
        let c = convert(&json!({"content": [], "structuredContent": {"a": 1}}));
        assert_eq!(c.text, "{\"a\":1}");
        assert_eq!(convert(&json!({})).text, "");
    }
}
