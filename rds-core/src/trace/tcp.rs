//! RDS/TCP records → Ethernet + IPv4/IPv6 + TCP segments.
//!
//! Every (source endpoint, destination endpoint) pair is one direction of one TCP connection
//! and has its own byte stream. A record's frame bytes are appended to its stream; the stream
//! is cut into segments at absolute stream offsets that are multiples of the MSS, so RDS
//! headers can straddle segments as they do on a real wire. The last, partial segment of a
//! stream is held back for a short while (`hold_ns`) so the next frame of the same stream can
//! fill it; [`TcpCaptureConfig`] sets the MSS and that time, and
//! [`super::PcapSink::ethernet`] states every rule.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};

use super::frame::{RecordRef, FLOW_SLOTS};
use super::net::ethernet::{self, ethertype, EthernetFrame};
use super::net::ipv4::{self, Ipv4Packet};
use super::net::ipv6::{self, Ipv6Packet};
use super::net::tcp::{self, flags, TcpPacket};
use super::net::IP_PROTO_TCP;
use super::pcap::pcap_record_header;
use super::record::{Direction, Transport};
use crate::wire::{fold, sum16};

/// Default TCP maximum segment size over IPv4: 1500-byte MTU minus IPv4 and TCP headers and
/// the 12-byte timestamp option Linux uses.
pub const DEFAULT_MSS_V4: u16 = 1448;
/// Default TCP maximum segment size over IPv6 (1500-byte MTU, 40-byte IPv6 header).
pub const DEFAULT_MSS_V6: u16 = 1428;

/// The synthetic MAC address of a node in Ethernet captures: `02:00:a:b:c:d` for the local
/// (capturing) node, `02:01:a:b:c:d` for its peer, where `a.b.c.d` are the last four bytes of
/// `ip` (the IPv4 address itself). Locally administered unicast addresses.
pub fn node_mac(ip: IpAddr, local: bool) -> [u8; 6] {
    let tail = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [
        0x02,
        if local { 0x00 } else { 0x01 },
        tail[0],
        tail[1],
        tail[2],
        tail[3],
    ]
}

/// How [`super::PcapSink::ethernet`] lays RDS/TCP streams out as TCP segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpCaptureConfig {
    /// Maximum segment size over IPv4, 1..=65495 (default [`DEFAULT_MSS_V4`]).
    pub mss_v4: u16,
    /// Maximum segment size over IPv6, 1..=65515 (default [`DEFAULT_MSS_V6`]).
    pub mss_v6: u16,
    /// How long (in record time) a stream's last, partial segment waits for the next frame of
    /// the same stream before it is written on its own. 0 writes every frame's tail at once
    /// (no frame then shares a segment with the next one). Default 1 ms.
    pub hold_ns: u64,
    /// Initial TCP sequence number of every direction. `None` (the default) derives a
    /// different one per direction from a hash of both endpoints.
    pub fixed_isn: Option<u32>,
}

impl Default for TcpCaptureConfig {
    fn default() -> Self {
        TcpCaptureConfig {
            mss_v4: DEFAULT_MSS_V4,
            mss_v6: DEFAULT_MSS_V6,
            hold_ns: 1_000_000,
            fixed_isn: None,
        }
    }
}

/// One synthesized packet: link-layer bytes as captured and the length on the wire (what
/// [`segment_slow`] builds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SynthPacket {
    pub ts_ns: u64,
    pub data: Vec<u8>,
    pub orig_len: u32,
}

const ETH_LEN: usize = ethernet::HEADER_LEN;
const IPV4_LEN: usize = ipv4::HEADER_LEN;
const IPV6_LEN: usize = ipv6::HEADER_LEN;
const TCP_LEN: usize = tcp::HEADER_LEN;
/// Largest TCP payload of one IPv4 datagram (total length ≤ 65535).
const MAX_PAYLOAD_V4: u64 = 65535 - (IPV4_LEN + TCP_LEN) as u64;
/// Largest TCP payload of one IPv6 packet without a jumbogram (payload length ≤ 65535).
const MAX_PAYLOAD_V6: u64 = 65535 - TCP_LEN as u64;

