use super::*;
use crate::Tool;
use crate::paths::test_support::Recorder;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Progress(Mutex<Vec<serde_json::Map<String, Value>>>);
impl crate::ProgressSink for Progress {
    fn update(&self, _t: Option<String>, m: serde_json::Map<String, Value>) {
        if let Ok(mut g) = self.0.lock() {
            g.push(m);
        }
    }
}
impl Progress {
    fn last_output(&self) -> String {
        self.0
            .lock()
            .ok()
            .and_then(|g| {
                g.last()
                    .and_then(|m| m.get("output").and_then(|v| v.as_str()).map(String::from))
            })
            .unwrap_or_default()
    }
}

async fn bash(dir: &Path, args: Value) -> Result<ToolOutput, ToolError> {
    BashTool.execute(args, ToolContext::simple(dir)).await
}

/// Runs `command` (description "t") in `dir`; it must succeed as a tool call.
async fn run(dir: &Path, command: &str) -> ToolOutput {
    bash(dir, json!({"command": command, "description": "t"}))
        .await
        .unwrap()
}

/// Checks `cond` up to `tries` times, `every` apart (first at once), until it holds.
async fn poll_until(tries: usize, every: Duration, mut cond: impl FnMut() -> bool) {
    for _ in 0..tries {
        if cond() {
            return;
        }
        tokio::time::sleep(every).await;
    }
}

/// Live (non-zombie) processes whose process group is `pgid`.
fn live_in_group(pgid: i32) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" {
            out.push(stat);
        }
    }
    out
}

#[tokio::test]
async fn exit_code_and_output() {
    let d = tempfile::tempdir().unwrap();
    let out = bash(
        d.path(),
        json!({"command": "echo hi; echo err >&2; exit 3", "description": "test"}),
    )
    .await
    .unwrap();
    assert!(
        out.output.contains("hi\n") && out.output.contains("err"),
        "{}",
        out.output
    );
    assert_eq!(out.metadata["exit"], json!(3));
    assert_eq!(out.title, "test");
    let out = run(d.path(), "true").await;
    assert_eq!(out.output, "(no output)");
    assert_eq!(out.metadata["exit"], json!(0));
    let out = bash(
        d.path(),
        json!({"command": "pwd", "description": "t", "workdir": "."}),
    )
    .await
    .unwrap();
    let real = std::fs::canonicalize(d.path()).unwrap();
    assert_eq!(std::fs::canonicalize(out.output.trim()).unwrap(), real);
}

#[tokio::test]
async fn negative_timeout_invalid() {
    let d = tempfile::tempdir().unwrap();
    let err = bash(
        d.path(),
        json!({"command": "true", "description": "t", "timeout": -5}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }));
    let err = bash(d.path(), json!({"description": "t"}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidArguments { ref detail, .. } if detail.contains("command"))
    );
}

#[tokio::test]
async fn timeout_kills_and_notes() {
    let d = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let out = bash(
        d.path(),
        json!({"command": "echo start; sleep 30", "description": "t", "timeout": 300}),
    )
    .await
    .unwrap();
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(out.output.starts_with("start\n"));
    assert!(
        out.output.contains(
            "<shell_metadata>\nshell tool terminated command after exceeding timeout 300 ms."
        ),
        "{}",
        out.output
    );
    assert_eq!(out.metadata["exit"], Value::Null);
}

/// `command` run on a task of its own with a progress sink: the task, the sink (the
/// command's output so far) and the call's abort token.
fn spawn_bash(
    dir: &std::path::Path,
    command: &str,
    description: &str,
) -> (
    tokio::task::JoinHandle<Result<crate::ToolOutput, ToolError>>,
    Arc<Progress>,
    tokio_util::sync::CancellationToken,
) {
    let progress = Arc::new(Progress::default());
    let mut ctx = ToolContext::simple(dir);
    ctx.progress = progress.clone();
    let abort = ctx.abort.clone();
    let task = tokio::spawn(
        BashTool.execute(json!({"command": command, "description": description}), ctx),
    );
    (task, progress, abort)
}

