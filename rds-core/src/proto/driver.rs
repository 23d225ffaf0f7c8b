//! The engine driver, written once: how the [`Stack`]'s outputs reach a transport and what
//! the transport reports reaches the [`Stack`], with no I/O of its own.
//!
//! A driver implements [`Io`] (open and close transport connections, carry a path's frames,
//! wake sockets) and, after every input to the stack (an application call, a transport report,
//! [`handle_due`] for timers), calls [`pump`] so that every [`Event`] the input caused is acted
//! on. A driver that must act on some events later (the node's application threads hand
//! transport work to its I/O thread) keeps those events and passes each to [`dispatch`] when
//! it can. Frames leave through [`Frames`] (TCP: whole messages for the byte stream; IB: one
//! SEND each) and arrive through [`deliver`].
//!
//! The node (`crate::node`), the simulator (`crate::sim`), the fuzz checks and the engine tests
//! all drive the engine this way.

use crate::time::Instant;

use super::{
    ConnId, DropReason, Event, Frame, HeldEnd, LinkId, SockId, Stack, StreamError, Transmit,
};

/// The I/O side of a driver: what a transport does for the engine's [`Event`]s.
///
/// Each method may call back into [`Io::stack`] (report a connection's outcome at once, take
/// frames); events that such a call causes are acted on by the same [`pump`].
pub trait Io {
    /// The stack this driver drives.
    fn stack(&mut self) -> &mut Stack;

    /// [`Event::Connect`]: open a transport connection for the path, and report the outcome
    /// now or later with [`Stack::handle_connected`] or [`Stack::handle_connect_failed`]
    /// quoting `epoch`.
    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32);

    /// [`Event::Disconnect`]: close the path's transport connection with `epoch` (the engine
    /// already reset the path). When [`DropReason::drains`], read on until the peer's end of
    /// stream and then report [`Stack::handle_disconnected`] for `epoch`.
    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason);

    /// [`Event::Transmit`]: take the path's frames ([`Frames`]) as far as the transport has
    /// room; the engine asks again when more frames are queued.
    fn transmit(&mut self, conn: ConnId, path: usize);

    /// [`Event::Wake`]: the socket became readable or writable or got a notification.
    fn wake(&mut self, sock: SockId) {
        let _ = sock;
    }

    /// [`Event::CongChanged`]: a congestion map changed; senders blocked on congestion may
    /// retry.
    fn cong_changed(&mut self) {}

    /// [`Event::RdmaUnuse`]: release the RDMA region `rkey` of `sock` if it is use-once.
    fn rdma_unuse(&mut self, sock: SockId, rkey: u32) {
        let _ = (sock, rkey);
    }

    /// [`Event::Adopt`]: the held accepted connection `link` carries `(conn, path, epoch)`
    /// now; read it (from its first byte). A transport that never answers
    /// [`Stack::link_accepted`] with a connection to hold has none.
    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        let _ = (link, conn, path, epoch);
    }

    /// [`Event::Refuse`]: reset the held accepted connection `link` unread.
    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        let _ = (link, why);
    }
}

/// Acts on every event the stack has, in order, including those that acting on them causes.
/// Returns how many there were.
pub fn pump<I: Io + ?Sized>(io: &mut I) -> usize {
    let mut n = 0;
    while let Some(ev) = io.stack().poll_event() {
        n += 1;
        dispatch(io, ev);
    }
    n
}

/// Acts on one event (taken from [`Stack::poll_event`] earlier).
pub fn dispatch<I: Io + ?Sized>(io: &mut I, ev: Event) {
    match ev {
        Event::Connect { conn, path, epoch } => io.connect(conn, path, epoch),
        Event::Disconnect {
            conn,
            path,
            epoch,
            reason,
        } => io.disconnect(conn, path, epoch, reason),
        Event::Transmit { conn, path } => io.transmit(conn, path),
        Event::Wake(sock) => io.wake(sock),
        Event::CongChanged => io.cong_changed(),
        Event::RdmaUnuse { sock, rkey } => io.rdma_unuse(sock, rkey),
        Event::Adopt {
            link,
            conn,
            path,
            epoch,
        } => io.adopt(link, conn, path, epoch),
        Event::Refuse { link, why } => io.refuse(link, why),
    }
}

/// Runs the stack's timers if one is due at `now`; returns whether one was.
pub fn handle_due(stack: &mut Stack, now: Instant) -> bool {
    if stack.poll_timeout().is_some_and(|t| t <= now) {
        stack.handle_timeout(now);
        true
    } else {
        false
    }
}

/// Hands frames received on a path (TCP: parsed from its byte stream) to the stack in order,
/// stopping at the first that breaks the protocol (the engine then dropped the path), and
/// then reports how parsing the stream ended: a [`StreamError`] drops the path.
///
/// # Errors
/// Why the engine dropped the path, if a frame made it.
pub fn deliver(
    stack: &mut Stack,
    now: Instant,
    conn: ConnId,
    path: usize,
    epoch: u32,
    frames: impl IntoIterator<Item = Frame>,
    parsed: Result<(), StreamError>,
) -> Result<(), DropReason> {
    let mut r = Ok(());
    for f in frames {
        r = stack.handle_frame(now, conn, path, epoch, f);
        if r.is_err() {
            break;
        }
    }
    if let Err(e) = parsed {
        stack.handle_stream_error(now, conn, path, epoch, e);
    }
    r
}

/// A path's frames in wire order, taken from [`Stack::poll_transmit`] one by one: a transport
/// takes as many as it has room for.
#[derive(Debug)]
pub struct Frames<'a> {
    stack: &'a mut Stack,
    now: Instant,
    conn: ConnId,
    path: usize,
}

impl<'a> Frames<'a> {
    /// The frames of `(conn, path)` at `now`.
    pub fn new(stack: &'a mut Stack, now: Instant, conn: ConnId, path: usize) -> Self {
        Frames {
            stack,
            now,
            conn,
            path,
        }
    }
}

impl Iterator for Frames<'_> {
    type Item = Transmit;

    fn next(&mut self) -> Option<Transmit> {
        self.stack.poll_transmit(self.now, self.conn, self.path)
    }
}
