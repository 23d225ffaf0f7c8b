//! `rds-ctrl conn restart|kill` during traffic between the daemon (127.0.0.53) and a node in
//! this process (127.0.0.54): after restarts every message arrives exactly once and in order
//! (sequence numbers in the payloads); after a kill nothing arrives twice or out of order and
//! traffic resumes.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{status, wait_until, Daemon, Env};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
use rds_core::{CtlMode, Node, NodeConfig, Socket};

const D: &str = "127.0.0.53";
const P: &str = "127.0.0.54";

fn sa(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().unwrap()
}

/// A client socket on the daemon, bound to `addr`.
fn daemon_socket(env: &Env, addr: SocketAddr) -> (CtlClient, u64) {
    let mut c = CtlClient::connect(&env.sock()).unwrap();
    let tok = match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    c.call(
        &Request::SockBind {
            sock: tok,
            addr,
            transport: None,
        },
        &[],
    )
    .unwrap();
    (c, tok)
}

fn payload(seq: u32) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.resize(64 + (seq as usize % 200), 0x5a);
    v
}

/// Receives on the daemon socket until `n` messages came, the message numbered `last` came,
/// or nothing came for `idle`.
fn receive(
    c: &mut CtlClient,
    tok: u64,
    (n, last): (usize, u32),
    idle: Duration,
    got: &AtomicUsize,
) -> Vec<u32> {
    let mut seqs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seqs.len() < n && seqs.last() != Some(&last) && Instant::now() < deadline {
        match c.call(
            &Request::SockRecv {
                sock: tok,
                max: 4096,
                peek: false,
                dontwait: false,
                timeout_ms: Some(idle.as_millis() as u64),
            },
            &[],
        ) {
            Ok((Reply::Recv { .. }, data)) => {
                let seq = u32::from_be_bytes(data[..4].try_into().unwrap());
                assert_eq!(data, payload(seq), "payload of {seq}");
                seqs.push(seq);
                got.fetch_add(1, Ordering::SeqCst);
            }
            Ok((r, _)) => panic!("{r:?}"),
            Err(e) if e.errno() == libc::ETIMEDOUT || e.errno() == libc::EAGAIN => break,
            Err(e) => panic!("{e}"),
        }
    }
    seqs
}

/// Sends `range`; on a failed send, shows both nodes' connections before failing.
fn sender(s: Arc<Socket>, range: std::ops::Range<u32>, dest: SocketAddr, env: &Env) {
    for seq in range {
        if let Err(e) = s.send_to(&payload(seq), dest) {
            let daemon = env.run(&["info", "-c", "-T"]);
            panic!(
                "send of {seq}: {e}\npeer: {:#?}\ndaemon: {}{}",
                s.node().map(Node::connections),
                common::text(&daemon.stdout),
                common::text(&daemon.stderr)
            );
        }
    }
}

#[test]
fn restart_and_kill_during_traffic() {
    let env = Arc::new(Env::new());
    let mut d = Daemon::load(&env, D);
    let mut cfg = NodeConfig::new([P.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    let peer = Node::start(cfg).unwrap();
    let s = Arc::new(Socket::with_node(&peer));
    s.bind(sa(P, 7001)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60)));
    let (mut rc, tok) = daemon_socket(&env, sa(D, 7000));

    // Part 1: two restarts while 3000 messages flow.
    const N: u32 = 3000;
    let got = Arc::new(AtomicUsize::new(0));
    let g = got.clone();
    let recv = std::thread::spawn(move || {
        let seqs = receive(
            &mut rc,
            tok,
            (N as usize, N - 1),
            Duration::from_secs(20),
            &g,
        );
        (rc, seqs)
    });
    let tx = {
        let (s, env) = (s.clone(), env.clone());
        std::thread::spawn(move || sender(s, 0..N, sa(D, 7000), &env))
    };
    for at in [300, 1500] {
        wait_until("traffic", Duration::from_secs(60), || {
            got.load(Ordering::SeqCst) >= at
        });
        let out = env.run(&["conn", "restart", D, P]);
        assert_eq!(
            status(&out, 0),
            format!("connection {D} -> {P} restarted\n")
        );
    }
    tx.join().unwrap();
    let (mut rc, seqs) = recv.join().unwrap();
    let want: Vec<u32> = (0..N).collect();
    assert_eq!(seqs.len(), want.len(), "messages lost or duplicated");
    assert_eq!(seqs, want, "exactly once, in order");
    let stats = status(&env.run(&["stats", "--json"]), 0);
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(v["conn_reset"].as_u64().unwrap() >= 2, "{stats}");

    // Part 2: a kill during traffic: no duplicates, in order, and traffic resumes.
    let got = Arc::new(AtomicUsize::new(0));
    let g = got.clone();
    let recv = std::thread::spawn(move || {
        // Until the last message after the kill: a reconnect may wait out a drain (5 s).
        let last = 2 * N + 99;
        let seqs = receive(
            &mut rc,
            tok,
            (2 * N as usize, last),
            Duration::from_secs(20),
            &g,
        );
        (rc, seqs)
    });
    let tx = {
        let (s, env) = (s.clone(), env.clone());
        std::thread::spawn(move || sender(s, N..2 * N, sa(D, 7000), &env))
    };
    wait_until("traffic", Duration::from_secs(60), || {
        got.load(Ordering::SeqCst) >= 500
    });
    let out = env.run(&["conn", "kill", D, P]);
    let msg = status(&out, 0);
    assert!(
        msg.starts_with(&format!("connection {D} -> {P} killed; ")),
        "{msg}"
    );
    tx.join().unwrap();
    // Messages sent after the kill finished.
    sender(s.clone(), 2 * N..2 * N + 100, sa(D, 7000), &env);
    let (_rc, seqs) = recv.join().unwrap();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "duplicates or reordering after a kill"
    );
    let tail: Vec<u32> = seqs.iter().copied().filter(|&q| q >= 2 * N).collect();
    assert_eq!(tail, (2 * N..2 * N + 100).collect::<Vec<_>>());
    drop(s);
    peer.shutdown();
    d.unload();
}
