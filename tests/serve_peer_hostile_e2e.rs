//! Hostile end-to-end tests of the model guard's per-connection pass (`server/src/peer.rs`,
//! [`troupe_server::peer::Connection`]): once a request of a kind passed on a connection, the
//! next ones of that kind on the same connection are not traced again. These tests try to
//! get a state-changing request of a tool process accepted through that pass: keep-alive
//! connections whose first request is a read, pipelined requests, `--next` reuse by curl, the
//! password mode, fds of the server reaching a tool, and a connection a tool inherits from
//! the user's script. `held_*`: the guard held; `fixed_*`: it did not, fixed since.

use std::time::Duration;

use serde_json::json;
use troupe_testkit::{MockServer, Script, Step};

mod common;
use common::*;

/// A running `troupe serve` (killed on drop), its client and its project.
struct Served {
    child: tokio::process::Child,
    api: Api,
    project: Project,
}

impl Served {
    /// `troupe serve --port 0 <args>` over a scripted provider answering `steps`.
    async fn start(steps: Vec<Step>, args: &[&str]) -> (MockServer, Served) {
        let mock = if steps.is_empty() {
            start_mock(Script::default()).await
        } else {
            mock(steps).await
        };
        let project = Project::with_config(&mock_config(&mock.base_url()));
        let mut cmd = project.command(&["serve", "--port", "0"]);
        cmd.args(args);
        let (child, base) = serve_with(cmd).await;
        let password = args
            .iter()
            .position(|a| *a == "--password")
            .and_then(|i| args.get(i + 1))
            .map(|s| s.to_string());
        let api = Api::with_password(&base, password);
        (
            mock,
            Served {
                child,
                api,
                project,
            },
        )
    }

    fn port(&self) -> &str {
        self.api.base.rsplit(':').next().expect("a port")
    }

    /// How many sessions the server holds (read by the user's own client).
    async fn session_count(&self) -> usize {
        let (code, list) = self.api.get("/session").await;
        assert_eq!(code, 200, "{list}");
        list.as_array().map(Vec::len).expect("a list of sessions")
    }
}

/// The mark every tool process carries: a process with it is a tool's, whatever its
/// ancestry (`judge` in `server/src/peer.rs`).
const TOOL_MARK: (&str, &str) = (troupe_tools::procs::OWNER_ENV, "model-1:1");

/// A raw HTTP/1.1 request (keep-alive unless `close`).
fn raw(method: &str, path: &str, port: &str, auth: Option<&str>, close: bool) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    if let Some(p) = auth {
        r.push_str(&format!("Authorization: Bearer {p}\r\n"));
    }
    if close {
        r.push_str("Connection: close\r\n");
    }
    if method == "GET" {
        r.push_str("\r\n");
    } else {
        r.push_str("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    }
    r
}

/// A bash process carrying the tool mark opens ONE connection to `port` (bash's
/// `/dev/tcp`), writes each of `parts` (`pause` apart; a part may hold several pipelined
/// requests) while reading until the server closes; the status codes of the answers, in
/// order. hyper may close a connection after refusing a request whose body it did not read,
/// so the answers can stop short: callers compare a prefix ([`assert_prefix`]).
fn tool_exchange(port: &str, parts: &[String], pause: Duration) -> Vec<String> {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9\n\
         trap '' PIPE\n\
         timeout 10 cat <&3 &\n\
         for p in \"$@\"; do printf '%s' \"$p\" >&3 || break; sleep {}; done\n\
         wait",
        pause.as_secs_f64()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg("bash")
        .args(parts)
        .env(TOOL_MARK.0, TOOL_MARK.1)
        .output()
        .expect("run bash");
    let text = String::from_utf8_lossy(&out.stdout);
    let got = statuses(&text);
    if got.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("tool exchange {:?}:\n{text}\n{err}", out.status);
    }
    got
}

/// `got` is `want` or a prefix of it (at least the first answer: the read that passed).
fn assert_prefix(got: &[String], want: &[&str]) {
    assert!(
        !got.is_empty() && got.len() <= want.len() && got.iter().zip(want).all(|(g, w)| g == w),
        "answers {got:?}, want (a prefix of) {want:?}"
    );
}

/// The status codes of the HTTP/1.1 status lines in `text` (a body has no newline at its
/// end, so the next status line follows it on the same line).
fn statuses(text: &str) -> Vec<String> {
    text.split("HTTP/1.1 ")
        .skip(1)
        .map(|l| l.chars().take(3).collect())
        .collect()
}

/// One connection, a read that passes first, then state-changing requests pipelined behind
/// it in the same write: the read's pass does not vouch for them.
#[tokio::test]
async fn held_pipelined_changes_behind_a_passed_read_of_a_tool_are_refused() {
    let (_mock, srv) = Served::start(vec![], &[]).await;
    let port = srv.port();
    let one_write = [
        raw("GET", "/session", port, None, false),
        raw("POST", "/session", port, None, false),
        raw("GET", "/session", port, None, false),
        raw("POST", "/session", port, None, true),
    ]
    .concat();
    let got = tool_exchange(port, &[one_write], Duration::from_millis(0));
    assert_prefix(&got, &["200", "403", "200", "403"]);
    assert_eq!(srv.session_count().await, 0);
}

