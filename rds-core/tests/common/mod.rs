//! The engine tests' harness: two [`Stack`]s driven directly (no simulator), so that every
//! frame can be checked byte for byte and every counter exactly.
//!
//! Node A is 10.0.0.1 (the smaller address: it owns the TCP connections), node B is 10.0.0.2.
//! The harness [`Pair`] plays the transport: it accepts connections (client source port ≡ path
//! mod 8, as newer kernels choose), carries frames (TCP through a [`StreamParser`] in odd-sized
//! chunks, IB fragment by fragment), and reports TCP acknowledgements and IB ACK completions.
//! Virtual time only moves when a test says so.
//!
//! Each `engine_*` test crate includes this module and uses a part of it, hence the
//! `dead_code` allowance.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::driver::{self, Frames, Io};
use rds_core::proto::{
    ConnId, DropReason, Event, Frame, FrameKind, InMsg, Received, SendError, SockId, Stack,
    StreamParser, Transmit, TransportKind,
};
use rds_core::stats::Counter;
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{HeaderRepr, FRAG_SIZE, HEADER_LEN, MAX_MSG_SIZE};

pub const ADDR_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const ADDR_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
pub const SEED_A: u64 = 0xa11ce;
pub const SEED_B: u64 = 0xb0b;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}
pub use Side::{A, B};

impl Side {
    pub fn i(self) -> usize {
        self as usize
    }
    pub fn other(self) -> Side {
        match self {
            A => B,
            B => A,
        }
    }
}

/// One transport connection carrying the same path index at both ends.
pub struct Lane {
    pub conn: [ConnId; 2],
    pub epoch: [u32; 2],
    /// `parser[i]` parses the bytes arriving at side `i` (TCP).
    pub parser: [StreamParser; 2],
    /// Bytes written by side `i` on this connection (TCP stream offset).
    pub sent: [u64; 2],
}

/// A frame as it crossed the wire (for assertions after [`Pair::run`]).
#[derive(Debug, Clone)]
pub struct Wired {
    pub from: Side,
    pub path: usize,
    pub hdr: HeaderRepr,
    pub kind: FrameKind,
    pub payload: Bytes,
}

pub struct Pair {
    pub kind: TransportKind,
    pub now: Instant,
    pub st: [Stack; 2],
    pub addr: [IpAddr; 2],
    pub lanes: BTreeMap<usize, Lane>,
    /// TCP: acknowledge every byte as soon as it is delivered.
    pub auto_ack: bool,
    pub next_port: u16,
    /// Every event each stack produced while the harness drove it.
    pub events: [Vec<Event>; 2],
    /// Every frame carried.
    pub wire: Vec<Wired>,
    /// TCP: delivery chunk size (headers and payloads straddle chunks).
    pub chunk: usize,
}

