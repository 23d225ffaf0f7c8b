//! Benchmark (not a CI test; run by `scripts/bench-lab-app-path.sh`): issue 19's one-CPU rows.
//! The kernel's RDS driven by the original C `rds-stress` (oracle/rds-tools 2.0.7, built
//! statically by `tests/lab/build-c-rds-stress.sh`, which needs `RDS_TOOLS_GIT`) against our
//! stack driven by our `rds-stress`, side by side in one lab boot: two qemu TCG guests, one
//! vCPU each, Debian's 6.1 kernel, booted without `rds_rdma` (`--ib=0`).
//!
//! Patterns, each `-T 5` (`BENCH_SECS` overrides), 64-byte requests and acks unless said:
//! `-t 1 -d 1`, `-t 2 -d 32`, and 64 KiB requests `-q 65536 -d 4` (64-byte acks), each in
//! two places:
//! - two guests over TCP, g1 (198.18.0.2, active) to g2 (198.18.0.4, passive). Kernel: C
//!   rds-stress on `rds_tcp` in both guests. Ours: our rds-stress in both guests with no kernel
//!   RDS module loaded, each an embedded node (`RDS_NO_DAEMON=1 --stack user --transport
//!   tcp`: the guests' addresses are on soft-RoCE devices, where a socket of the default node
//!   otherwise binds RDS/IB, as the kernel's does with `rds_rdma` loaded; the runs before the
//!   wire profile was added lacked the flag and measured our RDS/IB over rxe in these rows);
//! - one guest, two local addresses: g1's 198.18.0.2 (active) and 198.18.0.6 (passive, added
//!   to g1's `eth0` for this). Kernel: both C rds-stress processes in g1 (the kernel sends
//!   between two local addresses over its loopback transport; the run checks that
//!   `RDS_INFO_CONNECTIONS` lists the connection as `loopback`). Ours: `rds-ctrl daemon tcp`
//!   owns both addresses in g1 and both rds-stress processes are its clients (the daemon's
//!   `recv_delivered` must grow); also, informational, `rds-stress --loopback` (one process,
//!   two embedded nodes, `RDS_NO_DAEMON=1`) between the same two addresses.
//!
//! Order in the boot: the kernel rows first (the guests load `rds_tcp` at boot), then `rds_tcp`
//! and `rds` are removed from both guests (ours and the kernel cannot both listen on port
//! 16385), then our rows. The figure of each run is the `(average)` line's tx/s of the active
//! side; the passive side's average line and ours' percentile line are printed as notes.
//! Table: row, kernel req/s, ours req/s, ours/kernel and issue 19's target for it. No timing
//! assertion: the benchmark fails only when a run fails (a non-zero exit status, no average
//! line, a guest command over its time limit).
//!
//! Where the time goes: the two-guest `-t 1 -d 1` and 64 KiB runs (kernel and ours) and a
//! qperf `tcp_lat` run between the same guests (the reference for any program over TCP there)
//! are captured on the lab bridge (`BENCH_CAPTURES=DIR` keeps the files; [`profile_pcap`]
//! reads one again) and profiled by `rds_tests::wireprof`: each guest's turnaround, the time within a turn and
//! the packets per round trip, with both guests' CPU shares over the run (`/proc/stat`).
//! A capture or profile that fails is a note, not a failure.
//!
//! qperf bandwidth between the guests (issue 32's `rds_bw >= 0.5x tcp_bw`, here with the
//! kernel's own figure next to ours), each `-t BENCH_SECS` at qperf's default size for
//! `rds_bw` (8 KiB; `tcp_bw`'s is 64 KiB, so that row runs `tcp_bw -m 8192`), `-m 4096` and
//! `-m 65536`, g1 client, g2 server: `tcp_bw`
//! and `rds_bw` on the kernel's RDS/TCP right after the `tcp_lat` reference (with the changes
//! of both kernels' congestion, drop and delivery counters over each `rds_bw` run as notes);
//! at the end of the boot, `rds_bw` with `LD_PRELOAD=librds_preload.so` (`cargo build
//! --release -p rds-preload`, copied into both guests' shares) in server and client,
//! `RDS_NO_DAEMON=1` as `scripts/bench-preload.sh` runs it. The kernel's RDS is gone by then
//! (with it loaded the library's sockets would bind on the kernel's RDS, `--stack auto`), and
//! the guests' `rxe0` is deleted first, so that our embedded nodes take RDS/TCP (on an address
//! of an RDMA device they take RDS/IB, as the kernel does with `rds_rdma`). Second table: per
//! size kernel, tcp and ours MB/s with kernel/tcp, ours/tcp, ours/kernel and the target. A
//! qperf run that fails (or ours not running at all) is a note under that table, not a
//! failure of the benchmark.
//!
//! First run (071de36 plus these rows; the 2-core VM, `-t 5`, one run each):
//!
//! ```text
//! size                   kernel MB/s  tcp MB/s kernel/tcp ours MB/s ours/tcp ours/kern
//! qperf's default size          11.8      74.8       0.16       5.9     0.08      0.50
//! -m 4096                        6.8      25.2       0.27       7.8     0.31      1.15
//! -m 65536                      19.2      51.9       0.37      16.6     0.32      0.86
//! ```
//!
//! The kernel's `rds_bw` did not stall but ran congested at every size (g1's
//! `cong_send_blocked` +19..+91, `send_queue_full` +237..+537 per run; its `recv_delivered`
//! in g2 times the size matches qperf's figure). That run's default row compared `rds_bw` at
//! 8 KiB with `tcp_bw` at its own default, 64 KiB (since then `tcp_bw -m 8192`); `tcp_bw` at
//! 64 KiB twice in the run gave 74.8 and 51.9 MB/s: one run each moves by that much here.
//!
//! Results below (4c6cd4a) predate `--transport tcp` on our two-guest runs: those measured
//! our RDS/IB over rxe (docs/performance.md has the corrected runs and the profiles).
//!
//! Results (2026-11-26, commit 4c6cd4a; the 2-core development VM, shared with other work;
//! TCG, 1 vCPU and 768 MB per guest; `-T 5`; run time 186 s, boot included):
//!
//! ```text
//! row                                                  kernel req/s   ours req/s   ours/k  target
//! two guests, TCP, -t 1 -d 1                                    456          162     0.36  >= 1 NOT met
//! two guests, TCP, -t 2 -d 32                                  1602         1908     1.19  >= 1 met
//! two guests, TCP, 64 KiB -d 4                                  333           79     0.24  >= 1 NOT met
//! one guest, two addresses, -t 1 -d 1 (daemon)                 2977          415     0.14  >= 0.5 NOT met
//! one guest, -t 1 -d 1, ours --loopback (1 process)            2977          546     0.18  (informational)
//! one guest, two addresses, -t 2 -d 32 (daemon)                9042          700     0.08  >= 0.8 NOT met
//! one guest, -t 2 -d 32, ours --loopback (1 process)           9042         7487     0.83  (informational)
//! one guest, two addresses, 64 KiB -d 4 (daemon)                395          209     0.53  (informational)
//! one guest, 64 KiB -d 4, ours --loopback (1 process)           395          292     0.74  (informational)
//! ```
//!
//! A run just before it (the same code) gave ratios 0.59 / 1.43 / 0.33 (two guests) and
//! 0.14 / 0.06 / 0.35 (daemon), 0.20 / 0.73 / 0.57 (`--loopback`): the two-guest depth-1 and
//! 64 KiB figures move by tens of percent between runs, the one-guest ones less. Average RTT
//! (the average lines' `rtt us`) two guests at depth 1: kernel 1.9 ms, ours 6.0 ms (p50
//! 5.2 ms); one guest at depth 1: kernel 0.27 ms, ours through the daemon 1.8 ms (p50 1.5 ms),
//! `--loopback` 1.3 ms. In one guest the kernel hands each message to the receiving socket
//! inside the kernel (its loopback transport, no TCP); in the daemon rows ours does the same
//! in the daemon's node, with the daemon's rings both ways; `--loopback` goes through TCP over
//! `lo`. That run was before daemon clients posted sends and got receives batched and pushed;
//! with them (commit c29aa49) the daemon rows gave 0.21 / 0.81 / 0.33 (docs/performance.md,
//! "The same rows on one CPU, against the kernel's RDS (the lab)").

