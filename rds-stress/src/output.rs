//! The original's output formats: the column header, the per-second line, the dashes and the
//! average line, the RTT histogram, `--show-params`, `--show-perfdata` ("::" CSV lines), and
//! our additions (the percentile line and the `--json` summary).

use crate::control::WireOptions;
use crate::stats::{throughput, Counter, Percentiles, Stat, MAX_BUCKETS, NR_STATS};

/// `"%4s %6s %6s %10s %10s %10s %7s %8s %5s\n"` with the column names.
pub fn header() -> String {
    format!(
        "{:>4} {:>6} {:>6} {:>10} {:>10} {:>10} {:>7} {:>8} {:>5}\n",
        "tsks", "tx/s", "rx/s", "tx+rx K/s", "mbi K/s", "mbo K/s", "tx us/c", "rtt us", "cpu %"
    )
}

/// One per-second line: counts unscaled, rates and averages scaled by `scale` (1e6 / elapsed
/// µs), as the original.
pub fn interval(nr_running: u32, d: &[Counter; NR_STATS], scale: f64, cpu: f64) -> String {
    format!(
        "{:>4} {:>6} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>7.2} {:>8.2} {:>5.2}\n",
        nr_running,
        d[Stat::ReqTx as usize].nr,
        d[Stat::ReqRx as usize].nr,
        scale * throughput(d) / 1024.0,
        scale * d[Stat::MbusIn as usize].sum as f64 / 1024.0,
        scale * d[Stat::MbusOut as usize].sum as f64 / 1024.0,
        scale * d[Stat::SendmsgUsecs as usize].avg(),
        scale * d[Stat::RttUsecs as usize].avg(),
        scale * cpu
    )
}

/// The 45 dashes before the average line.
pub const DASHES: &str = "---------------------------------------------\n";

/// The average line over the displayed intervals (`scale` = 1e6 / µs from the first to the
/// last interval).
pub fn average(nr_tasks: u32, s: &[Counter; NR_STATS], scale: f64, cpu: Option<f64>) -> String {
    format!(
        "{:>4} {:>6} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>7.2} {:>8.2} {:>5.2}  (average)\n",
        nr_tasks,
        (scale * s[Stat::ReqTx as usize].nr as f64) as i64,
        (scale * s[Stat::ReqRx as usize].nr as f64) as i64,
        scale * throughput(s) / 1024.0,
        scale * s[Stat::MbusIn as usize].sum as f64 / 1024.0,
        scale * s[Stat::MbusOut as usize].sum as f64 / 1024.0,
        s[Stat::SendmsgUsecs as usize].avg(),
        s[Stat::RttUsecs as usize].avg(),
        cpu.map_or(-1.0, |c| scale * c)
    )
}

/// The widest progress bar: wider ones tell no more.
const BAR_MAX: usize = 40;
/// The narrowest progress bar worth drawing.
const BAR_MIN: usize = 5;

/// The progress bar's template (indicatif) for a run of `secs` seconds on a terminal `width`
/// columns wide: `{elapsed_precise} [{bar:N}] {pos}/{len} s` with the bar as wide as fits (at
/// most 40), leaving the last column free so that the line never wraps; without room for a bar
/// of 5, the times alone (the elapsed time too when it fits). An unknown width lets indicatif
/// fit the bar to standard error.
pub fn progress_template(secs: u64, width: Option<u16>) -> String {
    let Some(width) = width else {
        return "{elapsed_precise} [{wide_bar}] {pos}/{len} s".into();
    };
    let digits = secs.to_string().len();
    // "HH:MM:SS [" + "] " + pos + "/" + len + " s", and a free last column.
    let fixed = 10 + 2 + 2 * digits + 1 + 2 + 1;
    match usize::from(width).saturating_sub(fixed).min(BAR_MAX) {
        n if n >= BAR_MIN => format!("{{elapsed_precise}} [{{bar:{n}}}] {{pos}}/{{len}} s"),
        // "HH:MM:SS " + pos + "/" + len + " s", and a free last column.
        _ if usize::from(width) > 9 + 2 * digits + 3 => "{elapsed_precise} {pos}/{len} s".into(),
        _ => "{pos}/{len} s".into(),
    }
}