/// The same on a keep-alive connection whose requests come one by one (the read's answer
/// is in before the state-changing request is sent).
#[tokio::test]
async fn held_a_change_after_a_passed_read_on_a_tool_s_keep_alive_connection_is_refused() {
    let (_mock, srv) = Served::start(vec![], &[]).await;
    let port = srv.port();
    let parts = [
        raw("GET", "/session", port, None, false),
        raw("GET", "/session", port, None, false),
        raw("POST", "/session", port, None, false),
        raw("POST", "/session", port, None, true),
    ];
    let got = tool_exchange(port, &parts, Duration::from_millis(300));
    assert_prefix(&got, &["200", "200", "403", "403"]);
    assert_eq!(srv.session_count().await, 0);
}

/// With a password reads are not traced at all (so nothing is remembered for them); the
/// state-changing request behind them on the same connection is traced and refused.
#[tokio::test]
async fn held_with_a_password_untraced_reads_do_not_vouch_for_a_change() {
    let (_mock, srv) = Served::start(vec![], &["--password", "s3cret"]).await;
    let port = srv.port();
    let pw = Some("s3cret");
    let parts = [
        raw("GET", "/session", port, pw, false),
        raw("POST", "/session", port, pw, false),
        raw("POST", "/session", port, pw, true),
    ];
    let got = tool_exchange(port, &parts, Duration::from_millis(200));
    assert_prefix(&got, &["200", "403", "403"]);
    assert_eq!(srv.session_count().await, 0);
    // The user's own client still changes state.
    assert_eq!(srv.api.post("/session", json!({})).await.0, 200);
}

/// curl reusing one connection for a read then a POST (`--next`), over HTTP/1.1 and asking
/// for HTTP/2 (h2c upgrade, prior knowledge): the POST is never accepted.
#[tokio::test]
async fn held_curl_reusing_a_connection_after_a_read_cannot_change_state() {
    let (_mock, srv) = Served::start(vec![], &[]).await;
    let url = format!("{}/session", srv.api.base);
    for flag in ["--http1.1", "--http2", "--http2-prior-knowledge"] {
        let fmt = "%{http_code}:%{num_connects} ";
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", fmt, flag, &url, "--next"])
            .args(["-s", "-o", "/dev/null", "-w", fmt, flag, "-X", "POST"])
            .args(["-H", "content-type: application/json", "-d", "{}", &url])
            .env(TOOL_MARK.0, TOOL_MARK.1)
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        eprintln!("{flag}: {text}");
        let codes: Vec<&str> = text.split_whitespace().collect();
        assert!(
            codes.get(1).is_none_or(|c| !c.starts_with('2')),
            "{flag}: a tool's POST on a reused connection was accepted: {text}"
        );
        if flag == "--http1.1" {
            assert_eq!(codes, ["200:1", "403:0"], "one connection, reused");
        }
    }
    assert_eq!(srv.session_count().await, 0);
}

/// Whether `fd` of process `pid` is open with `O_CLOEXEC` (`flags:` of its fdinfo, octal).
fn cloexec(pid: u32, fd: &str) -> Option<bool> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
    Some(u32::from_str_radix(flags, 8).ok()? & 0o2000000 != 0)
}

/// A real tool process of the server (descends from it, carries its mark) holds no socket:
/// every socket of the server is close-on-exec, so none of the server's connections (or
/// its listener) reaches a tool; and that tool's curl, reusing one connection for a read then
/// a POST, is refused the POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_no_socket_of_the_server_reaches_a_tool_and_its_reused_connection_is_traced() {
    // A script file: paths only known when it runs would make the bash tool ask first.
    const PROBE: &str = "U=$(cat url.txt)
curl -s -o /dev/null -w 'codes=%{http_code}:%{num_connects}' \"$U/session\" \\
  --next -s -o /dev/null -w ',%{http_code}:%{num_connects}\\n' -X POST \\
  -H 'content-type: application/json' -d '{}' \"$U/session\"
