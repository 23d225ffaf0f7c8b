//! Connection and path (lane) state (`struct rds_connection`, `struct rds_conn_path`).

use std::collections::VecDeque;
use std::net::IpAddr;

use bytes::Bytes;
use core::time::Duration;

use crate::time::Instant;
use crate::wire::{CongMap, HeaderRepr, MAX_MSG_SIZE};

use super::frag::FragAssembler;
use super::{SockId, TransportKind};
use crate::info::PathState;

/// A message queued for sending on a path.
#[derive(Debug, Clone)]
pub(crate) struct OutMsg {
    /// Unique, increasing at queue time (orders messages across lanes for the catch-up rule).
    pub id: u64,
    /// Ports, length and extensions; `seq`, `ack` and `flags` are filled at transmit.
    pub hdr: HeaderRepr,
    pub payload: Bytes,
    /// The sending socket (for send-buffer accounting); none for pongs and probes.
    pub sock: Option<SockId>,
    /// Sequence number, assigned at first transmit (0 before).
    pub seq: u64,
    pub retransmitted: bool,
    pub ack_required: bool,
    /// TCP: stream offset just past the message's last byte on the current connection.
    pub ack_off: u64,
    /// When it was first transmitted.
    pub first_tx: Option<Instant>,
    /// An RDMA operation the transport performs before the message's first SEND.
    pub rdma: Option<std::sync::Arc<super::rdma_op::RdmaOp>>,
    /// An answer to a ping (counted against the connection's pong cap).
    pub pong: bool,
    /// Whose share of the node budget it is charged to ([`super::budget`]).
    pub owner: u32,
    /// Its bytes left the sending socket's send buffer already: the peer's TCP acknowledged
    /// it on a connection the peer has not answered on yet, and it stays queued (charged to
    /// the node) only to be resent should the peer reset that connection unread.
    pub sock_freed: bool,
}

/// A lane's receive sequence in the peer's previous incarnation, kept when its generation
/// changed for the connections of that incarnation still to be read (see
/// `Stack::peer_gen_update`): `next_rx_seq` as it was, then advanced by their frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CarriedRx {
    /// The epoch of the connection checked against it (the path's up or drain epoch); none
    /// once that connection ended.
    pub epoch: Option<u32>,
    pub next_rx_seq: u64,
}

/// An IB message being fragmented.
#[derive(Debug, Clone)]
pub(crate) struct TxCur {
    pub hdr: [u8; 48],
    pub payload: Bytes,
    pub next_off: usize,
    pub cong_map: bool,
}

/// One path of a connection.
#[derive(Debug)]
pub(crate) struct Path {
    pub state: PathState,
    /// Changes whenever the path's transport connection changes; stale reports are ignored.
    pub epoch: u32,
    pub next_tx_seq: u64,
    pub next_rx_seq: u64,
    pub send_q: VecDeque<OutMsg>,
    pub retrans: VecDeque<OutMsg>,
    /// TCP: bytes handed to the transport since the path came up.
    pub tx_off: u64,
    /// TCP: bytes the transport reported acknowledged.
    pub acked_off: u64,
    /// TCP, a connection we opened that the peer has not yet shown it reads (no frame from
    /// it on this connection): until then (or this deadline, [`super::stack::ADOPT_GRACE`])
    /// acknowledged messages stay in `retrans`, to be resent should the peer reset it.
    pub adopt_by: Option<Instant>,
    pub unacked_packets: u32,
    pub unacked_bytes: u64,
    /// IB receive side: sequence of the last complete message (`i_ack_next`).
    pub ack_next: u64,
    pub ack_requested: bool,
    pub ack_in_flight: bool,
    /// IB send side: highest ack received (`i_ack_recv`).
    pub ack_recv: u64,
    pub tx_cur: Option<TxCur>,
    pub frag: FragAssembler,
    /// Backoff (`cp_reconnect_jiffies`); zero after a successful connect.
    pub reconnect_delay: Duration,
    pub reconnect_at: Option<Instant>,
    /// A Transmit event is outstanding.
    pub tx_pending: bool,
    pub up_since: Option<Instant>,
    /// Times the path came up.
    pub ups: u64,
    /// The previous connection is being drained: frames of this epoch are still processed,
    /// and the path reconnects only once the drain ends.
    pub drain_epoch: Option<u32>,
    /// The previous incarnation's receive sequence, for the connection of that incarnation
    /// being read (see `Stack::peer_gen_update`).
    pub carried_rx: Option<CarriedRx>,
    /// Bytes of the node budget held by the message being reassembled (IB).
    pub frag_charge: usize,
    /// The message being reassembled is discarded (it did not fit in the budget).
    pub frag_discard: bool,
}

