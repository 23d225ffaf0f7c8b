//! The RDS/TCP transport (`net/rds/tcp*.c`): one listener on `addr:16385` per local address,
//! outgoing connections bound to the local address (lane `i` from a source port `≡ i mod 8`),
//! the byte stream of `[header][payload]` frames, and "acknowledged" meaning the peer's TCP
//! acknowledged a message's last byte (from `SIOCOUTQ`).
//!
//! This module only moves bytes: sequence numbers, retransmission and who connects are the
//! engine's decisions. It runs on the node's I/O thread.
//!
//! One job per file: this one holds the [`Tcp`] state, the [`TcpOut`] reports, the dispatch
//! of readiness events and the transport contract ([`Transport`], `node/transport.rs`) that
//! the node's I/O round calls; `apply.rs` applies the reports to the engine
//! ([`Tcp::apply_reports`]: the reports stay in this folder, and the round never reads one);
//! `admission.rs` the listeners, the caps checked at accept,
//! the listener pause and the sockets of held connections; `lifecycle.rs` a connection's
//! life on its lane (connect, completion, drain, close); `bytes.rs` the byte path (read,
//! pull, flush, acknowledgement polling, timers); `observe.rs` what `rds-info -T` and the tap
//! see.
//!
//! Resource limits (a remote peer cannot grow the node's descriptor table):
//! - At most [`TCP_CONNS_PER_ADDR`] (32) connections per remote address and [`TCP_CONNS_MAX`]
//!   (4096, or half the soft `RLIMIT_NOFILE` read at start if that is less, at least
//!   [`TCP_CONNS_MIN`]) per node, counting accepted, outgoing, draining and waiting ones. A
//!   connection accepted beyond either cap is reset at once (`tcp_accept_addr_limit`,
//!   `tcp_accept_node_limit`); the node's own outgoing connections are never refused.
//! - Accepted connections waiting, unread, for a lane are held by the engine's rules
//!   ([`crate::proto::stack::HELD_PER_ADDR`] per remote address,
//!   [`crate::proto::stack::HELD_MAX`] per node, at most `STASH_MAX`); this module keeps
//!   their sockets and resets the ones the engine gives up (`tcp_wait_addr_evicted`,
//!   `tcp_wait_node_evicted`, `tcp_wait_expired`).
//! - When `accept` fails for want of descriptors (EMFILE, ENFILE; `tcp_accept_emfile`), the
//!   pending connection stays in the backlog: its peer's TCP already acknowledged what it
//!   sent, and RDS/TCP counts that as delivered, so resetting it would lose messages. After
//!   any `accept` failure other than a transient one the
//!   listener leaves the event set for [`LISTEN_PAUSE_MIN`] (100 ms), doubling up to
//!   [`LISTEN_PAUSE_MAX`] (1 s) while failures go on (`tcp_listen_paused`), so the I/O thread
//!   sleeps instead of spinning on a level-triggered listener; a successful `accept` resets
//!   the pause.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use ::bytes::{Bytes, BytesMut};

