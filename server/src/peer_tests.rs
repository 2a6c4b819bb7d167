use super::*;
use std::collections::HashMap;

use proptest::prelude::*;

/// A made-up process table: pid → (parent, mark, is troupe); the text of `/proc/net/tcp` and
/// `/proc/net/tcp6`; socket inode → owner pid.
struct Table {
    me: u32,
    procs: HashMap<u32, (u32, Option<&'static str>, bool)>,
    tcp: String,
    tcp6: String,
    sockets: HashMap<u64, u32>,
    /// The server's uid (`None`: unknown).
    own_uid: Option<u32>,
    /// The machine's interface addresses (`None`: unreadable).
    local: Option<Vec<std::net::IpAddr>>,
}

impl ProcessTable for Table {
    fn parent(&self, pid: u32) -> Option<u32> {
        self.procs.get(&pid).map(|p| p.0)
    }
    fn mark(&self, pid: u32) -> Option<String> {
        self.procs.get(&pid).and_then(|p| p.1).map(str::to_string)
    }
    fn is_troupe(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.2)
    }
    fn me(&self) -> u32 {
        self.me
    }
    fn net_table(&self, v6: bool) -> Option<String> {
        Some(if v6 { &self.tcp6 } else { &self.tcp }.clone())
    }
    fn socket_owner(&self, inode: u64) -> Option<u32> {
        self.sockets.get(&inode).copied()
    }
    fn uid(&self) -> Option<u32> {
        self.own_uid
    }
    fn local_addresses(&self) -> Option<Vec<std::net::IpAddr>> {
        self.local.clone()
    }
}

/// The header line of `/proc/net/tcp{,6}`.
const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";

/// A `/proc/net/tcp` row for a client socket at `local` (hex `ADDR:PORT`) owned by `uid`.
fn row(local: &str, uid: u32, inode: u64) -> String {
    format!(
        "   3: {local} 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  {uid}        0 {inode} 1 0000000000000000 20 4 30 10 -1"
    )
}

/// init(1) → user shell(10) → troupe serve(100); shell(10) → troupe run(200) → bash(201,
/// marked) → curl(202, marked); troupe serve(100) → bash(101, marked) → env -i curl(102,
/// unmarked); shell(10) → troupe attach client(300); shell(10) → curl(301).
fn table() -> Table {
    let procs = HashMap::from([
        (1, (0, None, false)),
        (10, (1, None, false)),
        (100, (10, None, true)),
        (101, (100, Some("100-5:1"), false)),
        (102, (101, None, false)),
        (103, (100, None, false)),
        (200, (10, None, true)),
        (201, (200, Some("200-7:3"), false)),
        (202, (201, Some("200-7:3"), false)),
        (300, (10, None, true)),
        (301, (10, None, false)),
    ]);
    Table {
        me: 100,
        procs,
        tcp: HEADER.to_string(),
        tcp6: HEADER.to_string(),
        sockets: HashMap::new(),
        own_uid: Some(1000),
        local: Some(vec!["192.0.2.2".parse().unwrap()]),
    }
}

#[test]
fn a_tool_process_of_this_server_is_refused_even_without_its_mark() {
    let t = table();
    let got = judge(102, &t).expect("an env -i child of a bash call is the model's");
    assert_eq!(got.pid, 102);
    assert!(
        got.reason.contains("TROUPE_PROC_OWNER=100-5:1"),
        "{}",
        got.reason
    );
    // An orphan reparented to the server (troupe is a subreaper) has no mark, no shell.
    let got = judge(103, &t).expect("an orphan reparented to the server is a tool's");
    assert!(
        got.reason.contains("descends from troupe (pid 100)"),
        "{}",
        got.reason
    );
}

#[test]
fn a_tool_process_of_another_troupe_is_refused() {
    let got = judge(202, &table()).expect("curl from another troupe run's bash tool");
    assert!(got.reason.contains("200-7:3"), "{}", got.reason);
}

#[test]
fn the_user_s_own_clients_pass() {
    let t = table();
    assert_eq!(judge(300, &t), None, "troupe attach from the user's shell");
    assert_eq!(judge(301, &t), None, "curl from the user's shell");
    assert_eq!(judge(100, &t), None, "the server itself");
    assert_eq!(judge(4242, &t), None, "a process that is gone");
}

