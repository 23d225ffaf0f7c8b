//! The checks behind every fuzz target, shared with the stable corpus-replay test
//! (`rds-core/tests/fuzz_corpus.rs` includes this file), so CI replays the committed corpus
//! through exactly what the fuzzers run.
//!
//! Each function takes arbitrary bytes and panics only when a property fails:
//! - [`header`]: header view, repr, extension iteration, `Display`, checksum, congestion map;
//!   parse/emit round trips.
//! - [`stream`]: a TCP byte stream cut into arbitrary chunks; frames re-encode to exactly the
//!   bytes consumed, and the result does not depend on the chunking.
//! - [`frag`]: IB fragments into a [`FragAssembler`]; completed messages are the concatenation
//!   of their fragments.
//! - [`engine`]: a [`Stack`] with a path up, fed arbitrary frames, application calls, acks,
//!   timers and connection changes; accounting and queue invariants hold after every step.
//! - [`ctl`]: the control protocol: frames read from a byte stream (whole or in pieces),
//!   re-written byte for byte; request and reply JSON round trips; trace record batches.
//! - [`ib_private`]: the IB connection private data (32/56 bytes) and the version a passive
//!   side answers a connect request with, checked against the kernel's rule.
//! - [`pcap`]: the capture reader `rds-trace -r` uses, on arbitrary files.
#![allow(dead_code)] // each fuzz target uses one entry point

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::driver::{self, Io};
use rds_core::proto::{
    ConnId, DropReason, FragAssembler, FrameKind, Received, SockId, Stack, StreamParser, Transmit,
    TransportKind,
};
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{
    checksum, ext_types, flags, CongMap, ExtSpace, HeaderPacket, HeaderRepr, CONG_MAP_BYTES,
    EXT_SPACE, EXT_TYPE_MAX, FRAG_SIZE, HEADER_LEN, MAX_MSG_SIZE, RDS_TCP_PORT,
};

/// Reads fuzz input as a sequence of small values; past the end everything reads as zero.
struct Reader<'a> {
    d: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(d: &'a [u8]) -> Self {
        Reader { d }
    }
    fn is_empty(&self) -> bool {
        self.d.is_empty()
    }
    fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, rest)) => {
                self.d = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) << 32 | u64::from(self.u32())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bit(&mut self) -> bool {
        self.u8() & 1 != 0
    }
    /// `n` bytes, zero-padded past the end.
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let k = n.min(self.d.len());
        let mut v = self.d[..k].to_vec();
        self.d = &self.d[k..];
        v.resize(n, 0);
        v
    }
}

// ============================================================================================
// header

/// Header, extension and congestion-map parsing on arbitrary bytes.
pub fn header(data: &[u8]) {
    let _ = checksum(data);
    match HeaderPacket::new_checked(data) {
        Err(_) => {
            assert!(data.len() < HEADER_LEN);
            assert!(HeaderRepr::from_bytes(data).is_err());
        }
        Ok(pkt) => {
            let repr = HeaderRepr::parse(&pkt);
            // Every byte survives parse + emit.
            assert_eq!(&repr.to_bytes()[..], &data[..HEADER_LEN]);
            let mut buf = [0xa5u8; HEADER_LEN + 1];
            repr.emit(&mut buf);
            assert_eq!(&buf[..HEADER_LEN], &data[..HEADER_LEN]);
            assert_eq!(buf[HEADER_LEN], 0xa5, "emit writes 48 bytes only");
            assert_eq!(pkt.payload(), &data[HEADER_LEN..]);
            // The checksum rule: 0 means none; otherwise the sum over the header must be 0.
            let ok = pkt.checksum_ok();
            assert_eq!(ok, repr.csum == 0 || checksum(&data[..HEADER_LEN]) == 0);
            assert_eq!(pkt.verify_checksum().is_ok(), ok);
            let mut fixed = [0u8; HEADER_LEN];
            repr.emit_checksummed(&mut fixed);
            assert_eq!(checksum(&fixed), 0);
            let back = HeaderRepr::from_bytes(&fixed).unwrap();
            assert!(HeaderPacket::new_checked(&fixed[..]).unwrap().checksum_ok());
            assert_eq!(
                HeaderRepr {
                    csum: repr.csum,
                    ..back
                },
                repr
            );
            // Classification is consistent with the fields.
            assert_eq!(repr.is_cong_map(), repr.flags == flags::CONG_BITMAP);
            assert_eq!(
                repr.is_hs_probe(),
                repr.is_probe_ping() || repr.is_probe_pong()
            );
            assert_eq!(
                repr.is_ack_only(),
                repr.sport == 0 && repr.dport == 0 && repr.len == 0
            );
            let shown = repr.to_string();
            assert!(shown.starts_with(&format!("{} > {} seq {}", repr.sport, repr.dport, repr.seq)));
            ext_space(repr.ext);
        }
    }
    // The same bytes as an extension area on their own.
    let mut raw = [0u8; EXT_SPACE];
    let n = data.len().min(EXT_SPACE);
    raw[..n].copy_from_slice(&data[..n]);
    ext_space(ExtSpace::from_bytes(raw));
    // And as a congestion map.
    match CongMap::from_bytes(data) {
        Ok(m) => {
            assert_eq!(data.len(), CONG_MAP_BYTES);
            assert_eq!(m.to_bytes(), data);
            let ports: Vec<u16> = m.congested_ports().collect();
            let bits: u32 = data.iter().map(|b| b.count_ones()).sum();
            assert_eq!(ports.len(), bits as usize);
            for &p in &ports {
                assert!(m.test(p));
                assert_ne!(data[usize::from(p) / 8] & (1 << (p % 8)), 0);
            }
            assert_eq!(CongMap::uncongested_mask(&m, &m), 0);
            let all = CongMap::uncongested_mask(&m, &CongMap::new());
            let fold = ports.iter().fold(0u64, |acc, &p| acc | 1 << (p % 64));
            assert_eq!(all, fold);
        }
        Err(_) => assert_ne!(data.len(), CONG_MAP_BYTES),
    }
}

