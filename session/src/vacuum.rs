//! `troupe db vacuum`: compact the event log of finished sessions and give the space back.
//!
//! The `event` table keeps every stored event of a session (each part update carries the
//! whole part), so a long session's log grows far beyond its messages. Nothing reads the log
//! back to build a session: `session show`, the API and the runtime read the `message` and
//! `part` rows, which hold the final state. So for every session that no process drives
//! (no live lease, see [`crate::lease`]) the log is cut to its last event, which keeps the
//! per-session sequence (`seq`) growing if the session is continued later; then SQLite's
//! `VACUUM` rewrites the file without the freed pages. On PostgreSQL the cut is the same and
//! a plain `VACUUM` of the event table makes the space reusable (see `pg::Pool::vacuum`).

use crate::lease::NOW_MS;
use crate::{Store, StoreError};

/// What [`Store::vacuum`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VacuumReport {
    /// Event rows deleted.
    pub events_removed: u64,
    /// Sessions whose log was cut.
    pub sessions: u64,
    /// Size of the database before, bytes (SQLite: pages × page size; PostgreSQL: total
    /// relation size of troupe's tables).
    pub bytes_before: u64,
    /// Size after, bytes.
    pub bytes_after: u64,
}

fn db_bytes(conn: &rusqlite::Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok((pages.max(0) as u64) * (size.max(0) as u64))
}

impl Store {
    /// Cut the event log of every session no process drives to its last event, then
    /// `VACUUM` the file. Sessions being driven (a live lease, here or in another process)
    /// are left alone. Waits up to the busy timeout for another process's write lock; the
    /// rewrite needs free disk space about the size of the file. Messages and parts are not
    /// touched, so `session show` returns the same before and after.
    pub async fn vacuum(&self) -> Result<VacuumReport, StoreError> {
        // Everything queued is committed first, so no write of ours lands mid-rewrite.
        self.flush().await?;
        self.with_lease_conn(|conn| {
            let bytes_before = db_bytes(conn)?;
            let tx = conn.transaction()?;
            let sessions: i64 = tx.query_row(
                &format!(
                    "SELECT COUNT(*) FROM (SELECT session_id FROM event GROUP BY session_id HAVING COUNT(*) > 1)
                     WHERE session_id NOT IN (SELECT session_id FROM session_lease WHERE expires > {NOW_MS})"
                ),
                [],
                |r| r.get(0),
            )?;
            let removed = tx.execute(
                &format!(
                    "DELETE FROM event
                     WHERE session_id NOT IN (SELECT session_id FROM session_lease WHERE expires > {NOW_MS})
                       AND seq < (SELECT MAX(e.seq) FROM event e WHERE e.session_id = event.session_id)"
                ),
                [],
            )?;
            tx.commit()?;
            conn.execute_batch("VACUUM")?;
            Ok(VacuumReport {
                events_removed: removed as u64,
                sessions: sessions.max(0) as u64,
                bytes_before,
                bytes_after: db_bytes(conn)?,
            })
        }, |pg| pg.vacuum())
        .await
    }
}

#[cfg(test)]
mod tests {
    use crate::store_suite::both_backends;
    use crate::test_support::user_message;
    use crate::types::*;
    use crate::{LeaseClaim, Write};

    fn text_part(session: &SessionId, message: &MessageId, text: String) -> Part {
        Part::new(
            session,
            message,
            PartKind::Text {
                text,
                synthetic: false,
                time: None,
            },
        )
    }

    both_backends! {
    /// A finished session's log is cut to one event and the file shrinks; its messages
    /// read the same; a session another process drives keeps its whole log; later events
    /// of the finished session continue its sequence.
    async fn vacuum_cuts_finished_logs_and_keeps_what_sessions_read(db) {
        let store = db.open();
        let (done, driven) = (Session::new("/tmp", None), Session::new("/tmp", None));
        for s in [&done, &driven] {
            let m = user_message(&s.id, crate::id::message(), 1);
            let mut part = text_part(&s.id, m.id(), String::new());
            store.write(vec![
                Write::Session {
                    info: s.clone(),
                    created: true,
                },
                Write::Message(m),
            ]);
            // 200 updates of a growing part: 200 events, one part row.
            for i in 0..200 {
                if let PartKind::Text { text, .. } = &mut part.kind {
                    text.push_str(&format!("line {i} of a long streamed answer\n"));
                }
                store.write1(Write::Part(part.clone()));
            }
        }
        store.flush().await.unwrap();
        let claim = LeaseClaim {
            owner: "other-process".into(),
            pid: 1,
            host: "elsewhere".into(),
            label: "troupe serve".into(),
        };
        store
            .lease_take(&driven.id, &claim, std::time::Duration::from_secs(60))
            .await
            .unwrap();
        let (d1, d2) = (done.id.clone(), driven.id.clone());
        let before = store.read(move |r| r.messages(&d1)).await.unwrap();
        let count = |id: SessionId| {
            let store = store.clone();
            async move { store.read(move |r| r.event_count(&id)).await.unwrap() }
        };
        let (done_events, driven_events) = (count(done.id.clone()).await, count(d2).await);
        assert_eq!((done_events, driven_events), (202, 202));

        let report = store.vacuum().await.unwrap();
        assert_eq!(report.events_removed, 201);
        assert_eq!(report.sessions, 1);
        if db.is_postgres() {
            // A plain VACUUM makes the space reusable without giving it back to the system
            // (the free-space map may even grow the total a little): only report sizes.
            assert!(report.bytes_before > 0 && report.bytes_after > 0, "{report:?}");
        } else {
            assert!(report.bytes_after < report.bytes_before, "{report:?}");
        }
        assert_eq!(count(done.id.clone()).await, 1);
        assert_eq!(count(driven.id.clone()).await, 202);
        let d1 = done.id.clone();
        assert_eq!(store.read(move |r| r.messages(&d1)).await.unwrap(), before);

        // The session goes on: its next event gets the next sequence number.
        let mut info = done.clone();
        info.title = "renamed".into();
        store.write1(Write::Session {
            info,
            created: false,
        });
        store.flush().await.unwrap();
        assert_eq!(count(done.id.clone()).await, 2);
        // A second vacuum has nothing more than that to cut.
        assert_eq!(store.vacuum().await.unwrap().events_removed, 1);
    }
    }
}
