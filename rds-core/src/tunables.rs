//! Tunables with the kernel's sysctl names (`net.rds.*`, `net/rds/sysctl.c`, `tcp.c`,
//! `ib_sysctl.c`) and defaults, plus the socket buffer limits this stack applies in place of
//! `net.core.{r,w}mem_{default,max}`.

use core::time::Duration;

/// The level of the RAS event ring a node starts with (`normal`; levels in [`crate::ras`]).
pub const DEFAULT_RAS_LEVEL: u8 = 2;

/// Every tunable of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunables {
    /// `net.rds.max_unacked_packets`: ACK_REQUIRED at least every this many messages.
    pub max_unacked_packets: u32,
    /// `net.rds.max_unacked_bytes`: ACK_REQUIRED at least every this many bytes.
    pub max_unacked_bytes: u64,
    /// `net.rds.ping_enable`: answer pings to port 0.
    pub ping_enable: bool,
    /// `net.rds.reconnect_min_delay_ms`.
    pub reconnect_min_delay: Duration,
    /// `net.rds.reconnect_max_delay_ms`.
    pub reconnect_max_delay: Duration,
    /// `net.rds.tcp.rds_tcp_sndbuf`: TCP send buffer of RDS/TCP sockets, 0 = autotune.
    pub tcp_sndbuf: u32,
    /// `net.rds.tcp.rds_tcp_rcvbuf`: TCP receive buffer of RDS/TCP sockets, 0 = autotune.
    pub tcp_rcvbuf: u32,
    /// Default RDS socket send buffer in bytes (the kernel uses `net.core.wmem_default / 2`).
    pub sndbuf_default: u32,
    /// Default RDS socket receive buffer in bytes (the kernel uses `net.core.rmem_default / 2`).
    pub rcvbuf_default: u32,
    /// Largest `SO_SNDBUF` accepted (bytes; the kernel caps at `net.core.wmem_max`).
    pub sndbuf_max: u32,
    /// Largest `SO_RCVBUF` accepted (bytes; the kernel caps at `net.core.rmem_max`).
    pub rcvbuf_max: u32,
    /// `net.rds.mem_budget`: bytes the node may hold for queued messages (both ways),
    /// pongs, reassembly and per-peer state; 0 = automatic (a node uses min(256 MiB,
    /// RAM / 8), the bare engine 256 MiB).
    pub mem_budget: u64,
    /// `net.rds.partial_timeout_ms`: a peer's message in progress that gets no byte for this
    /// long ends its RDS/TCP connection.
    pub partial_timeout: Duration,
    /// `net.rds.uid_mem_share`: percent of the node budget that the sockets of one user
    /// other than root may hold (queued messages both ways).
    pub uid_mem_share: u8,
    /// `net.rds.root_mem_reserve`: percent of the node budget that only root's sockets and
    /// the node itself (pongs, reassembly, connections) may use.
    pub root_mem_reserve: u8,
    /// `net.rds.ras_level`: what the node's RAS event ring keeps (1 minimal, 2 normal,
    /// 3 detail, 4 maximal; see [`crate::ras`]).
    pub ras_level: u8,
    /// `net.rds.mprds_paths`: the lanes (RDS/TCP connections per peer) this node offers in
    /// its multipath handshake (NPATHS); a connection uses the smaller of both sides'
    /// numbers. 1..[`crate::wire::MPATH_WORKERS`].
    pub mprds_paths: u8,
    /// `net.rds.busy_poll_us`: how long a thread waiting for its socket keeps polling the
    /// node's connections before it sleeps (where the process may run on more than one CPU);
    /// zero sleeps at once.
    pub busy_poll: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            max_unacked_packets: 8,
            max_unacked_bytes: 16 << 20,
            ping_enable: true,
            reconnect_min_delay: Duration::from_millis(1),
            reconnect_max_delay: Duration::from_millis(1000),
            tcp_sndbuf: 0,
            tcp_rcvbuf: 0,
            sndbuf_default: 212_992 / 2,
            rcvbuf_default: 212_992 / 2,
            sndbuf_max: 64 << 20,
            rcvbuf_max: 64 << 20,
            mem_budget: 0,
            partial_timeout: Duration::from_secs(30),
            uid_mem_share: 25,
            root_mem_reserve: 10,
            ras_level: DEFAULT_RAS_LEVEL,
            mprds_paths: crate::wire::MPATH_WORKERS as u8,
            busy_poll: Duration::ZERO,
        }
    }
}

