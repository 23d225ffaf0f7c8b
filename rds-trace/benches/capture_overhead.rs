//! Throughput cost of a running capture: two nodes on loopback (127.7.9.1 → 127.7.9.2), four
//! sender sockets (several lanes) at full load, bytes delivered per second measured without a
//! capture, with `rds-trace -w FILE` running (default and small snap length), and without again.
//! Prints the ratios (of the medians of the runs) and the trace frames the node dropped, and
//! the CPU time spent per MB delivered (the bench process, i.e. both nodes and the load
//! threads, plus rds-trace), which other load on the machine disturbs less than throughput,
//! with the part of it spent by the capture (the node's trace session and file writer
//! threads, and rds-trace). Not a CI test:
//!
//! ```text
//! cargo bench -p rds-trace --bench capture_overhead
//! RDS_BENCH_SECS=5 RDS_BENCH_SIZES=1024,65536 cargo bench -p rds-trace --bench capture_overhead
//! RDS_BENCH_DIR=/dev/shm cargo bench -p rds-trace --bench capture_overhead
//! ```
//!
//! The capture files go to a temporary directory in `RDS_BENCH_DIR` (default `/tmp`). On a
//! virtual machine, writing to its disk costs the guest CPU time the host takes to emulate the
//! device (counted as steal time), which slows the data path as much as the capture itself;
//! `/dev/shm` (memory) leaves the device out, and `/dev/null` (taken as the file itself) the
//! storage altogether: what is left is the cost of the tap and of making the pcap records.
//! `RDS_BENCH_DIR=-` captures with `-w -` (into rds-trace's standard output, /dev/null): the
//! path of a capture piped to Wireshark, where the node streams the frames to rds-trace.
//!
//! Every phase is bounded in time (`RDS_BENCH_SECS`, default 3 s, plus 0.5 s warm-up);
//! A reference phase runs a busy loop under `SCHED_IDLE` (the capture threads' policy) instead
//! of a capture: what any work on CPU time the traffic leaves costs it on this machine.
//!
//! `RDS_BENCH_PIN=1` runs the traffic on CPU 0 and the capture on CPU 1 (see [`pinned`]).
//!
//! `RDS_BENCH_ROUNDS` (default 2, at most 10) sets how often the phases are interleaved, and
//! `RDS_BENCH_SNAPLENS` (default `262144,128`) which snap lengths are captured with.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

const A: &str = "127.7.9.1";
const B: &str = "127.7.9.2";
const SENDERS: u16 = 4;

/// CPU time (user + system) of a process so far, in clock ticks (`/proc/PID/stat`).
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which ends with the last ')'): state is field 3,
    // utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum()
}

/// Names of the node's capture threads (its trace session and file writer).
const CAPTURE_THREADS: [&str; 2] = ["rds-trace-out", "capture-writer"];

/// CPU time of this process's capture threads.
fn capture_thread_ticks() -> u64 {
    threads_named(&CAPTURE_THREADS)
        .into_iter()
        .map(|t| cpu_ticks(&format!("self/task/{t}")))
        .sum()
}

/// `RDS_BENCH_PIN=1`: the traffic (both nodes and the load threads) runs on CPU 0 only, and
/// the capture (the node's capture threads, rds-trace, the spinner) on CPU 1 only. The traffic
/// then has the same CPU time with and without a capture, and the ratio is what the capture
/// costs the data path itself (the tap, and the memory traffic it shares), as on a machine
/// with a core to spare for the capture.
fn pinned() -> bool {
    std::env::var("RDS_BENCH_PIN").is_ok_and(|v| v == "1")
}

/// Pins thread (or process) `tid` (0: the calling thread) to `cpu`.
fn pin(tid: i32, cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set).unwrap();
}