use super::tap::{Dir, Tap, TxFrames};
use super::transport::Transport;
use crate::buf;
use crate::proto::{canonical, AcceptError, ConnId, DropReason, Frame, HeldEnd, LinkId};
use crate::proto::{Stack, StreamParser, TransportKind};
use crate::stats::{TcpCounter, TcpStats};
use crate::sys::{self, Epoll, EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
use crate::time::Instant;
use crate::tunables::Tunables;
use crate::wire::{MAX_MSG_SIZE, MPATH_WORKERS, RDS_TCP_PORT};

pub use crate::info::TcpSockInfo;

mod admission;
mod apply;
mod bytes;
mod lifecycle;
mod observe;

use admission::Listener;

pub(crate) const TOKEN_WAKE: u64 = 0;
const TOKEN_LISTENER: u64 = 1 << 32;
const TOKEN_CONN: u64 = 2 << 32;
const TOKEN_MASK: u64 = (1 << 32) - 1;

/// Stop pulling frames from the engine once this many bytes wait to be written.
const OUT_HIGH: usize = 4 << 20;
/// Bytes read per `read(2)`.
const READ_CHUNK: usize = 256 << 10;
/// Payload remainders at least this long are read straight into the message's buffer.
const DIRECT_MIN: usize = 64 << 10;
/// A read that returned less than asked ends the wake-up's reading when fewer bytes than
/// this were read in it.
const SHORT_READ_STOP: usize = 16 << 10;
/// Most bytes read from one connection per readiness event before others get a turn.
const READ_BUDGET: usize = 4 << 20;
/// The longest frame list a read's next read reuses ([`Tcp::spare_frames`]).
const SPARE_FRAMES_MAX: usize = 1024;
/// Buffers (headers and payloads) one `writev` takes at most.
const IOV_BATCH: usize = 512;
/// Up to this many, their `iovec`s are on the stack (no allocation per write).
const IOV_STACK: usize = 32;
/// How often the connections are looked at for a message in progress that stalled
/// (`net.rds.partial_timeout_ms`, 30 s by default): such a connection is closed at most this
/// late.
const PARTIAL_SCAN: Duration = Duration::from_millis(10);
/// How long a half-closed connection may take to deliver the peer's remaining data.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the timed acknowledgement polls wait for a thread that waits for room and asks
/// itself ([`Tcp::defer_ack_polls`]): its longest sleep between asks (`lead.rs`).
pub(crate) const ACK_DEFER_MAX: Duration = Duration::from_millis(2);
/// Unacknowledged bytes from which a write asks TCP for acknowledgements at once.
const ACK_ASK_AFTER_WRITE: u64 = 64 << 10;
/// First and last interval of the acknowledgement poll while bytes are unacknowledged.
const ACK_POLL_MIN: Duration = Duration::from_micros(50);
const ACK_POLL_MAX: Duration = Duration::from_millis(20);
/// Unacknowledged bytes (as last learnt) up to which a read on a request/response lane is
/// taken as the answer to our last write instead of asking TCP ([`TcpConn::answered`]).
/// What waits for TCP's count holds the engine's bounds on unacknowledged messages (a
/// connection's pongs, a socket's send buffer): small, so that no bound is met because of it.
const ANSWERED_MAX: u64 = 4 << 10;
// Pongs (a header each) that wait for TCP's count stay well under the engine's cap per
// connection, past which it drops pings unanswered.
const _: () = assert!(
    ANSWERED_MAX / (crate::wire::HEADER_LEN as u64)
        < crate::proto::stack::PONG_QUEUE_MAX as u64 / 2
);
/// How long after the first read taken as an answer the acknowledgement poll comes, asking
/// TCP for the count that the engine frees messages on (no later: answers do not move it).
const ACK_POLL_ANSWERED: Duration = Duration::from_millis(1);

/// Most TCP connections with one remote address (accepted, outgoing, draining and waiting): an
/// RDS peer uses up to 8 lanes; the rest leaves room for a reconnect whose new lanes overlap
/// old connections still draining and others waiting for a slot.
pub(crate) const TCP_CONNS_PER_ADDR: usize = 32;
/// Most TCP connections of a node; also at most half the soft `RLIMIT_NOFILE` at start, so
/// that the control socket, client sockets and files keep descriptors.
pub(crate) const TCP_CONNS_MAX: usize = 4096;
/// The node's connection cap is never set below this, whatever `RLIMIT_NOFILE` says.
pub(crate) const TCP_CONNS_MIN: usize = 16;
/// First pause of a listener whose `accept` failed (EMFILE, ENFILE, ENOBUFS, ...).
pub(crate) const LISTEN_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause of a listener while its `accept` keeps failing.
pub(crate) const LISTEN_PAUSE_MAX: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    Up,
    Draining(Instant),
}

