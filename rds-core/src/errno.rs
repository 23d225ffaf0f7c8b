//! The one place where engine errors become `errno` values and [`std::io::Error`]s, following
//! Linux RDS (`af_rds.c`, `bind.c`, `send.c`, `recv.c`).

use std::io;

use crate::proto::{AcceptError, BindError, RecvError, SendError};

/// The errno Linux RDS returns for a send error.
pub fn send_errno(e: SendError) -> i32 {
    match e {
        SendError::NotConn => libc::ENOTCONN,
        SendError::InvalidDest | SendError::InvalidCtl => libc::EINVAL,
        SendError::NotSupported => libc::EOPNOTSUPP,
        SendError::MsgSize => libc::EMSGSIZE,
        SendError::Congested | SendError::CongestedWait | SendError::NoBufs => libc::ENOBUFS,
        SendError::WouldBlock => libc::EAGAIN,
        SendError::BadSocket => libc::EBADF,
    }
}

/// The errno Linux RDS returns for a bind error.
pub fn bind_errno(e: BindError) -> i32 {
    match e {
        BindError::Invalid => libc::EINVAL,
        BindError::AddrNotAvail => libc::EADDRNOTAVAIL,
        BindError::AddrInUse => libc::EADDRINUSE,
        BindError::NoProtoOpt => libc::ENOPROTOOPT,
    }
}

/// The errno of a receive error.
pub fn recv_errno(e: RecvError) -> i32 {
    match e {
        RecvError::WouldBlock => libc::EAGAIN,
        RecvError::BadSocket => libc::EBADF,
    }
}

/// The errno a transport uses when it refuses an accepted connection (for logs).
pub fn accept_errno(e: AcceptError) -> i32 {
    match e {
        AcceptError::Local => libc::EOPNOTSUPP,
        AcceptError::NotLocal => libc::EADDRNOTAVAIL,
        AcceptError::Wait => libc::EAGAIN,
        AcceptError::NoMem => libc::ENOBUFS,
        AcceptError::ConnectBack | AcceptError::Raced => libc::ECONNREFUSED,
    }
}

/// The C library's message for `errno` (`strerror`), as the C tools print it.
pub fn strerror(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)" to the C library's text.
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// An `io::Error` carrying a raw errno (so that `Display` shows the `strerror` text, as the C
/// tools print it, and `raw_os_error()` gives the number).
pub fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

impl From<SendError> for io::Error {
    fn from(e: SendError) -> Self {
        err(send_errno(e))
    }
}

impl From<BindError> for io::Error {
    fn from(e: BindError) -> Self {
        err(bind_errno(e))
    }
}

impl From<RecvError> for io::Error {
    fn from(e: RecvError) -> Self {
        err(recv_errno(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_values_follow_linux_rds() {
        assert_eq!(send_errno(SendError::Congested), libc::ENOBUFS);
        assert_eq!(send_errno(SendError::WouldBlock), libc::EAGAIN);
        assert_eq!(send_errno(SendError::MsgSize), libc::EMSGSIZE);
        assert_eq!(send_errno(SendError::NotConn), libc::ENOTCONN);
        assert_eq!(bind_errno(BindError::AddrInUse), libc::EADDRINUSE);
        assert_eq!(bind_errno(BindError::AddrNotAvail), libc::EADDRNOTAVAIL);
        assert_eq!(bind_errno(BindError::Invalid), libc::EINVAL);
        let e: io::Error = SendError::Congested.into();
        assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS));
        assert_eq!(e.to_string(), "No buffer space available (os error 105)");
        let e: io::Error = RecvError::WouldBlock.into();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
