//! Session leases: one owner per session across every process that opens the store.
//!
//! A session actor keeps a session's turns in order inside one process; a lease does it
//! across processes (a `troupe serve`, CLI runs, batch jobs on one store file). Before a
//! process drives a session it takes the session's lease; while it drives it, a heartbeat
//! renews the lease; when it is done it releases it. Another process that wants the session
//! meanwhile sees who holds it ([`LeaseHolder`]) and waits or gives up. A holder that died
//! (kill -9, power loss) stops renewing, its lease expires after its TTL, and the next
//! taker takes it over.
//!
//! The whole protocol is three store operations, each one short transaction:
//!
//! | operation | effect |
//! |---|---|
//! | [`Store::lease_take`] | insert the lease, or replace it when it is the caller's own or has expired; otherwise report the holder |
//! | [`Store::lease_renew`] | move the caller's heartbeat and expiry forward; `false` when the lease is no longer the caller's |
//! | [`Store::lease_release`] | delete the caller's lease (no-op when it is not the caller's) |
//!
//! Times (`acquired`, `heartbeat`, `expires`) are ms since the Unix epoch **in the store's
//! clock** (SQLite's `julianday('now')`, PostgreSQL's `now()`), and expiry
//! is only ever compared inside the store, so processes with skewed clocks still agree on
//! who holds a lease. The table is `session_lease(session_id PK, owner, pid, host, label,
//! acquired, heartbeat, expires)`; an owner id is unique per holder (one per session actor
//! incarnation), so two holders in one process are still told apart.

use std::collections::BTreeMap;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::store::{Store, StoreError};
use crate::types::SessionId;

/// Who asks for a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseClaim {
    /// Unique id of this holder (e.g. `own_…`); renew and release must present it.
    pub owner: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Host name of the holder's machine.
    pub host: String,
    /// What the holder is, for people (`troupe run`, `troupe serve`).
    pub label: String,
}

/// A lease as stored: who holds the session and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHolder {
    /// Id of the leased session (`ses_…`).
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Unique id of the holder.
    pub owner: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Host name of the holder.
    pub host: String,
    /// What the holder is (`troupe run`, `troupe serve`).
    pub label: String,
    /// When it took the lease, ms since epoch (store clock).
    pub acquired: i64,
    /// Its last heartbeat, ms since epoch (store clock).
    pub heartbeat: i64,
    /// When the lease lapses unless renewed, ms since epoch (store clock).
    pub expires: i64,
}

impl LeaseHolder {
    /// One line naming the holder: `troupe run (pid 123 on box)`.
    pub fn describe(&self) -> String {
        format!("{} (pid {} on {})", self.label, self.pid, self.host)
    }
}

/// The answer of [`Store::lease_take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOutcome {
    /// The caller holds the lease now. `previous` is the expired lease it replaced, if any
    /// (its holder died or stalled without releasing).
    Taken {
        /// The caller's lease.
        lease: LeaseHolder,
        /// An expired lease of another holder that was taken over.
        previous: Option<LeaseHolder>,
    },
    /// Another holder has it and it has not expired.
    Held(LeaseHolder),
}

/// `now` in the store's clock, ms since the Unix epoch (SQL expression).
pub(crate) const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// The lease table (store migration 2).
pub(crate) const MIGRATION: &str = "CREATE TABLE session_lease (
        session_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        pid INTEGER NOT NULL,
        host TEXT NOT NULL,
        label TEXT NOT NULL,
        acquired INTEGER NOT NULL,
        heartbeat INTEGER NOT NULL,
        expires INTEGER NOT NULL
     );";

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    ttl.as_millis().clamp(1, i64::MAX as u128) as i64
}

