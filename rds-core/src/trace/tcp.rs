//! RDS/TCP records → Ethernet + IPv4/IPv6 + TCP segments.
//!
//! Every (source endpoint, destination endpoint) pair is one direction of one TCP connection
//! and has its own byte stream. A record's frame bytes are appended to its stream; the stream
//! is cut into segments at absolute stream offsets that are multiples of the MSS, so RDS
//! headers can straddle segments as they do on a real wire. The last, partial segment of a
//! stream is held back for a short while (`hold_ns`) so the next frame of the same stream can
//! fill it; see `TcpCaptureConfig` for the exact rules.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};

use super::checksum::{fold, sum16};
use super::writer::TcpCaptureConfig;
use super::{node_mac, Direction, TraceRecord, Transport};

/// One synthesized packet: link-layer bytes as captured and the length on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SynthPacket {
    pub ts_ns: u64,
    pub data: Vec<u8>,
    pub orig_len: u32,
}

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const TCP_LEN: usize = 20;
/// Largest TCP payload of one IPv4 datagram (total length ≤ 65535).
const MAX_PAYLOAD_V4: u64 = 65535 - (IPV4_LEN + TCP_LEN) as u64;
/// Largest TCP payload of one IPv6 packet without a jumbogram (payload length ≤ 65535).
const MAX_PAYLOAD_V6: u64 = 65535 - TCP_LEN as u64;

const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
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

impl Dirs {
    fn find(&self, key: &FlowKey) -> Option<usize> {
        if let Some((k, i)) = self.last.get() {
            if k == *key {
                return Some(i);
            }
        }
        let i = *self.index.get(key)?;
        self.last.set(Some((*key, i)));
        Some(i)
    }

    fn get(&self, key: &FlowKey) -> Option<&DirState> {
        self.find(key).map(|i| &self.all[i].1)
    }

    fn get_mut(&mut self, key: &FlowKey) -> Option<&mut DirState> {
        self.find(key).map(|i| &mut self.all[i].1)
    }

