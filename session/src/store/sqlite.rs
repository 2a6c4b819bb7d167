//! The SQLite backend: schema migrations, connections (WAL, busy timeout) and `apply`, which
//! stores one batch of writes in one transaction.

use super::*;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: core tables
    "CREATE TABLE session (
        id TEXT PRIMARY KEY,
        parent_id TEXT,
        directory TEXT NOT NULL,
        title TEXT NOT NULL,
        time_created INTEGER NOT NULL,
        time_updated INTEGER NOT NULL,
        data TEXT NOT NULL
     );
     CREATE INDEX session_parent ON session(parent_id);
     CREATE INDEX session_updated ON session(time_updated);
     CREATE TABLE message (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        time_created INTEGER NOT NULL,
        data TEXT NOT NULL
     );
     CREATE INDEX message_session ON message(session_id, id);
     CREATE TABLE part (
        id TEXT PRIMARY KEY,
        message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        type TEXT NOT NULL,
        status TEXT,
        data TEXT NOT NULL
     );
     CREATE INDEX part_message ON part(message_id, id);
     CREATE INDEX part_session ON part(session_id);
     CREATE TABLE event (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        time INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
     ) WITHOUT ROWID;
     CREATE TABLE permission (
        project TEXT PRIMARY KEY,
        data TEXT NOT NULL
     );
     CREATE TABLE todo (
        session_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, position)
     );",
    // 2: session leases (one owner per session across processes)
    crate::lease::MIGRATION,
    // 3: the event log as a rowid table with an index on (session_id, seq). As a
    // `WITHOUT ROWID` table keyed by session and sequence it was a clustered B-tree of large
    // rows (each event holds a whole part or message as JSON), so every insert among the
    // interleaved sessions' keys moved and split leaf pages full of those rows; now each
    // insert appends its row at the table's end and puts a short key in the index
    // (bench/README.md, eleventh pass). The log's contents and order are kept.
    "CREATE TABLE event_log (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        time INTEGER NOT NULL,
        data TEXT NOT NULL
     );
     INSERT INTO event_log (session_id, seq, type, time, data)
        SELECT session_id, seq, type, time, data FROM event ORDER BY time, session_id, seq;
     DROP TABLE event;
     ALTER TABLE event_log RENAME TO event;
     CREATE UNIQUE INDEX event_session_seq ON event(session_id, seq);",
];

pub(super) fn sql_err(path: &Path, e: rusqlite::Error) -> StoreError {
    StoreError::Sqlite {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// How long a connection waits for another connection's lock (another process's, or this
/// one's writer and lease connections) before failing with "database is locked": 5 s of
/// sleeps in the busy handler (`busy_wait`).
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5000);

/// Microseconds the busy handler sleeps at its `tries`-th call for one lock (0-based): 50 µs,
/// doubling up to 2 ms.
pub(super) fn busy_delay_us(tries: i32) -> u64 {
    (50u64 << tries.clamp(0, 6)).min(2000)
}

/// Microseconds the busy handler has slept for one lock before its `tries`-th call.
pub(super) fn busy_waited_us(tries: i32) -> u64 {
    let tries = u64::try_from(tries).unwrap_or(0);
    if tries <= 6 {
        50 * ((1 << tries) - 1)
    } else {
        3150 + 2000 * (tries - 6)
    }
}

/// The busy handler of every connection: while another connection holds the write lock
/// (in this process the writer thread and the lease connection take turns; or another
/// process), sleep [`busy_delay_us`] and try again, until [`BUSY_TIMEOUT`] has been slept
/// in all; then SQLite answers `SQLITE_BUSY`. SQLite's own handler (`busy_timeout`) sleeps
/// 1, 2, 5, 10, 15, 20, 25 … 100 ms between tries, so a lock held for a millisecond could
/// keep its waiter asleep for 10–30 ms: a lease taken at a turn's start waited that long
/// on the writer's commit, and the writer on a lease write.
fn busy_wait(tries: i32) -> bool {
    if u128::from(busy_waited_us(tries)) >= BUSY_TIMEOUT.as_micros() {
        return false;
    }
    std::thread::sleep(std::time::Duration::from_micros(busy_delay_us(tries)));
    true
}

pub(super) fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path).map_err(|e| sql_err(path, e))?;
    conn.busy_handler(Some(busy_wait))
        .map_err(|e| sql_err(path, e))?;
    // Switching a new file to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY
    // at once (without the busy handler) when another process holds it while opening the
    // same new file: retry within the busy timeout. An existing WAL file needs no switch.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => break,
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(sql_err(path, e)),
        }
    }
    conn.execute_batch(
        "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-16000;",
    )
    .map_err(|e| sql_err(path, e))?;
    // Query-planner stability: plans never depend on bound values. Without it (this build
    // has STAT4) binding a parameter that the planner once looked at expires the cached
    // statement, and the event log's `SELECT COALESCE(MAX(seq), 0) … WHERE session_id = ?1`
    // was prepared again at every run: ~4 % of a bench's instructions, more than the query.
    // Our queries are key lookups whose plan does not depend on the value.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(|e| sql_err(path, e))?;
    Ok(conn)
}

