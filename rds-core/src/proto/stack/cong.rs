//! Congestion maps: our ports' state as receive queues fill and drain, the peers' maps as
//! senders see them, and congestion monitors.

use std::net::{IpAddr, SocketAddr};

use crate::stats::Counter;
use crate::wire::monitor_mask;

use crate::proto::{canonical, ConnId, SockId, TransportKind};

use super::Stack;

impl Stack {
    /// Whether the destination port of `dest` is congested as seen from `sock`.
    pub fn dest_congested(&self, sock: SockId, dest: SocketAddr) -> bool {
        let Some(bound) = self.socks.get(&sock).and_then(|s| s.bound) else {
            return false;
        };
        let dip = canonical(dest.ip());
        if let Some(l) = self.locals.get(&dip) {
            return l.cong.test(dest.port());
        }
        let kind = self.socks[&sock].transport.unwrap_or(TransportKind::Tcp);
        self.find_conn(bound.ip(), dip, kind)
            .is_some_and(|c| self.conns[c.0 as usize].fcong.test(dest.port()))
    }

    pub(super) fn peer_congested(&self, cid: ConnId, port: u16) -> bool {
        let c = &self.conns[cid.0 as usize];
        if c.kind == TransportKind::Loopback {
            self.locals.get(&c.faddr).is_some_and(|l| l.cong.test(port))
        } else {
            c.fcong.test(port)
        }
    }

    /// `rds_recv_rcvbuf_delta`: a socket is congested above its receive buffer and uncongested
    /// again below half of it.
    pub(super) fn rcvbuf_delta(&mut self, sid: SockId, delta: i64) {
        let Some(s) = self.socks.get_mut(&sid) else {
            return;
        };
        if delta == 0 {
            return;
        }
        if delta > 0 {
            s.rcv_bytes += delta as usize;
            self.stats.add(Counter::RecvBytesAddedToSock, delta as u64);
        } else {
            s.rcv_bytes = s.rcv_bytes.saturating_sub((-delta) as usize);
            self.stats
                .add(Counter::RecvBytesFreedFromSock, (-delta) as u64);
        }
        let Some(b) = s.bound else { return };
        let now_congested = s.rcv_bytes > s.rcvbuf;
        if !s.congested && now_congested {
            s.congested = true;
            self.local_cong_changed(b.ip(), b.port(), true);
        } else if s.congested && s.rcv_bytes < s.rcvbuf / 2 {
            s.congested = false;
            self.local_cong_changed(b.ip(), b.port(), false);
        }
    }

    /// A port of a local address changed congestion state: send our map to every peer of the
    /// address, and tell local monitors (loopback senders read the map directly).
    pub(super) fn local_cong_changed(&mut self, ip: IpAddr, port: u16, congested: bool) {
        let Some(l) = self.locals.get_mut(&ip) else {
            return;
        };
        if congested {
            l.cong.set(port);
        } else {
            l.cong.clear(port);
        }
        for ci in self.conns.ids() {
            let c = &mut self.conns[ci];
            if c.laddr != ip || c.kind == TransportKind::Loopback {
                continue;
            }
            c.map_queued = true;
            if let Some(lane) = c.map_lane() {
                self.want_transmit(ConnId(ci as u32), lane);
            }
        }
        self.cong_map_updated(if congested { 0 } else { monitor_mask(port) });
    }

    /// `rds_cong_map_updated`: notify congestion monitors whose ports were uncongested and
    /// wake blocked senders.
    pub(super) fn cong_map_updated(&mut self, uncongested: u64) {
        if uncongested != 0 {
            for (&sid, s) in &mut self.socks {
                if s.cong_monitor && s.cong_mask & uncongested != 0 {
                    s.cong_notify |= s.cong_mask & uncongested;
                    s.cong_mask &= !uncongested;
                    self.wakes.insert(sid);
                }
            }
        }
        self.cong_changed = true;
    }
}
