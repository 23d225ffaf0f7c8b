//! The syscall layer: the Linux calls the node and the kernel backend need that `std` does not
//! offer. Every generic call has its one wrapper here; `kernel/ffi.rs` keeps only what is
//! specific to `AF_RDS`. One of the few places where `unsafe` is allowed; every block says why
//! it is sound. By job: `epoll.rs` (eventfd and epoll), `socket.rs` (raw addresses, bind and
//! connect of raw descriptors, integer, address and timeout socket options, TCP keepalive
//! tuning, `SIOCOUTQ`/`SIOCINQ`, reads into uninitialised buffer space, socket names),
//! `poll.rs` (waiting for readiness), `fdpass.rs` (descriptor passing), `shm.rs` (sealed shared
//! memory) and `thread.rs` (thread scheduling); callers name everything as `crate::sys::X`.
#![allow(unsafe_code)]

mod epoll;
mod fdpass;
mod poll;
mod shm;
mod signal;
mod socket;
mod thread;

pub use epoll::{
    eventfd, eventfd_clear, eventfd_signal, Epoll, EPOLLERR, EPOLLET, EPOLLHUP, EPOLLIN, EPOLLOUT,
    EPOLLRDHUP,
};
pub use fdpass::{recv_with_fds, send_with_fd, send_with_fds};
pub use poll::{
    poll_for, poll_readable, poll_until_signal, wait_readable, wait_readable_or_hangup, Polled,
};
pub use shm::{memfd_sealed, Shm};
pub use signal::default_stop_signals;
pub use socket::{
    bind, connect, inq, local_addr, outq, peer_addr, peer_pidfd, read_spare, set_bufs, set_linger0,
    set_reuseaddr, take_error, tcp_socket, tune_rds_tcp,
};
pub(crate) use socket::{
    connect_raw, from_storage, getsockopt_int, name_storage, set_timeout, setsockopt_addr,
    setsockopt_int, RawAddr,
};
pub use thread::{may_spin, set_thread_batch, set_thread_idle, set_thread_nice, ThreadTid};

use std::io;

/// Gives the C library's free memory back to the system (`malloc_trim(0)`: the top of every
/// heap, and whole free pages inside them). The node calls it when what peers made it hold
/// shrank by a lot ([`crate::node`], at most once a second).
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists under its locks; it takes
    // no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A libc return value: negative is `errno`.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
