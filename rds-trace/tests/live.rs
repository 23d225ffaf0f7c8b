//! rds-trace against real nodes in this process: two (or three) nodes on 127.7.x.y addresses
//! exchange traffic while the rds-trace binary captures one of them through its control
//! socket; the capture is checked with tshark and the project's dissector, with rds-trace's
//! own reader (`-r`), and against what the test sent.
//!
//! The nodes serve their control sockets in one `RDS_RUNTIME_DIR` (a temporary directory this
//! process sets once for itself and passes to rds-trace); every test names its node with
//! `--node`. `RDS_TRACE_KEEP=DIR` keeps the main capture.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use nix::sys::signal::Signal;
use rds_core::socket::MAX_MSG_SIZE;
use rds_core::trace::{CapturedFrame, PcapFrames};
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

fn run_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::env::set_var("RDS_RUNTIME_DIR", d.path());
        d
    })
    .path()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sa(s: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(s), port)
}

fn node(name: &str, addr: &str, seed: u64) -> Node {
    run_dir();
    let mut cfg = NodeConfig::new([ip(addr)]);
    cfg.name = name.into();
    cfg.ctl = CtlMode::Named(name.into());
    cfg.seed = Some(seed);
    Node::start(cfg).unwrap()
}

fn sock(n: &Node, addr: &str, port: u16) -> Socket {
    let s = Socket::with_node(n);
    s.bind(sa(addr, port)).unwrap();
    s.set_send_buffer_size(4 << 20);
    s.set_recv_buffer_size(8 << 20);
    s.set_read_timeout(Some(Duration::from_secs(20)));
    s.set_write_timeout(Some(Duration::from_secs(20)));
    s
}

/// Receives one message (20 s at most): (payload, sender).
fn recv(s: &Socket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; MAX_MSG_SIZE];
    let m = s
        .recv_msg(
            &mut buf,
            RecvFlags {
                peek: false,
                trunc: false,
                dontwait: false,
            },
        )
        .expect("a message arrives");
    let n = m.len;
    buf.truncate(n);
    (buf, m.from.expect("a data message"))
}

/// Frames of a capture read back by rds-core's reader.
fn reader_frames(file: &Path) -> Vec<CapturedFrame> {
    PcapFrames::new(std::fs::File::open(file).unwrap())
        .unwrap()
        .map(|r| r.expect("capture reads back"))
        .collect()
}

