//! The session store: an SQLite file in WAL mode (the embedded default) or a PostgreSQL
//! database ([`crate::pg`], for stores shared by several machines), written by one writer
//! thread with group commit. [`Store::open`] opens a file; [`Store::open_target`] takes
//! either a file path or a `postgres://…` URL. Both backends keep the same rows, event log and
//! guarantees below; the SQLite path is the same direct code as before the second backend
//! (one `match` per batch or per read, never per row).
//!
//! - Every write goes through [`Store::write`] as a list of [`Write`]s. The writer thread
//!   drains its queue, applies everything queued in ONE transaction, commits, and only then
//!   publishes the matching bus events, in queue order. So a write is always committed
//!   before its bus event, and bus order equals commit order for every session.
//! - Bus-only events (text deltas, status) ride the same queue, so they never overtake the
//!   writes they follow.
//! - Writes are fire-and-forget for the caller; [`Store::flush`] waits until everything
//!   queued so far is committed and returns the first write error since the last flush
//!   (e.g. a full disk), so a turn can end with a clear error instead of losing data silently.
//! - Reads use a separate connection (WAL readers don't block the writer; PostgreSQL: a
//!   small pool) and run on the blocking pool.
//! - Schema changes are numbered migrations tracked in `PRAGMA user_version` (PostgreSQL:
//!   the `troupe_schema` table, see [`crate::pg`]).
//! - An append-only `event` table logs every stored change with a per-session sequence.

use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::event::{Bus, Event};
use crate::types::{
    Message, MessageWithParts, Part, PartKind, Session, ToolState, ToolTime, now_ms,
};

/// Store failure. The message says what and where (`database path: …`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (open, migrate, write, read).
    #[error("store {path}: {message}")]
    Sqlite {
        /// Database file.
        path: String,
        /// SQLite's message.
        message: String,
    },
    /// PostgreSQL failed (connect, migrate, write, read). `target` is the URL without its
    /// password (`postgres://user@host:port/db`).
    #[error("store {target}: {message}")]
    Postgres {
        /// The database, printable (never the password).
        target: String,
        /// The driver's or server's message.
        message: String,
    },
    /// A stored row could not be decoded.
    #[error("store {path}: corrupt row {id}: {message}")]
    Decode {
        /// Database file.
        path: String,
        /// Row id.
        id: String,
        /// Decoder message.
        message: String,
    },
    /// The writer thread is gone.
    #[error("store writer stopped")]
    Closed,
    /// Not found.
    #[error("session not found: {0}")]
    NotFound(String),
}

/// One write (or bus-only event) in the writer queue.
#[derive(Debug, Clone)]
pub enum Write {
    /// Insert or replace a session; publishes `session.created` or `session.updated`.
    Session {
        /// The session.
        info: Session,
        /// Publish `session.created` (true) or `session.updated`.
        created: bool,
    },
    /// Insert or replace a message; publishes `message.updated`.
    Message(Message),
    /// Insert or replace a part; publishes `message.part.updated`.
    Part(Part),
    /// Delete a part; publishes `message.part.removed`.
    RemovePart(Part),
    /// Delete a message and its parts; publishes `message.removed` (a revert's hidden
    /// messages at the next prompt).
    RemoveMessage {
        /// Id of the session (`ses_…`) the message belongs to.
        session_id: String,
        /// Id of the message (`msg_…`) to remove, with its parts.
        message_id: String,
    },
    /// Delete a session and everything under it; publishes `session.deleted`.
    DeleteSession(Session),
    /// Replace the stored "always" approvals of a project (raw ruleset JSON). No bus event.
    Approvals {
        /// Project key (worktree path).
        project: String,
        /// Ruleset JSON.
        data: String,
    },
    /// Replace a session's todo list; publishes `todo.updated`.
    Todos {
        /// Id of the session (`ses_…`) whose list it is.
        session_id: String,
        /// The new list, in order.
        todos: Vec<crate::todo::Todo>,
    },
    /// Bus-only event published in queue order (deltas, status, errors).
    Publish(Event),
}

/// Most queued jobs (each a `Store::write` call or a flush) applied in one transaction.
const MAX_BATCH_JOBS: usize = 4096;

/// How long the writer waits for more writes before committing a batch that has rows to store
/// and no pending flush: 1 ms. It bounds the extra delay of a bus event (and of a flush that
/// arrives during the window); under load it turns many tiny transactions into a few larger
/// ones (commit cost is mostly per transaction, not per row). Measured in `bench/README.md`.
pub const GROUP_COMMIT_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

enum Job {
    Writes(Vec<Write>),
    Flush(oneshot::Sender<Result<(), StoreError>>),
    /// Answered once everything queued before it is committed; unlike `Flush` it leaves a
    /// pending write error for the next flush. Used by [`Store::read`] (read-your-writes).
    Barrier(oneshot::Sender<()>),
}