fn ext_space(space: ExtSpace) {
    let exts: Vec<_> = space.iter().collect();
    let mut used = 0;
    for e in &exts {
        assert!(e.ty() != ext_types::NONE && e.ty() < EXT_TYPE_MAX);
        used += 1 + e.payload_len();
        let _ = e.to_string();
        assert_eq!(space.find(e.ty()).map(|f| f.ty()), Some(e.ty()));
    }
    assert!(used <= EXT_SPACE);
    // Appending one of the parsed extensions keeps the chain and adds it at the end.
    if let Some(&e) = exts.first() {
        let mut s = space;
        match s.push(e) {
            Ok(()) => {
                let mut want = exts.clone();
                want.push(e);
                assert_eq!(s.iter().collect::<Vec<_>>(), want);
                assert_eq!(&s.as_bytes()[..used], &space.as_bytes()[..used]);
            }
            Err(_) => {
                assert!(used + 1 + e.payload_len() > EXT_SPACE);
                assert_eq!(s, space, "a failed push changes nothing");
            }
        }
    }
}

// ============================================================================================
// stream

/// Input: `[k, k chunk-size bytes, limit selector, stream...]`. The stream is fed in chunks
/// of the given sizes (cycling).
pub fn stream(data: &[u8]) {
    let mut r = Reader::new(data);
    let k = usize::from(r.u8() % 16);
    let sizes: Vec<usize> = (0..k).map(|_| usize::from(r.u8()) + 1).collect();
    let max_len = match r.u8() % 4 {
        0 => MAX_MSG_SIZE as u32,
        1 => 100,
        2 => 0,
        _ => CONG_MAP_BYTES as u32,
    };
    let stream = Bytes::copy_from_slice(r.d);

    let (frames, err) = parse_chunked(&stream, &sizes, max_len);
    // Re-encoding the frames gives exactly the bytes they were parsed from.
    let mut enc = Vec::new();
    for f in &frames {
        assert_eq!(f.payload.len(), f.hdr.len as usize);
        assert!(f.hdr.len <= max_len);
        enc.extend_from_slice(&f.hdr.to_bytes());
        enc.extend_from_slice(&f.payload);
    }
    assert_eq!(&stream[..enc.len()], &enc[..]);
    let rest = &stream[enc.len()..];
    match err {
        Some(_) => {
            // The next header announced too much.
            let h = HeaderRepr::from_bytes(rest).expect("a whole header caused the error");
            assert!(h.len > max_len);
        }
        None => {
            // What is left is one incomplete message.
            if rest.len() >= HEADER_LEN {
                let h = HeaderRepr::from_bytes(rest).unwrap();
                assert!(rest.len() < HEADER_LEN + h.len as usize);
            }
        }
    }
    // The chunking does not matter.
    let (whole, err2) = parse_chunked(&stream, &[], max_len);
    assert_eq!(whole, frames);
    assert_eq!(err.is_some(), err2.is_some());
    let head = stream.slice(..stream.len().min(600));
    let (bytewise, err3) = parse_chunked(&head, &[1], max_len);
    let (prefix, err4) = parse_chunked(&head, &[], max_len);
    assert_eq!(bytewise, prefix);
    assert_eq!(err3.is_some(), err4.is_some());
}

type Parsed = (
    Vec<rds_core::proto::Frame>,
    Option<rds_core::proto::StreamError>,
);

fn parse_chunked(stream: &Bytes, sizes: &[usize], max_len: u32) -> Parsed {
    let mut p = StreamParser::new(max_len);
    let mut out = Vec::new();
    let mut off = 0;
    let mut i = 0;
    while off < stream.len() {
        let n = if sizes.is_empty() {
            stream.len() - off
        } else {
            sizes[i % sizes.len()].min(stream.len() - off)
        };
        i += 1;
        if let Err(e) = p.feed(stream.slice(off..off + n), &mut out) {
            assert!(
                p.feed(Bytes::from_static(b"x"), &mut out).is_err(),
                "poisoned"
            );
            return (out, Some(e));
        }
        off += n;
        assert_eq!(p.bytes_in(), off as u64);
        assert!(p.hdr_rem() <= HEADER_LEN);
    }
    assert_eq!(p.in_message(), {
        let consumed: usize = out.iter().map(|f| HEADER_LEN + f.payload.len()).sum();
        consumed < stream.len()
    });
    (out, None)
}

// ============================================================================================
// frag

/// Input: a sequence of fragments, each `[op, len: u16, bytes...]`. Bit 0 of `op` fixes up the
/// header checksum, bit 1 reuses the previous header (a matching continuation) with `len`
/// payload bytes, bit 2 makes `h_len` the payload length.
pub fn frag(data: &[u8]) {
    let mut r = Reader::new(data);
    let max_len = if r.bit() { MAX_MSG_SIZE as u32 } else { 10_000 };
    let mut a = FragAssembler::new(max_len);
    let mut pending: Vec<u8> = Vec::new();
    let mut last_hdr = [0u8; HEADER_LEN];
    let mut steps = 0;
    while !r.is_empty() && steps < 2000 {
        steps += 1;
        let op = r.u8();
        let len = usize::from(r.u16()) % (HEADER_LEN + FRAG_SIZE + 16);
        let mut f = if op & 2 != 0 {
            let mut f = last_hdr.to_vec();
            f.extend(r.bytes(len.saturating_sub(HEADER_LEN)));
            f
        } else {
            r.bytes(len)
        };
        if op & 4 != 0 && f.len() >= HEADER_LEN {
            let n = (f.len() - HEADER_LEN) as u32;
            f[16..20].copy_from_slice(&n.to_be_bytes());
        }
        if op & 1 != 0 && f.len() >= HEADER_LEN {
            let mut pkt = HeaderPacket::new_unchecked(&mut f[..HEADER_LEN]);
            pkt.fill_checksum();
        }
        if f.len() >= HEADER_LEN {
            last_hdr.copy_from_slice(&f[..HEADER_LEN]);
        }
        let was_in = a.in_message();
        match a.push(&f) {
            Ok(info) => {
                let h = HeaderRepr::from_bytes(&f).unwrap();
                assert_eq!((info.ack, info.credit), (h.ack, h.credit));
                if info.ack_only {
                    assert!(h.sport == 0 && h.dport == 0 && f.len() == HEADER_LEN);
                    assert!(info.complete.is_none());
                    assert_eq!(a.in_message(), was_in);
                    continue;
                }
                if !was_in {
                    pending.clear();
                }
                pending.extend_from_slice(&f[HEADER_LEN..]);
                assert!(f.len() - HEADER_LEN <= FRAG_SIZE);
                match info.complete {
                    Some(m) => {
                        assert_eq!(m.payload.len(), m.hdr.len as usize);
                        assert!(m.hdr.len <= max_len);
                        assert_eq!(&m.payload[..], &pending[..]);
                        assert!(!a.in_message());
                    }
                    None => assert!(a.in_message()),
                }
            }
            Err(_) => {
                // The engine drops the connection and starts over.
                a.reset();
                assert!(!a.in_message());
            }
        }
    }
}

