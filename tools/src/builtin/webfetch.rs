//! `webfetch {url, format?, timeout?}`: fetch a URL and return its content as markdown (the
//! default), plain text or raw HTML (OpenCode §7.3).
//!
//! Rules, after OpenCode's `webfetch`: only `http://` and `https://` URLs; asks permission
//! `webfetch` with the URL as the pattern (always: `*`); timeout 30 s by default, at most
//! 120 s; a browser User-Agent, and on a Cloudflare challenge (403 with `cf-mitigated:
//! challenge`) one retry with the plain `troupe` agent; the response may not exceed
//! [`MAX_RESPONSE_BYTES`] (by its `Content-Length` or while it streams). HTML becomes markdown
//! with `htmd` (a turndown port, as OpenCode uses turndown) or text (script, style, noscript,
//! iframe, object and embed dropped); other text types are returned as they are. Images and
//! other binary types are refused with a message (no attachments yet).

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args::invalid;
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Largest response accepted, bytes (OpenCode: 5 MB).
pub const MAX_RESPONSE_BYTES: usize = 5 * 1024 * 1024;
/// Timeout when the call gives none, seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Largest timeout a call may ask for, seconds.
pub const MAX_TIMEOUT_SECS: u64 = 120;
/// User-Agent of the first attempt (a browser's: some sites refuse unknown agents).
const BROWSER_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
/// Tags whose content is never text.
const SKIPPED_TAGS: [&str; 6] = ["script", "style", "noscript", "iframe", "object", "embed"];

/// The `webfetch` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct WebFetchTool;

/// What to return: plain text, markdown (the default) or the raw HTML. Private and without
/// variant docs so its schema is a plain string `enum`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum FetchFormat {
    Text,
    #[default]
    Markdown,
    Html,
}

impl FetchFormat {
    fn accept(self) -> &'static str {
        match self {
            FetchFormat::Markdown => {
                "text/markdown;q=1.0, text/x-markdown;q=0.9, text/plain;q=0.8, text/html;q=0.7, */*;q=0.1"
            }
            FetchFormat::Text => {
                "text/plain;q=1.0, text/markdown;q=0.9, text/html;q=0.8, */*;q=0.1"
            }
            FetchFormat::Html => {
                "text/html;q=1.0, application/xhtml+xml;q=0.9, text/plain;q=0.8, */*;q=0.1"
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            FetchFormat::Text => "text",
            FetchFormat::Markdown => "markdown",
            FetchFormat::Html => "html",
        }
    }
}

/// Arguments of `webfetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    /// The URL to fetch content from (http:// or https://).
    url: String,
    /// The format to return the content in (text, markdown, or html). Defaults to markdown.
    #[serde(default)]
    format: FetchFormat,
    /// Optional timeout in seconds (max 120).
    #[serde(default)]
    timeout: Option<u64>,
}

const DESCRIPTION: &str = "Fetches content from a URL and returns it as markdown (default), plain text or HTML.\n\n- The URL must be a fully-formed http:// or https:// URL.\n- Read-only: it does not change anything.\n- Results may be summarized or cut when the content is very large (limit 5 MB).\n- Use it to read documentation or a page the user points to; prefer a more specific tool when one exists.";

impl TypedTool for WebFetchTool {
    type Args = WebFetchArgs;
    const NAME: &'static str = "webfetch";

    fn describe(&self) -> String {
        DESCRIPTION.into()
    }

    fn run(
        &self,
        args: WebFetchArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let url = args.url.trim().to_string();
            let lower = url.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(invalid(
                    "webfetch",
                    format!("url: URL must start with http:// or https:// (got {url:?})"),
                ));
            }
            let parsed = reqwest::Url::parse(&url)
                .map_err(|e| invalid("webfetch", format!("url: not a valid URL ({e})")))?;
            let secs = args
                .timeout
                .unwrap_or(DEFAULT_TIMEOUT_SECS)
                .clamp(1, MAX_TIMEOUT_SECS);
            crate::paths::ask(
                &ctx,
                "webfetch",
                vec![url.clone()],
                vec!["*".into()],
                json!({"url": url, "format": args.format.name(), "timeout": secs}),
            )
            .await?;
            tokio::select! {
                r = fetch(parsed, args.format, Duration::from_secs(secs)) => r,
                _ = ctx.abort.cancelled() => Err(ToolError::Aborted),
            }
        })
    }
}

