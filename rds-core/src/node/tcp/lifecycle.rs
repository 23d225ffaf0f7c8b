//! A connection's life on its lane: the outgoing attempt, its completion, the engine's
//! disconnect (half-closed and read to its end, or closed at once) and the end.

use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use super::*;

impl Tcp {
    /// Reads a draining connection of `conn` to its end (before a new connection takes over).
    pub(crate) fn finish_drains_of(
        &mut self,
        laddr: IpAddr,
        faddr: IpAddr,
        stack: &Stack,
        now: Instant,
        out: &mut Vec<TcpOut>,
    ) {
        let idxs: Vec<usize> = (0..self.conns.len())
            .filter(|&i| {
                self.conns[i].as_ref().is_some_and(|c| {
                    matches!(c.state, State::Draining(_))
                        && stack.conn_addrs(c.conn).0 == laddr
                        && stack.conn_addrs(c.conn).1 == faddr
                })
            })
            .collect();
        for i in idxs {
            self.read(i, now, out);
        }
    }

    /// Opens an outgoing connection for `(conn, path)` from `laddr` to `faddr:16385`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        laddr: IpAddr,
        faddr: IpAddr,
        tun: &Tunables,
        now: Instant,
    ) -> io::Result<()> {
        let target = self
            .routes
            .get(&faddr)
            .copied()
            .unwrap_or(SocketAddr::new(faddr, RDS_TCP_PORT));
        let fd = sys::tcp_socket(&target)?;
        sys::set_reuseaddr(fd.as_raw_fd())?;
        sys::tune_rds_tcp(fd.as_raw_fd())?;
        sys::set_bufs(fd.as_raw_fd(), tun.tcp_sndbuf, tun.tcp_rcvbuf)?;
        // Lane i binds a source port ≡ i (mod 8), so that the peer can tell the lane
        // (the 2026 kernels' SPORT_IDX scheme); the ephemeral range is 32768..61000.
        let mut bound = false;
        for _ in 0..32 {
            let group = self.port_rng.below((61000 - 32768) / MPATH_WORKERS as u64) as u16;
            let port = 32768 + group * MPATH_WORKERS as u16 + path as u16;
            if sys::bind(fd.as_raw_fd(), SocketAddr::new(laddr, port)).is_ok() {
                bound = true;
                break;
            }
        }
        if !bound {
            sys::bind(fd.as_raw_fd(), SocketAddr::new(laddr, 0))?;
        }
        sys::connect(fd.as_raw_fd(), target).inspect_err(|e| count_refused(&self.stats, e))?;
        let stream = TcpStream::from(fd);
        let local = sys::local_addr(stream.as_raw_fd())?;
        self.next_serial += 1;
        let key = canonical(faddr);
        let c = TcpConn::new(
            self.next_serial,
            stream,
            (conn, path, epoch),
            State::Connecting,
            local,
            target,
            key,
        );
        let fd = c.stream.as_raw_fd();
        let idx = self.insert(c);
        if let Some(old) = self.by_path.insert((conn, path), idx) {
            // The engine connects a path only after its previous connection ended or was
            // dropped; should one still be here, it is read to its end, never closed unread.
            self.retire(old, now);
        }
        self.epoll
            .add(fd, TOKEN_CONN | idx as u64, EPOLLOUT | EPOLLIN | EPOLLRDHUP)?;
        Ok(())
    }

    /// The connection attempt `idx` completed; the engine agreed to use it.
    pub(crate) fn established(&mut self, idx: usize, epoch: u32) {
        if let Some(c) = self.conns[idx].as_mut() {
            c.state = State::Up;
            c.epoch = epoch;
            c.peer = sys::peer_addr(c.stream.as_raw_fd()).unwrap_or(c.peer);
            c.epoll_out = false;
            let _ = self.epoll.modify(
                c.stream.as_raw_fd(),
                TOKEN_CONN | idx as u64,
                EPOLLIN | EPOLLRDHUP,
            );
        }
    }

    /// Identity of a connection attempt still in progress (not one the engine dropped since
    /// its outcome was collected: that one drains).
    pub(crate) fn ident(&self, idx: usize, serial: u64) -> Option<(ConnId, usize, u32)> {
        self.conns[idx]
            .as_ref()
            .filter(|c| c.serial == serial && c.state == State::Connecting)
            .map(|c| (c.conn, c.path, c.epoch))
    }

    /// The engine dropped `(conn, path, epoch)`: half-close and drain, or close at once.
    pub(crate) fn drop_path(
        &mut self,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
        now: Instant,
    ) -> Option<(ConnId, usize, u32)> {
        let idx = *self.by_path.get(&(conn, path))?;
        let c = self.conns[idx].as_mut()?;
        if c.epoch != epoch {
            return None;
        }
        self.by_path.remove(&(conn, path));
        if reason == DropReason::Superseded {
            // A newer connection for the lane came in: this one is stale (it is read to its
            // end first, so nothing our TCP acknowledged on it is lost).
            self.stats.inc(TcpCounter::TcpListenClosedStale);
        }
        if reason.drains() {
            // Up, or still connecting (the peer may have adopted it and written to it): read
            // to its end (the engine's connection lifecycle, rules 2 and 3).
            self.retire(idx, now);
        } else {
            self.close_now(idx, reason == DropReason::Protocol);
        }
        None
    }

    /// Half-closes connection `idx` and reads it to its end (its frames keep their epoch;
    /// [`TcpOut::Closed`] reports the end). `shutdown(2)` aborts an attempt still in
    /// `SYN_SENT`, which then ends at once with nothing read.
    pub(crate) fn retire(&mut self, idx: usize, now: Instant) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if self.by_path.get(&(c.conn, c.path)) == Some(&idx) {
            self.by_path.remove(&(c.conn, c.path));
        }
        if matches!(c.state, State::Draining(_)) {
            return;
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        c.state = State::Draining(now + DRAIN_TIMEOUT);
        c.out.clear();
        c.out_bytes = 0;
        c.more = false;
        if c.epoll_out {
            c.epoll_out = false;
            let _ = self.epoll.modify(
                c.stream.as_raw_fd(),
                TOKEN_CONN | idx as u64,
                EPOLLIN | EPOLLRDHUP,
            );
        }
        // Whatever is readable now (and the end of an aborted attempt) is read next round.
        self.pending_flush.push(idx);
    }

    /// Closes at once (RST if `reset`), without telling the engine.
    pub(crate) fn close_now(&mut self, idx: usize, reset: bool) {
        if let Some(c) = self.remove(idx) {
            if reset {
                let _ = sys::set_linger0(c.stream.as_raw_fd());
            }
        }
    }

    /// Closes a connection the peer ended; returns what the engine must hear.
    pub(crate) fn closed(&mut self, idx: usize, serial: u64) -> Option<(ConnId, usize, u32, bool)> {
        if self.conns.get(idx)?.as_ref()?.serial != serial {
            return None;
        }
        let c = self.remove(idx)?;
        Some((c.conn, c.path, c.epoch, c.state == State::Connecting))
    }
}