fn row_to_holder(r: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseHolder> {
    Ok(LeaseHolder {
        session_id: r.get(0)?,
        owner: r.get(1)?,
        pid: r.get::<_, i64>(2)?.clamp(0, u32::MAX as i64) as u32,
        host: r.get(3)?,
        label: r.get(4)?,
        acquired: r.get(5)?,
        heartbeat: r.get(6)?,
        expires: r.get(7)?,
    })
}

const COLUMNS: &str = "session_id, owner, pid, host, label, acquired, heartbeat, expires";

pub(crate) fn take(
    conn: &mut Connection,
    session_id: &str,
    claim: &LeaseClaim,
    ttl: Duration,
) -> rusqlite::Result<TakeOutcome> {
    // IMMEDIATE: the read and the write below are one atomic step for every process.
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let now: i64 = tx.query_row(&format!("SELECT {NOW_MS}"), [], |r| r.get(0))?;
    let current = tx
        .query_row(
            &format!("SELECT {COLUMNS} FROM session_lease WHERE session_id = ?1"),
            [session_id],
            row_to_holder,
        )
        .optional()?;
    let outcome = decide(current, now, session_id, claim, ttl);
    let TakeOutcome::Taken { lease: l, .. } = &outcome else {
        return Ok(outcome);
    };
    tx.execute(
        &format!(
            "INSERT INTO session_lease ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT(session_id) DO UPDATE SET owner = excluded.owner, pid = excluded.pid,
               host = excluded.host, label = excluded.label, acquired = excluded.acquired,
               heartbeat = excluded.heartbeat, expires = excluded.expires"
        ),
        params![
            l.session_id,
            l.owner,
            l.pid as i64,
            l.host,
            l.label,
            l.acquired,
            l.heartbeat,
            l.expires
        ],
    )?;
    tx.commit()?;
    Ok(outcome)
}

/// The decision of a take, the same on every backend: `current` is the stored lease of
/// `session_id` (read under the backend's lock), `now` the store clock's time (ms).
/// `Held` when another live holder has it; otherwise `Taken` with the caller's lease to
/// store (`acquired` kept when the caller already held it) and the expired lease it
/// replaces.
pub(crate) fn decide(
    current: Option<LeaseHolder>,
    now: i64,
    session_id: &str,
    claim: &LeaseClaim,
    ttl: Duration,
) -> TakeOutcome {
    let (previous, acquired) = match current {
        Some(h) if h.owner != claim.owner && h.expires > now && !holder_dead(&h, claim) => {
            return TakeOutcome::Held(h);
        }
        Some(h) if h.owner != claim.owner => (Some(h), now),
        Some(h) => (None, h.acquired),
        None => (None, now),
    };
    let lease = LeaseHolder {
        session_id: session_id.into(),
        owner: claim.owner.clone(),
        pid: claim.pid,
        host: claim.host.clone(),
        label: claim.label.clone(),
        acquired,
        heartbeat: now,
        expires: now.saturating_add(ttl_ms(ttl)),
    };
    TakeOutcome::Taken { lease, previous }
}

/// Whether the holder of an unexpired lease is known to be dead: the claimant is this very
/// process (production claims carry the real pid and host), the lease was taken on the same
/// host by another process, and that pid no longer runs. Then waiting out the TTL would only
/// make the user wait for a process that is gone (kill -9, a crash). A reused pid reads as
/// alive, which only means waiting, as before. Hosts whose processes share a store but not a
/// pid namespace must have different host names.
fn holder_dead(h: &LeaseHolder, claim: &LeaseClaim) -> bool {
    claim.pid == std::process::id()
        && h.pid != claim.pid
        && h.host == claim.host
        && !pid_running(h.pid)
}

/// Whether a process with this pid exists (a zombie counts). Off Linux nothing is known, so
/// every holder counts as running.
fn pid_running(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

pub(crate) fn renew(
    conn: &Connection,
    session_id: &str,
    owner: &str,
    ttl: Duration,
) -> rusqlite::Result<bool> {
    let n = conn.execute(
        &format!(
            "UPDATE session_lease SET heartbeat = {NOW_MS}, expires = {NOW_MS} + ?3
             WHERE session_id = ?1 AND owner = ?2"
        ),
        params![session_id, owner, ttl_ms(ttl)],
    )?;
    Ok(n == 1)
}

pub(crate) fn release(conn: &Connection, session_id: &str, owner: &str) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM session_lease WHERE session_id = ?1 AND owner = ?2",
        params![session_id, owner],
    )?;
    Ok(())
}