#[test]
fn a_server_started_by_a_tool_accepts_its_siblings_with_the_same_mark() {
    // A model that runs `troupe serve` in its own bash call drives its own server: that
    // server is not the user's, and refusing would break troupe tested by troupe.
    let mut t = table();
    t.procs.insert(500, (201, Some("200-7:3"), true));
    t.me = 500;
    assert_eq!(judge(202, &t), None);
    // A process of a different troupe's tool is still refused.
    assert!(judge(102, &t).is_some());
}

#[test]
fn a_cycle_in_the_table_ends() {
    let mut t = table();
    t.procs.insert(7, (8, None, false));
    t.procs.insert(8, (7, None, false));
    assert_eq!(judge(7, &t), None);
}

#[test]
fn proc_net_rows_parse_to_the_local_address() {
    let v4 = "   3: 0100007F:A2C4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 998877 1 0000000000000000 20 4 30 10 -1";
    let peer: SocketAddr = "127.0.0.1:41668".parse().unwrap();
    let found = SocketRow {
        inode: 998877,
        uid: 1000,
    };
    assert_eq!(row_of_line(v4, peer, None), Some(found));
    assert_eq!(
        row_of_line(v4, "127.0.0.1:41669".parse().unwrap(), None),
        None
    );
    assert_eq!(
        row_of_line(v4, "127.0.0.2:41668".parse().unwrap(), None),
        None
    );
    // ::1 and ::ffff:127.0.0.1 in /proc/net/tcp6.
    let v6 = "   0: 00000000000000000000000001000000:A2C4 00000000000000000000000001000000:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 4455 1 0 20 4 30 10 -1";
    assert_eq!(
        row_of_line(v6, "[::1]:41668".parse().unwrap(), None).map(|r| r.inode),
        Some(4455)
    );
    let mapped = "   0: 0000000000000000FFFF00000100007F:A2C4 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 77 1 0 20 4 30 10 -1";
    assert_eq!(row_of_line(mapped, peer, None).map(|r| r.inode), Some(77));
    assert_eq!(row_of_line("garbage", peer, None), None);
    assert_eq!(row_of_line("", peer, None), None);
    // With the server's end (1F90 = 8080): the same local end to another destination is not
    // the client's socket (Linux reuses an ephemeral port across destinations).
    let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    assert_eq!(row_of_line(v4, peer, Some(server)), Some(found));
    let elsewhere = "   4: 0100007F:A2C4 0100007F:1538 01 00000000:00000000 00:00000000 00000000   106        0 5566 1 0000000000000000 20 4 30 10 -1";
    assert_eq!(row_of_line(elsewhere, peer, None).map(|r| r.uid), Some(106));
    assert_eq!(row_of_line(elsewhere, peer, Some(server)), None);
    // A server on 0.0.0.0 compares the port only; ::ffff: forms match their IPv4 server.
    let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
    assert_eq!(row_of_line(v4, peer, Some(any)), Some(found));
    assert_eq!(row_of_line(elsewhere, peer, Some(any)), None);
    assert_eq!(
        row_of_line(mapped, peer, Some(server)).map(|r| r.inode),
        Some(77)
    );
}

#[test]
fn the_owner_of_a_real_client_socket_is_found() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (_server_side, peer) = listener.accept().unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    let row = find_socket(peer, &Procfs).expect("the client socket is in /proc/net/tcp");
    assert_eq!(socket_owner(row.inode), Some(std::process::id()));
    let server = listener.local_addr().unwrap();
    assert_eq!(
        find_socket_to(peer, Some(server), &Procfs),
        Some(row),
        "matched by both ends"
    );
    let elsewhere = std::net::SocketAddr::new(server.ip(), server.port() ^ 1);
    assert_eq!(find_socket_to(peer, Some(elsewhere), &Procfs), None);
    assert_eq!(
        tool_peer(peer, server),
        None,
        "this test process is not a tool's"
    );
}

#[test]
fn an_ipv4_client_seen_as_ipv4_mapped_ipv6_is_found_in_the_ipv4_table() {
    // `--hostname ::`: the listener sees a client of 127.0.0.1 as ::ffff:127.0.0.1, but the
    // client's own socket is an IPv4 one, listed in /proc/net/tcp.
    let mut t = table();
    t.tcp = format!("{HEADER}\n{}", row("0100007F:A2C4", 1000, 31));
    t.sockets.insert(31, 202);
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:41668".parse().unwrap();
    assert_eq!(
        find_socket(mapped, &t),
        Some(SocketRow {
            inode: 31,
            uid: 1000
        })
    );
    let owner = find_socket(mapped, &t).and_then(|r| t.socket_owner(r.inode));
    assert!(owner.and_then(|pid| judge(pid, &t)).is_some());
}

