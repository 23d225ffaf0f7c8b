//! Counters shared between the task threads and the reporting thread: the original's ten
//! `{nr, sum, min, max}` counters per task, its 16-bucket log2 RTT histogram, a finer
//! log-linear RTT histogram for percentiles, and the CPU "soak" threads of `-c`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Counter slots, in the original's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Stat {
    /// Request bytes sent.
    ReqTx = 0,
    /// Request bytes received.
    ReqRx,
    /// Ack bytes sent.
    AckTx,
    /// Ack bytes received.
    AckRx,
    /// RDMA write bytes.
    RdmaWrite,
    /// RDMA read bytes.
    RdmaRead,
    /// RDMA bytes in.
    MbusIn,
    /// RDMA bytes out.
    MbusOut,
    /// Microseconds in the send call, per request.
    SendmsgUsecs,
    /// Round-trip time of requests (µs).
    RttUsecs,
}

/// Number of counters.
pub const NR_STATS: usize = 10;
/// Buckets of the original's histogram that are printed.
pub const MAX_BUCKETS: usize = 16;
const FINE_BUCKETS: usize = 64 + 58 * 32;

/// One counter, read side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    /// Events.
    pub nr: u64,
    /// Sum of values.
    pub sum: u64,
    /// Smallest value (0 = none).
    pub min: u64,
    /// Largest value.
    pub max: u64,
}

impl Counter {
    /// `sum / nr`, 0 without events.
    pub fn avg(&self) -> f64 {
        if self.nr == 0 {
            0.0
        } else {
            self.sum as f64 / self.nr as f64
        }
    }
}

