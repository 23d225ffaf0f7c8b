//! Descriptor passing over Unix stream sockets (`SCM_RIGHTS`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Writes all of `data` to the Unix stream socket `sock` with `fd` attached to its first byte
/// (`SCM_RIGHTS`): the peer receives a duplicate of `fd` with the bytes.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    send_with_fds(sock, data, &[fd])
}

/// Writes all of `data` to the Unix stream socket `sock` without blocking longer than the
/// socket's send timeout, with `fds` attached to its first byte (`SCM_RIGHTS`).
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let cmsg = [ControlMessage::ScmRights(fds)];
    let mut sent = loop {
        match sendmsg::<()>(
            sock,
            &[io::IoSlice::new(data)],
            if fds.is_empty() { &[] } else { &cmsg },
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    while sent < data.len() {
        match nix::sys::socket::send(sock, &data[sent..], MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads from the Unix stream socket `sock` into `buf` like `read(2)`, keeping the file
/// descriptors passed with the bytes (`SCM_RIGHTS`, received close-on-exec) in `fds`.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let n = msg.bytes;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed `fd` in this process for us (SCM_RIGHTS);
                    // nothing else owns it, so the OwnedFd is its only owner and closes it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
    Ok(n)
}
