//! The socket table: create, bind, connect, options, readiness, receive and close.

use std::net::{IpAddr, SocketAddr};

use crate::stats::Counter;
use crate::wire::PROBE_PORT;

use crate::message::Received;
use crate::proto::rng::jhash_1word;
use crate::proto::sock::Sock;
use crate::proto::{canonical, BindError, RecvError, SendError, SockId, TransportKind};

use super::{is_unicast, Stack, MSG_COST};

impl Stack {
    /// Creates a socket.
    pub fn socket(&mut self) -> SockId {
        let id = SockId(self.next_sock);
        self.next_sock = self.next_sock.wrapping_add(1).max(1);
        self.socks.insert(
            id,
            Sock::new(
                self.tun.sndbuf_default as usize,
                self.tun.rcvbuf_default as usize,
            ),
        );
        id
    }

    /// `SO_RDS_TRANSPORT`: pins the socket's transport before bind.
    ///
    /// # Errors
    /// [`BindError::Invalid`] if bound or already set (the kernel's EOPNOTSUPP case is
    /// reported by the socket layer), [`BindError::NoProtoOpt`] for loopback.
    pub fn set_transport(&mut self, sock: SockId, kind: TransportKind) -> Result<(), BindError> {
        let s = self.socks.get_mut(&sock).ok_or(BindError::Invalid)?;
        if s.bound.is_some() || s.transport.is_some() {
            return Err(BindError::Invalid);
        }
        if kind == TransportKind::Loopback {
            return Err(BindError::NoProtoOpt);
        }
        s.transport = Some(kind);
        Ok(())
    }

    /// The socket's transport, if pinned or bound.
    pub fn sock_transport(&self, sock: SockId) -> Option<TransportKind> {
        self.socks.get(&sock).and_then(|s| s.transport)
    }

    /// Binds a socket (`bind.c`). Port 0 picks a random free port ≥ 2; port 1 is reserved
    /// for the multipath probe. There is no wildcard bind.
    ///
    /// # Errors
    /// See [`BindError`].
    pub fn bind(&mut self, sock: SockId, addr: SocketAddr) -> Result<SocketAddr, BindError> {
        let s = self.socks.get(&sock).ok_or(BindError::Invalid)?;
        if s.bound.is_some() {
            return Err(BindError::Invalid);
        }
        let ip = canonical(addr.ip());
        if !is_unicast(ip) {
            return Err(BindError::Invalid);
        }
        if let (IpAddr::V6(v6), SocketAddr::V6(sa)) = (ip, addr) {
            if v6.is_unicast_link_local() && sa.scope_id() == 0 {
                return Err(BindError::Invalid);
            }
        }
        if addr.port() == PROBE_PORT {
            return Err(BindError::Invalid);
        }
        let local = self.locals.get(&ip).ok_or(BindError::AddrNotAvail)?.serves;
        let kind = match s.transport {
            Some(TransportKind::Ib) if !local.ib => return Err(BindError::NoProtoOpt),
            Some(TransportKind::Tcp) if !local.tcp => return Err(BindError::NoProtoOpt),
            Some(k) => k,
            None if local.ib => TransportKind::Ib,
            None if local.tcp => TransportKind::Tcp,
            None => return Err(BindError::AddrNotAvail),
        };
        let port = if addr.port() == 0 {
            let start = (self.rng.next_u32() as u16).max(2);
            let mut port = start;
            loop {
                if !self.binds.contains_key(&(ip, port)) {
                    break port;
                }
                port = port.wrapping_add(1);
                if port < 2 {
                    port = 2;
                }
                if port == start {
                    return Err(BindError::AddrInUse);
                }
            }
        } else {
            if self.binds.contains_key(&(ip, addr.port())) {
                return Err(BindError::AddrInUse);
            }
            addr.port()
        };
        self.binds.insert((ip, port), sock);
        let bound = SocketAddr::new(ip, port);
        let hash = jhash_1word(u32::from(port), self.hash_init);
        let s = self.socks.get_mut(&sock).expect("checked");
        s.bound = Some(bound);
        s.transport = Some(kind);
        s.lane_hash = hash;
        Ok(bound)
    }

    /// `connect()`: records a default destination; nothing is sent.
    ///
    /// # Errors
    /// [`SendError::InvalidDest`] for wildcard, broadcast or multicast addresses.
    pub fn connect(&mut self, sock: SockId, dest: SocketAddr) -> Result<(), SendError> {
        let dest = SocketAddr::new(canonical(dest.ip()), dest.port());
        if !is_unicast(dest.ip()) {
            return Err(SendError::InvalidDest);
        }
        let s = self.socks.get_mut(&sock).ok_or(SendError::BadSocket)?;
        s.connected = Some(dest);
        Ok(())
    }

    /// The bound address.
    pub fn sock_name(&self, sock: SockId) -> Option<SocketAddr> {
        self.socks.get(&sock).and_then(|s| s.bound)
    }

    /// The default destination.
    pub fn peer_name(&self, sock: SockId) -> Option<SocketAddr> {
        self.socks.get(&sock).and_then(|s| s.connected)
    }

