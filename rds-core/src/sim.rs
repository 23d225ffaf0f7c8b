//! A deterministic simulated network of [`Stack`]s, for tests and benchmarks.
//!
//! Each node is a [`Stack`] with one address. When a stack asks to connect a path, the
//! simulator plays both TCP (a reliable, ordered byte stream per direction, acknowledged as
//! the receiver consumes it) or IB (reliable, ordered frames) between the two nodes, with
//! seeded latency. Faults are explicit calls: [`Sim::cut_link`] ends a connection after a
//! random prefix of the bytes in flight (the rest is lost, and so may be the acknowledgements),
//! and [`Sim::restart_node`] replaces a node's stack with a fresh one (a new generation number).
//! Everything, delivery chunking included, follows from the seed.
//!
//! Applications drive the stacks directly through [`Sim::stack`] and call [`Sim::pump`]
//! afterwards so that the stack's work (connects, frames) enters the network through the engine
//! driver ([`crate::proto::driver`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use core::time::Duration;

use crate::proto::driver::{self, Frames, Io};
use crate::proto::{
    ConnId, DropReason, Established, HeldEnd, Incoming, LinkId, Rng, SockId, Stack, StreamParser,
    TransportKind,
};
use crate::time::Instant;
use crate::tunables::Tunables;
use crate::wire::MAX_MSG_SIZE;

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Transport every node uses between nodes (TCP or IB).
    pub kind: TransportKind,
    /// One-way latency range.
    pub latency: (Duration, Duration),
    /// TCP: deliver the byte stream in chunks of at most this many bytes (random sizes), so
    /// that headers and payloads straddle reads.
    pub max_chunk: usize,
    /// Probability that the acknowledgements still in flight are lost when a link is cut.
    pub ack_loss_on_cut: f64,
    /// Tunables for every stack.
    pub tunables: Tunables,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            kind: TransportKind::Tcp,
            latency: (Duration::from_micros(20), Duration::from_micros(200)),
            max_chunk: 4096,
            ack_loss_on_cut: 0.5,
            tunables: Tunables::default(),
        }
    }
}

/// A node of the simulation.
#[derive(Debug)]
pub struct SimNode {
    /// Its stack.
    pub stack: Stack,
    /// Its address.
    pub addr: IpAddr,
    /// Incarnation: increases with every restart.
    pub incarnation: u64,
    /// Sockets woken since the application last looked (readable, writable, notified).
    pub woken: Vec<SockId>,
    /// A congestion map changed since the application last looked.
    pub cong_changed: bool,
}

#[derive(Debug)]
struct End {
    node: usize,
    incarnation: u64,
    conn: ConnId,
    path: usize,
    /// Epoch of the stack's path this end carries (0 until the initiator accepted it).
    epoch: u32,
    open: bool,
    /// A Closed event for this end is pending.
    closing: bool,
    /// The TCP source port the initiator used (lane selection at the acceptor).
    client_port: u16,
    /// The acceptor refused this connection: TCP acknowledges what arrives (the kernel
    /// accepted the connection), nothing reads it, and a reset follows.
    refused: bool,
    /// Nobody reads this end yet: the acceptor's engine holds it waiting for a lane, or the
    /// initiator has not yet learnt that its attempt completed. The bytes that arrived
    /// meanwhile (acknowledged by TCP) are read once the engine takes the connection; closed
    /// unread, they would be lost.
    held: Option<Vec<Bytes>>,
    /// The peer closed its side while this end was held: close right after adoption.
    peer_closed: bool,
    parser: StreamParser,
    /// Bytes this end has written.
    tx_bytes: u64,
    /// Bytes this end has consumed.
    rx_bytes: u64,
    /// Deliveries towards this end are not scheduled before this time (keeps order).
    next_rx_time: Instant,
    /// Bytes past this stream offset never arrive (set by a cut).
    rx_cutoff: u64,
}

#[derive(Debug)]
struct Link {
    ends: [End; 2],
    /// Acknowledgements to end `i` are lost (set by a cut).
    acks_lost: [bool; 2],
}

