//! The Wireshark dissector (`wireshark/rds.lua`) against captures written by
//! `rds_core::trace`: tshark must decode every RDS frame to exactly the values written, put it
//! in the packet our reader says completes it, and never report a malformed packet.
//!
//! tshark must be installed (`.ci/deps.d/tshark.sh` does it); these tests fail without it.
//! Set `RDS_DISSECTOR_KEEP=DIR` to keep the captures for a look in Wireshark.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use rds_core::trace::{
    CapturedFrame, Direction, FrameLink, PcapFrames, PcapSink, TcpCaptureConfig, TraceRecord,
    Transport,
};

/// 2023-11-14 22:13:20 UTC.
const T0: u64 = 1_700_000_000_000_000_000;

// ---------------------------------------------------------------------------------------
// RDS frames, built here field by field (independently of rds_core::wire).
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Csum {
    /// `h_csum` 0 (RDS/TCP always).
    #[default]
    Zero,
    /// The correct Internet checksum over the 48 bytes.
    Good,
    /// This wrong value.
    Bad(u16),
}

#[derive(Debug, Clone, Default)]
struct Hdr {
    seq: u64,
    ack: u64,
    sport: u16,
    dport: u16,
    flags: u8,
    credit: u8,
    csum: Csum,
    /// Raw extension area (at most 16 bytes, zero-filled).
    ext: Vec<u8>,
}

fn internet_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The 48-byte header with `h_len` = `h_len`, followed by `payload`.
fn build(h: &Hdr, h_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 48];
    f[0..8].copy_from_slice(&h.seq.to_be_bytes());
    f[8..16].copy_from_slice(&h.ack.to_be_bytes());
    f[16..20].copy_from_slice(&h_len.to_be_bytes());
    f[20..22].copy_from_slice(&h.sport.to_be_bytes());
    f[22..24].copy_from_slice(&h.dport.to_be_bytes());
    f[24] = h.flags;
    f[25] = h.credit;
    assert!(h.ext.len() <= 16);
    f[32..32 + h.ext.len()].copy_from_slice(&h.ext);
    let csum = match h.csum {
        Csum::Zero => 0,
        Csum::Good => internet_checksum(&f),
        Csum::Bad(v) => v,
    };
    f[30..32].copy_from_slice(&csum.to_be_bytes());
    if let Csum::Good = h.csum {
        assert_eq!(internet_checksum(&f), 0);
    }
    f.extend_from_slice(payload);
    f
}