/// A made-up table with client sockets: 127.0.0.1:41668 of uid 1000 held by the user's curl
/// (301), 127.0.0.1:41669 of uid 65534 (another user's), 192.0.2.2:40000 of uid 1000 held by
/// a tool's curl (202).
fn with_sockets() -> Table {
    let mut t = table();
    t.tcp = [
        HEADER.to_string(),
        row("0100007F:A2C4", 1000, 1),
        row("0100007F:A2C5", 65534, 2),
        row("020200C0:9C40", 1000, 3),
    ]
    .join("\n");
    t.sockets = HashMap::from([(1, 301), (2, 999), (3, 202)]);
    t
}

#[test]
fn without_a_password_only_the_server_s_user_is_served() {
    let t = with_sockets();
    let mine: SocketAddr = "127.0.0.1:41668".parse().unwrap();
    let theirs: SocketAddr = "127.0.0.1:41669".parse().unwrap();
    let gone: SocketAddr = "127.0.0.1:1234".parse().unwrap();
    for state_changing in [false, true] {
        assert_eq!(verdict(mine, state_changing, false, &t), None);
        assert_eq!(
            verdict(theirs, state_changing, false, &t),
            Some(Refusal::OtherUser {
                uid: 65534,
                own: Some(1000)
            }),
            "another user, state changing {state_changing}"
        );
        // Fail closed: a client that cannot be traced is refused (on Linux).
        let unknown = verdict(gone, state_changing, false, &t);
        assert_eq!(unknown.is_some(), cfg!(target_os = "linux"), "{unknown:?}");
        // With a password the password decides who connects; a local client that cannot
        // be traced may still not change state (see the next test).
        assert_eq!(verdict(theirs, state_changing, true, &t), None);
    }
    assert_eq!(verdict(gone, false, true, &t), None);
    let msg = Refusal::OtherUser {
        uid: 65534,
        own: Some(1000),
    }
    .message();
    assert!(
        msg.contains("uid 65534") && msg.contains("--password"),
        "{msg}"
    );
}

/// With a password, a state-changing request from this machine must be traced to its
/// process: a client that closed or reset its connection right after sending (its socket is
/// gone, or only a torn-down row with inode 0 is left) or a socket of the server's own uid
/// whose owner is not found is refused; a remote client, reads, and another uid's socket
/// with an unreadable owner pass.
#[test]
fn a_local_client_that_cannot_be_traced_may_not_change_state() {
    let mut t = with_sockets();
    t.tcp.push('\n');
    t.tcp.push_str(
        &[
            row("0100007F:A2C6", 1000, 0),  // 127.0.0.1:41670 being torn down
            row("0100007F:A2C7", 1000, 7),  // 127.0.0.1:41671, this uid, owner not found
            row("0100007F:A2C8", 65534, 8), // 127.0.0.1:41672, another uid, owner unreadable
        ]
        .join("\n"),
    );
    let peer = |s: &str| s.parse::<SocketAddr>().unwrap();
    let linux = cfg!(target_os = "linux");
    for local in [
        "127.0.0.1:1234",
        "127.0.0.1:41670",
        "127.0.0.1:41671",
        "192.0.2.2:5555",
        "[::1]:80",
    ] {
        let want = linux.then_some(Refusal::Untraceable);
        assert_eq!(verdict(peer(local), true, true, &t), want, "{local}");
        assert_eq!(verdict(peer(local), false, true, &t), None, "{local}");
    }
    assert_eq!(verdict(peer("127.0.0.1:41672"), true, true, &t), None);
    assert_eq!(verdict(peer("198.51.100.7:5555"), true, true, &t), None);
    // An interface list that cannot be read makes every client local (fail closed).
    t.local = None;
    assert_eq!(
        verdict(peer("198.51.100.7:5555"), true, true, &t),
        linux.then_some(Refusal::Untraceable)
    );
    let msg = Refusal::Untraceable.message();
    assert!(msg.contains("could not be traced"), "{msg}");
}