#[derive(Debug)]
enum Ev {
    /// Bytes (TCP) or one frame (IB) arrive at `ends[to]`; `off` is the stream offset.
    Deliver {
        link: usize,
        to: usize,
        off: u64,
        data: Bytes,
    },
    /// TCP acknowledgement of `upto` bytes reaches `ends[to]`.
    Acked { link: usize, to: usize, upto: u64 },
    /// IB: the ACK-only frame sent by `ends[to]` completed.
    AckSent { link: usize, to: usize },
    /// A connection request reaches node `to`.
    Arrive {
        from: usize,
        from_inc: u64,
        conn: ConnId,
        path: usize,
        epoch: u32,
        to_addr: IpAddr,
    },
    /// The initiator learns the outcome.
    Result {
        node: usize,
        inc: u64,
        conn: ConnId,
        path: usize,
        epoch: u32,
        link: Option<usize>,
    },
    /// `ends[end]` learns that its connection is gone.
    Closed { link: usize, end: usize },
    /// The acceptor resets a connection it refused.
    Refuse { link: usize },
    /// An attempt the initiator dropped before it reached the peer ended (`shutdown(2)` in
    /// `SYN_SENT` aborts it): the initiator's drain of it is over.
    Aborted {
        node: usize,
        inc: u64,
        conn: ConnId,
        path: usize,
        epoch: u32,
    },
}

/// The simulated network.
#[derive(Debug)]
pub struct Sim {
    cfg: SimConfig,
    now: Instant,
    rng: Rng,
    nodes: Vec<SimNode>,
    links: Vec<Link>,
    /// (node, conn, path) -> (link, end) of the path's current transport connection.
    by_path: HashMap<(usize, ConnId, usize), (usize, usize)>,
    /// Connection attempts not yet reported to their initiator: (node, conn, path, epoch) ->
    /// the link the acceptor's TCP completed (`None`: the request is still on its way).
    attempts: HashMap<(usize, ConnId, usize, u32), Option<usize>>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    next_port: u16,
    /// Bytes carried, all links, both directions.
    pub bytes_carried: u64,
    /// Links cut so far.
    pub cuts: u64,
}

impl Sim {
    /// An empty network.
    pub fn new(cfg: SimConfig, seed: u64) -> Self {
        Sim {
            cfg,
            now: Instant::ZERO,
            rng: Rng::new(seed ^ 0x5eed_0f5e_ed00_0001),
            nodes: Vec::new(),
            links: Vec::new(),
            by_path: HashMap::new(),
            attempts: HashMap::new(),
            queue: BTreeMap::new(),
            seq: 0,
            next_port: 40000,
            bytes_carried: 0,
            cuts: 0,
        }
    }

    /// Adds a node owning `addr`; returns its index.
    pub fn add_node(&mut self, addr: IpAddr) -> usize {
        let seed = self.rng.next_u64();
        let stack = self.new_stack(addr, seed);
        self.nodes.push(SimNode {
            stack,
            addr,
            incarnation: 0,
            woken: Vec::new(),
            cong_changed: false,
        });
        self.nodes.len() - 1
    }