fn pattern(n: usize, salt: u64) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// An 8192-byte congestion map (little-endian bit order) with `ports` set.
fn cong_map(ports: &[u16]) -> Vec<u8> {
    let mut m = vec![0u8; 8192];
    for &p in ports {
        m[usize::from(p / 8)] |= 1 << (p % 8);
    }
    m
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// What tshark must show for each frame.
// ---------------------------------------------------------------------------------------

/// Fields compared for every capture. Each frame's value is the comma-joined values of the
/// RDS frames shown in it, in order (tshark's `-E occurrence=a -E aggregator=,`).
const FIELDS: &[&str] = &[
    "rds.seq",
    "rds.ack",
    "rds.len",
    "rds.sport",
    "rds.dport",
    "rds.flags",
    "rds.flags.cong_bitmap",
    "rds.flags.ack_required",
    "rds.flags.retransmitted",
    "rds.flags.hb_ping",
    "rds.flags.hb_pong",
    "rds.flags.exthdr_extension",
    "rds.credit",
    "rds.padding",
    "rds.csum",
    "rds.csum.good",
    "rds.exthdr",
    "rds.exthdr.type",
    "rds.exthdr.version",
    "rds.exthdr.rdma_rkey",
    "rds.exthdr.rdma_offset",
    "rds.exthdr.rdma_bytes",
    "rds.exthdr.rdma_rflags",
    "rds.exthdr.npaths",
    "rds.exthdr.gen_num",
    "rds.exthdr.sport_idx",
    "rds.exthdr.data",
    "rds.cong_map.count",
    "rds.cong_map.port",
    "rds.payload",
];

/// One RDS frame of a scenario and the field values tshark must show for it.
#[derive(Debug, Clone)]
struct Frame {
    rec: TraceRecord,
    fields: BTreeMap<&'static str, String>,
}

/// A scenario: records in writing order.
#[derive(Debug, Default)]
struct Scenario {
    frames: Vec<Frame>,
    ts: u64,
}

fn flag(v: bool) -> String {
    if v { "1" } else { "0" }.to_string()
}

impl Scenario {
    fn new() -> Self {
        Scenario {
            frames: Vec::new(),
            ts: T0,
        }
    }

    /// Adds a frame. `h_len` is the message length (differs from the payload only for IB
    /// fragments); `snap` cuts the captured bytes; `ext` lists the expected extension fields.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        dir: Direction,
        transport: Transport,
        h: Hdr,
        h_len: u32,
        payload: &[u8],
        snap: Option<usize>,
        ext: &[(&'static str, &str)],
        gap_ns: u64,
    ) -> &mut Frame {
        self.ts += gap_ns;
        let frame = Bytes::from(build(&h, h_len, payload));
        let rec = match transport {
            Transport::Tcp { local, peer } => {
                let lane = match dir {
                    Direction::Tx | Direction::Rx => {
                        let client = if local.port() == 16385 { peer } else { local };
                        (client.port() % 8) as u8
                    }
                };
                TraceRecord::tcp(self.ts, dir, lane, local, peer, frame)
            }
            Transport::Ib { .. } => TraceRecord::ib(
                self.ts,
                dir,
                "10.1.0.1".parse().unwrap(),
                "10.1.0.2".parse().unwrap(),
                transport,
                frame,
            ),
            Transport::Loopback => unreachable!("a capture holds no loopback frames"),
        };
        let rec = match snap {
            Some(n) => rec.snapped(n),
            None => rec,
        };
        let captured_payload = &rec.data[48..];
        let mut fields = BTreeMap::new();
        let csum = u16::from_be_bytes([rec.data[30], rec.data[31]]);
        fields.insert("rds.seq", h.seq.to_string());
        fields.insert("rds.ack", h.ack.to_string());
        fields.insert("rds.len", h_len.to_string());
        fields.insert("rds.sport", h.sport.to_string());
        fields.insert("rds.dport", h.dport.to_string());
        fields.insert("rds.flags", format!("0x{:02x}", h.flags));
        for (name, bit) in [
            ("rds.flags.cong_bitmap", 0x01),
            ("rds.flags.ack_required", 0x02),
            ("rds.flags.retransmitted", 0x04),
            ("rds.flags.hb_ping", 0x08),
            ("rds.flags.hb_pong", 0x10),
            ("rds.flags.exthdr_extension", 0x20),
        ] {
            fields.insert(name, flag(h.flags & bit != 0));
        }
        fields.insert("rds.credit", h.credit.to_string());
        fields.insert("rds.padding", "00000000".to_string());
        fields.insert("rds.csum", format!("0x{csum:04x}"));
        if csum != 0 {
            fields.insert("rds.csum.good", flag(h.csum == Csum::Good));
        }
        fields.insert("rds.exthdr", hex(&rec.data[32..48]));
        if !captured_payload.is_empty() && h.flags & 0x01 == 0 {
            fields.insert("rds.payload", hex(captured_payload));
        }
        for (k, v) in ext {
            fields.insert(k, v.to_string());
        }
        self.frames.push(Frame { rec, fields });
        self.frames.last_mut().unwrap()
    }

    fn tcp_sink(&self, cfg: TcpCaptureConfig, path: &Path) {
        let mut sink = PcapSink::ethernet(std::fs::File::create(path).unwrap(), cfg).unwrap();
        for f in &self.frames {
            sink.write(&f.rec).unwrap();
        }
        sink.finish().unwrap();
    }

    fn erf_sink(&self, path: &Path) {
        let mut sink = PcapSink::erf(std::fs::File::create(path).unwrap()).unwrap();
        for f in &self.frames {
            sink.write(&f.rec).unwrap();
        }
        sink.finish().unwrap();
    }

    /// Reads `path` back with our reader, matches every frame to the record it came from,
    /// and returns (packet number, scenario index) in reader order.
    fn read_back(&self, path: &Path) -> Vec<(u64, usize)> {
        let mut used = vec![false; self.frames.len()];
        let mut out = Vec::new();
        for item in PcapFrames::new(std::fs::File::open(path).unwrap()).unwrap() {
            let got: CapturedFrame = item.unwrap();
            let idx = self
                .frames
                .iter()
                .enumerate()
                .position(|(i, f)| !used[i] && matches_record(&got, &f.rec))
                .unwrap_or_else(|| panic!("reader frame matches no record: {got:?}"));
            used[idx] = true;
            out.push((got.frame_no, idx));
        }
        assert!(used.iter().all(|u| *u), "every record read back");
        out
    }
}

fn matches_record(got: &CapturedFrame, rec: &TraceRecord) -> bool {
    let link_ok = match (got.link, rec.transport) {
        (FrameLink::Tcp { src, dst }, Transport::Tcp { local, peer }) => match rec.dir {
            Direction::Tx => (src, dst) == (local, peer),
            Direction::Rx => (src, dst) == (peer, local),
        },
        (
            FrameLink::Ib {
                dest_qpn,
                solicited,
                ..
            },
            Transport::Ib {
                local_qpn,
                peer_qpn,
                solicited: s,
                ..
            },
        ) => {
            solicited == s
                && dest_qpn
                    == match rec.dir {
                        Direction::Tx => peer_qpn,
                        Direction::Rx => local_qpn,
                    }
        }
        _ => false,
    };
    link_ok
        && got.dir == Some(rec.dir)
        && got.lane == rec.lane
        && got.orig_len == rec.orig_len
        && got.data == rec.data
}

// ---------------------------------------------------------------------------------------
// tshark
// ---------------------------------------------------------------------------------------

fn lua_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../wireshark/rds.lua")
        .canonicalize()
        .expect("wireshark/rds.lua exists")
}

struct Tshark {
    exe: PathBuf,
    home: tempfile::TempDir,
}

impl Tshark {
    /// Fails the test when tshark is missing ([`rds_tests::tshark`]).
    fn new() -> Self {
        Tshark {
            exe: rds_tests::tshark(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs tshark with the dissector loaded and a private HOME (no personal plugins or
    /// preferences). Fails on a non-zero exit and on any Lua error message.
    fn run(&self, file: &Path, args: &[&str]) -> String {
        let script = format!("lua_script:{}", lua_script().display());
        let out = Command::new(&self.exe)
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join(".config"))
            .env("LC_ALL", "C.UTF-8")
            .args(["-n", "-X", &script, "-r"])
            .arg(file)
            .args(args)
            .output()
            .expect("tshark runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "tshark {args:?} failed: {stderr}\n{stdout}"
        );
        for line in stderr.lines() {
            assert!(
                !line.contains("Lua") && !line.contains("rror"),
                "tshark reported: {stderr}"
            );
        }
        assert!(!stdout.contains("Lua Error"), "Lua error in the output");
        stdout
    }

    /// One row per packet: the requested fields (all occurrences, comma-joined).
    fn fields(&self, file: &Path, extra: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=a"]);
        args.extend(["-E", "aggregator=,", "-E", "quote=n"]);
        for f in fields {
            args.extend(["-e", f]);
        }
        let out = self.run(file, &args);
        out.lines()
            .map(|l| l.split('\t').map(str::to_string).collect::<Vec<_>>())
            .inspect(|row| assert_eq!(row.len(), fields.len(), "{row:?}"))
            .collect()
    }

    /// Packet numbers matching a display filter.
    fn matching(&self, file: &Path, extra: &[&str], filter: &str) -> Vec<u64> {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["-Y", filter, "-T", "fields", "-e", "frame.number"]);
        self.run(file, &args)
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }
}

fn keep(path: &Path) {
    if let Some(dir) = std::env::var_os("RDS_DISSECTOR_KEEP") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(path, dir.join(path.file_name().unwrap())).unwrap();
    }
}

/// Checks every packet of `file` against `scn`: the RDS fields of the frames the reader puts
/// in each packet, in order; no RDS fields elsewhere; nothing malformed. Returns the reader's
/// (packet, scenario index) list.
fn check_capture(
    ts: &Tshark,
    scn: &Scenario,
    file: &Path,
    extra: &[&str],
    skip: &[usize],
) -> Vec<(u64, usize)> {
    keep(file);
    let placed = scn.read_back(file);
    let rows = ts.fields(file, extra, FIELDS);
    let mut expected: Vec<BTreeMap<&str, Vec<String>>> = vec![BTreeMap::new(); rows.len()];
    for &(no, idx) in &placed {
        if skip.contains(&idx) {
            continue;
        }
        let slot = &mut expected[(no - 1) as usize];
        for (k, v) in &scn.frames[idx].fields {
            slot.entry(k).or_default().push(v.clone());
        }
    }
    for (i, row) in rows.iter().enumerate() {
        for (j, name) in FIELDS.iter().enumerate() {
            let want = expected[i]
                .get(name)
                .map(|v| v.join(","))
                .unwrap_or_default();
            assert_eq!(
                row[j],
                want,
                "packet {} field {name} (expected frames: {:?})",
                i + 1,
                placed
                    .iter()
                    .filter(|p| p.0 == i as u64 + 1)
                    .collect::<Vec<_>>()
            );
        }
    }
    assert_eq!(
        ts.matching(
            file,
            extra,
            "_ws.malformed || _ws.expert.group == \"Malformed\""
        ),
        Vec::<u64>::new(),
        "malformed packets"
    );
    // Some dissectors only say so in the Info column.
    for row in ts.fields(file, extra, &["frame.number", "_ws.col.Info"]) {
        assert!(
            !row[1].contains("Malformed"),
            "packet {}: {}",
            row[0],
            row[1]
        );
    }
    placed
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn tcp(local: &str, peer: &str) -> Transport {
    Transport::Tcp {
        local: sa(local),
        peer: sa(peer),
    }
}

const TX: Direction = Direction::Tx;
const RX: Direction = Direction::Rx;
/// Close enough for frames to share segments (the writer's default hold is 1 ms).
const CLOSE: u64 = 10_000;

fn data(seq: u64, sport: u16, dport: u16, flags: u8) -> Hdr {
    Hdr {
        seq,
        sport,
        dport,
        flags,
        ..Hdr::default()
    }
}

/// Extension area bytes.
fn ext(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

#[test]
fn tcp_messages_of_all_kinds_decode_exactly() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    let c = tcp("192.0.2.1:40000", "192.0.2.2:16385");
    let mut s = Scenario::new();
    // Handshake: a probe ping with NPATHS, GEN_NUM and SPORT_IDX (new kernels) and a probe
    // pong with NPATHS only (base kernels).
    let probe = Hdr {
        ext: ext(&[&[5, 0, 8], &[6, 0x12, 0x34, 0x56, 0x78], &[8, 0]]),
        ..data(1, 1, 0, 0)
    };
    s.add(
        TX,
        c,
        probe,
        0,
        &[],
        None,
        &[
            ("rds.exthdr.type", "5,6,8"),
            ("rds.exthdr.npaths", "8"),
            ("rds.exthdr.gen_num", "305419896"),
            ("rds.exthdr.sport_idx", "0"),
            ("rds.exthdr.data", "00"),
        ],
        CLOSE,
    );
    let pong = Hdr {
        ext: ext(&[&[5, 0, 8]]),
        ..data(1, 0, 1, 0)
    };
    s.add(
        RX,
        c,
        pong,
        0,
        &[],
        None,
        &[("rds.exthdr.type", "5"), ("rds.exthdr.npaths", "8")],
        CLOSE,
    );
    // The peer's congestion map right after the connection came up.
    let ports = [0u16, 7, 8, 4000, 32767, 32768, 65535];
    s.add(
        RX,
        c,
        data(0, 0, 0, 0x01),
        8192,
        &cong_map(&ports),
        None,
        &[
            ("rds.cong_map.count", "7"),
            ("rds.cong_map.port", "0,7,8,4000,32767,32768,65535"),
        ],
        CLOSE,
    );
    // Data of many sizes, pings and pongs, ACK_REQUIRED and RETRANSMITTED.
    let mut seq = 2;
    for (i, n) in [
        17usize,
        1,
        0,
        47,
        48,
        1400,
        1448,
        4096,
        9000,
        65536,
        1 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let flags = match i {
            0 => 0x02,
            4 => 0x04,
            _ => 0,
        };
        s.add(
            TX,
            c,
            data(seq, 4000, 5000, flags),
            n as u32,
            &pattern(n, seq),
            None,
            &[],
            CLOSE,
        );
        seq += 1;
        if i % 4 == 1 {
            s.add(TX, c, data(seq, 4000, 0, 0), 0, &[], None, &[], CLOSE);
            seq += 1;
        }
    }
    s.add(RX, c, data(2, 0, 4000, 0), 0, &[], None, &[], CLOSE);
    s.add(RX, c, data(3, 0, 4000, 0x04), 0, &[], None, &[], CLOSE);
    // Every extension type, several per header, with the kernel's parsing rules.
    type Expect = Vec<(&'static str, &'static str)>;
    let exts: [(Vec<u8>, Expect); 7] = [
        (
            ext(&[
                &[1, 0, 0, 3, 1],
                &[3, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0x10, 0],
            ]),
            vec![
                ("rds.exthdr.type", "1,3"),
                ("rds.exthdr.version", "0x00000301"),
                ("rds.exthdr.rdma_rkey", "0xdeadbeef"),
                ("rds.exthdr.rdma_offset", "0x00001000"),
            ],
        ),
        (
            ext(&[&[2, 0, 0, 0x12, 0x34], &[4, 0, 1, 0, 0, 2, 0, 0, 0]]),
            vec![
                ("rds.exthdr.type", "2,4"),
                ("rds.exthdr.rdma_rkey", "0x00001234"),
                ("rds.exthdr.rdma_bytes", "65536"),
                ("rds.exthdr.rdma_rflags", "0x02"),
                ("rds.exthdr.data", "0001000002000000"),
            ],
        ),
        // Unknown types below 16 have no body and parsing goes on.
        (
            ext(&[&[12], &[7], &[9], &[5, 0, 4], &[11]]),
            vec![
                ("rds.exthdr.type", "12,7,9,5,11"),
                ("rds.exthdr.npaths", "4"),
            ],
        ),
        // A type of 16 or more stops parsing.
        (
            ext(&[&[6, 0, 0, 0, 9], &[20, 5, 0, 8]]),
            vec![("rds.exthdr.type", "6,20"), ("rds.exthdr.gen_num", "9")],
        ),
        // A body that does not fit stops parsing; a full area needs no terminator.
        (
            ext(&[&[6, 0, 0, 0, 1], &[6, 0, 0, 0, 2], &[6, 0, 0, 0, 3], &[3]]),
            vec![
                ("rds.exthdr.type", "6,6,6,3"),
                ("rds.exthdr.gen_num", "1,2,3"),
            ],
        ),
        (
            ext(&[&[8, 3], &[5, 0, 8], &[6, 0, 0, 1, 0], &[8, 0]]),
            vec![
                ("rds.exthdr.type", "8,5,6,8"),
                ("rds.exthdr.npaths", "8"),
                ("rds.exthdr.gen_num", "256"),
                ("rds.exthdr.sport_idx", "3,0"),
                ("rds.exthdr.data", "03,00"),
            ],
        ),
        (
            ext(&[&[4, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0], &[1, 0, 0, 4, 1]]),
            vec![
                ("rds.exthdr.type", "4,1"),
                ("rds.exthdr.rdma_bytes", "4294967295"),
                ("rds.exthdr.rdma_rflags", "0x01"),
                ("rds.exthdr.data", "ffffffff01000000"),
                ("rds.exthdr.version", "0x00000401"),
            ],
        ),
    ];
    for (raw, fields) in exts {
        let h = Hdr {
            ext: raw,
            ..data(seq, 4000, 5000, 0x20)
        };
        s.add(TX, c, h, 3, b"abc", None, &fields, CLOSE);
        seq += 1;
    }
    // Header checksums are not used on TCP, but a present one is still checked.
    let good = Hdr {
        csum: Csum::Good,
        credit: 7,
        ack: 99,
        ..data(seq, 4000, 5000, 0)
    };
    s.add(TX, c, good, 5, b"12345", None, &[], CLOSE);
    let bad = Hdr {
        csum: Csum::Bad(0x1234),
        ..data(seq + 1, 4000, 5000, 0)
    };
    s.add(TX, c, bad, 0, &[], None, &[], CLOSE);

    let file = dir.path().join("tcp_kinds.pcap");
    s.tcp_sink(TcpCaptureConfig::default(), &file);
    let placed = check_capture(&ts, &s, &file, &[], &[]);
    let last_frame = placed.iter().map(|p| p.0).max().unwrap();

    // The 1 MiB message was reassembled from 725 segments (1048624 / 1448, rounded up, give
    // or take a shared first and last segment) and shown in the packet our reader names.
    let big = s
        .frames
        .iter()
        .position(|f| f.rec.orig_len == 48 + (1 << 20))
        .unwrap();
    let big_at = placed.iter().find(|p| p.1 == big).unwrap().0;
    let rows = ts.fields(
        &file,
        &[],
        &["frame.number", "tcp.reassembled.length", "tcp.len"],
    );
    assert_eq!(
        rows[(big_at - 1) as usize][1],
        (48 + (1u32 << 20)).to_string()
    );
    let segments = rows.iter().filter(|r| r[2] != "0").count();
    assert!(
        segments as u64 >= last_frame && segments > 725,
        "{segments} segments"
    );
    // Expert info: the bad checksum is an error, RETRANSMITTED a note.
    let bad_at = placed.last().unwrap().0;
    assert_eq!(ts.matching(&file, &[], "rds.csum.bad"), vec![bad_at]);
    assert_eq!(
        ts.matching(&file, &[], "_ws.expert.severity == \"Error\""),
        vec![bad_at]
    );
    assert_eq!(ts.matching(&file, &[], "rds.retransmitted").len(), 2);
    assert_eq!(ts.matching(&file, &[], "rds.exthdr.invalid").len(), 1);
    assert_eq!(ts.matching(&file, &[], "rds.exthdr.overflow").len(), 1);
    // Correct IPv4 and TCP checksums on every packet (tshark verifies when asked).
    let rows = ts.fields(
        &file,
        &[
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
        ],
        &["ip.checksum.status", "tcp.checksum.status"],
    );
    assert!(rows.iter().all(|r| r[0] == "1" && r[1] == "1"), "{rows:?}");
}

/// Info column texts of the packets that show RDS frames.
fn infos(ts: &Tshark, file: &Path, extra: &[&str]) -> BTreeMap<u64, String> {
    ts.fields(
        file,
        extra,
        &["frame.number", "_ws.col.Protocol", "_ws.col.Info"],
    )
    .into_iter()
    .filter(|r| r[1] == "RDS")
    .map(|r| (r[0].parse().unwrap(), r[2].clone()))
    .collect()
}

#[test]
fn header_straddling_two_segments_is_reassembled() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    let c = tcp("192.0.2.1:40008", "192.0.2.2:16385");
    let mut s = Scenario::new();
    // MSS 1000: frame 1 is 970 bytes, so frame 2's header has 30 bytes in segment 1 and 18 in
    // segment 2. Frame 2 is 2000 bytes, so frame 3's header straddles segments 3 and 4 the
    // same way (30 + 18 bytes at stream offset 2970).
    s.add(
        TX,
        c,
        data(1, 4000, 5000, 0),
        922,
        &pattern(922, 1),
        None,
        &[],
        CLOSE,
    );
    s.add(
        TX,
        c,
        data(2, 4000, 5000, 0),
        1952,
        &pattern(1952, 2),
        None,
        &[],
        CLOSE,
    );
    s.add(
        TX,
        c,
        data(3, 4001, 5001, 0x02),
        100,
        &pattern(100, 3),
        None,
        &[],
        CLOSE,
    );
    let cfg = TcpCaptureConfig {
        mss_v4: 1000,
        ..TcpCaptureConfig::default()
    };
    let file = dir.path().join("straddle.pcap");
    s.tcp_sink(cfg, &file);
    let placed = check_capture(&ts, &s, &file, &[], &[]);
    assert_eq!(placed, vec![(1, 0), (3, 1), (4, 2)]);
    // Two-pass, so that earlier segments know where they were reassembled.
    let rows = ts.fields(
        &file,
        &["-2"],
        &[
            "frame.number",
            "tcp.len",
            "tcp.seq",
            "tcp.segment",
            "tcp.reassembled_in",
            "tcp.reassembled.length",
        ],
    );
    let view: Vec<Vec<&str>> = rows
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        view,
        vec![
            // frame 1 and the first 30 bytes of frame 2's header
            vec!["1", "1000", "1", "", "3", ""],
            vec!["2", "1000", "1001", "", "3", ""],
            // frame 2 (2000 bytes) from packets 1-3, then 30 bytes of frame 3's header
            vec!["3", "1000", "2001", "1,2,3", "4", "2000"],
            // frame 3 (148 bytes) from packets 3 and 4
            vec!["4", "118", "3001", "3,4", "", "148"],
        ]
    );
    let info = infos(&ts, &file, &[]);
    assert_eq!(
        info.into_iter().collect::<Vec<_>>(),
        vec![
            (1, "RDS 4000 → 5000 seq=1 len=922".to_string()),
            (3, "RDS 4000 → 5000 seq=2 len=1952".to_string()),
            (4, "RDS 4001 → 5001 seq=3 len=100 ACK_REQ".to_string()),
        ]
    );
}

#[test]
fn lanes_directions_and_ipv6() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    // Three IPv4 lanes (client ports ≡ lane mod 8) and two IPv6 lanes where we are the
    // server side; both directions on each.
    let conns = [
        tcp("198.51.100.1:40000", "198.51.100.2:16385"),
        tcp("198.51.100.1:40001", "198.51.100.2:16385"),
        tcp("198.51.100.1:40002", "198.51.100.2:16385"),
        tcp("[2001:db8::2]:16385", "[2001:db8::1]:50004"),
        tcp("[2001:db8::2]:16385", "[2001:db8::1]:50007"),
    ];
    let mut s = Scenario::new();
    let mut seqs = [[1u64; 2]; 5];
    let sizes = [0usize, 100, 1427, 1428, 1429, 3000, 20_000, 1];
    for i in 0..40usize {
        let lane = (i * 7 + i / 5) % 5;
        let d = if i % 3 == 2 { RX } else { TX };
        let n = sizes[i % sizes.len()];
        let seq = &mut seqs[lane][usize::from(d == RX)];
        let sport = 2000 + lane as u16;
        let h = data(*seq, sport, 6000 + i as u16, 0);
        *seq += 1;
        s.add(
            d,
            conns[lane],
            h,
            n as u32,
            &pattern(n, i as u64),
            None,
            &[],
            CLOSE * (i as u64 % 3),
        );
    }
    let file = dir.path().join("lanes.pcap");
    s.tcp_sink(TcpCaptureConfig::default(), &file);
    let placed = check_capture(&ts, &s, &file, &[], &[]);
    // tshark agrees on the TCP ports and IP versions of every packet with RDS frames.
    let rows = ts.fields(
        &file,
        &[],
        &[
            "frame.number",
            "tcp.srcport",
            "ip.version",
            "ipv6.src",
            "tcp.stream",
        ],
    );
    let mut streams = std::collections::HashSet::new();
    for &(no, idx) in &placed {
        let r = &rows[(no - 1) as usize];
        let rec = &s.frames[idx].rec;
        let Transport::Tcp { local, peer } = rec.transport else {
            unreachable!()
        };
        let src = if rec.dir == TX { local } else { peer };
        assert_eq!(r[1], src.port().to_string());
        if src.is_ipv6() {
            assert_eq!(
                (r[2].as_str(), r[3].as_str()),
                ("6", src.ip().to_string().as_str())
            );
        } else {
            assert_eq!((r[2].as_str(), r[3].as_str()), ("4", ""));
        }
        streams.insert(r[4].clone());
    }
    assert_eq!(streams.len(), 5, "one TCP stream per lane");
    // The default IPv6 MSS is 1428.
    let max_v6 = rows.iter().filter(|r| !r[3].is_empty()).count();
    assert!(max_v6 > 0);
    let lens = ts.fields(&file, &["-Y", "ipv6"], &["tcp.len"]);
    assert!(lens.iter().all(|r| r[0].parse::<u32>().unwrap() <= 1428));
    assert!(lens.iter().any(|r| r[0] == "1428"));
    // Two-pass dissection gives the same fields.
    let one = ts.fields(&file, &[], FIELDS);
    let two = ts.fields(&file, &["-2"], FIELDS);
    assert_eq!(one, two);
}

