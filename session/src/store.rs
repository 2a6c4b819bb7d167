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

use crate::event::{Bus, Event, PartRef};
use crate::types::{
    Message, MessageId, MessageWithParts, Part, PartKind, Session, SessionId, ToolState, ToolTime,
    now_ms,
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
        session_id: SessionId,
        /// Id of the message (`msg_…`) to remove, with its parts.
        message_id: MessageId,
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
        session_id: SessionId,
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
        /// WAL checkpoint rounds finished ([`WalCheckpoints`]).
        checkpoints: Arc<std::sync::atomic::AtomicU64>,
    },
    Postgres(crate::pg::Pool),
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
        let mut lease = open_conn(&path)?;
        let checkpoints = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut wal = WalCheckpoints::start(&path, checkpoints.clone())?;
        wal.attach(&path, &mut writer)?;
        wal.attach(&path, &mut lease)?;
        let (tx, rx) = std_mpsc::channel::<Job>();
        let wpath = path.clone();
        let wbus = bus.clone();
        std::thread::Builder::new()
            .name("troupe-store".into())
            .spawn(move || {
                let writer = std::cell::RefCell::new(writer);
                let mut seqs = SeqCache::default();
                writer_loop(
                    rx,
                    wbus,
                    |w| apply(&wpath, &mut writer.borrow_mut(), &mut seqs, w),
                    || wal.finish_round(&wpath, &writer.borrow(), std::time::Instant::now()),
                )
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
                    checkpoints,
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
                    // PostgreSQL has no log of ours to checkpoint.
                    writer_loop(rx, wbus, |w| writer.apply(w), || {});
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

    /// WAL checkpoint rounds the store has finished since it opened (SQLite; always 0 for
    /// PostgreSQL). Each copies the write-ahead log back into the database file once the log
    /// holds [`CHECKPOINT_FRAMES`] frames: a checkpointer thread copies it while the writer
    /// goes on, the writer copies the rest between batches ([`WalCheckpoints`]).
    pub fn wal_checkpoints(&self) -> u64 {
        match &self.inner.backend {
            Backend::Sqlite { checkpoints, .. } => {
                checkpoints.load(std::sync::atomic::Ordering::Relaxed)
            }
            Backend::Postgres(_) => 0,
        }
    }

    /// The bus committed writes are published on.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// Queue writes (fire-and-forget, ordered). Errors surface at the next [`Store::flush`].
    pub fn write(&self, writes: Vec<Write>) {
        // A closed store drops them; the next flush reports it closed.
        let _ = self.send_job(Job::Writes(writes));
    }

    /// Queue one write.
    pub fn write1(&self, w: Write) {
        self.write(vec![w]);
    }

    /// Wait until everything queued so far is committed and published; returns the first
    /// write error since the previous flush.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send_job(Job::Flush(tx))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queue `job` for the writer thread. [`StoreError::Closed`] when the writer is gone.
    fn send_job(&self, job: Job) -> Result<(), StoreError> {
        let guard = self.inner.tx.lock().unwrap_or_else(|e| e.into_inner());
        let sender = guard.as_ref().ok_or(StoreError::Closed)?;
        sender.send(job).map_err(|_| StoreError::Closed)
    }

    /// Blocking flush, for non-async callers (tests, shutdown).
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send_job(Job::Flush(tx))?;
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
        let (tx, rx) = oneshot::channel();
        if self.send_job(Job::Barrier(tx)).is_ok() {
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
mod sqlite;
mod sweep;
mod writer;
use reader::ReadConn;
pub use reader::Reader;
use sqlite::*;
pub use sqlite::{BUSY_TIMEOUT, CHECKPOINT_FRAMES};
pub use sweep::{OUTCOME_UNKNOWN, READ_ONLY_TOOLS, SURVIVORS_KEY, sweep_interrupted};
use writer::*;

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
