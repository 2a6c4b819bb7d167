//! A small OTLP/HTTP trace receiver on 127.0.0.1 for tests: it accepts `POST /v1/traces`
//! with an `ExportTraceServiceRequest` as protobuf (`application/x-protobuf`) or as OTLP/JSON
//! (`application/json`), answers the matching empty `ExportTraceServiceResponse`, and records
//! every span it received as a flat [`ReceivedSpan`].
//!
//! Other paths get 404, other methods 405, other content types and any `Content-Encoding`
//! 415, and a body that does not decode 400 (with the decoder's message), so a client that
//! sends the wrong thing fails loudly. [`OtlpReceiver::start_failing`] starts one that answers
//! every export with a chosen status, for tests of a collector that refuses spans.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use serde_json::Value;
use tokio::sync::watch;

/// One span as received, flattened with its resource and scope.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// Trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// Span id, 16 lowercase hex digits.
    pub span_id: String,
    /// Parent span id (16 hex digits), `None` for a root span.
    pub parent_span_id: Option<String>,
    /// Span name.
    pub name: String,
    /// OTLP span kind (1 internal, 2 server, 3 client, 4 producer, 5 consumer; 0 unspecified).
    pub kind: i32,
    /// Start, ns since the Unix epoch.
    pub start_unix_nano: u64,
    /// End, ns since the Unix epoch.
    pub end_unix_nano: u64,
    /// Attributes, values as JSON (strings, booleans, integers, doubles, arrays, objects).
    pub attributes: BTreeMap<String, Value>,
    /// Events in order: (name, attributes).
    pub events: Vec<(String, BTreeMap<String, Value>)>,
    /// Status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// Status message.
    pub status_message: String,
    /// The resource's attributes (e.g. `service.name`).
    pub resource: BTreeMap<String, Value>,
    /// The instrumentation scope's name.
    pub scope: String,
}

impl ReceivedSpan {
    /// The attribute `key` as a string (a string value as is, any other value as JSON).
    pub fn attr(&self, key: &str) -> Option<String> {
        self.attributes.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    /// End minus start, ns (0 when the end is before the start).
    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }
}

/// What one export request was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedExport {
    /// `protobuf` or `json`.
    pub encoding: &'static str,
    /// Spans it held.
    pub spans: usize,
    /// The status it was answered with.
    pub status: u16,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    exports: Vec<ReceivedExport>,
}

struct Shared {
    received: Mutex<Received>,
    /// Answer every export with this status instead of accepting it.
    fail_with: Option<StatusCode>,
}

/// The receiver; stops when dropped or [`OtlpReceiver::shutdown`].
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    serve: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl OtlpReceiver {
    /// Start a receiver that accepts every valid export, on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<OtlpReceiver> {
        Self::start_inner(None).await
    }

    /// Start a receiver that decodes nothing and answers every `POST /v1/traces` with
    /// `status` (e.g. 503), recording the attempt with 0 spans.
    pub async fn start_failing(status: u16) -> std::io::Result<OtlpReceiver> {
        let status = StatusCode::from_u16(status)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        Self::start_inner(Some(status)).await
    }

    async fn start_inner(fail_with: Option<StatusCode>) -> std::io::Result<OtlpReceiver> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            received: Mutex::new(Received::default()),
            fail_with,
        });
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(shared.clone());
        let (shutdown_tx, mut rx) = watch::channel(false);
        let serve = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|down| *down).await;
                })
                .await
        });
        Ok(OtlpReceiver {
            addr,
            shared,
            shutdown_tx,
            serve: Some(serve),
        })
    }

    /// The base endpoint, `http://127.0.0.1:PORT` (what `OTEL_EXPORTER_OTLP_ENDPOINT` takes;
    /// spans go to `/v1/traces` under it).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        lock(&self.shared.received).spans.clone()
    }

    /// Every export request so far, in arrival order.
    pub fn exports(&self) -> Vec<ReceivedExport> {
        lock(&self.shared.received).exports.clone()
    }

    /// Stop accepting and wait (at most 2 s) for the server task to end.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(serve) = self.serve.take() {
            let abort = serve.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), serve)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn export(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let encoding = match content_type.as_str() {
        "application/x-protobuf" | "application/protobuf" => "protobuf",
        "application/json" => "json",
        other => {
            return (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "content type {other:?} is neither application/x-protobuf nor application/json"
                ),
            )
                .into_response();
        }
    };
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content encoding {enc:?} is not supported; send the body uncompressed"),
        )
            .into_response();
    }
    if let Some(status) = shared.fail_with {
        lock(&shared.received).exports.push(ReceivedExport {
            encoding,
            spans: 0,
            status: status.as_u16(),
        });
        return (status, "refused by the test receiver").into_response();
    }
    let request = match decode(encoding, &body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let spans = flatten(&request);
    {
        let mut r = lock(&shared.received);
        r.exports.push(ReceivedExport {
            encoding,
            spans: spans.len(),
            status: 200,
        });
        r.spans.extend(spans);
    }
    let response = ExportTraceServiceResponse::default();
    match encoding {
        "json" => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&response).unwrap_or_else(|_| "{}".into()),
        )
            .into_response(),
        _ => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            response.encode_to_vec(),
        )
            .into_response(),
    }
}

