//! What the node tells about itself on its control socket: the info snapshot (cut to fit a
//! frame, filtered for unprivileged peers), its counters and its transports.

use std::net::SocketAddr;

use super::{Ctx, Peer, INFO_LIST_MAX};
use crate::ctl::{InfoSnapshot, Reply, MAX_JSON};
use crate::info::TransportKind;
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
    let mut limit = INFO_LIST_MAX;
    loop {
        let o = &mut snap.omitted;
        cut(&mut snap.connections, limit, &mut o.connections);
        cut(&mut snap.sockets, limit, &mut o.sockets);
        cut(&mut snap.send, limit, &mut o.send);
        cut(&mut snap.retrans, limit, &mut o.retrans);
        cut(&mut snap.recv, limit, &mut o.recv);
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