/// Handle to the store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// The SQLite file, or the printable PostgreSQL target as a path.
    path: PathBuf,
    tx: Mutex<Option<std_mpsc::Sender<Job>>>,
    backend: Backend,
    bus: Bus,
}

/// The connections of reads and lease operations, per backend (the writer's connection
/// lives on its thread).
enum Backend {
    Sqlite {
        reader: Mutex<Connection>,
        /// Connection of the session-lease operations ([`crate::lease`]): they answer at
        /// once, so they do not queue behind the writer's batches.
        lease: Mutex<Connection>,
    },
    Postgres(crate::pg::Pool),
}

const MIGRATIONS: &[&str] = &[
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
];

fn sql_err(path: &Path, e: rusqlite::Error) -> StoreError {
    StoreError::Sqlite {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// How long a connection waits for another process's lock before failing with "database
/// is locked" (SQLite's busy handler): 5 s.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5000);

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| sql_err(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
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

fn is_busy(e: &rusqlite::Error) -> bool {
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
fn migrate(path: &Path, conn: &mut Connection) -> Result<(), StoreError> {
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

impl Store {
    /// Open (creating directories and the file) and migrate. `bus` receives the events of
    /// committed writes.
    pub fn open(path: impl AsRef<Path>, bus: Bus) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Sqlite {
                path: path.display().to_string(),
                message: format!("cannot create directory {}: {e}", dir.display()),
            })?;
        }
        let mut writer = open_conn(&path)?;
        migrate(&path, &mut writer)?;
        let reader = open_conn(&path)?;
        let lease = open_conn(&path)?;
        let (tx, rx) = std_mpsc::channel::<Job>();
        let wpath = path.clone();
        let wbus = bus.clone();
        std::thread::Builder::new()
            .name("troupe-store".into())
            .spawn(move || {
                let mut writer = writer;
                writer_loop(rx, wbus, |w| apply(&wpath, &mut writer, w))
            })
            .map_err(|e| StoreError::Sqlite {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                tx: Mutex::new(Some(tx)),
                backend: Backend::Sqlite {
                    reader: Mutex::new(reader),
                    lease: Mutex::new(lease),
                },
                bus,
            }),
        })
    }

    /// Open the store named by `target`: a `postgres://…` / `postgresql://…` URL opens
    /// PostgreSQL ([`Store::open_postgres`]), anything else is an SQLite file path
    /// ([`Store::open`]).
    pub fn open_target(target: impl AsRef<std::ffi::OsStr>, bus: Bus) -> Result<Store, StoreError> {
        let target = target.as_ref();
        match target.to_str() {
            Some(url) if crate::pg::is_url(url) => Store::open_postgres(url, bus),
            _ => Store::open(Path::new(target), bus),
        }
    }

    /// Connect to PostgreSQL at `url` (`postgres://user[:password]@host[:port]/db`, any
    /// libpq-style parameter such as `options=-c search_path=…` or `connect_timeout=…`),
    /// migrate, and start the writer thread. Blocks for the connection (up to the URL's
    /// `connect_timeout`, default [`crate::pg::CONNECT_TIMEOUT`]) on its own thread, so it may
    /// be called from async code like [`Store::open`]. Errors name the target without its
    /// password.
    pub fn open_postgres(url: &str, bus: Bus) -> Result<Store, StoreError> {
        let target = crate::pg::Target::parse(url)?;
        let display = target.display.clone();
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<(), StoreError>>();
        let (tx, rx) = std_mpsc::channel::<Job>();
        let wbus = bus.clone();
        let wtarget = target.clone();
        std::thread::Builder::new()
            .name("troupe-store-pg".into())
            .spawn(move || match crate::pg::Writer::open(wtarget) {
                Ok(mut writer) => {
                    let _ = ready_tx.send(Ok(()));
                    writer_loop(rx, wbus, |w| writer.apply(w));
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| target.err(e))?;
        ready_rx
            .recv()
            .map_err(|_| target.err("the store writer thread ended while connecting"))??;
        Ok(Store {
            inner: Arc::new(Inner {
                path: PathBuf::from(&display),
                tx: Mutex::new(Some(tx)),
                backend: Backend::Postgres(crate::pg::Pool::new(target)),
                bus,
            }),
        })
    }

    /// The database file; for PostgreSQL its printable target (see [`Store::target`]).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the store is, for people: the SQLite file's path or the PostgreSQL URL without
    /// its password (`postgres://user@host:port/db`).
    pub fn target(&self) -> String {
        self.inner.path.display().to_string()
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.inner.backend {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The bus committed writes are published on.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Queue writes (fire-and-forget, ordered). Errors surface at the next [`Store::flush`].
    pub fn write(&self, writes: Vec<Write>) {
        let guard = self.inner.tx.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = guard.as_ref() {
            let _ = tx.send(Job::Writes(writes));
        }
    }

    /// Queue one write.
    pub fn write1(&self, w: Write) {
        self.write(vec![w]);
    }

    /// Wait until everything queued so far is committed and published; returns the first
    /// write error since the previous flush.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        {
            let guard = self.inner.tx.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                Some(s) => s.send(Job::Flush(tx)).map_err(|_| StoreError::Closed)?,
                None => return Err(StoreError::Closed),
            }
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Blocking flush, for non-async callers (tests, shutdown).
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        {
            let guard = self.inner.tx.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                Some(s) => s.send(Job::Flush(tx)).map_err(|_| StoreError::Closed)?,
                None => return Err(StoreError::Closed),
            }
        }
        rx.blocking_recv().map_err(|_| StoreError::Closed)?
    }

    /// Run a read on the blocking pool with the reader connection. It first waits until every
    /// write queued before the call is committed (read-your-writes: the writer's group-commit
    /// window would otherwise let a read miss writes queued just before it; a failed write is
    /// still reported by the next [`Store::flush`]).
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Reader<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let barrier = {
            let (tx, rx) = oneshot::channel();
            let guard = self.inner.tx.lock().unwrap_or_else(|e| e.into_inner());
            guard
                .as_ref()
                .and_then(|s| s.send(Job::Barrier(tx)).ok())
                .map(|()| rx)
        };
        if let Some(rx) = barrier {
            // A closed writer cannot commit anything more: read what is there.
            let _ = rx.await;
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.read_now(f))
            .await
            .map_err(|e| self.inner.join_err(e))?
    }

    /// Run a lease operation on the blocking pool: `sqlite` with the SQLite lease
    /// connection, `pg` with a pooled PostgreSQL connection.
    pub(crate) async fn with_lease_conn<T, F, G>(&self, sqlite: F, pg: G) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        G: FnOnce(&crate::pg::Pool) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || match &inner.backend {
            Backend::Sqlite { lease, .. } => {
                let mut conn = lease.lock().unwrap_or_else(|e| e.into_inner());
                sqlite(&mut conn).map_err(|e| sql_err(&inner.path, e))
            }
            Backend::Postgres(pool) => pg(pool),
        })
        .await
        .map_err(|e| self.inner.join_err(e))?
    }

    /// Run a read on the current thread (CLI commands that are not async). Unlike
    /// [`Store::read`] it does not wait for queued writes: call [`Store::flush_blocking`] first
    /// if the read must see them.
    ///
    /// On PostgreSQL it must not be called from an async task (the driver blocks on its own
    /// runtime): it then fails with a `StoreError::Postgres` saying so.
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Backend::Postgres(pool) = &self.inner.backend
            && tokio::runtime::Handle::try_current().is_ok()
        {
            return Err(pool
                .target
                .err("read_blocking called inside an async runtime; use Store::read"));
        }
        self.inner.read_now(f)
    }
}