fn report(file: &Path, extra: &[&str]) -> String {
    let out = Command::new(rds_trace_bin())
        .arg("-r")
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `RDS_TRACE_KEEP=DIR` keeps a capture for a look in Wireshark.
fn keep(file: &Path) {
    if let Some(d) = std::env::var_os("RDS_TRACE_KEEP") {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(file, Path::new(&d).join(file.file_name().unwrap())).unwrap();
    }
}

/// A message the test sent: (from, to, payload).
type Sent = (SocketAddr, SocketAddr, Vec<u8>);

#[test]
fn captures_every_kind_of_traffic_and_tshark_decodes_it_exactly() {
    const A: &str = "127.7.1.1";
    const B: &str = "127.7.1.2";
    let a = node("trace-a1", A, 71);
    let b = node("trace-b1", B, 72);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.pcap");
    let trace = Trace::start(
        run_dir(),
        &[
            "-w",
            file.to_str().unwrap(),
            "-s",
            "0",
            "--node",
            "trace-a1",
        ],
        Stdio::null(),
    );
    let mut sent: Vec<Sent> = Vec::new();

    // Data of several sizes, 1 MiB included, on several lanes: every socket has its own lane
    // hash (the seeds make the lanes repeatable).
    let rb = sock(&b, B, 5000);
    let senders: Vec<Socket> = (0..6).map(|i| sock(&a, A, 4000 + i)).collect();
    let sizes = [0usize, 1, 48, 1448, 5000, 65_536, 1 << 20];
    for (i, n) in sizes.iter().enumerate() {
        let s = &senders[i % senders.len()];
        let p = pattern(*n, i as u64 + 1);
        s.send_to(&p, sa(B, 5000)).unwrap();
        sent.push((s.local_addr().unwrap(), sa(B, 5000), p));
    }
    for (i, s) in senders.iter().enumerate() {
        let p = pattern(100 + i, 100 + i as u64);
        s.send_to(&p, sa(B, 5000)).unwrap();
        sent.push((s.local_addr().unwrap(), sa(B, 5000), p));
    }
    // And an answer the other way.
    let p = pattern(3000, 999);
    rb.send_to(&p, sa(A, 4000)).unwrap();
    sent.push((sa(B, 5000), sa(A, 4000), p.clone()));
    let mut got: Vec<Sent> = Vec::new();
    for _ in 0..sizes.len() + senders.len() {
        let (m, from) = recv(&rb);
        got.push((from, sa(B, 5000), m));
    }
    let (m, from) = recv(&senders[0]);
    got.push((from, sa(A, 4000), m));

    // A ping (to port 0) and its pong.
    let pinger = sock(&a, A, 4100);
    pinger.send_to(b"", sa(B, 0)).unwrap();
    let (pong, from) = recv(&pinger);
    assert!(pong.is_empty());
    assert_eq!(from, sa(B, 0));

    // Congestion: B's port 5001 has a 4000-byte receive buffer; two 3000-byte messages
    // congest it (B sends a map with 5001), reading them uncongests it (a map without it).
    let rc = sock(&b, B, 5001);
    rc.set_recv_buffer_size(4000);
    let maps_before = a.counter(rds_core::stats::Counter::CongUpdateReceived);
    for i in 0..2 {
        let p = pattern(3000, 500 + i);
        senders[0].send_to(&p, sa(B, 5001)).unwrap();
        sent.push((sa(A, 4000), sa(B, 5001), p));
    }
    wait_until("port 5001 congested", || {
        b.sockets()
            .iter()
            .any(|s| s.bound == Some(sa(B, 5001)) && s.congested)
    });
    // B sends its map when it gets to it, with the state of that moment (updates coalesce,
    // as in the kernel): read only once A has the map that says 5001 is congested.
    wait_until("A received B's map with 5001", || {
        a.counter(rds_core::stats::Counter::CongUpdateReceived) > maps_before
    });
    for _ in 0..2 {
        let (m, from) = recv(&rc);
        got.push((from, sa(B, 5001), m));
    }

    // A reconnect: the connection restarts (new TCP connections, a new handshake probe and
    // congestion maps), then traffic resumes.
    assert!(a.restart_conn(ip(A), ip(B)));
    let p = pattern(777, 4242);
    senders[1].send_to(&p, sa(B, 5000)).unwrap();
    sent.push((senders[1].local_addr().unwrap(), sa(B, 5000), p));
    let (m, from) = recv(&rb);
    got.push((from, sa(B, 5000), m));
    let mut s1 = sent.clone();
    s1.sort();
    got.sort();
    assert_eq!(s1, got, "every message delivered once");

    // Let the last acks and maps go out, then stop with SIGINT.
    std::thread::sleep(Duration::from_millis(200));
    trace.signal(Signal::SIGINT);
    let (code, stderr) = trace.wait();
    assert_eq!(code, 0, "{stderr:?}");
    let (captured, dropped) = summary(&stderr);
    assert_eq!(dropped, 0);
    // Nothing else: no frame left out, none undelivered.
    assert_eq!(stderr.len(), 2, "{stderr:?}");
    assert_eq!(
        stderr[0],
        "rds-trace: tracing node 'trace-a1' (127.7.1.1), snaplen 1048624, transport tcp"
    );

    keep(&file);
    // rds-core's reader finds exactly the frames rds-trace counted.
    let frames = reader_frames(&file);
    assert_eq!(frames.len() as u64, captured);

    // The report, byte for byte: one line per frame, built here from tshark's decoding.
    let ts = tshark();
    let home = tempfile::tempdir().unwrap();
    let tsf = tshark_frames(&ts, home.path(), &file);
    assert_eq!(
        tsf.len(),
        frames.len(),
        "tshark and the reader see the same frames"
    );
    let expected: String = tsf.iter().map(|f| expected_line(f) + "\n").collect();
    let text = report(&file, &[]);
    for (i, (e, g)) in expected.lines().zip(text.lines()).enumerate() {
        assert_eq!(g, e, "line {}", i + 1);
    }
    assert_eq!(text, expected);
    for (f, r) in tsf.iter().zip(&frames) {
        assert_eq!(f.frame_no, r.frame_no);
    }

    // Every data frame decodes to exactly what was sent: ports, length, payload bytes (the
    // 1 MiB message reassembled from ~725 TCP segments).
    let data: Vec<&TsFrame> = tsf
        .iter()
        .filter(|f| f.sport() > 1 && f.dport() > 1 && f.flags() & 0x01 == 0)
        .collect();
    let mut on_wire: Vec<Sent> = data
        .iter()
        .filter(|f| f.flags() & 0x04 == 0)
        .map(|f| {
            let (from, to) = (sa(&f.src, f.sport()), sa(&f.dst, f.dport()));
            (from, to, f.pdu.payload())
        })
        .collect();
    on_wire.sort();
    // Retransmitted copies (after the restart) carry RETRANSMITTED and the same bytes.
    for f in data.iter().filter(|f| f.flags() & 0x04 != 0) {
        let m = (
            sa(&f.src, f.sport()),
            sa(&f.dst, f.dport()),
            f.pdu.payload(),
        );
        assert!(s1.contains(&m), "a retransmission of something sent: {f:?}");
    }
    assert_eq!(
        on_wire, s1,
        "the data frames are the messages sent, once each"
    );
    assert!(data
        .iter()
        .any(|f| f.len() == 1 << 20 && f.pdu.payload().len() == 1 << 20));

    // Sequence numbers: per TCP connection and direction, data frames count up by one
    // (control frames such as pings share the sequence space).
    let mut last: BTreeMap<(String, u16, String, u16), u64> = BTreeMap::new();
    for f in tsf.iter().filter(|f| f.flags() & 0x01 == 0) {
        let key = (f.src.clone(), f.src_port, f.dst.clone(), f.dst_port);
        if let Some(prev) = last.insert(key, f.seq()) {
            if f.flags() & 0x04 == 0 {
                assert!(f.seq() > prev, "sequence goes up: {prev} then {f:?}");
            }
        }
    }

    // Pings and pongs.
    assert!(tsf
        .iter()
        .any(|f| f.tx && f.sport() == 4100 && f.dport() == 0 && f.len() == 0));
    assert!(tsf
        .iter()
        .any(|f| !f.tx && f.sport() == 0 && f.dport() == 4100 && f.len() == 0));

    // Handshake probes: our node (the smaller address) sends the probe with NPATHS, B answers,
    // on lane 0; once at the start and again after the restart, on two different connections.
    let probes: Vec<&TsFrame> = tsf
        .iter()
        .filter(|f| f.tx && f.sport() == 1 && f.dport() == 0)
        .collect();
    let pongs: Vec<&TsFrame> = tsf
        .iter()
        .filter(|f| !f.tx && f.sport() == 0 && f.dport() == 1)
        .collect();
    for p in probes.iter().chain(&pongs) {
        assert_eq!(p.pdu.num("rds.exthdr.npaths"), 8, "{p:?}");
        assert_eq!(p.client_port() % 8, 0);
    }
    let probe_conns: BTreeSet<u16> = probes.iter().map(|p| p.client_port()).collect();
    assert!(
        probe_conns.len() >= 2,
        "a probe before and after the restart: {probe_conns:?}"
    );
    assert!(!pongs.is_empty());

    // Congestion maps: 8192 bytes; B announced its map (nothing congested), then 5001
    // congested, then uncongested again.
    let maps: Vec<&TsFrame> = tsf.iter().filter(|f| f.flags() == 0x01).collect();
    for m in &maps {
        assert_eq!(m.len(), 8192);
        assert_eq!(
            m.pdu.num("rds.cong_map.count"),
            m.pdu.cong_ports().len() as u64
        );
    }
    let from_b: Vec<Vec<u16>> = maps
        .iter()
        .filter(|m| !m.tx)
        .map(|m| m.pdu.cong_ports())
        .collect();
    let first_5001 = from_b
        .iter()
        .position(|p| p == &[5001])
        .expect("a map with 5001");
    assert!(from_b[..first_5001].iter().any(|p| p.is_empty()));
    assert!(from_b[first_5001..].iter().any(|p| p.is_empty()));
    assert!(maps.iter().any(|m| m.tx), "our node's map too");

    // Multipath: data went over several lanes (TCP connections with client ports of
    // different residues mod 8), and the reader's lane is that residue.
    let lanes: BTreeSet<u16> = data
        .iter()
        .filter(|f| f.tx)
        .map(|f| f.client_port() % 8)
        .collect();
    assert!(lanes.len() >= 2, "several lanes: {lanes:?}");
    for r in &frames {
        let rds_core::trace::FrameLink::Tcp { src, dst } = r.link else {
            unreachable!()
        };
        let client = if src.port() == 16385 { dst } else { src };
        assert_eq!(r.lane as u16, client.port() % 8);
    }

    // The JSON report has the same frames.
    let json = report(&file, &["--jsonl"]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let doc: serde_json::Value = serde_json::from_str(&report(&file, &["--json"])).unwrap();
    assert_eq!(doc["frames"].as_array(), Some(&rows));
    assert_eq!(rows.len(), tsf.len());
    for (row, f) in rows.iter().zip(&tsf) {
        assert_eq!(row["frame"], f.frame_no);
        assert_eq!(row["seq"], f.seq());
        assert_eq!(row["len"], f.len());
        assert_eq!(row["sport"], f.sport());
        assert_eq!(row["dport"], f.dport());
        assert_eq!(row["flags"], f.flags());
        assert_eq!(row["dir"], if f.tx { "tx" } else { "rx" });
        assert_eq!(row["src"], format!("{}:{}", f.src, f.src_port));
    }
    // Report filters.
    let only = report(&file, &["--port", "5001"]);
    let want: String = expected
        .lines()
        .filter(|l| l.contains(" > 5001 seq") || l.contains(" 5001 > "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(only, want);
    assert!(!only.is_empty());
    drop((a, b));
}

/// Sends messages from `s` to `to` in a thread until `stop` (at most 20 s).
fn background_traffic(
    s: Socket,
    to: Vec<SocketAddr>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(20);
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < end {
            for d in &to {
                if s.send_to(&pattern(200, n), *d).is_ok() {
                    n += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        n
    })
}

/// Reads and discards messages on `s` until `stop`.
fn drain(
    s: Socket,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(Duration::from_millis(50)));
        let mut buf = vec![0u8; 65536];
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = s.recv_from(&mut buf);
        }
    })
}

#[test]
fn stream_to_a_pipe_stops_after_count() {
    const A: &str = "127.7.2.1";
    const B: &str = "127.7.2.2";
    let a = node("trace-a2", A, 81);
    let b = node("trace-b2", B, 82);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rx = drain(sock(&b, B, 6000), stop.clone());
    // `-w -` into a pipe read by this test; -c 40 ends it by itself.
    let mut trace = Trace::start(
        run_dir(),
        &["-w", "-", "-c", "40", "--node", "trace-a2"],
        Stdio::piped(),
    );
    let mut out = trace.child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    // rds-trace writes the streamed frames under SCHED_IDLE, as the node's capture threads do.
    let pid = trace.child.id();
    wait_until("rds-trace's main thread under SCHED_IDLE", || {
        sched_of(Path::new(&format!("/proc/{pid}/task/{pid}/stat")))
            .is_some_and(|(_, policy)| policy == libc::SCHED_IDLE)
    });
    let tx = background_traffic(sock(&a, A, 6100), vec![sa(B, 6000)], stop.clone());
    let (code, stderr) = trace.wait();
    let bytes = reader.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(tx.join().unwrap() > 0);
    rx.join().unwrap();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(summary(&stderr).0, 40);
    let frames: Vec<CapturedFrame> = PcapFrames::new(&bytes[..])
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(frames.len(), 40);

    // The same through a real pipe into tshark reading stdin (as `| wireshark -k -i -`).
    let ts = tshark();
    let home = tempfile::tempdir().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rx = drain(sock(&b, B, 6001), stop.clone());
    let mut trace = Trace::start(
        run_dir(),
        &["-w", "-", "-c", "25", "--node", "trace-a2"],
        Stdio::piped(),
    );
    let pipe = trace.child.stdout.take().unwrap();
    let tshark = tshark_cmd(&ts, home.path())
        .args([
            "-r",
            "-",
            "-T",
            "fields",
            "-e",
            "rds.seq",
            "-e",
            "rds.dport",
        ])
        .args(["-E", "occurrence=a", "-E", "aggregator=,"])
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tx = background_traffic(sock(&a, A, 6101), vec![sa(B, 6001)], stop.clone());
    let (code, stderr) = trace.wait();
    let out = tshark.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    tx.join().unwrap();
    rx.join().unwrap();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(summary(&stderr).0, 25);
    let text = String::from_utf8(out.stdout).unwrap();
    let pdus: usize = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split('\t')
                .next()
                .unwrap()
                .split(',')
                .filter(|s| !s.is_empty())
                .count()
        })
        .sum();
    assert_eq!(pdus, 25, "{text}");
    drop((a, b));
}