/// WAL frames (pages) after a commit from which the store copies the log back into the
/// database file: 1,000, SQLite's own auto-checkpoint threshold
/// (`SQLITE_DEFAULT_WAL_AUTOCHECKPOINT`).
pub const CHECKPOINT_FRAMES: i32 = 1000;

/// The store's WAL checkpoints, moved out of the commits that trigger them.
///
/// SQLite's auto-checkpoint runs inside the commit that crosses the threshold, and with
/// `synchronous=NORMAL` a checkpoint is where the file system syncs happen (the WAL before
/// copying, the database after). In the writer's commit it held up every flush of that batch
/// — a turn's closing flush waited for two `fsync`s of megabytes, milliseconds on a disk
/// (bench/README.md, twelfth pass); on the lease connection it held up a turn's start.
///
/// [`WalCheckpoints::attach`] turns a connection's auto-checkpoint off; its commits that
/// leave [`CHECKPOINT_FRAMES`] or more frames wake a checkpointer thread with its own
/// connection, which copies the log in a passive checkpoint (it waits for no reader or
/// writer) while the writer goes on appending. What the writer appended meanwhile is not
/// copied, and SQLite starts the log over only when every frame is, so on its own the log
/// would grow without end under steady writes (measured: 121 MB). The writer thread finishes
/// each round: after a batch, once its flushes are answered, a second passive checkpoint on
/// its own connection copies the few frames left (small syncs), and the next write starts
/// the log over ([`WalCheckpoints::finish_round`]).
pub(super) struct WalCheckpoints {
    wake: std_mpsc::SyncSender<()>,
    /// Where the current round is: [`IDLE`], [`REQUESTED`] (a commit woke the checkpointer),
    /// [`COPIED`] (its pass is done; the writer finishes the round).
    round: Arc<AtomicU8>,
    /// Checkpoint rounds finished ([`Store::wal_checkpoints`]).
    done: Arc<AtomicU64>,
    /// After a finishing pass that could not copy every frame: no new pass before this.
    retry_at: Option<std::time::Instant>,
    /// Finishing passes run by the writer (complete or not).
    passes: u64,
}

/// How long the writer waits after a finishing pass that could not copy every frame before
/// it tries again: 100 ms. A reader on an old snapshot (a long read, another process) keeps
/// the frames after it from being copied; each pass first sorts every frame not yet copied,
/// so trying after every batch kept the writer thread busy (measured: 100 % of a core, the
/// log at 694 MB in 10 s while a reader held its snapshot).
pub(super) const CHECKPOINT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// [`WalCheckpoints`] round: no checkpoint under way.
const IDLE: u8 = 0;
/// [`WalCheckpoints`] round: the checkpointer was woken and copies the log.
const REQUESTED: u8 = 1;
/// [`WalCheckpoints`] round: the checkpointer's pass is done; the writer copies the rest.
const COPIED: u8 = 2;