impl Path {
    pub(crate) fn new() -> Self {
        Path {
            state: PathState::Down,
            epoch: 0,
            next_tx_seq: 1,
            next_rx_seq: 0,
            send_q: VecDeque::new(),
            retrans: VecDeque::new(),
            tx_off: 0,
            acked_off: 0,
            adopt_by: None,
            unacked_packets: 0,
            unacked_bytes: 0,
            ack_next: 0,
            ack_requested: false,
            ack_in_flight: false,
            ack_recv: 0,
            tx_cur: None,
            frag: FragAssembler::new(MAX_MSG_SIZE as u32),
            reconnect_delay: Duration::ZERO,
            reconnect_at: None,
            tx_pending: false,
            up_since: None,
            ups: 0,
            drain_epoch: None,
            carried_rx: None,
            frag_charge: 0,
            frag_discard: false,
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        self.state == PathState::Up
    }

    /// Whether a socket's message is queued (pongs and probes do not count).
    pub(crate) fn has_sock_queued(&self) -> bool {
        self.send_q
            .iter()
            .chain(self.retrans.iter())
            .any(|m| m.sock.is_some())
    }
}

/// What a freed connection that carried application messages leaves behind: the sequence
/// state a peer that comes back still holds. Restored when the connection is created again,
/// it keeps a retransmission of a message delivered before the free from being delivered
/// twice, and our sequence numbers from starting over.
#[derive(Debug, Clone)]
pub(crate) struct SeqMemo {
    pub peer_gen: u32,
    pub retired_gens: Vec<u32>,
    /// Per path: `next_tx_seq`, `next_rx_seq`, `ack_next`.
    pub paths: Vec<(u64, u64, u64)>,
    /// Insertion number, to tell the memo from a newer one of the same peer when evicting.
    pub serial: u64,
}

impl SeqMemo {
    /// The sequence state of `c`.
    pub(crate) fn of(c: &Conn, serial: u64) -> Self {
        SeqMemo {
            peer_gen: c.peer_gen,
            retired_gens: c.retired_gens.clone(),
            paths: c
                .paths
                .iter()
                .map(|p| (p.next_tx_seq, p.next_rx_seq, p.ack_next))
                .collect(),
            serial,
        }
    }

    /// Puts the sequence state back into a connection created anew.
    pub(crate) fn restore(&self, c: &mut Conn) {
        c.peer_gen = self.peer_gen;
        c.retired_gens.clone_from(&self.retired_gens);
        for (p, &(tx, rx, ack)) in c.paths.iter_mut().zip(&self.paths) {
            p.next_tx_seq = tx;
            p.next_rx_seq = rx;
            p.ack_next = ack;
        }
    }
}

/// A connection to one peer address over one transport.
#[derive(Debug)]
pub(crate) struct Conn {
    pub laddr: IpAddr,
    pub faddr: IpAddr,
    pub kind: TransportKind,
    pub paths: Vec<Path>,
    /// `c_npaths`: 0 until the handshake, then the agreed number of paths.
    pub npaths: usize,
    /// A probe ping is queued and unanswered (`c_ping_triggered`).
    pub ping_triggered: bool,
    pub peer_gen: u32,
    /// The peer announced SPORT_IDX: accepted lane = client source port mod npaths.
    pub with_sport_idx: bool,
    /// The peer's congestion map (`c_fcong`).
    pub fcong: CongMap,
    /// Our map must be sent (`c_map_queued`).
    pub map_queued: bool,
    /// After a fan-out, lanes above 0 wait until lane 0 holds no message queued before this id.
    pub catchup_id: Option<u64>,
    /// If the handshake has not completed by then, fall back to one path.
    pub hs_deadline: Option<Instant>,
    /// Killed by an operator: no automatic reconnect until new traffic.
    pub killed: bool,
    /// The peer answered our probe on the current lane-0 connection, so it knows the number
    /// of lanes and accepts lanes above 0 (only then does the smaller side open them).
    pub fanout_ok: bool,
    /// Generation numbers of earlier incarnations of the peer, never to be accepted again.
    pub retired_gens: Vec<u32>,
    /// Pongs queued on the connection's paths (sent or not, until acknowledged).
    pub pongs: usize,
    /// Application messages went either way (sent by a local socket or delivered to one):
    /// only then does the owning side redial the peer on its own.
    pub app_traffic: bool,
    /// Last time something happened: created, a path went up or down, a message was queued
    /// or received. Failed connection attempts do not count.
    pub last_active: Instant,
}

impl Conn {
    pub(crate) fn new(laddr: IpAddr, faddr: IpAddr, kind: TransportKind, now: Instant) -> Self {
        Conn {
            laddr,
            faddr,
            kind,
            paths: (0..kind.max_paths()).map(|_| Path::new()).collect(),
            npaths: 0,
            ping_triggered: false,
            peer_gen: 0,
            with_sport_idx: false,
            fcong: CongMap::new(),
            map_queued: false,
            catchup_id: None,
            hs_deadline: None,
            killed: false,
            fanout_ok: false,
            retired_gens: Vec::new(),
            pongs: 0,
            app_traffic: false,
            last_active: now,
        }
    }