/// `--show-histogram` (2.3 format with percentages). Buckets past the original 16 (RTTs of
/// 65536 µs and more, which the original could not store) get extra lines only when used.
pub fn histogram(h: &[u64; 64]) -> String {
    let total: u64 = h.iter().sum();
    let mut s = String::from("\nRTT histogram\nRTT (us)        \t\t    Count\n");
    for (i, &n) in h.iter().enumerate() {
        if i >= MAX_BUCKETS && n == 0 {
            continue;
        }
        let pct = if total == 0 {
            0.0
        } else {
            n as f64 / total as f64 * 100.0
        };
        let lo = 1u128 << i;
        let hi = 1u128 << (i + 1);
        s += &format!("[{lo:>6} - {hi:>6}] \t\t {n:>8} \t\t ({pct:.2}%)\n");
    }
    s
}

/// Our percentile line after the summary.
pub fn percentile_line(p: &Percentiles) -> String {
    format!(
        "rtt us percentiles: p50 {} p90 {} p99 {} p99.9 {} max {}\n",
        p.p50, p.p90, p.p99, p.p99_9, p.max
    )
}

/// `--show-params` block.
pub fn show_params(w: &WireOptions) -> String {
    let mut s = String::from("Options:\n");
    for (k, v) in [
        ("Tasks", u32::from(w.nr_tasks)),
        ("Req size", w.req_size),
        ("ACK size", w.ack_size),
        ("RDMA size", w.rdma_size),
    ] {
        s += &format!("  {k:<10} {v:<7}\n");
    }
    s += &format!("  {:<10}", "RDMA opts");
    let mut k = 0;
    for (on, word) in [
        (w.rdma_use_once, " use_once"),
        (w.rdma_use_get_mr, " use_get_mr"),
        (w.rdma_use_fence, " use_fence"),
        (w.rdma_cache_mrs, " cache_mrs"),
    ] {
        if on != 0 {
            s += word;
            k += 1;
        }
    }
    if w.rdma_alignment != 0 {
        s += &format!(" align={}", w.rdma_alignment);
        k += 1;
    }
    if k == 0 {
        s += " (defaults)";
    }
    s += "\n\n";
    s
}

/// The `--show-perfdata` header line.
pub fn perfdata_header(counter_names: &[String]) -> String {
    let mut s = String::from(
        "::nr_tasks:count,req_size:bytes,ack_size:bytes,rdma_size:bytes\
,req_sent:count,thruput:kB/s,thruput_rdma:kB/s,tx_delay:microseconds,rtt:microseconds,cpu:percent",
    );
    for n in counter_names {
        s += &format!(
            ",{n}:{}",
            if n.contains("_bytes") {
                "bytes"
            } else {
                "count"
            }
        );
    }
    s += ",user:percent,system:percent,idle:percent,irq:percent,intr:count\n";
    s
}

/// One `--show-perfdata` data line. `counters` are per-second deltas; `sys` the /proc/stat
/// figures (user, system, idle, irq, intr).
pub fn perfdata_line(
    w: &WireOptions,
    d: &[Counter; NR_STATS],
    scale: f64,
    cpu: f64,
    counters: &[f64],
    sys: (f64, f64, f64, f64, u64),
) -> String {
    let mut s = format!(
        "::{},{},{},{},",
        w.nr_tasks, w.req_size, w.ack_size, w.rdma_size
    );
    s += &format!(
        "{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6}",
        d[Stat::ReqTx as usize].nr,
        scale * throughput(d) / 1024.0,
        scale * d[Stat::MbusIn as usize].sum as f64 / 1024.0,
        scale * d[Stat::MbusOut as usize].sum as f64 / 1024.0,
        scale * d[Stat::SendmsgUsecs as usize].avg(),
        scale * d[Stat::RttUsecs as usize].avg(),
        if cpu >= 0.0 { scale * cpu } else { 0.0 }
    );
    for c in counters {
        s += &format!(",{c:.6}");
    }
    s += &format!(
        ",{:.6},{:.6},{:.6},{:.6},{}\n",
        sys.0, sys.1, sys.2, sys.3, sys.4
    );
    s
}