#[derive(Debug)]
struct TcpConn {
    /// Unique per connection: slots are reused, and an output queued for a slot's previous
    /// connection must not act on the next one.
    serial: u64,
    stream: TcpStream,
    conn: ConnId,
    path: usize,
    epoch: u32,
    state: State,
    parser: StreamParser,
    out: VecDeque<Bytes>,
    out_bytes: usize,
    /// Bytes written to the socket since it was created.
    written: u64,
    /// `written` before the last write that wrote something ([`Transport::lane_idle`]).
    written_before: u64,
    /// `written` before the write before that one.
    written_before2: u64,
    /// Highest acknowledged count reported to the engine.
    acked: u64,
    /// `written` when the peer's bytes last came on a request/response lane: they are taken
    /// as the answer to our last write, so TCP acknowledged it on the way (`read`). For
    /// [`Transport::lane_idle`] only; never reported to the engine, which frees messages on
    /// `acked` alone.
    answered: u64,
    /// When a read was first taken as an answer since TCP was last asked.
    answered_since: Option<Instant>,
    /// The engine may hold more frames (pulling stopped at the high mark).
    more: bool,
    epoll_out: bool,
    local: SocketAddr,
    peer: SocketAddr,
    /// The remote address the connection is counted under (per-address cap).
    faddr_key: IpAddr,
    ack_poll: Option<(Instant, Duration)>,
    /// Sequence of the last byte sent / expected una / seen una for info (`rds_info_tcp_socket`).
    last_seen_una: u32,
    /// What the parser's message in progress held when last reported to the engine.
    held_reported: usize,
    /// While a message is partly received: when its last bytes came.
    partial_since: Option<Instant>,
    /// Its message in progress was refused: nothing more is read from it.
    refused: bool,
}

impl TcpConn {
    /// A connection just accepted (`Up`) or being made (`Connecting`, which waits for
    /// writability), counted under the remote address `faddr_key`.
    fn new(
        serial: u64,
        stream: TcpStream,
        (conn, path, epoch): (ConnId, usize, u32),
        state: State,
        local: SocketAddr,
        peer: SocketAddr,
        faddr_key: IpAddr,
    ) -> Self {
        TcpConn {
            serial,
            stream,
            conn,
            path,
            epoch,
            state,
            parser: StreamParser::new(MAX_MSG_SIZE as u32),
            out: VecDeque::new(),
            out_bytes: 0,
            written: 0,
            written_before: 0,
            written_before2: 0,
            acked: 0,
            answered: 0,
            answered_since: None,
            more: false,
            epoll_out: state == State::Connecting,
            local,
            peer,
            faddr_key,
            ack_poll: None,
            last_seen_una: 0,
            held_reported: 0,
            partial_since: None,
            refused: false,
        }
    }

    /// What this side knows or takes to be acknowledged: TCP's count as last asked, or the
    /// last write that a read took an answer for ([`TcpConn::answered`]).
    fn known_acked(&self) -> u64 {
        self.acked.max(self.answered)
    }

    /// Whether bytes just read on this lane are taken as the answer to our last write: it
    /// is the only one not known acknowledged (a request/response lane), and little has
    /// waited for TCP's count for a short while only (the engine frees sent messages on that
    /// count alone): [`ANSWERED_MAX`], [`ACK_POLL_ANSWERED`].
    fn takes_answer(&self, now: Instant) -> bool {
        self.state == State::Up
            && self.written > self.acked
            && self.written - self.acked <= ANSWERED_MAX
            && self.known_acked() >= self.written_before
            && self
                .answered_since
                .is_none_or(|t| now < t + ACK_POLL_ANSWERED)
    }
}

/// Counts a connection attempt that the peer refused (nothing listens on its RDS port).
fn count_refused(stats: &TcpStats, e: &io::Error) {
    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
        stats.inc(TcpCounter::TcpConnectRefused);
    }
}