const TCP_WINDOW: u16 = 0xffff;
const TTL: u8 = 64;

type FlowKey = (SocketAddr, SocketAddr);

/// A fast hasher for flow keys (the std hasher resists collision attacks a capture file's
/// writer does not face, at several times the cost per lookup).
#[derive(Default)]
struct FlowHasher(u64);

impl Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0 =
                (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
}

/// The directions of a capture: a vector with a hash index and a cache of the last key found
/// (a record looks its direction up several times).
#[derive(Default)]
struct Dirs {
    all: Vec<(FlowKey, DirState)>,
    index: HashMap<FlowKey, usize, BuildHasherDefault<FlowHasher>>,
    last: Cell<Option<(FlowKey, usize)>>,
}

impl std::fmt::Debug for Dirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.all.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

/// Up to this many directions, [`Dirs::find`] scans instead of hashing.
const SCAN: usize = 8;

impl Dirs {
    fn find(&self, key: &FlowKey) -> Option<usize> {
        if let Some((k, i)) = self.last.get() {
            if k == *key {
                return Some(i);
            }
        }
        // A few directions (the usual case) are found faster by comparing than by hashing.
        let i = if self.all.len() <= SCAN {
            self.all.iter().position(|(k, _)| k == key)?
        } else {
            *self.index.get(key)?
        };
        self.last.set(Some((*key, i)));
        Some(i)
    }

    fn index_or_insert(&mut self, key: FlowKey, f: impl FnOnce() -> DirState) -> usize {
        if let Some(i) = self.find(&key) {
            return i;
        }
        let i = self.all.len();
        let mut st = f();
        if let Some(j) = self.index.get(&(key.1, key.0)).copied() {
            st.rev = Some(j);
            self.all[j].1.rev = Some(i);
        }
        self.all.push((key, st));
        self.index.insert(key, i);
        i
    }
}

#[derive(Debug)]
struct DirState {
    isn: u32,
    /// Stream offset of the first byte not yet in an emitted segment (start of `pending`).
    sent: u64,
    /// Bytes of the partial segment being held: stream offsets `sent..sent + len`, always
    /// ending before the next multiple of the MSS.
    pending: Vec<u8>,
    /// Timestamp of the newest record that added bytes to `pending`.
    pending_ts: u64,
    ip_id: u16,
    /// The initial sequence number of the reverse direction (its ACK number until it sends).
    rev_isn: u32,
    /// Where the reverse direction is in [`Dirs`], once it exists.
    rev: Option<usize>,
    /// Whether the source of this direction is the capturing node.
    src_local: bool,
    /// Ethernet + IP + TCP headers of this direction with the per-segment fields (lengths,
    /// IP ID, sequence and ACK numbers, flags, checksums) zero; built with the first segment.
    tmpl: Vec<u8>,
    /// One's-complement sum of the TCP pseudo-header without its length.
    pseudo_sum: u64,
}

/// The TCP synthesizer: all connection state of one capture.
#[derive(Debug)]
pub(crate) struct TcpSynth {
    cfg: TcpCaptureConfig,
    dirs: Dirs,
    /// Newest timestamp of any emitted packet.
    last_ts: u64,
    /// At most the oldest `pending_ts` of a held segment (`u64::MAX`: none held), so that
    /// most records need no scan for stale segments.
    min_pending_ts: u64,
    /// Per slot of the [`super::frame::FlowCache`] that reads this synthesizer's records (the one
    /// of its [`super::Capture`]; ids from any other cache would not mean the same flows),
    /// the id of the last flow and its direction's index: the next record of that flow skips
    /// comparing endpoint pairs.
    flows: [(u64, usize); FLOW_SLOTS],
}

