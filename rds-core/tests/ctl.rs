//! The control socket of a node: hello, info, tunables, privilege-free reads, malformed
//! input, client sockets.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{read_frame, Reply, Request};
use rds_core::{CtlMode, Node, NodeConfig, Socket};

fn node(ip: &str, name: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.client_sockets = Some(rds_core::socket::host::service());
    cfg.ctl = CtlMode::Named(name.into());
    Node::start(cfg).unwrap()
}

#[test]
fn hello_info_tunables_and_errors() {
    let n = node("127.0.0.61", &format!("t-ctl-{}", std::process::id()));
    let path = n.ctl_path().unwrap();
    let mut c = CtlClient::connect(&path).unwrap();
    assert_eq!(c.hello.node, n.name());
    assert_eq!(c.hello.rds_protocol, "3.1");
    assert_eq!(
        c.hello.addrs,
        vec!["127.0.0.61".parse::<std::net::IpAddr>().unwrap()]
    );
    let s = Socket::with_node(&n);
    s.bind("127.0.0.61:4000".parse().unwrap()).unwrap();
    let info = c.info().unwrap();
    assert_eq!(info.sockets.len(), 1);
    assert_eq!(info.counters[0].0, "conn_reset");
    // Tunables: set, read back, range error, unknown name, default.
    c.call_ok(&Request::TunableSet {
        name: "ping_enable".into(),
        value: 0,
    })
    .unwrap();
    let t = c.tunables().unwrap();
    assert!(t.contains(&("net.rds.ping_enable".to_string(), 0)));
    assert!(!n.tunables().ping_enable);
    let e = c
        .call(
            &Request::TunableSet {
                name: "net.rds.tcp.rds_tcp_sndbuf".into(),
                value: 10,
            },
            &[],
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = c
        .call(
            &Request::TunableSet {
                name: "nope".into(),
                value: 1,
            },
            &[],
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    c.call_ok(&Request::TunableDefault { name: None }).unwrap();
    assert!(n.tunables().ping_enable);
    // Malformed JSON gets an error reply and the connection goes on.
    let mut raw = UnixStream::connect(&path).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let junk = b"{not json";
    let mut f = Vec::new();
    f.extend_from_slice(&(junk.len() as u32).to_be_bytes());
    f.extend_from_slice(&0u32.to_be_bytes());
    f.extend_from_slice(junk);
    raw.write_all(&f).unwrap();
    let (j, _) = read_frame(&mut raw).unwrap();
    let r: Reply = serde_json::from_slice(&j).unwrap();
    assert!(matches!(r, Reply::Error { errno, .. } if errno == libc::EINVAL));
    // An oversized frame gets an error and the connection is closed.
    raw.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])
        .unwrap();
    let (j, _) = read_frame(&mut raw).unwrap();
    let r: Reply = serde_json::from_slice(&j).unwrap();
    assert!(matches!(r, Reply::Error { errno, .. } if errno == libc::EMSGSIZE));
    let mut rest = Vec::new();
    assert_eq!(raw.read_to_end(&mut rest).unwrap(), 0);
    // The node is unharmed.
    assert_eq!(c.info().unwrap().sockets.len(), 1);
    drop(s);
    n.shutdown();
    assert!(!path.exists(), "socket file removed at shutdown");
}

