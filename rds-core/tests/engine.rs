//! Engine behaviour tests: two [`Stack`]s driven directly (no simulator), so that every frame
//! can be checked byte for byte and every counter exactly.
//!
//! Node A is 10.0.0.1 (the smaller address: it owns the TCP connections), node B is 10.0.0.2.
//! The harness [`Pair`] plays the transport: it accepts connections (client source port ≡ path
//! mod 8, as newer kernels choose), carries frames (TCP through a [`StreamParser`] in odd-sized
//! chunks, IB fragment by fragment), and reports TCP acknowledgements and IB ACK completions.
//! Virtual time only moves when a test says so.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::driver::{self, Frames, Io};
use rds_core::proto::{
    AcceptError, BindError, ConnId, DropReason, Event, Frame, FrameKind, InMsg, PathState,
    Received, RecvError, SendError, SendExtras, SockId, Stack, StreamParser, Transmit,
    TransportKind,
};
use rds_core::rdma::{LocalVec, RdmaArgs, RdmaBuffer, RdmaNotify, RdmaOp, RdmaStatus};
use rds_core::stats::Counter;
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{checksum, flags, ExtHeader, HeaderRepr, FRAG_SIZE, HEADER_LEN, MAX_MSG_SIZE};
use std::sync::Arc;

const ADDR_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const ADDR_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SEED_A: u64 = 0xa11ce;
const SEED_B: u64 = 0xb0b;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}
use Side::{A, B};

impl Side {
    fn i(self) -> usize {
        self as usize
    }
    fn other(self) -> Side {
        match self {
            A => B,
            B => A,
        }
    }
}

/// One transport connection carrying the same path index at both ends.
struct Lane {
    conn: [ConnId; 2],
    epoch: [u32; 2],
    /// `parser[i]` parses the bytes arriving at side `i` (TCP).
    parser: [StreamParser; 2],
    /// Bytes written by side `i` on this connection (TCP stream offset).
    sent: [u64; 2],
}

/// A frame as it crossed the wire (for assertions after [`Pair::run`]).
#[derive(Debug, Clone)]
struct Wired {
    from: Side,
    path: usize,
    hdr: HeaderRepr,
    kind: FrameKind,
    payload: Bytes,
}

struct Pair {
    kind: TransportKind,
    now: Instant,
    st: [Stack; 2],
    addr: [IpAddr; 2],
    lanes: BTreeMap<usize, Lane>,
    /// TCP: acknowledge every byte as soon as it is delivered.
    auto_ack: bool,
    next_port: u16,
    /// Every event each stack produced while the harness drove it.
    events: [Vec<Event>; 2],
    /// Every frame carried.
    wire: Vec<Wired>,
    /// TCP: delivery chunk size (headers and payloads straddle chunks).
    chunk: usize,
}

fn stack(addr: IpAddr, kind: TransportKind, tun: Tunables, seed: u64) -> Stack {
    let mut s = Stack::new(tun, seed);
    s.add_local_addr(addr, kind == TransportKind::Tcp, kind == TransportKind::Ib);
    s
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Pair {
    fn new(kind: TransportKind, tun_a: Tunables, tun_b: Tunables) -> Self {
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

    fn tcp() -> Self {
        Self::new(TransportKind::Tcp, Tunables::default(), Tunables::default())
    }

    fn ib() -> Self {
        Self::new(TransportKind::Ib, Tunables::default(), Tunables::default())
    }

    fn st(&mut self, s: Side) -> &mut Stack {
        &mut self.st[s.i()]
    }

    fn dest(&self, to: Side, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr[to.i()], port)
    }

    fn conn(&self, s: Side) -> ConnId {
        self.st[s.i()]
            .find_conn(self.addr[s.i()], self.addr[s.other().i()], self.kind)
            .expect("connection exists")
    }

    fn epoch(&self, s: Side, path: usize) -> u32 {
        self.lanes[&path].epoch[s.i()]
    }

    fn sock(&mut self, s: Side, port: u16) -> SockId {
        let addr = self.addr[s.i()];
        let st = self.st(s);
        let id = st.socket();
        st.bind(id, SocketAddr::new(addr, port)).unwrap();
        id
    }

    fn send(
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

    fn recv_all(&mut self, s: Side, sock: SockId) -> Vec<InMsg> {
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

    fn path_info(&self, s: Side, path: usize) -> rds_core::proto::PathInfo {
        let c = self.conn(s);
        self.st[s.i()].conn_infos()[c.index() as usize].paths[path].clone()
    }

    /// Drains a stack's events into the log and returns them (unprocessed).
    fn take_events(&mut self, s: Side) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.st(s).poll_event() {
            v.push(e);
        }
        self.events[s.i()].extend(v.iter().copied());
        v
    }

    /// Plays the transport for a connection request of `from`.
    fn connect(&mut self, from: Side, conn: ConnId, path: usize, epoch: u32) {
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
    fn process(&mut self, s: Side, ev: Event) {
        driver::dispatch(&mut PairIo { p: self, s }, ev);
    }

    /// Plays the transport for a disconnect of `s`: both ends learn at once.
    fn disconnect(&mut self, s: Side, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
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
    fn tx(&mut self, s: Side, path: usize) -> Vec<Transmit> {
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
    fn rx(&mut self, s: Side, path: usize, frames: &[Transmit]) -> Result<(), DropReason> {
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
    fn step(&mut self) -> bool {
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
    fn run(&mut self) {
        for _ in 0..1000 {
            if !self.step() {
                return;
            }
        }
        panic!("the pair did not settle");
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Both ends learn that the path's transport connection is gone.
    fn cut(&mut self, path: usize) {
        let lane = self.lanes.remove(&path).expect("lane up");
        let now = self.now;
        for s in [A, B] {
            self.st[s.i()].handle_disconnected(now, lane.conn[s.i()], path, lane.epoch[s.i()]);
        }
    }

    /// A sends one message from `A:3999` to `B:3999` and everything settles: for TCP the
    /// handshake completes and all 8 lanes are up.
    /// The trigger port hashes to lane 0, so lanes above 0 carry nothing yet.
    fn establish(&mut self) {
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

    fn stat(&self, s: Side, c: Counter) -> u64 {
        self.st[s.i()].stats().get(c)
    }

    /// Frames on the wire from `from` whose source port is `sport`.
    fn wired_from(&self, from: Side, sport: u16) -> Vec<&Wired> {
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
fn lane_of(seed: u64, port: u16) -> usize {
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

fn port_on_lane(seed: u64, lane: usize, from: u16) -> u16 {
    (from..).find(|&p| lane_of(seed, p) == lane).unwrap()
}

fn connects(evs: &[Event]) -> Vec<(ConnId, usize, u32)> {
    evs.iter()
        .filter_map(|e| match *e {
            Event::Connect { conn, path, epoch } => Some((conn, path, epoch)),
            _ => None,
        })
        .collect()
}

fn disconnects(evs: &[Event]) -> Vec<(usize, DropReason)> {
    evs.iter()
        .filter_map(|e| match *e {
            Event::Disconnect { path, reason, .. } => Some((path, reason)),
            _ => None,
        })
        .collect()
}

/// 48 header bytes built by hand from the layout table (spec §1).
#[allow(clippy::too_many_arguments)]
fn hdr_bytes(seq: u64, ack: u64, len: u32, sport: u16, dport: u16, fl: u8, ext: &[u8]) -> [u8; 48] {
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
fn probe_ext(gen: u32) -> [u8; 10] {
    let g = gen.to_be_bytes();
    [5, 0, 8, 6, g[0], g[1], g[2], g[3], 8, 0]
}

fn frame(hdr: HeaderRepr, payload: &[u8]) -> Frame {
    Frame {
        hdr,
        payload: Bytes::copy_from_slice(payload),
    }
}

/// An IB fragment: header with a checksum, then the payload bytes.
fn ib_frag(hdr: &HeaderRepr, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; HEADER_LEN];
    hdr.emit_checksummed(&mut v);
    v.extend_from_slice(payload);
    v
}

fn with_flags(mut h: HeaderRepr, f: u8) -> HeaderRepr {
    h.flags = f;
    h
}

// ============================================================================================
// TCP: the first frames of a connection and the multipath handshake

#[test]
fn tcp_first_frames_are_cong_map_then_probe_then_data() {
    let mut p = Pair::tcp();
    // Congest A:5003 through loopback first, so that A's map has a bit set.
    let r = p.sock(A, 5003);
    p.st(A).set_rcvbuf(r, 100);
    let l = p.sock(A, 4001);
    let now = p.now;
    p.st(A)
        .send(
            now,
            l,
            Some(SocketAddr::new(ADDR_A, 5003)),
            Bytes::from(vec![7; 200]),
            true,
        )
        .unwrap();
    assert!(p.st(A).local_cong_map(ADDR_A).unwrap().test(5003));

    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let rb = p.sock(B, 6000);
    let payload: Vec<u8> = (0..64u8).collect();
    assert_eq!(p.send(A, s, 6000, &payload), Ok(64));
    let evs = p.take_events(A);
    let c = connects(&evs);
    assert_eq!(c.len(), 1, "{evs:?}");
    let (conn, path, epoch) = c[0];
    assert_eq!(path, 0, "the first connection is path 0");
    p.connect(A, conn, 0, epoch);
    assert_eq!(p.path_info(A, 0).state, PathState::Up);
    assert_eq!(p.path_info(B, 0).state, PathState::Up);

    let fa = p.tx(A, 0);
    assert_eq!(fa.len(), 3, "{fa:?}");
    // 1. The congestion map: seq 0, len 8192, flags exactly CONG_BITMAP, ports 0, no
    //    extensions, no checksum on TCP.
    assert_eq!(fa[0].hdr, hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]));
    assert_eq!(fa[0].kind, FrameKind::CongMap);
    let mut map = vec![0u8; 8192];
    map[5003 / 8] = 1 << (5003 % 8); // byte 625 = 0x08
    assert_eq!(map[625], 0x08);
    assert_eq!(&fa[0].payload[..], &map[..]);
    // 2. The probe ping: seq 1, sport 1, dport 0, len 0, NPATHS=8 GEN_NUM SPORT_IDX.
    let gen_a = p.st(A).gen_num();
    assert_eq!(fa[1].hdr, hdr_bytes(1, 0, 0, 1, 0, 0, &probe_ext(gen_a)));
    assert!(fa[1].payload.is_empty());
    // 3. The data: seq 2, no flags on TCP (ACK_REQUIRED never goes on the TCP wire).
    assert_eq!(fa[2].hdr, hdr_bytes(2, 0, 64, port, 6000, 0, &[]));
    assert_eq!(&fa[2].payload[..], &payload[..]);
    assert!(fa.iter().all(|t| !t.solicited));

    // The accepting (larger) side also probes while it does not know the number of lanes.
    let fb = p.tx(B, 0);
    assert_eq!(fb.len(), 2, "{fb:?}");
    assert_eq!(fb[0].hdr, hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]));
    assert!(fb[0].payload.iter().all(|&b| b == 0));
    let gen_b = p.st(B).gen_num();
    assert_ne!(gen_a, gen_b);
    assert_eq!(fb[1].hdr, hdr_bytes(1, 0, 0, 1, 0, 0, &probe_ext(gen_b)));

    // B takes A's frames: map, probe (answered with a probe pong), data.
    p.rx(B, 0, &fa).unwrap();
    assert_eq!(p.stat(B, Counter::CongUpdateReceived), 1);
    assert_eq!(p.stat(B, Counter::RecvPing), 1);
    assert_eq!(
        p.stat(B, Counter::SendPong),
        2,
        "its own probe and the pong"
    );
    let cb = p.conn(B);
    assert_eq!(p.st(B).npaths(cb), 8);
    assert_eq!(p.st(B).peer_gen(cb), gen_a);
    assert!(p.st(B).dest_congested(rb, SocketAddr::new(ADDR_A, 5003)));
    assert!(!p.st(B).dest_congested(rb, SocketAddr::new(ADDR_A, 5002)));
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].from, SocketAddr::new(ADDR_A, port));
    assert_eq!(got[0].seq, 2);
    assert_eq!(&got[0].payload[..], &payload[..]);
    let fb2 = p.tx(B, 0);
    assert_eq!(fb2.len(), 1);
    // The probe pong: sport 0, dport 1, the next sequence number, the same extensions.
    assert_eq!(fb2[0].hdr, hdr_bytes(2, 0, 0, 0, 1, 0, &probe_ext(gen_b)));
    assert!(connects(&p.take_events(B)).is_empty(), "B never connects");

    // A takes B's frames: its probe ping is answered, the pong to A's probe starts the
    // other lanes (A has the smaller address).
    let mut all_b = fb;
    all_b.extend(fb2);
    p.rx(A, 0, &all_b).unwrap();
    let ca = p.conn(A);
    assert_eq!(p.st(A).npaths(ca), 8);
    assert_eq!(p.st(A).peer_gen(ca), gen_b);
    let evs = p.take_events(A);
    let lanes: Vec<usize> = connects(&evs).iter().map(|c| c.1).collect();
    assert_eq!(lanes, [1, 2, 3, 4, 5, 6, 7]);
    let fa2 = p.tx(A, 0);
    assert_eq!(fa2.len(), 1);
    assert_eq!(fa2[0].hdr, hdr_bytes(3, 0, 0, 0, 1, 0, &probe_ext(gen_a)));
}

#[test]
fn tcp_lanes_come_up_with_their_own_sequence_space() {
    let mut p = Pair::tcp();
    p.establish();
    for path in 0..8 {
        assert_eq!(p.path_info(A, path).state, PathState::Up, "A lane {path}");
        assert_eq!(p.path_info(B, path).state, PathState::Up, "B lane {path}");
    }
    assert!(
        connects(&p.events[B.i()]).is_empty(),
        "the larger address never initiates"
    );
    // One socket per lane; each lane numbers its messages from 1 (lanes > 0 carry nothing
    // before them; lane 0 carried the probes and the first message).
    let rb = p.sock(B, 6000);
    let mut socks = Vec::new();
    for lane in 1..8 {
        let port = port_on_lane(SEED_A, lane, 5000);
        socks.push((lane, port, p.sock(A, port)));
    }
    for round in 0..3u8 {
        for &(_, _, s) in &socks {
            p.send(A, s, 6000, &[round]).unwrap();
        }
    }
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 21);
    for &(lane, port, _) in &socks {
        let seqs: Vec<u64> = got
            .iter()
            .filter(|m| m.from.port() == port)
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3], "lane {lane}");
        let on_wire: Vec<usize> = p.wired_from(A, port).iter().map(|w| w.path).collect();
        assert_eq!(on_wire, [lane; 3]);
        assert_eq!(p.path_info(A, lane).next_tx_seq, 4);
        assert_eq!(p.path_info(B, lane).next_rx_seq, 4);
    }
}

// ============================================================================================
// Ping / pong

#[test]
fn ping_to_port_0_is_answered_on_the_same_path() {
    let mut p = Pair::tcp();
    p.establish();
    let lane = 3;
    let (cb, eb) = (p.conn(B), p.epoch(B, lane));
    let next_tx = p.path_info(B, lane).next_tx_seq;
    let (pings, pongs) = (p.stat(B, Counter::RecvPing), p.stat(B, Counter::SendPong));
    let now = p.now;
    p.st(B)
        .handle_frame(
            now,
            cb,
            lane,
            eb,
            frame(HeaderRepr::data(40, 5000, 0, 0), &[]),
        )
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvPing), pings + 1);
    assert_eq!(p.stat(B, Counter::SendPong), pongs + 1);
    let out = p.tx(B, lane);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr, hdr_bytes(next_tx, 0, 0, 0, 5000, 0, &[]));
    assert!(out[0].payload.is_empty());
    for other in (0..8).filter(|&l| l != lane) {
        assert!(p.tx(B, other).is_empty(), "lane {other}");
    }
    // A ping with a payload is answered too (rds-ping may send data).
    p.st(B)
        .handle_frame(
            now,
            cb,
            lane,
            eb,
            frame(HeaderRepr::data(41, 5001, 0, 3), b"abc"),
        )
        .unwrap();
    let out = p.tx(B, lane);
    assert_eq!(out[0].hdr, hdr_bytes(next_tx + 1, 0, 0, 0, 5001, 0, &[]));
}

