//! OpenTelemetry export of troupe's spans (issue 23): OTLP over HTTP with protobuf bodies,
//! sent by reqwest, off unless an endpoint is configured.
//!
//! Configuration is the standard OpenTelemetry environment, read once at start-up:
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL, used as is) or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL; `/v1/traces` is appended). Neither set (or
//!   both empty): no export, and no exporter thread exists.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn export off even with an
//!   endpoint.
//! - `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (default service name `troupe`),
//!   `OTEL_EXPORTER_OTLP[_TRACES]_HEADERS` (e.g. an API key of a hosted backend),
//!   `OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT` (ms, default 10,000), the batch processor's
//!   `OTEL_BSP_*` and the sampler's `OTEL_TRACES_SAMPLER[_ARG]`.
//! - Only `http/protobuf` is built in (no gRPC, to keep the build light): another
//!   `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL` gets a warning and protobuf over HTTP is used.
//!
//! Spans leave in batches from the SDK's exporter thread (every 5 s, or when 512 are
//! waiting) and the rest at exit: [`Otlp::shutdown`] flushes, waiting at most the exporter
//! timeout, so a short `troupe run` loses nothing. A collector that cannot be reached or
//! refuses the spans never fails the work: the first failure prints one warning line on
//! stderr, every failure is a `warn` log event (target `troupe::otel`), and the spans of a
//! failed batch are dropped after the exporter's retries.
//!
//! Only troupe's own spans are exported (target `troupe`, level `info` and up, whatever
//! `TROUPE_LOG` says): the session tree of `troupe_actors::spans`, with the `info` and
//! `warn` events that happen inside them (turn results, supervision events) as span events.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The service name when `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) does not give one.
pub const DEFAULT_SERVICE_NAME: &str = "troupe";

/// The exporter timeout when none is configured: 10 s, the OTLP exporter specification's
/// default for `OTEL_EXPORTER_OTLP_TIMEOUT`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The export settings read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where spans are POSTed: the traces endpoint as given, or the base endpoint with
    /// `/v1/traces` appended.
    pub url: String,
    /// Deadline of one export (its HTTP requests and retries) and of the flush at exit.
    pub timeout: Duration,
    /// A requested protocol other than `http/protobuf`, to warn about.
    pub unsupported_protocol: Option<String>,
}

/// Read the export settings from `var` (the environment in the binary; a map in tests).
/// `Ok(None)`: export is off. Errors: a timeout that is not a whole number of milliseconds
/// (the message names the variable).
pub fn settings(var: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>, String> {
    let get = |k: &str| {
        var(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    let url = match (
        get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(full), _) => full,
        (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
        (None, None) => return Ok(None),
    };
    let mut timeout = DEFAULT_TIMEOUT;
    for k in [
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    ] {
        if let Some(v) = get(k) {
            let ms: u64 = v
                .parse()
                .map_err(|_| format!("{k}={v:?} is not a whole number of milliseconds"))?;
            timeout = Duration::from_millis(ms);
        }
    }
    let unsupported_protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .filter(|p| p != "http/protobuf");
    Ok(Some(Settings {
        url,
        timeout,
        unsupported_protocol,
    }))
}

/// A running exporter: the SDK's tracer provider (with its batch processor thread) and the
/// health of the HTTP exports.
pub struct Otlp {
    provider: SdkTracerProvider,
    settings: Settings,
    health: Arc<Health>,
}

impl Otlp {
    /// Start exporting to what the environment configures, or `None` when it configures no
    /// endpoint. A configuration that cannot work (a bad URL or timeout) is one warning line
    /// on stderr and no export: telemetry never stops troupe from running.
    pub fn from_env() -> Option<Otlp> {
        let settings = match settings(|k| std::env::var(k).ok()) {
            Ok(s) => s?,
            Err(e) => {
                eprintln!("troupe: warning: OpenTelemetry export is off: {e}");
                return None;
            }
        };
        match Otlp::start(settings) {
            Ok(o) => Some(o),
            Err(e) => {
                eprintln!("troupe: warning: OpenTelemetry export is off: {e}");
                None
            }
        }
    }

    /// Build the exporter for `settings`. Errors: the URL is not a valid endpoint, or the
    /// HTTP client cannot be built.
    pub fn start(settings: Settings) -> Result<Otlp, String> {
        if let Some(p) = &settings.unsupported_protocol {
            eprintln!(
                "troupe: warning: OTLP protocol {p:?} is not built in; sending http/protobuf to {}",
                settings.url
            );
        }
        let health = Arc::new(Health::new(settings.url.clone()));
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Exporting {
                client,
                health: health.clone(),
            })
            .with_endpoint(settings.url.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| format!("{}: {e}", settings.url))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Otlp {
            provider,
            settings,
            health,
        })
    }

    /// The `tracing` layer that turns troupe's spans into OpenTelemetry spans of this
    /// exporter. Its filter is its own (`troupe` at `info`), independent of the log filter.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("troupe");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // Actors hop between runtime threads and the source location of a span says
            // nothing a user needs: leave both out of every span.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            // Parents are tracing spans (explicit, or the entered one); no OpenTelemetry
            // context needs activating on every enter.
            .with_context_activation(false)
            .with_filter(Targets::new().with_target("troupe", tracing::Level::INFO))
            .boxed()
    }

    /// Flush the spans still queued and stop the exporter, waiting at most the exporter
    /// timeout. Call it once the work is over (every span closed). A failure is a warning,
    /// never an error.
    pub fn shutdown(self) {
        let grace = self.settings.timeout + Duration::from_millis(500);
        if let Err(e) = self.provider.shutdown_with_timeout(grace) {
            tracing::warn!(target: "troupe::otel", error = %e, "OpenTelemetry shutdown");
            self.health
                .warn_once(&format!("the last spans were not sent ({e})"));
        }
    }
}

