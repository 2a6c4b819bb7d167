//! PostgreSQL for tests: a fresh, empty schema per test on the local server, dropped when
//! the test ends; or, when the server is unreachable, a printed reason to skip.
//!
//! The server is `$TROUPE_TEST_POSTGRES` (default [`DEFAULT_URL`]). When it cannot be
//! reached, [`PgSchema::create`] prints `skipped: …` and returns `None`, unless
//! `TROUPE_REQUIRE_SERVICES=1` (CI): then it panics, so CI fails instead of skipping.
//!
//! The schema's URL selects it with `options=-c search_path=<schema>`, so everything a
//! store creates lands in it and parallel tests never see each other's rows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The server tests use when `TROUPE_TEST_POSTGRES` is unset or empty.
pub const DEFAULT_URL: &str = "postgres://root@127.0.0.1:5432/test";

/// Variable naming the test server.
pub const URL_ENV: &str = "TROUPE_TEST_POSTGRES";

/// Variable that turns a skip for a missing service (PostgreSQL, NATS) into a failure.
pub const REQUIRE_ENV: &str = "TROUPE_REQUIRE_SERVICES";

/// Whether services are required (`TROUPE_REQUIRE_SERVICES=1`).
pub fn services_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v.trim() == "1")
}

/// The test server's URL (`$TROUPE_TEST_POSTGRES`, else [`DEFAULT_URL`]).
pub fn server_url() -> String {
    std::env::var(URL_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_string())
}

/// `url` with `options=-c search_path=<schema>` added.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// Run `f` on a plain thread: the `postgres` client blocks on its own runtime, which
/// panics on an async worker thread (where tests run).
fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f)
        .join()
        .expect("postgres helper thread")
}

fn admin(url: &str) -> Result<postgres::Client, postgres::Error> {
    let mut cfg: postgres::Config = url.parse()?;
    cfg.connect_timeout(Duration::from_secs(3));
    cfg.connect(postgres::NoTls)
}

/// A fresh schema on the test server; dropped (with everything in it) on drop.
#[derive(Debug)]
pub struct PgSchema {
    server: String,
    schema: String,
    url: String,
}

impl PgSchema {
    /// Create an empty schema named after `test` (plus pid and a counter, so parallel
    /// tests and processes never share one). `None` after printing why, when the server is
    /// unreachable and services are not required; panics when they are.
    pub fn create(test: &str) -> Option<PgSchema> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let server = server_url();
        let tag: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let tag = &tag[tag.len().saturating_sub(30)..];
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let schema = format!(
            "t_{}_{}_{nanos:x}_{tag}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (s, sch) = (server.clone(), schema.clone());
        let made = off_runtime(move || -> Result<(), postgres::Error> {
            let mut c = admin(&s)?;
            c.batch_execute(&format!("CREATE SCHEMA \"{sch}\""))
        });
        match made {
            Ok(()) => Some(PgSchema {
                url: with_search_path(&server, &schema),
                server,
                schema,
            }),
            Err(e) => {
                let mut e_text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    e_text.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                let why = format!(
                    "PostgreSQL at {server} (${URL_ENV}) is not usable: {e_text}. Start it (e.g. \
                     `service postgresql start`) or point {URL_ENV} at a server."
                );
                if services_required() {
                    panic!("{REQUIRE_ENV}=1 and {why}");
                }
                eprintln!("skipped {test}: {why}");
                None
            }
        }
    }

    /// The URL of the server with this schema as its search path (what a store opens).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The test server's URL, without the schema.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Run SQL in the schema (on a plain thread; panics on error, for tests).
    pub fn execute(&self, sql: &str) {
        let (url, sql) = (self.url.clone(), sql.to_string());
        off_runtime(move || admin(&url).and_then(|mut c| c.batch_execute(&sql)))
            .unwrap_or_else(|e| panic!("test SQL failed: {e}"));
    }

    /// The first column of the first row of `sql` as text (`None` for no row or NULL).
    pub fn query_text(&self, sql: &str) -> Option<String> {
        let (url, sql) = (self.url.clone(), sql.to_string());
        off_runtime(move || {
            let mut c = admin(&url)?;
            let rows = c.simple_query(&sql)?;
            Ok::<_, postgres::Error>(rows.into_iter().find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
                _ => None,
            }))
        })
        .unwrap_or_else(|e| panic!("test SQL failed: {e}"))
        .flatten()
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (server, schema) = (self.server.clone(), self.schema.clone());
        let dropped = off_runtime(move || {
            admin(&server)?.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        });
        if let Err(e) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.schema);
        }
    }
}
