//! The contract between the node's I/O round and a transport ([`Transport`]): RDS/TCP
//! (`tcp/`) and RDS/IB (`ib/`) implement it, and `round.rs` calls them through it without
//! knowing which one it holds, routing the engine's transport work by
//! [`TransportKind`] once.
//!
//! A round of the I/O thread (`Inner::io_round_with`) calls, with the transport's lock held:
//! 1. [`Transport::handle_event`] for each epoll event whose token the transport owns
//!    ([`Transport::owns_token`]), and [`Transport::timers`], *without* the engine lock: what
//!    the sockets say is kept as the transport's own reports;
//! 2. with the engine lock: [`Transport::limits`] (the engine's bounds for this round), then
//!    [`Transport::apply`]: the transport applies its reports to the engine itself, in its own
//!    folder, and carries out the engine's answers on its sockets (the round never reads a
//!    report); then the engine's work, routed by kind: [`Transport::connect`],
//!    [`Transport::disconnect`], [`Transport::transmit`], [`Transport::adopt`],
//!    [`Transport::refuse`];
//! 3. [`Transport::flush`] outside the engine lock (writes that may take time), then
//!    [`Transport::apply`] again for what the writes reported, and [`Transport::transmit`]
//!    for the lanes that ran low.
//!
//! An application thread transmits itself (`Inner::after_app_call_inline`) on a lane the
//! transport calls idle ([`Transport::lane_idle`]), with the same calls.
//!
//! Before a thread that runs rounds sleeps (the I/O thread, or an application thread leading
//! the I/O while it waits, `lead.rs`), `Inner::poll_before_sleep` asks each transport to poll
//! what it will not be woken for ([`Transport::poll_before_sleep`]: RDS/IB's completion queues
//! not armed); what it finds is applied and its transport work done as after an application
//! call, and the thread does not sleep yet.
//!
//! RDS/TCP reads and writes sockets in steps 1 and 3 and applies in step 2. RDS/IB needs the
//! engine's answer as it handles a connection manager or completion event (an accept, a
//! connection going up, a fragment refused), so step 1 only notes its events and step 2
//! handles them, each handler's reports applied as it goes; its posts never block, so it has
//! nothing to flush. The IB memory registrations (`RdmaUnuse`) are IB's alone and go to it
//! directly.

use crate::proto::{ConnId, DropReason, HeldEnd, LinkId, PathState, Stack, TransportKind};
use crate::time::Instant;

/// What the node's I/O round asks of a transport (module docs: when each is called, and with
/// which lock). Every method runs with the transport's own lock held.
pub(crate) trait Transport {
    /// The engine connections this transport carries.
    fn kind(&self) -> TransportKind;

    /// Whether the epoll `token` is one of this transport's (its listeners, connections or
    /// event channels).
    fn owns_token(&self, token: u64) -> bool;

    /// An epoll event for one of its tokens, without the engine lock: what it learns waits
    /// for [`Transport::apply`].
    fn handle_event(&mut self, token: u64, bits: u32, now: Instant);

    /// Runs the transport's own due timers, without the engine lock (reports as
    /// [`Transport::handle_event`]).
    fn timers(&mut self, now: Instant) {
        let _ = now;
    }

    /// The earliest of the transport's own timers.
    fn next_timer(&self) -> Option<Instant> {
        None
    }

    /// Once a round, with the engine lock, before [`Transport::apply`]: the bounds the
    /// engine sets (TCP: partial messages stalled past `partial_timeout` are closed, and what
    /// messages in progress may hold in all).
    fn limits(&mut self, stack: &Stack, now: Instant) {
        let _ = (stack, now);
    }

    /// Applies what the transport learnt to the engine, in order, and carries out the
    /// engine's answers. Returns how many frames it handed to the engine.
    fn apply(&mut self, stack: &mut Stack, now: Instant) -> u64;

    /// Whether reports wait for [`Transport::apply`].
    fn has_reports(&self) -> bool;

    /// [`crate::proto::Event::Connect`]: open a connection for `(conn, path)` if the path
    /// still connects with `epoch`, and report its outcome to the engine (now, or when it
    /// applies later reports). What a path that moved on needs is the transport's rule.
    fn connect(&mut self, stack: &mut Stack, conn: ConnId, path: usize, epoch: u32, now: Instant);

