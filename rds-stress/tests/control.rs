//! The TCP options exchange against fake peers speaking the raw control protocol on
//! 127.50.1x.y (one /24 per test), checked byte for byte against the reference layout (spec 5.3), in both roles,
//! plus garbage on the control connection.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use common::*;

fn listen(addr: &str) -> TcpListener {
    let l = TcpListener::bind(addr).expect("bind fake peer");
    l.set_nonblocking(false).unwrap();
    l
}

fn accept(l: &TcpListener) -> TcpStream {
    // Bounded: the child connects at once or the test fails on its output.
    let (s, _) = l.accept().expect("accept");
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
    s
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).expect("read from rds-stress");
    b
}

/// The 59-byte V1 structure, written out field by field from the reference table.
#[allow(clippy::too_many_arguments)]
fn v1(
    depth: u32,
    req: u32,
    ack: u32,
    send: Ipv4Addr,
    recv: Ipv4Addr,
    port: u16,
    tasks: u16,
    time: u32,
    flags: [u8; 15],
    retries: u32,
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&depth.to_be_bytes());
    b.extend_from_slice(&req.to_be_bytes());
    b.extend_from_slice(&ack.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes()); // rdma_size
    b.extend_from_slice(&send.octets());
    b.extend_from_slice(&recv.octets());
    b.extend_from_slice(&port.to_be_bytes());
    b.extend_from_slice(&tasks.to_be_bytes());
    b.extend_from_slice(&time.to_be_bytes());
    b.extend_from_slice(&flags);
    b.extend_from_slice(&1u32.to_be_bytes()); // rdma_vector
    b.extend_from_slice(&0u32.to_be_bytes()); // rdma_alignment
    b.extend_from_slice(&retries.to_be_bytes());
    assert_eq!(b.len(), 59);
    b
}

// summary_only rtprio tracing verify show_params show_perfdata use_cong_monitor use_once
// use_get_mr use_fence cache_mrs key_o_meter suppress_warnings simplex rw_mode
const FLAGS_DEFAULT: [u8; 15] = [0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0];

#[test]
fn active_sends_v1_then_ok() {
    let rt = tempfile::tempdir().unwrap();
    let l = listen("127.50.11.1:4200");
    let mut c = cmd(rt.path());
    c.args([
        "-r",
        "127.50.11.2",
        "-s",
        "127.50.11.1",
        "-p",
        "4200",
        "-q",
        "4k",
        "-a",
        "100",
        "-d",
        "3",
        "-t",
        "2",
        "-T",
        "7",
        "-v",
        "-z",
        "-o",
        "--use-cong-monitor",
        "0",
        "--connect-retries",
        "1",
    ]);
    let child = spawn(c);
    let mut s = accept(&l);
    let got = read_n(&mut s, 59);
    let mut flags = FLAGS_DEFAULT;
    flags[0] = 1; // -z
    flags[3] = 1; // -v
    flags[6] = 0; // --use-cong-monitor 0
    flags[13] = 1; // -o
    let want = v1(
        3,
        4096,
        100,
        Ipv4Addr::new(127, 50, 11, 1),
        Ipv4Addr::new(127, 50, 11, 2),
        4200,
        2,
        7,
        flags,
        1,
    );
    assert_eq!(got, want);
    // Tasks are bound before the ok byte goes out.
    assert_eq!(read_n(&mut s, 1), [0]);
    drop(s);
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "connecting to 127.50.11.1:4200\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Peer unexpectedly closed connection\n"
    );
}

#[test]
fn active_json_mode_sends_v2_with_marker() {
    let rt = tempfile::tempdir().unwrap();
    let l = listen("127.50.12.1:4201");
    let mut c = cmd(rt.path());
    c.args([
        "-r",
        "127.50.12.2",
        "-s",
        "127.50.12.1",
        "-p",
        "4201",
        "--disable-inq",
    ]);
    let child = spawn(c);
    let mut s = accept(&l);
    let got = read_n(&mut s, 77);
    let mut version = [0u8; 16];
    version[..5].copy_from_slice(b"2.0.7");
    version[8..12].copy_from_slice(b"json");
    assert_eq!(&got[..16], &version);
    let want_v1 = v1(
        1,
        1024,
        63,
        Ipv4Addr::new(127, 50, 12, 1),
        Ipv4Addr::new(127, 50, 12, 2),
        4201,
        1,
        0,
        FLAGS_DEFAULT,
        0,
    );
    assert_eq!(&got[16..75], &want_v1[..]);
    assert_eq!(&got[75..77], &[0, 0], "tos, async");
    assert_eq!(read_n(&mut s, 1), [0]);
    // A passive side without JSON support echoes the ok byte.
    s.write_all(&[0]).unwrap();
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Remote server does not support json option exchange.\n"
    );
}

