//! The tool timeout's clock: it runs while a tool call works and stands still while the call
//! waits for a person to answer a permission ask.
//!
//! The tool timeout (`RuntimeOptions::tool_timeout`, 10 min by default) is a safety net for
//! hung tools, not a limit on how long a person may take to approve a call: OpenCode's asks
//! wait as long as it takes. Each tool-call actor gets a [`CallClock`]; its permission asker
//! is wrapped in [`ClockedAsker`], which stops the clock while an ask is pending (rules
//! that decide at once stop it for microseconds), and the timer ([`CallClock::expired`])
//! counts only the time the clock ran.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest};

/// What the clock knows: how many asks are pending and how long it stood still so far.
#[derive(Debug, Clone, Copy)]
struct Stopped {
    /// Permission asks of the call that are waiting for an answer (a tool may ask several at
    /// once; the clock runs again when the last is answered).
    waiting: u32,
    /// Total time the clock stood still before the current wait.
    total: Duration,
    /// When the current wait began (`Some` while `waiting > 0`).
    since: Option<Instant>,
}

/// A tool call's timeout clock. Cheap to clone (a shared watch channel).
#[derive(Debug, Clone)]
pub struct CallClock {
    started: Instant,
    state: Arc<watch::Sender<Stopped>>,
}

impl Default for CallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl CallClock {
    /// A running clock that starts now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            state: Arc::new(watch::Sender::new(Stopped {
                waiting: 0,
                total: Duration::ZERO,
                since: None,
            })),
        }
    }

    /// Stop the clock until the returned guard is dropped (an ask answered or abandoned).
    pub fn stop(&self) -> StoppedGuard {
        self.state.send_modify(|s| {
            if s.waiting == 0 {
                s.since = Some(Instant::now());
            }
            s.waiting += 1;
        });
        StoppedGuard {
            state: self.state.clone(),
        }
    }

    /// Time the clock has run (wall time since it started minus every wait for a person).
    pub fn running_time(&self) -> Duration {
        let s = *self.state.borrow();
        let stopped = s.total + s.since.map_or(Duration::ZERO, |t| t.elapsed());
        self.started.elapsed().saturating_sub(stopped)
    }

    /// Resolves once the clock has run for `limit` (never while an ask waits). A `limit` past
    /// the clock's range (`Duration::MAX`, the `question` tool) never resolves.
    pub async fn expired(&self, limit: Duration) {
        let mut rx = self.state.subscribe();
        loop {
            let waiting = rx.borrow_and_update().waiting > 0;
            if waiting {
                if rx.changed().await.is_err() {
                    return std::future::pending().await;
                }
                continue;
            }
            let left = limit.saturating_sub(self.running_time());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                // tokio's sleep takes a deadline past the clock's range as "never".
                _ = tokio::time::sleep(left) => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }
}

/// Keeps a [`CallClock`] stopped; dropping it lets the clock run again (when no other ask
/// of the call is pending).
#[derive(Debug)]
pub struct StoppedGuard {
    state: Arc<watch::Sender<Stopped>>,
}

impl Drop for StoppedGuard {
    fn drop(&mut self) {
        self.state.send_modify(|s| {
            s.waiting = s.waiting.saturating_sub(1);
            if s.waiting == 0
                && let Some(since) = s.since.take()
            {
                s.total += since.elapsed();
            }
        });
    }
}

/// A permission asker that stops its call's [`CallClock`] while an ask is pending.
pub struct ClockedAsker {
    /// The turn's asker (rulesets, the person, the non-interactive policy).
    pub inner: Arc<dyn PermissionAsker>,
    /// The clock of the call this asker serves.
    pub clock: CallClock,
}

impl PermissionAsker for ClockedAsker {
    fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        let guard = self.clock.stop();
        let fut = self.inner.ask(req);
        Box::pin(async move {
            let reply = fut.await;
            drop(guard);
            reply
        })
    }

    fn precheck(&self, req: &PermissionRequest) -> BoxFuture<'static, Option<PermissionReply>> {
        self.inner.precheck(req)
    }

    fn allowed(&self, permission: &str, patterns: Vec<String>) -> BoxFuture<'static, Vec<bool>> {
        self.inner.allowed(permission, patterns)
    }

    fn gate(&self) -> BoxFuture<'static, Option<Arc<dyn troupe_tools::RuleGate>>> {
        self.inner.gate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_stands_still_while_an_ask_waits() {
        let clock = CallClock::new();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let guard = clock.stop();
        let limit = Duration::from_millis(300);
        let timer = tokio::spawn({
            let clock = clock.clone();
            async move { clock.expired(limit).await }
        });
        // Ten times the limit waiting for a person: the timer must not fire.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!timer.is_finished(), "the timer ran while the ask waited");
        drop(guard);
        // 100 ms ran before the ask; 200 ms more are left.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !timer.is_finished(),
            "fired before the running time reached the limit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(timer.is_finished(), "did not fire once the limit had run");
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_asks_keep_it_stopped_until_the_last_is_answered() {
        let clock = CallClock::new();
        let a = clock.stop();
        let b = clock.stop();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(a);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(clock.running_time(), Duration::ZERO);
        drop(b);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(clock.running_time(), Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn without_asks_it_fires_at_the_limit_and_never_for_max() {
        let clock = CallClock::new();
        let fired = tokio::spawn({
            let clock = clock.clone();
            async move { clock.expired(Duration::from_millis(500)).await }
        });
        let never = tokio::spawn({
            let clock = clock.clone();
            async move { clock.expired(Duration::MAX).await }
        });
        tokio::time::sleep(Duration::from_millis(499)).await;
        assert!(!fired.is_finished());
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(fired.is_finished());
        tokio::time::sleep(Duration::from_secs(86_400)).await;
        assert!(!never.is_finished());
    }
}
