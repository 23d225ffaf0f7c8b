//! Engine throughput: 1,000,000 messages of 64 bytes from one [`Stack`] to another, in
//! memory, with no simulator in between. The loop plays the transport directly:
//! - TCP ("transport-acked"): `poll_transmit` frames are written into a byte buffer, which the
//!   receiver's [`StreamParser`] cuts into frames for `handle_frame`; every byte is then
//!   acknowledged with `handle_tx_acked`;
//! - IB ("RDS-acked"): each fragment goes to `handle_fragment`; the receiver's ACK-only
//!   frames (and piggybacked acks) come back the same way.
//!
//! Messages are sent in batches of 256, then everything is drained and received. Criterion
//! reports the time of one million messages; divide by 10^6 for ns/message.
//! `cargo bench -p rds-core --bench engine`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use rds_core::proto::driver::{self, Io};
use rds_core::proto::{
    ConnId, DropReason, FrameKind, Received, SockId, Stack, StreamParser, TransportKind,
};
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{MAX_MSG_SIZE, MPATH_WORKERS};

const MESSAGES: usize = 1_000_000;
const BATCH: usize = 256;
const ADDRS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
];

#[derive(Default)]
struct Lane {
    conn: [Option<ConnId>; 2],
    epoch: [u32; 2],
    /// `parser[i]` reads what arrives at side `i` (TCP).
    parser: [Option<StreamParser>; 2],
    sent: [u64; 2],
    pending: [bool; 2],
}

struct Pair {
    kind: TransportKind,
    now: Instant,
    st: [Stack; 2],
    lanes: Vec<Lane>,
    tx: Bytes,
    rb: SockId,
    sa: SockId,
    dest: SocketAddr,
    received: usize,
    buf: Vec<u8>,
    frames: Vec<rds_core::proto::Frame>,
}

impl Pair {
    fn new(kind: TransportKind) -> Self {
        let mk = |i: usize, seed| {
            let mut s = Stack::new(Tunables::default(), seed);
            s.add_local_addr(
                ADDRS[i],
                kind == TransportKind::Tcp,
                kind == TransportKind::Ib,
            );
            s
        };
        let mut st = [mk(0, 1), mk(1, 2)];
        let sa = st[0].socket();
        st[0].bind(sa, SocketAddr::new(ADDRS[0], 4000)).unwrap();
        let rb = st[1].socket();
        st[1].bind(rb, SocketAddr::new(ADDRS[1], 5000)).unwrap();
        st[1].set_rcvbuf(rb, 64 << 20);
        let mut p = Pair {
            kind,
            now: Instant::ZERO,
            st,
            lanes: (0..MPATH_WORKERS).map(|_| Lane::default()).collect(),
            tx: Bytes::from(vec![0x5a; 64]),
            rb,
            sa,
            dest: SocketAddr::new(ADDRS[1], 5000),
            received: 0,
            buf: Vec::with_capacity(1 << 16),
            frames: Vec::with_capacity(BATCH),
        };
        // Connect (and, on TCP, complete the handshake and bring up every lane).
        p.push(1);
        p
    }

    /// Sends `n` messages and drives both stacks until everything is received.
    fn push(&mut self, n: usize) {
        let start = self.received;
        let mut left = n;
        while left > 0 {
            let k = left.min(BATCH);
            for _ in 0..k {
                self.st[0]
                    .send(self.now, self.sa, Some(self.dest), self.tx.clone(), true)
                    .expect("send");
            }
            left -= k;
            self.pump();
        }
        assert_eq!(self.received - start, n, "every message arrives");
    }

    fn pump(&mut self) {
        loop {
            let mut progress = false;
            for side in 0..2 {
                progress |= driver::pump(&mut BenchIo { p: self, side }) > 0;
            }
            for path in 0..self.lanes.len() {
                for side in 0..2 {
                    if std::mem::take(&mut self.lanes[path].pending[side]) {
                        progress |= self.transmit(side, path);
                    }
                }
            }
            if !progress {
                return;
            }
        }
    }