#[test]
fn active_json_exchange_reports_missing_keys() {
    let rt = tempfile::tempdir().unwrap();
    let l = listen("127.50.13.1:4202");
    let mut c = cmd(rt.path());
    c.args([
        "-r",
        "127.50.13.2",
        "-s",
        "127.50.13.1",
        "-p",
        "4202",
        "--always-bursty",
        "-T",
        "1",
    ]);
    let child = spawn(c);
    let mut s = accept(&l);
    let got = read_n(&mut s, 77);
    assert_eq!(&got[8..13], b"json\0");
    assert_eq!(read_n(&mut s, 1), [0]);
    s.write_all(&[97]).unwrap();
    let len = i32::from_ne_bytes(read_n(&mut s, 4).try_into().unwrap());
    let text = String::from_utf8(read_n(&mut s, len as usize)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["version"], "2.0.7");
    assert_eq!(v["always_bursty"], 1);
    assert_eq!(v["disable_inq"], 1, "holds inq_enabled");
    assert_eq!(v["receive_addr"], 0x7f32_0d02);
    assert_eq!(v["starting_port"], 4202);
    assert!(
        v.get("addr_scope_id ").is_some(),
        "key with the trailing space"
    );
    assert_eq!(v.as_object().unwrap().len(), 36);
    let reply = r#"{"version":"2.0.7","req_depth":1}"#;
    let mut frame = (reply.len() as i32).to_ne_bytes().to_vec();
    frame.extend_from_slice(reply.as_bytes());
    s.write_all(&frame).unwrap();
    assert_eq!(read_n(&mut s, 1), [97], "the last ok byte");
    drop(s);
    let out = wait_output(child, Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("req_size field not supported by remote server\n"));
    assert!(stdout.contains("sync_always_bursty field not supported by remote server\n"));
    assert!(!stdout.contains("req_depth field not supported"));
    assert_eq!(out.status.code(), Some(1));
}

fn run_fake_active(net: &str, port: u16, payload: &[u8], ok: Option<u8>) -> (TcpStream, u16) {
    let local: SocketAddr = format!("{net}.4:0").parse().unwrap();
    let sock = nix_connect(local, format!("{net}.3:{port}").parse().unwrap());
    let mut s = sock;
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(payload).unwrap();
    if let Some(b) = ok {
        s.write_all(&[b]).unwrap();
    }
    let p = s.local_addr().unwrap().port();
    (s, p)
}

/// Connects from a chosen local address (std cannot bind before connect).
fn nix_connect(local: SocketAddr, peer: SocketAddr) -> TcpStream {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect_from(local, peer) {
            Ok(t) => return t,
            // The child is not listening yet.
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect to {peer}: {e}"),
        }
    }
}

fn connect_from(local: SocketAddr, peer: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let (SocketAddr::V4(l), SocketAddr::V4(p)) = (local, peer) else {
        panic!("v4 only")
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(fd.as_raw_fd(), &SockaddrIn::from(l))?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(p))?;
    Ok(TcpStream::from(fd))
}