pub fn stack(addr: IpAddr, kind: TransportKind, tun: Tunables, seed: u64) -> Stack {
    let mut s = Stack::new(tun, seed);
    s.add_local_addr(addr, kind == TransportKind::Tcp, kind == TransportKind::Ib);
    s
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A stack of its own (A's address, TCP), for socket API tests that need no peer.
pub fn lone() -> Stack {
    stack(ADDR_A, TransportKind::Tcp, Tunables::default(), 77)
}

/// Shorthand for a socket address.
pub fn sa(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

impl Pair {
    pub fn new(kind: TransportKind, tun_a: Tunables, tun_b: Tunables) -> Self {
        Pair {
            kind,
            now: Instant::ZERO + ms(1),
            st: [
                stack(ADDR_A, kind, tun_a, SEED_A),
                stack(ADDR_B, kind, tun_b, SEED_B),
            ],
            addr: [ADDR_A, ADDR_B],
            lanes: BTreeMap::new(),
            auto_ack: true,
            next_port: 40000,
            events: [Vec::new(), Vec::new()],
            wire: Vec::new(),
            chunk: 1000,
        }
    }

    pub fn tcp() -> Self {
        Self::new(TransportKind::Tcp, Tunables::default(), Tunables::default())
    }

    pub fn ib() -> Self {
        Self::new(TransportKind::Ib, Tunables::default(), Tunables::default())
    }

    pub fn st(&mut self, s: Side) -> &mut Stack {
        &mut self.st[s.i()]
    }

    pub fn dest(&self, to: Side, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr[to.i()], port)
    }

    pub fn conn(&self, s: Side) -> ConnId {
        self.st[s.i()]
            .find_conn(self.addr[s.i()], self.addr[s.other().i()], self.kind)
            .expect("connection exists")
    }

    pub fn epoch(&self, s: Side, path: usize) -> u32 {
        self.lanes[&path].epoch[s.i()]
    }

    pub fn sock(&mut self, s: Side, port: u16) -> SockId {
        let addr = self.addr[s.i()];
        let st = self.st(s);
        let id = st.socket();
        st.bind(id, SocketAddr::new(addr, port)).unwrap();
        id
    }

    pub fn send(
        &mut self,
        s: Side,
        sock: SockId,
        port: u16,
        payload: &[u8],
    ) -> Result<usize, SendError> {
        let (now, dest) = (self.now, self.dest(s.other(), port));
        self.st(s)
            .send(now, sock, Some(dest), Bytes::copy_from_slice(payload), true)
    }

    pub fn recv_all(&mut self, s: Side, sock: SockId) -> Vec<InMsg> {
        let mut v = Vec::new();
        while let Ok(r) = self.st(s).recv(sock, 1 << 21, false) {
            match r {
                Received::Data { msg, .. } => v.push(msg),
                Received::CongUpdate(m) => panic!("unexpected congestion update {m:#x}"),
                Received::RdmaStatus(n) => panic!("unexpected RDMA notification {n:?}"),
            }
        }
        v
    }

    /// Side `s`'s info snapshot of its socket `id`.
    pub fn sock_info(&self, s: Side, id: SockId) -> rds_core::info::SockInfo {
        self.st[s.i()]
            .sock_infos()
            .into_iter()
            .find(|i| i.id == id)
            .expect("the socket is open")
    }

    pub fn path_info(&self, s: Side, path: usize) -> rds_core::proto::PathInfo {
        let c = self.conn(s);
        self.st[s.i()].conn_infos()[c.index() as usize].paths[path].clone()
    }

    /// Drains a stack's events into the log and returns them (unprocessed).
    pub fn take_events(&mut self, s: Side) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.st(s).poll_event() {
            v.push(e);
        }
        self.events[s.i()].extend(v.iter().copied());
        v
    }

    /// Plays the transport for a connection request of `from`.
    pub fn connect(&mut self, from: Side, conn: ConnId, path: usize, epoch: u32) {
        let to = from.other();
        let port = self.next_port + path as u16;
        self.next_port = self.next_port.wrapping_add(8).max(40000);
        let (now, kind) = (self.now, self.kind);
        let (laddr, faddr) = (self.addr[to.i()], self.addr[from.i()]);
        match self.st[to.i()].handle_accept(now, laddr, faddr, kind, port, Duration::ZERO) {
            Ok((c2, p2, e2)) => {
                assert_eq!(p2, path, "acceptor chose lane {p2} for path {path}");
                if !self.st[from.i()].handle_connected(now, conn, path, epoch) {
                    self.st[to.i()].handle_disconnected(now, c2, p2, e2);
                    return;
                }
                let (_, ep) = self.st[from.i()].path_state(conn, path);
                let mut lane = Lane {
                    conn: [conn, conn],
                    epoch: [ep, ep],
                    parser: [
                        StreamParser::new(MAX_MSG_SIZE as u32),
                        StreamParser::new(MAX_MSG_SIZE as u32),
                    ],
                    sent: [0, 0],
                };
                lane.conn[to.i()] = c2;
                lane.epoch[to.i()] = e2;
                self.lanes.insert(path, lane);
            }
            Err(_) => self.st[from.i()].handle_connect_failed(now, conn, path, epoch),
        }
    }

    /// Acts on one of side `s`'s events as the transport (through the engine driver).
    pub fn process(&mut self, s: Side, ev: Event) {
        driver::dispatch(&mut PairIo { p: self, s }, ev);
    }

    /// Plays the transport for a disconnect of `s`: both ends learn at once.
    pub fn disconnect(
        &mut self,
        s: Side,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
    ) {
        let Some(lane) = self.lanes.get(&path) else {
            return;
        };
        if lane.epoch[s.i()] != epoch || lane.conn[s.i()] != conn {
            return;
        }
        let o = s.other();
        let (oc, oe) = (lane.conn[o.i()], lane.epoch[o.i()]);
        self.lanes.remove(&path);
        let now = self.now;
        self.st[o.i()].handle_disconnected(now, oc, path, oe);
        if reason.drains() {
            // Nothing is in flight in this harness: the drain ends at once.
            self.st[s.i()].handle_disconnected(now, conn, path, epoch);
        }
    }

    /// Every frame the side has for the path, in order.
    pub fn tx(&mut self, s: Side, path: usize) -> Vec<Transmit> {
        let now = self.now;
        let conn = self.lanes[&path].conn[s.i()];
        let mut v = Vec::new();
        for t in Frames::new(self.st(s), now, conn, path) {
            v.push(t);
            assert!(v.len() < 100_000, "endless transmit");
        }
        v
    }

    /// Delivers frames sent by the other side to side `s` on `path`.
    pub fn rx(&mut self, s: Side, path: usize, frames: &[Transmit]) -> Result<(), DropReason> {
        let from = s.other();
        let now = self.now;
        for t in frames {
            self.wire.push(Wired {
                from,
                path,
                hdr: HeaderRepr::from_bytes(&t.hdr).unwrap(),
                kind: t.kind,
                payload: t.payload.clone(),
            });
        }
        let lane = self.lanes.get_mut(&path).expect("lane up");
        let (conn, epoch) = (lane.conn[s.i()], lane.epoch[s.i()]);
        let (fconn, fepoch) = (lane.conn[from.i()], lane.epoch[from.i()]);
        if self.kind == TransportKind::Ib {
            for t in frames {
                let mut f = t.hdr.to_vec();
                f.extend_from_slice(&t.payload);
                assert!(f.len() <= HEADER_LEN + FRAG_SIZE, "IB SEND over 4144 bytes");
                let r = self.st[s.i()].handle_fragment(now, conn, path, epoch, &f);
                if t.kind == FrameKind::AckOnly {
                    self.st[from.i()].handle_ack_sent(fconn, path, fepoch);
                }
                r?;
            }
            return Ok(());
        }
        let mut stream = Vec::new();
        for t in frames {
            stream.extend_from_slice(&t.hdr);
            stream.extend_from_slice(&t.payload);
        }
        lane.sent[from.i()] += stream.len() as u64;
        let sent = lane.sent[from.i()];
        let stream = Bytes::from(stream);
        let mut out = Vec::new();
        let mut off = 0;
        while off < stream.len() {
            let n = self.chunk.min(stream.len() - off);
            let lane = self.lanes.get_mut(&path).expect("lane up");
            if let Err(e) = lane.parser[s.i()].feed(stream.slice(off..off + n), &mut out) {
                self.st[s.i()].handle_stream_error(now, conn, path, epoch, e);
                return Err(DropReason::Protocol);
            }
            off += n;
        }
        driver::deliver(&mut self.st[s.i()], now, conn, path, epoch, out, Ok(()))?;
        if self.auto_ack {
            self.st[from.i()].handle_tx_acked(now, fconn, path, fepoch, sent);
        }
        Ok(())
    }

    /// One round: timers due, events, then every lane's frames both ways.
    pub fn step(&mut self) -> bool {
        let mut progress = false;
        for s in [A, B] {
            let now = self.now;
            if driver::handle_due(self.st(s), now) {
                progress = true;
            }
            for ev in self.take_events(s) {
                progress = true;
                self.process(s, ev);
            }
        }
        let paths: Vec<usize> = self.lanes.keys().copied().collect();
        for path in paths {
            for s in [A, B] {
                if !self.lanes.contains_key(&path) {
                    continue;
                }
                let frames = self.tx(s, path);
                if !frames.is_empty() {
                    progress = true;
                    let _ = self.rx(s.other(), path, &frames);
                }
            }
        }
        progress
    }

    /// Runs until nothing moves (time stands still).
    pub fn run(&mut self) {
        for _ in 0..1000 {
            if !self.step() {
                return;
            }
        }
        panic!("the pair did not settle");
    }

    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Both ends learn that the path's transport connection is gone.
    pub fn cut(&mut self, path: usize) {
        let lane = self.lanes.remove(&path).expect("lane up");
        let now = self.now;
        for s in [A, B] {
            self.st[s.i()].handle_disconnected(now, lane.conn[s.i()], path, lane.epoch[s.i()]);
        }
    }

    /// A sends one message from `A:3999` to `B:3999` and everything settles: for TCP the
    /// handshake completes and all 8 lanes are up.
    /// The trigger port hashes to lane 0, so lanes above 0 carry nothing yet.
    pub fn establish(&mut self) {
        let port = port_on_lane(SEED_A, 0, 3900);
        let sa = self.sock(A, port);
        let sb = self.sock(B, port);
        self.send(A, sa, port, b"hello").unwrap();
        self.run();
        assert_eq!(self.recv_all(B, sb).len(), 1);
        if self.kind == TransportKind::Tcp {
            assert_eq!(self.lanes.len(), 8, "all lanes up");
        } else {
            assert_eq!(self.lanes.len(), 1);
        }
    }

    pub fn stat(&self, s: Side, c: Counter) -> u64 {
        self.st[s.i()].stats().get(c)
    }

    /// Frames on the wire from `from` whose source port is `sport`.
    pub fn wired_from(&self, from: Side, sport: u16) -> Vec<&Wired> {
        self.wire
            .iter()
            .filter(|w| w.from == from && w.hdr.sport == sport)
            .collect()
    }
}

/// Side `s` of the pair as the engine driver's transport. Frames wait for [`Pair::step`],
/// which carries every lane's frames both ways.
struct PairIo<'a> {
    p: &'a mut Pair,
    s: Side,
}

