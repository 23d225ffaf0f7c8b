//! [`Stack`]: one node's sans-IO RDS state, its construction, getters and the driver's
//! `poll_*` outputs; each other file of this folder is one concern of `impl Stack`. See the
//! module documentation of [`super`].

mod cong;
mod handshake;
mod links;
mod paths;
mod receive;
mod send;
mod snapshot;
mod sockets;
mod transmit;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;

use core::time::Duration;

use crate::stats::Stats;
use crate::time::Instant;
use crate::tunables::Tunables;
use crate::wire::CongMap;

use super::budget::{Budget, Limits, NODE};
use super::conn::{ConnTable, SeqMemo};
use super::rng::Rng;
use super::sock::Sock;
use super::{canonical, ConnId, Event, SockId, TransportKind};
use crate::info::PathState;

pub use links::{HELD_MAX, HELD_PER_ADDR, HELD_RETRY};

/// How long a multipath connection waits for the peer's handshake pong before it settles on a
/// single path. The kernel waits forever (a blocking sender hangs if the peer never answers the
/// probe, for example with `ping_enable = 0`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a TCP connection we opened to a peer without SPORT_IDX may stay silent before the
/// peer's acknowledgements free the messages written on it (see
/// [`crate::proto::Stack::handle_tx_acked`]). The peer's TCP acknowledges what it receives
/// before its RDS has taken the connection; an acceptor that then refuses it (the kernel's
/// `rds_tcp_accept_one` finding no free path, a duel of connects, a peer that has not seen
/// our previous connection end) resets it with those bytes unread, within milliseconds; a
/// node of ours holds such a connection unread for up to [`STASH_MAX`] before it resets it,
/// so the grace is longer than that. The first frame from the peer on the connection (the
/// pong to the probe every such lane carries, the congestion map a peer sends on a new
/// connection) proves it was taken sooner.
pub const ADOPT_GRACE: Duration = Duration::from_secs(6);

/// Before the first handshake, a held connection whose source port does not say "lane 0" is
/// taken as path 0 after this long (older kernels pick random source ports).
pub const STASH_AS_PATH0_AFTER: Duration = Duration::from_millis(50);

/// How long a transport holds an accepted connection waiting for a lane before it resets it.
pub const STASH_MAX: Duration = Duration::from_secs(5);

// A connection our own acceptor holds and then resets must still be within its opener's grace.
const _: () = assert!(ADOPT_GRACE.as_millis() > STASH_MAX.as_millis());

/// How long a connection is kept after its last activity (created, a path up or down, a
/// message queued or received) once no path is up or connecting, nothing of a socket is
/// queued and no reconnect is planned; then its state and any pongs left are freed. The
/// owning (smaller) side redials a lost peer on its own only within this time of the last
/// activity, and only after application traffic (a socket's message either way); later, the
/// next message of either side brings the connection back.
pub const CONN_IDLE_LIFETIME: Duration = Duration::from_secs(60);

/// Freed connections whose sequence state is remembered (see [`SeqMemo`]): only those that
/// carried application messages, the oldest forgotten first. About 250 bytes each.
pub const SEQ_MEMO_MAX: usize = 4096;

/// Pongs one connection holds at most (queued or awaiting acknowledgement); pings beyond
/// it are consumed without an answer and counted (`send_pong_drop_full`).
pub const PONG_QUEUE_MAX: usize = 256;

/// A socket's receive queue holds at most `RCVQ_CAP_FACTOR` times its receive buffer (and at
/// least [`RCVQ_CAP_MIN`] bytes). Congestion is advertised above one receive buffer; messages
/// beyond the cap are consumed (acknowledged) and dropped (`recv_drop_rcvq_full`).
pub const RCVQ_CAP_FACTOR: usize = 4;

/// The smallest receive queue cap in bytes (see [`RCVQ_CAP_FACTOR`]). A sender that honours
/// congestion keeps sending until the congestion map reaches it: throughput times that delay
/// (a few milliseconds on a loaded host) lands past the receive buffer. The floor keeps such
/// a sender well inside the cap, so that only a peer ignoring the map loses messages.
pub const RCVQ_CAP_MIN: usize = 32 << 20;