/// Runs `PRAGMA wal_checkpoint(PASSIVE)` on `conn`: whether it copied every frame of the
/// log (its row: busy flag, frames in the log, frames copied).
fn passive_checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        let (busy, log, copied): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        Ok(busy == 0 && log == copied)
    })
}

impl WalCheckpoints {
    /// Opens the checkpointer's connection to `path` and starts its thread, which ends when
    /// this value and every attached connection are dropped. `done` counts finished rounds.
    pub(super) fn start(path: &Path, done: Arc<AtomicU64>) -> Result<WalCheckpoints, StoreError> {
        let conn = open_conn(path)?;
        // A checkpoint copies frames without the page cache: keep its cache small.
        conn.execute_batch("PRAGMA cache_size=-64;")
            .map_err(|e| sql_err(path, e))?;
        let (wake, requests) = std_mpsc::sync_channel::<()>(1);
        let round = Arc::new(AtomicU8::new(IDLE));
        let (state, store_path) = (round.clone(), path.to_path_buf());
        std::thread::Builder::new()
            .name("troupe-store-ckpt".into())
            .spawn(move || {
                while requests.recv().is_ok() {
                    let next = match passive_checkpoint(&conn) {
                        Ok(_) => COPIED,
                        // The next commit over the threshold asks again.
                        Err(e) => {
                            tracing::warn!("{}", sql_err(&store_path, e));
                            IDLE
                        }
                    };
                    state.store(next, Ordering::Release);
                }
            })
            .map_err(|e| StoreError::Sqlite {
                path: path.display().to_string(),
                message: format!("cannot start the checkpointer thread: {e}"),
            })?;
        Ok(WalCheckpoints {
            wake,
            round,
            done,
            retry_at: None,
            passes: 0,
        })
    }

    /// Turns `conn`'s auto-checkpoint off (a WAL hook replaces it): a commit that leaves
    /// [`CHECKPOINT_FRAMES`] or more frames in the log wakes the checkpointer, unless a
    /// round is already under way.
    pub(super) fn attach(&self, path: &Path, conn: &mut Connection) -> Result<(), StoreError> {
        let (wake, round) = (self.wake.clone(), self.round.clone());
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: i32| {
            if frames >= CHECKPOINT_FRAMES
                && round
                    .compare_exchange(IDLE, REQUESTED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                && wake.try_send(()).is_err()
            {
                round.store(IDLE, Ordering::Release);
            }
            Ok(())
        }))
        .map_err(|e| sql_err(path, e))
    }

    /// On the writer thread, between batches (`now`: the time of the call): once the
    /// checkpointer has copied the log, copy what was appended meanwhile, so the next write
    /// starts the log over. The round ends when every frame is copied; otherwise (a reader
    /// still on an old snapshot, another process's checkpoint, an error, logged) the round
    /// stays open and the writer tries again after [`CHECKPOINT_RETRY`].
    pub(super) fn finish_round(&mut self, path: &Path, conn: &Connection, now: std::time::Instant) {
        if self.round.load(Ordering::Acquire) != COPIED || self.retry_at.is_some_and(|t| now < t) {
            return;
        }
        self.passes += 1;
        match passive_checkpoint(conn) {
            Ok(true) => {
                self.retry_at = None;
                self.round.store(IDLE, Ordering::Release);
                self.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => self.retry_at = Some(now + CHECKPOINT_RETRY),
            Err(e) => {
                self.retry_at = Some(now + CHECKPOINT_RETRY);
                tracing::warn!("{}", sql_err(path, e));
            }
        }
    }

    /// Finishing passes the writer has run ([`WalCheckpoints::finish_round`]).
    #[cfg(test)]
    pub(super) fn passes(&self) -> u64 {
        self.passes
    }

    /// Marks the checkpointer's pass done (tests drive a round by hand).
    #[cfg(test)]
    pub(super) fn set_copied(&self) {
        self.round.store(COPIED, Ordering::Release);
    }
}

