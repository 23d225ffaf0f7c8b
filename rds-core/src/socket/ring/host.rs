//! The daemon's side of a client socket's shared-memory ring ([`super`] documents the
//! protocol): set up on [`crate::ctl::Request::SockRing`] by the connection that owns the
//! socket, served by the control server's event loop ([`RingServe`]). Sends and receives run
//! non-blocking on the daemon's socket; the client waits on its readiness signals, which this
//! side keeps set while the socket is ready (or the client holds messages it was handed), for
//! each direction the client watches. While the client watches its receive side, messages
//! that reach the socket are pushed into the ring as they come (up to [`PUSH_WINDOW`] bytes
//! waiting there), so that the client's next receive finds them without asking.
//!
//! Everything read from the segment is checked ([`super::RingEnd`]); a fault ends the
//! client's connection (the event loop counts it), never the daemon. Every call on a
//! descriptor the client shares is non-blocking by its own flags ([`super::bell`]).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::bell::{self, Pipe, Signal};
use super::{
    CongWord, Fault, Rec, RingEnd, F_BATCH, F_CONG, F_MORE, F_PEEK, F_POSTED, F_PUSHED, F_READABLE,
    F_TRUNCATED, F_TS, F_WRITABLE, OP_CONG, OP_RECV, OP_RESULT, OP_SEND, OP_SYNC, POST_WINDOW,
    REC_HDR, RING_CAP, SEG_LEN, WANT_RX, WANT_TX,
};
use crate::ctl::{Failed, Reply};
use crate::message::Received;
use crate::node::admin::{Action, RingServe, Served, Watch};
use crate::proto::SendExtras;
use crate::socket::cong::{self, Wake};
use crate::socket::{RecvFlags, Socket};
use crate::sys;
use crate::wire::MAX_MSG_SIZE;

/// Requests served per turn before other connections get theirs.
const TURN: usize = 64;
/// Most messages one batched receive (or one push) brings.
const BATCH_MOST: usize = 32;
/// Bytes of pushed messages the result ring may hold (it keeps room for a largest result
/// beside them: [`RING_CAP`] is larger by more than this).
const PUSH_WINDOW: usize = 64 << 10;

/// Records a closing ring runs per turn of the event loop (the rest wait for the next turn).
const FINISH_TURN: usize = 64;

/// How one readiness direction the client may watch is signalled.
#[derive(Debug)]
enum Sig {
    /// Receive: a pipe this side only writes. The client clears it itself (after it took the
    /// last message it held, when the daemon's socket was empty, or when a receive found
    /// nothing), so every time the socket is ready it is set again, even when `signalled`
    /// says so; this side never clears it.
    SetOnly(Pipe),
    /// Send: a socket pair this side sets and clears (as the socket is ready or not).
    SetAndClear(Signal),
}

/// One readiness direction the client may watch.
#[derive(Debug)]
struct Ready {
    sig: Sig,
    signalled: bool,
    watching: bool,
}

impl Ready {
    fn new(sig: Sig) -> Ready {
        Ready {
            sig,
            signalled: false,
            watching: false,
        }
    }

    fn set(&mut self, ready: bool) {
        match &self.sig {
            Sig::SetOnly(p) if ready => bell::ring_pipe(&p.mine),
            Sig::SetOnly(_) => {}
            Sig::SetAndClear(s) if self.signalled != ready => {
                if ready {
                    s.set();
                } else {
                    s.clear();
                }
            }
            Sig::SetAndClear(_) => {}
        }
        self.signalled = ready;
    }
}

/// The client's congestion bell, rung by the node's congestion watcher ([`cong`]) from its
/// own thread: this side's count, stored into the segment's word, then a byte into the pipe
/// (this side's own non-blocking end: never waits, whatever the client does to its end).
#[derive(Debug)]
struct RingBell {
    gen: AtomicU64,
    word: CongWord,
    ring: OwnedFd,
}

impl Wake for RingBell {
    fn gen(&self) -> u64 {
        self.gen.load(Ordering::SeqCst)
    }

    fn wake(&self) {
        let g = self.gen.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        self.word.store(g);
        bell::ring_pipe(&self.ring);
    }
}

