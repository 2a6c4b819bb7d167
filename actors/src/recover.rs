//! Recovery of turns a dead process left unfinished, without waiting for a prompt.
//!
//! A process killed mid-turn (kill -9, a crash, power loss) leaves its sessions as they were:
//! tool parts `running`, the step's assistant message never completed, and the session's
//! lease row in the store (see `troupe_session::lease`). The next prompt to such a session
//! sweeps it ([`troupe_session::store::sweep_interrupted`]) before driving it; until then
//! every reader (the session list, `GET /session/{id}`, the web view) saw a session that
//! looked alive. [`Runtime::recover_abandoned`] does that sweep at once for every session
//! whose lease holder is gone: `troupe serve` runs it at start and then every
//! [`RECOVER_EVERY`].

use std::time::Duration;

use troupe_session::{MessageWithParts, Session, SessionId, TakeOutcome};

use crate::{Runtime, RuntimeError, RuntimeShared};

/// How often `troupe serve` looks for abandoned leases: 10 s. A holder that died on this
/// host is seen at the next look; one on another host once its lease expires (its TTL, 30 s
/// by default, `lease::DEFAULT_LEASE_TTL`). One look is one read of the lease table.
pub const RECOVER_EVERY: Duration = Duration::from_secs(10);

impl Runtime {
    /// Repair every session whose lease holder is gone (expired in the store's clock, or a
    /// process of this host that no longer runs; never this process's own): take its lease,
    /// stop the processes its running tools left (as a prompt would), turn its unfinished
    /// tool parts into errors and close its unfinished assistant message as aborted
    /// ([`troupe_session::store::sweep_interrupted`]), wait until that is stored (and
    /// published on the bus), and release the lease. Sessions another live holder takes
    /// first are left to it.
    ///
    /// Returns the sessions that had something to repair. Errors: the store's; a session
    /// that fails to load is skipped with a warning so the others are still repaired.
    pub async fn recover_abandoned(&self) -> Result<Vec<SessionId>, RuntimeError> {
        let shared = &self.shared;
        let claim = shared.identity.claim();
        let abandoned = shared.store.abandoned_leases(&claim).await?;
        let mut repaired = Vec::new();
        for holder in abandoned {
            let id = holder.session_id;
            if shared.sessions.contains_key(&id) {
                continue;
            }
            let TakeOutcome::Taken { previous, .. } = shared
                .store
                .lease_take(&id, &claim, shared.opts.lease_ttl)
                .await?
            else {
                continue;
            };
            let outcome = self.sweep_one(&id).await;
            let released = shared.store.lease_release(&id, &claim.owner).await;
            match outcome {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(
                        session = %id,
                        writes = n,
                        holder = previous.as_ref().map(|h| h.describe()).unwrap_or_default(),
                        "repaired a turn its process left unfinished"
                    );
                    repaired.push(id);
                }
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "could not repair an abandoned session")
                }
            }
            released?;
        }
        Ok(repaired)
    }

    /// Load `id` and sweep it under the lease the caller holds; the number of repairing
    /// writes, stored before this returns.
    async fn sweep_one(&self, id: &SessionId) -> Result<usize, RuntimeError> {
        let Some(swept) = load_swept(&self.shared, id).await? else {
            return Ok(0);
        };
        if swept.repaired > 0 {
            self.shared.store.flush().await?;
        }
        Ok(swept.repaired)
    }
}

/// A session read to be driven, with what its last driver left unfinished repaired.
pub(crate) struct Swept {
    /// The session's row.
    pub session: Session,
    /// Its whole history, as repaired.
    pub history: Vec<MessageWithParts>,
    /// How many repairing writes were queued (0: nothing was left unfinished).
    pub repaired: usize,
}

/// Read session `id` and its history, stop the processes its running tools left behind
/// ([`crate::root::stop_survivors`]) and sweep it
/// ([`troupe_session::store::sweep_interrupted`]): every path that takes over a session —
/// a prompt to an idle session, the user's shell command, a restart of a crashed subagent,
/// [`Runtime::recover_abandoned`] — starts from this. The repairing writes are queued, not
/// yet stored (`flush` the store to wait for them). Call only under the session's lease.
///
/// `Ok(None)` when the session does not exist. Errors: the store's.
pub(crate) async fn load_swept(
    shared: &RuntimeShared,
    id: &SessionId,
) -> Result<Option<Swept>, RuntimeError> {
    let sid = id.clone();
    let (session, mut history) = shared
        .store
        .read(move |r| Ok((r.session(&sid)?, r.messages(&sid)?)))
        .await?;
    let Some(session) = session else {
        return Ok(None);
    };
    crate::root::stop_survivors(&mut history).await;
    let repaired = troupe_session::store::sweep_interrupted(&shared.store, &mut history);
    Ok(Some(Swept {
        session,
        history,
        repaired,
    }))
}
