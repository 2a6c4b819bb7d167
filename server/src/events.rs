//! `GET /event`: the bus as Server-Sent Events.
//!
//! Each message is `data: <troupe_session::Event JSON>\n\n`, i.e. `{"type": "...",
//! "properties": {...}}`. The first message is `server.connected`; `server.heartbeat` follows
//! every [`HEARTBEAT`] while the bus is quiet or busy. A client that reads slower than the
//! runtime publishes falls [`troupe_session::event::BUS_CAPACITY`] events behind; its broadcast
//! receiver then reports `Lagged` and the stream ends (the client is dropped, the runtime is
//! never slowed). The stream also ends when the server shuts down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;
use troupe_session::Event;

/// Interval between two `server.heartbeat` messages (OpenCode's server uses 10 s too).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The JSON of a server-side event with empty properties (`server.connected`, …).
pub fn server_event(kind: &str) -> String {
    serde_json::json!({"type": kind, "properties": {}}).to_string()
}

struct St {
    rx: broadcast::Receiver<Arc<Event>>,
    ticker: tokio::time::Interval,
    shutdown: CancellationToken,
    connected: bool,
}

/// The SSE stream for one client: `server.connected`, then bus events and heartbeats.
pub fn stream(
    rx: broadcast::Receiver<Arc<Event>>,
    shutdown: CancellationToken,
    heartbeat: Duration,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    let heartbeat = heartbeat.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let st = St {
        rx,
        ticker,
        shutdown,
        connected: false,
    };
    futures::stream::unfold(st, |mut st| async move {
        if !st.connected {
            st.connected = true;
            let ev = SseEvent::default().data(server_event("server.connected"));
            return Some((Ok(ev), st));
        }
        let data = tokio::select! {
            _ = st.shutdown.cancelled() => return None,
            _ = st.ticker.tick() => server_event("server.heartbeat"),
            r = st.rx.recv() => match r {
                Ok(ev) => match serde_json::to_string(&*ev) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("cannot serialize a bus event: {e}");
                        return None;
                    }
                },
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!("event stream client fell {n} events behind; dropping it");
                    return None;
                }
                Err(RecvError::Closed) => return None,
            },
        };
        Some((Ok(SseEvent::default().data(data)), st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn connected_first_then_events_and_lagged_client_is_dropped() {
        let bus = troupe_session::Bus::new();
        let rx = bus.subscribe();
        let s = stream(rx, CancellationToken::new(), Duration::from_secs(60));
        futures::pin_mut!(s);
        assert!(s.next().await.is_some()); // connected
        bus.publish(Event::SessionIdle {
            session_id: "ses_1".into(),
        });
        assert!(s.next().await.is_some());
        // Overflow the ring: the client is dropped.
        for _ in 0..troupe_session::event::BUS_CAPACITY + 10 {
            bus.publish(Event::SessionIdle {
                session_id: "ses_1".into(),
            });
        }
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn heartbeats_flow_and_shutdown_ends_the_stream() {
        let bus = troupe_session::Bus::new();
        let token = CancellationToken::new();
        let s = stream(bus.subscribe(), token.clone(), Duration::from_millis(20));
        futures::pin_mut!(s);
        assert!(s.next().await.is_some());
        assert!(s.next().await.is_some()); // a heartbeat after ~20 ms
        token.cancel();
        assert!(s.next().await.is_none());
    }
}
