//! Model guard: a request sent by a process that a troupe tool started may not change state.
//!
//! The browser guard ([`crate::guard`]) keeps web pages out. The other party that can reach a
//! server on 127.0.0.1 is the model itself: its `bash` tool can run `curl -X PATCH
//! …/session/ID -d '{"permission": …}'` to loosen its own rules, answer its own permission
//! asks through `POST /permission/ID/reply`, or prompt a session whose agent may do more. So
//! every state-changing request (any method but GET, HEAD, OPTIONS) is
//! traced to the process that owns the client socket (`/proc/net/tcp{,6}` gives the socket's
//! inode, `/proc/PID/fd` its owner), and refused with **403** when that process was started
//! by a troupe tool:
//!
//! - it, or one of its ancestors, carries the mark every tool process inherits
//!   ([`troupe_tools::procs::OWNER_ENV`]) and the server itself does not carry the same mark
//!   (a server a tool started is the model's own, not the user's); or
//! - one of its *strict* ancestors is a troupe process (same executable as this server) that
//!   is not also the server or one of the server's ancestors: a tool process of another
//!   `troupe run`, or one that cleared its environment. troupe is a subreaper
//!   ([`troupe_tools::procs`]), so a tool's orphans (`setsid`, `nohup … &`, double forks) stay
//!   its descendants and cannot shed that ancestry.
//!
//! Every peer is looked up, whatever its address: a process on this machine that connects to
//! one of the machine's other addresses (`--hostname 0.0.0.0`, then `curl http://<LAN
//! address>:4096`) is in `/proc/net/tcp{,6}` as much as one on 127.0.0.1; a remote peer is
//! simply not found there and goes on to the password.
//!
//! Reads (`GET /event`, `GET /session/…`) stay open to the model: they change nothing.
//!
//! Without a password the server serves only the user who started it: every request (reads
//! too) is refused with **403** when the client socket belongs to another uid (the `uid`
//! column of `/proc/net/tcp{,6}`; otherwise any local account could `curl` the shell route
//! and run commands as this user), or when the socket cannot be found on Linux (fail
//! closed). With a password the password decides who may connect, and the tool check adds to
//! it. A state-changing request whose client is on this machine (a loopback address or one of
//! the machine's own) must be traceable to its process: when its socket is gone (the client
//! closed or reset the connection right after sending, which a tool process could do to hide
//! its ancestry) or is this user's and its owner cannot be found, it is refused with **403**
//! (fail closed). A local socket of *another* uid whose owner cannot be read (a server not
//! running as root) is that user's process, not a tool's, and goes on to the password.
//!
//! A connection is traced once per kind of request: the client socket's uid does not change
//! while it is open, nor, in practice, who holds it (sockets troupe and the usual clients
//! open are `O_CLOEXEC`, and no socket of the server reaches a tool), so once a
//! state-changing request (or, without a password, a read) of a connection passed, the next
//! ones of that connection pass without reading `/proc` again ([`Connection`]). A read that
//! passed does not vouch for a state-changing request. What is refused is traced again (a
//! socket not yet visible may be found next time). A connection the user's own process keeps
//! open across `exec` (bash's `exec 3<>/dev/tcp/…`, then `exec troupe run`) would be
//! inherited by that troupe's tools, and the trace finds its lowest-pid holder, the user's:
//! so the bash tool's shell starts without inherited fds
//! (`troupe_tools::procs::close_inherited_fds`; a hostile review,
//! `tests/serve_peer_hostile_e2e.rs`).
//!
//! Limits: a process the model gets another daemon to start (an already running `tmux`
//! server, `ssh localhost`, `systemd-run --user`, `at`) has no troupe ancestry; only an OS
//! sandbox around the `bash` tool closes that.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Why a request's client process counts as started by a troupe tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPeer {
    /// The process that owns the client socket.
    pub pid: u32,
    /// What gave it away, for the error message (`carries TROUPE_PROC_OWNER=…`, `descends
    /// from troupe (pid 123)`).
    pub reason: String,
}