/// Decode an export body of `encoding` (`protobuf` or `json`).
fn decode(encoding: &str, body: &[u8]) -> Result<ExportTraceServiceRequest, String> {
    match encoding {
        "json" => serde_json::from_slice(body).map_err(|e| format!("bad OTLP/JSON body: {e}")),
        _ => ExportTraceServiceRequest::decode(body)
            .map_err(|e| format!("bad OTLP protobuf body: {e}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_to_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(any_to_json).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|k| {
                    (
                        k.key.clone(),
                        k.value.as_ref().map(any_to_json).unwrap_or(Value::Null),
                    )
                })
                .collect(),
        ),
        Some(any_value::Value::BytesValue(b)) => Value::String(hex(b)),
        #[allow(unreachable_patterns)]
        Some(_) => Value::Null,
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// The spans of a request, each with its resource's and scope's names.
fn flatten(req: &ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attrs(&r.attributes))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for s in &ss.spans {
                let status = s.status.clone().unwrap_or_default();
                out.push(ReceivedSpan {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: (!s.parent_span_id.is_empty()).then(|| hex(&s.parent_span_id)),
                    name: s.name.clone(),
                    kind: s.kind,
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                    attributes: attrs(&s.attributes),
                    events: s
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attrs(&e.attributes)))
                        .collect(),
                    status_code: status.code,
                    status_message: status.message,
                    resource: resource.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    fn sample() -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv(
                        "service.name",
                        any_value::Value::StringValue("svc".into()),
                    )],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "scope-a".into(),
                        ..Default::default()
                    }),
                    spans: vec![Span {
                        trace_id: (1..=16).collect(),
                        span_id: (1..=8).collect(),
                        parent_span_id: vec![9; 8],
                        name: "tool.call".into(),
                        kind: 3,
                        start_time_unix_nano: 1_000,
                        end_time_unix_nano: 5_000,
                        attributes: vec![
                            kv("call_id", any_value::Value::StringValue("call_1".into())),
                            kv("attempt", any_value::Value::IntValue(2)),
                        ],
                        status: Some(Status {
                            message: "boom".into(),
                            code: 2,
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn check(spans: &[ReceivedSpan]) {
        assert_eq!(spans.len(), 1, "{spans:#?}");
        let s = &spans[0];
        assert_eq!(s.trace_id, "0102030405060708090a0b0c0d0e0f10");
        assert_eq!(s.span_id, "0102030405060708");
        assert_eq!(s.parent_span_id.as_deref(), Some("0909090909090909"));
        assert_eq!(s.name, "tool.call");
        assert_eq!(s.kind, 3);
        assert_eq!(s.duration_nanos(), 4_000);
        assert_eq!(s.attr("call_id").as_deref(), Some("call_1"));
        assert_eq!(s.attributes["attempt"], Value::from(2));
        assert_eq!((s.status_code, s.status_message.as_str()), (2, "boom"));
        assert_eq!(s.resource["service.name"], "svc");
        assert_eq!(s.scope, "scope-a");
    }

    async fn post(
        r: &OtlpReceiver,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", r.endpoint()))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("post")
    }

    #[tokio::test]
    async fn protobuf_export_is_decoded_and_answered_in_protobuf() {
        let r = OtlpReceiver::start().await.expect("start");
        let resp = post(
            &r,
            "/v1/traces",
            "application/x-protobuf",
            sample().encode_to_vec(),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
        let body = resp.bytes().await.expect("body");
        ExportTraceServiceResponse::decode(body.as_ref()).expect("a response message");
        check(&r.spans());
        assert_eq!(
            r.exports(),
            [ReceivedExport {
                encoding: "protobuf",
                spans: 1,
                status: 200
            }]
        );
        r.shutdown().await;
    }

    #[tokio::test]
    async fn json_export_uses_the_otlp_json_encoding() {
        // Written by hand per the OTLP/JSON rules: hex ids, lowerCamelCase keys, enums as
        // numbers, 64-bit integers as decimal strings.
        let body = serde_json::json!({"resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeSpans": [{
                "scope": {"name": "scope-a"},
                "spans": [{
                    "traceId": "0102030405060708090a0b0c0d0e0f10",
                    "spanId": "0102030405060708",
                    "parentSpanId": "0909090909090909",
                    "name": "tool.call",
                    "kind": 3,
                    "startTimeUnixNano": "1000",
                    "endTimeUnixNano": "5000",
                    "attributes": [
                        {"key": "call_id", "value": {"stringValue": "call_1"}},
                        {"key": "attempt", "value": {"intValue": "2"}}
                    ],
                    "status": {"message": "boom", "code": 2}
                }]
            }]
        }]});
        let r = OtlpReceiver::start().await.expect("start");
        let resp = post(
            &r,
            "/v1/traces",
            "application/json",
            body.to_string().into(),
        )
        .await;
        let status = resp.status();
        let text = resp.text().await.expect("body");
        assert_eq!(status, 200, "{text}");
        serde_json::from_str::<Value>(&text).expect("a JSON response");
        check(&r.spans());
        r.shutdown().await;
    }

    #[tokio::test]
    async fn wrong_requests_are_refused_loudly() {
        let r = OtlpReceiver::start().await.expect("start");
        let bad = post(&r, "/v1/traces", "application/x-protobuf", vec![0xff; 7]).await;
        assert_eq!(bad.status(), 400);
        assert!(bad.text().await.unwrap().contains("bad OTLP protobuf body"));
        let text = post(&r, "/v1/traces", "text/plain", b"hi".to_vec()).await;
        assert_eq!(text.status(), 415);
        let other = post(&r, "/v1/logs", "application/json", b"{}".to_vec()).await;
        assert_eq!(other.status(), 404);
        assert!(r.spans().is_empty() && r.exports().is_empty());
        r.shutdown().await;

        let failing = OtlpReceiver::start_failing(503).await.expect("start");
        let resp = post(
            &failing,
            "/v1/traces",
            "application/x-protobuf",
            sample().encode_to_vec(),
        )
        .await;
        assert_eq!(resp.status(), 503);
        assert_eq!(failing.exports()[0].status, 503);
        assert!(failing.spans().is_empty());
        failing.shutdown().await;
    }
}
