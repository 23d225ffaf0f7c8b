//! Thread scheduling: nice values, the batch policy of the I/O thread, and the idle policy of
//! this or another thread.
#![allow(unsafe_code)]

use std::io;

use super::cvt;

/// Lowers the calling thread's scheduling priority to `nice` (Linux priorities are per
/// thread). Best effort: the result is ignored by callers that only prefer to yield.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no arguments and no memory effects.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
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

/// The scheduling policy [`set_thread_idle`] and [`set_thread_idle_of`] set.
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
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads the sched_param, which lives across the call;
    // pid 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, idle_policy(idle), &param) };
    cvt(r).map(|_| ())
}

/// [`set_thread_idle`] for another thread of this process, the one `t` joins.
pub fn set_thread_idle_of<T>(t: &std::thread::JoinHandle<T>, idle: bool) -> io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: the JoinHandle is borrowed, so the thread is not joined or detached yet and its
    // pthread_t stays valid across the call (even if the thread has finished running);
    // pthread_setschedparam only reads the sched_param, which lives across the call.
    let r = unsafe { libc::pthread_setschedparam(t.as_pthread_t(), idle_policy(idle), &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Whether the thread `t` joins runs under `SCHED_IDLE`.
pub fn thread_is_idle<T>(t: &std::thread::JoinHandle<T>) -> io::Result<bool> {
    use std::os::unix::thread::JoinHandleExt;
    let mut policy: libc::c_int = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in set_thread_idle_of, the pthread_t is valid while the handle is borrowed;
    // pthread_getschedparam writes the two locals, which outlive the call.
    let r = unsafe { libc::pthread_getschedparam(t.as_pthread_t(), &mut policy, &mut param) };
    if r == 0 {
        Ok(policy == libc::SCHED_IDLE)
    } else {
        Err(io::Error::from_raw_os_error(r))
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
