//! Daemon client sockets over shared-memory rings (issue 19 item 3): messages of every size
//! from 0 to 1 MiB arrive complete and in order between two processes' sockets on the host
//! daemon (`rds-ctrl daemon tcp`, a child process), a client that scribbles over its own ring
//! segment is disconnected and counted while the daemon and the other clients carry on,
//! another uid can neither set up nor map someone else's ring, and a client that keeps posting
//! sends to a congested destination gets at most 128 KiB of them queued past the congestion.
//!
//! Addresses: 127.20.0.0/24 (this file's range).

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
use rds_core::socket::ring::{RING_FDS, SEG_LEN};
use rds_core::{RecvFlags, Socket};

fn ring_faults(sock: &Path) -> u64 {
    let mut c = CtlClient::connect(sock).unwrap();
    match c.call(&Request::CtlStats, &[]).unwrap().0 {
        Reply::Stats { counters } => counters
            .iter()
            .find(|(n, _)| n == "ctl_ring_faults")
            .map(|(_, v)| *v)
            .expect("ctl_ring_faults counter"),
        other => panic!("unexpected reply {other:?}"),
    }
}

/// A raw client's socket with a ring: the connection, the segment and the daemon's doorbell.
fn raw_ring(sock: &Path, bind: &str) -> (CtlClient, File, File) {
    let mut c = CtlClient::connect(sock).unwrap();
    let token = match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        other => panic!("unexpected reply {other:?}"),
    };
    c.call(
        &Request::SockBind {
            sock: token,
            addr: bind.parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .unwrap();
    let (reply, _, fds) = c.call_fds(&Request::SockRing { sock: token }).unwrap();
    assert_eq!(reply, Reply::SockRing { seg_len: SEG_LEN });
    assert_eq!(fds.len(), RING_FDS);
    let mut fds = fds.into_iter();
    let seg = File::from(fds.next().unwrap());
    let bell: OwnedFd = fds.next().unwrap();
    (c, seg, File::from(bell))
}

/// The message number `i` of the ordered-delivery run: sizes from 0 to 1 MiB.
fn message(i: u32) -> Vec<u8> {
    let len = match i % 8 {
        0 => 0,
        1 => 1,
        2 => 63,
        3 => 4096,
        4 => 65_543,
        5 => 1 << 20,
        6 => (i as usize * 7919) % 200_000,
        _ => 1024,
    };
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(31)) as u8)
        .collect();
    if len >= 4 {
        m[..4].copy_from_slice(&i.to_be_bytes());
    }
    m
}