// ============================================================================================
// engine

const US_SMALL: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const US_LARGE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SOCK_PORTS: [u16; 4] = [4000, 4001, 4002, 4003];

/// The transport as the fuzzer plays it, for one of our paths.
struct Lane {
    /// Parses what arrives from the peer.
    rx: StreamParser,
    /// Parses what we send (checks that our stream is well formed).
    tx: StreamParser,
    sent: u64,
    acked: u64,
}

struct Engine {
    st: Stack,
    now: Instant,
    kind: TransportKind,
    us: IpAddr,
    peer: IpAddr,
    socks: Vec<SockId>,
    lanes: BTreeMap<(ConnId, usize, u32), Lane>,
    tx_seq: BTreeMap<(u32, usize), u64>,
    /// Whether connection attempts succeed (see [`Engine::events`]).
    connect_ok: bool,
    /// Events acted on in the current [`Engine::events`] call.
    n_events: usize,
}

/// Input: a configuration byte (bit 0 IB, bit 1 we have the smaller address, bit 2 ping
/// disabled, bit 3 tight ACK pacing), a seed byte, then operations: the low 4 bits of the
/// operation byte select it (see the `match`), high bits are options.
pub fn engine(data: &[u8]) {
    let mut r = Reader::new(data);
    let cfg = r.u8();
    let kind = if cfg & 1 != 0 {
        TransportKind::Ib
    } else {
        TransportKind::Tcp
    };
    let smaller = cfg & 2 != 0;
    let mut tun = Tunables {
        ping_enable: cfg & 4 == 0,
        ..Tunables::default()
    };
    if cfg & 8 != 0 {
        tun.max_unacked_packets = 2;
        tun.max_unacked_bytes = 5000;
    }
    let (us, peer) = if smaller {
        (US_SMALL, US_LARGE)
    } else {
        (US_LARGE, US_SMALL)
    };
    let mut st = Stack::new(tun, u64::from(r.u8()));
    st.add_local_addr(us, kind == TransportKind::Tcp, kind == TransportKind::Ib);
    let mut e = Engine {
        st,
        now: Instant::ZERO,
        kind,
        us,
        peer,
        socks: Vec::new(),
        lanes: BTreeMap::new(),
        tx_seq: BTreeMap::new(),
        connect_ok: true,
        n_events: 0,
    };
    for (i, &port) in SOCK_PORTS.iter().enumerate() {
        let s = e.st.socket();
        e.st.bind(s, SocketAddr::new(us, port)).unwrap();
        if i == 3 {
            e.st.set_rcvbuf(s, 3000);
        }
        if i == 2 {
            e.st.set_cong_monitor(s, true);
        }
        e.socks.push(s);
    }
    // Bring path 0 up: we connect (TCP from the smaller address, IB either way) or accept.
    if smaller || kind == TransportKind::Ib {
        let _ = e.st.send(
            e.now,
            e.socks[0],
            Some(SocketAddr::new(peer, 5000)),
            Bytes::new(),
            true,
        );
        e.events(true);
    } else {
        e.accept(40000, 0);
    }
    e.check();
    let mut steps = 0;
    while !r.is_empty() && steps < 400 {
        steps += 1;
        let op = r.u8();
        match op % 16 {
            0 => {
                // A well-formed frame from the peer: header bytes as given, h_len = payload.
                let path = usize::from(r.u8()) % kind.max_paths();
                let mut h = HeaderRepr::from_bytes(&r.bytes(HEADER_LEN)).unwrap();
                let n = usize::from(r.u16()) % (CONG_MAP_BYTES + 200);
                let n = if op & 0x80 != 0 { CONG_MAP_BYTES } else { n };
                h.len = n as u32;
                let payload = r.bytes(n);
                let fix = op & 0x40 != 0;
                e.receive(path, |kind| {
                    if kind == TransportKind::Tcp {
                        let mut v = h.to_bytes().to_vec();
                        v.extend_from_slice(&payload);
                        vec![v]
                    } else {
                        ib_fragments(&h, &payload, fix)
                    }
                });
            }
            1 => {
                // Raw bytes: part of a TCP stream, or one IB SEND.
                let path = usize::from(r.u8()) % kind.max_paths();
                let n = usize::from(r.u16()) % (HEADER_LEN + FRAG_SIZE + 64);
                let raw = r.bytes(n);
                e.receive(path, |_| vec![raw]);
            }
            2 => e.drain(),
            3 => {
                let s = e.socks[usize::from(r.u8()) % e.socks.len()];
                let port = match r.u8() % 6 {
                    0 => 0,
                    1 => 1,
                    n => 4998 + u16::from(n),
                };
                let len = usize::from(r.u16()) % 5000;
                let nonblock = r.bit();
                let dest = SocketAddr::new(peer, port);
                let _ =
                    e.st.send(e.now, s, Some(dest), Bytes::from(vec![op; len]), nonblock);
            }
            4 => {
                let s = e.socks[usize::from(r.u8()) % e.socks.len()];
                let max = usize::from(r.u16());
                match e.st.recv(s, max, r.bit()) {
                    Ok(Received::Data {
                        msg,
                        full_len,
                        truncated,
                    }) => {
                        assert!(msg.payload.len() <= max);
                        assert_eq!(truncated, full_len > max);
                    }
                    Ok(Received::CongUpdate(m)) => assert_ne!(m, 0),
                    // No RDMA operations are started here.
                    Ok(Received::RdmaStatus(n)) => panic!("unexpected notification {n:?}"),
                    Err(_) => {}
                }
            }
            5 => {
                // TCP: the peer acknowledges more of a lane's bytes.
                let n = u64::from(r.u32());
                let idx = usize::from(r.u8());
                if let Some((&(c, p, ep), lane)) = e.lanes.iter_mut().nth(idx % 8) {
                    lane.acked = (lane.acked + n).min(lane.sent);
                    let acked = lane.acked;
                    e.st.handle_tx_acked(e.now, c, p, ep, acked);
                }
            }
            6 => {
                e.now += Duration::from_micros(u64::from(r.u16()) * 50);
                driver::handle_due(&mut e.st, e.now);
            }
            7 => {
                let ok = r.bit();
                e.events(ok);
            }
            8 => {
                // The transport connection of a lane goes away.
                let idx = usize::from(r.u8());
                if let Some(&(c, p, ep)) = e.lanes.keys().nth(idx % 8) {
                    e.lanes.remove(&(c, p, ep));
                    e.st.handle_disconnected(e.now, c, p, ep);
                }
            }
            9 => {
                let port = r.u16();
                let waited = u64::from(r.u8());
                e.accept(port, waited);
            }
            10 => {
                let s = r.u8();
                let i = usize::from(s) % e.socks.len();
                match s / 64 {
                    0 => {
                        let port = 4998 + u16::from(r.u8() % 6);
                        let _ = e.st.cancel_sent_to(e.socks[i], SocketAddr::new(peer, port));
                    }
                    1 => {
                        e.st.close(e.socks[i]);
                        let n = e.st.socket();
                        let _ = e.st.bind(n, SocketAddr::new(us, SOCK_PORTS[i]));
                        e.socks[i] = n;
                    }
                    2 => e.st.set_rcvbuf(e.socks[i], usize::from(r.u16()) + 1),
                    _ => e.st.set_sndbuf(e.socks[i], usize::from(r.u16()) + 1),
                }
            }
            _ => {
                // A stale epoch (never a draining one): must be ignored.
                let path = usize::from(r.u8()) % kind.max_paths();
                let conn = e.st.find_conn(us, peer, kind);
                if let Some(c) = conn {
                    let (_, ep) = e.st.path_state(c, path);
                    let before = e.snapshot();
                    let raw = r.bytes(HEADER_LEN);
                    if kind == TransportKind::Tcp {
                        let f = rds_core::proto::Frame {
                            hdr: HeaderRepr::from_bytes(&raw).unwrap(),
                            payload: Bytes::new(),
                            held: 0,
                        };
                        let _ = e.st.handle_frame(e.now, c, path, ep.wrapping_add(7777), f);
                    } else {
                        let _ =
                            e.st.handle_fragment(e.now, c, path, ep.wrapping_add(7777), &raw);
                    }
                    assert_eq!(e.snapshot(), before, "a stale epoch changed the state");
                }
            }
        }
        e.check();
    }
    e.drain();
    e.check();
}

