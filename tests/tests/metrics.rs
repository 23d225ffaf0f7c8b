//! Metrics and the health check for monitoring systems, with the real binaries against a node
//! in this process whose state the test makes (issue 33 item 4):
//!
//! - `rds-ctrl health` in the monitoring-plugin convention: UNKNOWN (3) with no node, OK (0)
//!   with its one connection up, WARNING (1) once a socket is congested, CRITICAL (2) once
//!   messages wait on a connection that cannot come up; the status line and perfdata exactly;
//! - `rds-ctrl stats --format prometheus` byte for byte (gauges written out here from the
//!   state the test made, counters from the node's own snapshot taken around the run), the
//!   same counters from `rds-info -c --format prometheus`, connections and sockets from
//!   `rds-info -n -k --format prometheus`;
//! - each exposition read by Python's `prometheus_client` parser (installed by
//!   `.ci/deps.d/prometheus.sh`; the test fails without it) and checked against the Go
//!   parser's stricter rules; the node's name holds `"` and `\` to check label escaping.
//!
//! One test: the node serves its control socket in `RDS_RUNTIME_DIR`, which this process sets
//! once for itself and passes to the tools it runs.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rds_core::ctl::InfoSnapshot;
use rds_core::info::PathState;
use rds_core::{CtlMode, Node, NodeConfig, Socket};
use rds_tests::prometheus::{self, Family};
use rds_tests::workspace_bin;

const A: &str = "127.0.0.84";
const B: &str = "127.0.0.85";
/// A peer whose listener accepts nothing: a connection to it stays CONNECTING.
const C: &str = "127.0.0.86";
/// The node's name: a label value that needs escaping.
const NAME: &str = r#"t-metrics"q\x"#;
const NAME_LABEL: &str = r#"node="t-metrics\"q\\x""#;
/// `NAME` in the health check's summary.
const NAME_SHOWN: &str = r#"node 't-metrics"q\x'"#;

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
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

fn tool(run: &Path, name: &str, args: &[&str]) -> Output {
    let mut c = Command::new(workspace_bin(name));
    c.args(args)
        .env("RDS_RUNTIME_DIR", run)
        .env_remove("RDS_NO_DAEMON")
        .env_remove("COLUMNS");
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{name} {args:?} did not finish in 30 s");
        }
    }
}

/// Runs a tool, checks its exit status and that stderr is empty; returns stdout.
#[track_caller]
fn run_ok(run: &Path, name: &str, args: &[&str], code: i32) -> String {
    let o = tool(run, name, args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{name} {args:?}:\n{out}\n{err}"
    );
    assert_eq!(err, "", "{name} {args:?}");
    out
}

/// The health check's status line, its uptime perfdata (which moves) cut off.
#[track_caller]
fn health(run: &Path, code: i32) -> String {
    let out = run_ok(run, "rds-ctrl", &["--node", NAME, "health"], code);
    let first = out.lines().next().unwrap().to_string();
    let (line, uptime) = first.rsplit_once(" uptime=").expect("uptime perfdata");
    let secs = uptime.strip_suffix("s;;;0").expect(&first);
    assert!(secs.parse::<u64>().is_ok(), "{first}");
    assert_eq!(out.matches('|').count(), 1, "{out}");
    line.to_string()
}

fn snapshot(n: &Node) -> InfoSnapshot {
    rds_core::node::admin::snapshot(n)
}

/// The counter families, written here: HELP from the counter's description, the node label.
fn counter_text(s: &InfoSnapshot) -> String {
    let mut o = String::new();
    for (n, v) in &s.counters {
        let help = rds_core::stats::describe(n).unwrap();
        let _ = write!(
            o,
            "# HELP rds_{n}_total {help}\n# TYPE rds_{n}_total counter\n\
             rds_{n}_total{{{NAME_LABEL}}} {v}\n"
        );
    }
    o
}

