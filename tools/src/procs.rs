//! Who owns the processes tools start (issues 24.5 and 12.4).
//!
//! A shell command can leave processes behind in three ways: `sleep 30 &` (a child that
//! outlives the shell), `(sleep 2 &)` (an orphan reparented away from the shell) and
//! commands that leave the shell's process group (`timeout`, `setsid`). Killing the process
//! group catches only the first. So every process a tool starts is marked, and troupe keeps
//! track of the marks:
//!
//! - **A mark in the environment.** Each call's shell gets [`OWNER_ENV`]`=<owner>:<call>`,
//!   inherited by everything it starts (whatever process group or session it moves to).
//!   [`processes_of`] finds a call's processes by that mark, by its process group, and by
//!   parentage from either, so even a child that cleared its environment is found while its
//!   parent or group is known.
//! - **troupe is a subreaper** (`PR_SET_CHILD_SUBREAPER`, [`init`]): orphans of tool
//!   processes are reparented to troupe instead of init, so they stay visible as its
//!   children; a reaper thread collects the ones that exit (only zombies outside troupe's own
//!   process group that are not shells a tool is waiting for, see [`register_child`]).
//! - **A watchdog outlives troupe by a moment.** [`init`] starts a small `/bin/sh` script
//!   whose stdin is a pipe troupe holds. When troupe dies in any way, SIGKILL included, the
//!   pipe closes and the watchdog kills every process carrying troupe's mark and every
//!   process group troupe had registered, then exits. This is the equivalent of
//!   `PR_SET_PDEATHSIG` without its trap: the death signal is tied to the *thread* that
//!   forked, and tool calls fork from whichever runtime thread runs them; a pipe is tied to
//!   the process.
//!
//! When a call ends, [`kill_call`] kills whatever it left running (unless it was started as
//! a background process, see [`background`]); an interrupt or timeout does the same for the
//! whole tree, grandchildren included.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Environment variable marking every process a tool starts: `<owner>:<call>` where
/// `<owner>` is troupe's pid and start time in ms (unique per troupe process) and `<call>`
/// a counter.
pub const OWNER_ENV: &str = "TROUPE_PROC_OWNER";

/// Key of a running bash part's metadata holding its call's [`OWNER_ENV`] mark, so a process
/// that loads the session after a crash can stop what survived ([`stop_survivors`]).
pub const OWNER_METADATA_KEY: &str = "processOwner";

/// Key the loader sets on a running part's metadata before sweeping it: how many processes
/// of the call were still running and were stopped.
pub const SURVIVORS_METADATA_KEY: &str = "survivorsStopped";

/// Kill the processes still carrying a dead call's mark `tag` (no process group: the group
/// id of a dead troupe's shell may name another process by now). Returns how many were
/// running. Blocking: reads `/proc`.
pub fn stop_survivors(tag: &str) -> usize {
    kill_call(tag, 0)
}

/// How often the reaper thread collects exited orphans.
pub const REAP_INTERVAL: Duration = Duration::from_millis(500);

/// Rounds of "find, SIGKILL" in [`kill_call`] before giving up on a process that keeps
/// forking (each round catches the children forked during the previous one).
pub const KILL_ROUNDS: usize = 20;

/// The watchdog script (POSIX sh). Reads `+<pgid>` / `-<pgid>` lines on stdin to follow the
/// live process groups; at EOF (troupe died or closed the pipe) kills every process whose
/// environment carries `OWNER_ENV=<owner>:` (`$1`) and every listed group, in rounds until
/// none is left.
const WATCHDOG: &str = r#"
owner="$1"
groups=" "
while IFS= read -r line; do
  case "$line" in
    +*) groups="$groups${line#+} " ;;
    -*) g="${line#-}"
        case "$groups" in *" $g "*) groups="${groups%%" $g "*} ${groups#*" $g "}" ;; esac ;;
  esac