#[test]
fn ping_from_port_0_is_ignored() {
    let mut p = Pair::tcp();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let pings = p.stat(B, Counter::RecvPing);
    let nosock = p.stat(B, Counter::RecvDropNoSock);
    let now = p.now;
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(HeaderRepr::data(90, 0, 0, 0), &[]))
        .unwrap();
    assert!(p.tx(B, 0).is_empty(), "no pong to a pong");
    assert_eq!(p.stat(B, Counter::RecvPing), pings);
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), nosock);
    // It still counts as received for sequencing.
    assert_eq!(p.path_info(B, 0).next_rx_seq, 91);
}

#[test]
fn ping_disabled_drops_as_no_socket_but_probe_pong_still_counts() {
    let tun = Tunables {
        ping_enable: false,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Tcp, Tunables::default(), tun);
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, _, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, 0, epoch);
    let _ = p.tx(B, 0); // B's map and probe
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(HeaderRepr::data(1, 5000, 0, 0), &[]))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 1);
    assert_eq!(p.stat(B, Counter::RecvPing), 0);
    // A probe ping is a ping too: not answered.
    let mut probe = HeaderRepr::data(2, 1, 0, 0);
    probe.push_ext(ExtHeader::Npaths(8)).unwrap();
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(probe, &[]))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 2);
    assert!(p.tx(B, 0).is_empty());
    assert_eq!(p.st(B).npaths(cb), 0);
    // A probe pong is processed whatever ping_enable says.
    let mut pong = HeaderRepr::data(3, 0, 1, 0);
    pong.push_ext(ExtHeader::Npaths(4)).unwrap();
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(pong, &[]))
        .unwrap();
    assert_eq!(p.st(B).npaths(cb), 4);
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 2);
}

// ============================================================================================
// Sequence numbers, retransmission, duplicates

#[test]
fn tcp_resend_after_reset_is_retransmitted_and_dropped_as_old() {
    let mut p = Pair::tcp();
    p.establish();
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let rb = p.sock(B, 6000);
    let n0 = p.path_info(A, 0).next_tx_seq;
    for i in 0..3u8 {
        p.send(A, s, 6000, &[i; 10]).unwrap();
    }
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(
        got.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [n0, n0 + 1, n0 + 2]
    );
    let ours = |p: &Pair, retrans: bool| -> Vec<u64> {
        p.st[0]
            .queued_msgs(retrans)
            .iter()
            .filter(|m| m.lport == port)
            .map(|m| m.seq)
            .collect()
    };
    assert_eq!(ours(&p, true), [n0, n0 + 1, n0 + 2], "unacknowledged");
    let rx_before = p.path_info(B, 0).next_rx_seq;
    assert_eq!(rx_before, n0 + 3);
    let resets = p.stat(A, Counter::ConnReset);

    p.cut(0);
    assert_eq!(p.stat(A, Counter::ConnReset), resets + 1);
    assert_eq!(ours(&p, true), Vec::<u64>::new());
    assert_eq!(
        ours(&p, false),
        [n0, n0 + 1, n0 + 2],
        "requeued, same numbers"
    );
    assert_eq!(
        p.path_info(B, 0).next_rx_seq,
        rx_before,
        "kept across the reset"
    );
    p.wire.clear();
    p.run();
    let resent = p.wired_from(A, port);
    assert_eq!(resent.len(), 3);
    for (i, w) in resent.iter().enumerate() {
        assert_eq!(w.hdr.seq, n0 + i as u64);
        assert_eq!(
            w.hdr.flags,
            flags::RETRANSMITTED,
            "exactly RETRANSMITTED on TCP"
        );
    }
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 3);
    assert!(p.recv_all(B, rb).is_empty(), "duplicates not delivered");
    // The new probe came behind the retransmissions with a fresh number.
    let probe = p
        .wire
        .iter()
        .find(|w| w.from == A && w.hdr.is_probe_ping())
        .unwrap();
    assert_eq!(probe.hdr.seq, n0 + 3);
    assert_eq!(probe.hdr.flags, 0);
    // Fresh messages carry no flag and are delivered.
    p.send(A, s, 6000, b"new").unwrap();
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].seq, n0 + 4);
    assert_eq!(p.wired_from(A, port).last().unwrap().hdr.flags, 0);
}

#[test]
fn ib_resend_after_reset_is_retransmitted_and_ack_required() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    for i in 0..3u8 {
        p.send(A, s, 6000, &[i; 10]).unwrap();
    }
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3);
    let seqs: Vec<u64> = out
        .iter()
        .map(|t| HeaderRepr::from_bytes(&t.hdr).unwrap().seq)
        .collect();
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.recv_all(B, rb).len(), 3);
    let _ = p.tx(B, 0); // B's acknowledgement is lost with the connection
    p.cut(0);
    p.wire.clear();
    p.run();
    let resent = p.wired_from(A, 4000);
    assert_eq!(resent.len(), 3);
    for (w, seq) in resent.iter().zip(&seqs) {
        assert_eq!(w.hdr.seq, *seq);
        assert_eq!(w.hdr.flags, flags::RETRANSMITTED | flags::ACK_REQUIRED);
    }
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 3);
    assert!(p.recv_all(B, rb).is_empty());
}

#[test]
fn duplicate_rule_is_the_kernels() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 2));
    let now = p.now;
    let deliver = |p: &mut Pair, seq: u64, fl: u8| {
        let h = with_flags(HeaderRepr::data(seq, 7000, 6000, 1), fl);
        p.st(B)
            .handle_frame(now, cb, 2, eb, frame(h, &[seq as u8]))
            .unwrap();
    };
    deliver(&mut p, 10, 0);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 11);
    // Older, retransmitted: dropped.
    deliver(&mut p, 10, flags::RETRANSMITTED);
    deliver(&mut p, 3, flags::RETRANSMITTED);
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 2);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 11);
    // Older, not retransmitted: accepted, and next_rx_seq moves back (kernel rule).
    deliver(&mut p, 5, 0);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 6);
    // Retransmitted but not older: accepted.
    deliver(&mut p, 6, flags::RETRANSMITTED);
    deliver(&mut p, 9, flags::RETRANSMITTED);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 10);
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 2);
    let seqs: Vec<u64> = p.recv_all(B, rb).iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [10, 5, 6, 9]);
    // Other lanes are independent.
    assert_eq!(p.path_info(B, 3).next_rx_seq, 0);
}

#[test]
fn highest_sequence_number_does_not_overflow() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 1));
    let now = p.now;
    let h = HeaderRepr::data(u64::MAX, 7000, 6000, 0);
    p.st(B).handle_frame(now, cb, 1, eb, frame(h, &[])).unwrap();
    assert_eq!(p.recv_all(B, rb)[0].seq, u64::MAX);
    // The kernel's u64 arithmetic wraps.
    assert_eq!(p.path_info(B, 1).next_rx_seq, 0);
}

// ============================================================================================
// TCP: transport-acknowledged release

#[test]
fn tcp_messages_leave_the_retransmit_queue_when_their_last_byte_is_acked() {
    let mut p = Pair::tcp();
    p.establish();
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let _rb = p.sock(B, 6000);
    let s0 = p.lanes[&0].sent[A.i()];
    p.send(A, s, 6000, &[1; 100]).unwrap();
    p.send(A, s, 6000, &[2; 200]).unwrap();
    let snd = |p: &Pair| {
        p.st[0]
            .sock_infos()
            .iter()
            .find(|i| i.id == s)
            .unwrap()
            .snd_bytes
    };
    assert_eq!(snd(&p), 300);
    let out = p.tx(A, 0);
    assert_eq!(
        out.iter().map(Transmit::wire_len).collect::<Vec<_>>(),
        [148, 248]
    );
    p.rx(B, 0, &out).unwrap();
    let ours = |p: &Pair| -> Vec<u32> {
        p.st[0]
            .queued_msgs(true)
            .iter()
            .filter(|m| m.lport == port)
            .map(|m| m.len)
            .collect()
    };
    assert_eq!(ours(&p), [100, 200]);
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let acked0 = p.stat(A, Counter::SendDropAcked);
    let now = p.now;
    let ack = |p: &mut Pair, upto: u64| p.st(A).handle_tx_acked(now, ca, 0, ea, upto);
    ack(&mut p, s0 + 147);
    assert_eq!(ours(&p), [100, 200], "one byte short");
    assert_eq!(snd(&p), 300);
    ack(&mut p, s0 + 148);
    assert_eq!(ours(&p), [200]);
    assert_eq!(snd(&p), 200);
    ack(&mut p, s0 + 148 + 247);
    assert_eq!(ours(&p), [200]);
    ack(&mut p, s0 + 148 + 248);
    assert!(ours(&p).is_empty());
    assert_eq!(snd(&p), 0);
    assert_eq!(p.stat(A, Counter::SendDropAcked), acked0 + 2);
    // A stale epoch or a backwards ack changes nothing.
    p.send(A, s, 6000, &[3; 10]).unwrap();
    let out = p.tx(A, 0);
    p.rx(B, 0, &out).unwrap();
    ack(&mut p, s0 + 100);
    p.st(A)
        .handle_tx_acked(now, ca, 0, ea.wrapping_add(1), s0 + 10_000);
    assert_eq!(ours(&p), [10]);
}

