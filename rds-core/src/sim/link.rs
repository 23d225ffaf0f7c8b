//! The simulated links: connecting, transmitting, reading, closing and held connections.

use bytes::BytesMut;
use core::time::Duration;

use crate::proto::driver::{self, Frames};
use crate::proto::{ConnId, DropReason, StreamParser, TransportKind};
use crate::time::Instant;
use crate::wire::MAX_MSG_SIZE;

use super::{End, Ev, Sim};

impl Sim {
    pub(super) fn latency(&mut self) -> Duration {
        let (lo, hi) = self.cfg.latency;
        let span = u64::try_from((hi - lo).as_nanos()).unwrap_or(0);
        lo + Duration::from_nanos(if span == 0 { 0 } else { self.rng.below(span) })
    }

    pub(super) fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    /// Node `n` asks for a transport connection: the request reaches the peer after a latency.
    pub(super) fn connect(&mut self, n: usize, conn: ConnId, path: usize, epoch: u32) {
        let (_, faddr, _) = self.nodes[n].stack.conn_addrs(conn);
        let lat = self.latency();
        let inc = self.nodes[n].incarnation;
        self.attempts.insert((n, conn, path, epoch), None);
        self.schedule(
            self.now + lat,
            Ev::Arrive {
                from: n,
                from_inc: inc,
                conn,
                path,
                epoch,
                to_addr: faddr,
            },
        );
    }

    /// Node `n` closes the path's transport connection with `epoch`.
    pub(super) fn disconnect(
        &mut self,
        n: usize,
        conn: ConnId,
        path: usize,
        epoch: u32,
        reason: DropReason,
    ) {
        if let Some(attempt) = self.attempts.remove(&(n, conn, path, epoch)) {
            // Dropped while connecting.
            match attempt {
                Some(l) if reason.drains() => self.drain_attempt(l, epoch),
                Some(l) => self.close_end(l, 0),
                None if reason.drains() => {
                    // Aborted in SYN_SENT: the request never completes, the drain ends now.
                    let inc = self.nodes[n].incarnation;
                    self.schedule(
                        self.now,
                        Ev::Aborted {
                            node: n,
                            inc,
                            conn,
                            path,
                            epoch,
                        },
                    );
                }
                None => {}
            }
            return;
        }
        if let Some(&(l, e)) = self.by_path.get(&(n, conn, path)) {
            if self.links[l].ends[e].epoch == epoch {
                self.by_path.remove(&(n, conn, path));
                if reason.drains() {
                    // Half-close: the peer learns, closes its side after the data
                    // it already sent, and this end reads until then.
                    self.notify_closed(l, 1 - e);
                } else {
                    self.close_end(l, e);
                }
            }
        }
    }

    /// Drains a path's frames into its link.
    pub(super) fn transmit(&mut self, n: usize, conn: ConnId, path: usize) {
        let link = self.by_path.get(&(n, conn, path)).copied();
        let now = self.now;
        let ib = self.cfg.kind == TransportKind::Ib;
        let mut stream = BytesMut::new();
        let mut frames = Vec::new();
        for t in Frames::new(&mut self.nodes[n].stack, now, conn, path) {
            if ib {
                let mut f = BytesMut::with_capacity(t.wire_len());
                f.extend_from_slice(&t.hdr);
                f.extend_from_slice(&t.payload);
                frames.push((f.freeze(), t.kind == crate::proto::FrameKind::AckOnly));
            } else {
                stream.extend_from_slice(&t.hdr);
                stream.extend_from_slice(&t.payload);
            }
        }
        let Some((l, e)) = link else { return };
        if !self.links[l].ends[e].open {
            return;
        }
        if ib {
            for (f, ack_only) in frames {
                let at = self.carry(l, e, f);
                if ack_only {
                    self.schedule(at, Ev::AckSent { link: l, to: e });
                }
            }
        } else {
            let mut data = stream.freeze();
            while !data.is_empty() {
                let max = self.cfg.max_chunk.max(1) as u64;
                let n = (1 + self.rng.below(max) as usize).min(data.len());
                let chunk = data.split_to(n);
                self.carry(l, e, chunk);
            }
        }
    }

    /// The initiator's attempt on link `l` (end 0) was dropped after the acceptor's TCP
    /// completed it: half-close it and read it to its end under the attempt's `epoch`.
    pub(super) fn drain_attempt(&mut self, l: usize, epoch: u32) {
        let end = &mut self.links[l].ends[0];
        let n = end.node;
        let conn = end.conn;
        let path = end.path;
        self.notify_closed(l, 1);
        self.start_reading(l, 0, conn, path, epoch);
        self.pump(n);
    }

