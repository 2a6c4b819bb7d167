//! Writes: the writer thread's connection ([`Writer`]) applying a batch of [`Write`]s in one
//! transaction, each row write and its event in one statement, sequence numbers serialised
//! per session by an advisory lock.

use super::*;

const SEQ_LOCK: &str = "SELECT pg_advisory_xact_lock(1, hashtext($1))";
const SEQ_MAX: &str = "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM event WHERE session_id = $1";
// Each row write and its event go in one statement (one round trip): a data-modifying CTE
// always runs to completion.
const UPSERT_SESSION: &str = "WITH w AS (
        INSERT INTO session (id, parent_id, directory, title, time_created, time_updated, data)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        ON CONFLICT (id) DO UPDATE SET title = EXCLUDED.title,
            time_updated = EXCLUDED.time_updated, data = EXCLUDED.data)
    INSERT INTO event (session_id, seq, type, time, data) VALUES ($1, $8, $9, $10, $7)";
// An update never inserts (a session deleted meanwhile stays deleted); its event is logged
// only when the row exists.
const UPDATE_SESSION: &str = "WITH w AS (
        UPDATE session SET title = $2, time_updated = $3, data = $4 WHERE id = $1 RETURNING id)
    INSERT INTO event (session_id, seq, type, time, data)
    SELECT $1, $5, 'session.updated', $6, $4 FROM w";
const UPSERT_MESSAGE: &str = "WITH w AS (
        INSERT INTO message (id, session_id, role, time_created, data) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data)
    INSERT INTO event (session_id, seq, type, time, data)
    VALUES ($2, $6, 'message.updated', $7, $5)";
const UPSERT_PART: &str = "WITH w AS (
        INSERT INTO part (id, message_id, session_id, type, status, data)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, data = EXCLUDED.data)
    INSERT INTO event (session_id, seq, type, time, data)
    VALUES ($3, $7, 'message.part.updated', $8, $6)";
const LOG: &str =
    "INSERT INTO event (session_id, seq, type, time, data) VALUES ($1, $2, $3, $4, $5)";
const DELETE_TODOS: &str = "DELETE FROM todo WHERE session_id = $1";
const INSERT_TODO: &str = "INSERT INTO todo (session_id, position, data) VALUES ($1, $2, $3)";
const DELETE_PART: &str = "DELETE FROM part WHERE id = $1";
const DELETE_MESSAGE_PARTS: &str = "DELETE FROM part WHERE message_id = $1";
const DELETE_MESSAGE: &str = "DELETE FROM message WHERE id = $1";
const UPSERT_APPROVALS: &str = "INSERT INTO permission (project, data) VALUES ($1, $2)
    ON CONFLICT (project) DO UPDATE SET data = EXCLUDED.data";

/// The writer thread's connection: reconnects when the server closed it.
pub(crate) struct Writer {
    target: Target,
    conn: PgConn,
}

impl Writer {
    /// Connect and migrate (blocking; run on the writer thread).
    pub(crate) fn open(target: Target) -> Result<Writer, StoreError> {
        let mut conn = PgConn::connect(&target)?;
        migrate(&target, &mut conn)?;
        Ok(Writer { target, conn })
    }

