//! The client's end of a socket's shared-memory ring ([`super`] documents the protocol):
//! requests and results through the segment, the doorbell rung only while the daemon sleeps,
//! readiness from the signals the daemon keeps.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::bell;
use super::{
    CongWord, Fault, Rec, RingEnd, F_BATCH, F_CONG, F_MORE, F_PEEK, F_POSTED, F_PUSHED,
    F_TRUNCATED, F_TS, OP_CONG, OP_RECV, OP_RESULT, OP_SEND, OP_SYNC, REC_HDR, RING_CAP, RING_FDS,
    SEG_LEN, WANT_RX, WANT_TX,
};
use crate::ctl::client::{CtlClient, CtlError};
use crate::ctl::{Reply, Request};
use crate::message::Received;
use crate::socket::answer::{data_from, deadline_of, io};
use crate::socket::cong::{Clear, Sleeper, WaitEnd};
use crate::sys;
use crate::wire::MAX_MSG_SIZE;

/// How long a client that waits for a result spins before it sleeps on its doorbell (only
/// with more than one CPU: on one, spinning only delays the daemon).
const SPIN: Duration = Duration::from_micros(30);
/// Longest single sleep of a ring wait (it then checks again).
const WAIT_CHUNK: Duration = Duration::from_secs(1);
/// How often a posted send looks whether the daemon went away, at most.
const ALIVE_EVERY: Duration = Duration::from_millis(1);

/// What a ring's requests are serialised under.
#[derive(Debug)]
struct RingState {
    end: RingEnd,
    /// The last request's sequence number (one waited-for request at a time).
    seq: u64,
    /// The readiness directions the daemon keeps up to date (`WANT_*`).
    want: u64,
    /// A result came since the daemon keeps the receive descriptor: it can be trusted.
    rx_synced: bool,
    /// Send-buffer room as the last result reported it, less what was posted since.
    room: usize,
    /// The destination (as the caller named it) that the last waited-for send reached:
    /// sends to it may be posted. `None` until one did, and after a failure or a change of
    /// the socket's options.
    post_dest: Option<Option<SocketAddr>>,
    /// Messages the daemon handed (brought by a batched receive or pushed) and no receive
    /// took yet, in the order they left the socket.
    held: VecDeque<(Rec, Vec<u8>)>,
    /// When a posted send last looked whether the daemon went away.
    alive_seen: Option<std::time::Instant>,
}

impl RingState {
    /// Whether a send of `len` bytes to `dest` may be posted: the destination was reached
    /// before, the send buffer has room for it as last reported, and the ring keeps room
    /// for a waited-for request after it.
    fn may_post(&self, dest: Option<SocketAddr>, len: usize) -> bool {
        self.post_dest == Some(dest)
            && len <= self.room
            && self
                .end
                .room()
                .is_ok_and(|r| r >= 2 * REC_HDR + len + MAX_MSG_SIZE)
    }
}

/// The client's end of a socket's shared-memory ring.
#[derive(Debug)]
pub(crate) struct RingClient {
    state: Mutex<RingState>,
    /// The daemon's doorbell (an eventfd the daemon watches edge-triggered): rung for
    /// requests.
    bell: OwnedFd,
    /// This side's doorbell (a pipe's reading end): readable when results came.
    done: OwnedFd,
    /// Receive readiness (a pipe's reading end): set by the daemon, cleared here.
    rx: OwnedFd,
    /// Send readiness (polled end), kept by the daemon.
    tx: OwnedFd,
    /// The control connection (its hangup means the daemon went away).
    ctl: OwnedFd,
    /// The congestion bell (a pipe's reading end the daemon rings) and the segment's word it
    /// counts in.
    cong: Sleeper,
    cong_word: CongWord,
    path: std::path::PathBuf,
    spin: bool,
    /// The daemon was seen gone: every call after says so (a posted send would otherwise
    /// succeed into a ring nobody reads).
    dead: AtomicBool,
}