/// The resource of every span: the environment's (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), with `service.name` = [`DEFAULT_SERVICE_NAME`] unless it
/// names one, and `service.version` = troupe's version.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let mut b = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if !named {
        b = b.with_service_name(DEFAULT_SERVICE_NAME);
    }
    b.build()
}

/// How the exports went: failures are counted and the first one is said once on stderr.
#[derive(Debug)]
struct Health {
    url: String,
    failures: AtomicU64,
    warned: AtomicBool,
    failing: Mutex<bool>,
}

impl Health {
    fn new(url: String) -> Health {
        Health {
            url,
            failures: AtomicU64::new(0),
            warned: AtomicBool::new(false),
            failing: Mutex::new(false),
        }
    }

    /// Record one HTTP export's result.
    fn note(&self, result: &Result<Response<Bytes>, HttpError>) {
        let problem = match result {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("HTTP {}", r.status())),
            Err(e) => Some(error_chain(e.as_ref())),
        };
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match problem {
            Some(p) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "troupe::otel", url = %self.url, error = %p, "span export failed");
                *failing = true;
                drop(failing);
                self.warn_once(&p);
            }
            None if *failing => {
                *failing = false;
                tracing::info!(target: "troupe::otel", url = %self.url, "span export works again");
            }
            None => {}
        }
    }

    /// One stderr line, the first time anything goes wrong.
    fn warn_once(&self, problem: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "troupe: warning: cannot send traces to {}: {problem} (spans are dropped; the work goes on)",
                self.url
            );
        }
    }
}

/// `e` and its sources joined with `: `, skipping repeats (reqwest nests hyper's error).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

thread_local! {
    /// The runtime that drives exports on the SDK's exporter thread, which is not a tokio
    /// thread (reqwest needs one). Built on first use, once per thread.
    static EXPORT_RT: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok();
}

/// The exporter's HTTP client: reqwest (the client troupe uses for providers), driven on a
/// small runtime of the exporter thread, recording each result in [`Health`].
#[derive(Debug)]
struct Exporting {
    client: reqwest::Client,
    health: Arc<Health>,
}

impl Exporting {
    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let result = if tokio::runtime::Handle::try_current().is_ok() {
            self.client.send_bytes(request).await
        } else {
            EXPORT_RT.with(|tokio_rt| match tokio_rt {
                Some(tokio_rt) => tokio_rt.block_on(self.client.send_bytes(request)),
                None => Err("cannot start the export runtime".into()),
            })
        };
        self.health.note(&result);
        result
    }
}

impl HttpClient for Exporting {
    fn send_bytes<'a, 'f>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'f>>
    where
        'a: 'f,
        Self: 'f,
    {
        Box::pin(self.send(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings(|k| m.get(k).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(from(&[]), Ok(None));
        assert_eq!(from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), Ok(None));
        assert_eq!(from(&[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        for off in [
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), off]),
                Ok(None),
                "{off:?}"
            );
        }
    }

    #[test]
    fn endpoints_follow_the_specification() {
        let s = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(s.url, "http://c:4318/v1/traces");
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(s.unsupported_protocol, None);
        // The per-signal URL is used as given and wins over the base.
        let s = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://t.example/otlp/traces",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.url, "https://t.example/otlp/traces");
    }

    #[test]
    fn timeout_and_protocol() {
        let s = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.timeout, Duration::from_millis(250));
        assert_eq!(s.unsupported_protocol.as_deref(), Some("grpc"));
        let err = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
        ])
        .unwrap_err();
        assert!(err.contains("OTEL_EXPORTER_OTLP_TIMEOUT"), "{err}");
        let s = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.unsupported_protocol, None);
    }
}