/// A socket's ring, daemon side.
#[derive(Debug)]
pub(crate) struct RingHost {
    end: RingEnd,
    sock: Weak<Socket>,
    /// The doorbell the client rings for requests: an eventfd this side never reads or writes
    /// (the client shares its description); the event loop watches it edge-triggered, so each
    /// ring is one wake-up, and the client's own counter is its own business.
    bell: OwnedFd,
    /// The doorbell this side rings for results (this side writes its end).
    done: Pipe,
    rx: Ready,
    tx: Ready,
    /// Bytes of posted sends queued past congestion since a waited-for send to `forced_to`
    /// succeeded (at most [`POST_WINDOW`]: a client that keeps posting to a congested
    /// destination gets `ENOBUFS` instead).
    forced: usize,
    forced_to: Option<Option<SocketAddr>>,
    /// Records a closing ring may still run ([`RingServe::finish`]).
    finish_left: Option<usize>,
    /// A closing ring keeps its socket open until its posted sends have run (the connection
    /// that owned it may be gone by then).
    keep: Option<Arc<Socket>>,
    /// Armed by [`OP_CONG`]; the watcher holds it weakly (it goes with the ring).
    cong: Arc<RingBell>,
    /// The socket tells the event loop when it becomes ready ([`RingServe::follow`]): no
    /// descriptor to watch.
    followed: bool,
}

impl Drop for RingHost {
    fn drop(&mut self) {
        if self.followed {
            if let Some(s) = self.sock.upgrade() {
                s.set_ready_hook(None);
            }
        }
    }
}

/// Sets up a ring for `sock`: the reply, the descriptors to pass (in the order of [`super`]'s
/// pieces) and the served ring.
pub(crate) fn start(sock: &Arc<Socket>) -> Result<Action, Failed> {
    let fail = |e: io::Error| Failed::io(&e);
    let seg = sys::memfd_sealed("rds-ring", SEG_LEN).map_err(fail)?;
    let shm = sys::Shm::map(seg.as_raw_fd(), SEG_LEN).map_err(fail)?;
    let end = RingEnd::daemon(shm).ok_or_else(|| Failed(libc::EIO, "ring setup".into()))?;
    let mut cong_pipe = Pipe::to_client().map_err(fail)?;
    let cong_end = cong_pipe.hand_out().map_err(fail)?;
    let cong = Arc::new(RingBell {
        gen: AtomicU64::new(0),
        word: end.cong_word(),
        ring: cong_pipe.mine,
    });
    let mut host = RingHost {
        end,
        sock: Arc::downgrade(sock),
        bell: sys::eventfd().map_err(fail)?,
        done: Pipe::to_client().map_err(fail)?,
        rx: Ready::new(Sig::SetOnly(Pipe::to_client().map_err(fail)?)),
        tx: Ready::new(Sig::SetAndClear(Signal::new().map_err(fail)?)),
        forced: 0,
        forced_to: None,
        finish_left: None,
        keep: None,
        cong,
        followed: false,
    };
    // The client's ends: this side keeps none of them open (an end the client closed is
    // seen as closed, and the pipes' other ends stay this side's alone).
    let rx_end = match &mut host.rx.sig {
        Sig::SetOnly(p) => p.hand_out().map_err(fail)?,
        Sig::SetAndClear(_) => unreachable!("receive readiness is a pipe"),
    };
    let tx_end = match &host.tx.sig {
        Sig::SetAndClear(s) => s.read_end().map_err(fail)?,
        Sig::SetOnly(_) => unreachable!("send readiness is a socket pair"),
    };
    let fds = vec![
        seg,
        host.bell.try_clone().map_err(fail)?,
        host.done.hand_out().map_err(fail)?,
        rx_end,
        tx_end,
        cong_end,
    ];
    Ok(Action::Ring {
        reply: Reply::SockRing { seg_len: SEG_LEN },
        fds,
        ring: Box::new(host),
    })
}

fn errno_of(e: &io::Error) -> u32 {
    e.raw_os_error().unwrap_or(libc::EIO) as u32
}

impl RingHost {
    /// Brings the readiness descriptors the client watches up to date, and asks the event
    /// loop to watch the socket for the directions that are not ready.
    fn refresh(&mut self, s: &Arc<Socket>, served: &mut Served) {
        let want = self.end.take_want();
        if want & (WANT_RX | WANT_TX) == 0 {
            return;
        }
        // One look at both directions; on a followed socket it also brings the hook's flags
        // in line, so that the hook tells the next change.
        let (readable, writable) = s.ready_synced();
        for (bit, rx) in [(WANT_RX, true), (WANT_TX, false)] {
            if want & bit == 0 {
                continue;
            }
            // Messages handed to the client and not yet taken keep it readable; the socket
            // is watched whenever it is not (new messages are pushed).
            let sock_ready = if rx { readable } else { writable };
            if rx {
                self.end.set_sock_readable(sock_ready);
            }
            let ready = sock_ready || (rx && self.end.client_holds());
            let r = if rx { &mut self.rx } else { &mut self.tx };
            r.set(ready);
            if sock_ready || r.watching {
                continue;
            }
            if self.followed {
                // The socket's hook tells the event loop (`fired` then comes).
                r.watching = true;
            } else {
                let fd = if rx { s.fd() } else { s.send_fd() };
                if let Ok(fd) = fd {
                    r.watching = true;
                    served.watch.push(Watch {
                        fd,
                        rx,
                        hold: Box::new(s.clone()),
                    });
                }
            }
        }
    }

