//! Our tools on a host whose kernel has RDS, as the original rds-tools run there: in lab guest
//! g1 (kernel `rds`, `rds_tcp`, `rds_rdma`, soft-RoCE `rxe0`) our `rds-ping`, `rds-info` (every
//! table), `rds-ctrl stats` and `rds-stress` (against ours in g2, both on kernel sockets, and
//! against ours on the host, an embedded node in the lab namespace) run with no flags and give
//! the kernel's view, cross-checked against `rdstool`'s raw reading of the same `RDS_INFO_*`
//! tables (and `rds-info --format prometheus`, read by Python's `prometheus_client` on the
//! host, the same counters as metrics); our `rds-ping` on the host (an embedded node in the
//! lab namespace) checks both kernel guests at once, with one more address that refuses, as an
//! operator checks a cluster (summary lines, `-a`, `-u`, `--json`, exit statuses);
//! `rds-stress -D` does RDMA through the kernel's `rds_rdma` (regions, RDMA
//! operations, notifications; `-v` checks every byte); `--stack user` there meets port 16385
//! held by the kernel and says so in one line. Then, with the kernel's RDS modules removed
//! from g1, `rds-ping` with no flags runs an embedded node that picks RDS/IB by itself (the
//! address is on `rxe0`) and pings the kernel's `rds_rdma` in g2, which lists the connection
//! as `infiniband`.
//!
//! One boot of two guests. Needs root and the release binaries (`cargo test --workspace
//! --release` builds them first); fails, never skips, when the lab cannot boot.

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rds_tests::ib::{diag, release_bin};
use rds_tests::lab::{guest_addr, Lab, LabOptions, HOST_ADDR1, HOST_ADDR2};
use rds_tests::prometheus;

const T: Duration = Duration::from_secs(120);
const ENV: &str = "mkdir -p /tmp/rds-stack; RDS_RUNTIME_DIR=/tmp/rds-stack";

/// The tools copied into each guest's share.
struct Tools {
    ping: String,
    info: String,
    ctrl: String,
    stress: [String; 2],
}

fn install(lab: &Lab) -> Result<Tools> {
    let mut paths = Vec::new();
    for (g, name) in [
        (1, "rds-ping"),
        (1, "rds-info"),
        (1, "rds-ctrl"),
        (1, "rds-stress"),
        (2, "rds-stress"),
    ] {
        let bytes = std::fs::read(release_bin(name)?).with_context(|| format!("reading {name}"))?;
        paths.push(lab.write_share(g, name, &bytes)?);
    }
    Ok(Tools {
        ping: paths[0].clone(),
        info: paths[1].clone(),
        ctrl: paths[2].clone(),
        stress: [paths[3].clone(), paths[4].clone()],
    })
}

/// `rdstool info counters` as (name, value) in the kernel's order.
fn kernel_counters(lab: &Lab, g: usize) -> Result<Vec<(String, u64)>> {
    let out = lab.exec_ok(g, "rdstool info counters", T)?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| {
            let (n, v) = l.split_once(' ')?;
            Some((n.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

/// The counter rows of a `Counters:` table (name, value).
fn table_counters(text: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if l == "Counters:" {
            inside = true;
            continue;
        }
        if inside {
            if l.is_empty() {
                break;
            }
            let mut f = l.split_whitespace();
            if let (Some(n), Some(v)) = (f.next(), f.next()) {
                if let Ok(v) = v.parse() {
                    rows.push((n.to_string(), v));
                }
            }
        }
    }
    rows
}

/// The `RDS Connections` rows the original would print for `rdstool info conns` lines
/// (`LADDR FADDR NEXT_TX NEXT_RX TRANSPORT FLAGS TOS`).
fn conn_rows(rdstool: &str) -> Vec<String> {
    rdstool
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 7 {
                return None;
            }
            let flags = u8::from_str_radix(f[5].trim_start_matches("0x"), 16).ok()?;
            let c = |b: u8, ch: char| if flags & b != 0 { ch } else { '-' };
            Some(format!(
                "{:>15} {:>15} {:>4} {:>16} {:>16} {}{}{}-",
                f[0],
                f[1],
                f[6],
                f[2],
                f[3],
                c(1, 's'),
                c(2, 'c'),
                c(4, 'C')
            ))
        })
        .collect()
}

/// The rows of one table of rds-info's output (after its title and header).
fn table_rows<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = text.lines();
    for l in lines.by_ref() {
        if l == title {
            break;
        }
    }
    lines.next(); // header
    lines.take_while(|l| !l.is_empty()).collect()
}

