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

/// The RDMA calls on sockets that cannot do RDMA, with the kernel's errno values: an unbound
/// socket gets ENOTCONN; a TCP (or loopback) socket gets EOPNOTSUPP, as the kernel's rds_tcp
/// has no `get_mr` and no RDMA transmit; bad arguments are checked after that.
#[test]
fn rdma_calls_need_an_ib_socket() {
    use rds_core::rdma::{LocalVec, MrFlags, RdmaArgs, RdmaBuffer, SendCtl};
    let a = node("127.77.1.1");
    let buf = RdmaBuffer::new(8192).unwrap();
    fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> Option<i32> {
        r.unwrap_err().raw_os_error()
    }

    let unbound = Socket::with_node(&a);
    assert_eq!(
        errno(unbound.get_mr(&buf, 0, 4096, MrFlags::default())),
        Some(libc::ENOTCONN)
    );
    assert_eq!(errno(unbound.free_mr(1, false)), Some(libc::ENOTCONN));

    let s = Socket::with_node(&a);
    s.bind("127.77.1.1:4000".parse().unwrap()).unwrap();
    assert_eq!(s.transport(), Some(TransportKind::Tcp));
    assert_eq!(
        errno(s.get_mr(&buf, 0, 4096, MrFlags::default())),
        Some(libc::EOPNOTSUPP)
    );
    assert_eq!(errno(s.free_mr(1, false)), Some(libc::EOPNOTSUPP));
    let dest: SocketAddr = "127.77.1.2:4000".parse().unwrap();
    let op = SendCtl {
        rdma: Some(RdmaArgs {
            cookie: 1,
            local: vec![LocalVec {
                buf: buf.clone(),
                off: 0,
                len: 4096,
            }],
            ..RdmaArgs::default()
        }),
        ..SendCtl::default()
    };
    assert_eq!(
        errno(s.send_ctl(b"x", Some(dest), &op)),
        Some(libc::EOPNOTSUPP)
    );
    let d = SendCtl {
        rdma_dest: Some(1),
        ..SendCtl::default()
    };
    assert_eq!(
        errno(s.send_ctl(b"x", Some(dest), &d)),
        Some(libc::EOPNOTSUPP)
    );
    // Without control data it is a plain send.
    let sent = s.send_ctl(b"x", Some(dest), &SendCtl::default()).unwrap();
    assert_eq!((sent.len, sent.map_cookie), (1, None));
    assert_eq!(a.rdma_region_count(), 0);
    // Buffers: bounds are checked, reads and writes are copies.
    assert_eq!(buf.len(), 8192);
    buf.write_at(8190, b"ok").unwrap();
    assert_eq!(buf.to_vec(8190, 2).unwrap(), b"ok");
    assert!(buf.write_at(8191, b"ok").is_err());
    assert!(RdmaBuffer::new(0).is_err());
    assert!(buf.contains(0, 8192) && !buf.contains(1, 8192));
}
