//! What the daemon's answers become for a client socket's caller: errors with an errno (the
//! daemon gone is `ECONNRESET`, said once at error level with the daemon's socket), received
//! messages, deadlines of blocking calls. Shared by the two ways a daemon client socket
//! talks to the daemon: requests on the control connection (`remote`) and the shared-memory
//! ring (`ring::client`).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::ctl::client::CtlError;
use crate::message::{InMsg, Received};
use crate::time::Instant;

/// A message the daemon handed over.
pub(crate) fn data_from(
    from: SocketAddr,
    data: Vec<u8>,
    rdma_dest: Option<u64>,
    full_len: usize,
    truncated: bool,
) -> Received {
    Received::Data {
        msg: InMsg {
            from,
            payload: crate::buf::freeze(data),
            seq: 0,
            rx_time: Instant::ZERO,
            rdma_dest,
            held: 0,
        },
        full_len,
        truncated,
    }
}

/// When a blocking call with `timeout` gives up (`None` or zero: never, as for
/// `SO_RCVTIMEO`).
pub(crate) fn deadline_of(timeout: Option<Duration>) -> Option<std::time::Instant> {
    timeout
        .filter(|t| !t.is_zero())
        .and_then(|t| std::time::Instant::now().checked_add(t))
}

/// Whether this process was told that the daemon went away.
static GONE_TOLD: AtomicBool = AtomicBool::new(false);

pub(crate) fn io(e: CtlError) -> io::Error {
    if e.is_gone() {
        // Socket calls carry only an errno: say once what it means.
        if !GONE_TOLD.swap(true, Ordering::Relaxed) {
            log::error!("{e}");
        }
        return io::Error::from_raw_os_error(libc::ECONNRESET);
    }
    e.into_io()
}