#[derive(Debug, Default)]
struct AtomicCounter {
    nr: AtomicU64,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

/// One task's counters (written by the task thread only).
#[derive(Debug)]
pub struct TaskStats {
    ctr: [AtomicCounter; NR_STATS],
    hist: [AtomicU64; 64],
    fine: Box<[AtomicU64]>,
}

impl Default for TaskStats {
    fn default() -> Self {
        TaskStats {
            ctr: Default::default(),
            hist: std::array::from_fn(|_| AtomicU64::new(0)),
            fine: (0..FINE_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The original's bucket: floor(log2(v)), with 0 and 1 in bucket 0.
pub fn bucket(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        63 - v.leading_zeros() as usize
    }
}

/// Log-linear bucket (exact below 64, then 32 steps per power of two).
fn fine_bucket(v: u64) -> usize {
    if v < 64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // 6..=63
    let sub = ((v >> (e - 5)) & 31) as usize;
    64 + (e - 6) * 32 + sub
}

/// The smallest value of a fine bucket.
fn fine_floor(i: usize) -> u64 {
    if i < 64 {
        return i as u64;
    }
    let e = (i - 64) / 32 + 6;
    let sub = ((i - 64) % 32) as u64;
    (1u64 << e) | (sub << (e - 5))
}

impl TaskStats {
    /// Adds one event of `val` to `s`.
    pub fn inc(&self, s: Stat, val: u64) {
        let c = &self.ctr[s as usize];
        c.nr.fetch_add(1, Relaxed);
        c.sum.fetch_add(val, Relaxed);
        let m = c.min.load(Relaxed);
        if m == 0 || (val != 0 && val < m) {
            c.min.store(val, Relaxed);
        }
        if val > c.max.load(Relaxed) {
            c.max.store(val, Relaxed);
        }
    }

    /// Records an RTT (µs) in both histograms.
    pub fn rtt(&self, us: u64) {
        self.hist[bucket(us)].fetch_add(1, Relaxed);
        self.fine[fine_bucket(us)].fetch_add(1, Relaxed);
    }

    /// Current counters.
    pub fn snapshot(&self) -> [Counter; NR_STATS] {
        std::array::from_fn(|i| {
            let c = &self.ctr[i];
            Counter {
                nr: c.nr.load(Relaxed),
                sum: c.sum.load(Relaxed),
                min: c.min.load(Relaxed),
                max: c.max.load(Relaxed),
            }
        })
    }

    /// The log2 histogram (64 buckets; the original prints 16).
    pub fn histogram(&self) -> [u64; 64] {
        std::array::from_fn(|i| self.hist[i].load(Relaxed))
    }

    fn fine(&self) -> Vec<u64> {
        self.fine.iter().map(|x| x.load(Relaxed)).collect()
    }
}

/// `min` where 0 means "none" (the original's `minz`).
pub fn minz(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// Sums counters over tasks (`stat_total`).
pub fn total(tasks: &[Arc<TaskStats>]) -> [Counter; NR_STATS] {
    let mut out = [Counter::default(); NR_STATS];
    for t in tasks {
        for (o, c) in out.iter_mut().zip(t.snapshot()) {
            o.nr += c.nr;
            o.sum += c.sum;
            o.min = minz(o.min, c.min);
            o.max = o.max.max(c.max);
        }
    }
    out
}

/// Adds `cur` to `acc` (`stat_accumulate`).
pub fn accumulate(acc: &mut [Counter; NR_STATS], cur: &[Counter; NR_STATS]) {
    for (a, c) in acc.iter_mut().zip(cur) {
        a.nr += c.nr;
        a.sum += c.sum;
        a.min = minz(a.min, c.min);
        a.max = a.max.max(c.max);
    }
}

/// Per-interval differences (`stat_snapshot`): keeps the last totals of each task.
#[derive(Debug)]
pub struct Snapshotter {
    last: Vec<[Counter; NR_STATS]>,
}

impl Snapshotter {
    /// For `n` tasks.
    pub fn new(n: usize) -> Self {
        Snapshotter {
            last: vec![[Counter::default(); NR_STATS]; n],
        }
    }

    /// Counters since the previous call.
    pub fn take(&mut self, tasks: &[Arc<TaskStats>]) -> [Counter; NR_STATS] {
        let mut disp = [Counter::default(); NR_STATS];
        for (t, last) in tasks.iter().zip(self.last.iter_mut()) {
            let cur = t.snapshot();
            for s in 0..NR_STATS {
                disp[s].nr += cur[s].nr.wrapping_sub(last[s].nr);
                disp[s].sum += cur[s].sum.wrapping_sub(last[s].sum);
                disp[s].min = minz(cur[s].min, last[s].min);
                disp[s].max = cur[s].max.max(last[s].max);
            }
            *last = cur;
        }
        disp
    }
}

/// Sum of request/ack bytes both ways (`throughput`).
pub fn throughput(d: &[Counter; NR_STATS]) -> f64 {
    (d[Stat::ReqTx as usize].sum
        + d[Stat::ReqRx as usize].sum
        + d[Stat::AckTx as usize].sum
        + d[Stat::AckRx as usize].sum) as f64
}

/// Summed histograms of all tasks.
pub fn histogram(tasks: &[Arc<TaskStats>]) -> [u64; 64] {
    let mut h = [0u64; 64];
    for t in tasks {
        for (a, b) in h.iter_mut().zip(t.histogram()) {
            *a += b;
        }
    }
    h
}

/// RTT percentiles (µs): p50, p90, p99, p99.9 from the fine histogram (bucket floors, within
/// 1/32 of the value), and the exact maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p99_9: u64,
    /// Largest RTT.
    pub max: u64,
}

/// The round-trip times of all tasks merged in one fine histogram, with the exact maximum:
/// the percentile line and the `--plot` curve both read their quantiles from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RttDistribution {
    fine: Vec<u64>,
    count: u64,
    max: u64,
}

impl RttDistribution {
    /// Merges the tasks' histograms.
    pub fn of(tasks: &[Arc<TaskStats>]) -> Self {
        let mut fine = vec![0u64; FINE_BUCKETS];
        for t in tasks {
            for (a, b) in fine.iter_mut().zip(t.fine()) {
                *a += b;
            }
        }
        RttDistribution {
            count: fine.iter().sum(),
            max: total(tasks)[Stat::RttUsecs as usize].max,
            fine,
        }
    }

    /// Samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0.0 to 1.0) in µs: the floor of the bucket holding the sample of rank
    /// ceil(q × count) (at least the first), never above the exact maximum; 0 without samples.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.fine.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return fine_floor(i).min(self.max);
            }
        }
        self.max
    }

    /// p50, p90, p99, p99.9 and the maximum.
    pub fn percentiles(&self) -> Percentiles {
        if self.count == 0 {
            return Percentiles::default();
        }
        Percentiles {
            count: self.count,
            p50: self.quantile(0.50),
            p90: self.quantile(0.90),
            p99: self.quantile(0.99),
            p99_9: self.quantile(0.999),
            max: self.max,
        }
    }
}

/// Percentiles over all tasks.
pub fn percentiles(tasks: &[Arc<TaskStats>]) -> Percentiles {
    RttDistribution::of(tasks).percentiles()
}

