//! The rds-trace binary without real nodes: command line, the report format byte for byte on
//! captures written here, the capture client against a fake node that speaks the control
//! protocol (privilege and busy errors, node discovery, counts, the summary line), the
//! Wireshark plugin installation, and the man page against `--help`.

mod common;

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use assert_cmd::Command;
use bytes::Bytes;
use common::*;
use rds_core::ctl::{read_frame, write_frame, Reply, Request, TraceOutput, PROTO_VERSION};
use rds_core::trace::{
    encode_record, Direction, PcapSink, TapFrame, TcpCaptureConfig, TraceRecord, Transport,
};
use rds_core::wire::{ExtHeader, HeaderRepr};

/// 2023-11-14 22:13:20 UTC.
const T0: u64 = 1_700_000_000_000_000_000;

fn rds_trace(run: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("rds-trace")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run)
        .args(args)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn help_version_and_bad_arguments() {
    let run = tempfile::tempdir().unwrap();
    let out = rds_trace(run.path(), &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("rds-trace {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = rds_trace(run.path(), &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("rds-trace -w FILE [-s SNAPLEN] [-c COUNT]"));
    for (args, msg) in [
        (vec![], "the following required arguments were not provided"),
        (vec!["-w", "a", "-r", "b"], "cannot be used with"),
        (
            vec!["-w", "a", "-c", "0"],
            "invalid value '0' for '-c <COUNT>'",
        ),
        (
            vec!["-w", "a", "-G", "soon"],
            "invalid value 'soon' for '-G <SECONDS>': 'soon' is not a duration (seconds, or a \
             number with ms, s or m)",
        ),
        (
            vec!["-w", "a", "-G", "0"],
            "invalid value '0' for '-G <SECONDS>': '0' must be a positive duration",
        ),
        (vec!["-w", "a", "-G", "-1"], "unexpected argument '-1'"),
        (
            vec!["-w", "a", "--peer", "10.0.0"],
            "invalid value '10.0.0' for '--peer <ADDR>'",
        ),
        (
            vec!["-w", "a", "--port", "70000"],
            "invalid value '70000' for '--port <PORT>'",
        ),
        (vec!["-r", "a", "-s", "10"], "cannot be used with"),
        (vec!["-w", "a", "--json"], "cannot be used with"),
        (vec!["--bogus"], "unexpected argument '--bogus'"),
    ] {
        let out = rds_trace(run.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(err.starts_with("rds-trace: "), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

fn hdr(seq: u64, sport: u16, dport: u16, len: u32, flags: u8) -> HeaderRepr {
    HeaderRepr {
        flags,
        ..HeaderRepr::data(seq, sport, dport, len)
    }
}

fn frame(h: &HeaderRepr, payload: &[u8]) -> Bytes {
    let mut v = h.to_bytes().to_vec();
    v.extend_from_slice(payload);
    Bytes::from(v)
}

/// A capture with one frame of every kind the report distinguishes.
fn write_sample(path: &Path) {
    let c = Transport::Tcp {
        local: sa("192.0.2.1:40001"),
        peer: sa("192.0.2.2:16385"),
    };
    let tcp = |ts: u64, dir: Direction, h: HeaderRepr, payload: &[u8]| {
        let (local, peer) = match c {
            Transport::Tcp { local, peer } => (local, peer),
            Transport::Ib { .. } | Transport::Loopback => unreachable!(),
        };
        TraceRecord::tcp(T0 + ts, dir, 1, local, peer, frame(&h, payload))
    };
    let mut probe = hdr(1, 1, 0, 0, 0);
    probe.push_ext(ExtHeader::Npaths(8)).unwrap();
    probe.push_ext(ExtHeader::GenNum(77)).unwrap();
    let mut probe_pong = hdr(1, 0, 1, 0, 0);
    probe_pong.push_ext(ExtHeader::Npaths(8)).unwrap();
    let mut map = vec![0u8; 8192];
    for p in [0u16, 4000, 4001, 4002, 65535] {
        map[usize::from(p / 8)] |= 1 << (p % 8);
    }
    let mut rdma = hdr(9, 4000, 5000, 3, 0x20);
    rdma.push_ext(ExtHeader::Version(0x0301)).unwrap();
    rdma.push_ext(ExtHeader::RdmaDest {
        rkey: 0xbeef,
        offset: 4096,
    })
    .unwrap();
    let mut good = HeaderRepr {
        ack: 41,
        credit: 3,
        ..hdr(10, 4000, 5000, 2, 0xc2)
    };
    let mut b = [0u8; 48];
    good.emit_checksummed(&mut b);
    good = HeaderRepr::from_bytes(&b).unwrap();
    let bad = HeaderRepr {
        csum: 0x1234,
        ..hdr(11, 4000, 5000, 0, 0)
    };
    let recs = vec![
        tcp(1_000, Direction::Tx, probe, b""),
        tcp(2_000, Direction::Rx, probe_pong, b""),
        tcp(3_000, Direction::Rx, hdr(0, 0, 0, 8192, 0x01), &map),
        tcp(4_000, Direction::Tx, hdr(2, 4000, 5000, 5, 0x02), b"hello"),
        tcp(5_000, Direction::Tx, hdr(3, 4000, 0, 0, 0), b""),
        tcp(6_000, Direction::Rx, hdr(2, 0, 4000, 0, 0x04), b""),
        tcp(
            7_000,
            Direction::Tx,
            hdr(4, 4000, 5000, 3000, 0),
            &[7u8; 3000],
        )
        .snapped(100),
        tcp(8_000, Direction::Tx, rdma, b"abc"),
        tcp(9_000, Direction::Tx, good, b"xy"),
        tcp(10_000, Direction::Tx, bad, b""),
        TraceRecord::tcp(
            T0 + 3_600_000_000_000 + 11_000,
            Direction::Rx,
            5,
            sa("[2001:db8::1]:16385"),
            sa("[2001:db8::2]:33333"),
            frame(&hdr(1, 7, 8, 1, 0), b"z"),
        ),
    ];
    let cfg = TcpCaptureConfig {
        hold_ns: 0,
        ..TcpCaptureConfig::default()
    };
    let mut sink = PcapSink::ethernet(std::fs::File::create(path).unwrap(), cfg).unwrap();
    for r in &recs {
        sink.write(r).unwrap();
    }
    sink.finish().unwrap();
}

/// The report format of the man page, literally.
const SAMPLE_REPORT: &str = "\
22:13:20.000001000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 probe 1 > 0 seq 1 len 0 ext NPATHS=8,GEN_NUM=77
22:13:20.000002000 rx 192.0.2.2:16385 > 192.0.2.1:40001 lane 1 probe-pong 0 > 1 seq 1 len 0 ext NPATHS=8
22:13:20.000003000 rx 192.0.2.2:16385 > 192.0.2.1:40001 lane 1 cong-map 0 > 0 seq 0 len 8192 flags CONG_BITMAP congested 0,4000-4002,65535
22:13:20.000004000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 data 4000 > 5000 seq 2 len 5 flags ACK_REQUIRED
22:13:20.000005000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 ping 4000 > 0 seq 3 len 0
22:13:20.000006000 rx 192.0.2.2:16385 > 192.0.2.1:40001 lane 1 pong 0 > 4000 seq 2 len 0 flags RETRANSMITTED
22:13:20.000007000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 data 4000 > 5000 seq 4 len 3000 snapped 100/3048
22:13:20.000008000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 data 4000 > 5000 seq 9 len 3 flags EXTHDR_EXTENSION ext VERSION=3.1,RDMA_DEST=0xbeef+4096
22:13:20.000009000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 data 4000 > 5000 seq 10 len 2 ack 41 credit 3 csum 0x1a9f good flags ACK_REQUIRED,0xc0
22:13:20.000010000 tx 192.0.2.1:40001 > 192.0.2.2:16385 lane 1 data 4000 > 5000 seq 11 len 0 csum 0x1234 bad
23:13:20.000011000 rx [2001:db8::2]:33333 > [2001:db8::1]:16385 lane 5 data 7 > 8 seq 1 len 1
";

#[test]
fn report_format_byte_for_byte() {
    let run = tempfile::tempdir().unwrap();
    let file = run.path().join("sample.pcap");
    write_sample(&file);
    let out = rds_trace(run.path(), &["-r", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let got = text(&out.stdout);
    for (i, (g, w)) in got.lines().zip(SAMPLE_REPORT.lines()).enumerate() {
        assert_eq!(g, w, "line {}", i + 1);
    }
    assert_eq!(got, SAMPLE_REPORT);

    // JSON Lines: the same frames, one object per line, keys in the documented order.
    let out = rds_trace(run.path(), &["-r", file.to_str().unwrap(), "--jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let json = text(&out.stdout);
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), 11);
    // --json: one document holding the same objects.
    let out = rds_trace(run.path(), &["-r", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = text(&out.stdout);
    assert_eq!(
        doc,
        format!("{{\"frames\": [\n{}\n]}}\n", lines.join(",\n"))
    );
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["frames"]
    );
    assert_eq!(v["frames"].as_array().unwrap().len(), 11);
    assert_eq!(v["frames"][2]["kind"], "cong-map");
    assert_eq!(
        lines[2],
        r#"{"frame":8,"ts_ns":1700000000000003000,"time":"22:13:20.000003000","dir":"rx","link":"tcp","src":"192.0.2.2:16385","dst":"192.0.2.1:40001","ib":null,"lane":1,"kind":"cong-map","seq":0,"ack":0,"len":8192,"sport":0,"dport":0,"flags":1,"flag_names":["CONG_BITMAP"],"credit":0,"csum":0,"csum_good":null,"ext":[],"congested":[0,4000,4001,4002,65535],"captured":8240,"wire_len":8240}"#
    );
    assert_eq!(
        lines[0],
        r#"{"frame":1,"ts_ns":1700000000000001000,"time":"22:13:20.000001000","dir":"tx","link":"tcp","src":"192.0.2.1:40001","dst":"192.0.2.2:16385","ib":null,"lane":1,"kind":"probe","seq":1,"ack":0,"len":0,"sport":1,"dport":0,"flags":0,"flag_names":[],"credit":0,"csum":0,"csum_good":null,"ext":[{"type":5,"text":"NPATHS=8"},{"type":6,"text":"GEN_NUM=77"}],"congested":null,"captured":48,"wire_len":48}"#
    );

    // Filters on the report.
    let out = rds_trace(run.path(), &["-r", file.to_str().unwrap(), "--port", "0"]);
    assert_eq!(text(&out.stdout).lines().count(), 5); // probe, probe-pong, map, ping, pong
    let out = rds_trace(
        run.path(),
        &["-r", file.to_str().unwrap(), "--peer", "2001:db8::1"],
    );
    assert_eq!(
        text(&out.stdout),
        SAMPLE_REPORT.lines().last().unwrap().to_string() + "\n"
    );

    // tshark with the dissector agrees on every frame (its own decoding, formatted by the
    // test helper).
    {
        let ts = tshark();
        let home = tempfile::tempdir().unwrap();
        let v4 = run.path().join("v4.pcap");
        // The helper decodes IPv4 only: drop the last (IPv6) record.
        let bytes = std::fs::read(&file).unwrap();
        let mut at = 24;
        let mut last = 24;
        while at + 16 <= bytes.len() {
            last = at;
            at += 16 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        }
        std::fs::write(&v4, &bytes[..last]).unwrap();
        let frames = tshark_frames(&ts, home.path(), &v4);
        let lines: Vec<String> = frames.iter().map(expected_line).collect();
        let want: Vec<&str> = SAMPLE_REPORT.lines().take(10).collect();
        for (i, (l, w)) in lines.iter().zip(&want).enumerate() {
            if i == 6 {
                // The snapped frame: the report adds what the dissector does not show.
                assert_eq!(format!("{l} snapped 100/3048"), *w);
            } else {
                assert_eq!(l, w);
            }
        }
        assert_eq!(lines.len(), 10);
    }
}

#[test]
fn report_errors() {
    let run = tempfile::tempdir().unwrap();
    let missing = run.path().join("missing.pcap");
    let out = rds_trace(run.path(), &["-r", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "rds-trace: {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let junk = run.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let out = rds_trace(run.path(), &["-r", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!("rds-trace: {}: not a pcap capture\n", junk.display())
    );
    // Text shorter than a pcap header, and binary with a wrong magic number.
    let short = run.path().join("short.txt");
    std::fs::write(&short, b"hello\n").unwrap();
    let bin = run.path().join("bin.dat");
    std::fs::write(
        &bin,
        (0..100u8).map(|i| i.wrapping_mul(37)).collect::<Vec<_>>(),
    )
    .unwrap();
    for f in [&short, &bin] {
        let out = rds_trace(run.path(), &["-r", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(out.stdout, b"");
        assert_eq!(
            text(&out.stderr),
            format!("rds-trace: {}: not a pcap capture\n", f.display())
        );
    }
    // A capture cut in the middle of a record: the frames before are reported, then the
    // error.
    let good = run.path().join("good.pcap");
    write_sample(&good);
    let mut b = std::fs::read(&good).unwrap();
    b.truncate(b.len() - 3);
    let cut = run.path().join("cut.pcap");
    std::fs::write(&cut, &b).unwrap();
    let out = rds_trace(run.path(), &["-r", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stdout),
        SAMPLE_REPORT
            .lines()
            .take(10)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
}

/// What the fake node does after `TraceStart`.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Refuse with this errno and message.
    Refuse(i32, &'static str),
    /// Send `n` frames, then wait for `TraceStop` and end with `dropped`.
    Frames { n: u64, dropped: u64 },
}

/// A fake node: serves `NAME.sock` in `dir`, answers Hello and TraceStart as told. Records
/// the requests it got.
fn fake_node(dir: &Path, name: &str, how: Behaviour) -> Arc<Mutex<Vec<Request>>> {
    let l = UnixListener::bind(dir.join(format!("{name}.sock"))).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let name = name.to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (log, name) = (log2.clone(), name.clone());
            std::thread::spawn(move || serve_fake(s, &name, how, &log));
        }
    });
    log
}

/// The pid a fake node reports: above the kernel's largest pid (2^22), so that no process
/// has it and the nodes of different names run in different processes.
fn fake_pid(name: &str) -> u32 {
    match name {
        "alpha" => 4_194_401,
        "beta" => 4_194_402,
        _ => 4_194_400,
    }
}

fn reply(s: &mut UnixStream, r: &Reply, data: &[u8]) -> bool {
    write_frame(s, &serde_json::to_vec(r).unwrap(), data).is_ok()
}

fn serve_fake(mut s: UnixStream, name: &str, how: Behaviour, log: &Mutex<Vec<Request>>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    while let Ok((json, _)) = read_frame(&mut s) {
        let req: Request = serde_json::from_slice(&json).unwrap();
        log.lock().unwrap().push(req.clone());
        match req {
            Request::Hello { .. } => {
                let r = Reply::Hello {
                    v: PROTO_VERSION,
                    node: name.into(),
                    version: "0".into(),
                    rds_protocol: "3.1".into(),
                    pid: fake_pid(name),
                    owner_uid: 4242,
                    addrs: vec!["192.0.2.1".parse::<IpAddr>().unwrap()],
                };
                reply(&mut s, &r, &[]);
            }
            Request::TraceStart { .. } => match how {
                Behaviour::Refuse(errno, message) => {
                    let r = Reply::Error {
                        errno,
                        message: message.into(),
                    };
                    reply(&mut s, &r, &[]);
                }
                Behaviour::Frames { n, dropped } => {
                    // A node that streams the frames (no link type): rds-trace writes them.
                    let started = Reply::TraceStarted {
                        transports: vec!["tcp".into()],
                        link: None,
                    };
                    reply(&mut s, &started, &[]);
                    // Each frame in a batch of its own, then a batch of two: a frame of
                    // another transport (IB) and a same-node loopback frame.
                    for i in 0..n {
                        let h = HeaderRepr::data(i + 1, 4000, 5000, 4);
                        let f = TapFrame {
                            ts_ns: T0 + i * 1000,
                            dir: Direction::Tx,
                            laddr: "192.0.2.1".parse().unwrap(),
                            faddr: "192.0.2.2".parse().unwrap(),
                            lane: 0,
                            transport: Transport::Tcp {
                                local: sa("192.0.2.1:40000"),
                                peer: sa("192.0.2.2:16385"),
                            },
                            orig_len: 52,
                            data: frame(&h, b"data"),
                        };
                        let mut batch = Vec::new();
                        encode_record(&mut batch, &f);
                        if !reply(&mut s, &Reply::TraceFrames { frames: 1 }, &batch) {
                            return;
                        }
                    }
                    let ib = TapFrame {
                        ts_ns: T0 + n * 1000,
                        dir: Direction::Rx,
                        laddr: "192.0.2.1".parse().unwrap(),
                        faddr: "192.0.2.2".parse().unwrap(),
                        lane: 0,
                        transport: Transport::Ib {
                            local_qpn: 0x10,
                            peer_qpn: 0x20,
                            local_lid: 1,
                            peer_lid: 2,
                            solicited: true,
                        },
                        orig_len: 48,
                        data: HeaderRepr::data(1, 1, 2, 0).to_bytes().to_vec().into(),
                    };
                    let lo = TapFrame {
                        transport: Transport::Loopback,
                        ..ib.clone()
                    };
                    let mut batch = Vec::new();
                    encode_record(&mut batch, &ib);
                    encode_record(&mut batch, &lo);
                    reply(&mut s, &Reply::TraceFrames { frames: 2 }, &batch);
                    // Until TraceStop.
                    while let Ok((json, _)) = read_frame(&mut s) {
                        let req: Request = serde_json::from_slice(&json).unwrap();
                        log.lock().unwrap().push(req.clone());
                        if req == Request::TraceStop {
                            let r = Reply::TraceEnd {
                                captured: n + 2,
                                dropped,
                                written: None,
                            };
                            reply(&mut s, &r, &[]);
                            break;
                        }
                    }
                }
            },
            _ => {
                reply(&mut s, &Reply::Ok, &[]);
            }
        }
    }
}

#[test]
fn capture_client_against_a_fake_node() {
    let run = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("c.pcap");
    let f = file.to_str().unwrap();

    // No node at all.
    let out = rds_trace(run.path(), &["-w", f]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: no RDS node is running (start one with 'rds-ctrl load', or run a tool that \
         embeds one, such as rds-stress)\n"
    );
    assert!(!file.exists());

    // One node: it is the default. It refuses: not privileged.
    let log = fake_node(
        run.path(),
        "alpha",
        Behaviour::Refuse(
            libc::EPERM,
            "permission denied: this needs root or the node's owner",
        ),
    );
    let out = rds_trace(
        run.path(),
        &["-w", f, "-s", "96", "--peer", "192.0.2.2", "--port", "4000"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: cannot trace node 'alpha': permission denied: tracing needs root or the \
         node's owner (uid 4242) (permission denied: this needs root or the node's owner)\n"
    );
    assert!(!file.exists());
    assert_eq!(
        std::fs::read_dir(out_dir.path()).unwrap().count(),
        0,
        "the temporary capture file is left"
    );
    // A regular file: the node is asked to write it (its descriptor comes with the request).
    assert!(log.lock().unwrap().contains(&Request::TraceStart {
        snaplen: 96,
        peer: Some("192.0.2.2".parse().unwrap()),
        port: Some(4000),
        output: Some(TraceOutput {
            link: None,
            count: None,
        }),
    }));

    // Frames 1 and 2 share a TCP segment (the writer holds a partial segment up to 1 ms), so
    // both complete in the packet stamped with frame 2's time.

    // Two nodes of two processes and no daemon: an IB capture (one node's) needs --node. (A
    // TCP capture traces every node this user may trace: tests/tests/trace_loopback.rs.)
    let _beta = fake_node(run.path(), "beta", Behaviour::Frames { n: 3, dropped: 5 });
    let out = rds_trace(run.path(), &["-w", f, "--transport", "ib"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: several RDS nodes are running; choose one with --node NAME|ADDRESS|PID: \
         alpha (pid 4194401, 192.0.2.1), beta (pid 4194402, 192.0.2.1)\n"
    );
    let out = rds_trace(run.path(), &["-w", f, "--node", "gamma"]);
    assert_eq!(
        text(&out.stderr),
        "rds-trace: no RDS node is named 'gamma'; running nodes: alpha (pid 4194401, \
         192.0.2.1), beta (pid 4194402, 192.0.2.1)\n"
    );
    let out = rds_trace(run.path(), &["-w", f, "--node", "192.0.2.1"]);
    assert_eq!(
        text(&out.stderr),
        "rds-trace: several RDS nodes match '192.0.2.1'; choose one with --node \
         NAME|ADDRESS|PID: alpha (pid 4194401, 192.0.2.1), beta (pid 4194402, 192.0.2.1)\n"
    );
    let out = rds_trace(run.path(), &["-w", f, "--node", "192.0.2.9"]);
    assert!(
        text(&out.stderr)
            .starts_with("rds-trace: no RDS node owns the address 192.0.2.9; running nodes: alpha"),
        "{}",
        text(&out.stderr)
    );

    // -c 2 against beta, chosen by its pid: two frames written, the stop sent, the node's
    // counters reported.
    let out = rds_trace(
        run.path(),
        &["-w", f, "-c", "2", "--node", "4194402", "-s", "0"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: tracing node 'beta' (192.0.2.1), snaplen 1048624, transport tcp\n2 frames captured, 5 dropped\n"
    );
    let rep = rds_trace(run.path(), &["-r", f]);
    assert_eq!(
        text(&rep.stdout),
        "22:13:20.000001000 tx 192.0.2.1:40000 > 192.0.2.2:16385 lane 0 data 4000 > 5000 seq 1 len 4\n\
         22:13:20.000001000 tx 192.0.2.1:40000 > 192.0.2.2:16385 lane 0 data 4000 > 5000 seq 2 len 4\n"
    );

    // -G: all frames, the one without TCP endpoints counted apart.
    let out = rds_trace(run.path(), &["-w", f, "-G", "0.3", "--node", "beta"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: tracing node 'beta' (192.0.2.1), snaplen 262144, transport tcp\n3 frames captured, 5 dropped\n\
         rds-trace: 2 frames of other transports than RDS/TCP (or same-node loopback) were not written\n"
    );

    // The daemon is the default among several nodes.
    let _d = fake_node(run.path(), "daemon", Behaviour::Refuse(libc::EBUSY, "busy"));
    let out = rds_trace(run.path(), &["-w", f]);
    assert_eq!(
        text(&out.stderr),
        "rds-trace: cannot trace node 'daemon': another trace session is running on it (one per node)\n"
    );

    // An output file that cannot be created: the trace is stopped again.
    let log = fake_node(run.path(), "delta", Behaviour::Frames { n: 0, dropped: 0 });
    let out = rds_trace(
        run.path(),
        &["-w", "/nonexistent-dir/x.pcap", "--node", "delta"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "rds-trace: creating /nonexistent-dir/x.pcap: No such file or directory (os error 2)\n"
    );
    wait_until("the stop", || {
        log.lock().unwrap().contains(&Request::TraceStop)
    });
}

#[test]
fn installs_the_wireshark_plugin() {
    let home = tempfile::tempdir().unwrap();
    let run = tempfile::tempdir().unwrap();
    let dest = home.path().join(".local/lib/wireshark/plugins/rds.lua");
    let install = || {
        Command::cargo_bin("rds-trace")
            .unwrap()
            .env("HOME", home.path())
            .env("RDS_RUNTIME_DIR", run.path())
            .arg("--install-wireshark-plugin")
            .output()
            .unwrap()
    };
    let out = install();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "RDS dissector installed: {}\nWireshark and tshark started from now on decode RDS \
             (TCP port 16385 and InfiniBand).\n",
            dest.display()
        )
    );
    let shipped = std::fs::read(lua_script()).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), shipped);
    let out = install();
    assert!(text(&out.stdout).starts_with("RDS dissector already up to date: "));
    std::fs::write(&dest, b"-- old").unwrap();
    let out = install();
    assert!(text(&out.stdout).starts_with("RDS dissector updated: "));
    assert_eq!(std::fs::read(&dest).unwrap(), shipped);

    // --plugin-dir.
    let other = home.path().join("sys/plugins");
    let out = Command::cargo_bin("rds-trace")
        .unwrap()
        .args(["--install-wireshark-plugin", "--plugin-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(other.join("rds.lua")).unwrap(), shipped);

    // tshark loads it from there with no options: plain `tshark -r` decodes RDS.
    let ts = tshark();
    let sample = run.path().join("s.pcap");
    write_sample(&sample);
    let out = std::process::Command::new(&ts)
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .args(["-n", "-r"])
        .arg(&sample)
        .args(["-Y", "rds", "-T", "fields", "-e", "rds.seq"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().count(),
        11,
        "{}",
        text(&out.stdout)
    );
}

/// Options named in `--help` and in `man/rds-trace.1` (as `\-x` / `\-\-long`).
#[test]
fn man_page_matches_help() {
    let man =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../man/rds-trace.1"))
            .expect("man/rds-trace.1");
    let help = text(
        &Command::cargo_bin("rds-trace")
            .unwrap()
            .arg("--help")
            .output()
            .unwrap()
            .stdout,
    );
    let mut help_opts: Vec<String> = Vec::new();
    for line in help.lines() {
        let l = line.trim_start();
        if !l.starts_with('-') {
            continue;
        }
        for word in l.split([' ', ',']) {
            // `-v...`: a flag that may be repeated.
            let word = word.trim_end_matches("...");
            if word.starts_with('-') && word.len() > 1 {
                help_opts.push(word.to_string());
            }
        }
    }
    help_opts.sort();
    help_opts.dedup();
    // Every option of --help is documented in the man page.
    for o in &help_opts {
        let roff = o.replace('-', "\\-");
        assert!(man.contains(&roff), "{o} missing in the man page");
    }
    // Every option the man page documents (an .TP item) exists.
    let mut man_opts: Vec<String> = Vec::new();
    let lines: Vec<&str> = man.lines().collect();
    for w in lines.windows(2) {
        if w[0].starts_with(".TP") {
            let item = w[1];
            for word in item.split([' ', '"']) {
                if word.starts_with("\\-") {
                    man_opts.push(word.replace("\\-", "-"));
                }
            }
        }
    }
    man_opts.sort();
    man_opts.dedup();
    assert!(!man_opts.is_empty());
    assert_eq!(man_opts, help_opts, "options of the man page and of --help");
    // The documented default snap length.
    assert!(man.contains("262144"));
    let _ = std::io::stdout().flush();
}
