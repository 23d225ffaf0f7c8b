//! Framing on the event loop's side of a control connection: reading requests into the
//! connection's buffer without blocking (at most one frame ahead), taking complete frames out
//! of it, and writing replies without blocking.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use nix::sys::socket::MsgFlags;

use super::Conn;
use crate::ctl::frame::FrameHeader;
use crate::ctl::{write_frame, Reply, MAX_DATA, MAX_JSON};
use crate::sys;

/// Descriptors kept from one request (only a TraceStart uses one).
const MAX_PASSED_FDS: usize = 4;
/// Bytes read from one connection per readiness event.
pub(super) const READ_CHUNK: usize = 64 * 1024;
/// Largest frame, header included.
const MAX_FRAME: usize = 8 + MAX_JSON + MAX_DATA;

/// A request's JSON and data parts.
pub(super) type Frame = (Vec<u8>, Vec<u8>);

/// Reads what the connection's stream holds into its buffer (through `scratch`, at least
/// [`READ_CHUNK`] bytes), up to one frame's worth. Returns false when the stream ended or
/// failed.
pub(super) fn read_some(conn: &mut Conn, scratch: &mut [u8]) -> bool {
    let room = MAX_FRAME.saturating_sub(conn.buf.len()).min(READ_CHUNK);
    if room == 0 {
        return true;
    }
    let scratch = &mut scratch[..room];
    let open = match sys::recv_with_fds(conn.stream.as_raw_fd(), scratch, &mut conn.fds) {
        Ok(0) => false,
        Ok(n) => {
            conn.buf.extend_from_slice(&scratch[..n]);
            if conn.partial_since.is_none() {
                conn.partial_since = Some(Instant::now());
            }
            true
        }
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted =>
        {
            true
        }
        Err(_) => false,
    };
    if conn.fds.len() > MAX_PASSED_FDS {
        conn.fds.truncate(MAX_PASSED_FDS);
    }
    open
}

/// Takes the first complete frame out of the connection's buffer. `Err((json, data))`: the
/// header claims more than the limits allow.
pub(super) fn take_frame(conn: &mut Conn) -> Result<Option<Frame>, (usize, usize)> {
    let Some(h) = FrameHeader::peek(&conn.buf) else {
        if conn.buf.is_empty() {
            conn.partial_since = None;
        }
        return Ok(None);
    };
    if !h.within_limits() {
        return Err((h.json, h.data));
    }
    let Some((j, d)) = h.parts(&conn.buf) else {
        return Ok(None);
    };
    let (j, d) = (j.to_vec(), d.to_vec());
    conn.buf.drain(..h.frame_len());
    if conn.buf.is_empty() && conn.buf.capacity() > READ_CHUNK {
        // An idle connection keeps no large buffer.
        conn.buf = Vec::new();
    }
    // The next request's clock starts with its first byte.
    conn.partial_since = (!conn.buf.is_empty()).then(Instant::now);
    Ok(Some((j, d)))
}

/// Writes what of `frame` the stream takes now. `Err`: the connection failed.
pub(super) fn send_nowait(stream: &UnixStream, frame: &[u8]) -> Result<usize, nix::Error> {
    match nix::sys::socket::send(
        stream.as_raw_fd(),
        frame,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    ) {
        Err(nix::errno::Errno::EAGAIN) => Ok(0),
        r => r,
    }
}

/// Writes an error frame without blocking (best effort: the connection is being dropped).
pub(super) fn refuse(stream: &UnixStream, errno: i32, message: String) {
    if let Ok(json) = serde_json::to_vec(&Reply::error(errno, message)) {
        let mut all = Vec::new();
        if write_frame(&mut all, &json, &[]).is_ok() {
            let _ = send_nowait(stream, &all);
        }
    }
}
