//! rds-trace on a real RDS/IB connection: our node in lab guest g1 (with its control socket)
//! talks to our node in g2 over soft-RoCE (`rxe0`, neither guest loads the kernel's
//! `rds_rdma`), while `rds-trace -w FILE --transport ib` captures g1's frames. On the host,
//! tshark with the project's dissector (`wireshark/rds.lua`, InfiniBand heuristic) must decode
//! every frame as ERF InfiniBand + RDS with a good header checksum and nothing malformed,
//! and show exactly the traffic sent: a ping and its pong, messages of 0 B, 5000 B
//! (2 fragments) and 1 MiB (256 fragments), the reply, and congestion maps (two fragments
//! each) both ways, in the order they were posted and received.
//! rds-trace reports no dropped frames.
//!
//! Needs root and the lab (fails, never skips, when it cannot boot), tshark on the host
//! (`.ci/deps.d/tshark.sh`), and `target/release/rds-trace` (built by `cargo test
//! --workspace --release`).

use anyhow::{bail, ensure, Context, Result};
use rds_core::{CtlMode, Node, NodeConfig, Socket, Transports};
use rds_tests::ib::{
    guest_cmd, host_lab, ib_socket, install_self, ip_env, release_bin, step, wait_until, GUEST_ENV,
};
use rds_tests::lab::{guest_addr, Lab};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const RUNTIME_DIR: &str = "/tmp/rds-trace-ib";
const NODE: &str = "g1trace";
const PORT1: u16 = 7000;
const PORT2: u16 = 7001;
const SIZES: [usize; 3] = [0, 5000, 1 << 20];
const REPLY: usize = 100;

fn node(addr: Ipv4Addr, ctl: CtlMode) -> Result<Node> {
    let mut cfg = NodeConfig::new([IpAddr::V4(addr)]);
    cfg.ctl = ctl;
    cfg.seed = Some(u64::from(u32::from(addr)));
    cfg.name = NODE.into();
    cfg.transports = Transports {
        tcp: false,
        ib: true,
    };
    let n = Node::start(cfg).context("starting our IB node")?;
    if let Some(why) = n.ib_unavailable() {
        bail!("IB unavailable in the guest: {why}");
    }
    Ok(n)
}

fn socket(node: &Node, addr: SocketAddr) -> Result<Socket> {
    let s = ib_socket(node, addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)));
    s.set_send_buffer_size(4 << 20);
    Ok(s)
}

fn wait_file(path: &str, what: &str) -> Result<()> {
    wait_until(what, Duration::from_secs(120), || {
        std::path::Path::new(path).exists()
    })
}

/// g1: the traced node (control socket `g1trace` in [`RUNTIME_DIR`]).
fn traced() -> Result<()> {
    let (me, peer) = (ip_env("IB_OURS")?, ip_env("IB_PEER")?);
    let node = node(me, CtlMode::Named(NODE.into()))?;
    step("ready", "");
    wait_file("/mnt/share/go", "the capture to start")?;
    let s = socket(&node, SocketAddr::new(IpAddr::V4(me), PORT1))?;
    let mut buf = vec![0u8; 1 << 20];
    s.send_to(&[], SocketAddr::new(IpAddr::V4(peer), 0))?;
    let m = s.recv_msg(&mut buf, Default::default())?;
    ensure!(m.len == 0, "pong of {} bytes", m.len);
    for &n in &SIZES {
        s.send_to(&vec![0x5a; n], SocketAddr::new(IpAddr::V4(peer), PORT2))?;
    }
    let m = s.recv_msg(&mut buf, Default::default())?;
    ensure!(m.len == REPLY, "reply of {} bytes", m.len);
    step("done", "");
    wait_file("/mnt/share/stop", "the capture to stop")?;
    node.shutdown();
    Ok(())
}

/// g2: receives the three messages and replies.
fn peer() -> Result<()> {
    let (me, _) = (ip_env("IB_OURS")?, ip_env("IB_PEER")?);
    let node = node(me, CtlMode::Off)?;
    let s = socket(&node, SocketAddr::new(IpAddr::V4(me), PORT2))?;
    step("ready", "");
    let mut buf = vec![0u8; 1 << 20];
    let mut from = None;
    for &n in &SIZES {
        let m = s.recv_msg(&mut buf, Default::default())?;
        ensure!(m.len == n, "got {} bytes, want {n}", m.len);
        from = m.from;
    }
    s.send_to(&[1; REPLY], from.context("no sender")?)?;
    step("done", "");
    std::thread::sleep(Duration::from_secs(5));
    node.shutdown();
    Ok(())
}

#[test]
#[ignore = "runs inside a lab guest, started by ib_capture_decodes_in_tshark"]
fn guest_side() {
    let Ok(role) = std::env::var(GUEST_ENV) else {
        return;
    };
    let r = match role.as_str() {
        "traced" => traced(),
        "peer" => peer(),
        other => Err(anyhow::anyhow!("unknown role {other}")),
    };
    if let Err(e) = r {
        step("failed", &format!("{e:#}"));
        panic!("guest side: {e:#}");
    }
}

/// One decoded frame: the fields asked of tshark, by name.
type Row = BTreeMap<&'static str, String>;

const FIELDS: [&str; 10] = [
    "frame.protocols",
    "erf.flags.cap",
    "infiniband.bth.destqp",
    "rds.seq",
    "rds.len",
    "rds.sport",
    "rds.dport",
    "rds.flags",
    "rds.csum.good",
    "_ws.malformed",
];