/// The connection and socket families of the state the test made: A's connections to B (up)
/// and C (connecting) over TCP, sockets 4000 and 4001 (congested).
fn conn_sock_text() -> String {
    let mut o = String::from(
        "# HELP rds_connections RDS connections by transport and by the state of their first \
         path (the kernel's RDS tells up, connecting, error and down for any other state).\n\
         # TYPE rds_connections gauge\n",
    );
    for (s, n) in [
        ("down", 0),
        ("connecting", 1),
        ("disconnecting", 0),
        ("up", 1),
        ("resetting", 0),
        ("error", 0),
    ] {
        let _ = writeln!(
            o,
            "rds_connections{{{NAME_LABEL},transport=\"tcp\",state=\"{s}\"}} {n}"
        );
    }
    let _ = write!(
        o,
        "# HELP rds_transport_running Whether the node runs the transport (1) or not (0).\n\
         # TYPE rds_transport_running gauge\n\
         rds_transport_running{{{NAME_LABEL},transport=\"infiniband\"}} 0\n\
         rds_transport_running{{{NAME_LABEL},transport=\"tcp\"}} 1\n\
         # HELP rds_sockets RDS sockets bound to an address.\n\
         # TYPE rds_sockets gauge\n\
         rds_sockets{{{NAME_LABEL}}} 2\n\
         # HELP rds_sockets_congested RDS sockets whose port is marked congested (more bytes \
         wait in their receive queue than their receive buffer holds).\n\
         # TYPE rds_sockets_congested gauge\n\
         rds_sockets_congested{{{NAME_LABEL}}} 1\n"
    );
    o
}

