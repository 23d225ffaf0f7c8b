//! What the node tells about itself on its control socket: the info snapshot (cut to fit a
//! frame, filtered for unprivileged peers), its counters and its transports.

use std::net::SocketAddr;

use super::{Ctx, Peer, INFO_LIST_MAX};
use crate::ctl::{InfoSnapshot, Reply, MAX_JSON};
use crate::info::{QueuedMsgInfo, TransportKind};
use crate::node::Node;

/// The info snapshot for `peer`: everything for root and the owner; for another uid, only the
/// sockets (and their queue entries) its uid opened through this node. The lists are cut so
/// that the reply fits one frame.
pub(super) fn info(ctx: &Ctx, node: &Node, peer: Peer) -> Reply {
    let mut snap = snapshot(node);
    if !peer.privileged {
        let mine: Vec<SocketAddr> = ctx
            .sockets
            .as_ref()
            .map_or_else(Vec::new, |s| s.bound_by(peer.uid));
        let has =
            |ip: std::net::IpAddr, port: u16| mine.iter().any(|a| a.ip() == ip && a.port() == port);
        snap.sockets
            .retain(|s| s.bound.is_some_and(|b| has(b.ip(), b.port())));
        for q in [&mut snap.send, &mut snap.retrans, &mut snap.recv] {
            q.retain(|m| has(m.laddr, m.lport));
        }
    }
    fit(snap)
}

/// Cuts the snapshot's lists until its reply fits [`MAX_JSON`].
fn fit(mut snap: InfoSnapshot) -> Reply {
    fn cut<T>(v: &mut Vec<T>, limit: usize, omitted: &mut u64) {
        if v.len() > limit {
            *omitted += (v.len() - limit) as u64;
            v.truncate(limit);
        }
    }
    /// [`cut`] for a message queue, also adding up the payload bytes it leaves out.
    fn cut_queue(v: &mut Vec<QueuedMsgInfo>, limit: usize, omitted: &mut u64, bytes: &mut u64) {
        *bytes += v.iter().skip(limit).map(|m| u64::from(m.len)).sum::<u64>();
        cut(v, limit, omitted);
    }
    let mut limit = INFO_LIST_MAX;
    loop {
        let o = &mut snap.omitted;
        cut(&mut snap.connections, limit, &mut o.connections);
        cut(&mut snap.sockets, limit, &mut o.sockets);
        cut_queue(&mut snap.send, limit, &mut o.send, &mut o.send_bytes);
        cut_queue(
            &mut snap.retrans,
            limit,
            &mut o.retrans,
            &mut o.retrans_bytes,
        );
        cut_queue(&mut snap.recv, limit, &mut o.recv, &mut o.recv_bytes);
        cut(&mut snap.tcp, limit, &mut o.tcp);
        let reply = Reply::Info(Box::new(snap));
        match serde_json::to_vec(&reply) {
            Ok(j) if j.len() <= MAX_JSON => return reply,
            Ok(_) if limit > 0 => {
                let Reply::Info(s) = reply else {
                    return Reply::error(libc::EIO, "snapshot lost");
                };
                snap = *s;
                limit /= 4;
            }
            Ok(j) => {
                return Reply::error(
                    libc::EMSGSIZE,
                    format!(
                        "the info snapshot does not fit a control frame ({} bytes)",
                        j.len()
                    ),
                )
            }
            Err(e) => return Reply::error(libc::EIO, format!("encoding the snapshot: {e}")),
        }
    }
}

pub(super) fn counters(node: &Node) -> Vec<(String, u64)> {
    node.stats()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

/// The transports the node runs ("tcp", "ib").
pub(super) fn transports(node: &Node) -> Vec<String> {
    [
        (node.tcp_running(), TransportKind::Tcp),
        (node.ib_running(), TransportKind::Ib),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, k)| k.name().to_string())
    .collect()
}

/// The node's state for `rds-info` (every socket and queue entry, uncut).
pub fn snapshot(node: &Node) -> InfoSnapshot {
    InfoSnapshot {
        connections: node.connections(),
        sockets: node.sockets(),
        send: node.send_queue(),
        retrans: node.retrans_queue(),
        recv: node.recv_queue(),
        tcp: node.tcp_sockets(),
        counters: counters(node),
        transports: transports(node),
        ib_unavailable: node.ib_unavailable(),
        ib_qps: node.ib_qps(),
        omitted: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_queue_keeps_count_of_its_bytes() {
        let msg = |len: u32| QueuedMsgInfo {
            seq: 1,
            len,
            laddr: [127, 0, 0, 1].into(),
            faddr: [127, 0, 0, 2].into(),
            lport: 1,
            fport: 2,
            path: 0,
        };
        let snap = InfoSnapshot {
            send: (0..INFO_LIST_MAX as u32 + 7).map(msg).collect(),
            recv: vec![msg(5)],
            ..Default::default()
        };
        let total: u64 = snap.send.iter().map(|m| u64::from(m.len)).sum();
        let Reply::Info(s) = fit(snap) else {
            panic!("no snapshot")
        };
        let listed: u64 = s.send.iter().map(|m| u64::from(m.len)).sum();
        assert!(s.send.len() <= INFO_LIST_MAX);
        assert_eq!(
            s.send.len() as u64 + s.omitted.send,
            INFO_LIST_MAX as u64 + 7
        );
        assert!(s.omitted.send_bytes > 0);
        assert_eq!(listed + s.omitted.send_bytes, total);
        assert_eq!(
            (s.recv.len(), s.omitted.recv, s.omitted.recv_bytes),
            (1, 0, 0)
        );
    }
}
