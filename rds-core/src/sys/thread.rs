//! Thread scheduling: nice values, the batch policy of the I/O thread, and the idle policy of
//! this or another thread.
#![allow(unsafe_code)]

use std::io;

use super::cvt;

/// Lowers the calling thread's scheduling priority to `nice` (Linux priorities are per
/// thread). Best effort: the result is ignored by callers that only prefer to yield.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    let tid = ThreadTid::current().0;
    // SAFETY: setpriority takes plain integers and has no memory effects.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    cvt(r).map(|_| ())
}

/// Whether the calling thread may run on more than one CPU (its affinity and the cgroup's
/// quota, as threads it starts inherit): only then can spinning while it waits pay, since on
/// one CPU a spinning thread keeps the one it waits for off the CPU.
pub fn may_spin() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// The scheduling policy [`set_thread_idle`] and [`ThreadTid::set_idle`] set.
fn idle_policy(idle: bool) -> libc::c_int {
    if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    }
}

/// Moves the calling thread to the `SCHED_IDLE` policy (`idle`), where it runs only when no
/// thread of a normal policy wants its CPU, or back to `SCHED_OTHER` at its nice value. Threads
/// it starts afterwards inherit the policy. Leaving `SCHED_IDLE` needs `CAP_SYS_NICE` or an
/// `RLIMIT_NICE` that allows the thread's nice value (`EPERM` otherwise).
pub fn set_thread_idle(idle: bool) -> io::Result<()> {
    ThreadTid(0).set_idle(idle)
}

/// A thread of this process by its kernel thread id, so that another thread can change its
/// scheduling policy: a thread that waits under `SCHED_IDLE` on a CPU the traffic keeps busy
/// never runs to see that it was asked to stop, so the thread that takes the request lifts it
/// out ([`ThreadTid::set_idle`]). Whoever holds one keeps the thread alive while using it (a
/// thread id is reused only after its thread ended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTid(libc::pid_t);

impl ThreadTid {
    /// The calling thread.
    pub fn current() -> Self {
        // SAFETY: gettid has no arguments and no memory effects.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        ThreadTid(tid as libc::pid_t)
    }

    /// [`set_thread_idle`] for this thread.
    ///
    /// # Errors
    /// As [`set_thread_idle`]; `ESRCH` once the thread ended.
    pub fn set_idle(self, idle: bool) -> io::Result<()> {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler only reads the sched_param, which lives across the call;
        // a thread id names one thread (Linux), an ended one gives ESRCH.
        let r = unsafe { libc::sched_setscheduler(self.0, idle_policy(idle), &param) };
        cvt(r).map(|_| ())
    }

    /// Whether this thread runs under `SCHED_IDLE`.
    ///
    /// # Errors
    /// `ESRCH` once the thread ended.
    pub fn is_idle(self) -> io::Result<bool> {
        // SAFETY: sched_getscheduler takes a plain integer and has no memory effects.
        let policy = cvt(unsafe { libc::sched_getscheduler(self.0) })?;
        Ok(policy == libc::SCHED_IDLE)
    }
}

/// Moves the calling thread to `SCHED_BATCH`: woken, it does not preempt the running thread.
pub fn set_thread_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads the sched_param, which lives across the call;
    // pid 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    cvt(r).map(|_| ())
}
