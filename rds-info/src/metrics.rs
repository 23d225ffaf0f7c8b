//! RDS metrics for monitoring systems: what `rds-info --format prometheus` and `rds-ctrl stats
//! --format prometheus` export, gathered from a node of ours (its info snapshot) or from the
//! kernel's RDS (its `RDS_INFO_*` tables) into one [`Metrics`], and written in the Prometheus
//! text format ([`crate::prometheus`]).
//!
//! Every sample has a `node` label: the node's name, `kernel` for the kernel's RDS. The
//! families (rds-info(1) lists them too):
//!
//! - `rds_<counter>_total` (counter): each counter under the kernel's name
//!   ([`rds_core::stats`]), in the kernel's order;
//! - `rds_connections{transport,state}` (gauge): connections by transport and by the state of
//!   their first path, every state of every transport the node runs or has a connection on;
//! - `rds_transport_running{transport}` (gauge, a node of ours): 1 when the node runs `tcp`,
//!   `infiniband`, else 0;
//! - `rds_sockets`, `rds_sockets_congested` (gauges; congestion from a node of ours only);
//! - `rds_queued_messages{queue}`, `rds_queued_bytes{queue}` (gauges): the send, retransmit
//!   and receive queues;
//! - `rds_node_info{version,rds_protocol}` (gauge, 1; a node of ours).

use std::collections::BTreeSet;

use rds_core::ctl::client::NodeHello;
use rds_core::ctl::InfoSnapshot;
use rds_core::info::PathState;
use rds_core::kernel::tables::{
    self as kinfo, KernelInfo, CONN_CONNECTED, CONN_CONNECTING, CONN_ERROR,
};

use crate::format::Category;
use crate::prometheus::{self, Family, Kind};

/// The `node` label of the kernel's RDS.
pub const KERNEL_NODE: &str = "kernel";

/// Our path states as `state` label values, in the kernel's numbering (`RDS_CONN_*`).
const NODE_STATES: [&str; 6] = [
    "down",
    "connecting",
    "disconnecting",
    "up",
    "resetting",
    "error",
];

/// The states the kernel's `RDS_INFO_CONNECTIONS` flags tell apart (`down`: none of the others).
const KERNEL_STATES: [&str; 4] = ["down", "connecting", "up", "error"];

/// The queues, as `queue` label values: send, retransmit, receive.
pub const QUEUES: [&str; 3] = ["send", "retransmit", "receive"];

/// Which families to gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// `-c`: the counters.
    pub counters: bool,
    /// `-n`: connections and transports.
    pub connections: bool,
    /// `-k`: sockets.
    pub sockets: bool,
    /// `-s`, `-t`, `-r`: the send, retransmit and receive queues.
    pub queues: [bool; 3],
    /// The node's identity (`rds_node_info`): only in a full export.
    pub node_info: bool,
}

impl Pick {
    /// Everything.
    pub const ALL: Pick = Pick {
        counters: true,
        connections: true,
        sockets: true,
        queues: [true; 3],
        node_info: true,
    };

    /// The families of rds-info's selected categories; everything when `any_selected` is
    /// false (no category option). `-I`, `-T` and `-p` add nothing.
    pub fn of(categories: &[Category], any_selected: bool) -> Pick {
        if !any_selected {
            return Pick::ALL;
        }
        let has = |c| categories.contains(&c);
        Pick {
            counters: has(Category::Counters),
            connections: has(Category::Connections),
            sockets: has(Category::Sockets),
            queues: [
                has(Category::Send),
                has(Category::Retrans),
                has(Category::Recv),
            ],
            node_info: false,
        }
    }
}

