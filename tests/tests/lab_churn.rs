//! Churn against the kernel (issue 31, item 4): our node and the Debian kernel's `rds_tcp` in a
//! lab guest exchange the kernel selftest's traffic while their RDS/TCP connections are
//! dropped and cut over and over; two variants claim what survives (below).
//!
//! Traffic: `test.py`'s, as `rdstool selftest-peer` (g1, kernel) and our endpoint
//! (`rds_tests::interop::selftest_peer`) run it without barriers: [`TOTAL`] messages, the
//! 64-byte hex SHA-256 of `"packet n"`, sender `n % 2`, receiver `1 - (n % 3) % 2`, so
//! 40,000 messages from us to the kernel, 20,000 from the kernel to us and 20,000 self-sends
//! on each side;
//! non-blocking sends retried on EAGAIN/ENOBUFS. Both sides keep a running SHA-256 per
//! (sender, receiver) pair over what they sent and what they received and check every
//! message against the next one expected (duplicates, gaps, foreign messages counted); the
//! test compares the kernel's digests with ours in both directions.
//!
//! Churn, one step every [`STEP`] from a second thread while the traffic flows (no quiescing),
//! in this cycle:
//! 1. our node restarts the connection (`Node::restart_conn`: all lanes reconnect, we
//!    retransmit);
//! 2. the kernel drops its connections: a write of `net.rds.tcp.rds_tcp_sndbuf` in g1 (every
//!    write drops all of its RDS/TCP connections, like the selftest's reset);
//! 3. one lane cut: `ss -K` in the lab namespace destroys one of our lanes' TCP sockets (our
//!    node sees it fail, the kernel gets a reset); the lane is picked in turn;
//! 4. our node's `tcp_sndbuf`/`tcp_rcvbuf` tunables change (our node drops every lane, as
//!    `faultnet`'s `toggle_tcp_bufs`);
//! 5. every lane cut at once (`ss -K` on all of them).
//!
//! Our node is at 198.18.0.1, smaller than g1 (198.18.0.2): it initiates every lane, which
//! are the sockets `ss -K` finds with destination port 16385. The time limit is [`LIMIT`]
//! for the traffic; on a stall the failure names the counts sent, received and expected per
//! pair on both sides, the churn steps done, and both stacks' state. Each variant boots one
//! guest (no `rds_rdma`): 30-50 s with the boot (10-34 s). Needs root and `ss` with `SOCK_DESTROY`
//! support in the host kernel (`CONFIG_INET_DIAG_DESTROY`); fails, never skips, when either
//! is missing.
//!
//! The kernel's window, and ours: the 6.1 kernel sends no lane identity (SPORT_IDX) and puts
//! each connection it accepts into its first free slot (`rds_tcp_accept_one_path`), whatever
//! our lane. Our node therefore connects its lanes to it one at a time in index order (lane
//! i once lanes 0..i are up: `Stack::in_turn`), so after an all-lane drop lane i lands in
//! slot i. What stays open: a lane that goes down (a cut, a drop) while the next lane is
//! connecting or sits in the kernel's accept queue leaves that connection in the lower,
//! freed slot; resent messages (RETRANSMITTED, including ones already delivered) are then
//! checked against the other lane's `next_rx_seq` and delivered again, by either side. The
//! kernel against itself has the same window (the lab's notes: kernel to kernel, resets in
//! flight duplicate and lose messages). So:
//! - [`one_lane_exactly_once_in_order`]: our node offers one lane (`mprds_paths = 1`, the
//!   kernel takes NPATHS=1 from our probe), no slot is chosen: every message exactly once
//!   and in order both ways, the digests equal;
//! - [`eight_lanes_no_loss`]: eight lanes; every message arrives, in order of first arrival,
//!   unaltered, nothing foreign, both ends complete and drained; the duplicates (copies of
//!   messages delivered before: only a resend after a reconnect makes one; the test cannot
//!   see the RETRANSMITTED flag itself) are counted and printed, and must account exactly for
//!   the received counts beyond the messages sent.
//!
//! Measured on this branch (6 runs of each, back to back, a shared 2-core VM): one lane,
//! 6 of 6 exactly once (15-29 s of traffic); eight lanes, 6 of 6 without a loss (17-23 s), 3 of them
//! with duplicates (148 at our node; 697 at the kernel; 3 at our node). Before the ordered
//! connect, 6 of the first 12 runs had duplicates (77 and 208 at our node, 726, 1,664 and
//! 2,702 at the kernel in the 5 recorded): at this sample size the order does not show a
//! smaller rate; what is left is the window above.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rds_core::stats::Counter;
use rds_core::Node;
use rds_tests::interop::*;
use rds_tests::lab::{guest_addr, Lab, LabOptions, HOST_ADDR1, RDS_TCP_PORT};

