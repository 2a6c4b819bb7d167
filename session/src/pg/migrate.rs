//! The schema of the PostgreSQL store: numbered migrations ([`MIGRATIONS`]), applied once
//! per database under an advisory lock (see the parent module).

use super::*;

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
