//! How a completion request is answered: the script's step for the conversation, the fault
//! attempts (errors, stalls, hangs, cut streams), and the body, streamed as SSE or whole.

use super::*;
use crate::scan::{self, Scan};

/// A completion request on any of the completion routes: Anthropic's when the path ends in
/// `/messages`, OpenAI's (`…/chat/completions`) otherwise.
pub(super) async fn completion_handler(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let dialect = if uri.path().ends_with("/messages") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    };
    completion(shared, dialect, peer, method, uri, headers, body).await
}

/// A response that never comes: the request is recorded as open and the handler waits for the
/// hang limit or shutdown, then answers 504 (by then nobody is listening).
async fn stall_before_headers(shared: &Arc<Shared>, mut rec: RecordedRequest) -> Response {
    rec.end_ms = None;
    rec.end_us = None;
    let seq = rec.seq;
    shared.record(rec);
    let _guard = FinishGuard {
        shared: Arc::clone(shared),
        seq,
    };
    shared.hang().await;
    StatusCode::GATEWAY_TIMEOUT.into_response()
}

/// `status` headers declaring `body.len()` bytes, then half of `body`, then silence.
fn stalled_body(
    shared: &Arc<Shared>,
    status: StatusCode,
    body: String,
    mut rec: RecordedRequest,
) -> Response {
    rec.end_ms = None;
    rec.end_us = None;
    rec.status = status.as_u16();
    let seq = rec.seq;
    shared.record(rec);
    let guard = FinishGuard {
        shared: Arc::clone(shared),
        seq,
    };
    let len = body.len();
    let half = Bytes::from(body.into_bytes()).slice(..len / 2);
    let body = sse_body(
        vec![half],
        Ending::Hang,
        Duration::ZERO,
        shared.shutdown.clone(),
        guard,
    );
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, len)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn completion(
    shared: Arc<Shared>,
    dialect: Dialect,
    peer: SocketAddr,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let inc = Incoming::new(&shared, method, &uri, &headers);
    if lock(&shared.stalled_connections).remove(&peer) {
        // `Stall::Reuse`: the previous request on this connection asked for this one to hang.
        let mut rec = inc.record(
            serde_json::from_slice(&raw).unwrap_or(Value::Null),
            StatusCode::OK,
        );
        rec.dialect = Some(dialect);
        rec.fault = Some(Fault::Stall(Stall::Reuse));
        return stall_before_headers(&shared, rec).await;
    }
    let seq = inc.seq;
    let reject = |body: Value, status: StatusCode, msg: &str| {
        let mut rec = inc.record(body, status);
        rec.dialect = Some(dialect);
        shared.record(rec);
        json_response(
            status,
            &wire::error_body(dialect, status.as_u16(), msg, seq),
        )
    };

    // The routing facts come from a scan of the raw bytes (no `Value` of a body that may hold
    // a long session's whole history); the body is parsed into a `Value` only to be recorded,
    // or where the scan leaves the answer to `wire::analyze` (invalid JSON, odd key repeats).
    let scanned = scan::scan(&raw, dialect);
    let (body, info) = match scanned {
        Scan::Info(info) if !shared.record_bodies.load(Ordering::Relaxed) => (Value::Null, info),
        Scan::Rejected(msg) if !shared.record_bodies.load(Ordering::Relaxed) => {
            return reject(Value::Null, StatusCode::BAD_REQUEST, &msg);
        }
        scanned => {
            let body: Value = match serde_json::from_slice(&raw) {
                Ok(v) => v,
                Err(e) => {
                    let text = Value::String(String::from_utf8_lossy(&raw).into_owned());
                    return reject(
                        text,
                        StatusCode::BAD_REQUEST,
                        &format!("invalid JSON body: {e}"),
                    );
                }
            };
            let analyzed = wire::analyze(&body, dialect);
            // Every test that records bodies checks the scan against the `Value` way.
            debug_assert!(
                match (&scanned, &analyzed) {
                    (Scan::Unsure, _) => true,
                    (Scan::Info(a), Ok(b)) => a == b,
                    (Scan::Rejected(a), Err(b)) => a == b,
                    _ => false,
                },
                "the body scan disagrees with the Value analysis: {scanned:?} vs {analyzed:?}"
            );
            match analyzed {
                Ok(i) => (body, i),
                Err(msg) => return reject(body, StatusCode::BAD_REQUEST, &msg),
            }
        }
    };
    let Some(conv_idx) = shared
        .script
        .select(&info.first_user_text, &info.system_text)
    else {
        let msg = format!(
            "no scripted conversation matches first user message {:?}",
            info.first_user_text
        );
        return reject(body, StatusCode::NOT_FOUND, &msg);
    };
    let conv = &shared.script.conversations[conv_idx];
    let session_key = inc
        .session_header
        .clone()
        .unwrap_or_else(|| info.first_user_text.clone());
    let attempt = shared.next_attempt((session_key.clone(), conv_idx, info.step_index));
    // The record of a request for this step of this conversation.
    let step_record = |body: Value, status: StatusCode| {
        let mut rec = inc.record(body, status);
        rec.dialect = Some(dialect);
        rec.conversation = Some(conv_idx);
        rec.step = Some(info.step_index);
        rec.attempt = attempt;
        rec.session_key = session_key.clone();
        rec.stream = info.stream;
        rec
    };

    let exhausted_step;
    let step: &Step = match conv.steps.get(info.step_index) {
        Some(s) => s,
        None => match conv.exhausted {
            Exhausted::Text => {
                exhausted_step = Step::text(EXHAUSTED_TEXT);
                &exhausted_step
            }
            Exhausted::Error => {
                let msg = format!(
                    "script exhausted: conversation {conv_idx} has {} steps, request is for step {}",
                    conv.steps.len(),
                    info.step_index
                );
                shared.record(step_record(body, StatusCode::BAD_REQUEST));
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &wire::error_body(dialect, 400, &msg, seq),
                );
            }
        },
    };
    let fault = usize::try_from(attempt)
        .ok()
        .and_then(|a| step.faults.get(a.saturating_sub(1)))
        .cloned();

    if let Some(ms) = step.first_byte_delay_ms.filter(|ms| *ms > 0) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    let mut rec = step_record(body, StatusCode::OK);
    rec.fault = fault.clone();

    if let Some(Fault::Http {
        status,
        headers: extra,
        body: fault_body,
    }) = &fault
    {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        rec.status = status.as_u16();
        shared.record(rec);
        let mut resp = match fault_body {
            Some(Value::String(s)) => (
                status,
                [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
                s.clone(),
            )
                .into_response(),
            Some(v) => json_response(status, v),
            None => json_response(
                status,
                &wire::error_body(
                    dialect,
                    status.as_u16(),
                    &format!("mock fault: HTTP {}", status.as_u16()),
                    seq,
                ),
            ),
        };
        for (k, v) in extra {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                resp.headers_mut().insert(k, v);
            }
        }
        return resp;
    }

    match &fault {
        Some(Fault::Stall(Stall::Headers)) => return stall_before_headers(&shared, rec).await,
        Some(Fault::Stall(Stall::ErrorBody)) => {
            let body = wire::error_body(dialect, 500, "mock fault: stalled error body", seq);
            return stalled_body(
                &shared,
                StatusCode::INTERNAL_SERVER_ERROR,
                body.to_string(),
                rec,
            );
        }
        Some(Fault::Stall(Stall::Reuse)) => {
            lock(&shared.stalled_connections).insert(peer);
        }
        _ => {}
    }

    let created = now_ms() / 1000;
    let plan = Plan::new(
        step,
        conv_idx,
        info.step_index,
        seq,
        created,
        &info.model,
        raw.len(),
    );

    if let Some(Fault::Stall(Stall::Body)) = &fault {
        let full = match dialect {
            Dialect::OpenAi => wire::openai_completion(&plan),
            Dialect::Anthropic => wire::anthropic_message(&plan),
        };
        return stalled_body(&shared, StatusCode::OK, full.to_string(), rec);
    }

    if !info.stream {
        return non_streaming(&shared, rec, dialect, &plan, fault.as_ref()).await;
    }

    let frames = match dialect {
        Dialect::OpenAi => wire::openai_frames(&plan, info.include_usage),
        Dialect::Anthropic => wire::anthropic_frames(&plan),
    };
    let (frames, mut ending) = wire::apply_fault(frames, fault.as_ref(), dialect);
    let frames = wire::reframe(frames, step);
    if step.keep_open && matches!(ending, Ending::Done) {
        ending = Ending::Hang;
    }
    rec.end_ms = None;
    rec.end_us = None;
    shared.record(rec);
    let guard = FinishGuard {
        shared: Arc::clone(&shared),
        seq,
    };
    let body = sse_body(
        frames,
        ending,
        Duration::from_millis(step.delay_ms.unwrap_or(0)),
        shared.shutdown.clone(),
        guard,
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-request-id", format!("req_mock_{seq}"))
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Non-streaming answer. Stream faults map to: `cut_after` → half the JSON body then an aborted
/// connection; `malformed_after` → body `{not json`; `error_event_after` → HTTP 500 with the
/// error object; `hang_after` → headers sent, body hangs.
async fn non_streaming(
    shared: &Arc<Shared>,
    mut rec: RecordedRequest,
    dialect: Dialect,
    plan: &Plan,
    fault: Option<&Fault>,
) -> Response {
    let full = match dialect {
        Dialect::OpenAi => wire::openai_completion(plan),
        Dialect::Anthropic => wire::anthropic_message(plan),
    };
    let seq = rec.seq;
    let (frames, ending) = match fault {
        Some(Fault::CutAfter(_)) => {
            let full = full.to_string();
            let mut cut = full.len() / 2;
            while !full.is_char_boundary(cut) {
                cut -= 1;
            }
            (vec![Bytes::from(full[..cut].to_owned())], Ending::Abort)
        }
        Some(Fault::MalformedAfter(_)) => (vec![Bytes::from_static(b"{not json")], Ending::Done),
        Some(Fault::HangAfter(_)) => (Vec::new(), Ending::Hang),
        Some(Fault::ErrorEventAfter { error, .. }) => {
            rec.status = 500;
            shared.record(rec);
            let body = match dialect {
                Dialect::OpenAi => json!({ "error": error }),
                Dialect::Anthropic => wire::error_body(
                    dialect,
                    500,
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("mock error"),
                    seq,
                ),
            };
            return json_response(StatusCode::INTERNAL_SERVER_ERROR, &body);
        }
        _ => {
            shared.record(rec);
            return json_response(StatusCode::OK, &full);
        }
    };
    rec.end_ms = None;
    rec.end_us = None;
    shared.record(rec);
    let guard = FinishGuard {
        shared: Arc::clone(shared),
        seq,
    };
    let body = sse_body(
        frames,
        ending,
        Duration::ZERO,
        shared.shutdown.clone(),
        guard,
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

struct BodyState {
    frames: std::vec::IntoIter<Bytes>,
    ending: Option<Ending>,
    delay: Duration,
    first: bool,
    shutdown: watch::Receiver<bool>,
    _guard: FinishGuard,
}

/// A body that yields `frames` with `delay` between them, then ends per `ending`. The guard is
/// dropped (recording `end_ms`) when the body finishes or the client goes away.
fn sse_body(
    frames: Vec<Bytes>,
    ending: Ending,
    delay: Duration,
    shutdown: watch::Receiver<bool>,
    guard: FinishGuard,
) -> Body {
    let state = BodyState {
        frames: frames.into_iter(),
        ending: Some(ending),
        delay,
        first: true,
        shutdown,
        _guard: guard,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if let Some(frame) = st.frames.next() {
            if !st.first && !st.delay.is_zero() {
                tokio::time::sleep(st.delay).await;
            }
            st.first = false;
            return Some((Ok::<Bytes, std::io::Error>(frame), st));
        }
        match st.ending.take()? {
            Ending::Done => None,
            Ending::Abort => {
                // Let hyper flush the frames already queued: an error returned right after
                // them would tear the connection down with the frames still buffered.
                tokio::time::sleep(ABORT_FLUSH_PAUSE).await;
                Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "mock fault: connection cut",
                    )),
                    st,
                ))
            }
            Ending::Hang => {
                let mut rx = st.shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(HANG_LIMIT) => {}
                    _ = rx.wait_for(|down| *down) => {}
                }
                None
            }
        }
    });
    Body::from_stream(stream)
}