/// Unexpired leases (store clock), of one session or of all.
pub(crate) fn live(
    conn: &Connection,
    session_id: Option<&str>,
) -> rusqlite::Result<Vec<LeaseHolder>> {
    let mut out = Vec::new();
    match session_id {
        Some(id) => {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM session_lease WHERE session_id = ?1 AND expires > {NOW_MS}"
            ))?;
            for row in stmt.query_map([id], row_to_holder)? {
                out.push(row?);
            }
        }
        None => {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM session_lease WHERE expires > {NOW_MS}"
            ))?;
            for row in stmt.query_map([], row_to_holder)? {
                out.push(row?);
            }
        }
    }
    Ok(out)
}

/// Every lease row with whether it has expired in the store's clock (for
/// [`Store::abandoned_leases`]).
pub(crate) fn all_rows(conn: &Connection) -> rusqlite::Result<Vec<(LeaseHolder, bool)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS}, expires <= {NOW_MS} FROM session_lease ORDER BY session_id"
    ))?;
    let rows = stmt.query_map([], |r| Ok((row_to_holder(r)?, r.get::<_, bool>(8)?)))?;
    rows.collect()
}

/// Whether a row of [`all_rows`] has a holder that is gone as `claim` sees it: expired, or
/// held by a process of `claim`'s host that no longer runs ([`holder_dead`]). The claimant's
/// own process's leases never count (a stalled heartbeat of a live actor is not abandonment).
fn abandoned(h: &LeaseHolder, expired: bool, claim: &LeaseClaim) -> bool {
    let own_process = h.pid == claim.pid && h.host == claim.host;
    h.owner != claim.owner && !own_process && (expired || holder_dead(h, claim))
}

/// The lease table as the process of `claim` sees it ([`Store::lease_view`]), by session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaseView {
    /// Unexpired leases whose holder may still run: the sessions driven somewhere now.
    pub live: BTreeMap<SessionId, LeaseHolder>,
    /// Leases whose holder is gone (see [`Store::abandoned_leases`]): sessions whose last
    /// turn may have stopped mid-step.
    pub abandoned: BTreeMap<SessionId, LeaseHolder>,
}

impl LeaseView {
    /// Sort the rows of [`all_rows`]; an expired lease of `claim`'s own process is in neither
    /// map (its actor renews it, or it is released).
    pub(crate) fn of(rows: Vec<(LeaseHolder, bool)>, claim: &LeaseClaim) -> LeaseView {
        let mut view = LeaseView::default();
        for (h, expired) in rows {
            if abandoned(&h, expired, claim) {
                view.abandoned.insert(h.session_id.clone(), h);
            } else if !expired {
                view.live.insert(h.session_id.clone(), h);
            }
        }
        view
    }
}

impl Store {
    /// Take the lease of `session_id` for `ttl` (see the [module docs](self)): `Taken` when
    /// nobody held it, the caller already did, or the holder's lease had expired in the
    /// store's clock; `Held` with the holder otherwise. Runs on the blocking pool; waits up
    /// to the store's busy timeout for another process's write lock.
    pub async fn lease_take(
        &self,
        session_id: &SessionId,
        claim: &LeaseClaim,
        ttl: Duration,
    ) -> Result<TakeOutcome, StoreError> {
        let (sid, claim) = (session_id.to_string(), claim.clone());
        let (sid2, claim2) = (sid.clone(), claim.clone());
        self.with_lease_conn(
            move |c| take(c, &sid, &claim, ttl),
            move |pg| pg.lease_take(&sid2, &claim2, ttl),
        )
        .await
    }

    /// Renew `owner`'s lease of `session_id` for another `ttl` from now (store clock).
    /// `Ok(false)`: the lease is not `owner`'s any more (it expired and another holder took
    /// it, or it was released) — the caller must stop driving the session.
    pub async fn lease_renew(
        &self,
        session_id: &SessionId,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let (sid, owner) = (session_id.to_string(), owner.to_string());
        let (sid2, owner2) = (sid.clone(), owner.clone());
        self.with_lease_conn(
            move |c| renew(c, &sid, &owner, ttl),
            move |pg| pg.lease_renew(&sid2, &owner2, ttl),
        )
        .await
    }

