//! The runtime's side of session leases ([`troupe_session::lease`]): one owner per session
//! across processes.
//!
//! [`crate::Runtime`] takes a session's lease before it loads the session and starts its
//! actor, so a session is loaded (and swept after a crash) only by its owner, and its
//! history is never stale: while the lease is held nobody else writes the session. The
//! [`SessionLease`] lives in the session actor's state; a heartbeat task renews it every
//! third of its TTL, off the actor's mailbox, so a long step never lets it lapse. When the
//! actor stops (idle, shutdown, crash) the lease is dropped: the heartbeat stops and a task
//! flushes the store (the turn's last writes land first) and releases the lease. A process
//! killed with SIGKILL releases nothing; its lease expires one TTL after its last heartbeat
//! and the next driver takes it over.
//!
//! If a renewal finds the lease taken (the process stalled past its TTL, e.g. suspended),
//! the lease is *lost*: the session actor aborts its turn, refuses queued prompts and stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use troupe_session::SessionId;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use troupe_session::{LeaseClaim, LeaseHolder, Store};

/// Default time a lease lasts without a heartbeat: 30 s. A holder renews every third of it;
/// a dead holder blocks its sessions at most this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Default longest wait for another process's lease before giving up: 5 min.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(300);

/// Between two attempts to take a lease someone else holds: 100 ms.
pub const LEASE_POLL: Duration = Duration::from_millis(100);

/// Who this runtime is, for the leases it takes.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Process id.
    pub pid: u32,
    /// Host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else `localhost`).
    pub host: String,
    /// What the process is (`troupe run`, `troupe serve`).
    pub label: String,
}

impl Identity {
    /// This process, labelled `label`.
    pub fn current(label: &str) -> Identity {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "localhost".into());
        let pid = std::process::id();
        Identity {
            pid,
            host,
            label: label.to_string(),
        }
    }

    /// A claim with a fresh owner id (`own_<pid>_<unique>`: one per lease taken).
    pub fn claim(&self) -> LeaseClaim {
        let unique = troupe_session::id::ascending(troupe_session::id::Prefix::Event);
        LeaseClaim {
            owner: format!("own_{}_{}", self.pid, unique.trim_start_matches("evt_")),
            pid: self.pid,
            host: self.host.clone(),
            label: self.label.clone(),
        }
    }
}

/// Leases this runtime holds, the tasks releasing them (waited for at shutdown), and the
/// prompts on their way to a session actor (an abort ends their wait for another process's
/// lease, and is passed on once they are queued).
#[derive(Debug, Default)]
pub struct LeaseBook {
    /// Release tasks.
    pub(crate) releases: TaskTracker,
    /// Leases held now.
    pub(crate) held: std::sync::atomic::AtomicI64,
    /// Per session: the token its waiters watch, and how many wait.
    waits: dashmap::DashMap<SessionId, (CancellationToken, usize)>,
}

/// One prompt on its way to a session actor; unregisters itself when dropped.
pub(crate) struct WaitGuard<'a> {
    book: &'a LeaseBook,
    session_id: SessionId,
    /// Cancelled by [`LeaseBook::abort_waits`].
    pub(crate) token: CancellationToken,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        // A cancelled token's entry was removed by the abort; a later entry of the same
        // session belongs to later waiters.
        if self.token.is_cancelled() {
            return;
        }
        self.book
            .waits
            .remove_if_mut(&self.session_id, |_, (_, n)| {
                *n = n.saturating_sub(1);
                *n == 0
            });
    }
}