/// Messages in all (test.py's numbering): endpoint 0 (ours) sends the even ones, two thirds
/// of them to endpoint 1; endpoint 1 sends the odd ones, one third of them to endpoint 0.
const TOTAL: u64 = 120_000;
/// Time from one churn step to the next.
const STEP: Duration = Duration::from_millis(400);
/// Time limit of the traffic.
const LIMIT: Duration = Duration::from_secs(150);
/// Our endpoint's and the kernel's RDS ports.
const PORT: u16 = 41000;

/// What the churn thread did.
#[derive(Debug, Default)]
struct Churn {
    restarts: u32,
    kernel_drops: u32,
    lane_cuts: u32,
    tunables: u32,
    all_cuts: u32,
    /// TCP sockets `ss -K` destroyed.
    killed: u32,
    /// Most of our lanes seen established at once (before a single-lane cut).
    max_lanes: usize,
    /// Steps that could not act (no connection at that moment) or failed.
    misses: Vec<String>,
}

/// Our node's established RDS/TCP lanes to `kernel`, as (local port) from `ss`.
fn our_lanes(lab: &Lab, kernel: IpAddr) -> Result<Vec<u16>> {
    let filter = format!("state established dst {kernel} and dport = :{RDS_TCP_PORT}");
    let out = lab
        .ns_command("ss")
        .args(["-tnH"])
        .args(filter.split(' '))
        .output()
        .context("ss")?;
    ensure!(
        out.status.success(),
        "ss: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ports = Vec::new();
    for l in text.lines() {
        // State Recv-Q Send-Q Local:Port Peer:Port (no state column with a state filter)
        let local = l
            .split_whitespace()
            .find(|w| w.starts_with(&format!("{HOST_ADDR1}:")))
            .with_context(|| format!("ss line without our address: {l}"))?;
        ports.push(local.rsplit(':').next().unwrap_or("").parse()?);
    }
    Ok(ports)
}

/// Destroys our lanes to `kernel` (only the one from local port `sport` if given); returns how
/// many sockets `ss -K` destroyed.
fn cut(lab: &Lab, kernel: IpAddr, sport: Option<u16>) -> Result<u32> {
    let mut filter = format!("dst {kernel} and dport = :{RDS_TCP_PORT}");
    if let Some(p) = sport {
        filter += &format!(" and sport = :{p}");
    }
    let out = lab
        .ns_command("ss")
        .args(["-K", "-tnH"])
        .args(filter.split(' '))
        .output()
        .context("ss -K")?;
    ensure!(
        out.status.success(),
        "ss -K: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).lines().count() as u32)
}

/// One churn step (`i` picks the kind and the values).
fn step(lab: &Lab, node: &Node, kernel: IpAddr, i: u32, ch: &mut Churn) -> Result<()> {
    match i % 5 {
        0 => {
            if node.restart_conn(IpAddr::V4(HOST_ADDR1), kernel) {
                ch.restarts += 1;
            } else {
                ch.misses
                    .push(format!("step {i}: no connection to restart"));
            }
        }
        1 => {
            let v = [100_000, 200_000][(ch.kernel_drops % 2) as usize];
            lab.exec_ok(
                1,
                &format!("echo {v} > /proc/sys/net/rds/tcp/rds_tcp_sndbuf"),
                Duration::from_secs(30),
            )?;
            ch.kernel_drops += 1;
        }
        2 => {
            let lanes = our_lanes(lab, kernel)?;
            ch.max_lanes = ch.max_lanes.max(lanes.len());
            if lanes.is_empty() {
                ch.misses
                    .push(format!("step {i}: no established lane to cut"));
                return Ok(());
            }
            let p = lanes[(ch.lane_cuts as usize) % lanes.len()];
            let n = cut(lab, kernel, Some(p))?;
            ch.killed += n;
            if n > 0 {
                ch.lane_cuts += 1;
            } else {
                ch.misses
                    .push(format!("step {i}: lane :{p} gone before the cut"));
            }
        }
        3 => {
            let mut t = node.tunables();
            let v = if t.tcp_sndbuf == 131_072 {
                262_144
            } else {
                131_072
            };
            t.tcp_sndbuf = v;
            t.tcp_rcvbuf = v;
            node.set_tunables(t);
            ch.tunables += 1;
        }
        _ => {
            let n = cut(lab, kernel, None)?;
            ch.killed += n;
            if n > 0 {
                ch.all_cuts += 1;
            } else {
                ch.misses.push(format!("step {i}: no lane to cut"));
            }
        }
    }
    Ok(())
}

/// Our node's and the kernel's state, for a failure report.
fn diag(lab: &Lab, node: &Node) -> String {
    let mut s = String::new();
    for c in node.connections() {
        s += &format!(
            "ours: conn {}->{} {} npaths={}\n",
            c.laddr, c.faddr, c.kind, c.npaths
        );
        for p in &c.paths {
            s += &format!("  {p:?}\n");
        }
    }
    s += &format!(
        "ours: sendq {} retransq {}; conn_reset {} recv_drop_old_seq {} conn_reset_unadopted {}\n",
        node.send_queue().len(),
        node.retrans_queue().len(),
        node.counter(Counter::ConnReset),
        node.counter(Counter::RecvDropOldSeq),
        node.counter(Counter::ConnResetUnadopted)
    );
    match lab.exec(
        1,
        "rdstool info conns tcp sendq retransq recvq; dmesg | tail -n 5",
        Duration::from_secs(30),
    ) {
        Ok(o) => s += &format!("kernel:\n{}{}", o.stdout, o.stderr),
        Err(e) => s += &format!("kernel info: {e:#}\n"),
    }
    s
}

/// What a variant claims about the messages that crossed between our node and the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Every message exactly once and in order, both ways (the digests match).
    ExactlyOnce,
    /// Every message arrives, in order of first arrival, unaltered, nothing foreign; copies
    /// of messages delivered before (resends after a reconnect) are counted, not failed.
    NoLoss,
}

/// Boots the lab, runs the traffic and the churn with our node offering `lanes` lanes
/// (`net.rds.mprds_paths`), checks `claim`; panics with the full report on failure.
fn churn_against_the_kernel(lanes: u8, claim: Claim) {
    let t0 = Instant::now();
    // Precondition: the host kernel destroys sockets on request (or the cuts cannot happen).
    let ss = std::process::Command::new("ss").arg("-V").output();
    assert!(
        ss.as_ref().is_ok_and(|o| o.status.success()),
        "`ss` (iproute2) is needed for the TCP cuts: {ss:?}"
    );
    let lab = Lab::start(
        1,
        LabOptions {
            ib: false,
            ..LabOptions::default()
        },
    )
    .expect("the kernel lab must boot");
    let boot = t0.elapsed();
    let node = start_node(&lab, HOST_ADDR1, 0x5eed_c4a2).expect("our node");
    let mut t = node.tunables();
    t.mprds_paths = lanes;
    node.set_tunables(t);
    let kernel = IpAddr::V4(guest_addr(1));
    let r = run(&lab, &node).and_then(|o| check(&node, &o, lanes, claim));
    let total = t0.elapsed();
    let report = match &r {
        Ok(s) => s.clone(),
        Err(e) => format!(
            "{e:#}\n--- state after the failure ---\n{}",
            diag(&lab, &node)
        ),
    };
    node.shutdown();
    lab.stop().expect("lab stop");
    println!(
        "lab_churn({lanes} lane(s), {claim:?}): {report}\nlab_churn: boot {:.1} s, total {:.1} s \
         (kernel {kernel})",
        boot.as_secs_f64(),
        total.as_secs_f64()
    );
    assert!(r.is_ok(), "churn against the kernel failed: {report}");
}

#[test]
fn one_lane_exactly_once_in_order() {
    churn_against_the_kernel(1, Claim::ExactlyOnce);
}

#[test]
fn eight_lanes_no_loss() {
    churn_against_the_kernel(8, Claim::NoLoss);
}

/// What the traffic and the churn left behind.
struct Outcome {
    ours: SelftestReport,
    /// The kernel endpoint's output and exit status.
    ktext: String,
    kstatus: i32,
    churn: Churn,
    /// Counter growth during the traffic: conn_reset and recv_drop_old_seq, kernel and ours.
    kreset: u64,
    oreset: u64,
    kdrop_old: u64,
    odrop_old: u64,
    /// Our connections the kernel reset before answering on them, with acknowledged messages
    /// (resent): `conn_reset_unadopted`.
    ounadopted: u64,
}

/// The traffic with the churn thread beside it.
fn run(lab: &Lab, node: &Node) -> Result<Outcome> {
    let kernel = IpAddr::V4(guest_addr(1));
    let ep = [
        SocketAddr::new(IpAddr::V4(HOST_ADDR1), PORT),
        SocketAddr::new(kernel, PORT + 1),
    ];
    let (me, kme) = (0usize, 1usize);
    let k0 = parse_counters(
        &lab.exec_ok(1, "rdstool info counters", Duration::from_secs(30))?
            .stdout,
    );
    let ours_reset0 = node.counter(Counter::ConnReset);
    let ours_drop0 = node.counter(Counter::RecvDropOldSeq);
    let ours_unadopted0 = node.counter(Counter::ConnResetUnadopted);
    let sock = bound_socket(node, ep[me])?;
    let limit = LIMIT.as_secs();
    let job = lab.spawn(
        1,
        &format!(
            "rdstool selftest-peer --me {kme} --ep0 {} --ep1 {} -n {TOTAL} --timeout {}",
            ep[0],
            ep[1],
            limit + 20
        ),
        Duration::from_secs(limit + 40),
    )?;
    job.wait_for_output("selftest-peer: bound", Duration::from_secs(30))?;
    let cfg = SelftestConfig {
        me,
        ep,
        total: TOTAL,
        reset_every: 0,
        leader: None,
        reset_values: [0, 0],
        timeout: LIMIT,
    };
    let running = AtomicBool::new(true);
    let (ours, churn) = std::thread::scope(|s| {
        let churner = s.spawn(|| {
            let mut ch = Churn::default();
            let mut i = 0u32;
            let mut next = Instant::now() + STEP;
            while running.load(Ordering::Relaxed) {
                if Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                if let Err(e) = step(lab, node, kernel, i, &mut ch) {
                    ch.misses.push(format!("step {i}: {e:#}"));
                }
                i += 1;
                next = Instant::now() + STEP;
            }
            ch
        });
        let ours = selftest_peer(node, &sock, &cfg, &mut |_| {});
        running.store(false, Ordering::Relaxed);
        (ours, churner.join().expect("churn thread"))
    });
    let kout = job.wait()?;
    let k1 = parse_counters(
        &lab.exec_ok(1, "rdstool info counters", Duration::from_secs(30))?
            .stdout,
    );
    Ok(Outcome {
        ours,
        ktext: format!("{}{}", kout.stdout, kout.stderr),
        kstatus: kout.status,
        churn,
        kreset: k1["conn_reset"] - k0["conn_reset"],
        oreset: node.counter(Counter::ConnReset) - ours_reset0,
        kdrop_old: k1["recv_drop_old_seq"] - k0["recv_drop_old_seq"],
        odrop_old: node.counter(Counter::RecvDropOldSeq) - ours_drop0,
        ounadopted: node.counter(Counter::ConnResetUnadopted) - ours_unadopted0,
    })
}

/// The kernel endpoint's `diag S R ... duplicates=D gaps=G missing=M foreign=F` line, as
/// `[D, G, M, F]` (the order of our report's `diag`).
fn kernel_diag(out: &str, s: usize, r: usize) -> Option<[u64; 4]> {
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("diag {s} {r} ")))?;
    let field = |k: &str| -> Option<u64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some([
        field("duplicates")?,
        field("gaps")?,
        field("missing")?,
        field("foreign")?,
    ])
}

