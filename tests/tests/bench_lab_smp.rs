//! Benchmark (not a CI test; run by `scripts/bench-lab-smp.sh`): issue 32's row `rds-stress
//! -t 2 -d 32` (64-byte requests and acks, 2 tasks, 32 outstanding each; target ours >= 0.5x
//! raw TCP) with the kernel's own RDS as the reference, in one lab boot of two qemu TCG
//! guests with TWO vCPUs each (`LAB_SMP=2`; the other lab benchmarks boot one), Debian's 6.1
//! kernel, booted without `rds_rdma` (`--ib=0`). Also `-t 1 -d 1` for context.
//!
//! Every run is between the guests over TCP, g1 (198.18.0.2, active) to g2 (198.18.0.4,
//! passive), `-T 5` (`BENCH_SECS` overrides), three programs per pattern:
//! - kernel: the original C rds-stress (oracle/rds-tools 2.0.7, built statically by
//!   `tests/lab/build-c-rds-stress.sh`, which needs `RDS_TOOLS_GIT`) on the kernel's
//!   `rds_tcp` in both guests;
//! - raw TCP: the `raw_tcp` example of rds-stress (`--listen` in g2, `--connect` in g1), the
//!   same traffic pattern over plain TCP sockets: tasks² flows, `depth` requests outstanding
//!   per flow in both directions, each request answered by an ack;
//! - ours: our rds-stress in both guests, each an embedded node on RDS/TCP
//!   (`RDS_NO_DAEMON=1 --stack user --transport tcp`, as `bench_lab_app_path.rs` runs it),
//!   after the kernel's `rds_tcp` and `rds` are removed from both guests (ours and the kernel
//!   cannot both listen on port 16385).
//!
//! Order in the boot: the kernel's and raw TCP's runs of each pattern, then the kernel's RDS is
//! removed, then ours. The figure of each run is the active side's requests per second: the
//! `(average)` line's tx/s of rds-stress, `tx_per_sec` of raw_tcp (requests sent by g1, as
//! rds-stress's tx/s). Notes under the table: each run's command and lines, and where the CPU
//! went over it in each guest (`/proc/stat`: all vCPUs and each) and on the host (the threads
//! of the guest's qemu; multi-threaded TCG, qemu's default for an x86 guest on an x86 host,
//! runs one thread per vCPU). The host has two cores for two 2-vCPU guests: the ratios within
//! one boot are what count. No timing assertion: the benchmark fails only when a run fails (a
//! non-zero exit status, no figure in its output, a guest command over its time limit), or
//! when a guest does not see two CPUs.
//!
//! Results (2026-11-29, the worktree's code at this commit; the 2-core development VM, TCG,
//! 2 vCPUs and 768 MB per guest; `-T 5`; three runs of 82-93 s each, boot included; the
//! second and third overlapped with other cargo builds on the host, load average up to 4.9):
//!
//! ```text
//! run  pattern      kernel req/s  raw TCP req/s  ours req/s  kernel/raw  ours/raw  ours/kernel
//! 1    -t 2 -d 32            949           7998        3585        0.12      0.45         3.78
//! 1    -t 1 -d 1             207            381         168        0.54      0.44         0.81
//! 2    -t 2 -d 32           1304          11622        2950        0.11      0.25         2.26
//! 2    -t 1 -d 1             123            200         127        0.61      0.64         1.03
//! 3    -t 2 -d 32            979           7336        3112        0.13      0.42         3.18
//! 3    -t 1 -d 1              86            134          87        0.64      0.65         1.01
//! ```
//!
//! Both guests saw 2 CPUs (nproc, /proc/cpuinfo) and used both: per-vCPU busy shares within ten
//! points of each other in every run, and two qemu threads per guest busy (about 25-40% of
//! the wall time each; the host's two cores are shared by four vCPU threads). At `-t 2 -d 32`
//! the kernel's RDS/TCP stays about 0.1x of raw TCP (average RTT 79-112 ms against ours'
//! 32-39 ms), the guests' CPUs half idle: ours is 2.3-3.8x the kernel but 0.25-0.45x raw TCP,
//! under issue 32's 0.5. The depth-1 figures follow the host's load (raw TCP 381 -> 134 req/s
//! over the three runs); within each run ours was 0.8-1.0x the kernel.

