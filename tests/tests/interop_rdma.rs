//! RDS RDMA over soft-RoCE (`rxe0`) in the lab: the kernel's `rds_rdma` driven by `rdstool
//! rdma-target` / `rdma-initiator` (tests/lab/README.md), and our node's RDMA API
//! ([`rds_core::rdma`]) running the same exchange inside a guest.
//!
//! The exchange (per case): the target registers `len` bytes of pattern(seed) and offers the
//! cookie (in the text and as `RDS_CMSG_RDMA_DEST`); the initiator RDMA-reads the region
//! (notify, token 1) and checks it, RDMA-writes pattern(seed2) (notify, token 2), and the
//! target checks its region and answers `CHECKED ok`. Our Rust target and initiator print the
//! same lines as rdstool's (prefixed `RDMA<case> ` in the guest output), so every case is
//! checked line by line against one expectation.
//!
//! One lab boot (`--ib=0`: no `rds_rdma` anywhere), the cases in this order:
//! 1. `ours_to_ours_rdma`: our node in both guests (target g1, initiator g2);
//! 2. g1 loads the kernel's `rds_rdma` ([`load_kernel_rds_rdma`]);
//!    `ours_initiator_kernel_target`: rdstool target in g1, our initiator in g2; last, a read
//!    with a corrupted rkey, without `notify` but with `RDS_RECVERR`: our node reports
//!    `RemoteError`, the kernel target never gets the `READ` message (it gives up after 8 s,
//!    exit 1), and the connection comes back (a ping is answered);
//! 3. `ours_target_kernel_initiator`: our target in g2, rdstool initiator in g1 (its RDMA
//!    counters checked);
//! 4. g2 loads `rds_rdma` too (our node has exited); `kernel_rdma_kernel`: rdstool target in
//!    g1, rdstool initiator in g2: 1 MiB, 5000 bytes (two pages, odd size), 5000 bytes
//!    with a use-once MR, and 5000 bytes at offset 4000 (three pages).
//!
//! Our cases use 1 MiB, 5000 bytes, and 5000 bytes at an offset in the target's buffer (100 or
//! 4000: the cookie carries the page offset, zero-based addressing) with two local buffers on
//! our initiator or, for our target, registration with `RDS_CMSG_RDMA_MAP` on a ping. Our node runs the IB transport only (the guest's
//! kernel `rds_tcp` owns 16385), never in a guest where `rds_rdma` is loaded.
//!
//! Kernel behaviour this pins down (Debian 6.1):
//! - `RDS_GET_MR` on a socket whose address has never had an RDS/IB connection: `ENODEV`
//!   (the device is found through an address list filled when a connection comes up);
//! - `RDS_GET_MR` with a connection up: `EOPNOTSUPP` (FRMR registration needs a connection's
//!   queue pair; only `RDS_CMSG_RDMA_MAP` on a message has one), so rdstool registers with
//!   `RDS_CMSG_RDMA_MAP` on a ping and then offers the cookie with `RDS_CMSG_RDMA_DEST`;
//! - the receiver of a message sent with `RDS_CMSG_RDMA_DEST` gets that cookie as a cmsg
//!   (from the kernel and from our node);
//! - notifications arrive as `{token, 0}`; the initiator's counters count an RDMA read in
//!   `recv_rdma_bytes`, a write in `send_rdma_bytes`, each op once in `send_rdma`;
//! - a use-once MR leaves the socket's key table when the first message naming it arrives
//!   (`RDS_FREE_MR` afterwards: `EINVAL`), but its rkey stays valid: the later RDMA write
//!   still succeeds.
//!
//! Needs root; fails (never skips) when the lab cannot boot, like the other lab tests.
//! `RDS_IB_DEBUG=1` on the host adds our transport's log to the guest output.

use anyhow::{bail, ensure, Context, Result};
use rds_core::rdma::{
    cookie_offset, cookie_rkey, make_cookie, LocalVec, MrFlags, RdmaArgs, RdmaBuffer, RdmaMap,
    SendCtl,
};
use rds_core::{Node, RecvMsg, Socket};
use rds_tests::ib::{
    diag, guest_cmd, host_lab, ib_socket, install_self, ip_env, load_kernel_rds_rdma,
    nonzero_stats, start_ib_node, step, wait_until, GUEST_ENV,
};
use rds_tests::interop::{errno_of, parse_counters};
use rds_tests::lab::{guest_addr, GuestJob, Lab};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);
/// Guest-side limit for one case.
const CASE_LIMIT: Duration = Duration::from_secs(90);

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

/// One exchange: region size, the two patterns, use-once, the ports (target, initiator),
/// where the region starts in the target's page-aligned buffer (the cookie's offset), how
/// many local buffers the initiator uses (1 or 2: gather/scatter), and whether our target
/// registers with `RDS_CMSG_RDMA_MAP` instead of `get_mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Case {
    len: usize,
    seed: u64,
    seed2: u64,
    use_once: bool,
    t_port: u16,
    i_port: u16,
    offset: usize,
    iovs: usize,
    map: bool,
    /// Our initiator reads with a corrupted rkey, without `notify` but with `RDS_RECVERR`:
    /// the failure must still be reported (`RemoteError`), and the message is dropped.
    bad_key: bool,
}

const fn case(len: usize, seed: u64, seed2: u64, use_once: bool, t_port: u16) -> Case {
    Case {
        len,
        seed,
        seed2,
        use_once,
        t_port,
        i_port: t_port + 1,
        offset: 0,
        iovs: 1,
        map: false,
        bad_key: false,
    }
}

impl Case {
    const fn at(mut self, offset: usize) -> Case {
        self.offset = offset;
        self
    }
    const fn iov2(mut self) -> Case {
        self.iovs = 2;
        self
    }
    const fn mapped(mut self) -> Case {
        self.map = true;
        self
    }
    const fn bad_key(mut self) -> Case {
        self.bad_key = true;
        self
    }
}

