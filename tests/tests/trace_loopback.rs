//! A user traces `rds-stress --loopback` with one command: `rds-trace -w FILE -G 3` and no
//! `--node`, while the two embedded nodes of rds-stress run (127.25.0.1 active, 127.25.0.2
//! passive). rds-trace picks one of them, says so, and the capture holds the RDS/TCP frames
//! between the two addresses both ways, data messages of the tasks included. The same nodes
//! are then chosen by address and by pid (`--node`) in rds-info, rds-ctrl and rds-trace.
//!
//!
//! With the nodes of two processes (a passive and an active rds-stress, 127.25.1.1 and
//! 127.25.1.2), `rds-trace -w FILE` without `--node` traces both into one file, and every
//! frame between them is in it once: the sender's copy.
//!
//! With every CPU busy (threads of this test spinning at the normal policy, on top of
//! rds-stress's traffic), a trace still ends when asked: the node's session threads and
//! rds-trace's writer run under `SCHED_IDLE` while they capture, and the stop lifts them out,
//! so the node confirms the end with its counts (a file the node writes, and frames streamed
//! to rds-trace's standard output).
//!
//! While a trace runs, the node's session thread is under `SCHED_IDLE` and the thread that
//! watches for the stop is not (started before the session went idle, it does not inherit
//! the policy); once the trace ends (the session's thread ends with it) no thread of the node
//! is left under `SCHED_IDLE`.
//!
//! Uses the release binaries next to this test's executable (`cargo test --workspace
//! --release` builds them). Private runtime directory.

use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rds_core::trace::PcapFrames;
use rds_tests::proc::{BusyCpus, KillOnDrop};
use rds_tests::workspace_bin as bin;

const ACTIVE: &str = "127.25.0.1";
const PASSIVE: &str = "127.25.0.2";