pub(super) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Bring the schema to the newest version. Safe when many processes open the same (new)
/// file at once: the version is read and every missing migration applied inside ONE
/// `BEGIN IMMEDIATE` transaction, which takes the database's write lock first (waiting up
/// to [`BUSY_TIMEOUT`] for another process's migration), so exactly one process migrates
/// and the others then see the new version and apply nothing. A deferred transaction would
/// read the old version, then fail to upgrade to a write lock (SQLITE_BUSY without the busy
/// handler) or run `CREATE TABLE` twice ("table session already exists").
pub(super) fn migrate(path: &Path, conn: &mut Connection) -> Result<(), StoreError> {
    let read_version = |conn: &Connection| -> Result<i64, StoreError> {
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sql_err(path, e))
    };
    let too_new = |version: i64| StoreError::Sqlite {
        path: path.display().to_string(),
        message: format!(
            "schema version {version} is newer than this troupe understands ({}); upgrade troupe",
            MIGRATIONS.len()
        ),
    };
    // Fast path: an up-to-date store takes no write lock.
    let version = read_version(conn)?;
    if version as usize == MIGRATIONS.len() {
        return Ok(());
    }
    if version as usize > MIGRATIONS.len() {
        return Err(too_new(version));
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| sql_err(path, e))?;
    let version = read_version(&tx)?;
    if version as usize > MIGRATIONS.len() {
        return Err(too_new(version));
    }
    for sql in MIGRATIONS.iter().skip(version as usize) {
        tx.execute_batch(sql).map_err(|e| sql_err(path, e))?;
    }
    tx.pragma_update(None, "user_version", MIGRATIONS.len() as i64)
        .map_err(|e| sql_err(path, e))?;
    tx.commit().map_err(|e| sql_err(path, e))
}

/// Sessions whose last event-log sequence number [`SeqCache`] keeps at most; past it the
/// cache starts over (a miss costs one index seek, `SELECT MAX(seq)`).
pub(super) const SEQ_CACHE_MAX: usize = 4096;

/// The writer connection's last event-log sequence number per session (`event.seq`), kept
/// across batches so a batch does not seek `MAX(seq)` once per session it touches.
///
/// Valid only while no other connection committed to the file: another process (or another
/// [`Store`] on the same file) may log events of the same session. SQLite's `PRAGMA
/// data_version` changes exactly when another connection committed since this one last
/// looked (commits of this connection do not change it), so `apply` reads it inside its
/// write transaction — `BEGIN IMMEDIATE`, the write lock held, so nobody commits between
/// the read and the inserts — and drops the cache when it moved. A failed transaction drops
/// it too (its numbers were rolled back), and a deleted session's entry goes (its log is
/// gone).
#[derive(Debug, Default)]
pub(super) struct SeqCache {
    /// `PRAGMA data_version` when the cache was last known valid.
    data_version: Option<i64>,
    /// Session id → the last `seq` committed for it by this connection.
    last: std::collections::HashMap<String, i64>,
}

impl SeqCache {
    fn forget(&mut self) {
        self.data_version = None;
        self.last.clear();
    }
}

pub(super) fn apply(
    path: &Path,
    conn: &mut Connection,
    cache: &mut SeqCache,
    writes: &[Write],
) -> Result<(), StoreError> {
    if writes.iter().all(|w| matches!(w, Write::Publish(_))) {
        return Ok(());
    }
    let result = apply_in_transaction(path, conn, cache, writes);
    if result.is_err() {
        cache.forget();
    }
    result
}