/// The initial sequence number of a direction: FNV-1a over both endpoints, or the fixed value.
fn isn_for(cfg: &TcpCaptureConfig, src: SocketAddr, dst: SocketAddr) -> u32 {
    if let Some(isn) = cfg.fixed_isn {
        return isn;
    }
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    for ep in [src, dst] {
        match ep.ip() {
            IpAddr::V4(a) => eat(&a.octets()),
            IpAddr::V6(a) => eat(&a.octets()),
        }
        eat(&ep.port().to_be_bytes());
    }
    h
}

impl TcpSynth {
    pub(crate) fn new(cfg: TcpCaptureConfig) -> Self {
        TcpSynth {
            cfg,
            dirs: Dirs::default(),
            last_ts: 0,
            min_pending_ts: u64::MAX,
            flows: [(0, 0); FLOW_SLOTS],
        }
    }

    fn mss(&self, key: &FlowKey) -> u64 {
        if key.0.is_ipv4() {
            u64::from(self.cfg.mss_v4)
        } else {
            u64::from(self.cfg.mss_v6)
        }
    }

    /// Where direction `key` is in [`Dirs`], created on first use.
    fn dir_index(&mut self, key: FlowKey, src_local: bool) -> usize {
        let cfg = &self.cfg;
        self.dirs.index_or_insert(key, || DirState {
            isn: isn_for(cfg, key.0, key.1),
            rev_isn: isn_for(cfg, key.1, key.0),
            rev: None,
            sent: 0,
            pending: Vec::new(),
            pending_ts: 0,
            ip_id: 1,
            src_local,
            tmpl: Vec::new(),
            pseudo_sum: 0,
        })
    }

    /// The ACK number of segments of direction `i`: the next sequence number of the reverse
    /// direction (everything it emitted so far).
    fn ack_for(&self, i: usize) -> u32 {
        let st = &self.dirs.all[i].1;
        match st.rev {
            Some(j) => {
                let r = &self.dirs.all[j].1;
                r.isn.wrapping_add(r.sent as u32)
            }
            None => st.rev_isn,
        }
    }

    /// Appends the pcap records of the packets a (validated) TCP record releases to `out`;
    /// returns how many.
    pub(crate) fn push(&mut self, rec: &RecordRef<'_>, out: &mut Vec<u8>) -> u64 {
        let Transport::Tcp { local, peer } = rec.transport else {
            return 0;
        };
        let mut n = self.flush_stale(rec.ts_ns, out);
        let cached = rec.flow.and_then(|f| {
            let (id, i) = *self.flows.get(usize::from(f.slot))?;
            (id == f.id).then_some(i)
        });
        let i = match cached {
            Some(i) => i,
            None => {
                let (key, src_local) = match rec.dir {
                    Direction::Tx => ((local, peer), true),
                    Direction::Rx => ((peer, local), false),
                };
                let i = self.dir_index(key, src_local);
                if let Some(f) = rec.flow {
                    if let Some(s) = self.flows.get_mut(usize::from(f.slot)) {
                        *s = (f.id, i);
                    }
                }
                i
            }
        };
        if rec.is_truncated() {
            n += self.flush_dir(i, out);
            n += self.push_truncated(i, rec, out);
        } else {
            n += self.push_complete(i, rec, out);
            if self.cfg.hold_ns == 0 {
                n += self.flush_dir(i, out);
            }
        }
        n
    }