/// Bytes of the node budget a queued message costs beyond its payload (its bookkeeping).
pub const MSG_COST: usize = 256;

/// Bytes of messages in reassembly one peer address may make the node hold: a largest message
/// in progress on each of its eight lanes.
pub const REASM_PER_PEER: usize = 8 * crate::wire::MAX_MSG_SIZE;

/// Bytes of the node budget a connection costs (its paths, its peer's congestion map).
pub const CONN_COST: usize = 16 << 10;

/// The node budget when the `mem_budget` tunable is 0 (the node passes min(this, RAM / 8)).
pub const DEFAULT_MEM_BUDGET: u64 = 256 << 20;

/// Which transports serve a local address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Local {
    tcp: bool,
    ib: bool,
}

#[derive(Debug)]
struct LocalAddr {
    serves: Local,
    /// The address's congestion map (`c_lcong`), shared by all its connections.
    cong: CongMap,
}

/// One node's whole protocol state. Deterministic for a given seed and call sequence.
#[derive(Debug)]
pub struct Stack {
    tun: Tunables,
    rng: Rng,
    gen_num: u32,
    hash_init: u32,
    locals: BTreeMap<IpAddr, LocalAddr>,
    socks: BTreeMap<SockId, Sock>,
    next_sock: u32,
    binds: BTreeMap<(IpAddr, u16), SockId>,
    conns: ConnTable,
    /// The node budget in use: queued messages both ways, reassembly, connections.
    budget: Budget,
    /// Reassembly charges (`frag_charge` of every path) by peer address.
    reasm_by_peer: BTreeMap<IpAddr, usize>,
    conn_index: BTreeMap<(IpAddr, IpAddr, TransportKind), ConnId>,
    /// Sequence state of freed connections, by peer (at most [`SEQ_MEMO_MAX`]).
    seq_memos: BTreeMap<(IpAddr, IpAddr, TransportKind), SeqMemo>,
    /// The memos in the order they were made, with their serials (oldest first).
    seq_memo_order: VecDeque<((IpAddr, IpAddr, TransportKind), u64)>,
    next_memo_serial: u64,
    stats: Stats,
    events: VecDeque<Event>,
    /// Accepted connections held unread, waiting for a lane ([`links`]).
    held: Vec<links::Held>,
    /// When they are offered again.
    held_retry_at: Option<Instant>,
    wakes: BTreeSet<SockId>,
    next_msg_id: u64,
    loop_work: Vec<ConnId>,
    shutting_down: bool,
    cong_changed: bool,
    /// The wall clock at engine time zero (ns since the Unix epoch), if the caller gave it:
    /// where a new IB or TCP connection's sequence numbers start ([`Stack::set_seq_origin`]).
    seq_origin: Option<u64>,
}
impl Stack {
    /// A stack with no addresses. `seed` drives every random choice (ports, jitter, the
    /// generation number, the lane hash), so equal seeds and calls give equal results.
    pub fn new(tun: Tunables, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut gen_num = rng.next_u32();
        if gen_num == 0 {
            gen_num = 1;
        }
        let hash_init = rng.next_u32();
        Stack {
            tun,
            rng,
            gen_num,
            hash_init,
            locals: BTreeMap::new(),
            socks: BTreeMap::new(),
            next_sock: 1,
            binds: BTreeMap::new(),
            conns: ConnTable::default(),
            budget: Budget::default(),
            reasm_by_peer: BTreeMap::new(),
            conn_index: BTreeMap::new(),
            seq_memos: BTreeMap::new(),
            seq_memo_order: VecDeque::new(),
            next_memo_serial: 0,
            stats: Stats::default(),
            events: VecDeque::new(),
            held: Vec::new(),
            held_retry_at: None,
            wakes: BTreeSet::new(),
            next_msg_id: 1,
            loop_work: Vec::new(),
            shutting_down: false,
            cong_changed: false,
            seq_origin: None,
        }
    }

