//! End-to-end tests of several `troupe` processes sharing one store: schema set-up when many
//! processes open a new file at once.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::*;

/// Upper bound for one CLI invocation; a hung binary fails the test instead of the suite.
const CLI_DEADLINE: Duration = Duration::from_secs(60);

fn command_in(root: &Path, global: &Path, db: &Path, args: &[&str]) -> tokio::process::Command {
    let config_dir = global.join("config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.args(args)
        .current_dir(root)
        .env("TROUPE_DB", db)
        .env("TROUPE_CONFIG_DIR", &config_dir)
        .env("TROUPE_NO_STDIN", "1")
        .env("TROUPE_TITLE", "0")
        .env("TROUPE_TEST_TOOLS", "1")
        .env_remove("TROUPE_SERVER_PASSWORD")
        .env_remove("TROUPE_CONFIG_CONTENT")
        .env_remove("TROUPE_LOG")
        .env_remove("TROUPE_LEASE_TTL_MS")
        .env_remove("TROUPE_LEASE_WAIT_MS")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn sixteen_processes_open_a_new_store_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let global = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("sub").join("new.db");
    let children: Vec<_> = (0..16)
        .map(|_| {
            let mut cmd = command_in(
                dir.path(),
                global.path(),
                &db,
                &["session", "list", "--format", "json"],
            );
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            cmd.spawn().expect("spawn troupe")
        })
        .collect();
    let outs = tokio::time::timeout(
        CLI_DEADLINE,
        futures::future::join_all(children.into_iter().map(|c| c.wait_with_output())),
    )
    .await
    .expect("all 16 finish in time");
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.expect("wait");
        assert_success(&out, &format!("process {i} of 16"));
        let v: Value = serde_json::from_slice(&out.stdout).expect("session list JSON");
        assert_eq!(v, json!([]), "process {i}");
    }
}