use anyhow::{ensure, Context, Result};
use rds_tests::guestcpu::{CpuShares, CpuTicks};
use rds_tests::ib::release_bin;
use rds_tests::lab::{guest_addr, GuestJob, Lab, NETNS};
use rds_tests::labbench::{
    bench_secs, embedded_stress, kernel_warmup, run_pair, unload_kernel_rds, wait_listen,
    OUR_ENV as ENV, SHORT as T,
};
use rds_tests::stress::{average, c_rds_stress, our_rds_stress, TX_PER_SEC};
use rds_tests::wireprof::{captures_dir, profile_packets, read_pcap, Capture, Profile, Proto};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The C rds-stress version (the one the lab's interop test calls the original).
const C_VERSION: &str = "2.0.7";
/// g1's second address for the one-guest rows (the lab's plan: .1 and .3 host side, .2 g1,
/// .4 g2; `lab_preload.rs` adds .6 to g1 the same way).
const G1B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 6);
/// First control port; every run takes a fresh block of ten (tasks use port+1..).
const PORT_BASE: u16 = 4600;
const DEFAULT_SECS: u64 = 5;
/// qperf's control port (its default), where the server in g2 listens.
const QPERF_PORT: u16 = 19765;
/// The message sizes of the qperf bandwidth rows: the row's name, `rds_bw`'s options and
/// `tcp_bw`'s. qperf's default size is 8 KiB for `rds_bw` but 64 KiB for `tcp_bw`: the default
/// row runs `tcp_bw` at 8 KiB, so that every ratio compares one size.
const BW_SIZES: [(&str, &str, &str); 3] = [
    ("qperf's default (8 KiB)", "", "-m 8192"),
    ("-m 4096", "-m 4096", "-m 4096"),
    ("-m 65536", "-m 65536", "-m 65536"),
];
/// Issue 32's target for ours/tcp in the qperf bandwidth rows.
const BW_TARGET: f64 = 0.5;
/// The environment of a qperf preloaded with our library in a guest (embedded nodes, no
/// daemon, a runtime directory of its own), ending in `&&`.
const PRELOAD_ENV: &str =
    "mkdir -p -m 700 /tmp/rds-qperf && export RDS_RUNTIME_DIR=/tmp/rds-qperf \
                           RDS_NO_DAEMON=1 LD_PRELOAD=/mnt/share/librds_preload.so &&";

/// One request pattern and issue 19's targets for ours/kernel.
struct Pattern {
    name: &'static str,
    args: &'static str,
    /// Target for the two-guest row.
    two: Option<f64>,
    /// Target for the one-guest (daemon) row.
    one: Option<f64>,
    /// Its two-guest runs are captured and profiled.
    profiled: bool,
}

const PATTERNS: [Pattern; 3] = [
    Pattern {
        name: "-t 1 -d 1",
        args: "-q 64 -a 64 -t 1 -d 1",
        two: Some(1.0),
        one: Some(0.5),
        profiled: true,
    },
    Pattern {
        name: "-t 2 -d 32",
        args: "-q 64 -a 64 -t 2 -d 32",
        two: Some(1.0),
        one: Some(0.8),
        profiled: false,
    },
    Pattern {
        name: "64 KiB -d 4",
        args: "-q 65536 -a 64 -t 1 -d 4",
        two: Some(1.0),
        one: None,
        profiled: true,
    },
];

/// Where a run happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    TwoGuests,
    OneGuest,
}