    fn push_complete(&mut self, i: usize, rec: &RecordRef<'_>, out: &mut Vec<u8>) -> u64 {
        let mss = self.mss(&self.dirs.all[i].0);
        let ack = self.ack_for(i);
        let len = rec.len();
        let (key, st) = &mut self.dirs.all[i];
        let mut pos = 0usize;
        let mut n = 0;
        loop {
            let boundary = (st.sent / mss + 1) * mss;
            let need = (boundary - st.sent) as usize;
            if st.pending.len() + (len - pos) < need {
                for p in rec.range(pos, len) {
                    st.pending.extend_from_slice(p);
                }
                if !st.pending.is_empty() {
                    st.pending_ts = rec.ts_ns;
                    self.min_pending_ts = self.min_pending_ts.min(rec.ts_ns);
                }
                return n;
            }
            let take = need - st.pending.len();
            // Taken out for the call and put back, so its buffer is kept.
            let mut pending = std::mem::take(&mut st.pending);
            let psh = pos + take == len;
            let [a, b] = rec.range(pos, pos + take);
            segment(
                out,
                st,
                &mut self.last_ts,
                key,
                ack,
                &[&pending, a, b],
                need as u64,
                psh,
                rec.ts_ns,
            );
            pending.clear();
            st.pending = pending;
            n += 1;
            pos += take;
        }
    }

    /// A snapped frame: one segment starting at the frame's first byte that carries the
    /// captured bytes and reports at least one byte more than it carries (so the packet is
    /// marked as cut). The frame's remaining bytes are left out: the stream offset jumps to
    /// the frame's end, which shows as a sequence gap before the next segment.
    fn push_truncated(&mut self, i: usize, rec: &RecordRef<'_>, out: &mut Vec<u8>) -> u64 {
        let ack = self.ack_for(i);
        let mss = self.mss(&self.dirs.all[i].0);
        let (key, st) = &mut self.dirs.all[i];
        let max_payload = if key.0.is_ipv4() {
            MAX_PAYLOAD_V4
        } else {
            MAX_PAYLOAD_V6
        };
        let orig = u64::from(rec.orig_len);
        let cap = rec.len() as u64;
        let reported = orig.min(mss.max(cap + 1)).min(max_payload);
        let captured = cap.min(reported - 1) as usize;
        segment(
            out,
            st,
            &mut self.last_ts,
            key,
            ack,
            &rec.range(0, captured),
            reported,
            reported == orig,
            rec.ts_ns,
        );
        // `segment` advanced the offset by `reported`; skip the rest of the frame.
        st.sent += orig - reported;
        1
    }

    /// Emits the held partial segment of direction `i`, if any.
    fn flush_dir(&mut self, i: usize, out: &mut Vec<u8>) -> u64 {
        let ack = self.ack_for(i);
        let (key, st) = &mut self.dirs.all[i];
        if st.pending.is_empty() {
            return 0;
        }
        let mut pending = std::mem::take(&mut st.pending);
        let ts = st.pending_ts.max(self.last_ts);
        segment(
            out,
            st,
            &mut self.last_ts,
            key,
            ack,
            &[&pending],
            pending.len() as u64,
            true,
            ts,
        );
        pending.clear();
        st.pending = pending;
        1
    }

    /// Emits held segments older than the hold time at `now`, oldest first.
    fn flush_stale(&mut self, now: u64, out: &mut Vec<u8>) -> u64 {
        let hold = self.cfg.hold_ns;
        if self.min_pending_ts == u64::MAX || self.min_pending_ts.saturating_add(hold) >= now {
            return 0;
        }
        let mut stale: Vec<(u64, FlowKey, usize)> = self
            .dirs
            .all
            .iter()
            .enumerate()
            .filter(|(_, (_, st))| {
                !st.pending.is_empty() && st.pending_ts.saturating_add(hold) < now
            })
            .map(|(i, (k, st))| (st.pending_ts, *k, i))
            .collect();
        stale.sort();
        let mut n = 0;
        for (_, _, i) in stale {
            n += self.flush_dir(i, out);
        }
        self.min_pending_ts = self
            .dirs
            .all
            .iter()
            .map(|(_, st)| st)
            .filter(|st| !st.pending.is_empty())
            .map(|st| st.pending_ts)
            .min()
            .unwrap_or(u64::MAX);
        n
    }

