//! `rds-info` against live nodes in this process: the tables are compared byte for byte with
//! expected text written here (literal column widths, values from the node's own API taken
//! while the state is quiescent).
//!
//! One test per file: the nodes serve their control sockets in `RDS_RUNTIME_DIR`, which this
//! process sets once for itself and passes to the `rds-info` it runs.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::process::Output;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use rds_core::ctl::InfoSnapshot;
use rds_core::{CtlMode, Node, NodeConfig, Socket};

const A: &str = "127.0.0.70";
const B: &str = "127.0.0.71";
/// A peer whose listener accepts nothing: connections to it stay CONNECTING.
const C: &str = "127.0.0.72";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sa(s: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(s), port)
}

/// A listener on `addr:16385` with a full accept queue: later SYNs are dropped, so a connect
/// to it stays in progress (for the whole test; SYN retries take minutes).
fn black_hole(addr: &str) -> (OwnedFd, std::net::TcpStream) {
    use nix::sys::socket::{
        bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
        SockaddrIn,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap();
    let a: std::net::SocketAddrV4 = format!("{addr}:16385").parse().unwrap();
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(a)).unwrap();
    listen(&fd, Backlog::new(0).unwrap()).unwrap();
    // This one fills the accept queue.
    let filler = std::net::TcpStream::connect(a).unwrap();
    (fd, filler)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn snapshot(n: &Node) -> InfoSnapshot {
    rds_core::node::admin::snapshot(n)
}

fn rds_info(run: &std::path::Path, args: &[&str]) -> Output {
    Command::cargo_bin("rds-info")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run)
        .args(args)
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap()
}

/// The expected full output (no options), written independently of the tool's code.
fn expected(s: &InfoSnapshot) -> String {
    let mut o = String::new();
    o.push_str("\nTCP Connections:\n");
    o.push_str("      LocalAddr LPort      RemoteAddr RPort  HdrRemain DataRemain    SentNxt  ExpectUna    SeenUna\n");
    for t in &s.tcp {
        let _ = writeln!(
            o,
            "{:>15} {:>5} {:>15} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
            t.local.ip().to_string(),
            t.local.port(),
            t.peer.ip().to_string(),
            t.peer.port(),
            t.hdr_rem,
            t.data_rem,
            t.last_sent_nxt,
            t.last_expected_una,
            t.last_seen_una
        );
    }
    o.push_str("\nCounters:\n              CounterName            Value\n");
    for (n, v) in &s.counters {
        let _ = writeln!(o, "{n:>25} {v:>16}");
    }
    o.push_str("\nRDS Sockets:\n      BoundAddr BPort        ConnAddr CPort     SndBuf     RcvBuf    Inode\n");
    for k in &s.sockets {
        let b = k.bound.unwrap();
        let (ca, cp) = k.connected.map_or(("0.0.0.0".to_string(), 0), |c| {
            (c.ip().to_string(), c.port())
        });
        let _ = writeln!(
            o,
            "{:>15} {:>5} {:>15} {:>5} {:>10} {:>10} {:>8}",
            b.ip().to_string(),
            b.port(),
            ca,
            cp,
            k.sndbuf,
            k.rcvbuf,
            k.id.index()
        );
    }
    o.push_str("\nRDS Connections:\n      LocalAddr      RemoteAddr  Tos           NextTX           NextRX Flgs\n");
    for c in &s.connections {
        let p = &c.paths[0];
        let flags = match p.state {
            rds_core::info::PathState::Up => "--C-",
            rds_core::info::PathState::Connecting => "-c--",
            _ => "----",
        };
        let _ = writeln!(
            o,
            "{:>15} {:>15}    0 {:>16} {:>16} {flags}",
            c.laddr.to_string(),
            c.faddr.to_string(),
            p.next_tx_seq,
            p.next_rx_seq
        );
    }
    let q = |o: &mut String, title: &str, msgs: &[rds_core::info::QueuedMsgInfo]| {
        let _ = write!(
            o,
            "\n{title} Message Queue:\n      LocalAddr LPort      RemoteAddr RPort  Tos              Seq      Bytes\n"
        );
        for m in msgs {
            let _ = writeln!(
                o,
                "{:>15} {:>5} {:>15} {:>5}    0 {:>16} {:>10}",
                m.laddr.to_string(),
                m.lport,
                m.faddr.to_string(),
                m.fport,
                m.seq,
                m.len
            );
        }
    };
    q(&mut o, "Receive", &s.recv);
    q(&mut o, "Send", &s.send);
    q(&mut o, "Retransmit", &s.retrans);
    o
}

