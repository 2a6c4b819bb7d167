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
use crate::types::{
    Message, MessageId, MessageWithParts, Part, PartKind, Session, SessionId, now_ms,
};
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

mod lease;
mod migrate;
mod read;
mod write;

use migrate::migrate;
pub(crate) use read::*;
pub(crate) use write::Writer;

#[cfg(test)]
mod tests;
