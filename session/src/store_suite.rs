//! The store test suite's two backends: every test written with [`both_backends!`] runs
//! once on an SQLite file and once on a fresh PostgreSQL schema (skipped, with the reason
//! printed, when the server is unreachable and `TROUPE_REQUIRE_SERVICES` is not `1`).

use crate::{Bus, Store};

/// Where one run of a suite test keeps its store.
pub(crate) enum TestDb {
    /// A temporary directory holding `t.db`.
    Sqlite(tempfile::TempDir),
    /// A fresh schema on the test server.
    Postgres(troupe_testkit::pg::PgSchema),
}

impl TestDb {
    pub(crate) fn sqlite() -> TestDb {
        TestDb::Sqlite(tempfile::tempdir().expect("tempdir"))
    }

    pub(crate) fn postgres(test: &str) -> Option<TestDb> {
        troupe_testkit::pg::PgSchema::create(test).map(TestDb::Postgres)
    }

    /// What `Store::open_target` takes for this database.
    pub(crate) fn target(&self) -> String {
        match self {
            TestDb::Sqlite(d) => d.path().join("t.db").display().to_string(),
            TestDb::Postgres(s) => s.url().to_string(),
        }
    }

    /// A new store handle (one more "process") on this database.
    pub(crate) fn open(&self) -> Store {
        self.open_with(Bus::new())
    }

    pub(crate) fn open_with(&self, bus: Bus) -> Store {
        Store::open_target(self.target(), bus).expect("open the test store")
    }

    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, TestDb::Postgres(_))
    }
}

/// `both_backends! { /// doc \n async fn name(db) { body } }`: a module `name` with the tests
/// `sqlite` and `postgres`, each running `body` with `db: TestDb` of its backend.
macro_rules! both_backends {
    ($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use crate::store_suite::TestDb;

            async fn run($db: TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                run(TestDb::sqlite()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = TestDb::postgres(module_path!()) {
                    run(db).await
                }
            }
        }
    };
}
pub(crate) use both_backends;
