//! End-to-end: the real binary on the PostgreSQL store (issue 18). `troupe run` with
//! `--db postgres://…` (and `TROUPE_DB=postgres://…`) stores a session that `troupe session
//! show` / `export` / `list` read back in the same shape as from the SQLite file; a bad URL
//! is one line naming the target without its password.
//!
//! Needs the local PostgreSQL server (`$TROUPE_TEST_POSTGRES`, default
//! `postgres://root@127.0.0.1:5432/test`); without it the tests print why they skipped, unless
//! `TROUPE_REQUIRE_SERVICES=1`. Each test gets its own schema.

use serde_json::{Value, json};
use troupe_testkit::pg::PgSchema;
use troupe_testkit::{Script, Step};

mod common;
use common::*;

/// The structure of a JSON value: objects keep their keys, arrays their items, and every
/// leaf becomes its type, so ids, times and paths (which differ between two runs) compare
/// equal while any missing or extra field does not.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => Value::Null,
    }
}

/// What a reader sees of a session's messages: roles, part types, texts, tool names and
/// statuses, in order.
fn gist(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let parts: Vec<Value> = m["parts"]
                .as_array()
                .expect("parts")
                .iter()
                .map(|p| json!([p["type"], p["text"], p["tool"], p["state"]["status"]]))
                .collect();
            json!([m["info"]["role"], parts])
        })
        .collect()
}

/// One scripted session run in `project` (store chosen by `envs`/`args`), continued once;
/// returns its `session show` and `session export` documents.
async fn run_and_read(project: &Project, db_args: &[&str]) -> (Value, Value) {
    let with = |args: &[&str]| -> Vec<String> {
        db_args
            .iter()
            .chain(args.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let call = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        project.troupe(&args, &[]).await
    };
    let out = call(with(&["run", "read", "the", "notes"])).await;
    assert_success(&out, "troupe run");
    let out = call(with(&["session", "list", "--format", "json"])).await;
    assert_success(&out, "session list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("list JSON");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let sid = list[0]["id"].as_str().expect("id").to_string();
    let out = call(with(&["run", "--session", &sid, "and", "again"])).await;
    assert_success(&out, "troupe run --session");
    let out = call(with(&["session", "show", &sid, "--format", "json"])).await;
    assert_success(&out, "session show");
    let show: Value = serde_json::from_slice(&out.stdout).expect("show JSON");
    let out = call(with(&["session", "export", &sid])).await;
    assert_success(&out, "session export");
    let export: Value = serde_json::from_slice(&out.stdout).expect("export JSON");
    (show, export)
}

fn script(notes: &str) -> Script {
    Script::single(vec![
        Step::tool("read", json!({"filePath": notes})),
        Step::text("The notes say: fix it."),
        Step::text("Again: fix it."),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_postgres_reads_back_like_sqlite() {
    let Some(schema) = PgSchema::create("a_session_on_postgres_reads_back_like_sqlite") else {
        return;
    };
    // The same scripted session on the SQLite file and on PostgreSQL (`--db URL`).
    let mut docs = Vec::new();
    for on_pg in [false, true] {
        let project = Project::new("http://127.0.0.1:1/v1");
        let notes = project.write_file("notes.md", "TODO: fix it\n");
        let server = start_mock(script(&notes)).await;
        project.write_config(&mock_config(&server.base_url()).to_string());
        let db_args: Vec<&str> = if on_pg {
            vec!["--db", schema.url()]
        } else {
            vec![]
        };
        docs.push(run_and_read(&project, &db_args).await);
        if on_pg {
            // Nothing went to the SQLite file of that project's home.
            assert!(
                !project.db().exists(),
                "a --db URL must not create the default file"
            );
        }
        server.shutdown().await;
    }
    let ((show_lite, export_lite), (show_pg, export_pg)) = (docs.remove(0), docs.remove(0));
    assert_eq!(gist(&show_pg["messages"]), gist(&show_lite["messages"]));
    let seen = serde_json::to_string(&gist(&show_pg["messages"])).expect("gist");
    for expected in [
        r#""read","completed""#,
        "The notes say: fix it.",
        "Again: fix it.",
    ] {
        assert!(seen.contains(expected), "{expected} missing from {seen}");
    }
    assert_eq!(shape(&show_pg), shape(&show_lite));
    assert_eq!(shape(&export_pg), shape(&export_lite));
    assert_eq!(export_pg["messages"], show_pg["messages"]);
    // The rows are really in the schema, with one event log per session.
    let sid = show_pg["info"]["id"].as_str().expect("id");
    assert_eq!(
        schema
            .query_text(&format!(
                "SELECT COUNT(*)::text FROM session WHERE id = '{sid}'"
            ))
            .as_deref(),
        Some("1")
    );
    let seqs = schema
        .query_text(&format!(
            "SELECT (COUNT(*) = MAX(seq) AND MIN(seq) = 1)::text FROM event WHERE session_id = '{sid}'"
        ))
        .expect("events");
    assert_eq!(seqs, "true", "the event sequence is 1..n without gaps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_db_selects_postgres_and_vacuum_names_it() {
    let Some(schema) = PgSchema::create("troupe_db_selects_postgres") else {
        return;
    };
    let project = Project::new("http://127.0.0.1:1/v1");
    let notes = project.write_file("notes.md", "TODO: fix it\n");
    let server = start_mock(script(&notes)).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let env = [("TROUPE_DB", schema.url())];
    let out = project.troupe(&["run", "read", "the", "notes"], &env).await;
    assert_success(&out, "troupe run with TROUPE_DB=postgres://…");
    assert!(!project.db().exists());
    let out = project
        .troupe(&["session", "list", "--format", "json"], &env)
        .await;
    assert_success(&out, "session list");
    let list: Value = serde_json::from_slice(&out.stdout).expect("list JSON");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let out = project.troupe(&["db", "vacuum"], &env).await;
    assert_success(&out, "db vacuum");
    let line = text(&out.stdout);
    assert!(line.contains("vacuum postgres://"), "{line}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_is_one_line_without_the_password() {
    let project = Project::empty();
    let url = "postgres://bob:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=2";
    let out = project.troupe(&["--db", url, "session", "list"], &[]).await;
    let line = assert_one_line_failure(&out, "unreachable postgres");
    assert!(
        line.contains("postgres://bob@127.0.0.1:1/nowhere"),
        "{line}"
    );
    assert!(!line.contains("s3cret"), "{line}");
}
