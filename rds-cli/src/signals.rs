//! The stop signals, SIGINT (Ctrl-C) and SIGTERM, taken without a signal handler: they are
//! blocked and read from a signalfd ([`StopSignals`]). Blocking must come before the process
//! starts any thread (an RDS node's included): threads inherit the mask, so that none of them
//! takes a signal with its default action, and the signals stay pending for the descriptor.
//! A tool polls the descriptor with its other work ([`StopSignals::as_raw_fd`],
//! [`StopSignals::take`]) or waits on it on a thread of its own ([`StopSignals::wait`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// SIGINT and SIGTERM, blocked in the calling thread (and the threads it starts after) and
/// readable from a non-blocking signalfd.
#[derive(Debug)]
pub struct StopSignals {
    fd: SignalFd,
}

impl StopSignals {
    /// Blocks SIGINT and SIGTERM in the calling thread and opens the signalfd.
    ///
    /// # Errors
    /// The mask cannot be changed or the descriptor cannot be had (`EMFILE`, say).
    pub fn block() -> io::Result<StopSignals> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGINT);
        mask.add(Signal::SIGTERM);
        mask.thread_block().map_err(io::Error::from)?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(io::Error::from)?;
        Ok(StopSignals { fd })
    }

    /// The signal that came, if one did (it is taken: the next call sees the next one).
    pub fn take(&self) -> Option<Signal> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        }
    }

    /// Waits for a signal and takes it.
    ///
    /// # Errors
    /// The descriptor cannot be polled.
    pub fn wait(&self) -> io::Result<Signal> {
        loop {
            if let Some(s) = self.take() {
                return Ok(s);
            }
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Starts a thread named `name` that calls `f` with each signal, until `f` returns false.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn spawn(
        self,
        name: &str,
        mut f: impl FnMut(Signal) -> bool + Send + 'static,
    ) -> io::Result<()> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(s) = self.wait() {
                    if !f(s) {
                        return;
                    }
                }
            })
            .map(|_| ())
    }
}

impl AsRawFd for StopSignals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for StopSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_read_not_delivered() {
        // The test harness runs tests on threads: the signal goes to this thread alone
        // (raise(3) is pthread_kill of the calling thread), which blocks it; one sent to the
        // process could reach another thread.
        let s = StopSignals::block().unwrap();
        assert_eq!(s.take(), None);
        nix::sys::signal::raise(Signal::SIGTERM).unwrap();
        assert_eq!(s.wait().unwrap(), Signal::SIGTERM);
        nix::sys::signal::raise(Signal::SIGINT).unwrap();
        assert_eq!(s.take(), Some(Signal::SIGINT));
        assert_eq!(s.take(), None);
    }
}
