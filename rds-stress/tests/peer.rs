//! A misbehaving RDS peer: a fake passive side (raw control protocol plus an rds-core socket
//! in the test) answers rds-stress's first request with a bad ack. rds-stress must print the
//! original's diagnostic block and exit 1, never panic. Each case uses its own 127.50.2x.0/24.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use common::*;
use rds_core::{CtlMode, Node, NodeConfig, Socket};

struct Case {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

/// Runs rds-stress as the active side against a fake passive side on `net.1`; `reply`
/// answers the first request (`req` bytes, from `from`) through the fake's socket.
fn case(net: u8, extra: &[&str], reply: impl FnOnce(&Node, &Socket, &[u8], SocketAddr)) -> Case {
    let rt = tempfile::tempdir().unwrap();
    let peer = format!("127.50.{net}.1");
    let me = format!("127.50.{net}.2");
    let mut cfg = NodeConfig::new([peer.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    let node = Node::start(cfg).expect("fake peer node");
    let sock = Socket::with_node(&node);
    sock.bind(format!("{peer}:4301").parse().unwrap()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(15)));
    let l = TcpListener::bind(format!("{peer}:4300")).unwrap();
    let mut c = cmd(rt.path());
    c.args(["-r", &me, "-s", &peer, "-p", "4300"]).args(extra);
    let child = spawn(c);
    let (mut ctl, _) = l.accept().unwrap();
    ctl.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut opts = [0u8; 60];
    ctl.read_exact(&mut opts).unwrap();
    ctl.write_all(&[0]).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let (n, from) = sock.recv_from(&mut buf).expect("first request");
    reply(&node, &sock, &buf[..n], from);
    let out = wait_output(child, Duration::from_secs(20));
    drop(ctl);
    Case {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

fn ack(seq: u32, from: &str, to: &str, index: u16, op: u8, len: usize) -> Vec<u8> {
    let from: SocketAddr = from.parse().unwrap();
    let to: SocketAddr = to.parse().unwrap();
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        unreachable!()
    };
    let mut m = vec![0u8; len];
    m[0..4].copy_from_slice(&seq.to_be_bytes());
    m[4..8].copy_from_slice(&f.ip().octets());
    m[8..12].copy_from_slice(&t.ip().octets());
    m[12..14].copy_from_slice(&f.port().to_be_bytes());
    m[14..16].copy_from_slice(&t.port().to_be_bytes());
    m[16..18].copy_from_slice(&index.to_be_bytes());
    m[18] = op;
    m
}

fn block(rows: &[(&str, String, bool, String)]) -> String {
    let mut s = String::from(
        "An incoming message had a  header which\ndidn't contain the fields we expected:\n",
    );
    s += &format!("    member {:>37} eq {:>37}\n", "expected", "got");
    for (name, want, eq, got) in rows {
        s += &format!(
            "{name:>10} {want:>37} {} {got:>37}\n",
            if *eq { " =" } else { "!=" }
        );
    }
    s
}

#[test]
fn request_header_and_wrong_ack_seq() {
    let c = case(21, &["-q", "100"], |_, s, req, from| {
        assert_eq!(req.len(), 100);
        assert_eq!(from, "127.50.21.2:4301".parse().unwrap());
        let want = ack(0, "127.50.21.2:4301", "127.50.21.1:4301", 0, 1, 63);
        assert_eq!(&req[..63], &want[..], "the request header");
        assert!(req[63..].iter().all(|&b| b == 0));
        let bad = ack(5, "127.50.21.1:4301", "127.50.21.2:4301", 0, 2, 63);
        s.send_to(&bad, from).unwrap();
    });
    assert_eq!(c.code, Some(1), "{}{}", c.stdout, c.stderr);
    let want = block(&[
        ("seq", "0".into(), false, "5".into()),
        (
            "from_addr",
            "127.50.21.1".into(),
            true,
            "127.50.21.1".into(),
        ),
        ("from_port", "4301".into(), true, "4301".into()),
        ("to_addr", "127.50.21.2".into(), true, "127.50.21.2".into()),
        ("to_port", "4301".into(), true, "4301".into()),
        ("index", "0".into(), true, "0".into()),
        ("op", "2".into(), true, "2".into()),
    ]);
    assert!(c.stdout.ends_with(&want), "stdout:\n{}", c.stdout);
    assert_eq!(c.stderr, "header from 127.50.21.1:4301 to id 4301 bogus\n");
}

#[test]
fn wrong_addresses_in_ack() {
    let c = case(22, &[], |_, s, _, from| {
        let bad = ack(0, "10.9.9.9:4301", "127.50.22.2:4444", 3, 2, 63);
        s.send_to(&bad, from).unwrap();
    });
    assert_eq!(c.code, Some(1));
    let want = block(&[
        ("seq", "0".into(), true, "0".into()),
        ("from_addr", "127.50.22.1".into(), false, "10.9.9.9".into()),
        ("from_port", "4301".into(), true, "4301".into()),
        ("to_addr", "127.50.22.2".into(), true, "127.50.22.2".into()),
        ("to_port", "4301".into(), false, "4444".into()),
        ("index", "0".into(), false, "3".into()),
        ("op", "2".into(), true, "2".into()),
    ]);
    assert!(c.stdout.ends_with(&want), "stdout:\n{}", c.stdout);
    assert_eq!(c.stderr, "header from 127.50.22.1:4301 to id 4301 bogus\n");
}

#[test]
fn corrupted_payload_with_verify() {
    let c = case(23, &["-v", "-a", "73", "-q", "200"], |_, s, req, from| {
        // The request carries the pattern.
        assert_eq!(&req[63..67], &[0x0b, 0x3e, 0x69, 0x4c]);
        let mut a = ack(0, "127.50.23.1:4301", "127.50.23.2:4301", 0, 2, 73);
        a[63..].copy_from_slice(&req[63..73]);
        a[65] ^= 0xff;
        a[70] ^= 0x01;
        s.send_to(&a, from).unwrap();
    });
    assert_eq!(c.code, Some(1));
    assert!(
        c.stdout.ends_with(
            "An incoming message has a corrupted payload at offset 2; 2 out of 10 bytes corrupted\n"
        ),
        "stdout:\n{}",
        c.stdout
    );
    assert_eq!(c.stderr, "header from 127.50.23.1:4301 to id 4301 bogus\n");
}

#[test]
fn bad_task_index_size_and_op() {
    let c = case(24, &[], |node, _, _, from| {
        let other = Socket::with_node(node);
        other.bind("127.50.24.1:4310".parse().unwrap()).unwrap();
        let a = ack(0, "127.50.24.1:4310", "127.50.24.2:4301", 0, 2, 63);
        other.send_to(&a, from).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    });
    assert_eq!(c.code, Some(1));
    assert_eq!(c.stderr, "received bad task index 9\n");
    let c = case(25, &[], |_, s, _, from| {
        let a = ack(0, "127.50.25.1:4301", "127.50.25.2:4301", 0, 2, 64);
        s.send_to(&a, from).unwrap();
    });
    assert_eq!(c.code, Some(1));
    assert_eq!(c.stderr, "ack size 64, not 63\n");
    let c = case(26, &[], |_, s, _, from| {
        let a = ack(0, "127.50.26.1:4301", "127.50.26.2:4301", 0, 9, 63);
        s.send_to(&a, from).unwrap();
    });
    assert_eq!(c.code, Some(1));
    assert_eq!(c.stderr, "unknown op 9\n");
    let c = case(27, &[], |_, s, _, from| {
        s.send_to(&[1, 2, 3], from).unwrap();
    });
    assert_eq!(c.code, Some(1));
    assert_eq!(c.stderr, "recvmsg() returned short data: 3");
}
