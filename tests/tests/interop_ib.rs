//! Interop over RDS/IB (soft-RoCE `rxe0`): our node against the Linux kernel's `rds_rdma`.
//!
//! The host has no RDMA stack, so our node runs inside guest g2 (198.18.0.4), where the
//! kernel's `rds_rdma` is not loaded (the lab boots with `--ib=0`, so nothing in g2's kernel
//! listens on the RDMA CM port 18634); guest g1 (198.18.0.2) loads `rds_rdma` and runs
//! `rdstool`. This test executable copies itself into g2's share and runs its own ignored test
//! [`guest_side`] there ([`rds_tests::ib`]), which prints `IBSTEP` markers the host side
//! follows. Our node runs the IB transport only (g2's kernel `rds_tcp` owns port 16385).
//!
//! Steps, in this order:
//! - `ping`: our node pings the kernel 5 times (zero-length to port 0, pong from port 0); the
//!   first ping makes our node connect (active side; the kernel logs "Passive conn connected");
//! - `kernel-ping`: `rdstool ping -t ib` from g1, answered by our node;
//! - `data-to-kernel`: 24 pattern messages of 0 B … 1 MiB (1 to 257 fragments) to an
//!   `rdstool recv -t ib` in g1, which checks content, order and that nothing extra arrives;
//! - `data-from-kernel`: `rdstool send -t ib` sends the same sizes to our socket (bound after
//!   `set_transport(Ib)`), checked for content, order, sizes and no extra message;
//! - `restart`: our node drops the connection (`restart_conn`); both sides reconnect (IB has
//!   no "smaller address initiates" rule, so whoever wins the race connects; the report
//!   quotes the kernel's log), then 5 pings and one more kernel message (2 fragments) get
//!   through and nothing delivered before comes again;
//! - the kernel's view: `RDS_INFO_CONNECTIONS` shows the connection as `infiniband`, and its
//!   `recv_drop_bad_checksum` stayed 0 (our header checksums verify).
//!
//! [`ours_to_ours_ib`] runs our node in both guests (neither loads `rds_rdma`): g2 connects,
//! g1 accepts; pings both ways and the same sizes echoed back (data both ways at once).
//!
//! Needs root; fails (never skips) when the lab cannot boot, like the other lab tests.
//! `RDS_IB_DEBUG=1` on the host adds the transport's CM log to the guest output.

use anyhow::{ensure, Context, Result};
use rds_core::proto::TransportKind;
use rds_core::stats::Counter;
use rds_core::Socket;
use rds_tests::ib::{
    guest_cmd, install_self, load_kernel_rds_rdma, start_ib_node, step, wait_until, GUEST_ENV,
};
use rds_tests::interop::*;
use rds_tests::lab::{guest_addr, GuestJob, Lab, LabOptions};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Message sizes, cycled: 0 B, one byte, fragment boundaries, many fragments, 1 MiB.
const SIZES: [usize; 8] = [0, 1, 4095, 4096, 4097, 8192, 65536, 1 << 20];
const COUNT: u64 = 24;
/// Our ports (g2) and the kernel's (g1).
const OUR_RECV: u16 = 7000;
const OUR_SEND: u16 = 7001;
const OUR_PING: u16 = 7002;
const K_RECV: u16 = 7100;
const K_SEND: u16 = 7101;

const T: Duration = Duration::from_secs(120);

fn ip_env(name: &str) -> Result<Ipv4Addr> {
    std::env::var(name)
        .with_context(|| format!("{name} not set"))?
        .parse()
        .with_context(|| format!("{name} is not an IPv4 address"))
}