    /// Emits every held segment, oldest first; returns how many.
    pub(crate) fn flush_all(&mut self, out: &mut Vec<u8>) -> u64 {
        let mut n = self.flush_stale(u64::MAX, out);
        // Held segments stamped at u64::MAX - hold or later (never in practice) still go.
        let mut keys: Vec<(FlowKey, usize)> = self
            .dirs
            .all
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (*k, i))
            .collect();
        keys.sort();
        for (_, i) in keys {
            n += self.flush_dir(i, out);
        }
        n
    }
}

/// The TCP pseudo-header, built on the stack.
struct Pseudo<'a> {
    buf: &'a mut [u8; 40],
    len: usize,
}

impl Pseudo<'_> {
    fn extend_from_slice(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
}

/// Appends the pcap record of one segment of `key` to `out` (the record header, then the
/// packet) and advances the direction's stream offset by `reported` payload bytes. The
/// packet starts at the current offset and is built from the direction's header template:
/// the same bytes [`segment_slow`] builds field by field. `parts` are the captured payload
/// bytes (their total may be below `reported` for a snapped frame).
#[allow(clippy::too_many_arguments)]
fn segment(
    out: &mut Vec<u8>,
    st: &mut DirState,
    last_ts: &mut u64,
    key: &FlowKey,
    ack: u32,
    parts: &[&[u8]],
    reported: u64,
    psh: bool,
    ts_ns: u64,
) {
    let v4 = key.0.is_ipv4() && key.1.is_ipv4();
    let ip_len = if v4 { IPV4_LEN } else { IPV6_LEN };
    let tcp_start = ETH_LEN + ip_len;
    if st.tmpl.is_empty() {
        let mut scratch = DirState {
            isn: 0,
            sent: 0,
            pending: Vec::new(),
            pending_ts: 0,
            ip_id: 0,
            rev_isn: 0,
            rev: None,
            src_local: st.src_local,
            tmpl: Vec::new(),
            pseudo_sum: 0,
        };
        let mut t = segment_slow(Vec::new(), &mut scratch, &mut 0, key, 0, &[], 0, false, 0).data;
        // Pseudo-header: both addresses and the protocol; the length is added per segment.
        let addrs = if v4 {
            let mut ip = Ipv4Packet::new_unchecked(&mut t[ETH_LEN..tcp_start]);
            ip.set_checksum(0);
            sum16(sum16(0, &ip.src_addr().octets()), &ip.dst_addr().octets())
        } else {
            let ip = Ipv6Packet::new_unchecked(&t[ETH_LEN..tcp_start]);
            sum16(sum16(0, &ip.src_addr().octets()), &ip.dst_addr().octets())
        };
        st.pseudo_sum = addrs + u64::from(IP_PROTO_TCP);
        let mut tcp = TcpPacket::new_unchecked(&mut t[tcp_start..]);
        tcp.set_flags(0);
        tcp.set_checksum(0);
        st.tmpl = t;
    }
    let seq = st.isn.wrapping_add(st.sent as u32);
    st.sent += reported;
    let ip_id = st.ip_id;
    st.ip_id = st.ip_id.wrapping_add(1);
    *last_ts = (*last_ts).max(ts_ns);

    let captured: usize = parts.iter().map(|p| p.len()).sum();
    let complete = captured as u64 == reported;
    let flags = flags::ACK | if psh { flags::PSH } else { 0 };
    let tcp_len = TCP_LEN as u64 + reported;
    let incl = tcp_start + TCP_LEN + captured;
    out.reserve(16 + incl);
    out.extend_from_slice(&pcap_record_header(
        ts_ns,
        incl,
        (tcp_start as u64 + tcp_len) as u32,
    ));
    let start = out.len();
    out.extend_from_slice(&st.tmpl);
    let p = &mut out[start..];
    if v4 {
        let mut ip = Ipv4Packet::new_unchecked(&mut p[ETH_LEN..ETH_LEN + IPV4_LEN]);
        ip.set_total_len((IPV4_LEN as u64 + tcp_len) as u16);
        ip.set_ident(ip_id);
        ip.fill_checksum();
    } else {
        Ipv6Packet::new_unchecked(&mut p[ETH_LEN..ETH_LEN + IPV6_LEN])
            .set_payload_len(tcp_len as u16);
    }
    let mut tcp = TcpPacket::new_unchecked(&mut p[tcp_start..tcp_start + TCP_LEN]);
    tcp.set_seq_number(seq);
    tcp.set_ack_number(ack);
    tcp.set_flags(flags);
    for part in parts {
        out.extend_from_slice(part);
    }
    if complete {
        let tcp = start + tcp_start;
        let acc = sum16(
            st.pseudo_sum + (tcp_len >> 16) + (tcp_len & 0xffff),
            &out[tcp..],
        );
        TcpPacket::new_unchecked(&mut out[tcp..]).set_checksum(fold(acc));
    }
}

