//! The daemon's side of a client socket's shared-memory ring ([`super::ring`]): set up on
//! [`crate::ctl::Request::SockRing`] by the connection that owns the socket, served by the
//! control server's event loop ([`RingServe`]). Sends and receives run non-blocking on the
//! daemon's socket; the client waits on its readiness descriptors, which this side keeps
//! signalled exactly while the socket is ready, for each direction the client watches.
//!
//! Everything read from the segment is checked ([`super::ring::RingEnd`]); a fault ends the
//! client's connection (the event loop counts it), never the daemon.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::ring::{
    Fault, Rec, RingEnd, F_CONG, F_PEEK, F_READABLE, F_TRUNCATED, F_TS, F_WRITABLE, OP_RECV,
    OP_RESULT, OP_SEND, REC_HDR, SEG_LEN, WANT_RX, WANT_TX,
};
use super::{RecvFlags, Socket};
use crate::ctl::{Failed, Reply};
use crate::message::Received;
use crate::node::admin::{Action, RingServe, Served, Watch};
use crate::sys;
use crate::wire::MAX_MSG_SIZE;

/// Requests served per turn before other connections get theirs.
const TURN: usize = 64;

/// One readiness direction the client may watch.
#[derive(Debug)]
struct Ready {
    fd: OwnedFd,
    signalled: bool,
    watching: bool,
}

impl Ready {
    fn new() -> io::Result<Ready> {
        Ok(Ready {
            fd: sys::eventfd()?,
            signalled: false,
            watching: false,
        })
    }

    fn set(&mut self, ready: bool) {
        if ready && !self.signalled {
            sys::eventfd_signal(self.fd.as_raw_fd());
        } else if !ready && self.signalled {
            sys::eventfd_clear(self.fd.as_raw_fd());
        }
        self.signalled = ready;
    }
}

/// A socket's ring, daemon side.
#[derive(Debug)]
pub(super) struct RingHost {
    end: RingEnd,
    sock: Weak<Socket>,
    /// The client rings this one.
    bell: OwnedFd,
    /// This side rings the client's (results).
    done: OwnedFd,
    rx: Ready,
    tx: Ready,
}

/// Sets up a ring for `sock`: the reply, the descriptors to pass (segment, daemon doorbell,
/// result doorbell, receive and send readiness) and the served ring.
pub(super) fn start(sock: &Arc<Socket>) -> Result<Action, Failed> {
    let fail = |e: io::Error| Failed::io(&e);
    let seg = sys::memfd_sealed("rds-ring", SEG_LEN).map_err(fail)?;
    let shm = sys::Shm::map(seg.as_raw_fd(), SEG_LEN).map_err(fail)?;
    let end = RingEnd::daemon(shm).ok_or_else(|| Failed(libc::EIO, "ring setup".into()))?;
    let host = RingHost {
        end,
        sock: Arc::downgrade(sock),
        bell: sys::eventfd().map_err(fail)?,
        done: sys::eventfd().map_err(fail)?,
        rx: Ready::new().map_err(fail)?,
        tx: Ready::new().map_err(fail)?,
    };
    let fds = vec![
        seg,
        host.bell.try_clone().map_err(fail)?,
        host.done.try_clone().map_err(fail)?,
        host.rx.fd.try_clone().map_err(fail)?,
        host.tx.fd.try_clone().map_err(fail)?,
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
        for (bit, rx) in [(WANT_RX, true), (WANT_TX, false)] {
            if want & bit == 0 {
                continue;
            }
            let ready = if rx { s.readable() } else { s.writable() };
            let r = if rx { &mut self.rx } else { &mut self.tx };
            r.set(ready);
            if !ready && !r.watching {
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

    /// Runs one request; its result record.
    fn run(&self, s: Option<&Arc<Socket>>, rec: &Rec, payload: Vec<u8>) -> (Rec, Bytes) {
        let mut out = Rec {
            op: OP_RESULT,
            seq: rec.seq,
            ..Rec::default()
        };
        let Some(s) = s else {
            out.a = libc::EBADF as u32;
            return (out, Bytes::new());
        };
        let mut data = Bytes::new();
        match rec.op {
            OP_SEND => match s.send_bytes(Bytes::from(payload), rec.addr, true) {
                Ok(n) => out.c = n as u64,
                Err(e) => out.a = errno_of(&e),
            },
            _ => {
                let flags = RecvFlags {
                    peek: rec.flags & F_PEEK != 0,
                    trunc: false,
                    dontwait: true,
                };
                let max = usize::try_from(rec.c)
                    .unwrap_or(MAX_MSG_SIZE)
                    .min(MAX_MSG_SIZE);
                match s.recv_bytes(max, flags) {
                    Ok(Received::Data {
                        msg,
                        full_len,
                        truncated,
                    }) => {
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
                    Ok(Received::CongUpdate(mask)) => {
                        out.flags |= F_CONG;
                        out.c = mask;
                    }
                    // Daemon sockets cannot start RDMA operations, so they never get their
                    // notifications.
                    Ok(Received::RdmaStatus(_)) => out.a = libc::EOPNOTSUPP as u32,
                    Err(e) => out.a = errno_of(&e),
                }
            }
        }
        if s.readable() {
            out.flags |= F_READABLE;
        }
        if s.writable() {
            out.flags |= F_WRITABLE;
        }
        (out, data)
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
            if !matches!(rec.op, OP_SEND | OP_RECV) {
                return Err(Fault("a result record from the client"));
            }
            // A client sends its next request only after it took the last result.
            if self.end.room()? < REC_HDR + MAX_MSG_SIZE {
                return Err(Fault("the client does not take its results"));
            }
            let (out, data) = self.run(sock.as_ref(), &rec, payload);
            // The descriptors are right before the client sees the result.
            if let Some(s) = &sock {
                self.refresh(s, &mut served);
            }
            self.end.push(out, &data)?;
            if self.end.must_ring() {
                sys::eventfd_signal(self.done.as_raw_fd());
            }
        }
        served.more = true;
        Ok(served)
    }
}

impl RingServe for RingHost {
    fn doorbell(&self) -> RawFd {
        self.bell.as_raw_fd()
    }

    fn serve(&mut self) -> Result<Served, String> {
        self.serve_turn().map_err(|f| f.0.to_string())
    }

    fn fired(&mut self, rx: bool) {
        let r = if rx { &mut self.rx } else { &mut self.tx };
        r.watching = false;
        r.set(true);
    }
}