    /// End `e` of link `l` is read from now on as `(conn, path, epoch)`: first what arrived
    /// while nobody read it, then its end of stream if the peer closed meanwhile.
    pub(super) fn start_reading(
        &mut self,
        l: usize,
        e: usize,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) {
        let now = self.now;
        let end = &mut self.links[l].ends[e];
        end.conn = conn;
        end.path = path;
        end.epoch = epoch;
        let t = end.node;
        let held = end.held.take().unwrap_or_default();
        let mut frames = Vec::new();
        let mut r = Ok(());
        for d in held {
            r = r.and(self.links[l].ends[e].parser.feed(d, &mut frames));
        }
        let st = &mut self.nodes[t].stack;
        let _ = driver::deliver(st, now, conn, path, epoch, frames, r);
        if self.links[l].ends[e].peer_closed {
            self.links[l].ends[e].open = false;
            if self.by_path.get(&(t, conn, path)) == Some(&(l, e)) {
                self.by_path.remove(&(t, conn, path));
            }
            self.nodes[t]
                .stack
                .handle_disconnected(now, conn, path, epoch);
            self.notify_closed(l, 1 - e);
        }
    }

    pub(super) fn delivery_time(&mut self, l: usize, to: usize) -> Instant {
        let lat = self.latency();
        let end = &mut self.links[l].ends[to];
        let at = (self.now + lat).max(end.next_rx_time);
        end.next_rx_time = at;
        at
    }

    /// End `e` closes its side (its stack decided, or its node died): the peer learns after
    /// the data already on its way (a FIN or RST follows the data).
    pub(super) fn close_end(&mut self, l: usize, e: usize) {
        self.links[l].ends[e].open = false;
        let other = 1 - e;
        self.notify_closed(l, other);
    }

    pub(super) fn notify_closed(&mut self, l: usize, e: usize) {
        let end = &self.links[l].ends[e];
        if !end.open || end.closing {
            return;
        }
        let lat = self.latency();
        let at = (self.now + lat).max(self.links[l].ends[e].next_rx_time);
        self.links[l].ends[e].closing = true;
        self.schedule(at, Ev::Closed { link: l, end: e });
    }

    pub(super) fn end_live(&self, l: usize, e: usize) -> bool {
        let end = &self.links[l].ends[e];
        end.open && self.nodes[end.node].incarnation == end.incarnation
    }

    pub(super) fn new_end(
        &self,
        node: usize,
        incarnation: u64,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) -> End {
        End {
            node,
            incarnation,
            conn,
            path,
            epoch,
            open: true,
            closing: false,
            client_port: 0,
            refused: false,
            held: None,
            peer_closed: false,
            parser: StreamParser::new(MAX_MSG_SIZE as u32),
            tx_bytes: 0,
            rx_bytes: 0,
            next_rx_time: Instant::ZERO,
            rx_cutoff: u64::MAX,
        }
    }

    /// Node `t`'s engine gives its held connection `link` a lane: what arrived meanwhile is
    /// read first, then the end of stream if the peer closed meanwhile.
    pub(super) fn adopt(&mut self, t: usize, link: usize, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        if self.links[link].ends[1].held.is_none() || !self.end_live(link, 1) {
            // Gone meanwhile: the path sees its end.
            self.nodes[t]
                .stack
                .handle_disconnected(now, conn, path, epoch);
            return;
        }
        if let Some(&(ol, oe)) = self.by_path.get(&(t, conn, path)) {
            self.close_end(ol, oe);
        }
        self.by_path.insert((t, conn, path), (link, 1));
        self.start_reading(link, 1, conn, path, epoch);
    }

    /// The acceptor's engine gave its held connection `link` up: reset it unread.
    pub(super) fn refuse_held(&mut self, link: usize) {
        let e = &mut self.links[link].ends[1];
        if e.held.take().is_none() {
            return;
        }
        e.refused = true;
        self.close_end(link, 1);
    }

    /// A client source port congruent to the lane index mod 8, as newer kernels choose.
    pub(super) fn client_port(&mut self, path: usize) -> u16 {
        self.next_port = self.next_port.wrapping_add(8);
        if self.next_port < 40000 {
            self.next_port = 40000;
        }
        self.next_port + path as u16
    }

    /// End `e` of link `l` writes `data`: it is delivered to the other end at the link's
    /// next delivery time, which is returned.
    fn carry(&mut self, l: usize, e: usize, data: bytes::Bytes) -> crate::time::Instant {
        let off = self.links[l].ends[e].tx_bytes;
        self.links[l].ends[e].tx_bytes += data.len() as u64;
        let to = 1 - e;
        let at = self.delivery_time(l, to);
        self.schedule(
            at,
            Ev::Deliver {
                link: l,
                to,
                off,
                data,
            },
        );
        at
    }
}
