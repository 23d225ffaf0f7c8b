//! The host daemon against hostile local clients, round 2 (issue 30): each attack runs as an
//! attacker would run it, from uid 65534 through `rds-hostile-client` (a copy in the daemon's
//! 0755 directory), against `rds-ctrl daemon tcp` with its own runtime directory, and each
//! case asserts that the daemon keeps answering root and other users and stops on SIGTERM.
//!
//! - 1, freeze: a ring client makes every descriptor the daemon shares with it blocking and
//!   full, watches both directions and rings: the daemon keeps serving everyone, with the
//!   attacker connected and after it left, and stops on SIGTERM within 5 s.
//! - 4, one user takes the budget: uid 65534 opens eight sockets asking for 64 MiB buffers
//!   (it gets the host's `net.core.{w,r}mem_max`) and never reads them while a peer that
//!   ignores congestion floods them: that user holds at most its share of the node budget
//!   (`net.rds.uid_mem_share`, 25% of 64 MiB here), the rest is dropped and counted, and root's
//!   socket still receives and sends.
//! - 5, low ports: uid 65534 cannot bind port 80 through the daemon, also not as root of its
//!   own user namespace; with `CAP_NET_BIND_SERVICE` in the daemon's namespace it can.
//! - 6, attach slots: 300,000 `SockAttach` requests on one connection get 64 slots.
//!
//! Addresses: 127.172.N.0/24 for case N; the daemon is 127.172.N.200. Needs root (children run
//! as other uids).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use rds_tests::hostdaemon::{run_bounded, wait_for, Holder, HostDaemon};
use rds_tests::raw;

/// The attacker's uid, and another unprivileged user's.
const ATTACKER: u32 = 65534;
const BYSTANDER: u32 = 65533;

fn ip(case: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 172, case, host)
}

#[track_caller]
fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs children as other uids: run it as root"
    );
}

/// Another user's hello through its own copy of the client: answered within 10 s.
#[track_caller]
fn bystander_is_answered(d: &HostDaemon) {
    let sock = d.sock_path();
    let mut c = d.tool_as("rds-hostile-client", BYSTANDER);
    c.arg("hello").arg(&sock);
    let out = rds_tests::hostdaemon::run_bounded(c, Duration::from_secs(10), "hello as uid 65533");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("done hello daemon"),
        "uid {BYSTANDER} got no answer: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Root's sockets through the daemon's rings carry a message both ways.
#[track_caller]
fn root_rings_work(a: &rds_core::Socket, b: &rds_core::Socket, round: u8) {
    let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    a.send_to(&[round; 100], ba)
        .expect("root's send through the ring");
    let mut buf = [0u8; 200];
    let got = b
        .recv_from(&mut buf)
        .expect("root's receive through the ring");
    assert_eq!((got.0, got.1), (100, aa));
    assert!(buf[..100].iter().all(|&x| x == round));
    b.send_to(&[round; 7], aa).unwrap();
    assert_eq!(a.recv_from(&mut buf).unwrap().0, 7);
}

#[test]
fn a_client_cannot_freeze_the_daemon() {
    require_root();
    let mut d = HostDaemon::start(ip(1, 200), None, "");
    rds_tests::use_daemon_rings(d.dir());
    let a = rds_core::Socket::new().unwrap();
    let b = rds_core::Socket::new().unwrap();
    a.bind(SocketAddr::new(ip(1, 200).into(), 5000)).unwrap();
    b.bind(SocketAddr::new(ip(1, 200).into(), 5001)).unwrap();
    assert!(a.via_ring() && b.via_ring(), "root's sockets have no ring");
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10)));
        s.set_write_timeout(Some(Duration::from_secs(10)));
    }
    root_rings_work(&a, &b, 1);

    let mut c = d.tool_as("rds-hostile-client", ATTACKER);
    c.arg("freeze")
        .arg(d.sock_path())
        .arg(format!("{}:4000", ip(1, 200)));
    let attacker = Holder::start(c, "the freeze attack");
    assert!(
        attacker.line.starts_with("done freeze "),
        "{}",
        attacker.line
    );
    eprintln!("FIGURE freeze: {}", attacker.line);
    // The daemon has served the attacker's doorbell by now (it serves rings at once).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        d.answers_within(Duration::from_secs(5)),
        "root's hello is not answered while the attacker holds its descriptors:\n{}",
        d.log()
    );
    bystander_is_answered(&d);
    root_rings_work(&a, &b, 2);

    attacker.release();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        d.answers_within(Duration::from_secs(5)),
        "root's hello is not answered after the attacker left:\n{}",
        d.log()
    );
    bystander_is_answered(&d);
    root_rings_work(&a, &b, 3);
    d.assert_alive();
    drop((a, b));
    let took = d.terminate_within(Duration::from_secs(5));
    eprintln!("FIGURE freeze: the daemon stopped {took:?} after SIGTERM");
}

