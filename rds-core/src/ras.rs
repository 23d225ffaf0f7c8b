//! The node's RAS event ring (AIX `rdsctrl ras`): a bounded, in-memory record of what
//! happened to the node's connections (up, down, appeared, gone), of resets, drops and
//! errors, each with a wall-clock timestamp, kept at the level `net.rds.ras_level` asks for.
//!
//! Events come from comparing two [`Sample`]s of the node (its paths and its counters) taken
//! a moment apart ([`diff`]); the node's control server takes the samples
//! (`crate::node::admin`) and serves the ring ([`crate::ctl::Request::RasExtract`]). The ring
//! holds at most [`RING_CAP`] events: a new event pushes the oldest out, and the count of
//! events pushed out is kept.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::info::{ConnInfo, PathState};

/// Most events the ring holds.
pub const RING_CAP: usize = 1024;

/// The level names, in order: level `n` is `LEVELS[n - 1]`.
pub const LEVELS: [&str; 4] = ["minimal", "normal", "detail", "maximal"];

/// The level a node starts with (`normal`).
pub const DEFAULT_LEVEL: u8 = crate::tunables::DEFAULT_RAS_LEVEL;

/// The name of level `n` (1..=4); `None` outside.
pub fn level_name(n: u8) -> Option<&'static str> {
    LEVELS.get(usize::from(n).checked_sub(1)?).copied()
}

/// The level called `name` (1..=4).
pub fn level_by_name(name: &str) -> Option<u8> {
    LEVELS
        .iter()
        .position(|l| l.eq_ignore_ascii_case(name))
        .map(|i| i as u8 + 1)
}

