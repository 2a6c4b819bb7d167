//! The writer thread of either backend: group commit of queued writes, a failed batch
//! re-applied write by write, bus events published after the commit.

use super::*;

/// The writer thread of either backend: `apply` stores one batch in one transaction;
/// `maintain` runs after each batch, once its flushes and barriers are answered (SQLite's WAL
/// checkpoint: nobody waits for it then).
pub(super) fn writer_loop(
    rx: std_mpsc::Receiver<Job>,
    bus: Bus,
    mut apply: impl FnMut(&[Write]) -> Result<(), StoreError>,
    mut maintain: impl FnMut(),
) {
    let mut pending_error: Option<StoreError> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        drain_into(&rx, &mut batch);
        // Group commit: a commit costs far more than the rows in it (WAL frames for every
        // dirty page, checkpoints), so when the batch has rows to store and nobody waits on
        // it (no flush), give concurrent writers a short window to join this transaction.
        // Sleeping (instead of a timed receive) also spares the senders a wake-up each.
        let wants_commit = batch.iter().any(
            |j| matches!(j, Job::Writes(w) if w.iter().any(|w| !matches!(w, Write::Publish(_)))),
        );
        let has_flush = batch
            .iter()
            .any(|j| matches!(j, Job::Flush(_) | Job::Barrier(_)));
        if wants_commit && !has_flush && batch.len() < MAX_BATCH_JOBS {
            std::thread::sleep(GROUP_COMMIT_WINDOW);
            drain_into(&rx, &mut batch);
        }
        let mut writes: Vec<Write> = Vec::new();
        let mut flushes = Vec::new();
        let mut barriers = Vec::new();
        for job in batch {
            match job {
                Job::Writes(w) => writes.extend(w),
                Job::Flush(tx) => flushes.push((writes.len(), tx)),
                Job::Barrier(tx) => barriers.push(tx),
            }
        }
        let result = apply(&writes);
        match result {
            Ok(()) => {
                for w in writes {
                    if let Some(ev) = event_of(w) {
                        bus.publish(ev);
                    }
                }
            }
            Err(e) if writes.iter().filter(|w| stores_rows(w)).count() > 1 => {
                // The batch's transaction rolled back whole: one bad write (a part of a
                // message deleted meanwhile) must not take the writes of other sessions
                // down with it. Apply each write on its own, in queue order, each in its
                // own transaction: the good ones land and publish, each bad one fails
                // alone and its error is the one the next flush reports.
                tracing::warn!(
                    "a batch of {} writes failed ({e}): applying them one by one",
                    writes.len()
                );
                for w in writes {
                    match apply(std::slice::from_ref(&w)) {
                        Ok(()) => {
                            if let Some(ev) = event_of(w) {
                                bus.publish(ev);
                            }
                        }
                        Err(e) => {
                            tracing::error!("{e}");
                            if pending_error.is_none() {
                                pending_error = Some(e);
                            }
                        }
                    }
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                // Bus-only events still go out, so watchers see status changes and errors.
                for w in writes {
                    if let Write::Publish(ev) = w {
                        bus.publish(ev);
                    }
                }
                if pending_error.is_none() {
                    pending_error = Some(e);
                }
            }
        }
        for (_, tx) in flushes {
            let r = match pending_error.take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            let _ = tx.send(r);
        }
        for tx in barriers {
            let _ = tx.send(());
        }
        maintain();
    }
}

/// Whether `w` stores rows (everything but a bus-only event).
pub(super) fn stores_rows(w: &Write) -> bool {
    !matches!(w, Write::Publish(_))
}

/// Moves queued jobs into `batch` without blocking, up to [`MAX_BATCH_JOBS`].
pub(super) fn drain_into(rx: &std_mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH_JOBS {
        match rx.try_recv() {
            Ok(j) => batch.push(j),
            Err(_) => break,
        }
    }
}

pub(super) fn event_of(w: Write) -> Option<Event> {
    Some(match w {
        Write::Session {
            info,
            created: true,
        } => Event::SessionCreated { info },
        Write::Session {
            info,
            created: false,
        } => Event::SessionUpdated { info },
        Write::Message(info) => Event::MessageUpdated { info },
        Write::Part(part) => Event::PartUpdated { part },
        Write::DeleteSession(info) => Event::SessionDeleted { info },
        Write::RemovePart(p) => Event::PartRemoved {
            part: PartRef::from(&p),
        },
        Write::RemoveMessage {
            session_id,
            message_id,
        } => Event::MessageRemoved {
            session_id,
            message_id,
        },
        Write::Publish(ev) => ev,
        Write::Todos { session_id, todos } => Event::TodoUpdated { session_id, todos },
        Write::Approvals { .. } => return None,
    })
}