/// The host's `net.core.NAME`.
fn core_sysctl(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

const MIB: usize = 1 << 20;

#[test]
fn one_user_holds_at_most_its_share_of_the_budget() {
    require_root();
    let budget = 64 * MIB;
    let d = HostDaemon::start(
        ip(4, 200),
        None,
        &format!("net.rds.mem_budget = {budget}\nnet.rds.uid_mem_share = 25\n"),
    );
    let share = budget / 100 * 25;
    let sock = d.sock_path();
    let mut c = d.tool_as("rds-hostile-client", ATTACKER);
    c.arg("bufs")
        .arg(&sock)
        .arg(format!("{}:6000", ip(4, 200)))
        .arg("8")
        .arg((64 * MIB).to_string());
    let attacker = Holder::start(c, "uid 65534's eight sockets");
    let caps = format!("{}/{}", core_sysctl("wmem_max"), core_sysctl("rmem_max"));
    assert_eq!(
        attacker.line,
        format!("done bufs {}", [caps.as_str(); 8].join(" ")),
        "64 MiB buffers are capped at the host's wmem_max/rmem_max for uid {ATTACKER}"
    );
    // Root's socket, through the daemon too.
    let mut c = d.tool("rds-hostile-client");
    c.arg("echo").arg(format!("{}:7000", ip(4, 200)));
    let root = Holder::start(c, "root's echo socket");
    assert_eq!(root.line, format!("done echo {}:7000 daemon", ip(4, 200)));

    let start = d.proc();
    let before = d.stat("recv_drop_no_mem");
    // A peer that ignores the congestion map: 48 MiB to the attacker's sockets.
    let mut s = raw::connect_lane(ip(4, 1), ip(4, 200), 0, None);
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let payload = vec![0x5a_u8; 64 << 10];
    let n = 48 * MIB / payload.len();
    for i in 0..n {
        raw::send_data(&mut s, i as u64 + 1, 5000, 6000 + (i % 8) as u16, &payload).unwrap();
    }
    let attacker_queued = |d: &HostDaemon| -> u64 {
        let snap = d.snapshot();
        snap.recv
            .iter()
            .filter(|m| (6000..6008).contains(&m.lport))
            .map(|m| u64::from(m.len))
            .sum::<u64>()
            + snap.omitted.recv_bytes
    };
    wait_for(
        "the flood to be queued or dropped",
        Duration::from_secs(60),
        || {
            d.stat("recv_drop_no_mem") - before > 0 && {
                let q = attacker_queued(&d);
                std::thread::sleep(Duration::from_millis(200));
                q == attacker_queued(&d)
            }
        },
    );
    let held = attacker_queued(&d);
    let dropped = d.stat("recv_drop_no_mem") - before;
    // Root's socket still receives a message from the same peer and answers it.
    raw::send_data(&mut s, n as u64 + 1, 5000, 7000, b"hello").unwrap();
    let echo = raw::read_until(&mut s, Duration::from_secs(10), |h, p| {
        h.sport == 7000 && h.dport == 5000 && p == b"hello"
    });
    let during = d.proc();
    eprintln!(
        "FIGURE share: uid {ATTACKER} asked for 8 x 64 MiB buffers, got {caps}; a peer sent it \
         {} MiB: {:.1} MiB queued (share {} MiB), {dropped} messages dropped (recv_drop_no_mem); \
         root's echo {}; daemon RSS {} KiB at start, {} KiB after",
        n * payload.len() / MIB,
        held as f64 / MIB as f64,
        share / MIB,
        if echo.is_some() { "answered" } else { "lost" },
        start.rss_kib,
        during.rss_kib,
    );
    assert!(
        held as usize <= share,
        "uid {ATTACKER}'s sockets hold {held} bytes, its share is {share}"
    );
    assert!(
        dropped > 0,
        "the messages past the share are dropped and counted"
    );
    assert!(
        echo.is_some(),
        "root's socket got nothing or could not answer"
    );
    assert!(
        during.rss_kib.saturating_sub(start.rss_kib) < (budget as u64 + 32 * MIB as u64) / 1024,
        "the daemon grew by more than its budget"
    );
    root.release();
    attacker.release();
    d.survives();
}

#[test]
fn low_ports_need_the_capability_in_the_daemons_namespace() {
    require_root();
    let d = HostDaemon::start(ip(5, 200), None, "");
    let sock = d.sock_path().to_string_lossy().into_owned();
    let at80 = format!("{}:80", ip(5, 200));
    let bind = |mut c: std::process::Command, what: &str| -> String {
        c.args(["bind", &sock, &at80]);
        let mut h = Holder::start(c, what);
        let line = std::mem::take(&mut h.line);
        h.release();
        line
    };
    let denied = "done bind error 13";
    assert_eq!(
        bind(d.tool_as("rds-hostile-client", ATTACKER), "plain"),
        denied
    );
    // Root of its own user namespace (a full capability set there) is nobody here.
    assert_eq!(
        bind(
            d.setpriv(
                ATTACKER,
                &[],
                &["unshare", "-U", "-r"],
                "rds-hostile-client"
            ),
            "userns"
        ),
        denied
    );
    // The capability held in the daemon's namespace is enough, as for the kernel's bind.
    let ok = format!("done bind ok {at80}");
    assert_eq!(
        bind(
            d.setpriv(
                ATTACKER,
                &[
                    "--inh-caps=+net_bind_service",
                    "--ambient-caps=+net_bind_service"
                ],
                &[],
                "rds-hostile-client"
            ),
            "with CAP_NET_BIND_SERVICE"
        ),
        ok
    );
    d.survives();
}

#[test]
fn attach_slots_per_connection_are_capped() {
    require_root();
    let d = HostDaemon::start(ip(6, 200), None, "");
    let start = d.proc();
    let mut c = d.tool_as("rds-hostile-client", ATTACKER);
    c.arg("attach").arg(d.sock_path()).arg("300000");
    let out = run_bounded(c, Duration::from_secs(120), "300,000 attaches");
    let line = String::from_utf8_lossy(&out.stdout);
    let after = d.proc();
    eprintln!(
        "FIGURE attach: {}; daemon RSS {} KiB at start, {} KiB after",
        line.trim(),
        start.rss_kib,
        after.rss_kib
    );
    assert!(
        line.starts_with(&format!(
            "done attach {} of 300000; first error: ",
            rds_core::socket::host::ATTACHED_PER_CONN
        )) && line.contains("too many attached sockets on this connection"),
        "{line}"
    );
    d.survives();
}