/// How a tunable is described to operators (`rds-ctrl help`).
#[derive(Debug, Clone, Copy)]
pub struct TunableDef {
    /// The sysctl-style name (`net.rds.…`).
    pub name: &'static str,
    /// One line of description.
    pub desc: &'static str,
    /// Unit of the value.
    pub unit: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// Whether 0 is accepted besides `min..=max` (0 = automatic).
    pub zero_ok: bool,
    /// Whether the kernel has this sysctl (otherwise it is this stack's own).
    pub kernel: bool,
    get: fn(&Tunables) -> u64,
    set: fn(&mut Tunables, u64),
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Every tunable, in `rds-ctrl help` order.
pub const TUNABLES: &[TunableDef] = &[
    TunableDef {
        name: "net.rds.max_unacked_packets",
        desc: "request an acknowledgement (ACK_REQUIRED) at least every this many messages",
        unit: "messages",
        min: 1,
        max: 1 << 20,
        zero_ok: false,
        kernel: true,
        get: |t| u64::from(t.max_unacked_packets),
        set: |t, v| t.max_unacked_packets = v as u32,
    },
    TunableDef {
        name: "net.rds.max_unacked_bytes",
        desc: "request an acknowledgement at least every this many bytes",
        unit: "bytes",
        min: 1,
        max: 1 << 31,
        zero_ok: false,
        kernel: true,
        get: |t| t.max_unacked_bytes,
        set: |t, v| t.max_unacked_bytes = v,
    },
    TunableDef {
        name: "net.rds.ping_enable",
        desc: "answer pings (messages to port 0) with a pong",
        unit: "boolean",
        min: 0,
        max: 1,
        zero_ok: true,
        kernel: true,
        get: |t| u64::from(t.ping_enable),
        set: |t, v| t.ping_enable = v != 0,
    },
    TunableDef {
        name: "net.rds.reconnect_min_delay_ms",
        desc: "first reconnect backoff bound (doubles per failed attempt)",
        unit: "ms",
        min: 1,
        max: 60_000,
        zero_ok: false,
        kernel: true,
        get: |t| ms(t.reconnect_min_delay),
        set: |t, v| t.reconnect_min_delay = Duration::from_millis(v),
    },
    TunableDef {
        name: "net.rds.reconnect_max_delay_ms",
        desc: "largest reconnect backoff bound",
        unit: "ms",
        min: 1,
        max: 600_000,
        zero_ok: false,
        kernel: true,
        get: |t| ms(t.reconnect_max_delay),
        set: |t, v| t.reconnect_max_delay = Duration::from_millis(v),
    },
    TunableDef {
        name: "net.rds.tcp.rds_tcp_sndbuf",
        desc: "TCP send buffer of RDS/TCP connections, 0 = autotune; a change reconnects them",
        unit: "bytes",
        min: 4608,
        max: i32::MAX as u64,
        zero_ok: true,
        kernel: true,
        get: |t| u64::from(t.tcp_sndbuf),
        set: |t, v| t.tcp_sndbuf = v as u32,
    },
    TunableDef {
        name: "net.rds.tcp.rds_tcp_rcvbuf",
        desc: "TCP receive buffer of RDS/TCP connections, 0 = autotune; a change reconnects them",
        unit: "bytes",
        min: 2304,
        max: i32::MAX as u64,
        zero_ok: true,
        kernel: true,
        get: |t| u64::from(t.tcp_rcvbuf),
        set: |t, v| t.tcp_rcvbuf = v as u32,
    },
    TunableDef {
        name: "net.rds.sndbuf_default",
        desc: "send buffer of a new RDS socket (the kernel uses net.core.wmem_default / 2)",
        unit: "bytes",
        min: 1024,
        max: 1 << 30,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.sndbuf_default),
        set: |t, v| t.sndbuf_default = v as u32,
    },
    TunableDef {
        name: "net.rds.rcvbuf_default",
        desc: "receive buffer of a new RDS socket (the kernel uses net.core.rmem_default / 2)",
        unit: "bytes",
        min: 1024,
        max: 1 << 30,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.rcvbuf_default),
        set: |t, v| t.rcvbuf_default = v as u32,
    },
    TunableDef {
        name: "net.rds.sndbuf_max",
        desc: "largest SO_SNDBUF an RDS socket may set (the kernel uses net.core.wmem_max)",
        unit: "bytes",
        min: 1024,
        max: 1 << 30,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.sndbuf_max),
        set: |t, v| t.sndbuf_max = v as u32,
    },
    TunableDef {
        name: "net.rds.rcvbuf_max",
        desc: "largest SO_RCVBUF an RDS socket may set (the kernel uses net.core.rmem_max)",
        unit: "bytes",
        min: 1024,
        max: 1 << 30,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.rcvbuf_max),
        set: |t, v| t.rcvbuf_max = v as u32,
    },
    TunableDef {
        name: "net.rds.mem_budget",
        desc: "bytes a node may hold for queued messages, pongs, reassembly and peers, \
               0 = min(256 MiB, RAM / 8); beyond it sends fail (ENOBUFS), arrivals are dropped",
        unit: "bytes",
        min: 1 << 20,
        max: 1 << 40,
        zero_ok: true,
        kernel: false,
        get: |t| t.mem_budget,
        set: |t, v| t.mem_budget = v,
    },
    TunableDef {
        name: "net.rds.partial_timeout_ms",
        desc: "an RDS/TCP connection whose message in progress gets no byte for this long is \
               closed, and the memory it held freed (tcp_partial_timeouts)",
        unit: "ms",
        min: 100,
        max: 3_600_000,
        zero_ok: false,
        kernel: false,
        get: |t| t.partial_timeout.as_millis() as u64,
        set: |t, v| t.partial_timeout = Duration::from_millis(v),
    },
    TunableDef {
        name: "net.rds.uid_mem_share",
        desc: "percent of mem_budget the sockets of one user other than root may hold; past \
               it that user's sends fail (ENOBUFS) and arrivals to its sockets are dropped",
        unit: "percent",
        min: 1,
        max: 100,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.uid_mem_share),
        set: |t, v| t.uid_mem_share = v as u8,
    },
    TunableDef {
        name: "net.rds.root_mem_reserve",
        desc: "percent of mem_budget kept for root's sockets and the node itself (pongs, \
               reassembly, connections): other users' sockets cannot use it",
        unit: "percent",
        min: 0,
        max: 90,
        zero_ok: true,
        kernel: false,
        get: |t| u64::from(t.root_mem_reserve),
        set: |t, v| t.root_mem_reserve = v as u8,
    },
    TunableDef {
        name: "net.rds.ras_level",
        desc: "what the node's event ring keeps (rds-ctrl ras): 1 minimal (down, errors), \
               2 normal (and up, resets), 3 detail (and drops, connections), 4 maximal (all \
               counters); the daemon also logs what it keeps",
        unit: "level",
        min: 1,
        max: 4,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.ras_level),
        set: |t, v| t.ras_level = v as u8,
    },
    TunableDef {
        name: "net.rds.mprds_paths",
        desc: "RDS/TCP lanes (connections per peer) this node offers in the multipath \
               handshake (NPATHS); a connection uses the smaller of both sides' numbers; 1 \
               keeps a base kernel's slots and our lanes joined (exactly once); a change \
               reconnects RDS/TCP connections",
        unit: "lanes",
        min: 1,
        max: crate::wire::MPATH_WORKERS as u64,
        zero_ok: false,
        kernel: false,
        get: |t| u64::from(t.mprds_paths),
        set: |t, v| t.mprds_paths = v as u8,
    },
    TunableDef {
        name: "net.rds.busy_poll_us",
        desc: "how long a thread waiting for an answer on its socket keeps polling the node's \
               connections before it sleeps, where the process may run on more than one CPU \
               (an answer that comes meanwhile costs no wake-up); 0 sleeps at once; pays for \
               one request at a time, costs deeper queues CPU",
        unit: "us",
        min: 0,
        max: 100_000,
        zero_ok: true,
        kernel: false,
        get: |t| t.busy_poll.as_micros() as u64,
        set: |t, v| t.busy_poll = Duration::from_micros(v),
    },
];

