//! The host daemon against hostile local clients, round 2 (issue 30): each attack runs as an
//! attacker would run it, from uid 65534 through `rds-hostile-client` (a copy in the daemon's
//! 0755 directory), against `rds-ctrl daemon tcp` with its own runtime directory, and each
//! case asserts that the daemon keeps answering root and other users and stops on SIGTERM.
//!
//! - freeze: a ring client makes every descriptor the daemon shares with it blocking and full,
//!   watches both directions and rings: the daemon keeps serving everyone, with the attacker
//!   connected and after it left, and stops on SIGTERM within 5 s.
//!
//! Addresses: 127.172.N.0/24 for case N; the daemon is 127.172.N.200. Needs root (children run
//! as other uids).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use rds_tests::hostdaemon::{Holder, HostDaemon};

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
    let mut d = HostDaemon::start(ip(1, 200), None, &[]);
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