/// Who runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    /// C rds-stress on the kernel's RDS.
    Kernel,
    /// Our rds-stress: embedded nodes (two guests) or the daemon's clients (one guest).
    Ours,
    /// Our `rds-stress --loopback` (one guest only).
    Loopback,
}

/// Who runs a qperf bandwidth row between the guests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum BwWho {
    /// `rds_bw` on the kernel's RDS/TCP.
    Kernel,
    /// `tcp_bw`.
    Tcp,
    /// `rds_bw` preloaded with our library (embedded nodes, RDS/TCP).
    Ours,
}

/// The active side's average tx/s of each run, by (place, pattern index, who).
#[derive(Default)]
struct Results {
    tx: BTreeMap<(Place, usize, Who), f64>,
    notes: Vec<String>,
    /// Wire profiles of the profiled two-guest runs (and of the TCP reference), by run, with
    /// the CPU shares of g1 and g2 over the run.
    profiles: Vec<(String, Profile, [Option<CpuShares>; 2])>,
    /// qperf `tcp_lat` between the guests: round trip, microseconds.
    tcp_rtt_us: Option<f64>,
    /// qperf bandwidth between the guests, MB/s (10^6 bytes/s), by ([`BW_SIZES`] index, who).
    bw: BTreeMap<(usize, BwWho), f64>,
    /// What happened to the qperf bandwidth rows: failures (a row that failed has no figure;
    /// the other runs go on), why ours did not run, the kernel's counters over its runs.
    bw_notes: Vec<String>,
    /// Runs that failed (the others still ran).
    failures: Vec<String>,
}

/// Guest paths of the programs.
struct Progs {
    /// C rds-stress in g1, g2.
    c: [String; 2],
    /// Our rds-stress in g1, g2.
    ours: [String; 2],
    /// Our rds-ctrl in g1.
    ctrl: String,
}