    /// Sets the usable send buffer (bytes, capped by the tunable).
    pub fn set_sndbuf(&mut self, sock: SockId, bytes: usize) {
        let max = self.tun.sndbuf_max as usize;
        if let Some(s) = self.socks.get_mut(&sock) {
            s.sndbuf = bytes.clamp(1, max);
            if s.writable() {
                self.wakes.insert(sock);
            }
        }
    }

    /// Charges what `sock` holds from now on to `uid`'s share of the node budget (before it
    /// holds anything: a daemon client's socket, at bind).
    pub fn set_owner(&mut self, sock: SockId, uid: u32) {
        if let Some(s) = self.socks.get_mut(&sock) {
            if s.rcv_q.is_empty() && s.snd_bytes == 0 {
                s.owner = uid;
            }
        }
    }

    /// Sets the usable receive buffer (bytes, capped by the tunable).
    pub fn set_rcvbuf(&mut self, sock: SockId, bytes: usize) {
        let max = self.tun.rcvbuf_max as usize;
        if let Some(s) = self.socks.get_mut(&sock) {
            s.rcvbuf = bytes.clamp(1, max);
        }
    }

    /// `(sndbuf, rcvbuf)` in bytes.
    pub fn bufs(&self, sock: SockId) -> Option<(usize, usize)> {
        self.socks.get(&sock).map(|s| (s.sndbuf, s.rcvbuf))
    }

    /// `RDS_CONG_MONITOR`.
    pub fn set_cong_monitor(&mut self, sock: SockId, on: bool) {
        if let Some(s) = self.socks.get_mut(&sock) {
            s.cong_monitor = on;
        }
    }

    /// `RDS_RECVERR`.
    pub fn set_recverr(&mut self, sock: SockId, on: bool) {
        if let Some(s) = self.socks.get_mut(&sock) {
            s.recverr = on;
        }
    }

    /// `RDS_RECVERR` value.
    pub fn recverr(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(|s| s.recverr)
    }

    /// Whether a receive would return something (POLLIN).
    pub fn readable(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(Sock::readable)
    }

    /// Whether the send buffer has room (POLLOUT).
    pub fn writable(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(Sock::writable)
    }

    /// Bytes a send may still queue before the buffer is full (a send is accepted while
    /// this is above zero).
    pub fn send_room(&self, sock: SockId) -> usize {
        self.socks
            .get(&sock)
            .map_or(0, |s| s.sndbuf.saturating_sub(s.snd_bytes))
    }

    /// The payload length of what a receive would return next: a message's full length, 0
    /// for a notification, `None` when nothing is queued.
    pub fn next_len(&self, sock: SockId) -> Option<usize> {
        let s = self.socks.get(&sock)?;
        if !s.notify_q.is_empty() || (s.cong_monitor && s.cong_notify != 0) {
            return Some(0);
        }
        s.rcv_q.front().map(|m| m.payload.len())
    }

    /// Whether the socket exists.
    pub fn sock_exists(&self, sock: SockId) -> bool {
        self.socks.contains_key(&sock)
    }

    /// Receives (`rds_recvmsg`): a congestion notification first (if monitoring), then the
    /// oldest message. At most `max_len` payload bytes are returned; without `peek` the rest of
    /// a longer message is discarded.
    ///
    /// # Errors
    /// [`RecvError::WouldBlock`] when nothing is queued.
    pub fn recv(
        &mut self,
        sock: SockId,
        max_len: usize,
        peek: bool,
    ) -> Result<Received, RecvError> {
        let s = self.socks.get_mut(&sock).ok_or(RecvError::BadSocket)?;
        if let Some(n) = s.notify_q.front().copied() {
            if !peek {
                s.notify_q.pop_front();
            }
            return Ok(Received::RdmaStatus(n));
        }
        if s.cong_monitor && s.cong_notify != 0 {
            let n = s.cong_notify;
            s.cong_notify = 0;
            return Ok(Received::CongUpdate(n));
        }
        let front = s.rcv_q.front().ok_or(RecvError::WouldBlock)?;
        let full_len = front.payload.len();
        let truncated = full_len > max_len;
        let mut msg = if peek {
            front.clone()
        } else {
            s.rcv_q.pop_front().expect("front exists")
        };
        if truncated {
            msg.payload.truncate(max_len);
        }
        if !peek {
            let owner = s.owner;
            self.mem_release_for(owner, msg.held + MSG_COST);
            self.stats.inc(Counter::RecvDelivered);
            self.stats
                .add(Counter::CopyToUser, msg.payload.len() as u64);
            self.rcvbuf_delta(sock, -(full_len as i64));
        }
        Ok(Received::Data {
            msg,
            full_len,
            truncated,
        })
    }

    /// Closes a socket: unbinds it, drops its queued messages and clears its congestion bit.
    pub fn close(&mut self, sock: SockId) {
        let Some(s) = self.socks.remove(&sock) else {
            return;
        };
        self.wakes.remove(&sock);
        let held: usize = s.rcv_q.iter().map(|m| m.held + MSG_COST).sum();
        self.mem_release_for(s.owner, held);
        if let Some(b) = s.bound {
            self.binds.remove(&(b.ip(), b.port()));
            if s.congested {
                self.local_cong_changed(b.ip(), b.port(), false);
            }
        }
        self.drop_msgs(|m, _| m.sock == Some(sock), None);
    }
}
