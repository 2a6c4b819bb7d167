//! The PostgreSQL backend of the store (issue 18): the same rows, event log and ordering
//! guarantees as the SQLite file, for stores shared by several machines.
//!
//! - The same writer thread and group commit as SQLite ([`crate::store`]): one connection
//!   applies every queued write of a batch in ONE transaction, commits, then publishes the
//!   bus events in queue order. A write is committed before its bus event; bus order is
//!   commit order.
//! - The per-session event sequence stays gap-free and unique when several processes write
//!   the same session (a worker taking a session over): the first write of a session in a
//!   transaction takes the transaction-scoped advisory lock `(1, hashtext(session_id))`
//!   before reading `MAX(seq)`, so two writers of one session queue up instead of colliding.
//! - Reads, lease operations and vacuum use a small pool of connections
//!   ([`Pool`], at most [`MAX_IDLE`] kept idle), always on the blocking pool or a plain
//!   thread: the `postgres` client runs its own runtime and must never run on an async
//!   worker thread.
//! - Migrations are numbered ([`MIGRATIONS`]) and tracked in the table `troupe_schema`;
//!   they run under the advisory lock `(0, hashtext('troupe-migrate:' || current_schema()))`,
//!   so many processes opening a new database at once migrate it exactly once.
//! - Ids are `TEXT COLLATE "C"`: byte order, as SQLite sorts them, so `ORDER BY id` (the
//!   time order of troupe's ascending ids) is the same on both backends.
//! - The target may name a schema: `postgres://…/db?options=-c%20search_path%3Dmyschema`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, Statement};

use crate::lease::{LeaseClaim, LeaseHolder, TakeOutcome};
use crate::store::{StoreError, Write};
use crate::types::{Message, MessageWithParts, Part, PartKind, Session, now_ms};
use crate::vacuum::VacuumReport;

/// Whether a store target is a PostgreSQL URL (`postgres://…` or `postgresql://…`).
pub fn is_url(target: &str) -> bool {
    let t = target.trim_start();
    t.starts_with("postgres://") || t.starts_with("postgresql://")
}

/// How long opening a connection waits for the server when the URL sets no
/// `connect_timeout`: 10 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the check of an idle connection ([`IDLE_CHECK`]) waits for the server: 2 s.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Most idle connections the read/lease pool keeps: 8. More are opened when more reads run
/// at once, and closed when returned beyond this.
pub const MAX_IDLE: usize = 8;

/// A parsed PostgreSQL target: the connection settings and a printable name without the
/// password (`postgres://user@host:port/db`).
#[derive(Clone)]
pub(crate) struct Target {
    config: postgres::Config,
    /// Printable name (never the password).
    pub(crate) display: String,
}

/// The URL with any password replaced by `***`, for error messages about a URL that does
/// not parse.
fn scrub(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "postgres://…".into();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    match auth {
        Some(a) => {
            let user = a.split(':').next().unwrap_or("");
            let pw = if a.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{pw}@{host}")
        }
        None => format!("{scheme}://{host}"),
    }
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, StoreError> {
        let mut config =
            postgres::Config::from_str(url.trim()).map_err(|e| StoreError::Postgres {
                target: scrub(url.trim()),
                message: format!("not a valid PostgreSQL URL: {e}"),
            })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("troupe");
        }
        let user = config.get_user().unwrap_or("");
        let host = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                postgres::config::Host::Tcp(h) => h.clone(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        let port = config
            .get_ports()
            .first()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let db = config.get_dbname().unwrap_or(user);
        let at = if user.is_empty() { "" } else { "@" };
        let mut display = format!("postgres://{user}{at}{host}{port}/{db}");
        if let Some(opts) = config.get_options() {
            display.push_str(&format!(" ({opts})"));
        }
        Ok(Target { config, display })
    }

    pub(crate) fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Postgres {
            target: self.display.clone(),
            message: e.to_string(),
        }
    }
}

/// `postgres::Error`'s text with the server's detail (its `Display` alone may say only "db
/// error").
fn pg_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut m = format!("{}: {}", db.severity(), db.message());
            if let Some(d) = db.detail() {
                m.push_str(&format!(" ({d})"));
            }
            m
        }
        None => with_causes(e),
    }
}