/// /proc/stat sampling for the perfdata lines, with the original's quirk: the percentage
/// denominator adds cumulative totals rather than deltas.
#[derive(Debug, Default)]
pub struct ProcStat {
    prev: Option<([u64; 8], u64, u64)>,
}

fn read_proc_stat() -> Option<([u64; 8], u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let mut times = [0u64; 8];
    let mut other = 0u64;
    let mut intr = 0u64;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("cpu ") {
            for (j, v) in rest.split_whitespace().enumerate() {
                let v: u64 = v.parse().unwrap_or(0);
                if j < 8 {
                    times[j] = v;
                } else {
                    other += v;
                }
            }
        } else if let Some(rest) = l.strip_prefix("intr ") {
            intr = rest
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
        }
    }
    Some((times, other, intr))
}

impl ProcStat {
    /// Takes the first sample.
    pub fn prime(&mut self) {
        self.prev = read_proc_stat();
    }

    /// (user+nice, system, idle+iowait, irq+softirq) percentages and the interrupt delta.
    pub fn sample(&mut self) -> (f64, f64, f64, f64, u64) {
        let Some(cur) = read_proc_stat() else {
            return (0.0, 0.0, 0.0, 0.0, 0);
        };
        let prev = self.prev.unwrap_or(cur);
        let mut d = [0u64; 8];
        let mut sum = cur.1.wrapping_sub(prev.1);
        for (j, dj) in d.iter_mut().enumerate() {
            *dj = cur.0[j].wrapping_sub(prev.0[j]);
            sum = sum.wrapping_add(cur.0[j]);
        }
        let scale = if sum == 0 { 0.0 } else { 100.0 / sum as f64 };
        self.prev = Some(cur);
        (
            (d[0] + d[1]) as f64 * scale,
            d[2] as f64 * scale,
            (d[3] + d[4]) as f64 * scale,
            (d[5] + d[6]) as f64 * scale,
            cur.2.wrapping_sub(prev.2),
        )
    }
}

/// The `--json` summary.
#[derive(Debug, serde::Serialize)]
pub struct JsonSummary {
    /// Tasks per side.
    pub tasks: u32,
    /// Request size.
    pub req_bytes: u32,
    /// Ack size.
    pub ack_bytes: u32,
    /// Pipeline depth.
    pub depth: u32,
    /// One-way mode.
    pub one_way: bool,
    /// Seconds measured (first to last interval).
    pub seconds: f64,
    /// Requests sent per second.
    pub tx_per_sec: f64,
    /// Requests received per second.
    pub rx_per_sec: f64,
    /// Requests and acks both ways, KiB per second.
    pub tx_rx_kib_per_sec: f64,
    /// RDMA KiB per second into this side's memory (the mbi column).
    pub rdma_in_kib_per_sec: f64,
    /// RDMA KiB per second out of this side's memory (the mbo column).
    pub rdma_out_kib_per_sec: f64,
    /// Requests sent in total (whole run, warm-up included).
    pub requests_sent: u64,
    /// Requests received in total.
    pub requests_received: u64,
    /// Average time in the send call (µs).
    pub tx_us_per_call: f64,
    /// Round-trip times (µs): average and percentiles.
    pub rtt_us: JsonRtt,
    /// CPU use (%) with -c.
    pub cpu_percent: Option<f64>,
    /// The per-second lines.
    pub intervals: Vec<JsonInterval>,
    /// Why the run ended before its time: `"interrupted"` (SIGINT or SIGTERM), else null.
    pub stopped: Option<&'static str>,
}

/// One second of a `--json` summary.
#[derive(Debug, serde::Serialize)]
pub struct JsonInterval {
    /// Requests sent.
    pub tx: u64,
    /// Requests received.
    pub rx: u64,
    /// KiB/s both ways.
    pub tx_rx_kib_per_sec: f64,
    /// Average RTT (µs, unscaled).
    pub rtt_us: f64,
}