    /// Apply a batch in one transaction (see [`crate::store`]'s `apply`).
    pub(crate) fn apply(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.iter().all(|w| matches!(w, Write::Publish(_))) {
            return Ok(());
        }
        if self.conn.client.is_closed() {
            self.conn = PgConn::connect(&self.target)?;
        }
        match apply(&mut self.conn, writes) {
            Ok(()) => Ok(()),
            // The connection died while idle (a server restart, an idle timeout): nothing of
            // this batch reached the server, so it is applied once more on a new connection.
            // A failure after `BEGIN` is reported, never retried (its commit is unknown).
            Err(Failed::Begin(_)) if self.conn.client.is_closed() => {
                self.conn = PgConn::connect(&self.target)?;
                apply(&mut self.conn, writes).map_err(|e| self.target.err(pg_message(e.error())))
            }
            Err(e) => Err(self.target.err(pg_message(e.error()))),
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Where a batch failed: at `BEGIN` (nothing was sent) or later.
enum Failed {
    Begin(postgres::Error),
    Later(postgres::Error),
}

impl Failed {
    fn error(&self) -> &postgres::Error {
        match self {
            Failed::Begin(e) | Failed::Later(e) => e,
        }
    }
}

fn apply(conn: &mut PgConn, writes: &[Write]) -> Result<(), Failed> {
    let PgConn { client, stmts } = conn;
    let tx = client.transaction().map_err(Failed::Begin)?;
    apply_in(tx, stmts, writes).map_err(Failed::Later)
}

fn apply_in(
    mut tx: postgres::Transaction<'_>,
    stmts: &mut HashMap<&'static str, Statement>,
    writes: &[Write],
) -> Result<(), postgres::Error> {
    let now = now_ms();
    let mut seqs: HashMap<String, i64> = HashMap::new();
    let mut next_seq = |tx: &mut postgres::Transaction<'_>,
                        stmts: &mut HashMap<&'static str, Statement>,
                        sid: &str|
     -> Result<i64, postgres::Error> {
        let seq = match seqs.get(sid) {
            Some(s) => s + 1,
            None => {
                let lock = prepared(stmts, tx, SEQ_LOCK)?;
                tx.execute(&lock, &[&sid])?;
                let max = prepared(stmts, tx, SEQ_MAX)?;
                tx.query_one(&max, &[&sid])?.get::<_, i64>(0) + 1
            }
        };
        seqs.insert(sid.to_string(), seq);
        Ok(seq)
    };
    for w in writes {
        match w {
            Write::Session { info, created } => {
                let seq = next_seq(&mut tx, stmts, &info.id)?;
                if *created {
                    let st = prepared(stmts, &mut tx, UPSERT_SESSION)?;
                    tx.execute(
                        &st,
                        &[
                            &info.id,
                            &info.parent_id,
                            &info.directory,
                            &info.title,
                            &info.time.created,
                            &info.time.updated,
                            &json(info),
                            &seq,
                            &"session.created",
                            &now,
                        ],
                    )?;
                } else {
                    let st = prepared(stmts, &mut tx, UPDATE_SESSION)?;
                    tx.execute(
                        &st,
                        &[
                            &info.id,
                            &info.title,
                            &info.time.updated,
                            &json(info),
                            &seq,
                            &now,
                        ],
                    )?;
                }
            }
            Write::Message(m) => {
                let seq = next_seq(&mut tx, stmts, m.session_id())?;
                let role = if matches!(m, Message::User(_)) {
                    "user"
                } else {
                    "assistant"
                };
                let st = prepared(stmts, &mut tx, UPSERT_MESSAGE)?;
                tx.execute(
                    &st,
                    &[
                        &m.id(),
                        &m.session_id(),
                        &role,
                        &m.created(),
                        &json(m),
                        &seq,
                        &now,
                    ],
                )?;
            }
            Write::Part(p) => {
                let seq = next_seq(&mut tx, stmts, &p.session_id)?;
                let status = match &p.kind {
                    PartKind::Tool { state, .. } => Some(state.status()),
                    _ => None,
                };
                let st = prepared(stmts, &mut tx, UPSERT_PART)?;
                tx.execute(
                    &st,
                    &[
                        &p.id,
                        &p.message_id,
                        &p.session_id,
                        &p.type_name(),
                        &status,
                        &json(p),
                        &seq,
                        &now,
                    ],
                )?;
            }
            Write::DeleteSession(s) => {
                for sql in [
                    "DELETE FROM part WHERE session_id = $1",
                    "DELETE FROM message WHERE session_id = $1",
                    "DELETE FROM session WHERE id = $1",
                    "DELETE FROM event WHERE session_id = $1",
                    "DELETE FROM todo WHERE session_id = $1",
                ] {
                    let st = prepared(stmts, &mut tx, sql)?;
                    tx.execute(&st, &[&s.id])?;
                }
            }
            Write::Todos { session_id, todos } => {
                let st = prepared(stmts, &mut tx, DELETE_TODOS)?;
                tx.execute(&st, &[session_id])?;
                let st = prepared(stmts, &mut tx, INSERT_TODO)?;
                for (i, t) in todos.iter().enumerate() {
                    tx.execute(&st, &[session_id, &(i as i64), &json(t)])?;
                }
                let seq = next_seq(&mut tx, stmts, session_id)?;
                log(
                    &mut tx,
                    stmts,
                    session_id,
                    seq,
                    "todo.updated",
                    now,
                    &json(todos),
                )?;
            }
            Write::RemovePart(p) => {
                let st = prepared(stmts, &mut tx, DELETE_PART)?;
                tx.execute(&st, &[&p.id])?;
                let seq = next_seq(&mut tx, stmts, &p.session_id)?;
                let data = json(&p.id);
                log(
                    &mut tx,
                    stmts,
                    &p.session_id,
                    seq,
                    "message.part.removed",
                    now,
                    &data,
                )?;
            }
            Write::RemoveMessage {
                session_id,
                message_id,
            } => {
                let st = prepared(stmts, &mut tx, DELETE_MESSAGE_PARTS)?;
                tx.execute(&st, &[message_id])?;
                let st = prepared(stmts, &mut tx, DELETE_MESSAGE)?;
                tx.execute(&st, &[message_id])?;
                let seq = next_seq(&mut tx, stmts, session_id)?;
                let data = json(message_id);
                log(
                    &mut tx,
                    stmts,
                    session_id,
                    seq,
                    "message.removed",
                    now,
                    &data,
                )?;
            }
            Write::Approvals { project, data } => {
                let st = prepared(stmts, &mut tx, UPSERT_APPROVALS)?;
                tx.execute(&st, &[project, data])?;
            }
            Write::Publish(_) => {}
        }
    }
    tx.commit()
}

#[allow(clippy::too_many_arguments)]
fn log(
    tx: &mut postgres::Transaction<'_>,
    stmts: &mut HashMap<&'static str, Statement>,
    sid: &str,
    seq: i64,
    ty: &str,
    now: i64,
    data: &str,
) -> Result<(), postgres::Error> {
    let st = prepared(stmts, tx, LOG)?;
    tx.execute(&st, &[&sid, &seq, &ty, &now, &data])?;
    Ok(())
}