/// What the I/O thread learnt from the sockets, to be applied to the engine.
#[derive(Debug)]
pub(crate) enum TcpOut {
    Accepted {
        stream: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
    },
    /// A connection attempt completed; `(slot, serial)` (the serial tells a reused slot).
    Connected(usize, u64),
    /// A connection attempt failed.
    ConnectFailed(usize, u64),
    Frames {
        conn: ConnId,
        path: usize,
        epoch: u32,
        frames: Vec<Frame>,
    },
    StreamError {
        conn: ConnId,
        path: usize,
        epoch: u32,
        err: crate::proto::StreamError,
    },
    /// The connection ended.
    Closed(usize, u64),
    /// The message in progress on the connection now holds `held` bytes.
    Reassembly {
        conn: ConnId,
        path: usize,
        epoch: u32,
        held: usize,
    },
    /// The message in progress would have passed what the node can hold: dropped, and the
    /// connection closed (a [`TcpOut::Closed`] follows).
    ReassemblyRefused,
    Acked {
        conn: ConnId,
        path: usize,
        epoch: u32,
        acked: u64,
    },
}

/// The transport state, owned by the I/O thread.
#[derive(Debug)]
pub(crate) struct Tcp {
    pub epoll: Arc<Epoll>,
    listeners: Vec<Listener>,
    conns: Vec<Option<TcpConn>>,
    /// Live entries of `conns`.
    live: usize,
    /// Live entries of `conns` per remote address (`faddr_key`).
    per_addr: HashMap<IpAddr, usize>,
    /// The node's connection cap ([`TCP_CONNS_MAX`] or less, from `RLIMIT_NOFILE`).
    conn_cap: usize,
    /// The current listener pause after failed accepts (zero: none).
    listen_pause: Duration,
    free: Vec<usize>,
    next_serial: u64,
    by_path: HashMap<(ConnId, usize), usize>,
    hdr_arena: BytesMut,
    /// Frames of the current transmit pass for the trace tap (recorded together).
    tap_tx: TxFrames,
    pending_flush: Vec<usize>,
    pub stats: Arc<TcpStats>,
    port_rng: crate::proto::Rng,
    /// Accepted connections the engine holds unread ([`crate::proto::Incoming::Hold`]).
    held: HashMap<LinkId, HeldConn>,
    next_link: u64,
    /// Test hook: where outgoing connections to a peer address go instead of `peer:16385`.
    routes: HashMap<IpAddr, SocketAddr>,
    /// Bytes the parsers' messages in progress hold, in all.
    partial_total: usize,
    /// What they may hold in all (the engine's [`Stack::reasm_room`], set every round).
    partial_cap: usize,
    /// What the sockets said since the last [`Transport::apply`], in order.
    outs: Vec<TcpOut>,
    /// The node's trace tap.
    tap: Arc<Tap>,
    /// The read buffer (`bytes.rs`): reused while no payload slices it, so that a read of
    /// small messages costs no buffer of its own.
    rbuf: Vec<u8>,
    /// The list a read gathers its frames in, handed back empty by [`Tcp::apply_reports`]
    /// (a list per read, grown frame by frame, was several allocations per batch); kept only
    /// while it is at most [`SPARE_FRAMES_MAX`] long.
    spare_frames: Vec<Frame>,
    /// When [`Tcp::expire_partials`] last looked at the connections.
    partials_scanned: Option<Instant>,
    /// The last round that left the timed acknowledgement polls to a thread waiting for its
    /// send buffer's room, which asks itself ([`Tcp::acks_now`]); `None`: the I/O thread's
    /// rounds run them ([`Tcp::defer_ack_polls`]).
    ack_polls_deferred: Option<Instant>,
}

/// An accepted connection the engine holds, unread, until it has a lane for it.
#[derive(Debug)]
pub(crate) struct HeldConn {
    pub stream: TcpStream,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

/// A listener's bind error: when the port is taken and the kernel's RDS `module` (`rds_tcp`
/// for 16385, `rds_rdma` for the RDMA CM port) is loaded, one line naming the module and what
/// to do, of kind `AddrInUse`; any other error as it came.
pub(crate) fn port_taken(e: io::Error, at: SocketAddr, module: &str) -> io::Error {
    let held = e.kind() == io::ErrorKind::AddrInUse
        && std::path::Path::new("/sys/module").join(module).exists();
    if !held {
        return e;
    }
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "port {} on {} is held by the kernel's RDS ({module} module is loaded): use the \
             kernel's RDS (--stack kernel or auto), or unload it (modprobe -r {module}) to run \
             a node of ours on this address",
            at.port(),
            at.ip()
        ),
    )
}