#[test]
fn tables_of_a_known_state_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::env::set_var("RDS_RUNTIME_DIR", &run);
    let name = "t-info-live";
    let mut cfg = NodeConfig::new([ip(A)]);
    cfg.ctl = CtlMode::Named(name.into());
    cfg.seed = Some(7);
    let a = Node::start(cfg).unwrap();
    let mut cfg = NodeConfig::new([ip(B)]);
    cfg.ctl = CtlMode::Off;
    cfg.seed = Some(8);
    let b = Node::start(cfg).unwrap();
    let (_hole, _filler) = black_hole(C);

    let a1 = Socket::with_node(&a);
    a1.bind(sa(A, 4000)).unwrap();
    let a2 = Socket::with_node(&a);
    a2.set_send_buffer_size(50_000);
    a2.bind(sa(A, 4001)).unwrap();
    a2.connect(sa(B, 5000)).unwrap();
    let b1 = Socket::with_node(&b);
    b1.bind(sa(B, 5000)).unwrap();

    for len in [10usize, 200, 0] {
        a1.send_to(&vec![0xa5; len], sa(B, 5000)).unwrap();
    }
    for len in [7usize, 1] {
        b1.send_to(&vec![1; len], sa(A, 4001)).unwrap();
    }
    wait_until("delivery both ways", || {
        a.recv_queue().len() == 2 && b.recv_queue().len() == 3
    });
    for len in [5usize, 6] {
        a1.send_to(&vec![2; len], sa(C, 6000)).unwrap();
    }
    // Quiescent: everything to B acknowledged, the connection to C still connecting.
    let quiet = || {
        let s = snapshot(&a);
        s.retrans.is_empty()
            && s.send.len() == 2
            && s.connections.len() == 2
            && s.connections.iter().all(|c| {
                c.paths.first().is_some_and(|p| {
                    !p.sending
                        && (p.state == rds_core::info::PathState::Up
                            || (c.faddr == ip(C)
                                && p.state == rds_core::info::PathState::Connecting))
                })
            })
            && s.tcp.iter().all(|t| t.hdr_rem == 48 && t.data_rem == 0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !quiet() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for a quiescent state: {}",
            serde_json::to_string_pretty(&snapshot(&a)).unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));

    // Literal checks of the deterministic parts.
    let out = rds_info(&run, &["-k", "-s", "-r"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let s = snapshot(&a);
    let ids: Vec<u32> = s.sockets.iter().map(|k| k.id.index()).collect();
    assert_eq!(ids.len(), 2);
    let want = format!(
        "\nRDS Sockets:\n\
         \x20     BoundAddr BPort        ConnAddr CPort     SndBuf     RcvBuf    Inode\n\
         \x20    127.0.0.70  4000         0.0.0.0     0     106496     106496 {:>8}\n\
         \x20    127.0.0.70  4001      127.0.0.71  5000      50000     106496 {:>8}\n",
        ids[0], ids[1]
    );
    assert!(text.starts_with(&want), "got:\n{text}\nwant:\n{want}");
    assert!(
        text.contains("     127.0.0.70  4001      127.0.0.71  5000    0 "),
        "{text}"
    );
    let send_part = text.split("\nSend Message Queue:\n").nth(1).unwrap();
    let rows: Vec<&str> = send_part.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].starts_with("     127.0.0.70  4000      127.0.0.72  6000    0 "));
    assert!(rows[0].ends_with("          5"), "{}", rows[0]);
    assert!(rows[1].ends_with("          6"), "{}", rows[1]);

    // The whole output, every category, byte for byte (retried if the state moved).
    let mut last = String::new();
    for _ in 0..5 {
        let before = snapshot(&a);
        let out = rds_info(&run, &[]);
        let after = snapshot(&a);
        assert_eq!(out.status.code(), Some(0));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            err,
            "rds-info: IB transport connections: the IB transport is not available on this node (it runs: tcp)\n"
        );
        let got = String::from_utf8(out.stdout).unwrap();
        if before == after {
            assert_eq!(got, expected(&before), "rds-info output differs");
            let conns: Vec<&str> = got
                .split("\nRDS Connections:\n")
                .nth(1)
                .unwrap()
                .lines()
                .skip(1)
                .take(2)
                .collect();
            assert!(conns[0].starts_with("     127.0.0.70      127.0.0.71    0 "));
            assert!(conns[0].ends_with(" --C-"), "{}", conns[0]);
            assert!(conns[1].ends_with(" -c--"), "{}", conns[1]);
            last.clear();
            break;
        }
        last = got;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(last.is_empty(), "the state never settled:\n{last}");

    // Selected categories come in letter order, whatever the command line order.
    let out = rds_info(&run, &["-t", "-c", "-k"]);
    let t = String::from_utf8(out.stdout).unwrap();
    let (c, k, r) = (
        t.find("\nCounters:").unwrap(),
        t.find("\nRDS Sockets:").unwrap(),
        t.find("\nRetransmit Message Queue:").unwrap(),
    );
    assert!(c < k && k < r, "{t}");

    // -p: every path in a table; -v: per-path lines under TCP connections.
    let out = rds_info(&run, &["-p"]);
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(t.starts_with("\nRDS Paths:\n+"), "{t}");
    assert!(t.contains("| 127.0.0.72 "), "{t}");
    let out = rds_info(&run, &["-nv"]);
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(t.contains("    path 0: UP, next_tx "), "{t}");
    assert!(t.contains("    path 0: CONNECTING, next_tx "), "{t}");

    // -I alone: the IB transport is reported unavailable, not silently skipped.
    let out = rds_info(&run, &["-I"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("IB transport is not available"));

    // -a: IPv6 widths.
    let out = rds_info(&run, &["-a", "-n"]);
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(
        t.starts_with(&format!(
            "\nRDS Connections:\n{:>37} {:>37}  Tos           NextTX           NextRX Flgs\n{:>37} {:>37}    0 ",
            "LocalAddr", "RemoteAddr", A, B
        )),
        "{t}"
    );

    // -a -k: the 2.3 socket table; the node is embedded in this process, so every row has
    // its pid and comm (the header's Cong Pid Comm).
    let out = rds_info(&run, &["-a", "-k"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let t = String::from_utf8(out.stdout).unwrap();
    let me = std::process::id();
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    let comm = comm.trim_end_matches('\n');
    let mut want = format!(
        "\nRDS Sockets:\n{:>37} BPort {:>37} CPort     SndBuf     RcvBuf    Inode     Cong        Pid             Comm\n",
        "BoundAddr", "ConnAddr"
    );
    for k in &snapshot(&a).sockets {
        let b = k.bound.unwrap();
        let (ca, cp) = k.connected.map_or(("0.0.0.0".to_string(), 0), |c| {
            (c.ip().to_string(), c.port())
        });
        let _ = writeln!(
            want,
            "{:>37} {:>5} {:>37} {:>5} {:>10} {:>10} {:>8} {:>8} {me:>10} {comm:>16}",
            b.ip().to_string(),
            b.port(),
            ca,
            cp,
            k.sndbuf,
            k.rcvbuf,
            k.id.index(),
            i32::from(k.congested)
        );
    }
    assert_eq!(t, want);

    // --json: the snapshot, limited to what was asked.
    let out = rds_info(&run, &["--json", "-k"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], name);
    assert_eq!(v["sockets"].as_array().unwrap().len(), 2);
    assert!(v.get("counters").is_none());

    // A closed pipe is not an error.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rds-info"))
        .env("RDS_RUNTIME_DIR", &run)
        .arg("-c")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));

    drop((a1, a2, b1));
    a.shutdown();
    b.shutdown();
}
