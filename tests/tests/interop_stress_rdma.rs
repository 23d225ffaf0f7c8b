//! Our `rds-stress` in RDMA mode over RDS/IB (soft-RoCE `rxe0`), our stack on both ends.
//!
//! The host has no RDMA device, so both sides run in the lab guests, booted with `--ib=0`
//! (neither kernel loads `rds_rdma`, so our nodes can listen on the RDMA CM port 18634):
//! the passive side in g1 (198.18.0.2), the active side in g2 (198.18.0.4), each an embedded
//! node with the IB transport only (`-D` selects it because the address is on `rxe0`). The
//! release binary `target/release/rds-stress` (glibc-dynamic, built on the host) runs from the
//! guests' shares.
//!
//! Runs, each `-D 8192 -d 2 -T 5 -v` (the requester checks the pattern of every RDMA write,
//! the responder that of every RDMA read; a mismatch would end the run with exit 1):
//! - `-M 0` (reads and writes alternate per flow), both ways: on both sides mbi and mbo > 0;
//! - `-M 1 -o` (reads only, one way: the passive side reads the active side's regions):
//!   active mbo > 0 and mbi 0, passive the reverse;
//! - `-M 2 -o` (writes only, one way: the passive side writes them): active mbi > 0 and mbo 0,
//!   passive the reverse;
//! - `-M 0 -I 4 --rdma-use-get-mr 1` (4 iovecs of 8 KiB, RDS_GET_MR + RDMA_DEST), both ways;
//! - `-M 0 --rdma-use-once 1` (use-once RDMA_MAP registrations), both ways;
//! - `-M 0 --rdma-use-get-mr 1 --rdma-cache-mrs 1 --rdma-alignment 100` (one key per slot for
//!   the whole run, regions 100 bytes into a page), both ways.
//!
//! Each run asserts exit status 0 on both sides, the column header, per-second lines and the
//! `(average)` line shape, the RDMA columns, and no failure text (no failed RDMA
//! notification). Needs root and the release binary (`cargo build --release -p rds-stress`);
//! fails, never skips, when the lab cannot boot.

use anyhow::{bail, ensure, Context, Result};
use rds_tests::lab::{guest_addr, Lab, LabOptions};
use rds_tests::stress::{our_rds_stress, parse_row, HEADER};
use std::time::{Duration, Instant};

const PORT: u16 = 4300;
const SECS: u32 = 5;
/// Guest-side limit of one rds-stress run (4 s start-up + 5 s + 1 s stop, TCG slack).
const RUN_LIMIT: Duration = Duration::from_secs(60);

fn debug() -> bool {
    std::env::var_os("RDS_IB_DEBUG").is_some()
}

/// Which RDMA columns must be non-zero (`true`) or exactly zero (`false`).
#[derive(Clone, Copy, Debug)]
struct Expect {
    mbi: bool,
    mbo: bool,
}