use anyhow::{ensure, Context, Result};
use rds_tests::ib::release_bin;
use rds_tests::lab::{guest_addr, Lab, LabOptions};
use rds_tests::labbench::{
    bench_secs, clk_tck, embedded_stress, kernel_warmup, run_pair, unload_kernel_rds, GuestCpu,
    SHORT,
};
use rds_tests::stress::{average, c_rds_stress, our_rds_stress, TX_PER_SEC};
use std::collections::BTreeMap;
use std::time::Instant;

/// The C rds-stress version (the one the lab's interop test calls the original).
const C_VERSION: &str = "2.0.7";
/// vCPUs per guest.
const SMP: u32 = 2;
/// First control port; every run takes a fresh block of ten (rds-stress's tasks use port+1..).
const PORT_BASE: u16 = 4800;
const DEFAULT_SECS: u64 = 5;
/// Issue 32's target for ours/raw TCP in its `-t 2 -d 32` row.
const TARGET: f64 = 0.5;

/// One traffic pattern: rds-stress's options and raw_tcp's `REQ ACK DEPTH TASKS`.
struct Pattern {
    name: &'static str,
    stress: &'static str,
    raw: &'static str,
    /// Issue 32's target (ours/raw) applies to it.
    target: bool,
}

const PATTERNS: [Pattern; 2] = [
    Pattern {
        name: "-t 2 -d 32",
        stress: "-q 64 -a 64 -t 2 -d 32",
        raw: "64 64 32 2",
        target: true,
    },
    Pattern {
        name: "-t 1 -d 1",
        stress: "-q 64 -a 64 -t 1 -d 1",
        raw: "64 64 1 1",
        target: false,
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    /// C rds-stress on the kernel's RDS/TCP.
    Kernel,
    /// raw_tcp between the guests.
    Raw,
    /// Our rds-stress, embedded nodes on RDS/TCP.
    Ours,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Kernel => "kernel (C rds-stress, kernel RDS/TCP)",
            Who::Raw => "raw TCP (raw_tcp)",
            Who::Ours => "ours (our rds-stress, embedded nodes, RDS/TCP)",
        }
    }
}

/// Guest paths of the programs, in g1 and g2.
struct Progs {
    c: [String; 2],
    ours: [String; 2],
    raw: [String; 2],
}

struct Bench<'a> {
    lab: &'a Lab,
    secs: u64,
    next_port: u16,
    progs: Progs,
    clk_tck: u64,
    /// The active side's requests per second, by (pattern index, who).
    tx: BTreeMap<(usize, Who), f64>,
    notes: Vec<String>,
    /// Runs that failed (the others still ran).
    failures: Vec<String>,
}

