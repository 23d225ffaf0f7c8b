//! The byte path: reading and parsing frames, pulling frames from the engine and writing
//! them, acknowledgement polling (`SIOCOUTQ`), and the timers of drains and partial messages.

use std::io::{self, IoSlice, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::*;

impl Tcp {
    /// Sets what the messages in progress may hold in all, from now on.
    pub(crate) fn set_partial_cap(&mut self, cap: usize) {
        self.partial_cap = cap;
    }

    /// Reads what is available (bounded), parses frames; end of stream or an error closes.
    /// Small payloads are copied out of the read buffer (which the next read reuses), larger
    /// ones keep it (pooled, see [`crate::buf`]); the message in progress is reported to the
    /// engine as it grows.
    pub(super) fn read(&mut self, idx: usize, now: Instant, out: &mut Vec<TcpOut>) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.refused {
            // Refused and closed: its report is on its way.
            return;
        }
        let serial = c.serial;
        let fd = c.stream.as_raw_fd();
        let mut frames = std::mem::take(&mut self.spare_frames);
        let mut total = 0;
        let mut closed = false;
        let mut stream_err = None;
        // What the other connections' messages in progress hold, and what all may hold.
        let others = self.partial_total - c.held_reported;
        let cap = self.partial_cap;
        while total < READ_BUDGET {
            if others + c.parser.partial_held() > cap {
                // The node cannot hold this message: drop it now rather than read on (the
                // rest stays in the kernel's buffer until the connection is reset).
                c.parser.abandon();
                c.refused = true;
                break;
            }
            // The rest of a large payload is read straight into its message buffer, which
            // grows to what the socket holds now (never to what the header announced).
            let avail = if c.parser.data_rem() >= DIRECT_MIN {
                sys::inq(fd).unwrap_or(0)
            } else {
                0
            };
            if let Some((buf, rem)) = c.parser.direct_buf(DIRECT_MIN, avail) {
                match sys::read_spare(fd, buf, rem.min(READ_BUDGET)) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        total += n;
                        c.parser.direct_done(n, &mut frames);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            // The transport's read buffer, reused from read to read while nothing keeps it.
            let mut v = std::mem::take(&mut self.rbuf);
            if v.capacity() < READ_CHUNK {
                buf::give(v);
                v = buf::take(READ_CHUNK);
            }
            v.clear();
            let r = sys::read_spare(fd, &mut v, READ_CHUNK);
            match r {
                Ok(0) => {
                    self.rbuf = v;
                    closed = true;
                    break;
                }
                Ok(n) => {
                    total += n;
                    // Headers and small payloads are copied out of the buffer, which stays
                    // ours; from a large payload that lies whole in it on, the buffer becomes
                    // a chunk that the payload slices (charged the whole buffer), and the next
                    // read takes another.
                    let fed = match c.parser.feed_slice(&v, &mut frames) {
                        Ok(k) if k == v.len() => {
                            self.rbuf = v;
                            Ok(())
                        }
                        Ok(k) => {
                            let held = v.capacity();
                            let rest = buf::freeze(v).slice(k..);
                            c.parser.feed_chunk(rest, held, &mut frames)
                        }
                        Err(e) => {
                            self.rbuf = v;
                            Err(e)
                        }
                    };
                    if let Err(e) = fed {
                        stream_err = Some(e);
                        break;
                    }
                    if n < READ_CHUNK && total < SHORT_READ_STOP {
                        // A short read of a few frames (requests and answers): TCP's receive
                        // queue ran dry (`tcp_recvmsg` returns less than asked only then),
                        // and the connection is registered level-triggered, so what comes
                        // later fires again; reading on until EAGAIN cost a read(2) per
                        // wake-up. A stream reads on: its next bytes are often there by
                        // then (stopping here cost rds-bench 6-11% at 64 KiB and 1 MiB).
                        break;
                    }
                }
                Err(e) => {
                    self.rbuf = v;
                    match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        io::ErrorKind::Interrupted => continue,
                        _ => {
                            closed = true;
                            break;
                        }
                    }
                }
            }
        }
        let (conn, path, epoch) = (c.conn, c.path, c.epoch);
        if !c.refused && others + c.parser.partial_held() > cap {
            c.parser.abandon();
            c.refused = true;
        }
        if c.refused {
            c.partial_since = None;
            frames.clear();
            let _ = c.stream.shutdown(Shutdown::Both);
            out.push(TcpOut::ReassemblyRefused);
            closed = true;
            stream_err = None;
        }
        // The message in progress, charged as it fills (before the frames that completed
        // are: their payloads now are the messages').
        let held = c.parser.partial_held();
        self.partial_total = others + held;
        if held != c.held_reported {
            c.held_reported = held;
            out.push(TcpOut::Reassembly {
                conn,
                path,
                epoch,
                held,
            });
        }
        if !c.parser.in_message() {
            c.partial_since = None;
        } else if total > 0 || c.partial_since.is_none() {
            c.partial_since = Some(now);
        }
        if frames.is_empty() {
            self.spare(frames);
        } else {
            out.push(TcpOut::Frames {
                conn,
                path,
                epoch,
                frames,
            });
        }
        if let Some(err) = stream_err {
            out.push(TcpOut::StreamError {
                conn,
                path,
                epoch,
                err,
            });
        } else if closed {
            out.push(TcpOut::Closed(idx, serial));
        } else if total >= READ_BUDGET {
            // More to read: come back without waiting for a new edge.
            self.pending_flush.push(idx);
        }
        // Incoming data may carry acknowledgements of ours. On a request/response lane, whose
        // peer answers our last write on it, the answer's segment carried TCP's
        // acknowledgement of that write: the lane is idle for the next send without asking
        // TCP (`SIOCOUTQ`, a system call per round trip). The count itself is asked at most
        // `ACK_POLL_ANSWERED` after the first answer taken so (the poll's timer, moved there
        // from its first look 50 us after a write, which would wake a thread per round trip),
        // or by a read once `ANSWERED_MAX` bytes wait for it. A guess that is wrong (bytes the
        // peer sent before our write reached it) only lets the next message go out from its
        // sending thread.
        if let Some(c) = self.conns[idx].as_mut().filter(|_| total > 0) {
            if c.takes_answer(now) {
                let since = *c.answered_since.get_or_insert(now);
                c.answered = c.written;
                c.ack_poll = Some((since + ACK_POLL_ANSWERED, ACK_POLL_ANSWERED));
                return;
            }
        }
        self.poll_ack(idx, out);
    }

    /// Takes back a read's frame list, emptied, for the next read (a short one only).
    pub(super) fn spare(&mut self, frames: Vec<Frame>) {
        debug_assert!(frames.is_empty());
        if frames.capacity() <= SPARE_FRAMES_MAX && frames.capacity() > self.spare_frames.capacity()
        {
            self.spare_frames = frames;
        }
    }

    /// Pulls frames of `(conn, path)` from the engine into the connection's output queue.
    pub(crate) fn pull(&mut self, stack: &mut Stack, conn: ConnId, path: usize, now: Instant) {
        // The engine transmits only on paths it believes up, which have a socket here.
        let Some(&idx) = self.by_path.get(&(conn, path)) else {
            return;
        };
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.state != State::Up {
            return;
        }
        c.more = false;
        let mut any = false;
        let mut frames = crate::proto::driver::Frames::new(stack, now, conn, path);
        while c.out_bytes < OUT_HIGH {
            let Some(t) = frames.next() else {
                break;
            };
            if self.tap.enabled() {
                self.tap_tx.push(&self.tap, &t.hdr, &t.payload);
            }
            if self.hdr_arena.capacity() - self.hdr_arena.len() < t.hdr.len() {
                self.hdr_arena.reserve(48 * 256);
            }
            self.hdr_arena.extend_from_slice(&t.hdr);
            c.out.push_back(self.hdr_arena.split().freeze());
            c.out_bytes += t.hdr.len() + t.payload.len();
            if !t.payload.is_empty() {
                c.out.push_back(t.payload);
            }
            any = true;
        }
        if c.out_bytes >= OUT_HIGH {
            c.more = true;
        }
        if !self.tap_tx.is_empty() {
            let (laddr, faddr, _) = stack.conn_addrs(conn);
            self.tap_tx
                .record(&self.tap, laddr, faddr, path, c.local, c.peer);
        }
        if any {
            self.pending_flush.push(idx);
        }
    }

    /// Writes pending output of every connection that has some. Returns connections that ran
    /// low and may pull more frames, and acknowledgement updates in `out`.
    pub(crate) fn write_pending(
        &mut self,
        now: Instant,
        out: &mut Vec<TcpOut>,
    ) -> Vec<(ConnId, usize)> {
        let mut refill = Vec::new();
        // The list is handed back emptied (its room kept: a list per write was an allocation
        // per message); reads below may queue connections anew meanwhile.
        let mut list = std::mem::take(&mut self.pending_flush);
        list.sort_unstable();
        list.dedup();
        for &idx in &list {
            let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
                continue;
            };
            if !matches!(c.state, State::Up) {
                if matches!(c.state, State::Draining(_)) {
                    self.read(idx, now, out);
                }
                continue;
            }
            let mut err = false;
            while !c.out.is_empty() {
                // A few buffers (requests and answers) are described on the stack, a
                // stream's many in a list of their own.
                let k = c.out.len().min(IOV_BATCH);
                let r = if k <= IOV_STACK {
                    let mut iov = [IoSlice::new(&[]); IOV_STACK];
                    for (slot, b) in iov.iter_mut().zip(c.out.iter()) {
                        *slot = IoSlice::new(b);
                    }
                    c.stream.write_vectored(&iov[..k])
                } else {
                    let iov: Vec<IoSlice<'_>> =
                        c.out.iter().take(k).map(|b| IoSlice::new(b)).collect();
                    c.stream.write_vectored(&iov)
                };
                match r {
                    Ok(0) => {
                        err = true;
                        break;
                    }
                    Ok(mut n) => {
                        c.written_before2 = c.written_before;
                        c.written_before = c.written;
                        c.written += n as u64;
                        c.out_bytes -= n;
                        while n > 0 {
                            let front = c.out.front_mut().expect("written bytes were queued");
                            if n >= front.len() {
                                n -= front.len();
                                c.out.pop_front();
                            } else {
                                let _ = front.split_to(n);
                                n = 0;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.stats.inc(TcpCounter::TcpSndbufFull);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        err = true;
                        break;
                    }
                }
            }
            let want_out = !c.out.is_empty() && !err;
            if want_out != c.epoll_out {
                c.epoll_out = want_out;
                let ev = EPOLLIN | EPOLLRDHUP | if want_out { EPOLLOUT } else { 0 };
                let _ = self
                    .epoll
                    .modify(c.stream.as_raw_fd(), TOKEN_CONN | idx as u64, ev);
            }
            if err {
                if sys::inq(c.stream.as_raw_fd()).is_ok_and(|n| n > 0) {
                    // Reset with bytes our TCP acknowledged still unread: they are read
                    // first, and the read reports the end.
                    self.read(idx, now, out);
                } else {
                    out.push(TcpOut::Closed(idx, c.serial));
                }
                continue;
            }
            if c.more && c.out_bytes < OUT_HIGH / 2 {
                refill.push((c.conn, c.path));
            }
            // Acknowledgements come with the peer's data, whose read asks for them; after a
            // write only a lane with much unacknowledged asks now (bulk senders wait for the
            // room), the others at the acknowledgement poll.
            if c.written - c.acked >= ACK_ASK_AFTER_WRITE {
                self.poll_ack(idx, out);
            }
            if let Some(c) = self.conns[idx].as_mut() {
                if c.written > c.acked && c.ack_poll.is_none() {
                    c.ack_poll = Some((now + ACK_POLL_MIN, ACK_POLL_MIN));
                }
            }
        }
        list.clear();
        list.append(&mut self.pending_flush);
        self.pending_flush = list;
        refill
    }

    /// Learns how much of what we wrote the peer acknowledged (`SIOCOUTQ`).
    pub(super) fn poll_ack(&mut self, idx: usize, out: &mut Vec<TcpOut>) {
        let Some(c) = self.conns[idx].as_mut() else {
            return;
        };
        if c.written == c.acked {
            c.answered_since = None;
            return;
        }
        if c.state != State::Up {
            return;
        }
        let Ok(q) = sys::outq(c.stream.as_raw_fd()) else {
            return;
        };
        c.answered_since = None;
        let acked = c.written.saturating_sub(q as u64);
        c.last_seen_una = acked as u32;
        if acked > c.acked {
            c.acked = acked;
            out.push(TcpOut::Acked {
                conn: c.conn,
                path: c.path,
                epoch: c.epoch,
                acked,
            });
            // Progress: poll quickly again while bytes remain.
            c.ack_poll = (c.written > c.acked).then_some((Instant::ZERO, ACK_POLL_MIN));
        }
    }

    /// Asks TCP now (`SIOCOUTQ`) for the acknowledgements of every connection with bytes
    /// unacknowledged, whatever their poll's schedule; returns whether any came (reported as
    /// [`TcpOut::Acked`]). For a thread that waits for its send buffer's room.
    pub(crate) fn poll_acks_now(&mut self, out: &mut Vec<TcpOut>) -> bool {
        let before = out.len();
        for idx in 0..self.conns.len() {
            if self.conns[idx]
                .as_ref()
                .is_some_and(|c| c.state == State::Up && c.written > c.acked)
            {
                self.poll_ack(idx, out);
            }
        }
        out.len() > before
    }

    /// Runs due acknowledgement polls and drain deadlines.
    pub(crate) fn due_timers(&mut self, now: Instant, out: &mut Vec<TcpOut>) {
        self.resume_listeners(now);
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_mut() else {
                continue;
            };
            if let State::Draining(until) = c.state {
                if now >= until {
                    self.stats.inc(TcpCounter::TcpDrainExpired);
                    out.push(TcpOut::Closed(idx, c.serial));
                }
                continue;
            }
            if let Some((at, interval)) = c.ack_poll.filter(|_| self.ack_polls_deferred.is_none()) {
                if at <= now {
                    let before = c.acked;
                    self.poll_ack(idx, out);
                    if let Some(c) = self.conns[idx].as_mut() {
                        if c.written > c.acked {
                            let iv = if c.acked > before {
                                ACK_POLL_MIN
                            } else {
                                (interval * 2).min(ACK_POLL_MAX)
                            };
                            c.ack_poll = Some((now + iv, iv));
                        } else {
                            c.ack_poll = None;
                        }
                    }
                }
            }
        }
    }

    /// Closes the connections whose message in progress got no byte for `limit`
    /// (`net.rds.partial_timeout_ms`): a peer that announces a message and stops half way
    /// holds no memory for long (`tcp_partial_timeouts`). Looks at most every
    /// [`PARTIAL_SCAN`] (the I/O thread comes here every round: a scan of every connection per
    /// message was a measurable part of a small message's cost).
    pub(crate) fn expire_partials(&mut self, now: Instant, limit: Duration, out: &mut Vec<TcpOut>) {
        if self
            .partials_scanned
            .is_some_and(|t| now < t + PARTIAL_SCAN)
        {
            return;
        }
        self.partials_scanned = Some(now);
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_mut() else {
                continue;
            };
            if c.partial_since.is_some_and(|t| now >= t + limit) {
                c.partial_since = None;
                self.stats.inc(TcpCounter::TcpPartialTimeouts);
                let _ = c.stream.shutdown(Shutdown::Both);
                out.push(TcpOut::Closed(idx, c.serial));
            }
        }
    }

    /// The earliest transport timer.
    pub(crate) fn earliest_timer(&self) -> Option<Instant> {
        let paused = self.listeners.iter().filter_map(|l| l.paused_until);
        let deferred = self.ack_polls_deferred.map(|t| t + ACK_DEFER_MAX);
        self.conns
            .iter()
            .flatten()
            .flat_map(|c| {
                let t = match c.state {
                    State::Draining(t) => Some(t),
                    _ => c.ack_poll.map(|(t, _)| deferred.map_or(t, |d| t.max(d))),
                };
                // A message in progress is looked at again within a second.
                t.into_iter()
                    .chain(c.partial_since.map(|p| p + Duration::from_secs(1)))
            })
            .chain(paused)
            .min()
    }

    /// Marks a connection for another read/flush round.
    pub(crate) fn mark(&mut self, idx: usize) {
        self.pending_flush.push(idx);
    }
}