#[tokio::test]
async fn abort_kills_whole_group() {
    let d = tempfile::tempdir().unwrap();
    let (task, progress, abort) =
        spawn_bash(d.path(), "echo $$; sleep 30 & sleep 30; wait", "sleepers");
    // Wait for the pid to show up in progress.
    let pgid = wait_for_pid(&progress).await;
    assert!(pgid > 1, "no pid published");
    // Both sleeps running.
    poll_until(50, Duration::from_millis(20), || {
        live_in_group(pgid).len() >= 3
    })
    .await;
    assert!(live_in_group(pgid).len() >= 3, "{:?}", live_in_group(pgid));
    let t0 = std::time::Instant::now();
    abort.cancel();
    let res = task.await.unwrap();
    assert_eq!(res, Err(ToolError::Aborted));
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let left = wait_gone(pgid).await;
    assert!(left.is_empty(), "survivors: {left:?}");
    assert!(t0.elapsed() < Duration::from_secs(1));
}

async fn wait_for_pid(progress: &Progress) -> i32 {
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(p) = progress
            .last_output()
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        {
            return p;
        }
    }
    panic!("no pid published");
}

/// Waits (about 0.5 s at most) until no live process is left in group `pgid`; the
/// survivors.
async fn wait_gone(pgid: i32) -> Vec<String> {
    poll_until(21, Duration::from_millis(25), || {
        live_in_group(pgid).is_empty()
    })
    .await;
    live_in_group(pgid)
}