impl Inner {
    /// Run a read here, now (a blocking thread).
    fn read_now<T>(
        &self,
        f: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite { reader, .. } => {
                let conn = reader.lock().unwrap_or_else(|e| e.into_inner());
                f(&Reader {
                    conn: ReadConn::Sqlite(&conn),
                    path: &self.path,
                })
            }
            Backend::Postgres(pool) => pool.with(|c| {
                let cell = std::cell::RefCell::new(c);
                f(&Reader {
                    conn: ReadConn::Pg(&cell),
                    path: &self.path,
                })
            }),
        }
    }

    fn join_err(&self, e: tokio::task::JoinError) -> StoreError {
        match &self.backend {
            Backend::Sqlite { .. } => StoreError::Sqlite {
                path: self.path.display().to_string(),
                message: e.to_string(),
            },
            Backend::Postgres(pool) => pool.target.err(e),
        }
    }
}

mod reader;
use reader::ReadConn;
pub use reader::Reader;

/// The writer thread of either backend: `apply` stores one batch in one transaction.
fn writer_loop(
    rx: std_mpsc::Receiver<Job>,
    bus: Bus,
    mut apply: impl FnMut(&[Write]) -> Result<(), StoreError>,
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
    }
}

/// Whether `w` stores rows (everything but a bus-only event).
fn stores_rows(w: &Write) -> bool {
    !matches!(w, Write::Publish(_))
}

/// Moves queued jobs into `batch` without blocking, up to [`MAX_BATCH_JOBS`].
fn drain_into(rx: &std_mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH_JOBS {
        match rx.try_recv() {
            Ok(j) => batch.push(j),
            Err(_) => break,
        }
    }
}