impl Tcp {
    pub(crate) fn new(
        epoll: Arc<Epoll>,
        stats: Arc<TcpStats>,
        tap: Arc<Tap>,
        seed: u64,
    ) -> io::Result<Self> {
        Ok(Tcp {
            epoll,
            listeners: Vec::new(),
            conns: Vec::new(),
            live: 0,
            per_addr: HashMap::new(),
            conn_cap: conn_cap_for(nofile_soft()),
            listen_pause: Duration::ZERO,
            free: Vec::new(),
            next_serial: 0,
            by_path: HashMap::new(),
            hdr_arena: BytesMut::new(),
            tap_tx: TxFrames::default(),
            pending_flush: Vec::new(),
            stats,
            port_rng: crate::proto::Rng::new(seed),
            held: HashMap::new(),
            next_link: 0,
            routes: HashMap::new(),
            partial_total: 0,
            partial_cap: usize::MAX,
            outs: Vec::new(),
            tap,
            rbuf: Vec::new(),
            spare_frames: Vec::new(),
            partials_scanned: None,
            ack_polls_deferred: None,
        })
    }

    /// Sends outgoing connections to `faddr` to `via` instead (`None`: back to `faddr:16385`).
    pub(crate) fn set_route(&mut self, faddr: IpAddr, via: Option<SocketAddr>) {
        match via {
            Some(v) => self.routes.insert(faddr, v),
            None => self.routes.remove(&faddr),
        };
    }

    fn insert(&mut self, c: TcpConn) -> usize {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        *self.per_addr.entry(c.faddr_key).or_insert(0) += 1;
        self.live += 1;
        self.conns[idx] = Some(c);
        idx
    }

    fn remove(&mut self, idx: usize) -> Option<TcpConn> {
        let c = self.conns.get_mut(idx)?.take()?;
        self.live -= 1;
        self.partial_total -= c.held_reported;
        if let Some(n) = self.per_addr.get_mut(&c.faddr_key) {
            *n -= 1;
            if *n == 0 {
                self.per_addr.remove(&c.faddr_key);
            }
        }
        let _ = self.epoll.delete(c.stream.as_raw_fd());
        if self.by_path.get(&(c.conn, c.path)) == Some(&idx) {
            self.by_path.remove(&(c.conn, c.path));
        }
        self.free.push(idx);
        Some(c)
    }

