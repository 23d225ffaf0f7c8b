//! Helpers shared by the rds-trace tests: tshark (with the project's dissector) and an
//! independent decoder of its PDML output, the expected report line of a frame built from
//! what tshark decoded, and running rds-trace.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use rds_tests::{lua_script, tshark, tshark_cmd};

/// Runs tshark on `file` with `args`; fails on a non-zero exit or a Lua error.
pub fn tshark_run(exe: &Path, home: &Path, file: &Path, args: &[&str]) -> String {
    let out = tshark_cmd(exe, home)
        .arg("-r")
        .arg(file)
        .args(args)
        .output()
        .expect("tshark runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tshark {args:?}: {stderr}");
    assert!(
        !stderr.contains("Lua") && !stdout.contains("Lua Error"),
        "tshark: {stderr}"
    );
    stdout
}

/// One field of a PDML packet: name, `show` and `value` attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub show: String,
    pub value: String,
}

/// One packet of a PDML document: fields outside RDS by name (first occurrence), and each
/// RDS PDU's fields in document order.
#[derive(Debug, Clone, Default)]
pub struct Packet {
    pub fields: BTreeMap<String, String>,
    pub rds: Vec<Vec<Field>>,
    pub malformed: bool,
}

fn attr(line: &str, name: &str) -> String {
    let key = format!(" {name}=\"");
    match line.find(&key) {
        Some(i) => {
            let rest = &line[i + key.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            rest[..end]
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        }
        None => String::new(),
    }
}

/// Parses tshark's `-T pdml` output (one element per line, as tshark writes it).
pub fn parse_pdml(xml: &str) -> Vec<Packet> {
    let mut packets = Vec::new();
    let mut cur: Option<Packet> = None;
    let mut in_rds = 0usize;
    let mut depth_at_rds = 0usize;
    let mut depth = 0usize;
    for raw in xml.lines() {
        let line = raw.trim_start();
        if line.starts_with("<packet>") {
            cur = Some(Packet::default());
            continue;
        }
        if line.starts_with("</packet>") {
            packets.extend(cur.take());
            continue;
        }
        let Some(p) = cur.as_mut() else { continue };
        if line.starts_with("<proto ") {
            let name = attr(line, "name");
            if name == "_ws.malformed" || name == "malformed" {
                p.malformed = true;
            }
            let closed = line.ends_with("/>");
            if name == "rds" && !closed {
                p.rds.push(Vec::new());
                in_rds = 1;
                depth_at_rds = depth;
            }
            if !closed {
                depth += 1;
            }
            continue;
        }
        if line.starts_with("</proto>") {
            depth = depth.saturating_sub(1);
            if in_rds == 1 && depth == depth_at_rds {
                in_rds = 0;
            }
            continue;
        }
        if line.starts_with("<field ") {
            let f = Field {
                name: attr(line, "name"),
                show: attr(line, "show"),
                value: attr(line, "value"),
            };
            if f.name.starts_with("_ws.malformed")
                || f.name == "_ws.expert" && attr(line, "showname").contains("Malformed")
            {
                p.malformed = true;
            }
            if in_rds == 1 {
                if let Some(last) = p.rds.last_mut() {
                    last.push(f);
                }
            } else {
                p.fields.entry(f.name.clone()).or_insert(f.show);
            }
        }
    }
    packets
}

/// The fields of one RDS PDU, looked up by name.
#[derive(Debug, Clone)]
pub struct Pdu {
    pub fields: Vec<Field>,
}

impl Pdu {
    pub fn get(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub fn all(&self, name: &str) -> Vec<&Field> {
        self.fields.iter().filter(|f| f.name == name).collect()
    }

    pub fn num(&self, name: &str) -> u64 {
        let f = self
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing in {:?}", self.fields));
        parse_num(&f.show)
    }

    /// The payload bytes tshark shows (`rds.payload`), empty if none.
    pub fn payload(&self) -> Vec<u8> {
        self.get("rds.payload")
            .map_or_else(Vec::new, |f| unhex(&f.value))
    }

    /// Congested ports listed by the dissector.
    pub fn cong_ports(&self) -> Vec<u16> {
        self.all("rds.cong_map.port")
            .iter()
            .map(|f| parse_num(&f.show) as u16)
            .collect()
    }
}

pub fn parse_num(s: &str) -> u64 {
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("number {s}"))
    } else {
        s.parse().unwrap_or_else(|_| panic!("number {s}"))
    }
}