// ============================================================================================
// IB: ACK_REQUIRED pacing, piggybacked and ACK-only acknowledgements, fragmentation

/// Sends `n` messages of `len` bytes from A before the path is up, brings it up and returns
/// the data frames' flags in order.
fn ib_flags_of_first_messages(tun: Tunables, n: usize, len: usize) -> Vec<u8> {
    let mut p = Pair::new(TransportKind::Ib, tun.clone(), tun);
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 64 << 20);
    for _ in 0..n {
        p.send(A, s, 6000, &vec![0; len]).unwrap();
    }
    let (conn, path, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, path, epoch);
    let out = p.tx(A, 0);
    assert_eq!(out[0].kind, FrameKind::CongMap);
    assert_eq!(out[1].kind, FrameKind::CongMap);
    let data: Vec<u8> = out[2..].iter().map(|t| t.hdr[24]).collect();
    assert_eq!(data.len(), n);
    assert_eq!(
        p.stat(A, Counter::SendAckRequired),
        data.iter().filter(|&&f| f != 0).count() as u64
    );
    data
}

fn pattern(n: usize, every: usize, first: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            if i >= first && (i - first) % every == 0 {
                flags::ACK_REQUIRED
            } else {
                0
            }
        })
        .collect()
}

#[test]
fn ib_ack_required_every_ninth_with_defaults() {
    let f = ib_flags_of_first_messages(Tunables::default(), 30, 64);
    // The first message on a fresh path, then every 9th (8 unacked packets in between).
    assert_eq!(f, pattern(30, 9, 0));
    assert_eq!(
        f.iter()
            .enumerate()
            .filter(|(_, &x)| x != 0)
            .map(|(i, _)| i)
            .collect::<Vec<_>>(),
        [0, 9, 18, 27]
    );
}

#[test]
fn ib_ack_required_follows_the_tunables() {
    let tun = Tunables {
        max_unacked_packets: 3,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 20, 64), pattern(20, 4, 0));
    // Bytes: 1000 allowed, 300 per message: 1000 -> 700 -> 400 -> 100, then a request.
    let tun = Tunables {
        max_unacked_packets: 1000,
        max_unacked_bytes: 1000,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 20, 300), pattern(20, 4, 0));
    // A message larger than the byte budget requests an ACK every time.
    let tun = Tunables {
        max_unacked_bytes: 100,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 5, 101), pattern(5, 1, 0));
}

#[test]
fn ib_ack_required_counters_start_full_after_a_reset() {
    let mut p = Pair::ib();
    p.establish();
    assert!(p.st(A).queued_msgs(true).is_empty(), "all acknowledged");
    p.cut(0);
    p.run();
    assert_eq!(p.path_info(A, 0).state, PathState::Up);
    let s = p.sock(A, 4000);
    for _ in 0..20 {
        p.send(A, s, 6000, &[0; 64]).unwrap();
    }
    let out = p.tx(A, 0);
    let f: Vec<u8> = out.iter().map(|t| t.hdr[24]).collect();
    assert_eq!(f, pattern(20, 9, 8));
}

#[test]
fn ib_ack_required_when_send_buffer_half_full() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 1000);
    p.send(A, s, 6000, &[0; 100]).unwrap(); // 100 < 500
    p.send(A, s, 6000, &[0; 400]).unwrap(); // 500 >= 500 at queue time
    let out = p.tx(A, 0);
    assert_eq!(out[0].hdr[24], 0);
    assert_eq!(out[1].hdr[24], flags::ACK_REQUIRED);
}

#[test]
fn ib_ack_only_frames_and_piggybacking() {
    let mut p = Pair::ib();
    p.establish();
    let _rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let req = p.stat(B, Counter::RecvAckRequired);
    let ar = |seq| with_flags(HeaderRepr::data(seq, 7000, 6000, 5), flags::ACK_REQUIRED);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(100), b"hello"))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvAckRequired), req + 1);
    assert!(p
        .take_events(B)
        .contains(&Event::Transmit { conn: cb, path: 0 }));
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1);
    // seq 0, h_ack 100, len 0, ports 0, flags 0; checksum by hand: !0x0064 = 0xff9b.
    let mut want = hdr_bytes(0, 100, 0, 0, 0, 0, &[]);
    want[30..32].copy_from_slice(&[0xff, 0x9b]);
    assert_eq!(out[0].hdr, want);
    assert_eq!(checksum(&out[0].hdr), 0);
    assert_eq!(out[0].kind, FrameKind::AckOnly);
    assert!(out[0].solicited);
    assert!(out[0].payload.is_empty());

    // Only one ACK in flight.
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(101), b"hello"))
        .unwrap();
    assert!(p.tx(B, 0).is_empty());
    p.st(B).handle_ack_sent(cb, 0, eb);
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1);
    let mut want = hdr_bytes(0, 101, 0, 0, 0, 0, &[]);
    want[30..32].copy_from_slice(&[0xff, 0x9a]);
    assert_eq!(out[0].hdr, want);
    // A stale completion does not release the ACK slot.
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(102), b"hello"))
        .unwrap();
    p.st(B).handle_ack_sent(cb, 0, eb.wrapping_add(7));
    assert!(p.tx(B, 0).is_empty());

    // A data message piggybacks the ack and satisfies the request.
    let sb = p.sock(B, 6001);
    p.send(B, sb, 7000, b"reply").unwrap();
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1, "{out:?}");
    let h = HeaderRepr::from_bytes(&out[0].hdr).unwrap();
    assert_eq!((h.ack, h.sport, h.dport, h.len), (102, 6001, 7000, 5));
    assert_eq!(checksum(&out[0].hdr), 0);
    assert_eq!(out[0].kind, FrameKind::Data);
    assert!(out[0].solicited);
    p.st(B).handle_ack_sent(cb, 0, eb);
    assert!(p.tx(B, 0).is_empty(), "nothing left to acknowledge");
    // Without ACK_REQUIRED no ACK-only frame is sent, but the next data carries the ack.
    let plain = HeaderRepr::data(103, 7000, 6000, 5);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&plain, b"hello"))
        .unwrap();
    assert!(p.tx(B, 0).is_empty());
    p.send(B, sb, 7000, b"again").unwrap();
    let out = p.tx(B, 0);
    assert_eq!(HeaderRepr::from_bytes(&out[0].hdr).unwrap().ack, 103);
}

#[test]
fn ib_h_ack_releases_messages_up_to_it() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    for len in [10, 20, 30] {
        p.send(A, s, 6000, &vec![0; len]).unwrap();
    }
    let out = p.tx(A, 0);
    let seqs: Vec<u64> = out
        .iter()
        .map(|t| HeaderRepr::from_bytes(&t.hdr).unwrap().seq)
        .collect();
    assert_eq!(seqs.len(), 3);
    let snd = |p: &Pair| {
        p.st[0]
            .sock_infos()
            .iter()
            .find(|i| i.id == s)
            .unwrap()
            .snd_bytes
    };
    assert_eq!(snd(&p), 60);
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let now = p.now;
    let ack = ib_frag(&HeaderRepr::ack_only(seqs[1]), &[]);
    p.st(A).handle_fragment(now, ca, 0, ea, &ack).unwrap();
    let left: Vec<u64> = p.st(A).queued_msgs(true).iter().map(|m| m.seq).collect();
    assert_eq!(left, [seqs[2]]);
    assert_eq!(snd(&p), 30);
    // An older ack changes nothing; an ack on a data frame counts as well.
    let old = ib_frag(&HeaderRepr::ack_only(seqs[0]), &[]);
    p.st(A).handle_fragment(now, ca, 0, ea, &old).unwrap();
    assert_eq!(p.st(A).queued_msgs(true).len(), 1);
    let mut h = HeaderRepr::data(77, 6000, 4000, 1);
    h.ack = seqs[2];
    p.st(A)
        .handle_fragment(now, ca, 0, ea, &ib_frag(&h, &[9]))
        .unwrap();
    assert!(p.st(A).queued_msgs(true).is_empty());
    assert_eq!(snd(&p), 0);
}

#[test]
fn ib_fragmentation_of_sizes() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 4 << 20);
    let rb = p.sock(B, 6000);
    p.st(B).set_rcvbuf(rb, 8 << 20);
    for (len, nfrags) in [
        (0usize, 1usize),
        (1, 1),
        (4096, 1),
        (4097, 2),
        (MAX_MSG_SIZE, 256),
    ] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        p.send(A, s, 6000, &payload).unwrap();
        let out = p.tx(A, 0);
        assert_eq!(out.len(), nfrags, "{len} bytes");
        let h0 = out[0].hdr;
        let h = HeaderRepr::from_bytes(&h0).unwrap();
        assert_eq!((h.len as usize, h.sport, h.dport), (len, 4000, 6000));
        assert_ne!(h.csum, 0);
        assert_eq!(checksum(&h0), 0, "valid header checksum");
        let mut joined = Vec::new();
        for (i, t) in out.iter().enumerate() {
            let last = i + 1 == nfrags;
            assert_eq!(t.hdr, h0, "identical header copy on fragment {i}");
            assert_eq!(t.solicited, last, "solicited only on the last fragment");
            assert_eq!(t.kind, FrameKind::Data);
            let want = if last {
                len - FRAG_SIZE * (nfrags - 1)
            } else {
                FRAG_SIZE
            };
            assert_eq!(t.payload.len(), want);
            joined.extend_from_slice(&t.payload);
        }
        assert_eq!(joined, payload);
        p.rx(B, 0, &out).unwrap();
        let got = p.recv_all(B, rb);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload.len(), len);
        assert!(got[0].payload[..] == payload[..]);
        let _ = p.tx(B, 0);
    }
}

#[test]
fn ib_cong_map_is_two_fragments() {
    let mut p = Pair::ib();
    let r = p.sock(A, 700);
    p.st(A).set_rcvbuf(r, 10);
    let l = p.sock(A, 701);
    let now = p.now;
    p.st(A)
        .send(
            now,
            l,
            Some(SocketAddr::new(ADDR_A, 700)),
            Bytes::from_static(&[0; 11]),
            true,
        )
        .unwrap();
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, path, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, path, epoch);
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3);
    let mut want = hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]);
    // Checksum by hand: words 0x2000 (len) + 0x0100 (flags) = 0x2100 -> 0xdeff.
    want[30..32].copy_from_slice(&[0xde, 0xff]);
    for (i, t) in out[..2].iter().enumerate() {
        assert_eq!(t.hdr, want);
        assert_eq!(t.kind, FrameKind::CongMap);
        assert_eq!(t.payload.len(), 4096);
        assert_eq!(t.solicited, i == 1);
    }
    // Port 700 = byte 87, bit 4, in the first fragment.
    assert_eq!(out[0].payload[87], 0x10);
    assert_eq!(out[0].payload.iter().filter(|&&b| b != 0).count(), 1);
    assert!(out[1].payload.iter().all(|&b| b == 0));
    assert_eq!(out[2].kind, FrameKind::Data);
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.stat(B, Counter::CongUpdateReceived), 1);
    let sb = p.sock(B, 6000);
    assert!(p.st(B).dest_congested(sb, SocketAddr::new(ADDR_A, 700)));
}