fn event_of(w: Write) -> Option<Event> {
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
            session_id: p.session_id,
            message_id: p.message_id,
            part_id: p.id,
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

fn apply(path: &Path, conn: &mut Connection, writes: &[Write]) -> Result<(), StoreError> {
    if writes.iter().all(|w| matches!(w, Write::Publish(_))) {
        return Ok(());
    }
    let tx = conn.transaction().map_err(|e| sql_err(path, e))?;
    {
        let mut seqs: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        let now = now_ms();
        let mut log = |tx: &rusqlite::Transaction<'_>,
                       sid: &str,
                       ty: &str,
                       data: &str|
         -> Result<(), StoreError> {
            let seq = match seqs.get(sid) {
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
    tx.commit().map_err(|e| sql_err(path, e))
}

fn json<T: serde::Serialize>(v: &T) -> String {
    // Serializing our own types cannot fail; keep a readable marker if it ever does.
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Tools that never change anything outside troupe: when one of them is interrupted, saying
/// "aborted" is accurate. Every other tool (write, edit, bash, task, MCP and unknown tools)
/// may have acted before the process died; see [`OUTCOME_UNKNOWN`]. Fail closed: a tool
/// missing from this list counts as side-effecting.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read",
    "glob",
    "grep",
    "list",
    "invalid",
    "todoread",
    "webfetch",
    "websearch",
];

/// Error text of a side-effecting tool part that was `running` when its process died
/// (issue 12.5): the model must check the current state before retrying.
pub const OUTCOME_UNKNOWN: &str = "Tool execution interrupted: the process running this tool ended before it \
finished, so its outcome is unknown (it may have partly or fully taken effect). Check the current \
state (files, processes) before retrying.";

/// Metadata key of a running part that says how many of its processes the loader found
/// still running and stopped (`troupe_tools::procs::SURVIVORS_METADATA_KEY`); the swept error
/// then says so.
pub const SURVIVORS_KEY: &str = "survivorsStopped";

/// Repair a session left inconsistent by a crashed or killed process: tool parts still
/// `pending` (never started) or `running` a read-only tool ([`READ_ONLY_TOOLS`]) become
/// `error` "Tool execution aborted"; parts `running` any other tool become `error`
/// [`OUTCOME_UNKNOWN`] with metadata `{"interrupted": true, "outcome": "unknown"}` (the
/// others carry `{"interrupted": true}`). Assistant messages that never completed get
/// `time.completed` and a `MessageAbortedError`.
/// Returns the repaired writes (already queued). Call before driving a loaded session.
pub fn sweep_interrupted(store: &Store, history: &mut [MessageWithParts]) -> usize {
    let mut writes = Vec::new();
    let now = now_ms();
    for m in history.iter_mut() {
        for p in m.parts.iter_mut() {
            if let PartKind::Tool { state, tool, .. } = &mut p.kind
                && !state.is_final()
            {
                let (start, ran) = match state {
                    ToolState::Running { time, .. } => (time.start, true),
                    _ => (now, false),
                };
                let unknown = ran && !READ_ONLY_TOOLS.contains(&tool.as_str());
                // Set by the loader when it looked for the call's processes (issue 12.4).
                let survivors = match state {
                    ToolState::Running {
                        metadata: Some(m), ..
                    } => m.get(SURVIVORS_KEY).and_then(|v| v.as_u64()),
                    _ => None,
                };
                let (error, metadata) = if unknown {
                    let mut error = OUTCOME_UNKNOWN.to_string();
                    let mut metadata =
                        serde_json::json!({"interrupted": true, "outcome": "unknown"});
                    if let Some(n) = survivors {
                        error.push_str(&match n {
                            0 => " None of the processes it started is still running.".to_string(),
                            n => format!(
                                " {n} process(es) it started were still running and have been stopped."
                            ),
                        });
                        metadata[SURVIVORS_KEY] = serde_json::json!(n);
                    }
                    (error, metadata)
                } else {
                    (
                        "Tool execution aborted".to_string(),
                        serde_json::json!({"interrupted": true}),
                    )
                };
                *state = ToolState::Error {
                    input: state.input().clone(),
                    error,
                    metadata: Some(metadata),
                    time: ToolTime {
                        start,
                        end: Some(now),
                        compacted: None,
                    },
                };
                writes.push(Write::Part(p.clone()));
            }
        }
        if let Message::Assistant(a) = &mut m.info
            && a.time.completed.is_none()
        {
            a.time.completed = Some(now);
            if a.error.is_none() && a.finish.is_none() {
                a.error = Some(crate::types::MessageError::new(
                    crate::types::MessageErrorName::MessageAborted,
                    "the process driving this step ended before it finished",
                ));
            }
            writes.push(Write::Message(m.info.clone()));
        }
    }
    let n = writes.len();
    if n > 0 {
        store.write(writes);
    }
    n
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