done
i=0
while [ "$i" -lt 20 ]; do
  i=$((i + 1))
  found=""
  for g in $groups; do
    if kill -9 -- "-$g" 2>/dev/null; then found=1; fi
  done
  for f in $(grep -lsza "^TROUPE_PROC_OWNER=$owner:" /proc/[0-9]*/environ 2>/dev/null); do
    p="${f#/proc/}"; p="${p%/environ}"
    if [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null; then found=1; fi
  done
  [ -z "$found" ] && break
  sleep 0.05
done
"#;

struct State {
    /// `<pid>.<start ms>` of this troupe process.
    owner: String,
    /// Write end of the watchdog's stdin (None when it could not start).
    watchdog: Mutex<Option<std::process::ChildStdin>>,
    /// Shells a tool is waiting for: the reaper leaves them alone.
    direct: Mutex<HashSet<i32>>,
    /// Whether `PR_SET_CHILD_SUBREAPER` succeeded.
    subreaper: bool,
    /// Background processes by session id.
    background: Mutex<HashMap<String, Vec<Background>>>,
}

static STATE: OnceLock<State> = OnceLock::new();
/// Held across "spawn a shell, register it" and across one reaper pass, so the reaper never
/// collects a shell that exited before it was registered.
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

/// Hold this across spawning a process in its own group and [`register_child`] for it.
pub fn spawn_guard() -> std::sync::MutexGuard<'static, ()> {
    SPAWN_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
static CALLS: AtomicU64 = AtomicU64::new(0);

fn state() -> &'static State {
    STATE.get_or_init(|| {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let owner = format!("{}.{ms}", std::process::id());
        let subreaper = set_subreaper();
        let watchdog = start_watchdog(&owner);
        if subreaper {
            let _ = std::thread::Builder::new()
                .name("troupe-reaper".into())
                .spawn(|| {
                    loop {
                        std::thread::sleep(REAP_INTERVAL);
                        reap_orphans();
                    }
                });
        }
        State {
            owner,
            watchdog: Mutex::new(watchdog),
            direct: Mutex::new(HashSet::new()),
            subreaper,
            background: Mutex::new(HashMap::new()),
        }
    })
}

/// Set up process ownership once per process: become a subreaper, start the reaper thread
/// and the watchdog. Called by the bash tool before its first spawn; the binary may call it
/// early. Idempotent. Returns whether troupe is a subreaper.
pub fn init() -> bool {
    state().subreaper
}

#[allow(unsafe_code)]
fn set_subreaper() -> bool {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

fn start_watchdog(owner: &str) -> Option<std::process::ChildStdin> {
    // Any thread may spawn it: the watchdog reacts to its pipe closing, which happens only
    // when the whole process is gone (the write end is close-on-exec, so no tool process
    // inherits it).
    let child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("troupe-watchdog")
        .arg(owner)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    match child {
        Ok(mut c) => {
            let stdin = c.stdin.take();
            // Reap it if it ever exits while troupe lives (e.g. killed by hand; the reaper
            // may collect it first, then this wait just returns an error).
            let _ = std::thread::Builder::new()
                .name("troupe-watchdog-wait".into())
                .spawn(move || {
                    let _ = c.wait();
                });
            stdin
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the process watchdog; tool processes may outlive a killed troupe");
            None
        }
    }
}

fn tell_watchdog(line: &str) {
    let st = state();
    if let Ok(mut w) = st.watchdog.lock()
        && let Some(pipe) = w.as_mut()
        && pipe.write_all(format!("{line}\n").as_bytes()).is_err()
    {
        *w = None;
    }
}

/// A fresh mark for one tool call: the value for [`OWNER_ENV`].
pub fn new_call_tag() -> String {
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    format!("{}:{n}", state().owner)
}

/// Record a process troupe spawned itself in its own process group and waits for: the
/// reaper never collects it, and the watchdog kills its group if troupe dies. Undo with
/// [`unregister_child`] once it has been waited for.
pub fn register_child(pid: i32) {
    if let Some(st) = STATE.get()
        && let Ok(mut d) = st.direct.lock()
    {
        d.insert(pid);
    }
    if STATE.get().is_some() {
        tell_watchdog(&format!("+{pid}"));
    }
}

/// Undo [`register_child`].
pub fn unregister_child(pid: i32) {
    if let Some(st) = STATE.get() {
        if let Ok(mut d) = st.direct.lock() {
            d.remove(&pid);
        }
        tell_watchdog(&format!("-{pid}"));
    }
}

/// One line of `/proc/<pid>/stat`, the fields we use.
#[derive(Debug, Clone, Copy)]
struct Stat {
    pid: i32,
    state: u8,
    ppid: i32,
    pgid: i32,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        pid,
        state: f.first()?.bytes().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
    })
}

