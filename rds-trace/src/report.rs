//! `rds-trace -r FILE`: a report of a capture, one line per RDS frame.
//!
//! Frames come from [`PcapFrames`] (our captures, or tcpdump's of RDS/TCP traffic), in the
//! order their last byte was captured.
//!
//! # Text line format
//! Fields are separated by one space; optional parts are present only when stated.
//!
//! ```text
//! TIME DIR LINK lane LANE KIND SPORT > DPORT seq SEQ len LEN[ ack ACK][ credit CREDIT]
//!     [ csum CSUM good|bad][ flags FLAGS][ ext EXTS][ congested PORTS][ snapped CAPTURED/WIRE]
//! ```
//!
//! - `TIME`: UTC time of day of the packet that completed the frame, `HH:MM:SS.nnnnnnnnn`.
//! - `DIR`: `tx` (sent by the capturing node), `rx` (received by it), or `-` when the capture
//!   does not say (captures not written by rds-trace).
//! - `LINK`: RDS/TCP: `SRC > DST`, the sender's and receiver's TCP endpoints (`ip:port`, IPv6
//!   as `[ip]:port`). InfiniBand: `ib lid SLID > lid DLID qp 0xQPN psn PSN` (the destination
//!   queue pair).
//! - `LANE`: the path index (TCP: the client port mod 8).
//! - `KIND`: the first that applies: `cong-map` (`h_flags` exactly CONG_BITMAP), `ack-only`
//!   (ports 0 and 0, no payload), `probe` (ports 1 → 0), `probe-pong` (0 → 1), `ping`
//!   (destination port 0), `pong` (source port 0), `data`; `short` when fewer than 48 bytes
//!   of the header were captured (the line then ends with `snapped`).
//! - `SPORT`, `DPORT`, `SEQ`, `LEN`: `h_sport`, `h_dport`, `h_sequence`, `h_len` in decimal.
//! - `ack`, `credit`: `h_ack`, `h_credit` when not zero.
//! - `csum`: `h_csum` as `0x` and four hex digits when not zero, then `good` or `bad`
//!   (the ones'-complement sum over the 48 header bytes).
//! - `flags`: when `h_flags` is not zero, the names of its bits joined by `,` in bit order
//!   (`CONG_BITMAP`, `ACK_REQUIRED`, `RETRANSMITTED`, `HB_PING`, `HB_PONG`,
//!   `EXTHDR_EXTENSION`), then any other bits as one hex value (`0xc0`).
//! - `ext`: the extension headers (kernel parsing rules) joined by `,`: `VERSION=3.1`,
//!   `RDMA=0xRKEY`, `RDMA_DEST=0xRKEY+OFFSET`, `RDMA_BYTES=N/write|read|0xFLAGS`,
//!   `NPATHS=N`, `GEN_NUM=N`, `SPORT_IDX=N`, `TYPEN` for types without a body.
//! - `congested`: congestion maps only: the congested ports among the captured map bytes,
//!   ascending, runs of consecutive ports as `FIRST-LAST`, joined by `,`; `none` if no bit is
//!   set. Over InfiniBand a map comes in fragments; each line lists the ports of its own
//!   fragment (offsets are counted per destination QP).
//! - `snapped`: the frame was cut by the snap length: captured bytes / bytes on the wire.
//!
//! Problems in single packets are reported on stderr (`rds-trace: FILE: packet N: ...`) and
//! reading goes on; an unreadable file ends the run with status 2.
//!
//! # JSON
//! With `--json`, one JSON document `{"frames": [...]}`; with `--jsonl`, JSON Lines: one
//! object per frame and line. A frame's object has these keys in this order: `frame`
//! (packet number), `ts_ns`, `time`, `dir` (`"tx"`, `"rx"` or null), `link` (`"tcp"` or
//! `"ib"`), `src`, `dst` (TCP endpoints, else null), `ib` (`{slid, dlid, qp, psn,
//! solicited}` or null), `lane`, `kind`, `seq`, `ack`, `len`, `sport`, `dport`, `flags`
//! (number), `flag_names`, `credit`, `csum`, `csum_good` (null when `csum` is 0), `ext`
//! (list of `{type, text}`), `congested` (list of ports, null unless a congestion map),
//! `captured`, `wire_len`. Header fields are null for a `short` frame.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;