/// A time in ns since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
pub fn utc_ms(wall_ns: u64) -> String {
    let secs = wall_ns / 1_000_000_000;
    let ms = wall_ns / 1_000_000 % 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RasKind {
    /// A path came up.
    Up,
    /// A path went down.
    Down,
    /// A connection appeared or went away.
    Conn,
    /// Connections were reset (`conn_reset`).
    Reset,
    /// Messages or frames were dropped.
    Drop,
    /// The peer broke the protocol or a bound refused work.
    Error,
    /// Any other counter moved (maximal level).
    Count,
    /// The ring itself: started, level changed.
    Ras,
}

impl RasKind {
    /// The lowest level at which events of this kind are kept.
    pub fn level(self) -> u8 {
        match self {
            RasKind::Down | RasKind::Error | RasKind::Ras => 1,
            RasKind::Up | RasKind::Reset => 2,
            RasKind::Conn | RasKind::Drop => 3,
            RasKind::Count => 4,
        }
    }

    /// A short name for listings (`up`, `down`, ...).
    pub fn name(self) -> &'static str {
        match self {
            RasKind::Up => "up",
            RasKind::Down => "down",
            RasKind::Conn => "conn",
            RasKind::Reset => "reset",
            RasKind::Drop => "drop",
            RasKind::Error => "error",
            RasKind::Count => "count",
            RasKind::Ras => "ras",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RasEvent {
    /// When it was seen, ns since the Unix epoch.
    pub wall_ns: u64,
    /// What it is about.
    pub kind: RasKind,
    /// What happened, one line.
    pub text: String,
}

/// The ring.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    events: VecDeque<RasEvent>,
    overwritten: u64,
}

impl Ring {
    /// Adds an event, pushing the oldest out when [`RING_CAP`] are held.
    pub fn push(&mut self, ev: RasEvent) {
        if self.events.len() == RING_CAP {
            self.events.pop_front();
            self.overwritten += 1;
        }
        self.events.push_back(ev);
    }

    /// The events held, oldest first.
    pub fn events(&self) -> Vec<RasEvent> {
        self.events.iter().cloned().collect()
    }

    /// Events pushed out so far.
    pub fn overwritten(&self) -> u64 {
        self.overwritten
    }
}

/// Counters whose growth means the peer broke the protocol, a bound refused work, or a
/// connection could not be made.
pub const ERROR_COUNTERS: &[&str] = &[
    "recv_drop_bad_checksum",
    "conn_drop_bad_frame",
    "conn_drop_oversize",
    "conn_drop_bad_cong_map",
    "conn_refused_no_mem",
    "mem_send_error",
    "cong_send_error",
    "tcp_accept_emfile",
    "tcp_accept_addr_limit",
    "tcp_accept_node_limit",
    "tcp_connect_refused",
    "ib_tx_sg_mapping_failure",
    "ib_ack_send_failure",
];

/// Counters whose growth means messages or frames were dropped.
pub const DROP_COUNTERS: &[&str] = &[
    "recv_drop_old_seq",
    "recv_drop_no_sock",
    "recv_drop_dead_sock",
    "recv_drop_no_mem",
    "recv_drop_rcvq_full",
    "send_queue_full",
    "send_stuck_rm",
    "send_drop_peer_restart",
    "send_pong_drop_full",
    "send_pong_drop_down",
    "tcp_sndbuf_full",
    "tcp_wait_addr_evicted",
    "tcp_wait_node_evicted",
    "tcp_wait_expired",
];

/// One look at a node: every path's state and up count, and every counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// `(local, peer, transport, path index)` to `(up now, times up)`.
    pub paths: BTreeMap<(IpAddr, IpAddr, String, usize), (bool, u64)>,
    /// Counters by name.
    pub counters: BTreeMap<String, u64>,
}

impl Sample {
    /// A sample from the node's connections and counters.
    pub fn new<'a>(
        conns: &[ConnInfo],
        counters: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Sample {
        let mut paths = BTreeMap::new();
        for c in conns {
            for p in &c.paths {
                paths.insert(
                    (c.laddr, c.faddr, c.kind.name().to_string(), p.index),
                    (p.state == PathState::Up, p.ups),
                );
            }
        }
        Sample {
            paths,
            counters: counters
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        }
    }
}

fn path_text(k: &(IpAddr, IpAddr, String, usize)) -> String {
    format!("connection {} -> {} {} path {}", k.0, k.1, k.2, k.3)
}

/// The events between two samples (`wall_ns` is when `new` was taken), kept at `level`.
/// A path that went down and came back up between the samples gives both events.
pub fn diff(old: &Sample, new: &Sample, level: u8, wall_ns: u64) -> Vec<RasEvent> {
    let mut out = Vec::new();
    let mut ev = |kind: RasKind, text: String| {
        if kind.level() <= level {
            out.push(RasEvent {
                wall_ns,
                kind,
                text,
            });
        }
    };
    for (k, &(up, ups)) in &new.paths {
        let (was_up, was_ups) = old.paths.get(k).copied().unwrap_or((false, 0));
        if !old.paths.contains_key(k) && k.3 == 0 {
            ev(RasKind::Conn, format!("{} appeared", path_text(k)));
        }
        let came_up = ups.saturating_sub(was_ups);
        if was_up && (!up || came_up > 0) {
            ev(RasKind::Down, format!("{} down", path_text(k)));
        }
        if came_up > 1 {
            ev(
                RasKind::Down,
                format!(
                    "{} went down and up {} more time(s)",
                    path_text(k),
                    came_up - 1
                ),
            );
        }
        if came_up > 0 && up {
            ev(RasKind::Up, format!("{} up", path_text(k)));
        } else if came_up > 0 {
            ev(
                RasKind::Down,
                format!("{} came up and went down", path_text(k)),
            );
        }
    }
    for (k, &(was_up, _)) in &old.paths {
        if !new.paths.contains_key(k) {
            if was_up {
                ev(RasKind::Down, format!("{} down", path_text(k)));
            }
            if k.3 == 0 {
                ev(RasKind::Conn, format!("{} gone", path_text(k)));
            }
        }
    }
    for (name, &v) in &new.counters {
        let before = old.counters.get(name).copied().unwrap_or(0);
        if v <= before {
            continue;
        }
        let kind = if name == "conn_reset" {
            RasKind::Reset
        } else if ERROR_COUNTERS.contains(&name.as_str()) {
            RasKind::Error
        } else if DROP_COUNTERS.contains(&name.as_str()) {
            RasKind::Drop
        } else {
            RasKind::Count
        };
        ev(kind, format!("{name} +{} (now {v})", v - before));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(paths: &[(usize, bool, u64)], counters: &[(&str, u64)]) -> Sample {
        let a: IpAddr = "127.24.0.1".parse().unwrap();
        let b: IpAddr = "127.24.0.2".parse().unwrap();
        Sample {
            paths: paths
                .iter()
                .map(|&(i, up, ups)| ((a, b, "tcp".to_string(), i), (up, ups)))
                .collect(),
            counters: counters.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        }
    }

    fn texts(v: &[RasEvent]) -> Vec<String> {
        v.iter()
            .map(|e| format!("{} {}", e.kind.name(), e.text))
            .collect()
    }

    #[test]
    fn levels_by_name_and_number() {
        assert_eq!(level_by_name("Detail"), Some(3));
        assert_eq!(level_by_name("loud"), None);
        assert_eq!(level_name(4), Some("maximal"));
        assert_eq!(level_name(0), None);
        assert_eq!(level_name(DEFAULT_LEVEL), Some("normal"));
        assert_eq!(utc_ms(0), "1970-01-01 00:00:00.000");
        assert_eq!(
            utc_ms((1_795_651_200 + 3661) * 1_000_000_000 + 42_000_000),
            "2026-11-26 01:01:01.042"
        );
    }

    #[test]
    fn paths_up_down_and_flaps() {
        let empty = sample(&[], &[]);
        let up = sample(&[(0, true, 1)], &[]);
        assert_eq!(
            texts(&diff(&empty, &up, 3, 0)),
            [
                "conn connection 127.24.0.1 -> 127.24.0.2 tcp path 0 appeared",
                "up connection 127.24.0.1 -> 127.24.0.2 tcp path 0 up"
            ]
        );
        assert_eq!(
            texts(&diff(&empty, &up, 2, 0)),
            ["up connection 127.24.0.1 -> 127.24.0.2 tcp path 0 up"]
        );
        let down = sample(&[(0, false, 1)], &[("conn_reset", 1)]);
        assert_eq!(
            texts(&diff(&up, &down, 1, 0)),
            ["down connection 127.24.0.1 -> 127.24.0.2 tcp path 0 down"]
        );
        assert_eq!(
            texts(&diff(&up, &down, 2, 0))[1],
            "reset conn_reset +1 (now 1)"
        );
        let flapped = sample(&[(0, true, 3)], &[]);
        assert_eq!(
            texts(&diff(&up, &flapped, 2, 0)),
            [
                "down connection 127.24.0.1 -> 127.24.0.2 tcp path 0 down",
                "down connection 127.24.0.1 -> 127.24.0.2 tcp path 0 went down and up 1 more time(s)",
                "up connection 127.24.0.1 -> 127.24.0.2 tcp path 0 up"
            ]
        );
        assert_eq!(
            texts(&diff(&up, &empty, 3, 0)),
            [
                "down connection 127.24.0.1 -> 127.24.0.2 tcp path 0 down",
                "conn connection 127.24.0.1 -> 127.24.0.2 tcp path 0 gone"
            ]
        );
    }

    #[test]
    fn counters_by_level() {
        let a = sample(&[], &[("recv_drop_no_sock", 1), ("send_queued", 5)]);
        let b = sample(
            &[],
            &[
                ("recv_drop_no_sock", 3),
                ("send_queued", 9),
                ("conn_drop_bad_frame", 1),
            ],
        );
        assert_eq!(
            texts(&diff(&a, &b, 1, 0)),
            ["error conn_drop_bad_frame +1 (now 1)"]
        );
        assert_eq!(diff(&a, &b, 3, 0).len(), 2);
        assert_eq!(
            texts(&diff(&a, &b, 4, 0)),
            [
                "error conn_drop_bad_frame +1 (now 1)",
                "drop recv_drop_no_sock +2 (now 3)",
                "count send_queued +4 (now 9)"
            ]
        );
        // A reset of the counters is no event.
        assert!(diff(&b, &a, 4, 0).is_empty());
    }

    #[test]
    fn classified_counters_exist() {
        use crate::stats::{CORE_NAMES, IB_NAMES, TCP_NAMES};
        for n in ERROR_COUNTERS.iter().chain(DROP_COUNTERS) {
            assert!(
                CORE_NAMES
                    .iter()
                    .chain(TCP_NAMES)
                    .chain(IB_NAMES)
                    .any(|c| c == n),
                "{n} is no counter"
            );
        }
    }

    #[test]
    fn the_ring_is_bounded() {
        let mut r = Ring::default();
        for i in 0..RING_CAP as u64 + 5 {
            r.push(RasEvent {
                wall_ns: i,
                kind: RasKind::Count,
                text: String::new(),
            });
        }
        assert_eq!(r.events().len(), RING_CAP);
        assert_eq!(r.events()[0].wall_ns, 5);
        assert_eq!(r.overwritten(), 5);
    }
}