#[test]
fn duration_and_filters() {
    const A: &str = "127.7.3.1";
    const B: &str = "127.7.3.2";
    const C: &str = "127.7.3.3";
    let a = node("trace-a3", A, 91);
    let b = node("trace-b3", B, 92);
    let c = node("trace-c3", C, 93);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rb = drain(sock(&b, B, 7000), stop.clone());
    let rc = drain(sock(&c, C, 7000), stop.clone());
    let rb2 = drain(sock(&b, B, 7001), stop.clone());
    let dir = tempfile::tempdir().unwrap();
    // --peer C for 1.5 s: only frames with C; -G ends it by itself.
    let f1 = dir.path().join("peer.pcap");
    let t1 = Trace::start(
        run_dir(),
        &[
            "-w",
            f1.to_str().unwrap(),
            "-G",
            "1.5",
            "--peer",
            C,
            "--node",
            "trace-a3",
        ],
        Stdio::null(),
    );
    let tx = background_traffic(
        sock(&a, A, 7100),
        vec![sa(B, 7000), sa(C, 7000), sa(B, 7001)],
        stop.clone(),
    );
    let (code, stderr) = t1.wait();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(stderr.len(), 2, "{stderr:?}");
    let (n1, d1) = summary(&stderr);
    assert_eq!(d1, 0);
    let frames = reader_frames(&f1);
    assert_eq!(frames.len() as u64, n1);
    assert!(n1 > 0);
    for f in &frames {
        assert!(
            f.src_ip() == Some(ip(C)) || f.dst_ip() == Some(ip(C)),
            "{f:?}"
        );
    }
    // --port 7001 (RDS port, either side) stopped with SIGTERM.
    let f2 = dir.path().join("port.pcap");
    let t2 = Trace::start(
        run_dir(),
        &[
            "-w",
            f2.to_str().unwrap(),
            "--port",
            "7001",
            "--node",
            "trace-a3",
        ],
        Stdio::null(),
    );
    // The file is flushed at least once a second while frames come.
    wait_until("frames for port 7001 in the file", || {
        std::fs::metadata(&f2).map(|m| m.len()).unwrap_or(0) > 24
    });
    t2.signal(Signal::SIGTERM);
    let (code, stderr) = t2.wait();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(stderr.len(), 2, "{stderr:?}");
    let (n2, _) = summary(&stderr);
    let frames = reader_frames(&f2);
    assert_eq!(frames.len() as u64, n2);
    assert!(n2 > 0);
    for f in &frames {
        let h = f.header().unwrap();
        assert!(h.sport == 7001 || h.dport == 7001, "{h:?}");
    }
    // Into a file that is not a regular file (nothing to sync at the end): -w /dev/null, as
    // with tcpdump, to see what a capture would catch.
    let t3 = Trace::start(
        run_dir(),
        &["-w", "/dev/null", "-c", "40", "--node", "trace-a3"],
        Stdio::null(),
    );
    let (code, stderr) = t3.wait();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(stderr.len(), 2, "{stderr:?}");
    assert_eq!(summary(&stderr).0, 40, "{stderr:?}");
    // Into a FIFO (streamed by rds-trace): the reader gets the whole capture.
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let t4 = Trace::start(
        run_dir(),
        &[
            "-w",
            fifo.to_str().unwrap(),
            "-c",
            "30",
            "--node",
            "trace-a3",
        ],
        Stdio::null(),
    );
    let (code, stderr) = t4.wait();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(summary(&stderr).0, 30, "{stderr:?}");
    let f4 = dir.path().join("from-fifo.pcap");
    std::fs::write(&f4, reader.join().unwrap()).unwrap();
    assert_eq!(reader_frames(&f4).len(), 30);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    tx.join().unwrap();
    for h in [rb, rc, rb2] {
        h.join().unwrap();
    }
    drop((a, b, c));
}

