//! Waiting for readiness with `poll(2)`: several descriptors, a timeout, hang-ups.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// How many descriptors a poll keeps on the stack (more go to the heap).
const INLINE: usize = 8;

/// A `pollfd` that asks nothing (a negative descriptor, which `poll(2)` skips).
const NO_FD: libc::pollfd = libc::pollfd {
    fd: -1,
    events: 0,
    revents: 0,
};

/// One answer per descriptor of a poll, in the order asked: on the stack for up to [`INLINE`]
/// descriptors (a thread that waits for its socket polls three or four on every wait, which
/// must not cost an allocation), on the heap beyond. Reads as a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled<T: Copy> {
    inline: [T; INLINE],
    len: usize,
    heap: Vec<T>,
}

impl<T: Copy> Polled<T> {
    /// `len` answers of `zero`.
    fn new(len: usize, zero: T) -> Self {
        Polled {
            inline: [zero; INLINE],
            len,
            heap: if len > INLINE {
                vec![zero; len]
            } else {
                Vec::new()
            },
        }
    }

    /// The answers, to fill.
    fn as_mut_slice(&mut self) -> &mut [T] {
        if self.len > INLINE {
            &mut self.heap
        } else {
            &mut self.inline[..self.len]
        }
    }
}

impl<T: Copy> std::ops::Deref for Polled<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        if self.len > INLINE {
            &self.heap
        } else {
            &self.inline[..self.len]
        }
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq<[T; N]> for Polled<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        **self == *other
    }
}

impl<'a, T: Copy> IntoIterator for &'a Polled<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Waits until one of `fds` is readable (or has an error or hangup) or `timeout` passes;
/// returns, for each descriptor, whether it is ready. An interrupted wait returns all false.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Polled<bool>> {
    let mut pfds = Polled::new(fds.len(), NO_FD);
    for (p, &fd) in pfds.as_mut_slice().iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let mut ready = Polled::new(fds.len(), false);
    match ppoll(pfds.as_mut_slice(), timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(ready),
        r => r?,
    };
    for (r, p) in ready.as_mut_slice().iter_mut().zip(pfds.iter()) {
        *r = p.revents != 0;
    }
    Ok(ready)
}

/// Waits until one of `asks` (a descriptor and the `poll(2)` events wanted of it; negative
/// descriptors are skipped) has an event or `timeout` passes; returns, per descriptor, the
/// events it has (`revents`: errors and hang-ups included). EINTR counts as a timeout.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_for(asks: &[(RawFd, i16)], timeout: Duration) -> io::Result<Polled<i16>> {
    match poll_until_signal(asks, timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Polled::new(asks.len(), 0)),
        r => r,
    }
}

/// [`poll_for`] that a signal ends with an error of kind `Interrupted` (EINTR), for a wait
/// that must return to the program's signal handlers as a blocking system call does.
///
/// # Errors
/// `poll(2)` errors, EINTR included.
pub fn poll_until_signal(asks: &[(RawFd, i16)], timeout: Duration) -> io::Result<Polled<i16>> {
    let mut pfds = Polled::new(asks.len(), NO_FD);
    for (p, &(fd, events)) in pfds.as_mut_slice().iter_mut().zip(asks) {
        p.fd = fd;
        p.events = events;
    }
    ppoll(pfds.as_mut_slice(), timeout)?;
    let mut revents = Polled::new(asks.len(), 0);
    for (r, p) in revents.as_mut_slice().iter_mut().zip(pfds.iter()) {
        *r = p.revents;
    }
    Ok(revents)
}

/// `ppoll(2)` of `pfds` for up to `timeout` to the nanosecond (`poll(2)` counts whole
/// milliseconds: a 50 us timer would wait a millisecond), no signal mask; a timeout of more
/// than about 68 years waits without end. Returns how many descriptors have events.
///
/// # Errors
/// `ppoll(2)` errors, EINTR included.
pub(super) fn ppoll(pfds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = timespec(timeout);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a valid array of `len` pollfd structs and `tsp` null or a valid
    // timespec, both for the duration of the call; a null signal mask changes none.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// `timeout` as a `timespec`; `None` (wait without end) past `i32::MAX` seconds.
pub(super) fn timespec(timeout: Duration) -> Option<libc::timespec> {
    let secs = libc::time_t::try_from(timeout.as_secs())
        .ok()
        .filter(|&s| s <= libc::time_t::from(i32::MAX))?;
    Some(libc::timespec {
        tv_sec: secs,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    })
}

/// Waits until `fd` is readable, the stream socket `conn` is hung up (its peer closed or
/// failed), or `timeout` passes; returns `(readable, hung_up)`. Input pending on `conn` does
/// not end the wait.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_readable_or_hangup(
    fd: RawFd,
    conn: RawFd,
    timeout: Duration,
) -> io::Result<(bool, bool)> {
    let mut pfds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: conn,
            events: libc::POLLRDHUP,
            revents: 0,
        },
    ];
    match ppoll(&mut pfds, timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((false, false)),
        r => r?,
    };
    let hup = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    Ok((pfds[0].revents != 0, pfds[1].revents & hup != 0))
}

/// Waits until `fd` is readable or `timeout` passes; returns whether it is readable.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    Ok(wait_any_readable(&[fd], timeout)?.is_some())
}

/// Waits until one of `fds` is readable or `timeout` passes; returns the index of the first
/// readable one.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_any_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Option<usize>> {
    Ok(poll_readable(fds, timeout)?.iter().position(|&r| r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Timeouts keep their nanoseconds; one too long for the kernel's `timespec` waits
    /// without end.
    #[test]
    fn timeouts_become_timespecs() {
        let t = timespec(Duration::new(1, 500_000_001)).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_001));
        let t = timespec(Duration::from_micros(50)).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (0, 50_000));
        assert!(timespec(Duration::MAX).is_none());
        assert!(timespec(Duration::from_secs(u64::from(u32::MAX))).is_none());
    }

    /// A sub-millisecond wait reports a readable descriptor, and nothing when the time runs
    /// out.
    #[test]
    fn a_sub_millisecond_poll_reports() {
        let ev = super::super::eventfd().unwrap();
        let asks = [(ev.as_raw_fd(), libc::POLLIN)];
        assert_eq!(*poll_for(&asks, Duration::from_micros(200)).unwrap(), [0]);
        super::super::eventfd_signal(ev.as_raw_fd());
        assert_eq!(
            *poll_for(&asks, Duration::from_micros(200)).unwrap(),
            [libc::POLLIN]
        );
    }

    /// More descriptors than fit on the stack: every answer in its place.
    #[test]
    fn a_poll_of_many_descriptors_answers_each() {
        let evs: Vec<_> = (0..INLINE + 3)
            .map(|_| super::super::eventfd().unwrap())
            .collect();
        let fds: Vec<RawFd> = evs.iter().map(|e| e.as_raw_fd()).collect();
        super::super::eventfd_signal(fds[1]);
        super::super::eventfd_signal(fds[INLINE + 1]);
        let r = poll_readable(&fds, Duration::from_millis(50)).unwrap();
        let want: Vec<bool> = (0..fds.len()).map(|i| i == 1 || i == INLINE + 1).collect();
        assert_eq!(*r, *want);
        let few = poll_readable(&fds[..3], Duration::from_millis(50)).unwrap();
        assert_eq!(*few, [false, true, false]);
    }
}