fn all_pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// Live (non-zombie) processes of one call: those whose environment carries exactly
/// `OWNER_ENV=tag`, those in process group `pgid` (when > 1), and every descendant of either
/// (by parent pid). Never troupe itself. Reads `/proc`; blocking.
pub fn processes_of(tag: &str, pgid: i32) -> Vec<i32> {
    let me = std::process::id() as i32;
    let needle = format!("{OWNER_ENV}={tag}\0");
    let needle = needle.as_bytes();
    let stats: Vec<Stat> = all_pids()
        .into_iter()
        .filter(|&p| p != me)
        .filter_map(read_stat)
        .filter(|s| s.state != b'Z' && s.state != b'X')
        .collect();
    let mut found: HashSet<i32> = stats
        .iter()
        .filter(|s| (pgid > 1 && s.pgid == pgid) || has_exact_tag(s.pid, needle))
        .map(|s| s.pid)
        .collect();
    loop {
        let before = found.len();
        for s in &stats {
            if found.contains(&s.ppid) {
                found.insert(s.pid);
            }
        }
        if found.len() == before {
            break;
        }
    }
    found.remove(&me);
    let mut v: Vec<i32> = found.into_iter().collect();
    v.sort_unstable();
    v
}

fn has_exact_tag(pid: i32, needle_with_nul: &[u8]) -> bool {
    let value = &needle_with_nul[..needle_with_nul.len() - 1];
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|v| v == value))
        .unwrap_or(false)
}