#[tokio::test]
async fn abort_kills_term_ignoring_grandchildren() {
    let d = tempfile::tempdir().unwrap();
    let (task, progress, abort) = spawn_bash(
        d.path(),
        "echo $$; trap '' TERM; sleep 30 & sleep 30; wait",
        "stubborn",
    );
    let pgid = wait_for_pid(&progress).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = std::time::Instant::now();
    abort.cancel();
    assert_eq!(task.await.unwrap(), Err(ToolError::Aborted));
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let left = wait_gone(pgid).await;
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[tokio::test]
async fn dropping_the_future_kills_the_group() {
    let d = tempfile::tempdir().unwrap();
    let (task, progress, _) = spawn_bash(d.path(), "echo $$; sleep 30 & sleep 30; wait", "dropped");
    let pgid = wait_for_pid(&progress).await;
    task.abort();
    let _ = task.await;
    let left = wait_gone(pgid).await;
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[tokio::test]
async fn stdout_and_stderr_interleave_in_order() {
    let d = tempfile::tempdir().unwrap();
    let out = run(d.path(), "echo a; echo b >&2; echo c; echo d >&2").await;
    assert_eq!(out.output, "a\nb\nc\nd\n");
}

/// `output` begins with the note that it was cut and where the whole of it was saved.
fn assert_truncation_note(output: &str) {
    assert!(
        output.starts_with("...output truncated...\n\nFull output saved to: "),
        "{}",
        &output[..200]
    );
}

#[tokio::test]
async fn output_cap_keeps_tail() {
    let d = tempfile::tempdir().unwrap();
    let out = run(d.path(), "seq 1 5000").await;
    assert_truncation_note(&out.output);
    assert!(out.output.ends_with("5000\n"));
    assert!(!out.output.contains("\n1000\n"));
    assert_eq!(out.metadata["truncated"], json!(true));
    let path = out.metadata["outputPath"].as_str().unwrap().to_string();
    let full = std::fs::read_to_string(&path).unwrap();
    assert!(full.starts_with("1\n2\n") && full.ends_with("5000\n"));
    let _ = std::fs::remove_file(path);
    // Byte cap: 200 KB in a few lines.
    let out = run(
        d.path(),
        "head -c 200000 /dev/zero | tr '\\0' a; echo; echo END",
    )
    .await;
    assert!(out.output.ends_with("END\n"));
    assert!(out.output.len() < MAX_BYTES + 500);
    assert!(out.metadata["output"].as_str().unwrap().chars().count() <= MAX_METADATA_LENGTH);
    if let Some(p) = out.metadata["outputPath"].as_str() {
        assert_eq!(std::fs::metadata(p).unwrap().len(), 200_000 + 5);
        let _ = std::fs::remove_file(p);
    }
}

#[tokio::test]
async fn background_child_does_not_block() {
    let d = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let out = run(d.path(), "sleep 2 & echo done").await;
    assert!(out.output.contains("done"));
    assert!(start.elapsed() < Duration::from_millis(1500));
}

/// A process is alive when it exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

/// Wait (bounded) until none of `pids` is alive; returns the survivors.
async fn survivors(pids: &[i32]) -> Vec<i32> {
    poll_until(100, Duration::from_millis(20), || {
        pids.iter().all(|&p| !alive(p))
    })
    .await;
    pids.iter().copied().filter(|&p| alive(p)).collect()
}

fn pids_in(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Issue 24.5: `sleep 30 & echo started`, `(sleep 30 &); echo bg` and a command under
/// `timeout` (which moves to its own process group) leave nothing running after the call.
#[tokio::test]
async fn leftovers_die_with_the_call() {
    let d = tempfile::tempdir().unwrap();
    let out = run(d.path(), "sleep 30 & echo started $!").await;
    assert!(out.output.starts_with("started "), "{}", out.output);
    let pids = pids_in(out.output.lines().next().unwrap());
    assert_eq!(pids.len(), 1);
    assert_eq!(survivors(&pids).await, Vec::<i32>::new());
    assert!(
        out.output
            .contains("1 process(es) the command left running were stopped"),
        "{}",
        out.output
    );
    assert_eq!(out.metadata["stoppedLeftovers"], json!(1));

    let out = run(d.path(), "(sleep 30 & echo $! > orphan.pid); echo bg").await;
    assert!(out.output.starts_with("bg\n"), "{}", out.output);
    let pids = pids_in(&std::fs::read_to_string(d.path().join("orphan.pid")).unwrap());
    assert_eq!(pids.len(), 1);
    assert_eq!(survivors(&pids).await, Vec::<i32>::new());

    // `timeout` and `setsid` leave the shell's process group; env -i drops the mark, but
    // its parent (in the group or marked) gives it away.
    let out = run(d.path(), "timeout 60 sleep 30 & echo $!; setsid sleep 30 & echo $!; env -i /bin/sh -c 'sleep 30 & echo $!'").await;
    let pids: Vec<i32> = out.output.lines().take(3).flat_map(pids_in).collect();
    assert_eq!(pids.len(), 3, "{}", out.output);
    assert_eq!(survivors(&pids).await, Vec::<i32>::new());
}

/// Issue 24.5: an interrupt kills the whole tree, grandchildren outside the group too.
#[tokio::test]
async fn abort_kills_escaped_grandchildren() {
    let d = tempfile::tempdir().unwrap();
    let (task, progress, abort) = spawn_bash(
        d.path(),
        "echo $$; setsid sleep 30 & echo $! > a.pid; (timeout 60 sleep 30 &); sleep 30",
        "t",
    );
    wait_for_pid(&progress).await;
    let pidfile = d.path().join("a.pid");
    poll_until(100, Duration::from_millis(20), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty())
    })
    .await;
    let escaped = pids_in(&std::fs::read_to_string(&pidfile).unwrap());
    assert!(alive(escaped[0]));
    abort.cancel();
    assert_eq!(task.await.unwrap(), Err(ToolError::Aborted));
    assert_eq!(survivors(&escaped).await, Vec::<i32>::new());
}

/// `background: true` returns at once, keeps the process running and listed under the
/// session, and stopping the session stops it.
#[tokio::test]
async fn background_runs_until_the_session_stops() {
    let d = tempfile::tempdir().unwrap();
    let mut ctx = ToolContext::simple(d.path());
    ctx.session_id = format!("ses_bg_{}", std::process::id());
    let out = BashTool
        .execute(
            json!({"command": "echo up; sleep 30", "description": "server", "background": true}),
            ctx.clone(),
        )
        .await
        .unwrap();
    assert!(
        out.output.starts_with("Started in the background: pid "),
        "{}",
        out.output
    );
    let pid = out.metadata["pid"].as_i64().unwrap() as i32;
    assert!(alive(pid));
    let listed = procs::background(&ctx.session_id);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pid, pid);
    assert_eq!(listed[0].command, "echo up; sleep 30");
    let log = out.metadata["outputPath"].as_str().unwrap().to_string();
    poll_until(100, Duration::from_millis(20), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s == "up\n")
    })
    .await;
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "up\n");
    // Another call ending does not touch it.
    run(d.path(), "true").await;
    assert!(alive(pid));
    let sid = ctx.session_id.clone();
    let killed = tokio::task::spawn_blocking(move || procs::stop_session(&sid))
        .await
        .unwrap();
    assert!(killed >= 1);
    assert_eq!(survivors(&[pid]).await, Vec::<i32>::new());
    assert!(procs::background(&ctx.session_id).is_empty());
    let _ = std::fs::remove_file(log);
}