/// An error's text followed by its causes (`error connecting to server: Connection refused
/// (os error 111)`); the driver's own text stops at the first line.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut m = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !m.contains(&text) {
            m.push_str(": ");
            m.push_str(&text);
        }
        cause = c.source();
    }
    m
}

/// One connection with its prepared statements (each SQL text is parsed once per
/// connection).
pub(crate) struct PgConn {
    client: Client,
    stmts: HashMap<&'static str, Statement>,
}

fn prepared(
    stmts: &mut HashMap<&'static str, Statement>,
    client: &mut impl postgres::GenericClient,
    sql: &'static str,
) -> Result<Statement, postgres::Error> {
    if let Some(s) = stmts.get(sql) {
        return Ok(s.clone());
    }
    let s = client.prepare(sql)?;
    stmts.insert(sql, s.clone());
    Ok(s)
}

impl PgConn {
    /// Connect (blocking; never call on an async worker thread).
    pub(crate) fn connect(target: &Target) -> Result<PgConn, StoreError> {
        let client = target
            .config
            .connect(NoTls)
            .map_err(|e| target.err(format!("cannot connect: {}", pg_message(&e))))?;
        Ok(PgConn {
            client,
            stmts: HashMap::new(),
        })
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        let st = prepared(&mut self.stmts, &mut self.client, sql)?;
        self.client.query(&st, params)
    }
}

/// Connections for reads, lease operations and vacuum.
pub(crate) struct Pool {
    pub(crate) target: Target,
    /// Idle connections with the time each was returned.
    idle: Mutex<Vec<(PgConn, Instant)>>,
}

/// A pooled connection idle longer than this is checked (one empty query) before it is
/// lent, so a server restart or an idle timeout costs a reconnect instead of a failed
/// read: 2 s. Under load connections come back far sooner and are lent unchecked.
pub const IDLE_CHECK: Duration = Duration::from_secs(2);

impl Pool {
    pub(crate) fn new(target: Target) -> Pool {
        Pool {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Run `f` with a pooled connection (blocking). A connection that broke is dropped
    /// instead of returned.
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut PgConn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match pooled {
            Some((mut c, since)) if !c.client.is_closed() => {
                if since.elapsed() > IDLE_CHECK && c.client.is_valid(CHECK_TIMEOUT).is_err() {
                    PgConn::connect(&self.target)?
                } else {
                    c
                }
            }
            _ => PgConn::connect(&self.target)?,
        };
        let out = f(&mut conn);
        if !conn.client.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push((conn, Instant::now()));
            }
        }
        out
    }

    fn with_pg<T>(
        &self,
        f: impl FnOnce(&mut PgConn) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        self.with(|c| f(c).map_err(|e| self.target.err(pg_message(&e))))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // A `postgres::Client` blocks on its own runtime when dropped, which panics on an
        // async worker thread (where the last `Store` handle may well go): close the idle
        // connections on a plain thread.
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        if !idle.is_empty() {
            let _ = std::thread::spawn(move || drop(idle)).join();
        }
    }
}

/// Numbered schema migrations; `troupe_schema.version` = how many are applied.
const MIGRATIONS: &[&str] = &[
    // 1: core tables (the SQLite schema; INTEGER → BIGINT, ids in byte order)
    r#"CREATE TABLE session (
        id TEXT COLLATE "C" PRIMARY KEY,
        parent_id TEXT COLLATE "C",
        directory TEXT NOT NULL,
        title TEXT NOT NULL,
        time_created BIGINT NOT NULL,
        time_updated BIGINT NOT NULL,
        data TEXT NOT NULL
     );
     CREATE INDEX session_parent ON session(parent_id);
     CREATE INDEX session_updated ON session(time_updated);
     CREATE TABLE message (
        id TEXT COLLATE "C" PRIMARY KEY,
        session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        time_created BIGINT NOT NULL,
        data TEXT NOT NULL
     );
     CREATE INDEX message_session ON message(session_id, id);
     CREATE TABLE part (
        id TEXT COLLATE "C" PRIMARY KEY,
        message_id TEXT COLLATE "C" NOT NULL REFERENCES message(id) ON DELETE CASCADE,
        session_id TEXT COLLATE "C" NOT NULL,
        type TEXT NOT NULL,
        status TEXT,
        data TEXT NOT NULL
     );
     CREATE INDEX part_message ON part(message_id, id);
     CREATE INDEX part_session ON part(session_id, id);
     CREATE TABLE event (
        session_id TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        type TEXT NOT NULL,
        time BIGINT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
     );
     CREATE TABLE permission (
        project TEXT PRIMARY KEY,
        data TEXT NOT NULL
     );
     CREATE TABLE todo (
        session_id TEXT COLLATE "C" NOT NULL,
        position BIGINT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, position)
     );"#,
    // 2: session leases (one owner per session across machines)
    r#"CREATE TABLE session_lease (
        session_id TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT NOT NULL,
        pid BIGINT NOT NULL,
        host TEXT NOT NULL,
        label TEXT NOT NULL,
        acquired BIGINT NOT NULL,
        heartbeat BIGINT NOT NULL,
        expires BIGINT NOT NULL
     );"#,
];