    /// We have the smaller address (TCP: we own the connections).
    pub(crate) fn is_smaller(&self) -> bool {
        super::addr_cmp(self.laddr, self.faddr).is_lt()
    }

    /// The lane that carries congestion maps: the lowest one that is up.
    pub(crate) fn map_lane(&self) -> Option<usize> {
        self.paths.iter().position(Path::is_up)
    }
}

/// The connections of a stack by id. Ids are handed out in increasing order and never reused
/// while a connection holds one, so a freed connection's id stays invalid (a transport's late
/// report about it finds nothing) and iteration follows creation order.
#[derive(Debug, Default)]
pub(crate) struct ConnTable {
    map: std::collections::BTreeMap<u32, Conn>,
    next: u32,
}

impl ConnTable {
    /// Stores a new connection and returns its id.
    pub(crate) fn insert(&mut self, c: Conn) -> u32 {
        // Skips ids still in use after the counter wrapped (4 billion connections).
        while self.map.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.map.insert(id, c);
        id
    }

    /// Frees a connection.
    pub(crate) fn remove(&mut self, id: usize) -> Option<Conn> {
        self.map.remove(&u32::try_from(id).ok()?)
    }

    /// The connection with this id, if it exists.
    pub(crate) fn get(&self, id: usize) -> Option<&Conn> {
        self.map.get(&u32::try_from(id).ok()?)
    }

    /// The connection with this id, if it exists, mutable.
    pub(crate) fn get_mut(&mut self, id: usize) -> Option<&mut Conn> {
        self.map.get_mut(&u32::try_from(id).ok()?)
    }

    /// Live connections with their ids, in creation order, mutable.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Conn)> {
        self.map.iter_mut().map(|(&k, c)| (k as usize, c))
    }

    /// Whether the id names a live connection.
    pub(crate) fn contains(&self, id: usize) -> bool {
        self.get(id).is_some()
    }

    /// Live ids in creation order (a copy, so that the table may change meanwhile).
    pub(crate) fn ids(&self) -> Vec<usize> {
        self.map.keys().map(|&k| k as usize).collect()
    }

    /// Live connections with their ids, in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Conn)> {
        self.map.iter().map(|(&k, c)| (k as usize, c))
    }

    /// Live connections in creation order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Conn> {
        self.map.values()
    }

    /// How many connections are live.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

impl core::ops::Index<usize> for ConnTable {
    type Output = Conn;

    /// Internal use only, for ids known to be live (public entry points check first).
    fn index(&self, id: usize) -> &Conn {
        self.get(id).expect("live connection id")
    }
}

impl core::ops::IndexMut<usize> for ConnTable {
    fn index_mut(&mut self, id: usize) -> &mut Conn {
        self.map.get_mut(&(id as u32)).expect("live connection id")
    }
}
