//! Helpers shared by the end-to-end tests (each test binary uses a subset).

#![allow(dead_code)]

use std::process::Output;

use serde_json::Value;
use troupe_testkit::{MockServer, RecordedRequest};

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Asserts a failed run: non-zero exit and exactly one non-empty stderr line starting with
/// `troupe: ` besides the tool lines (`✓ …` / `✗ …`, which `troupe run` prints on stderr);
/// returns that line.
pub fn assert_one_line_failure(out: &Output, what: &str) -> String {
    assert!(
        !out.status.success(),
        "{what}: expected failure, got {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("✓ ") && !l.starts_with("✗ "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: stderr should be one line, got:\n{stderr}"
    );
    assert!(
        lines[0].starts_with("troupe: "),
        "{what}: stderr line should start with `troupe: `: {stderr}"
    );
    eprintln!("{what}: {}", lines[0]);
    lines[0].to_string()
}

/// Parses `--format json` stdout: every non-empty line must be a JSON bus event.
pub fn parse_events(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
            assert!(v["type"].is_string(), "event without type: {l}");
            assert!(v["properties"].is_object(), "event without properties: {l}");
            v
        })
        .collect()
}

/// The session id from the `session.created` / first event carrying one.
pub fn session_id_of(events: &[Value]) -> String {
    events
        .iter()
        .find_map(|e| {
            e["properties"]["sessionID"]
                .as_str()
                .or_else(|| {
                    e["properties"]["info"]["id"]
                        .as_str()
                        .filter(|id| id.starts_with("ses"))
                })
                .map(str::to_string)
        })
        .expect("an event naming the session")
}

pub fn role(m: &Value) -> &str {
    m["info"]["role"].as_str().unwrap_or("")
}

pub fn parts_of_type<'a>(m: &'a Value, ty: &str) -> Vec<&'a Value> {
    m["parts"]
        .as_array()
        .map(|ps| ps.iter().filter(|p| p["type"] == ty).collect())
        .unwrap_or_default()
}

pub fn all_parts_of_type<'a>(messages: &'a [Value], ty: &str) -> Vec<&'a Value> {
    messages.iter().flat_map(|m| parts_of_type(m, ty)).collect()
}

/// The `messages` array of a request body.
pub fn req_messages(r: &RecordedRequest) -> Vec<Value> {
    r.body["messages"].as_array().cloned().unwrap_or_default()
}

/// Completion requests only (the mock also records e.g. `GET /v1/models`).
pub fn completions(server: &MockServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect()
}

/// Text content of a request message (string content or joined text parts).
pub fn content_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Upper bound for one CLI invocation in [`CliProject::troupe`]; a hung binary fails the test
/// instead of the suite.
pub const CLI_RUN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// One isolated project for CLI tests: a working dir, a store and an empty global config dir
/// in temp directories, with a `troupe.json` whose `mock` provider points at `base_url`.
pub struct CliProject {
    _dir: tempfile::TempDir,
    /// Holds the store and the global config dir (outside the project).
    pub home: tempfile::TempDir,
    /// Canonical project directory.
    pub root: std::path::PathBuf,
}

impl CliProject {
    /// A project whose `troupe.json` is [`mock_config`] for `base_url`.
    pub fn new(base_url: &str) -> CliProject {
        let p = CliProject::empty();
        p.write_config(&mock_config(base_url).to_string());
        p
    }

    /// A project without any config file.
    pub fn empty() -> CliProject {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonicalize");
        std::fs::create_dir_all(home.path().join("config")).expect("config dir");
        CliProject {
            _dir: dir,
            home,
            root,
        }
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.root.join("troupe.json"), text).expect("write troupe.json");
    }

    pub fn db(&self) -> std::path::PathBuf {
        self.home.path().join("troupe.db")
    }

    pub fn config_dir(&self) -> std::path::PathBuf {
        self.home.path().join("config")
    }

    /// The binary with the isolation env vars, in the project dir, stdin closed.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::from(self.std_command(args));
        cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// [`CliProject::command`] as a `std::process::Command` (e.g. for a pseudo-terminal),
    /// stdio left as it is.
    pub fn std_command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.args(args)
            .current_dir(&self.root)
            .env("TROUPE_DB", self.db())
            .env("TROUPE_CONFIG_DIR", self.config_dir())
            .env("TROUPE_NO_STDIN", "1")
            .env("TROUPE_TITLE", "0")
            .env("TROUPE_TEST_TOOLS", "1")
            .env("HOME", self.home.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("TROUPE_DATA_DIR")
            .env_remove("TROUPE_CONFIG_CONTENT")
            .env_remove("TROUPE_LOG")
            .env_remove("TROUPE_SERVER_PASSWORD")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY");
        cmd
    }

    /// Runs the binary (see [`CliProject::command`]) with `envs` added, to completion.
    pub async fn troupe(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        tokio::time::timeout(CLI_RUN_DEADLINE, cmd.output())
            .await
            .unwrap_or_else(|_| {
                panic!("troupe {args:?} did not finish within {CLI_RUN_DEADLINE:?}")
            })
            .expect("spawn troupe")
    }

    /// Starts `troupe serve --port 0` in the project (same isolation); returns the child
    /// (killed on drop) and the base URL it printed.
    pub async fn serve(&self) -> (tokio::process::Child, String) {
        use tokio::io::AsyncBufReadExt;
        let mut cmd = self.command(&["serve", "--port", "0"]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn troupe serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(CLI_RUN_DEADLINE, lines.next_line())
            .await
            .expect("startup line in time")
            .expect("read stdout")
            .expect("a startup line");
        let base = line
            .strip_prefix("troupe server listening on ")
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"))
            .to_string();
        // Keep reading stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, base)
    }

    /// `troupe session list --format json`, parsed.
    pub async fn sessions(&self) -> Vec<Value> {
        let out = self
            .troupe(&["session", "list", "--format", "json"], &[])
            .await;
        assert_success(&out, "session list");
        let v: Value = serde_json::from_slice(&out.stdout).expect("session list JSON");
        v.as_array().expect("session list is an array").clone()
    }
}

/// A config whose default model is `mock/mock-model` served at `base_url`.
pub fn mock_config(base_url: &str) -> Value {
    serde_json::json!({
        "model": "mock/mock-model",
        "provider": {"mock": {
            "name": "Mock",
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": base_url, "apiKey": "test"},
            "models": {"mock-model": {"name": "Mock", "limit": {"context": 128000, "output": 8192}}}
        }}
    })
}
