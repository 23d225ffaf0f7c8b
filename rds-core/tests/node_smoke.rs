//! Two nodes in one process over real TCP on loopback addresses: data both ways, a ping, a
//! 1 MiB message, and one lane written both by sending threads and by the I/O thread. The
//! receiver runs on its own thread: a blocking sender to a congested port waits for the
//! receiver to read, as in the kernel.

use std::net::SocketAddr;
use std::time::Duration;

use rds_core::{Node, NodeConfig, Socket};

fn node(ip: &str) -> Node {
    Node::start(NodeConfig::new([ip.parse().unwrap()])).unwrap()
}

#[test]
fn two_nodes_exchange_messages_and_pings() {
    let a = node("127.0.0.1");
    let b = node("127.0.0.2");
    let sa = Socket::with_node(&a);
    let sb = Socket::with_node(&b);
    let aa = sa.bind("127.0.0.1:4000".parse().unwrap()).unwrap();
    let ba = sb.bind("127.0.0.2:5000".parse().unwrap()).unwrap();
    sb.set_read_timeout(Some(Duration::from_secs(10)));
    sa.set_read_timeout(Some(Duration::from_secs(10)));
    sa.set_write_timeout(Some(Duration::from_secs(10)));
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut buf = vec![0u8; 1 << 20];
            for i in 0..300u32 {
                let (n, from) = sb.recv_from(&mut buf).unwrap();
                assert_eq!(from, aa);
                assert_eq!(n, (i as usize % 100) * 37, "message {i}");
                assert!(buf[..n].iter().all(|&x| x == i as u8));
            }
        });
        for i in 0..300u32 {
            let msg = vec![i as u8; (i as usize % 100) * 37];
            assert_eq!(sa.send_to(&msg, ba).unwrap(), msg.len());
        }
        rx.join().unwrap();
    });
    // Ping: a zero-length message to port 0 comes back from port 0.
    let pinger = Socket::with_node(&a);
    pinger.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    pinger.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..3 {
        pinger.send_to(&[], "127.0.0.2:0".parse().unwrap()).unwrap();
        let (n, from) = pinger.recv_from(&mut buf).unwrap();
        assert_eq!((n, from), (0, "127.0.0.2:0".parse::<SocketAddr>().unwrap()));
    }
    // A 1 MiB message back.
    let big: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    sb.set_send_buffer_size(4 << 20);
    sa.set_recv_buffer_size(4 << 20);
    sb.send_to(&big, aa).unwrap();
    let (n, _) = sa.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], &big[..]);
    let conns = a.connections();
    assert!(conns
        .iter()
        .any(|c| c.faddr.to_string() == "127.0.0.2" && c.npaths == 8));
    a.shutdown();
    b.shutdown();
}

/// Request/response (the sending thread writes an idle lane itself) and then bursts that mix
/// small messages with ones past the 16 KiB the sending thread writes (the I/O thread writes
/// those) on one lane, through a send buffer small enough that the sender blocks: every
/// message arrives once, in order, with its bytes.
#[test]
fn caller_writes_and_io_thread_writes_keep_one_order() {
    let a = node("127.19.2.1");
    let b = node("127.19.2.2");
    let sa = Socket::with_node(&a);
    let sb = Socket::with_node(&b);
    let aa = sa.bind("127.19.2.1:4100".parse().unwrap()).unwrap();
    let ba = sb.bind("127.19.2.2:4200".parse().unwrap()).unwrap();
    for s in [&sa, &sb] {
        s.set_read_timeout(Some(Duration::from_secs(10)));
        s.set_write_timeout(Some(Duration::from_secs(10)));
    }
    let mut buf = vec![0u8; 1 << 20];
    // Ping-pong: each request answered before the next.
    for i in 0..200u32 {
        sa.send_to(&i.to_be_bytes(), ba).unwrap();
        let (n, from) = sb.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&i.to_be_bytes()[..], aa), "request {i}");
        sb.send_to(&(i ^ 0xffff_ffff).to_be_bytes(), aa).unwrap();
        let (n, from) = sa.recv_from(&mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&(i ^ 0xffff_ffff).to_be_bytes()[..], ba)
        );
    }
    // Bursts of mixed sizes through a 256 KiB send buffer.
    const SIZES: [usize; 7] = [4, 65_536, 48, 65_537, 200_000, 4, 1000];
    sa.set_send_buffer_size(256 << 10);
    sb.set_recv_buffer_size(8 << 20);
    let msg = |i: usize| -> Vec<u8> {
        let mut m = vec![(i % 251) as u8; SIZES[i % SIZES.len()]];
        m[..4].copy_from_slice(&(i as u32).to_be_bytes());
        m
    };
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut buf = vec![0u8; 1 << 20];
            for i in 0..700 {
                let (n, from) = sb.recv_from(&mut buf).unwrap();
                assert_eq!(from, aa);
                assert!(buf[..n] == msg(i)[..], "message {i}: {n} bytes");
            }
        });
        for i in 0..700 {
            assert_eq!(sa.send_to(&msg(i), ba).unwrap(), SIZES[i % SIZES.len()]);
        }
        rx.join().unwrap();
    });
}