fn decode(pcap: &std::path::Path) -> Result<Vec<Row>> {
    let exe = rds_tests::tshark();
    let home = tempfile::tempdir()?;
    let mut c = rds_tests::tshark_cmd(&exe, home.path());
    c.arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in FIELDS {
        c.args(["-e", f]);
    }
    let out = c.output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success() && !stderr.contains("Lua"),
        "tshark: {stderr}"
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(|l| {
            FIELDS
                .iter()
                .copied()
                .zip(l.split('|').map(String::from))
                .collect()
        })
        .collect())
}

fn run(lab: &Lab) -> Result<Vec<String>> {
    let (a, b) = (guest_addr(1), guest_addr(2));
    let p1 = install_self(lab, 1, "trace_ib")?;
    let p2 = install_self(lab, 2, "trace_ib")?;
    let bytes = std::fs::read(release_bin("rds-trace")?)?;
    let trace = lab.write_share(1, "rds-trace", &bytes)?;
    let t = Duration::from_secs(300);
    let peer = lab.spawn(
        2,
        &guest_cmd(
            &p2,
            "guest_side",
            "peer",
            &format!("IB_OURS={b} IB_PEER={a}"),
        ),
        t,
    )?;
    peer.wait_for_output("IBSTEP ready", Duration::from_secs(120))?;
    let traced = lab.spawn(
        1,
        &guest_cmd(
            &p1,
            "guest_side",
            "traced",
            &format!("IB_OURS={a} IB_PEER={b} RDS_RUNTIME_DIR={RUNTIME_DIR}"),
        ),
        t,
    )?;
    traced.wait_for_output("IBSTEP ready", Duration::from_secs(120))?;
    let capture = lab.spawn(
        1,
        &format!(
            "RDS_RUNTIME_DIR={RUNTIME_DIR} {trace} -w /mnt/share/ib.pcap --transport ib \
             --node {NODE} -G 240 2>&1"
        ),
        t,
    )?;
    // The session is open once rds-trace names the node it traces.
    capture
        .wait_for_output("rds-trace: tracing node", Duration::from_secs(60))
        .with_context(|| format!("rds-trace: {}", capture.stdout_so_far()))?;
    let pcap = lab.share_dir(1).join("ib.pcap");
    std::thread::sleep(Duration::from_millis(500));
    lab.write_share(1, "go", b"")?;
    traced.wait_for_output("IBSTEP done", Duration::from_secs(240))?;
    peer.wait_for_output("IBSTEP done", Duration::from_secs(60))?;
    std::thread::sleep(Duration::from_secs(1));
    lab.exec_ok(1, "kill -INT $(pidof rds-trace)", Duration::from_secs(30))?;
    let cap = capture.wait()?;
    ensure!(cap.success(), "rds-trace failed: {}", cap.stdout);
    lab.write_share(1, "stop", b"")?;
    traced.wait()?.check("traced node")?;
    peer.wait()?.check("peer node")?;
    let summary = cap.stdout.trim().to_string();
    ensure!(
        summary.ends_with(" 0 dropped") && summary.contains(" frames captured"),
        "rds-trace summary: {summary}"
    );

    let rows = decode(&pcap)?;
    ensure!(!rows.is_empty(), "empty capture");
    for (i, r) in rows.iter().enumerate() {
        ensure!(
            r["frame.protocols"] == "erf:infiniband:rds",
            "frame {i}: {r:?}"
        );
        ensure!(
            r["rds.csum.good"] == "1" && r["_ws.malformed"].is_empty(),
            "frame {i}: {r:?}"
        );
    }
    // Data and pings of g1's socket, by direction: (sport, dport, len) per fragment.
    let frag = |r: &Row| {
        (
            r["rds.sport"].parse::<u16>().unwrap_or(u16::MAX),
            r["rds.dport"].parse::<u16>().unwrap_or(u16::MAX),
            r["rds.len"].parse::<usize>().unwrap_or(usize::MAX),
        )
    };
    let ours: Vec<(u16, u16, usize)> = rows
        .iter()
        .map(frag)
        .filter(|f| f.0 == PORT1 || f.1 == PORT1)
        .collect();
    let mut want = vec![(PORT1, 0, 0), (0, PORT1, 0)];
    for &n in &SIZES {
        let frags = n.div_ceil(4096).max(1);
        want.extend(std::iter::repeat_n((PORT1, PORT2, n), frags));
    }
    want.push((PORT2, PORT1, REPLY));
    ensure!(ours == want, "g1's fragments:\n{ours:?}\nwant\n{want:?}");
    // Congestion maps (flag 0x01, 8192 bytes in two fragments) both ways: the new
    // connection's, then updates when a receive buffer filled and drained.
    for (cap, dir) in [("0", "sent"), ("1", "received")] {
        let maps = rows
            .iter()
            .filter(|r| r["erf.flags.cap"] == cap && r["rds.flags"] == "0x01")
            .inspect(|r| assert_eq!(r["rds.len"], "8192", "{r:?}"))
            .count();
        ensure!(
            maps >= 2 && maps % 2 == 0,
            "congestion map fragments {dir}: {maps}"
        );
    }
    Ok(vec![
        format!("{} frames decoded; {summary}", rows.len()),
        format!("g1 socket fragments as sent: {}", ours.len()),
    ])
}

#[test]
fn ib_capture_decodes_in_tshark() {
    let Some((lab, t0)) = host_lab() else {
        return;
    };
    let r = run(&lab);
    lab.stop().expect("lab stop");
    match r {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => panic!("IB capture failed: {e:#}"),
    }
    println!("total {:.1}s", t0.elapsed().as_secs_f64());
}
