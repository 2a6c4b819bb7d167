//! Log output (issue 23): `TROUPE_LOG` filter, `--log-format pretty|json`, an optional log
//! file, and redaction of secrets from every line.
//!
//! Every formatted event passes through [`Redacting`] before it reaches stderr or the file:
//! the secrets troupe knows (API keys of the config and `auth.json`, the server password,
//! the values of environment variables named like a credential) and anything shaped like a
//! credential (`Authorization: Bearer …`, `x-api-key: …`, `"apiKey": "…"`, `api_key=…`)
//! are replaced with `[REDACTED]`. Secrets learned after start-up (the config is loaded by
//! each command) are added with [`add_secrets`].

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use anyhow::{Context as _, Result};
use regex::Regex;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines look.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event with its spans' fields (colours on a terminal).
    #[default]
    Pretty,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message and
    /// the event's fields), `span` (the innermost span with its fields) and `spans` (the
    /// span stack, outermost first).
    Json,
}

/// What replaces a secret in a log line.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not redacted by value (a 3-character "key" would blank
/// out ordinary words); credential-shaped text is still redacted by pattern.
const MIN_SECRET_LEN: usize = 6;

/// Known secret values, longest first (so a key that contains another is replaced whole).
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember secret values that must never appear in a log line (empty and very short
/// values are ignored).
pub fn add_secrets<I: IntoIterator<Item = S>, S: AsRef<str>>(values: I) {
    let Ok(mut known) = SECRETS.write() else {
        return;
    };
    for v in values {
        let v = v.as_ref().trim();
        if v.len() >= MIN_SECRET_LEN && !known.iter().any(|k| k == v) {
            known.push(v.to_string());
        }
    }
    known.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// The secrets of a loaded config: every provider's `apiKey`, header values of
/// credential-like headers, and the keys of `auth.json`.
pub fn add_config_secrets(config: &troupe_config::LoadedConfig) {
    let mut out: Vec<&str> = Vec::new();
    for p in config.config.provider.values() {
        out.extend(p.options.api_key.as_deref());
        out.extend(
            p.options
                .headers
                .iter()
                .filter(|(k, _)| credential_name(k))
                .map(|(_, v)| v.as_str()),
        );
    }
    out.extend(config.auth.values().map(String::as_str));
    out.extend(mcp_secrets(&config.config.mcp));
    add_secrets(out);
}

/// Values of credential-like headers of remote MCP servers and of credential-like
/// `environment` variables of local ones (a handshake error or a debug line may carry them).
fn mcp_secrets(
    mcp: &std::collections::BTreeMap<String, troupe_config::McpServerConfig>,
) -> Vec<&str> {
    use troupe_config::McpServerConfig;
    mcp.values()
        .flat_map(|m| match m {
            McpServerConfig::Local(l) => l.environment.iter(),
            McpServerConfig::Remote(r) => r.headers.iter(),
        })
        .filter(|(k, _)| credential_name(k))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Whether an environment variable or header name looks like it holds a credential.
fn credential_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase().replace('-', "_");
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "AUTHORIZATION",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| n.contains(w))
}

fn patterns() -> &'static [Regex] {
    static P: OnceLock<Vec<Regex>> = OnceLock::new();
    P.get_or_init(|| {
        [
            // Authorization: Bearer xyz / Basic xyz (header dumps, Debug of a HeaderMap).
            r#"(?i)(authorization"?\s*[:=]\s*"?\s*(?:bearer|basic|token)?\s*)[^\s",}]+"#,
            // Bare bearer tokens.
            r#"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"#,
            // x-api-key / api-key / api_key / apiKey / password / secret / token fields.
            r#"(?i)((?:x[-_])?(?:api[-_]?key|password|passwd|secret|access[-_]?token|auth[-_]?token)"?\s*[:=]\s*"?)[^\s",}&]+"#,
        ]
        .iter()
        .map(|p| Regex::new(p).expect("redaction pattern compiles"))
        .collect()
    })
}

/// `line` with every known secret and credential-shaped value replaced by [`REDACTED`].
pub fn redact(line: &str) -> String {
    let mut out = line.to_string();
    if let Ok(known) = SECRETS.read() {
        for s in known.iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
    }
    for p in patterns() {
        if p.is_match(&out) {
            out = p
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    format!("{}{REDACTED}", &c[1])
                })
                .into_owned();
        }
    }
    out
}

/// Where formatted lines go: stderr, or a file opened for appending.
#[derive(Clone)]
enum Sink {
    Stderr,
    File(Arc<Mutex<std::fs::File>>),
}

/// A [`MakeWriter`] whose writers buffer one event and write it redacted when dropped.
#[derive(Clone)]
struct Redacting(Sink);

/// One event's bytes on their way to the sink.
struct Line {
    buf: Vec<u8>,
    sink: Sink,
}

impl Write for Line {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = redact(&String::from_utf8_lossy(&self.buf));
        // A log line that cannot be written is dropped: logging must never fail the work.
        match &self.sink {
            Sink::Stderr => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            Sink::File(f) => {
                if let Ok(mut f) = f.lock() {
                    let _ = f.write_all(text.as_bytes());
                }
            }
        }
    }
}

impl<'a> MakeWriter<'a> for Redacting {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line {
            buf: Vec::with_capacity(256),
            sink: self.0.clone(),
        }
    }
}

/// The log filter without `TROUPE_LOG`: troupe's errors only. The MCP client library's own
/// error lines (`rmcp::transport::worker: worker quit with fatal …`) are left out: troupe
/// reports a failed MCP server itself (its state and stderr in `troupe mcp list`, the error
/// of a call to one of its tools), and `TROUPE_LOG=rmcp=debug` still shows them.
pub const DEFAULT_FILTER: &str = "error,rmcp=off";

