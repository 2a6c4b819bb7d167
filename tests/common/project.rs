//! The one project fixture and command builder of the end-to-end tests.
//!
//! Every `troupe` the tests start begins from an empty environment plus [`INHERITED_ENV`], so
//! nothing set on a developer's machine (`TROUPE_*`, API keys, `TMPDIR`, `XDG_*`, timeouts)
//! changes what a test sees. On top of that it gets a fresh `HOME` (with its own `TMPDIR`,
//! store and global config dir), closed stdin, titles off and the test tools on; a test adds
//! what it needs with [`Project::with_env`] or the `envs` of each call.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use super::assert_success;

/// Upper bound for one CLI invocation or one wait; a hung binary fails the test instead of the
/// suite. Not a timing assertion: every wait it bounds normally ends in well under a second.
pub const CLI_RUN_DEADLINE: Duration = Duration::from_secs(60);

/// The only variables of the test runner's environment the binary under test inherits: what
/// finding programs (`PATH`), decoding text (locale) and reporting a crash or coverage need.
/// Everything else is cleared.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "RUST_BACKTRACE",
    "LLVM_PROFILE_FILE",
];

/// The binary under test started from a cleared environment: [`INHERITED_ENV`], then
/// `HOME=<home>`, `TMPDIR=<home>/tmp`, `TROUPE_DB=<home>/troupe.db`,
/// `TROUPE_CONFIG_DIR=<home>/config` (both directories are created), `TROUPE_NO_STDIN=1`,
/// `TROUPE_TITLE=0`, `TROUPE_SUMMARY=0` and `TROUPE_TEST_TOOLS=1`; working directory `cwd`, stdio untouched.
pub fn isolated_command(cwd: &Path, home: &Path) -> std::process::Command {
    let config_dir = home.join("config");
    let tmp = home.join("tmp");
    for d in [&config_dir, &tmp] {
        std::fs::create_dir_all(d).expect("create a dir of the test home");
    }
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.env_clear();
    for name in INHERITED_ENV {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.current_dir(cwd)
        .env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("TROUPE_DB", home.join("troupe.db"))
        .env("TROUPE_CONFIG_DIR", &config_dir)
        .env("TROUPE_NO_STDIN", "1")
        .env("TROUPE_TITLE", "0")
        .env("TROUPE_SUMMARY", "0")
        .env("TROUPE_TEST_TOOLS", "1");
    cmd
}

/// One isolated project: a project directory, a directory outside it, and a separate home
/// holding the store, the (empty) global config dir and the temp dir.
pub struct Project {
    /// Holds `proj/` (the project) and `outside/`.
    _base: TempDir,
    /// `HOME` of the binary: `troupe.db`, `config/`, `tmp/` (outside the project, so glob and
    /// grep never see the store).
    pub home: TempDir,
    /// Canonical project directory (the sessions' `directory`, the commands' cwd).
    pub root: PathBuf,
    /// Canonical directory next to the project, outside it and outside the temp dir.
    outside: PathBuf,
    /// Variables every command of this project gets (after the isolation ones).
    env: Vec<(String, String)>,
}

/// The name the CLI tests first used for [`Project`].
pub type CliProject = Project;

impl Project {
    /// A project whose `troupe.json` is [`mock_config`] for `base_url`.
    pub fn new(base_url: &str) -> Project {
        Project::with_config(&mock_config(base_url))
    }

    /// A project whose `troupe.json` is `config`.
    pub fn with_config(config: &Value) -> Project {
        let p = Project::empty();
        p.write_config(&config.to_string());
        p
    }

    /// A project without any config file.
    pub fn empty() -> Project {
        let base = tempfile::tempdir().expect("tempdir");
        let home = tempfile::tempdir().expect("tempdir");
        let canonical = base.path().canonicalize().expect("canonicalize");
        let (root, outside) = (canonical.join("proj"), canonical.join("outside"));
        for d in [&root, &outside] {
            std::fs::create_dir_all(d).expect("create a project dir");
        }
        Project {
            _base: base,
            home,
            root,
            outside,
            env: Vec::new(),
        }
    }

    /// Adds `name=value` to every command of this project (a later call for the same name,
    /// or the `envs` of one call, wins).
    pub fn with_env(mut self, name: &str, value: impl AsRef<OsStr>) -> Project {
        let value = value.as_ref().to_string_lossy().into_owned();
        self.env.push((name.to_string(), value));
        self
    }

    /// Writes `text` as the project's `troupe.json`.
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.root.join("troupe.json"), text).expect("write troupe.json");
    }

    /// Writes `rel` (parents created) in the project; returns its absolute path as text.
    pub fn write_file(&self, rel: &str, content: &str) -> String {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, content).expect("write project file");
        path.display().to_string()
    }

    /// Makes the project a git worktree (an empty `.git` dir is enough for worktree detection).
    pub fn git(&self) {
        std::fs::create_dir_all(self.root.join(".git")).expect(".git");
    }

    /// The directory holding the project dir and [`Project::outside`] (`<root>/..`).
    pub fn base(&self) -> PathBuf {
        self.root
            .parent()
            .expect("the project dir has a parent")
            .to_path_buf()
    }

    /// A directory outside the project (and outside the binary's temp dir).
    pub fn outside(&self) -> PathBuf {
        self.outside.clone()
    }

    /// The store file.
    pub fn db(&self) -> PathBuf {
        self.home.path().join("troupe.db")
    }

    /// The global config dir (empty unless a test writes to it).
    pub fn config_dir(&self) -> PathBuf {
        self.home.path().join("config")
    }

    /// [`Project::command`] as a `std::process::Command` (e.g. for a pseudo-terminal), in
    /// `cwd`, stdio left as it is.
    pub fn std_command_in(&self, cwd: &Path, args: &[&str]) -> std::process::Command {
        let mut cmd = isolated_command(cwd, self.home.path());
        cmd.args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// [`Project::std_command_in`] the project directory.
    pub fn std_command(&self, args: &[&str]) -> std::process::Command {
        self.std_command_in(&self.root, args)
    }

    /// The binary with the isolation environment ([`isolated_command`] plus the project's
    /// [`Project::with_env`] variables), in the project dir, stdin closed, killed on drop.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::from(self.std_command(args));
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// Runs the binary (see [`Project::command`]) with `envs` added, to completion.
    pub async fn troupe(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        self.troupe_in(&self.root, args, envs).await
    }

    /// [`Project::troupe`] in `cwd` instead of the project dir.
    pub async fn troupe_in(&self, cwd: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut cmd = tokio::process::Command::from(self.std_command_in(cwd, args));
        cmd.stdin(Stdio::null())
            .kill_on_drop(true)
            .envs(envs.iter().copied());
        tokio::time::timeout(CLI_RUN_DEADLINE, cmd.output())
            .await
            .unwrap_or_else(|_| {
                panic!("troupe {args:?} did not finish within {CLI_RUN_DEADLINE:?}")
            })
            .expect("spawn troupe")
    }

    /// Starts the binary in the background with `envs` added, stdout and stderr piped.
    pub fn spawn(&self, args: &[&str], envs: &[(&str, &str)]) -> tokio::process::Child {
        let mut cmd = self.command(args);
        cmd.envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("spawn troupe")
    }

    /// Starts `troupe serve --port 0` in the project (same isolation); returns the child
    /// (killed on drop) and the base URL it printed.
    pub async fn serve(&self) -> (tokio::process::Child, String) {
        serve_with(self.command(&["serve", "--port", "0"])).await
    }

    /// `troupe session list --format json`, parsed (newest first).
    pub async fn sessions(&self) -> Vec<Value> {
        self.sessions_with(&[]).await
    }

    /// `troupe session list --format json <extra>` (e.g. `--dir sub`, `--limit 1000`),
    /// parsed (newest first).
    pub async fn sessions_with(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["session", "list", "--format", "json"];
        args.extend_from_slice(extra);
        let out = self.troupe(&args, &[]).await;
        assert_success(&out, "session list");
        let v: Value = serde_json::from_slice(&out.stdout).expect("session list JSON");
        v.as_array().expect("session list is an array").clone()
    }

    /// Whether nothing is stored: no store file at all (a command that failed before it
    /// opened one), or a store with no session in it.
    pub async fn nothing_stored(&self) -> bool {
        !self.db().exists() || self.sessions().await.is_empty()
    }

    /// `troupe session show ID --format json`, parsed.
    pub async fn show(&self, id: &str) -> Value {
        let out = self
            .troupe(&["session", "show", id, "--format", "json"], &[])
            .await;
        assert_success(&out, "session show");
        serde_json::from_slice(&out.stdout).expect("session show JSON")
    }

    /// The stored messages of session `id`.
    pub async fn session_messages(&self, id: &str) -> Vec<Value> {
        self.show(id).await["messages"]
            .as_array()
            .expect("messages")
            .clone()
    }

    /// The only session in the store (asserts there is exactly one).
    pub async fn only_session(&self) -> Value {
        let sessions = self.sessions().await;
        assert_eq!(sessions.len(), 1, "expected one session: {sessions:#?}");
        sessions[0].clone()
    }

    /// The id of the only session in the store.
    pub async fn only_session_id(&self) -> String {
        self.only_session().await["id"]
            .as_str()
            .expect("id")
            .to_string()
    }

    /// The id and stored messages of the only session.
    pub async fn messages(&self) -> (String, Vec<Value>) {
        let sid = self.only_session_id().await;
        let messages = self.session_messages(&sid).await;
        (sid, messages)
    }

    /// The stored messages of the newest session.
    pub async fn latest_messages(&self) -> Vec<Value> {
        let sessions = self.sessions().await;
        let sid = sessions
            .first()
            .and_then(|s| s["id"].as_str())
            .expect("a session")
            .to_string();
        self.session_messages(&sid).await
    }
}

