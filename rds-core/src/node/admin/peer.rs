//! Who is at the other end of a control connection, as the kernel sees it when it connected:
//! its uid (`SO_PEERCRED`, already mapped into this node's user namespace), whether that makes
//! it privileged here (root or the node's owner), and whether it may bind ports below 1024
//! (uid 0, or `CAP_NET_BIND_SERVICE` in this node's own user namespace).
//!
//! The capability is read once, at admission, from `/proc/<pid>/status` of the process that
//! connected, pinned by a pidfd (`SO_PEERPIDFD`): a process that exited before its status was
//! read (its pid possibly reused by another) counts as holding nothing. A process in another
//! user namespace (`unshare -U -r` gives anyone a full set of capabilities there) holds none
//! here. Kernels without `SO_PEERPIDFD` (before 6.5) get the same check at admission without
//! the pin.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::Peer;
use crate::sys;

/// `CAP_NET_BIND_SERVICE` (`linux/capability.h`).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// The peer of a freshly accepted connection; `owner_uid` is the node's owner.
pub(super) fn peer_of(stream: &UnixStream, owner_uid: u32) -> Peer {
    let creds =
        nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials).ok();
    let Some(c) = creds else {
        return Peer {
            uid: u32::MAX,
            pid: 0,
            privileged: false,
            bind_service: false,
        };
    };
    let uid = c.uid();
    Peer {
        uid,
        pid: c.pid(),
        privileged: uid == 0 || uid == owner_uid,
        bind_service: uid == 0 || holds_bind_service(stream, c.pid()),
    }
}

/// Whether the process that connected `stream` (pid `pid` then) holds `CAP_NET_BIND_SERVICE`
/// in this process's user namespace.
fn holds_bind_service(stream: &UnixStream, pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let pin: Option<OwnedFd> = sys::peer_pidfd(stream.as_raw_fd()).ok();
    let held = same_user_namespace(pid) && effective_caps(pid).is_some_and(has_bind_service);
    // Read before this check: if the process is still alive, what was read is its own.
    held && pin.is_none_or(|fd| alive(&fd))
}

fn has_bind_service(caps: u64) -> bool {
    caps & (1 << CAP_NET_BIND_SERVICE) != 0
}

/// `CapEff` of `/proc/<pid>/status`.
fn effective_caps(pid: i32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    st.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Whether process `pid` is in this process's user namespace.
fn same_user_namespace(pid: i32) -> bool {
    let ns = |p: &str| std::fs::metadata(format!("/proc/{p}/ns/user")).ok();
    match (ns(&pid.to_string()), ns("self")) {
        (Some(a), Some(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Whether the process of `pidfd` has not exited (a pidfd polls readable once it has).
fn alive(pidfd: &OwnedFd) -> bool {
    sys::poll_readable(&[pidfd.as_raw_fd()], Duration::ZERO).is_ok_and(|r| !r[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits_and_this_process() {
        assert!(has_bind_service(0x400));
        assert!(!has_bind_service(0x3ff));
        let me = std::process::id() as i32;
        assert!(same_user_namespace(me));
        assert!(effective_caps(me).is_some());
        assert!(!same_user_namespace(i32::MAX));
        assert_eq!(effective_caps(i32::MAX), None);
    }

    #[test]
    fn a_connected_peer_is_pinned_while_alive() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = peer_of(&a, u32::MAX - 1);
        assert_eq!(p.pid, std::process::id() as i32);
        let root = nix::unistd::geteuid().is_root();
        assert_eq!(p.privileged, root);
        // This test process (root in CI) holds the capability in its own namespace.
        let caps = effective_caps(p.pid).unwrap();
        assert_eq!(p.bind_service, root || has_bind_service(caps));
        if let Ok(fd) = sys::peer_pidfd(a.as_raw_fd()) {
            assert!(alive(&fd));
        }
    }
}