/// Install the global subscriber: `TROUPE_LOG` (an `EnvFilter`; default [`DEFAULT_FILTER`]) filters
/// what is printed in `format` to stderr, or appended to `file` when given (created with
/// its parent directory). When the environment configures an OTLP endpoint, troupe's spans
/// are also exported ([`crate::telemetry`]); the returned exporter must be shut down at exit
/// to flush them. Errors: the file cannot be opened (the message names it).
pub fn init(format: LogFormat, file: Option<&Path>) -> Result<Option<crate::telemetry::Otlp>> {
    // Values of credential-like variables (OPENAI_API_KEY, TROUPE_SERVER_PASSWORD, …).
    add_secrets(
        std::env::vars_os()
            .filter(|(k, _)| credential_name(&k.to_string_lossy()))
            .map(|(_, v)| v.to_string_lossy().into_owned()),
    );
    // Header values of the OTLP exporter (`key=value,…`): typically a hosted backend's API
    // key, whatever the header is called.
    add_secrets(
        [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .flat_map(|v| otlp_header_values(&v)),
    );
    let sink = match file {
        None => Sink::Stderr,
        Some(path) => Sink::File(Arc::new(Mutex::new(open_log_file(path)?))),
    };
    let ansi = matches!(sink, Sink::Stderr) && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let filter = || {
        troupe_config::env_var("TROUPE_LOG")
            .and_then(|v| EnvFilter::try_new(v).ok())
            .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER))
    };
    let writer = Redacting(sink);
    let fmt_layer = match format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .with_filter(filter())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(writer)
            .with_filter(filter())
            .boxed(),
    };
    let otlp = crate::telemetry::Otlp::from_env();
    let mut layers = vec![fmt_layer];
    if let Some(o) = &otlp {
        layers.push(o.layer());
    }
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .context("could not install the log subscriber")?;
    Ok(otlp)
}

/// The values of an `OTEL_EXPORTER_OTLP_HEADERS` list (`key1=value1,key2=value2`, as the
/// OpenTelemetry exporter specification writes it), trimmed; entries without `=` are skipped.
fn otlp_header_values(list: &str) -> Vec<String> {
    list.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn open_log_file(path: &Path) -> Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the log file's directory {}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open the log file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secrets_are_redacted_wherever_they_appear() {
        add_secrets(["sk-test-0123456789abcdef", "abc"]);
        let line = r#"request failed: url=http://x/v1?k=sk-test-0123456789abcdef body={"key":"sk-test-0123456789abcdef"}"#;
        let out = redact(line);
        assert!(!out.contains("sk-test-0123456789abcdef"), "{out}");
        assert_eq!(out.matches(REDACTED).count(), 2, "{out}");
        // Too short to redact by value: ordinary words stay.
        assert!(redact("abcdef abc").contains("abc"));
    }

    #[test]
    fn credential_shaped_values_are_redacted_without_knowing_them() {
        for (line, secret) in [
            ("Authorization: Bearer eyJhbGciOi.J9xyz", "eyJhbGciOi.J9xyz"),
            (
                r#"headers: {"authorization": "Basic dXNlcjpwdw=="}"#,
                "dXNlcjpwdw==",
            ),
            ("AUTHORIZATION=Bearer tok_live_42", "tok_live_42"),
            ("x-api-key: anthropic-secret-9", "anthropic-secret-9"),
            (r#"{"apiKey":"hunter2hunter2"}"#, "hunter2hunter2"),
            ("GET /v1/models?api_key=qwerty123&x=1", "qwerty123"),
            ("password=pa55word!", "pa55word!"),
            ("sent bearer abc.def-ghi to the server", "abc.def-ghi"),
        ] {
            let out = redact(line);
            assert!(!out.contains(secret), "{line} -> {out}");
            assert!(out.contains(REDACTED), "{line} -> {out}");
        }
        // Text without credentials is untouched.
        let plain = r#"{"level":"INFO","fields":{"message":"step finished","tokens":42}}"#;
        assert_eq!(redact(plain), plain);
    }

    #[test]
    fn otlp_header_values_are_secrets() {
        assert_eq!(
            otlp_header_values("x-honeycomb-team=abc123secret, api-key = k2k2k2k2 ,broken,e="),
            ["abc123secret", "k2k2k2k2"]
        );
    }

    #[test]
    fn mcp_header_and_environment_credentials_are_secrets() {
        let mcp: std::collections::BTreeMap<String, troupe_config::McpServerConfig> =
            serde_json::from_value(serde_json::json!({
                "remote": {"type": "remote", "url": "http://127.0.0.1:1/mcp",
                    "headers": {"Authorization": "Bearer mcp-remote-tok", "Accept": "text/plain"}},
                "local": {"type": "local", "command": ["srv"],
                    "environment": {"GITHUB_TOKEN": "ghp-local-tok", "LANG": "C"}}
            }))
            .unwrap();
        let mut got = mcp_secrets(&mcp);
        got.sort();
        assert_eq!(got, vec!["Bearer mcp-remote-tok", "ghp-local-tok"]);
    }

    #[test]
    fn credential_names() {
        for n in [
            "OPENAI_API_KEY",
            "x-api-key",
            "TROUPE_SERVER_PASSWORD",
            "GITHUB_TOKEN",
        ] {
            assert!(credential_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "TROUPE_LOG", "content-type"] {
            assert!(!credential_name(n), "{n}");
        }
    }
}