struct Bench<'a> {
    lab: &'a Lab,
    secs: u64,
    next_port: u16,
    progs: Progs,
    res: Results,
    /// The daemon's job while it runs (killed on failure).
    daemon: Option<GuestJob>,
    /// Where the captures of the profiled runs go (`BENCH_CAPTURES`, else a temporary
    /// directory, removed at the end).
    captures: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Bench<'_> {
    /// Guest-side limit of one rds-stress run: 2 s start delay, `-T`, the stats exchange and
    /// TCG slack.
    fn limit(&self) -> Duration {
        Duration::from_secs(self.secs + 60)
    }

    fn port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port += 10;
        p
    }

    /// One run of a passive and an active rds-stress (`{P}` in the commands is the port);
    /// returns the active side's average tx/s. Fails on a non-zero exit or a missing average
    /// line on either side.
    fn pair(&mut self, who: &str, passive: (usize, &str), active: (usize, &str)) -> Result<f64> {
        let port = self.port();
        let (pg, pcmd) = (passive.0, passive.1.replace("{P}", &port.to_string()));
        let (ag, acmd) = (active.0, active.1.replace("{P}", &port.to_string()));
        let (a, po) = run_pair(self.lab, who, (pg, &pcmd), (ag, &acmd), port, self.limit())?;
        let (line, row) = average(&a.stdout).with_context(|| format!("{who}: active side"))?;
        let (pline, _) = average(&po.stdout).with_context(|| format!("{who}: passive side"))?;
        self.res.notes.push(format!("{who}: g{ag}$ {acmd}"));
        self.res.notes.push(format!("  active  {line}"));
        self.res.notes.push(format!("  passive {pline}"));
        self.note_percentiles(&a.stdout);
        Ok(row[TX_PER_SEC])
    }

    /// One single-process run (`--loopback`) in guest `g`; returns its average tx/s.
    fn single(&mut self, who: &str, g: usize, cmd: &str) -> Result<f64> {
        let port = self.port();
        let cmd = cmd.replace("{P}", &port.to_string());
        let o = self
            .lab
            .exec(g, &cmd, self.limit())?
            .check(&format!("{who}: g{g}: {cmd}"))?;
        let (line, row) = average(&o.stdout).with_context(|| format!("{who}: {cmd}"))?;
        self.res.notes.push(format!("{who}: g{g}$ {cmd}"));
        self.res.notes.push(format!("  {line}"));
        self.note_percentiles(&o.stdout);
        Ok(row[TX_PER_SEC])
    }

    /// Keeps the `rtt us percentiles` line of an active side's output, if it printed one.
    fn note_percentiles(&mut self, stdout: &str) {
        if let Some(pct) = stdout.lines().find(|l| l.starts_with("rtt us percentiles")) {
            self.res.notes.push(format!("  {pct}"));
        }
    }

    /// Runs `f` under a capture of TCP on the lab bridge and keeps the wire profile of its
    /// round trips between g1 (requests) and g2 (answers), with both guests' CPU shares. A capture or profile that
    /// fails is a note; the run's own result is returned as it is.
    fn profiled<R>(&mut self, who: &str, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let file = self.captures.join(format!(
            "{}.pcap",
            who.split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join("-")
        ));
        let cap = Capture::start(NETNS, Proto::Tcp, "tcp", &file, self.limit() * 2);
        let before = [self.cpu(1), self.cpu(2)];
        let r = f(self);
        let after = [self.cpu(1), self.cpu(2)];
        let cpu = [0, 1].map(|i| match (before[i], after[i]) {
            (Some(b), Some(a)) => b.shares(&a),
            _ => None,
        });
        let prof = cap.and_then(|c| c.profile(guest_addr(1), guest_addr(2), 10));
        match prof {
            Ok(p) => self.res.profiles.push((who.to_string(), p, cpu)),
            Err(e) => self
                .res
                .notes
                .push(format!("{who}: no wire profile: {e:#}")),
        }
        r
    }

    /// Guest `g`'s CPU ticks (`/proc/stat`), or `None` (a note says why).
    fn cpu(&mut self, g: usize) -> Option<CpuTicks> {
        match self.lab.exec_ok(g, "head -n 1 /proc/stat", T) {
            Ok(o) => CpuTicks::parse(&o.stdout),
            Err(e) => {
                self.res.notes.push(format!("g{g}: no /proc/stat: {e:#}"));
                None
            }
        }
    }

    /// The TCP reference between the guests: qperf `tcp_lat` (g1 client, g2 server), with
    /// its wire profile. Returns the round trip in microseconds (qperf prints one way).
    fn tcp_reference(&mut self) -> Result<f64> {
        let secs = self.secs;
        let server = self.lab.spawn(2, "exec qperf", self.limit())?;
        let g2 = guest_addr(2);
        let r = self.profiled("qperf tcp_lat: TCP, user space both sides", |b| {
            // The server needs a moment to listen; qperf's client does not retry.
            std::thread::sleep(Duration::from_millis(1500));
            b.lab
                .exec(1, &format!("qperf -t {secs} {g2} tcp_lat"), b.limit())?
                .check("qperf tcp_lat g1 -> g2")
        });
        server.kill();
        let _ = server.wait();
        let out = r?.stdout;
        self.res.notes.push(format!(
            "qperf g1 -> g2 tcp_lat: {}",
            out.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
        let one_way = qperf_latency_us(&out)
            .with_context(|| format!("no latency in qperf's output:\n{out}"))?;
        Ok(one_way * 2.0)
    }

    /// One qperf client in g1 against the qperf server in g2: `test` with `opts`, after
    /// `env` (an environment ending in `&&`, or empty); returns the bandwidth in MB/s. Retried
    /// while the server does not listen again yet (qperf listens anew after each test), for
    /// at most 20 s. With `probe`, that command runs in g2 halfway through the run and its
    /// output (or error) is returned with the figure.
    fn qperf_bw(
        &mut self,
        env: &str,
        test: &str,
        opts: &str,
        probe: Option<&str>,
    ) -> Result<(f64, Option<String>)> {
        let (secs, g2) = (self.secs, guest_addr(2));
        let cmd = format!("{env} exec qperf -t {secs} {opts} {g2} {test}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            wait_listen(self.lab, 2, QPERF_PORT)?;
            let job = self.lab.spawn(1, &cmd, self.limit())?;
            let probed = probe.map(|p| {
                std::thread::sleep(Duration::from_millis(secs * 500));
                match self.lab.exec(2, p, T) {
                    Ok(o) => format!("{}{}", o.stdout.trim(), o.stderr.trim()),
                    Err(e) => format!("{e:#}"),
                }
            });
            let o = job.wait().with_context(|| format!("g1: {cmd}"))?;
            let refused = format!("{}{}", o.stdout, o.stderr).contains("Connection refused");
            if o.status != 0 && refused && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            let o = o.check(&format!("g1: {cmd}"))?;
            let mb = qperf_bw_mb_s(&o.stdout)
                .with_context(|| format!("no bw in qperf's output (g1: {cmd}):\n{}", o.stdout))?;
            return Ok((mb, probed));
        }
    }

    /// Guest `g`'s kernel RDS counters (`rdstool info counters`), or `None`.
    fn kernel_counters(&self, g: usize) -> Option<BTreeMap<String, u64>> {
        let o = self.lab.exec_ok(g, "rdstool info counters", T).ok()?;
        Some(
            o.stdout
                .lines()
                .filter_map(|l| {
                    let (name, v) = l.split_once(' ')?;
                    Some((name.to_string(), v.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// Keeps a qperf bandwidth figure, or its failure as a note (printed at once).
    fn record_bw(&mut self, i: usize, who: BwWho, what: &str, r: Result<f64>) {
        match r {
            Ok(mb) => {
                self.res
                    .notes
                    .push(format!("qperf g1 -> g2 {what}: {mb:.1} MB/s"));
                self.res.bw.insert((i, who), mb);
            }
            Err(e) => {
                eprintln!("qperf {what} FAILED: {e:#}");
                self.res.bw_notes.push(format!("{what}: FAILED: {e:#}"));
            }
        }
    }

    /// The kernel's and TCP's qperf bandwidth rows between the guests: at each size `tcp_bw`,
    /// then `rds_bw` on the kernel's RDS/TCP, against one qperf server in g2, with the changes
    /// of both kernels' congestion, drop and delivery counters over each `rds_bw` run. A run
    /// that fails is a note; the others go on.
    fn qperf_kernel_rows(&mut self) {
        let limit = self.limit() * (2 * BW_SIZES.len() as u32 + 1);
        let server = match self.lab.spawn(2, "exec qperf 2>&1", limit) {
            Ok(s) => s,
            Err(e) => {
                self.res
                    .bw_notes
                    .push(format!("kernel and tcp rows: no qperf server in g2: {e:#}"));
                return;
            }
        };
        for (i, (name, opts, tcp_opts)) in BW_SIZES.iter().enumerate() {
            let r = self
                .qperf_bw("", "tcp_bw", tcp_opts, None)
                .map(|(mb, _)| mb);
            self.record_bw(i, BwWho::Tcp, &format!("tcp_bw {name}"), r);
            let before = [self.kernel_counters(1), self.kernel_counters(2)];
            let r = self.qperf_bw("", "rds_bw", opts, None).map(|(mb, _)| mb);
            let what = format!("kernel rds_bw {name}");
            self.record_bw(i, BwWho::Kernel, &what, r);
            let after = [self.kernel_counters(1), self.kernel_counters(2)];
            let mut moved = Vec::new();
            for g in 0..2 {
                let (Some(b), Some(a)) = (&before[g], &after[g]) else {
                    moved.push(format!("g{}: no counters", g + 1));
                    continue;
                };
                let d: Vec<String> = a
                    .iter()
                    .filter(|(n, _)| {
                        [
                            "cong",
                            "queue_full",
                            "drop",
                            "retry",
                            "delivered",
                            "reset",
                            "stuck",
                        ]
                        .iter()
                        .any(|k| n.contains(k))
                    })
                    .filter_map(|(n, v)| {
                        let d = v.checked_sub(*b.get(n)?)?;
                        (d > 0).then(|| format!("{n} +{d}"))
                    })
                    .collect();
                moved.push(format!("g{}: {}", g + 1, d.join(", ")));
            }
            self.res.notes.push(format!(
                "  kernel counters over {what}: {}",
                moved.join("; ")
            ));
        }
        server.kill();
        let _ = server.wait();
    }

    /// Copies our preload library into both guests and deletes their `rxe0` (our nodes take
    /// RDS/IB on an address of an RDMA device, as the kernel's does with `rds_rdma`; the
    /// kernel's rows ran on RDS/TCP); checks that the kernel has no RDS any more (else the
    /// library's sockets would bind on the kernel's RDS, and its port 16385 is ours now).
    fn preload_setup(&self) -> Result<()> {
        let path = release_bin("librds_preload.so")?;
        let lib = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        for g in 1..=2 {
            self.lab.write_share(g, "librds_preload.so", &lib)?;
            self.lab
                .exec_ok(
                    g,
                    "! grep -q '^RDS ' /proc/net/protocols && rdma link delete rxe0 \
                     && ! rdma link show | grep -q rxe0",
                    T,
                )
                .with_context(|| format!("g{g}: no kernel RDS, rxe0 deleted"))?;
        }
        Ok(())
    }

    /// Ours: qperf `rds_bw` preloaded with our library in both guests (embedded nodes over
    /// RDS/TCP, `RDS_NO_DAEMON=1` as scripts/bench-preload.sh runs it), at each size, with
    /// the number of TCP connections on port 16385 in g2 halfway through each run. What keeps
    /// them from running, or a run that fails, is a note.
    fn qperf_ours_rows(&mut self) {
        if let Err(e) = self.preload_setup() {
            self.res
                .bw_notes
                .push(format!("ours (preloaded rds_bw): not run: {e:#}"));
            return;
        }
        let limit = self.limit() * (BW_SIZES.len() as u32 + 1);
        let server = match self
            .lab
            .spawn(2, &format!("{PRELOAD_ENV} exec qperf 2>&1"), limit)
        {
            Ok(s) => s,
            Err(e) => {
                self.res.bw_notes.push(format!(
                    "ours (preloaded rds_bw): no preloaded qperf server in g2: {e:#}"
                ));
                return;
            }
        };
        let probe = "ss -Htn state established '( sport = :16385 or dport = :16385 )' | wc -l";
        for (i, (name, opts, _)) in BW_SIZES.iter().enumerate() {
            let what = format!("ours (preloaded) rds_bw {name}");
            let r = self.qperf_bw(PRELOAD_ENV, "rds_bw", opts, Some(probe));
            let r = match r {
                Ok((mb, p)) => {
                    self.res.notes.push(format!(
                        "  {what}: TCP connections on port 16385 in g2 halfway: {}",
                        p.unwrap_or_default()
                    ));
                    Ok(mb)
                }
                Err(e) => Err(e.context(format!(
                    "qperf server (g2) so far:\n{}",
                    server.stdout_so_far()
                ))),
            };
            self.record_bw(i, BwWho::Ours, &what, r);
        }
        server.kill();
        let _ = server.wait();
    }

    /// Keeps a run's figure, or its failure (printed at once; the other runs go on).
    fn record(&mut self, place: Place, i: usize, who: Who, r: Result<f64>) {
        match r {
            Ok(tx) => {
                self.res.tx.insert((place, i, who), tx);
            }
            Err(e) => {
                eprintln!("FAILED: {e:#}");
                self.res.failures.push(format!("{e:#}"));
            }
        }
    }

    /// The kernel rows: C rds-stress on the kernel's RDS/TCP (and its loopback transport).
    fn kernel(&mut self) -> Result<()> {
        let (g1, g2) = (guest_addr(1), guest_addr(2));
        // Warm-up: RDS pings bring the kernel's connection g1 -> g2 up and finish its
        // multipath handshake first (the loopback transport has one lane, and does not answer
        // pings).
        let ping = kernel_warmup(self.lab)?;
        self.res
            .notes
            .push(format!("kernel warm-up {g1} -> {g2}: {ping}"));
        let [c1, c2] = self.progs.c.clone();
        let secs = self.secs;
        for (i, pat) in PATTERNS.iter().enumerate() {
            let who = format!("kernel, two guests, {}", pat.name);
            let run = |b: &mut Self| {
                b.pair(
                    &who,
                    (2, &format!("{c2} -r {g2} -p {{P}}")),
                    (
                        1,
                        &format!("{c1} -r {g1} -s {g2} -p {{P}} {} -T {secs}", pat.args),
                    ),
                )
            };
            let tx = if pat.profiled {
                let who = format!("{}: kernel RDS/TCP (C rds-stress)", pat.name);
                self.profiled(&who, run)
            } else {
                run(self)
            };
            self.record(Place::TwoGuests, i, Who::Kernel, tx);
        }
        match self.tcp_reference() {
            Ok(us) => self.res.tcp_rtt_us = Some(us),
            Err(e) => self.res.notes.push(format!("no qperf reference: {e:#}")),
        }
        self.qperf_kernel_rows();
        for (i, pat) in PATTERNS.iter().enumerate() {
            let tx = self.pair(
                &format!("kernel, one guest, {}", pat.name),
                (1, &format!("{c1} -r {G1B} -p {{P}}")),
                (
                    1,
                    &format!("{c1} -r {g1} -s {G1B} -p {{P}} {} -T {secs}", pat.args),
                ),
            );
            self.record(Place::OneGuest, i, Who::Kernel, tx);
        }
        // LADDR FADDR NEXT_TX NEXT_RX TRANSPORT FLAGS TOS
        let conns = self.lab.exec_ok(1, "rdstool info conns", T)?.stdout;
        let lo = conns
            .lines()
            .find(|l| l.starts_with(&format!("{g1} {G1B} ")))
            .with_context(|| format!("g1's kernel lists no connection {g1} -> {G1B}:\n{conns}"))?;
        ensure!(
            lo.contains(" loopback "),
            "g1's kernel connection {g1} -> {G1B} is not on the loopback transport: {lo}"
        );
        self.res
            .notes
            .push(format!("kernel g1 connection (rdstool info conns): {lo}"));
        Ok(())
    }

    /// The daemon's `recv_delivered` (`rds-ctrl stats --json` in g1).
    fn daemon_delivered(&self) -> Result<u64> {
        let out = self
            .lab
            .exec_ok(1, &format!("{ENV} {} stats --json", self.progs.ctrl), T)?
            .stdout;
        let v: serde_json::Value = serde_json::from_str(&out)
            .with_context(|| format!("rds-ctrl stats --json is not JSON:\n{out}"))?;
        v["recv_delivered"]
            .as_u64()
            .with_context(|| format!("no recv_delivered in rds-ctrl stats --json:\n{out}"))
    }

    /// Our rows: embedded nodes g1 <-> g2, `--loopback` in g1, then the daemon in g1.
    fn ours(&mut self) -> Result<()> {
        let (g1, g2) = (guest_addr(1), guest_addr(2));
        let [s1, s2] = self.progs.ours.clone();
        let secs = self.secs;
        for (i, pat) in PATTERNS.iter().enumerate() {
            let who = format!("ours, two guests (embedded nodes), {}", pat.name);
            let run = |b: &mut Self| {
                b.pair(
                    &who,
                    (2, &format!("{} -r {g2} -p {{P}}", embedded_stress(&s2))),
                    (
                        1,
                        &format!(
                            "{} -r {g1} -s {g2} -p {{P}} {} -T {secs}",
                            embedded_stress(&s1),
                            pat.args
                        ),
                    ),
                )
            };
            let tx = if pat.profiled {
                let who = format!("{}: ours, embedded nodes (our rds-stress)", pat.name);
                self.profiled(&who, run)
            } else {
                run(self)
            };
            self.record(Place::TwoGuests, i, Who::Ours, tx);
        }
        for (i, pat) in PATTERNS.iter().enumerate() {
            let tx = self.single(
                &format!("ours --loopback, one guest, {}", pat.name),
                1,
                &format!(
                    "{ENV} RDS_NO_DAEMON=1 {s1} --loopback -r {g1} -s {G1B} -p {{P}} {} -T {secs}",
                    pat.args
                ),
            );
            self.record(Place::OneGuest, i, Who::Loopback, tx);
        }
        // The daemon owns both addresses; every run below is two of its clients.
        let limit = self.limit() * (PATTERNS.len() as u32 + 2);
        let d = self.lab.spawn(
            1,
            &format!(
                "{ENV} exec {} daemon tcp --addr {g1} --addr {G1B} 2>&1",
                self.progs.ctrl
            ),
            limit,
        )?;
        let ready = d.wait_for_output("started:", T);
        self.daemon = Some(d);
        ready.context("rds-ctrl daemon in g1")?;
        let before = self.daemon_delivered()?;
        for (i, pat) in PATTERNS.iter().enumerate() {
            let tx = self.pair(
                &format!("ours, one guest (daemon clients), {}", pat.name),
                (1, &format!("{ENV} {s1} --stack user -r {G1B} -p {{P}}")),
                (
                    1,
                    &format!(
                        "{ENV} {s1} --stack user -r {g1} -s {G1B} -p {{P}} {} -T {secs}",
                        pat.args
                    ),
                ),
            );
            self.record(Place::OneGuest, i, Who::Ours, tx);
        }
        let after = self.daemon_delivered()?;
        ensure!(
            after > before,
            "the daemon delivered nothing during the daemon rows ({before} -> {after})"
        );
        self.res.notes.push(format!(
            "daemon in g1: recv_delivered {before} -> {after} over the daemon rows"
        ));
        self.lab
            .exec_ok(1, &format!("{ENV} {} unload", self.progs.ctrl), T)
            .context("rds-ctrl unload")?;
        if let Some(d) = self.daemon.take() {
            let o = d.wait()?;
            ensure!(
                o.status == 0,
                "the daemon exited with {}:\n{}",
                o.status,
                o.stdout
            );
        }
        Ok(())
    }
}

/// The figure of qperf's line `name  =  value unit` (the first line whose first word is
/// `name`, so `bw` skips `send_bw`), scaled by what `scale` gives for its unit (`None`: a unit
/// it does not know, and the line is skipped).
fn qperf_figure(out: &str, name: &str, scale: impl Fn(&str) -> Option<f64>) -> Option<f64> {
    out.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != name || w.next()? != "=" {
            return None;
        }
        let v: f64 = w.next()?.parse().ok()?;
        Some(v * scale(w.next()?)?)
    })
}

/// qperf's `latency  =  1.23 ms` (or ns, us, sec) in microseconds.
fn qperf_latency_us(out: &str) -> Option<f64> {
    qperf_figure(out, "latency", |unit| match unit {
        "ns" => Some(1e-3),
        "us" => Some(1.0),
        "ms" => Some(1e3),
        "sec" | "s" => Some(1e6),
        _ => None,
    })
}

/// qperf's `bw  =  152 MB/sec` (or bytes/sec, KB/sec, GB/sec) in MB/s (10^6 bytes/s).
fn qperf_bw_mb_s(out: &str) -> Option<f64> {
    qperf_figure(out, "bw", |unit| match unit {
        "bytes/sec" => Some(1e-6),
        "KB/sec" => Some(1e-3),
        "MB/sec" => Some(1.0),
        "GB/sec" => Some(1e3),
        _ => None,
    })
}

/// Where the time of the profiled two-guest rows goes: the wire profiles and the TCP reference.
fn profiles(res: &Results) -> String {
    let mut s = String::from(
        "two guests, from a capture on the lab bridge (g1 requests, g2 answers; a turnaround is \
         the time from the last packet in to the first packet out of that guest; with -d 4 a \
         turn holds several requests):\n",
    );
    for (who, p, cpu) in &res.profiles {
        s += &format!("  {who}: {p}\n");
        for (g, c) in cpu.iter().enumerate() {
            if let Some(c) = c {
                s += &format!("    g{} CPU over the run: {c}\n", g + 1);
            }
        }
    }
    if let Some(us) = res.tcp_rtt_us {
        s += &format!("  qperf tcp_lat round trip (2 x its latency): {us:.0} us\n");
    }
    s
}

/// The table: one line per row, with ratio and target.
fn table(res: &Results) -> String {
    let mut s = format!(
        "{:<52} {:>12} {:>12} {:>8}  {}\n",
        "row", "kernel req/s", "ours req/s", "ours/k", "target"
    );
    let fig = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
    let mut line = |name: String, k: Option<f64>, o: Option<f64>, target: Option<f64>| {
        let ratio = match (k, o) {
            (Some(k), Some(o)) if k > 0.0 => Some(o / k),
            _ => None,
        };
        let verdict = match (target, ratio) {
            (Some(t), Some(r)) => {
                format!(">= {t} {}", if r >= t { "met" } else { "NOT met" })
            }
            (Some(t), None) => format!(">= {t} (no figure)"),
            (None, _) => "(informational)".to_string(),
        };
        s += &format!(
            "{name:<52} {:>12} {:>12} {:>8}  {verdict}\n",
            fig(k),
            fig(o),
            ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
        );
    };
    let get = |p, i, w| res.tx.get(&(p, i, w)).copied();
    for (i, pat) in PATTERNS.iter().enumerate() {
        line(
            format!("two guests, TCP, {}", pat.name),
            get(Place::TwoGuests, i, Who::Kernel),
            get(Place::TwoGuests, i, Who::Ours),
            pat.two,
        );
    }
    for (i, pat) in PATTERNS.iter().enumerate() {
        line(
            format!("one guest, two addresses, {} (daemon)", pat.name),
            get(Place::OneGuest, i, Who::Kernel),
            get(Place::OneGuest, i, Who::Ours),
            pat.one,
        );
        line(
            format!("one guest, {}, ours --loopback (1 process)", pat.name),
            get(Place::OneGuest, i, Who::Kernel),
            get(Place::OneGuest, i, Who::Loopback),
            None,
        );
    }
    s
}

/// The qperf bandwidth rows between the guests: per size kernel, tcp and ours in MB/s with
/// their ratios and issue 32's target for ours/tcp, then the notes of those rows.
fn bw_table(res: &Results, secs: u64) -> String {
    let mut s = format!(
        "qperf between the guests (g1 client, g2 server, -t {secs}), MB/s = 10^6 bytes/s; kernel = \
         rds_bw on the kernel's RDS/TCP, tcp = tcp_bw, ours = rds_bw preloaded with \
         librds_preload.so in both guests (embedded nodes, RDS/TCP):\n{:<22} {:>11} {:>9} \
         {:>10} {:>9} {:>8} {:>9}  {}\n",
        "size", "kernel MB/s", "tcp MB/s", "kernel/tcp", "ours MB/s", "ours/tcp", "ours/kern",
        "target (ours/tcp)"
    );
    let fig = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let rfig = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
    for (i, (name, _, _)) in BW_SIZES.iter().enumerate() {
        let get = |w| res.bw.get(&(i, w)).copied();
        let (k, t, o) = (get(BwWho::Kernel), get(BwWho::Tcp), get(BwWho::Ours));
        let verdict = match ratio(o, t) {
            Some(r) => format!(
                ">= {BW_TARGET} {}",
                if r >= BW_TARGET { "met" } else { "NOT met" }
            ),
            None => format!(">= {BW_TARGET} (no figure)"),
        };
        s += &format!(
            "{name:<22} {:>11} {:>9} {:>10} {:>9} {:>8} {:>9}  {verdict}\n",
            fig(k),
            fig(t),
            rfig(ratio(k, t)),
            fig(o),
            rfig(ratio(o, t)),
            rfig(ratio(o, k))
        );
    }
    for n in &res.bw_notes {
        s += &format!("  note: {n}\n");
    }
    s
}

/// Copies the programs into the guests' shares and adds g1's second address.
fn install(lab: &Lab, c: &[u8]) -> Result<Progs> {
    let ours = std::fs::read(our_rds_stress()?).context("reading our rds-stress")?;
    let ctrl_path = release_bin("rds-ctrl")?;
    let ctrl =
        std::fs::read(&ctrl_path).with_context(|| format!("reading {}", ctrl_path.display()))?;
    let progs = Progs {
        c: [
            lab.write_share(1, "c-rds-stress", c)?,
            lab.write_share(2, "c-rds-stress", c)?,
        ],
        ours: [
            lab.write_share(1, "rds-stress", &ours)?,
            lab.write_share(2, "rds-stress", &ours)?,
        ],
        ctrl: lab.write_share(1, "rds-ctrl", &ctrl)?,
    };
    lab.exec_ok(1, &format!("ip addr add {G1B}/24 dev eth0"), T)
        .context("adding g1's second address")?;
    Ok(progs)
}

/// The benchmark: issue 19's one-CPU rows, kernel and ours, in one lab boot; prints the
/// table. Needs root and `RDS_TOOLS_GIT`; run by `scripts/bench-lab-app-path.sh`.
#[test]
#[ignore = "benchmark: scripts/bench-lab-app-path.sh (root, RDS_TOOLS_GIT)"]
fn bench_lab_app_path() {
    let secs = bench_secs(DEFAULT_SECS).unwrap_or_else(|e| panic!("{e:#}"));
    // Everything that can fail without the lab first.
    our_rds_stress().unwrap_or_else(|e| panic!("{e:#}"));
    release_bin("rds-ctrl").unwrap_or_else(|e| panic!("{e:#}"));
    let c_path = c_rds_stress(C_VERSION).unwrap_or_else(|e| panic!("{e:#}"));
    let c = std::fs::read(&c_path).unwrap_or_else(|e| panic!("reading {}: {e}", c_path.display()));
    let (captures, tmp) = captures_dir().unwrap_or_else(|e| panic!("{e:#}"));
    let t0 = Instant::now();
    let lab = Lab::boot_without_rds_rdma(2);
    let progs = match install(&lab, &c) {
        Ok(p) => p,
        Err(e) => panic!("installing the programs in the guests: {e:#}"),
    };
    let mut b = Bench {
        lab: &lab,
        secs,
        next_port: PORT_BASE,
        progs,
        res: Results::default(),
        daemon: None,
        captures,
        _tmp: tmp,
    };
    let phase = |name: &str, r: Result<()>| rds_tests::report_phase(name, t0, r);
    let mut r = phase("kernel rows", b.kernel());
    if r.is_ok() {
        r = phase("unloading the kernel's RDS", unload_kernel_rds(&lab));
    }
    let unloaded = r.is_ok();
    if r.is_ok() {
        r = phase("our rows", b.ours());
    }
    // Last: it deletes the guests' rxe0. Its failures are notes (in the qperf table).
    if !unloaded {
        b.res
            .bw_notes
            .push("ours (preloaded rds_bw): not run: the kernel's RDS was not removed".into());
    } else if b.daemon.is_some() {
        b.res.bw_notes.push(
            "ours (preloaded rds_bw): not run: our daemon in g1 is still up after a failure".into(),
        );
    } else {
        b.qperf_ours_rows();
        println!(
            "qperf rds_bw preloaded (ours): done after {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    if let Err(e) = &r {
        eprintln!("FAILED: {e:#}");
        if let Some(d) = b.daemon.take() {
            eprintln!("--- daemon in g1 ---\n{}", d.stdout_so_far());
            d.kill();
        }
        for g in 1..=2 {
            if let Ok(o) = lab.exec(
                g,
                "dmesg | tail -n 20; lsmod | grep rds; rdstool info conns",
                T,
            ) {
                eprintln!("--- g{g} ---\n{}{}", o.stdout, o.stderr);
            }
        }
    }
    let res = std::mem::take(&mut b.res);
    let table = table(&res) + "\n" + &bw_table(&res, secs) + "\n" + &profiles(&res);
    drop(b);
    lab.stop().expect("lab stop");
    for n in &res.notes {
        println!("{n}");
    }
    println!(
        "\nissue 19, one CPU: qemu TCG, 1 vCPU per guest, Debian 6.1 kernel; kernel = C \
         rds-stress {C_VERSION} on the kernel's RDS, ours = our rds-stress (embedded nodes \
         between the guests, the daemon's clients in one guest); -T {secs}, (average) tx/s of \
         the active side; total {:.1} s\n{table}",
        t0.elapsed().as_secs_f64()
    );
    if let Err(e) = r {
        panic!("bench_lab_app_path failed: {e:#}");
    }
    assert!(
        res.failures.is_empty(),
        "bench_lab_app_path: {} run(s) failed:\n{}",
        res.failures.len(),
        res.failures.join("\n")
    );
}

#[test]
fn qperf_latency_in_microseconds() {
    let out = "tcp_lat:\n    latency  =  1.93 ms\n";
    assert_eq!(qperf_latency_us(out), Some(1930.0));
    assert_eq!(
        qperf_latency_us("tcp_lat:\n    latency  =  29.8 us\n"),
        Some(29.8)
    );
    assert_eq!(
        qperf_latency_us("tcp_lat:\n    latency  =  2 parsecs\n"),
        None
    );
    assert_eq!(qperf_latency_us("failed to connect"), None);
}

#[test]
fn qperf_bw_in_megabytes_per_second() {
    let out = "rds_bw:\n    bw  =  152 MB/sec\n";
    assert_eq!(qperf_bw_mb_s(out), Some(152.0));
    assert_eq!(
        qperf_bw_mb_s("tcp_bw:\n    bw  =  1.5 GB/sec\n"),
        Some(1500.0)
    );
    assert_eq!(
        qperf_bw_mb_s("rds_bw:\n    bw  =  880 KB/sec\n"),
        Some(0.88)
    );
    assert_eq!(
        qperf_bw_mb_s("rds_bw:\n    bw  =  0 bytes/sec\n"),
        Some(0.0)
    );
    // -v adds send_bw and recv_bw lines; only bw counts.
    assert_eq!(
        qperf_bw_mb_s("rds_bw:\n    send_bw  =  9 MB/sec\n    bw  =  8 MB/sec\n"),
        Some(8.0)
    );
    assert_eq!(qperf_bw_mb_s("rds_bw:\n    bw  =  2 furlongs\n"), None);
    assert_eq!(qperf_bw_mb_s("failed to connect"), None);
}

/// Reads a capture kept by `BENCH_CAPTURES` again: `BENCH_PCAP=FILE cargo test --release -p
/// rds-tests --test bench_lab_app_path -- --ignored --nocapture profile_pcap` prints its
/// profile (g1 requests, g2 answers; `BENCH_PROTO=roce` for a RoCE capture of bench-ib.sh,
/// where g2 requests).
#[test]
#[ignore = "tool: reads BENCH_PCAP"]
fn profile_pcap() {
    let file = PathBuf::from(std::env::var_os("BENCH_PCAP").expect("BENCH_PCAP names a pcap"));
    let roce = std::env::var("BENCH_PROTO").is_ok_and(|p| p == "roce");
    let (proto, a, b) = if roce {
        (Proto::Roce, guest_addr(2), guest_addr(1))
    } else {
        (Proto::Tcp, guest_addr(1), guest_addr(2))
    };
    let p = read_pcap(proto, &file)
        .and_then(|pkts| profile_packets(&pkts, a, b, 10))
        .unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
    println!("{}: {p}", file.display());
}
