//! Where a guest's CPU went during a run: the first (`cpu`) line of `/proc/stat` before and
//! after, as shares of the elapsed ticks. With one vCPU under qemu TCG every instruction is
//! emulated, so a run that keeps the vCPU busy is bound by the instructions its stack executes
//! per message, not by the (emulated) network.

/// Ticks of the `cpu` line: user, nice, system, idle, iowait, irq, softirq, steal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks(pub [u64; 8]);

impl CpuTicks {
    /// Parses the `cpu ` line of `/proc/stat` (the text may hold the whole file).
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        Self::parse_cpu(stat, "cpu")
    }

    /// Parses the line of `/proc/stat` whose first word is `name`: `cpu` (all CPUs), `cpu0`,
    /// `cpu1`...
    pub fn parse_cpu(stat: &str, name: &str) -> Option<CpuTicks> {
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))?;
        let mut t = [0u64; 8];
        let mut it = line.split_whitespace().skip(1);
        for v in &mut t {
            *v = it.next()?.parse().ok()?;
        }
        Some(CpuTicks(t))
    }

    /// The shares of `later - self`: busy, user (with nice), system, softirq (with irq), in
    /// percent of all ticks; `None` when no tick passed or the counters went back.
    pub fn shares(&self, later: &CpuTicks) -> Option<CpuShares> {
        let mut d = [0u64; 8];
        for (i, v) in d.iter_mut().enumerate() {
            *v = later.0[i].checked_sub(self.0[i])?;
        }
        let all: u64 = d.iter().sum();
        if all == 0 {
            return None;
        }
        let pct = |x: u64| 100.0 * x as f64 / all as f64;
        Some(CpuShares {
            busy: pct(all - d[3] - d[4]),
            user: pct(d[0] + d[1]),
            system: pct(d[2]),
            softirq: pct(d[5] + d[6]),
        })
    }
}

/// Shares of a guest's CPU over a run, percent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuShares {
    pub busy: f64,
    pub user: f64,
    pub system: f64,
    pub softirq: f64,
}

impl std::fmt::Display for CpuShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0}% busy (user {:.0}%, system {:.0}%, irq+softirq {:.0}%)",
            self.busy, self.user, self.system, self.softirq
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_a_run() {
        let a =
            CpuTicks::parse("cpu  100 0 50 1000 0 0 10 0 0 0\ncpu0 100 0 50 1000 0 0 10 0 0 0\n")
                .unwrap();
        let b = CpuTicks::parse("cpu  160 0 70 1010 0 0 20 0 0 0\n").unwrap();
        let s = a.shares(&b).unwrap();
        assert_eq!(
            s.to_string(),
            "90% busy (user 60%, system 20%, irq+softirq 10%)"
        );
        assert_eq!(a.shares(&a), None);
        assert_eq!(b.shares(&a), None);
        assert_eq!(CpuTicks::parse("cpu  1 2 3"), None);
        assert_eq!(CpuTicks::parse("intr 5"), None);
        let two = "cpu  3 0 3 3 0 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 2 0 2 2 0 0 0 0 0 0\n";
        assert_eq!(CpuTicks::parse_cpu(two, "cpu1").unwrap().0[0], 2);
        assert_eq!(CpuTicks::parse_cpu(two, "cpu").unwrap().0[0], 3);
        assert_eq!(CpuTicks::parse_cpu(two, "cpu2"), None);
    }
}
