//! Congestion over RDS/TCP between two nodes (issue 3, tests: "a slow receiver makes senders
//! see ENOBUFS and then a congestion-update notification, with no message lost"): the
//! receiver's port becomes congested when its queue passes its receive buffer, the node sends
//! its congestion map, non-blocking senders get ENOBUFS and blocking ones wait; once the
//! receiver reads, the map clears the port and a sender with `RDS_CONG_MONITOR` gets a
//! notification (`RDS_CMSG_CONG_UPDATE`, bit `port % 64`).
//!
//! Addresses: 127.3.5.0/24.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("congestion-{ip}");
    Node::start(cfg).unwrap()
}

fn msg(i: u32) -> Vec<u8> {
    let mut m = vec![(i % 251) as u8; 4096];
    m[..4].copy_from_slice(&i.to_be_bytes());
    m
}

#[test]
fn slow_receiver_enobufs_then_cong_update_without_loss() {
    let na = node("127.3.5.1");
    let nb = node("127.3.5.2");
    let (sa, ra) = (a("127.3.5.1:7001"), a("127.3.5.2:7000"));
    let tx = Socket::with_node(&na);
    tx.set_send_buffer_size(4 << 20);
    tx.set_cong_monitor(true);
    tx.bind(sa).unwrap();
    tx.set_read_timeout(Some(Duration::from_secs(10)));
    tx.set_write_timeout(Some(Duration::from_secs(20)));
    let rx = Socket::with_node(&nb);
    rx.set_recv_buffer_size(64 << 10);
    rx.bind(ra).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(10)));

    // Send without blocking until the peer's map says the port is congested.
    let mut sent = 0u32;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(
            Instant::now() < deadline,
            "no ENOBUFS after {sent} messages"
        );
        assert!(sent < 100_000, "no ENOBUFS after {sent} messages");
        match tx.send_bytes(msg(sent).into(), Some(ra), true) {
            Ok(n) => {
                assert_eq!(n, 4096);
                sent += 1;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => break,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("send {sent}: {e}"),
        }
    }
    assert!(
        sent >= 16,
        "the receiver took only {sent} messages before congesting"
    );
    assert!(na.counter(Counter::CongSendError) >= 1);
    assert!(nb.counter(Counter::CongUpdateQueued) >= 1);
    assert!(na.counter(Counter::CongUpdateReceived) >= 1);
    // Still congested: no notification yet.
    let mut b = vec![0u8; 8192];
    let dontwait = RecvFlags {
        dontwait: true,
        ..Default::default()
    };
    assert_eq!(
        tx.recv_msg(&mut b, dontwait).unwrap_err().raw_os_error(),
        Some(libc::EAGAIN)
    );

    // A blocking sender waits for the port while the receiver does not read.
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let blocked = sc.spawn(|| {
            let r = tx.send_to(&msg(sent), ra);
            done.store(true, Ordering::SeqCst);
            r
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !done.load(Ordering::SeqCst),
            "a blocking send to a congested port returned while the receiver was not reading"
        );
        // The receiver reads: every message, in order, exactly once.
        let mut buf = vec![0u8; 8192];
        for i in 0..=sent {
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(from, sa);
            assert_eq!(&buf[..n], &msg(i)[..], "message {i} of {}", sent + 1);
        }
        assert_eq!(blocked.join().unwrap().unwrap(), 4096);
    });
    sent += 1;
    assert!(na.counter(Counter::CongSendBlocked) >= 1);

    // The monitor reports the port as uncongested: bit 7000 % 64.
    let m = tx.recv_msg(&mut b, RecvFlags::default()).unwrap();
    assert_eq!(m.from, None);
    let mask = m.cong_update.expect("a congestion update");
    assert_ne!(mask & (1u64 << (7000 % 64)), 0, "mask {mask:#x}");
    // Sending works again, and nothing is lost or duplicated.
    for i in sent..sent + 10 {
        tx.send_bytes(msg(i).into(), Some(ra), true).unwrap();
    }
    let mut buf = vec![0u8; 8192];
    for i in sent..sent + 10 {
        let (n, _) = rx.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &msg(i)[..]);
    }
    assert_eq!(
        rx.recv_msg(&mut buf, dontwait).unwrap_err().raw_os_error(),
        Some(libc::EAGAIN)
    );
    assert_eq!(nb.counter(Counter::RecvDelivered), u64::from(sent) + 10);
    assert_eq!(nb.counter(Counter::RecvDropNoSock), 0);
    na.shutdown();
    nb.shutdown();
}