/// Bring the schema to the newest version (see the module docs for the lock).
pub(crate) fn migrate(target: &Target, conn: &mut PgConn) -> Result<(), StoreError> {
    let err = |e: postgres::Error| target.err(format!("migration: {}", pg_message(&e)));
    let mut tx = conn.client.transaction().map_err(err)?;
    let schema: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .map_err(err)?
        .get(0);
    let Some(schema) = schema else {
        return Err(target
            .err("no schema to create the tables in (the search_path names no existing schema)"));
    };
    tx.execute(
        "SELECT pg_advisory_xact_lock(0, hashtext('troupe-migrate:' || $1::text))",
        &[&schema],
    )
    .map_err(err)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS troupe_schema (version BIGINT NOT NULL)")
        .map_err(err)?;
    let version: Option<i64> = tx
        .query_opt("SELECT version FROM troupe_schema", &[])
        .map_err(err)?
        .map(|r| r.get(0));
    let version = match version {
        Some(v) => v,
        None => {
            tx.execute("INSERT INTO troupe_schema (version) VALUES (0)", &[])
                .map_err(err)?;
            0
        }
    };
    if version as usize > MIGRATIONS.len() {
        return Err(target.err(format!(
            "schema version {version} is newer than this troupe understands ({}); upgrade troupe",
            MIGRATIONS.len()
        )));
    }
    for sql in MIGRATIONS.iter().skip(version as usize) {
        tx.batch_execute(sql).map_err(err)?;
    }
    tx.execute(
        "UPDATE troupe_schema SET version = $1",
        &[&(MIGRATIONS.len() as i64)],
    )
    .map_err(err)?;
    tx.commit().map_err(err)
}

// ---- writes -----------------------------------------------------------------------------

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

// ---- reads ------------------------------------------------------------------------------

/// A pooled connection lent to one [`crate::Reader`] closure.
pub(crate) type ReadConn<'a> = RefCell<&'a mut PgConn>;

fn decode<T: serde::de::DeserializeOwned>(
    target: &str,
    id: &str,
    data: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(data).map_err(|e| StoreError::Decode {
        path: target.to_string(),
        id: id.to_string(),
        message: e.to_string(),
    })
}

fn rows(
    c: &ReadConn<'_>,
    target: &str,
    sql: &'static str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<Vec<postgres::Row>, StoreError> {
    c.borrow_mut()
        .query(sql, params)
        .map_err(|e| StoreError::Postgres {
            target: target.to_string(),
            message: pg_message(&e),
        })
}

fn id_data<T: serde::de::DeserializeOwned>(
    target: &str,
    rows: Vec<postgres::Row>,
) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|r| decode(target, r.get::<_, &str>(0), r.get::<_, &str>(1)))
        .collect()
}

pub(crate) fn session(c: &ReadConn<'_>, t: &str, id: &str) -> Result<Option<Session>, StoreError> {
    let r = rows(c, t, "SELECT id, data FROM session WHERE id = $1", &[&id])?;
    Ok(id_data(t, r)?.into_iter().next())
}

pub(crate) fn sessions(
    c: &ReadConn<'_>,
    t: &str,
    limit: usize,
    roots_only: bool,
) -> Result<Vec<Session>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if roots_only {
        "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT $1"
    } else {
        "SELECT id, data FROM session ORDER BY time_updated DESC, id DESC LIMIT $1"
    };
    id_data(t, rows(c, t, sql, &[&limit])?)
}