/// SIGKILL every process of a call ([`processes_of`]) and its process group, in rounds until
/// none is left (at most [`KILL_ROUNDS`]). Returns how many processes were killed. The
/// killed orphans are collected by the reaper (troupe is their subreaper). Blocking: reads
/// `/proc`.
pub fn kill_call(tag: &str, pgid: i32) -> usize {
    let mut killed = HashSet::new();
    for _ in 0..KILL_ROUNDS {
        let left: Vec<i32> = processes_of(tag, pgid);
        if left.is_empty() {
            break;
        }
        if pgid > 1 {
            signal_group(pgid, libc::SIGKILL);
        }
        for p in left {
            signal(p, libc::SIGKILL);
            killed.insert(p);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if STATE.get().is_some_and(|s| s.subreaper) {
        reap_orphans();
    }
    killed.len()
}

/// Makes the child `cmd` starts exec without any fd above 2 that this process inherited
/// open: its own parent may have left one (a user's script that opened a connection to a
/// `troupe serve` with bash's `exec 3<>/dev/tcp/…`, not close-on-exec, then ran troupe),
/// and a tool's processes holding it could speak as the user on it (the server's model guard
/// traces a connection to its lowest-pid holder, the user's process). Each such fd is marked
/// close-on-exec in the child after fork (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`, Linux
/// 5.11+; before, `fcntl(FD_CLOEXEC)` on fds 3 to 1,023), so the fd Rust reports a failed exec
/// on stays usable until the exec. Linux only; elsewhere nothing changes.
pub fn close_inherited_fds(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the forked child before exec; it only makes system calls
    // (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let done = libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if done != 0 {
                for fd in 3..1024 {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

#[allow(unsafe_code)]
fn signal(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill(2) with plain integers; ESRCH for a gone process is ignored.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

#[allow(unsafe_code)]
fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: as in `signal`; a negative pid addresses the process group.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Collect exited orphans: zombie children of troupe that are outside troupe's own process
/// group and are not shells a tool waits for ([`register_child`]). Processes troupe spawns
/// in its own group (and waits for itself) are never touched. Returns how many were reaped.
#[allow(unsafe_code)]
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    // SAFETY: getpgrp has no arguments and cannot fail.
    let my_group = unsafe { libc::getpgrp() };
    let _spawning = spawn_guard();
    let direct = STATE
        .get()
        .and_then(|s| s.direct.lock().ok().map(|d| d.clone()))
        .unwrap_or_default();
    let mut n = 0;
    for s in all_pids().into_iter().filter_map(read_stat) {
        if s.ppid != me || s.state != b'Z' || s.pgid == my_group || direct.contains(&s.pid) {
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid on one specific child pid with WNOHANG; `status` is a valid
        // out-pointer for the duration of the call.
        let r = unsafe { libc::waitpid(s.pid, &mut status, libc::WNOHANG) };
        if r == s.pid {
            n += 1;
        }
    }
    n
}

/// A process started with `background: true`: it outlives its call, is listed per session
/// and is stopped with the session ([`stop_session`]) or with troupe.
#[derive(Debug, Clone)]
pub struct Background {
    /// Pid (and process group) of its shell.
    pub pid: i32,
    /// Its [`OWNER_ENV`] mark.
    pub tag: String,
    /// The command line.
    pub command: String,
    /// Where its output goes.
    pub log: PathBuf,
    /// Start time, ms since the epoch.
    pub started_ms: u64,
    /// Set once the shell has exited (by the task waiting for it).
    pub exited: Arc<Mutex<Option<i32>>>,
}

/// Record a background process of `session_id`.
pub fn add_background(session_id: &str, bg: Background) {
    if let Ok(mut m) = state().background.lock() {
        m.entry(session_id.to_string()).or_default().push(bg);
    }
}

/// The background processes of a session (running or exited), oldest first.
pub fn background(session_id: &str) -> Vec<Background> {
    read_background(|m| m.get(session_id).cloned().unwrap_or_default())
}

/// Every session with background processes, with them.
pub fn all_background() -> Vec<(String, Vec<Background>)> {
    read_background(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// `read` applied to the background processes by session; empty when none was ever
/// started (or the lock is poisoned).
fn read_background<T: Default>(read: impl FnOnce(&HashMap<String, Vec<Background>>) -> T) -> T {
    STATE
        .get()
        .and_then(|s| s.background.lock().ok().map(|m| read(&m)))
        .unwrap_or_default()
}

/// Stop (SIGKILL, whole tree) the background processes of `session_id` and forget them.
/// Returns how many processes were killed. Blocking: reads `/proc`.
pub fn stop_session(session_id: &str) -> usize {
    let list = STATE
        .get()
        .and_then(|s| {
            s.background
                .lock()
                .ok()
                .and_then(|mut m| m.remove(session_id))
        })
        .unwrap_or_default();
    list.iter()
        .map(|b| {
            // Once its shell was reaped, its pid (and so the group id) may name another
            // process: then only the mark (and parentage) finds what is left.
            let running = b.exited.lock().map(|e| e.is_none()).unwrap_or(false);
            kill_call(&b.tag, if running { b.pid } else { 0 })
        })
        .sum()
}

/// Stop the background processes of every session (troupe is shutting down).
pub fn stop_all() -> usize {
    let ids: Vec<String> = all_background().into_iter().map(|(k, _)| k).collect();
    ids.iter().map(|id| stop_session(id)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_group_bookkeeping() {
        // The script's group list handling, run on its own with a fake owner that matches
        // nothing: + adds, - removes exactly (no prefix confusion between 12 and 123).
        let script = WATCHDOG.replace("i=0\n", "echo \"[$groups]\"; exit 0\ni=0\n");
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .arg("wd")
            .arg("nobody.0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(b"+12\n+123\n+7\n-12\n-99\n")?;
                c.wait_with_output()
            })
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        let groups: Vec<&str> = s
            .trim()
            .trim_matches(['[', ']'])
            .split_whitespace()
            .collect();
        assert_eq!(groups, ["123", "7"]);
    }

    #[test]
    fn tags_are_unique_and_carry_the_owner() {
        let a = new_call_tag();
        let b = new_call_tag();
        assert_ne!(a, b);
        let owner = a.split(':').next().unwrap();
        assert!(owner.starts_with(&format!("{}.", std::process::id())));
        assert!(b.starts_with(owner));
    }
}