/// Splits a message into IB fragments (header copies), optionally with a valid checksum.
fn ib_fragments(h: &HeaderRepr, payload: &[u8], fix: bool) -> Vec<Vec<u8>> {
    let mut hdr = [0u8; HEADER_LEN];
    if fix {
        h.emit_checksummed(&mut hdr);
    } else {
        h.emit(&mut hdr);
    }
    let mut v = Vec::new();
    let mut off = 0;
    loop {
        let n = (payload.len() - off).min(FRAG_SIZE);
        let mut f = hdr.to_vec();
        f.extend_from_slice(&payload[off..off + n]);
        v.push(f);
        off += n;
        if off >= payload.len() {
            return v;
        }
    }
}

impl Engine {
    fn conn(&self) -> Option<ConnId> {
        self.st.find_conn(self.us, self.peer, self.kind)
    }

    /// What the peer's data may not change: retransmit queue and sockets' own messages.
    fn snapshot(&self) -> (usize, usize, Vec<(usize, usize)>) {
        let retrans = self.st.queued_msgs(true).len();
        let own = self
            .st
            .queued_msgs(false)
            .iter()
            .chain(self.st.queued_msgs(true).iter())
            .filter(|m| SOCK_PORTS.contains(&m.lport))
            .count();
        let socks = self
            .st
            .sock_infos()
            .iter()
            .map(|s| (s.snd_bytes, s.sndbuf))
            .collect();
        (retrans, own, socks)
    }

    fn accept(&mut self, port: u16, waited_ms: u64) {
        let r = self.st.handle_accept(
            self.now,
            self.us,
            self.peer,
            self.kind,
            port,
            Duration::from_millis(waited_ms),
        );
        if let Ok((c, p, ep)) = r {
            self.lanes.retain(|k, _| !(k.0 == c && k.1 == p));
            self.lanes.insert((c, p, ep), new_lane());
        }
        self.events(true);
    }

    /// Runs the engine's events as a transport would; `ok` decides connection attempts.
    fn events(&mut self, ok: bool) {
        self.connect_ok = ok;
        self.n_events = 0;
        driver::pump(self);
    }

    /// One more event in this [`Engine::events`] call; an engine that never runs out fails.
    fn count_event(&mut self) {
        self.n_events += 1;
        assert!(self.n_events < 10_000, "endless events");
    }

    /// Feeds frames (TCP: stream bytes) to a lane; checks that receiving never adds to our
    /// retransmit queue or to the sockets' queued messages.
    fn receive(&mut self, path: usize, make: impl FnOnce(TransportKind) -> Vec<Vec<u8>>) {
        let Some(c) = self.conn() else { return };
        let (_, ep) = self.st.path_state(c, path);
        let frames = make(self.kind);
        let before = self.snapshot();
        let now = self.now;
        if self.kind == TransportKind::Ib {
            for f in frames {
                if self.st.handle_fragment(now, c, path, ep, &f).is_err() {
                    break;
                }
            }
        } else if let Some(lane) = self.lanes.get_mut(&(c, path, ep)) {
            let mut out = Vec::new();
            let mut parsed = Ok(());
            for f in frames {
                parsed = lane.rx.feed(Bytes::from(f), &mut out);
                if parsed.is_err() {
                    break;
                }
            }
            let _ = driver::deliver(&mut self.st, now, c, path, ep, out, parsed);
        }
        let after = self.snapshot();
        assert!(
            after.0 <= before.0,
            "received data grew the retransmit queue"
        );
        assert!(after.1 <= before.1, "received data added socket messages");
        self.events(true);
    }

