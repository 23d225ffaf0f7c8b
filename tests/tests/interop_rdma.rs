//! RDS RDMA over soft-RoCE (`rxe0`) in the lab: `rdstool rdma-target` / `rdma-initiator`
//! (tests/lab/README.md) between two kernels.
//!
//! Both guests boot without the kernel's `rds_rdma` (`--ib=0`) and load it from the lab's
//! kernel tree ([`load_kernel_rds_rdma`]); the target runs in g1 (198.18.0.2), the initiator
//! in g2 (198.18.0.4). Per case: the target registers `len` bytes of pattern(seed), offers
//! the cookie (text and `RDS_CMSG_RDMA_DEST`), the initiator RDMA-reads the region (notify,
//! token 1), checks it, RDMA-writes pattern(seed2) (notify, token 2) and the target checks
//! its region. Cases: 1 MiB, 5000 bytes (two pages, odd size), and 5000 bytes with a
//! use-once MR.
//!
//! Kernel behaviour this pins down (Debian 6.1):
//! - `RDS_GET_MR` on a socket whose address has never had an RDS/IB connection: `ENODEV`
//!   (the device is found through an address list filled when a connection comes up);
//! - `RDS_GET_MR` with a connection up: `EOPNOTSUPP` (FRMR registration needs a connection's
//!   queue pair; only `RDS_CMSG_RDMA_MAP` on a message has one), so rdstool registers with
//!   `RDS_CMSG_RDMA_MAP` on a ping and then offers the cookie with `RDS_CMSG_RDMA_DEST`;
//! - the receiver of a message with `RDS_CMSG_RDMA_DEST` gets that cookie as a cmsg;
//! - notifications arrive as `{token, 0}`; the initiator's counters count an RDMA read in
//!   `recv_rdma_bytes`, a write in `send_rdma_bytes`, each op once in `send_rdma`;
//! - a use-once MR leaves the socket's key table when the first message naming it arrives
//!   (`RDS_FREE_MR` afterwards: `EINVAL`), but its rkey stays valid: the later RDMA write
//!   still succeeds.
//!
//! Needs root; fails (never skips) when the lab cannot boot, like the other lab tests.

use anyhow::{ensure, Context, Result};
use rds_tests::ib::load_kernel_rds_rdma;
use rds_tests::interop::parse_counters;
use rds_tests::lab::{guest_addr, Lab, LabOptions};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// pattern(seed)[i] = (i*131 + seed*7 + (i>>8)) & 0xff, as in rdstool.
pub fn rdma_pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            (i.wrapping_mul(131)
                .wrapping_add(seed.wrapping_mul(7))
                .wrapping_add(i >> 8)
                & 0xff) as u8
        })
        .collect()
}

/// One exchange: region size, the two patterns, use-once, the ports (target, initiator).
#[derive(Clone, Copy, Debug)]
struct Case {
    len: usize,
    seed: u64,
    seed2: u64,
    use_once: bool,
    t_port: u16,
    i_port: u16,
}

const KERNEL_CASES: [Case; 3] = [
    Case {
        len: 1 << 20,
        seed: 5,
        seed2: 9,
        use_once: false,
        t_port: 6000,
        i_port: 6001,
    },
    Case {
        len: 5000,
        seed: 3,
        seed2: 11,
        use_once: false,
        t_port: 6002,
        i_port: 6003,
    },
    Case {
        len: 5000,
        seed: 200,
        seed2: 77,
        use_once: true,
        t_port: 6004,
        i_port: 6005,
    },
];

/// Cuts the variable ` elapsed_ms=…` off a summary line.
fn no_elapsed(l: &str) -> &str {
    l.split(" elapsed_ms=").next().unwrap_or(l)
}

/// The cookie from the target's `rdma-target: mr cookie=0x… ` line.
fn target_cookie(out: &str) -> Result<u64> {
    let l = out
        .lines()
        .find(|l| l.starts_with("rdma-target: mr cookie=0x"))
        .with_context(|| format!("no 'mr cookie=' line in:\n{out}"))?;
    let hex = &l["rdma-target: mr cookie=0x".len()..];
    let hex = hex.split(' ').next().unwrap_or("");
    ensure!(hex.len() == 16, "cookie not 16 hex digits: {l}");
    u64::from_str_radix(hex, 16).with_context(|| format!("bad cookie in {l}"))
}