/// The guest side (run by [`kernel_interop_ib`] inside g2; does nothing elsewhere).
#[test]
#[ignore = "runs inside a lab guest, started by kernel_interop_ib"]
fn guest_side() {
    let Ok(role) = std::env::var(GUEST_ENV) else {
        return;
    };
    let r = match role.as_str() {
        "vs-kernel" => guest_vs_kernel(),
        "echo" => guest_echo(),
        "vs-ours" => guest_vs_ours(),
        other => Err(anyhow::anyhow!("unknown role {other}")),
    };
    if let Err(e) = r {
        step("failed", &format!("{e:#}"));
        panic!("guest side: {e:#}");
    }
}

fn ib_socket(node: &rds_core::Node, addr: SocketAddr) -> Result<Socket> {
    let s = Socket::with_node(node);
    s.set_transport(TransportKind::Ib)
        .context("set_transport(Ib)")?;
    s.bind(addr).with_context(|| format!("bind {addr}"))?;
    Ok(s)
}

/// Pings `target` (port 0) 5 times from `s`, each pong awaited (30 s each); the RTTs in µs.
fn ping5(s: &Socket, target: SocketAddr) -> Result<Vec<u128>> {
    let mut buf = [0u8; 64];
    let mut rtts = Vec::new();
    for i in 0..5 {
        let t = Instant::now();
        s.send_to(&[], target).context("ping send")?;
        let dl = t + Duration::from_secs(30);
        loop {
            let now = Instant::now();
            ensure!(now < dl, "no pong for ping {i} within 30 s");
            s.set_read_timeout(Some(dl - now));
            match s.recv_msg(&mut buf, Default::default()) {
                Ok(m) if m.from == Some(target) && m.len == 0 => break,
                Ok(m) => anyhow::bail!("unexpected {} bytes from {:?}", m.len, m.from),
                Err(e) if errno_of(&e) == libc::ETIMEDOUT => {}
                Err(e) => return Err(e.into()),
            }
        }
        rtts.push(t.elapsed().as_micros());
    }
    Ok(rtts)
}

fn guest_vs_kernel() -> Result<()> {
    let ours = ip_env("IB_OURS")?;
    let node = start_ib_node(ours, 0x1b1b)?;
    let r = vs_kernel(&node, ours);
    if r.is_err() {
        step("stats", &nonzero_stats(&node));
        step("conns", &format!("{:?}", node.connections()));
    }
    node.shutdown();
    r
}

