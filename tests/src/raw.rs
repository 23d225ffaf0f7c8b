//! Raw TCP connections to a node's RDS/TCP port (16385) from a chosen source address and lane,
//! for the suites that play a hostile or bare-wire peer. The source port is ≡ `lane` (mod 8),
//! so that the node files the connection under that lane; ports are drawn from 40000..56000,
//! spread by the test process's id so that concurrent test binaries rarely collide.

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};

use nix::sys::socket::{
    bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
};

/// The RDS/TCP port.
pub use rds_core::abi::RDS_TCP_PORT as RDS_PORT;

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A TCP connection from `src` to `dst:16385` from a source port ≡ `lane` (mod 8), with a
/// receive buffer of `rcvbuf` bytes when given (set before connecting, so the window the peer
/// sees is that small).
///
/// # Panics
/// No source port of the range is free on `src` (256 tries), or the connect fails.
pub fn connect_lane(src: Ipv4Addr, dst: Ipv4Addr, lane: u16, rcvbuf: Option<usize>) -> TcpStream {
    let target = SockaddrIn::from(SocketAddrV4::new(dst, RDS_PORT));
    for _ in 0..256 {
        let k = NEXT_PORT.fetch_add(1, Ordering::Relaxed) + (std::process::id() % 500) as u16;
        let port = 40000 + (k % 2000) * 8 + lane % 8;
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .expect("socket");
        setsockopt(&fd, sockopt::ReuseAddr, &true).expect("SO_REUSEADDR");
        if let Some(b) = rcvbuf {
            setsockopt(&fd, sockopt::RcvBuf, &b).expect("SO_RCVBUF");
        }
        if bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(SocketAddrV4::new(src, port)),
        )
        .is_err()
        {
            continue;
        }
        connect(fd.as_raw_fd(), &target).expect("connect to the node's RDS port");
        return TcpStream::from(fd);
    }
    panic!("no free source port on {src}");
}

/// Writes one RDS data message (header and payload) on a raw connection.
///
/// # Errors
/// The write's.
pub fn send_data(
    s: &mut TcpStream,
    seq: u64,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    let h = rds_core::wire::HeaderRepr::data(seq, sport, dport, payload.len() as u32);
    s.write_all(&h.to_bytes())?;
    s.write_all(payload)
}

/// Reads RDS frames from a raw connection until one satisfies `want` (returned with its
/// payload), the connection ends, or `limit` passes (`None`).
pub fn read_until(
    s: &mut TcpStream,
    limit: std::time::Duration,
    mut want: impl FnMut(&rds_core::wire::HeaderRepr, &[u8]) -> bool,
) -> Option<(rds_core::wire::HeaderRepr, Vec<u8>)> {
    use rds_core::wire::{HeaderRepr, HEADER_LEN};
    use std::io::Read;
    let t0 = std::time::Instant::now();
    s.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    while t0.elapsed() < limit {
        while buf.len() >= HEADER_LEN {
            let h = HeaderRepr::from_bytes(&buf[..HEADER_LEN]).ok()?;
            let end = HEADER_LEN + h.len as usize;
            if buf.len() < end {
                break;
            }
            if want(&h, &buf[HEADER_LEN..end]) {
                return Some((h, buf[HEADER_LEN..end].to_vec()));
            }
            buf.drain(..end);
        }
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return None,
        }
    }
    None
}