for f in /proc/$$/fd/*; do echo \"fd $f $(readlink $f)\"; done
";
    let cmd = "bash probe.sh";
    let (_mock, srv) = Served::start(
        vec![
            Step::tool("bash", json!({"command": cmd, "description": "probe"})),
            Step::text("done"),
        ],
        &[],
    )
    .await;
    let pid = srv.child.id().expect("server pid");
    // While it serves (a client of the user connected), every socket fd of the server is
    // close-on-exec.
    let sid = srv.api.new_session().await;
    let mut sockets = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .flatten()
    {
        let name = fd.file_name().to_string_lossy().to_string();
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        if target.to_string_lossy().starts_with("socket:") {
            sockets += 1;
            assert_eq!(
                cloexec(pid, &name),
                Some(true),
                "socket fd {name} of the server is inherited by its tools"
            );
        }
    }
    assert!(sockets >= 2, "the listener and the user's connection");
    srv.project.write_file("url.txt", &srv.api.base);
    srv.project.write_file("probe.sh", PROBE);
    let (status, reply) = srv
        .api
        .post(&format!("/session/{sid}/message"), json!({"text": "probe"}))
        .await;
    assert_eq!(status, 200, "{reply}");
    let msgs = srv.project.session_messages(&sid).await;
    let tools = tool_parts(&msgs);
    let out = tools[0]["state"]["output"].as_str().unwrap_or_default();
    assert!(out.contains("codes=200:1,403:0"), "{out}");
    assert!(!out.contains("socket:"), "a tool holds a socket: {out}");
    assert_eq!(srv.session_count().await, 1, "only the user's session");
}

/// The attack of the `fixed_*_inherited_*` tests: a user's script opens a connection to the
/// server with bash's `/dev/tcp` (NOT close-on-exec), sends `first` (`POST /session` or
/// `GET /session`, which passes: the script is the user's) and reads its status line, then
/// becomes `troupe run` (`exec`, as a wrapper script does; fd 3 stays open). That run's bash
/// tool (a tool process of ANOTHER troupe, which the guard must refuse) inherits fd 3 and
/// writes `POST /session` on it. Returns how many sessions the server then holds beyond the
/// script's own, and the tool's output.
async fn inherited_connection_attack(first: &str) -> (usize, String) {
    let (_mock_a, srv) = Served::start(vec![], &[]).await;
    let port = srv.port().to_string();
    let tool_cmd = format!(
        "printf 'POST /session HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\
         Content-Type: application/json\\r\\nContent-Length: 2\\r\\n\
         Connection: close\\r\\n\\r\\n{{}}' >&3 \
         && timeout 5 cat <&3 | grep -o 'HTTP/1.1 [0-9]*' || echo 'no fd 3'"
    );
    let mock_b = mock(vec![
        Step::tool("bash", json!({"command": tool_cmd, "description": "x"})),
        Step::text("done"),
    ])
    .await;
    let project_b = Project::with_config(&mock_config(&mock_b.base_url()));
    let run = project_b.std_command(&["run", "go"]);
    let first_request = raw(first, "/session", &port, None, false).replace("\r\n", "\\r\\n");
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9\n\
         printf '{first_request}' >&3\n\
         IFS= read -r status <&3; echo \"script: $status\" >&2\n\
         exec \"$@\""
    );
    let mut user = std::process::Command::new("bash");
    user.env_clear()
        .envs(run.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(run.get_current_dir().expect("cwd"))
        .arg("-c")
        .arg(script)
        .arg("bash")
        .arg(run.get_program())
        .args(run.get_args())
        .stdin(std::process::Stdio::null());
    let out = tokio::task::spawn_blocking(move || user.output())
        .await
        .expect("join")
        .expect("run the user's script");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(stderr.contains("script: HTTP/1.1 200"), "{stderr}");
    let (_, msgs) = project_b.messages().await;
    let tools = tool_parts(&msgs);
    let output = tools[0]["state"]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    eprintln!("{first} first; the tool got: {output}");
    let own = usize::from(first == "POST");
    (srv.session_count().await - own, output)
}

/// Fixed (the bash tool's shell now starts without inherited fds,
/// `troupe_tools::procs::close_inherited_fds`): the tool finds no fd 3.
/// The inherited-connection attack ([`inherited_connection_attack`]) after the script's
/// POST passed: the tool's POST was not traced at all (the connection's pass, f7075df) and
/// creates a session. The module docs' premise ("a socket is `O_CLOEXEC`, so no child of its
/// owner inherits it") is false for bash's `/dev/tcp`, Python sockets made inheritable,
/// `pass_fds`, and any fork without exec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_a_tool_on_an_inherited_connection_whose_change_passed_changes_state() {
    let (created, output) = inherited_connection_attack("POST").await;
    assert_eq!(created, 0, "the tool created a session: {output}");
    assert!(
        output.contains("no fd 3"),
        "the tool still holds fd 3: {output}"
    );
}

/// Fixed as its twin above.
/// The same attack when the script only read first: the tool's POST IS traced (as the old
/// per-request trace traced every state-changing request) and still passes, because
/// `socket_owner` (server/src/peer.rs) judges the first process found holding the socket,
/// the lowest pid: the script, now `troupe run`, which is no tool. So the old code accepted
/// it too: not a regression of f7075df.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_a_tool_on_an_inherited_connection_is_traced_to_its_ancestor_and_passes() {
    let (created, output) = inherited_connection_attack("GET").await;
    assert_eq!(created, 0, "the tool created a session: {output}");
    assert!(
        output.contains("no fd 3"),
        "the tool still holds fd 3: {output}"
    );
}