/// The `rtt_us` object of a `--json` summary: the average and the percentiles, as rds-ping's
/// `rtt_us` holds its average and extremes.
#[derive(Debug, serde::Serialize)]
pub struct JsonRtt {
    /// Average round-trip time (µs).
    pub avg: f64,
    /// Samples, median, 90th, 99th, 99.9th percentiles and the largest (µs).
    #[serde(flatten)]
    pub percentiles: Percentiles,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bar_fits_the_terminal() {
        // The line as indicatif draws it at the end of the run (pos = len).
        let drawn = |secs: u64, t: &str| -> usize {
            let bar = t.split("{bar:").nth(1).map_or(0, |r| {
                r.split('}').next().unwrap().parse::<usize>().unwrap()
            });
            let no_bar = t.replace(&format!("{{bar:{bar}}}"), "");
            no_bar
                .replace("{elapsed_precise}", "00:00:05")
                .replace("{pos}", &secs.to_string())
                .replace("{len}", &secs.to_string())
                .chars()
                .count()
                + bar
        };
        for secs in [5, 60, 3600] {
            for w in [20u16, 24, 30, 40, 60, 80, 200] {
                let t = progress_template(secs, Some(w));
                assert!(
                    drawn(secs, &t) < usize::from(w),
                    "{secs} s, {w} columns: {t}"
                );
            }
        }
        assert_eq!(
            progress_template(5, Some(80)),
            "{elapsed_precise} [{bar:40}] {pos}/{len} s"
        );
        assert_eq!(
            progress_template(5, Some(40)),
            "{elapsed_precise} [{bar:22}] {pos}/{len} s"
        );
        assert_eq!(
            progress_template(5, Some(20)),
            "{elapsed_precise} {pos}/{len} s"
        );
        assert_eq!(
            progress_template(5, None),
            "{elapsed_precise} [{wide_bar}] {pos}/{len} s"
        );
    }

    #[test]
    fn exact_formats() {
        assert_eq!(
            header(),
            "tsks   tx/s   rx/s  tx+rx K/s    mbi K/s    mbo K/s tx us/c   rtt us cpu %\n"
        );
        let mut d = [Counter::default(); NR_STATS];
        d[Stat::ReqTx as usize] = Counter {
            nr: 1000,
            sum: 1024 * 1000,
            min: 1024,
            max: 1024,
        };
        d[Stat::RttUsecs as usize] = Counter {
            nr: 10,
            sum: 250,
            min: 1,
            max: 100,
        };
        assert_eq!(
            interval(1, &d, 1.0, -1.0),
            "   1   1000      0    1000.00       0.00       0.00    0.00    25.00 -1.00\n"
        );
        assert_eq!(
            average(2, &d, 0.5, None),
            "   2    500      0     500.00       0.00       0.00    0.00    25.00 -1.00  (average)\n"
        );
        assert_eq!(DASHES.trim_end().len(), 45);
        let w = WireOptions {
            nr_tasks: 1,
            req_size: 1024,
            ack_size: 63,
            ..WireOptions::defaults()
        };
        assert_eq!(
            show_params(&w),
            "Options:\n  Tasks      1      \n  Req size   1024   \n  ACK size   63     \n  RDMA size  0      \n  RDMA opts  use_fence\n\n"
        );
        let mut h = [0u64; 64];
        h[3] = 1;
        h[4] = 3;
        let t = histogram(&h);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3 + 16);
        assert_eq!(lines[1], "RTT histogram");
        assert_eq!(lines[2], "RTT (us)        \t\t    Count");
        assert_eq!(lines[3], "[     1 -      2] \t\t        0 \t\t (0.00%)");
        assert_eq!(lines[6], "[     8 -     16] \t\t        1 \t\t (25.00%)");
        assert_eq!(lines[18], "[ 32768 -  65536] \t\t        0 \t\t (0.00%)");
    }
}
