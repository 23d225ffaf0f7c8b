//! Admission: the listeners and their pause after failed accepts, the connection caps
//! checked at accept, accepted connections installed on their lane, and the sockets of the
//! connections the engine holds unread.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::*;

/// A listening socket and, while its `accept` fails, when it rejoins the event set.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) sock: TcpListener,
    pub(super) paused_until: Option<Instant>,
}

impl Tcp {
    /// Listens on `addr:16385` (never a wildcard).
    pub(crate) fn listen(&mut self, addr: IpAddr) -> io::Result<()> {
        // The OS error is returned as is (callers print its errno: EADDRINUSE, EADDRNOTAVAIL),
        // except a port the kernel's rds_tcp holds, which `port_taken` names.
        let at = SocketAddr::new(addr, RDS_TCP_PORT);
        let l = TcpListener::bind(at).map_err(|e| port_taken(e, at, "rds_tcp"))?;
        l.set_nonblocking(true)?;
        let _ = sys::tune_rds_tcp(l.as_raw_fd());
        let token = TOKEN_LISTENER | self.listeners.len() as u64;
        self.epoll.add(l.as_raw_fd(), token, EPOLLIN)?;
        self.listeners.push(Listener {
            sock: l,
            paused_until: None,
        });
        Ok(())
    }

    /// The node's connection cap.
    pub(crate) fn conn_cap(&self) -> usize {
        self.conn_cap
    }

    /// Accepted connections waiting for a lane.
    pub(crate) fn waiting(&self) -> usize {
        self.held.len()
    }

    /// Accepts every pending connection of listener `li` within the caps; connections beyond
    /// a cap are reset and counted. An `accept` failure pauses the listener.
    pub(super) fn accept_all(&mut self, li: usize, now: Instant, out: &mut Vec<TcpOut>) {
        if self
            .listeners
            .get(li)
            .is_none_or(|l| l.paused_until.is_some())
        {
            return;
        }
        // Connections accepted earlier in this round and not yet given to the engine.
        let mut fresh: HashMap<IpAddr, usize> = HashMap::new();
        for o in out.iter() {
            if let TcpOut::Accepted { peer, .. } = o {
                *fresh.entry(canonical(peer.ip())).or_insert(0) += 1;
            }
        }
        let mut fresh_total: usize = fresh.values().sum();
        loop {
            let res = self.listeners[li].sock.accept();
            match res {
                Ok((stream, peer)) => {
                    self.listen_pause = Duration::ZERO;
                    let local = match stream.local_addr() {
                        Ok(a) => a,
                        Err(_) => continue,
                    };
                    let ip = canonical(peer.ip());
                    let of_addr = self.per_addr.get(&ip).copied().unwrap_or(0)
                        + self
                            .held
                            .values()
                            .filter(|h| canonical(h.peer.ip()) == ip)
                            .count()
                        + fresh.get(&ip).copied().unwrap_or(0);
                    let total = self.live + self.held.len() + fresh_total;
                    let over = if of_addr >= TCP_CONNS_PER_ADDR {
                        Some(TcpCounter::TcpAcceptAddrLimit)
                    } else if total >= self.conn_cap {
                        Some(TcpCounter::TcpAcceptNodeLimit)
                    } else {
                        None
                    };
                    if let Some(counter) = over {
                        self.stats.inc(counter);
                        reset(stream);
                        continue;
                    }
                    *fresh.entry(ip).or_insert(0) += 1;
                    fresh_total += 1;
                    out.push(TcpOut::Accepted {
                        stream,
                        local,
                        peer,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO)
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        self.stats.inc(TcpCounter::TcpAcceptEmfile);
                    }
                    self.pause_listener(li, now);
                    break;
                }
            }
        }
    }

    /// Takes listener `li` out of the event set for the current back-off.
    fn pause_listener(&mut self, li: usize, now: Instant) {
        self.listen_pause = if self.listen_pause.is_zero() {
            LISTEN_PAUSE_MIN
        } else {
            (self.listen_pause * 2).min(LISTEN_PAUSE_MAX)
        };
        let Some(l) = self.listeners.get_mut(li) else {
            return;
        };
        self.stats.inc(TcpCounter::TcpListenPaused);
        let _ = self.epoll.delete(l.sock.as_raw_fd());
        l.paused_until = Some(now + self.listen_pause);
    }