    /// Takes every frame of every up path and checks its form.
    fn drain(&mut self) {
        let keys: Vec<_> = self.lanes.keys().copied().collect();
        for (c, p, ep) in keys {
            let mut n = 0;
            while let Some(t) = self.st.poll_transmit(self.now, c, p) {
                n += 1;
                assert!(n < 100_000, "endless transmit");
                self.check_transmit(&t);
                if self.kind == TransportKind::Ib {
                    if t.kind == FrameKind::AckOnly {
                        self.st.handle_ack_sent(c, p, ep);
                    }
                    continue;
                }
                let lane = self.lanes.get_mut(&(c, p, ep)).expect("lane");
                let mut bytes = t.hdr.to_vec();
                bytes.extend_from_slice(&t.payload);
                lane.sent += bytes.len() as u64;
                let mut out = Vec::new();
                lane.tx
                    .feed(Bytes::from(bytes), &mut out)
                    .expect("our stream parses");
                assert_eq!(out.len(), 1, "one whole message per TCP transmit");
                assert!(!lane.tx.in_message());
            }
        }
        self.events(true);
    }

    fn check_transmit(&self, t: &Transmit) {
        let h = HeaderRepr::from_bytes(&t.hdr).unwrap();
        assert_eq!(h.padding, [0; 4]);
        match t.kind {
            FrameKind::CongMap => {
                assert_eq!(
                    (h.seq, h.len, h.flags, h.sport, h.dport),
                    (0, 8192, 1, 0, 0)
                );
                assert_eq!(h.ext, ExtSpace::default());
            }
            FrameKind::AckOnly => {
                assert_eq!(self.kind, TransportKind::Ib);
                assert!(h.is_ack_only() && h.seq == 0 && h.flags == 0 && t.payload.is_empty());
                assert!(t.solicited);
            }
            FrameKind::Data => {
                assert_ne!(h.seq, 0);
                assert!(!h.is_cong_map());
                assert_eq!(h.flags & !(flags::ACK_REQUIRED | flags::RETRANSMITTED), 0);
            }
        }
        if self.kind == TransportKind::Ib {
            assert!(t.wire_len() <= HEADER_LEN + FRAG_SIZE);
            assert_eq!(checksum(&t.hdr), 0);
        } else {
            assert_eq!(t.payload.len(), h.len as usize);
            assert_eq!((h.ack, h.csum, h.credit), (0, 0, 0));
            assert_eq!(h.flags & flags::ACK_REQUIRED, 0, "never on the TCP wire");
        }
    }

    /// Invariants after every step.
    fn check(&mut self) {
        let infos = self.st.sock_infos();
        let queued: Vec<_> = self
            .st
            .queued_msgs(false)
            .into_iter()
            .chain(self.st.queued_msgs(true))
            .collect();
        let held = self.st.held_msgs();
        let rxq = self.st.recv_queued_msgs();
        for s in &infos {
            let Some(b) = s.bound else { continue };
            let bytes = |q: &[rds_core::info::QueuedMsgInfo]| -> usize {
                q.iter()
                    .filter(|m| m.lport == b.port())
                    .map(|m| m.len as usize)
                    .sum()
            };
            // Messages kept only for a resend no longer count in their socket's buffer.
            let snd = bytes(&queued) - bytes(&held);
            assert_eq!(s.snd_bytes, snd, "send accounting of port {}", b.port());
            let rcv: usize = rxq
                .iter()
                .filter(|m| m.lport == b.port())
                .map(|m| m.len as usize)
                .sum();
            assert_eq!(s.rcv_bytes, rcv, "receive accounting of port {}", b.port());
            // (The thresholds apply when bytes come and go, not when rcvbuf changes.)
            let map = self.st.local_cong_map(self.us).unwrap();
            assert_eq!(map.test(b.port()), s.congested);
        }
        for c in self.st.conn_infos() {
            assert!(c.npaths <= 8);
            for p in &c.paths {
                let k = (c.id.index(), p.index);
                let prev = self.tx_seq.insert(k, p.next_tx_seq).unwrap_or(1);
                assert!(p.next_tx_seq >= prev, "next_tx_seq went back");
                assert!(p.next_tx_seq >= 1);
            }
        }
    }
}

/// The transport as the fuzzer plays it: connection attempts succeed or fail at once, a
/// drop closes the lane (a draining one ends at once), and frames wait for [`Engine::drain`].
impl Io for Engine {
    fn stack(&mut self) -> &mut Stack {
        &mut self.st
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.count_event();
        if self.connect_ok && !self.st.is_trigger_only(conn) {
            if self.st.handle_connected(self.now, conn, path, epoch) {
                let (_, ep) = self.st.path_state(conn, path);
                self.lanes.retain(|k, _| !(k.0 == conn && k.1 == path));
                self.lanes.insert((conn, path, ep), new_lane());
            }
        } else {
            self.st.handle_connect_failed(self.now, conn, path, epoch);
        }
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        self.count_event();
        self.lanes.remove(&(conn, path, epoch));
        if reason.drains() {
            self.st.handle_disconnected(self.now, conn, path, epoch);
        }
    }

    fn transmit(&mut self, _conn: ConnId, _path: usize) {
        self.count_event();
    }

    fn wake(&mut self, _sock: SockId) {
        self.count_event();
    }

    fn cong_changed(&mut self) {
        self.count_event();
    }

    fn rdma_unuse(&mut self, _sock: SockId, _rkey: u32) {
        self.count_event();
    }
}

fn new_lane() -> Lane {
    Lane {
        rx: StreamParser::new(MAX_MSG_SIZE as u32),
        tx: StreamParser::new(MAX_MSG_SIZE as u32),
        sent: 0,
        acked: 0,
    }
}

// ============================================================================================
// ctl

/// A reader that hands out the input in pieces of the given sizes (cycling), and an
/// `Interrupted` error before every piece when `interrupt` is set.
struct Pieces<'a> {
    d: &'a [u8],
    sizes: &'a [u8],
    i: usize,
    interrupt: bool,
    interrupted: bool,
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.interrupt && !self.interrupted {
            self.interrupted = true;
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        self.interrupted = false;
        let size = match self.sizes {
            [] => usize::MAX,
            s => usize::from(s[self.i % s.len()]) + 1,
        };
        self.i += 1;
        let n = size.min(buf.len()).min(self.d.len());
        buf[..n].copy_from_slice(&self.d[..n]);
        self.d = &self.d[n..];
        Ok(n)
    }
}

/// How a frame stream ended.
#[derive(Debug, PartialEq, Eq)]
enum FrameEnd {
    Closed,
    TooLarge(usize, usize),
    Eof,
}

