//! The few system calls rds-stress makes directly (thread priority, SCHED_RR); waiting on
//! readiness descriptors is `rds_core::poll_readable`. The only `unsafe` code of the crate
//! lives here.
#![allow(unsafe_code)]

use std::io;

/// Sets the calling thread's nice value (best effort).
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
