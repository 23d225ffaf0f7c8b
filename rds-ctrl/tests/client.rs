//! Applications' sockets go through a loaded daemon (as rds-ping and rds-stress do): a plain
//! `rds_core::Socket::new()` bound to the daemon's address is served by the daemon, pings to
//! port 0 are answered by it, and `rds-info` through `rds-ctrl info` sees the sockets.
//!
//! One test per file: this process points `RDS_RUNTIME_DIR` at the test's runtime directory.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{status, Daemon, Env};
use rds_core::Socket;

#[test]
fn sockets_use_the_daemon_that_owns_their_address() {
    let env = Env::new();
    std::env::set_var("RDS_RUNTIME_DIR", &env.run);
    let mut d = Daemon::load(&env, "127.0.0.52");
    let a = Socket::new().unwrap();
    let b = Socket::new().unwrap();
    let a_addr = a.bind("127.0.0.52:0".parse().unwrap()).unwrap();
    let b_addr = b.bind("127.0.0.52:6001".parse().unwrap()).unwrap();
    assert!(a.via_daemon() && b.via_daemon());
    a.set_read_timeout(Some(Duration::from_secs(10)));
    b.set_read_timeout(Some(Duration::from_secs(10)));
    for i in 0..50u32 {
        a.send_to(&i.to_be_bytes(), b_addr).unwrap();
    }
    let mut buf = [0u8; 16];
    for i in 0..50u32 {
        let (n, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&i.to_be_bytes()[..], a_addr));
    }
    // A ping (port 0) is answered by the daemon's node.
    let ping: SocketAddr = "127.0.0.52:0".parse().unwrap();
    a.send_to(b"", ping).unwrap();
    let (n, from) = a.recv_from(&mut buf).unwrap();
    assert_eq!((n, from), (0, ping));
    // The daemon shows both sockets.
    let s = status(&env.run(&["info", "-k"]), 0);
    assert!(
        s.contains(&format!("{:>15} {:>5}", "127.0.0.52", b_addr.port())),
        "{s}"
    );
    assert_eq!(s.lines().count(), 5, "{s}");
    let v: serde_json::Value =
        serde_json::from_str(&status(&env.run(&["stats", "--json"]), 0)).unwrap();
    assert!(v["recv_ping"].as_u64().unwrap() >= 1);
    drop((a, b));
    d.unload();
}