/// Ids of this process's threads named `names`.
fn threads_named(names: &[&str]) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| names.contains(&c.trim()))
        })
        .filter_map(|t| t.file_name().to_string_lossy().parse().ok())
        .collect()
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// One measured phase: bytes/s delivered and CPU seconds per delivered MB.
#[derive(Clone, Copy)]
struct Rate {
    bps: f64,
    cpu_per_mb: f64,
    /// The part of `cpu_per_mb` spent capturing: the node's trace session and file writer
    /// threads, and rds-trace.
    trace_cpu_per_mb: f64,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn node(name: &str, addr: &str, run: &Path) -> Node {
    std::env::set_var("RDS_RUNTIME_DIR", run);
    let mut cfg = NodeConfig::new([ip(addr)]);
    cfg.name = name.into();
    cfg.ctl = CtlMode::Named(name.into());
    cfg.seed = Some(9);
    Node::start(cfg).unwrap()
}

struct Load {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Senders on A push `size`-byte messages to receivers on B as fast as the stack takes them.
fn start_load(a: &Node, b: &Node, size: usize, base_port: u16) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for i in 0..SENDERS {
        let rx = Socket::with_node(b);
        rx.bind(SocketAddr::new(ip(B), base_port + i)).unwrap();
        rx.set_recv_buffer_size(8 << 20);
        rx.set_read_timeout(Some(Duration::from_millis(100)));
        let (st, by) = (stop.clone(), bytes.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let flags = RecvFlags {
                peek: false,
                trunc: false,
                dontwait: false,
            };
            while !st.load(Ordering::Relaxed) {
                if let Ok(m) = rx.recv_msg(&mut buf, flags) {
                    by.fetch_add(m.len as u64, Ordering::Relaxed);
                }
            }
        }));
        let tx = Socket::with_node(a);
        tx.bind(SocketAddr::new(ip(A), base_port + 100 + i))
            .unwrap();
        tx.set_send_buffer_size(4 << 20);
        tx.set_write_timeout(Some(Duration::from_millis(100)));
        let st = stop.clone();
        let dest = SocketAddr::new(ip(B), base_port + i);
        threads.push(std::thread::spawn(move || {
            let msg = vec![0x5au8; size];
            while !st.load(Ordering::Relaxed) {
                let _ = tx.send_to(&msg, dest);
            }
        }));
    }
    Load {
        stop,
        bytes,
        threads,
    }
}

impl Load {
    /// Bytes per second delivered over `secs` after a warm-up, and the CPU time of this
    /// process and of `other` (rds-trace) per MB delivered.
    fn measure(&self, secs: f64, other: Option<u32>) -> Rate {
        std::thread::sleep(Duration::from_millis(500));
        // (this process, rds-trace, this process's capture threads)
        let cpu = || {
            (
                cpu_ticks("self"),
                other.map_or(0, |p| cpu_ticks(&p.to_string())),
                capture_thread_ticks(),
            )
        };
        let c0 = cpu();
        let b0 = self.bytes.load(Ordering::Relaxed);
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let b1 = self.bytes.load(Ordering::Relaxed);
        let c1 = cpu();
        let mb = (b1 - b0) as f64 / 1e6;
        let per_mb = |ticks: u64| ticks as f64 / ticks_per_sec() / mb.max(1e-9);
        Rate {
            bps: (b1 - b0) as f64 / t0.elapsed().as_secs_f64(),
            cpu_per_mb: per_mb(c1.0 + c1.1 - c0.0 - c0.1),
            trace_cpu_per_mb: per_mb((c1.1 + c1.2).saturating_sub(c0.1 + c0.2)),
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Runs the load with a busy loop on a thread of its own under `SCHED_IDLE`, the policy of the
/// capture's threads: the cost to the traffic of any work done only on CPU time the traffic
/// leaves, on this machine (with SMT, or vCPUs sharing cores, that time is not free).
fn with_idle_spinner(load: &Load, secs: f64) -> Rate {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let spinner = std::thread::spawn(move || {
        if pinned() {
            pin(0, 1);
        }
        let _ = rds_core::set_thread_idle(true);
        let mut x = 1u64;
        while !st.load(Ordering::Relaxed) {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7));
            }
        }
    });
    let rate = load.measure(secs, None);
    stop.store(true, Ordering::Relaxed);
    let _ = spinner.join();
    rate
}