    /// Pushes the whole messages queued at the socket into the result ring, up to
    /// [`PUSH_WINDOW`] bytes waiting there, without a request.
    fn push(&mut self, s: &Socket) -> Result<(), Fault> {
        let used = RING_CAP - self.end.room()?;
        let budget = PUSH_WINDOW.saturating_sub(used);
        let items = s.recv_more(MAX_MSG_SIZE, budget, REC_HDR, BATCH_MOST);
        if items.is_empty() {
            return Ok(());
        }
        self.end.handed(items.len() as u64);
        for got in items {
            let (mut r, data) = result_of(s, 0, got);
            r.flags |= F_PUSHED;
            self.end.push(r, &data)?;
        }
        Ok(())
    }

    /// A posted send: no result; a failure is kept for the client's next send; one that
    /// meets congestion is queued past it (within [`POST_WINDOW`] bytes, see
    /// [`RingHost::forced`]) and makes the client wait for its sends again.
    fn run_posted(&mut self, s: Option<&Arc<Socket>>, rec: &Rec, payload: Vec<u8>) {
        let Some(s) = s else {
            self.end.post_failed(libc::EBADF as u32);
            return;
        };
        let len = payload.len();
        let past = self.forced + len <= POST_WINDOW;
        match s.send_posted(crate::buf::freeze(payload), rec.addr, past) {
            Ok(false) => {}
            Ok(true) => {
                self.forced += len;
                self.forced_to = Some(rec.addr);
                self.end.stop_posting();
            }
            Err(e) => {
                self.end.stop_posting();
                self.end.post_failed(errno_of(&e));
            }
        }
    }

    /// Runs one request; its result records, in order (all but the last carry `F_MORE`).
    fn run(&mut self, s: Option<&Arc<Socket>>, rec: &Rec, payload: Vec<u8>) -> Vec<(Rec, Bytes)> {
        let mut out = Rec {
            op: OP_RESULT,
            seq: rec.seq,
            ..Rec::default()
        };
        let Some(s) = s else {
            out.a = libc::EBADF as u32;
            return vec![(out, Bytes::new())];
        };
        let mut results = Vec::new();
        match rec.op {
            OP_SEND => match s.send_bytes(crate::buf::freeze(payload), rec.addr, true) {
                Ok(n) => {
                    out.c = n as u64;
                    if self.forced_to == Some(rec.addr) {
                        // That destination takes sends again.
                        self.forced = 0;
                        self.forced_to = None;
                    }
                }
                Err(e) => out.a = errno_of(&e),
            },
            OP_CONG => {
                let bell: Arc<dyn Wake> = self.cong.clone();
                match s.embedded() {
                    None => out.a = libc::EBADF as u32,
                    Some(b) => match cong::arm(&b.node, b.id, rec.addr, &bell) {
                        Ok(Some(gen)) => {
                            out.c = 1;
                            out.d = gen;
                        }
                        Ok(None) => {}
                        Err(e) => out.a = errno_of(&e),
                    },
                }
            }
            OP_RECV => {
                let peek = rec.flags & F_PEEK != 0;
                let flags = RecvFlags {
                    peek,
                    trunc: false,
                    dontwait: true,
                };
                let max = usize::try_from(rec.c)
                    .unwrap_or(MAX_MSG_SIZE)
                    .min(MAX_MSG_SIZE);
                match s.recv_bytes(max, flags) {
                    Ok(first) => {
                        let batch = rec.flags & F_BATCH != 0 && !peek;
                        let more = if let (true, Received::Data { msg, .. }) = (batch, &first) {
                            // Room for the first result, then whole messages only (a later
                            // receive may have a larger buffer).
                            let budget = self
                                .end
                                .room()
                                .unwrap_or(0)
                                .saturating_sub(REC_HDR + msg.payload.len());
                            s.recv_more(max, budget, REC_HDR, BATCH_MOST)
                        } else {
                            Vec::new()
                        };
                        // Every message the client will hold until it takes it (a peeked
                        // one stays in the socket).
                        if batch {
                            self.end.handed(1 + more.len() as u64);
                        }
                        for got in std::iter::once(first).chain(more) {
                            let (r, data) = result_of(s, rec.seq, got);
                            results.push((r, data));
                        }
                    }
                    Err(e) => out.a = errno_of(&e),
                }
            }
            _ => {}
        }
        if results.is_empty() {
            results.push((out, Bytes::new()));
        }
        let (readable, writable, room) = s.ring_state();
        let n = results.len();
        for (i, (r, _)) in results.iter_mut().enumerate() {
            if i + 1 < n {
                r.flags |= F_MORE;
            }
            if readable {
                r.flags |= F_READABLE;
            }
            if writable {
                r.flags |= F_WRITABLE;
            }
            r.room = u32::try_from(room).unwrap_or(u32::MAX);
        }
        results
    }