#[test]
fn a_tool_process_over_a_non_loopback_address_is_refused() {
    let t = with_sockets();
    let lan: SocketAddr = "192.0.2.2:40000".parse().unwrap();
    let got = verdict(lan, true, true, &t);
    assert!(
        matches!(got, Some(Refusal::Tool(ref p)) if p.pid == 202),
        "{got:?}"
    );
    // Reads stay open to the model when a password is set.
    assert_eq!(verdict(lan, false, true, &t), None);
}

/// The `/proc/net/tcp{,6}` address column of `ip`: each 32-bit word of the address in
/// network order, printed as the hex of that word read in host byte order.
fn hex_ip(ip: std::net::IpAddr) -> String {
    let word = |b: &[u8]| format!("{:08X}", u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match ip {
        std::net::IpAddr::V4(a) => word(&a.octets()),
        std::net::IpAddr::V6(a) => a.octets().chunks(4).map(word).collect(),
    }
}

/// Client addresses the generated tables and peers draw from: the same few, so that peers
/// and rows meet often (an IPv4 client, another loopback, IPv6, IPv4-mapped IPv6).
const ADDRS: [&str; 5] = [
    "127.0.0.1",
    "127.0.0.2",
    "::1",
    "::ffff:127.0.0.1",
    "198.51.100.7",
];

/// One generated socket row: (index into [`ADDRS`], port offset, uid, inode; 0 is a row the
/// kernel prints for a socket being torn down).
type GenRow = (usize, u16, u32, u64);

/// A generated process: (parent pid, mark, is troupe), pids 1 to 8.
type GenProc = (u32, Option<&'static str>, bool);

/// A uid: mostly the server's own (1000), sometimes another user's.
fn uid() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(1000u32), 1 => Just(65534u32)]
}

fn gen_rows() -> impl Strategy<Value = Vec<GenRow>> {
    prop::collection::vec((0..ADDRS.len(), 0u16..3, uid(), 0u64..6), 0..6)
}