#[test]
fn ib_fragment_header_mismatch_drops_the_path() {
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let h = HeaderRepr::data(200, 7000, 6000, 5000);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&h, &[1; 4096]))
        .unwrap();
    let _ = p.take_events(B);
    let bad0 = p.stat(B, Counter::ConnDropBadFrame);
    let mut other = h;
    other.seq = 201;
    let r = p
        .st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&other, &[1; 904]));
    assert_eq!(r, Err(DropReason::Protocol));
    assert_eq!(p.stat(B, Counter::ConnDropBadFrame), bad0 + 1);
    assert_eq!(disconnects(&p.take_events(B)), [(0, DropReason::Protocol)]);
    assert_ne!(p.st(B).path_state(cb, 0).0, PathState::Up);
    // Later frames of the old epoch are ignored.
    assert_eq!(p.st(B).handle_fragment(now, cb, 0, eb, &[0; 3]), Ok(()));
    // So is a wrong fragment length (a continuation must carry 4096 bytes or the rest).
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let r = p
        .st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&h, &[1; 4000]));
    assert_eq!(r, Err(DropReason::Protocol));
    assert_eq!(p.stat(B, Counter::ConnDropBadFrame), 1);
}

#[test]
fn ib_bad_checksum_drops_the_path() {
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let _ = p.take_events(B);
    let mut f = ib_frag(&HeaderRepr::data(300, 7000, 6000, 2), b"ok");
    f[21] ^= 0x01; // sport 7000 -> 7001, checksum no longer valid
    let r = p.st(B).handle_fragment(now, cb, 0, eb, &f);
    assert_eq!(r, Err(DropReason::BadChecksum));
    assert_eq!(p.stat(B, Counter::RecvDropBadChecksum), 1);
    assert_eq!(
        disconnects(&p.take_events(B)),
        [(0, DropReason::BadChecksum)]
    );
    // The connection comes back and works.
    p.lanes.clear();
    p.run();
    let rb = p.sock(B, 6000);
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"after").unwrap();
    p.run();
    assert_eq!(p.recv_all(B, rb).len(), 1);
    // A zero checksum means "none" and is accepted.
    let (cb, eb, now) = (p.conn(B), p.epoch(B, 0), p.now);
    let mut plain = vec![0u8; 48];
    HeaderRepr::data(999, 7000, 6000, 1).emit(&mut plain);
    plain.push(5);
    assert_eq!(p.st(B).handle_fragment(now, cb, 0, eb, &plain), Ok(()));
    assert_eq!(p.recv_all(B, rb).len(), 1);
}

// ============================================================================================
// Generation numbers and lanes

#[test]
fn peer_restart_resets_rx_seq_and_flushes_the_retransmit_queue() {
    let mut p = Pair::tcp();
    p.establish();
    let gen_b = p.st(B).gen_num();
    let ca = p.conn(A);
    assert_eq!(p.st(A).peer_gen(ca), gen_b);
    // B sends a few messages so that A's next_rx_seq on lane 0 is well above 2.
    let port_b = port_on_lane(SEED_B, 0, 4100);
    let sb = p.sock(B, port_b);
    let ra = p.sock(A, 6000);
    for _ in 0..5 {
        p.send(B, sb, 6000, b"b").unwrap();
    }
    // ... and on lane 3, so that a lane above 0 has a nonzero next_rx_seq too.
    let port_b3 = port_on_lane(SEED_B, 3, 4200);
    let sb3 = p.sock(B, port_b3);
    for _ in 0..4 {
        p.send(B, sb3, 6000, b"3").unwrap();
    }
    p.run();
    assert_eq!(p.recv_all(A, ra).len(), 9);
    let rx_before = p.path_info(A, 0).next_rx_seq;
    assert!(rx_before > 5, "{rx_before}");
    assert_eq!(p.path_info(A, 3).next_rx_seq, 5);
    // A sends 3 messages that B receives but never acknowledges.
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let _rb = p.sock(B, 6000);
    for _ in 0..3 {
        p.send(A, s, 6000, &[1; 50]).unwrap();
    }
    p.run();
    assert_eq!(
        p.st(A)
            .queued_msgs(true)
            .iter()
            .filter(|m| m.lport == port)
            .count(),
        3
    );

    // B restarts: a new stack, a new generation number. Every connection dies.
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    let now = p.now;
    for path in paths {
        let lane = p.lanes.remove(&path).unwrap();
        p.st[0].handle_disconnected(now, lane.conn[0], path, lane.epoch[0]);
    }
    p.st[1] = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), SEED_B + 1);
    let gen_b2 = p.st(B).gen_num();
    assert_ne!(gen_b, gen_b2);
    let rb2 = p.sock(B, 6000);
    // One more message while lane 0 is down: never transmitted, so not flushed.
    p.send(A, s, 6000, b"unsent").unwrap();
    p.advance(ms(1));
    let now = p.now;
    p.st(A).handle_timeout(now);
    let c = connects(&p.take_events(A));
    assert_eq!(
        c.iter().map(|c| c.1).collect::<Vec<_>>(),
        [0],
        "only lane 0 reconnects"
    );
    p.connect(A, c[0].0, 0, c[0].2);
    // B's first frames (map, probe with its new generation) reach A before A sends.
    let fb = p.tx(B, 0);
    assert_eq!(fb.len(), 2);
    let flushed0 = p.stat(A, Counter::SendDropPeerRestart);
    p.rx(A, 0, &fb).unwrap();
    assert_eq!(p.st(A).peer_gen(ca), gen_b2);
    assert_eq!(p.stat(A, Counter::SendDropPeerRestart) - flushed0, 3);
    assert_eq!(
        p.path_info(A, 0).next_rx_seq,
        2,
        "restarted at 0, then B's probe (seq 1)"
    );
    for lane in 1..8 {
        assert_eq!(p.path_info(A, lane).next_rx_seq, 0, "lane {lane}");
    }
    let left: Vec<u32> = p
        .st(A)
        .queued_msgs(false)
        .iter()
        .chain(p.st(A).queued_msgs(true).iter())
        .filter(|m| m.lport == port)
        .map(|m| m.len)
        .collect();
    assert_eq!(left, [6]);
    p.auto_ack = true;
    p.run();
    let got = p.recv_all(B, rb2);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], b"unsent");
    assert_eq!(p.lanes.len(), 8, "the lanes fan out again");
}

#[test]
fn npaths_is_the_smaller_of_8_and_the_peers() {
    for (announced, want) in [
        (Some(4u16), 4usize),
        (Some(1), 1),
        (Some(8), 8),
        (Some(64), 8),
        (None, 1),
    ] {
        let mut p = Pair::tcp();
        let s = p.sock(A, 4000);
        p.send(A, s, 6000, b"x").unwrap();
        let (conn, _, epoch) = connects(&p.take_events(A))[0];
        p.connect(A, conn, 0, epoch);
        let _ = p.tx(B, 0);
        let (cb, eb) = (p.conn(B), p.epoch(B, 0));
        let mut probe = HeaderRepr::data(1, 1, 0, 0);
        if let Some(n) = announced {
            probe.push_ext(ExtHeader::Npaths(n)).unwrap();
        }
        let now = p.now;
        p.st(B)
            .handle_frame(now, cb, 0, eb, frame(probe, &[]))
            .unwrap();
        assert_eq!(p.st(B).npaths(cb), want, "peer announced {announced:?}");
        // Our pong always announces 8.
        let out = p.tx(B, 0);
        assert_eq!(out.len(), 1);
        let h = HeaderRepr::from_bytes(&out[0].hdr).unwrap();
        assert!(h.is_probe_pong());
        assert_eq!(h.exts().next(), Some(ExtHeader::Npaths(8)));
    }
}

#[test]
fn lane_hash_spreads_ports_and_follows_npaths() {
    let mut per_lane = [0u32; 8];
    for port in 2000..2256u16 {
        let l = lane_of(SEED_A, port);
        assert_eq!(l, lane_of(SEED_A, port), "stable");
        per_lane[l] += 1;
    }
    assert!(
        per_lane.iter().all(|&n| (16..=48).contains(&n)),
        "{per_lane:?}"
    );
    // A different hash seed gives a different spread (the seed is per node).
    let moved = (2000..2256u16)
        .filter(|&p| lane_of(SEED_A, p) != lane_of(SEED_B, p))
        .count();
    assert!(moved > 128, "{moved}");

    // With a peer of 4 lanes a socket uses hash & 3: the same lane modulo 4.
    let mut p = Pair::tcp();
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, _, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, 0, epoch);
    let fa = p.tx(A, 0);
    p.rx(B, 0, &fa).unwrap();
    let _ = p.tx(B, 0);
    // A hears from a 4-lane peer.
    let ca = p.conn(A);
    let ea = p.epoch(A, 0);
    let mut pong = HeaderRepr::data(1, 0, 1, 0);
    pong.push_ext(ExtHeader::Npaths(4)).unwrap();
    let now = p.now;
    p.st(A)
        .handle_frame(now, ca, 0, ea, frame(pong, &[]))
        .unwrap();
    assert_eq!(p.st(A).npaths(ca), 4);
    let before: Vec<_> = p.st(A).queued_msgs(false);
    let mut socks = Vec::new();
    for port in 5000..5032u16 {
        let id = p.sock(A, port);
        p.send(A, id, 6000, b"y").unwrap();
        socks.push(port);
    }
    let q = p.st(A).queued_msgs(false);
    let q: Vec<_> = q.iter().filter(|m| !before.contains(m)).collect();
    for port in socks {
        let m = q.iter().find(|m| m.lport == port).unwrap();
        assert_eq!(m.path, lane_of(SEED_A, port) & 3, "port {port}");
    }
}

#[test]
fn accepted_lane_is_client_port_mod_8_once_sport_idx_is_known() {
    let mut p = Pair::tcp();
    p.establish();
    let cb = p.conn(B);
    let now = p.now;
    p.cut(5);
    let r = p.st(B).handle_accept(
        now,
        ADDR_B,
        ADDR_A,
        TransportKind::Tcp,
        40013,
        Duration::ZERO,
    );
    assert_eq!(r.map(|(c, path, _)| (c, path)), Ok((cb, 5)));
    // A connection to a lane that is up replaces the old one.
    let _ = p.take_events(B);
    let r = p.st(B).handle_accept(
        now,
        ADDR_B,
        ADDR_A,
        TransportKind::Tcp,
        50002,
        Duration::ZERO,
    );
    assert_eq!(r.map(|(_, path, _)| path), Ok(2));
    assert_eq!(disconnects(&p.take_events(B)), [(2, DropReason::Replaced)]);

    // Before the handshake only a lane-0 port is taken at once; another waits, and after a
    // while is taken as path 0 (older kernels use random source ports).
    let mut q = Pair::tcp();
    let a = |port, waited| {
        let mut st = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), 5);
        st.handle_accept(
            Instant::ZERO,
            ADDR_B,
            ADDR_A,
            TransportKind::Tcp,
            port,
            waited,
        )
        .map(|(_, path, _)| path)
    };
    assert_eq!(a(40008, Duration::ZERO), Ok(0));
    assert_eq!(a(40011, Duration::ZERO), Err(AcceptError::Wait));
    assert_eq!(a(40011, ms(49)), Err(AcceptError::Wait));
    assert_eq!(a(40011, ms(50)), Ok(0));
    // The smaller address refuses and connects back itself.
    let now = q.now;
    let r = q.st(A).handle_accept(
        now,
        ADDR_A,
        ADDR_B,
        TransportKind::Tcp,
        40000,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::ConnectBack));
    assert_eq!(
        connects(&q.take_events(A))
            .iter()
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        [0]
    );
    // Connections from our own address are not RDS/TCP's business.
    let r = q.st(A).handle_accept(
        now,
        ADDR_A,
        ADDR_A,
        TransportKind::Tcp,
        40000,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::Local));
}

#[test]
fn larger_address_never_initiates_lanes_above_0() {
    let mut p = Pair::tcp();
    p.establish();
    let ra = p.sock(A, 6000);
    p.auto_ack = true;
    for lane in 1..8 {
        p.cut(lane);
    }
    // B has messages for every lane while lanes 1..7 are down.
    let mut ports = Vec::new();
    for lane in 1..8 {
        let port = port_on_lane(SEED_B, lane, 7000);
        let s = p.sock(B, port);
        p.send(B, s, 6000, &[lane as u8]).unwrap();
        ports.push(port);
    }
    let evs = p.take_events(B);
    assert!(connects(&evs).is_empty(), "{evs:?}");
    for e in evs {
        p.process(B, e);
    }
    p.advance(ms(1));
    p.run();
    for _ in 0..20 {
        if p.lanes.len() == 8 {
            break;
        }
        p.advance(ms(50));
        p.run();
    }
    assert_eq!(p.lanes.len(), 8);
    assert!(
        connects(&p.events[B.i()]).iter().all(|c| c.1 == 0),
        "B connects at most lane 0"
    );
    assert!(connects(&p.events[A.i()]).iter().any(|c| c.1 > 0));
    let got = p.recv_all(A, ra);
    assert_eq!(got.len(), 7);
    for (lane, port) in (1..8).zip(ports) {
        let w = p.wired_from(B, port);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].path, lane);
    }
}

