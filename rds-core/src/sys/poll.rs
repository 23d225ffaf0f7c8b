//! Waiting for readiness with `poll(2)`: several descriptors, a timeout, hang-ups.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until one of `fds` is readable (or has an error or hangup) or `timeout` passes;
/// returns, for each descriptor, whether it is ready. An interrupted wait returns all false.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let asks: Vec<(RawFd, i16)> = fds.iter().map(|&fd| (fd, libc::POLLIN)).collect();
    Ok(poll_for(&asks, timeout)?.iter().map(|&r| r != 0).collect())
}

/// Waits until one of `asks` (a descriptor and the `poll(2)` events wanted of it; negative
/// descriptors are skipped) has an event or `timeout` passes; returns, per descriptor, the
/// events it has (`revents`: errors and hang-ups included). EINTR counts as a timeout.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_for(asks: &[(RawFd, i16)], timeout: Duration) -> io::Result<Vec<i16>> {
    match poll_until_signal(asks, timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![0; asks.len()]),
        r => r,
    }
}

/// [`poll_for`] that a signal ends with an error of kind `Interrupted` (EINTR), for a wait
/// that must return to the program's signal handlers as a blocking system call does.
///
/// # Errors
/// `poll(2)` errors, EINTR included.
pub fn poll_until_signal(asks: &[(RawFd, i16)], timeout: Duration) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> = asks
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid array of `len` pollfd structs for the duration of the call;
    // poll only reports POLLNVAL for a descriptor that is not open.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pfds.iter().map(|p| p.revents).collect())
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
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid array of two pollfd structs for the duration of the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((false, false))
        } else {
            Err(e)
        };
    }
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
