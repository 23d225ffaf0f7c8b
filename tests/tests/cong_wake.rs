//! A blocking send to a congested destination through the host daemon's shared-memory ring
//! (issue 32, "congestion that wakes, never sleeps"): it waits on the ring's congestion bell,
//! which the daemon rings when the destination's congestion map changes, and returns once
//! the receiver reads, after one or two attempts that met congestion (the daemon's
//! `cong_send_error`), not a timer's worth of retries (the back-off before it retried about
//! 35 times in the 300 ms the receiver waits here). `SO_SNDTIMEO` still ends the wait
//! (`ETIMEDOUT`), and so does the daemon going away (`ECONNRESET`).
//!
//! Addresses: 127.20.3.0/24 (this file's range).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rds_core::Socket;

const MSG: usize = 4096;

/// Sends without blocking until the destination is congested; returns how many were queued.
fn congest(tx: &Socket, to: SocketAddr) -> usize {
    let msg = vec![b'c'; MSG];
    let mut queued = 0;
    for _ in 0..100_000 {
        match tx.send_bytes(msg.clone().into(), Some(to), true) {
            Ok(n) => {
                assert_eq!(n, MSG);
                queued += 1;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return queued,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                tx.wait(false, true, Duration::from_secs(1)).unwrap();
            }
            Err(e) => panic!("send after {queued}: {e}"),
        }
    }
    panic!("no congestion after {queued} messages");
}

#[test]
fn a_congested_blocking_send_wakes_when_the_receiver_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.3.1", "127.20.3.2"]);
    // The only test of this file: it alone sets the environment.
    rds_tests::use_daemon_rings(dir.path());
    let tx = Socket::new().unwrap();
    let rx = Socket::new().unwrap();
    rx.set_recv_buffer_size(16 << 10);
    tx.bind("127.20.3.1:6000".parse().unwrap()).unwrap();
    rx.bind("127.20.3.2:6001".parse().unwrap()).unwrap();
    assert!(tx.via_ring() && rx.via_ring(), "no ring");
    rx.set_read_timeout(Some(Duration::from_secs(20)));
    let to: SocketAddr = "127.20.3.2:6001".parse().unwrap();
    let queued = congest(&tx, to);
    assert!(queued >= 4, "congested after {queued} messages");

    // SO_SNDTIMEO ends the wait.
    tx.set_write_timeout(Some(Duration::from_millis(100)));
    let e = tx.send_to(&[b'c'; MSG], to).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}");

    // Blocked until the receiver reads; the congestion map's update wakes it.
    tx.set_write_timeout(Some(Duration::from_secs(30)));
    let before = rds_tests::daemon_counter(&sock, "cong_send_error");
    let reading = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            reading.store(true, Ordering::SeqCst);
            let mut buf = [0u8; 8192];
            for i in 0..=queued {
                let (n, _) = rx
                    .recv_from(&mut buf)
                    .unwrap_or_else(|e| panic!("message {i}: {e}"));
                assert_eq!(n, MSG);
            }
        });
        assert_eq!(tx.send_to(&[b'c'; MSG], to).unwrap(), MSG);
        assert!(
            reading.load(Ordering::SeqCst),
            "the send returned before the receiver read"
        );
    });
    let attempts = rds_tests::daemon_counter(&sock, "cong_send_error") - before;
    assert!(
        (1..=3).contains(&attempts),
        "{attempts} attempts met congestion"
    );

    // The daemon going away ends a wait.
    congest(&tx, to);
    std::thread::scope(|s| {
        let w = s.spawn(|| tx.send_to(&[b'c'; MSG], to));
        std::thread::sleep(Duration::from_millis(100));
        drop(daemon);
        let e = w.join().unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
    });
}