/// Spawns `cmd` (a `troupe serve --port 0 …` command) with stdout piped, waits for its
/// startup line and returns the child (killed on drop) and the base URL it printed. Stdout is
/// drained in the background so the server never blocks on a full pipe.
pub async fn serve_with(mut cmd: tokio::process::Command) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
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
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base)
}

/// Subscribes to `GET /event` of the server at `base` (with `password`, if any); the events
/// after the first `server.connected` arrive on the returned channel.
pub async fn subscribe_events(
    base: &str,
    password: Option<String>,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    use futures::StreamExt;
    let client = troupe_server::client::Client::new(base, password).expect("client");
    let mut stream = Box::pin(client.events().await.expect("subscribe"));
    let first = tokio::time::timeout(CLI_RUN_DEADLINE, stream.next())
        .await
        .expect("connected in time")
        .expect("an event")
        .expect("valid event");
    assert_eq!(first["type"], "server.connected");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(v)) = stream.next().await {
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    rx
}

/// A config whose default model is `mock/mock-model` (OpenAI-compatible, 128k context, 8k
/// output) served at `base_url`.
pub fn mock_config(base_url: &str) -> Value {
    troupe_testkit::mock_troupe_config(base_url, 128_000, 8_192)
}

/// [`mock_config`] with `patch` merged in (RFC 7386 merge patch: objects merge key by key,
/// `null` removes a key, anything else replaces).
pub fn mock_config_with(base_url: &str, patch: Value) -> Value {
    let mut config = mock_config(base_url);
    merge_patch(&mut config, patch);
    config
}