use anyhow::Context;
use pcap_file::PcapError;
use rds_core::trace::{CapturedFrame, Direction, FrameLink, PcapFrames, ReadError};
use rds_core::wire::{checksum, flags, ExtHeader, HeaderRepr, HEADER_LEN};
use serde::Serialize;

/// Which frames to report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only frames whose TCP source or destination address is this.
    pub peer: Option<IpAddr>,
    /// Only frames whose RDS source or destination port is this.
    pub port: Option<u16>,
}

impl Filter {
    fn accepts(&self, f: &CapturedFrame, h: Option<&HeaderRepr>) -> bool {
        if let Some(p) = self.peer {
            if f.src_ip() != Some(p) && f.dst_ip() != Some(p) {
                return false;
            }
        }
        if let Some(port) = self.port {
            match h {
                Some(h) if h.sport == port || h.dport == port => {}
                _ => return false,
            }
        }
        true
    }
}

/// Whether the error opening a capture says the file is not one: a wrong or short header,
/// as opposed to an I/O error such as reading a directory.
fn not_a_capture(e: &ReadError) -> bool {
    match e {
        ReadError::Pcap(PcapError::IoError(io)) => io.kind() == io::ErrorKind::UnexpectedEof,
        ReadError::Pcap(_) => true,
        _ => false,
    }
}

/// How `-r` prints the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line of text per frame.
    Text,
    /// One JSON document, `{"frames": [...]}` (`--json`).
    Json,
    /// One JSON object per frame and line (`--jsonl`).
    JsonLines,
}