async fn fetch(
    url: reqwest::Url,
    format: FetchFormat,
    timeout: Duration,
) -> Result<ToolOutput, ToolError> {
    let shown = url.to_string();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| ToolError::Failed(format!("could not start an HTTP client: {e}")))?;
    let send = |ua: &'static str| {
        client
            .get(url.clone())
            .header(reqwest::header::USER_AGENT, ua)
            .header(reqwest::header::ACCEPT, format.accept())
            .header(reqwest::header::ACCEPT_LANGUAGE, "en-US,en;q=0.9")
            .send()
    };
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            ToolError::Failed(format!(
                "Request to {shown} timed out after {} s",
                timeout.as_secs()
            ))
        } else {
            ToolError::Failed(format!("Request to {shown} failed: {e}"))
        }
    };
    let mut resp = send(BROWSER_UA).await.map_err(failed)?;
    if resp.status() == reqwest::StatusCode::FORBIDDEN
        && resp
            .headers()
            .get("cf-mitigated")
            .is_some_and(|v| v.as_bytes() == b"challenge")
    {
        resp = send("troupe").await.map_err(failed)?;
    }
    let status = resp.status();
    if !status.is_success() {
        return Err(ToolError::Failed(format!(
            "Request failed with status code: {}",
            status.as_u16()
        )));
    }
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(too_large());
    }
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if !is_textual(&mime) {
        return Err(ToolError::Failed(format!(
            "{shown} returned {mime}, which webfetch cannot return as text (only text, HTML, JSON and XML content)"
        )));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let bytes = body.len();
    let is_html = mime == "text/html" || mime == "application/xhtml+xml";
    // Parsing up to 5 MiB of HTML is CPU work: off the async runtime.
    let output = super::blocking(move || {
        let text = String::from_utf8_lossy(&body).into_owned();
        match (format, is_html) {
            (FetchFormat::Markdown, true) => to_markdown(&text),
            (FetchFormat::Text, true) => to_text(&text),
            _ => Ok(text),
        }
    })
    .await??;
    let mut metadata = Map::new();
    metadata.insert("url".into(), Value::String(shown.clone()));
    metadata.insert("contentType".into(), Value::String(content_type.clone()));
    metadata.insert("bytes".into(), json!(bytes));
    Ok(ToolOutput {
        title: format!("{shown} ({content_type})"),
        output,
        metadata,
    })
}

fn too_large() -> ToolError {
    ToolError::Failed(format!(
        "Response too large (exceeds {} MB limit)",
        MAX_RESPONSE_BYTES / (1024 * 1024)
    ))
}

/// Whether a MIME type is returned as text (an empty type is tried as text).
fn is_textual(mime: &str) -> bool {
    mime.is_empty()
        || mime.starts_with("text/")
        || mime == "image/svg+xml"
        || mime.ends_with("+xml")
        || mime.ends_with("+json")
        || matches!(
            mime,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/xhtml+xml"
                | "application/x-javascript"
                | "application/ecmascript"
        )
}

/// HTML → markdown (`htmd`, with the non-content tags dropped).
pub fn to_markdown(html: &str) -> Result<String, ToolError> {
    htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .build()
        .convert(html)
        .map_err(|e| ToolError::Failed(format!("could not convert the HTML to markdown: {e}")))
}

/// HTML → plain text: the document's text nodes in order, without the non-content tags,
/// block elements on their own lines, runs of blank lines collapsed.
pub fn to_text(html: &str) -> Result<String, ToolError> {
    let tree = htmd::HtmlToMarkdown::new()
        .html_to_tree(html)
        .map_err(|e| ToolError::Failed(format!("could not parse the HTML: {e}")))?;
    let mut out = String::new();
    collect_text(&tree, &mut out);
    let mut lines: Vec<&str> = Vec::new();
    for line in out.lines().map(str::trim_end) {
        if line.trim().is_empty() && lines.last().is_none_or(|l| l.trim().is_empty()) {
            continue;
        }
        lines.push(line);
    }
    Ok(lines.join("\n").trim().to_string())
}

fn collect_text(node: &htmd::Node, out: &mut String) {
    use markup5ever_rcdom::NodeData;
    match &node.data {
        NodeData::Text { contents } => {
            let t = contents.borrow();
            let collapsed = t.split_whitespace().collect::<Vec<_>>().join(" ");
            if !collapsed.is_empty() {
                if t.starts_with(char::is_whitespace) && !out.ends_with(['\n', ' ']) {
                    out.push(' ');
                }
                out.push_str(&collapsed);
                if t.ends_with(char::is_whitespace) {
                    out.push(' ');
                }
            }
            return;
        }
        NodeData::Element { name, .. } => {
            let tag = name.local.as_ref();
            if SKIPPED_TAGS.contains(&tag) || tag == "head" {
                return;
            }
            let block = matches!(
                tag,
                "p" | "div"
                    | "br"
                    | "li"
                    | "tr"
                    | "h1"
                    | "h2"
                    | "h3"
                    | "h4"
                    | "h5"
                    | "h6"
                    | "pre"
                    | "blockquote"
                    | "section"
                    | "article"
                    | "header"
                    | "footer"
                    | "table"
                    | "ul"
                    | "ol"
                    | "title"
            );
            if block && !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            for c in node.children.borrow().iter() {
                collect_text(c, out);
            }
            if block && !out.ends_with('\n') {
                out.push('\n');
            }
            return;
        }
        _ => {}
    }
    for c in node.children.borrow().iter() {
        collect_text(c, out);
    }
}

#[cfg(test)]
#[path = "webfetch_tests.rs"]
mod tests;