/// Applies the RFC 7386 merge patch `patch` to `target`.
pub fn merge_patch(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let obj = target.as_object_mut().expect("an object");
            for (k, v) in fields {
                if v.is_null() {
                    obj.remove(&k);
                } else {
                    merge_patch(obj.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other,
    }
}

/// Waits until `cond` holds, checking every 10 ms; fails the test after [`CLI_RUN_DEADLINE`].
pub async fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_within(what, CLI_RUN_DEADLINE, cond).await
}

/// Waits until `cond` holds, checking every 10 ms; fails the test after `limit`.
pub async fn wait_for_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends `sig` (as `kill` spells it, e.g. `-TERM`) to `pid`; fails the test if `kill` does.
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Sends SIGINT to a running `troupe` (the CLI's Ctrl-C path).
pub fn interrupt(pid: u32) {
    signal(pid, "-INT");
}

/// Pids of live processes whose command line contains `needle` (`pgrep -f`), pgrep itself
/// and zombies (killed, not yet collected) excluded.
pub fn pgrep(needle: &str) -> Vec<String> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", needle])
        .output()
        .expect("run pgrep");
    super::text(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
                })
                .is_some_and(|state| state != "Z")
        })
        .map(str::to_string)
        .collect()
}

/// Waits up to `limit` (checked every 20 ms) until no live process matches `needle` (see
/// [`pgrep`]); SIGKILLs whatever is left so no test leaves processes behind for other runs,
/// and returns the pids that were left (empty when all went in time).
pub async fn wait_gone(needle: &str, limit: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    let mut left = pgrep(needle);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = pgrep(needle);
    }
    for p in &left {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", p])
            .status();
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_merges_objects_and_replaces_the_rest() {
        let mut v = serde_json::json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(
            &mut v,
            serde_json::json!({"a": {"b": null, "e": 3}, "d": [2], "f": "x"}),
        );
        assert_eq!(
            v,
            serde_json::json!({"a": {"c": 2, "e": 3}, "d": [2], "f": "x"})
        );
    }
}