    /// Connects `side`'s path at once: the other side accepts it on the same lane.
    fn connect(&mut self, side: usize, conn: ConnId, path: usize, epoch: u32) {
        let other = 1 - side;
        let port = 40000 + path as u16;
        let (c2, p2, e2) = self.st[other]
            .handle_accept(
                self.now,
                ADDRS[other],
                ADDRS[side],
                self.kind,
                port,
                Duration::ZERO,
            )
            .expect("accepted");
        assert_eq!(p2, path);
        assert!(self.st[side].handle_connected(self.now, conn, path, epoch));
        let (_, e1) = self.st[side].path_state(conn, path);
        let l = &mut self.lanes[path];
        l.conn = [None, None];
        l.conn[side] = Some(conn);
        l.conn[other] = Some(c2);
        l.epoch[side] = e1;
        l.epoch[other] = e2;
        l.parser = [
            Some(StreamParser::new(MAX_MSG_SIZE as u32)),
            Some(StreamParser::new(MAX_MSG_SIZE as u32)),
        ];
        l.sent = [0, 0];
        l.pending = [true, true];
    }

    /// The receiving socket became readable: take everything queued.
    fn wake(&mut self, side: usize, s: SockId) {
        if side == 1 && s == self.rb {
            while let Ok(r) = self.st[1].recv(self.rb, 2048, false) {
                if let Received::Data { .. } = r {
                    self.received += 1;
                }
            }
        }
    }

    /// Moves every frame of `side`'s path to the other side; true if there were any.
    fn transmit(&mut self, side: usize, path: usize) -> bool {
        let other = 1 - side;
        let now = self.now;
        let l = &mut self.lanes[path];
        let (Some(conn), Some(oconn)) = (l.conn[side], l.conn[other]) else {
            return false;
        };
        let (epoch, oepoch) = (l.epoch[side], l.epoch[other]);
        if self.kind == TransportKind::Ib {
            let mut any = false;
            while let Some(t) = self.st[side].poll_transmit(now, conn, path) {
                any = true;
                self.buf.clear();
                self.buf.extend_from_slice(&t.hdr);
                self.buf.extend_from_slice(&t.payload);
                self.st[other]
                    .handle_fragment(now, oconn, path, oepoch, &self.buf)
                    .expect("fragment accepted");
                if t.kind == FrameKind::AckOnly {
                    self.st[side].handle_ack_sent(conn, path, epoch);
                }
            }
            return any;
        }
        self.buf.clear();
        while let Some(t) = self.st[side].poll_transmit(now, conn, path) {
            self.buf.extend_from_slice(&t.hdr);
            self.buf.extend_from_slice(&t.payload);
        }
        if self.buf.is_empty() {
            return false;
        }
        let l = &mut self.lanes[path];
        l.sent[side] += self.buf.len() as u64;
        let sent = l.sent[side];
        let parser = l.parser[other].as_mut().expect("parser");
        parser
            .feed(Bytes::copy_from_slice(&self.buf), &mut self.frames)
            .expect("stream parses");
        for f in self.frames.drain(..) {
            self.st[other]
                .handle_frame(now, oconn, path, oepoch, f)
                .expect("frame accepted");
        }
        self.st[side].handle_tx_acked(now, conn, path, epoch, sent);
        true
    }
}

/// One side of the pair as the engine driver's transport: connections come up at once,
/// frames wait for [`Pair::pump`] to carry them.
struct BenchIo<'a> {
    p: &'a mut Pair,
    side: usize,
}

impl Io for BenchIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.p.st[self.side]
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.p.connect(self.side, conn, path, epoch);
    }

    fn disconnect(&mut self, _conn: ConnId, _path: usize, _epoch: u32, _reason: DropReason) {
        panic!("unexpected disconnect");
    }

    fn transmit(&mut self, _conn: ConnId, path: usize) {
        self.p.lanes[path].pending[self.side] = true;
    }

    fn wake(&mut self, sock: SockId) {
        self.p.wake(self.side, sock);
    }
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_1M_64B");
    g.throughput(Throughput::Elements(MESSAGES as u64));
    // One iteration is a million messages (a few hundred ms): 10 flat samples.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    for (name, kind) in [("tcp", TransportKind::Tcp), ("ib", TransportKind::Ib)] {
        let mut p = Pair::new(kind);
        g.bench_function(name, |b| b.iter(|| p.push(MESSAGES)));
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