    fn get_or_insert_with(&mut self, key: FlowKey, f: impl FnOnce() -> DirState) -> &mut DirState {
        let i = match self.find(&key) {
            Some(i) => i,
            None => {
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
        };
        &mut self.all[i].1
    }

    fn iter(&self) -> impl Iterator<Item = (&FlowKey, &DirState)> {
        self.all.iter().map(|(k, v)| (k, v))
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
    /// Buffers of written packets, reused for new ones (no allocation per packet).
    pool: Vec<Vec<u8>>,
}

/// Packet buffers [`TcpSynth`] keeps for reuse.
const POOL: usize = 256;

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
            pool: Vec::new(),
        }
    }

    /// Gives a written packet's buffer back for reuse.
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL {
            buf.clear();
            self.pool.push(buf);
        }
    }

    fn mss(&self, key: &FlowKey) -> u64 {
        if key.0.is_ipv4() {
            u64::from(self.cfg.mss_v4)
        } else {
            u64::from(self.cfg.mss_v6)
        }
    }

    fn state(&mut self, key: FlowKey, src_local: bool) -> &mut DirState {
        let cfg = &self.cfg;
        self.dirs.get_or_insert_with(key, || DirState {
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

    /// The ACK number of segments from `key.0` to `key.1`: the next sequence number of the
    /// reverse direction (everything it emitted so far).
    fn ack_for(&self, key: &FlowKey) -> u32 {
        let Some(st) = self.dirs.get(key) else {
            return isn_for(&self.cfg, key.1, key.0);
        };
        match st.rev.and_then(|j| self.dirs.all.get(j)) {
            Some((_, r)) => r.isn.wrapping_add(r.sent as u32),
            None => st.rev_isn,
        }
    }

    /// Appends the packets a (validated) TCP record releases to `out`.
    pub(crate) fn push_into(&mut self, rec: &TraceRecord, out: &mut Vec<SynthPacket>) {
        let Transport::Tcp { local, peer } = rec.transport else {
            return;
        };
        let (key, src_local) = match rec.dir {
            Direction::Tx => ((local, peer), true),
            Direction::Rx => ((peer, local), false),
        };
        self.flush_stale(rec.ts_ns, out);
        self.state(key, src_local);
        if rec.is_truncated() {
            self.flush_key(&key, out);
            self.push_truncated(key, rec, out);
        } else {
            self.push_complete(key, rec, out);
            if self.cfg.hold_ns == 0 {
                self.flush_key(&key, out);
            }
        }
    }

    fn push_complete(&mut self, key: FlowKey, rec: &TraceRecord, out: &mut Vec<SynthPacket>) {
        let mss = self.mss(&key);
        let ack = self.ack_for(&key);
        let data = &rec.data[..];
        let mut pos = 0usize;
        loop {
            let Some(st) = self.dirs.get_mut(&key) else {
                return;
            };
            let boundary = (st.sent / mss + 1) * mss;
            let need = (boundary - st.sent) as usize;
            if st.pending.len() + (data.len() - pos) < need {
                st.pending.extend_from_slice(&data[pos..]);
                if !st.pending.is_empty() {
                    st.pending_ts = rec.ts_ns;
                    self.min_pending_ts = self.min_pending_ts.min(rec.ts_ns);
                }
                return;
            }
            let take = need - st.pending.len();
            let pending = std::mem::take(&mut st.pending);
            let psh = pos + take == data.len();
            let pkt = segment(
                self.pool.pop().unwrap_or_default(),
                st,
                &mut self.last_ts,
                &key,
                ack,
                &[&pending, &data[pos..pos + take]],
                need as u64,
                psh,
                rec.ts_ns,
            );
            out.push(pkt);
            pos += take;
        }
    }

    /// A snapped frame: one segment starting at the frame's first byte that carries the
    /// captured bytes and reports at least one byte more than it carries (so the packet is
    /// marked as cut). The frame's remaining bytes are left out: the stream offset jumps to
    /// the frame's end, which shows as a sequence gap before the next segment.
    fn push_truncated(&mut self, key: FlowKey, rec: &TraceRecord, out: &mut Vec<SynthPacket>) {
        let mss = self.mss(&key);
        let max_payload = if key.0.is_ipv4() {
            MAX_PAYLOAD_V4
        } else {
            MAX_PAYLOAD_V6
        };
        let ack = self.ack_for(&key);
        let orig = u64::from(rec.orig_len);
        let cap = rec.data.len() as u64;
        let reported = orig.min(mss.max(cap + 1)).min(max_payload);
        let captured = cap.min(reported - 1) as usize;
        let Some(st) = self.dirs.get_mut(&key) else {
            return;
        };
        let pkt = segment(
            self.pool.pop().unwrap_or_default(),
            st,
            &mut self.last_ts,
            &key,
            ack,
            &[&rec.data[..captured]],
            reported,
            reported == orig,
            rec.ts_ns,
        );
        out.push(pkt);
        // `segment` advanced the offset by `reported`; skip the rest of the frame.
        st.sent += orig - reported;
    }

    /// Emits the held partial segment of `key`, if any.
    fn flush_key(&mut self, key: &FlowKey, out: &mut Vec<SynthPacket>) {
        let ack = self.ack_for(key);
        let Some(st) = self.dirs.get_mut(key) else {
            return;
        };
        if st.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut st.pending);
        let ts = st.pending_ts.max(self.last_ts);
        let pkt = segment(
            self.pool.pop().unwrap_or_default(),
            st,
            &mut self.last_ts,
            key,
            ack,
            &[&pending],
            pending.len() as u64,
            true,
            ts,
        );
        out.push(pkt);
    }

    /// Emits held segments older than the hold time at `now`, oldest first.
    fn flush_stale(&mut self, now: u64, out: &mut Vec<SynthPacket>) {
        let hold = self.cfg.hold_ns;
        if self.min_pending_ts == u64::MAX || self.min_pending_ts.saturating_add(hold) >= now {
            return;
        }
        let mut stale: Vec<(u64, FlowKey)> = self
            .dirs
            .iter()
            .filter(|(_, st)| !st.pending.is_empty() && st.pending_ts.saturating_add(hold) < now)
            .map(|(k, st)| (st.pending_ts, *k))
            .collect();
        stale.sort();
        for (_, key) in stale {
            self.flush_key(&key, out);
        }
        self.min_pending_ts = self
            .dirs
            .iter()
            .map(|(_, st)| st)
            .filter(|st| !st.pending.is_empty())
            .map(|st| st.pending_ts)
            .min()
            .unwrap_or(u64::MAX);
    }

    /// Emits every held segment, oldest first.
    pub(crate) fn flush_all(&mut self) -> Vec<SynthPacket> {
        let mut out = Vec::new();
        self.flush_stale(u64::MAX, &mut out);
        // Held segments stamped at u64::MAX - hold or later (never in practice) still go.
        let mut keys: Vec<FlowKey> = self.dirs.iter().map(|(k, _)| *k).collect();
        keys.sort();
        for key in keys {
            self.flush_key(&key, &mut out);
        }
        out
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

/// Builds one segment of `key` starting at its current stream offset and advances the
/// offset by `reported` payload bytes, from the direction's header template: the same bytes
/// [`segment_slow`] builds field by field. `parts` are the captured payload bytes (their
/// total may be below `reported` for a snapped frame).
#[allow(clippy::too_many_arguments)]
fn segment(
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
        if v4 {
            t[ETH_LEN + 10..ETH_LEN + 12].fill(0);
        }
        t[tcp_start + 13] = 0;
        t[tcp_start + 16..tcp_start + 18].fill(0);
        // Pseudo-header: both addresses and the protocol; the length is added per segment.
        let addrs = if v4 {
            &t[ETH_LEN + 12..ETH_LEN + 20]
        } else {
            &t[ETH_LEN + 8..ETH_LEN + 40]
        };
        st.pseudo_sum = sum16(0, addrs) + 6;
        st.tmpl = t;
    }
    let seq = st.isn.wrapping_add(st.sent as u32);
    st.sent += reported;
    let ip_id = st.ip_id;
    st.ip_id = st.ip_id.wrapping_add(1);
    *last_ts = (*last_ts).max(ts_ns);

    let captured: usize = parts.iter().map(|p| p.len()).sum();
    let complete = captured as u64 == reported;
    let flags = TCP_ACK | if psh { TCP_PSH } else { 0 };
    let tcp_len = TCP_LEN as u64 + reported;
    p.clear();
    p.reserve(tcp_start + TCP_LEN + captured);
    p.extend_from_slice(&st.tmpl);
    if v4 {
        let ip = &mut p[ETH_LEN..ETH_LEN + IPV4_LEN];
        ip[2..4].copy_from_slice(&((IPV4_LEN as u64 + tcp_len) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
        let csum = fold(sum16(0, ip));
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
    } else {
        p[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
    }
    let tcp = &mut p[tcp_start..tcp_start + TCP_LEN];
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&ack.to_be_bytes());
    tcp[13] = flags;
    for part in parts {
        p.extend_from_slice(part);
    }
    if complete {
        let acc = sum16(
            st.pseudo_sum + (tcp_len >> 16) + (tcp_len & 0xffff),
            &p[tcp_start..],
        );
        let csum = fold(acc);
        p[tcp_start + 16..tcp_start + 18].copy_from_slice(&csum.to_be_bytes());
    }
    let orig_len = (ETH_LEN + ip_len) as u64 + tcp_len;
    SynthPacket {
        ts_ns,
        data: p,
        orig_len: orig_len as u32,
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
    let flags = TCP_ACK | if psh { TCP_PSH } else { 0 };
    let tcp_len = TCP_LEN as u64 + reported;
    let ip_len = if src.is_ipv4() { IPV4_LEN } else { IPV6_LEN };
    p.clear();
    p.reserve(ETH_LEN + ip_len + TCP_LEN + captured);

    // Ethernet II.
    p.extend_from_slice(&node_mac(dst.ip(), !src_local));
    p.extend_from_slice(&node_mac(src.ip(), src_local));
    // IP.
    let mut pseudo_buf = [0u8; 40];
    let mut pseudo = Pseudo {
        buf: &mut pseudo_buf,
        len: 0,
    };
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend_from_slice(&0x0800u16.to_be_bytes());
            let ip_start = p.len();
            p.push(0x45); // version 4, IHL 5
            p.push(0); // DSCP/ECN
            p.extend_from_slice(&((IPV4_LEN as u64 + tcp_len) as u16).to_be_bytes());
            p.extend_from_slice(&ip_id.to_be_bytes());
            p.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
            p.push(TTL);
            p.push(6); // TCP
            p.extend_from_slice(&[0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            let csum = fold(sum16(0, &p[ip_start..]));
            p[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        }
        (s, d) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let (s, d) = (to6(s), to6(d));
            p.extend_from_slice(&0x86DDu16.to_be_bytes());
            p.extend_from_slice(&[0x60, 0, 0, 0]); // version 6, class 0, flow label 0
            p.extend_from_slice(&(tcp_len as u16).to_be_bytes());
            p.push(6); // next header: TCP
            p.push(TTL);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&(tcp_len as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 6]);
        }
    }
    // TCP.
    let tcp_start = p.len();
    p.extend_from_slice(&src.port().to_be_bytes());
    p.extend_from_slice(&dst.port().to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push((TCP_LEN as u8 / 4) << 4);
    p.push(flags);
    p.extend_from_slice(&TCP_WINDOW.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // checksum
    p.extend_from_slice(&[0, 0]); // urgent pointer
    for part in parts {
        p.extend_from_slice(part);
    }
    if complete {
        let acc = sum16(sum16(0, &pseudo.buf[..pseudo.len]), &p[tcp_start..]);
        let csum = fold(acc);
        p[tcp_start + 16..tcp_start + 18].copy_from_slice(&csum.to_be_bytes());
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

    /// The template path builds exactly the bytes of the field-by-field path: IPv4 and IPv6,
    /// either direction, complete and snapped segments, PSH or not, sizes up to the largest
    /// IP datagram, IP IDs wrapping.
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
                    let fast = segment(
                        Vec::new(),
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
                    assert_eq!(fast, slow, "{key:?} {src_local} segment {i}");
                    assert_eq!((a.sent, a.ip_id, ta), (b.sent, b.ip_id, tb));
                }
            }
        }
    }
}
