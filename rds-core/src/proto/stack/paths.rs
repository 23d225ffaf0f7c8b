//! Connection and path lifecycle: accept, connect, up, reset, reconnect backoff, operator
//! restart and kill, shutdown, and freeing idle connections (keeping their sequence memo).

use std::collections::VecDeque;
use std::net::IpAddr;

use core::time::Duration;

use crate::message::RdmaStatus;
use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::MPATH_WORKERS;

use crate::info::PathState;
use crate::proto::conn::{Conn, OutMsg, Path, SeqMemo};
use crate::proto::{canonical, AcceptError, ConnId, DropReason, Event, TransportKind};

use super::{
    Stack, ADOPT_GRACE, CONN_COST, CONN_IDLE_LIFETIME, HANDSHAKE_TIMEOUT, SEQ_MEMO_MAX,
    STASH_AS_PATH0_AFTER,
};

impl Stack {
    /// Whether a connection is unused: not loopback, no path up, connecting, draining or
    /// waiting to reconnect, and no socket's message queued. Such a connection is freed
    /// [`CONN_IDLE_LIFETIME`] after its last activity.
    pub(super) fn idle(c: &Conn) -> bool {
        c.kind != TransportKind::Loopback
            && c.paths.iter().all(|p| {
                p.state == PathState::Down
                    && p.drain_epoch.is_none()
                    && p.reconnect_at.is_none()
                    && p.tx_cur.is_none()
                    && !p.has_sock_queued()
            })
    }