#[test]
fn passive_takes_v1_from_a_c_peer() {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.14.3", "-p", "4210"]);
    let child = spawn(c);
    let opts = v1(
        1,
        1024,
        63,
        Ipv4Addr::new(127, 50, 14, 3),
        Ipv4Addr::new(127, 50, 14, 4),
        4210,
        1,
        0,
        FLAGS_DEFAULT,
        0,
    );
    // 2.0.7 sends an uninitialised ok byte; the passive side echoes it.
    let (mut s, port) = run_fake_active("127.50.14", 4210, &opts, Some(0x5a));
    assert_eq!(read_n(&mut s, 1), [0x5a]);
    drop(s);
    let out = wait_output(child, Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "waiting for incoming connection on 127.50.14.3:4210"
    );
    assert_eq!(
        lines[1],
        format!("accepted connection from 127.50.14.4:{port}")
    );
    assert_eq!(
        lines[2],
        "negotiated options, tasks will start in 2 seconds"
    );
    assert_eq!(lines[3], "Starting up....");
    assert_eq!(lines[4], HEADER);
    assert!(average_re().is_match(lines[lines.len() - 2]), "{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
}

#[test]
fn passive_json_exchange() {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.15.3", "-p", "4211"]);
    let child = spawn(c);
    let mut opts = vec![0u8; 16];
    opts[..5].copy_from_slice(b"2.0.7");
    opts[8..12].copy_from_slice(b"json");
    opts.extend(v1(
        1,
        1024,
        63,
        Ipv4Addr::new(127, 50, 15, 3),
        Ipv4Addr::new(127, 50, 15, 4),
        4211,
        1,
        0,
        FLAGS_DEFAULT,
        0,
    ));
    opts.extend([0, 0]);
    let (mut s, _) = run_fake_active("127.50.15", 4211, &opts, Some(0));
    assert_eq!(read_n(&mut s, 1), [97], "JSON_IDENTIFIER");
    let mine = r#"{"version":"2.0.7","req_size":2048,"receive_addr":2133987076,"always_bursty":1}"#;
    let mut frame = (mine.len() as i32).to_ne_bytes().to_vec();
    frame.extend_from_slice(mine.as_bytes());
    s.write_all(&frame).unwrap();
    let len = i32::from_ne_bytes(read_n(&mut s, 4).try_into().unwrap());
    let text = String::from_utf8(read_n(&mut s, len as usize)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["req_size"], 2048, "{text}");
    assert_eq!(v["always_bursty"], 1);
    assert_eq!(v["send_addr"], 2133987076i64, "peer's receive address");
    assert_eq!(v["receive_addr"], 0x7f32_0f03, "own address");
    s.write_all(&[7]).unwrap();
    assert_eq!(read_n(&mut s, 1), [7]);
    drop(s);
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn passive_rejects_garbage() {
    let rt = tempfile::tempdir().unwrap();
    // Not a version string: taken as a V1 structure full of nonsense.
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.16.3", "-p", "4212"]);
    let child = spawn(c);
    let mut junk = b"GARBAGEGARBAGE!!".to_vec();
    junk.extend([0xffu8; 43]);
    let (s, _) = run_fake_active("127.50.16", 4212, &junk, Some(0));
    let out = wait_output(child, Duration::from_secs(20));
    drop(s);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "options from peer: req size 1095189831 is larger than the largest RDS message (1048576 bytes)\n"
    );
    // Truncated options.
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.16.3", "-p", "4213"]);
    let child = spawn(c);
    let (s, _) = run_fake_active("127.50.16", 4213, b"2.0.7\0\0\0\0\0", None);
    drop(s);
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Peer unexpectedly closed connection\n"
    );
    // A JSON length that makes no sense.
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.16.3", "-p", "4214"]);
    let child = spawn(c);
    let mut opts = vec![0u8; 16];
    opts[..5].copy_from_slice(b"2.0.7");
    opts[8..12].copy_from_slice(b"json");
    opts.extend([0u8; 61]);
    let (mut s, _) = run_fake_active("127.50.16", 4214, &opts, Some(0));
    assert_eq!(read_n(&mut s, 1), [97]);
    s.write_all(&(-5i32).to_ne_bytes()).unwrap();
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "invalid json options from peer: length -5\n"
    );
    // Valid JSON framing, nonsense content.
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.16.3", "-p", "4215"]);
    let child = spawn(c);
    let (mut s, _) = run_fake_active("127.50.16", 4215, &opts, Some(0));
    assert_eq!(read_n(&mut s, 1), [97]);
    let mut frame = 3i32.to_ne_bytes().to_vec();
    frame.extend_from_slice(b"{]x");
    s.write_all(&frame).unwrap();
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("invalid json options from peer: "));
}

/// A peer asking for RDMA (-D 8192 in its options) while this side's address runs RDS/TCP:
/// the passive side makes the original's RDMA check on its own address and ends with the
/// original's message (plus why), exit 1, before answering the ok byte.
#[test]
fn passive_refuses_rdma_on_rds_tcp() {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(["-r", "127.50.17.3", "-p", "4216"]);
    let child = spawn(c);
    let mut opts = v1(
        2,
        1024,
        63,
        Ipv4Addr::new(127, 50, 17, 3),
        Ipv4Addr::new(127, 50, 17, 4),
        4216,
        1,
        5,
        FLAGS_DEFAULT,
        0,
    );
    // rdma_size: offset 28 of the full structure, 12 in V1 (no version prefix).
    opts[12..16].copy_from_slice(&8192u32.to_be_bytes());
    let (mut s, _) = run_fake_active("127.50.17", 4216, &opts, Some(0));
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).ok(), Some(0), "no ok byte, only EOF");
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "RDMA not supported by this kernel\nrds-stress: -D needs the RDS/IB transport; \
             127.50.17.3 is not on an RDMA device: "
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
}
