//! The RDS/TCP transport (`net/rds/tcp*.c`): one listener on `addr:16385` per local address,
//! outgoing connections bound to the local address (lane `i` from a source port `≡ i mod 8`),
//! the byte stream of `[header][payload]` frames, and "acknowledged" meaning the peer's TCP
//! acknowledged a message's last byte (from `SIOCOUTQ`).
//!
//! This module only moves bytes: sequence numbers, retransmission and who connects are the
//! engine's decisions. It runs on the node's I/O thread.
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
use std::io::{self, IoSlice, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::tap::{Dir, Tap, TxFrames};
use crate::buf;
use crate::proto::{canonical, AcceptError, ConnId, DropReason, Frame, HeldEnd, LinkId};
use crate::proto::{Stack, StreamParser};
use crate::stats::{TcpCounter, TcpStats};
use crate::sys::{self, Epoll, EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
use crate::time::Instant;
use crate::tunables::Tunables;
use crate::wire::{MAX_MSG_SIZE, MPATH_WORKERS, RDS_TCP_PORT};

pub use crate::info::TcpSockInfo;

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
/// How long a half-closed connection may take to deliver the peer's remaining data.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// First and last interval of the acknowledgement poll while bytes are unacknowledged.
const ACK_POLL_MIN: Duration = Duration::from_micros(50);
const ACK_POLL_MAX: Duration = Duration::from_millis(20);

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

/// A listening socket and, while its `accept` fails, when it rejoins the event set.
#[derive(Debug)]
struct Listener {
    sock: TcpListener,
    paused_until: Option<Instant>,
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
    /// Highest acknowledged count reported to the engine.
    acked: u64,
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
    pub(crate) fn new(epoll: Arc<Epoll>, stats: Arc<TcpStats>, seed: u64) -> io::Result<Self> {
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
        })
    }

    /// Sends outgoing connections to `faddr` to `via` instead (`None`: back to `faddr:16385`).
    pub(crate) fn set_route(&mut self, faddr: IpAddr, via: Option<SocketAddr>) {
        match via {
            Some(v) => self.routes.insert(faddr, v),
            None => self.routes.remove(&faddr),
        };
    }

    /// Listens on `addr:16385` (never a wildcard).
    pub(crate) fn listen(&mut self, addr: IpAddr) -> io::Result<()> {
        // The OS error is returned as is (callers print its errno: EADDRINUSE, EADDRNOTAVAIL),
        // except a port the kernel's rds_tcp holds, which `port_taken` names.
        let at = SocketAddr::new(addr, RDS_TCP_PORT);
        let l = TcpListener::bind(at).map_err(|e| port_taken(e, at, "rds_tcp"))?;
        l.set_nonblocking(true)?;
        let _ = sys::tune_rds_tcp(l.as_raw_fd());
        let token = TOKEN_LISTENER | self.listeners.len() as u64;
        self.epoll.add(l.as_raw_fd(), token, EPOLLIN)?;
        self.listeners.push(Listener {
            sock: l,
            paused_until: None,
        });
        Ok(())
    }

    /// The node's connection cap.
    pub(crate) fn conn_cap(&self) -> usize {
        self.conn_cap
    }

    /// Accepted connections waiting for a lane.
    pub(crate) fn waiting(&self) -> usize {
        self.held.len()
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
    pub(crate) fn handle_event(
        &mut self,
        token: u64,
        bits: u32,
        now: Instant,
        out: &mut Vec<TcpOut>,
    ) {
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

    /// Accepts every pending connection of listener `li` within the caps; connections beyond
    /// a cap are reset and counted. An `accept` failure pauses the listener.
    fn accept_all(&mut self, li: usize, now: Instant, out: &mut Vec<TcpOut>) {
        if self
            .listeners
            .get(li)
            .is_none_or(|l| l.paused_until.is_some())
        {
            return;
        }
        // Connections accepted earlier in this round and not yet given to the engine.
        let mut fresh: HashMap<IpAddr, usize> = HashMap::new();
        for o in out.iter() {
            if let TcpOut::Accepted { peer, .. } = o {
                *fresh.entry(canonical(peer.ip())).or_insert(0) += 1;
            }
        }
        let mut fresh_total: usize = fresh.values().sum();
        loop {
            let res = self.listeners[li].sock.accept();
            match res {
                Ok((stream, peer)) => {
                    self.listen_pause = Duration::ZERO;
                    let local = match stream.local_addr() {
                        Ok(a) => a,
                        Err(_) => continue,
                    };
                    let ip = canonical(peer.ip());
                    let of_addr = self.per_addr.get(&ip).copied().unwrap_or(0)
                        + self
                            .held
                            .values()
                            .filter(|h| canonical(h.peer.ip()) == ip)
                            .count()
                        + fresh.get(&ip).copied().unwrap_or(0);
                    let total = self.live + self.held.len() + fresh_total;
                    let over = if of_addr >= TCP_CONNS_PER_ADDR {
                        Some(TcpCounter::TcpAcceptAddrLimit)
                    } else if total >= self.conn_cap {
                        Some(TcpCounter::TcpAcceptNodeLimit)
                    } else {
                        None
                    };
                    if let Some(counter) = over {
                        self.stats.inc(counter);
                        reset(stream);
                        continue;
                    }
                    *fresh.entry(ip).or_insert(0) += 1;
                    fresh_total += 1;
                    out.push(TcpOut::Accepted {
                        stream,
                        local,
                        peer,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO)
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        self.stats.inc(TcpCounter::TcpAcceptEmfile);
                    }
                    self.pause_listener(li, now);
                    break;
                }
            }
        }
    }

    /// Takes listener `li` out of the event set for the current back-off.
    fn pause_listener(&mut self, li: usize, now: Instant) {
        self.listen_pause = if self.listen_pause.is_zero() {
            LISTEN_PAUSE_MIN
        } else {
            (self.listen_pause * 2).min(LISTEN_PAUSE_MAX)
        };
        let Some(l) = self.listeners.get_mut(li) else {
            return;
        };
        self.stats.inc(TcpCounter::TcpListenPaused);
        let _ = self.epoll.delete(l.sock.as_raw_fd());
        l.paused_until = Some(now + self.listen_pause);
    }

    /// Returns paused listeners whose pause ended to the event set.
    fn resume_listeners(&mut self, now: Instant) {
        for (li, l) in self.listeners.iter_mut().enumerate() {
            if l.paused_until.is_some_and(|t| t <= now) {
                l.paused_until = None;
                let token = TOKEN_LISTENER | li as u64;
                if self.epoll.add(l.sock.as_raw_fd(), token, EPOLLIN).is_err() {
                    // No room in the event set now (ENOMEM): try again after a pause.
                    l.paused_until = Some(now + LISTEN_PAUSE_MAX);
                }
            }
        }
    }

    /// Sets what the messages in progress may hold in all, from now on.
    pub(crate) fn set_partial_cap(&mut self, cap: usize) {
        self.partial_cap = cap;
    }

    /// Reads what is available (bounded), parses frames; end of stream or an error closes.
    /// Small payloads are copied out of the read chunk, larger ones keep it (pooled, see
    /// [`crate::buf`]); the message in progress is reported to the engine as it grows.
    fn read(&mut self, idx: usize, now: Instant, out: &mut Vec<TcpOut>) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.refused {
            // Refused and closed: its report is on its way.
            return;
        }
        let serial = c.serial;
        let fd = c.stream.as_raw_fd();
        let mut frames = Vec::new();
        let mut total = 0;
        let mut closed = false;
        let mut stream_err = None;
        // What the other connections' messages in progress hold, and what all may hold.
        let others = self.partial_total - c.held_reported;
        let cap = self.partial_cap;
        while total < READ_BUDGET {
            if others + c.parser.partial_held() > cap {
                // The node cannot hold this message: drop it now rather than read on (the
                // rest stays in the kernel's buffer until the connection is reset).
                c.parser.abandon();
                c.refused = true;
                break;
            }
            // The rest of a large payload is read straight into its message buffer, which
            // grows to what the socket holds now (never to what the header announced).
            let avail = if c.parser.data_rem() >= DIRECT_MIN {
                sys::inq(fd).unwrap_or(0)
            } else {
                0
            };
            if let Some((buf, rem)) = c.parser.direct_buf(DIRECT_MIN, avail) {
                match sys::read_spare(fd, buf, rem.min(READ_BUDGET)) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        total += n;
                        c.parser.direct_done(n, &mut frames);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            let mut v = buf::take(READ_CHUNK);
            let r = sys::read_spare(fd, &mut v, READ_CHUNK);
            let v = match r {
                Ok(n) if n > 0 => v,
                _ => {
                    buf::give(v);
                    Vec::new()
                }
            };
            match r {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    total += n;
                    let held = v.capacity();
                    if let Err(e) = c.parser.feed_chunk(buf::freeze(v), held, &mut frames) {
                        stream_err = Some(e);
                        break;
                    }
                    if n < READ_CHUNK && total < SHORT_READ_STOP {
                        // A short read of a few frames (requests and answers): TCP's receive
                        // queue ran dry (`tcp_recvmsg` returns less than asked only then),
                        // and the connection is registered level-triggered, so what comes
                        // later fires again; reading on until EAGAIN cost a read(2) per
                        // wake-up. A stream reads on: its next bytes are often there by
                        // then (stopping here cost rds-bench 6-11% at 64 KiB and 1 MiB).
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        let (conn, path, epoch) = (c.conn, c.path, c.epoch);
        if !c.refused && others + c.parser.partial_held() > cap {
            c.parser.abandon();
            c.refused = true;
        }
        if c.refused {
            c.partial_since = None;
            frames.clear();
            let _ = c.stream.shutdown(Shutdown::Both);
            out.push(TcpOut::ReassemblyRefused);
            closed = true;
            stream_err = None;
        }
        // The message in progress, charged as it fills (before the frames that completed
        // are: their payloads now are the messages').
        let held = c.parser.partial_held();
        self.partial_total = others + held;
        if held != c.held_reported {
            c.held_reported = held;
            out.push(TcpOut::Reassembly {
                conn,
                path,
                epoch,
                held,
            });
        }
        if !c.parser.in_message() {
            c.partial_since = None;
        } else if total > 0 || c.partial_since.is_none() {
            c.partial_since = Some(now);
        }
        if !frames.is_empty() {
            out.push(TcpOut::Frames {
                conn,
                path,
                epoch,
                frames,
            });
        }
        if let Some(err) = stream_err {
            out.push(TcpOut::StreamError {
                conn,
                path,
                epoch,
                err,
            });
        } else if closed {
            out.push(TcpOut::Closed(idx, serial));
        } else if total >= READ_BUDGET {
            // More to read: come back without waiting for a new edge.
            self.pending_flush.push(idx);
        }
        // Incoming data may carry acknowledgements of ours.
        self.poll_ack(idx, out);
    }

    /// Reads a draining connection of `conn` to its end (before a new connection takes over).
    pub(crate) fn finish_drains_of(
        &mut self,
        laddr: IpAddr,
        faddr: IpAddr,
        stack: &Stack,
        now: Instant,
        out: &mut Vec<TcpOut>,
    ) {
        let idxs: Vec<usize> = (0..self.conns.len())
            .filter(|&i| {
                self.conns[i].as_ref().is_some_and(|c| {
                    matches!(c.state, State::Draining(_))
                        && stack.conn_addrs(c.conn).0 == laddr
                        && stack.conn_addrs(c.conn).1 == faddr
                })
            })
            .collect();
        for i in idxs {
            self.read(i, now, out);
        }
    }

    /// Opens an outgoing connection for `(conn, path)` from `laddr` to `faddr:16385`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        laddr: IpAddr,
        faddr: IpAddr,
        tun: &Tunables,
        now: Instant,
    ) -> io::Result<()> {
        let target = self
            .routes
            .get(&faddr)
            .copied()
            .unwrap_or(SocketAddr::new(faddr, RDS_TCP_PORT));
        let fd = sys::tcp_socket(&target)?;
        sys::set_reuseaddr(fd.as_raw_fd())?;
        sys::tune_rds_tcp(fd.as_raw_fd())?;
        sys::set_bufs(fd.as_raw_fd(), tun.tcp_sndbuf, tun.tcp_rcvbuf)?;
        // Lane i binds a source port ≡ i (mod 8), so that the peer can tell the lane
        // (the 2026 kernels' SPORT_IDX scheme); the ephemeral range is 32768..61000.
        let mut bound = false;
        for _ in 0..32 {
            let group = self.port_rng.below((61000 - 32768) / MPATH_WORKERS as u64) as u16;
            let port = 32768 + group * MPATH_WORKERS as u16 + path as u16;
            if sys::bind(fd.as_raw_fd(), SocketAddr::new(laddr, port)).is_ok() {
                bound = true;
                break;
            }
        }
        if !bound {
            sys::bind(fd.as_raw_fd(), SocketAddr::new(laddr, 0))?;
        }
        sys::connect(fd.as_raw_fd(), target).inspect_err(|e| count_refused(&self.stats, e))?;
        let stream = TcpStream::from(fd);
        let local = sys::local_addr(stream.as_raw_fd())?;
        self.next_serial += 1;
        let c = TcpConn {
            serial: self.next_serial,
            stream,
            conn,
            path,
            epoch,
            state: State::Connecting,
            parser: StreamParser::new(MAX_MSG_SIZE as u32),
            out: VecDeque::new(),
            out_bytes: 0,
            written: 0,
            acked: 0,
            more: false,
            epoll_out: true,
            local,
            peer: target,
            faddr_key: canonical(faddr),
            ack_poll: None,
            last_seen_una: 0,
            held_reported: 0,
            partial_since: None,
            refused: false,
        };
        let fd = c.stream.as_raw_fd();
        let idx = self.insert(c);
        if let Some(old) = self.by_path.insert((conn, path), idx) {
            // The engine connects a path only after its previous connection ended or was
            // dropped; should one still be here, it is read to its end, never closed unread.
            self.retire(old, now);
        }
        self.epoll
            .add(fd, TOKEN_CONN | idx as u64, EPOLLOUT | EPOLLIN | EPOLLRDHUP)?;
        Ok(())
    }

    /// The connection attempt `idx` completed; the engine agreed to use it.
    pub(crate) fn established(&mut self, idx: usize, epoch: u32) {
        if let Some(c) = self.conns[idx].as_mut() {
            c.state = State::Up;
            c.epoch = epoch;
            c.peer = sys::peer_addr(c.stream.as_raw_fd()).unwrap_or(c.peer);
            c.epoll_out = false;
            let _ = self.epoll.modify(
                c.stream.as_raw_fd(),
                TOKEN_CONN | idx as u64,
                EPOLLIN | EPOLLRDHUP,
            );
        }
    }

    /// Identity of a connection attempt still in progress (not one the engine dropped since
    /// its outcome was collected: that one drains).
    pub(crate) fn ident(&self, idx: usize, serial: u64) -> Option<(ConnId, usize, u32)> {
        self.conns[idx]
            .as_ref()
            .filter(|c| c.serial == serial && c.state == State::Connecting)
            .map(|c| (c.conn, c.path, c.epoch))
    }

    /// Installs an accepted connection for `(conn, path)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn adopt(
        &mut self,
        stream: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
        conn: ConnId,
        path: usize,
        epoch: u32,
        tun: &Tunables,
        now: Instant,
    ) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        sys::tune_rds_tcp(stream.as_raw_fd())?;
        sys::set_bufs(stream.as_raw_fd(), tun.tcp_sndbuf, tun.tcp_rcvbuf)?;
        if let Some(&old) = self.by_path.get(&(conn, path)) {
            // Only a larger address's attempt that asked us to connect back can still be
            // here (the peer resets it without writing to it: rule 5 of the engine's
            // connection lifecycle); anything else is read to its end.
            self.stats.inc(TcpCounter::TcpListenClosedStale);
            let connecting = self.conns[old]
                .as_ref()
                .is_some_and(|c| c.state == State::Connecting);
            if connecting {
                self.close_now(old, false);
            } else {
                self.retire(old, now);
            }
        }
        self.next_serial += 1;
        let c = TcpConn {
            serial: self.next_serial,
            stream,
            conn,
            path,
            epoch,
            state: State::Up,
            parser: StreamParser::new(MAX_MSG_SIZE as u32),
            out: VecDeque::new(),
            out_bytes: 0,
            written: 0,
            acked: 0,
            more: false,
            epoll_out: false,
            local,
            peer,
            faddr_key: canonical(peer.ip()),
            ack_poll: None,
            last_seen_una: 0,
            held_reported: 0,
            partial_since: None,
            refused: false,
        };
        let fd = c.stream.as_raw_fd();
        let idx = self.insert(c);
        self.by_path.insert((conn, path), idx);
        if let Err(e) = self
            .epoll
            .add(fd, TOKEN_CONN | idx as u64, EPOLLIN | EPOLLRDHUP)
        {
            self.close_now(idx, true);
            return Err(e);
        }
        Ok(())
    }

    /// Refuses an accepted connection with a reset.
    pub(crate) fn refuse(&mut self, stream: TcpStream, why: AcceptError) {
        if why == AcceptError::Wait {
            self.stats.inc(TcpCounter::TcpConnectRaced);
        }
        reset(stream);
    }

    /// A name for an accepted connection offered to the engine.
    pub(crate) fn new_link(&mut self) -> LinkId {
        self.next_link += 1;
        LinkId(self.next_link)
    }

    /// Keeps an accepted connection unread: the engine holds it ([`crate::proto::Incoming::Hold`]).
    pub(crate) fn hold(&mut self, link: LinkId, h: HeldConn) {
        self.held.insert(link, h);
    }

    /// The held connection `link`, for the engine's [`crate::proto::Event::Adopt`].
    pub(crate) fn take_held(&mut self, link: LinkId) -> Option<HeldConn> {
        self.held.remove(&link)
    }

    /// Resets the held connection `link` that the engine gave up, counted by why.
    pub(crate) fn refuse_held(&mut self, link: LinkId, why: HeldEnd) {
        let Some(h) = self.held.remove(&link) else {
            return;
        };
        match why {
            HeldEnd::AddrEvicted => self.stats.inc(TcpCounter::TcpWaitAddrEvicted),
            HeldEnd::NodeEvicted => self.stats.inc(TcpCounter::TcpWaitNodeEvicted),
            HeldEnd::Expired => self.stats.inc(TcpCounter::TcpWaitExpired),
            HeldEnd::Refused(e) => {
                self.refuse(h.stream, e);
                return;
            }
        }
        reset(h.stream);
    }

    /// The engine dropped `(conn, path, epoch)`: half-close and drain, or close at once.
    pub(crate) fn disconnect(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
        now: Instant,
    ) -> Option<(ConnId, usize, u32)> {
        let idx = *self.by_path.get(&(conn, path))?;
        let c = self.conns[idx].as_mut()?;
        if c.epoch != epoch {
            return None;
        }
        self.by_path.remove(&(conn, path));
        if reason == DropReason::Superseded {
            // A newer connection for the lane came in: this one is stale (it is read to its
            // end first, so nothing our TCP acknowledged on it is lost).
            self.stats.inc(TcpCounter::TcpListenClosedStale);
        }
        if reason.drains() {
            // Up, or still connecting (the peer may have adopted it and written to it): read
            // to its end (the engine's connection lifecycle, rules 2 and 3).
            self.retire(idx, now);
        } else {
            self.close_now(idx, reason == DropReason::Protocol);
        }
        None
    }

    /// Half-closes connection `idx` and reads it to its end (its frames keep their epoch;
    /// [`TcpOut::Closed`] reports the end). `shutdown(2)` aborts an attempt still in
    /// `SYN_SENT`, which then ends at once with nothing read.
    pub(crate) fn retire(&mut self, idx: usize, now: Instant) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if self.by_path.get(&(c.conn, c.path)) == Some(&idx) {
            self.by_path.remove(&(c.conn, c.path));
        }
        if matches!(c.state, State::Draining(_)) {
            return;
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        c.state = State::Draining(now + DRAIN_TIMEOUT);
        c.out.clear();
        c.out_bytes = 0;
        c.more = false;
        if c.epoll_out {
            c.epoll_out = false;
            let _ = self.epoll.modify(
                c.stream.as_raw_fd(),
                TOKEN_CONN | idx as u64,
                EPOLLIN | EPOLLRDHUP,
            );
        }
        // Whatever is readable now (and the end of an aborted attempt) is read next round.
        self.pending_flush.push(idx);
    }

    /// Closes at once (RST if `reset`), without telling the engine.
    pub(crate) fn close_now(&mut self, idx: usize, reset: bool) {
        if let Some(c) = self.remove(idx) {
            if reset {
                let _ = sys::set_linger0(c.stream.as_raw_fd());
            }
        }
    }

    /// Closes a connection the peer ended; returns what the engine must hear.
    pub(crate) fn closed(&mut self, idx: usize, serial: u64) -> Option<(ConnId, usize, u32, bool)> {
        if self.conns.get(idx)?.as_ref()?.serial != serial {
            return None;
        }
        let c = self.remove(idx)?;
        Some((c.conn, c.path, c.epoch, c.state == State::Connecting))
    }

    /// Whether `(conn, path)` is an established lane with nothing waiting to be written and
    /// everything written acknowledged, as far as the last poll knows: a request/response
    /// lane, where writing a message at once from the sending thread saves a wakeup. A lane
    /// still carrying earlier messages is streaming; the I/O thread batches its frames.
    pub(crate) fn lane_idle(&self, conn: ConnId, path: usize) -> bool {
        self.by_path
            .get(&(conn, path))
            .and_then(|&idx| self.conns[idx].as_ref())
            .is_some_and(|c| c.state == State::Up && c.out.is_empty() && c.written == c.acked)
    }

    /// Pulls frames of `(conn, path)` from the engine into the connection's output queue.
    pub(crate) fn pull(
        &mut self,
        stack: &mut Stack,
        conn: ConnId,
        path: usize,
        now: Instant,
        tap: &Tap,
    ) {
        // The engine transmits only on paths it believes up, which have a socket here.
        let Some(&idx) = self.by_path.get(&(conn, path)) else {
            return;
        };
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.state != State::Up {
            return;
        }
        c.more = false;
        let mut any = false;
        let mut frames = crate::proto::driver::Frames::new(stack, now, conn, path);
        while c.out_bytes < OUT_HIGH {
            let Some(t) = frames.next() else {
                break;
            };
            if tap.enabled() {
                self.tap_tx.push(tap, &t.hdr, &t.payload);
            }
            if self.hdr_arena.capacity() - self.hdr_arena.len() < t.hdr.len() {
                self.hdr_arena.reserve(48 * 256);
            }
            self.hdr_arena.extend_from_slice(&t.hdr);
            c.out.push_back(self.hdr_arena.split().freeze());
            c.out_bytes += t.hdr.len() + t.payload.len();
            if !t.payload.is_empty() {
                c.out.push_back(t.payload);
            }
            any = true;
        }
        if c.out_bytes >= OUT_HIGH {
            c.more = true;
        }
        if !self.tap_tx.is_empty() {
            let (laddr, faddr, _) = stack.conn_addrs(conn);
            self.tap_tx.record(tap, laddr, faddr, path, c.local, c.peer);
        }
        if any {
            self.pending_flush.push(idx);
        }
    }

    /// Writes pending output of every connection that has some. Returns connections that ran
    /// low and may pull more frames, and acknowledgement updates in `out`.
    pub(crate) fn flush(&mut self, now: Instant, out: &mut Vec<TcpOut>) -> Vec<(ConnId, usize)> {
        let mut refill = Vec::new();
        let mut list = std::mem::take(&mut self.pending_flush);
        list.sort_unstable();
        list.dedup();
        for idx in list {
            let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
                continue;
            };
            if !matches!(c.state, State::Up) {
                if matches!(c.state, State::Draining(_)) {
                    self.read(idx, now, out);
                }
                continue;
            }
            let mut err = false;
            while !c.out.is_empty() {
                let iov: Vec<IoSlice<'_>> =
                    c.out.iter().take(512).map(|b| IoSlice::new(b)).collect();
                match c.stream.write_vectored(&iov) {
                    Ok(0) => {
                        err = true;
                        break;
                    }
                    Ok(mut n) => {
                        c.written += n as u64;
                        c.out_bytes -= n;
                        while n > 0 {
                            let front = c.out.front_mut().expect("written bytes were queued");
                            if n >= front.len() {
                                n -= front.len();
                                c.out.pop_front();
                            } else {
                                let _ = front.split_to(n);
                                n = 0;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.stats.inc(TcpCounter::TcpSndbufFull);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        err = true;
                        break;
                    }
                }
            }
            let want_out = !c.out.is_empty() && !err;
            if want_out != c.epoll_out {
                c.epoll_out = want_out;
                let ev = EPOLLIN | EPOLLRDHUP | if want_out { EPOLLOUT } else { 0 };
                let _ = self
                    .epoll
                    .modify(c.stream.as_raw_fd(), TOKEN_CONN | idx as u64, ev);
            }
            if err {
                out.push(TcpOut::Closed(idx, c.serial));
                continue;
            }
            if c.more && c.out_bytes < OUT_HIGH / 2 {
                refill.push((c.conn, c.path));
            }
            self.poll_ack(idx, out);
            if let Some(c) = self.conns[idx].as_mut() {
                if c.written > c.acked && c.ack_poll.is_none() {
                    c.ack_poll = Some((now + ACK_POLL_MIN, ACK_POLL_MIN));
                }
            }
        }
        refill
    }

    /// Learns how much of what we wrote the peer acknowledged (`SIOCOUTQ`).
    fn poll_ack(&mut self, idx: usize, out: &mut Vec<TcpOut>) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.state != State::Up || c.written == c.acked {
            return;
        }
        let Ok(q) = sys::outq(c.stream.as_raw_fd()) else {
            return;
        };
        let acked = c.written.saturating_sub(q as u64);
        c.last_seen_una = acked as u32;
        if acked > c.acked {
            c.acked = acked;
            out.push(TcpOut::Acked {
                conn: c.conn,
                path: c.path,
                epoch: c.epoch,
                acked,
            });
            // Progress: poll quickly again while bytes remain.
            c.ack_poll = (c.written > c.acked).then_some((Instant::ZERO, ACK_POLL_MIN));
        }
    }

    /// Runs due acknowledgement polls and drain deadlines.
    pub(crate) fn timers(&mut self, now: Instant, out: &mut Vec<TcpOut>) {
        self.resume_listeners(now);
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_mut() else {
                continue;
            };
            if let State::Draining(until) = c.state {
                if now >= until {
                    self.stats.inc(TcpCounter::TcpDrainExpired);
                    out.push(TcpOut::Closed(idx, c.serial));
                }
                continue;
            }
            if let Some((at, interval)) = c.ack_poll {
                if at <= now {
                    let before = c.acked;
                    self.poll_ack(idx, out);
                    if let Some(c) = self.conns[idx].as_mut() {
                        if c.written > c.acked {
                            let iv = if c.acked > before {
                                ACK_POLL_MIN
                            } else {
                                (interval * 2).min(ACK_POLL_MAX)
                            };
                            c.ack_poll = Some((now + iv, iv));
                        } else {
                            c.ack_poll = None;
                        }
                    }
                }
            }
        }
    }

    /// The earliest transport timer.
    /// Closes the connections whose message in progress got no byte for `limit`
    /// (`net.rds.partial_timeout_ms`): a peer that announces a message and stops half way
    /// holds no memory for long (`tcp_partial_timeouts`).
    pub(crate) fn expire_partials(&mut self, now: Instant, limit: Duration, out: &mut Vec<TcpOut>) {
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_mut() else {
                continue;
            };
            if c.partial_since.is_some_and(|t| now >= t + limit) {
                c.partial_since = None;
                self.stats.inc(TcpCounter::TcpPartialTimeouts);
                let _ = c.stream.shutdown(Shutdown::Both);
                out.push(TcpOut::Closed(idx, c.serial));
            }
        }
    }

    pub(crate) fn next_timer(&self) -> Option<Instant> {
        let paused = self.listeners.iter().filter_map(|l| l.paused_until);
        self.conns
            .iter()
            .flatten()
            .flat_map(|c| {
                let t = match c.state {
                    State::Draining(t) => Some(t),
                    _ => c.ack_poll.map(|(t, _)| t),
                };
                // A message in progress is looked at again within a second.
                t.into_iter()
                    .chain(c.partial_since.map(|p| p + Duration::from_secs(1)))
            })
            .chain(paused)
            .min()
    }

    /// Whether some connection has output or reads pending for the next round.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending_flush.is_empty()
    }

    /// Marks a connection for another read/flush round.
    pub(crate) fn mark(&mut self, idx: usize) {
        self.pending_flush.push(idx);
    }

    /// Snapshot for `rds-info -T`.
    pub(crate) fn infos(&self) -> Vec<TcpSockInfo> {
        self.conns
            .iter()
            .flatten()
            .map(|c| TcpSockInfo {
                local: c.local,
                peer: c.peer,
                hdr_rem: c.parser.hdr_rem() as u64,
                data_rem: c.parser.data_rem() as u64,
                last_sent_nxt: c.written as u32,
                last_expected_una: (c.written - c.out_bytes.min(c.written as usize) as u64) as u32,
                last_seen_una: c.last_seen_una,
                path: c.path,
                state: match c.state {
                    State::Connecting => "CONNECTING",
                    State::Up => "UP",
                    State::Draining(_) => "DRAINING",
                }
                .to_string(),
            })
            .collect()
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

    /// Records received frames on the tap.
    pub(crate) fn tap_rx(
        &self,
        stack: &Stack,
        conn: ConnId,
        path: usize,
        frames: &[Frame],
        tap: &Tap,
    ) {
        if !tap.enabled() {
            return;
        }
        let Some(&idx) = self.by_path.get(&(conn, path)) else {
            return;
        };
        let Some(c) = self.conns[idx].as_ref() else {
            return;
        };
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        tap.record_tcp(
            Dir::Rx,
            laddr,
            faddr,
            path,
            c.local,
            c.peer,
            frames.iter().map(|f| (f.hdr.to_bytes(), &f.payload)),
        );
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
mod tests {
    use super::*;

    #[test]
    fn connection_cap_follows_the_descriptor_limit() {
        assert_eq!(conn_cap_for(None), TCP_CONNS_MAX);
        assert_eq!(conn_cap_for(Some(1024)), 512);
        assert_eq!(conn_cap_for(Some(1 << 20)), TCP_CONNS_MAX);
        assert_eq!(conn_cap_for(Some(20)), TCP_CONNS_MIN);
        assert!(nofile_soft().is_some_and(|n| n > 0));
    }
}