fn apply_in_transaction(
    path: &Path,
    conn: &mut Connection,
    cache: &mut SeqCache,
    writes: &[Write],
) -> Result<(), StoreError> {
    // IMMEDIATE: the write lock first (waiting up to the busy timeout), so the data version
    // read next stays true until the commit. (A deferred transaction would also fail with
    // SQLITE_BUSY_SNAPSHOT when another process commits between its first read and write.)
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| sql_err(path, e))?;
    let data_version: i64 = tx
        .prepare_cached("PRAGMA data_version")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(|e| sql_err(path, e))?;
    if cache.data_version != Some(data_version) {
        cache.forget();
    }
    // Sessions this batch deletes: their numbers come from the log itself, as without the
    // cache (after the delete, `MAX(seq)` starts over).
    let deleted: Vec<&str> = writes
        .iter()
        .filter_map(|w| match w {
            Write::DeleteSession(s) => Some(s.id.as_str()),
            _ => None,
        })
        .collect();
    let mut seqs: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    {
        let now = now_ms();
        let mut log = |tx: &rusqlite::Transaction<'_>,
                       sid: &str,
                       ty: &str,
                       data: &str|
         -> Result<(), StoreError> {
            let cached = || {
                (!deleted.contains(&sid))
                    .then(|| cache.last.get(sid))
                    .flatten()
            };
            let seq = match seqs.get(sid).or_else(cached) {
                Some(s) => s + 1,
                None => {
                    tx.prepare_cached(
                        "SELECT COALESCE(MAX(seq), 0) FROM event WHERE session_id = ?1",
                    )
                    .and_then(|mut s| s.query_row([sid], |r| r.get::<_, i64>(0)))
                    .map_err(|e| sql_err(path, e))?
                        + 1
                }
            };
            seqs.insert(sid.to_string(), seq);
            tx.prepare_cached(
                "INSERT INTO event (session_id, seq, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| s.execute(params![sid, seq, ty, now, data]))
            .map_err(|e| sql_err(path, e))?;
            Ok(())
        };
        for w in writes {
            match w {
                Write::Session { info, created } => {
                    let data = json(info);
                    // An update never inserts: a session deleted meanwhile (its turn was
                    // still closing parts, a title arrived late) must stay deleted.
                    let changed = if *created {
                        tx.prepare_cached(
                            "INSERT INTO session (id, parent_id, directory, title, time_created, time_updated, data)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                             ON CONFLICT(id) DO UPDATE SET title = excluded.title, time_updated = excluded.time_updated, data = excluded.data",
                        )
                        .and_then(|mut s| {
                            s.execute(params![
                                info.id,
                                info.parent_id,
                                info.directory,
                                info.title,
                                info.time.created,
                                info.time.updated,
                                data
                            ])
                        })
                    } else {
                        tx.prepare_cached(
                            "UPDATE session SET title = ?2, time_updated = ?3, data = ?4 WHERE id = ?1",
                        )
                        .and_then(|mut s| {
                            s.execute(params![info.id, info.title, info.time.updated, data])
                        })
                    }
                    .map_err(|e| sql_err(path, e))?;
                    if changed > 0 {
                        log(
                            &tx,
                            &info.id,
                            if *created {
                                "session.created"
                            } else {
                                "session.updated"
                            },
                            &data,
                        )?;
                    }
                }
                Write::Message(m) => {
                    let data = json(m);
                    let role = if matches!(m, Message::User(_)) {
                        "user"
                    } else {
                        "assistant"
                    };
                    tx.prepare_cached(
                        "INSERT INTO message (id, session_id, role, time_created, data) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT(id) DO UPDATE SET data = excluded.data",
                    )
                    .and_then(|mut s| s.execute(params![m.id(), m.session_id(), role, m.created(), data]))
                    .map_err(|e| sql_err(path, e))?;
                    log(&tx, m.session_id(), "message.updated", &data)?;
                }
                Write::Part(p) => {
                    let data = json(p);
                    let status = match &p.kind {
                        PartKind::Tool { state, .. } => Some(state.status()),
                        _ => None,
                    };
                    tx.prepare_cached(
                        "INSERT INTO part (id, message_id, session_id, type, status, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT(id) DO UPDATE SET status = excluded.status, data = excluded.data",
                    )
                    .and_then(|mut s| s.execute(params![p.id, p.message_id, p.session_id, p.type_name(), status, data]))
                    .map_err(|e| sql_err(path, e))?;
                    log(&tx, &p.session_id, "message.part.updated", &data)?;
                }
                Write::DeleteSession(s) => {
                    tx.execute("DELETE FROM part WHERE session_id = ?1", [&s.id])
                        .map_err(|e| sql_err(path, e))?;
                    tx.execute("DELETE FROM message WHERE session_id = ?1", [&s.id])
                        .map_err(|e| sql_err(path, e))?;
                    tx.execute("DELETE FROM session WHERE id = ?1", [&s.id])
                        .map_err(|e| sql_err(path, e))?;
                    tx.execute("DELETE FROM event WHERE session_id = ?1", [&s.id])
                        .map_err(|e| sql_err(path, e))?;
                    tx.execute("DELETE FROM todo WHERE session_id = ?1", [&s.id])
                        .map_err(|e| sql_err(path, e))?;
                }
                Write::Todos { session_id, todos } => {
                    tx.prepare_cached("DELETE FROM todo WHERE session_id = ?1")
                        .and_then(|mut s| s.execute([session_id]))
                        .map_err(|e| sql_err(path, e))?;
                    for (i, t) in todos.iter().enumerate() {
                        tx.prepare_cached(
                            "INSERT INTO todo (session_id, position, data) VALUES (?1, ?2, ?3)",
                        )
                        .and_then(|mut s| s.execute(params![session_id, i as i64, json(t)]))
                        .map_err(|e| sql_err(path, e))?;
                    }
                    log(&tx, session_id, "todo.updated", &json(todos))?;
                }
                Write::RemovePart(p) => {
                    tx.prepare_cached("DELETE FROM part WHERE id = ?1")
                        .and_then(|mut s| s.execute([&p.id]))
                        .map_err(|e| sql_err(path, e))?;
                    log(&tx, &p.session_id, "message.part.removed", &json(&p.id))?;
                }
                Write::RemoveMessage {
                    session_id,
                    message_id,
                } => {
                    tx.prepare_cached("DELETE FROM part WHERE message_id = ?1")
                        .and_then(|mut s| s.execute([message_id]))
                        .map_err(|e| sql_err(path, e))?;
                    tx.prepare_cached("DELETE FROM message WHERE id = ?1")
                        .and_then(|mut s| s.execute([message_id]))
                        .map_err(|e| sql_err(path, e))?;
                    log(&tx, session_id, "message.removed", &json(message_id))?;
                }
                Write::Approvals { project, data } => {
                    tx.prepare_cached(
                        "INSERT INTO permission (project, data) VALUES (?1, ?2) ON CONFLICT(project) DO UPDATE SET data = excluded.data",
                    )
                    .and_then(|mut s| s.execute(params![project, data]))
                    .map_err(|e| sql_err(path, e))?;
                }
                Write::Publish(_) => {}
            }
        }
    }
    tx.commit().map_err(|e| sql_err(path, e))?;
    if cache.last.len() + seqs.len() > SEQ_CACHE_MAX {
        cache.last.clear();
    }
    cache.last.extend(seqs);
    for id in &deleted {
        cache.last.remove(*id);
    }
    cache.data_version = Some(data_version);
    Ok(())
}

pub(super) fn json<T: serde::Serialize>(v: &T) -> String {
    // Serializing our own types cannot fail; keep a readable marker if it ever does.
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