type FrameParts = (Vec<(Vec<u8>, Vec<u8>)>, FrameEnd);

fn read_frames(r: &mut impl std::io::Read) -> FrameParts {
    use rds_core::ctl::{read_frame, FrameError};
    let mut frames = Vec::new();
    loop {
        match read_frame(r) {
            Ok(f) => frames.push(f),
            Err(FrameError::Closed) => return (frames, FrameEnd::Closed),
            Err(FrameError::TooLarge { json, data }) => {
                return (frames, FrameEnd::TooLarge(json, data))
            }
            Err(FrameError::Io(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
                return (frames, FrameEnd::Eof);
            }
        }
    }
}

/// Input: `[k, k piece-size bytes, stream...]`. The stream is read as control frames, once
/// whole and once in pieces of the given sizes with `EINTR` between them (same result); every
/// frame is written back byte for byte; its JSON part is parsed as a request and as a reply
/// and its data part as a batch of trace records. The stream on its own is parsed as JSON, too.
pub fn ctl(data: &[u8]) {
    use rds_core::ctl::{write_frame, MAX_DATA, MAX_JSON};
    let k = usize::from(data.first().copied().unwrap_or(0) % 8);
    let sizes = data.get(1..1 + k).unwrap_or(&[]);
    let stream = data.get(1 + k..).unwrap_or(&[]);

    let (frames, end) = read_frames(&mut &stream[..]);
    let (again, end2) = read_frames(&mut Pieces {
        d: stream,
        sizes,
        i: 0,
        interrupt: k % 2 == 1,
        interrupted: false,
    });
    assert_eq!(
        frames, again,
        "the result does not depend on how bytes arrive"
    );
    assert_eq!(end, end2);

    let mut enc = Vec::new();
    for (json, body) in &frames {
        assert!(json.len() <= MAX_JSON && body.len() <= MAX_DATA);
        write_frame(&mut enc, json, body).expect("a frame read back is writable");
    }
    assert_eq!(
        &stream[..enc.len()],
        &enc[..],
        "frames re-encode to their bytes"
    );
    let rest = &stream[enc.len()..];
    match end {
        FrameEnd::Closed => assert!(rest.is_empty()),
        FrameEnd::TooLarge(json, body) => {
            assert!(json > MAX_JSON || body > MAX_DATA);
            assert_eq!(
                u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize,
                json
            );
            assert_eq!(
                u32::from_be_bytes(rest[4..8].try_into().unwrap()) as usize,
                body
            );
        }
        FrameEnd::Eof => {
            assert!(!rest.is_empty());
            if rest.len() >= 8 {
                let json = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                let body = u32::from_be_bytes(rest[4..8].try_into().unwrap()) as usize;
                assert!(
                    rest.len() < 8 + json + body,
                    "a whole frame was left unread"
                );
            }
        }
    }
    for (json, body) in &frames {
        ctl_json(json);
        trace_records(body);
    }
    ctl_json(stream);
}

/// A request or reply parsed from JSON survives serialising and parsing again.
fn ctl_json(json: &[u8]) {
    use rds_core::ctl::{Reply, Request};
    if let Ok(req) = serde_json::from_slice::<Request>(json) {
        let text = serde_json::to_vec(&req).expect("a request serialises");
        let back: Request = serde_json::from_slice(&text).expect("its own JSON parses");
        assert_eq!(back, req);
    }
    if let Ok(rep) = serde_json::from_slice::<Reply>(json) {
        let text = serde_json::to_vec(&rep).expect("a reply serialises");
        let back: Reply = serde_json::from_slice(&text).expect("its own JSON parses");
        assert_eq!(back, rep);
    }
}

/// A batch of binary trace records (the data part of a `trace_frames` reply): the borrowing
/// and the copying decoder agree, and every record re-encodes to one that decodes the same.
fn trace_records(batch: &[u8]) {
    use rds_core::trace::{decode_record_refs, decode_records, encode_record};
    let owned: Vec<_> = decode_records(Bytes::copy_from_slice(batch)).collect();
    let refs: Vec<_> = decode_record_refs(batch).collect();
    assert_eq!(owned.len(), refs.len());
    for (i, (o, r)) in owned.iter().zip(&refs).enumerate() {
        match (o, r) {
            (Ok(f), Ok(fr)) => {
                assert_eq!(f.data, fr.bytes().concat());
                assert_eq!(
                    (
                        f.ts_ns,
                        f.dir,
                        f.laddr,
                        f.faddr,
                        f.lane,
                        f.transport,
                        f.orig_len
                    ),
                    (
                        fr.ts_ns(),
                        fr.dir(),
                        fr.laddr(),
                        fr.faddr(),
                        fr.lane(),
                        fr.transport(),
                        fr.orig_len()
                    )
                );
                let mut enc = Vec::new();
                encode_record(&mut enc, f);
                let again: Vec<_> = decode_records(Bytes::from(enc)).collect();
                assert_eq!(again.len(), 1);
                assert_eq!(again[0].as_ref().ok(), Some(f));
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b);
                assert_eq!(i + 1, owned.len(), "an error ends the batch");
            }
            _ => panic!("decoders disagree on record {i}"),
        }
    }
}

// ============================================================================================
// ib_private

/// The private data as both address families: decoding needs the full 32/56 bytes, encoding
/// gives back every field byte (reserved bytes read as zero), and the passive side's version
/// choice is the kernel's `rds_ib_protocol_compatible`.
pub fn ib_private(data: &[u8]) {
    use rds_core::wire::ib_private::{negotiate as ib_negotiate, ConnPriv as IbConnPriv};
    for v6 in [false, true] {
        let (len, off) = if v6 {
            (IbConnPriv::LEN_V6, 32)
        } else {
            (IbConnPriv::LEN_V4, 8)
        };
        let decoded = IbConnPriv::decode(data, v6);
        match decoded {
            None => assert!(data.len() < len),
            Some(p) => {
                assert!(data.len() >= len);
                let enc = p.encode(v6);
                let mut want = data[..len].to_vec();
                want[off + 5..off + 8].fill(0);
                want[off + 20..].fill(0);
                assert_eq!(enc, want, "v6 {v6}");
                assert_eq!(IbConnPriv::decode(&enc, v6), Some(p));
                if v6 {
                    for a in [p.saddr, p.daddr] {
                        if let IpAddr::V6(a) = a {
                            assert!(a.to_ipv4_mapped().is_none(), "{a} is not canonical");
                        }
                    }
                } else {
                    assert!(p.saddr.is_ipv4() && p.daddr.is_ipv4());
                }
            }
        }
        // The kernel: no private data rejects; short data or major 0 is an old peer (4.0);
        // major 4 takes the highest common minor of 4.0 and 4.1; 3.1 is the compat version.
        let want = if data.is_empty() {
            None
        } else {
            match decoded.filter(|p| p.major != 0) {
                None => Some((4, 0)),
                Some(p) if p.major == 4 && p.minor_mask & 2 != 0 => Some((4, 1)),
                Some(p) if p.major == 4 && p.minor_mask & 1 != 0 => Some((4, 0)),
                Some(p) if (p.major, p.minor) == (3, 1) => Some((3, 1)),
                Some(_) => None,
            }
        };
        assert_eq!(ib_negotiate(data, v6), want, "v6 {v6}");
    }
}