/// An AIX `rdsctrl` tunable name and what it is on this stack.
#[derive(Debug, Clone, Copy)]
pub struct AixTunable {
    /// The AIX name (`rds_sendspace`).
    pub name: &'static str,
    /// The tunable it stands for here, or `None` when nothing here is equivalent.
    pub target: Option<&'static str>,
    /// Why it maps to `target`, or why it does not apply.
    pub note: &'static str,
}

/// The AIX `rdsctrl` tunable names: aliases where this stack has an equivalent, and the
/// reason where it has none.
pub const AIX_TUNABLES: &[AixTunable] = &[
    AixTunable {
        name: "rds_sendspace",
        target: Some("net.rds.sndbuf_default"),
        note: "the send buffer an RDS socket starts with",
    },
    AixTunable {
        name: "rds_recvspace",
        target: Some("net.rds.rcvbuf_default"),
        note: "the receive buffer an RDS socket starts with",
    },
    AixTunable {
        name: "rds_mclustsize",
        target: None,
        note: "this stack keeps no pool of memory clusters: RDS/TCP writes each message \
               whole to the TCP stream and RDS/IB cuts messages into the 4096-byte fragments \
               that the RDS wire protocol fixes, so there is no cluster size to choose",
    },
];

impl AixTunable {
    /// The AIX name `name` (case as AIX spells it).
    pub fn find(name: &str) -> Option<&'static AixTunable> {
        AIX_TUNABLES.iter().find(|a| a.name == name)
    }

    /// The "not applicable" sentence for a name with no equivalent.
    pub fn not_applicable(&self) -> Option<String> {
        self.target.is_none().then(|| {
            format!(
                "{} is not applicable on this stack, because {}",
                self.name, self.note
            )
        })
    }
}

