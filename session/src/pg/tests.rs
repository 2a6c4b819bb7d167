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