/// Why [`verdict`] refuses a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A process a troupe tool started sent a state-changing request.
    Tool(ToolPeer),
    /// Without a password: the client socket belongs to another user.
    OtherUser {
        /// The uid of the client socket.
        uid: u32,
        /// The server's own uid, if known.
        own: Option<u32>,
    },
    /// Without a password: the client socket was not found (Linux only).
    Unknown,
    /// A state-changing request from this machine whose client process could not be found:
    /// its socket is gone or its owner is not among the readable processes (Linux only).
    Untraceable,
}

impl Refusal {
    /// The message of the 403.
    fn message(&self) -> String {
        match self {
            Refusal::Tool(t) => format!(
                "refused: this request comes from a process a troupe tool started (pid {}, {}); \
                 a model may read the server but not change sessions, permissions or answers",
                t.pid, t.reason
            ),
            Refusal::OtherUser { uid, own } => format!(
                "refused: this server has no password and only serves the user who started it \
                 (uid {}); the client belongs to uid {uid}. Start it with --password to share it",
                own.map_or_else(|| "unknown".to_string(), |u| u.to_string())
            ),
            Refusal::Unknown => "refused: this server has no password and the client's socket \
                 was not found in /proc/net/tcp, so its user is unknown. Start it with \
                 --password to serve clients that cannot be traced"
                .to_string(),
            Refusal::Untraceable => "refused: this request comes from this machine but its \
                 client process could not be traced (its connection was closed or reset before \
                 the answer, or its socket has no readable owner); a request that changes state \
                 must keep its connection open until it is answered"
                .to_string(),
        }
    }
}

/// The connect info the server is served with: one per accepted connection, shared by all
/// its requests. It carries the client address and which kinds of request of this
/// connection already passed the guard (see the module docs).
#[derive(Debug, Clone)]
pub struct Connection {
    /// The client's address (the remote end of the accepted socket).
    pub addr: SocketAddr,
    /// [`PASSED_READS`] or [`PASSED_CHANGES`] once such a request passed; 0 before.
    passed: Arc<AtomicU8>,
}

/// A read of the connection passed (only traced without a password).
const PASSED_READS: u8 = 1;
/// A state-changing request of the connection passed (which vouches for reads too: the
/// same uid check and more).
const PASSED_CHANGES: u8 = 2;

impl Connection {
    /// A connection from `addr` that nothing passed yet.
    pub fn new(addr: SocketAddr) -> Self {
        Connection {
            addr,
            passed: Arc::new(AtomicU8::new(0)),
        }
    }

    /// Whether a request of this kind passed already on this connection.
    pub fn passed(&self, state_changing: bool) -> bool {
        self.passed.load(Ordering::Acquire) >= needed(state_changing)
    }

    /// Records that a request of this kind passed.
    fn pass(&self, state_changing: bool) {
        self.passed
            .fetch_max(needed(state_changing), Ordering::AcqRel);
    }
}

/// The pass level a request of this kind needs.
fn needed(state_changing: bool) -> u8 {
    if state_changing {
        PASSED_CHANGES
    } else {
        PASSED_READS
    }
}

impl Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>> for Connection {
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        Connection::new(*stream.remote_addr())
    }
}

/// Client sockets traced in this process (each reads `/proc/net/tcp{,6}` and, for a
/// state-changing request, the owner's `/proc/PID/fd`), for tests and measurements.
pub static TRACES: AtomicU64 = AtomicU64::new(0);

/// Axum middleware: refuse a request per [`verdict`] (see the module docs); `password_set`:
/// whether the server has a password. Needs the server to be served with connect info
/// ([`Connection`]); without it (in-process tests) the request passes.
pub async fn guard(
    State((password_set, server)): State<(bool, SocketAddr)>,
    request: Request,
    next: Next,
) -> Response {
    let state_changing = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if password_set && !state_changing {
        return next.run(request).await;
    }
    let Some(ConnectInfo(connection)) = request
        .extensions()
        .get::<ConnectInfo<Connection>>()
        .cloned()
    else {
        return next.run(request).await;
    };
    if connection.passed(state_changing) {
        return next.run(request).await;
    }
    TRACES.fetch_add(1, Ordering::Relaxed);
    let peer = connection.addr;
    let found = tokio::task::spawn_blocking(move || {
        verdict_to(peer, Some(server), state_changing, password_set, &Procfs)
    })
    .await
    .unwrap_or(Some(Refusal::Unknown));
    match found {
        Some(r) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", r.message()).into_response(),
        None => {
            connection.pass(state_changing);
            next.run(request).await
        }
    }
}

