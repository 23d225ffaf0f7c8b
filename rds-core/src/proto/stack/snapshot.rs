//! Snapshots of the stack for `rds-info`: connections, sockets and queued messages.

use crate::info::{ConnInfo, PathInfo, QueuedMsgInfo, SockInfo};
use crate::proto::conn::OutMsg;
use crate::proto::reply_lane::ReplyLane;
use crate::proto::{ConnId, SockId};

use super::Stack;

impl Stack {
    /// Every connection.
    pub fn conn_infos(&self) -> Vec<ConnInfo> {
        self.conns
            .iter()
            .map(|(i, c)| ConnInfo {
                id: ConnId(i as u32),
                laddr: c.laddr,
                faddr: c.faddr,
                kind: c.kind,
                npaths: c.npaths,
                peer_gen: c.peer_gen,
                paths: c
                    .paths
                    .iter()
                    .enumerate()
                    .map(|(j, p)| PathInfo {
                        index: j,
                        state: p.state,
                        next_tx_seq: p.next_tx_seq,
                        next_rx_seq: p.next_rx_seq,
                        send_queued: p.send_q.len(),
                        retrans_queued: p.retrans.len(),
                        sending: p.tx_pending,
                        ups: p.ups,
                        draining: p.drain_epoch.is_some(),
                        reconnect_pending: p.reconnect_at.is_some(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every socket.
    pub fn sock_infos(&self) -> Vec<SockInfo> {
        self.socks
            .iter()
            .map(|(&id, s)| SockInfo {
                id,
                bound: s.bound,
                connected: s.connected,
                sndbuf: s.sndbuf,
                rcvbuf: s.rcvbuf,
                snd_bytes: s.snd_bytes,
                rcv_bytes: s.rcv_bytes,
                congested: s.congested,
                transport: s.transport,
            })
            .collect()
    }

    /// Messages in send queues (`retrans = false`) or retransmit queues (`true`).
    pub fn queued_msgs(&self, retrans: bool) -> Vec<QueuedMsgInfo> {
        self.msgs_where(retrans, |_| true)
    }

    /// Messages kept only to be resent (in either queue): the peer's TCP acknowledged them on
    /// a connection the peer had not answered on yet ([`Stack::handle_tx_acked`]); their
    /// sockets' send buffers no longer count them.
    pub fn held_msgs(&self) -> Vec<QueuedMsgInfo> {
        let mut v = self.msgs_where(false, |m| m.sock_freed);
        v.extend(self.msgs_where(true, |m| m.sock_freed));
        v
    }

    fn msgs_where(&self, retrans: bool, keep: impl Fn(&OutMsg) -> bool) -> Vec<QueuedMsgInfo> {
        let mut v = Vec::new();
        for c in self.conns.values() {
            for (pi, p) in c.paths.iter().enumerate() {
                let q = if retrans { &p.retrans } else { &p.send_q };
                v.extend(q.iter().filter(|m| keep(m)).map(|m| QueuedMsgInfo {
                    seq: m.seq,
                    len: m.hdr.len,
                    laddr: c.laddr,
                    faddr: c.faddr,
                    lport: m.hdr.sport,
                    fport: m.hdr.dport,
                    path: pi,
                }));
            }
        }
        v
    }

    /// The peers socket `sock` remembers for its answers ([`crate::proto::reply_lane`]), in slot
    /// order.
    pub fn reply_lanes(&self, sock: SockId) -> Vec<ReplyLane> {
        self.socks
            .get(&sock)
            .map_or(Vec::new(), |s| s.reply_lanes.entries().collect())
    }

    /// Messages waiting in socket receive queues.
    pub fn recv_queued_msgs(&self) -> Vec<QueuedMsgInfo> {
        let mut v = Vec::new();
        for s in self.socks.values() {
            let Some(b) = s.bound else { continue };
            v.extend(s.rcv_q.iter().map(|m| QueuedMsgInfo {
                seq: m.seq,
                len: m.payload.len() as u32,
                laddr: b.ip(),
                faddr: m.from.ip(),
                lport: b.port(),
                fport: m.from.port(),
                path: 0,
            }));
        }
        v
    }
}