    /// Release `owner`'s lease of `session_id` (no-op if it is not `owner`'s).
    pub async fn lease_release(
        &self,
        session_id: &SessionId,
        owner: &str,
    ) -> Result<(), StoreError> {
        let (sid, owner) = (session_id.to_string(), owner.to_string());
        let (sid2, owner2) = (sid.clone(), owner.clone());
        self.with_lease_conn(
            move |c| release(c, &sid, &owner),
            move |pg| pg.lease_release(&sid2, &owner2),
        )
        .await
    }

    /// The unexpired lease of `session_id`, if any (who drives the session right now).
    pub async fn lease_of(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<LeaseHolder>, StoreError> {
        let sid = session_id.to_string();
        let sid2 = sid.clone();
        self.with_lease_conn(
            move |c| live(c, Some(&sid)).map(|v| v.into_iter().next()),
            move |pg| pg.leases(Some(&sid2)).map(|v| v.into_iter().next()),
        )
        .await
    }

    /// The leases left behind by holders that are gone, as the process of `claim` sees them:
    /// expired in the store's clock, or held by a process on `claim`'s host that no longer
    /// runs (kill -9, a crash). Their sessions may hold a turn that never finished (tool parts
    /// still `running`); [`Store::lease_take`] with `claim` takes each over. Leases of
    /// `claim`'s own process never count. One read of the (small) lease table.
    pub async fn abandoned_leases(
        &self,
        claim: &LeaseClaim,
    ) -> Result<Vec<LeaseHolder>, StoreError> {
        Ok(self
            .lease_view(claim)
            .await?
            .abandoned
            .into_values()
            .collect())
    }

    /// The whole lease table as the process of `claim` sees it, in one read: the live leases
    /// and the abandoned ones ([`Store::abandoned_leases`]), for a listing that shows both.
    pub async fn lease_view(&self, claim: &LeaseClaim) -> Result<LeaseView, StoreError> {
        let (c1, c2) = (claim.clone(), claim.clone());
        self.with_lease_conn(
            move |c| all_rows(c).map(|rows| LeaseView::of(rows, &c1)),
            move |pg| pg.lease_rows().map(|rows| LeaseView::of(rows, &c2)),
        )
        .await
    }

    /// Every unexpired lease (one per session being driven somewhere).
    pub async fn leases(&self) -> Result<Vec<LeaseHolder>, StoreError> {
        self.with_lease_conn(|c| live(c, None), |pg| pg.leases(None))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_suite::both_backends;

    fn claim(owner: &str, label: &str) -> LeaseClaim {
        LeaseClaim {
            owner: owner.into(),
            pid: 42,
            host: "box".into(),
            label: label.into(),
        }
    }

    both_backends! {
    async fn a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(db) {
        let a = db.open();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let long = Duration::from_secs(600);
        let holder = LeaseClaim {
            owner: "own_dead".into(),
            pid: dead,
            host: "thishost".into(),
            label: "troupe run".into(),
        };
        assert!(matches!(
            a.lease_take(&"ses_1".into(), &holder, long).await.unwrap(),
            TakeOutcome::Taken { .. }
        ));
        // Another host's claim cannot know: it waits for the TTL.
        let elsewhere = LeaseClaim {
            owner: "own_b".into(),
            pid: std::process::id(),
            host: "otherhost".into(),
            label: "troupe serve".into(),
        };
        assert!(matches!(
            a.lease_take(&"ses_1".into(), &elsewhere, long).await.unwrap(),
            TakeOutcome::Held(_)
        ));
        // This process on the same host sees the holder is gone.
        let here = LeaseClaim {
            host: "thishost".into(),
            ..elsewhere
        };
        match a.lease_take(&"ses_1".into(), &here, long).await.unwrap() {
            TakeOutcome::Taken { previous, .. } => {
                assert_eq!(previous.map(|p| p.owner), Some("own_dead".into()));
            }
            other => panic!("expected a takeover, got {other:?}"),
        }
        // A live holder on the same host (this process's parent) still holds.
        let live = LeaseClaim {
            owner: "own_live".into(),
            pid: std::os::unix::process::parent_id(),
            host: "thishost".into(),
            label: "troupe run".into(),
        };
        assert!(matches!(
            a.lease_take(&"ses_2".into(), &live, long).await.unwrap(),
            TakeOutcome::Taken { .. }
        ));
        assert!(matches!(
            a.lease_take(&"ses_2".into(), &here, long).await.unwrap(),
            TakeOutcome::Held(_)
        ));
    }
    }

    both_backends! {
    async fn abandoned_leases_are_the_expired_and_the_dead_holders_but_never_our_own(db) {
        let a = db.open();
        let long = Duration::from_secs(600);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let holder = |owner: &str, pid: u32, host: &str| LeaseClaim {
            owner: owner.into(),
            pid,
            host: host.into(),
            label: "troupe run".into(),
        };
        let me = holder("own_me", std::process::id(), "thishost");
        // Expired (another host, 1 ms TTL), dead on this host, alive on this host, alive
        // elsewhere, and two of this very process (one expired: a stalled heartbeat).
        let rows = [
            ("ses_expired", holder("own_x", 7, "otherhost"), Duration::from_millis(1)),
            ("ses_dead", holder("own_d", dead, "thishost"), long),
            ("ses_live", holder("own_l", std::os::unix::process::parent_id(), "thishost"), long),
            ("ses_remote", holder("own_r", 7, "otherhost"), long),
            ("ses_mine", holder("own_m", std::process::id(), "thishost"), long),
            ("ses_mine_stalled", holder("own_s", std::process::id(), "thishost"), Duration::from_millis(1)),
        ];
        for (sid, claim, ttl) in &rows {
            let taken = a.lease_take(&(*sid).into(), claim, *ttl).await.unwrap();
            assert!(matches!(taken, TakeOutcome::Taken { .. }), "{sid}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let found: Vec<String> = a
            .abandoned_leases(&me)
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.session_id.to_string())
            .collect();
        assert_eq!(found, ["ses_dead", "ses_expired"]);
        // The whole view in one read: the stalled lease of this process is neither live nor
        // abandoned, a dead holder is not live.
        let view = a.lease_view(&me).await.unwrap();
        let keys = |m: &BTreeMap<SessionId, LeaseHolder>| {
            m.keys().map(|k| k.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(keys(&view.abandoned), ["ses_dead", "ses_expired"]);
        assert_eq!(keys(&view.live), ["ses_live", "ses_mine", "ses_remote"]);
        // Each can be taken over by the claimant, and is no longer abandoned once released.
        for sid in ["ses_dead", "ses_expired"] {
            assert!(matches!(
                a.lease_take(&sid.into(), &me, long).await.unwrap(),
                TakeOutcome::Taken { previous: Some(_), .. }
            ));
            a.lease_release(&sid.into(), "own_me").await.unwrap();
        }
        assert!(a.abandoned_leases(&me).await.unwrap().is_empty());
    }
    }

    both_backends! {
    async fn take_renew_release_and_takeover_after_expiry(db) {
        let a = db.open();
        // A second store on the same database stands for a second process.
        let b = db.open();
        let long = Duration::from_secs(60);
        let TakeOutcome::Taken { lease, previous } = a
            .lease_take(&"ses_1".into(), &claim("own_a", "troupe run"), long)
            .await
            .unwrap()
        else {
            panic!("a should take a free lease");
        };
        assert_eq!(previous, None);
        assert!(lease.expires >= lease.heartbeat + 60_000);
        // Taking it again is idempotent for the holder and keeps `acquired`.
        let again = a
            .lease_take(&"ses_1".into(), &claim("own_a", "troupe run"), long)
            .await
            .unwrap();
        assert!(
            matches!(&again, TakeOutcome::Taken { lease: l, .. } if l.acquired == lease.acquired)
        );
        // Another holder is told who has it.
        match b
            .lease_take(&"ses_1".into(), &claim("own_b", "troupe serve"), long)
            .await
            .unwrap()
        {
            TakeOutcome::Held(h) => {
                assert_eq!(h.owner, "own_a");
                assert_eq!(h.describe(), "troupe run (pid 42 on box)");
            }
            other => panic!("expected Held, got {other:?}"),
        }
        assert_eq!(
            b.lease_of(&"ses_1".into()).await.unwrap().map(|h| h.owner),
            Some("own_a".into())
        );
        assert_eq!(b.leases().await.unwrap().len(), 1);
        // Only the holder renews or releases.
        assert!(a.lease_renew(&"ses_1".into(), "own_a", long).await.unwrap());
        assert!(!b.lease_renew(&"ses_1".into(), "own_b", long).await.unwrap());
        b.lease_release(&"ses_1".into(), "own_b").await.unwrap();
        assert!(b.lease_of(&"ses_1".into()).await.unwrap().is_some());
        a.lease_release(&"ses_1".into(), "own_a").await.unwrap();
        assert_eq!(b.lease_of(&"ses_1".into()).await.unwrap(), None);

        // A holder that stops renewing loses the lease once it expires (store clock).
        let short = Duration::from_millis(1);
        assert!(matches!(
            a.lease_take(&"ses_2".into(), &claim("own_a", "troupe run"), short)
                .await
                .unwrap(),
            TakeOutcome::Taken { .. }
        ));
        let mut taken = None;
        for _ in 0..1000 {
            match b
                .lease_take(&"ses_2".into(), &claim("own_b", "troupe serve"), long)
                .await
                .unwrap()
            {
                TakeOutcome::Taken { previous, .. } => {
                    taken = Some(previous);
                    break;
                }
                TakeOutcome::Held(_) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
        let previous = taken
            .expect("b takes the expired lease over")
            .expect("previous");
        assert_eq!(previous.owner, "own_a");
        // The old holder learns it lost the lease, and cannot release the new one.
        assert!(!a.lease_renew(&"ses_2".into(), "own_a", long).await.unwrap());
        a.lease_release(&"ses_2".into(), "own_a").await.unwrap();
        assert_eq!(
            b.lease_of(&"ses_2".into()).await.unwrap().map(|h| h.owner),
            Some("own_b".into())
        );
    }
    }

    both_backends! {
    /// Eight store handles (eight processes, on PostgreSQL eight connections) race for one
    /// session's lease: exactly one takes it, the others are told who holds it; after its
    /// release exactly one of the rest takes it next.
    async fn handles_racing_for_a_lease_get_one_owner(db) {
        let long = Duration::from_secs(60);
        let stores: Vec<Store> = (0..8).map(|_| db.open()).collect();
        let race = |stores: &[Store], round: usize| {
            let tasks: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let s = s.clone();
                    tokio::spawn(async move {
                        let c = claim(&format!("own_{round}_{i}"), "troupe worker");
                        (i, s.lease_take(&"ses_race".into(), &c, long).await.unwrap())
                    })
                })
                .collect();
            async move {
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await.unwrap());
                }
                out
            }
        };
        let first = race(&stores, 0).await;
        let winners: Vec<usize> = first
            .iter()
            .filter(|(_, o)| matches!(o, TakeOutcome::Taken { .. }))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(winners.len(), 1, "{first:?}");
        let w = winners[0];
        for (i, o) in &first {
            if *i != w {
                assert!(
                    matches!(o, TakeOutcome::Held(h) if h.owner == format!("own_0_{w}")),
                    "{o:?}"
                );
            }
        }
        stores[w]
            .lease_release(&"ses_race".into(), &format!("own_0_{w}"))
            .await
            .unwrap();
        let rest: Vec<Store> = stores
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != w)
            .map(|(_, s)| s.clone())
            .collect();
        let second = race(&rest, 1).await;
        let taken = second
            .iter()
            .filter(|(_, o)| matches!(o, TakeOutcome::Taken { previous: None, .. }))
            .count();
        assert_eq!(taken, 1, "{second:?}");
        assert_eq!(stores[w].leases().await.unwrap().len(), 1);
    }
    }
}