fn kernel_view(lab: &Lab, t: &Tools) -> Result<()> {
    let (g1, g2) = (guest_addr(1), guest_addr(2));
    // rds-ping with no flags: kernel sockets (a node of ours could not listen on 16385 here).
    let out = lab.exec(1, &format!("{ENV} {} -c 3 -i 0.3 {g2}", t.ping), T)?;
    let out = out.check("rds-ping (no flags) in g1")?;
    let replies = out.stdout.lines().filter(|l| is_reply(l)).count();
    ensure!(replies == 3, "rds-ping: {replies} replies:\n{}", out.stdout);
    println!("rds-ping g1 -> g2, kernel sockets: 3 replies");

    // A bound kernel socket for the sockets table.
    let recv = lab.spawn(
        1,
        &format!("rdstool recv -b {g1}:7300 -t tcp -n 1 --timeout 100"),
        T,
    )?;
    recv.wait_for_output("recv: bound", Duration::from_secs(30))?;

    // rds-info with no flags: every table of the original, from the kernel.
    let mut tries = 0;
    let info = loop {
        tries += 1;
        let before = lab.exec_ok(1, "rdstool info conns", T)?.stdout;
        let info = lab
            .exec(1, &format!("{ENV} {}", t.info), T)?
            .check("rds-info (no flags) in g1")?;
        let after = lab.exec_ok(1, "rdstool info conns", T)?.stdout;
        let got = table_rows(&info.stdout, "RDS Connections:");
        let want = conn_rows(&after);
        if before == after && got == want {
            break info;
        }
        ensure!(
            tries < 3,
            "rds-info -n rows differ from the kernel's RDS_INFO_CONNECTIONS:\n{}\n--- rdstool ---\n{after}",
            got.join("\n")
        );
    };
    for title in [
        "RDS IB Connections:",
        "TCP Connections:",
        "Counters:",
        "RDS Sockets:",
        "RDS Connections:",
        "Receive Message Queue:",
        "Send Message Queue:",
        "Retransmit Message Queue:",
    ] {
        ensure!(
            info.stdout.lines().any(|l| l == title),
            "rds-info: no table {title}\n{}",
            info.stdout
        );
    }
    let ib = table_rows(&info.stdout, "RDS IB Connections:");
    let ib_row = format!("{g1:>15} {g2:>15}    0");
    ensure!(
        ib.iter().any(|r| r.starts_with(&ib_row)
            && r.ends_with(&format!("::ffff:{g1} {:>32}", format!("::ffff:{g2}")))),
        "rds-info -I: no IB connection {g1} -> {g2}:\n{}",
        ib.join("\n")
    );
    let socks = table_rows(&info.stdout, "RDS Sockets:");
    ensure!(
        socks
            .iter()
            .any(|r| r.starts_with(&format!("{g1:>15}  7300 {:>15}     0", "0.0.0.0"))),
        "rds-info -k: no socket {g1}:7300:\n{}",
        socks.join("\n")
    );
    let kc = kernel_counters(lab, 1)?;
    let names = |v: &[(String, u64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    ensure!(
        kc.len() >= 41 && names(&table_counters(&info.stdout)) == names(&kc),
        "rds-info -c names differ from RDS_INFO_COUNTERS:\n{}",
        info.stdout
    );
    // --format prometheus: the same counters (and the kernel's connections, sockets and
    // queues) as metrics, read by a real Prometheus parser on the host.
    let prom = lab
        .exec(1, &format!("{ENV} {} --format prometheus", t.info), T)?
        .check("rds-info --format prometheus")?;
    prometheus::strict(&prom.stdout)?;
    let fams = prometheus::parse(&prom.stdout)?;
    let counters: Vec<(String, u64)> = fams
        .iter()
        .filter(|f| f.kind == "counter")
        .filter_map(|f| {
            let s = f.samples.first()?;
            if s.labels.get("node").map(String::as_str) != Some("kernel") {
                return None;
            }
            let name = s.name.strip_prefix("rds_")?.strip_suffix("_total")?;
            Some((name.to_string(), s.value as u64))
        })
        .collect();
    let gauge = |name: &str, labels: &[(&str, &str)]| {
        fams.iter()
            .find(|f| f.name == name && f.kind == "gauge")
            .and_then(|f| f.value(labels))
    };
    let up: f64 = fams
        .iter()
        .filter(|f| f.name == "rds_connections")
        .flat_map(|f| &f.samples)
        .filter(|s| s.labels.get("state").map(String::as_str) == Some("up"))
        .map(|s| s.value)
        .sum();
    ensure!(
        names(&counters) == names(&kc)
            && counters.iter().zip(&kc).all(|(m, k)| m.1 >= k.1)
            && gauge("rds_sockets", &[]).is_some_and(|n| n >= 1.0)
            && gauge("rds_queued_messages", &[("queue", "send")]).is_some()
            && up >= 1.0,
        "rds-info --format prometheus differs from RDS_INFO_COUNTERS or lacks the socket on \
         7300, the queues or the connection to {g2}:\n{}",
        prom.stdout
    );
    println!(
        "rds-info --format prometheus g1: {} kernel counters and {} gauges, read by \
         prometheus_client",
        counters.len(),
        fams.len() - counters.len()
    );
    let a = lab
        .exec(1, &format!("{ENV} {} -a -n -k", t.info), T)?
        .check("rds-info -a -n -k")?;
    ensure!(
        a.stdout
            .contains(&format!("{:>37} {:>37}", "LocalAddr", "RemoteAddr"))
            && a.stdout.contains(&format!("{:>37}", g2.to_string())),
        "rds-info -a:\n{}",
        a.stdout
    );
    recv.kill();
    let _ = recv.wait();
    println!(
        "rds-info g1: every table from the kernel, connections and counters as rdstool reads them"
    );

    // rds-ctrl stats with no flags: the kernel's counters, in its order.
    let st = lab
        .exec(1, &format!("{ENV} {} stats", t.ctrl), T)?
        .check("rds-ctrl stats in g1")?;
    let sc = table_counters(&st.stdout);
    ensure!(
        names(&sc) == names(&kc),
        "rds-ctrl stats names differ from RDS_INFO_COUNTERS:\n{}",
        st.stdout
    );
    let ping_before = kc.iter().find(|c| c.0 == "recv_ping").map_or(0, |c| c.1);
    ensure!(
        sc.iter().any(|c| c.0 == "recv_ping" && c.1 >= ping_before),
        "recv_ping: {}",
        st.stdout
    );
    let r = lab.exec(1, &format!("{ENV} {} stats reset", t.ctrl), T)?;
    ensure!(
        r.status == 2 && r.stderr.contains("cannot be reset"),
        "rds-ctrl stats reset on the kernel: {r:?}"
    );
    println!("rds-ctrl stats g1: {} kernel counters", sc.len());

    // rds-stress, ours on kernel sockets in both guests.
    let delivered = |g| -> Result<u64> {
        let o = lab.exec_ok(g, "rdstool info counter recv_delivered", T)?;
        o.stdout.trim().parse().context("recv_delivered")
    };
    let d0 = delivered(2)?;
    let passive = lab.spawn(2, &format!("{ENV} {} -r {g2} -p 4400", t.stress[1]), T)?;
    passive.wait_for_output("waiting for incoming connection", Duration::from_secs(30))?;
    let a = lab.exec(
        1,
        &format!(
            "{ENV} {} -r {g1} -s {g2} -p 4400 -t 1 -d 2 -q 1024 -a 64 -T 3",
            t.stress[0]
        ),
        T,
    )?;
    let p = passive.wait()?;
    ensure!(
        a.status == 0 && p.status == 0,
        "rds-stress: active exit {} passive exit {}\n--- active ---\n{}{}\n--- passive ---\n{}{}",
        a.status,
        p.status,
        a.stdout,
        a.stderr,
        p.stdout,
        p.stderr
    );
    let d1 = delivered(2)?;
    ensure!(
        d1 >= d0 + 100,
        "the kernel in g2 delivered {} messages during rds-stress",
        d1 - d0
    );
    println!(
        "rds-stress g1 -> g2 on kernel sockets: exit 0 both; g2's kernel delivered {} messages",
        d1 - d0
    );

    // rds-stress on g1's kernel sockets against ours on the host: an embedded node of the
    // passive rds-stress in the lab namespace (no kernel RDS there), over RDS/TCP. g1's
    // address is on rxe0, so its kernel would bind IB, which the host does not have:
    // `--transport tcp` sets SO_RDS_TRANSPORT on the kernel socket, as the original does.
    let host = HOST_ADDR1;
    let run = tempfile::tempdir()?;
    let out_path = run.path().join("passive.out");
    let p = lab
        .ns_command(release_bin("rds-stress")?.to_str().context("utf-8 path")?)
        .args(["-r", &host.to_string(), "-p", "4420"])
        .env("RDS_RUNTIME_DIR", run.path())
        .env("RDS_NO_DAEMON", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(Stdio::piped())
        .spawn()
        .context("our rds-stress on the host")?;
    let mut p = Some(p);
    let end = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&out_path)?.contains("waiting for incoming connection") {
        let c = p.as_mut().context("child")?;
        if c.try_wait()?.is_some() || Instant::now() >= end {
            let mut c = p.take().context("child")?;
            let _ = c.kill();
            let (code, err) = wait_child(c, Duration::from_secs(5))?;
            bail!(
                "our passive rds-stress on the host: exit {code:?} before listening\n{}{err}",
                std::fs::read_to_string(&out_path)?
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let d0 = delivered(1)?;
    let a = lab.exec(
        1,
        &format!(
            "{ENV} {} -r {g1} -s {host} -p 4420 -t 1 -d 2 -q 1024 -a 64 -T 3 --transport tcp",
            t.stress[0]
        ),
        T,
    )?;
    let p = wait_child(p.take().context("child")?, Duration::from_secs(60))?;
    ensure!(
        a.status == 0 && p.0 == Some(0),
        "rds-stress g1 (kernel) -> host (ours): active {a:?}; passive exit {:?}\n{}",
        p.0,
        p.1
    );
    let d1 = delivered(1)?;
    ensure!(
        d1 >= d0 + 100,
        "g1's kernel delivered {} messages from the host during rds-stress\n{}{}\n--- \
         passive ---\n{}{}",
        d1 - d0,
        a.stdout,
        a.stderr,
        std::fs::read_to_string(&out_path)?,
        p.1
    );
    println!(
        "rds-stress g1 (kernel sockets) -> host (ours, embedded node): exit 0 both; g1's kernel \
         delivered {} messages",
        d1 - d0
    );

    // rds-stress -D: RDMA through the kernel's rds_rdma over rxe0 (RDS_GET_MR, RDS_FREE_MR,
    // RDS_CMSG_RDMA_ARGS/_MAP/_DEST, RDS_CMSG_RDMA_STATUS), ours on kernel sockets in both
    // guests; -v checks the pattern of every byte an RDMA moved.
    for (port, args) in [
        (4410, "-M 0"),
        (4411, "-M 0 -I 2 --rdma-use-once 1 -q 2048"),
    ] {
        let d0 = delivered(2)?;
        let passive = lab.spawn(2, &format!("{ENV} {} -r {g2} -p {port}", t.stress[1]), T)?;
        passive.wait_for_output("waiting for incoming connection", Duration::from_secs(30))?;
        let a = lab.exec(
            1,
            &format!(
                "{ENV} {} -r {g1} -s {g2} -p {port} -D 8192 -d 2 -T 3 -v {args}",
                t.stress[0]
            ),
            T,
        )?;
        let p = passive.wait()?;
        let both = format!(
            "rds-stress -D {args}: active exit {} passive exit {}\n--- active ---\n{}{}\n--- \
             passive ---\n{}{}",
            a.status, p.status, a.stdout, a.stderr, p.stdout, p.stderr
        );
        ensure!(a.status == 0 && p.status == 0, "{both}");
        for out in [&a.stdout, &p.stdout] {
            let all = out.to_ascii_lowercase();
            ensure!(
                !["corrupt", "fail", "error", "unexpected"]
                    .iter()
                    .any(|w| all.contains(w)),
                "{both}"
            );
            // tsks tx/s rx/s tx+rx mbi mbo ...: RDMA moved data both ways (-M 0).
            let avg: Vec<f64> = out
                .lines()
                .find(|l| l.ends_with("(average)"))
                .map(|l| {
                    l.split_whitespace()
                        .filter_map(|f| f.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            ensure!(
                avg.len() >= 6 && avg[4] > 0.0 && avg[5] > 0.0,
                "no RDMA in the average line; {both}"
            );
        }
        let d1 = delivered(2)?;
        ensure!(
            d1 >= d0 + 50,
            "g2's kernel delivered {} messages; {both}",
            d1 - d0
        );
        println!(
            "rds-stress -D 8192 {args} g1 -> g2 on kernel sockets (rds_rdma): exit 0 both, \
             RDMA both ways, {} messages delivered by g2's kernel",
            d1 - d0
        );
    }

    // RDS_GET_MR by setsockopt: this kernel's rds_rdma registers with FRWR on rxe and has no
    // connection to do that with ("TODO: Add FRWR support for RDS_GET_MR using proxy qp"),
    // so it answers EOPNOTSUPP, and rds-stress reports it as the original does.
    let passive = lab.spawn(2, &format!("{ENV} {} -r {g2} -p 4412", t.stress[1]), T)?;
    passive.wait_for_output("waiting for incoming connection", Duration::from_secs(30))?;
    let a = lab.exec(
        1,
        &format!(
            "{ENV} {} -r {g1} -s {g2} -p 4412 -D 8192 -d 2 -T 2 --rdma-use-get-mr 1",
            t.stress[0]
        ),
        T,
    )?;
    let p = passive.wait()?;
    let line = "setsockopt(RDS_GET_MR) failed, errno: 95 (Operation not supported)";
    ensure!(
        a.status == 1 && format!("{}{}", a.stdout, a.stderr).contains(line),
        "rds-stress --rdma-use-get-mr 1 on the kernel's rds_rdma (rxe): {a:?}\npassive: {p:?}"
    );
    println!("rds-stress --rdma-use-get-mr 1 on kernel sockets: the kernel's EOPNOTSUPP, reported");

    // --stack user: the embedded node meets the kernel's rds_tcp on 16385, and says so.
    let u = lab.exec(
        1,
        &format!("{ENV} {} --stack user -I {g1} -c 1 {g2}", t.ping),
        T,
    )?;
    ensure!(
        u.status == 1
            && u.stderr.contains(&format!(
                "port 16385 on {g1} is held by the kernel's RDS (rds_tcp module is loaded)"
            ))
            && u.stderr.contains("modprobe -r rds_tcp")
            && !u.stderr.contains("errno: 0"),
        "rds-ping --stack user next to the kernel's rds_tcp: {u:?}"
    );
    println!("rds-ping --stack user g1: {}", u.stderr.trim());
    Ok(())
}

/// `recv_ping` of guest `g`'s kernel.
fn kernel_pings(lab: &Lab, g: usize) -> Result<u64> {
    let o = lab.exec_ok(g, "rdstool info counter recv_ping", T)?;
    o.stdout.trim().parse().context("recv_ping")
}

/// rds-ping with several destinations from the host (an embedded node on 198.18.0.1 in the
/// lab namespace, over RDS/TCP) to both guests' kernels, and to 198.18.0.3, a host address
/// where no RDS node listens.
fn cluster_check(lab: &Lab) -> Result<()> {
    let (g1, g2) = (guest_addr(1).to_string(), guest_addr(2).to_string());
    let host = HOST_ADDR1.to_string();
    let nobody = HOST_ADDR2.to_string();
    let run_dir = tempfile::tempdir()?;
    let exe = release_bin("rds-ping")?;
    let ping = |args: &[&str]| -> Result<(i32, String, String)> {
        let o = lab
            .ns_command(exe.to_str().context("utf-8 path")?)
            .args(["-I", &host, "-W", "3"])
            .args(args)
            .env("RDS_RUNTIME_DIR", run_dir.path())
            .env("RDS_NO_DAEMON", "1")
            .stdin(Stdio::null())
            .output()
            .context("rds-ping on the host")?;
        Ok((
            o.status.code().unwrap_or(-1),
            String::from_utf8(o.stdout)?,
            String::from_utf8(o.stderr)?,
        ))
    };
    let t0 = Instant::now();
    let before = [kernel_pings(lab, 1)?, kernel_pings(lab, 2)?];
    let (code, out, err) = ping(&["-c", "3", "-i", "0.2", &g1, &g2])?;
    print!("{out}");
    ensure!(
        code == 0 && err.is_empty(),
        "rds-ping g1 g2: exit {code}\n{out}{err}"
    );
    let lines: Vec<&str> = out.lines().collect();
    ensure!(lines.len() == 2, "rds-ping g1 g2:\n{out}");
    for (l, g) in lines.iter().zip([&g1, &g2]) {
        ensure!(
            answered_3_of_3(l, g),
            "rds-ping g1 g2: line {l:?} is not {g} answering 3 of 3"
        );
    }
    let after = [kernel_pings(lab, 1)?, kernel_pings(lab, 2)?];
    for g in 0..2 {
        ensure!(
            after[g] >= before[g] + 3,
            "g{}'s kernel counted {} pings",
            g + 1,
            after[g] - before[g]
        );
    }

    let (code, out, err) = ping(&["-c", "2", "-i", "0.2", "--json", &g1, &g2, &nobody])?;
    ensure!(
        code == 1,
        "rds-ping --json g1 g2 {nobody}: exit {code}\n{out}{err}"
    );
    ensure!(
        err == format!("rds-ping: connection to {nobody}:16385 refused: no RDS node there\n"),
        "stderr: {err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).context("JSON")?;
    let got: Vec<String> = v
        .as_array()
        .context("a JSON array")?
        .iter()
        .map(|o| {
            format!(
                "{} {} {} {}",
                o["destination"], o["source"], o["received"], o["answered"]
            )
        })
        .collect();
    ensure!(
        got == [
            format!("\"{g1}\" \"{host}\" 2 true"),
            format!("\"{g2}\" \"{host}\" 2 true"),
            format!("\"{nobody}\" \"{host}\" 0 false"),
        ],
        "rds-ping --json:\n{out}"
    );
    // Sent: the count to the guests; to the refusing address, those sent before the refusal.
    let sent: Vec<u64> = (0..3)
        .filter_map(|i| v[i]["transmitted"].as_u64())
        .collect();
    ensure!(
        sent.len() == 3 && sent[..2] == [2, 2] && (1..=2).contains(&sent[2]),
        "rds-ping --json:\n{out}"
    );
    ensure!(v[2]["stopped"] == "refused", "{out}");
    for (flag, want) in [
        ("-a", format!("{g1}\n{g2}\n")),
        ("-u", format!("{nobody}\n")),
    ] {
        let (code, out, err) = ping(&[flag, "-c", "1", &g1, &g2, &nobody])?;
        ensure!(
            code == 1 && out == want,
            "rds-ping {flag}: exit {code}\n{out}{err}"
        );
    }
    println!(
        "rds-ping from the host to g1, g2 (kernels) and {nobody}: exit 0, then 1, -a, -u ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Whether `line` is the summary line of `dest` answering 3 pings of 3:
/// `DEST : xmt/rcv/%loss = 3/3/0%, min/avg/max = MIN/AVG/MAX usec`, MIN <= AVG <= MAX, AVG
/// with one decimal.
fn answered_3_of_3(line: &str, dest: &str) -> bool {
    let prefix = format!("{dest} : xmt/rcv/%loss = 3/3/0%, min/avg/max = ");
    let Some(nums) = line
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix(" usec"))
    else {
        return false;
    };
    let f: Vec<&str> = nums.split('/').collect();
    let [min, avg, max] = f[..] else {
        return false;
    };
    let one_decimal = avg.split_once('.').is_some_and(|(_, d)| d.len() == 1);
    match (min.parse::<u64>(), avg.parse::<f64>(), max.parse::<u64>()) {
        (Ok(min), Ok(avg), Ok(max)) => one_decimal && min as f64 <= avg && avg <= max as f64,
        _ => false,
    }
}

fn ib_auto(lab: &Lab, t: &Tools) -> Result<()> {
    let (g1, g2) = (guest_addr(1), guest_addr(2));
    lab.exec_ok(
        1,
        "rmmod rds_rdma && rmmod rds_tcp && rmmod rds && ! grep -q '^rds' /proc/modules",
        T,
    )
    .context("removing the kernel's RDS modules from g1")?;
    let out = lab.exec(
        1,
        &format!(
            "{ENV} RDS_NO_DAEMON=1 {} -I {g1} -c 4 -i 1 -w 60 {g2}",
            t.ping
        ),
        T,
    )?;
    let replies = out.stdout.lines().filter(|l| is_reply(l)).count();
    if out.status != 0 || replies == 0 {
        bail!("rds-ping (embedded node, rxe0) g1 -> g2's kernel: {out:?}");
    }
    lab.expect_kernel_ib_conn(2, 1, T)?;
    println!("rds-ping g1 (no kernel RDS) -> g2: {replies} replies over IB, chosen by itself");
    Ok(())
}

#[test]
fn tools_on_a_kernel_rds_host() {
    let t0 = Instant::now();
    let lab = Lab::start(2, LabOptions::default()).expect("the kernel lab must boot");
    let booted = t0.elapsed();
    let r = install(&lab).and_then(|t| {
        kernel_view(&lab, &t)?;
        cluster_check(&lab)?;
        ib_auto(&lab, &t)
    });
    if let Err(e) = r {
        panic!("{e:#}\n{}", diag(&lab, "lsmod | grep -E 'rds|rdma'"));
    }
    lab.stop().unwrap();
    println!(
        "lab: boot (incl. setup) {:.1}s, total {:.1}s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// A reply line of rds-ping: `%4u: %u usec`.
fn is_reply(l: &str) -> bool {
    l.ends_with(" usec")
        && l.trim_start()
            .split(':')
            .next()
            .is_some_and(|n| n.parse::<u64>().is_ok())
}

/// Waits (bounded) for a child; kills it past `limit`. Returns its exit code and stderr.
fn wait_child(mut c: Child, limit: Duration) -> Result<(Option<i32>, String)> {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = c.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = c.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Ok((st.code(), err));
        }
        if Instant::now() >= end {
            let _ = c.kill();
            let _ = c.wait();
            bail!("our rds-stress on the host did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
