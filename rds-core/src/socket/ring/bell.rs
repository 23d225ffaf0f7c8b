//! Doorbells and readiness signals shared with a client process. A signal is "set" while
//! bytes wait at its reading end; ringing writes one byte at the other end, clearing reads them
//! off. Two kinds:
//!
//! - A **pipe** ([`Pipe`]) when this side only ever writes it, or only ever reads it: this side
//!   keeps its own end, whose open file description no other process holds, so its
//!   `O_NONBLOCK` is this side's alone; the client gets the other end. A pipe's wake-up costs
//!   what an eventfd's does, a socket's more (the doorbells are on every round trip).
//! - A **socket pair** ([`Signal`]) when this side must also clear a signal whose reading end
//!   the client polls (a description they share): every call this side makes on it is
//!   non-blocking by its own flags (`MSG_DONTWAIT`, and `MSG_NOSIGNAL` against a closed peer).
//!
//! Why not an eventfd: `O_NONBLOCK` belongs to the open file description, which a duplicate
//! passed to another process shares, so a client could clear it and make the daemon's next
//! `read` (or a `write` at the counter's maximum) wait for good. With the two kinds above,
//! nothing the other process does to its descriptors (clear `O_NONBLOCK`, fill the buffer,
//! shut it down, close it) makes a call of this side wait: a full buffer means the signal is
//! already set, a gone peer means nobody listens (a pipe's writer must not die of `SIGPIPE`:
//! the daemon's control thread blocks it). Nothing here can block.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};

/// Bytes [`clear`] reads at most in one call (a client that wrote more leaves its signal set,
/// which costs it a spurious wake-up and nothing else).
const DRAIN_MOST: usize = 4096;

/// A fresh pair of connected ends (close-on-exec, non-blocking).
///
/// # Errors
/// `socketpair(2)` failures (descriptor limits, memory).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(io::Error::from)
}

/// Sets the signal read at the other end of `fd`'s pair (one byte; never blocks).
pub fn ring(fd: RawFd) {
    // EAGAIN: the other end's buffer is full, so it is readable already. EPIPE, ECONNRESET:
    // the other end is gone or shut down, and nobody waits there.
    let _ = send(fd, &[1], MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL);
}

/// What [`clear`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// Nothing was waiting.
    Empty,
    /// Bytes were read off (the signal was set).
    Rang,
    /// The other end is closed or shut down for writing: it will never ring again, and this
    /// end stays readable (a poller must stop watching it).
    Closed,
}

/// Reads the bytes waiting at `fd` (at most [`DRAIN_MOST`]; never blocks).
pub fn clear(fd: RawFd) -> Cleared {
    let mut buf = [0u8; DRAIN_MOST];
    loop {
        match recv(fd, &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Cleared::Closed,
            Ok(_) => return Cleared::Rang,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => return Cleared::Empty,
            Err(_) => return Cleared::Closed,
        }
    }
}

/// A pipe of which this side keeps one end (non-blocking, its own) and hands out the other.
#[derive(Debug)]
pub struct Pipe {
    /// This side's end.
    pub mine: OwnedFd,
    /// The end for the client until it is handed out (non-blocking at first; the client may
    /// change that). This side keeps no copy: the client closing it is seen.
    theirs: Option<OwnedFd>,
}

impl Pipe {
    /// A pipe this side writes (rings) and the client reads (polls, clears).
    ///
    /// # Errors
    /// `pipe2(2)` failures.
    pub fn to_client() -> io::Result<Pipe> {
        let (r, w) = pipe2()?;
        Ok(Pipe {
            mine: w,
            theirs: Some(r),
        })
    }

    /// A pipe the client writes (rings) and this side reads (polls, clears).
    ///
    /// # Errors
    /// `pipe2(2)` failures.
    pub fn from_client() -> io::Result<Pipe> {
        let (r, w) = pipe2()?;
        Ok(Pipe {
            mine: r,
            theirs: Some(w),
        })
    }

    /// The client's end, to hand out (once).
    ///
    /// # Errors
    /// `EBADF` when it was handed out already.
    pub fn hand_out(&mut self) -> io::Result<OwnedFd> {
        self.theirs
            .take()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }
}

fn pipe2() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(io::Error::from)
}

/// Rings a pipe through its writing end `fd`, a non-blocking description of this process's
/// own (a full pipe is rung already; a closed reader listens no more).
pub fn ring_pipe(fd: &OwnedFd) {
    let _ = nix::unistd::write(fd, &[1]);
}

/// Clears a pipe through its reading end `fd` (at most [`DRAIN_MOST`] bytes): the reader's own
/// description when this side reads, or the client's own end on the client's side.
pub fn clear_pipe(fd: &OwnedFd) -> Cleared {
    let mut buf = [0u8; DRAIN_MOST];
    loop {
        match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
            Ok(0) => return Cleared::Closed,
            Ok(_) => return Cleared::Rang,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => return Cleared::Empty,
            Err(_) => return Cleared::Closed,
        }
    }
}