#[test]
fn snapped_frames_show_their_header_and_decoding_goes_on() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    let c = tcp("203.0.113.1:40016", "203.0.113.2:16385");
    let mut s = Scenario::new();
    s.add(
        TX,
        c,
        data(1, 4000, 5000, 0),
        10,
        &pattern(10, 1),
        None,
        &[],
        CLOSE,
    );
    // 100000 bytes cut to 96: one segment of MSS size carrying 96 bytes, then a gap.
    s.add(
        TX,
        c,
        data(2, 4000, 5000, 0),
        100_000,
        &pattern(100_000, 2),
        Some(96),
        &[],
        CLOSE,
    );
    s.add(
        TX,
        c,
        data(3, 4000, 5000, 0),
        20,
        &pattern(20, 3),
        None,
        &[],
        CLOSE,
    );
    // Shorter than the MSS: the segment reports the whole frame.
    s.add(
        TX,
        c,
        data(4, 4000, 5000, 0),
        500,
        &pattern(500, 4),
        Some(60),
        &[],
        CLOSE,
    );
    // A snap length above the MSS: one larger segment carries all captured bytes.
    s.add(
        TX,
        c,
        data(5, 4000, 5000, 0x04),
        3000,
        &pattern(3000, 5),
        Some(2000),
        &[],
        CLOSE,
    );
    // A cut congestion map lists the ports in its captured bytes.
    s.add(
        RX,
        c,
        data(0, 0, 0, 0x01),
        8192,
        &cong_map(&[1, 100, 5000]),
        Some(100),
        &[("rds.cong_map.count", "2"), ("rds.cong_map.port", "1,100")],
        CLOSE,
    );
    s.add(
        RX,
        c,
        data(1, 5000, 4000, 0),
        70_000,
        &pattern(70_000, 6),
        Some(48),
        &[],
        CLOSE,
    );
    s.add(RX, c, data(2, 5000, 4000, 0), 0, &[], None, &[], CLOSE);
    s.add(
        TX,
        c,
        data(6, 4000, 5000, 0),
        2000,
        &pattern(2000, 7),
        None,
        &[],
        CLOSE,
    );
    let file = dir.path().join("snapped.pcap");
    s.tcp_sink(TcpCaptureConfig::default(), &file);
    let placed = check_capture(&ts, &s, &file, &[], &[]);
    // Every snapped frame is shown in a packet of its own, marked by expert info and in Info.
    let truncated: Vec<u64> = placed
        .iter()
        .filter(|(_, i)| s.frames[*i].rec.is_truncated())
        .map(|(no, _)| *no)
        .collect();
    assert_eq!(truncated.len(), 5);
    assert_eq!(ts.matching(&file, &[], "rds.truncated"), truncated);
    let info = infos(&ts, &file, &[]);
    for no in &truncated {
        assert!(info[no].ends_with("[truncated]"), "{}", info[no]);
    }
    assert_eq!(
        info[&truncated[0]],
        "RDS 4000 → 5000 seq=2 len=100000 [truncated]"
    );
    assert_eq!(
        info[&truncated[2]],
        "RDS 4000 → 5000 seq=5 len=3000 [RETRANSMITTED] [truncated]"
    );
    // The bytes left out show as TCP gaps before the next segment of the same stream.
    // Four here: after seq 2 and seq 5 one way, after the map and seq 1 the other way.
    let lost = ts.matching(&file, &[], "tcp.analysis.lost_segment");
    assert_eq!(lost.len(), 4, "{lost:?}");
    // Same result in two passes.
    assert_eq!(
        ts.fields(&file, &[], FIELDS),
        ts.fields(&file, &["-2"], FIELDS)
    );
}

