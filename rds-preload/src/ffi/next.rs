//! The next definition of each interposed symbol (the C library's), found once with
//! `dlsym(RTLD_NEXT)`, and `errno`.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_int, c_ulong, c_void, epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec, timeval,
};

/// Defines `$f()`: the next definition of C symbol `$name` after this library's.
macro_rules! next_sym {
    ($f:ident, $name:literal, $ty:ty) => {
        pub(super) fn $f() -> Option<$ty> {
            static P: AtomicUsize = AtomicUsize::new(0);
            let mut p = P.load(Ordering::Relaxed);
            if p == 0 {
                // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks a symbol up.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) }
                    as usize;
                P.store(p, Ordering::Relaxed);
            }
            // SAFETY: `p` is the address of the C library's `$name`, whose prototype is `$ty`.
            (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    };
}

pub(super) type FnSocket = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
pub(super) type FnAddr = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
pub(super) type FnName = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
pub(super) type FnSendto = unsafe extern "C" fn(
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;
pub(super) type FnSendmsg = unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
pub(super) type FnSend = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
pub(super) type FnWrite = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
pub(super) type FnRecvfrom = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
pub(super) type FnRecvmsg = unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
pub(super) type FnRecv = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
pub(super) type FnRead = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
pub(super) type FnIov = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
pub(super) type FnSetsockopt =
    unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
pub(super) type FnGetsockopt =
    unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
pub(super) type FnFcntl = unsafe extern "C" fn(c_int, c_int, usize) -> c_int;
pub(super) type FnIoctl = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
pub(super) type FnClose = unsafe extern "C" fn(c_int) -> c_int;
pub(super) type FnDup = unsafe extern "C" fn(c_int) -> c_int;
pub(super) type FnDup2 = unsafe extern "C" fn(c_int, c_int) -> c_int;
pub(super) type FnDup3 = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;

next_sym!(next_socket, "socket", FnSocket);
next_sym!(next_bind, "bind", FnAddr);
next_sym!(next_connect, "connect", FnAddr);
next_sym!(next_getsockname, "getsockname", FnName);
next_sym!(next_getpeername, "getpeername", FnName);
next_sym!(next_sendto, "sendto", FnSendto);
next_sym!(next_sendmsg, "sendmsg", FnSendmsg);
next_sym!(next_send, "send", FnSend);
next_sym!(next_write, "write", FnWrite);
next_sym!(next_writev, "writev", FnIov);
next_sym!(next_recvfrom, "recvfrom", FnRecvfrom);
next_sym!(next_recvmsg, "recvmsg", FnRecvmsg);
next_sym!(next_recv, "recv", FnRecv);
next_sym!(next_read, "read", FnRead);
next_sym!(next_readv, "readv", FnIov);
next_sym!(next_setsockopt, "setsockopt", FnSetsockopt);
next_sym!(next_getsockopt, "getsockopt", FnGetsockopt);
next_sym!(next_fcntl, "fcntl", FnFcntl);
next_sym!(next_fcntl64, "fcntl64", FnFcntl);
next_sym!(next_ioctl, "ioctl", FnIoctl);
next_sym!(next_close, "close", FnClose);
next_sym!(next_dup, "dup", FnDup);
next_sym!(next_dup2, "dup2", FnDup2);
next_sym!(next_dup3, "dup3", FnDup3);

pub(super) type FnPoll = unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int;
pub(super) type FnPollChk = unsafe extern "C" fn(*mut pollfd, nfds_t, c_int, size_t) -> c_int;
pub(super) type FnPpoll =
    unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
pub(super) type FnPpollChk =
    unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t, size_t) -> c_int;
pub(super) type FnSelect =
    unsafe extern "C" fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int;
pub(super) type FnPselect = unsafe extern "C" fn(
    c_int,
    *mut fd_set,
    *mut fd_set,
    *mut fd_set,
    *const timespec,
    *const sigset_t,
) -> c_int;
pub(super) type FnEpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int;

next_sym!(next_poll, "poll", FnPoll);
next_sym!(next_poll_chk, "__poll_chk", FnPollChk);
next_sym!(next_ppoll, "ppoll", FnPpoll);
next_sym!(next_ppoll_chk, "__ppoll_chk", FnPpollChk);
next_sym!(next_select, "select", FnSelect);
next_sym!(next_pselect, "pselect", FnPselect);
next_sym!(next_epoll_ctl, "epoll_ctl", FnEpollCtl);

pub(super) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Calls the next definition, or fails with ENOSYS when there is none.
macro_rules! forward {
    ($next:ident($($a:expr),*)) => {
        match $next() {
            // SAFETY: the program's own arguments go unchanged to the C library's function.
            Some(f) => unsafe { f($($a),*) },
            None => {
                set_errno(libc::ENOSYS);
                -1
            }
        }
    };
}

pub(super) use forward;