impl Io for PairIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        self.p.st(self.s)
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.p.connect(self.s, conn, path, epoch);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        self.p.disconnect(self.s, conn, path, epoch, reason);
    }

    fn transmit(&mut self, _conn: ConnId, _path: usize) {}
}

/// The lane a port hashes to with 8 lanes on a stack built from `seed` (the hash seed follows
/// from the stack seed; binding an explicit port draws no randomness).
pub fn lane_of(seed: u64, port: u16) -> usize {
    let mut st = stack(ADDR_A, TransportKind::Tcp, Tunables::default(), seed);
    let s = st.socket();
    st.bind(s, SocketAddr::new(ADDR_A, port)).unwrap();
    st.send(
        Instant::ZERO,
        s,
        Some(SocketAddr::new(ADDR_B, 1000)),
        Bytes::new(),
        true,
    )
    .unwrap();
    st.queued_msgs(false)[0].path
}

pub fn port_on_lane(seed: u64, lane: usize, from: u16) -> u16 {
    (from..).find(|&p| lane_of(seed, p) == lane).unwrap()
}

pub fn connects(evs: &[Event]) -> Vec<(ConnId, usize, u32)> {
    evs.iter()
        .filter_map(|e| match *e {
            Event::Connect { conn, path, epoch } => Some((conn, path, epoch)),
            _ => None,
        })
        .collect()
}