impl LeaseBook {
    /// Register a prompt on its way to `session_id`'s actor.
    pub(crate) fn wait_guard(&self, session_id: &SessionId) -> WaitGuard<'_> {
        let token = {
            let mut e = self
                .waits
                .entry(session_id.clone())
                .or_insert_with(|| (CancellationToken::new(), 0));
            e.1 += 1;
            e.0.clone()
        };
        WaitGuard {
            book: self,
            session_id: session_id.clone(),
            token,
        }
    }

    /// Cancel the tokens of the prompts on their way to `session_id` (every session's with
    /// `None`).
    pub(crate) fn abort_waits(&self, session_id: Option<&SessionId>) {
        match session_id {
            Some(id) => {
                if let Some((_, (t, _))) = self.waits.remove(id) {
                    t.cancel();
                }
            }
            None => self.waits.retain(|_, (t, _)| {
                t.cancel();
                false
            }),
        }
    }

    /// Number of leases held (taken and not yet released).
    pub fn held(&self) -> i64 {
        self.held.load(Ordering::SeqCst)
    }

    /// Wait until every lease is released, at most `grace` (at shutdown).
    pub async fn settle(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.held() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // `wait` returns only once the tracker is closed (and empty); spawning still works
        // after `close`, so a late release still runs.
        self.releases.close();
        let _ = tokio::time::timeout_at(deadline, self.releases.wait()).await;
    }
}

/// A held lease of one session. Dropping it releases it (after a store flush).
pub struct SessionLease {
    store: Store,
    session_id: SessionId,
    owner: String,
    book: Arc<LeaseBook>,
    lost: CancellationToken,
    dropped: CancellationToken,
    released: AtomicBool,
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLease")
            .field("session_id", &self.session_id)
            .field("owner", &self.owner)
            .finish()
    }
}