    fn serve_turn(&mut self) -> Result<Served, Fault> {
        let mut served = Served::default();
        let sock = self.sock.upgrade();
        for _ in 0..TURN {
            let Some((rec, payload)) = self.end.pop()? else {
                if let Some(s) = &sock {
                    self.refresh(s, &mut served);
                }
                if self.end.may_sleep() {
                    return Ok(served);
                }
                continue;
            };
            if !matches!(rec.op, OP_SEND | OP_RECV | OP_SYNC | OP_CONG) {
                return Err(Fault("a result record from the client"));
            }
            if rec.op == OP_SEND && rec.flags & F_POSTED != 0 {
                self.run_posted(sock.as_ref(), &rec, payload);
                continue;
            }
            // A client sends its next waited-for request only after it took the last
            // result.
            if self.end.room()? < REC_HDR + MAX_MSG_SIZE {
                return Err(Fault("the client does not take its results"));
            }
            let results = self.run(sock.as_ref(), &rec, payload);
            // The descriptors are right before the client sees the result.
            if let Some(s) = &sock {
                self.refresh(s, &mut served);
            }
            for (out, data) in results {
                self.end.push(out, &data)?;
            }
            if self.end.must_ring() {
                bell::ring_pipe(&self.done.mine);
            }
        }
        served.more = true;
        Ok(served)
    }
}

/// A result record for one received item.
fn result_of(s: &Socket, seq: u64, got: Received) -> (Rec, Bytes) {
    let mut out = Rec {
        op: OP_RESULT,
        seq,
        ..Rec::default()
    };
    let mut data = Bytes::new();
    match got {
        Received::Data {
            msg,
            full_len,
            truncated,
        } => {
            out.c = full_len as u64;
            out.addr = Some(msg.from);
            if truncated {
                out.flags |= F_TRUNCATED;
            }
            if let Some(n) = s.node() {
                out.d = n.wall_ns(msg.rx_time);
                out.flags |= F_TS;
            }
            data = msg.payload;
        }
        Received::CongUpdate(mask) => {
            out.flags |= F_CONG;
            out.c = mask;
        }
        // Daemon sockets cannot start RDMA operations, so they never get their
        // notifications.
        Received::RdmaStatus(_) => out.a = libc::EOPNOTSUPP as u32,
    }
    (out, data)
}

/// What the ring host asks of the daemon's (embedded) socket.
impl Socket {
    /// A posted send: non-blocking; one that meets congestion is queued past it when `past`
    /// (the client was already told it was sent). `Ok(true)` when it met congestion.
    fn send_posted(&self, msg: Bytes, dest: Option<SocketAddr>, past: bool) -> io::Result<bool> {
        match self.send_local(msg.clone(), dest, true, &SendExtras::default()) {
            Ok(_) => Ok(false),
            Err(e) if past && e.raw_os_error() == Some(libc::ENOBUFS) => {
                let past = SendExtras {
                    past_congestion: true,
                    ..SendExtras::default()
                };
                self.send_local(msg, dest, true, &past).map(|_| true)
            }
            Err(e) => Err(e),
        }
    }

    /// Readable, writable and the send buffer's room, under one lock.
    fn ring_state(&self) -> (bool, bool, usize) {
        self.embedded().map_or((false, false, 0), |b| {
            let core = b.node.inner.lock_core();
            let st = &core.stack;
            (st.readable(b.id), st.writable(b.id), st.send_room(b.id))
        })
    }