/// `rds-trace -r FILE [--json | --jsonl]`.
///
/// # Errors
/// The file cannot be opened or is not a readable capture; output errors.
pub fn run(file: &Path, format: Format, filter: &Filter) -> anyhow::Result<u8> {
    let input = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
    let frames = match PcapFrames::new(io::BufReader::with_capacity(1 << 20, input)) {
        Ok(f) => f,
        Err(e) if not_a_capture(&e) => anyhow::bail!("{}: not a pcap capture", file.display()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{}", file.display()))),
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut ib = IbOffsets::default();
    let mut written = 0u64;
    if format == Format::Json {
        out.write_all(b"{\"frames\": [")?;
    }
    for item in frames {
        let f = match item {
            Ok(f) => f,
            Err(e) if !e.is_fatal() => {
                out.flush()?;
                eprintln!("rds-trace: {}: {e}", file.display());
                continue;
            }
            Err(e) => {
                out.flush()?;
                return Err(anyhow::Error::new(e).context(format!("{}", file.display())));
            }
        };
        let line = Line::new(&f, &mut ib);
        if !filter.accepts(&f, line.hdr.as_ref()) {
            continue;
        }
        match format {
            Format::Text => writeln!(out, "{}", line.text())?,
            Format::JsonLines => {
                serde_json::to_writer(&mut out, &line.json())?;
                out.write_all(b"\n")?;
            }
            Format::Json => {
                out.write_all(if written == 0 { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut out, &line.json())?;
            }
        }
        written += 1;
    }
    if format == Format::Json {
        out.write_all(if written == 0 { b"]}\n" } else { b"\n]}\n" })?;
    }
    out.flush()?;
    Ok(0)
}

/// Offsets of InfiniBand fragments inside their message, per destination QP.
#[derive(Debug, Default)]
pub struct IbOffsets {
    /// (slid, dlid, qp) → (h_len of the message in progress, payload bytes seen so far).
    open: HashMap<(u16, u16, u32), (u32, u64)>,
}

impl IbOffsets {
    /// The payload offset of this fragment within its message.
    fn offset(&mut self, f: &CapturedFrame, h: &HeaderRepr) -> u64 {
        let FrameLink::Ib {
            slid,
            dlid,
            dest_qpn,
            ..
        } = f.link
        else {
            return 0;
        };
        let frag = u64::from(f.orig_len).saturating_sub(HEADER_LEN as u64);
        let key = (slid, dlid, dest_qpn);
        let start = match self.open.get(&key) {
            Some(&(len, seen)) if len == h.len && seen < u64::from(len) => seen,
            _ => 0,
        };
        let seen = start + frag;
        if seen >= u64::from(h.len) {
            self.open.remove(&key);
        } else {
            self.open.insert(key, (h.len, seen));
        }
        start
    }
}

/// One report line.
#[derive(Debug, Clone)]
pub struct Line {
    /// Packet number.
    pub frame_no: u64,
    /// Timestamp.
    pub ts_ns: u64,
    /// Direction, when known.
    pub dir: Option<Direction>,
    /// Transport.
    pub link: FrameLink,
    /// Lane.
    pub lane: u8,
    /// The header, if captured.
    pub hdr: Option<HeaderRepr>,
    /// Whether the header checksum is right (when it is not zero).
    pub csum_good: Option<bool>,
    /// Congested ports of a congestion map.
    pub congested: Option<Vec<u16>>,
    /// Captured bytes.
    pub captured: usize,
    /// Bytes on the wire.
    pub wire_len: u32,
}

/// The kind of frame (see the module documentation).
pub fn kind(h: &HeaderRepr) -> &'static str {
    if h.is_cong_map() {
        "cong-map"
    } else if h.is_ack_only() {
        "ack-only"
    } else if h.is_probe_ping() {
        "probe"
    } else if h.is_probe_pong() {
        "probe-pong"
    } else if h.dport == 0 {
        "ping"
    } else if h.sport == 0 {
        "pong"
    } else {
        "data"
    }
}

/// Formats `HH:MM:SS.nnnnnnnnn` (UTC time of day).
pub fn time_of_day(ts_ns: u64) -> String {
    let secs = ts_ns / 1_000_000_000;
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        day / 3600,
        day / 60 % 60,
        day % 60,
        ts_ns % 1_000_000_000
    )
}

/// The flag names of `f` (see the module documentation).
pub fn flag_names(f: u8) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = f;
    for (bit, name) in [
        (flags::CONG_BITMAP, "CONG_BITMAP"),
        (flags::ACK_REQUIRED, "ACK_REQUIRED"),
        (flags::RETRANSMITTED, "RETRANSMITTED"),
        (flags::HB_PING, "HB_PING"),
        (flags::HB_PONG, "HB_PONG"),
        (flags::EXTHDR_EXTENSION, "EXTHDR_EXTENSION"),
    ] {
        if f & bit != 0 {
            v.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        v.push(format!("{rest:#04x}"));
    }
    v
}

/// One extension header as text (see the module documentation).
pub fn ext_text(e: &ExtHeader) -> String {
    match *e {
        ExtHeader::Version(v) => format!("VERSION={}.{}", v >> 8, v & 0xff),
        ExtHeader::Rdma { rkey } => format!("RDMA={rkey:#x}"),
        ExtHeader::RdmaDest { rkey, offset } => format!("RDMA_DEST={rkey:#x}+{offset}"),
        ExtHeader::RdmaBytes { bytes, rflags } => match rflags {
            rds_core::wire::RDMA_BYTES_WRITE => format!("RDMA_BYTES={bytes}/write"),
            rds_core::wire::RDMA_BYTES_READ => format!("RDMA_BYTES={bytes}/read"),
            other => format!("RDMA_BYTES={bytes}/{other:#04x}"),
        },
        ExtHeader::Npaths(n) => format!("NPATHS={n}"),
        ExtHeader::GenNum(g) => format!("GEN_NUM={g}"),
        ExtHeader::SportIdx(v) => format!("SPORT_IDX={v}"),
        ExtHeader::Unknown(t) => format!("TYPE{t}"),
    }
}

/// Congested ports as `a,b-c,...` or `none`.
pub fn port_runs(ports: &[u16]) -> String {
    if ports.is_empty() {
        return "none".into();
    }
    let mut s = String::new();
    let mut i = 0;
    while i < ports.len() {
        let mut j = i;
        while j + 1 < ports.len() && u32::from(ports[j + 1]) == u32::from(ports[j]) + 1 {
            j += 1;
        }
        if !s.is_empty() {
            s.push(',');
        }
        if j == i {
            let _ = write!(s, "{}", ports[i]);
        } else {
            let _ = write!(s, "{}-{}", ports[i], ports[j]);
        }
        i = j + 1;
    }
    s
}

/// Congested ports in `bytes`, a piece of a map starting at byte `offset`.
fn congested(bytes: &[u8], offset: u64) -> Vec<u16> {
    let mut v = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        for bit in 0..8u64 {
            if b & (1 << bit) != 0 {
                let port = (offset + i as u64) * 8 + bit;
                if let Ok(p) = u16::try_from(port) {
                    v.push(p);
                }
            }
        }
    }
    v
}