#[test]
fn one_session_per_node_and_node_errors() {
    const A: &str = "127.7.4.1";
    let a = node("trace-a4", A, 101);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("first.pcap");
    let t = Trace::start(
        run_dir(),
        &["-w", f.to_str().unwrap(), "--node", "trace-a4"],
        Stdio::null(),
    );
    let second = dir.path().join("second.pcap");
    let out = Command::new(rds_trace_bin())
        .env("RDS_RUNTIME_DIR", run_dir())
        .args(["-w", second.to_str().unwrap(), "--node", "trace-a4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rds-trace: cannot trace node 'trace-a4': another trace session is running on it (one per node)\n"
    );
    assert!(!second.exists(), "no file without a trace");
    t.signal(Signal::SIGINT);
    let (code, stderr) = t.wait();
    assert_eq!(code, 0);
    assert_eq!(summary(&stderr), (0, 0));
    // An empty but valid capture.
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 24);
    assert!(reader_frames(&f).is_empty());
    // After the session ended, a new one may start.
    let t = Trace::start(
        run_dir(),
        &["-w", second.to_str().unwrap(), "--node", "trace-a4"],
        Stdio::null(),
    );
    t.signal(Signal::SIGINT);
    assert_eq!(t.wait().0, 0);

    let out = Command::new(rds_trace_bin())
        .env("RDS_RUNTIME_DIR", run_dir())
        .args(["-w", second.to_str().unwrap(), "--node", "no-such-node"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("rds-trace: no RDS node is named 'no-such-node'; running nodes: ")
            && err.contains("trace-a4"),
        "{err}"
    );
    drop(a);
}

/// `HH:MM:SS.nnnnnnnnn` (UTC) of a timestamp, as the report prints it.
fn time_of_day(ts_ns: u64) -> String {
    let s = ts_ns / 1_000_000_000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ts_ns % 1_000_000_000
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// RDS/IB fragments fed through the tap API the IB transport calls (`Tap::record_ib`; this
/// host has no RDMA device): `rds-trace --transport ib` writes them as ERF InfiniBand records,
/// tshark with the dissector (its InfiniBand heuristic) decodes every field as fed, rds-core's
/// reader gives the bytes back, and `-r` reports them line by line. A TCP frame recorded in
/// the same session is counted as another transport's, not written.
#[test]
fn ib_fragments_from_the_tap_api_decode_exactly() {
    use rds_core::node::tap::IbQps;
    use rds_core::trace::{Direction, FrameLink};
    use rds_core::wire::HeaderRepr;

    let a = node("trace-ib1", "127.7.6.1", 61);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ib.pcap");
    let trace = Trace::start(
        run_dir(),
        &[
            "-w",
            file.to_str().unwrap(),
            "--node",
            "trace-ib1",
            "--transport",
            "ib",
            "-c",
            "5",
        ],
        Stdio::null(),
    );
    let (l, p) = (ip("10.1.0.1"), ip("10.1.0.2"));
    let qps = IbQps {
        local_qpn: 0x11,
        peer_qpn: 0xa0b0,
        local_lid: 1,
        peer_lid: 2,
    };
    let hdr = |h: HeaderRepr| {
        let mut b = [0u8; 48];
        h.emit_checksummed(&mut b);
        b
    };
    let msg = pattern(10_000, 7);
    let mut data_hdr = HeaderRepr::data(1, 4000, 5000, 10_000);
    data_hdr.ack = 4;
    data_hdr.flags = 0x02;
    let data_hdr = hdr(data_hdr);
    let ack_hdr = hdr(HeaderRepr::ack_only(7));
    let rx_hdr = hdr(HeaderRepr::data(9, 5000, 4000, 100));
    let rx_payload = pattern(100, 8);
    // (dir, solicited, header, fragment payload)
    let fed: Vec<(Direction, bool, [u8; 48], &[u8])> = vec![
        (Direction::Tx, false, data_hdr, &msg[..4096]),
        (Direction::Tx, false, data_hdr, &msg[4096..8192]),
        (Direction::Tx, true, data_hdr, &msg[8192..]),
        (Direction::Tx, true, ack_hdr, &[]),
        (Direction::Rx, true, rx_hdr, &rx_payload),
    ];
    let tap = a.tap();
    wait_until("the trace session", || tap.enabled());
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // Another transport's frame first: counted, not written.
    tap.record_tcp(
        Direction::Tx,
        ip("127.7.6.1"),
        ip("127.7.6.2"),
        0,
        sa("127.7.6.1", 40000),
        sa("127.7.6.2", 16385),
        [(&HeaderRepr::data(1, 1, 2, 0).to_bytes()[..], &Bytes::new())],
    );
    for (d, solicited, h, payload) in &fed {
        tap.record_ib(*d, l, p, 0, qps, *solicited, h, payload);
    }
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let (code, stderr) = trace.wait();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(
        stderr,
        [
            "rds-trace: tracing node 'trace-ib1' (127.7.6.1), snaplen 262144, transport ib",
            "5 frames captured, 0 dropped",
            "rds-trace: 1 frames of other transports than RDS/IB (or same-node loopback) were not written",
        ]
    );
    keep(&file);

    // rds-core's reader: the fragments' bytes, directions and IB headers.
    let frames = reader_frames(&file);
    assert_eq!(frames.len(), fed.len());
    let mut psn_tx = 0;
    let mut last_ts = t0;
    for (f, (d, solicited, h, payload)) in frames.iter().zip(&fed) {
        let mut want = h.to_vec();
        want.extend_from_slice(payload);
        assert_eq!(&f.data[..], &want[..]);
        assert_eq!(f.orig_len as usize, want.len());
        assert_eq!(f.dir, Some(*d));
        let (slid, dlid, qpn, psn) = match d {
            Direction::Tx => {
                psn_tx += 1;
                (1, 2, 0xa0b0, psn_tx - 1)
            }
            Direction::Rx => (2, 1, 0x11, 0),
        };
        assert_eq!(
            f.link,
            FrameLink::Ib {
                slid,
                dlid,
                dest_qpn: qpn,
                psn,
                opcode: 0x04,
                solicited: *solicited
            }
        );
        // ERF timestamps keep about a quarter nanosecond: allow the rounding.
        assert!(
            f.ts_ns + 1 >= last_ts && f.ts_ns <= t1 + 1,
            "{} {t0} {t1}",
            f.ts_ns
        );
        last_ts = f.ts_ns;
    }

    // tshark with the dissector: ERF + InfiniBand + RDS, every field as fed.
    {
        let exe = tshark();
        let home = tempfile::tempdir().unwrap();
        let fields = [
            "frame.protocols",
            "frame.time_epoch",
            "erf.flags.cap",
            "infiniband.lrh.slid",
            "infiniband.lrh.dlid",
            "infiniband.bth.opcode",
            "infiniband.bth.se",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
            "rds.seq",
            "rds.ack",
            "rds.len",
            "rds.sport",
            "rds.dport",
            "rds.flags",
            "rds.csum",
            "rds.csum.good",
            "rds.payload",
            "_ws.malformed",
        ];
        let mut args = vec!["-T", "fields", "-E", "separator=|"];
        for f in &fields {
            args.push("-e");
            args.push(f);
        }
        let out = tshark_run(&exe, home.path(), &file, &args);
        let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
        assert_eq!(rows.len(), fed.len(), "{out}");
        for (i, (row, (f, (d, solicited, h, payload)))) in
            rows.iter().zip(frames.iter().zip(&fed)).enumerate()
        {
            let hr = HeaderRepr::from_bytes(h).unwrap();
            let FrameLink::Ib {
                slid,
                dlid,
                dest_qpn,
                psn,
                ..
            } = f.link
            else {
                unreachable!()
            };
            let want = vec![
                "erf:infiniband:rds".to_string(),
                format!("{}.{:09}", f.ts_ns / 1_000_000_000, f.ts_ns % 1_000_000_000),
                if *d == Direction::Tx { "0" } else { "1" }.to_string(),
                slid.to_string(),
                dlid.to_string(),
                "4".to_string(),
                if *solicited { "1" } else { "0" }.to_string(),
                format!("0x{dest_qpn:06x}"),
                psn.to_string(),
                hr.seq.to_string(),
                hr.ack.to_string(),
                hr.len.to_string(),
                hr.sport.to_string(),
                hr.dport.to_string(),
                format!("0x{:02x}", hr.flags),
                format!("0x{:04x}", hr.csum),
                "1".to_string(),
                hex(payload),
                String::new(),
            ];
            assert_eq!(row, &want, "packet {}", i + 1);
        }
    }

    // The report, byte for byte.
    let mut want = String::new();
    for (f, (_, _, h, _)) in frames.iter().zip(&fed) {
        let hr = HeaderRepr::from_bytes(h).unwrap();
        let tail = match (hr.sport, hr.ack) {
            (4000, _) => "data 4000 > 5000 seq 1 len 10000 ack 4".to_string(),
            (0, 7) => "ack-only 0 > 0 seq 0 len 0 ack 7".to_string(),
            _ => "data 5000 > 4000 seq 9 len 100".to_string(),
        };
        let link = match f.link {
            FrameLink::Ib {
                slid,
                dlid,
                dest_qpn,
                psn,
                ..
            } => format!("ib lid {slid} > lid {dlid} qp 0x{dest_qpn:06x} psn {psn}"),
            FrameLink::Tcp { .. } => unreachable!(),
        };
        let dir = if f.dir == Some(Direction::Tx) {
            "tx"
        } else {
            "rx"
        };
        let flags = if hr.flags == 0x02 {
            " flags ACK_REQUIRED"
        } else {
            ""
        };
        want += &format!(
            "{} {dir} {link} lane 0 {tail} csum 0x{:04x} good{flags}\n",
            time_of_day(f.ts_ns),
            hr.csum
        );
    }
    assert_eq!(report(&file, &[]), want);
    a.shutdown();
}

/// The control protocol of a session whose node writes the file (what rds-trace does for a
/// regular file), with the errors rds-trace reports: no descriptor, a failing file (ENOSPC
/// from /dev/full), and a count reached. The session's threads (the session thread and the
/// file's writer) run under SCHED_IDLE while it captures.
#[test]
fn the_node_writes_the_capture_file_it_is_passed() {
    use rds_core::ctl::{
        read_frame, write_frame, write_frame_with_fd, Reply, Request, TraceOutput, PROTO_VERSION,
    };
    use rds_core::trace::{CaptureLink, CaptureTally};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    let _a = node("trace-a5", "127.7.5.1", 102);
    let mut s = UnixStream::connect(run_dir().join("trace-a5.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let json = |r: &Request| serde_json::to_vec(r).unwrap();
    let reply = |s: &mut UnixStream| -> Reply {
        serde_json::from_slice(&read_frame(s).unwrap().0).unwrap()
    };
    write_frame(&mut s, &json(&Request::Hello { v: PROTO_VERSION }), &[]).unwrap();
    assert!(matches!(reply(&mut s), Reply::Hello { .. }));
    let start = |count| Request::TraceStart {
        snaplen: 128,
        peer: None,
        port: None,
        output: Some(TraceOutput { link: None, count }),
    };

    // No descriptor came with the request.
    write_frame(&mut s, &json(&start(None)), &[]).unwrap();
    match reply(&mut s) {
        Reply::Error { errno, message } => {
            assert_eq!(errno, libc::EBADF);
            assert_eq!(message, "no capture file descriptor came with the request");
        }
        other => panic!("{other:?}"),
    }

    // A file every write to fails: the error ends the session.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    write_frame_with_fd(&s, &json(&start(None)), &[], full.as_fd()).unwrap();
    drop(full);
    match reply(&mut s) {
        Reply::TraceStarted { transports, link } => {
            assert_eq!(transports, vec!["tcp".to_string()]);
            assert_eq!(link, Some(CaptureLink::Tcp));
        }
        other => panic!("{other:?}"),
    }
    // Once the session captures, its thread and the file's writer run under SCHED_IDLE, at
    // the capture's nice value.
    let sched = |comm: &str, policy: i32| {
        (0..200).find_map(|_| {
            let s = thread_sched(comm).filter(|s| s.1 == policy);
            if s.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            s
        })
    };
    let nice = rds_core::node::admin::TRACE_NICE;
    assert_eq!(
        sched("capture-writer", libc::SCHED_IDLE),
        Some((nice, libc::SCHED_IDLE)),
        "{:?}",
        thread_sched("capture-writer")
    );
    assert_eq!(
        sched("rds-trace-out", libc::SCHED_IDLE),
        Some((nice, libc::SCHED_IDLE)),
        "{:?}",
        thread_sched("rds-trace-out")
    );
    write_frame(&mut s, &json(&Request::TraceStop), &[]).unwrap();
    match reply(&mut s) {
        Reply::Error { errno, message } => {
            assert_eq!(errno, libc::ENOSPC, "{message}");
            assert!(message.starts_with("writing the capture: "), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // A count of 0: the node ends the session at once, with a valid empty capture.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.pcap");
    let f = rds_core::trace::open_capture_file(&path).unwrap();
    write_frame_with_fd(&s, &json(&start(Some(0))), &[], f.as_fd()).unwrap();
    assert!(matches!(reply(&mut s), Reply::TraceStarted { .. }));
    match reply(&mut s) {
        Reply::TraceEnd { written, .. } => assert_eq!(written, Some(CaptureTally::default())),
        other => panic!("{other:?}"),
    }
    drop(f);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 24);
    assert!(reader_frames(&path).is_empty());
    // The connection serves requests again.
    write_frame(&mut s, &json(&Request::Hello { v: PROTO_VERSION }), &[]).unwrap();
    assert!(matches!(reply(&mut s), Reply::Hello { .. }));
}

/// The nice value and scheduling policy in a `/proc/.../stat` file.
fn sched_of(stat: &Path) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // Fields 19 (nice) and 41 (policy); fields after the command name start at 3.
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((f.get(16)?.parse().ok()?, f.get(38)?.parse().ok()?))
}

/// The nice value and scheduling policy of this process's thread named `comm`, if one runs.
fn thread_sched(comm: &str) -> Option<(i32, i32)> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            if name.trim() != comm {
                return None;
            }
            sched_of(&t.path().join("stat"))
        })
}