impl Bench<'_> {
    /// The (passive in g2, active in g1) commands of `who` for pattern `pat` on `port`.
    fn commands(&self, who: Who, pat: &Pattern, port: u16) -> (String, String) {
        let (g1, g2, secs) = (guest_addr(1), guest_addr(2), self.secs);
        let p = &self.progs;
        match who {
            Who::Kernel => (
                format!("{} -r {g2} -p {port}", p.c[1]),
                format!(
                    "{} -r {g1} -s {g2} -p {port} {} -T {secs}",
                    p.c[0], pat.stress
                ),
            ),
            Who::Raw => (
                format!("{} {} {secs} --listen {g2}:{port}", p.raw[1], pat.raw),
                format!("{} {} {secs} --connect {g2}:{port}", p.raw[0], pat.raw),
            ),
            Who::Ours => (
                format!("{} -r {g2} -p {port}", embedded_stress(&p.ours[1])),
                format!(
                    "{} -r {g1} -s {g2} -p {port} {} -T {secs}",
                    embedded_stress(&p.ours[0]),
                    pat.stress
                ),
            ),
        }
    }

    /// Reads both guests' CPU counters; `None` (with a note) when one cannot be read.
    fn cpu(&mut self) -> Option<[GuestCpu; 2]> {
        match (GuestCpu::read(self.lab, 1), GuestCpu::read(self.lab, 2)) {
            (Ok(a), Ok(b)) => Some([a, b]),
            (Err(e), _) | (_, Err(e)) => {
                self.notes.push(format!("  no CPU counters: {e:#}"));
                None
            }
        }
    }

    /// One run of `who` at pattern `i`; returns the active side's requests per second.
    fn run(&mut self, who: Who, i: usize) -> Result<f64> {
        let pat = &PATTERNS[i];
        let port = self.next_port;
        self.next_port += 10;
        let (pcmd, acmd) = self.commands(who, pat, port);
        let what = format!("{}, {}", who.name(), pat.name);
        let before = self.cpu();
        let limit = std::time::Duration::from_secs(self.secs + 60);
        let (a, p) = run_pair(self.lab, &what, (2, &pcmd), (1, &acmd), port, limit)?;
        let after = self.cpu();
        self.notes.push(format!("{what}: g1$ {acmd}"));
        let tx = if who == Who::Raw {
            let line = a
                .stdout
                .lines()
                .find(|l| l.starts_with("tx_per_sec="))
                .with_context(|| format!("{what}: no tx_per_sec line in:\n{}", a.stdout))?;
            self.notes.push(format!("  active  {line}"));
            raw_tx_per_sec(line).with_context(|| format!("{what}: bad line {line:?}"))?
        } else {
            let (line, row) = average(&a.stdout).with_context(|| format!("{what}: active side"))?;
            let (pline, _) = average(&p.stdout).with_context(|| format!("{what}: passive side"))?;
            self.notes.push(format!("  active  {line}"));
            self.notes.push(format!("  passive {pline}"));
            row[TX_PER_SEC]
        };
        if let (Some(b), Some(a)) = (before, after) {
            for g in 0..2 {
                self.notes.push(format!(
                    "  g{} CPU over the run: {}",
                    g + 1,
                    b[g].report(&a[g], self.clk_tck)
                ));
            }
        }
        Ok(tx)
    }

    /// Keeps a run's figure, or its failure (printed at once; the other runs go on).
    fn record(&mut self, who: Who, i: usize) {
        match self.run(who, i) {
            Ok(tx) => {
                self.tx.insert((i, who), tx);
            }
            Err(e) => {
                eprintln!("FAILED: {e:#}");
                self.failures.push(format!("{e:#}"));
            }
        }
    }

    /// The kernel's and raw TCP's runs of every pattern (the kernel's RDS loaded).
    fn kernel_and_raw(&mut self) -> Result<()> {
        let ping = kernel_warmup(self.lab)?;
        self.notes
            .push(format!("kernel warm-up ping g1 -> g2: {ping}"));
        for i in 0..PATTERNS.len() {
            self.record(Who::Kernel, i);
            self.record(Who::Raw, i);
        }
        Ok(())
    }

    /// Our runs of every pattern (the kernel's RDS removed).
    fn ours(&mut self) {
        for i in 0..PATTERNS.len() {
            self.record(Who::Ours, i);
        }
    }
}

/// The figure of raw_tcp's `tx_per_sec=<f> kib_per_sec=<f>`.
fn raw_tx_per_sec(line: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("tx_per_sec="))?
        .parse()
        .ok()
}