/// Issue 13.4: one long last line keeps its tail: the model sees `…xxxxEND` and the note.
#[tokio::test]
async fn long_last_line_keeps_its_tail() {
    let d = tempfile::tempdir().unwrap();
    let out = run(d.path(), "head -c 60000 /dev/zero | tr '\\0' x; echo END").await;
    assert_truncation_note(&out.output);
    assert!(
        out.output.ends_with("xxxxEND\n"),
        "{}",
        &out.output[out.output.len() - 50..]
    );
    assert!(out.output.contains("\n\n…xxxx"));
    let kept = out.output.matches('x').count();
    assert!(kept > 50_000, "{kept}");
    // Multi-byte: a huge line of 3-byte characters is cut on a character boundary.
    let out = run(
        d.path(),
        "for i in $(seq 1 25000); do printf '€'; done; echo END",
    )
    .await;
    assert!(out.output.ends_with("€€€END\n"));
    assert!(out.output.contains("\n\n…€€€"));
    assert!(!out.output.contains('\u{fffd}'));
    for p in [out.metadata["outputPath"].as_str()].into_iter().flatten() {
        let _ = std::fs::remove_file(p);
    }
}

#[tokio::test]
async fn asks_bash_and_external() {
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("p");
    std::fs::create_dir(&proj).unwrap();
    std::fs::create_dir(d.path().join("other")).unwrap();
    let rec = Recorder::new();
    let mut ctx = ToolContext::simple(&proj);
    ctx.permissions = rec.clone();
    BashTool
        .execute(
            json!({"command": "cd ../other && rm -rf y && ls", "description": "t"}),
            ctx.clone(),
        )
        .await
        .unwrap();
    let reqs = rec.requests();
    let perms: Vec<&str> = reqs.iter().map(|r| r.permission.as_str()).collect();
    assert_eq!(perms, ["external_directory", "edit", "bash"]);
    let other = std::fs::canonicalize(d.path().join("other")).unwrap();
    assert_eq!(reqs[0].patterns, vec![format!("{}/*", other.display())]);
    assert_eq!(reqs[1].patterns, vec!["../other/y"]);
    assert_eq!(reqs[2].patterns, vec!["rm -rf y", "ls"]);
    assert_eq!(reqs[2].always, vec!["rm *", "ls *"]);
    // What a command reads is asked as `read` (default rules ask for `*.env`); entering
    // a directory is not a read.
    let rec = Recorder::new();
    ctx.permissions = rec.clone();
    std::fs::write(proj.join(".env"), "KEY=1").unwrap();
    BashTool
            .execute(
                json!({"command": "cat .env README 2>/dev/null; cd sub 2>/dev/null", "description": "t"}),
                ctx.clone(),
            )
            .await
            .unwrap();
    let reqs = rec.requests();
    let read: Vec<_> = reqs.iter().filter(|r| r.permission == "read").collect();
    assert_eq!(read.len(), 1, "{reqs:?}");
    assert_eq!(read[0].patterns, vec![".env", "README"]);
    // Denied bash never runs.
    ctx.permissions = Recorder::denying("bash");
    let err = BashTool
        .execute(json!({"command": "touch made", "description": "t"}), ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied(_)));
    assert!(!proj.join("made").exists());
}