// ============================================================================================
// Reconnect backoff

/// Fails `n` connection attempts of A's path 0 in a row (the first one from `evs`); returns
/// the delay before each retry and the events holding the next attempt.
fn backoff_delays(p: &mut Pair, mut evs: Vec<Event>, n: usize) -> (Vec<Duration>, Vec<Event>) {
    let mut v = Vec::new();
    for _ in 0..n {
        let (conn, path, epoch) = *connects(&evs).first().expect("a connect attempt");
        assert_eq!(path, 0);
        let now = p.now;
        p.st(A).handle_connect_failed(now, conn, path, epoch);
        let at = p.st(A).poll_timeout().expect("a reconnect is scheduled");
        v.push(at - now);
        p.now = at;
        p.st(A).handle_timeout(at);
        evs = p.take_events(A);
    }
    (v, evs)
}

#[test]
fn reconnect_backoff_doubles_with_jitter_and_resets_after_success() {
    for (min, max) in [(1u64, 1000u64), (10, 50)] {
        let tun = Tunables {
            reconnect_min_delay: ms(min),
            reconnect_max_delay: ms(max),
            ..Tunables::default()
        };
        for kind in [TransportKind::Tcp, TransportKind::Ib] {
            let mut p = Pair::new(kind, tun.clone(), tun.clone());
            let s = p.sock(A, 4000);
            p.send(A, s, 6000, b"x").unwrap();
            let evs = p.take_events(A);
            let (d, evs) = backoff_delays(&mut p, evs, 30);
            assert_eq!(d[0], Duration::ZERO, "the first retry is immediate");
            let mut bound = ms(min);
            for (i, &w) in d.iter().enumerate().skip(1) {
                assert!(w < bound, "retry {i}: {w:?} not below {bound:?}");
                bound = (bound * 2).min(ms(max));
            }
            assert_eq!(bound, ms(max));
            // Jittered, and reaching into the large bounds.
            let late = &d[20..];
            assert!(late.iter().any(|&w| w > ms(max) / 4), "{late:?}");
            assert!(late.windows(2).any(|w| w[0] != w[1]));
            // Success resets it: the next failure retries at once, then below min again.
            let (conn, _, epoch) = connects(&evs)[0];
            p.connect(A, conn, 0, epoch);
            assert_eq!(p.path_info(A, 0).state, PathState::Up);
            p.cut(0);
            let at = p.st(A).poll_timeout().unwrap();
            assert_eq!(at, p.now);
            p.st(A).handle_timeout(at);
            let evs = p.take_events(A);
            let (d, _) = backoff_delays(&mut p, evs, 2);
            assert!(d[0] < ms(min), "{d:?}");
            assert!(d[1] < ms(min) * 2, "{d:?}");
        }
    }
}

// ============================================================================================
// Congestion

#[test]
fn congestion_marks_port_above_rcvbuf_and_clears_below_half() {
    let mut p = Pair::tcp();
    p.establish();
    // A second peer of B: 9.9.9.9 (smaller than B) connected to it.
    let c_addr = IpAddr::V4(Ipv4Addr::new(9, 9, 9, 9));
    let now = p.now;
    let (cc, _, _) = p
        .st(B)
        .handle_accept(
            now,
            ADDR_B,
            c_addr,
            TransportKind::Tcp,
            40000,
            Duration::ZERO,
        )
        .unwrap();
    while p.st(B).poll_transmit(now, cc, 0).is_some() {}
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 1000);
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let dest = p.dest(B, 6005);
    p.send(A, s, 6005, &[1; 502]).unwrap();
    p.send(A, s, 6005, &[2; 498]).unwrap();
    p.run();
    // Exactly 1000 bytes queued: not above rcvbuf.
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    assert!(!p.st(A).dest_congested(s, dest));
    p.wire.clear();
    p.send(A, s, 6005, &[3; 1]).unwrap();
    let now = p.now;
    p.st(A)
        .send(now, s, Some(dest), Bytes::from_static(&[4]), true)
        .unwrap();
    let _ = p.take_events(B);
    p.run();
    assert!(p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    assert_eq!(
        p.st(B)
            .sock_infos()
            .iter()
            .find(|i| i.id == rb)
            .unwrap()
            .rcv_bytes,
        1002
    );
    // One map update to A, with port 6005 = byte 750 bit 5.
    let maps: Vec<_> = p
        .wire
        .iter()
        .filter(|w| w.kind == FrameKind::CongMap)
        .collect();
    assert_eq!(maps.len(), 1, "coalesced into one update");
    assert_eq!(maps[0].from, B);
    assert_eq!(maps[0].payload[750], 0x20);
    assert_eq!(maps[0].payload.iter().filter(|&&b| b != 0).count(), 1);
    assert!(p.st(A).dest_congested(s, dest));
    // ... and one to the other peer of the address.
    assert!(p.events[B.i()].contains(&Event::Transmit { conn: cc, path: 0 }));
    let now = p.now;
    let t = p.st(B).poll_transmit(now, cc, 0).unwrap();
    assert_eq!(t.kind, FrameKind::CongMap);
    assert_eq!(t.payload[750], 0x20);
    assert!(p.st(B).poll_transmit(now, cc, 0).is_none());

    // Reading down to exactly 500 bytes (not below rcvbuf/2) keeps it; below clears it.
    let r = p.st(B).recv(rb, 2000, false).unwrap();
    assert!(matches!(r, Received::Data { full_len: 502, .. }));
    p.wire.clear();
    p.run();
    assert_eq!(
        p.st(B)
            .sock_infos()
            .iter()
            .find(|i| i.id == rb)
            .unwrap()
            .rcv_bytes,
        500
    );
    assert!(
        p.st(B).local_cong_map(ADDR_B).unwrap().test(6005),
        "500 bytes left"
    );
    assert!(p.wire.is_empty());
    let _ = p.st(B).recv(rb, 2000, false).unwrap(); // 498 -> 2 left
    p.run();
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    let maps: Vec<_> = p
        .wire
        .iter()
        .filter(|w| w.kind == FrameKind::CongMap)
        .collect();
    assert_eq!(maps.len(), 1);
    assert!(maps[0].payload.iter().all(|&b| b == 0));
    assert!(!p.st(A).dest_congested(s, dest));
    let t = p.st(B).poll_transmit(now, cc, 0).unwrap();
    assert!(t.kind == FrameKind::CongMap && t.payload.iter().all(|&b| b == 0));
}

#[test]
fn congested_destination_fails_sends_and_notifies_monitors() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 100);
    let s = p.sock(A, 4000);
    let mon_idle = p.sock(A, 4001);
    p.st(A).set_cong_monitor(mon_idle, true);
    p.send(A, s, 6005, &[0; 101]).unwrap();
    p.run();
    let dest = p.dest(B, 6005);
    assert!(p.st(A).dest_congested(s, dest));
    let now = p.now;
    assert_eq!(p.send(A, s, 6005, b"x"), Err(SendError::Congested));
    assert_eq!(p.stat(A, Counter::CongSendError), 1);
    let blocking = |p: &mut Pair, retry| {
        p.st[0].send_ext(now, s, Some(dest), Bytes::from_static(b"x"), false, retry)
    };
    assert_eq!(blocking(&mut p, false), Err(SendError::CongestedWait));
    assert_eq!(p.stat(A, Counter::CongSendBlocked), 1);
    assert_eq!(blocking(&mut p, true), Err(SendError::CongestedWait));
    assert_eq!(
        p.stat(A, Counter::CongSendBlocked),
        1,
        "a retry is not counted again"
    );
    // Other ports of B are not congested.
    assert_eq!(p.send(A, s, 6006, b"x"), Ok(1));
    // Monitoring: a non-blocking failure records the port's bit.
    p.st(A).set_cong_monitor(s, true);
    assert_eq!(p.send(A, s, 6005, b"x"), Err(SendError::Congested));
    assert_eq!(p.stat(A, Counter::CongSendError), 2);
    assert_eq!(p.st(A).recv(s, 100, false), Err(RecvError::WouldBlock));
    assert!(!p.st(A).readable(s));
    // B reads; the update reaches A; the monitor gets the uncongested bit once.
    let _ = p.recv_all(B, rb);
    let _ = p.take_events(A);
    p.run();
    assert!(!p.st(A).dest_congested(s, dest));
    assert!(p.events[A.i()].contains(&Event::Wake(s)));
    assert!(p.events[A.i()].contains(&Event::CongChanged));
    assert!(p.st(A).readable(s));
    assert_eq!(
        p.st(A).recv(s, 100, false),
        Ok(Received::CongUpdate(1 << (6005 % 64)))
    );
    assert_eq!(1u64 << (6005 % 64), 1 << 53);
    assert_eq!(p.st(A).recv(s, 100, false), Err(RecvError::WouldBlock));
    assert_eq!(
        p.st(A).recv(mon_idle, 100, false),
        Err(RecvError::WouldBlock)
    );
    assert_eq!(p.send(A, s, 6005, b"x"), Ok(1));
}

#[test]
fn pong_is_not_sent_to_a_congested_pinger() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 10);
    let s = p.sock(A, 4000);
    p.send(A, s, 6005, &[0; 11]).unwrap();
    p.run();
    // B's port 6005 is congested in A's copy of B's map; B pings A from that port.
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let pongs = p.stat(A, Counter::SendPong);
    let now = p.now;
    p.st(A)
        .handle_frame(
            now,
            ca,
            0,
            ea,
            frame(HeaderRepr::data(500, 6005, 0, 0), &[]),
        )
        .unwrap();
    assert_eq!(p.stat(A, Counter::RecvPing), 2, "B's probe and this ping");
    assert_eq!(p.stat(A, Counter::SendPong), pongs);
    assert!(p.tx(A, 0).is_empty());
}

// ============================================================================================
// Socket API errors and queues

fn lone() -> Stack {
    stack(ADDR_A, TransportKind::Tcp, Tunables::default(), 77)
}