    /// Runs due timers: reconnects, handshake fallbacks, and freeing idle connections.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.held_timer().is_some_and(|t| t <= now) {
            self.retry_held(now);
        }
        for ci in self.conns.ids() {
            let cid = ConnId(ci as u32);
            if self.conns[ci].hs_deadline.is_some_and(|t| t <= now) {
                self.conns[ci].hs_deadline = None;
                if self.conns[ci].npaths == 0 {
                    self.conns[ci].ping_triggered = false;
                    self.set_npaths(now, cid, 1);
                }
            }
            for pi in 0..self.conns[ci].paths.len() {
                if self.conns[ci].paths[pi].adopt_by.is_some_and(|t| t <= now) {
                    self.adopted(ci, pi);
                }
                let p = &mut self.conns[ci].paths[pi];
                if p.reconnect_at.is_some_and(|t| t <= now) {
                    p.reconnect_at = None;
                    if p.state == PathState::Down {
                        if !self.should_reconnect(now, cid, pi) {
                            self.drop_pongs_if_gone(ci);
                        } else if self.in_turn(cid, pi) {
                            self.start_connect(cid, pi);
                        }
                        // Otherwise a lane below is not up yet: it starts this one when it
                        // comes up (`connect_next_lane`).
                    }
                }
            }
            let c = &self.conns[ci];
            if Self::idle(c) && now >= c.last_active + CONN_IDLE_LIFETIME {
                self.free_conn(ci);
            }
        }
    }

    /// Frees an idle connection: its pongs are dropped (counted) and its memory returned.
    pub(super) fn free_conn(&mut self, ci: usize) {
        self.drop_pongs_all(ci);
        // Nothing of a socket is queued (see `idle`); probe pings may be.
        self.drop_msgs_of_conn(ci);
        let paths: Vec<usize> = (0..self.conns[ci].paths.len()).collect();
        for pi in paths {
            self.frag_reset(ci, pi);
        }
        let Some(c) = self.conns.remove(ci) else {
            return;
        };
        let key = (c.laddr, c.faddr, c.kind);
        self.conn_index.remove(&key);
        if c.app_traffic {
            self.remember_seq(key, &c);
        }
        self.mem_release(CONN_COST);
        self.stats.inc(Counter::ConnFreed);
    }

    /// Keeps the sequence state of a freed connection (see [`SeqMemo`]), forgetting the
    /// oldest memo beyond [`SEQ_MEMO_MAX`].
    pub(super) fn remember_seq(&mut self, key: (IpAddr, IpAddr, TransportKind), c: &Conn) {
        let serial = self.next_memo_serial;
        self.next_memo_serial += 1;
        self.seq_memos.insert(key, SeqMemo::of(c, serial));
        self.seq_memo_order.push_back((key, serial));
        while self.seq_memos.len() > SEQ_MEMO_MAX {
            let Some((k, ser)) = self.seq_memo_order.pop_front() else {
                break;
            };
            if self.seq_memos.get(&k).is_some_and(|m| m.serial == ser) {
                self.seq_memos.remove(&k);
            }
        }
        // Entries of memos restored or replaced since are stale: the order keeps at most
        // twice as many entries as there are memos.
        if self.seq_memo_order.len() > 2 * SEQ_MEMO_MAX {
            let memos = &self.seq_memos;
            self.seq_memo_order
                .retain(|(k, ser)| memos.get(k).is_some_and(|m| m.serial == *ser));
        }
    }

    /// An outgoing connection for `(conn, path)` with `epoch` is established. Returns `false`
    /// if the attempt is stale (the path moved on): the transport must close that connection.
    pub fn handle_connected(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) -> bool {
        if !self.path_exists(conn, path) {
            return false;
        }
        let p = &self.conns[conn.0 as usize].paths[path];
        if p.epoch != epoch || p.state != PathState::Connecting {
            return false;
        }
        let backoff = p.reconnect_delay;
        self.path_up(now, conn, path);
        let c = &mut self.conns[conn.0 as usize];
        // A peer that sends SPORT_IDX (this stack, or a kernel that stashes a connection it
        // cannot take yet instead of resetting it) never resets one unread once its TCP
        // accepted it; the rule is for the others (base kernels), and for every peer until
        // its handshake told.
        if c.kind == TransportKind::Tcp && !c.with_sport_idx {
            // Until the peer answers on it, the connection has not succeeded yet: a peer
            // whose accept resets every connection (its path busy) is retried with backoff,
            // not at once each time (`Stack::adopted` ends the backoff).
            let p = &mut c.paths[path];
            p.adopt_by = Some(now + ADOPT_GRACE);
            p.reconnect_delay = backoff;
            self.queue_adopt_probe(conn, path);
        }
        self.connect_next_lane(conn);
        true
    }

    /// The attempt with `epoch` failed (or served only as a trigger); back off and retry.
    ///
    /// An attempt the engine dropped while it was connecting waits to be drained (rule 3 of
    /// the connection lifecycle, see `links`); when it ends before the transport learnt of
    /// the drop (its outcome was collected first), this report is the end of that drain.
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, path: usize, epoch: u32) {
        if !self.path_exists(conn, path) {
            return;
        }
        let p = &mut self.conns[conn.0 as usize].paths[path];
        if p.drain_epoch == Some(epoch) {
            self.handle_disconnected(now, conn, path, epoch);
            return;
        }
        if p.epoch != epoch || p.state != PathState::Connecting {
            return;
        }
        p.state = PathState::Down;
        self.queue_reconnect(now, conn, path);
    }

    /// The transport connection of `(conn, path)` with `epoch` went away (FIN, RST, error).
    pub fn handle_disconnected(&mut self, now: Instant, conn: ConnId, path: usize, epoch: u32) {
        if !self.path_exists(conn, path) {
            return;
        }
        let c = &mut self.conns[conn.0 as usize];
        let p = &mut c.paths[path];
        if p.drain_epoch == Some(epoch) {
            c.last_active = now;
            let p = &mut c.paths[path];
            p.drain_epoch = None;
            if p.state == PathState::Down && !self.shutting_down {
                self.queue_reconnect(now, conn, path);
            }
            self.held_due_now(now);
            return;
        }
        if p.epoch != epoch {
            return;
        }
        match p.state {
            PathState::Up => self.reset_path(now, conn, path, None),
            PathState::Connecting => self.handle_connect_failed(now, conn, path, epoch),
            _ => {}
        }
    }

    /// A transport connection from `faddr` to our `laddr` was accepted. `client_port` is the
    /// peer's source port (lane selection with SPORT_IDX); `waited` is how long the transport
    /// has held this connection after earlier [`AcceptError::Wait`] answers. Returns the
    /// connection, path and epoch it now carries.
    ///
    /// A connection is refused only when it cannot carry data (see [`AcceptError`]). When no
    /// lane can be assigned yet, the answer is [`AcceptError::Wait`]: the transport keeps the
    /// connection *unread* (its data stays in the TCP receive buffer, where the peer already
    /// counts it as acknowledged) and asks again later, as newer kernels stash such
    /// connections. Resetting it would lose that data.
    ///
    /// # Errors
    /// See [`AcceptError`].
    pub fn handle_accept(
        &mut self,
        now: Instant,
        laddr: IpAddr,
        faddr: IpAddr,
        kind: TransportKind,
        client_port: u16,
        waited: Duration,
    ) -> Result<(ConnId, usize, u32), AcceptError> {
        let (laddr, faddr) = (canonical(laddr), canonical(faddr));
        if !self.locals.contains_key(&laddr) || self.shutting_down {
            return Err(AcceptError::NotLocal);
        }
        if self.locals.contains_key(&faddr) {
            return Err(AcceptError::Local);
        }
        if self.find_conn(laddr, faddr, kind).is_none() && !self.mem_fits(CONN_COST) {
            self.stats.inc(Counter::ConnRefusedNoMem);
            return Err(AcceptError::NoMem);
        }
        let cid = self.conn_get_or_create(now, laddr, faddr, kind);
        let ci = cid.0 as usize;
        if kind == TransportKind::Tcp && self.conns[ci].is_smaller() {
            // A larger peer's connection only asks us to connect (it never carries data).
            // The peer is there now, so a reconnect waiting out its backoff (after the
            // peer restarted, say) goes at once; after an operator's kill the attempt is the
            // new traffic that brings the connection back.
            let p = &mut self.conns[ci].paths[0];
            if p.state == PathState::Down && p.drain_epoch.is_none() && p.reconnect_at.is_some() {
                p.reconnect_at = None;
                p.reconnect_delay = Duration::ZERO;
            }
            self.connect_if_down(cid, 0);
            return Err(AcceptError::ConnectBack);
        }
        if kind == TransportKind::Ib && self.conns[ci].paths[0].state == PathState::Connecting {
            if self.conns[ci].is_smaller() {
                // Both sides connecting and ours is the smaller address: refuse the request
                // (`ib_connect_raced`; an IB reject happens before any data). A peer of
                // ours yields to our request; a kernel refuses it too, and backoff settles.
                return Err(AcceptError::Raced);
            }
            // Departure from the kernel, which refuses here too: the peer has the smaller
            // address, so its attempt wins and ours is abandoned. Without a tie-break two
            // racing sides refuse each other until their backoff jitter separates them
            // (seconds with a kernel peer, which retries at once). Our own request reached
            // the peer before this accept does, so a kernel peer refuses it as raced
            // rather than dropping the connection it is about to have.
            self.reset_path(now, cid, 0, Some(DropReason::Replaced));
        }
        let c = &self.conns[ci];
        let n = c.npaths;
        let lane0 = usize::from(client_port) % MPATH_WORKERS == 0;
        let slot = if !kind.multipath() {
            // IB has one path; the RDMA CM source port says nothing about lanes.
            0
        } else if n == 0 {
            // Before the handshake only path 0 exists. A peer that learned the number of
            // lanes (from our probe, or from an earlier incarnation of this node) may already
            // connect others; they must not become our path 0, or the lanes' sequence spaces
            // cross. Lane index = source port mod 8, as newer kernels and this stack choose
            // it; older kernels use random ports, so after a short wait any connection is
            // taken as path 0.
            // Path 0 by its port (while ours is up, ours is stale and is replaced below), or,
            // after a short wait, any connection while we have no path 0.
            let settled = waited >= STASH_AS_PATH0_AFTER;
            if !(lane0 || (settled && !c.paths[0].is_up())) {
                return Err(AcceptError::Wait);
            }
            0
        } else if c.with_sport_idx {
            usize::from(client_port) % n
        } else {
            // A peer without SPORT_IDX (base kernels) does not say which lane this is, so
            // the connection may belong to a different peer lane than the slot's previous
            // one. A slot whose previous connection is still being drained is therefore not
            // free: that peer lane may still be sending on it (it has not seen our FIN yet),
            // and taking the slot over would discard those frames after our TCP
            // acknowledged them. Hold the connection until a drain ends.
            match c.paths[..n]
                .iter()
                .position(|p| !p.is_up() && (n == 1 || p.drain_epoch.is_none()))
            {
                Some(i) => i,
                None if n == 1 => 0,
                None => return Err(AcceptError::Wait),
            }
        };
        if kind == TransportKind::Tcp {
            let p = &self.conns[ci].paths[slot];
            if p.is_up() {
                // The peer owns the connection and opened this lane again, so ours is stale
                // (the peer dropped it, or restarted). What our TCP acknowledged on it still
                // waits unread in it (a peer, or a box in between, may deliver it late) and
                // counts as delivered: the old connection is read to its end first, and the
                // newcomer waits unread meanwhile (old data before new, or the new
                // connection's later sequence numbers would make the old ones look like
                // duplicates). A restarted peer resets the old connection at our FIN. Base
                // kernels reset the newcomer instead and wait for keepalive to kill the
                // stale connection.
                self.reset_path(now, cid, slot, Some(DropReason::Superseded));
                return Err(AcceptError::Wait);
            }
            if p.drain_epoch.is_some() {
                return Err(AcceptError::Wait);
            }
        } else if self.conns[ci].paths[slot].is_up() {
            self.reset_path(now, cid, slot, Some(DropReason::Replaced));
        }
        let epoch = self.path_up(now, cid, slot);
        Ok((cid, slot, epoch))
    }

    /// Drops every path of a connection so that it reconnects and retransmits
    /// (`rds-ctrl conn restart`).
    pub fn restart_conn(&mut self, now: Instant, conn: ConnId, reason: DropReason) {
        if !self.conns.contains(conn.0 as usize) {
            return;
        }
        for pi in 0..self.conns[conn.0 as usize].paths.len() {
            let st = self.conns[conn.0 as usize].paths[pi].state;
            if matches!(st, PathState::Up | PathState::Connecting) {
                self.reset_path(now, conn, pi, Some(reason));
            }
        }
    }

    /// Restarts every connection of a transport (a tunable of it changed).
    pub fn restart_all(&mut self, now: Instant, kind: TransportKind, reason: DropReason) {
        for ci in self.conns.ids() {
            if self.conns[ci].kind == kind {
                self.restart_conn(now, ConnId(ci as u32), reason);
            }
        }
    }

    /// Ends a connection (`rds-ctrl conn kill`): its paths go down without reconnecting and
    /// every queued message is dropped. Returns how many messages were dropped. New traffic
    /// (a send, or the peer connecting) brings it back.
    pub fn kill_conn(&mut self, now: Instant, conn: ConnId) -> usize {
        let ci = conn.0 as usize;
        if !self.conns.contains(ci) {
            return 0;
        }
        self.conns[ci].killed = true;
        self.restart_conn(now, conn, DropReason::Kill);
        for p in &mut self.conns[ci].paths {
            p.reconnect_at = None;
            p.reconnect_delay = Duration::ZERO;
        }
        self.drop_msgs_of_conn(ci)
    }

    /// Closes every connection for shutdown; nothing reconnects afterwards.
    pub fn shutdown(&mut self, now: Instant) {
        self.shutting_down = true;
        for ci in self.conns.ids() {
            self.restart_conn(now, ConnId(ci as u32), DropReason::Shutdown);
            for p in &mut self.conns[ci].paths {
                p.reconnect_at = None;
            }
            self.conns[ci].hs_deadline = None;
        }
    }

    pub(super) fn conn_get_or_create(
        &mut self,
        now: Instant,
        laddr: IpAddr,
        faddr: IpAddr,
        kind: TransportKind,
    ) -> ConnId {
        if let Some(&c) = self.conn_index.get(&(laddr, faddr, kind)) {
            return c;
        }
        let mut conn = Conn::new(laddr, faddr, kind, now);
        if let (TransportKind::Ib | TransportKind::Tcp, Some(origin)) = (kind, self.seq_origin) {
            let first = (origin.saturating_add(now.as_nanos()) / 1000).max(1);
            for p in &mut conn.paths {
                p.next_tx_seq = first;
            }
        }
        if let Some(m) = self.seq_memos.remove(&(laddr, faddr, kind)) {
            m.restore(&mut conn);
        }
        let cid = ConnId(self.conns.insert(conn));
        self.mem_charge(CONN_COST);
        self.conn_index.insert((laddr, faddr, kind), cid);
        if kind == TransportKind::Loopback {
            // Loopback connections are up at once and never go down.
            self.path_up(now, cid, 0);
        }
        cid
    }

    /// Something is queued on `lane` and it is not up: get the right path connecting.
    pub(super) fn want_connect(&mut self, cid: ConnId, lane: usize) {
        let c = &self.conns[cid.0 as usize];
        let target = match c.kind {
            TransportKind::Tcp
                if c.is_smaller() && c.fanout_ok && c.npaths > 0 && lane < c.npaths =>
            {
                lane
            }
            _ => 0,
        };
        self.connect_if_down(cid, target);
    }

    pub(super) fn connect_if_down(&mut self, cid: ConnId, path: usize) {
        if self.shutting_down {
            return;
        }
        let c = &self.conns[cid.0 as usize];
        if path > 0 && c.kind == TransportKind::Tcp && !(c.is_smaller() && c.fanout_ok) {
            return;
        }
        self.conns[cid.0 as usize].killed = false;
        let p = &self.conns[cid.0 as usize].paths[path];
        if p.state == PathState::Down
            && p.reconnect_at.is_none()
            && p.drain_epoch.is_none()
            && self.in_turn(cid, path)
        {
            self.start_connect(cid, path);
        }
    }

    /// Whether our lanes to this peer connect one at a time, in index order: we own the
    /// connections (TCP, the smaller address) and the peer learnt no lane identity (no
    /// SPORT_IDX in its handshake: the base kernels).
    ///
    /// Such a peer puts each connection it accepts into its first free slot
    /// (`rds_tcp_accept_one_path`: the first path in DOWN or ERROR), whatever our lane. If
    /// several of our lanes reconnect at once (after every lane dropped), their connections
    /// reach its accept queue in any order and slot j can get our lane i: the messages we
    /// resend on lane i (RETRANSMITTED, including ones the peer already delivered) are then
    /// checked against slot j's sequence numbers and delivered again, and the same happens
    /// to the peer's resends to us. The peer accepts in the order the connections were
    /// established, so connecting lane i only once every lane below it is up gives it the
    /// lowest free slot, slot i, unless the peer still holds a slot below that we already
    /// lost (it has not yet seen that connection end): that window stays open, and only one
    /// lane (`net.rds.mprds_paths` = 1) closes it.
    pub(super) fn lanes_in_order(c: &Conn) -> bool {
        c.kind == TransportKind::Tcp && c.is_smaller() && !c.with_sport_idx
    }

    /// Whether `path` may start connecting now: always, unless the lanes connect in order
    /// ([`Self::lanes_in_order`]) and a lane below it is not up. A lane below that is down
    /// (connecting, waiting out its backoff, being drained, or not wanted) keeps the ones
    /// above waiting; each lane that comes up starts the next one ([`Self::connect_next_lane`]).
    pub(super) fn in_turn(&self, cid: ConnId, path: usize) -> bool {
        let c = &self.conns[cid.0 as usize];
        !Self::lanes_in_order(c) || c.paths[..path].iter().all(Path::is_up)
    }

    /// A lane came up: in ordered mode, the lowest lane that is not up starts connecting if it
    /// waits for nothing else (its backoff timer or its drain starts it otherwise).
    pub(super) fn connect_next_lane(&mut self, cid: ConnId) {
        let c = &self.conns[cid.0 as usize];
        if !Self::lanes_in_order(c) || !c.fanout_ok || c.killed || c.npaths < 2 {
            return;
        }
        if let Some(next) = (1..c.npaths).find(|&i| !c.paths[i].is_up()) {
            self.connect_if_down(cid, next);
        }
    }

    pub(super) fn start_connect(&mut self, cid: ConnId, path: usize) {
        let p = &mut self.conns[cid.0 as usize].paths[path];
        p.state = PathState::Connecting;
        p.epoch = p.epoch.wrapping_add(1);
        let epoch = p.epoch;
        self.events.push_back(Event::Connect {
            conn: cid,
            path,
            epoch,
        });
    }

    pub(super) fn should_reconnect(&self, now: Instant, cid: ConnId, path: usize) -> bool {
        let c = &self.conns[cid.0 as usize];
        if self.shutting_down || c.killed {
            return false;
        }
        // A socket's message waits, or the peer carried application traffic lately: only
        // then is a lost peer redialled on our own (a peer that only pinged, probed or
        // connected is not; it comes back by connecting, or with our next message).
        let sock_queued = c.paths.iter().any(Path::has_sock_queued);
        let wanted = sock_queued || (c.app_traffic && now < c.last_active + CONN_IDLE_LIFETIME);
        match c.kind {
            TransportKind::Loopback => false,
            // Lanes above 0 only once the peer confirmed the handshake: a peer that does not
            // know the number of lanes refuses them, possibly after its TCP acknowledged data
            // sent on them (which would then be lost).
            TransportKind::Tcp if c.is_smaller() => {
                wanted && (path == 0 || (c.fanout_ok && path < c.npaths))
            }
            // The larger side connects only to make the peer connect back, and only when a
            // socket has something to send (pongs wait for the peer to come back).
            TransportKind::Tcp => path == 0 && sock_queued,
            TransportKind::Ib => wanted && path == 0,
        }
    }

    /// `rds_queue_reconnect`: the first attempt at once, then random delays below a bound that
    /// doubles up to the maximum.
    pub(super) fn queue_reconnect(&mut self, now: Instant, cid: ConnId, path: usize) {
        let c = &self.conns[cid.0 as usize];
        let target = if path > 0 && c.kind == TransportKind::Tcp && !c.is_smaller() {
            // The larger side never connects lanes above 0; the peer does, once lane 0 is
            // up. A lane that went down with messages queued (say after lane 0, which had
            // nothing queued then) needs lane 0 to reconnect, unless it is already on its way.
            let p0 = &c.paths[0];
            if p0.state != PathState::Down || p0.reconnect_at.is_some() || p0.drain_epoch.is_some()
            {
                return;
            }
            0
        } else {
            path
        };
        if !self.should_reconnect(now, cid, target) {
            self.drop_pongs_if_gone(cid.0 as usize);
            return;
        }
        let path = target;
        let (min, max) = (self.tun.reconnect_min_delay, self.tun.reconnect_max_delay);
        let p = &mut self.conns[cid.0 as usize].paths[path];
        if p.reconnect_delay.is_zero() {
            p.reconnect_delay = min.max(Duration::from_nanos(1));
            p.reconnect_at = Some(now);
        } else {
            let bound = u64::try_from(p.reconnect_delay.as_nanos()).unwrap_or(u64::MAX);
            let wait = Duration::from_nanos(self.rng.below(bound.max(1)));
            p.reconnect_at = Some(now + wait);
            p.reconnect_delay = (p.reconnect_delay * 2).min(max.max(min));
        }
    }

    /// `rds_connect_path_complete`: the path is up. Returns its new epoch.
    pub(super) fn path_up(&mut self, now: Instant, cid: ConnId, path: usize) -> u32 {
        let ci = cid.0 as usize;
        let c = &mut self.conns[ci];
        let kind = c.kind;
        let p = &mut c.paths[path];
        p.state = PathState::Up;
        p.epoch = p.epoch.wrapping_add(1);
        p.ups += 1;
        p.up_since = Some(now);
        p.tx_off = 0;
        p.acked_off = 0;
        p.adopt_by = None;
        p.reconnect_delay = Duration::ZERO;
        p.reconnect_at = None;
        p.ack_next = 0;
        p.ack_recv = 0;
        p.ack_requested = false;
        p.ack_in_flight = false;
        p.tx_cur = None;
        p.frag.reset();
        p.frag_discard = false;
        let frag_charge = std::mem::take(&mut p.frag_charge);
        p.tx_pending = false;
        // A new connection ends any drain of the previous one (an accepting transport reads
        // the old connection to its end before it reports the new one).
        p.drain_epoch = None;
        // It is checked against the path's sequence, unless it is an old incarnation's
        // (`peer_gen_update`, `carry_rx`).
        if let Some(c) = p.carried_rx.as_mut() {
            c.epoch = None;
        }
        let epoch = p.epoch;
        c.last_active = now;
        self.reasm_release(ci, frag_charge);
        let c = &mut self.conns[ci];
        if kind != TransportKind::Loopback {
            c.map_queued = true;
        }
        if kind.multipath() && path == 0 {
            // The smaller side probes on every new lane-0 connection; the larger side (as the
            // kernel's accepting side) while it does not know the number of lanes. Its probe
            // goes ahead of fresh messages and tells a peer that it restarted (GEN_NUM) before
            // the retransmissions behind it could be taken as old duplicates. The peer fans
            // out only on the pong to its own probe, so this ping does not race lanes.
            let smaller = c.is_smaller();
            if (smaller || c.npaths == 0) && !c.ping_triggered {
                self.queue_probe_ping(cid);
            }
            let c = &mut self.conns[ci];
            if c.npaths == 0 {
                c.hs_deadline = Some(now + HANDSHAKE_TIMEOUT);
            }
            // Lanes above 0 reconnect once the pong to the probe just queued confirms that
            // the peer still knows the number of lanes (it may have restarted).
            let _ = smaller;
        }
        if kind != TransportKind::Loopback {
            self.want_transmit(cid, path);
        }
        epoch
    }

    /// `rds_conn_path_reset` after a shutdown: requeue unacknowledged messages as
    /// RETRANSMITTED (keeping `next_rx_seq`), then reconnect if this side should.
    /// `reason = Some(..)` means the engine decided, so the driver must close the transport.
    pub(super) fn reset_path(
        &mut self,
        now: Instant,
        cid: ConnId,
        path: usize,
        reason: Option<DropReason>,
    ) {
        let ci = cid.0 as usize;
        let (max_p, max_b) = (self.tun.max_unacked_packets, self.tun.max_unacked_bytes);
        let c = &mut self.conns[ci];
        let multipath = c.kind.multipath();
        let kind = c.kind;
        let p = &mut c.paths[path];
        let was = p.state;
        let mut drain = false;
        if let Some(reason) = reason {
            if matches!(was, PathState::Up | PathState::Connecting) {
                self.events.push_back(Event::Disconnect {
                    conn: cid,
                    path,
                    epoch: p.epoch,
                    reason,
                });
                // The connection is read to its end before the path reconnects (see
                // `links`: rules 2 and 3).
                let drains_here = was == PathState::Up || Self::drains_attempt(kind, was);
                if drains_here && reason.drains() {
                    p.drain_epoch = Some(p.epoch);
                    drain = true;
                }
            }
        }
        if was == PathState::Up {
            self.stats.inc(Counter::ConnReset);
            if p.adopt_by.is_some() && p.retrans.front().is_some_and(|m| m.ack_off <= p.acked_off) {
                self.stats.inc(Counter::ConnResetUnadopted);
            }
            // Senders waiting for a congested port of this peer try again: the map can only
            // change through a new connection, which their next attempt starts.
            self.cong_changed = true;
        }
        p.state = PathState::Down;
        p.epoch = p.epoch.wrapping_add(1);
        // A probe's pong answers a probe on the connection it came with; the next lane-0
        // connection runs a new exchange. Resent, a pong would tell a restarted peer that we
        // processed its probe when we did not (and it would fan out before we learnt its
        // generation). Our own probe ping is resent first, as the kernel does: it carries our
        // generation ahead of the retransmissions behind it.
        let stale_pong = |m: &OutMsg| m.sock.is_none() && m.hdr.is_probe_pong();
        let mut rdma_dropped = Vec::new();
        let mut stale_pongs = Vec::new();
        while let Some(mut m) = p.retrans.pop_back() {
            if stale_pong(&m) {
                stale_pongs.push(m);
                continue;
            }
            if m.rdma.is_some() {
                // RDMA operations are never retransmitted (`rds_send_xmit`).
                rdma_dropped.push(m);
                continue;
            }
            m.retransmitted = true;
            m.ack_required = true;
            p.send_q.push_front(m);
        }
        if p.send_q.iter().any(stale_pong) {
            let mut keep = VecDeque::with_capacity(p.send_q.len());
            for m in p.send_q.drain(..) {
                if stale_pong(&m) {
                    stale_pongs.push(m);
                } else {
                    keep.push_back(m);
                }
            }
            p.send_q = keep;
        }
        p.tx_cur = None;
        p.frag.reset();
        p.frag_discard = false;
        let frag_charge = std::mem::take(&mut p.frag_charge);
        p.tx_off = 0;
        p.acked_off = 0;
        p.adopt_by = None;
        p.unacked_packets = max_p;
        p.unacked_bytes = max_b;
        p.ack_next = 0;
        p.ack_recv = 0;
        p.ack_requested = false;
        p.ack_in_flight = false;
        p.tx_pending = false;
        if multipath && path == 0 {
            // The next connection gets a fresh probe too (behind the retransmissions): a
            // resent one may be dropped by the peer as a duplicate and then goes unanswered.
            c.ping_triggered = false;
            c.fanout_ok = false;
        }
        let reprobe = multipath && path > 0 && c.is_smaller() && c.fanout_ok;
        if reprobe {
            // A lane dropped: before any lane reconnects, ask again whether the peer at the
            // other end of lane 0 knows the lanes. If the peer restarted, lane 0 is stale,
            // no pong comes, and the lanes wait for lane 0 to reconnect; otherwise a new
            // peer would refuse them after its TCP acknowledged data sent on them.
            c.fanout_ok = false;
        }
        if c.npaths > 0 && path >= c.npaths {
            self.rehome_lane(cid, path);
        }
        if reprobe && !self.conns[ci].ping_triggered && self.conns[ci].paths[0].is_up() {
            self.queue_probe_ping(cid);
            self.want_transmit(cid, 0);
        }
        self.reasm_release(ci, frag_charge);
        if was == PathState::Up {
            self.conns[ci].last_active = now;
        }
        for m in stale_pongs {
            self.release(ci, &m);
        }
        for m in rdma_dropped {
            self.release(ci, &m);
            if let Some(op) = &m.rdma {
                self.rdma_complete(op, RdmaStatus::Dropped);
            }
        }
        if !drain && !self.shutting_down && reason != Some(DropReason::Kill) {
            self.queue_reconnect(now, cid, path);
        }
    }

    /// Moves the unsent messages of a lane that is no longer in use to the lane its sockets
    /// hash to now.
    pub(super) fn rehome_lane(&mut self, cid: ConnId, lane: usize) {
        let c = &mut self.conns[cid.0 as usize];
        let n = c.npaths.max(1);
        let to = lane & (n - 1);
        if to == lane || c.paths[lane].send_q.is_empty() {
            return;
        }
        let moved: Vec<OutMsg> = c.paths[lane].send_q.drain(..).collect();
        c.paths[to].send_q.extend(moved);
        if c.paths[to].is_up() {
            self.want_transmit(cid, to);
        } else {
            self.want_connect(cid, to);
        }
    }
}