/// Why a tunable cannot be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TunableError {
    /// No tunable has this name.
    #[error("unknown tunable '{0}'")]
    Unknown(String),
    /// The value is outside the accepted range.
    #[error("{name}: value {value} out of range ({range})")]
    Range {
        /// The tunable.
        name: &'static str,
        /// The rejected value.
        value: u64,
        /// The accepted range, as text.
        range: String,
    },
    /// The minimum reconnect delay would exceed the maximum.
    #[error("net.rds.reconnect_min_delay_ms must not exceed net.rds.reconnect_max_delay_ms")]
    MinAboveMax,
}

impl TunableDef {
    /// Finds a tunable by its full name, its last component (`max_unacked_packets`) or the
    /// AIX name that stands for it ([`AIX_TUNABLES`]).
    pub fn find(name: &str) -> Option<&'static TunableDef> {
        let name = AixTunable::find(name)
            .and_then(|a| a.target)
            .unwrap_or(name);
        TUNABLES
            .iter()
            .find(|d| d.name == name || d.name.rsplit('.').next() == Some(name))
    }

    /// The AIX name that stands for this tunable, if any.
    pub fn aix_name(&self) -> Option<&'static str> {
        AIX_TUNABLES
            .iter()
            .find(|a| a.target == Some(self.name))
            .map(|a| a.name)
    }

    /// The value in `t`.
    pub fn get(&self, t: &Tunables) -> u64 {
        (self.get)(t)
    }

    /// The default value.
    pub fn default_value(&self) -> u64 {
        (self.get)(&Tunables::default())
    }

    /// The accepted range as text (`0 or 4608..2147483647`).
    pub fn range_text(&self) -> String {
        if self.zero_ok && self.min > 0 {
            format!("0 or {}..{}", self.min, self.max)
        } else {
            format!("{}..{}", self.min, self.max)
        }
    }

    /// Sets the value in `t` after checking the range.
    ///
    /// # Errors
    /// [`TunableError::Range`] or [`TunableError::MinAboveMax`].
    pub fn set(&self, t: &mut Tunables, value: u64) -> Result<(), TunableError> {
        let ok = (self.min..=self.max).contains(&value) || (self.zero_ok && value == 0);
        if !ok {
            return Err(TunableError::Range {
                name: self.name,
                value,
                range: self.range_text(),
            });
        }
        let mut n = t.clone();
        (self.set)(&mut n, value);
        if n.reconnect_min_delay > n.reconnect_max_delay {
            return Err(TunableError::MinAboveMax);
        }
        *t = n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_defaults_and_names() {
        let t = Tunables::default();
        let get = |n: &str| TunableDef::find(n).unwrap().get(&t);
        assert_eq!(get("net.rds.max_unacked_packets"), 8);
        assert_eq!(get("net.rds.max_unacked_bytes"), 16 << 20);
        assert_eq!(get("net.rds.ping_enable"), 1);
        assert_eq!(get("net.rds.reconnect_min_delay_ms"), 1);
        assert_eq!(get("net.rds.reconnect_max_delay_ms"), 1000);
        assert_eq!(get("rds_tcp_sndbuf"), 0);
        assert_eq!(get("net.rds.tcp.rds_tcp_rcvbuf"), 0);
        assert_eq!(get("net.rds.ras_level"), 2);
    }

    #[test]
    fn aix_names() {
        let d = TunableDef::find("rds_sendspace").unwrap();
        assert_eq!(d.name, "net.rds.sndbuf_default");
        assert_eq!(d.aix_name(), Some("rds_sendspace"));
        assert_eq!(
            TunableDef::find("rds_recvspace").unwrap().name,
            "net.rds.rcvbuf_default"
        );
        assert!(TunableDef::find("rds_mclustsize").is_none());
        let m = AixTunable::find("rds_mclustsize").unwrap();
        assert!(m
            .not_applicable()
            .unwrap()
            .starts_with("rds_mclustsize is not applicable on this stack, because "));
        assert!(AixTunable::find("rds_sendspace")
            .unwrap()
            .not_applicable()
            .is_none());
    }

    #[test]
    fn ranges_are_enforced() {
        let mut t = Tunables::default();
        let d = TunableDef::find("rds_tcp_sndbuf").unwrap();
        assert!(d.set(&mut t, 0).is_ok());
        assert!(matches!(
            d.set(&mut t, 100),
            Err(TunableError::Range { .. })
        ));
        d.set(&mut t, 10000).unwrap();
        assert_eq!(t.tcp_sndbuf, 10000);
        let min = TunableDef::find("reconnect_min_delay_ms").unwrap();
        assert_eq!(min.set(&mut t, 5000), Err(TunableError::MinAboveMax));
        assert_eq!(t.reconnect_min_delay, Duration::from_millis(1));
        assert!(TunableDef::find("nope").is_none());
        assert_eq!(d.range_text(), "0 or 4608..2147483647");
    }
}