/// The table: per pattern the three figures and their ratios, then issue 32's target.
fn table(tx: &BTreeMap<(usize, Who), f64>) -> String {
    let mut s = format!(
        "{:<12} {:>13} {:>14} {:>11} {:>11} {:>9} {:>12}\n",
        "pattern",
        "kernel req/s",
        "raw TCP req/s",
        "ours req/s",
        "kernel/raw",
        "ours/raw",
        "ours/kernel"
    );
    let fig = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let rfig = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
    let mut verdicts = Vec::new();
    for (i, pat) in PATTERNS.iter().enumerate() {
        let get = |w| tx.get(&(i, w)).copied();
        let (k, r, o) = (get(Who::Kernel), get(Who::Raw), get(Who::Ours));
        s += &format!(
            "{:<12} {:>13} {:>14} {:>11} {:>11} {:>9} {:>12}\n",
            pat.name,
            fig(k),
            fig(r),
            fig(o),
            rfig(ratio(k, r)),
            rfig(ratio(o, r)),
            rfig(ratio(o, k))
        );
        if pat.target {
            verdicts.push(match ratio(o, r) {
                Some(x) => format!(
                    "issue 32's target for {}: ours/raw >= {TARGET}: {} ({x:.2}); the kernel's \
                     own kernel/raw: {}",
                    pat.name,
                    if x >= TARGET { "met" } else { "NOT met" },
                    rfig(ratio(k, r))
                ),
                None => format!(
                    "issue 32's target for {}: ours/raw >= {TARGET}: no figure",
                    pat.name
                ),
            });
        }
    }
    for v in verdicts {
        s += &v;
        s.push('\n');
    }
    s
}

/// Copies the programs into both guests' shares.
fn install(lab: &Lab, c: &[u8], ours: &[u8], raw: &[u8]) -> Result<Progs> {
    let both = |name: &str, bytes: &[u8]| -> Result<[String; 2]> {
        Ok([
            lab.write_share(1, name, bytes)?,
            lab.write_share(2, name, bytes)?,
        ])
    };
    Ok(Progs {
        c: both("c-rds-stress", c)?,
        ours: both("rds-stress", ours)?,
        raw: both("raw_tcp", raw)?,
    })
}

/// What each guest says about its CPUs; fails unless each sees [`SMP`] of them.
fn guest_cpus(lab: &Lab) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for g in 1..=2 {
        let o = lab.exec_ok(
            g,
            "nproc; grep -c ^processor /proc/cpuinfo; grep -m1 '^model name' /proc/cpuinfo",
            SHORT,
        )?;
        let l: Vec<&str> = o.stdout.lines().collect();
        ensure!(
            l.first() == Some(&SMP.to_string().as_str()) && l.get(1) == l.first(),
            "g{g} does not see {SMP} CPUs (nproc, /proc/cpuinfo processors, model):\n{}",
            o.stdout
        );
        notes.push(format!(
            "g{g}: nproc {}, /proc/cpuinfo processors {}, {}",
            l[0],
            l[1],
            l.get(2).unwrap_or(&"")
        ));
    }
    Ok(notes)
}

/// Reads a program the benchmark ships to the guests.
fn read_prog(path: std::path::PathBuf, how: &str) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {} ({how}): {e}", path.display()))
}