// ============================================================================================
// pcap

/// The capture reader on an arbitrary file: it never panics, ends after a fatal error, yields
/// frames no longer than they were on the wire, and counts what it yields.
pub fn pcap(data: &[u8]) {
    use rds_core::trace::{FrameLink, PcapFrames};
    let Ok(mut frames) = PcapFrames::new(data) else {
        return;
    };
    let (mut ok, mut errors, mut fatal) = (0u64, 0u64, false);
    for item in frames.by_ref() {
        assert!(!fatal, "an item after a fatal error");
        match item {
            Ok(f) => {
                ok += 1;
                assert!(f.frame_no >= 1);
                assert!(f.data.len() as u64 <= u64::from(f.orig_len) || f.orig_len == 0);
                assert_eq!(f.header().is_some(), f.data.len() >= HEADER_LEN);
                let _ = f.is_truncated();
                match f.link {
                    FrameLink::Tcp { src, dst } => {
                        assert!(src.port() == RDS_TCP_PORT || dst.port() == RDS_TCP_PORT);
                        assert_eq!(
                            f.lane,
                            (if src.port() == RDS_TCP_PORT { dst } else { src }).port() as u8 % 8
                        );
                        if let Some(rec) = f.to_record() {
                            assert_eq!(rec.orig_len, f.orig_len);
                            assert_eq!(rec.data, f.data);
                        }
                    }
                    FrameLink::Ib { .. } => {
                        assert_eq!(f.lane, 0);
                        assert!(f.to_record().is_none());
                    }
                }
                if let Some(h) = f.header() {
                    let _ = h.to_string();
                }
            }
            Err(e) => {
                let _ = e.to_string();
                if e.is_fatal() {
                    fatal = true;
                } else {
                    errors += 1;
                }
            }
        }
    }
    let st = frames.stats();
    assert_eq!((st.frames, st.errors), (ok, errors));
    assert!(frames.next().is_none(), "the reader stays ended");
}