fn tool(run: &Path, name: &str, args: &[&str]) -> Output {
    Command::new(bin(name))
        .args(args)
        .env("RDS_RUNTIME_DIR", run)
        .env("RDS_NO_DAEMON", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The running nodes as `rds-info --list-nodes --json` lists them.
fn nodes(run: &Path) -> Vec<serde_json::Value> {
    let out = tool(run, "rds-info", &["--list-nodes", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["nodes"].as_array().cloned())
        .unwrap_or_default()
}

/// (frames from ACTIVE to PASSIVE, frames back, data frames with a payload) in a capture.
fn frames_between(file: &Path) -> (usize, usize, usize) {
    let f = std::fs::File::open(file).unwrap();
    let (a, p): (IpAddr, IpAddr) = (ACTIVE.parse().unwrap(), PASSIVE.parse().unwrap());
    let (mut there, mut back, mut data) = (0, 0, 0);
    for fr in PcapFrames::new(std::io::BufReader::new(f)).unwrap() {
        let fr = fr.unwrap();
        let Some(h) = fr.header() else { continue };
        match (fr.src_ip(), fr.dst_ip()) {
            (Some(s), Some(d)) if s == a && d == p => there += 1,
            (Some(s), Some(d)) if s == p && d == a => back += 1,
            other => panic!("a frame between other addresses: {other:?}"),
        }
        if h.len > 0 && h.sport != 0 && h.dport != 0 {
            data += 1;
        }
    }
    (there, back, data)
}

/// Starts `rds-stress --loopback` (`active`, `passive`, `secs` seconds) with the runtime
/// directory `run` and waits (at most 20 s) until both its nodes serve their control sockets;
/// returns the process and the nodes as `rds-info --list-nodes` lists them.
fn loopback_stress(
    run: &Path,
    active: &str,
    passive: &str,
    secs: &str,
) -> (KillOnDrop, Vec<serde_json::Value>) {
    let stress = Command::new(bin("rds-stress"))
        .args(["--loopback", "-r", active, "-s", passive, "-T", secs])
        .env("RDS_RUNTIME_DIR", run)
        .env("RDS_NO_DAEMON", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stress = KillOnDrop(stress);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let n = nodes(run);
        if n.len() == 2 {
            return (stress, n);
        }
        assert!(
            Instant::now() < end,
            "rds-stress's nodes did not appear: {n:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The counts of rds-trace's summary line "N frames captured, M dropped" in `err`: the one a
/// trace prints when the node confirmed its end.
fn confirmed_counts(err: &str) -> Option<(u64, u64)> {
    err.lines().find_map(|l| {
        let w: Vec<&str> = l.split(' ').collect();
        match w[..] {
            [n, "frames", "captured,", m, "dropped"] => Some((n.parse().ok()?, m.parse().ok()?)),
            _ => None,
        }
    })
}

#[test]
fn trace_rds_stress_loopback_without_node() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let (stress, listed) = loopback_stress(&run, ACTIVE, PASSIVE, "30");
    let pid = stress.0.id();
    for n in &listed {
        assert_eq!(n["pid"], pid);
        assert_eq!(n["program"], "rds-stress");
    }
    // The tasks start 2 s after the nodes: the capture below spans them.

    let file = dir.path().join("loopback.pcap");
    let f = file.to_str().unwrap();
    let out = tool(&run, "rds-trace", &["-w", f, "-G", "4"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "rds-trace: the nodes of process {pid} (rds-stress) are embedded-{pid}"
        )) && first.ends_with("(choose another with --node NAME|ADDRESS)"),
        "{err}"
    );
    assert!(err.contains("rds-trace: tracing node 'embedded-"), "{err}");
    let (there, back, data) = frames_between(&file);
    assert!(
        there > 0 && back > 0,
        "both directions: {there} and {back}\n{err}"
    );
    assert!(data > 0, "the tasks' data messages: {data}\n{err}");

    // The same nodes by address and by pid.
    let by_addr = tool(&run, "rds-info", &["--node", PASSIVE, "--json", "-k"]);
    assert_eq!(by_addr.status.code(), Some(0), "{}", text(&by_addr.stderr));
    let v: serde_json::Value = serde_json::from_slice(&by_addr.stdout).unwrap();
    assert!(
        v["node"]
            .as_str()
            .unwrap()
            .starts_with(&format!("embedded-{pid}")),
        "{v}"
    );
    let by_pid = tool(&run, "rds-info", &["--node", &pid.to_string(), "-k"]);
    assert_eq!(by_pid.status.code(), Some(1));
    assert!(
        text(&by_pid.stderr).starts_with(&format!(
            "rds-info: several RDS nodes match '{pid}'; choose one with --node \
             NAME|ADDRESS|PID: embedded-{pid}"
        )),
        "{}",
        text(&by_pid.stderr)
    );
    let ctrl = tool(&run, "rds-ctrl", &["--node", PASSIVE, "stats"]);
    assert_eq!(ctrl.status.code(), Some(0), "{}", text(&ctrl.stderr));
    assert!(
        text(&ctrl.stdout).contains("conn_reset"),
        "{}",
        text(&ctrl.stdout)
    );
    let traced = tool(&run, "rds-trace", &["-w", f, "-G", "1", "--node", ACTIVE]);
    assert_eq!(traced.status.code(), Some(0), "{}", text(&traced.stderr));
    assert!(
        text(&traced.stderr).starts_with(&format!("rds-trace: tracing node 'embedded-{pid}")),
        "{}",
        text(&traced.stderr)
    );
    assert!(text(&traced.stderr).contains(&format!("({ACTIVE})")));
}

/// Every RDS frame of a capture as (source, destination, sport, dport, seq, len, lane).
fn frame_keys(file: &Path) -> Vec<(IpAddr, IpAddr, u16, u16, u64, u32, u8)> {
    let f = std::fs::File::open(file).unwrap();
    PcapFrames::new(std::io::BufReader::new(f))
        .unwrap()
        .filter_map(|fr| {
            let fr = fr.unwrap();
            let h = fr.header()?;
            Some((
                fr.src_ip()?,
                fr.dst_ip()?,
                h.sport,
                h.dport,
                h.seq,
                h.len,
                fr.lane,
            ))
        })
        .collect()
}

#[test]
fn trace_two_processes_without_node() {
    const PASSIVE2: &str = "127.25.1.1";
    const ACTIVE2: &str = "127.25.1.2";
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let stress = |args: &[&str], stdout: Stdio| {
        Command::new(bin("rds-stress"))
            .args(args)
            .env("RDS_RUNTIME_DIR", &run)
            .env("RDS_NO_DAEMON", "1")
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // The passive side accepts one control connection: the active side starts once it waits
    // for it (its first line), not after a probe that would take its place.
    let mut passive = KillOnDrop(stress(&["-r", PASSIVE2, "-p", "4525"], Stdio::piped()));
    // The pipe stays open (a closed one would end the passive side at its next line).
    let mut passive_out = std::io::BufReader::new(passive.0.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut passive_out, &mut first).unwrap();
    assert!(
        first.starts_with("waiting for incoming connection"),
        "{first}"
    );
    let active = KillOnDrop(stress(
        &["-r", ACTIVE2, "-s", PASSIVE2, "-p", "4525", "-T", "30"],
        Stdio::null(),
    ));
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let n = nodes(&run);
        let pids: Vec<u64> = n.iter().filter_map(|v| v["pid"].as_u64()).collect();
        if pids.contains(&u64::from(passive.0.id())) && pids.contains(&u64::from(active.0.id())) {
            break;
        }
        assert!(Instant::now() < end, "the nodes did not appear: {n:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let file = dir.path().join("two.pcap");
    let out = tool(
        &run,
        "rds-trace",
        &["-w", file.to_str().unwrap(), "-G", "4"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.starts_with("rds-trace: tracing 2 nodes: embedded-")
            && err.contains(&format!("({PASSIVE2})"))
            && err.contains(&format!("({ACTIVE2})")),
        "{err}"
    );
    let keys = frame_keys(&file);
    let (p, a): (IpAddr, IpAddr) = (PASSIVE2.parse().unwrap(), ACTIVE2.parse().unwrap());
    let there = keys.iter().filter(|k| k.0 == a && k.1 == p).count();
    let back = keys.iter().filter(|k| k.0 == p && k.1 == a).count();
    assert!(
        there > 0 && back > 0,
        "both directions: {there}, {back}\n{err}"
    );
    assert!(
        keys.iter().any(|k| k.5 > 0 && k.2 != 0 && k.3 != 0),
        "data messages\n{err}"
    );
    // Each frame once: a data frame's (addresses, ports, sequence number, lane) never repeats.
    let mut data: Vec<_> = keys.iter().filter(|k| k.5 > 0).collect();
    let n = data.len();
    data.sort();
    data.dedup();
    assert_eq!(data.len(), n, "a frame written twice\n{err}");
    let (captured, _) = confirmed_counts(&err)
        .unwrap_or_else(|| panic!("the nodes did not confirm the end\n{err}"));
    assert_eq!(captured, keys.len() as u64, "{err}");
}

#[test]
fn a_trace_ends_when_asked_while_every_cpu_is_busy() {
    const BUSY_ACTIVE: &str = "127.25.2.1";
    const BUSY_PASSIVE: &str = "127.25.2.2";
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let _stress = loopback_stress(&run, BUSY_ACTIVE, BUSY_PASSIVE, "40");
    // The tasks start 2 s after the nodes.
    std::thread::sleep(Duration::from_secs(2));
    let _busy = BusyCpus::start(Duration::from_secs(60));
    let file = dir.path().join("busy.pcap");
    let f = file.to_str().unwrap();
    // The node writes the file (its session thread and the file's writer yield), then the node
    // streams to rds-trace, whose thread writing standard output yields too.
    for args in [
        ["-w", f, "-G", "2", "--node", BUSY_ACTIVE],
        ["-w", "-", "-G", "2", "--node", BUSY_ACTIVE],
    ] {
        let out = tool(&run, "rds-trace", &args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            confirmed_counts(&err).is_some(),
            "{args:?}: the node confirmed the end with its counts\n{err}"
        );
        assert!(!err.contains("did not confirm"), "{args:?}: {err}");
    }
}

/// The scheduling policy of every thread of process `pid` (field 41 of `/proc/PID/task/TID/stat`).
fn thread_policies(pid: u32) -> Vec<(String, u32)> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let Ok(stat) = std::fs::read_to_string(t.join("stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(')').unwrap();
        let name = head.split_once('(').unwrap().1.to_string();
        // After the name: field 3 (state) is the first; the policy is field 41.
        let policy = rest
            .split_whitespace()
            .nth(41 - 3)
            .unwrap()
            .parse()
            .unwrap();
        v.push((name, policy));
    }
    v
}

#[test]
fn a_trace_yields_but_its_stop_watcher_does_not() {
    const SCHED_IDLE: u32 = 5;
    const W_ACTIVE: &str = "127.25.3.1";
    const W_PASSIVE: &str = "127.25.3.2";
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let (stress, _) = loopback_stress(&run, W_ACTIVE, W_PASSIVE, "30");
    let pid = stress.0.id();
    let file = dir.path().join("w.pcap");
    for out in ["-", file.to_str().unwrap()] {
        let r = Command::new(bin("rds-trace"))
            .args(["-w", out, "-G", "2", "--node", W_ACTIVE])
            .env("RDS_RUNTIME_DIR", &run)
            .env("RDS_NO_DAEMON", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // While it captures: the session's thread yields, its stop watcher does not (started
        // before the session went idle, it does not inherit the policy).
        std::thread::sleep(Duration::from_millis(1200));
        let during = thread_policies(pid);
        let policy_of = |name: &str| during.iter().find(|t| t.0 == name).map(|t| t.1);
        assert_eq!(
            policy_of("rds-trace-out"),
            Some(SCHED_IDLE),
            "-w {out}: {during:?}"
        );
        assert!(
            policy_of("trace-stop").is_some_and(|p| p != SCHED_IDLE),
            "-w {out}: the stop watcher must not run under SCHED_IDLE: {during:?}"
        );
        let r = r.wait_with_output().unwrap();
        let err = text(&r.stderr);
        assert_eq!(r.status.code(), Some(0), "-w {out}: {err}");
        assert!(confirmed_counts(&err).is_some(), "-w {out}: {err}");
        // The session's thread ended with it.
        let idle: Vec<_> = thread_policies(pid)
            .into_iter()
            .filter(|t| t.1 == SCHED_IDLE)
            .collect();
        assert!(
            idle.is_empty(),
            "-w {out}: threads left under SCHED_IDLE: {idle:?}"
        );
    }
}