/// One CPU soak thread's state.
#[derive(Debug, Default)]
pub struct Soak {
    per_sec: AtomicU64,
    counter: AtomicU64,
    last: AtomicU64,
}

/// The `-c` soak threads: one per online CPU at the lowest priority, each spinning on a
/// system call and recording its best calls-per-second rate.
#[derive(Debug)]
pub struct Soakers {
    soaks: Vec<Arc<Soak>>,
    stop: Arc<AtomicBool>,
}

impl Soakers {
    /// Starts one soaker per online CPU.
    pub fn start() -> Soakers {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let mut soaks = Vec::new();
        for i in 0..n {
            let s = Arc::new(Soak::default());
            s.per_sec.store(1000, Relaxed);
            let (s2, stop2) = (s.clone(), stop.clone());
            let _ = std::thread::Builder::new()
                .name(format!("soak-{i}"))
                .spawn(move || run_soaker(&s2, &stop2));
            soaks.push(s);
        }
        Soakers { soaks, stop }
    }

    /// Number of soakers.
    pub fn len(&self) -> usize {
        self.soaks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.soaks.is_empty()
    }

    /// CPU use (%) since the previous call (`cpu_use`).
    pub fn cpu_use(&self) -> f64 {
        let mut capacity = 0u64;
        let mut soaked = 0u64;
        for s in &self.soaks {
            let per_sec = s.per_sec.load(Relaxed);
            capacity += per_sec;
            let this = s.counter.load(Relaxed);
            let last = s.last.swap(this, Relaxed);
            soaked += per_sec.min(this.wrapping_sub(last));
        }
        if capacity == 0 {
            return 0.0;
        }
        (capacity.saturating_sub(soaked)) as f64 * 100.0 / capacity as f64
    }

    /// Stops the soakers.
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
    }
}

fn run_soaker(s: &Soak, stop: &AtomicBool) {
    crate::sys::set_thread_nice(19);
    while !stop.load(Relaxed) {
        let per = s.per_sec.load(Relaxed);
        let t0 = Instant::now();
        for _ in 0..per {
            std::hint::black_box(std::process::id());
            s.counter.fetch_add(1, Relaxed);
        }
        let us = t0.elapsed().as_micros().max(1) as f64;
        let rate = (per as f64 * 1e6 / us) as u64;
        if rate > per {
            s.per_sec.store(rate, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(3), 1);
        assert_eq!(bucket(65535), 15);
        assert_eq!(bucket(65536), 16);
        for v in [0u64, 1, 63, 64, 65, 100, 1000, 123_456, u64::MAX] {
            let b = fine_bucket(v);
            assert!(b < FINE_BUCKETS);
            assert!(fine_floor(b) <= v, "{v}");
            assert!(v - fine_floor(b) <= v / 32, "{v}");
        }
    }

    #[test]
    fn percentile_math() {
        let t = Arc::new(TaskStats::default());
        for v in 1..=1000u64 {
            t.inc(Stat::RttUsecs, v);
            t.rtt(v);
        }
        let p = percentiles(std::slice::from_ref(&t));
        assert_eq!(p.count, 1000);
        assert_eq!(p.max, 1000);
        assert!((480..=500).contains(&p.p50), "{p:?}");
        assert!((870..=900).contains(&p.p90), "{p:?}");
        assert!((960..=990).contains(&p.p99), "{p:?}");
        // The plot's curve reads the same quantiles: p0 is the smallest, p100 the floor of the
        // largest one's bucket (1000 is in [992, 1024)).
        let d = RttDistribution::of(std::slice::from_ref(&t));
        assert_eq!(d.percentiles(), p);
        assert_eq!(d.count(), 1000);
        assert_eq!((d.quantile(0.0), d.quantile(1.0)), (1, 992));
        assert_eq!(d.quantile(0.5), p.p50);
        assert_eq!(RttDistribution::of(&[]).quantile(0.5), 0);
        let c = t.snapshot()[Stat::RttUsecs as usize];
        assert_eq!((c.nr, c.min, c.max, c.sum), (1000, 1, 1000, 500_500));
        let mut s = Snapshotter::new(1);
        assert_eq!(
            s.take(std::slice::from_ref(&t))[Stat::RttUsecs as usize].nr,
            1000
        );
        assert_eq!(s.take(&[t])[Stat::RttUsecs as usize].nr, 0);
    }
}