/// The exact lines of `rdstool rdma-target` (kernel) for `c`, the initiator at `ini`.
/// `fresh`: no RDS/IB connection from the target's address existed before (ENODEV first).
fn kernel_target_lines(
    c: &Case,
    tgt: Ipv4Addr,
    ini: Ipv4Addr,
    cookie: u64,
    fresh: bool,
) -> Vec<String> {
    let mut v = vec![format!(
        "rdma-target: bound {tgt}:{} transport=ib",
        c.t_port
    )];
    if fresh {
        v.push(format!(
            "rdma-target: RDS_GET_MR ENODEV (no IB connection from this address yet); ping {ini}"
        ));
    }
    v.push(format!(
        "rdma-target: RDS_GET_MR EOPNOTSUPP; RDS_CMSG_RDMA_MAP on a ping to {ini}"
    ));
    v.push(format!(
        "rdma-target: mr cookie=0x{cookie:016x} len={} seed={} use_once={} via=rdma_map",
        c.len, c.seed, c.use_once as u8
    ));
    v.push(format!(
        "rdma-target: sent OFFER cookie=0x{cookie:016x} len={} seed={} to {ini}:{}",
        c.len, c.seed, c.i_port
    ));
    v.push(format!("rdma-target: got READ from {ini}:{}", c.i_port));
    v.push(format!(
        "rdma-target: got WROTE seed={} from {ini}:{} check=ok",
        c.seed2, c.i_port
    ));
    v.push("rdma-target: sent CHECKED ok".into());
    v.push(format!(
        "rdma-target: ok len={} seed={} seed2={} free_mr={}",
        c.len,
        c.seed,
        c.seed2,
        if c.use_once { "EINVAL" } else { "ok" }
    ));
    v
}

/// The exact lines of `rdstool rdma-initiator` for `c`.
fn kernel_initiator_lines(c: &Case, tgt: Ipv4Addr, ini: Ipv4Addr, cookie: u64) -> Vec<String> {
    vec![
        format!("rdma-initiator: bound {ini}:{} transport=ib", c.i_port),
        format!(
            "rdma-initiator: got OFFER cookie=0x{cookie:016x} len={} seed={} from {tgt}:{}",
            c.len, c.seed, c.t_port
        ),
        format!("dest-cookie=0x{cookie:016x} match=yes"),
        "rdma read status=0 token=1 ok".into(),
        "rdma write status=0 token=2".into(),
        "CHECKED ok".into(),
        format!(
            "rdma-initiator: ok len={} seed={} seed2={}",
            c.len, c.seed, c.seed2
        ),
    ]
}

fn lines(out: &str) -> Vec<String> {
    out.lines().map(|l| no_elapsed(l).to_string()).collect()
}

fn same_lines(what: &str, got: &str, want: &[String]) -> Result<()> {
    let g = lines(got);
    ensure!(
        g == want,
        "{what}: output differs\n--- got ---\n{}\n--- want ---\n{}",
        g.join("\n"),
        want.join("\n")
    );
    Ok(())
}

fn counters(lab: &Lab, g: usize) -> Result<std::collections::BTreeMap<String, u64>> {
    Ok(parse_counters(
        &lab.exec_ok(g, "rdstool info counters", T)?.stdout,
    ))
}

fn delta(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
    k: &str,
) -> u64 {
    b.get(k).copied().unwrap_or(0) - a.get(k).copied().unwrap_or(0)
}

