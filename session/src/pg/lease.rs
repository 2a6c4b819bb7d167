//! Session leases (who drives a session) on the database's clock, and vacuum, which cuts the
//! logs of the sessions nobody drives.

use super::*;

/// `now` in the database's clock, ms since the Unix epoch (SQL expression).
const NOW_MS: &str = "(EXTRACT(EPOCH FROM now()) * 1000)::BIGINT";

const LEASE_COLUMNS: &str = "session_id, owner, pid, host, label, acquired, heartbeat, expires";

fn row_to_holder(r: &postgres::Row) -> LeaseHolder {
    LeaseHolder {
        session_id: r.get(0),
        owner: r.get(1),
        pid: r.get::<_, i64>(2).clamp(0, u32::MAX as i64) as u32,
        host: r.get(3),
        label: r.get(4),
        acquired: r.get(5),
        heartbeat: r.get(6),
        expires: r.get(7),
    }
}

impl Pool {
    /// [`crate::Store::lease_take`]: serialised per session by the advisory lock
    /// `(2, hashtext(session_id))` (the row may not exist yet) and the row lock.
    pub(crate) fn lease_take(
        &self,
        session_id: &str,
        claim: &LeaseClaim,
        ttl: Duration,
    ) -> Result<TakeOutcome, StoreError> {
        self.with_pg(|c| {
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock(2, hashtext($1))", &[&session_id])?;
            let now: i64 = tx.query_one(&format!("SELECT {NOW_MS}"), &[])?.get(0);
            let current = tx
                .query_opt(
                    &format!(
                        "SELECT {LEASE_COLUMNS} FROM session_lease WHERE session_id = $1 FOR UPDATE"
                    ),
                    &[&session_id],
                )?
                .map(|r| row_to_holder(&r));
            let outcome = crate::lease::decide(current, now, session_id, claim, ttl);
            let TakeOutcome::Taken { lease: l, .. } = &outcome else {
                return Ok(outcome);
            };
            tx.execute(
                &format!(
                    "INSERT INTO session_lease ({LEASE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, pid = EXCLUDED.pid,
                       host = EXCLUDED.host, label = EXCLUDED.label, acquired = EXCLUDED.acquired,
                       heartbeat = EXCLUDED.heartbeat, expires = EXCLUDED.expires"
                ),
                &[
                    &l.session_id,
                    &l.owner,
                    &(l.pid as i64),
                    &l.host,
                    &l.label,
                    &l.acquired,
                    &l.heartbeat,
                    &l.expires,
                ],
            )?;
            tx.commit()?;
            Ok(outcome)
        })
    }

    pub(crate) fn lease_renew(
        &self,
        session_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ttl = crate::lease::ttl_ms(ttl);
        self.with_pg(|c| {
            let n = c.client.execute(
                &format!(
                    "UPDATE session_lease SET heartbeat = {NOW_MS}, expires = {NOW_MS} + $3
                     WHERE session_id = $1 AND owner = $2"
                ),
                &[&session_id, &owner, &ttl],
            )?;
            Ok(n == 1)
        })
    }

    pub(crate) fn lease_release(&self, session_id: &str, owner: &str) -> Result<(), StoreError> {
        self.with_pg(|c| {
            c.client.execute(
                "DELETE FROM session_lease WHERE session_id = $1 AND owner = $2",
                &[&session_id, &owner],
            )?;
            Ok(())
        })
    }

    pub(crate) fn leases(&self, session_id: Option<&str>) -> Result<Vec<LeaseHolder>, StoreError> {
        self.with_pg(|c| {
            let rows = match session_id {
                Some(id) => c.client.query(
                    &format!(
                        "SELECT {LEASE_COLUMNS} FROM session_lease WHERE session_id = $1 AND expires > {NOW_MS}"
                    ),
                    &[&id],
                )?,
                None => c.client.query(
                    &format!(
                        "SELECT {LEASE_COLUMNS} FROM session_lease WHERE expires > {NOW_MS} ORDER BY session_id"
                    ),
                    &[],
                )?,
            };
            Ok(rows.iter().map(row_to_holder).collect())
        })
    }
}

impl Pool {
    /// Every lease row with whether it has expired in the database's clock
    /// ([`crate::Store::abandoned_leases`]).
    pub(crate) fn lease_rows(&self) -> Result<Vec<(LeaseHolder, bool)>, StoreError> {
        self.with_pg(|c| {
            let rows = c.client.query(
                &format!(
                    "SELECT {LEASE_COLUMNS}, expires <= {NOW_MS} FROM session_lease ORDER BY session_id"
                ),
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|r| (row_to_holder(r), r.get::<_, bool>(8)))
                .collect())
        })
    }
}

impl Pool {
    /// [`crate::Store::vacuum`]: cut the logs of sessions nobody drives, then a plain
    /// `VACUUM` of the event table (its space is reused by later rows; `VACUUM FULL`, which
    /// would give it back to the operating system, locks the table against every other
    /// process for the whole rewrite, so it is left to the database's administrator). The
    /// sizes are the troupe tables' total relation sizes.
    pub(crate) fn vacuum(&self) -> Result<VacuumReport, StoreError> {
        const SIZE: &str = "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND c.relkind = 'r'
              AND c.relname IN ('session', 'message', 'part', 'event', 'todo', 'permission', 'session_lease')";
        self.with_pg(|c| {
            let bytes_before: i64 = c.client.query_one(SIZE, &[])?.get(0);
            let mut tx = c.client.transaction()?;
            let sessions: i64 = tx
                .query_one(
                    &format!(
                        "SELECT COUNT(*) FROM (SELECT session_id FROM event GROUP BY session_id HAVING COUNT(*) > 1) s
                         WHERE session_id NOT IN (SELECT session_id FROM session_lease WHERE expires > {NOW_MS})"
                    ),
                    &[],
                )?
                .get(0);
            let removed = tx.execute(
                &format!(
                    "DELETE FROM event
                     WHERE session_id NOT IN (SELECT session_id FROM session_lease WHERE expires > {NOW_MS})
                       AND seq < (SELECT MAX(e.seq) FROM event e WHERE e.session_id = event.session_id)"
                ),
                &[],
            )?;
            tx.commit()?;
            c.client.batch_execute("VACUUM event")?;
            let bytes_after: i64 = c.client.query_one(SIZE, &[])?.get(0);
            Ok(VacuumReport {
                events_removed: removed,
                sessions: sessions.max(0) as u64,
                bytes_before: bytes_before.max(0) as u64,
                bytes_after: bytes_after.max(0) as u64,
            })
        })
    }
}