pub fn disconnects(evs: &[Event]) -> Vec<(usize, DropReason)> {
    evs.iter()
        .filter_map(|e| match *e {
            Event::Disconnect { path, reason, .. } => Some((path, reason)),
            _ => None,
        })
        .collect()
}

/// 48 header bytes built by hand from the layout table (spec §1).
#[allow(clippy::too_many_arguments)]
pub fn hdr_bytes(
    seq: u64,
    ack: u64,
    len: u32,
    sport: u16,
    dport: u16,
    fl: u8,
    ext: &[u8],
) -> [u8; 48] {
    let mut h = [0u8; 48];
    h[0..8].copy_from_slice(&seq.to_be_bytes());
    h[8..16].copy_from_slice(&ack.to_be_bytes());
    h[16..20].copy_from_slice(&len.to_be_bytes());
    h[20..22].copy_from_slice(&sport.to_be_bytes());
    h[22..24].copy_from_slice(&dport.to_be_bytes());
    h[24] = fl;
    h[32..32 + ext.len()].copy_from_slice(ext);
    h
}

/// The probe extensions a newer kernel sends: NPATHS=8, GEN_NUM, SPORT_IDX=0.
pub fn probe_ext(gen: u32) -> [u8; 10] {
    let g = gen.to_be_bytes();
    [5, 0, 8, 6, g[0], g[1], g[2], g[3], 8, 0]
}

pub fn frame(hdr: HeaderRepr, payload: &[u8]) -> Frame {
    Frame {
        hdr,
        payload: Bytes::copy_from_slice(payload),
        held: payload.len(),
    }
}

/// An IB fragment: header with a checksum, then the payload bytes.
pub fn ib_frag(hdr: &HeaderRepr, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; HEADER_LEN];
    hdr.emit_checksummed(&mut v);
    v.extend_from_slice(payload);
    v
}

pub fn with_flags(mut h: HeaderRepr, f: u8) -> HeaderRepr {
    h.flags = f;
    h
}