fn ib(solicited: bool) -> Transport {
    Transport::Ib {
        local_qpn: 0x000011,
        peer_qpn: 0x00a0b0,
        local_lid: 0x0001,
        peer_lid: 0x0002,
        solicited,
    }
}

#[test]
fn infiniband_fragments_in_erf() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario::new();
    let good = |h: Hdr| Hdr {
        csum: Csum::Good,
        ..h
    };
    // A 10000-byte message in three fragments; the last one is solicited.
    let msg = pattern(10_000, 1);
    for (i, chunk) in msg.chunks(4096).enumerate() {
        let h = good(Hdr {
            ack: 4,
            ..data(1, 4000, 5000, 0x02)
        });
        s.add(TX, ib(i == 2), h, 10_000, chunk, None, &[], 1_000);
    }
    // ACK-only, ping and pong, credits.
    s.add(
        RX,
        ib(true),
        good(Hdr {
            ack: 1,
            ..Hdr::default()
        }),
        0,
        &[],
        None,
        &[],
        1_000,
    );
    s.add(
        TX,
        ib(true),
        good(data(2, 4000, 0, 0)),
        0,
        &[],
        None,
        &[],
        1_000,
    );
    let pong = good(Hdr {
        credit: 32,
        ..data(1, 0, 4000, 0)
    });
    s.add(RX, ib(true), pong, 0, &[], None, &[], 1_000);
    // The peer's congestion map in two fragments, a port congested in each half.
    let map = cong_map(&[3, 33_000]);
    s.add(
        RX,
        ib(false),
        good(data(0, 0, 0, 0x01)),
        8192,
        &map[..4096],
        None,
        &[("rds.cong_map.count", "1"), ("rds.cong_map.port", "3")],
        1_000,
    );
    s.add(
        RX,
        ib(true),
        good(data(0, 0, 0, 0x01)),
        8192,
        &map[4096..],
        None,
        &[("rds.cong_map.count", "1"), ("rds.cong_map.port", "33000")],
        1_000,
    );
    // A message chasing an RDMA write: RDMA + RDMA_BYTES extensions and flag 0x20.
    let rdma = good(Hdr {
        ext: ext(&[&[2, 0, 0, 0x0a, 0xbc], &[4, 0, 0, 0x40, 0, 1, 0, 0, 0]]),
        ..data(3, 4000, 5000, 0x20)
    });
    s.add(
        TX,
        ib(true),
        rdma,
        5,
        b"rdma!",
        None,
        &[
            ("rds.exthdr.type", "2,4"),
            ("rds.exthdr.rdma_rkey", "0x00000abc"),
            ("rds.exthdr.rdma_bytes", "16384"),
            ("rds.exthdr.rdma_rflags", "0x01"),
            ("rds.exthdr.data", "0000400001000000"),
        ],
        1_000,
    );
    // A bad header checksum (a receiver would drop the connection).
    let bad = Hdr {
        csum: Csum::Bad(0xbeef),
        ..data(4, 4000, 5000, 0)
    };
    s.add(TX, ib(true), bad, 10, &pattern(10, 9), None, &[], 1_000);
    let bad_idx = s.frames.len() - 1;
    // A fragment cut at 64 bytes.
    s.add(
        TX,
        ib(true),
        good(data(5, 4000, 5000, 0)),
        3001,
        &pattern(3001, 3),
        Some(64),
        &[],
        1_000,
    );

    let file = dir.path().join("ib.pcap");
    s.erf_sink(&file);
    // By default the heuristic refuses the bad checksum: no RDS there, nothing malformed.
    let placed = check_capture(&ts, &s, &file, &[], &[bad_idx]);
    assert_eq!(
        placed.iter().map(|p| p.0).collect::<Vec<_>>(),
        (1..=s.frames.len() as u64).collect::<Vec<_>>()
    );
    let bad_no = bad_idx as u64 + 1;
    let protos = ts.fields(&file, &[], &["frame.protocols"]);
    for (i, p) in protos.iter().enumerate() {
        let want = if i as u64 + 1 == bad_no {
            "erf:infiniband:data"
        } else {
            "erf:infiniband:rds"
        };
        assert_eq!(p[0], want, "packet {}", i + 1);
    }
    // With the preference off it is RDS, flagged as a bad checksum.
    let lax = ["-o", "rds.ib_require_good_csum:FALSE"];
    check_capture(&ts, &s, &file, &lax, &[]);
    assert_eq!(ts.matching(&file, &lax, "rds.csum.bad"), vec![bad_no]);
    assert_eq!(
        ts.matching(&file, &lax, "rds.csum.good == 1").len(),
        s.frames.len() - 1
    );
    // IB headers and ERF timestamps as written.
    let rows = ts.fields(
        &file,
        &[],
        &[
            "frame.time_epoch",
            "erf.flags.cap",
            "infiniband.lrh.slid",
            "infiniband.lrh.dlid",
            "infiniband.bth.opcode",
            "infiniband.bth.se",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
        ],
    );
    let mut psn = [0u32; 2];
    for (i, (row, f)) in rows.iter().zip(&s.frames).enumerate() {
        let tx = f.rec.dir == TX;
        let Transport::Ib { solicited, .. } = f.rec.transport else {
            unreachable!()
        };
        let ns = f.rec.ts_ns;
        let want = vec![
            format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000),
            if tx { "0" } else { "1" }.to_string(),
            if tx { "1" } else { "2" }.to_string(),
            if tx { "2" } else { "1" }.to_string(),
            "4".to_string(),
            flag(solicited),
            if tx { "0x00a0b0" } else { "0x000011" }.to_string(),
            psn[usize::from(!tx)].to_string(),
        ];
        psn[usize::from(!tx)] += 1;
        assert_eq!(row, &want, "packet {}", i + 1);
    }
    let info = infos(&ts, &file, &[]);
    let last = s.frames.len() as u64;
    assert_eq!(info[&last], "RDS 4000 → 5000 seq=5 len=3001 [truncated]");
    assert_eq!(ts.matching(&file, &[], "rds.truncated"), vec![last]);
    assert_eq!(info[&4], "RDS 0 → 0 seq=0 len=0 ACK-ONLY ack=1");
    assert_eq!(info[&3], "RDS 4000 → 5000 seq=1 len=10000 ack=4 ACK_REQ");
    assert_eq!(info[&5], "RDS 4000 → 0 seq=2 len=0 PING");
    assert_eq!(info[&8], "RDS 0 → 0 seq=0 len=8192 CONG_MAP congested=1");
    assert_eq!(
        ts.fields(&file, &[], FIELDS),
        ts.fields(&file, &["-2"], FIELDS)
    );
}