/// The kernel endpoint's final line ran to the end (`rounds=1`: without barriers the whole
/// traffic is one round, counted once it completes).
fn kernel_complete(out: &str) -> bool {
    out.lines()
        .filter(|l| l.starts_with("selftest-peer: "))
        .any(|l| l.split_whitespace().any(|w| w == "rounds=1"))
}

/// Checks `claim` and the churn; the summary on success.
fn check(node: &Node, o: &Outcome, lanes: u8, claim: Claim) -> Result<String> {
    let kernel = IpAddr::V4(guest_addr(1));
    let (me, kme) = (0usize, 1usize);
    let ours = &o.ours;
    let ktext = &o.ktext;
    let churn = &o.churn;
    let limit = LIMIT.as_secs();
    let both = || format!("ours:\n{}kernel:\n{ktext}churn: {churn:?}", ours.lines(me));
    let digest = |kind: &str, s: usize, r: usize| {
        parse_digest(ktext, kind, s, r)
            .with_context(|| format!("no `{kind} {s} {r}` line from the kernel\n{}", both()))
    };
    let kdiag = |s: usize, r: usize| {
        kernel_diag(ktext, s, r)
            .with_context(|| format!("no `diag {s} {r}` line from the kernel\n{}", both()))
    };
    let (ksend, krecv, kexp) = (
        digest("send", kme, me)?,
        digest("recv", me, kme)?,
        digest("expect", me, kme)?,
    );
    // [duplicates, gaps, missing, foreign] per direction.
    let (to_kernel, from_kernel) = (kdiag(me, kme)?, ours.diag[kme]);
    // Self-sends never leave a host: exact on both sides whatever the claim.
    ensure!(
        digest("recv", kme, kme)? == digest("expect", kme, kme)?
            && ours.recv[me] == ours.expect[me]
            && kdiag(kme, kme)? == [0; 4]
            && ours.diag[me] == [0; 4],
        "self-send digests differ\n{}",
        both()
    );
    ensure!(
        ksend.count == TOTAL / 6 && ours.send[kme].count == TOTAL / 3,
        "the kernel sent {} messages to us and we sent {} to it, expected {} and {}\n{}",
        ksend.count,
        ours.send[kme].count,
        TOTAL / 6,
        TOTAL / 3,
        both()
    );
    match claim {
        Claim::ExactlyOnce => {
            if !ours.ok || o.kstatus != 0 {
                bail!(
                    "the traffic did not complete within {limit} s or was wrong (kernel status \
                     {})\n{}",
                    o.kstatus,
                    both()
                );
            }
            ensure!(
                ksend == ours.recv[kme] && ours.recv[kme] == ours.expect[kme],
                "kernel->ours digests differ: kernel sent {ksend:?}, we received {:?}, \
                 expected {:?}\n{}",
                ours.recv[kme],
                ours.expect[kme],
                both()
            );
            ensure!(
                krecv == ours.send[kme] && krecv == kexp,
                "ours->kernel digests differ: we sent {:?}, kernel received {krecv:?}, \
                 expected {kexp:?}\n{}",
                ours.send[kme],
                both()
            );
        }
        Claim::NoLoss => {
            // Both ends ran to their end: every message sent, and every one expected seen
            // in order of first arrival (the checker moves on only on the exact 64 bytes
            // expected next); nothing skipped (gaps, missing) and nothing foreign or
            // altered (an altered message is no packet of this test: foreign). What is
            // left are copies of messages delivered before.
            ensure!(
                ours.complete && ours.drained && kernel_complete(ktext),
                "the traffic did not complete within {limit} s (ours: complete {} drained \
                 {})\n{}",
                ours.complete,
                ours.drained,
                both()
            );
            ensure!(
                to_kernel[1..] == [0; 3] && from_kernel[1..] == [0; 3],
                "lost or foreign messages: to the kernel {to_kernel:?}, from it \
                 {from_kernel:?} ([duplicates, gaps, missing, foreign])\n{}",
                both()
            );
            ensure!(
                krecv.count == TOTAL / 3 + to_kernel[0]
                    && ours.recv[kme].count == TOTAL / 6 + from_kernel[0],
                "received counts are not the messages plus their duplicates: kernel {} \
                 ({} duplicates), ours {} ({} duplicates)\n{}",
                krecv.count,
                to_kernel[0],
                ours.recv[kme].count,
                from_kernel[0],
                both()
            );
            if to_kernel[0] + from_kernel[0] == 0 {
                ensure!(
                    ksend == ours.recv[kme] && krecv == ours.send[kme] && krecv == kexp,
                    "no duplicates, yet the digests differ\n{}",
                    both()
                );
            }
        }
    }
    // The churn happened, each kind more than once, and both stacks saw the drops.
    ensure!(
        churn.restarts >= 2
            && churn.kernel_drops >= 2
            && churn.lane_cuts >= 2
            && churn.tunables >= 2
            && churn.all_cuts >= 2,
        "too little churn during the traffic ({:.1} s): {churn:?}",
        ours.elapsed.as_secs_f64()
    );
    ensure!(
        o.kreset > 0 && o.oreset > 0,
        "conn_reset grew by {} in the kernel and {} in our node",
        o.kreset,
        o.oreset
    );
    // The lanes offered were the lanes used.
    let npaths: Vec<usize> = node
        .connections()
        .iter()
        .filter(|c| c.faddr == kernel)
        .map(|c| c.npaths)
        .collect();
    ensure!(
        npaths == [usize::from(lanes)] && churn.max_lanes <= usize::from(lanes),
        "offering {lanes} lane(s): npaths {npaths:?}, up to {} lanes established at once",
        churn.max_lanes
    );
    Ok(format!(
        "{TOTAL} msgs ({} to the kernel, {} from it; duplicates: {} at the kernel, {} at ours) \
         in {:.1} s under churn: {} restarts, {} kernel drops, {} lane cuts, {} tunable \
         changes, {} all-lane cuts ({} TCP sockets destroyed, up to {} lanes established, {} \
         steps missed: {:?}); conn_reset kernel +{} ours +{}; recv_drop_old_seq kernel +{} \
         ours +{}; conn_reset_unadopted ours +{}; ours->kernel {}…, kernel->ours {}…",
        TOTAL / 3,
        TOTAL / 6,
        to_kernel[0],
        from_kernel[0],
        ours.elapsed.as_secs_f64(),
        churn.restarts,
        churn.kernel_drops,
        churn.lane_cuts,
        churn.tunables,
        churn.all_cuts,
        churn.killed,
        churn.max_lanes,
        churn.misses.len(),
        churn.misses,
        o.kreset,
        o.oreset,
        o.kdrop_old,
        o.odrop_old,
        o.ounadopted,
        &krecv.hex[..16],
        &ksend.hex[..16],
    ))
}