/// The decision of the module docs for a request from `peer` (blocking: reads `t`).
/// Without a password the client socket must be found and belong to this server's uid (on
/// Linux; elsewhere there is no `/proc` to look in); a state-changing request must also not
/// come from a tool process ([`judge`]).
pub fn verdict(
    peer: SocketAddr,
    state_changing: bool,
    password_set: bool,
    t: &dyn ProcessTable,
) -> Option<Refusal> {
    verdict_to(peer, None, state_changing, password_set, t)
}

/// [`verdict`] for a connection from `peer` to the server's listening address `server`: the
/// client socket is the row whose local end is `peer` **and** whose remote end is `server`
/// ([`find_socket_to`]).
pub fn verdict_to(
    peer: SocketAddr,
    server: Option<SocketAddr>,
    state_changing: bool,
    password_set: bool,
    t: &dyn ProcessTable,
) -> Option<Refusal> {
    if password_set && !state_changing {
        return None;
    }
    // `/proc` is read while sockets and processes come and go, so one reading can miss a
    // live entry (the row, or the fd link of its owner): look a few times before giving up.
    // A socket found without its owner is refused (fail closed), so the owner is looked for
    // longer than the socket: up to OWNER_ATTEMPTS in all, 2 ms then 5 ms apart.
    let mut found = None;
    for attempt in 0..OWNER_ATTEMPTS {
        if let Some(row) = find_socket_to(peer, server, t) {
            let owner = if state_changing {
                t.socket_owner(row.inode)
            } else {
                None
            };
            found = Some((row, owner));
            if owner.is_some() || !state_changing {
                break;
            }
        }
        let last = if found.is_some() {
            OWNER_ATTEMPTS
        } else {
            LOOKUP_ATTEMPTS
        };
        if attempt + 1 >= last {
            break;
        }
        let pause = if attempt < LOOKUP_ATTEMPTS { 2 } else { 5 };
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
    let linux = cfg!(target_os = "linux");
    let local = || is_local(peer.ip(), t);
    let Some((row, owner)) = found else {
        if !password_set && linux {
            return Some(Refusal::Unknown);
        }
        return (state_changing && linux && local()).then_some(Refusal::Untraceable);
    };
    let own = t.uid();
    if !password_set && own != Some(row.uid) {
        return Some(Refusal::OtherUser { uid: row.uid, own });
    }
    match owner {
        Some(pid) => judge(pid, t).map(Refusal::Tool),
        // Found in the table, so on this machine; another uid's owner may just be unreadable.
        None if state_changing && linux && (own.is_none() || own == Some(row.uid)) => {
            Some(Refusal::Untraceable)
        }
        None => None,
    }
}

/// Whether `ip` is an address of this machine: loopback, unspecified, or one of its
/// interfaces' addresses (IPv4-mapped IPv6 compared as IPv4). An interface list that cannot
/// be read counts every address as local (fail closed: such a request must then be traced).
pub fn is_local(ip: std::net::IpAddr, t: &dyn ProcessTable) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    match t.local_addresses() {
        Some(list) => list.iter().any(|a| a.to_canonical() == ip),
        None => true,
    }
}

/// The client process of a connection from `peer` to the server listening on `server`, if a
/// troupe tool started it (the client socket is matched by both ends, as in
/// [`verdict_to`]). Blocking: reads `/proc`. `None` when the owner cannot be found or is not
/// a tool process.
pub fn tool_peer(peer: SocketAddr, server: SocketAddr) -> Option<ToolPeer> {
    match verdict_to(peer, Some(server), true, true, &Procfs) {
        Some(Refusal::Tool(t)) => Some(t),
        _ => None,
    }
}

/// How many times [`verdict`] looks for the client socket (2 ms apart).
const LOOKUP_ATTEMPTS: usize = 5;

/// How many times [`verdict`] looks for the owner of a socket it found (≈ 85 ms in all): a
/// missed `/proc/PID/fd` link under load must not refuse the user's own client.
const OWNER_ATTEMPTS: usize = 20;