    /// Handles one readiness event; results go to `out`.
    fn event(&mut self, token: u64, bits: u32, now: Instant, out: &mut Vec<TcpOut>) {
        if token & !TOKEN_MASK == TOKEN_LISTENER {
            self.accept_all((token & TOKEN_MASK) as usize, now, out);
            return;
        }
        if token & !TOKEN_MASK != TOKEN_CONN {
            return;
        }
        let idx = (token & TOKEN_MASK) as usize;
        let Some(c) = self.conns.get(idx).and_then(Option::as_ref) else {
            return;
        };
        if c.state == State::Connecting {
            if bits & (EPOLLOUT | EPOLLERR | EPOLLHUP) != 0 {
                match sys::take_error(c.stream.as_raw_fd()) {
                    // An event collected before another thread's round reused this slot for
                    // a connect still in progress (no peer yet): not this connection's.
                    Ok(None)
                        if bits & (EPOLLERR | EPOLLHUP) == 0 && c.stream.peer_addr().is_err() => {}
                    Ok(None) if bits & EPOLLERR == 0 => out.push(TcpOut::Connected(idx, c.serial)),
                    // The attempt completed, the peer wrote to it and then reset it, all
                    // before this event: our TCP acknowledged what it holds, so it is read
                    // (the engine answers as for any completion; the read then meets the
                    // end), never closed unread.
                    _ if sys::inq(c.stream.as_raw_fd()).is_ok_and(|n| n > 0) => {
                        out.push(TcpOut::Connected(idx, c.serial));
                    }
                    r => {
                        if let Ok(Some(e)) = r {
                            count_refused(&self.stats, &e);
                        }
                        out.push(TcpOut::ConnectFailed(idx, c.serial));
                    }
                }
            }
            return;
        }
        if bits & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR) != 0 {
            self.stats.inc(TcpCounter::TcpDataReadyCalls);
            self.read(idx, now, out);
        }
        if bits & EPOLLOUT != 0 {
            self.stats.inc(TcpCounter::TcpWriteSpaceCalls);
            self.pending_flush.push(idx);
        }
    }

    /// Closes everything (node shutdown).
    pub(crate) fn close_all(&mut self) {
        for idx in 0..self.conns.len() {
            self.close_now(idx, false);
        }
        for l in self.listeners.drain(..) {
            let _ = self.epoll.delete(l.sock.as_raw_fd());
        }
        for (_, h) in self.held.drain() {
            reset(h.stream);
        }
    }

    /// Number of live transport connections (tests, info).
    pub(crate) fn len(&self) -> usize {
        self.conns.iter().flatten().count()
    }
}

/// RDS/TCP's side of the node's transport contract: sockets are read and written without the
/// engine lock ([`TcpOut`] reports kept in `outs`), and [`Tcp::apply_reports`] applies them.
impl Transport for Tcp {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn owns_token(&self, token: u64) -> bool {
        matches!(token & !TOKEN_MASK, TOKEN_LISTENER | TOKEN_CONN)
    }

    fn handle_event(&mut self, token: u64, bits: u32, now: Instant) {
        self.with_outs(|t, outs| t.event(token, bits, now, outs));
    }

    fn timers(&mut self, now: Instant) {
        self.with_outs(|t, outs| t.due_timers(now, outs));
    }

    fn next_timer(&self) -> Option<Instant> {
        self.earliest_timer()
    }

    fn limits(&mut self, stack: &Stack, now: Instant) {
        let stalled = stack.tunables().partial_timeout;
        self.with_outs(|t, outs| t.expire_partials(now, stalled, outs));
        self.set_partial_cap(stack.reasm_room());
    }

    fn apply(&mut self, stack: &mut Stack, now: Instant) -> u64 {
        self.with_outs(|t, outs| t.apply_reports(stack, outs, now))
    }

    fn has_reports(&self) -> bool {
        !self.outs.is_empty()
    }

    fn connect(&mut self, stack: &mut Stack, conn: ConnId, path: usize, epoch: u32, now: Instant) {
        self.connect_path(stack, conn, path, epoch, now);
    }

    fn disconnect(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
        now: Instant,
    ) {
        self.drop_path(conn, path, epoch, reason, now);
    }

    fn transmit(&mut self, stack: &mut Stack, conn: ConnId, path: usize, now: Instant) {
        self.pull(stack, conn, path, now);
    }

