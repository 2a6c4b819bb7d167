//! [`Counters`] of the runtime (served by `GET /metrics` and `/actors`) and the
//! [`ActorGauge`] that counts live actors.

use super::*;

/// Counters of the runtime, exported by `GET /metrics` (server/src/metrics.rs) and shown in `/actors`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Steps started.
    pub steps: AtomicU64,
    /// Tool actors that crashed.
    pub tool_crashes: AtomicU64,
    /// Processor actors that crashed.
    pub processor_crashes: AtomicU64,
    /// Live actors of the runtime (sessions, processors, tool calls), kept by [`ActorGauge`]s.
    pub live_actors: Arc<std::sync::atomic::AtomicI64>,
    /// Labelled counters: (metric name, label set in Prometheus syntax) → value.
    pub labeled: DashMap<(&'static str, String), u64>,
    /// Total cost, USD, of the steps this runtime ran.
    pub cost: std::sync::Mutex<Decimal>,
}

impl Counters {
    /// Count a crash of an actor of `role` (`actor_failures_total{role=…}`).
    pub fn failure(&self, role: crate::supervision::Role) {
        self.incr(
            "actor_failures_total",
            format!("role=\"{}\"", role.as_str()),
            1,
        );
    }

    /// Count a restart of an actor of `role` (`actor_restarts_total{role=…}`).
    pub fn restart(&self, role: crate::supervision::Role) {
        self.incr(
            "actor_restarts_total",
            format!("role=\"{}\"", role.as_str()),
            1,
        );
    }

    /// Add `by` to a labelled counter, e.g. `incr("tool_calls_total", "tool=\"bash\",outcome=\"completed\"", 1)`.
    pub fn incr(&self, name: &'static str, labels: String, by: u64) {
        *self.labeled.entry((name, labels)).or_insert(0) += by;
    }

    /// Snapshot of the labelled counters, sorted.
    pub fn snapshot(&self) -> Vec<(&'static str, String, u64)> {
        let mut v: Vec<_> = self
            .labeled
            .iter()
            .map(|e| (e.key().0, e.key().1.clone(), *e.value()))
            .collect();
        v.sort();
        v
    }
}

/// Counts one live actor while it exists: created in `pre_start`, kept in the actor's state,
/// dropped with the state however the actor ends (stop, panic or kill), so the count never
/// leaks the way `post_stop`-based bookkeeping would.
#[derive(Debug)]
pub struct ActorGauge(Arc<std::sync::atomic::AtomicI64>);

impl ActorGauge {
    /// Count one more live actor.
    pub fn new(counter: &Arc<std::sync::atomic::AtomicI64>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for ActorGauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