/// A small xorshift generator for deterministic garbage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Offsets of the records' packet bytes in a classic pcap file.
fn record_offsets(file: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= file.len() {
        let len = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push((at + 16, len));
        at += 16 + len;
    }
    out
}

/// No dissector exception (shown as "[Malformed Packet: ...]"): in RDS, or (`any`) in any
/// protocol. (Lua errors are checked by `Tshark::run`.)
fn no_exceptions(verbose: &str, any: bool) {
    for line in verbose.lines() {
        assert!(!line.contains("Malformed Packet: RDS"), "{line}");
        if any {
            assert!(
                !line.contains("Malformed Packet") && !line.contains("Exception occurred"),
                "{line}"
            );
        }
    }
}

#[test]
fn garbage_never_breaks_the_dissector() {
    let ts = Tshark::new();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let c = tcp("192.0.2.1:40000", "192.0.2.2:16385");
    let mut s = Scenario::new();
    for i in 0..40u64 {
        let n = [0usize, 30, 48, 1000, 3000, 20_000][(i % 6) as usize];
        let d = if i % 4 == 3 { RX } else { TX };
        s.add(
            d,
            c,
            data(i, 4000, 5000, 0),
            n as u32,
            &pattern(n, i),
            None,
            &[],
            CLOSE,
        );
    }
    let clean = dir.path().join("clean.pcap");
    s.tcp_sink(TcpCaptureConfig::default(), &clean);
    let base = std::fs::read(&clean).unwrap();
    let records = record_offsets(&base);
    let mut ib = Scenario::new();
    for i in 0..30u64 {
        let n = (i as usize * 137) % 4097;
        let h = Hdr {
            csum: Csum::Good,
            ..data(i, 4000, 5000, 0)
        };
        ib.add(
            TX,
            self::ib(true),
            h,
            n as u32,
            &pattern(n, i),
            None,
            &[],
            1_000,
        );
    }
    let ib_clean = dir.path().join("ib_clean.pcap");
    ib.erf_sink(&ib_clean);
    let ib_base = std::fs::read(&ib_clean).unwrap();
    let ib_records = record_offsets(&ib_base);

    for round in 0..6 {
        // TCP: RDS bytes replaced by garbage (headers included), in a few packets or in all.
        let mut f = base.clone();
        for &(at, len) in &records {
            if round >= 3 || rng.next() & 3 == 0 {
                for b in &mut f[at + 54..at + len] {
                    if round == 5 || rng.next() & 7 == 0 {
                        *b = rng.next() as u8;
                    }
                }
            }
        }
        let file = dir.path().join(format!("garbage{round}.pcap"));
        std::fs::write(&file, &f).unwrap();
        keep(&file);
        let out = ts.run(&file, &["-V"]);
        assert!(out.contains("Reliable Datagram Sockets"));
        no_exceptions(&out, true);
        if round == 5 {
            // Garbage headers are marked (here: lengths over 1 MiB), not failed on.
            assert!(out.contains("h_len exceeds RDS_MAX_MSG_SIZE"));
        }
        // IB: fragment bytes replaced by garbage; other heuristics may claim some packets,
        // but the RDS code must never fail.
        let mut f = ib_base.clone();
        for &(at, len) in &ib_records {
            for b in &mut f[at + 36..at + len - 6] {
                if round == 5 || rng.next() & 15 == 0 {
                    *b = rng.next() as u8;
                }
            }
        }
        let file = dir.path().join(format!("ib_garbage{round}.pcap"));
        std::fs::write(&file, &f).unwrap();
        keep(&file);
        // Other heuristics (RPC-over-RDMA) may claim garbage and fail on it; RDS must not.
        no_exceptions(&ts.run(&file, &["-V"]), false);
        let lax = ["-V", "-o", "rds.ib_require_good_csum:FALSE"];
        no_exceptions(&ts.run(&file, &lax), false);
    }
}