    /// Returns paused listeners whose pause ended to the event set.
    pub(super) fn resume_listeners(&mut self, now: Instant) {
        for (li, l) in self.listeners.iter_mut().enumerate() {
            if l.paused_until.is_some_and(|t| t <= now) {
                l.paused_until = None;
                let token = TOKEN_LISTENER | li as u64;
                if self.epoll.add(l.sock.as_raw_fd(), token, EPOLLIN).is_err() {
                    // No room in the event set now (ENOMEM): try again after a pause.
                    l.paused_until = Some(now + LISTEN_PAUSE_MAX);
                }
            }
        }
    }

    /// Installs an accepted connection for `(conn, path)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn install(
        &mut self,
        stream: TcpStream,
        local: SocketAddr,
        peer: SocketAddr,
        conn: ConnId,
        path: usize,
        epoch: u32,
        tun: &Tunables,
        now: Instant,
    ) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        sys::tune_rds_tcp(stream.as_raw_fd())?;
        sys::set_bufs(stream.as_raw_fd(), tun.tcp_sndbuf, tun.tcp_rcvbuf)?;
        if let Some(&old) = self.by_path.get(&(conn, path)) {
            // Only a larger address's attempt that asked us to connect back can still be
            // here (the peer resets it without writing to it: rule 5 of the engine's
            // connection lifecycle); anything else is read to its end.
            self.stats.inc(TcpCounter::TcpListenClosedStale);
            let connecting = self.conns[old]
                .as_ref()
                .is_some_and(|c| c.state == State::Connecting);
            if connecting {
                self.close_now(old, false);
            } else {
                self.retire(old, now);
            }
        }
        self.next_serial += 1;
        let key = canonical(peer.ip());
        let c = TcpConn::new(
            self.next_serial,
            stream,
            (conn, path, epoch),
            State::Up,
            local,
            peer,
            key,
        );
        let fd = c.stream.as_raw_fd();
        let idx = self.insert(c);
        self.by_path.insert((conn, path), idx);
        if let Err(e) = self
            .epoll
            .add(fd, TOKEN_CONN | idx as u64, EPOLLIN | EPOLLRDHUP)
        {
            self.close_now(idx, true);
            return Err(e);
        }
        Ok(())
    }

    /// Refuses an accepted connection with a reset.
    pub(crate) fn reset_refused(&mut self, stream: TcpStream, why: AcceptError) {
        if why == AcceptError::Wait {
            self.stats.inc(TcpCounter::TcpConnectRaced);
        }
        reset(stream);
    }

    /// A name for an accepted connection offered to the engine.
    pub(crate) fn new_link(&mut self) -> LinkId {
        self.next_link += 1;
        LinkId(self.next_link)
    }

    /// Keeps an accepted connection unread: the engine holds it ([`crate::proto::Incoming::Hold`]).
    pub(crate) fn hold(&mut self, link: LinkId, h: HeldConn) {
        self.held.insert(link, h);
    }

    /// The held connection `link`, for the engine's [`crate::proto::Event::Adopt`].
    pub(crate) fn take_held(&mut self, link: LinkId) -> Option<HeldConn> {
        self.held.remove(&link)
    }

    /// Resets the held connection `link` that the engine gave up, counted by why.
    pub(crate) fn refuse_held(&mut self, link: LinkId, why: HeldEnd) {
        let Some(h) = self.held.remove(&link) else {
            return;
        };
        match why {
            HeldEnd::AddrEvicted => self.stats.inc(TcpCounter::TcpWaitAddrEvicted),
            HeldEnd::NodeEvicted => self.stats.inc(TcpCounter::TcpWaitNodeEvicted),
            HeldEnd::Expired => self.stats.inc(TcpCounter::TcpWaitExpired),
            HeldEnd::Refused(e) => {
                self.reset_refused(h.stream, e);
                return;
            }
        }
        reset(h.stream);
    }
}
