//! The provider request of a step in a task of its own: attempts with retries, the stream's
//! events cast back to the processor, and the request's span.

use super::*;
use futures::FutureExt;

/// How one provider request attempt ended.
pub(super) enum Attempt {
    /// Nothing more to do for this step's task: the stream ended (and was reported) or the
    /// processor is gone.
    Over,
    /// The request or its stream failed: retry or report it.
    Failed(LlmError),
}

/// The step's span and the ids its provider-request spans carry.
pub(super) struct StreamSpan {
    pub(super) step: tracing::Span,
    pub(super) session_id: SessionId,
    pub(super) message_id: MessageId,
}

/// Most stream events sent to the processor in one message.
const MAX_STREAM_BATCH: usize = 256;

/// A stream item the decoder skipped (undecodable data): logged and counted.
fn stream_warning(shared: &RuntimeShared, provider_id: &str, message: &str) {
    tracing::warn!(provider = %provider_id, "{message}");
    shared.counters.incr(
        "stream_data_skipped_total",
        format!("provider=\"{provider_id}\""),
        1,
    );
}

pub(super) fn spawn_stream_task(
    myself: ActorRef<ProcMsg>,
    shared: Arc<RuntimeShared>,
    model: Arc<ResolvedModel>,
    mut request: ChatRequest,
    cancel: CancellationToken,
    span: StreamSpan,
) {
    let watcher = myself.clone();
    let task = tokio::spawn(async move {
        let model_name = model.full_id();
        let provider = shared.provider(&model);
        let max_attempts = shared.opts.max_retries.saturating_add(1).max(1);
        let mut attempt: u32 = 0;
        // Sum of this step's retry waits so far, for `max_retry_time`.
        let mut waited = Duration::ZERO;
        let limiter_key = model.provider_id.clone();
        loop {
            attempt += 1;
            // Shared back-off: another session's 429 holds every request to this provider.
            let until = shared
                .rate_limits
                .get(&limiter_key)
                .map(|v| *v)
                .unwrap_or(0);
            let wait = until - now_ms();
            if wait > 0 {
                tokio::select! {
                    _ = cancel.cancelled() => {
                        let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(ErrorKind::Aborted, "aborted")));
                        return;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
                }
            }
            shared.counters.incr(
                "provider_requests_started_total",
                format!("provider=\"{}\"", model.provider_id),
                1,
            );
            // Only an attempt that may be retried needs its own copy of the request (the
            // whole history and tool schemas); the last permitted attempt takes it.
            let mut this_request = if attempt >= max_attempts {
                std::mem::take(&mut request)
            } else {
                request.clone()
            };
            let req_span = crate::spans::provider_request(
                &span.step,
                &span.session_id,
                &span.message_id,
                &model_name,
                attempt,
            );
            // W3C trace context: a traced gateway or inference server joins this trace.
            if let Some(tp) = crate::spans::traceparent(&req_span) {
                this_request
                    .headers
                    .retain(|(k, _)| !k.eq_ignore_ascii_case("traceparent"));
                this_request.headers.push(("traceparent".into(), tp));
            }
            let sent = std::time::Instant::now();
            let _ = myself.cast(ProcMsg::AttemptSent {
                attempt,
                at: now_ms(),
            });
            // The whole attempt, sending and reading the stream, runs inside its span, so the
            // span (and its exported duration) ends with the stream.
            let ended = async {
                let mut first_event = true;
                let mut stream = match provider.stream(this_request, cancel.clone()).await {
                    Ok(stream) => stream,
                    Err(e) => return Attempt::Failed(e),
                };
                // An item read ahead (an error or the end after a batch of events).
                let mut ahead = None;
                loop {
                    let next = match ahead.take() {
                        Some(n) => n,
                        None => tokio::select! {
                            _ = cancel.cancelled() => {
                                return Attempt::Failed(LlmError::new(ErrorKind::Aborted, "aborted"));
                            }
                            n = stream.next() => n,
                        },
                    };
                    match next {
                        Some(Ok(StreamEvent::Warning { message })) => {
                            stream_warning(&shared, &model.provider_id, &message);
                        }
                        Some(Ok(ev)) => {
                            if std::mem::take(&mut first_event) {
                                req_span.record("ttft_ms", sent.elapsed().as_millis() as u64);
                                let _ = myself.cast(ProcMsg::FirstEvent { at: now_ms() });
                            }
                            // The events already decoded (one network read often holds a
                            // whole step) go to the processor in one message.
                            let mut batch = vec![ev];
                            while batch.len() < MAX_STREAM_BATCH {
                                match stream.next().now_or_never() {
                                    None => break,
                                    Some(Some(Ok(StreamEvent::Warning { message }))) => {
                                        stream_warning(&shared, &model.provider_id, &message);
                                    }
                                    Some(Some(Ok(ev))) => batch.push(ev),
                                    Some(end_or_error) => {
                                        ahead = Some(end_or_error);
                                        break;
                                    }
                                }
                            }
                            for ev in &batch {
                                if let StreamEvent::FinishStep { usage, .. } = ev {
                                    req_span.record("tokens_input", usage.input);
                                    req_span.record("tokens_output", usage.output);
                                }
                            }
                            if myself.cast(ProcMsg::Stream(batch)).is_err() {
                                return Attempt::Over;
                            }
                        }
                        Some(Err(e)) => return Attempt::Failed(e),
                        None => {
                            crate::spans::provider_request_end(&req_span, "ok");
                            shared.counters.incr(
                                "provider_requests_total",
                                format!("provider=\"{}\",status=\"ok\"", model.provider_id),
                                1,
                            );
                            let _ = myself.cast(ProcMsg::StreamEnded);
                            return Attempt::Over;
                        }
                    }
                }
            }
            .instrument(req_span.clone())
            .await;
            let failure = match ended {
                Attempt::Over => return,
                Attempt::Failed(f) => f,
            };
            let status = if failure.timeout {
                "timeout".to_string()
            } else {
                format!("{:?}", failure.kind)
            };
            crate::spans::provider_request_end(&req_span, &status);
            drop(req_span);
            shared.counters.incr(
                "provider_requests_total",
                format!(
                    "provider=\"{}\",status=\"{:?}\"",
                    model.provider_id, failure.kind
                ),
                1,
            );
            if cancel.is_cancelled() {
                let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(
                    ErrorKind::Aborted,
                    "aborted",
                )));
                return;
            }
            // A provider that cannot be reached at all (DNS, connection refused) is more likely
            // misconfigured than briefly down: give it 2 retries (2 s + 4 s), not the full cap.
            let unreachable = failure.message.starts_with("cannot reach provider");
            if !failure.is_retryable() || attempt >= max_attempts || (unreachable && attempt >= 3) {
                let _ = myself.cast(ProcMsg::StreamFailed(failure));
                return;
            }
            let delay =
                troupe_llm::retry::retry_delay(attempt, &failure.retry_headers, SystemTime::now());
            let delay = delay.min(shared.opts.max_retry_delay);
            if let Some(cap) = shared.opts.max_retry_time
                && waited + delay > cap
            {
                let mut failure = failure;
                failure.message = format!(
                    "{} (gave up after {attempt} attempt{}: another retry would pass the {:.1}s retry-time cap)",
                    failure.message,
                    if attempt == 1 { "" } else { "s" },
                    cap.as_secs_f64()
                );
                let _ = myself.cast(ProcMsg::StreamFailed(failure));
                return;
            }
            waited += delay;
            let next = now_ms() + delay.as_millis() as i64;
            shared.counters.incr(
                "retries_total",
                format!("provider=\"{}\"", model.provider_id),
                1,
            );
            if failure.kind == ErrorKind::RateLimit {
                shared
                    .rate_limits
                    .entry(limiter_key.clone())
                    .and_modify(|v| *v = (*v).max(next))
                    .or_insert(next);
            }
            let _ = myself.cast(ProcMsg::Retrying {
                attempt,
                message: failure.message.clone(),
                next,
            });
            let _wait = crate::spans::retry_wait(
                &span.step,
                &span.session_id,
                &span.message_id,
                attempt,
                delay.as_millis() as u64,
                &failure.message,
            );
            tokio::select! {
                _ = cancel.cancelled() => {
                    let _ = myself.cast(ProcMsg::StreamFailed(LlmError::new(ErrorKind::Aborted, "aborted")));
                    return;
                }
                _ = tokio::time::sleep(delay) => {}
            }
            if myself.cast(ProcMsg::ResetAttempt).is_err() {
                return;
            }
        }
    });
    // A panic in the provider task fails this step with an error instead of leaving the
    // processor waiting forever.
    tokio::spawn(async move {
        if let Err(e) = task.await
            && e.is_panic()
        {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            let _ = watcher.cast(ProcMsg::StreamFailed(LlmError::new(
                ErrorKind::Transport,
                format!("the provider task panicked: {msg}"),
            )));
        }
    });
}
