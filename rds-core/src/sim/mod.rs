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
//!
//! By job: this file holds the types, the public API and the event loop's clock; `link.rs`
//! plays the links (connect, transmit, reading, closing, held connections), `events.rs`
//! handles each scheduled event, and `io.rs` is a node's side as the engine driver sees it
//! ([`Sim::pump`]).

mod events;
mod io;
mod link;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use bytes::Bytes;
use core::time::Duration;

use crate::proto::driver;
use crate::proto::{ConnId, Rng, SockId, Stack, StreamParser, TransportKind};
use crate::time::Instant;
use crate::tunables::Tunables;

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
}