pub(crate) fn children(
    c: &ReadConn<'_>,
    t: &str,
    parent: &str,
) -> Result<Vec<Session>, StoreError> {
    let sql = "SELECT id, data FROM session WHERE parent_id = $1 ORDER BY id";
    id_data(t, rows(c, t, sql, &[&parent])?)
}

pub(crate) fn messages(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Vec<MessageWithParts>, StoreError> {
    let msgs = rows(
        c,
        t,
        "SELECT id, data FROM message WHERE session_id = $1 ORDER BY id",
        &[&session_id],
    )?;
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(msgs.len());
    for r in &msgs {
        let info: Message = decode(t, r.get(0), r.get(1))?;
        out.push(MessageWithParts {
            info,
            parts: Vec::new(),
        });
    }
    let parts = rows(
        c,
        t,
        "SELECT id, message_id, data FROM part WHERE session_id = $1 ORDER BY id",
        &[&session_id],
    )?;
    attach_parts(t, &mut out, &parts)?;
    Ok(out)
}

pub(crate) fn messages_page(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
    limit: usize,
    before: Option<&str>,
) -> Result<Vec<MessageWithParts>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let msgs = match before {
        Some(b) => rows(
            c,
            t,
            "SELECT id, data FROM message WHERE session_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
            &[&session_id, &b, &limit],
        )?,
        None => rows(
            c,
            t,
            "SELECT id, data FROM message WHERE session_id = $1 ORDER BY id DESC LIMIT $2",
            &[&session_id, &limit],
        )?,
    };
    let mut out: Vec<MessageWithParts> = Vec::with_capacity(msgs.len());
    for r in msgs.iter().rev() {
        out.push(MessageWithParts {
            info: decode(t, r.get(0), r.get(1))?,
            parts: Vec::new(),
        });
    }
    if out.is_empty() {
        return Ok(out);
    }
    let ids: Vec<&str> = out.iter().map(|m| m.info.id()).collect();
    let parts = rows(
        c,
        t,
        "SELECT id, message_id, data FROM part WHERE message_id = ANY($1) ORDER BY id",
        &[&ids],
    )?;
    attach_parts(t, &mut out, &parts)?;
    Ok(out)
}

/// Put each part row (`id, message_id, data`, in order) under its message in `out`; a part
/// whose message is not in `out` is passed over. Errors: a part that does not decode.
fn attach_parts(
    t: &str,
    out: &mut [MessageWithParts],
    parts: &[postgres::Row],
) -> Result<(), StoreError> {
    let index: HashMap<String, usize> = out
        .iter()
        .enumerate()
        .map(|(i, m)| (m.info.id().to_string(), i))
        .collect();
    for r in parts {
        let part: Part = decode(t, r.get(0), r.get(2))?;
        if let Some(&i) = index.get(r.get::<_, &str>(1)) {
            out[i].parts.push(part);
        }
    }
    Ok(())
}

pub(crate) fn latest_root(
    c: &ReadConn<'_>,
    t: &str,
    directory: Option<&str>,
) -> Result<Option<Session>, StoreError> {
    let r = match directory {
        Some(d) => rows(
            c,
            t,
            "SELECT id, data FROM session WHERE parent_id IS NULL AND directory = $1 ORDER BY time_updated DESC, id DESC LIMIT 1",
            &[&d],
        )?,
        None => rows(
            c,
            t,
            "SELECT id, data FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC, id DESC LIMIT 1",
            &[],
        )?,
    };
    Ok(id_data(t, r)?.into_iter().next())
}

pub(crate) fn find_by_prefix(
    c: &ReadConn<'_>,
    t: &str,
    prefix: &str,
    upper: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT id, data FROM session WHERE id >= $1 AND id < $2 LIMIT 2",
        &[&prefix, &upper],
    )?;
    Ok(r.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub(crate) fn event_count(c: &ReadConn<'_>, t: &str, session_id: &str) -> Result<u64, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT COUNT(*) FROM event WHERE session_id = $1",
        &[&session_id],
    )?;
    Ok(r.first().map(|r| r.get::<_, i64>(0)).unwrap_or(0).max(0) as u64)
}

pub(crate) fn last_error(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Option<String>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT (data::json -> 'error')::text FROM message \
         WHERE session_id = $1 AND role = 'assistant' ORDER BY id DESC LIMIT 1",
        &[&session_id],
    )?;
    Ok(r.first().and_then(|r| r.get::<_, Option<String>>(0)))
}