/// The row of the client socket whose local end is `peer`. The address is canonicalized
/// first: a listener on `::` sees an IPv4 client as `::ffff:a.b.c.d`, while the client's
/// socket is an IPv4 one, in `/proc/net/tcp`.
pub fn find_socket(peer: SocketAddr, t: &dyn ProcessTable) -> Option<SocketRow> {
    find_socket_to(peer, None, t)
}

/// [`find_socket`], also requiring the row's remote end to be `server` (the address the
/// server listens on; with an unspecified IP only its port is compared). Linux gives the same
/// ephemeral local port to connections to different destinations, so the local end alone can
/// name another process's socket (a serve load test was refused as uid 106's client once).
pub fn find_socket_to(
    peer: SocketAddr,
    server: Option<SocketAddr>,
    t: &dyn ProcessTable,
) -> Option<SocketRow> {
    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
    let server = server.map(|a| SocketAddr::new(a.ip().to_canonical(), a.port()));
    let tables: &[bool] = match peer {
        SocketAddr::V4(_) => &[false, true],
        SocketAddr::V6(_) => &[true],
    };
    tables.iter().find_map(|v6| {
        t.net_table(*v6)?
            .lines()
            .skip(1)
            .find_map(|line| row_of_line(line, peer, server))
    })
}

/// What [`judge`] reads about processes (a trait so the decision is testable on a made-up
/// process table).
pub trait ProcessTable {
    /// Parent pid of `pid` (`None` for init or an unreadable process).
    fn parent(&self, pid: u32) -> Option<u32>;
    /// Value of the tool mark in `pid`'s environment, if any.
    fn mark(&self, pid: u32) -> Option<String>;
    /// Whether `pid` runs the same executable as this process (a troupe process).
    fn is_troupe(&self, pid: u32) -> bool;
    /// This process's pid.
    fn me(&self) -> u32;
    /// The text of `/proc/net/tcp6` (`v6`) or `/proc/net/tcp`, if readable.
    fn net_table(&self, v6: bool) -> Option<String>;
    /// The pid that holds the socket `inode` open (readable processes only).
    fn socket_owner(&self, inode: u64) -> Option<u32>;
    /// This process's effective uid, if known.
    fn uid(&self) -> Option<u32>;
    /// The addresses of this machine's network interfaces (`None`: unreadable).
    fn local_addresses(&self) -> Option<Vec<std::net::IpAddr>>;
}

/// What a row of `/proc/net/tcp{,6}` tells about a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketRow {
    /// The socket's inode (found again among the `/proc/PID/fd` links of its owner).
    pub inode: u64,
    /// The uid that created the socket.
    pub uid: u32,
}

/// Ancestors of `pid`, nearest first, `pid` itself excluded (stops at init or after 512
/// steps, so a cycle in a made-up table cannot loop).
fn ancestors(pid: u32, t: &dyn ProcessTable) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur = pid;
    while let Some(p) = t.parent(cur) {
        if p == 0 || out.len() >= 512 || out.contains(&p) {
            break;
        }
        out.push(p);
        cur = p;
    }
    out
}

/// The decision of the module docs for the client process `pid`.
pub fn judge(pid: u32, t: &dyn ProcessTable) -> Option<ToolPeer> {
    let me = t.me();
    if pid == me {
        return None;
    }
    let mut mine = vec![me];
    mine.extend(ancestors(me, t));
    let own_mark = mine.iter().find_map(|p| t.mark(*p));
    let mut chain = vec![pid];
    chain.extend(ancestors(pid, t));
    for p in &chain {
        if let Some(m) = t.mark(*p)
            && own_mark.as_deref() != Some(m.as_str())
        {
            return Some(ToolPeer {
                pid,
                reason: format!("carries {}={m}", troupe_tools::procs::OWNER_ENV),
            });
        }
    }
    // The server's own descendants are its tools' processes; another troupe above the
    // client counts unless it is above the server too (a troupe that started both).
    chain[1..]
        .iter()
        .find(|p| **p == me || (t.is_troupe(**p) && !mine.contains(p)))
        .map(|p| ToolPeer {
            pid,
            reason: format!("descends from troupe (pid {p})"),
        })
}

