//! The exported waits on descriptors (`poll`, `ppoll`, `select`, `pselect`, `epoll_ctl` and
//! the fortified `__poll_chk`, `__ppoll_chk`): each one first tells the table which RDS
//! descriptors the program names ([`sock::polled`], from then on their pairs follow the
//! socket's readiness), then is the C library's call, unchanged. Until a program polls an
//! RDS descriptor, nothing keeps its pair in step: a program that only sends and receives
//! pays no readiness writes for it. Once every RDS socket of the process is armed, these
//! calls look at no descriptor ([`sock::any_unarmed`]).

use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, size_t, timespec, timeval};

use super::next::*;
use crate::sock;

/// Arms the RDS descriptors of a `poll` array (`fds` may be null with `n` 0; a bad pointer
/// is not read: the C call then fails with EFAULT).
///
/// # Safety
/// `fds` points to `n` `pollfd`s, as `poll(2)` requires, or is null.
unsafe fn arm_pollfds(fds: *const pollfd, n: nfds_t) {
    if fds.is_null() || !sock::any_unarmed() || n > (1 << 20) {
        return;
    }
    // SAFETY: the caller passes `n` pollfds at `fds`, as poll(2) reads them.
    let fds = unsafe { std::slice::from_raw_parts(fds, n as usize) };
    for p in fds {
        sock::polled(p.fd);
    }
}

/// Arms the RDS descriptors below `nfds` in the three sets of a `select` (each may be null).
///
/// # Safety
/// Each non-null set points to an `fd_set`.
unsafe fn arm_fdsets(nfds: c_int, sets: [*mut fd_set; 3]) {
    if !sock::any_unarmed() {
        return;
    }
    let top = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    for fd in 0..top {
        if !sock::is_ours(fd) {
            continue;
        }
        for set in sets {
            // SAFETY: a non-null set is the program's fd_set, and fd < FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, set) } {
                sock::polled(fd);
                break;
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: poll(2)'s contract on `fds`.
    unsafe { arm_pollfds(fds, n) };
    forward!(next_poll(fds, n, timeout))
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    // SAFETY: poll(2)'s contract on `fds`.
    unsafe { arm_pollfds(fds, n) };
    forward!(next_poll_chk(fds, n, timeout, fdslen))
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    tmo: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: ppoll(2)'s contract on `fds`.
    unsafe { arm_pollfds(fds, n) };
    forward!(next_ppoll(fds, n, tmo, mask))
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    tmo: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    // SAFETY: ppoll(2)'s contract on `fds`.
    unsafe { arm_pollfds(fds, n) };
    forward!(next_ppoll_chk(fds, n, tmo, mask, fdslen))
}

#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    tv: *mut timeval,
) -> c_int {
    // SAFETY: select(2)'s contract on the sets.
    unsafe { arm_fdsets(nfds, [r, w, e]) };
    forward!(next_select(nfds, r, w, e, tv))
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: pselect(2)'s contract on the sets.
    unsafe { arm_fdsets(nfds, [r, w, e]) };
    forward!(next_pselect(nfds, r, w, e, ts, mask))
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    if op == libc::EPOLL_CTL_ADD || op == libc::EPOLL_CTL_MOD {
        sock::polled(fd);
    }
    forward!(next_epoll_ctl(epfd, op, fd, ev))
}