/// [`segment`] built field by field: it makes the header templates, and tests compare both.
#[allow(clippy::too_many_arguments)]
fn segment_slow(
    mut p: Vec<u8>,
    st: &mut DirState,
    last_ts: &mut u64,
    key: &FlowKey,
    ack: u32,
    parts: &[&[u8]],
    reported: u64,
    psh: bool,
    ts_ns: u64,
) -> SynthPacket {
    let (src, dst) = *key;
    let seq = st.isn.wrapping_add(st.sent as u32);
    st.sent += reported;
    let ip_id = st.ip_id;
    st.ip_id = st.ip_id.wrapping_add(1);
    let src_local = st.src_local;
    *last_ts = (*last_ts).max(ts_ns);

    let captured: usize = parts.iter().map(|p| p.len()).sum();
    let complete = captured as u64 == reported;
    let flags = flags::ACK | if psh { flags::PSH } else { 0 };
    let tcp_len = TCP_LEN as u64 + reported;
    // Records mixing IPv4 and IPv6 endpoints were refused; IPv6 takes the other case.
    let v4 = matches!((src.ip(), dst.ip()), (IpAddr::V4(_), IpAddr::V4(_)));
    let ip_len = if v4 { IPV4_LEN } else { IPV6_LEN };
    let tcp_start = ETH_LEN + ip_len;
    p.clear();
    p.reserve(tcp_start + TCP_LEN + captured);
    p.resize(tcp_start + TCP_LEN, 0);

    // Ethernet II.
    let mut eth = EthernetFrame::new_unchecked(&mut p[..ETH_LEN]);
    eth.set_dst_addr(node_mac(dst.ip(), !src_local));
    eth.set_src_addr(node_mac(src.ip(), src_local));
    eth.set_ethertype(if v4 { ethertype::IPV4 } else { ethertype::IPV6 });
    // IP.
    let mut pseudo_buf = [0u8; 40];
    let mut pseudo = Pseudo {
        buf: &mut pseudo_buf,
        len: 0,
    };
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = Ipv4Packet::new_unchecked(&mut p[ETH_LEN..tcp_start]);
            ip.set_version_and_header_len(4, IPV4_LEN);
            ip.set_total_len((IPV4_LEN as u64 + tcp_len) as u16);
            ip.set_ident(ip_id);
            ip.set_dont_frag(true);
            ip.set_hop_limit(TTL);
            ip.set_protocol(IP_PROTO_TCP);
            ip.set_src_addr(s);
            ip.set_dst_addr(d);
            ip.fill_checksum();
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, IP_PROTO_TCP]);
            pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        }
        (s, d) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let (s, d) = (to6(s), to6(d));
            let mut ip = Ipv6Packet::new_unchecked(&mut p[ETH_LEN..tcp_start]);
            ip.set_ver_tc_flow(6, 0, 0);
            ip.set_payload_len(tcp_len as u16);
            ip.set_next_header(IP_PROTO_TCP);
            ip.set_hop_limit(TTL);
            ip.set_src_addr(s);
            ip.set_dst_addr(d);
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&(tcp_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, IP_PROTO_TCP]);
        }
    }
    // TCP: urgent pointer 0.
    let mut tcp = TcpPacket::new_unchecked(&mut p[tcp_start..]);
    tcp.set_src_port(src.port());
    tcp.set_dst_port(dst.port());
    tcp.set_seq_number(seq);
    tcp.set_ack_number(ack);
    tcp.set_header_len(TCP_LEN);
    tcp.set_flags(flags);
    tcp.set_window_len(TCP_WINDOW);
    for part in parts {
        p.extend_from_slice(part);
    }
    if complete {
        let acc = sum16(sum16(0, &pseudo.buf[..pseudo.len]), &p[tcp_start..]);
        TcpPacket::new_unchecked(&mut p[tcp_start..]).set_checksum(fold(acc));
    }
    let orig_len = (ETH_LEN + ip_len) as u64 + tcp_len;
    SynthPacket {
        ts_ns,
        data: p,
        orig_len: orig_len as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(src_local: bool) -> DirState {
        DirState {
            isn: 0x1234_5678,
            sent: 0,
            pending: Vec::new(),
            pending_ts: 0,
            ip_id: 0xfffe,
            rev_isn: 0,
            rev: None,
            src_local,
            tmpl: Vec::new(),
            pseudo_sum: 0,
        }
    }

    /// The template path writes exactly the bytes of the field-by-field path (after the pcap
    /// record header): IPv4 and IPv6, either direction, complete and snapped segments, PSH or
    /// not, sizes up to the largest IP datagram, IP IDs wrapping.
    #[test]
    fn template_segments_equal_field_by_field_ones() {
        let payload: Vec<u8> = (0..65_535u32).map(|i| (i * 31 % 253) as u8).collect();
        let keys: [FlowKey; 3] = [
            (
                "10.0.0.1:40001".parse().unwrap(),
                "10.0.0.2:16385".parse().unwrap(),
            ),
            (
                "[fd00::2]:16385".parse().unwrap(),
                "[fd00::1]:40002".parse().unwrap(),
            ),
            (
                "[fe80::1:2:3:4]:40003".parse().unwrap(),
                "[::ffff:10.0.0.9]:16385".parse().unwrap(),
            ),
        ];
        for key in keys {
            for src_local in [true, false] {
                let (mut a, mut b) = (fresh(src_local), fresh(src_local));
                let (mut ta, mut tb) = (0, 0);
                let max = if key.0.is_ipv4() {
                    MAX_PAYLOAD_V4
                } else {
                    MAX_PAYLOAD_V6
                } as usize;
                for (i, (cap, reported)) in [
                    (1448, 1448),
                    (0, 0),
                    (7, 7),
                    (100, 1448),
                    (max, max),
                    (max - 1, max),
                    (1, 2),
                ]
                .into_iter()
                .enumerate()
                {
                    let ack = 0x9abc_def0u32.wrapping_add(i as u32 * 977);
                    let parts: [&[u8]; 2] = [&payload[..cap / 2], &payload[cap / 2..cap]];
                    let psh = i % 2 == 0;
                    let ts = 1_000 + i as u64;
                    let mut fast = Vec::new();
                    segment(
                        &mut fast,
                        &mut a,
                        &mut ta,
                        &key,
                        ack,
                        &parts,
                        reported as u64,
                        psh,
                        ts,
                    );
                    let slow = segment_slow(
                        Vec::new(),
                        &mut b,
                        &mut tb,
                        &key,
                        ack,
                        &parts,
                        reported as u64,
                        psh,
                        ts,
                    );
                    let mut slow_rec =
                        pcap_record_header(slow.ts_ns, slow.data.len(), slow.orig_len).to_vec();
                    slow_rec.extend_from_slice(&slow.data);
                    assert_eq!(fast, slow_rec, "{key:?} {src_local} segment {i}");
                    assert_eq!((a.sent, a.ip_id, ta), (b.sent, b.ip_id, tb));
                }
            }
        }
    }
}