/// The real process table, from `/proc`.
struct Procfs;

impl ProcessTable for Procfs {
    fn parent(&self, pid: u32) -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses: split after the
        // last `)`.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    }

    fn mark(&self, pid: u32) -> Option<String> {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let key = format!("{}=", troupe_tools::procs::OWNER_ENV);
        env.split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(key.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    fn is_troupe(&self, pid: u32) -> bool {
        let exe = |p: String| std::fs::read_link(p).ok();
        match (exe(format!("/proc/{pid}/exe")), own_exe()) {
            (Some(a), Some(b)) => a == b || a.file_name() == Some(OsStr::new("troupe")),
            _ => false,
        }
    }

    fn me(&self) -> u32 {
        std::process::id()
    }

    fn net_table(&self, v6: bool) -> Option<String> {
        let path = if v6 {
            "/proc/net/tcp6"
        } else {
            "/proc/net/tcp"
        };
        // One large read: fewer pieces for the kernel to stitch together.
        let mut text = String::with_capacity(1 << 20);
        std::io::Read::read_to_string(&mut std::fs::File::open(path).ok()?, &mut text).ok()?;
        Some(text)
    }

    fn socket_owner(&self, inode: u64) -> Option<u32> {
        socket_owner(inode)
    }

    fn uid(&self) -> Option<u32> {
        // `Uid:` real, effective, saved, filesystem.
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    fn local_addresses(&self) -> Option<Vec<std::net::IpAddr>> {
        let list = if_addrs::get_if_addrs().ok()?;
        Some(list.into_iter().map(|i| i.ip()).collect())
    }
}

fn own_exe() -> Option<PathBuf> {
    std::fs::read_link("/proc/self/exe").ok()
}

/// Parse one `/proc/net/tcp{,6}` row (`sl local rem st tx:rx tr:when retrnsmt uid timeout
/// inode …`, addresses as hex words in host byte order) and return its inode and uid when its
/// local address is `want`. An IPv4 peer also matches its IPv4-mapped IPv6 form.
fn row_of_line(line: &str, want: SocketAddr, remote: Option<SocketAddr>) -> Option<SocketRow> {
    let cols: Vec<&str> = line.split_whitespace().collect();
    if !end_is(cols.get(1)?, want.ip(), want.port())? {
        return None;
    }
    if let Some(r) = remote
        && !(if r.ip().is_unspecified() {
            cols.get(2)?
                .split_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(r.port())
        } else {
            end_is(cols.get(2)?, r.ip(), r.port())?
        })
    {
        return None;
    }
    let inode = cols.get(9)?.parse().ok().filter(|i| *i != 0)?;
    let uid = cols.get(7)?.parse().ok()?;
    Some(SocketRow { inode, uid })
}

/// An address column: the kernel prints each 32-bit word of the network-order address as
/// the hex of the word read in host byte order, so the word's native bytes are the address.
/// Whether a row's `HEXIP:HEXPORT` column is `ip:port` (an IPv4 `ip` also matches its
/// IPv4-mapped IPv6 form). `None` when the column does not parse.
fn end_is(col: &str, ip: std::net::IpAddr, port: u16) -> Option<bool> {
    let (addr, p) = col.split_once(':')?;
    if u16::from_str_radix(p, 16).ok()? != port {
        return Some(false);
    }
    let found = parse_hex_ip(addr)?;
    Some(match (found, ip) {
        (std::net::IpAddr::V6(a), std::net::IpAddr::V4(b)) => a.to_ipv4_mapped() == Some(b),
        (a, b) => a == b,
    })
}

fn parse_hex_ip(hex: &str) -> Option<std::net::IpAddr> {
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(std::net::Ipv4Addr::from(word(hex)?).into()),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                let w = word(hex.get(i * 8..i * 8 + 8)?)?;
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w);
            }
            Some(std::net::Ipv6Addr::from(bytes).into())
        }
        _ => None,
    }
}

/// The pid that holds the socket `inode` open (readable processes only).
fn socket_owner(inode: u64) -> Option<u32> {
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