    /// Up to `most` more queued items under one lock, each whole (a message no longer than
    /// `max_len`), while their lengths plus `overhead` each fit in `budget`.
    fn recv_more(
        &self,
        max_len: usize,
        mut budget: usize,
        overhead: usize,
        most: usize,
    ) -> Vec<Received> {
        let Some(b) = self.embedded() else {
            return Vec::new();
        };
        let mut core = b.node.inner.lock_core();
        let mut out = Vec::new();
        while out.len() < most {
            match core.stack.next_len(b.id) {
                Some(n) if n <= max_len && n + overhead <= budget => budget -= n + overhead,
                _ => break,
            }
            match core.stack.recv(b.id, max_len, false) {
                Ok(r) => out.push(r),
                Err(_) => break,
            }
        }
        if out.is_empty() {
            return out;
        }
        let (r, w) = (core.stack.readable(b.id), core.stack.writable(b.id));
        b.waiter.update_fds(r, w);
        b.node.inner.after_app_call(core);
        out
    }
}

impl RingServe for RingHost {
    fn doorbell(&self) -> RawFd {
        self.bell.as_raw_fd()
    }

    fn serve(&mut self) -> Result<Served, String> {
        self.serve_turn().map_err(|f| f.0.to_string())
    }

    fn follow(&mut self, ready: Arc<dyn Fn(bool) + Send + Sync>) -> bool {
        if let Some(s) = self.sock.upgrade() {
            self.followed = s.set_ready_hook(Some(ready));
        }
        self.followed
    }

    fn finish(&mut self) -> bool {
        if self.finish_left.is_none() {
            self.keep = self.sock.upgrade();
        }
        let sock = self.keep.clone();
        // A turn's worth of records, and at most a full ring in all (a client that keeps
        // writing after its connection closed gets no more).
        let left = self.finish_left.get_or_insert(RING_CAP / REC_HDR);
        let turn = FINISH_TURN.min(*left);
        *left -= turn;
        if turn == 0 {
            return true;
        }
        for _ in 0..turn {
            let Ok(Some((rec, payload))) = self.end.pop() else {
                return true;
            };
            if rec.op == OP_SEND && rec.flags & F_POSTED != 0 {
                self.run_posted(sock.as_ref(), &rec, payload);
            }
        }
        false
    }

    fn fired(&mut self, rx: bool) -> Vec<Watch> {
        let r = if rx { &mut self.rx } else { &mut self.tx };
        if !r.watching {
            // A followed socket tells every change; this side did not ask for this one.
            return Vec::new();
        }
        r.watching = false;
        let mut served = Served::default();
        if let (true, Some(s)) = (rx, self.sock.upgrade()) {
            // A bad position is the client's own doing; its next request reports it.
            let _ = self.push(&s);
            // Watch again if the socket is empty now; refresh signals the descriptor.
            self.refresh(&s, &mut served);
        } else {
            r.set(true);
        }
        served.watch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{CtlMode, Node, NodeConfig};

    /// A closing ring runs the sends its client posted a turn's worth at a time, and no more
    /// than a ring's worth in all, however many the client keeps writing.
    #[test]
    fn a_closing_ring_drains_in_bounded_turns() {
        let ip: std::net::IpAddr = "127.173.0.1".parse().unwrap();
        let mut cfg = NodeConfig::new([ip]);
        cfg.ctl = CtlMode::Off;
        let node = Node::start(cfg).unwrap();
        let tx = Arc::new(Socket::with_node(&node));
        tx.bind(SocketAddr::new(ip, 4000)).unwrap();
        let rx = Socket::with_node(&node);
        rx.bind(SocketAddr::new(ip, 4001)).unwrap();
        rx.set_recv_buffer_size(8 << 20);
        let Action::Ring { fds, mut ring, .. } = start(&tx).unwrap() else {
            panic!("no ring");
        };
        let shm = sys::Shm::map(fds[0].as_raw_fd(), SEG_LEN).unwrap();
        let mut client = RingEnd::client(shm).unwrap();
        let post = |c: &mut RingEnd, i: u32| {
            let rec = Rec {
                op: OP_SEND,
                flags: F_POSTED,
                addr: Some(SocketAddr::new(ip, 4001)),
                ..Rec::default()
            };
            c.push(rec, &i.to_be_bytes()).unwrap();
        };
        for i in 0..200 {
            post(&mut client, i);
        }
        let mut turns = 0;
        while !ring.finish() {
            turns += 1;
            // A client that keeps writing after it left.
            for i in 0..FINISH_TURN as u32 {
                post(&mut client, 1000 + i);
            }
            assert!(turns < 1000, "the drain does not end");
        }
        // Every turn ran a turn's worth, and the total stopped at a ring's worth of records.
        let most = RING_CAP / REC_HDR;
        assert_eq!(turns, most.div_ceil(FINISH_TURN));
        rx.set_nonblocking(true);
        let mut buf = [0u8; 8];
        let mut got = 0;
        while rx.recv_from(&mut buf).is_ok() {
            got += 1;
        }
        assert_eq!(got, most);
        node.shutdown();
    }
}