/// Wireshark 4.0 embeds Lua 5.2 and 4.4+ Lua 5.4: the script may use neither the 5.3 bit
/// operators nor a bit library (nor goto, which 5.1 lacks).
#[test]
fn dissector_source_is_portable_lua() {
    let src = std::fs::read_to_string(lua_script()).unwrap();
    let mut code = String::new();
    for line in src.lines() {
        // Drop comments and string literals (the script has no long strings).
        let mut out = String::new();
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        while let Some(ch) = chars.next() {
            match quote {
                Some(q) => {
                    if ch == '\\' {
                        chars.next();
                    } else if ch == q {
                        quote = None;
                    }
                }
                None if ch == '"' || ch == '\'' => quote = Some(ch),
                None if ch == '-' && chars.peek() == Some(&'-') => break,
                None => out.push(ch),
            }
        }
        assert!(quote.is_none(), "unterminated string: {line}");
        code.push_str(&out);
        code.push('\n');
    }
    assert!(!code.contains("[["), "long strings");
    for bad in ["&", "|", ">>", "<<", "//", "bit.", "bit32", "goto", "::"] {
        assert!(!code.contains(bad), "`{bad}` in rds.lua");
    }
    // `~` only as part of `~=`.
    assert!(code
        .match_indices('~')
        .all(|(i, _)| code[i..].starts_with("~=")));
    assert!(
        code.contains("dissect_tcp_pdus(tvb, tree, HDR_LEN, get_pdu_len, dissect_tcp_pdu, true)")
    );
}