const KERNEL_CASES: [Case; 4] = [
    case(1 << 20, 5, 9, false, 6000),
    case(5000, 3, 11, false, 6002),
    case(5000, 200, 77, true, 6004),
    case(5000, 7, 8, false, 6006).at(4000),
];
const OURS_TO_OURS: [Case; 3] = [
    case(1 << 20, 21, 22, false, 6200),
    case(5000, 23, 24, false, 6202),
    case(5000, 25, 26, false, 6204).at(100).iov2(),
];
const OURS_INITIATOR: [Case; 4] = [
    case(1 << 20, 31, 32, false, 6100),
    case(5000, 33, 34, false, 6102),
    case(5000, 35, 36, false, 6104).at(4000).iov2(),
    // Last: the failed RDMA read takes the connection down.
    case(5000, 37, 38, false, 6106).bad_key(),
];
const OURS_TARGET: [Case; 3] = [
    case(1 << 20, 41, 42, false, 6300),
    case(5000, 43, 44, false, 6302),
    case(5000, 45, 46, false, 6304).at(100).mapped(),
];

fn cases_env(cases: &[Case]) -> String {
    cases
        .iter()
        .map(|c| {
            format!(
                "{}:{}:{}:{}:{}:{}:{}:{}:{}",
                c.len,
                c.seed,
                c.seed2,
                c.use_once as u8,
                c.t_port,
                c.offset,
                c.iovs,
                c.map as u8,
                c.bad_key as u8
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_cases(s: &str) -> Result<Vec<Case>> {
    s.split(',')
        .map(|c| {
            let f: Vec<&str> = c.split(':').collect();
            ensure!(f.len() == 9, "bad case {c:?}");
            let mut k = case(
                f[0].parse()?,
                f[1].parse()?,
                f[2].parse()?,
                f[3] == "1",
                f[4].parse()?,
            )
            .at(f[5].parse()?);
            k.iovs = f[6].parse()?;
            k.map = f[7] == "1";
            k.bad_key = f[8] == "1";
            ensure!((1..=2).contains(&k.iovs), "bad iovec count in {c:?}");
            Ok(k)
        })
        .collect()
}

/// The `elapsed_ms=` of `who`'s summary line in `out` ("?" if none).
fn elapsed_ms(out: &str, who: &str) -> String {
    out.lines()
        .find(|l| l.starts_with(&format!("{who}: ok")))
        .and_then(|l| l.split(" elapsed_ms=").nth(1))
        .and_then(|r| r.split(' ').next())
        .unwrap_or("?")
        .to_string()
}

/// Cuts the variable ` elapsed_ms=…` off a summary line.
fn no_elapsed(l: &str) -> &str {
    l.split(" elapsed_ms=").next().unwrap_or(l)
}

/// The cookie from a target's `rdma-target: mr cookie=0x… ` line; its upper half must be
/// the region's page offset (the buffers are page-aligned).
fn case_cookie(c: &Case, out: &str) -> Result<u64> {
    let cookie = target_cookie(out)?;
    ensure!(
        cookie >> 32 == (c.offset % 4096) as u64,
        "cookie {cookie:#x}: offset is not the region's page offset {}",
        c.offset % 4096
    );
    Ok(cookie)
}

/// The cookie from a target's `rdma-target: mr cookie=0x… ` line.
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

/// How the target registered its region (what its lines before `mr cookie=` say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    /// The kernel, with no RDS/IB connection from the target's address yet: `RDS_GET_MR`
    /// says ENODEV, a ping brings a connection up, then EOPNOTSUPP and `RDMA_MAP`.
    KernelFresh,
    /// The kernel with a connection: EOPNOTSUPP, then `RDMA_MAP` on a ping.
    Kernel,
    /// Our node (the Rust target): `get_mr` works at once.
    Ours,
}

/// The exact lines of an RDMA target (`rdstool rdma-target`, or ours, which prints the same
/// format) for `c`, the target at `tgt`, the initiator at `ini`.
fn target_lines(c: &Case, tgt: Ipv4Addr, ini: Ipv4Addr, cookie: u64, reg: Reg) -> Vec<String> {
    let mut v = vec![format!(
        "rdma-target: bound {tgt}:{} transport=ib",
        c.t_port
    )];
    if reg == Reg::KernelFresh {
        v.push(format!(
            "rdma-target: RDS_GET_MR ENODEV (no IB connection from this address yet); ping {ini}"
        ));
    }
    if reg != Reg::Ours {
        v.push(format!(
            "rdma-target: RDS_GET_MR EOPNOTSUPP; RDS_CMSG_RDMA_MAP on a ping to {ini}"
        ));
    }
    v.push(format!(
        "rdma-target: mr cookie=0x{cookie:016x} len={} seed={} use_once={} via={}{}",
        c.len,
        c.seed,
        c.use_once as u8,
        if reg == Reg::Ours && !c.map {
            "get_mr"
        } else {
            "rdma_map"
        },
        if c.offset != 0 {
            format!(" offset={}", c.offset)
        } else {
            String::new()
        }
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

/// The exact lines of an RDMA initiator (`rdstool rdma-initiator`, or ours) for `c`.
fn initiator_lines(c: &Case, tgt: Ipv4Addr, ini: Ipv4Addr, cookie: u64) -> Vec<String> {
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

/// The lines our guest side printed for case `i` (prefix `RDMA<i> ` removed).
fn guest_case_out(out: &str, i: usize) -> String {
    let p = format!("RDMA{i} ");
    out.lines()
        .filter_map(|l| l.strip_prefix(&p))
        .map(|l| format!("{l}\n"))
        .collect()
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

fn counters(lab: &Lab, g: usize) -> Result<BTreeMap<String, u64>> {
    Ok(parse_counters(
        &lab.exec_ok(g, "rdstool info counters", T)?.stdout,
    ))
}

/// The kernel initiator's RDMA counters grew by one read and one write of `len` bytes.
fn check_initiator_counters(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    len: usize,
) -> Result<()> {
    let d = |k: &str| {
        after.get(k).copied().unwrap_or(0) as i128 - before.get(k).copied().unwrap_or(0) as i128
    };
    ensure!(
        d("send_rdma") == 2
            && d("recv_rdma_bytes") == len as i128
            && d("send_rdma_bytes") == len as i128,
        "initiator counters: send_rdma +{} recv_rdma_bytes +{} send_rdma_bytes +{}",
        d("send_rdma"),
        d("recv_rdma_bytes"),
        d("send_rdma_bytes")
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The guest side: our node's target and initiator

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("{name} not set"))
}

/// The guest side (run by [`rdma_interop`] inside a guest; does nothing elsewhere).
#[test]
#[ignore = "runs inside a lab guest, started by rdma_interop"]
fn guest_side() {
    let Ok(role) = std::env::var(GUEST_ENV) else {
        return;
    };
    let r = (|| -> Result<()> {
        let ours = ip_env("RDMA_OURS")?;
        let peer = ip_env("RDMA_PEER")?;
        let cases = parse_cases(&env("RDMA_CASES")?)?;
        let node = start_ib_node(ours, 0x7d3a)?;
        step("ready", &format!("ours={ours} peer={peer} role={role}"));
        let r = match role.as_str() {
            "initiator" => guest_initiator(&node, ours, &cases),
            "target" => guest_target(&node, ours, peer, &cases),
            other => Err(anyhow::anyhow!("unknown role {other}")),
        };
        step("stats", &nonzero_stats(&node));
        node.shutdown();
        r
    })();
    if let Err(e) = r {
        step("failed", &format!("{e:#}"));
        panic!("guest side: {e:#}");
    }
}

/// Prints one line of case `i` for the host.
fn out(i: usize, line: &str) {
    println!("RDMA{i} {line}");
    let _ = std::io::stdout().flush();
}

/// Receives one message or notification before `dl`.
fn recv_until(s: &Socket, buf: &mut [u8], dl: Instant, what: &str) -> Result<RecvMsg> {
    loop {
        let now = Instant::now();
        if now >= dl {
            bail!("time limit waiting for {what}");
        }
        s.set_read_timeout(Some((dl - now).min(Duration::from_millis(500))));
        match s.recv_msg(buf, Default::default()) {
            Ok(m) => return Ok(m),
            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            Err(e) => return Err(e).with_context(|| format!("recv ({what})")),
        }
    }
}

fn text(buf: &[u8], m: &RecvMsg) -> String {
    String::from_utf8_lossy(&buf[..m.len.min(buf.len())]).into_owned()
}

fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Parses `OFFER cookie=0x<16 hex> len=N seed=K`.
fn parse_offer(t: &str) -> Option<(u64, usize, u64)> {
    let rest = t.strip_prefix("OFFER cookie=0x")?;
    let (hex, rest) = rest.split_once(' ')?;
    if hex.len() != 16 {
        return None;
    }
    let cookie = u64::from_str_radix(hex, 16).ok()?;
    let (l, rest) = rest.strip_prefix("len=")?.split_once(' ')?;
    let seed = rest.strip_prefix("seed=")?.parse().ok()?;
    Some((cookie, l.parse().ok()?, seed))
}

/// Waits for the notification with `token`; its status code. Anything else is an error.
fn wait_notify(s: &Socket, buf: &mut [u8], token: u64, dl: Instant) -> Result<i32> {
    let m = recv_until(s, buf, dl, &format!("the notification of token {token}"))?;
    let n = m.rdma_status.with_context(|| {
        format!(
            "a message ({} bytes from {:?}: {:?}) instead of the notification of token {token}",
            m.len,
            m.from,
            text(buf, &m)
        )
    })?;
    ensure!(
        n.user_token == token,
        "notification of token {} (status {:?}) while waiting for token {token}",
        n.user_token,
        n.status
    );
    Ok(n.status.code())
}

/// The initiator's local memory for `len` bytes: one buffer, or (`iovs` 2) the first third
/// in one buffer and the rest 10 bytes into a second.
fn local_vecs(len: usize, iovs: usize) -> Result<Vec<LocalVec>> {
    if iovs == 1 || len < 2 {
        return Ok(vec![LocalVec {
            buf: RdmaBuffer::new(len)?,
            off: 0,
            len,
        }]);
    }
    let n1 = len / 3;
    Ok(vec![
        LocalVec {
            buf: RdmaBuffer::new(n1)?,
            off: 0,
            len: n1,
        },
        LocalVec {
            buf: RdmaBuffer::new(len - n1 + 10)?,
            off: 10,
            len: len - n1,
        },
    ])
}

/// The bytes of the local vectors, in order.
fn gather(v: &[LocalVec]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for l in v {
        out.extend(l.buf.to_vec(l.off, l.len)?);
    }
    Ok(out)
}

/// Writes `data` across the local vectors, in order.
fn scatter(v: &[LocalVec], data: &[u8]) -> Result<()> {
    let mut at = 0;
    for l in v {
        l.buf.write_at(l.off, &data[at..at + l.len])?;
        at += l.len;
    }
    Ok(())
}

/// Role "initiator": one socket per case (all bound first), then per case the initiator's
/// steps with our API, printing rdstool's lines. The node stays up until the host's
/// `rdma-done-<first port>`.
fn guest_initiator(node: &Node, ours: Ipv4Addr, cases: &[Case]) -> Result<()> {
    let mut socks = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        socks.push(ib_socket(
            node,
            SocketAddr::new(IpAddr::V4(ours), c.i_port),
        )?);
        out(
            i,
            &format!("rdma-initiator: bound {ours}:{} transport=ib", c.i_port),
        );
    }
    for (i, (c, s)) in cases.iter().zip(&socks).enumerate() {
        let t0 = Instant::now();
        let dl = t0 + CASE_LIMIT;
        let mut buf = vec![0u8; 4096];
        let m = recv_until(s, &mut buf, dl, "the OFFER")?;
        ensure!(m.rdma_status.is_none(), "a notification before the offer");
        let t = text(&buf, &m);
        let from = m.from.context("offer without a source")?;
        let (cookie, len, seed) = parse_offer(&t).with_context(|| format!("bad offer {t:?}"))?;
        out(
            i,
            &format!("rdma-initiator: got OFFER cookie=0x{cookie:016x} len={len} seed={seed} from {from}"),
        );
        match m.rdma_dest {
            Some(d) => out(
                i,
                &format!(
                    "dest-cookie=0x{d:016x} match={}",
                    if d == cookie { "yes" } else { "no" }
                ),
            ),
            None => out(i, "dest-cookie=none"),
        }
        let local = local_vecs(len, c.iovs)?;
        if c.bad_key {
            // Another region index in the rkey (rxe: index << 8 | key): no such MR.
            let bad = make_cookie(cookie_rkey(cookie) ^ 0x00ff_ff00, cookie_offset(cookie));
            s.set_recverr(true);
            let ctl = SendCtl {
                rdma: Some(RdmaArgs {
                    cookie: bad,
                    local: local.clone(),
                    notify: false,
                    user_token: 1,
                    ..Default::default()
                }),
                ..Default::default()
            };
            s.send_ctl(b"READ", Some(from), &ctl)
                .context("send_ctl(READ with a bad rkey)")?;
            let st = wait_notify(s, &mut buf, 1, dl)?;
            out(
                i,
                &format!("rdma read status={st} token=1 (bad rkey, recverr)"),
            );
            // The failed read took the connection down; it must come back for a ping.
            let target = SocketAddr::new(from.ip(), 0);
            let t1 = Instant::now();
            let mut pong = [0u8; 16];
            let pong_dl = (Instant::now() + Duration::from_secs(30)).min(dl);
            'ping: loop {
                s.send_to(&[], target).context("ping after the failure")?;
                let next = (Instant::now() + Duration::from_secs(2)).min(pong_dl);
                while Instant::now() < next {
                    match recv_until(s, &mut pong, next, "the pong") {
                        Ok(m) if m.from == Some(target) && m.len == 0 => break 'ping,
                        Ok(m) => bail!("unexpected {m:?} while waiting for the pong"),
                        Err(_) if Instant::now() < pong_dl => {}
                        Err(e) => return Err(e),
                    }
                }
                ensure!(
                    Instant::now() < pong_dl,
                    "no pong within 30 s after the failure"
                );
            }
            step(
                "reconnected",
                &format!("pong {} ms after the failed read", t1.elapsed().as_millis()),
            );
            out(i, "ping after the failure: pong");
            out(
                i,
                &format!(
                    "rdma-initiator: ok bad-key len={len} seed={seed} elapsed_ms={}",
                    t0.elapsed().as_millis()
                ),
            );
            continue;
        }
        let args = |write, token| SendCtl {
            rdma: Some(RdmaArgs {
                cookie,
                remote_addr: 0,
                local: local.clone(),
                write,
                notify: true,
                user_token: token,
                ..Default::default()
            }),
            ..Default::default()
        };
        s.send_ctl(b"READ", Some(from), &args(false, 1))
            .context("send_ctl(READ with RdmaArgs)")?;
        let st = wait_notify(s, &mut buf, 1, dl)?;
        if st != 0 {
            out(i, &format!("rdma read status={st} token=1"));
            bail!("RDMA read: status {st}");
        }
        let got = gather(&local)?;
        match first_mismatch(&got, &rdma_pattern(seed, len)) {
            None => out(i, "rdma read status=0 token=1 ok"),
            Some(o) => {
                out(i, &format!("rdma read status=0 token=1 bad at {o}"));
                bail!("RDMA read data differs at {o}");
            }
        }
        scatter(&local, &rdma_pattern(c.seed2, len))?;
        s.send_ctl(
            format!("WROTE seed={}", c.seed2).as_bytes(),
            Some(from),
            &args(true, 2),
        )
        .context("send_ctl(WROTE with RdmaArgs)")?;
        let st = wait_notify(s, &mut buf, 2, dl)?;
        out(i, &format!("rdma write status={st} token=2"));
        ensure!(st == 0, "RDMA write: status {st}");
        let m = recv_until(s, &mut buf, dl, "CHECKED")?;
        let t = text(&buf, &m);
        ensure!(
            m.rdma_status.is_none() && m.from == Some(from),
            "unexpected {m:?} ({t:?}) instead of CHECKED"
        );
        out(i, &t);
        ensure!(t == "CHECKED ok", "the target says {t:?}");
        out(
            i,
            &format!(
                "rdma-initiator: ok len={len} seed={seed} seed2={} elapsed_ms={}",
                c.seed2,
                t0.elapsed().as_millis()
            ),
        );
    }
    // The node stays up until the host's `rdma-done-<first port>`: stopping right after the
    // last CHECKED would take the connection down before the target's CHECKED is acknowledged,
    // and the target would find it queued again for a connection that never comes back.
    if let Some(c) = cases.first() {
        wait_go(&format!("rdma-done-{}", c.t_port))?;
    }
    drop(socks);
    Ok(())
}

/// Waits (bounded) for the host's file `name` in the share.
fn wait_go(name: &str) -> Result<()> {
    let p = std::path::Path::new("/mnt/share").join(name);
    wait_until(&format!("{}", p.display()), T, || p.exists())
}

fn errno_name(e: &std::io::Error) -> String {
    match errno_of(e) {
        libc::EINVAL => "EINVAL".into(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
        libc::ENOTCONN => "ENOTCONN".into(),
        n => format!("errno{n}"),
    }
}

/// Role "target": per case, after the host's go file `rdma-go-<port>`: the target's steps
/// with our API (get_mr, send_ctl with rdma_dest), printing rdstool's lines. The sockets stay
/// open until the host's `rdma-done-<first port>` (so nothing queued is dropped).
fn guest_target(node: &Node, ours: Ipv4Addr, peer: Ipv4Addr, cases: &[Case]) -> Result<()> {
    let mut socks = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        wait_go(&format!("rdma-go-{}", c.t_port))?;
        let t0 = Instant::now();
        let dl = t0 + CASE_LIMIT;
        let me = SocketAddr::new(IpAddr::V4(ours), c.t_port);
        let to = SocketAddr::new(IpAddr::V4(peer), c.i_port);
        let s = ib_socket(node, me)?;
        out(i, &format!("rdma-target: bound {me} transport=ib"));
        let region = RdmaBuffer::new(c.offset + c.len)?;
        region.write_at(c.offset, &rdma_pattern(c.seed, c.len))?;
        let flags = MrFlags {
            use_once: c.use_once,
            invalidate: false,
        };
        let cookie = if c.map {
            // RDS_CMSG_RDMA_MAP on a ping to the peer, as rdstool does on the kernel.
            let ctl = SendCtl {
                rdma_map: Some(RdmaMap {
                    buf: region.clone(),
                    off: c.offset,
                    len: c.len,
                    flags,
                }),
                ..Default::default()
            };
            let ping = SocketAddr::new(IpAddr::V4(peer), 0);
            let sent = s
                .send_ctl(&[], Some(ping), &ctl)
                .context("send_ctl(ping with rdma_map)")?;
            let mut pong = [0u8; 16];
            let m = recv_until(&s, &mut pong, dl, "the pong")?;
            ensure!(
                m.from == Some(ping) && m.len == 0 && m.rdma_status.is_none(),
                "unexpected {m:?} instead of the pong"
            );
            sent.map_cookie
                .context("send_ctl with rdma_map gave no cookie")?
        } else {
            s.get_mr(&region, c.offset, c.len, flags)
                .context("get_mr")?
        };
        out(
            i,
            &format!(
                "rdma-target: mr cookie=0x{cookie:016x} len={} seed={} use_once={} via={}{}",
                c.len,
                c.seed,
                c.use_once as u8,
                if c.map { "rdma_map" } else { "get_mr" },
                if c.offset != 0 {
                    format!(" offset={}", c.offset)
                } else {
                    String::new()
                }
            ),
        );
        let offer = format!("OFFER cookie=0x{cookie:016x} len={} seed={}", c.len, c.seed);
        let ctl = SendCtl {
            rdma_dest: Some(cookie),
            ..Default::default()
        };
        s.send_ctl(offer.as_bytes(), Some(to), &ctl)
            .context("send_ctl(OFFER with rdma_dest)")?;
        out(i, &format!("rdma-target: sent {offer} to {to}"));
        let mut buf = vec![0u8; 4096];
        let m = recv_until(&s, &mut buf, dl, "READ")?;
        let t = text(&buf, &m);
        ensure!(
            m.rdma_status.is_none() && m.from == Some(to) && t == "READ",
            "unexpected {m:?} ({t:?}) instead of READ"
        );
        out(i, &format!("rdma-target: got READ from {to}"));
        let m = recv_until(&s, &mut buf, dl, "WROTE")?;
        let t = text(&buf, &m);
        let seed2: u64 = match t.strip_prefix("WROTE seed=").map(str::parse) {
            Some(Ok(k)) if m.from == Some(to) && m.rdma_status.is_none() => k,
            _ => bail!("unexpected {m:?} ({t:?}) instead of WROTE"),
        };
        let got = region.to_vec(c.offset, c.len)?;
        let (reply, check) = match first_mismatch(&got, &rdma_pattern(seed2, c.len)) {
            None => ("CHECKED ok".to_string(), "ok".to_string()),
            Some(o) => (format!("CHECKED bad at {o}"), format!("bad at {o}")),
        };
        out(
            i,
            &format!("rdma-target: got WROTE seed={seed2} from {to} check={check}"),
        );
        s.send_to(reply.as_bytes(), to).context("send CHECKED")?;
        out(i, &format!("rdma-target: sent {reply}"));
        // Half the host's limit, so that the host sees this report.
        wait_until("CHECKED to leave our send queue", T / 2, || {
            !node
                .send_queue()
                .iter()
                .any(|q| q.lport == c.t_port && q.laddr == me.ip())
        })
        .with_context(|| {
            format!(
                "send queue {:?}, retransmit queue {:?}, conns {:?}, stats {}",
                node.send_queue(),
                node.retrans_queue(),
                node.connections(),
                nonzero_stats(node)
            )
        })?;
        let free = match s.free_mr(cookie, false) {
            Ok(()) => "ok".to_string(),
            Err(e) => errno_name(&e),
        };
        let ok = check == "ok";
        out(
            i,
            &format!(
                "rdma-target: {} len={} seed={} seed2={seed2} free_mr={free} elapsed_ms={}",
                if ok { "ok" } else { "FAIL" },
                c.len,
                c.seed,
                t0.elapsed().as_millis()
            ),
        );
        ensure!(ok, "region check: {check}");
        socks.push(s);
    }
    if let Some(c) = cases.first() {
        wait_go(&format!("rdma-done-{}", c.t_port))?;
    }
    drop(socks);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The host side

/// Guest jobs of a scenario; those still running when it ends are killed.
struct Jobs(Vec<GuestJob>);

impl Drop for Jobs {
    fn drop(&mut self) {
        for j in &self.0 {
            if !j.is_finished() {
                j.kill();
            }
        }
    }
}

/// `RDS_IB_DEBUG=1` on the host: our transport's log (stderr) into the guest output.
fn debug_env() -> (&'static str, &'static str) {
    if std::env::var_os("RDS_IB_DEBUG").is_some() {
        (" RDS_IB_DEBUG=1", " 2>&1")
    } else {
        ("", "")
    }
}

/// Starts our guest side in guest `g` with `role` for `cases`; waits for its node.
fn spawn_ours(
    lab: &Lab,
    path: &str,
    g: usize,
    role: &str,
    peer: Ipv4Addr,
    cases: &[Case],
) -> Result<GuestJob> {
    let (env_dbg, redir) = debug_env();
    let cmd = guest_cmd(
        path,
        "guest_side",
        role,
        &format!(
            "RDMA_OURS={} RDMA_PEER={peer} RDMA_CASES={}{env_dbg}",
            guest_addr(g),
            cases_env(cases)
        ),
    ) + redir;
    let job = lab.spawn(g, &cmd, Duration::from_secs(400))?;
    job.wait_for_output("IBSTEP ready", T)?;
    Ok(job)
}

/// Waits for our side's final `ok` line of case `i` (`who`: rdma-target or rdma-initiator);
/// that case's lines.
fn case_done(job: &GuestJob, i: usize, who: &str) -> Result<String> {
    let dl = Instant::now() + T;
    let p_ok = format!("RDMA{i} {who}: ok");
    loop {
        let so_far = job.stdout_so_far();
        if so_far.contains(&p_ok) {
            return Ok(guest_case_out(&so_far, i));
        }
        if job.is_finished() || so_far.contains("IBSTEP failed") || Instant::now() >= dl {
            bail!("our {who} (case {i}) did not finish ok:\n{so_far}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for our guest job to end successfully; its output (printed whole with
/// `RDS_IB_DEBUG`, which puts our transport's log in it).
fn finish(job: GuestJob, what: &str) -> Result<String> {
    let out = job.wait()?.check(what)?.stdout;
    if std::env::var_os("RDS_IB_DEBUG").is_some() {
        println!("--- {what} ---\n{out}");
    }
    Ok(out)
}

/// Case 1: our target in g1, our initiator in g2 (no `rds_rdma` in either).
fn ours_to_ours_rdma(lab: &Lab, p1: &str, p2: &str, report: &mut Vec<String>) -> Result<()> {
    let (tgt, ini) = (guest_addr(1), guest_addr(2));
    let cases = &OURS_TO_OURS;
    let mut jobs = Jobs(Vec::new());
    jobs.0
        .push(spawn_ours(lab, p2, 2, "initiator", tgt, cases)?);
    jobs.0.push(spawn_ours(lab, p1, 1, "target", ini, cases)?);
    for (i, c) in cases.iter().enumerate() {
        let t0 = Instant::now();
        jobs.0[0].wait_for_output(&format!("RDMA{i} rdma-initiator: bound"), T)?;
        lab.write_share(1, &format!("rdma-go-{}", c.t_port), b"go")?;
        let t_out = case_done(&jobs.0[1], i, "rdma-target").map_err(|e| {
            e.context(format!(
                "our initiator so far:\n{}",
                jobs.0[0].stdout_so_far()
            ))
        })?;
        let cookie = case_cookie(c, &t_out)?;
        same_lines(
            "our target",
            &t_out,
            &target_lines(c, tgt, ini, cookie, Reg::Ours),
        )?;
        let i_out = case_done(&jobs.0[0], i, "rdma-initiator")?;
        same_lines(
            "our initiator",
            &i_out,
            &initiator_lines(c, tgt, ini, cookie),
        )?;
        report.push(format!(
            "ours_to_ours_rdma len={} cookie={cookie:#x}: ok in {} ms (target {} ms, initiator {} ms)",
            c.len,
            t0.elapsed().as_millis(),
            elapsed_ms(&t_out, "rdma-target"),
            elapsed_ms(&i_out, "rdma-initiator")
        ));
    }
    for g in [1, 2] {
        lab.write_share(g, &format!("rdma-done-{}", cases[0].t_port), b"done")?;
    }
    let t = jobs.0.remove(1);
    let i = jobs.0.remove(0);
    for (g, o) in [
        (2, finish(i, "our initiator in g2")?),
        (1, finish(t, "our target in g1")?),
    ] {
        if let Some(l) = o.lines().find(|l| l.starts_with("IBSTEP stats")) {
            report.push(format!("ours_to_ours_rdma g{g}: {l}"));
        }
    }
    Ok(())
}

/// Case 2: rdstool target in g1 (kernel), our initiator in g2. `reg`: how the kernel target
/// registers the first region.
fn ours_initiator_kernel_target(
    lab: &Lab,
    p2: &str,
    first: Reg,
    report: &mut Vec<String>,
) -> Result<()> {
    let (tgt, ini) = (guest_addr(1), guest_addr(2));
    let cases = &OURS_INITIATOR;
    let mut jobs = Jobs(Vec::new());
    jobs.0
        .push(spawn_ours(lab, p2, 2, "initiator", tgt, cases)?);
    for (i, c) in cases.iter().enumerate() {
        let t0 = Instant::now();
        jobs.0[0].wait_for_output(&format!("RDMA{i} rdma-initiator: bound"), T)?;
        let t = lab.exec(
            1,
            &format!(
                "rdstool rdma-target -t ib -b {tgt}:{} -p {ini}:{} --len {} --seed {} --offset {} -T {}",
                c.t_port,
                c.i_port,
                c.len,
                c.seed,
                c.offset,
                if c.bad_key { 8 } else { 90 }
            ),
            T,
        )?;
        if c.bad_key {
            bad_key_case(lab, &jobs.0[0], i, c, &t, report)?;
            continue;
        }
        if t.status != 0 {
            bail!(
                "kernel target exit {}:\n{}{}\n--- ours so far ---\n{}",
                t.status,
                t.stdout,
                t.stderr,
                jobs.0[0].stdout_so_far()
            );
        }
        let cookie = case_cookie(c, &t.stdout)?;
        let reg = if i == 0 { first } else { Reg::Kernel };
        same_lines(
            "kernel target",
            &t.stdout,
            &target_lines(c, tgt, ini, cookie, reg),
        )?;
        let i_out = case_done(&jobs.0[0], i, "rdma-initiator")?;
        same_lines(
            "our initiator",
            &i_out,
            &initiator_lines(c, tgt, ini, cookie),
        )?;
        report.push(format!(
            "ours_initiator_kernel_target len={} cookie={cookie:#x}: ok in {} ms (target {} ms, initiator {} ms)",
            c.len,
            t0.elapsed().as_millis(),
            elapsed_ms(&t.stdout, "rdma-target"),
            elapsed_ms(&i_out, "rdma-initiator")
        ));
    }
    lab.write_share(2, &format!("rdma-done-{}", cases[0].t_port), b"done")?;
    let o = finish(jobs.0.remove(0), "our initiator in g2")?;
    if let Some(l) = o.lines().find(|l| l.starts_with("IBSTEP stats")) {
        report.push(format!("ours_initiator_kernel_target g2: {l}"));
    }
    Ok(())
}

/// The bad-rkey case of [`ours_initiator_kernel_target`]: our read fails with
/// `RemoteError` (reported through `RDS_RECVERR`), its `READ` message never reaches the
/// kernel target, which gives up after its 8 s (exit 1).
fn bad_key_case(
    lab: &Lab,
    job: &GuestJob,
    i: usize,
    c: &Case,
    t: &rds_tests::lab::GuestOutput,
    report: &mut Vec<String>,
) -> Result<()> {
    let (tgt, ini) = (guest_addr(1), guest_addr(2));
    let cookie = case_cookie(c, &t.stdout)?;
    let mut want = target_lines(c, tgt, ini, cookie, Reg::Kernel);
    want.truncate(want.len() - 4); // up to "sent OFFER"
    want.push(format!(
        "rdma-target: FAIL len={} seed={} seed2=0 free_mr=ok",
        c.len, c.seed
    ));
    ensure!(
        t.status == 1
            && t.stdout
                .trim_end()
                .ends_with("reason=time-limit-waiting-for-READ"),
        "kernel target exit {} (want 1, time limit waiting for READ):\n{}{}",
        t.status,
        t.stdout,
        t.stderr
    );
    same_lines("kernel target (bad key)", &t.stdout, &want)?;
    let i_out = case_done(job, i, "rdma-initiator")?;
    let mut want = initiator_lines(c, tgt, ini, cookie);
    want.truncate(3);
    want.push("rdma read status=1 token=1 (bad rkey, recverr)".into());
    want.push("ping after the failure: pong".into());
    want.push(format!(
        "rdma-initiator: ok bad-key len={} seed={}",
        c.len, c.seed
    ));
    same_lines("our initiator (bad key)", &i_out, &want)?;
    let pong = job
        .stdout_so_far()
        .lines()
        .find(|l| l.starts_with("IBSTEP reconnected"))
        .unwrap_or("")
        .to_string();
    report.push(format!(
        "ours_initiator_kernel_target bad rkey: our read reported RemoteError via RDS_RECVERR, the kernel target saw no READ; {pong}"
    ));
    let dm = lab
        .exec_ok(1, "dmesg | grep -i 'rds' | tail -n 5", T)?
        .stdout;
    for l in dm.lines() {
        report.push(format!("  g1 kernel: {}", l.trim()));
    }
    Ok(())
}

/// Case 3: our target in g2, rdstool initiator in g1 (kernel; its counters checked).
fn ours_target_kernel_initiator(lab: &Lab, p2: &str, report: &mut Vec<String>) -> Result<()> {
    let (tgt, ini) = (guest_addr(2), guest_addr(1));
    let cases = &OURS_TARGET;
    let mut jobs = Jobs(Vec::new());
    jobs.0.push(spawn_ours(lab, p2, 2, "target", ini, cases)?);
    for (i, c) in cases.iter().enumerate() {
        let t0 = Instant::now();
        let before = counters(lab, 1)?;
        let k = lab.spawn(
            1,
            &format!(
                "rdstool rdma-initiator -t ib -b {ini}:{} --seed2 {} -T 90",
                c.i_port, c.seed2
            ),
            T,
        )?;
        k.wait_for_output("rdma-initiator: bound", T)?;
        lab.write_share(2, &format!("rdma-go-{}", c.t_port), b"go")?;
        let kout = k.wait()?;
        if kout.status != 0 {
            bail!(
                "kernel initiator exit {}:\n{}{}\n--- ours so far ---\n{}",
                kout.status,
                kout.stdout,
                kout.stderr,
                jobs.0[0].stdout_so_far()
            );
        }
        let t_out = case_done(&jobs.0[0], i, "rdma-target")?;
        let cookie = case_cookie(c, &t_out)?;
        same_lines(
            "our target",
            &t_out,
            &target_lines(c, tgt, ini, cookie, Reg::Ours),
        )?;
        same_lines(
            "kernel initiator",
            &kout.stdout,
            &initiator_lines(c, tgt, ini, cookie),
        )?;
        check_initiator_counters(&before, &counters(lab, 1)?, c.len)?;
        report.push(format!(
            "ours_target_kernel_initiator len={} cookie={cookie:#x}: ok in {} ms (target {} ms, initiator {} ms)",
            c.len,
            t0.elapsed().as_millis(),
            elapsed_ms(&t_out, "rdma-target"),
            elapsed_ms(&kout.stdout, "rdma-initiator")
        ));
    }
    lab.write_share(2, &format!("rdma-done-{}", cases[0].t_port), b"done")?;
    let o = finish(jobs.0.remove(0), "our target in g2")?;
    if let Some(l) = o.lines().find(|l| l.starts_with("IBSTEP stats")) {
        report.push(format!("ours_target_kernel_initiator g2: {l}"));
    }
    Ok(())
}

/// Case 4: kernel target in g1, kernel initiator in g2, for every case; `first`: how the
/// kernel target registers the first region.
fn kernel_rdma_kernel(lab: &Lab, first: Reg, report: &mut Vec<String>) -> Result<()> {
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
                "rdstool rdma-target -t ib -b {tgt}:{} -p {ini}:{} --len {} --seed {} --offset {}{} -T 90",
                c.t_port,
                c.i_port,
                c.len,
                c.seed,
                c.offset,
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
        let cookie = case_cookie(c, &t.stdout)?;
        let reg = if n == 0 { first } else { Reg::Kernel };
        same_lines(
            "rdma-target",
            &t.stdout,
            &target_lines(c, tgt, ini, cookie, reg),
        )?;
        same_lines(
            "rdma-initiator",
            &i.stdout,
            &initiator_lines(c, tgt, ini, cookie),
        )?;
        check_initiator_counters(&before, &counters(lab, 2)?, c.len)?;
        report.push(format!(
            "kernel_rdma_kernel len={} use_once={} cookie={cookie:#x}: ok in {} ms (target {} ms, initiator {} ms)",
            c.len,
            c.use_once,
            t0.elapsed().as_millis(),
            elapsed_ms(&t.stdout, "rdma-target"),
            elapsed_ms(&i.stdout, "rdma-initiator")
        ));
    }
    Ok(())
}

fn not_loaded(lab: &Lab, g: usize) -> Result<()> {
    lab.exec_ok(g, "! grep -q '^rds_rdma ' /proc/modules", T)
        .with_context(|| format!("rds_rdma must not be loaded in g{g}"))
        .map(|_| ())
}

/// Runs the four scenarios in order (see the module comment); each scenario's result.
/// A scenario's name, its report lines or error, and how long it took.
type Outcome = (&'static str, Result<Vec<String>>, Duration);

fn run(lab: &Lab) -> Result<Vec<Outcome>> {
    let p1 = install_self(lab, 1, "interop_rdma")?;
    let p2 = install_self(lab, 2, "interop_rdma")?;
    let mut results = Vec::new();
    let mut scenario = |name: &'static str, f: &mut dyn FnMut(&mut Vec<String>) -> Result<()>| {
        let t0 = Instant::now();
        let mut report = Vec::new();
        let r = f(&mut report).map(|()| report);
        if let Err(e) = &r {
            eprintln!("{name} FAILED: {e:#}\n{}", diag(lab, ""));
        }
        results.push((name, r, t0.elapsed()));
    };
    scenario("ours_to_ours_rdma", &mut |r| {
        not_loaded(lab, 1)?;
        not_loaded(lab, 2)?;
        ours_to_ours_rdma(lab, &p1, &p2, r)
    });
    let loaded1 = load_kernel_rds_rdma(lab, 1).context("loading rds_rdma in g1");
    scenario("ours_initiator_kernel_target", &mut |r| {
        loaded1.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        not_loaded(lab, 2)?;
        ours_initiator_kernel_target(lab, &p2, Reg::KernelFresh, r)
    });
    scenario("ours_target_kernel_initiator", &mut |r| {
        loaded1.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        not_loaded(lab, 2)?;
        ours_target_kernel_initiator(lab, &p2, r)
    });
    scenario("kernel_rdma_kernel", &mut |r| {
        loaded1.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        load_kernel_rds_rdma(lab, 2).context("loading rds_rdma in g2")?;
        kernel_rdma_kernel(lab, Reg::Kernel, r)
    });
    Ok(results)
}

/// RDMA over rxe: our node and the kernel's `rds_rdma` in every pairing (module comment).
#[test]
fn rdma_interop() {
    let Some((lab, t0)) = host_lab() else {
        return;
    };
    let booted = t0.elapsed();
    let r = run(&lab);
    let mut failed = Vec::new();
    match &r {
        Ok(results) => {
            for (name, r, took) in results {
                match r {
                    Ok(lines) => {
                        lines.iter().for_each(|l| println!("{l}"));
                        println!("{name}: ok ({:.1}s)", took.as_secs_f64());
                    }
                    Err(e) => {
                        println!("{name}: FAILED ({:.1}s): {e:#}", took.as_secs_f64());
                        failed.push(*name);
                    }
                }
            }
        }
        Err(e) => {
            eprintln!("FAILED: {e:#}\n{}", diag(&lab, ""));
            failed.push("setup");
        }
    }
    lab.stop().expect("lab stop");
    println!(
        "lab boot {:.1}s, total {:.1}s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "RDMA interop failed: {failed:?}");
}

#[test]
fn pattern_matches_rdstool_formula() {
    let p = rdma_pattern(5, 600);
    assert_eq!(&p[..4], &[35, 166, 41, 172]);
    // i = 256: 256*131 + 35 + 1 = 33572 -> 0x24
    assert_eq!(p[256], 0x24);
}

#[test]
fn offer_parsing() {
    assert_eq!(
        parse_offer("OFFER cookie=0x0000000000000300 len=5000 seed=3"),
        Some((0x300, 5000, 3))
    );
    assert_eq!(parse_offer("OFFER cookie=0x300 len=5000 seed=3"), None);
    assert_eq!(
        parse_offer("OFFER cookie=0x0000000000000300 len=x seed=3"),
        None
    );
    assert_eq!(
        parse_cases(&cases_env(&KERNEL_CASES)).unwrap(),
        KERNEL_CASES.to_vec()
    );
}
