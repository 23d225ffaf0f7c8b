//! The few system calls rds-stress makes directly (poll on readiness descriptors, thread
//! priority, SCHED_RR). The only `unsafe` code of the crate lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes. Returns a readiness flag per
/// descriptor (a negative descriptor is skipped and reported not ready).
///
/// # Errors
/// `poll` failed with something other than `EINTR` (which reports nothing ready).
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid, initialised array of `pfds.len()` pollfd structs that lives
    // across the call; poll only writes the `revents` fields. Negative fds are ignored by poll.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds
        .iter()
        .map(|p| p.fd >= 0 && p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
        .collect())
}

/// Sets the calling thread's nice value (best effort; the original's `nice()` in each child).
pub fn set_thread_nice(nice: i32) {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes plain integers and has no memory effects; on Linux
    // PRIO_PROCESS with a thread id changes only that thread.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
}

/// Switches the calling thread to SCHED_RR priority 1 (`-R`).
///
/// # Errors
/// `sched_setscheduler` failed (usually EPERM).
pub fn set_rt_priority() -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: `p` is a valid sched_param that outlives the call; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &p) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
