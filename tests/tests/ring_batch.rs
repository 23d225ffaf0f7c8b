//! Daemon client sockets that do not wait on the daemon (issue 19): sends posted to the
//! shared-memory ring without waiting for their result, and receives that bring several
//! messages per round trip. Between two sockets of this process on the host daemon
//! (`rds-ctrl daemon tcp`, a child process):
//! - thousands of messages of mixed sizes arrive complete and in order, whether the receiver's
//!   buffer holds them whole or cuts the long ones (a message a batch brought is never cut
//!   by the buffer of the receive that fetched it);
//! - a receiver that takes one message per wake of its level-triggered readiness descriptor
//!   never waits while messages it already holds are queued;
//! - a sender flooding a receiver whose buffer is small meets congestion (the daemon's
//!   `cong_send_error` grows) and still loses nothing and reorders nothing;
//! - 2,000 requests and answers one at a time, each side waiting on its descriptor, with no
//!   message left over on either side after each round;
//! - `RDS_CANCEL_SENT_TO` right after posted sends sees them (the ring is emptied first).
//!
//! Addresses: 127.20.1.0/24 (this file's range).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rds_core::{RecvFlags, Socket};

/// Message `i`: 10 bytes, 1000 bytes or 20,000 bytes, numbered in its first 4.
fn message(i: u32) -> Vec<u8> {
    let len = [10, 1000, 10, 20_000, 10][i as usize % 5];
    let mut m: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
    m[..4].copy_from_slice(&i.to_be_bytes());
    m
}

/// Receives messages `from..to` on `rx`, with a buffer of `buf_len` bytes, waiting on the
/// readiness descriptor before every receive when `poll_each`.
fn receive_in_order(rx: &Socket, from: u32, to: u32, buf_len: usize, poll_each: bool) {
    let mut buf = vec![0u8; buf_len];
    for i in from..to {
        if poll_each {
            let fd = rx.fd().unwrap();
            assert!(
                rds_core::poll_readable(&[fd], Duration::from_secs(20)).unwrap()[0],
                "message {i}: the readiness descriptor stayed clear"
            );
        }
        let m = rx
            .recv_msg(&mut buf, RecvFlags::default())
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
        let want = message(i);
        assert_eq!(m.full_len, want.len(), "message {i}: full length");
        assert_eq!(m.truncated, want.len() > buf_len, "message {i}: truncation");
        let n = want.len().min(buf_len);
        assert_eq!(m.len, n, "message {i}: length");
        assert!(buf[..n] == want[..n], "message {i}: contents");
    }
}

#[test]
fn posted_sends_and_batched_receives_keep_order_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.1.1", "127.20.1.2"]);
    // The only test of this file: it alone sets the environment.
    rds_tests::use_daemon_rings(dir.path());

    let rx = Socket::new().unwrap();
    let tx = Socket::new().unwrap();
    rx.bind("127.20.1.2:5000".parse().unwrap()).unwrap();
    tx.bind("127.20.1.1:5001".parse().unwrap()).unwrap();
    assert!(rx.via_ring() && tx.via_ring(), "no ring");
    // Room for a whole run (8.4 MB) before the receiver starts.
    rx.set_recv_buffer_size(16 << 20);
    for s in [&rx, &tx] {
        s.set_read_timeout(Some(Duration::from_secs(20)));
        s.set_write_timeout(Some(Duration::from_secs(20)));
    }
    let dest: SocketAddr = "127.20.1.2:5000".parse().unwrap();
    let send = |from: u32, to: u32| {
        for i in from..to {
            let m = message(i);
            assert_eq!(tx.send_to(&m, dest).unwrap(), m.len(), "message {i}");
        }
    };

    // 1. Everything queued before the receiver starts: its batches bring many at once.
    const N: u32 = 2000;
    send(0, N);
    receive_in_order(&rx, 0, N, 32 << 10, false);
    // 2. A buffer that cuts the 1000- and 20,000-byte messages: only those are cut.
    send(N, 2 * N);
    receive_in_order(&rx, N, 2 * N, 100, false);
    // 3. One message per readiness wake, all 40 queued at the receiver's socket before the
    // first receive: its batches bring 32, then 8, and the last 7 are held by this process
    // while the daemon's socket is empty.
    let queued = rds_tests::daemon_counter(&sock, "recv_queued");
    send(2 * N, 2 * N + 40);
    let end = Instant::now() + Duration::from_secs(20);
    while rds_tests::daemon_counter(&sock, "recv_queued") < queued + 40 {
        assert!(Instant::now() < end, "40 messages not queued after 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    receive_in_order(&rx, 2 * N, 2 * N + 40, 32 << 10, true);
    send(2 * N + 40, 3 * N);
    receive_in_order(&rx, 2 * N + 40, 3 * N, 32 << 10, true);
    rds_tests::assert_nothing_to_receive(&rx);

    // 4. Congestion: a 16 KiB receive buffer, a sender far ahead of a slow receiver.
    rx.set_recv_buffer_size(16 << 10);
    let cong_before = rds_tests::daemon_counter(&sock, "cong_send_error");
    std::thread::scope(|s| {
        s.spawn(|| send(3 * N, 5 * N));
        std::thread::sleep(Duration::from_millis(300));
        receive_in_order(&rx, 3 * N, 5 * N, 32 << 10, false);
    });
    let cong = rds_tests::daemon_counter(&sock, "cong_send_error") - cong_before;
    println!("{} messages in order; congestion met {cong} times", 5 * N);
    assert!(cong > 0, "the sender never met congestion");

    // 5. Request and answer, one at a time, each side waiting on its readiness descriptor
    // (the pushed messages, and the descriptor the client clears itself, at depth 1).
    let from: SocketAddr = "127.20.1.1:5001".parse().unwrap();
    let mut buf = [0u8; 64];
    for i in 0..2000u32 {
        tx.send_to(&i.to_be_bytes(), dest).unwrap();
        for (s, peer) in [(&rx, from), (&tx, dest)] {
            let fd = s.fd().unwrap();
            assert!(
                rds_core::poll_readable(&[fd], Duration::from_secs(20)).unwrap()[0],
                "round {i}: no answer"
            );
            let m = s.recv_msg(&mut buf, RecvFlags::default()).unwrap();
            assert_eq!((m.len, m.from), (4, Some(peer)), "round {i}");
            assert_eq!(buf[..4], i.to_be_bytes(), "round {i}");
            if s.local_addr().unwrap() == dest {
                rx.send_to(&buf[..4], from).unwrap();
            }
        }
        // Nothing more on either side, and the descriptors say so.
        for s in [&rx, &tx] {
            rds_tests::assert_nothing_to_receive(s);
            let fd = s.fd().unwrap();
            assert!(
                !rds_core::poll_readable(&[fd], Duration::ZERO).unwrap()[0],
                "round {i}: readable with nothing queued"
            );
        }
    }

    // 6. Cancel right after posted sends to an address that never answers (127.20.1.9 has no
    // node): it drops every one of them.
    let gone: SocketAddr = "127.20.1.9:5000".parse().unwrap();
    let m = message(0);
    assert_eq!(tx.send_to(&m, gone).unwrap(), m.len());
    for _ in 0..50 {
        assert_eq!(tx.send_to(&m, gone).unwrap(), m.len());
    }
    assert_eq!(tx.cancel_sent_to(gone).unwrap(), 51);
}
