//! What the lab benchmarks share (`tests/tests/bench_lab_app_path.rs`, `bench_lab_smp.rs`):
//! one run of a passive and an active program in the guests, the kernel's RDS/TCP warmed up
//! and later removed, our embedded rds-stress's command line, `BENCH_SECS`, and where the
//! CPU went over a run, inside a guest (`/proc/stat`, per CPU) and outside it (the threads of
//! its qemu process on the host: with multi-threaded TCG one busy thread per busy vCPU).

use crate::guestcpu::CpuTicks;
use crate::lab::{guest_addr, GuestOutput, Lab};
use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Limit of short guest commands.
pub const SHORT: Duration = Duration::from_secs(60);

/// Our tools' runtime directory in a guest (a daemon's control socket would be there), ending
/// in `&&`.
pub const OUR_ENV: &str =
    "mkdir -p -m 700 /tmp/rds-bench && export RDS_RUNTIME_DIR=/tmp/rds-bench &&";

/// The start of the command line of our rds-stress `bin` (a guest path) as an embedded node
/// on RDS/TCP (`RDS_NO_DAEMON=1 --stack user --transport tcp`: the guests' addresses are on
/// soft-RoCE devices, where a socket otherwise binds RDS/IB, as the kernel's does with
/// `rds_rdma` loaded). The kernel's RDS must be gone ([`unload_kernel_rds`]): both cannot
/// listen on port 16385.
pub fn embedded_stress(bin: &str) -> String {
    format!("{OUR_ENV} RDS_NO_DAEMON=1 {bin} --stack user --transport tcp")
}

/// `BENCH_SECS` (whole seconds, 1..=300), else `default`.
pub fn bench_secs(default: u64) -> Result<u64> {
    match std::env::var("BENCH_SECS") {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=300).contains(n))
            .with_context(|| format!("BENCH_SECS={v}: whole seconds, 1..=300")),
        Err(_) => Ok(default),
    }
}

/// Waits (bounded, 30 s) until TCP `port` listens in guest `g`: the passive side is ready
/// (the C rds-stress's stdout is a file, fully buffered, so its "waiting" line is not seen).
pub fn wait_listen(lab: &Lab, g: usize, port: u16) -> Result<()> {
    lab.exec_ok(
        g,
        &format!(
            "i=0; while [ $i -lt 300 ]; do ss -Hltn 'sport = :{port}' | grep -q :{port} \
             && exit 0; i=$((i+1)); sleep 0.1; done; exit 1"
        ),
        SHORT,
    )
    .map(|_| ())
    .with_context(|| format!("nothing listens on TCP {port} in g{g}"))
}

/// One run: the passive command in its guest in the background, until TCP `port` listens
/// there, then the active command in its guest, each limited to `limit`. Returns (active,
/// passive) output; fails when either exits non-zero (the passive side is killed when the
/// active one fails), with both outputs in the error.
pub fn run_pair(
    lab: &Lab,
    who: &str,
    passive: (usize, &str),
    active: (usize, &str),
    port: u16,
    limit: Duration,
) -> Result<(GuestOutput, GuestOutput)> {
    let ((pg, pcmd), (ag, acmd)) = (passive, active);
    let p = lab.spawn(pg, pcmd, limit)?;
    if let Err(e) = wait_listen(lab, pg, port) {
        p.kill();
        let o = p.wait();
        bail!("{who}: the passive side (g{pg}: {pcmd}) is not ready: {e:#}\n{o:?}");
    }
    let a = match lab.exec(ag, acmd, limit) {
        Ok(a) => a,
        Err(e) => {
            p.kill();
            let _ = p.wait();
            return Err(e).with_context(|| format!("{who}: active side g{ag}: {acmd}"));
        }
    };
    if a.status != 0 {
        p.kill();
    }
    let po = p.wait().with_context(|| format!("{who}: passive side"))?;
    ensure!(
        a.status == 0 && po.status == 0,
        "{who}: active exit {}, passive exit {}\n--- active (g{ag}: {acmd}) ---\n{}{}\n--- \
         passive (g{pg}: {pcmd}) ---\n{}{}",
        a.status,
        po.status,
        a.stdout,
        a.stderr,
        po.stdout,
        po.stderr
    );
    Ok((a, po))
}

/// Checks that both guests run the kernel's `rds_tcp` and brings its connection g1 -> g2 up
/// with three RDS pings; returns the ping's summary line.
///
/// Without it the first run fails: the active side's first request goes out on lane 0 while
/// the multipath handshake is pending, the messages after it on their own lanes, and the
/// passive side sees sequence 1 before 0 ("header ... bogus").
pub fn kernel_warmup(lab: &Lab) -> Result<String> {
    let (g1, g2) = (guest_addr(1), guest_addr(2));
    for g in 1..=2 {
        lab.exec_ok(g, "grep -q '^rds_tcp ' /proc/modules", SHORT)
            .with_context(|| format!("the kernel's rds_tcp is not loaded in g{g}"))?;
    }
    let o = lab
        .exec(
            1,
            &format!("rdstool ping -b {g1} -d {g2} -c 3 -i 100 -W 15000"),
            SHORT,
        )?
        .check(&format!("kernel warm-up ping {g1} -> {g2}"))?;
    Ok(o.stdout.lines().last().unwrap_or_default().to_string())
}