    /// [`crate::proto::Event::Disconnect`]: close the path's connection of `epoch` (read to
    /// its end first when [`DropReason::drains`]; its end is reported then).
    fn disconnect(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
        now: Instant,
    );

    /// [`crate::proto::Event::Transmit`]: take the path's frames from the engine as far as
    /// the transport has room, and send or queue them.
    fn transmit(&mut self, stack: &mut Stack, conn: ConnId, path: usize, now: Instant);

    /// Whether a sending application thread may transmit `(conn, path)` itself now: the lane
    /// is up and nothing of it waits to be written, and unless `open` no more than its last
    /// write is unacknowledged (TCP); posting never blocks (IB).
    fn lane_idle(&mut self, conn: ConnId, path: usize, open: bool) -> bool;

    /// Writes what waits to be written, outside the engine lock. Returns the lanes that ran
    /// low and take more frames; what the writes reported waits for [`Transport::apply`].
    fn flush(&mut self, now: Instant) -> Vec<(ConnId, usize)> {
        let _ = now;
        Vec::new()
    }

    /// Whether output or reads wait for the next round.
    fn has_pending(&self) -> bool {
        false
    }

    /// Whether [`Transport::poll_before_sleep`] has anything to poll (a cheap check, so
    /// that a thread going to sleep takes the engine lock only when it does).
    fn polls_before_sleep(&self) -> bool {
        false
    }

    /// Before the thread that runs the node's I/O sleeps (the I/O thread in `epoll_wait`, an
    /// application thread leading the I/O while it waits for its socket), with the engine
    /// lock: polls what the transport expects but will not be woken for, and applies what it
    /// finds as [`Transport::apply`] does. RDS/IB: its completion queues left unarmed after
    /// their last event are polled first and armed only when empty (and polled once more).
    /// Returns whether it found anything: then the thread looks at its work again and calls
    /// this again before it sleeps. The default (RDS/TCP: its sockets wake the epoll set
    /// themselves) polls nothing.
    fn poll_before_sleep(&mut self, stack: &mut Stack, now: Instant) -> bool {
        let _ = (stack, now);
        false
    }

    /// [`crate::proto::Event::Adopt`]: the held accepted connection `link` carries `(conn,
    /// path, epoch)` now. Only a transport whose accepted connections the engine holds
    /// ([`crate::proto::Incoming::Hold`], RDS/TCP alone: [`Stack::link_accepted`]) gets one;
    /// for any other it is a bug, and the path is reported ended so that it reconnects.
    fn adopt(
        &mut self,
        stack: &mut Stack,
        link: LinkId,
        conn: ConnId,
        path: usize,
        epoch: u32,
        now: Instant,
    ) {
        debug_assert!(
            false,
            "{:?} holds no accepted connection ({link:?})",
            self.kind()
        );
        stack.handle_disconnected(now, conn, path, epoch);
    }

    /// [`crate::proto::Event::Refuse`]: reset the held accepted connection `link` unread. As
    /// [`Transport::adopt`], only for a transport whose connections the engine holds.
    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        debug_assert!(
            false,
            "{:?} holds no accepted connection ({link:?}, {why:?})",
            self.kind()
        );
    }
}

/// Whether the engine still connects `(conn, path)` with `epoch` (a connect it moved on from
/// before it reached the transport is not current).
pub(crate) fn connecting(stack: &Stack, conn: ConnId, path: usize, epoch: u32) -> bool {
    stack.path_state(conn, path) == (PathState::Connecting, epoch)
}

/// The transport of a kind the node does not run (RDS/IB without rdma-core or a device):
/// every connect fails at once, as the engine hears from a transport that cannot reach the
/// peer; anything else finds no connection to act on.
#[derive(Debug)]
pub(crate) struct Absent(pub TransportKind);

impl Transport for Absent {
    fn kind(&self) -> TransportKind {
        self.0
    }

    fn owns_token(&self, _token: u64) -> bool {
        false
    }

    fn handle_event(&mut self, _token: u64, _bits: u32, _now: Instant) {}

