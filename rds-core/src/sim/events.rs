//! The simulator's event handler: what each scheduled event does to the links and stacks.

use crate::proto::driver;
use crate::proto::{Established, Incoming, LinkId, TransportKind};

use super::{Ev, Link, Sim};

impl Sim {
    pub(super) fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Deliver {
                link,
                to,
                off,
                data,
            } => {
                if !self.end_live(link, to) {
                    return;
                }
                let end = &self.links[link].ends[to];
                if off >= end.rx_cutoff {
                    return;
                }
                let keep = (end.rx_cutoff - off).min(data.len() as u64) as usize;
                let data = data.slice(..keep);
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                let refused = end.refused;
                self.links[link].ends[to].rx_bytes += data.len() as u64;
                self.bytes_carried += data.len() as u64;
                if let Some(buf) = self.links[link].ends[to].held.as_mut() {
                    buf.push(data.clone());
                }
                if refused || self.links[link].ends[to].held.is_some() {
                    self.ack_received(now, link, to);
                    return;
                }
                debug_assert!(epoch != 0, "data before the connection result");
                if self.cfg.kind == TransportKind::Ib {
                    let _ = self.nodes[n]
                        .stack
                        .handle_fragment(now, conn, path, epoch, &data);
                } else {
                    let mut frames = Vec::new();
                    let r = self.links[link].ends[to].parser.feed(data, &mut frames);
                    let st = &mut self.nodes[n].stack;
                    let _ = driver::deliver(st, now, conn, path, epoch, frames, r);
                    self.ack_received(now, link, to);
                }
                self.pump(n);
            }
            Ev::Acked { link, to, upto } => {
                if !self.end_live(link, to) || self.links[link].acks_lost[to] {
                    return;
                }
                let end = &self.links[link].ends[to];
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                self.nodes[n]
                    .stack
                    .handle_tx_acked(now, conn, path, epoch, upto);
                self.pump(n);
            }
            Ev::AckSent { link, to } => {
                if !self.end_live(link, to) {
                    return;
                }
                let end = &self.links[link].ends[to];
                let (n, conn, path, epoch) = (end.node, end.conn, end.path, end.epoch);
                self.nodes[n].stack.handle_ack_sent(conn, path, epoch);
                self.pump(n);
            }
            Ev::Arrive {
                from,
                from_inc,
                conn,
                path,
                epoch,
                to_addr,
            } => {
                let target = self.nodes.iter().position(|n| n.addr == to_addr);
                let lat = self.latency();
                let mut link = None;
                if !self.attempts.contains_key(&(from, conn, path, epoch)) {
                    // The initiator aborted the attempt before the acceptor's TCP completed
                    // it: the acceptor's connection is reset before anyone reads it.
                    return;
                }
                if let Some(t) = target {
                    let from_addr = self.nodes[from].addr;
                    let port = self.client_port(path);
                    let kind = self.cfg.kind;
                    let l = self.links.len();
                    let answer = self.nodes[t].stack.link_accepted(
                        now,
                        LinkId(l as u64),
                        to_addr,
                        from_addr,
                        kind,
                        port,
                    );
                    let t_inc = self.nodes[t].incarnation;
                    // TCP: the initiator's TCP acknowledges what arrives from now on, before
                    // its engine hears that the attempt completed.
                    let mut a = self.new_end(from, from_inc, conn, path, 0);
                    if kind == TransportKind::Tcp {
                        a.held = Some(Vec::new());
                    } else {
                        // IB: the active side learns of the connection (RTU) before any
                        // SEND of the passive side can reach it.
                        a.next_rx_time = now + lat;
                    }
                    let mut b = self.new_end(t, t_inc, conn, path, 0);
                    b.client_port = port;
                    match answer {
                        Incoming::Read {
                            conn: bconn,
                            path: bpath,
                            epoch: bepoch,
                        } => {
                            // A newer connection replaced the path's previous one, if any.
                            if let Some(&(ol, oe)) = self.by_path.get(&(t, bconn, bpath)) {
                                self.close_end(ol, oe);
                            }
                            (b.conn, b.path, b.epoch) = (bconn, bpath, bepoch);
                            self.by_path.insert((t, bconn, bpath), (l, 1));
                            link = Some(l);
                        }
                        // Held unread until the engine gives it a lane (Io::adopt).
                        Incoming::Hold => {
                            b.held = Some(Vec::new());
                            link = Some(l);
                        }
                        Incoming::Refuse(_) if kind == TransportKind::Tcp => {
                            // TCP completed the handshake before the engine refused: the
                            // initiator sees the connection up (its data acknowledged by the
                            // acceptor's TCP), then a reset.
                            b.refused = true;
                            link = Some(l);
                            let d = self.latency() + self.latency();
                            self.schedule(now + lat + d, Ev::Refuse { link: l });
                        }
                        Incoming::Refuse(_) => {}
                    }
                    if link.is_some() {
                        self.links.push(Link {
                            ends: [a, b],
                            acks_lost: [false; 2],
                        });
                        self.attempts.insert((from, conn, path, epoch), link);
                    }
                }
                // The initiator learns the outcome before any data from the acceptor arrives.
                self.schedule(
                    now + lat,
                    Ev::Result {
                        node: from,
                        inc: from_inc,
                        conn,
                        path,
                        epoch,
                        link,
                    },
                );
                if let Some(t) = target {
                    self.pump(t);
                }
            }
            Ev::Result {
                node,
                inc,
                conn,
                path,
                epoch,
                link,
            } => {
                if self.nodes[node].incarnation != inc {
                    if let Some(l) = link {
                        self.close_end(l, 0);
                    }
                    return;
                }
                if self.attempts.remove(&(node, conn, path, epoch)).is_none() {
                    // The engine dropped the attempt meanwhile: it drains (or ended).
                    return;
                }
                let st = &mut self.nodes[node].stack;
                match link {
                    Some(l) if self.links[l].ends[1].refused || !self.links[l].ends[0].open => {
                        // The acceptor refused it (a reset right after the handshake).
                        st.handle_connect_failed(now, conn, path, epoch);
                        self.links[l].ends[0].held = None;
                        if self.links[l].ends[0].open {
                            self.close_end(l, 0);
                        }
                    }
                    Some(l) => match st.link_connected(now, conn, path, epoch) {
                        Established::Read { epoch: ep } => {
                            if let Some(&(ol, oe)) = self.by_path.get(&(node, conn, path)) {
                                self.close_end(ol, oe);
                            }
                            self.by_path.insert((node, conn, path), (l, 0));
                            self.start_reading(l, 0, conn, path, ep);
                        }
                        Established::Drain => self.drain_attempt(l, epoch),
                        Established::Close => {
                            // Closed unread: what arrived is lost (the engine answers this only
                            // where the peer never writes).
                            self.links[l].ends[0].held = None;
                            self.close_end(l, 0);
                        }
                    },
                    None => st.handle_connect_failed(now, conn, path, epoch),
                }
                self.pump(node);
            }
            Ev::Aborted {
                node,
                inc,
                conn,
                path,
                epoch,
            } => {
                if self.nodes[node].incarnation == inc {
                    self.nodes[node]
                        .stack
                        .handle_disconnected(now, conn, path, epoch);
                    self.pump(node);
                }
            }
            Ev::Refuse { link } => {
                if self.links[link].ends[1].open {
                    self.close_end(link, 1);
                }
            }
            Ev::Closed { link, end } => {
                if self.links[link].ends[end].held.is_some() {
                    // Unread, so the end of stream is noticed once the connection is adopted.
                    self.links[link].ends[end].closing = false;
                    self.links[link].ends[end].peer_closed = true;
                    return;
                }
                if self.links[link].ends[end].refused {
                    self.links[link].ends[end].closing = false;
                    self.close_end(link, end);
                    return;
                }
                let live = self.end_live(link, end);
                let e = &mut self.links[link].ends[end];
                e.open = false;
                e.closing = false;
                if !live {
                    return;
                }
                let (n, conn, path, epoch) = (e.node, e.conn, e.path, e.epoch);
                if self.by_path.get(&(n, conn, path)) == Some(&(link, end)) {
                    self.by_path.remove(&(n, conn, path));
                }
                self.notify_closed(link, 1 - end);
                if epoch != 0 {
                    self.nodes[n]
                        .stack
                        .handle_disconnected(now, conn, path, epoch);
                    self.pump(n);
                }
            }
        }
    }

    /// End `to` of `link` received everything counted in its `rx_bytes`: its TCP
    /// acknowledges that to the other end one latency later, unless the link loses
    /// acknowledgements that way.
    fn ack_received(&mut self, now: crate::time::Instant, link: usize, to: usize) {
        let upto = self.links[link].ends[to].rx_bytes;
        if !self.links[link].acks_lost[1 - to] {
            let lat = self.latency();
            self.schedule(
                now + lat,
                Ev::Acked {
                    link,
                    to: 1 - to,
                    upto,
                },
            );
        }
    }
}