impl SessionLease {
    /// Wrap a lease just taken as `lease`, and start its heartbeat (every `ttl / 3`).
    pub(crate) fn start(
        store: Store,
        lease: &LeaseHolder,
        ttl: Duration,
        book: Arc<LeaseBook>,
    ) -> SessionLease {
        book.held.fetch_add(1, Ordering::SeqCst);
        let lost = CancellationToken::new();
        let dropped = CancellationToken::new();
        let (s, sid, owner, l, d) = (
            store.clone(),
            lease.session_id.clone(),
            lease.owner.clone(),
            lost.clone(),
            dropped.clone(),
        );
        let every = (ttl / 3).max(Duration::from_millis(1));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = d.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                match s.lease_renew(&sid, &owner, ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        if !d.is_cancelled() {
                            tracing::error!(
                                "lost the lease of session {sid}: another process took it over"
                            );
                            l.cancel();
                        }
                        return;
                    }
                    // A busy or failing store: try again next beat; if it stays down the
                    // lease lapses and the next renewal reports it lost.
                    Err(e) => tracing::warn!("could not renew the lease of session {sid}: {e}"),
                }
            }
        });
        SessionLease {
            store,
            session_id: lease.session_id.clone(),
            owner: lease.owner.clone(),
            book,
            lost,
            dropped,
            released: AtomicBool::new(false),
        }
    }

    /// Cancelled when a renewal finds the lease taken by another holder.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Cancelled when this lease is dropped (for watchers of [`SessionLease::lost`]).
    pub fn dropped(&self) -> CancellationToken {
        self.dropped.clone()
    }

    /// The owner id of this lease.
    pub fn owner(&self) -> &str {
        &self.owner
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        self.dropped.cancel();
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        let book = self.book.clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime left (process exit): the lease expires after its TTL.
            book.held.fetch_sub(1, Ordering::SeqCst);
            return;
        };
        let (store, sid, owner) = (
            self.store.clone(),
            self.session_id.clone(),
            self.owner.clone(),
        );
        let b = book.clone();
        book.releases.spawn_on(
            async move {
                // The session's last writes are committed before another process may load it.
                let _ = store.flush().await;
                if let Err(e) = store.lease_release(&sid, &owner).await {
                    tracing::warn!("could not release the lease of session {sid}: {e}");
                }
                b.held.fetch_sub(1, Ordering::SeqCst);
            },
            &handle,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_session::{Bus, TakeOutcome};

    /// Regression: `settle` waited on a tracker that was never closed, so every shutdown
    /// took the whole grace (3 s after each `troupe run`). The clock is paused: had it
    /// waited, the virtual time would have jumped to the deadline.
    #[tokio::test(start_paused = true)]
    async fn settle_returns_at_once_when_nothing_is_held() {
        let book = LeaseBook::default();
        let t0 = tokio::time::Instant::now();
        book.settle(Duration::from_secs(3600)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }

    #[test]
    fn abort_ends_the_waits_of_its_session_only() {
        let book = LeaseBook::default();
        let (a1, a2, b) = (
            book.wait_guard(&"ses_a".into()),
            book.wait_guard(&"ses_a".into()),
            book.wait_guard(&"ses_b".into()),
        );
        book.abort_waits(Some(&"ses_a".into()));
        assert!(a1.token.is_cancelled() && a2.token.is_cancelled());
        assert!(!b.token.is_cancelled());
        drop(a1);
        // A new waiter after the abort waits afresh, and an old one leaving does not
        // unregister it.
        let a3 = book.wait_guard(&"ses_a".into());
        assert!(!a3.token.is_cancelled());
        drop(a2);
        book.abort_waits(Some(&"ses_a".into()));
        assert!(a3.token.is_cancelled());
        drop(a3);
        let a4 = book.wait_guard(&"ses_a".into());
        drop(a4);
        assert!(book.waits.get("ses_a").is_none(), "no entry left behind");
        book.abort_waits(None);
        assert!(b.token.is_cancelled());
        drop(b);
        assert!(book.waits.is_empty());
    }

    /// A holder that stalled past its TTL finds, at its next heartbeat, that another
    /// process took the session over: the lease reports itself lost.
    #[tokio::test]
    async fn a_lease_taken_over_after_expiry_is_reported_lost() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db"), Bus::new()).unwrap();
        let me = Identity::current("troupe test");
        let (stalled, other) = (me.claim(), me.claim());
        // The stalled holder's last renewal gave it 1 ms; its heartbeat comes every 100 ms.
        let TakeOutcome::Taken { lease, .. } = store
            .lease_take(&"ses_x".into(), &stalled, Duration::from_millis(1))
            .await
            .unwrap()
        else {
            panic!("free lease not taken");
        };
        let book = Arc::new(LeaseBook::default());
        let held = SessionLease::start(
            store.clone(),
            &lease,
            Duration::from_millis(300),
            book.clone(),
        );
        let lost = held.lost();
        loop {
            match store
                .lease_take(&"ses_x".into(), &other, Duration::from_secs(60))
                .await
                .unwrap()
            {
                TakeOutcome::Taken { previous, .. } => {
                    assert_eq!(previous.map(|p| p.owner), Some(stalled.owner.clone()));
                    break;
                }
                TakeOutcome::Held(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        lost.cancelled().await;
        // Dropping the lost lease does not release the new holder's.
        drop(held);
        book.settle(Duration::from_secs(3600)).await;
        let now = store
            .lease_of(&"ses_x".into())
            .await
            .unwrap()
            .map(|h| h.owner);
        assert_eq!(now, Some(other.owner));
    }

    #[tokio::test]
    async fn dropping_a_lease_releases_it_after_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db"), Bus::new()).unwrap();
        let me = Identity::current("troupe test");
        assert!(me.pid > 0 && !me.host.is_empty());
        let (a, b) = (me.claim(), me.claim());
        assert_ne!(a.owner, b.owner, "one owner id per lease");
        let ttl = Duration::from_secs(60);
        let TakeOutcome::Taken { lease, .. } =
            store.lease_take(&"ses_x".into(), &a, ttl).await.unwrap()
        else {
            panic!("free lease not taken");
        };
        let book = Arc::new(LeaseBook::default());
        let held = SessionLease::start(store.clone(), &lease, ttl, book.clone());
        assert_eq!(book.held(), 1);
        // Another holder (same process, another actor incarnation) is refused meanwhile.
        assert!(matches!(
            store.lease_take(&"ses_x".into(), &b, ttl).await.unwrap(),
            TakeOutcome::Held(h) if h.owner == a.owner && h.label == "troupe test"
        ));
        drop(held);
        book.settle(Duration::from_secs(3600)).await;
        assert_eq!(book.held(), 0);
        assert_eq!(store.lease_of(&"ses_x".into()).await.unwrap(), None);
        assert!(matches!(
            store.lease_take(&"ses_x".into(), &b, ttl).await.unwrap(),
            TakeOutcome::Taken { previous: None, .. }
        ));
    }
}