/// Runs the load with rds-trace capturing node A; returns (bytes/s, captured, dropped).
fn with_capture(
    load: &Load,
    run: &Path,
    file: &Path,
    snaplen: &str,
    secs: f64,
) -> (Rate, u64, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rds-trace"))
        .env("RDS_RUNTIME_DIR", run)
        .args([
            "-w",
            file.to_str().unwrap(),
            "-s",
            snaplen,
            "--node",
            "bench-a",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.starts_with("rds-trace: tracing"), "{line}");
    if pinned() {
        // rds-trace has one thread while it waits for the node (a streamed capture would
        // start its threads later, from this one).
        pin(child.id() as i32, 1);
        // Twice: a thread the session thread starts while it is moved may inherit CPU 0.
        for _ in 0..2 {
            for t in threads_named(&CAPTURE_THREADS) {
                pin(t, 1);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let rate = load.measure(secs, Some(child.id()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut rest = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "rds-trace did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let summary = rest
        .lines()
        .find(|l| l.ends_with(" dropped"))
        .unwrap_or_else(|| panic!("no summary: {rest}"));
    let w: Vec<&str> = summary.split(' ').collect();
    (rate, w[0].parse().unwrap(), w[3].parse().unwrap())
}

fn main() {
    // `cargo bench` passes --bench; nothing else is understood.
    let secs: f64 = std::env::var("RDS_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0 && *s <= 60.0)
        .unwrap_or(3.0);
    let sizes: Vec<usize> = std::env::var("RDS_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 65536]);
    let rounds: usize = std::env::var("RDS_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|r| (1..=10).contains(r))
        .unwrap_or(2);
    let snaplens: Vec<String> = std::env::var("RDS_BENCH_SNAPLENS")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| x.parse::<u32>().is_ok())
                .collect()
        })
        .filter(|v: &Vec<String>| !v.is_empty())
        .unwrap_or_else(|| vec!["262144".into(), "128".into()]);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    if pinned() {
        // Before the nodes start: their threads, and the load's, inherit CPU 0.
        pin(0, 0);
    }
    let run = tempfile::tempdir().unwrap();
    let a = node("bench-a", A, run.path());
    let b = node("bench-b", B, run.path());
    let dir = std::env::var("RDS_BENCH_DIR").unwrap_or_else(|_| "/tmp".into());
    // `/dev/null` is taken as the capture file itself, `-` as `-w -` (standard output, which
    // is /dev/null).
    let null = dir == "/dev/null" || dir == "-";
    let out = tempfile::tempdir_in(if null { "/tmp" } else { &dir }).unwrap();
    println!(
        "capture overhead: {SENDERS} senders {A} -> {B}, {secs} s per phase, {} cores{}",
        cores,
        if pinned() {
            " (pinned: traffic on CPU 0, capture on CPU 1)"
        } else {
            ""
        }
    );
    for (k, size) in sizes.iter().enumerate() {
        let load = start_load(&a, &b, *size, 20000 + k as u16 * 1000);
        let file = if null {
            Path::new(&dir).to_path_buf()
        } else {
            out.path().join(format!("bench-{size}.pcap"))
        };
        // Phases interleaved over rounds, so that drift and other load on the machine hit all.
        let (mut base, mut spin) = (Vec::new(), Vec::new());
        let mut captures: Vec<Vec<(Rate, u64, u64)>> = vec![Vec::new(); snaplens.len()];
        let mut file_mb = vec![0.0; snaplens.len()];
        for _ in 0..rounds {
            base.push(load.measure(secs, None));
            spin.push(with_idle_spinner(&load, secs));
            for (i, snap) in snaplens.iter().enumerate() {
                captures[i].push(with_capture(&load, run.path(), &file, snap, secs));
                file_mb[i] = std::fs::metadata(&file).map_or(0, |m| m.len()) as f64 / 1e6;
                if !null {
                    let _ = std::fs::remove_file(&file);
                }
            }
        }
        base.push(load.measure(secs, None));
        load.stop();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        // Throughput: the median of the runs (one run the VM's host slowed or sped up moves
        // a mean by several percent).
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        let bps = |v: &[Rate]| v.iter().map(|r| r.bps).collect::<Vec<f64>>();
        let cpu = |v: &[Rate]| mean(&v.iter().map(|r| r.cpu_per_mb).collect::<Vec<f64>>());
        let tcpu = |v: &[Rate]| mean(&v.iter().map(|r| r.trace_cpu_per_mb).collect::<Vec<f64>>());
        let b = median(&bps(&base));
        let base_cpu = cpu(&base);
        let mb = |x: f64| x / 1e6;
        let runs = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{:.1}", mb(*x)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("message size {size} bytes:");
        println!(
            "  no capture        {:9.1} MB/s  (runs: {})  cpu {:.2} ms/MB",
            mb(b),
            runs(&bps(&base)),
            base_cpu * 1e3
        );
        println!(
            "  SCHED_IDLE spinner{:9.1} MB/s  ratio {:.3}  (runs: {})  (no capture; a busy loop on CPU time the traffic leaves)",
            mb(median(&bps(&spin))),
            median(&bps(&spin)) / b,
            runs(&bps(&spin)),
        );
        for ((snap, v), file_mb) in snaplens.iter().zip(&captures).zip(&file_mb) {
            let name = format!("-s {snap:<6}");
            let rates: Vec<Rate> = v.iter().map(|x| x.0).collect();
            let cap: u64 = v.iter().map(|x| x.1).sum();
            let drop: u64 = v.iter().map(|x| x.2).sum();
            println!(
                "  capture {name} {:9.1} MB/s  ratio {:.3}  (runs: {})  cpu {:.2} ms/MB (x{:.2}; capture threads and rds-trace {:.2})  trace frames captured {cap}, dropped {drop} ({:.1}%)",
                mb(median(&bps(&rates))),
                median(&bps(&rates)) / b,
                runs(&bps(&rates)),
                cpu(&rates) * 1e3,
                cpu(&rates) / base_cpu,
                tcpu(&rates) * 1e3,
                pct(drop, cap + drop)
            );
            println!("    (last capture file: {file_mb:.1} MB)");
        }
    }
    a.shutdown();
    b.shutdown();
}

fn pct(a: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        a as f64 * 100.0 / total as f64
    }
}