fn sa(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

#[test]
fn bind_errors() {
    let mut st = lone();
    let s = st.socket();
    assert_eq!(
        st.bind(s, sa(ADDR_A, 1)),
        Err(BindError::Invalid),
        "probe port"
    );
    for ip in [
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V4(Ipv4Addr::BROADCAST),
        IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        "ff02::1".parse().unwrap(),
    ] {
        assert_eq!(st.bind(s, sa(ip, 5000)), Err(BindError::Invalid), "{ip}");
    }
    assert_eq!(st.bind(s, sa(ADDR_B, 5000)), Err(BindError::AddrNotAvail));
    assert_eq!(st.bind(s, sa(ADDR_A, 5000)), Ok(sa(ADDR_A, 5000)));
    assert_eq!(
        st.bind(s, sa(ADDR_A, 5001)),
        Err(BindError::Invalid),
        "double bind"
    );
    let s2 = st.socket();
    assert_eq!(st.bind(s2, sa(ADDR_A, 5000)), Err(BindError::AddrInUse));
    // IPv4-mapped addresses are the IPv4 address.
    let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
    assert_eq!(st.bind(s2, sa(mapped, 5000)), Err(BindError::AddrInUse));
    let got = st.bind(s2, sa(ADDR_A, 0)).unwrap();
    assert!(got.port() >= 2 && got.port() != 5000, "{got}");
    assert_eq!(st.sock_name(s2), Some(got));
    // Closing frees the port.
    st.close(s);
    let s3 = st.socket();
    assert_eq!(st.bind(s3, sa(ADDR_A, 5000)), Ok(sa(ADDR_A, 5000)));
    // SO_RDS_TRANSPORT: IB is not served by this address; it cannot change after bind.
    let s4 = st.socket();
    st.set_transport(s4, TransportKind::Ib).unwrap();
    assert_eq!(st.bind(s4, sa(ADDR_A, 5002)), Err(BindError::NoProtoOpt));
    assert_eq!(
        st.set_transport(s3, TransportKind::Ib),
        Err(BindError::Invalid)
    );
    let s5 = st.socket();
    assert_eq!(
        st.set_transport(s5, TransportKind::Loopback),
        Err(BindError::NoProtoOpt)
    );
}

#[test]
fn send_errors() {
    let mut st = lone();
    let now = Instant::ZERO;
    let b = |n: usize| Bytes::from(vec![0u8; n]);
    let s = st.socket();
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 1)), b(1), true),
        Err(SendError::NotConn),
        "unbound"
    );
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    assert_eq!(
        st.send(now, s, None, b(1), true),
        Err(SendError::NotConn),
        "no destination"
    );
    for ip in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(239, 1, 1, 1),
    ] {
        assert_eq!(
            st.send(now, s, Some(sa(IpAddr::V4(ip), 5)), b(1), true),
            Err(SendError::InvalidDest)
        );
    }
    let v6: IpAddr = "fd00::2".parse().unwrap();
    assert_eq!(
        st.send(now, s, Some(sa(v6, 5)), b(1), true),
        Err(SendError::NotSupported)
    );
    st.set_sndbuf(s, 4 << 20);
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 5)), b(MAX_MSG_SIZE + 1), true),
        Err(SendError::MsgSize)
    );
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 5)), b(MAX_MSG_SIZE), true),
        Ok(MAX_MSG_SIZE)
    );
    let s2 = st.socket();
    st.bind(s2, sa(ADDR_A, 4001)).unwrap();
    st.set_sndbuf(s2, 1000);
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(1001), true),
        Err(SendError::MsgSize)
    );
    assert_eq!(st.send(now, s2, Some(sa(ADDR_B, 5)), b(600), true), Ok(600));
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(600), true),
        Ok(600),
        "below sndbuf before"
    );
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(1), true),
        Err(SendError::WouldBlock)
    );
    assert!(!st.writable(s2));
    // connect() gives a default destination.
    let s3 = st.socket();
    st.bind(s3, sa(ADDR_A, 4002)).unwrap();
    assert_eq!(
        st.connect(s3, sa(IpAddr::V4(Ipv4Addr::BROADCAST), 1)),
        Err(SendError::InvalidDest)
    );
    st.connect(s3, sa(ADDR_B, 9)).unwrap();
    assert_eq!(st.send(now, s3, None, b(3), true), Ok(3));
    assert!(st
        .queued_msgs(false)
        .iter()
        .any(|m| m.lport == 4002 && m.fport == 9));
    st.close(s3);
    assert_eq!(
        st.send(now, s3, None, b(3), true),
        Err(SendError::BadSocket)
    );
}

#[test]
fn recv_peek_and_truncation() {
    let mut st = lone();
    let now = Instant::ZERO;
    let tx = st.socket();
    st.bind(tx, sa(ADDR_A, 7000)).unwrap();
    let rx = st.socket();
    st.bind(rx, sa(ADDR_A, 7001)).unwrap();
    assert_eq!(st.recv(rx, 100, false), Err(RecvError::WouldBlock));
    st.send(
        now,
        tx,
        Some(sa(ADDR_A, 7001)),
        Bytes::from_static(b"0123456789"),
        true,
    )
    .unwrap();
    st.send(
        now,
        tx,
        Some(sa(ADDR_A, 7001)),
        Bytes::from_static(b"second"),
        true,
    )
    .unwrap();
    assert!(st.readable(rx));
    let peek = st.recv(rx, 100, true).unwrap();
    assert_eq!(
        st.recv(rx, 100, true).unwrap(),
        peek,
        "peek leaves it queued"
    );
    let Received::Data {
        msg,
        full_len,
        truncated,
    } = peek
    else {
        panic!("data expected");
    };
    assert_eq!(
        (&msg.payload[..], full_len, truncated),
        (&b"0123456789"[..], 10, false)
    );
    assert_eq!(msg.from, sa(ADDR_A, 7000));
    // Peek with a short buffer: truncated copy, still queued.
    let Received::Data { msg, truncated, .. } = st.recv(rx, 4, true).unwrap() else {
        panic!();
    };
    assert_eq!((&msg.payload[..], truncated), (&b"0123"[..], true));
    let delivered = st.stats().get(Counter::RecvDelivered);
    let Received::Data {
        msg,
        full_len,
        truncated,
    } = st.recv(rx, 3, false).unwrap()
    else {
        panic!();
    };
    assert_eq!(
        (&msg.payload[..], full_len, truncated),
        (&b"012"[..], 10, true)
    );
    assert_eq!(st.stats().get(Counter::RecvDelivered), delivered + 1);
    // The rest of a truncated message is gone.
    let Received::Data { msg, .. } = st.recv(rx, 100, false).unwrap() else {
        panic!();
    };
    assert_eq!(&msg.payload[..], b"second");
    assert_eq!(st.recv(rx, 100, false), Err(RecvError::WouldBlock));
    assert!(!st.readable(rx));
    assert_eq!(
        st.sock_infos()
            .iter()
            .find(|i| i.id == rx)
            .unwrap()
            .rcv_bytes,
        0
    );
}

#[test]
fn cancel_sent_to_and_close_drop_queued_messages() {
    let mut st = lone();
    let now = Instant::ZERO;
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    let other = st.socket();
    st.bind(other, sa(ADDR_A, 4001)).unwrap();
    for _ in 0..3 {
        st.send(
            now,
            s,
            Some(sa(ADDR_B, 6000)),
            Bytes::from_static(&[0; 10]),
            true,
        )
        .unwrap();
    }
    for _ in 0..2 {
        st.send(
            now,
            s,
            Some(sa(ADDR_B, 6001)),
            Bytes::from_static(&[0; 20]),
            true,
        )
        .unwrap();
    }
    st.send(
        now,
        other,
        Some(sa(ADDR_B, 6000)),
        Bytes::from_static(&[0; 5]),
        true,
    )
    .unwrap();
    let snd = |st: &Stack, id| {
        st.sock_infos()
            .iter()
            .find(|i| i.id == id)
            .unwrap()
            .snd_bytes
    };
    assert_eq!(snd(&st, s), 70);
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 6000)), 3);
    assert_eq!(snd(&st, s), 40);
    let q: Vec<(u16, u16)> = st
        .queued_msgs(false)
        .iter()
        .map(|m| (m.lport, m.fport))
        .collect();
    assert_eq!(q.len(), 3);
    assert_eq!(q.iter().filter(|m| **m == (4000, 6001)).count(), 2);
    assert_eq!(q.iter().filter(|m| **m == (4001, 6000)).count(), 1);
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 6000)), 0);
    st.close(s);
    let q: Vec<(u16, u16)> = st
        .queued_msgs(false)
        .iter()
        .map(|m| (m.lport, m.fport))
        .collect();
    assert_eq!(q, [(4001, 6000)]);
    assert!(!st.sock_exists(s));
}

#[test]
fn close_of_a_congested_socket_clears_its_bit_and_updates_peers() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 10);
    let s = p.sock(A, 4000);
    p.send(A, s, 6005, &[0; 11]).unwrap();
    p.run();
    let dest = p.dest(B, 6005);
    assert!(p.st(A).dest_congested(s, dest));
    p.st(B).close(rb);
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    p.run();
    assert!(!p.st(A).dest_congested(s, dest));
    // Messages to the closed port are dropped and counted.
    let drops = p.stat(B, Counter::RecvDropNoSock);
    p.send(A, s, 6005, b"late").unwrap();
    p.run();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), drops + 1);
}

// ---------------------------------------------------------------------------------------------
// RDMA operations (the transport's part, posting and completing them, is played by the test)

fn rdma_op(
    sock: SockId,
    cookie: u64,
    remote_addr: u64,
    lens: &[usize],
    notify: bool,
) -> Arc<RdmaOp> {
    let buf = RdmaBuffer::new(1 << 20).unwrap();
    let mut off = 0;
    let local = lens
        .iter()
        .map(|&len| {
            let v = LocalVec {
                buf: buf.clone(),
                off,
                len,
            };
            off += len;
            v
        })
        .collect();
    Arc::new(RdmaOp::new(
        sock,
        &RdmaArgs {
            cookie,
            remote_addr,
            local,
            write: true,
            notify,
            user_token: 0x5eed,
            ..RdmaArgs::default()
        },
    ))
}

fn send_op(
    p: &mut Pair,
    s: SockId,
    port: u16,
    payload: &[u8],
    ex: &SendExtras,
) -> Result<usize, SendError> {
    let (now, dest) = (p.now, p.dest(B, port));
    p.st(A).send_full(
        now,
        s,
        Some(dest),
        Bytes::copy_from_slice(payload),
        true,
        false,
        ex,
    )
}

fn notes(p: &mut Pair, s: Side, sock: SockId) -> Vec<RdmaNotify> {
    let mut v = Vec::new();
    while let Ok(Received::RdmaStatus(n)) = p.st(s).recv(sock, 0, false) {
        v.push(n);
    }
    v
}

#[test]
fn rdma_and_rdma_dest_need_the_ib_transport_and_valid_control_data() {
    let mut p = Pair::tcp();
    p.establish();
    let s = p.sock(A, 4000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op.clone()),
        rdma_dest: None,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &ex),
        Err(SendError::NotSupported)
    );
    let dest = SendExtras {
        rdma: None,
        rdma_dest: Some(7),
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &dest),
        Err(SendError::NotSupported)
    );

    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let both = SendExtras {
        rdma: Some(op),
        rdma_dest: Some(7),
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &both),
        Err(SendError::InvalidCtl)
    );
    let empty = SendExtras {
        rdma: Some(rdma_op(s, 1, 0, &[], true)),
        rdma_dest: None,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &empty),
        Err(SendError::InvalidCtl)
    );
    let big = SendExtras {
        rdma: Some(rdma_op(s, 1, 0, &[MAX_MSG_SIZE, 1], true)),
        rdma_dest: None,
    };
    assert_eq!(
        send_op(&mut p, s, 6000, b"x", &big),
        Err(SendError::MsgSize)
    );
    assert_eq!(p.stat(A, Counter::SendRdma), 0);
    assert!(p.st(A).queued_msgs(false).is_empty());
}

#[test]
fn rdma_op_rides_the_first_fragment_and_names_its_key() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    // Cookie: rkey 0x11223344, page offset 0x10; remote_addr 0x20 → peer address 0x30.
    let op = rdma_op(s, 0x10_1122_3344, 0x20, &[3000, 5000], true);
    assert_eq!(
        (op.rkey, op.remote_addr, op.bytes),
        (0x1122_3344, 0x30, 8000)
    );
    let ex = SendExtras {
        rdma: Some(op.clone()),
        rdma_dest: None,
    };
    assert_eq!(send_op(&mut p, s, 6000, &[5; 10_000], &ex), Ok(10_000));
    assert_eq!(p.stat(A, Counter::SendRdma), 1);
    assert_eq!(p.stat(A, Counter::SendRdmaBytes), 8000);
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3, "10000 bytes in three fragments");
    assert!(out[0].rdma.as_ref().is_some_and(|r| Arc::ptr_eq(&r.0, &op)));
    assert!(out[1].rdma.is_none() && out[2].rdma.is_none());
    for t in &out {
        // RDMA extension: type 2, BE rkey, then the NONE terminator.
        assert_eq!(&t.hdr[32..38], &[2, 0x11, 0x22, 0x33, 0x44, 0]);
    }
    // A read's bytes count as received (the initiator's view, as the kernel counts).
    let mut args = RdmaArgs {
        cookie: 5,
        local: vec![LocalVec {
            buf: RdmaBuffer::new(100).unwrap(),
            off: 0,
            len: 100,
        }],
        ..RdmaArgs::default()
    };
    args.write = false;
    let read = SendExtras {
        rdma: Some(Arc::new(RdmaOp::new(s, &args))),
        rdma_dest: None,
    };
    send_op(&mut p, s, 6001, b"r", &read).unwrap();
    assert_eq!(p.stat(A, Counter::SendRdma), 2);
    assert_eq!(p.stat(A, Counter::SendRdmaBytes), 8000);
    assert_eq!(p.stat(A, Counter::RecvRdmaBytes), 100);
    p.rx(B, 0, &out).unwrap();
    let evs = p.take_events(B);
    assert!(evs.contains(&Event::RdmaUnuse {
        sock: rb,
        rkey: 0x1122_3344
    }));
    assert_eq!(p.recv_all(B, rb).len(), 1);
}

