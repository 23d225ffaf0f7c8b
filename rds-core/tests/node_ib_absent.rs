//! A node asked to run IB on a host where it cannot (this host has no RDMA devices, or no
//! rdma-core at all): it starts, says why IB is absent (the same reason as
//! `ib::availability()`), refuses IB sockets with ENOPROTOOPT, and TCP works as before. On a
//! host whose RDMA devices do not hold these loopback addresses, IB runs but serves none of
//! them, so the same socket checks hold.

use std::net::SocketAddr;
use std::time::Duration;

use rds_core::proto::TransportKind;
use rds_core::{ib, CtlMode, Node, NodeConfig, Socket, Transports};

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.transports = Transports {
        tcp: true,
        ib: true,
    };
    Node::start(cfg).expect("a node with IB asked for starts anyway")
}

#[test]
fn ib_unavailable_is_reported_and_tcp_still_works() {
    let a = node("127.77.0.1");
    let b = node("127.77.0.2");
    match ib::availability() {
        Err(e) => {
            assert_eq!(a.ib_unavailable(), Some(e.to_string()));
            assert!(!a.ib_running());
        }
        Ok(_) => {
            assert_eq!(a.ib_unavailable(), None);
            assert!(a.ib_running());
        }
    }
    assert_eq!(a.ib_connection_count(), 0);

    // An IB socket cannot bind: no device holds the address.
    let s = Socket::with_node(&a);
    s.set_transport(TransportKind::Ib).unwrap();
    let e = s.bind("127.77.0.1:4000".parse().unwrap()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOPROTOOPT), "{e}");

    // TCP between the two nodes, both ways, a ping.
    let sa = Socket::with_node(&a);
    let sb = Socket::with_node(&b);
    let aa = sa.bind("127.77.0.1:4001".parse().unwrap()).unwrap();
    let ba: SocketAddr = sb.bind("127.77.0.2:5001".parse().unwrap()).unwrap();
    for s in [&sa, &sb] {
        s.set_read_timeout(Some(Duration::from_secs(10)));
    }
    let mut buf = vec![0u8; 70_000];
    sa.send_to(&[7u8; 70_000], ba).unwrap();
    let (n, from) = sb.recv_from(&mut buf).unwrap();
    assert_eq!((n, from), (70_000, aa));
    assert!(buf[..n].iter().all(|&x| x == 7));
    sb.send_to(b"back", aa).unwrap();
    let (n, from) = sa.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"back"[..], ba));
    sa.send_to(&[], "127.77.0.2:0".parse().unwrap()).unwrap();
    let (n, from) = sa.recv_from(&mut buf).unwrap();
    assert_eq!((n, from), (0, "127.77.0.2:0".parse().unwrap()));
    let conns = a.connections();
    assert!(
        conns.iter().all(|c| c.kind == TransportKind::Tcp),
        "{conns:?}"
    );
    a.shutdown();
    b.shutdown();
}