    /// An established lane with nothing waiting to be written whose peer's TCP acknowledged
    /// everything but, at most, the last write: a request/response lane, where writing a
    /// message at once from the sending thread saves a wakeup. A lane with more in flight is
    /// streaming (a burst of messages: its first two go out at once, the rest wait for the
    /// I/O thread, which batches them into one write). When the last poll left exactly the
    /// last two writes unacknowledged, TCP is asked again (one `SIOCOUTQ`); further behind,
    /// the lane is taken as streaming without asking (asking there cost deep pipelines a
    /// system call per message for a "no"), and the I/O thread's poll catches up.
    ///
    /// Requiring everything acknowledged (as before) failed the usual request/response
    /// pattern of `rds-stress`: each side's messages ride the lane its own port hashes to, so
    /// an answer follows a request on the same lane before the peer read the request, and the
    /// peer's TCP has not acknowledged it: nearly every message woke the I/O thread
    /// (`--loopback -d 1` pinned to one CPU: 1.6 times the rate, 0.64 times the CPU per
    /// message without that wakeup). A byte allowance instead (16 KiB) sent every message of
    /// a deep pipeline from its task thread, one `writev` each (`-t 2 -d 32`: nine times the
    /// system calls).
    fn lane_idle(&mut self, conn: ConnId, path: usize, open: bool) -> bool {
        let Some(&idx) = self.by_path.get(&(conn, path)) else {
            return false;
        };
        let Some(c) = self.conns[idx].as_ref() else {
            return false;
        };
        if c.state != State::Up || !c.out.is_empty() {
            return false;
        }
        if open || c.known_acked() >= c.written_before {
            return true;
        }
        if c.known_acked() < c.written_before2 {
            return false;
        }
        self.with_outs(|t, outs| t.poll_ack(idx, outs));
        self.conns[idx]
            .as_ref()
            .is_some_and(|c| c.known_acked() >= c.written_before)
    }

    fn flush(&mut self, now: Instant) -> Vec<(ConnId, usize)> {
        self.with_outs(|t, outs| t.write_pending(now, outs))
    }

    fn has_pending(&self) -> bool {
        !self.pending_flush.is_empty()
    }

    fn adopt(
        &mut self,
        stack: &mut Stack,
        link: LinkId,
        conn: ConnId,
        path: usize,
        epoch: u32,
        now: Instant,
    ) {
        self.adopt_held(stack, link, conn, path, epoch, now);
    }

    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        self.refuse_held(link, why);
    }
}

impl Tcp {
    /// Leaves the timed acknowledgement polls to a thread that waits for its send buffer's
    /// room (`on`, said every round), or takes them back. The waiter asks at least every
    /// [`ACK_DEFER_MAX`] and learns the acknowledgements without waking anybody; a timed poll
    /// racing it would take them and wake it. While they are left, the next one is due
    /// [`ACK_DEFER_MAX`] after the last round that left them (the waiter may leave without a
    /// word: that round takes them back).
    pub(crate) fn defer_ack_polls(&mut self, on: bool, now: Instant) {
        self.ack_polls_deferred = on.then_some(now);
    }

    /// [`Tcp::poll_acks_now`](bytes) for every connection: whether acknowledgements came
    /// (they wait for [`Transport::apply`]).
    pub(crate) fn acks_now(&mut self) -> bool {
        let came = self.with_outs(|t, outs| t.poll_acks_now(outs));
        if came {
            self.stats.inc(TcpCounter::TcpAcksByWaiter);
        }
        came
    }

    /// Runs `f` with the kept reports (`outs`), keeping what it leaves and whatever was kept
    /// meanwhile, in order.
    fn with_outs<R>(&mut self, f: impl FnOnce(&mut Self, &mut Vec<TcpOut>) -> R) -> R {
        let mut outs = std::mem::take(&mut self.outs);
        let r = f(self, &mut outs);
        outs.append(&mut self.outs);
        self.outs = outs;
        r
    }
}

/// Closes an accepted connection with a reset.
fn reset(stream: TcpStream) {
    let _ = sys::set_linger0(stream.as_raw_fd());
    drop(stream);
}

/// The soft `RLIMIT_NOFILE` of this process (`None`: unlimited or unknown), from
/// `/proc/self/limits`.
fn nofile_soft() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The node's connection cap for a soft `RLIMIT_NOFILE`: half of it, within
/// [`TCP_CONNS_MIN`]..=[`TCP_CONNS_MAX`].
fn conn_cap_for(nofile: Option<u64>) -> usize {
    nofile.map_or(TCP_CONNS_MAX, |n| {
        usize::try_from(n / 2)
            .unwrap_or(usize::MAX)
            .clamp(TCP_CONNS_MIN, TCP_CONNS_MAX)
    })
}

#[cfg(test)]
mod tests;