/// The benchmark: kernel, raw TCP and ours between two 2-vCPU guests in one lab boot; prints
/// the table. Needs root and `RDS_TOOLS_GIT`; run by `scripts/bench-lab-smp.sh`.
#[test]
#[ignore = "benchmark: scripts/bench-lab-smp.sh (root, RDS_TOOLS_GIT)"]
fn bench_lab_smp() {
    let secs = bench_secs(DEFAULT_SECS).unwrap_or_else(|e| panic!("{e:#}"));
    // Everything that can fail without the lab first.
    let ours = read_prog(
        our_rds_stress().unwrap_or_else(|e| panic!("{e:#}")),
        "our rds-stress",
    );
    let raw = read_prog(
        release_bin("examples/raw_tcp").unwrap_or_else(|e| {
            panic!("{e:#} (cargo build --release -p rds-stress --example raw_tcp)")
        }),
        "the raw_tcp example",
    );
    let c = read_prog(
        c_rds_stress(C_VERSION).unwrap_or_else(|e| panic!("{e:#}")),
        "the C rds-stress",
    );
    let t0 = Instant::now();
    let opts = LabOptions {
        ib: false,
        smp: Some(SMP),
        ..LabOptions::default()
    };
    let lab = Lab::start(2, opts).expect("the kernel lab must boot");
    println!("lab booted in {:.1} s", t0.elapsed().as_secs_f64());
    let mut notes = guest_cpus(&lab).unwrap_or_else(|e| panic!("{e:#}"));
    let progs = install(&lab, &c, &ours, &raw)
        .unwrap_or_else(|e| panic!("installing the programs in the guests: {e:#}"));
    let mut b = Bench {
        lab: &lab,
        secs,
        next_port: PORT_BASE,
        progs,
        clk_tck: clk_tck(),
        tx: BTreeMap::new(),
        notes: Vec::new(),
        failures: Vec::new(),
    };
    let phase = |name: &str, r: Result<()>| rds_tests::report_phase(name, t0, r);
    let mut r = phase("kernel and raw TCP runs", b.kernel_and_raw());
    if r.is_ok() {
        r = phase("unloading the kernel's RDS", unload_kernel_rds(&lab));
    }
    if r.is_ok() {
        b.ours();
        println!("our runs: done after {:.1} s", t0.elapsed().as_secs_f64());
    }
    if let Err(e) = &r {
        eprintln!("FAILED: {e:#}");
        for g in 1..=2 {
            if let Ok(o) = lab.exec(
                g,
                "dmesg | tail -n 20; lsmod | grep rds; rdstool info conns",
                SHORT,
            ) {
                eprintln!("--- g{g} ---\n{}{}", o.stdout, o.stderr);
            }
        }
    }
    let (tx, failures) = (std::mem::take(&mut b.tx), std::mem::take(&mut b.failures));
    notes.append(&mut b.notes);
    drop(b);
    lab.stop().expect("lab stop");
    for n in &notes {
        println!("{n}");
    }
    println!(
        "\nissue 32 against the kernel: qemu TCG, {SMP} vCPUs and 768 MB per guest, two guests \
         on a 2-core host, Debian 6.1 kernel; g1 (active) -> g2 over TCP; 64-byte requests and \
         acks, -T {secs}; req/s = the active side's requests per second (rds-stress's (average) \
         tx/s, raw_tcp's tx_per_sec); kernel = C rds-stress {C_VERSION} on the kernel's RDS/TCP, \
         raw TCP = the raw_tcp example, ours = our rds-stress (embedded nodes, RDS/TCP); total \
         {:.1} s\n{}",
        t0.elapsed().as_secs_f64(),
        table(&tx)
    );
    if let Err(e) = r {
        panic!("bench_lab_smp failed: {e:#}");
    }
    assert!(
        failures.is_empty(),
        "bench_lab_smp: {} run(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn raw_tcp_line() {
    assert_eq!(
        raw_tx_per_sec("tx_per_sec=1234.5 kib_per_sec=99.0"),
        Some(1234.5)
    );
    assert_eq!(raw_tx_per_sec("kib_per_sec=99.0"), None);
    assert_eq!(raw_tx_per_sec("tx_per_sec=x"), None);
}

#[test]
fn the_table() {
    let tx: BTreeMap<(usize, Who), f64> = [
        ((0, Who::Kernel), 1000.0),
        ((0, Who::Raw), 4000.0),
        ((0, Who::Ours), 2400.0),
        ((1, Who::Raw), 500.0),
    ]
    .into();
    let t = table(&tx);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4, "{t}");
    assert!(lines[0].starts_with("pattern"), "{t}");
    let w: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        w,
        ["-t", "2", "-d", "32", "1000", "4000", "2400", "0.25", "0.60", "2.40"]
    );
    let w: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(w, ["-t", "1", "-d", "1", "-", "500", "-", "-", "-", "-"]);
    assert_eq!(
        lines[3],
        "issue 32's target for -t 2 -d 32: ours/raw >= 0.5: met (0.60); the kernel's own \
         kernel/raw: 0.25"
    );
}