pub(crate) fn assistant_rows(c: &ReadConn<'_>, t: &str) -> Result<Vec<Message>, StoreError> {
    let sql = "SELECT id, data FROM message WHERE role = 'assistant' ORDER BY id";
    id_data(t, rows(c, t, sql, &[])?)
}

pub(crate) fn todos(
    c: &ReadConn<'_>,
    t: &str,
    session_id: &str,
) -> Result<Vec<crate::todo::Todo>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT data FROM todo WHERE session_id = $1 ORDER BY position",
        &[&session_id],
    )?;
    r.iter().map(|r| decode(t, session_id, r.get(0))).collect()
}

pub(crate) fn approvals(
    c: &ReadConn<'_>,
    t: &str,
    project: &str,
) -> Result<Option<String>, StoreError> {
    let r = rows(
        c,
        t,
        "SELECT data FROM permission WHERE project = $1",
        &[&project],
    )?;
    Ok(r.first().map(|r| r.get(0)))
}

// ---- leases -----------------------------------------------------------------------------

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_print_without_password() {
        let t = Target::parse("postgres://bob:hunter2@db.example:5433/troupe").unwrap();
        assert_eq!(t.display, "postgres://bob@db.example:5433/troupe");
        assert!(!t.err("x").to_string().contains("hunter2"));
        let bad = Target::parse("postgres://bob:hunter2@db.example:notaport/x")
            .err()
            .expect("bad port");
        let text = bad.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("postgres://bob:***@db.example"), "{text}");
        assert!(is_url("postgresql://x/y") && is_url("postgres://x") && !is_url("/tmp/t.db"));
    }

    fn schema(test: &str) -> Option<troupe_testkit::pg::PgSchema> {
        troupe_testkit::pg::PgSchema::create(test)
    }

    /// The server drops every connection of a store (a restart, an administrator): the
    /// next write and the next read still work, on new connections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writer_and_pool_reconnect_after_the_server_drops_them() {
        let Some(schema) = schema("pg_reconnect") else {
            return;
        };
        let app = schema.schema().to_string();
        let url = format!("{}&application_name={app}", schema.url());
        let store = crate::Store::open_postgres(&url, crate::Bus::new()).unwrap();
        let s = Session::new("/tmp", None);
        store.write1(Write::Session {
            info: s.clone(),
            created: true,
        });
        store.flush().await.unwrap();
        let id = s.id.clone();
        assert!(store.read(move |r| r.session(&id)).await.unwrap().is_some());
        schema.execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}'"
        ));
        // pg_terminate_backend only signals: wait until the backends are gone.
        let live = || {
            schema.query_text(&format!(
                "SELECT COUNT(*)::text FROM pg_stat_activity WHERE application_name = '{app}'"
            ))
        };
        for _ in 0..200 {
            if live().as_deref() == Some("0") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(
            live().as_deref(),
            Some("0"),
            "the store's connections are gone"
        );
        let mut renamed = s.clone();
        renamed.title = "after the drop".into();
        store.write1(Write::Session {
            info: renamed,
            created: false,
        });
        store.flush().await.expect("the writer reconnects");
        // The pooled reader was idle past the check: it is replaced, not failed.
        tokio::time::sleep(IDLE_CHECK + Duration::from_millis(200)).await;
        let id = s.id.clone();
        let got = store
            .read(move |r| r.session(&id))
            .await
            .expect("the pool reconnects");
        assert_eq!(got.map(|s| s.title), Some("after the drop".to_string()));
    }

    /// A database migrated by a newer troupe is refused with a clear error, not used.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newer_schema_is_refused() {
        let Some(schema) = schema("pg_newer_schema") else {
            return;
        };
        drop(crate::Store::open_postgres(schema.url(), crate::Bus::new()).unwrap());
        schema.execute("UPDATE troupe_schema SET version = 99");
        let err = crate::Store::open_postgres(schema.url(), crate::Bus::new())
            .err()
            .expect("a newer schema is refused");
        let text = err.to_string();
        assert!(text.starts_with("store postgres://"), "{text}");
        assert!(text.contains("schema version 99 is newer"), "{text}");
    }
}