/// Kernel target in g1, kernel initiator in g2, for every case; `fresh` as in
/// [`kernel_target_lines`] for the first case.
fn kernel_rdma_cases(lab: &Lab, fresh: bool, report: &mut Vec<String>) -> Result<()> {
    let (tgt, ini) = (guest_addr(1), guest_addr(2));
    for (n, c) in KERNEL_CASES.iter().enumerate() {
        let t0 = Instant::now();
        let before = counters(lab, 2)?;
        let job = lab.spawn(
            2,
            &format!(
                "rdstool rdma-initiator -t ib -b {ini}:{} --seed2 {} -T 90",
                c.i_port, c.seed2
            ),
            T,
        )?;
        job.wait_for_output("rdma-initiator: bound", Duration::from_secs(60))?;
        let t = lab.exec(
            1,
            &format!(
                "rdstool rdma-target -t ib -b {tgt}:{} -p {ini}:{} --len {} --seed {}{} -T 90",
                c.t_port,
                c.i_port,
                c.len,
                c.seed,
                if c.use_once { " --use-once" } else { "" }
            ),
            T,
        )?;
        let i = job.wait()?;
        ensure!(
            t.status == 0 && i.status == 0,
            "case {c:?}: target exit {} initiator exit {}\n--- target ---\n{}{}\n--- initiator ---\n{}{}",
            t.status,
            i.status,
            t.stdout,
            t.stderr,
            i.stdout,
            i.stderr
        );
        let cookie = target_cookie(&t.stdout)?;
        // A page-aligned region: offset 0 in the cookie's upper half.
        ensure!(cookie >> 32 == 0, "cookie {cookie:#x} has an offset");
        same_lines(
            "rdma-target",
            &t.stdout,
            &kernel_target_lines(c, tgt, ini, cookie, fresh && n == 0),
        )?;
        same_lines(
            "rdma-initiator",
            &i.stdout,
            &kernel_initiator_lines(c, tgt, ini, cookie),
        )?;
        let after = counters(lab, 2)?;
        let d = |k| delta(&before, &after, k);
        ensure!(
            d("send_rdma") == 2
                && d("recv_rdma_bytes") == c.len as u64
                && d("send_rdma_bytes") == c.len as u64,
            "initiator counters: send_rdma +{} recv_rdma_bytes +{} send_rdma_bytes +{}",
            d("send_rdma"),
            d("recv_rdma_bytes"),
            d("send_rdma_bytes")
        );
        report.push(format!(
            "kernel->kernel len={} use_once={} cookie={cookie:#x}: ok in {} ms",
            c.len,
            c.use_once,
            t0.elapsed().as_millis()
        ));
    }
    Ok(())
}

fn diag(lab: &Lab) -> String {
    let mut s = String::new();
    for g in 1..=2 {
        if let Ok(o) = lab.exec(
            g,
            "dmesg | grep -i -E 'rds|rxe|infiniband' | tail -n 30; rdstool info conns; rdstool info counters | grep -v ' 0$'",
            Duration::from_secs(30),
        ) {
            s += &format!("--- g{g} ---\n{}{}\n", o.stdout, o.stderr);
        }
    }
    s
}

fn run_kernel(lab: &Lab) -> Result<Vec<String>> {
    let mut report = Vec::new();
    for g in 1..=2 {
        load_kernel_rds_rdma(lab, g).with_context(|| format!("loading rds_rdma in g{g}"))?;
    }
    kernel_rdma_cases(lab, true, &mut report)?;
    Ok(report)
}

/// The kernel's RDMA between g1 and g2 over rxe with rdstool (see the module comment).
#[test]
fn kernel_rdma_kernel() {
    let t0 = Instant::now();
    let opts = LabOptions {
        ib: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(2, opts).expect("the kernel lab must boot");
    let booted = t0.elapsed();
    let r = run_kernel(&lab);
    match &r {
        Ok(report) => report.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("FAILED: {e:#}");
            eprintln!("{}", diag(&lab));
        }
    }
    lab.stop().expect("lab stop");
    println!(
        "lab boot {:.1}s, total {:.1}s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    if let Err(e) = r {
        panic!("kernel RDMA failed: {e:#}");
    }
}

#[test]
fn pattern_matches_rdstool_formula() {
    let p = rdma_pattern(5, 600);
    assert_eq!(&p[..4], &[35, 166, 41, 172]);
    // i = 256: 256*131 + 35 + 1 = 33572 -> 0x24
    assert_eq!(p[256], 0x24);
}