/// The queue families and the node's identity: 2 messages (5 + 6 bytes) waiting for C, 2
/// (800 bytes each) in socket 4001's receive queue.
fn queue_info_text() -> String {
    format!(
        "# HELP rds_queued_messages Messages in the send queues (not sent yet), the retransmit \
         queues (sent, not acknowledged yet) and the sockets' receive queues (not read yet).\n\
         # TYPE rds_queued_messages gauge\n\
         rds_queued_messages{{{NAME_LABEL},queue=\"send\"}} 2\n\
         rds_queued_messages{{{NAME_LABEL},queue=\"retransmit\"}} 0\n\
         rds_queued_messages{{{NAME_LABEL},queue=\"receive\"}} 2\n\
         # HELP rds_queued_bytes Payload bytes of the messages in the send, retransmit and \
         receive queues.\n\
         # TYPE rds_queued_bytes gauge\n\
         rds_queued_bytes{{{NAME_LABEL},queue=\"send\"}} 11\n\
         rds_queued_bytes{{{NAME_LABEL},queue=\"retransmit\"}} 0\n\
         rds_queued_bytes{{{NAME_LABEL},queue=\"receive\"}} 1600\n\
         # HELP rds_node_info The node's rds-tools version and RDS protocol version (always \
         1).\n\
         # TYPE rds_node_info gauge\n\
         rds_node_info{{{NAME_LABEL},version=\"{}\",rds_protocol=\"3.1\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Runs a tool whose output holds counters until the node's counters stood still around it;
/// returns the output and the snapshot.
fn steady(run: &Path, node: &Node, name: &str, args: &[&str]) -> (String, InfoSnapshot) {
    for _ in 0..10 {
        let before = snapshot(node);
        let out = run_ok(run, name, args, 0);
        if snapshot(node) == before {
            return (out, before);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the node's state never stood still around {name} {args:?}");
}

/// The parsed families by name.
fn family<'a>(fams: &'a [Family], name: &str) -> &'a Family {
    fams.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

#[test]
fn metrics_and_health_of_a_known_node() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let none = dir.path().join("none");
    std::fs::create_dir_all(&none).unwrap();
    std::env::set_var("RDS_RUNTIME_DIR", &run);

    // No node: UNKNOWN, one line on stdout; stats has nothing to print.
    let out = run_ok(&none, "rds-ctrl", &["health"], 3);
    assert!(
        out.starts_with("RDS UNKNOWN - no RDS node is running") && out.lines().count() == 1,
        "{out}"
    );
    let o = tool(&none, "rds-ctrl", &["stats", "--format", "prometheus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());

    let mut cfg = NodeConfig::new([A.parse::<IpAddr>().unwrap()]);
    cfg.ctl = CtlMode::Named(NAME.into());
    cfg.seed = Some(11);
    let a = Node::start(cfg).unwrap();
    let mut cfg = NodeConfig::new([B.parse::<IpAddr>().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.seed = Some(12);
    let b = Node::start(cfg).unwrap();

    // A node named elsewhere: UNKNOWN too.
    let out = run_ok(&run, "rds-ctrl", &["--node", "nosuch", "health"], 3);
    assert!(out.starts_with("RDS UNKNOWN - "), "{out}");

    // OK: one connection up.
    let a1 = Socket::with_node(&a);
    a1.bind(sa(A, 4000)).unwrap();
    let b1 = Socket::with_node(&b);
    b1.bind(sa(B, 5000)).unwrap();
    for len in [10usize, 20, 30] {
        a1.send_to(&vec![1; len], sa(B, 5000)).unwrap();
    }
    wait_until("delivery to B", || b.recv_queue().len() == 3);
    wait_until("B's acknowledgements", || {
        let s = snapshot(&a);
        s.retrans.is_empty() && s.send.is_empty()
    });
    let drops = |s: &InfoSnapshot| -> u64 {
        s.counters
            .iter()
            .filter(|(n, _)| {
                rds_ctrl_drop_counters().contains(&n.as_str()) && n.as_str() != "conn_reset"
            })
            .map(|(_, v)| v)
            .sum()
    };
    let s = snapshot(&a);
    let resets = s.counters.iter().find(|c| c.0 == "conn_reset").unwrap().1;
    assert_eq!(
        health(&run, 0),
        format!(
            "RDS OK - {NAME_SHOWN}: 1 connection(s) up, 1 socket(s) | connections=1;;;0 \
             connections_up=1;;;0 connections_not_up=0;0;;0 connections_stalled=0;;0;0 \
             sockets=1;;;0 sockets_congested=0;0;;0 messages_waiting=0;;;0 resets={resets}c;;;0 \
             drops={}c;;;0 bounds_hit=0c;;;0",
            drops(&s)
        )
    );

    // WARNING: socket 4001's receive queue over its receive buffer.
    let a2 = Socket::with_node(&a);
    a2.set_recv_buffer_size(1000);
    a2.bind(sa(A, 4001)).unwrap();
    for _ in 0..2 {
        b1.send_to(&[2; 800], sa(A, 4001)).unwrap();
    }
    wait_until("socket 4001 congested", || {
        let s = snapshot(&a);
        s.recv.len() == 2 && s.sockets.iter().any(|k| k.congested)
    });
    let line = health(&run, 1);
    assert!(
        line.starts_with(&format!(
            "RDS WARNING - {NAME_SHOWN}: socket {A}:4001 is congested (its receive queue is over \
             its receive buffer) | connections=1;;;0 connections_up=1;;;0 \
             connections_not_up=0;0;;0 connections_stalled=0;;0;0 sockets=2;;;0 \
             sockets_congested=1;0;;0 messages_waiting=0;;;0 "
        )),
        "{line}"
    );

    // CRITICAL: two messages wait on a connection that cannot come up.
    let (_hole, _filler) = black_hole(C);
    for len in [5usize, 6] {
        a1.send_to(&vec![3; len], sa(C, 6000)).unwrap();
    }
    wait_until("a quiescent state", || {
        let s = snapshot(&a);
        s.send.len() == 2
            && s.retrans.is_empty()
            && s.connections.len() == 2
            && s.connections.iter().all(|c| {
                c.paths.first().is_some_and(|p| {
                    !p.sending
                        && (p.state == PathState::Up
                            || (c.faddr.to_string() == C && p.state == PathState::Connecting))
                })
            })
    });
    let line = health(&run, 2);
    assert!(
        line.starts_with(&format!(
            "RDS CRITICAL - {NAME_SHOWN}: connection {A} -> {C} is CONNECTING (2 message(s) \
             waiting); socket {A}:4001 is congested (its receive queue is over its receive \
             buffer) | connections=2;;;0 connections_up=1;;;0 connections_not_up=1;0;;0 \
             connections_stalled=1;;0;0 sockets=2;;;0 sockets_congested=1;0;;0 \
             messages_waiting=2;;;0 "
        )),
        "{line}"
    );
    let out = run_ok(&run, "rds-ctrl", &["--node", NAME, "--json", "health"], 2);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["status"], "CRITICAL");
    assert_eq!(j["critical"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["warnings"].as_array().unwrap().len(), 1, "{j}");

    // The metrics, byte for byte.
    let args = ["--node", NAME, "stats", "--format", "prometheus"];
    let (all, s) = steady(&run, &a, "rds-ctrl", &args);
    let want = counter_text(&s) + &conn_sock_text() + &queue_info_text();
    assert_eq!(all, want, "rds-ctrl stats --format prometheus");
    let (c, s) = steady(
        &run,
        &a,
        "rds-info",
        &["--node", NAME, "-c", "--format", "prometheus"],
    );
    assert_eq!(c, counter_text(&s), "rds-info -c --format prometheus");
    let nk = run_ok(
        &run,
        "rds-info",
        &["--node", NAME, "-k", "-n", "--format", "prometheus"],
        0,
    );
    assert_eq!(nk, conn_sock_text(), "rds-info -k -n --format prometheus");
    // --json and --format prometheus: one or the other.
    for (t, args) in [
        (
            "rds-ctrl",
            &["--json", "stats", "--format", "prometheus"][..],
        ),
        ("rds-info", &["--json", "--format", "prometheus"]),
    ] {
        let o = tool(&run, t, args);
        assert_ne!(o.status.code(), Some(0), "{t} {args:?}");
        assert!(o.stdout.is_empty(), "{t} {args:?}");
    }

    // Real parsers read them.
    for text in [&all, &c, &nk] {
        prometheus::strict(text).unwrap();
    }
    let fams = prometheus::parse(&all).unwrap();
    assert_eq!(fams.len(), s.counters.len() + 7);
    for ((name, v), f) in s.counters.iter().zip(&fams) {
        // prometheus_client names a counter's family without its `_total`.
        assert_eq!(f.name, format!("rds_{name}"));
        assert_eq!(f.kind, "counter");
        assert_eq!(f.help, rds_core::stats::describe(name).unwrap());
        assert_eq!(f.samples.len(), 1);
        assert_eq!(f.samples[0].name, format!("rds_{name}_total"));
        assert_eq!(
            f.samples[0].labels.iter().collect::<Vec<_>>(),
            [(&"node".to_string(), &NAME.to_string())]
        );
        assert_eq!(f.samples[0].value, *v as f64, "{name}");
    }
    let conns = family(&fams, "rds_connections");
    assert_eq!(conns.kind, "gauge");
    assert_eq!(conns.samples.len(), 6);
    assert_eq!(
        conns.value(&[("transport", "tcp"), ("state", "connecting")]),
        Some(1.0)
    );
    assert_eq!(
        conns.value(&[("transport", "tcp"), ("state", "up")]),
        Some(1.0)
    );
    assert_eq!(family(&fams, "rds_sockets").value(&[]), Some(2.0));
    assert_eq!(family(&fams, "rds_sockets_congested").value(&[]), Some(1.0));
    let bytes = family(&fams, "rds_queued_bytes");
    assert_eq!(bytes.value(&[("queue", "send")]), Some(11.0));
    assert_eq!(bytes.value(&[("queue", "receive")]), Some(1600.0));
    let info = family(&fams, "rds_node_info");
    assert_eq!(info.samples[0].labels["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(prometheus::parse(&c).unwrap().len(), s.counters.len());
    assert_eq!(prometheus::parse(&nk).unwrap().len(), 4);

    drop((a1, a2, b1));
    a.shutdown();
    b.shutdown();
}

/// rds-ctrl's drop counters (health's `drops` perfdata adds up all but `conn_reset`).
fn rds_ctrl_drop_counters() -> [&'static str; 12] {
    [
        "conn_reset",
        "recv_drop_bad_checksum",
        "recv_drop_old_seq",
        "recv_drop_no_sock",
        "recv_drop_dead_sock",
        "send_queue_full",
        "send_stuck_rm",
        "conn_drop_bad_frame",
        "conn_drop_oversize",
        "conn_drop_bad_cong_map",
        "send_drop_peer_restart",
        "tcp_sndbuf_full",
    ]
}