    /// Makes the sequence numbers of connections made from now on (IB and TCP) start at the
    /// wall clock in microseconds (`wall_ns_at_zero`, nanoseconds since the Unix epoch at
    /// engine time zero, plus `now`) instead of 1.
    ///
    /// A peer keeps its `next_rx_seq` for our address across connections: the kernel's RDS/IB
    /// always (IB has no generation number), its RDS/TCP until it reads our new generation
    /// number. After our process restarts, a message of the new incarnation that has to be
    /// retransmitted (flagged RETRANSMITTED, after a connection dropped) with a number below
    /// what the old incarnation reached is dropped there as old and acknowledged: lost. Over
    /// TCP the probe that carries the generation can be such a retransmission itself (the
    /// kernel checks the sequence first). Numbers from the clock start above what an earlier
    /// incarnation on this host used, as long as it sent less than one message per
    /// microsecond on a path, on average since its start (several times our fastest path);
    /// in microseconds they fit the 16 columns of rds-info's tables (16 digits until 2286).
    /// Without it (tests, the simulator) they start at 1, as the kernel's do.
    pub fn set_seq_origin(&mut self, wall_ns_at_zero: u64) {
        self.seq_origin = Some(wall_ns_at_zero);
    }

    /// Adds a local address served by TCP and/or IB.
    pub fn add_local_addr(&mut self, ip: IpAddr, tcp: bool, ib: bool) {
        self.locals
            .entry(canonical(ip))
            .or_insert_with(|| LocalAddr {
                serves: Local { tcp, ib },
                cong: CongMap::new(),
            })
            .serves = Local { tcp, ib };
    }

    /// Whether the node owns `ip`.
    pub fn is_local(&self, ip: IpAddr) -> bool {
        self.locals.contains_key(&canonical(ip))
    }