    fn apply(&mut self, _stack: &mut Stack, _now: Instant) -> u64 {
        0
    }

    fn has_reports(&self) -> bool {
        false
    }

    fn connect(&mut self, stack: &mut Stack, conn: ConnId, path: usize, epoch: u32, now: Instant) {
        stack.handle_connect_failed(now, conn, path, epoch);
    }

    fn disconnect(&mut self, _: ConnId, _: usize, _: u32, _: DropReason, _: Instant) {}

    fn transmit(&mut self, _stack: &mut Stack, _conn: ConnId, _path: usize, _now: Instant) {}

    fn lane_idle(&mut self, _conn: ConnId, _path: usize, _open: bool) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    use super::*;
    use crate::proto::Event;
    use crate::tunables::Tunables;

    /// An engine (no sockets, no traffic) with one RDS/IB connection whose path 0 has just
    /// been asked to connect: the stack, the connection and the attempt's epoch.
    fn ib_connecting() -> (Stack, ConnId, u32) {
        let (laddr, faddr) = (
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        );
        let mut stack = Stack::new(Tunables::default(), 3);
        stack.add_local_addr(laddr, false, true);
        let sock = stack.socket();
        stack
            .bind(sock, SocketAddr::new(laddr, 4000))
            .expect("bind");
        let to = SocketAddr::new(faddr, 5000);
        let msg = bytes::Bytes::from_static(b"over ib");
        stack
            .send(Instant::ZERO, sock, Some(to), msg, true)
            .expect("send");
        while let Some(ev) = stack.poll_event() {
            if let Event::Connect { conn, path, epoch } = ev {
                assert_eq!(path, 0);
                assert_eq!(stack.conn_addrs(conn).2, TransportKind::Ib);
                return (stack, conn, epoch);
            }
        }
        panic!("the send asked for no connect");
    }

    /// A node without RDS/IB answers each IB connect with a failure at once (the engine
    /// backs off and tries again), as it did before the contract; it owns no token, has
    /// nothing to apply or to poll before sleeping, and never lets a sender transmit itself.
    #[test]
    fn a_node_without_ib_fails_each_ib_connect_at_once() {
        let (mut stack, conn, epoch) = ib_connecting();
        assert!(connecting(&stack, conn, 0, epoch));
        let mut t = Absent(TransportKind::Ib);
        assert_eq!(t.kind(), TransportKind::Ib);
        t.connect(&mut stack, conn, 0, epoch, Instant::ZERO);
        assert_eq!(stack.path_state(conn, 0), (PathState::Down, epoch));
        assert!(!connecting(&stack, conn, 0, epoch));
        assert!(!t.owns_token(0) && !t.owns_token(3 << 32) && !t.owns_token(u64::MAX));
        assert!(!t.has_reports() && !t.has_pending() && !t.lane_idle(conn, 0, true));
        assert_eq!(t.apply(&mut stack, Instant::ZERO), 0);
        assert!(t.flush(Instant::ZERO).is_empty());
        assert_eq!(t.next_timer(), None);
        // Nothing to poll before sleeping (the contract's default, RDS/TCP's too).
        assert!(!t.polls_before_sleep());
        assert!(!t.poll_before_sleep(&mut stack, Instant::ZERO));
    }

    /// `connecting` is true only for the path's current attempt.
    #[test]
    fn only_the_current_attempt_is_connecting() {
        let (stack, conn, epoch) = ib_connecting();
        assert!(connecting(&stack, conn, 0, epoch));
        assert!(!connecting(&stack, conn, 0, epoch.wrapping_add(1)));
        assert!(!connecting(&stack, conn, 1, epoch));
    }

    /// A held connection adopted on a transport that holds none is a bug (a debug build
    /// stops there); a release build reports the path ended, so that it connects again.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "holds no accepted connection")
    )]
    fn an_adopt_on_a_transport_that_holds_none_ends_the_path() {
        let (mut stack, conn, epoch) = ib_connecting();
        let mut t = Absent(TransportKind::Ib);
        t.adopt(&mut stack, LinkId(1), conn, 0, epoch, Instant::ZERO);
        assert_eq!(stack.path_state(conn, 0), (PathState::Down, epoch));
    }
}
