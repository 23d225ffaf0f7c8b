//! Waits of daemon client sockets that the shared-memory ring settles without polling
//! (issue 32): a wait for room returns while the room the daemon last reported lasts, a wait
//! for a message while one is held or pushed; neither reports a direction that is not ready,
//! and a daemon that went away is still seen by the next send. Between two sockets of this
//! process on the host daemon (`rds-ctrl daemon tcp`, a child process).
//!
//! Addresses: 127.20.7.0/24 (this file's range).

use std::net::SocketAddr;
use std::time::Duration;

use rds_core::{RecvFlags, Socket};

#[test]
fn ring_waits_report_only_ready_directions_and_a_gone_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, _sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.7.1", "127.20.7.2"]);
    // The only test of this file: it alone sets the environment.
    rds_tests::use_daemon_rings(dir.path());

    let rx = Socket::new().unwrap();
    let tx = Socket::new().unwrap();
    rx.bind("127.20.7.2:5000".parse().unwrap()).unwrap();
    tx.bind("127.20.7.1:5001".parse().unwrap()).unwrap();
    assert!(rx.via_ring() && tx.via_ring(), "no ring");
    let dest: SocketAddr = "127.20.7.2:5000".parse().unwrap();
    let short = Duration::from_millis(200);
    let long = Duration::from_secs(20);

    // Nothing sent: a wait for a message times out, and says so.
    assert_eq!(rx.wait(true, false, short).unwrap(), (false, false));
    let mut buf = [0u8; 64];
    for round in 0..200u32 {
        // The first send is waited for (it learns the room), the later ones are posted; a
        // wait for room says writable either way.
        let (_, w) = tx.wait(false, true, long).unwrap();
        assert!(w, "round {round}: a socket with room not writable");
        tx.send_to(&round.to_be_bytes(), dest).unwrap();
        let (r, _) = rx.wait(true, false, long).unwrap();
        assert!(
            r,
            "round {round}: the message never made the socket readable"
        );
        let m = rx.recv_msg(&mut buf, RecvFlags::default()).unwrap();
        assert_eq!(&buf[..m.len], &round.to_be_bytes(), "round {round}");
        // Taken: the next wait must not report a message that is not there.
        if round % 50 == 0 {
            assert!(
                !rx.wait(true, false, short).unwrap().0,
                "round {round}: readable with nothing queued"
            );
        }
    }
    rds_tests::assert_nothing_to_receive(&rx);

    // The daemon goes away: the next send (its sends are posted now) says so, as does every
    // call after it.
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let e = tx.send_to(b"after", dest).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
    let e = tx.send_to(b"again", dest).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
}