#[test]
fn client_sockets_through_a_node() {
    let name = format!("t-ctl2-{}", std::process::id());
    let n = node("127.0.0.62", &name);
    let path = n.ctl_path().unwrap();
    let mut c = CtlClient::connect(&path).unwrap();
    let tok = match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    c.call(
        &Request::SockBind {
            sock: tok,
            addr: "127.0.0.62:5000".parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .unwrap();
    // A local socket of the node sends to the client socket; the client receives it.
    let s = Socket::with_node(&n);
    s.bind("127.0.0.62:5001".parse().unwrap()).unwrap();
    s.send_to(b"hello", "127.0.0.62:5000".parse().unwrap())
        .unwrap();
    let (r, data) = c
        .call(
            &Request::SockRecv {
                sock: tok,
                max: 100,
                peek: false,
                dontwait: false,
                timeout_ms: Some(5000),
            },
            &[],
        )
        .unwrap();
    assert_eq!(data, b"hello");
    assert!(matches!(r, Reply::Recv { from: Some(f), .. } if f.port() == 5001));
    // Non-blocking receive on an empty queue: EAGAIN.
    let e = c
        .call(
            &Request::SockRecv {
                sock: tok,
                max: 100,
                peek: false,
                dontwait: true,
                timeout_ms: None,
            },
            &[],
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EAGAIN);
    n.shutdown();
}

fn open_sock(c: &mut CtlClient) -> u64 {
    match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    }
}

fn bind(c: &mut CtlClient, tok: u64, addr: &str) -> Result<Reply, rds_core::ctl::client::CtlError> {
    c.call(
        &Request::SockBind {
            sock: tok,
            addr: addr.parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .map(|r| r.0)
}

/// A client socket belongs to the connection that opened it: another connection (even of the
/// same uid) gets the answer a token never issued gets, until it attaches with the socket's
/// capability; the socket closes with its connection.
#[test]
fn sockets_belong_to_their_connection() {
    let n = node("127.0.0.63", &format!("t-ctl3-{}", std::process::id()));
    let path = n.ctl_path().unwrap();
    let mut a = CtlClient::connect(&path).unwrap();
    let mut b = CtlClient::connect(&path).unwrap();
    let tok = open_sock(&mut a);
    bind(&mut a, tok, "127.0.0.63:6000").unwrap();
    let state = |c: &mut CtlClient, t: u64| c.call(&Request::SockState { sock: t }, &[]);
    let foreign = state(&mut b, tok).unwrap_err();
    let never = state(&mut b, 999).unwrap_err();
    assert_eq!(foreign.errno(), libc::EBADF);
    assert_eq!(never.errno(), libc::EBADF);
    assert_eq!(
        foreign.to_string().replace(&tok.to_string(), "N"),
        never.to_string().replace("999", "N")
    );
    for req in [
        Request::SockCap { sock: tok },
        Request::SockClose { sock: tok },
        Request::SockRecv {
            sock: tok,
            max: 10,
            peek: false,
            dontwait: true,
            timeout_ms: None,
        },
    ] {
        assert_eq!(
            b.call(&req, &[]).unwrap_err().errno(),
            libc::EBADF,
            "{req:?}"
        );
    }
    // The capability lets b reach it; a made-up one does not.
    let cap = match a.call(&Request::SockCap { sock: tok }, &[]).unwrap().0 {
        Reply::SockCap { cap } => cap,
        r => panic!("{r:?}"),
    };
    assert_eq!(cap.len(), 32);
    let e = b
        .call(
            &Request::SockAttach {
                cap: "0".repeat(32),
            },
            &[],
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EBADF);
    let bt = match b.call(&Request::SockAttach { cap }, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    assert!(matches!(
        state(&mut b, bt).unwrap().0,
        Reply::SockState { bound: Some(x), .. } if x.port() == 6000
    ));
    // The opener's connection ends: the socket closes (the attached token is dead, the port
    // free again).
    drop(a);
    let mut c = CtlClient::connect(&path).unwrap();
    let t2 = open_sock(&mut c);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match bind(&mut c, t2, "127.0.0.63:6000") {
            Ok(_) => break,
            Err(e) if e.errno() == libc::EADDRINUSE && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(state(&mut b, bt).unwrap_err().errno(), libc::EBADF);
    n.shutdown();
}

/// Blocking requests wait without a worker: a receive times out with ETIMEDOUT, and a
/// receive waiting with no timeout is woken by a message while other requests are served.
#[test]
fn blocking_requests_park_and_wake() {
    let n = node("127.0.0.64", &format!("t-ctl4-{}", std::process::id()));
    let path = n.ctl_path().unwrap();
    let mut c = CtlClient::connect(&path).unwrap();
    let tok = open_sock(&mut c);
    bind(&mut c, tok, "127.0.0.64:6100").unwrap();
    let recv = |timeout_ms| Request::SockRecv {
        sock: tok,
        max: 100,
        peek: false,
        dontwait: false,
        timeout_ms,
    };
    let e = c.call(&recv(Some(200)), &[]).unwrap_err();
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    match c
        .call(
            &Request::SockWait {
                sock: tok,
                rx: true,
                tx: false,
                timeout_ms: 100,
            },
            &[],
        )
        .unwrap()
        .0
    {
        Reply::Ready { readable, .. } => assert!(!readable),
        r => panic!("{r:?}"),
    }
    // More waiting receivers than workers, each on its own connection and socket.
    let waiters: Vec<_> = (0..(rds_core::node::admin::WORKERS as u16 + 4))
        .map(|i| {
            let mut w = CtlClient::connect(&path).unwrap();
            let t = open_sock(&mut w);
            bind(&mut w, t, &format!("127.0.0.64:{}", 6200 + i)).unwrap();
            std::thread::spawn(move || {
                let r = w.call(
                    &Request::SockRecv {
                        sock: t,
                        max: 100,
                        peek: false,
                        dontwait: false,
                        timeout_ms: None,
                    },
                    &[],
                );
                r.map(|(_, d)| d).map_err(|e| e.to_string())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // The node still answers.
    assert!(c.info().is_ok());
    let s = Socket::with_node(&n);
    s.bind("127.0.0.64:6101".parse().unwrap()).unwrap();
    for i in 0..waiters.len() as u16 {
        s.send_to(
            format!("m{i}").as_bytes(),
            format!("127.0.0.64:{}", 6200 + i).parse().unwrap(),
        )
        .unwrap();
    }
    for (i, w) in waiters.into_iter().enumerate() {
        assert_eq!(w.join().unwrap().unwrap(), format!("m{i}").into_bytes());
    }
    n.shutdown();
}

/// An info snapshot with more queue entries than a frame holds is cut, with the number left
/// out; the reply is never lost.
#[test]
fn info_snapshot_with_large_queues_fits() {
    let n = node("127.0.0.65", &format!("t-ctl5-{}", std::process::id()));
    let path = n.ctl_path().unwrap();
    let rx = Socket::with_node(&n);
    rx.set_recv_buffer_size(64 << 20);
    rx.bind("127.0.0.65:6300".parse().unwrap()).unwrap();
    let tx = Socket::with_node(&n);
    tx.set_send_buffer_size(64 << 20);
    tx.bind("127.0.0.65:6301".parse().unwrap()).unwrap();
    const N: usize = 12_000;
    for _ in 0..N {
        tx.send_to(&[7], "127.0.0.65:6300".parse().unwrap())
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let queued = loop {
        let q = n.recv_queue().len() + n.send_queue().len() + n.retrans_queue().len();
        if n.recv_queue().len() == N || std::time::Instant::now() > deadline {
            break q;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let full = serde_json::to_vec(&rds_core::node::admin::snapshot(&n))
        .unwrap()
        .len();
    println!("{queued} queue entries, {full} bytes of JSON uncut");
    assert!(full > rds_core::ctl::MAX_JSON, "{full}");
    let mut c = CtlClient::connect(&path).unwrap();
    let snap = c.info().unwrap();
    assert!(snap.recv.len() <= rds_core::node::admin::INFO_LIST_MAX);
    assert_eq!(snap.recv.len() as u64 + snap.omitted.recv, N as u64);
    assert!(snap.omitted.any());
    n.shutdown();
}