#[derive(Serialize)]
struct JsonIb {
    slid: u16,
    dlid: u16,
    qp: u32,
    psn: u32,
    solicited: bool,
}

#[derive(Serialize)]
struct JsonExt {
    #[serde(rename = "type")]
    ty: u8,
    text: String,
}

#[derive(Serialize)]
struct JsonLine {
    frame: u64,
    ts_ns: u64,
    time: String,
    dir: Option<&'static str>,
    link: &'static str,
    src: Option<String>,
    dst: Option<String>,
    ib: Option<JsonIb>,
    lane: u8,
    kind: &'static str,
    seq: Option<u64>,
    ack: Option<u64>,
    len: Option<u32>,
    sport: Option<u16>,
    dport: Option<u16>,
    flags: Option<u8>,
    flag_names: Vec<String>,
    credit: Option<u8>,
    csum: Option<u16>,
    csum_good: Option<bool>,
    ext: Vec<JsonExt>,
    congested: Option<Vec<u16>>,
    captured: usize,
    wire_len: u32,
}

impl Line {
    /// Decodes a frame; `ib` tracks InfiniBand fragment offsets across calls.
    pub fn new(f: &CapturedFrame, ib: &mut IbOffsets) -> Line {
        let hdr = f.header();
        let csum_good = hdr
            .as_ref()
            .filter(|h| h.csum != 0)
            .map(|_| checksum(&f.data[..HEADER_LEN]) == 0);
        let congested = hdr.as_ref().filter(|h| h.is_cong_map()).map(|h| {
            let off = ib.offset(f, h);
            congested(&f.data[HEADER_LEN..], off)
        });
        if congested.is_none() {
            if let Some(h) = &hdr {
                ib.offset(f, h);
            }
        }
        Line {
            frame_no: f.frame_no,
            ts_ns: f.ts_ns,
            dir: f.dir,
            link: f.link,
            lane: f.lane,
            hdr,
            csum_good,
            congested,
            captured: f.data.len(),
            wire_len: f.orig_len,
        }
    }