#[test]
fn rdma_dest_cookie_reaches_the_receiver() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    let ex = SendExtras {
        rdma: None,
        rdma_dest: Some(0x0000_0abc_dead_beef),
    };
    send_op(&mut p, s, 6000, b"offer", &ex).unwrap();
    let out = p.tx(A, 0);
    assert_eq!(
        &out[0].hdr[32..42],
        &[3, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0x0a, 0xbc, 0]
    );
    p.rx(B, 0, &out).unwrap();
    let got = p.recv_all(B, rb);
    assert_eq!(got[0].rdma_dest, Some(0x0000_0abc_dead_beef));
}

#[test]
fn rdma_notifications_come_first_and_once() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let ra = p.sock(A, 4001);
    let sb = p.sock(B, 6001);
    p.send(B, sb, 4001, b"data")
        .unwrap_or_else(|e| panic!("{e}"));
    p.run();
    let op = rdma_op(s, 1, 0, &[8], true);
    p.st(A).rdma_complete(&op, RdmaStatus::Success);
    p.st(A).rdma_complete(&op, RdmaStatus::Dropped);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Success
        }]
    );
    // Without NOTIFY_ME: success is silent; a failure is reported only with RDS_RECVERR.
    let quiet = rdma_op(s, 1, 0, &[8], false);
    p.st(A).rdma_complete(&quiet, RdmaStatus::Success);
    p.st(A).rdma_complete(&quiet, RdmaStatus::RemoteError);
    assert!(notes(&mut p, A, s).is_empty());
    p.st(A).set_recverr(s, true);
    let q2 = rdma_op(s, 1, 0, &[8], false);
    p.st(A).rdma_complete(&q2, RdmaStatus::RemoteError);
    assert!(p.st(A).readable(s));
    // A notification is returned before queued data (peek leaves it).
    let n = rdma_op(ra, 1, 0, &[8], true);
    p.st(A).rdma_complete(&n, RdmaStatus::OtherError);
    assert!(matches!(
        p.st(A).recv(ra, 100, true),
        Ok(Received::RdmaStatus(_))
    ));
    assert!(matches!(
        p.st(A).recv(ra, 100, false),
        Ok(Received::RdmaStatus(RdmaNotify {
            status: RdmaStatus::OtherError,
            ..
        }))
    ));
    assert_eq!(p.recv_all(A, ra).len(), 1);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::RemoteError
        }]
    );
}

#[test]
fn rdma_ops_are_never_retransmitted() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op),
        rdma_dest: None,
    };
    send_op(&mut p, s, 6000, b"with-op", &ex).unwrap();
    p.send(A, s, 6000, b"plain").unwrap();
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 2);
    let _ = p.tx(B, 0);
    // Both sent, neither acknowledged, then the connection drops.
    p.cut(0);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Dropped
        }]
    );
    p.wire.clear();
    p.run();
    let resent: Vec<Bytes> = p
        .wired_from(A, 4000)
        .iter()
        .map(|w| w.payload.clone())
        .collect();
    assert_eq!(resent, [Bytes::from_static(b"plain")]);
    let got: Vec<Bytes> = p.recv_all(B, rb).into_iter().map(|m| m.payload).collect();
    assert_eq!(got, [Bytes::from_static(b"plain")]);
    let snd = p.st[0]
        .sock_infos()
        .iter()
        .find(|i| i.id == s)
        .unwrap()
        .snd_bytes;
    assert_eq!(snd, 0, "the dropped message gave its buffer space back");
}

#[test]
fn cancel_reports_rdma_ops_canceled() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let op = rdma_op(s, 1, 0, &[8], true);
    let ex = SendExtras {
        rdma: Some(op),
        rdma_dest: None,
    };
    send_op(&mut p, s, 6000, b"x", &ex).unwrap();
    let dest = p.dest(B, 6000);
    assert_eq!(p.st(A).cancel_sent_to(s, dest), 1);
    assert_eq!(
        notes(&mut p, A, s),
        [RdmaNotify {
            user_token: 0x5eed,
            status: RdmaStatus::Canceled
        }]
    );
}

#[test]
fn ib_connect_race_the_larger_address_yields() {
    let mut p = Pair::ib();
    let sa = p.sock(A, 4000);
    let sb = p.sock(B, 5000);
    p.send(A, sa, 5000, b"a").unwrap();
    p.send(B, sb, 4000, b"b").unwrap();
    let (ea, eb) = (p.take_events(A), p.take_events(B));
    let (ca, _, epa) = connects(&ea)[0];
    let (cb, _, epb) = connects(&eb)[0];
    let now = p.now;
    let ib = TransportKind::Ib;
    // B's request reaches A (smaller address, connecting): refused as raced.
    assert_eq!(
        p.st(A)
            .handle_accept(now, ADDR_A, ADDR_B, ib, 0, Duration::ZERO),
        Err(AcceptError::Raced)
    );
    // A's request reaches B (larger, connecting): B yields and abandons its own attempt.
    let (c2, path, e2) = p
        .st(B)
        .handle_accept(now, ADDR_B, ADDR_A, ib, 0, Duration::ZERO)
        .unwrap();
    assert_eq!((c2, path), (cb, 0));
    let evs = p.take_events(B);
    assert!(evs.contains(&Event::Disconnect {
        conn: cb,
        path: 0,
        epoch: epb,
        reason: DropReason::Replaced
    }));
    assert_eq!(p.st(B).path_state(cb, 0), (PathState::Up, e2));
    // A's attempt completes; B's abandoned one is refused by A and changes nothing at B.
    assert!(p.st(A).handle_connected(now, ca, 0, epa));
    p.st(B).handle_connect_failed(now, cb, 0, epb);
    assert_eq!(p.st(B).path_state(cb, 0), (PathState::Up, e2));
    let (_, ea2) = p.st(A).path_state(ca, 0);
    let lane = Lane {
        conn: [ca, cb],
        epoch: [ea2, e2],
        parser: [
            StreamParser::new(MAX_MSG_SIZE as u32),
            StreamParser::new(MAX_MSG_SIZE as u32),
        ],
        sent: [0, 0],
    };
    p.lanes.insert(0, lane);
    p.run();
    assert_eq!(p.recv_all(B, sb).len(), 1);
    assert_eq!(p.recv_all(A, sa).len(), 1);
}

/// The RDMA CM source port is random and says nothing about lanes: an IB request is taken at
/// once, whatever its port (a TCP connection from a port that is not lane 0 waits instead).
#[test]
fn ib_accept_takes_any_source_port() {
    for port in [34707u16, 40001, 65535, 1] {
        let mut st = stack(ADDR_B, TransportKind::Ib, Tunables::default(), SEED_B);
        let r = st.handle_accept(
            Instant::ZERO,
            ADDR_B,
            ADDR_A,
            TransportKind::Ib,
            port,
            Duration::ZERO,
        );
        let (c, path, epoch) = r.unwrap_or_else(|e| panic!("port {port}: {e:?}"));
        assert_eq!(path, 0);
        assert_eq!(st.path_state(c, 0), (PathState::Up, epoch));
    }
    let mut st = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), SEED_B);
    let r = st.handle_accept(
        Instant::ZERO,
        ADDR_B,
        ADDR_A,
        TransportKind::Tcp,
        34707,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::Wait));
}

// ============================================================================================
// Memory bounds: the node budget, the pong cap, the receive queue cap, freeing idle peers

use rds_core::proto::stack::{
    CONN_COST, CONN_IDLE_LIFETIME, MSG_COST, PONG_QUEUE_MAX, RCVQ_CAP_MIN,
};

/// Feeds side `s` `n` messages on `lane` as if the other side sent them (starting after the
/// lane's last received sequence number), without anything going back.
fn inject(p: &mut Pair, s: Side, lane: usize, n: usize, sport: u16, dport: u16, len: usize) {
    let (c, e) = (p.conn(s), p.epoch(s, lane));
    let first = p.path_info(s, lane).next_rx_seq;
    let payload = vec![0x5a; len];
    let now = p.now;
    for seq in first..first + n as u64 {
        let h = HeaderRepr::data(seq, sport, dport, len as u32);
        p.st(s)
            .handle_frame(now, c, lane, e, frame(h, &payload))
            .unwrap();
    }
}

#[test]
fn pings_beyond_the_pong_cap_are_dropped_and_freed_when_the_peer_leaves() {
    let mut p = Pair::tcp();
    p.establish();
    let base = p.st(B).mem_used();
    let (pings, pongs) = (p.stat(B, Counter::RecvPing), p.stat(B, Counter::SendPong));
    let drops = p.stat(B, Counter::SendPongDropFull);
    // A pinger that never reads: nothing B queues is polled.
    let extra = 1000;
    inject(&mut p, B, 3, PONG_QUEUE_MAX + extra, 5000, 0, 0);
    assert_eq!(
        p.stat(B, Counter::RecvPing) - pings,
        (PONG_QUEUE_MAX + extra) as u64
    );
    assert_eq!(p.stat(B, Counter::SendPong) - pongs, PONG_QUEUE_MAX as u64);
    assert_eq!(p.stat(B, Counter::SendPongDropFull) - drops, extra as u64);
    assert_eq!(p.path_info(B, 3).send_queued, PONG_QUEUE_MAX);
    assert_eq!(p.st(B).mem_used() - base, PONG_QUEUE_MAX * MSG_COST);
    // Sent and acknowledged pongs make room again.
    let frames = p.tx(B, 3);
    assert_eq!(frames.len(), PONG_QUEUE_MAX);
    p.rx(A, 3, &frames).unwrap();
    p.run();
    assert_eq!(p.st(B).mem_used(), base);
    inject(&mut p, B, 3, PONG_QUEUE_MAX + 1, 5000, 0, 0);
    assert_eq!(
        p.stat(B, Counter::SendPongDropFull) - drops,
        extra as u64 + 1
    );
    // The pinger goes away for good: B has the larger address and nothing of a socket to
    // send, so it does not ask A back; the pongs are dropped, not kept for a reconnect.
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    for path in paths {
        p.cut(path);
    }
    assert_eq!(p.stat(B, Counter::SendPongDropDown), PONG_QUEUE_MAX as u64);
    assert_eq!(p.path_info(B, 3).send_queued, 0);
    assert_eq!(p.st(B).mem_used(), base);
    assert!(connects(&p.take_events(B)).is_empty(), "B does not redial");
}

#[test]
fn a_sender_ignoring_congestion_stops_at_the_receive_queue_cap() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6100);
    let rcvbuf = p.st(B).bufs(rb).unwrap().1;
    let cap = (rcvbuf * 4).max(RCVQ_CAP_MIN);
    let len = 65536;
    let fit = cap / len;
    let extra = 10;
    let base = p.st(B).mem_used();
    let seq = p.path_info(B, 0).next_rx_seq;
    // The peer keeps sending although the port is congested from the second message on.
    inject(&mut p, B, 0, fit + extra, 4000, 6100, len);
    assert!(p.st(B).local_cong_map(ADDR_B).unwrap().test(6100));
    let info = p
        .st(B)
        .sock_infos()
        .into_iter()
        .find(|i| i.id == rb)
        .unwrap();
    assert_eq!(info.rcv_bytes, fit * len);
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), extra as u64);
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 0);
    assert_eq!(p.st(B).mem_used() - base, fit * (len + MSG_COST));
    // Dropped messages were consumed: the sequence space moved past them.
    assert_eq!(p.path_info(B, 0).next_rx_seq, seq + (fit + extra) as u64);
    // Reading makes room, and memory comes back.
    assert_eq!(p.recv_all(B, rb).len(), fit);
    assert_eq!(p.st(B).mem_used(), base);
    inject(&mut p, B, 0, 1, 4000, 6100, len);
    assert_eq!(p.recv_all(B, rb).len(), 1);
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), extra as u64);
}