/// Checks one side's finished output; returns its per-second lines and average line.
fn check_side(who: &str, status: i32, out: &str, err: &str, want: Expect) -> Result<Vec<String>> {
    let ctx = || format!("{who}: exit {status}\n--- stdout ---\n{out}--- stderr ---\n{err}");
    ensure!(status == 0, "{}", ctx());
    // RDS_IB_DEBUG=1 (passed on to the guests) fills stderr with the transport's CM log.
    let err_checked = if debug() { "" } else { err };
    let all = format!("{out}\n{err_checked}").to_ascii_lowercase();
    for bad in ["corrupt", "fail", "bogus", "unexpected", "error"] {
        ensure!(!all.contains(bad), "{bad:?} in the output; {}", ctx());
    }
    ensure!(
        out.contains("negotiated options, tasks will start in 2 seconds\n"),
        "no negotiation line; {}",
        ctx()
    );
    ensure!(
        out.lines().any(|l| l == HEADER),
        "no column header; {}",
        ctx()
    );
    let mut seconds = Vec::new();
    let mut average = None;
    for l in out.lines() {
        let Some(row) = parse_row(l) else { continue };
        if l.ends_with("  (average)") {
            ensure!(average.is_none(), "two average lines; {}", ctx());
            average = Some((l.to_string(), row));
        } else {
            ensure!(average.is_none(), "a row after the average; {}", ctx());
            seconds.push((l.to_string(), row));
        }
    }
    let Some((avg_line, avg)) = average else {
        bail!("no (average) line; {}", ctx());
    };
    // The summary's shape: "%4u %6lu %6lu %10.2f %10.2f %10.2f %7.2f %8.2f %5.2f  (average)":
    // the line must be exactly its values printed again in that format.
    let again = format!(
        "{:4} {:6} {:6} {:10.2} {:10.2} {:10.2} {:7.2} {:8.2} {:5.2}  (average)",
        avg[0] as u64, avg[1] as u64, avg[2] as u64, avg[3], avg[4], avg[5], avg[6], avg[7], avg[8]
    );
    ensure!(
        avg_line == again && avg[0] == 1.0 && avg[8] == -1.0,
        "average line shape: {avg_line:?} (expected {again:?}); {}",
        ctx()
    );
    ensure!(
        out.contains("---------------------------------------------\n"),
        "no dashes line; {}",
        ctx()
    );
    ensure!(!seconds.is_empty(), "no per-second lines; {}", ctx());
    ensure!(avg[1] > 0.0 || avg[2] > 0.0, "no requests; {}", ctx());
    for (name, col, nonzero) in [("mbi", 4, want.mbi), ("mbo", 5, want.mbo)] {
        if nonzero {
            ensure!(avg[col] > 0.0, "{name} K/s is 0; {}", ctx());
        } else {
            ensure!(
                seconds.iter().all(|s| s.1[col] == 0.0) && avg[col] == 0.0,
                "{name} K/s must stay 0; {}",
                ctx()
            );
        }
    }
    let mut lines: Vec<String> = seconds.into_iter().map(|s| s.0).collect();
    lines.push(avg_line);
    Ok(lines)
}

struct Case {
    name: &'static str,
    args: &'static str,
    active: Expect,
    passive: Expect,
}

const BOTH: Expect = Expect {
    mbi: true,
    mbo: true,
};

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "M0",
            args: "-M 0",
            active: BOTH,
            passive: BOTH,
        },
        Case {
            // The passive side reads the active side's regions: data leaves the active side.
            name: "M1-oneway",
            args: "-M 1 -o",
            active: Expect {
                mbi: false,
                mbo: true,
            },
            passive: Expect {
                mbi: true,
                mbo: false,
            },
        },
        Case {
            // The passive side writes the active side's regions.
            name: "M2-oneway",
            args: "-M 2 -o",
            active: Expect {
                mbi: true,
                mbo: false,
            },
            passive: Expect {
                mbi: false,
                mbo: true,
            },
        },
        Case {
            name: "M0-I4-get-mr",
            args: "-M 0 -I 4 --rdma-use-get-mr 1",
            active: BOTH,
            passive: BOTH,
        },
        Case {
            // RDMA_MAP registrations released by the stack when the ack's RDMA arrives.
            name: "M0-use-once",
            args: "-M 0 --rdma-use-once 1",
            active: BOTH,
            passive: BOTH,
        },
        Case {
            // One RDS_GET_MR key per slot for the whole run, regions 100 bytes into a page.
            name: "M0-cache-mrs-align",
            args: "-M 0 --rdma-use-get-mr 1 --rdma-cache-mrs 1 --rdma-alignment 100",
            active: BOTH,
            passive: BOTH,
        },
    ]
}