#[test]
fn ring_data_in_order_and_hostile_clients_only_hurt_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.0.1", "127.20.0.2"]);
    // Only this test of the file uses the Socket API (and so the environment).
    rds_tests::use_daemon_rings(dir.path());

    let rx = Socket::new().unwrap();
    let tx = Socket::new().unwrap();
    // Room for a 1 MiB message (a larger one than the send buffer is EMSGSIZE).
    for s in [&rx, &tx] {
        s.set_send_buffer_size(4 << 20);
        s.set_recv_buffer_size(4 << 20);
    }
    rx.bind("127.20.0.2:5000".parse().unwrap()).unwrap();
    tx.bind("127.20.0.1:5001".parse().unwrap()).unwrap();
    assert!(rx.via_daemon() && rx.via_ring(), "the receiver has no ring");
    assert!(tx.via_daemon() && tx.via_ring(), "the sender has no ring");
    for s in [&rx, &tx] {
        s.set_read_timeout(Some(Duration::from_secs(20)));
        s.set_write_timeout(Some(Duration::from_secs(20)));
    }

    // Hostile clients scribble over their own segments: each is disconnected and counted.
    let before = ring_faults(&sock);
    let scribbles: [(u64, &[u8]); 4] = [
        // The request ring's producer position far ahead of the consumer.
        (64, &u64::MAX.to_le_bytes()),
        // A published record whose header claims 4 GiB.
        (4096, &[0xff; 64]),
        // The result ring's consumer position ahead of the producer (seen at the next
        // request, a well-formed receive).
        (256, &12_345u64.to_le_bytes()),
        // A record with an unknown address family.
        (4096, &{
            let mut h = [0u8; 64];
            h[4] = 1;
            h[40] = 9;
            h
        }),
    ];
    for (n, (off, bytes)) in scribbles.iter().enumerate() {
        let (mut c, seg, mut bell) = raw_ring(&sock, "127.20.0.1:0");
        if *off == 256 {
            let mut recv = [0u8; 64];
            recv[4] = 2;
            seg.write_all_at(&recv, 4096).unwrap();
        }
        seg.write_all_at(bytes, *off).unwrap();
        if *off != 64 {
            // Publish the record (64 bytes).
            seg.write_all_at(&64u64.to_le_bytes(), 64).unwrap();
        }
        bell.write_all(&1u64.to_ne_bytes()).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            match c.call(&Request::SockState { sock: 1 }, &[]) {
                Err(e) if e.is_gone() => break,
                _ => {}
            }
            assert!(Instant::now() < end, "scribble {n}: still connected");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let faults = ring_faults(&sock) - before;
    println!(
        "hostile ring clients disconnected: {faults} of {}",
        scribbles.len()
    );
    assert_eq!(faults, scribbles.len() as u64);

    // The other clients' rings carry on: every size, in order, complete.
    const N: u32 = 240;
    let sock2 = sock.clone();
    let recv = std::thread::spawn(move || {
        let mut buf = vec![0u8; (1 << 20) + 1];
        let flags = RecvFlags::default();
        for i in 0..N {
            // Wait on the readiness descriptor half of the time.
            if i % 2 == 0 {
                let fd = rx.fd().unwrap();
                assert!(rds_core::poll_readable(&[fd], Duration::from_secs(20)).unwrap()[0]);
            }
            let m = match rx.recv_msg(&mut buf, flags) {
                Ok(m) => m,
                Err(e) => panic!("message {i}: {e}; ring faults {}", ring_faults(&sock2)),
            };
            let want = message(i);
            assert_eq!(
                m.from,
                Some("127.20.0.1:5001".parse::<SocketAddr>().unwrap())
            );
            assert!(!m.truncated, "message {i}");
            assert_eq!(m.len, want.len(), "message {i}: length");
            assert!(buf[..m.len] == want[..], "message {i}: contents");
        }
        // Nothing more.
        rds_tests::assert_nothing_to_receive(&rx);
    });
    let dest: SocketAddr = "127.20.0.2:5000".parse().unwrap();
    let mut bytes = 0usize;
    for i in 0..N {
        let m = message(i);
        assert_eq!(tx.send_to(&m, dest).unwrap(), m.len());
        bytes += m.len();
    }
    recv.join().unwrap();
    println!("{N} messages, {bytes} bytes through the daemon's rings, in order");
    assert_eq!(ring_faults(&sock) - before, scribbles.len() as u64);
}

const PY: &str = r#"
import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["CTL_PATH"])
def read_exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError()
        b += c
    return b
def call(req):
    j = json.dumps(req).encode()
    s.sendall(struct.pack(">II", len(j), 0) + j)
    jl, dl = struct.unpack(">II", read_exact(8))
    rep = json.loads(read_exact(jl))
    read_exact(dl)
    return rep
call({"op": "hello", "v": 4})
errnos = [call({"op": "sock_ring", "sock": t}).get("errno") for t in range(1, 9)]
opened = 0
for pid in os.environ["PIDS"].split():
    for fd in range(0, 64):
        try:
            open("/proc/%s/fd/%d" % (pid, fd), "rb").close()
            opened += 1
        except OSError:
            pass
print(json.dumps({"errnos": errnos, "opened": opened}))
"#;

