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