fn run(lab: &Lab, report: &mut Vec<String>) -> Result<()> {
    let (g1, g2) = (guest_addr(1), guest_addr(2));
    for g in 1..=2 {
        lab.exec_ok(g, "! grep -q '^rds_rdma ' /proc/modules", RUN_LIMIT)
            .context("rds_rdma must not be loaded")?;
    }
    let bin = std::fs::read(our_rds_stress()?).context("reading rds-stress")?;
    let p1 = lab.write_share(1, "rds-stress", &bin)?;
    let p2 = lab.write_share(2, "rds-stress", &bin)?;
    let env = format!(
        "RDS_NO_DAEMON=1 RDS_RUNTIME_DIR=/tmp/rds-stress-rdma{}",
        if debug() { " RDS_IB_DEBUG=1" } else { "" }
    );
    // RDS_STRESS_RDMA_CASES=M0,M2-oneway runs only those (for debugging).
    let only = std::env::var("RDS_STRESS_RDMA_CASES").ok();
    for c in cases() {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|n| n == c.name))
        {
            continue;
        }
        let t0 = Instant::now();
        let common = format!("-p {PORT} -D 8192 -d 2 -T {SECS} -v {}", c.args);
        let pcmd = format!("mkdir -p /tmp/rds-stress-rdma; {env} {p1} -r {g1} -p {PORT}");
        let acmd = format!("mkdir -p /tmp/rds-stress-rdma; {env} {p2} -r {g2} -s {g1} {common}");
        report.push(format!("[{}] g1$ {pcmd}", c.name));
        report.push(format!("[{}] g2$ {acmd}", c.name));
        let passive = lab.spawn(1, &pcmd, RUN_LIMIT)?;
        passive
            .wait_for_output("waiting for incoming connection", Duration::from_secs(30))
            .with_context(|| format!("[{}] passive side", c.name))?;
        let a = lab.exec(2, &acmd, RUN_LIMIT)?;
        let p = passive.wait()?;
        let both = || {
            format!(
                "\n=== passive (g1) exit {} ===\n{}--- stderr ---\n{}",
                p.status, p.stdout, p.stderr
            )
        };
        let al = check_side(
            &format!("[{}] active (g2)", c.name),
            a.status,
            &a.stdout,
            &a.stderr,
            c.active,
        )
        .with_context(both)?;
        let pl = check_side(
            &format!("[{}] passive (g1)", c.name),
            p.status,
            &p.stdout,
            &p.stderr,
            c.passive,
        )?;
        report.push(format!(
            "[{}] done in {:.1} s; active:",
            c.name,
            t0.elapsed().as_secs_f64()
        ));
        report.push(format!("  {HEADER}"));
        report.extend(al.into_iter().map(|l| format!("  {l}")));
        report.push(format!("[{}] passive:", c.name));
        report.extend(pl.into_iter().map(|l| format!("  {l}")));
        if debug() {
            report.push(format!("[{}] active stderr:\n{}", c.name, a.stderr));
            report.push(format!("[{}] passive stderr:\n{}", c.name, p.stderr));
        }
    }
    Ok(())
}

/// Our rds-stress in RDMA mode, our RDS/IB stack in both guests; see the module docs.
#[test]
fn rds_stress_rdma_ours_to_ours() {
    let t0 = Instant::now();
    let opts = LabOptions {
        ib: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(2, opts).expect("the kernel lab must boot");
    let mut report = Vec::new();
    let r = run(&lab, &mut report);
    report.iter().for_each(|l| println!("{l}"));
    if let Err(e) = &r {
        eprintln!("FAILED: {e:#}");
        for g in 1..=2 {
            let log = lab.console_log(g);
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- g{g} console (last lines) ---");
            tail.iter().rev().for_each(|l| eprintln!("{l}"));
        }
    }
    lab.stop().expect("lab stop");
    println!("total {:.1}s", t0.elapsed().as_secs_f64());
    if let Err(e) = r {
        panic!("rds-stress RDMA over rxe failed: {e:#}");
    }
}