/// The host daemon's side of a client socket's shared-memory ring, served by a real node's
/// control server, against a hostile client: the input is a client's script of writes to the
/// segment (any header word, raw bytes in the request ring, well-formed records at its own
/// position), doorbell rings, result reads, descriptors made blocking or filled or shut, and
/// control requests, after which the client goes away. Properties: the node never stops
/// answering (a hello within 5 s, after every input), and everything the client made it hold
/// is given back once it has gone (its sockets closed, the node budget back to what it was).
pub fn ring(data: &[u8]) {
    use rds_core::ctl::client::CtlClient;
    use rds_core::ctl::{Reply, Request};
    use rds_core::socket::ring::{
        Rec, F_BATCH, F_PEEK, F_POSTED, OP_CONG, OP_RECV, OP_SEND, OP_SYNC, REC_HDR, REQ_DATA,
        REQ_HEAD_WORD, RES_HEAD_WORD, RES_TAIL_WORD, RING_CAP, RING_FDS, SEG_LEN, WANT_RX, WANT_TX,
        WANT_WORD,
    };
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::fs::FileExt;

    // A write to a connection the node closed must fail (EPIPE), not kill the process:
    // libFuzzer's main does not ignore SIGPIPE as a Rust main does.
    let mut pipe = nix::sys::signal::SigSet::empty();
    pipe.add(nix::sys::signal::Signal::SIGPIPE);
    let _ = pipe.thread_block();
    let (node, path, sink) = ring_node();
    let base = node.mem_used();
    let fds_open = || std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let base_fds = fds_open();
    let mut r = Reader::new(data);
    let Ok(mut c) = CtlClient::connect(path) else {
        panic!("the node does not answer a new control connection");
    };
    let sock = match c.call(&Request::SockOpen, &[]) {
        Ok((Reply::Sock { sock }, _)) => sock,
        other => panic!("SockOpen: {other:?}"),
    };
    let bind = SocketAddr::new(RING_IP, 0);
    assert!(c
        .call(
            &Request::SockBind {
                sock,
                addr: bind,
                transport: None,
            },
            &[]
        )
        .is_ok());
    let (reply, _, fds) = c.call_fds(&Request::SockRing { sock }).expect("SockRing");
    assert_eq!(reply, Reply::SockRing { seg_len: SEG_LEN });
    assert_eq!(fds.len(), RING_FDS);
    let seg = std::fs::File::from(fds[0].try_clone().unwrap());
    let word = |off: usize, v: u64| {
        let _ = seg.write_all_at(&v.to_le_bytes(), off as u64);
    };
    let read_word = |off: usize| -> u64 {
        let mut b = [0u8; 8];
        let _ = seg.read_exact_at(&mut b, off as u64);
        u64::from_le_bytes(b)
    };
    // No SIGPIPE when the client shut its own end (libFuzzer's main does not ignore it).
    let no_sigpipe = nix::sys::socket::MsgFlags::MSG_NOSIGNAL;
    // The daemon's doorbell is a pipe (its writing end, non-blocking unless the script made
    // it blocking: then a full pipe would hold this thread, so ring only while there is room).
    let ring_bell = |fds: &[OwnedFd]| {
        if nix::poll::poll(
            &mut [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&fds[1]),
                nix::poll::PollFlags::POLLOUT,
            )],
            nix::poll::PollTimeout::ZERO,
        )
        .is_ok_and(|n| n > 0)
        {
            let _ = nix::unistd::write(&fds[1], &1u64.to_le_bytes());
        }
    };
    let mut head = 0u64;
    let dest = sink.local_addr().unwrap();
    for _ in 0..64 {
        if r.is_empty() {
            break;
        }
        match r.u8() % 8 {
            0 => {
                // Any word of the header page.
                let off = usize::from(r.u8() % 64) * 64;
                word(off, r.u64());
            }
            1 => {
                // Raw bytes anywhere in the request ring.
                let at = r.u32() as usize % RING_CAP;
                let n = usize::from(r.u8());
                let bytes: Vec<u8> = (0..n).map(|_| r.u8()).collect();
                let _ = seg.write_all_at(&bytes, (REQ_DATA + at) as u64);
            }
            2 => {
                // A well-formed record at the client's own position, published.
                let op = [OP_SEND, OP_RECV, OP_SYNC, OP_CONG][usize::from(r.u8() % 4)];
                let flags = r.u32() & (F_POSTED | F_BATCH | F_PEEK);
                let len = usize::from(r.u16() % 8192);
                let rec = Rec {
                    len: len as u32,
                    op,
                    seq: u64::from(r.u8()),
                    flags,
                    c: u64::from(r.u16()),
                    addr: (r.u8() % 4 != 0).then_some(dest),
                    ..Rec::default()
                };
                let mut buf = rec.encode().to_vec();
                buf.resize(REC_HDR + len, r.u8());
                for (i, b) in buf.iter().enumerate() {
                    let pos = (head as usize + i) % RING_CAP;
                    let _ = seg.write_all_at(&[*b], (REQ_DATA + pos) as u64);
                }
                head += buf.len() as u64;
                word(REQ_HEAD_WORD, head);
            }
            3 => ring_bell(&fds),
            4 => {
                // What a client may do to the descriptors it holds.
                let fd = &fds[1 + usize::from(r.u8() % (RING_FDS as u8 - 1))];
                match r.u8() % 3 {
                    0 => {
                        use nix::fcntl::{fcntl, FcntlArg, OFlag};
                        let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::empty()));
                    }
                    1 => {
                        // Fill it (a socket without waiting; a pipe while it has room).
                        let junk = [0xa5u8; 4096];
                        for _ in 0..64 {
                            let sent = nix::sys::socket::send(
                                fd.as_raw_fd(),
                                &junk,
                                nix::sys::socket::MsgFlags::MSG_DONTWAIT | no_sigpipe,
                            );
                            let room = || {
                                nix::poll::poll(
                                    &mut [nix::poll::PollFd::new(
                                        std::os::fd::AsFd::as_fd(fd),
                                        nix::poll::PollFlags::POLLOUT,
                                    )],
                                    nix::poll::PollTimeout::ZERO,
                                )
                                .is_ok_and(|n| n > 0)
                            };
                            let ok = match sent {
                                Ok(_) => true,
                                Err(nix::errno::Errno::ENOTSOCK) if room() => {
                                    nix::unistd::write(fd, &junk).is_ok()
                                }
                                Err(_) => false,
                            };
                            if !ok {
                                break;
                            }
                        }
                    }
                    _ => {
                        let _ = nix::sys::socket::shutdown(
                            fd.as_raw_fd(),
                            nix::sys::socket::Shutdown::Both,
                        );
                    }
                }
            }
            5 => {
                // Take every result (a consuming client), watch readiness.
                word(RES_TAIL_WORD, read_word(RES_HEAD_WORD));
                word(WANT_WORD, u64::from(r.u8()) & (WANT_RX | WANT_TX));
            }
            6 => {
                let _ = c.call(&Request::SockState { sock }, &[]);
            }
            _ => std::thread::sleep(Duration::from_micros(u64::from(r.u8()) * 10)),
        }
    }
    ring_bell(&fds);
    drop(fds);
    drop(seg);
    drop(c);
    // The node still answers, and gives back what the client made it hold.
    let t0 = std::time::Instant::now();
    let answered = std::thread::scope(|s| {
        let h = s.spawn(|| CtlClient::connect(path).is_ok());
        while !h.is_finished() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the node no longer answers"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        h.join().unwrap()
    });
    assert!(answered, "the node refused a new control connection");
    let mut buf = vec![0u8; MAX_MSG_SIZE];
    loop {
        while sink.recv_from(&mut buf).is_ok() {}
        if node.sockets().len() == 1 && node.mem_used() <= base && fds_open() <= base_fds {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the client's socket, memory or descriptors were not given back: {} sockets, {} bytes \
             in use (was {base}), {} descriptors (was {base_fds})",
            node.sockets().len(),
            node.mem_used(),
            fds_open()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The ring target's address.
const RING_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 174, 0, 1));

/// The node every ring input runs against (started once per process, with the daemon's
/// client-socket service and a control socket in a private runtime directory), its control
/// socket, and a socket the ring's sends go to (never full: it is drained after each input).
fn ring_node() -> &'static (rds_core::node::Node, std::path::PathBuf, rds_core::Socket) {
    use rds_core::node::{CtlMode, Node, NodeConfig};
    static NODE: std::sync::OnceLock<(Node, std::path::PathBuf, rds_core::Socket)> =
        std::sync::OnceLock::new();
    NODE.get_or_init(|| {
        // Under the test's own scratch directory when replayed by `cargo test`.
        let scratch = option_env!("CARGO_TARGET_TMPDIR")
            .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
        let dir = scratch.join(format!("rds-ring-fuzz-{}", std::process::id()));
        std::env::set_var("RDS_RUNTIME_DIR", &dir);
        let mut cfg = NodeConfig::new([RING_IP]);
        cfg.ctl = CtlMode::Named("ringfuzz".into());
        cfg.client_sockets = Some(rds_core::socket::host::service());
        let node = Node::start(cfg).expect("the ring target's node");
        let path = node.ctl_path().expect("its control socket");
        let sink = rds_core::Socket::with_node(&node);
        sink.bind(SocketAddr::new(RING_IP, 5001)).unwrap();
        sink.set_nonblocking(true);
        sink.set_recv_buffer_size(64 << 20);
        // The loopback connection every input's sends use exists from the start (its cost is
        // part of the baseline): one message to itself, taken.
        let me = sink.local_addr().unwrap();
        sink.send_to(b"x", me).unwrap();
        let mut b = [0u8; 8];
        while sink.recv_from(&mut b).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        (node, path, sink)
    })
}