    fn new_stack(&self, addr: IpAddr, seed: u64) -> Stack {
        let mut s = Stack::new(self.cfg.tunables.clone(), seed);
        let ib = self.cfg.kind == TransportKind::Ib;
        s.add_local_addr(addr, !ib, ib);
        s
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The simulator's random generator (for workloads that must follow the seed).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A node.
    pub fn node(&mut self, n: usize) -> &mut SimNode {
        &mut self.nodes[n]
    }

    /// A node's stack. Call [`Sim::pump`] after driving it.
    pub fn stack(&mut self, n: usize) -> &mut Stack {
        &mut self.nodes[n].stack
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Links currently carrying traffic in both directions.
    pub fn live_links(&self) -> Vec<usize> {
        (0..self.links.len())
            .filter(|&l| {
                self.links[l]
                    .ends
                    .iter()
                    .all(|e| e.open && !e.closing && e.epoch != 0)
            })
            .collect()
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.cfg.latency;
        let span = u64::try_from((hi - lo).as_nanos()).unwrap_or(0);
        lo + Duration::from_nanos(if span == 0 { 0 } else { self.rng.below(span) })
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    /// Moves the node's pending work (connects, disconnects, frames, wakeups) into the
    /// network. Call after every direct use of [`Sim::stack`].
    pub fn pump(&mut self, n: usize) {
        driver::pump(&mut SimIo { sim: self, n });
    }

    /// Node `n` asks for a transport connection: the request reaches the peer after a latency.
    fn connect(&mut self, n: usize, conn: ConnId, path: usize, epoch: u32) {
        let (_, faddr, _) = self.nodes[n].stack.conn_addrs(conn);
        let lat = self.latency();
        let inc = self.nodes[n].incarnation;
        self.attempts.insert((n, conn, path, epoch), None);
        self.schedule(
            self.now + lat,
            Ev::Arrive {
                from: n,
                from_inc: inc,
                conn,
                path,
                epoch,
                to_addr: faddr,
            },
        );
    }

    /// Node `n` closes the path's transport connection with `epoch`.
    fn disconnect(&mut self, n: usize, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        if let Some(attempt) = self.attempts.remove(&(n, conn, path, epoch)) {
            // Dropped while connecting.
            match attempt {
                Some(l) if reason.drains() => self.drain_attempt(l, epoch),
                Some(l) => self.close_end(l, 0),
                None if reason.drains() => {
                    // Aborted in SYN_SENT: the request never completes, the drain ends now.
                    let inc = self.nodes[n].incarnation;
                    self.schedule(
                        self.now,
                        Ev::Aborted {
                            node: n,
                            inc,
                            conn,
                            path,
                            epoch,
                        },
                    );
                }
                None => {}
            }
            return;
        }
        if let Some(&(l, e)) = self.by_path.get(&(n, conn, path)) {
            if self.links[l].ends[e].epoch == epoch {
                self.by_path.remove(&(n, conn, path));
                if reason.drains() {
                    // Half-close: the peer learns, closes its side after the data
                    // it already sent, and this end reads until then.
                    self.notify_closed(l, 1 - e);
                } else {
                    self.close_end(l, e);
                }
            }
        }
    }

    /// Drains a path's frames into its link.
    fn transmit(&mut self, n: usize, conn: ConnId, path: usize) {
        let link = self.by_path.get(&(n, conn, path)).copied();
        let now = self.now;
        let ib = self.cfg.kind == TransportKind::Ib;
        let mut stream = BytesMut::new();
        let mut frames = Vec::new();
        for t in Frames::new(&mut self.nodes[n].stack, now, conn, path) {
            if ib {
                let mut f = BytesMut::with_capacity(t.wire_len());
                f.extend_from_slice(&t.hdr);
                f.extend_from_slice(&t.payload);
                frames.push((f.freeze(), t.kind == crate::proto::FrameKind::AckOnly));
            } else {
                stream.extend_from_slice(&t.hdr);
                stream.extend_from_slice(&t.payload);
            }
        }
        let Some((l, e)) = link else { return };
        if !self.links[l].ends[e].open {
            return;
        }
        let to = 1 - e;
        if ib {
            for (f, ack_only) in frames {
                let off = self.links[l].ends[e].tx_bytes;
                self.links[l].ends[e].tx_bytes += f.len() as u64;
                let at = self.delivery_time(l, to);
                self.schedule(
                    at,
                    Ev::Deliver {
                        link: l,
                        to,
                        off,
                        data: f,
                    },
                );
                if ack_only {
                    self.schedule(at, Ev::AckSent { link: l, to: e });
                }
            }
        } else {
            let mut data = stream.freeze();
            while !data.is_empty() {
                let max = self.cfg.max_chunk.max(1) as u64;
                let n = (1 + self.rng.below(max) as usize).min(data.len());
                let chunk = data.split_to(n);
                let off = self.links[l].ends[e].tx_bytes;
                self.links[l].ends[e].tx_bytes += chunk.len() as u64;
                let at = self.delivery_time(l, to);
                self.schedule(
                    at,
                    Ev::Deliver {
                        link: l,
                        to,
                        off,
                        data: chunk,
                    },
                );
            }
        }
    }

    /// The initiator's attempt on link `l` (end 0) was dropped after the acceptor's TCP
    /// completed it: half-close it and read it to its end under the attempt's `epoch`.
    fn drain_attempt(&mut self, l: usize, epoch: u32) {
        let end = &mut self.links[l].ends[0];
        let n = end.node;
        let conn = end.conn;
        let path = end.path;
        self.notify_closed(l, 1);
        self.start_reading(l, 0, conn, path, epoch);
        self.pump(n);
    }

    /// End `e` of link `l` is read from now on as `(conn, path, epoch)`: first what arrived
    /// while nobody read it, then its end of stream if the peer closed meanwhile.
    fn start_reading(&mut self, l: usize, e: usize, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        let end = &mut self.links[l].ends[e];
        end.conn = conn;
        end.path = path;
        end.epoch = epoch;
        let t = end.node;
        let held = end.held.take().unwrap_or_default();
        let mut frames = Vec::new();
        let mut r = Ok(());
        for d in held {
            r = r.and(self.links[l].ends[e].parser.feed(d, &mut frames));
        }
        let st = &mut self.nodes[t].stack;
        let _ = driver::deliver(st, now, conn, path, epoch, frames, r);
        if self.links[l].ends[e].peer_closed {
            self.links[l].ends[e].open = false;
            if self.by_path.get(&(t, conn, path)) == Some(&(l, e)) {
                self.by_path.remove(&(t, conn, path));
            }
            self.nodes[t]
                .stack
                .handle_disconnected(now, conn, path, epoch);
            self.notify_closed(l, 1 - e);
        }
    }

    fn delivery_time(&mut self, l: usize, to: usize) -> Instant {
        let lat = self.latency();
        let end = &mut self.links[l].ends[to];
        let at = (self.now + lat).max(end.next_rx_time);
        end.next_rx_time = at;
        at
    }

    /// End `e` closes its side (its stack decided, or its node died): the peer learns after
    /// the data already on its way (a FIN or RST follows the data).
    fn close_end(&mut self, l: usize, e: usize) {
        self.links[l].ends[e].open = false;
        let other = 1 - e;
        self.notify_closed(l, other);
    }

    fn notify_closed(&mut self, l: usize, e: usize) {
        let end = &self.links[l].ends[e];
        if !end.open || end.closing {
            return;
        }
        let lat = self.latency();
        let at = (self.now + lat).max(self.links[l].ends[e].next_rx_time);
        self.links[l].ends[e].closing = true;
        self.schedule(at, Ev::Closed { link: l, end: e });
    }

    /// Cuts a link: of the bytes in flight in each direction a random prefix still arrives,
    /// the rest (and anything sent later) is lost; acknowledgements may be lost too. Both ends
    /// then learn that the connection is gone.
    pub fn cut_link(&mut self, l: usize) {
        self.cuts += 1;
        for to in 0..2 {
            let recv = self.links[l].ends[to].rx_bytes;
            let sent = self.links[l].ends[1 - to].tx_bytes;
            let keep = if sent > recv {
                recv + self.rng.below(sent - recv + 1)
            } else {
                recv
            };
            let cut = &mut self.links[l].ends[to].rx_cutoff;
            *cut = (*cut).min(keep);
            let lose = self.rng.below(1_000_000) < (self.cfg.ack_loss_on_cut * 1e6) as u64;
            self.links[l].acks_lost[to] = lose;
        }
        for e in 0..2 {
            self.notify_closed(l, e);
        }
    }

    /// Replaces node `n`'s stack with a new one (new generation number, no sockets). Its
    /// transport connections die; peers learn it after a latency.
    pub fn restart_node(&mut self, n: usize) {
        let seed = self.rng.next_u64();
        let addr = self.nodes[n].addr;
        self.nodes[n].stack = self.new_stack(addr, seed);
        self.nodes[n].incarnation += 1;
        self.nodes[n].woken.clear();
        for l in 0..self.links.len() {
            for e in 0..2 {
                if self.links[l].ends[e].node == n && self.links[l].ends[e].open {
                    self.close_end(l, e);
                }
            }
        }
        self.by_path.retain(|k, _| k.0 != n);
        self.attempts.retain(|k, _| k.0 != n);
    }

    /// The earliest pending event or timer.
    fn next_time(&self) -> Option<Instant> {
        let q = self.queue.keys().next().map(|k| k.0);
        let t = self
            .nodes
            .iter()
            .filter_map(|n| n.stack.poll_timeout())
            .min();
        match (q, t) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Processes everything due up to `t` and leaves the clock at `t`.
    pub fn run_until(&mut self, t: Instant) {
        while let Some(next) = self.next_time() {
            if next > t {
                break;
            }
            self.now = self.now.max(next);
            self.process_due();
        }
        self.now = self.now.max(t);
    }

    /// Advances by `d`.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    /// Whether nothing is pending in the network (timers may still be).
    pub fn network_idle(&self) -> bool {
        self.queue.is_empty()
    }

    fn process_due(&mut self) {
        let now = self.now;
        while let Some((&key, _)) = self.queue.iter().next() {
            if key.0 > now {
                break;
            }
            let ev = self.queue.remove(&key).expect("present");
            self.handle(ev);
        }
        for n in 0..self.nodes.len() {
            if driver::handle_due(&mut self.nodes[n].stack, now) {
                self.pump(n);
            }
        }
    }

    fn end_live(&self, l: usize, e: usize) -> bool {
        let end = &self.links[l].ends[e];
        end.open && self.nodes[end.node].incarnation == end.incarnation
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Deliver {
                link,
                to,
                off,
                data,
            } => {
                if !self.end_live(link, to) {
                    return;
                }
                let end = &self.links[link].ends[to];
                if off >= end.rx_cutoff {
                    return;
                }
                let keep = (end.rx_cutoff - off).min(data.len() as u64) as usize;
                let data = data.slice(..keep);
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                let refused = end.refused;
                self.links[link].ends[to].rx_bytes += data.len() as u64;
                self.bytes_carried += data.len() as u64;
                if let Some(buf) = self.links[link].ends[to].held.as_mut() {
                    buf.push(data.clone());
                }
                if refused || self.links[link].ends[to].held.is_some() {
                    let upto = self.links[link].ends[to].rx_bytes;
                    if !self.links[link].acks_lost[1 - to] {
                        let lat = self.latency();
                        self.schedule(
                            now + lat,
                            Ev::Acked {
                                link,
                                to: 1 - to,
                                upto,
                            },
                        );
                    }
                    return;
                }
                debug_assert!(epoch != 0, "data before the connection result");
                if self.cfg.kind == TransportKind::Ib {
                    let _ = self.nodes[n]
                        .stack
                        .handle_fragment(now, conn, path, epoch, &data);
                } else {
                    let mut frames = Vec::new();
                    let r = self.links[link].ends[to].parser.feed(data, &mut frames);
                    let st = &mut self.nodes[n].stack;
                    let _ = driver::deliver(st, now, conn, path, epoch, frames, r);
                    let upto = self.links[link].ends[to].rx_bytes;
                    if !self.links[link].acks_lost[1 - to] {
                        let lat = self.latency();
                        self.schedule(
                            now + lat,
                            Ev::Acked {
                                link,
                                to: 1 - to,
                                upto,
                            },
                        );
                    }
                }
                self.pump(n);
            }
            Ev::Acked { link, to, upto } => {
                if !self.end_live(link, to) || self.links[link].acks_lost[to] {
                    return;
                }
                let end = &self.links[link].ends[to];
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                self.nodes[n]
                    .stack
                    .handle_tx_acked(now, conn, path, epoch, upto);
                self.pump(n);
            }
            Ev::AckSent { link, to } => {
                if !self.end_live(link, to) {
                    return;
                }
                let end = &self.links[link].ends[to];
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                self.nodes[n].stack.handle_ack_sent(conn, path, epoch);
                self.pump(n);
            }
            Ev::Arrive {
                from,
                from_inc,
                conn,
                path,
                epoch,
                to_addr,
            } => {
                let target = self.nodes.iter().position(|n| n.addr == to_addr);
                let lat = self.latency();
                let mut link = None;
                if !self.attempts.contains_key(&(from, conn, path, epoch)) {
                    // The initiator aborted the attempt before the acceptor's TCP completed
                    // it: the acceptor's connection is reset before anyone reads it.
                    return;
                }
                if let Some(t) = target {
                    let from_addr = self.nodes[from].addr;
                    let port = self.client_port(path);
                    let kind = self.cfg.kind;
                    let l = self.links.len();
                    let answer = self.nodes[t].stack.link_accepted(
                        now,
                        LinkId(l as u64),
                        to_addr,
                        from_addr,
                        kind,
                        port,
                    );
                    let t_inc = self.nodes[t].incarnation;
                    // TCP: the initiator's TCP acknowledges what arrives from now on, before
                    // its engine hears that the attempt completed.
                    let mut a = self.new_end(from, from_inc, conn, path, 0);
                    if kind == TransportKind::Tcp {
                        a.held = Some(Vec::new());
                    } else {
                        // IB: the active side learns of the connection (RTU) before any
                        // SEND of the passive side can reach it.
                        a.next_rx_time = now + lat;
                    }
                    let mut b = self.new_end(t, t_inc, conn, path, 0);
                    b.client_port = port;
                    match answer {
                        Incoming::Read {
                            conn: bconn,
                            path: bpath,
                            epoch: bepoch,
                        } => {
                            // A newer connection replaced the path's previous one, if any.
                            if let Some(&(ol, oe)) = self.by_path.get(&(t, bconn, bpath)) {
                                self.close_end(ol, oe);
                            }
                            (b.conn, b.path, b.epoch) = (bconn, bpath, bepoch);
                            self.by_path.insert((t, bconn, bpath), (l, 1));
                            link = Some(l);
                        }
                        // Held unread until the engine gives it a lane (Io::adopt).
                        Incoming::Hold => {
                            b.held = Some(Vec::new());
                            link = Some(l);
                        }
                        Incoming::Refuse(_) if kind == TransportKind::Tcp => {
                            // TCP completed the handshake before the engine refused: the
                            // initiator sees the connection up (its data acknowledged by the
                            // acceptor's TCP), then a reset.
                            b.refused = true;
                            link = Some(l);
                            let d = self.latency() + self.latency();
                            self.schedule(now + lat + d, Ev::Refuse { link: l });
                        }
                        Incoming::Refuse(_) => {}
                    }
                    if link.is_some() {
                        self.links.push(Link {
                            ends: [a, b],
                            acks_lost: [false; 2],
                        });
                        self.attempts.insert((from, conn, path, epoch), link);
                    }
                }
                // The initiator learns the outcome before any data from the acceptor arrives.
                self.schedule(
                    now + lat,
                    Ev::Result {
                        node: from,
                        inc: from_inc,
                        conn,
                        path,
                        epoch,
                        link,
                    },
                );
                if let Some(t) = target {
                    self.pump(t);
                }
            }
            Ev::Result {
                node,
                inc,
                conn,
                path,
                epoch,
                link,
            } => {
                if self.nodes[node].incarnation != inc {
                    if let Some(l) = link {
                        self.close_end(l, 0);
                    }
                    return;
                }
                if self.attempts.remove(&(node, conn, path, epoch)).is_none() {
                    // The engine dropped the attempt meanwhile: it drains (or ended).
                    return;
                }
                let st = &mut self.nodes[node].stack;
                match link {
                    Some(l) if self.links[l].ends[1].refused || !self.links[l].ends[0].open => {
                        // The acceptor refused it (a reset right after the handshake).
                        st.handle_connect_failed(now, conn, path, epoch);
                        self.links[l].ends[0].held = None;
                        if self.links[l].ends[0].open {
                            self.close_end(l, 0);
                        }
                    }
                    Some(l) => match st.link_connected(now, conn, path, epoch) {
                        Established::Read { epoch: ep } => {
                            if let Some(&(ol, oe)) = self.by_path.get(&(node, conn, path)) {
                                self.close_end(ol, oe);
                            }
                            self.by_path.insert((node, conn, path), (l, 0));
                            self.start_reading(l, 0, conn, path, ep);
                        }
                        Established::Drain => self.drain_attempt(l, epoch),
                        Established::Close => {
                            // Closed unread: what arrived is lost (the engine answers this only
                            // where the peer never writes).
                            self.links[l].ends[0].held = None;
                            self.close_end(l, 0);
                        }
                    },
                    None => st.handle_connect_failed(now, conn, path, epoch),
                }
                self.pump(node);
            }
            Ev::Aborted {
                node,
                inc,
                conn,
                path,
                epoch,
            } => {
                if self.nodes[node].incarnation == inc {
                    self.nodes[node]
                        .stack
                        .handle_disconnected(now, conn, path, epoch);
                    self.pump(node);
                }
            }
            Ev::Refuse { link } => {
                if self.links[link].ends[1].open {
                    self.close_end(link, 1);
                }
            }
            Ev::Closed { link, end } => {
                if self.links[link].ends[end].held.is_some() {
                    // Unread, so the end of stream is noticed once the connection is adopted.
                    self.links[link].ends[end].closing = false;
                    self.links[link].ends[end].peer_closed = true;
                    return;
                }
                if self.links[link].ends[end].refused {
                    self.links[link].ends[end].closing = false;
                    self.close_end(link, end);
                    return;
                }
                let live = self.end_live(link, end);
                let e = &mut self.links[link].ends[end];
                e.open = false;
                e.closing = false;
                if !live {
                    return;
                }
                let (n, conn, path, epoch) = (e.node, e.conn, e.path, e.epoch);
                if self.by_path.get(&(n, conn, path)) == Some(&(link, end)) {
                    self.by_path.remove(&(n, conn, path));
                }
                self.notify_closed(link, 1 - end);
                if epoch != 0 {
                    self.nodes[n]
                        .stack
                        .handle_disconnected(now, conn, path, epoch);
                    self.pump(n);
                }
            }
        }
    }

    fn new_end(&self, node: usize, incarnation: u64, conn: ConnId, path: usize, epoch: u32) -> End {
        End {
            node,
            incarnation,
            conn,
            path,
            epoch,
            open: true,
            closing: false,
            client_port: 0,
            refused: false,
            held: None,
            peer_closed: false,
            parser: StreamParser::new(MAX_MSG_SIZE as u32),
            tx_bytes: 0,
            rx_bytes: 0,
            next_rx_time: Instant::ZERO,
            rx_cutoff: u64::MAX,
        }
    }

    /// Node `t`'s engine gives its held connection `link` a lane: what arrived meanwhile is
    /// read first, then the end of stream if the peer closed meanwhile.
    fn adopt(&mut self, t: usize, link: usize, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        if self.links[link].ends[1].held.is_none() || !self.end_live(link, 1) {
            // Gone meanwhile: the path sees its end.
            self.nodes[t]
                .stack
                .handle_disconnected(now, conn, path, epoch);
            return;
        }
        if let Some(&(ol, oe)) = self.by_path.get(&(t, conn, path)) {
            self.close_end(ol, oe);
        }
        self.by_path.insert((t, conn, path), (link, 1));
        self.start_reading(link, 1, conn, path, epoch);
    }

    /// The acceptor's engine gave its held connection `link` up: reset it unread.
    fn refuse_held(&mut self, link: usize) {
        let e = &mut self.links[link].ends[1];
        if e.held.take().is_none() {
            return;
        }
        e.refused = true;
        self.close_end(link, 1);
    }

    /// A client source port congruent to the lane index mod 8, as newer kernels choose.
    fn client_port(&mut self, path: usize) -> u16 {
        self.next_port = self.next_port.wrapping_add(8);
        if self.next_port < 40000 {
            self.next_port = 40000;
        }
        self.next_port + path as u16
    }
}

/// Node `n`'s side of the simulated network, as the engine driver sees it.
struct SimIo<'a> {
    sim: &'a mut Sim,
    n: usize,
}

impl Io for SimIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.sim.nodes[self.n].stack
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.sim.connect(self.n, conn, path, epoch);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        self.sim.disconnect(self.n, conn, path, epoch, reason);
    }

    fn transmit(&mut self, conn: ConnId, path: usize) {
        self.sim.transmit(self.n, conn, path);
    }

    fn wake(&mut self, sock: SockId) {
        self.sim.nodes[self.n].woken.push(sock);
    }

    fn cong_changed(&mut self) {
        self.sim.nodes[self.n].cong_changed = true;
    }

    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        self.sim.adopt(self.n, link.0 as usize, conn, path, epoch);
    }

    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        let _ = why;
        self.sim.refuse_held(link.0 as usize);
    }

    // The simulated network has no RDMA regions: `rdma_unuse` does nothing.
}