pub fn unhex(s: &str) -> Vec<u8> {
    let s = s.replace(':', "");
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A decoded RDS frame as tshark shows it, with its packet's link fields.
#[derive(Debug, Clone)]
pub struct TsFrame {
    pub frame_no: u64,
    pub ts_ns: u64,
    pub tx: bool,
    pub src: String,
    pub dst: String,
    pub src_port: u16,
    pub dst_port: u16,
    pub pdu: Pdu,
}

impl TsFrame {
    pub fn seq(&self) -> u64 {
        self.pdu.num("rds.seq")
    }
    pub fn len(&self) -> u64 {
        self.pdu.num("rds.len")
    }
    pub fn sport(&self) -> u16 {
        self.pdu.num("rds.sport") as u16
    }
    pub fn dport(&self) -> u16 {
        self.pdu.num("rds.dport") as u16
    }
    pub fn flags(&self) -> u8 {
        self.pdu.num("rds.flags") as u8
    }
    pub fn client_port(&self) -> u16 {
        if self.src_port == 16385 {
            self.dst_port
        } else {
            self.src_port
        }
    }
}

/// Every RDS frame of a capture as tshark decodes it (IPv4 RDS/TCP), in packet order.
/// Fails if any packet is malformed.
pub fn tshark_frames(exe: &Path, home: &Path, file: &Path) -> Vec<TsFrame> {
    let pdml = tshark_run(exe, home, file, &["-T", "pdml"]);
    let packets = parse_pdml(&pdml);
    let mut out = Vec::new();
    for p in &packets {
        let no: u64 = p.fields["frame.number"].parse().unwrap();
        assert!(!p.malformed, "packet {no} is malformed");
        let epoch = &p.fields["frame.time_epoch"];
        let (s, ns) = epoch.split_once('.').unwrap();
        let ts_ns = s.parse::<u64>().unwrap() * 1_000_000_000
            + format!("{ns:0<9}")[..9].parse::<u64>().unwrap();
        for pdu in &p.rds {
            out.push(TsFrame {
                frame_no: no,
                ts_ns,
                tx: p.fields["eth.src"].starts_with("02:00:"),
                src: p.fields["ip.src"].clone(),
                dst: p.fields["ip.dst"].clone(),
                src_port: p.fields["tcp.srcport"].parse().unwrap(),
                dst_port: p.fields["tcp.dstport"].parse().unwrap(),
                pdu: Pdu {
                    fields: pdu.clone(),
                },
            });
        }
    }
    // No packet may be flagged malformed by any dissector either.
    let bad = tshark_run(
        exe,
        home,
        file,
        &[
            "-Y",
            "_ws.malformed || _ws.expert.group == \"Malformed\"",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
    );
    assert_eq!(bad.trim(), "", "malformed packets");
    out
}

fn runs(ports: &[u16]) -> String {
    if ports.is_empty() {
        return "none".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ports.len() {
        let mut j = i;
        while j + 1 < ports.len() && ports[j + 1] == ports[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ports[i].to_string()
        } else {
            format!("{}-{}", ports[i], ports[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The `rds-trace -r` line of a frame, built from tshark's decoding following the format in
/// the man page (not from rds-trace's code).
pub fn expected_line(f: &TsFrame) -> String {
    let day = f.ts_ns / 1_000_000_000 % 86_400;
    let mut s = format!(
        "{:02}:{:02}:{:02}.{:09} {} {}:{} > {}:{} lane {} ",
        day / 3600,
        day / 60 % 60,
        day % 60,
        f.ts_ns % 1_000_000_000,
        if f.tx { "tx" } else { "rx" },
        f.src,
        f.src_port,
        f.dst,
        f.dst_port,
        f.client_port() % 8
    );
    let (sp, dp, len, flags) = (f.sport(), f.dport(), f.len(), f.flags());
    let kind = if flags == 0x01 {
        "cong-map"
    } else if sp == 0 && dp == 0 && len == 0 {
        "ack-only"
    } else if sp == 1 && dp == 0 {
        "probe"
    } else if sp == 0 && dp == 1 {
        "probe-pong"
    } else if dp == 0 {
        "ping"
    } else if sp == 0 {
        "pong"
    } else {
        "data"
    };
    s += &format!("{kind} {sp} > {dp} seq {} len {len}", f.seq());
    let ack = f.pdu.num("rds.ack");
    if ack != 0 {
        s += &format!(" ack {ack}");
    }
    let credit = f.pdu.num("rds.credit");
    if credit != 0 {
        s += &format!(" credit {credit}");
    }
    let csum = f.pdu.num("rds.csum");
    if csum != 0 {
        let good = f.pdu.get("rds.csum.good").map(|g| g.show.as_str()) == Some("1")
            || f.pdu.get("rds.csum.good").map(|g| g.show.as_str()) == Some("True");
        s += &format!(" csum 0x{csum:04x} {}", if good { "good" } else { "bad" });
    }
    if flags != 0 {
        let names = [
            "CONG_BITMAP",
            "ACK_REQUIRED",
            "RETRANSMITTED",
            "HB_PING",
            "HB_PONG",
            "EXTHDR_EXTENSION",
        ];
        let mut v: Vec<String> = (0..6)
            .filter(|b| flags & (1 << b) != 0)
            .map(|b| names[b].to_string())
            .collect();
        if flags & 0xc0 != 0 {
            v.push(format!("0x{:02x}", flags & 0xc0));
        }
        s += &format!(" flags {}", v.join(","));
    }
    // Extensions: each type field, then its body fields.
    let mut exts: Vec<String> = Vec::new();
    let mut ty = 0;
    let mut rkey = 0;
    let mut bytes = 0;
    for fld in &f.pdu.fields {
        let v = || parse_num(&fld.show);
        let last = exts.last_mut();
        match fld.name.as_str() {
            "rds.exthdr.type" => {
                ty = v();
                exts.push(format!("TYPE{ty}"));
            }
            "rds.exthdr.npaths" => *last.unwrap() = format!("NPATHS={}", v()),
            "rds.exthdr.gen_num" => *last.unwrap() = format!("GEN_NUM={}", v()),
            "rds.exthdr.sport_idx" => *last.unwrap() = format!("SPORT_IDX={}", v()),
            "rds.exthdr.version" => {
                let x = v();
                *last.unwrap() = format!("VERSION={}.{}", x >> 8, x & 0xff)
            }
            "rds.exthdr.rdma_rkey" => {
                rkey = v();
                if ty == 2 {
                    *last.unwrap() = format!("RDMA={rkey:#x}");
                }
            }
            "rds.exthdr.rdma_offset" => {
                *last.unwrap() = format!("RDMA_DEST={rkey:#x}+{}", v());
            }
            "rds.exthdr.rdma_bytes" => bytes = v(),
            "rds.exthdr.rdma_rflags" => {
                let dir = match v() {
                    1 => "write".to_string(),
                    2 => "read".to_string(),
                    o => format!("{o:#04x}"),
                };
                *last.unwrap() = format!("RDMA_BYTES={bytes}/{dir}");
            }
            _ => {}
        }
    }
    if !exts.is_empty() {
        s += &format!(" ext {}", exts.join(","));
    }
    if kind == "cong-map" {
        s += &format!(" congested {}", runs(&f.pdu.cong_ports()));
    }
    s
}

/// A running rds-trace whose stderr is collected line by line.
pub struct Trace {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub stderr: Vec<String>,
}

pub fn rds_trace_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("rds-trace")
}

impl Trace {
    /// Starts `rds-trace args` with `RDS_RUNTIME_DIR=run` and waits until it traces (its
    /// "tracing node" line) or fails (then panics with its stderr).
    pub fn start(run: &Path, args: &[&str], stdout: Stdio) -> Trace {
        let mut child = Command::new(rds_trace_bin())
            .env("RDS_RUNTIME_DIR", run)
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("rds-trace starts");
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut t = Trace {
            child,
            lines: rx,
            stderr: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "rds-trace did not start: {:?}",
                t.stderr
            );
            match t.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => {
                    let started = l.starts_with("rds-trace: tracing node");
                    t.stderr.push(l);
                    if started {
                        return t;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(st)) = t.child.try_wait() {
                        t.drain();
                        panic!("rds-trace exited at start ({st}): {:?}", t.stderr);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let st = t.child.wait().unwrap();
                    panic!("rds-trace exited at start ({st}): {:?}", t.stderr);
                }
            }
        }
    }

    fn drain(&mut self) {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.stderr.push(l);
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Waits (at most 30 s, then kills it and fails) for the process to exit; returns its
    /// exit code and the whole stderr.
    pub fn wait(mut self) -> (i32, Vec<String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.drain();
                return (st.code().unwrap_or(-1), self.stderr);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.drain();
                panic!("rds-trace did not exit: {:?}", self.stderr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits until `f` holds (20 s at most).
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The summary line rds-trace prints last: `(captured, dropped)`.
pub fn summary(stderr: &[String]) -> (u64, u64) {
    let line = stderr
        .iter()
        .rev()
        .find(|l| l.ends_with(" dropped"))
        .unwrap_or_else(|| panic!("no summary in {stderr:?}"));
    let w: Vec<&str> = line.split(' ').collect();
    assert_eq!(w.len(), 5, "{line}");
    assert_eq!(
        (w[1], w[2], w[4]),
        ("frames", "captured,", "dropped"),
        "{line}"
    );
    (w[0].parse().unwrap(), w[3].parse().unwrap())
}

/// Deterministic payload bytes.
pub fn pattern(n: usize, salt: u64) -> Vec<u8> {
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