/// Removes the kernel's RDS (`rds_tcp`, `rds`) from both guests: our nodes need port 16385.
pub fn unload_kernel_rds(lab: &Lab) -> Result<()> {
    for g in 1..=2 {
        lab.exec_ok(
            g,
            "rmmod rds_tcp && rmmod rds && ! grep -q '^rds' /proc/modules",
            SHORT,
        )
        .with_context(|| format!("removing the kernel's RDS modules from g{g}"))?;
    }
    Ok(())
}

/// CPU counters of one guest at one moment: its `/proc/stat` (inside) and the CPU time of
/// each thread of its qemu process (outside, clock ticks by thread id).
pub struct GuestCpu {
    stat: String,
    threads: BTreeMap<u32, u64>,
    at: Instant,
}

impl GuestCpu {
    /// Reads guest `g`'s counters.
    pub fn read(lab: &Lab, g: usize) -> Result<GuestCpu> {
        let stat = lab.exec_ok(g, "cat /proc/stat", SHORT)?.stdout;
        let pid = lab
            .qemu_pid(g)
            .with_context(|| format!("no qemu pid of g{g}"))?;
        Ok(GuestCpu {
            stat,
            threads: thread_ticks(pid)?,
            at: Instant::now(),
        })
    }

    /// What happened between `self` and `later`: the guest's busy share of all its CPUs and
    /// of each (`cpuN`), and the busy share of the wall time of each qemu thread that used at
    /// least 5% of it (`clk_tck`: clock ticks per second).
    pub fn report(&self, later: &GuestCpu, clk_tck: u64) -> String {
        let mut parts = Vec::new();
        let names = self
            .stat
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with("cpu"));
        for name in names {
            let shares = CpuTicks::parse_cpu(&self.stat, name)
                .zip(CpuTicks::parse_cpu(&later.stat, name))
                .and_then(|(a, b)| a.shares(&b));
            if let Some(s) = shares {
                parts.push(if name == "cpu" {
                    format!("all vCPUs {s}")
                } else {
                    format!("{name} {:.0}%", s.busy)
                });
            }
        }
        let wall = later.at.duration_since(self.at).as_secs_f64() * clk_tck as f64;
        let mut busy: Vec<f64> = later
            .threads
            .iter()
            .filter_map(|(tid, t)| Some(t.checked_sub(*self.threads.get(tid)?)? as f64))
            .map(|d| 100.0 * d / wall.max(1.0))
            .filter(|p| *p >= 5.0)
            .collect();
        busy.sort_by(|a, b| b.total_cmp(a));
        let busy: Vec<String> = busy.iter().map(|p| format!("{p:.0}%")).collect();
        format!(
            "{}; qemu threads over 5% of the wall time: {}",
            parts.join(", "),
            if busy.is_empty() {
                "none".to_string()
            } else {
                busy.join(" ")
            }
        )
    }
}

/// CPU time (user + system, clock ticks) of each thread of process `pid`.
fn thread_ticks(pid: u32) -> Result<BTreeMap<u32, u64>> {
    let dir = format!("/proc/{pid}/task");
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let e = e?;
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // Gone since the listing: skipped.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some(t) = stat_ticks(&stat) {
            m.insert(tid, t);
        }
    }
    Ok(m)
}

/// utime + stime of a `/proc/PID/task/TID/stat` line (fields 14 and 15; the command name,
/// field 2, is in parentheses and may hold spaces).
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): field N is f[N - 3].
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 when it cannot say).
pub fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_of_a_thread() {
        let s = "4242 (qemu-system-x86 x) R 1 2 3 0 -1 4194560 100 0 0 0 468 37 0 0 20 0 6 0";
        assert_eq!(stat_ticks(s), Some(505));
        assert_eq!(stat_ticks("4242 (qemu"), None);
        assert_eq!(stat_ticks("4242 (q) R 1"), None);
    }

    #[test]
    fn a_guest_cpu_report() {
        let t0 = Instant::now();
        let a = GuestCpu {
            stat: "cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n".into(),
            threads: [(1, 10), (2, 10), (3, 5)].into(),
            at: t0,
        };
        let b = GuestCpu {
            stat: "cpu  150 0 30 20 0 0 0 0\ncpu0 90 0 10 0 0 0 0 0\ncpu1 60 0 20 20 0 0 0 0\n"
                .into(),
            threads: [(1, 110), (2, 90), (3, 6), (4, 50)].into(),
            at: t0 + Duration::from_secs(1),
        };
        assert_eq!(
            a.report(&b, 100),
            "all vCPUs 90% busy (user 75%, system 15%, irq+softirq 0%), cpu0 100%, cpu1 80%; \
             qemu threads over 5% of the wall time: 100% 80%"
        );
    }
}