/// Whether the signal at `fd` is set (bytes wait there; never blocks).
pub fn is_set(fd: RawFd) -> bool {
    let mut b = [0u8; 1];
    matches!(
        recv(fd, &mut b, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_PEEK),
        Ok(n) if n > 0
    )
}

/// A level signal this process keeps for a client: set while its reading end holds bytes.
/// The client polls (a duplicate of) `read`; it may also clear it, and set it again through a
/// duplicate of `write`.
#[derive(Debug)]
pub struct Signal {
    write: OwnedFd,
    read: OwnedFd,
}

impl Signal {
    /// A new signal, clear.
    ///
    /// # Errors
    /// See [`pair`].
    pub fn new() -> io::Result<Signal> {
        let (write, read) = pair()?;
        Ok(Signal { write, read })
    }

    /// Sets it.
    pub fn set(&self) {
        ring(self.write.as_raw_fd());
    }

    /// Clears it.
    pub fn clear(&self) {
        clear(self.read.as_raw_fd());
    }

    /// A duplicate of the end that is polled.
    ///
    /// # Errors
    /// `dup` failures.
    pub fn read_end(&self) -> io::Result<OwnedFd> {
        self.read.try_clone()
    }

    /// A duplicate of the end that sets it.
    ///
    /// # Errors
    /// `dup` failures.
    pub fn write_end(&self) -> io::Result<OwnedFd> {
        self.write.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn set_blocking(fd: &OwnedFd) {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        fcntl(fd.as_fd().as_raw_fd(), FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    }

    #[test]
    fn ring_clear_and_is_set() {
        let (a, b) = pair().unwrap();
        assert!(!is_set(b.as_raw_fd()));
        assert_eq!(clear(b.as_raw_fd()), Cleared::Empty);
        ring(a.as_raw_fd());
        ring(a.as_raw_fd());
        assert!(is_set(b.as_raw_fd()));
        assert_eq!(clear(b.as_raw_fd()), Cleared::Rang);
        assert!(!is_set(b.as_raw_fd()));
        drop(a);
        assert_eq!(clear(b.as_raw_fd()), Cleared::Closed);
    }

    /// What a hostile client does to the descriptors it holds cannot make this side wait:
    /// blocking mode set on the shared description, the buffer filled to the brim, the ends
    /// shut down or closed.
    #[test]
    fn a_client_cannot_make_it_block() {
        let s = Signal::new().unwrap();
        let (cr, cw) = (s.read_end().unwrap(), s.write_end().unwrap());
        set_blocking(&cr);
        set_blocking(&cw);
        // Clearing an empty signal whose description is now blocking returns at once.
        s.clear();
        // Fill the buffer from the client's side until it would block.
        let big = vec![0u8; 1 << 16];
        while send(cw.as_raw_fd(), &big, MsgFlags::MSG_DONTWAIT).is_ok() {}
        // Setting a full signal returns at once.
        for _ in 0..1000 {
            s.set();
        }
        assert!(is_set(cr.as_raw_fd()));
        // Clearing reads a bounded amount and returns.
        s.clear();
        // Shut down and closed by the client: no signal (SIGPIPE) and no wait.
        nix::sys::socket::shutdown(cw.as_raw_fd(), nix::sys::socket::Shutdown::Both).unwrap();
        s.set();
        s.clear();
        drop(cr);
        drop(cw);
        s.set();
        s.clear();
    }

    /// This side's end of a pipe is its own: the client making its end blocking, filling it,
    /// or closing it cannot make this side's calls wait.
    #[test]
    fn a_pipe_end_of_our_own_never_blocks() {
        let mut pipe = nix::sys::signal::SigSet::empty();
        pipe.add(nix::sys::signal::Signal::SIGPIPE);
        let _ = pipe.thread_block();
        let mut out = Pipe::to_client().unwrap();
        let theirs = out.hand_out().unwrap();
        assert!(out.hand_out().is_err());
        set_blocking(&theirs);
        for _ in 0..200_000 {
            ring_pipe(&out.mine);
        }
        assert!(is_readable(&theirs));
        drop(theirs);
        ring_pipe(&out.mine);
        let mut inp = Pipe::from_client().unwrap();
        let theirs = inp.hand_out().unwrap();
        set_blocking(&theirs);
        assert_eq!(clear_pipe(&inp.mine), Cleared::Empty);
        let _ = nix::unistd::write(&theirs, &[1]);
        assert_eq!(clear_pipe(&inp.mine), Cleared::Rang);
        drop(theirs);
        assert_eq!(clear_pipe(&inp.mine), Cleared::Closed);
    }

    fn is_readable(fd: &OwnedFd) -> bool {
        crate::sys::poll_readable(&[fd.as_raw_fd()], std::time::Duration::ZERO).is_ok_and(|r| r[0])
    }

    #[test]
    fn the_peer_gone_is_seen() {
        let (a, b) = pair().unwrap();
        drop(b);
        ring(a.as_raw_fd());
        assert_eq!(clear(a.as_raw_fd()), Cleared::Closed);
    }
}