/// A queue's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Queue {
    /// Messages.
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// What a node (or the kernel) tells a monitor; `None` where it was not gathered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metrics {
    /// The `node` label.
    pub node: String,
    /// Counters, kernel names and order.
    pub counters: Option<Vec<(String, u64)>>,
    /// `(transport, state, connections)` for every state of every transport.
    pub connections: Option<Vec<(String, &'static str, u64)>>,
    /// `(transport, running)`.
    pub transports: Option<Vec<(&'static str, bool)>>,
    /// Bound sockets.
    pub sockets: Option<u64>,
    /// Congested sockets.
    pub congested: Option<u64>,
    /// The send, retransmit and receive queues ([`QUEUES`]).
    pub queues: [Option<Queue>; 3],
    /// `(rds-tools version, RDS protocol version)`.
    pub version: Option<(String, String)>,
}

/// Every state of every transport, counted from `(transport, state)` pairs.
fn grid(
    transports: BTreeSet<String>,
    states: &[&'static str],
    conns: &[(String, &'static str)],
) -> Vec<(String, &'static str, u64)> {
    let mut rows = Vec::new();
    for t in transports {
        for &s in states {
            let n = conns.iter().filter(|(ct, cs)| *ct == t && *cs == s).count();
            rows.push((t.clone(), s, n as u64));
        }
    }
    rows
}

impl Metrics {
    /// A node of ours, from its hello and info snapshot (the lists of a cut snapshot are
    /// counted with what it left out).
    pub fn of_node(hello: &NodeHello, snap: &InfoSnapshot, pick: Pick) -> Metrics {
        let mut m = Metrics {
            node: hello.node.clone(),
            ..Metrics::default()
        };
        if pick.counters {
            m.counters = Some(snap.counters.clone());
        }
        if pick.connections {
            let conns: Vec<(String, &'static str)> = snap
                .connections
                .iter()
                .map(|c| {
                    let state = c.paths.first().map_or(PathState::Down, |p| p.state);
                    (c.kind.name().to_string(), NODE_STATES[state as usize])
                })
                .collect();
            let mut kinds: BTreeSet<String> = snap.transports.iter().cloned().collect();
            kinds.extend(conns.iter().map(|c| c.0.clone()));
            m.connections = Some(grid(kinds, &NODE_STATES, &conns));
            let runs = |t: &str| snap.transports.iter().any(|x| x == t);
            m.transports = Some(vec![
                ("infiniband", runs("infiniband")),
                ("tcp", runs("tcp")),
            ]);
        }
        if pick.sockets {
            let bound = snap.sockets.iter().filter(|s| s.bound.is_some()).count() as u64;
            m.sockets = Some(bound + snap.omitted.sockets);
            m.congested = Some(snap.sockets.iter().filter(|s| s.congested).count() as u64);
        }
        let o = &snap.omitted;
        let lists = [
            (&snap.send, o.send, o.send_bytes),
            (&snap.retrans, o.retrans, o.retrans_bytes),
            (&snap.recv, o.recv, o.recv_bytes),
        ];
        for (i, (list, more, more_bytes)) in lists.into_iter().enumerate() {
            if pick.queues[i] {
                m.queues[i] = Some(Queue {
                    messages: list.len() as u64 + more,
                    bytes: list.iter().map(|q| u64::from(q.len)).sum::<u64>() + more_bytes,
                });
            }
        }
        if pick.node_info {
            m.version = Some((hello.version.clone(), hello.rds_protocol.clone()));
        }
        m
    }

    /// The kernel's RDS, from its `RDS_INFO_*` tables (IPv6 ones where the kernel has them).
    /// A table the kernel refuses is left out, with a line saying so in the second value
    /// (rds-info's message, without its `rds-info: ` prefix).
    pub fn of_kernel(k: &KernelInfo, pick: Pick) -> (Metrics, Vec<String>) {
        let mut m = Metrics {
            node: KERNEL_NODE.to_string(),
            ..Metrics::default()
        };
        let mut errors = Vec::new();
        let mut fail = |what: &str, e: std::io::Error| {
            errors.push(format!(
                "Unable to get statistics to process the \"{what}\" info request: {e}"
            ));
        };
        if pick.counters {
            match k.counters() {
                Ok(c) => m.counters = Some(c),
                Err(e) => fail("statistic counters", e),
            }
        }
        if pick.connections {
            match k.connections(true) {
                Ok(rows) => {
                    let conns: Vec<(String, &'static str)> = rows
                        .iter()
                        .map(|c| (c.transport.clone(), kernel_state(c.flags)))
                        .collect();
                    let mut kinds: BTreeSet<String> = conns.iter().map(|c| c.0.clone()).collect();
                    // Transports whose module is loaded answer their own table.
                    if k.tcp(false).is_ok() {
                        kinds.insert("tcp".into());
                    }
                    if k.ib(false).is_ok() {
                        kinds.insert("infiniband".into());
                    }
                    m.connections = Some(grid(kinds, &KERNEL_STATES, &conns));
                }
                Err(e) => fail("connections", e),
            }
        }
        if pick.sockets {
            match k.sockets(true) {
                Ok(rows) => {
                    m.sockets = Some(rows.iter().filter(|s| s.bound.port() != 0).count() as u64)
                }
                Err(e) => fail("sockets", e),
            }
        }
        let opts = [
            (kinfo::SEND_MESSAGES, "send queue messages"),
            (kinfo::RETRANS_MESSAGES, "retransmit queue messages"),
            (kinfo::RECV_MESSAGES, "recv queue messages"),
        ];
        for (i, (opt, what)) in opts.into_iter().enumerate() {
            if !pick.queues[i] {
                continue;
            }
            match k.messages(opt, true) {
                Ok(rows) => {
                    m.queues[i] = Some(Queue {
                        messages: rows.len() as u64,
                        bytes: rows.iter().map(|r| u64::from(r.len)).sum(),
                    })
                }
                Err(e) => fail(what, e),
            }
        }
        (m, errors)
    }

    /// The metric families, in the order of the module documentation.
    pub fn families(&self) -> Vec<Family> {
        let node = self.node.as_str();
        let mut out = Vec::new();
        for (name, v) in self.counters.iter().flatten() {
            let help = rds_core::stats::describe(name).map_or_else(
                || format!("The kernel's RDS counter {name}."),
                str::to_string,
            );
            let mut f = Family::new(
                prometheus::metric_name(&format!("rds_{name}_total")),
                Kind::Counter,
                help,
            );
            f.sample(&[("node", node)], *v);
            out.push(f);
        }
        if let Some(rows) = &self.connections {
            let mut f = Family::new(
                "rds_connections",
                Kind::Gauge,
                "RDS connections by transport and by the state of their first path (the \
                 kernel's RDS tells up, connecting, error and down for any other state).",
            );
            for (t, s, n) in rows {
                f.sample(&[("node", node), ("transport", t), ("state", s)], *n);
            }
            out.push(f);
        }
        if let Some(rows) = &self.transports {
            let mut f = Family::new(
                "rds_transport_running",
                Kind::Gauge,
                "Whether the node runs the transport (1) or not (0).",
            );
            for (t, on) in rows {
                f.sample(&[("node", node), ("transport", t)], u64::from(*on));
            }
            out.push(f);
        }
        let mut gauge = |name: &str, help: &str, v: Option<u64>| {
            if let Some(v) = v {
                let mut f = Family::new(name, Kind::Gauge, help);
                f.sample(&[("node", node)], v);
                out.push(f);
            }
        };
        gauge(
            "rds_sockets",
            "RDS sockets bound to an address.",
            self.sockets,
        );
        gauge(
            "rds_sockets_congested",
            "RDS sockets whose port is marked congested (more bytes wait in their receive \
             queue than their receive buffer holds).",
            self.congested,
        );
        for (name, help, bytes) in [
            (
                "rds_queued_messages",
                "Messages in the send queues (not sent yet), the retransmit queues (sent, not \
                 acknowledged yet) and the sockets' receive queues (not read yet).",
                false,
            ),
            (
                "rds_queued_bytes",
                "Payload bytes of the messages in the send, retransmit and receive queues.",
                true,
            ),
        ] {
            let mut f = Family::new(name, Kind::Gauge, help);
            for (q, v) in QUEUES.iter().zip(&self.queues) {
                if let Some(v) = v {
                    let n = if bytes { v.bytes } else { v.messages };
                    f.sample(&[("node", node), ("queue", q)], n);
                }
            }
            if !f.samples.is_empty() {
                out.push(f);
            }
        }
        if let Some((version, proto)) = &self.version {
            let mut f = Family::new(
                "rds_node_info",
                Kind::Gauge,
                "The node's rds-tools version and RDS protocol version (always 1).",
            );
            f.sample(
                &[
                    ("node", node),
                    ("version", version),
                    ("rds_protocol", proto),
                ],
                1,
            );
            out.push(f);
        }
        out
    }

    /// The exposition text (Prometheus text format 0.0.4).
    pub fn exposition(&self) -> String {
        prometheus::render(&self.families())
    }
}

/// A kernel connection's state from its `RDS_INFO_CONNECTIONS` flags.
fn kernel_state(flags: u8) -> &'static str {
    if flags & CONN_CONNECTED != 0 {
        "up"
    } else if flags & CONN_CONNECTING != 0 {
        "connecting"
    } else if flags & CONN_ERROR != 0 {
        "error"
    } else {
        "down"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rds_core::info::{ConnInfo, PathInfo, QueuedMsgInfo, SockInfo};

    fn path(state: PathState, send: usize) -> PathInfo {
        PathInfo {
            index: 0,
            state,
            next_tx_seq: 1,
            next_rx_seq: 1,
            send_queued: send,
            retrans_queued: 0,
            sending: false,
            ups: 1,
            draining: false,
            reconnect_pending: false,
        }
    }

    fn conn(json: serde_json::Value) -> ConnInfo {
        serde_json::from_value(json).unwrap()
    }

    fn snapshot() -> InfoSnapshot {
        let c = |id: u32, kind: &str, state: PathState| {
            let mut c = conn(serde_json::json!({
                "id": id, "laddr": "10.0.0.1", "faddr": format!("10.0.0.{}", id + 2),
                "kind": kind, "npaths": 1, "peer_gen": 0, "paths": [],
            }));
            c.paths.push(path(state, 0));
            c
        };
        let sock = |id: u32, port: Option<u16>, congested: bool| -> SockInfo {
            serde_json::from_value(serde_json::json!({
                "id": id,
                "bound": port.map(|p| format!("10.0.0.1:{p}")),
                "connected": null, "sndbuf": 1, "rcvbuf": 1, "snd_bytes": 0, "rcv_bytes": 0,
                "congested": congested, "transport": null,
            }))
            .unwrap()
        };
        let msg = |len: u32| QueuedMsgInfo {
            seq: 0,
            len,
            laddr: "10.0.0.1".parse().unwrap(),
            faddr: "10.0.0.3".parse().unwrap(),
            lport: 1,
            fport: 2,
            path: 0,
        };
        let mut no_paths = c(3, "tcp", PathState::Up);
        no_paths.paths.clear();
        let mut s = InfoSnapshot {
            connections: vec![
                c(0, "tcp", PathState::Up),
                c(1, "tcp", PathState::Up),
                c(2, "tcp", PathState::Connecting),
                no_paths,
                c(4, "loopback", PathState::Up),
            ],
            sockets: vec![
                sock(1, Some(4000), false),
                sock(2, Some(4001), true),
                sock(3, None, false),
            ],
            send: vec![msg(10), msg(20)],
            retrans: vec![msg(5)],
            recv: vec![],
            counters: vec![
                ("conn_reset".into(), 3),
                ("recv_ping".into(), 12),
                ("tcp_sndbuf_full".into(), 0),
                ("hb-ping".into(), 9),
            ],
            transports: vec!["tcp".into()],
            ..Default::default()
        };
        s.omitted.send = 1;
        s.omitted.send_bytes = 70;
        s
    }

    fn hello(name: &str) -> NodeHello {
        NodeHello {
            node: name.into(),
            version: "0.1.0".into(),
            rds_protocol: "3.1".into(),
            pid: 1,
            owner_uid: 0,
            addrs: vec![],
        }
    }

    #[test]
    fn a_known_node_exactly() {
        let m = Metrics::of_node(&hello("n\"1\\\n"), &snapshot(), Pick::ALL);
        let n = "node=\"n\\\"1\\\\\\n\"";
        let mut want = String::new();
        for (name, v, help) in [
            (
                "conn_reset",
                3,
                "A path was reset (went down and its state was recycled).",
            ),
            ("recv_ping", 12, "A ping was received and answered."),
            (
                "tcp_sndbuf_full",
                0,
                "A write found the TCP send buffer full.",
            ),
        ] {
            want += &format!(
                "# HELP rds_{name}_total {help}\n# TYPE rds_{name}_total counter\n\
                 rds_{name}_total{{{n}}} {v}\n"
            );
        }
        want += &format!(
            "# HELP rds_hb_ping_total The kernel's RDS counter hb-ping.\n\
             # TYPE rds_hb_ping_total counter\nrds_hb_ping_total{{{n}}} 9\n"
        );
        want += "# HELP rds_connections RDS connections by transport and by the state of their \
                 first path (the kernel's RDS tells up, connecting, error and down for any other \
                 state).\n# TYPE rds_connections gauge\n";
        for (t, counts) in [
            ("loopback", [0, 0, 0, 1, 0, 0]),
            ("tcp", [1, 1, 0, 2, 0, 0]),
        ] {
            for (s, c) in NODE_STATES.iter().zip(counts) {
                want += &format!("rds_connections{{{n},transport=\"{t}\",state=\"{s}\"}} {c}\n");
            }
        }
        want += &format!(
            "# HELP rds_transport_running Whether the node runs the transport (1) or not (0).\n\
             # TYPE rds_transport_running gauge\n\
             rds_transport_running{{{n},transport=\"infiniband\"}} 0\n\
             rds_transport_running{{{n},transport=\"tcp\"}} 1\n\
             # HELP rds_sockets RDS sockets bound to an address.\n\
             # TYPE rds_sockets gauge\nrds_sockets{{{n}}} 2\n\
             # HELP rds_sockets_congested RDS sockets whose port is marked congested (more \
             bytes wait in their receive queue than their receive buffer holds).\n\
             # TYPE rds_sockets_congested gauge\nrds_sockets_congested{{{n}}} 1\n\
             # HELP rds_queued_messages Messages in the send queues (not sent yet), the \
             retransmit queues (sent, not acknowledged yet) and the sockets' receive queues \
             (not read yet).\n# TYPE rds_queued_messages gauge\n\
             rds_queued_messages{{{n},queue=\"send\"}} 3\n\
             rds_queued_messages{{{n},queue=\"retransmit\"}} 1\n\
             rds_queued_messages{{{n},queue=\"receive\"}} 0\n\
             # HELP rds_queued_bytes Payload bytes of the messages in the send, retransmit and \
             receive queues.\n# TYPE rds_queued_bytes gauge\n\
             rds_queued_bytes{{{n},queue=\"send\"}} 100\n\
             rds_queued_bytes{{{n},queue=\"retransmit\"}} 5\n\
             rds_queued_bytes{{{n},queue=\"receive\"}} 0\n\
             # HELP rds_node_info The node's rds-tools version and RDS protocol version \
             (always 1).\n# TYPE rds_node_info gauge\n\
             rds_node_info{{{n},version=\"0.1.0\",rds_protocol=\"3.1\"}} 1\n"
        );
        let got = m.exposition();
        assert_eq!(got, want, "got:\n{got}");
    }

    #[test]
    fn categories_pick_families() {
        let s = snapshot();
        let only = |cats: &[Category]| {
            Metrics::of_node(&hello("a"), &s, Pick::of(cats, true))
                .families()
                .into_iter()
                .map(|f| f.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            only(&[Category::Counters]),
            [
                "rds_conn_reset_total",
                "rds_recv_ping_total",
                "rds_tcp_sndbuf_full_total",
                "rds_hb_ping_total"
            ]
        );
        assert_eq!(
            only(&[Category::Connections, Category::Sockets]),
            [
                "rds_connections",
                "rds_transport_running",
                "rds_sockets",
                "rds_sockets_congested"
            ]
        );
        let m = Metrics::of_node(&hello("a"), &s, Pick::of(&[Category::Retrans], true));
        assert_eq!(
            m.exposition()
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            [
                "rds_queued_messages{node=\"a\",queue=\"retransmit\"} 1",
                "rds_queued_bytes{node=\"a\",queue=\"retransmit\"} 5"
            ]
        );
        assert!(only(&[Category::Ib, Category::Tcp, Category::Paths]).is_empty());
        assert_eq!(Pick::of(&[], false), Pick::ALL);
    }

    #[test]
    fn kernel_flags() {
        assert_eq!(kernel_state(0), "down");
        assert_eq!(kernel_state(kinfo::CONN_SENDING | CONN_CONNECTED), "up");
        assert_eq!(kernel_state(CONN_CONNECTING), "connecting");
        assert_eq!(kernel_state(CONN_ERROR), "error");
    }
}