fn gen_procs() -> impl Strategy<Value = Vec<GenProc>> {
    prop::collection::vec(
        (
            0u32..9,
            prop::option::of(prop::sample::select(vec!["1-1:1", "2-2:2"])),
            any::<bool>(),
        ),
        8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Over made-up socket tables (rows of any family, uid and inode, with garbage lines
    /// between them), socket owners and process trees, [`verdict`] is exactly the decision
    /// of the module docs, and so fails closed: without a password a client whose socket is
    /// not in the tables, or whose uid is not the server's (or the server's uid is unknown),
    /// is refused; a state-changing request from a socket whose owner is a tool process is
    /// refused with or without a password.
    #[test]
    fn the_verdict_over_any_socket_table_fails_closed(
        rows in gen_rows(),
        junk in prop::collection::vec("[ -~]{0,60}", 0..3),
        owners in prop::collection::vec((0u64..6, 1u32..9), 0..6),
        procs in gen_procs(),
        me in 1u32..9,
        own_uid in prop_oneof![4 => Just(Some(1000u32)), 1 => Just(Some(65534)), 1 => Just(None)],
        peer_addr in 0..ADDRS.len(),
        planted in prop::option::of((any::<bool>(), uid(), 1u32..9)),
        state_changing in any::<bool>(),
        password_set in any::<bool>(),
        interfaces in prop_oneof![Just(Some(vec![])), Just(Some(vec!["198.51.100.7"])), Just(None)],
    ) {
        let ip = |i: usize| ADDRS[i].parse::<std::net::IpAddr>().unwrap();
        // Often the peer's own socket is in the table (first or last), held by a known pid.
        let (mut rows, mut owners) = (rows, owners);
        if let Some((first, uid, pid)) = planted {
            let at = if first { 0 } else { rows.len() };
            rows.insert(at, (peer_addr, 0, uid, 5));
            owners.push((5, pid));
        }
        let (mut tcp, mut tcp6) = (vec![HEADER.to_string()], vec![HEADER.to_string()]);
        for (i, (a, port, uid, inode)) in rows.iter().enumerate() {
            let line = row(&format!("{}:{:04X}", hex_ip(ip(*a)), 40000 + port), *uid, *inode);
            let table = if ip(*a).is_ipv4() { &mut tcp } else { &mut tcp6 };
            table.push(line);
            if let Some(j) = junk.get(i) {
                table.push(j.clone());
            }
        }
        let t = Table {
            me,
            procs: (1..=8).zip(procs).collect(),
            tcp: tcp.join("\n"),
            tcp6: tcp6.join("\n"),
            sockets: owners.into_iter().collect(),
            own_uid,
            local: interfaces
                .as_ref()
                .map(|l| l.iter().map(|a| a.parse().unwrap()).collect()),
        };
        let peer = SocketAddr::new(ip(peer_addr), 40000);

        // The socket the server must find: the first live row for the peer's address (after
        // IPv4-mapped addresses are unmapped), IPv4 table first for an IPv4 client.
        let canon = peer.ip().to_canonical();
        let v4_rows = rows.iter().filter(|r| ip(r.0).is_ipv4());
        let v6_rows = rows.iter().filter(|r| !ip(r.0).is_ipv4());
        let searched: Vec<&GenRow> = if canon.is_ipv4() {
            v4_rows.chain(v6_rows).collect()
        } else {
            v6_rows.collect()
        };
        let first = searched
            .into_iter()
            .find(|r| ip(r.0).to_canonical() == canon && r.1 == 0 && r.3 != 0);
        let tool = |inode: u64| {
            t.socket_owner(inode)
                .and_then(|pid| judge(pid, &t))
                .map(Refusal::Tool)
        };
        let linux = cfg!(target_os = "linux");
        // On this machine: loopback, or an interface address (all of them when unreadable).
        let local = canon.is_loopback()
            || interfaces
                .as_ref()
                .is_none_or(|l| l.iter().any(|a| a.parse::<std::net::IpAddr>().unwrap() == canon));
        let want = match first {
            _ if password_set && !state_changing => None,
            None if password_set => (state_changing && linux && local).then_some(Refusal::Untraceable),
            None => linux.then_some(Refusal::Unknown),
            Some(r) if !password_set && own_uid != Some(r.2) => {
                Some(Refusal::OtherUser { uid: r.2, own: own_uid })
            }
            Some(r) if state_changing => match t.socket_owner(r.3) {
                Some(_) => tool(r.3),
                None if linux && (own_uid.is_none() || own_uid == Some(r.2)) => {
                    Some(Refusal::Untraceable)
                }
                None => None,
            },
            Some(_) => None,
        };
        prop_assert_eq!(verdict(peer, state_changing, password_set, &t), want);
    }
}

#[test]
fn a_pass_covers_its_kind_of_request_and_only_on_its_connection() {
    let addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let c = Connection::new(addr);
    assert!(!c.passed(false) && !c.passed(true));
    // A read that passed (the uid check) does not vouch for a state-changing request (the
    // owner's ancestry is not looked at for reads).
    c.pass(false);
    assert!(c.passed(false));
    assert!(!c.passed(true));
    // A state-changing request that passed vouches for both, on every clone (the requests
    // of one connection share it) and not on another connection.
    c.clone().pass(true);
    assert!(c.passed(true) && c.passed(false));
    c.pass(false);
    assert!(c.passed(true), "a later read pass does not lower it");
    let other = Connection::new(addr);
    assert!(!other.passed(false) && !other.passed(true));
}

/// Serves a router behind the real guard with [`Connection`] connect info, as `Server::run`
/// does; `/who` answers the identity of the request's connection state.
async fn guarded_server() -> SocketAddr {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let who = |ConnectInfo(c): ConnectInfo<Connection>| async move {
        format!("{:p}", Arc::as_ptr(&c.passed))
    };
    let app = axum::Router::new()
        .route("/who", get(who).post(who))
        .layer(axum::middleware::from_fn_with_state((false, addr), guard));
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<Connection>(),
        )
        .await
        .unwrap();
    });
    addr
}

#[tokio::test]
async fn every_connection_gets_its_own_pass_and_keeps_it_across_requests() {
    let addr = guarded_server().await;
    let url = format!("http://{addr}/who");
    let one = reqwest::Client::new();
    // This test process is the user's own client: traced, and it passes.
    let a = one.post(&url).send().await.unwrap();
    assert_eq!(a.status(), 200);
    let a = a.text().await.unwrap();
    let b = one.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(a, b, "one keep-alive connection, one state");
    let other = reqwest::Client::new();
    let c = other.post(&url).send().await.unwrap().text().await.unwrap();
    assert_ne!(a, c, "another connection starts with nothing passed");
}