fn nonzero_stats(node: &rds_core::Node) -> String {
    node.stats()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn vs_kernel(node: &rds_core::Node, ours: Ipv4Addr) -> Result<()> {
    let kernel = ip_env("IB_KERNEL")?;
    let node = node.clone();
    let at = |p| SocketAddr::new(IpAddr::V4(ours), p);
    let k = |p| SocketAddr::new(IpAddr::V4(kernel), p);
    let rcv = ib_socket(&node, at(OUR_RECV))?;
    let snd = ib_socket(&node, at(OUR_SEND))?;
    let png = ib_socket(&node, at(OUR_PING))?;
    step("ready", &format!("ours={ours} kernel={kernel}"));

    // Our pings first: our node connects (the active side; the kernel logs "Passive").
    let rtts = ping5(&png, k(0))?;
    step("pinged", &format!("5/5 rtt_us={rtts:?}"));
    // Then the kernel pings us on that connection.
    wait_until("5 kernel pings", Duration::from_secs(120), || {
        node.counter(Counter::RecvPing) >= 5
    })?;
    step(
        "kernel-pinged",
        &format!("recv_ping={}", node.counter(Counter::RecvPing)),
    );

    // Data to the kernel's receiver.
    snd.set_send_buffer_size(4 << 20);
    let plan = SendPlan {
        dest: k(K_RECV),
        count: COUNT,
        sizes: SIZES.to_vec(),
        nonblock: false,
        gap: Duration::ZERO,
        pause: None,
    };
    let dl = Instant::now() + Duration::from_secs(240);
    let r = send_pattern(std::slice::from_ref(&snd), &plan, dl)?;
    let drained = drain_wait(&node, at(OUR_SEND), dl)?;
    step(
        "sent",
        &format!(
            "sent={} bytes={} send_ms={} acked_after_ms={}",
            r.sent,
            r.bytes,
            r.elapsed.as_millis(),
            drained.as_millis()
        ),
    );

    // Data from the kernel's sender.
    let mut check = StreamCheck::with_sizes(SizeRule {
        base_port: K_SEND,
        sockets: 1,
        sizes: SIZES.to_vec(),
    });
    let t0 = Instant::now();
    recv_into(
        &rcv,
        &mut check,
        COUNT,
        Instant::now() + Duration::from_secs(240),
    )?;
    let recv_ms = t0.elapsed().as_millis();
    let extra = count_extra(&rcv, Duration::from_millis(500))?;
    ensure!(check.errors == 0, "our receiver: {}", check.summary());
    ensure!(extra.is_empty(), "extra messages: {extra:?}");
    ensure!(
        check.bytes == pattern_bytes(&SIZES, COUNT) && check.sources.len() == 1,
        "our receiver: {}",
        check.summary()
    );
    step(
        "received",
        &format!("{} recv_ms={recv_ms}", check.summary()),
    );

    // A forced drop: our node restarts the connection; both sides reconnect (IB has no
    // "smaller address initiates" rule), then pings and a last message must get through,
    // and nothing already delivered comes again.
    let ups_before = node.connections()[0].paths[0].ups;
    ensure!(
        node.restart_conn(IpAddr::V4(ours), IpAddr::V4(kernel)),
        "no connection"
    );
    let t0 = Instant::now();
    let rtts = ping5(&png, k(0))?;
    let ups = node.connections()[0].paths[0].ups;
    ensure!(
        ups > ups_before,
        "the connection did not come back up ({ups} ups)"
    );
    step(
        "reconnected",
        &format!(
            "pings 5/5 after the restart in {} ms, rtt_us={rtts:?}, path ups {ups_before}->{ups}",
            t0.elapsed().as_millis()
        ),
    );
    step("wait-last", "");
    let mut last = StreamCheck::default();
    recv_into(
        &rcv,
        &mut last,
        1,
        Instant::now() + Duration::from_secs(120),
    )?;
    let extra = count_extra(&rcv, Duration::from_millis(500))?;
    ensure!(
        last.errors == 0 && extra.is_empty(),
        "after the restart: {} extra {extra:?}",
        last.summary()
    );
    // Idle cost with the connection up: process CPU time over 2 s of quiet (reported, not
    // asserted; the completion channels sit in epoll, nothing polls).
    let cpu = || -> Option<u64> {
        let st = std::fs::read_to_string("/proc/self/stat").ok()?;
        let rest = st.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    };
    let c0 = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let c1 = cpu();
    step(
        "idle",
        &format!(
            "cpu_ticks_in_2s={} (USER_HZ 100)",
            c0.zip(c1)
                .map_or("unknown".into(), |(a, b)| (b - a).to_string())
        ),
    );
    let conns = node.connections();
    step(
        "done",
        &format!(
            "ib_conns={} conns={} stats: {}",
            node.ib_connection_count(),
            conns.len(),
            nonzero_stats(&node)
        ),
    );
    Ok(())
}

fn job_ok(job: GuestJob, what: &str) -> Result<String> {
    let out = job.wait()?.check(what)?;
    Ok(out.stdout)
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

fn run(lab: &Lab, guest: &mut Option<GuestJob>) -> Result<Vec<String>> {
    let k = guest_addr(1);
    let o = guest_addr(2);
    let mut report = Vec::new();
    load_kernel_rds_rdma(lab, 1).context("loading rds_rdma in g1")?;
    lab.exec_ok(2, "! grep -q '^rds_rdma ' /proc/modules", T)
        .context("rds_rdma must not be loaded in g2")?;
    let path = install_self(lab, 2, "interop_ib")?;

    let krecv = lab.spawn(
        1,
        &format!(
            "rdstool recv -b {k}:{K_RECV} -t ib -n {COUNT} --sources 1 --extra-ms 500 --timeout 280"
        ),
        Duration::from_secs(300),
    )?;
    krecv.wait_for_output("recv: bound", Duration::from_secs(60))?;

    // RDS_IB_DEBUG=1 on the host: the transport's log, interleaved with the steps.
    let debug = if std::env::var_os("RDS_IB_DEBUG").is_some() {
        " RDS_IB_DEBUG=1"
    } else {
        ""
    };
    let t0 = Instant::now();
    let job = guest.insert(lab.spawn(
        2,
        &(guest_cmd(
            &path,
            "guest_side",
            "vs-kernel",
            &format!("IB_KERNEL={k} IB_OURS={o}{debug}"),
        ) + if debug.is_empty() { "" } else { " 2>&1" }),
        Duration::from_secs(600),
    )?);
    job.wait_for_output("IBSTEP ready", Duration::from_secs(120))?;
    job.wait_for_output("IBSTEP pinged", Duration::from_secs(120))?;
    report.push(format!(
        "ping ours->kernel (ours connects) done after {} ms",
        t0.elapsed().as_millis()
    ));
    let out = lab
        .exec(
            1,
            &format!("rdstool ping -b {k} -d {o} -c 5 -i 20 -W 10000 -t ib"),
            Duration::from_secs(120),
        )?
        .check("kernel ping")?;
    let l = ok_line(&out.stdout, "ping")?.to_string();
    ensure!(
        field_u64(&l, "sent")? == 5 && field_u64(&l, "received")? == 5,
        "kernel ping: {l}"
    );
    report.push(format!("ping kernel->ours: {l}"));
    job.wait_for_output("IBSTEP kernel-pinged", Duration::from_secs(60))?;
    job.wait_for_output("IBSTEP sent", Duration::from_secs(300))?;
    let l = job_ok(krecv, "kernel recv")?;
    let l = ok_line(&l, "recv")?.to_string();
    ensure!(
        field_u64(&l, "received")? == COUNT
            && field_u64(&l, "bytes")? == pattern_bytes(&SIZES, COUNT)
            && field_u64(&l, "errors")? == 0
            && field_u64(&l, "extra")? == 0,
        "kernel receiver: {l}"
    );
    report.push(format!("data ours->kernel: kernel {l}"));

    let out = lab
        .exec(
            1,
            &format!(
                "rdstool send -b {k}:{K_SEND} -d {o}:{OUR_RECV} -t ib -n {COUNT} -s {} --timeout 280",
                sizes_arg(&SIZES)
            ),
            Duration::from_secs(300),
        )?
        .check("kernel send")?;
    let l = ok_line(&out.stdout, "send")?.to_string();
    ensure!(
        field_u64(&l, "sent")? == COUNT && field_u64(&l, "bytes")? == pattern_bytes(&SIZES, COUNT),
        "kernel sender: {l}"
    );
    job.wait_for_output("IBSTEP received", Duration::from_secs(300))?;
    report.push(format!("data kernel->ours: kernel {l}"));

    // After our forced restart and reconnect: one more kernel message (4097 B, 2 fragments)
    // from a new port; our side checks it and that nothing earlier is delivered again.
    job.wait_for_output("IBSTEP wait-last", Duration::from_secs(180))?;
    let out = lab
        .exec(
            1,
            &format!(
                "rdstool send -b {k}:{} -d {o}:{OUR_RECV} -t ib -n 1 -s 4097 --timeout 100",
                K_SEND + 1
            ),
            Duration::from_secs(120),
        )?
        .check("kernel send after the restart")?;
    let l = ok_line(&out.stdout, "send")?.to_string();
    ensure!(field_u64(&l, "sent")? == 1, "kernel sender: {l}");
    job.wait_for_output("IBSTEP done", Duration::from_secs(120))?;
    let job = guest.take().expect("the guest job");
    let gout = job_ok(job, "guest side")?;
    for l in gout.lines().filter(|l| l.starts_with("IBSTEP ")) {
        report.push(format!("guest: {l}"));
    }

    // Who connected (the kernel logs "Active"/"Passive conn connected").
    let dm = lab.exec_ok(1, "dmesg | grep 'conn connected'", T)?.stdout;
    for l in dm.lines() {
        report.push(format!("kernel: {}", l.trim()));
    }
    // The kernel's view of the connection and its checksum counter.
    let conns = lab.exec_ok(1, "rdstool info conns", T)?.stdout;
    ensure!(
        conns
            .lines()
            .any(|l| l.starts_with(&format!("{k} {o} ")) && l.contains("infiniband")),
        "no IB connection {k} -> {o} in the kernel's list:\n{conns}"
    );
    let counters = parse_counters(&lab.exec_ok(1, "rdstool info counters", T)?.stdout);
    ensure!(
        counters
            .get("ib_recv_drop_bad_checksum")
            .copied()
            .unwrap_or(0)
            == 0
            && counters.get("recv_drop_bad_checksum").copied().unwrap_or(0) == 0,
        "kernel saw bad checksums: {counters:?}"
    );
    report.push(format!(
        "kernel counters: {}",
        counters
            .iter()
            .filter(|(n, v)| **v != 0 && (n.starts_with("ib_") || n.contains("ping")))
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    Ok(report)
}

/// Our node (g2, IB only) against the kernel's `rds_rdma` (g1) over rxe: pings and data both
/// ways (see the module comment).
#[test]
fn kernel_interop_ib() {
    if std::env::var_os(GUEST_ENV).is_some() {
        return;
    }
    let t0 = Instant::now();
    let opts = LabOptions {
        ib: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(2, opts).expect("the kernel lab must boot");
    let booted = t0.elapsed();
    let mut guest = None;
    let r = run(&lab, &mut guest);
    match &r {
        Ok(report) => {
            for l in report {
                println!("{l}");
            }
        }
        Err(e) => {
            eprintln!("FAILED: {e:#}");
            if let Some(job) = &guest {
                eprintln!("--- guest side so far ---\n{}", job.stdout_so_far());
                job.kill();
            }
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
        panic!("IB interop failed: {e:#}");
    }
}

// ---------------------------------------------------------------------------------------------
// Our node <-> our node

/// Guest role "echo" (g1): echoes `COUNT` messages arriving on port `OUR_RECV` back to their
/// sender, then pings the peer node 5 times and waits until its echoes are acknowledged.
fn guest_echo() -> Result<()> {
    let ours = ip_env("IB_OURS")?;
    let node = start_ib_node(ours, 0xec40)?;
    let r = echo(&node, ours);
    if r.is_err() {
        step("stats", &nonzero_stats(&node));
        step("conns", &format!("{:?}", node.connections()));
    }
    node.shutdown();
    r
}

fn echo(node: &rds_core::Node, ours: Ipv4Addr) -> Result<()> {
    let peer = ip_env("IB_PEER")?;
    let at = SocketAddr::new(IpAddr::V4(ours), OUR_RECV);
    let s = ib_socket(node, at)?;
    s.set_send_buffer_size(4 << 20);
    step("ready", &format!("echo on {at}"));
    let dl = Instant::now() + Duration::from_secs(240);
    let mut buf = vec![0u8; MAX_MSG + 1];
    let (mut n, mut bytes) = (0u64, 0u64);
    while n < COUNT {
        let now = Instant::now();
        ensure!(now < dl, "echoed {n} of {COUNT} messages at the time limit");
        s.set_read_timeout(Some((dl - now).min(Duration::from_millis(500))));
        match s.recv_msg(&mut buf, Default::default()) {
            Ok(m) => {
                let from = m.from.context("message without a source")?;
                ensure!(!m.truncated, "truncated message of {} bytes", m.len);
                s.send_to(&buf[..m.len], from).context("echo send")?;
                n += 1;
                bytes += m.len as u64;
            }
            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            Err(e) => return Err(e).context("recv"),
        }
    }
    step("echoed", &format!("echoed={n} bytes={bytes}"));
    let png = ib_socket(node, SocketAddr::new(IpAddr::V4(ours), OUR_PING))?;
    let target = SocketAddr::new(IpAddr::V4(peer), 0);
    let mut pong = [0u8; 16];
    for i in 0..5 {
        png.send_to(&[], target).context("ping send")?;
        let dl = Instant::now() + Duration::from_secs(30);
        loop {
            let now = Instant::now();
            ensure!(now < dl, "no pong for ping {i} within 30 s");
            png.set_read_timeout(Some(dl - now));
            match png.recv_msg(&mut pong, Default::default()) {
                Ok(m) if m.from == Some(target) && m.len == 0 => break,
                Ok(m) => anyhow::bail!("unexpected {} bytes from {:?}", m.len, m.from),
                Err(e) if errno_of(&e) == libc::ETIMEDOUT => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    drain_wait(node, at, Instant::now() + Duration::from_secs(60))?;
    step(
        "done",
        &format!("pinged peer 5/5; stats: {}", nonzero_stats(node)),
    );
    Ok(())
}

/// Guest role "vs-ours" (g2): pings the echo node, sends the pattern stream to it and checks
/// the echoes, then waits for the echo node's 5 pings.
fn guest_vs_ours() -> Result<()> {
    let ours = ip_env("IB_OURS")?;
    let node = start_ib_node(ours, 0x0b0b)?;
    let r = vs_ours(&node, ours);
    if r.is_err() {
        step("stats", &nonzero_stats(&node));
        step("conns", &format!("{:?}", node.connections()));
    }
    node.shutdown();
    r
}

fn vs_ours(node: &rds_core::Node, ours: Ipv4Addr) -> Result<()> {
    let peer = ip_env("IB_PEER")?;
    let p = |port| SocketAddr::new(IpAddr::V4(peer), port);
    let s = ib_socket(node, SocketAddr::new(IpAddr::V4(ours), OUR_SEND))?;
    s.set_send_buffer_size(4 << 20);
    let mut pong = [0u8; 16];
    for i in 0..5 {
        s.send_to(&[], p(0)).context("ping send")?;
        let dl = Instant::now() + Duration::from_secs(30);
        loop {
            let now = Instant::now();
            ensure!(now < dl, "no pong for ping {i} within 30 s");
            s.set_read_timeout(Some(dl - now));
            match s.recv_msg(&mut pong, Default::default()) {
                Ok(m) if m.from == Some(p(0)) && m.len == 0 => break,
                Ok(m) => anyhow::bail!("unexpected {} bytes from {:?}", m.len, m.from),
                Err(e) if errno_of(&e) == libc::ETIMEDOUT => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    step("pinged", "5/5");
    let before = node.counter(Counter::RecvPing);
    let plan = SendPlan {
        dest: p(OUR_RECV),
        count: COUNT,
        sizes: SIZES.to_vec(),
        nonblock: false,
        gap: Duration::ZERO,
        pause: None,
    };
    let dl = Instant::now() + Duration::from_secs(240);
    // Send from a thread while this one checks the echoes (both directions at once).
    let mut check = StreamCheck::with_sizes(SizeRule {
        base_port: OUR_RECV,
        sockets: 1,
        sizes: SIZES.to_vec(),
    });
    let (r, got) = std::thread::scope(|sc| {
        let h = sc.spawn(|| send_pattern(std::slice::from_ref(&s), &plan, dl));
        let got = recv_into(&s, &mut check, COUNT, dl);
        (h.join(), got)
    });
    got?;
    let r = r.map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
    let extra = count_extra(&s, Duration::from_millis(500))?;
    ensure!(check.errors == 0, "echoes: {}", check.summary());
    ensure!(extra.is_empty(), "extra messages: {extra:?}");
    ensure!(
        check.bytes == pattern_bytes(&SIZES, COUNT) && r.bytes == check.bytes,
        "echoes: {} (sent {} bytes)",
        check.summary(),
        r.bytes
    );
    step(
        "echoes",
        &format!(
            "{} round_trip_ms={}",
            check.summary(),
            r.elapsed.as_millis()
        ),
    );
    wait_until(
        "5 pings from the echo node",
        Duration::from_secs(120),
        || node.counter(Counter::RecvPing) >= before + 5,
    )?;
    step("done", &format!("stats: {}", nonzero_stats(node)));
    Ok(())
}

fn run_ours(lab: &Lab, jobs: &mut Vec<GuestJob>) -> Result<Vec<String>> {
    let (a, b) = (guest_addr(1), guest_addr(2));
    let mut report = Vec::new();
    for g in 1..=2 {
        lab.exec_ok(g, "! grep -q '^rds_rdma ' /proc/modules", T)
            .context("rds_rdma must not be loaded")?;
    }
    let p1 = install_self(lab, 1, "interop_ib")?;
    let p2 = install_self(lab, 2, "interop_ib")?;
    let debug = if std::env::var_os("RDS_IB_DEBUG").is_some() {
        " RDS_IB_DEBUG=1"
    } else {
        ""
    };
    let redir = if debug.is_empty() { "" } else { " 2>&1" };
    let t0 = Instant::now();
    jobs.push(lab.spawn(
        1,
        &(guest_cmd(
            &p1,
            "guest_side",
            "echo",
            &format!("IB_OURS={a} IB_PEER={b}{debug}"),
        ) + redir),
        Duration::from_secs(400),
    )?);
    jobs[0].wait_for_output("IBSTEP ready", Duration::from_secs(120))?;
    jobs.push(lab.spawn(
        2,
        &(guest_cmd(
            &p2,
            "guest_side",
            "vs-ours",
            &format!("IB_OURS={b} IB_PEER={a}{debug}"),
        ) + redir),
        Duration::from_secs(400),
    )?);
    jobs[1].wait_for_output("IBSTEP done", Duration::from_secs(360))?;
    jobs[0].wait_for_output("IBSTEP done", Duration::from_secs(120))?;
    report.push(format!(
        "both sides done after {} ms",
        t0.elapsed().as_millis()
    ));
    for (g, job) in [(1, jobs.remove(0)), (2, jobs.remove(0))] {
        let out = job_ok(job, &format!("guest g{g}"))?;
        for l in out.lines().filter(|l| l.starts_with("IBSTEP ")) {
            report.push(format!("g{g}: {l}"));
        }
    }
    Ok(report)
}

/// Our node against our node over rxe, both in guests without the kernel's `rds_rdma`: g2
/// connects (active), g1 accepts (passive); pings both ways; 24 messages of 0 B … 1 MiB from
/// g2 echoed by g1, checked for content, order, sizes and no extra message.
#[test]
fn ours_to_ours_ib() {
    if std::env::var_os(GUEST_ENV).is_some() {
        return;
    }
    let t0 = Instant::now();
    let opts = LabOptions {
        ib: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(2, opts).expect("the kernel lab must boot");
    let mut jobs = Vec::new();
    let r = run_ours(&lab, &mut jobs);
    match &r {
        Ok(report) => report.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("FAILED: {e:#}");
            for j in &jobs {
                eprintln!("--- guest g{} so far ---\n{}", j.guest(), j.stdout_so_far());
                j.kill();
            }
            eprintln!("{}", diag(&lab));
        }
    }
    lab.stop().expect("lab stop");
    println!("total {:.1}s", t0.elapsed().as_secs_f64());
    if let Err(e) = r {
        panic!("our IB node to our IB node failed: {e:#}");
    }
}