    fn kind(&self) -> &'static str {
        self.hdr.as_ref().map_or("short", kind)
    }

    fn dir_text(&self) -> Option<&'static str> {
        self.dir.map(|d| match d {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
        })
    }

    /// The text line (without newline).
    pub fn text(&self) -> String {
        let mut s = String::with_capacity(160);
        let _ = write!(
            s,
            "{} {} ",
            time_of_day(self.ts_ns),
            self.dir_text().unwrap_or("-")
        );
        match self.link {
            FrameLink::Tcp { src, dst } => {
                let _ = write!(s, "{src} > {dst}");
            }
            FrameLink::Ib {
                slid,
                dlid,
                dest_qpn,
                psn,
                ..
            } => {
                let _ = write!(s, "ib lid {slid} > lid {dlid} qp {dest_qpn:#08x} psn {psn}");
            }
        }
        let _ = write!(s, " lane {} {}", self.lane, self.kind());
        if let Some(h) = &self.hdr {
            let _ = write!(s, " {} > {} seq {} len {}", h.sport, h.dport, h.seq, h.len);
            if h.ack != 0 {
                let _ = write!(s, " ack {}", h.ack);
            }
            if h.credit != 0 {
                let _ = write!(s, " credit {}", h.credit);
            }
            if let Some(good) = self.csum_good {
                let _ = write!(
                    s,
                    " csum {:#06x} {}",
                    h.csum,
                    if good { "good" } else { "bad" }
                );
            }
            if h.flags != 0 {
                let _ = write!(s, " flags {}", flag_names(h.flags).join(","));
            }
            let exts: Vec<String> = h.exts().map(|e| ext_text(&e)).collect();
            if !exts.is_empty() {
                let _ = write!(s, " ext {}", exts.join(","));
            }
            if let Some(c) = &self.congested {
                let _ = write!(s, " congested {}", port_runs(c));
            }
        }
        if (self.captured as u64) < u64::from(self.wire_len) || self.hdr.is_none() {
            let _ = write!(s, " snapped {}/{}", self.captured, self.wire_len);
        }
        s
    }

    fn json(&self) -> JsonLine {
        let h = self.hdr.as_ref();
        let (link, src, dst, ib) = match self.link {
            FrameLink::Tcp { src, dst } => {
                ("tcp", Some(src.to_string()), Some(dst.to_string()), None)
            }
            FrameLink::Ib {
                slid,
                dlid,
                dest_qpn,
                psn,
                solicited,
                ..
            } => (
                "ib",
                None,
                None,
                Some(JsonIb {
                    slid,
                    dlid,
                    qp: dest_qpn,
                    psn,
                    solicited,
                }),
            ),
        };
        JsonLine {
            frame: self.frame_no,
            ts_ns: self.ts_ns,
            time: time_of_day(self.ts_ns),
            dir: self.dir_text(),
            link,
            src,
            dst,
            ib,
            lane: self.lane,
            kind: self.kind(),
            seq: h.map(|h| h.seq),
            ack: h.map(|h| h.ack),
            len: h.map(|h| h.len),
            sport: h.map(|h| h.sport),
            dport: h.map(|h| h.dport),
            flags: h.map(|h| h.flags),
            flag_names: h.map(|h| flag_names(h.flags)).unwrap_or_default(),
            credit: h.map(|h| h.credit),
            csum: h.map(|h| h.csum),
            csum_good: self.csum_good,
            ext: h
                .map(|h| {
                    h.exts()
                        .map(|e| JsonExt {
                            ty: e.ty(),
                            text: ext_text(&e),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            congested: self.congested.clone(),
            captured: self.captured,
            wire_len: self.wire_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces() {
        assert_eq!(time_of_day(1_700_000_000_123_456_789), "22:13:20.123456789");
        assert_eq!(time_of_day(5), "00:00:00.000000005");
        assert_eq!(port_runs(&[]), "none");
        assert_eq!(port_runs(&[1, 2, 3, 5, 7, 8, 65535]), "1-3,5,7-8,65535");
        assert_eq!(
            flag_names(0x27),
            [
                "CONG_BITMAP",
                "ACK_REQUIRED",
                "RETRANSMITTED",
                "EXTHDR_EXTENSION"
            ]
        );
        assert_eq!(flag_names(0xc2), ["ACK_REQUIRED", "0xc0"]);
        assert_eq!(ext_text(&ExtHeader::Version(0x0301)), "VERSION=3.1");
        assert_eq!(
            ext_text(&ExtHeader::RdmaDest {
                rkey: 0xab,
                offset: 16
            }),
            "RDMA_DEST=0xab+16"
        );
        assert_eq!(
            ext_text(&ExtHeader::RdmaBytes {
                bytes: 9,
                rflags: 7
            }),
            "RDMA_BYTES=9/0x07"
        );
        assert_eq!(congested(&[0x81, 0, 1], 1), vec![8, 15, 24]);
        assert_eq!(congested(&[0x80], 8191), vec![65535]);
        let mut h = HeaderRepr::data(1, 1, 0, 0);
        assert_eq!(kind(&h), "probe");
        h.sport = 0;
        assert_eq!(kind(&h), "ack-only");
        h.dport = 1;
        assert_eq!(kind(&h), "probe-pong");
        h.dport = 4000;
        assert_eq!(kind(&h), "pong");
        h.sport = 5;
        assert_eq!(kind(&h), "data");
        h.dport = 0;
        assert_eq!(kind(&h), "ping");
        assert_eq!(kind(&HeaderRepr::cong_map()), "cong-map");
    }
}