#[test]
fn the_budget_bounds_receive_queues_and_is_never_exceeded() {
    let budget = 2 << 20;
    let tun = Tunables {
        mem_budget: budget,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Tcp, Tunables::default(), tun);
    p.establish();
    let socks: Vec<SockId> = (0..4).map(|i| p.sock(B, 6200 + i)).collect();
    let base = p.st(B).mem_used();
    let len = 65536;
    let fit = (budget as usize - base) / (len + MSG_COST);
    let per_sock = 20;
    for i in 0..4u16 {
        inject(&mut p, B, 0, per_sock, 4000, 6200 + i, len);
        assert!(p.st(B).mem_used() <= budget as usize);
    }
    assert_eq!(
        p.stat(B, Counter::RecvDropNoMem),
        (4 * per_sock - fit) as u64
    );
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), 0);
    assert_eq!(p.st(B).mem_used(), base + fit * (len + MSG_COST));
    // A pong needs budget too: pings beyond it are consumed unanswered and counted.
    let spare = budget as usize - p.st(B).mem_used();
    let answered = (spare / MSG_COST).min(PONG_QUEUE_MAX);
    let (drops, pongs) = (
        p.stat(B, Counter::RecvDropNoMem),
        p.stat(B, Counter::SendPong),
    );
    let full = p.stat(B, Counter::SendPongDropFull);
    inject(&mut p, B, 0, answered + 3, 5000, 0, 0);
    assert_eq!(p.stat(B, Counter::SendPong) - pongs, answered as u64);
    let unanswered =
        (p.stat(B, Counter::RecvDropNoMem) - drops) + (p.stat(B, Counter::SendPongDropFull) - full);
    assert_eq!(unanswered, 3);
    assert!(p.st(B).mem_used() <= budget as usize);
    let frames = p.tx(B, 0);
    p.rx(A, 0, &frames).unwrap();
    // Closing the sockets returns everything.
    for s in socks {
        p.st(B).close(s);
    }
    assert_eq!(p.st(B).mem_used(), base);
}

#[test]
fn a_send_beyond_the_budget_fails_with_enobufs() {
    let budget: usize = 1 << 20;
    let tun = Tunables {
        mem_budget: budget as u64,
        sndbuf_max: 64 << 20,
        ..Tunables::default()
    };
    let mut st = stack(ADDR_A, TransportKind::Tcp, tun, 77);
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    st.set_sndbuf(s, 64 << 20);
    let dest = Some(sa(ADDR_B, 5000));
    let len = 65536;
    let mut sent = 0;
    let err = loop {
        match st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), true) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100);
    };
    assert_eq!(err, SendError::NoBufs);
    assert_eq!(rds_core::errno::send_errno(err), libc::ENOBUFS);
    // The connection, then every message that fits (probe pings come only with a path up).
    assert_eq!(sent, (budget - CONN_COST) / (len + MSG_COST));
    assert_eq!(st.stats().get(Counter::MemSendError), 1);
    assert!(st.mem_used() <= budget);
    // A blocking sender gets the same answer (it would wait for nothing).
    assert_eq!(
        st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), false),
        Err(SendError::NoBufs)
    );
    assert_eq!(st.stats().get(Counter::MemSendError), 2);
    // Cancelling the queued messages gives the budget back.
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 5000)), sent);
    assert_eq!(st.mem_used(), CONN_COST);
    st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), true)
        .unwrap();
}

/// Both sides' remaining lanes are cut (the peer left).
fn cut_all(p: &mut Pair) {
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    for path in paths {
        p.cut(path);
    }
}

#[test]
fn a_ping_only_peer_is_not_redialled_and_is_freed_after_the_lifetime() {
    let mut p = Pair::tcp();
    // B (the larger address) pings A: it asks A to connect, and A answers the pings.
    let sb = p.sock(B, 7000);
    for _ in 0..3 {
        p.send(B, sb, 0, b"").unwrap();
    }
    p.run();
    let pongs = p
        .wired_from(A, 0)
        .iter()
        .filter(|w| w.hdr.dport == 7000)
        .count();
    assert_eq!(pongs, 3);
    assert!(!p.lanes.is_empty());
    let evs = p.take_events(A);
    assert!(connects(&evs).is_empty());
    p.st(B).close(sb);
    cut_all(&mut p);
    p.run();
    assert!(
        connects(&p.events[A.i()]).len() <= 8,
        "lanes of the first connection only"
    );
    let before = connects(&p.events[A.i()]).len();
    // A holds the smaller address, so it owns the connection; it carried only pings, so A
    // does not dial the peer back.
    for _ in 0..10 {
        p.advance(Duration::from_secs(7));
        p.run();
    }
    assert_eq!(connects(&p.events[A.i()]).len(), before, "no dial-back");
    assert_eq!(p.st(A).conn_count(), 0);
    assert_eq!(p.st(B).conn_count(), 0);
    assert_eq!(p.stat(A, Counter::ConnFreed), 1);
    assert_eq!(p.st(A).mem_used(), 0);
    assert_eq!(p.st(B).mem_used(), 0);
    assert!(p.st(A).conn_infos().is_empty());
}

#[test]
fn a_peer_with_traffic_is_redialled_then_freed_once_idle() {
    let mut p = Pair::tcp();
    p.establish();
    let cid = p.conn(A);
    cut_all(&mut p);
    // A had application traffic: it reconnects at once (the kernel's rule: the smaller
    // address owns and re-establishes the connection).
    let now = p.now;
    assert_eq!(p.st(A).poll_timeout(), Some(now));
    p.st(A).handle_timeout(now);
    let evs = p.take_events(A);
    let c = connects(&evs);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].1, 0);
    // The peer is gone: every attempt fails. A keeps trying within the lifetime.
    let fail = |p: &mut Pair, evs: &[Event]| {
        let now = p.now;
        for &(conn, path, epoch) in &connects(evs) {
            p.st(A).handle_connect_failed(now, conn, path, epoch);
        }
    };
    fail(&mut p, &evs);
    let mut attempts = 1;
    let start = p.now;
    while p.now < start + CONN_IDLE_LIFETIME + Duration::from_secs(5) {
        p.advance(ms(500));
        let now = p.now;
        if p.st(A).poll_timeout().is_some_and(|t| t <= now) {
            p.st(A).handle_timeout(now);
        }
        let evs = p.take_events(A);
        attempts += connects(&evs).len();
        fail(&mut p, &evs);
        assert!(p.st(A).conn_count() <= 1);
    }
    assert!(attempts > 10, "redialled {attempts} times");
    assert!(!p.st(A).conn_exists(cid), "freed after the lifetime");
    assert_eq!(p.stat(A, Counter::ConnFreed), 1);
    // Reports about the freed connection are ignored; its id answers as gone.
    let now = p.now;
    p.st(A).handle_disconnected(now, cid, 0, 1);
    assert_eq!(p.st(A).poll_transmit(now, cid, 0), None);
    assert_eq!(p.st(A).path_state(cid, 0), (PathState::Down, 0));
    // New traffic brings a new connection with a new id.
    p.lanes.clear();
    let port = port_on_lane(SEED_A, 0, 3900);
    let sa_ = p.st(A).conn_infos().len();
    assert_eq!(sa_, 0);
    let s = p.sock(A, port + 1000);
    p.send(A, s, port, b"again").unwrap();
    let c2 = p
        .st(A)
        .find_conn(ADDR_A, ADDR_B, TransportKind::Tcp)
        .unwrap();
    assert!(c2 > cid);
}

#[test]
fn a_freed_connection_keeps_its_sequence_state_for_the_peer_s_return() {
    let mut p = Pair::tcp();
    p.establish();
    let (old_tx_a, old_rx_b) = (p.path_info(A, 0).next_tx_seq, p.path_info(B, 0).next_rx_seq);
    assert!(old_rx_b > 1);
    cut_all(&mut p);
    // A's redials fail until both sides free the connection.
    let start = p.now;
    while p.now < start + CONN_IDLE_LIFETIME + Duration::from_secs(5) {
        p.advance(ms(500));
        let now = p.now;
        for s in [A, B] {
            if p.st(s).poll_timeout().is_some_and(|t| t <= now) {
                p.st(s).handle_timeout(now);
            }
        }
        let evs = p.take_events(A);
        for &(conn, path, epoch) in &connects(&evs) {
            p.st(A).handle_connect_failed(now, conn, path, epoch);
        }
        assert!(connects(&p.take_events(B)).is_empty(), "B does not dial");
    }
    assert_eq!(p.st(A).conn_count(), 0);
    assert_eq!(p.st(B).conn_count(), 0);
    // New traffic: sequence numbers go on where they were on both sides.
    p.lanes.clear();
    p.wire.clear();
    let port = port_on_lane(SEED_A, 0, 3900);
    let sb = p.sock(B, port + 1);
    let sa = p.sock(A, port + 2);
    p.send(A, sa, port + 1, b"again").unwrap();
    p.run();
    assert_eq!(p.recv_all(B, sb).len(), 1);
    let first = p
        .wire
        .iter()
        .filter(|w| w.from == A && w.path == 0 && w.kind == FrameKind::Data)
        .map(|w| w.hdr.seq)
        .min()
        .unwrap();
    assert_eq!(
        first, old_tx_a,
        "A's lane 0 goes on from its last sequence number"
    );
    // (The new connection is the only one: its info comes first.)
    assert!(p.st(B).conn_infos()[0].paths[0].next_rx_seq > old_rx_b);
    // A retransmission of a message B got before the free is dropped, not delivered again.
    let (c, e) = (p.conn(B), p.epoch(B, 0));
    let drops = p.stat(B, Counter::RecvDropOldSeq);
    let mut h = HeaderRepr::data(old_rx_b - 1, port + 2, port + 1, 5);
    h.flags |= flags::RETRANSMITTED;
    let now = p.now;
    p.st(B)
        .handle_frame(now, c, 0, e, frame(h, b"hello"))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), drops + 1);
    assert!(p.recv_all(B, sb).is_empty());
}

#[test]
fn a_connection_with_queued_messages_is_not_freed() {
    let mut st = lone();
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    let dest = sa(ADDR_B, 5000);
    st.send(Instant::ZERO, s, Some(dest), Bytes::from_static(b"x"), true)
        .unwrap();
    let cid = st.find_conn(ADDR_A, ADDR_B, TransportKind::Tcp).unwrap();
    // Every attempt fails, for ten lifetimes: the message waits and the connection stays.
    let mut now = Instant::ZERO;
    let end = now + CONN_IDLE_LIFETIME * 10;
    while now < end {
        while let Some(e) = st.poll_event() {
            if let Event::Connect { conn, path, epoch } = e {
                st.handle_connect_failed(now, conn, path, epoch);
            }
        }
        now = st
            .poll_timeout()
            .expect("a reconnect is always planned")
            .max(now);
        st.handle_timeout(now);
    }
    assert!(st.conn_exists(cid));
    assert_eq!(st.stats().get(Counter::ConnFreed), 0);
    // Once the message is gone (cancelled), so is the connection, one lifetime later.
    assert_eq!(st.cancel_sent_to(s, dest), 1);
    let end = now + CONN_IDLE_LIFETIME * 2;
    while now < end && st.conn_exists(cid) {
        while let Some(e) = st.poll_event() {
            if let Event::Connect { conn, path, epoch } = e {
                st.handle_connect_failed(now, conn, path, epoch);
            }
        }
        let Some(t) = st.poll_timeout() else { break };
        now = t.max(now);
        st.handle_timeout(now);
    }
    assert!(!st.conn_exists(cid));
    assert_eq!(st.mem_used(), 0);
}

#[test]
fn ib_reassembly_draws_from_the_budget_and_a_message_beyond_it_is_consumed_and_dropped() {
    let budget: usize = 1 << 20;
    let tun = Tunables {
        mem_budget: budget as u64,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Ib, Tunables::default(), tun);
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 4 << 20);
    let rb = p.sock(B, 6000);
    p.st(B).set_rcvbuf(rb, 8 << 20);
    let base = p.st(B).mem_used();
    // 1 MiB does not fit next to the connection: received fragment by fragment, not stored.
    p.send(A, s, 6000, &vec![7; MAX_MSG_SIZE]).unwrap();
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 256);
    let seq = HeaderRepr::from_bytes(&out[0].hdr).unwrap().seq;
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 1);
    assert!(p.recv_all(B, rb).is_empty());
    assert_eq!(p.st(B).mem_used(), base);
    assert_eq!(p.path_info(B, 0).next_rx_seq, seq + 1);
    // The path stays up and the next message that fits arrives; while it is reassembled its
    // full length is charged.
    let out = {
        p.send(A, s, 6000, &[9; FRAG_SIZE + 1]).unwrap();
        p.tx(A, 0)
    };
    assert_eq!(out.len(), 2);
    p.rx(B, 0, &out[..1]).unwrap();
    assert_eq!(p.st(B).mem_used(), base + FRAG_SIZE + 1);
    p.rx(B, 0, &out[1..]).unwrap();
    assert_eq!(p.st(B).mem_used(), base + FRAG_SIZE + 1 + MSG_COST);
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload.len(), FRAG_SIZE + 1);
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 1);
    assert_eq!(p.path_info(B, 0).state, PathState::Up);
}