    /// The node's addresses.
    pub fn local_addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.locals.keys().copied()
    }

    /// The congestion map of a local address.
    pub fn local_cong_map(&self, ip: IpAddr) -> Option<&CongMap> {
        self.locals.get(&canonical(ip)).map(|l| &l.cong)
    }

    /// This node's generation number (random, nonzero), sent in probes.
    pub fn gen_num(&self) -> u32 {
        self.gen_num
    }

    /// The tunables in force.
    pub fn tunables(&self) -> &Tunables {
        &self.tun
    }

    /// Replaces the tunables. (Transport buffer tunables need the driver to restart TCP
    /// connections; see [`Stack::restart_all`].)
    pub fn set_tunables(&mut self, tun: Tunables) {
        self.tun = tun;
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }

    /// A connection's addresses and transport. A freed connection reports unspecified
    /// addresses (matching no peer).
    pub fn conn_addrs(&self, conn: ConnId) -> (IpAddr, IpAddr, TransportKind) {
        match self.conns.get(conn.0 as usize) {
            Some(c) => (c.laddr, c.faddr, c.kind),
            None => {
                let any = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
                (any, any, TransportKind::Tcp)
            }
        }
    }

    /// Whether the connection exists (it is freed after [`CONN_IDLE_LIFETIME`] unused).
    pub fn conn_exists(&self, conn: ConnId) -> bool {
        self.conns.contains(conn.0 as usize)
    }

    /// How many connections the stack holds.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// Bytes of the node's memory budget in use (queued messages both ways, reassembly,
    /// connections).
    pub fn mem_used(&self) -> usize {
        self.budget.used()
    }

    /// Bytes of the node budget held for the sockets of `uid` (0: root's and the node's own).
    pub fn mem_used_by(&self, uid: u32) -> usize {
        self.budget.used_by(uid)
    }

    /// The node's memory budget in bytes (the `mem_budget` tunable; 0 means
    /// [`DEFAULT_MEM_BUDGET`]).
    pub fn mem_budget(&self) -> usize {
        let b = if self.tun.mem_budget == 0 {
            DEFAULT_MEM_BUDGET
        } else {
            self.tun.mem_budget
        };
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    fn mem_limits(&self) -> Limits {
        Limits::new(self.mem_budget(), &self.tun)
    }

    /// Whether `bytes` more fit in the budget (for the node itself).
    pub(super) fn mem_fits(&self, bytes: usize) -> bool {
        self.mem_fits_for(NODE, bytes)
    }

    /// Whether `bytes` more fit in the budget and in `owner`'s share. Root's and the node's
    /// own (every message of an embedded node run as root) only check the total, without
    /// working out the shares.
    #[inline]
    pub(super) fn mem_fits_for(&self, owner: u32, bytes: usize) -> bool {
        if owner == NODE {
            return self.budget.used().saturating_add(bytes) <= self.mem_budget();
        }
        self.budget.fits(owner, bytes, &self.mem_limits())
    }

    pub(super) fn mem_charge(&mut self, bytes: usize) {
        self.budget.charge(NODE, bytes);
    }

    pub(super) fn mem_charge_for(&mut self, owner: u32, bytes: usize) {
        self.budget.charge(owner, bytes);
    }

    pub(super) fn mem_release(&mut self, bytes: usize) {
        self.budget.release(NODE, bytes);
    }

    pub(super) fn mem_release_for(&mut self, owner: u32, bytes: usize) {
        self.budget.release(owner, bytes);
    }

    /// The receive queue cap of a socket (see [`RCVQ_CAP_FACTOR`]).
    pub(super) fn rcvq_cap(rcvbuf: usize) -> usize {
        rcvbuf.saturating_mul(RCVQ_CAP_FACTOR).max(RCVQ_CAP_MIN)
    }

    /// Looks up a connection.
    pub fn find_conn(&self, laddr: IpAddr, faddr: IpAddr, kind: TransportKind) -> Option<ConnId> {
        self.conn_index
            .get(&(canonical(laddr), canonical(faddr), kind))
            .copied()
    }

    /// A path's state and epoch.
    /// A freed connection (or a path out of range) reports `(Down, 0)`.
    pub fn path_state(&self, conn: ConnId, path: usize) -> (PathState, u32) {
        match self
            .conns
            .get(conn.0 as usize)
            .and_then(|c| c.paths.get(path))
        {
            Some(p) => (p.state, p.epoch),
            None => (PathState::Down, 0),
        }
    }

    /// The peer's generation number as last seen in a handshake (0 = never).
    pub fn peer_gen(&self, conn: ConnId) -> u32 {
        self.conns.get(conn.0 as usize).map_or(0, |c| c.peer_gen)
    }

    /// The agreed number of paths of a connection (0 before the handshake).
    pub fn npaths(&self, conn: ConnId) -> usize {
        self.conns.get(conn.0 as usize).map_or(0, |c| c.npaths)
    }

    /// Whether an outgoing transport connection on this path only serves to make the peer
    /// connect back (TCP: the larger address may not own connections). The transport closes
    /// such a connection once it is established and reports [`Stack::handle_connect_failed`].
    pub fn is_trigger_only(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn.0 as usize)
            .is_some_and(|c| c.kind == TransportKind::Tcp && !c.is_smaller())
    }

    /// Whether `(conn, path)` names a live connection's path (transport reports about freed
    /// connections are ignored).
    pub(super) fn path_exists(&self, conn: ConnId, path: usize) -> bool {
        self.conns
            .get(conn.0 as usize)
            .is_some_and(|c| path < c.paths.len())
    }

    /// Next piece of work for the driver.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if let Some(s) = self.wakes.pop_first() {
            return Some(Event::Wake(s));
        }
        if std::mem::take(&mut self.cong_changed) {
            return Some(Event::CongChanged);
        }
        None
    }

    /// The next timer deadline, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .flat_map(|c| {
                c.paths
                    .iter()
                    .filter_map(|p| p.reconnect_at)
                    .chain(c.paths.iter().filter_map(|p| p.adopt_by))
                    .chain(c.hs_deadline)
                    .chain(Self::idle(c).then(|| c.last_active + CONN_IDLE_LIFETIME))
            })
            .chain(self.held_timer())
            .min()
    }
}

/// Unicast: not unspecified, broadcast or multicast (also in mapped form).
fn is_unicast(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}
