//! Raw calls on the readiness pair, epoll and fork, as safe functions (the pair's ends are
//! this library's own descriptors, never the program's).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use libc::c_int;

use super::next::{next_close, next_fcntl, next_recv, next_send};

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A close-on-exec `AF_UNIX` stream pair. Blocking: the program's end shares its file
/// status flags (`F_GETFL`) with the program's descriptor, and this library's own calls on
/// the pair pass `MSG_DONTWAIT`.
pub fn socketpair() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0 as c_int; 2];
    let ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) } != 0 {
        return Err(errno());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `SO_SNDBUF` on one of this library's sockets.
pub fn set_sndbuf(fd: RawFd, bytes: c_int) {
    let v = bytes;
    // SAFETY: an int option value of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const c_int).cast(),
            4,
        )
    };
}

/// A duplicate of `fd` (close-on-exec when asked).
pub fn dup(fd: RawFd, cloexec: bool) -> Result<RawFd, i32> {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    let f = next_fcntl().ok_or(libc::ENOSYS)?;
    // SAFETY: fcntl on a descriptor of this library.
    let r = unsafe { f(fd, cmd, 0) };
    if r < 0 {
        return Err(errno());
    }
    Ok(r)
}

/// Sets or clears `O_NONBLOCK` on the program's end (so that `F_GETFL` shows it).
pub fn set_nonblock_flag(fd: RawFd, on: bool) {
    let Some(f) = next_fcntl() else { return };
    // SAFETY: F_GETFL/F_SETFL on the pair's end the program holds.
    unsafe {
        let fl = f(fd, libc::F_GETFL, 0);
        if fl >= 0 {
            let fl = if on {
                fl | libc::O_NONBLOCK
            } else {
                fl & !libc::O_NONBLOCK
            };
            f(fd, libc::F_SETFL, fl as usize);
        }
    }
}

/// Closes a descriptor through the C library.
pub fn close(fd: RawFd) {
    if let Some(f) = next_close() {
        // SAFETY: closes a descriptor this library made and nobody else holds.
        unsafe { f(fd) };
    }
}

/// A non-blocking send of `b` on one of the pair's ends.
pub fn send_nb(fd: RawFd, b: &[u8]) -> Result<usize, i32> {
    let f = next_send().ok_or(libc::ENOSYS)?;
    // SAFETY: `b` is a valid buffer of its length.
    let r = unsafe {
        f(
            fd,
            b.as_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(r).map_err(|_| errno())
}

/// Reads everything queued on `fd`, without blocking.
pub fn drain(fd: RawFd) {
    let Some(f) = next_recv() else { return };
    let mut buf = [0u8; 16384];
    loop {
        // SAFETY: `buf` is a valid buffer of its length.
        let r = unsafe { f(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if r <= 0 {
            return;
        }
    }
}

/// Writes on `fd` until its send buffer is full (then it does not poll writable).
pub fn fill(fd: RawFd) {
    let buf = [0u8; 16384];
    for _ in 0..64 {
        if send_nb(fd, &buf).is_err() {
            return;
        }
    }
}

/// Sleeps `ms` milliseconds; `EINTR` when a signal handler ran meanwhile.
pub fn sleep_ms(ms: c_int) -> Result<(), i32> {
    // SAFETY: no descriptors (a null array of none), only the timeout.
    let n = unsafe { libc::poll(std::ptr::null_mut(), 0, ms) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// A close-on-exec epoll instance.
pub fn epoll_create() -> Result<OwnedFd, i32> {
    // SAFETY: no pointers.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Watches `fd` becoming readable (edge-triggered), reporting `key`.
pub fn epoll_add(ep: RawFd, fd: RawFd, key: u64) -> Result<(), i32> {
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: key,
    };
    // SAFETY: a valid event struct.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Pauses (`on` false) or resumes watching `fd`, which [`epoll_add`] added with `key`;
/// resuming reports `fd` at once if it is readable then.
pub fn epoll_watch(ep: RawFd, fd: RawFd, key: u64, on: bool) {
    let events = if on {
        (libc::EPOLLIN | libc::EPOLLET) as u32
    } else {
        0
    };
    let mut ev = libc::epoll_event { events, u64: key };
    // SAFETY: a valid event struct.
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev) };
}

/// Stops watching `fd`.
pub fn epoll_del(ep: RawFd, fd: RawFd) {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: a valid event struct (ignored by DEL).
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, &mut ev) };
}

/// Waits for events; appends their keys.
pub fn epoll_wait(ep: RawFd, keys: &mut Vec<u64>) -> Result<(), i32> {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    // SAFETY: `evs` holds 64 events.
    let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 64, -1) };
    if n < 0 {
        let e = errno();
        return if e == libc::EINTR { Ok(()) } else { Err(e) };
    }
    keys.extend(evs[..n as usize].iter().map(|e| e.u64));
    Ok(())
}