impl RingClient {
    /// Sets up the ring of socket `token`; `None` when the daemon offers none.
    pub(crate) fn setup(client: &mut CtlClient, token: u64) -> Option<RingClient> {
        if crate::env::no_ring() {
            return None;
        }
        let (reply, _, fds) = client.call_fds(&Request::SockRing { sock: token }).ok()?;
        if !matches!(reply, Reply::SockRing { seg_len } if seg_len == SEG_LEN)
            || fds.len() != RING_FDS
        {
            return None;
        }
        let mut fds = fds.into_iter();
        let seg = fds.next()?;
        let end = RingEnd::client(sys::Shm::map(seg.as_raw_fd(), SEG_LEN).ok()?)?;
        let ctl = OwnedFd::from(client.stream().try_clone().ok()?);
        let cong_word = end.cong_word();
        Some(RingClient {
            state: Mutex::new(RingState {
                end,
                seq: 0,
                want: 0,
                rx_synced: false,
                room: 0,
                post_dest: None,
                held: VecDeque::new(),
                alive_seen: None,
            }),
            bell: fds.next()?,
            done: fds.next()?,
            rx: fds.next()?,
            tx: fds.next()?,
            cong: Sleeper::new(fds.next()?, Clear::Pipe),
            cong_word,
            ctl,
            path: client.path().to_path_buf(),
            spin: sys::may_spin(),
            dead: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the daemon handed messages that no receive took yet (readable here, whatever
    /// the daemon's socket says).
    pub(crate) fn holds(&self) -> bool {
        let g = self.lock();
        !g.held.is_empty() || g.end.incoming()
    }

    /// Clears the receive readiness pipe when nothing is left to receive: nothing held here,
    /// nothing handed or in the ring, and the daemon last saw its socket empty (the daemon
    /// only ever sets it). Handed or queued meanwhile, the daemon's setting came before this
    /// clear: ring it to set it again (its turn ends with bringing the readiness up to date).
    fn clear_rx(&self, st: &RingState) {
        let more = |e: &RingEnd| e.client_holds() || e.incoming() || e.sock_readable();
        if st.held.is_empty() && st.want & WANT_RX != 0 && !more(&st.end) {
            bell::clear_pipe(&self.rx);
            if more(&st.end) {
                sys::eventfd_signal(self.bell.as_raw_fd());
            }
        }
    }

    /// `(readable, writable)` when the segment alone shows a direction of `rx`/`tx` ready, as
    /// polling the readiness descriptors would (`None`: poll them). Readable: messages this
    /// side holds or the daemon pushed into the ring, which a receive takes without asking
    /// the daemon (messages still at the daemon's socket are left to the receive signal).
    /// Writable: send-buffer room as the last result reported, less what was posted since
    /// (the daemon's room is at least that: only acknowledgements change it meanwhile). A
    /// daemon seen gone is left to the poll, which reports the hang-up.
    pub(crate) fn ready_now(&self, rx: bool, tx: bool) -> Option<(bool, bool)> {
        if self.dead.load(Ordering::Relaxed) {
            return None;
        }
        let g = self.lock();
        let r = !g.held.is_empty() || g.end.incoming();
        let w = g.room > 0;
        ((rx && r) || (tx && w)).then_some((r, w))
    }

    /// Whether the receive descriptor, kept by the daemon, says nothing is queued (then a
    /// receive need not ask the daemon).
    fn surely_empty(&self) -> bool {
        self.lock().rx_synced
            && !sys::poll_readable(&[self.rx.as_raw_fd()], Duration::ZERO).is_ok_and(|r| r[0])
    }

    /// The error of a daemon gone, remembered for every later call.
    fn gone(&self) -> io::Error {
        self.dead.store(true, Ordering::Relaxed);
        io(CtlError::Gone {
            path: self.path.clone(),
        })
    }

    /// Runs one request through the ring and waits for its results (several only for a
    /// batched receive); the last one's send-buffer room becomes the account.
    fn rpc(
        &self,
        st: &mut RingState,
        mut rec: Rec,
        payload: &[u8],
    ) -> io::Result<Vec<(Rec, Vec<u8>)>> {
        let rx_wanted = st.want & WANT_RX != 0;
        let end = &mut st.end;
        st.seq += 1;
        rec.seq = st.seq;
        end.push(rec, payload).map_err(broken)?;
        if end.must_ring() {
            sys::eventfd_signal(self.bell.as_raw_fd());
        }
        let spin_until = self.spin.then(|| std::time::Instant::now() + SPIN);
        let mut got = Vec::new();
        loop {
            match end.pop().map_err(broken)? {
                Some((r, data)) if r.op == OP_RESULT && r.flags & F_PUSHED != 0 => {
                    st.held.push_back((r, data));
                    continue;
                }
                Some((r, data)) if r.op == OP_RESULT && r.seq == st.seq => {
                    let last = r.flags & F_MORE == 0;
                    st.room = r.room as usize;
                    got.push((r, data));
                    if last {
                        st.rx_synced |= rx_wanted;
                        return Ok(got);
                    }
                    continue;
                }
                Some(_) => return Err(broken(Fault("an unexpected result"))),
                None => {}
            }
            if spin_until.is_some_and(|t| std::time::Instant::now() < t) {
                std::hint::spin_loop();
                continue;
            }
            if !end.may_sleep() {
                continue;
            }
            let (_, hup) = sys::wait_readable_or_hangup(
                self.done.as_raw_fd(),
                self.ctl.as_raw_fd(),
                WAIT_CHUNK,
            )?;
            let closed = bell::clear_pipe(&self.done) == bell::Cleared::Closed;
            end.awake();
            if (hup || closed) && !end.incoming() {
                return Err(self.gone());
            }
        }
    }

    /// Waits until the daemon has taken every posted send (before an operation on the
    /// control connection that must come after them), and forgets the posting destination
    /// when `reset` (the socket's options or destination change).
    pub(crate) fn sync(&self, reset: bool) -> io::Result<()> {
        let mut g = self.lock();
        if reset {
            g.post_dest = None;
        }
        let rec = Rec {
            op: OP_SYNC,
            ..Rec::default()
        };
        self.rpc(&mut g, rec, &[]).map(drop)
    }

    /// The readiness descriptor of one direction, which the daemon keeps up to date from the
    /// first call on.
    pub(crate) fn watch(&self, rx: bool) -> RawFd {
        let mut g = self.lock();
        let bit = if rx { WANT_RX } else { WANT_TX };
        if g.want & bit == 0 {
            g.want |= bit;
            if g.end.want(bit) {
                sys::eventfd_signal(self.bell.as_raw_fd());
            }
        }
        if rx {
            self.rx.as_raw_fd()
        } else {
            self.tx.as_raw_fd()
        }
    }

    /// Waits until one direction is ready, `deadline` passes (`ETIMEDOUT`) or `most` has
    /// gone by.
    fn wait(
        &self,
        rx: bool,
        deadline: Option<std::time::Instant>,
        most: Duration,
    ) -> io::Result<()> {
        let fd = self.watch(rx);
        let left = match deadline {
            Some(d) => {
                let now = std::time::Instant::now();
                if now >= d {
                    return Err(crate::errno::err(libc::ETIMEDOUT));
                }
                (d - now).min(most)
            }
            None => most,
        };
        let (_, hup) = sys::wait_readable_or_hangup(fd, self.ctl.as_raw_fd(), left)?;
        if hup {
            return Err(self.gone());
        }
        Ok(())
    }

    pub(crate) fn send(
        &self,
        msg: &[u8],
        dest: Option<SocketAddr>,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let deadline = deadline_of(timeout);
        // The destination was found not congested right after a send failed with ENOBUFS.
        let mut not_congested = false;
        loop {
            if self.dead.load(Ordering::Relaxed) {
                return Err(self.gone());
            }
            let mut g = self.lock();
            let st = &mut *g;
            if let Some(e) = st.end.take_post_error() {
                st.post_dest = None;
                return Err(io::Error::from_raw_os_error(e));
            }
            if st.end.take_post_stop() {
                st.post_dest = None;
            }
            let rec = Rec {
                op: OP_SEND,
                addr: dest,
                ..Rec::default()
            };
            if st.may_post(dest, msg.len()) {
                let rec = Rec {
                    flags: F_POSTED,
                    ..rec
                };
                let was_empty = st.end.room().map_err(broken)? == RING_CAP;
                st.end.push(rec, msg).map_err(broken)?;
                let ring = st.end.must_ring();
                // A posted send has no result that would tell that the daemon went away:
                // look when it sleeps (it needs waking anyway) or should have nothing to do
                // (it may have died before it said it sleeps), at most once per
                // `ALIVE_EVERY` (a request/response loop would pay a `poll` per message; a
                // daemon can die just after any look, so a posted send was never proof).
                let look =
                    (ring || was_empty) && st.alive_seen.is_none_or(|t| t.elapsed() >= ALIVE_EVERY);
                if look {
                    st.alive_seen = Some(std::time::Instant::now());
                    let (_, hup) = sys::wait_readable_or_hangup(
                        self.done.as_raw_fd(),
                        self.ctl.as_raw_fd(),
                        Duration::ZERO,
                    )?;
                    if hup {
                        st.post_dest = None;
                        return Err(self.gone());
                    }
                }
                if ring {
                    sys::eventfd_signal(self.bell.as_raw_fd());
                }
                st.room -= msg.len();
                return Ok(msg.len());
            }
            let r = self.rpc(st, rec, msg)?.remove(0).0;
            st.post_dest = (r.a == 0).then_some(dest);
            drop(g);
            match r.a as i32 {
                0 => return Ok(r.c as usize),
                libc::EAGAIN if !dontwait => self.wait(false, deadline, WAIT_CHUNK)?,
                libc::ENOBUFS if !dontwait => {
                    // Woken by the daemon when the congestion may have cleared; not congested
                    // twice in a row around a failed send: the node's memory, as the embedded
                    // backend says at once.
                    if self.wait_uncongested(dest, deadline, false)? {
                        not_congested = false;
                    } else if std::mem::replace(&mut not_congested, true) {
                        return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
                    }
                }
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }

    /// After a send to `dest` met congestion: asks the daemon to arm the congestion bell and,
    /// when it did (the destination is still congested), waits until it rings (a congestion
    /// map changed or a path went down), `deadline` passes (`ETIMEDOUT`), the daemon goes
    /// away, or with `eintr` a signal handler runs (`EINTR`). `false`: not congested now.
    pub(crate) fn wait_uncongested(
        &self,
        dest: Option<SocketAddr>,
        deadline: Option<std::time::Instant>,
        eintr: bool,
    ) -> io::Result<bool> {
        let rec = Rec {
            op: OP_CONG,
            addr: dest,
            ..Rec::default()
        };
        let r = {
            let mut g = self.lock();
            self.rpc(&mut g, rec, &[])?.remove(0).0
        };
        if r.a != 0 {
            return Err(io::Error::from_raw_os_error(r.a as i32));
        }
        if r.c == 0 {
            return Ok(false);
        }
        let word = || self.cong_word.load();
        match self
            .cong
            .wait(&word, r.d, self.ctl.as_raw_fd(), deadline, eintr)?
        {
            WaitEnd::Changed => Ok(true),
            WaitEnd::HungUp => Err(self.gone()),
        }
    }

    /// The next message the daemon handed (pushed, or brought by a batched receive), if any
    /// (`peek` leaves it queued). Taking the last one while the daemon's socket was empty
    /// clears the receive descriptor.
    fn take_held(&self, max: usize, peek: bool) -> io::Result<Option<(Rec, Vec<u8>)>> {
        let mut g = self.lock();
        let st = &mut *g;
        while let Some((r, data)) = st.end.pop().map_err(broken)? {
            if r.op != OP_RESULT || r.flags & F_PUSHED == 0 {
                return Err(broken(Fault("a result without a request")));
            }
            st.held.push_back((r, data));
        }
        let (mut r, mut data) = if peek {
            match st.held.front() {
                Some(item) => item.clone(),
                None => return Ok(None),
            }
        } else {
            let Some(item) = st.held.pop_front() else {
                return Ok(None);
            };
            st.end.taken();
            self.clear_rx(st);
            item
        };
        if data.len() > max {
            data.truncate(max);
            r.flags |= F_TRUNCATED;
        }
        Ok(Some((r, data)))
    }

    pub(crate) fn recv(
        &self,
        max: usize,
        peek: bool,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        let deadline = deadline_of(timeout);
        loop {
            if let Some((r, data)) = self.take_held(max, peek)? {
                return received(r, data);
            }
            if self.dead.load(Ordering::Relaxed) {
                return Err(self.gone());
            }
            if self.surely_empty() {
                if dontwait {
                    return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                }
                self.wait(true, deadline, WAIT_CHUNK)?;
                continue;
            }
            let rec = Rec {
                op: OP_RECV,
                c: max as u64,
                flags: if peek { F_PEEK } else { F_BATCH },
                ..Rec::default()
            };
            let mut g = self.lock();
            if !g.held.is_empty() || g.end.incoming() {
                // Handed meanwhile (to another thread's request, or pushed).
                continue;
            }
            let mut got = self.rpc(&mut g, rec, &[])?;
            let status = got.last().map_or(0, |(r, _)| r.a as i32);
            if status == 0 && !peek {
                // Behind anything pushed while the request ran: the order they left the
                // socket in.
                g.held.extend(got);
                continue;
            }
            if !g.held.is_empty() {
                // Pushed while the request ran: older than a peeked message.
                continue;
            }
            if status == libc::EAGAIN {
                // Nothing to receive: the readiness this side clears.
                self.clear_rx(&g);
            }
            drop(g);
            match status {
                0 => {
                    let (r, data) = got.swap_remove(0);
                    return received(r, data);
                }
                libc::EAGAIN if !dontwait => {
                    self.wait(true, deadline, WAIT_CHUNK)?;
                }
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

/// A ring the daemon wrote something inconsistent into: `EIO`, as before any ring fault.
fn broken(_: Fault) -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// What a receive result record says.
fn received(r: Rec, data: Vec<u8>) -> io::Result<(Received, Option<SystemTime>)> {
    if r.a != 0 {
        return Err(io::Error::from_raw_os_error(r.a as i32));
    }
    if r.flags & F_CONG != 0 {
        return Ok((Received::CongUpdate(r.c), None));
    }
    let from = r
        .addr
        .ok_or_else(|| io::Error::other("receive result without a sender"))?;
    let ts = (r.flags & F_TS != 0).then(|| UNIX_EPOCH + Duration::from_nanos(r.d));
    let full_len = usize::try_from(r.c).unwrap_or(usize::MAX);
    let truncated = r.flags & F_TRUNCATED != 0;
    Ok((data_from(from, data, None, full_len, truncated), ts))
}
