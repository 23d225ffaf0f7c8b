//! What the ping tests share: counting the pings a node received.

use rds_core::stats::Counter;
use rds_core::Node;

/// The pings `node` received (`recv_ping`), less the probe that opens every connection a
/// smaller peer made to it: lane 0's handshake probe and the probe of each other lane (a
/// peer answers it on that lane and so shows it took the connection; see rds(7)). The
/// peer's connections are counted by how often each of their lanes came up here.
pub fn pings_counted(node: &Node) -> u64 {
    let probes: u64 = node
        .connections()
        .iter()
        .filter(|c| c.faddr < c.laddr)
        .flat_map(|c| c.paths.iter().map(|p| p.ups))
        .sum();
    node.counter(Counter::RecvPing) - probes
}