#[test]
fn another_uid_cannot_set_up_or_map_a_ring() {
    rds_tests::users::require_root("a child runs as uid 65534");
    let dir = tempfile::tempdir().unwrap();
    let (d, sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.0.3"]);
    for p in [dir.path().to_path_buf(), dir.path().join("run")] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Root's socket with its ring, open while uid 65534 tries.
    let (mut c, seg, _bell) = raw_ring(&sock, "127.20.0.3:0");
    assert_eq!(seg.metadata().unwrap().len(), SEG_LEN as u64);
    let out = rds_tests::users::command_as(rds_tests::users::NOBODY, "python3")
        .arg("-c")
        .arg(PY)
        .env("CTL_PATH", &sock)
        .env("PIDS", format!("{} {}", d.0.id(), std::process::id()))
        .stdin(Stdio::null())
        .output()
        .expect("running python3 as uid 65534");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("uid 65534: {stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(
        v["errnos"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.as_i64() == Some(i64::from(libc::EBADF))),
        "{v}"
    );
    assert_eq!(v["opened"], 0, "{v}");
    // Root's connection still has its socket.
    assert!(matches!(
        c.call(&Request::SockState { sock: 1 }, &[]).unwrap().0,
        Reply::SockState { .. }
    ));
}

/// A client that ignores the daemon's request to stop posting gets at most 128 KiB
/// (`POST_WINDOW`) queued past a congested destination; the rest fail with `ENOBUFS`, kept
/// for its next send.
#[test]
fn posting_past_congestion_is_bounded() {
    use rds_core::ctl::SockOpt;
    use rds_core::socket::ring::{OP_SEND, POST_WINDOW};
    let dir = tempfile::tempdir().unwrap();
    let (_d, sock) = rds_tests::spawn_daemon(dir.path(), &["127.20.0.4"]);
    // The receiver never reads, and its buffer holds one byte: the first message congests it.
    let (mut rc, _rseg, _rbell) = raw_ring(&sock, "127.20.0.4:6000");
    rc.call(
        &Request::SockSet {
            sock: 1,
            opt: SockOpt::Rcvbuf(1),
        },
        &[],
    )
    .unwrap();
    let (_c, seg, mut bell) = raw_ring(&sock, "127.20.0.4:6001");
    const LEN: usize = 40 << 10;
    const N: u64 = 6;
    // Record n at position n * (64 + LEN): a posted send to 127.20.0.4:6000.
    for n in 0..N {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&(LEN as u32).to_le_bytes());
        h[4..8].copy_from_slice(&OP_SEND.to_le_bytes());
        h[8..16].copy_from_slice(&(n + 1).to_le_bytes());
        h[20..24].copy_from_slice(&64u32.to_le_bytes());
        h[40] = 4;
        h[42..44].copy_from_slice(&6000u16.to_le_bytes());
        h[44..48].copy_from_slice(&[127, 20, 0, 4]);
        let at = 4096 + n * (64 + LEN as u64);
        seg.write_all_at(&h, at).unwrap();
        seg.write_all_at(&vec![n as u8; LEN], at + 64).unwrap();
    }
    let queued = rds_tests::daemon_counter(&sock, "recv_queued");
    let head = N * (64 + LEN as u64);
    seg.write_all_at(&head.to_le_bytes(), 64).unwrap();
    bell.write_all(&1u64.to_ne_bytes()).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    let word = |off: u64| {
        let mut b = [0u8; 8];
        seg.read_exact_at(&mut b, off).unwrap();
        u64::from_le_bytes(b)
    };
    while word(128) != head {
        assert!(
            Instant::now() < end,
            "the daemon did not take the posted sends"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The first is queued (and congests the receiver); then as many as fit in the window.
    let past = (POST_WINDOW / LEN) as u64;
    assert_eq!(past, 3);
    assert_eq!(
        rds_tests::daemon_counter(&sock, "recv_queued") - queued,
        1 + past
    );
    assert_eq!(
        word(512),
        libc::ENOBUFS as u64,
        "the error kept for the next send"
    );
    assert_eq!(word(576), 1, "the client was asked to stop posting");
}
