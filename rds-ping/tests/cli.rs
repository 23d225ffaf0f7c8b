//! rds-ping end to end: command-line errors, reply lines and summary against a node of ours,
//! lost pings, deadline, Ctrl-C, JSON, the daemon path, and two network namespaces.
//!
//! Addresses: 127.6.x.y, one block per test.

use std::io::Read;
use std::net::IpAddr;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig};
use regex::Regex;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A node of ours on `addr` that answers pings (no control socket).
fn responder(addr: &str) -> Node {
    let mut cfg = NodeConfig::new([ip(addr)]);
    cfg.ctl = CtlMode::Off;
    Node::start(cfg).unwrap()
}

fn ping() -> Command {
    let mut c = Command::cargo_bin("rds-ping").unwrap();
    c.env("RDS_NO_DAEMON", "1").timeout(Duration::from_secs(60));
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = ping().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

const USAGE: &str = "Usage: rds-ping [options] dst_addr
Options:
 -c count      limit packet count
 -i timeout    interval to wait (seconds by default) between sends
 -n number     number of RDS sockets used
 -I interface  source IP address
 -Q tos        type of service
 -w deadline   stop after this many seconds
 -W timeout    seconds to wait for each reply
 --json        print the result as JSON
 -v            name the RDS node used, on stderr
 --stack S     kernel, user or auto: which RDS to use
";

#[test]
fn usage_and_bad_values() {
    let version = env!("CARGO_PKG_VERSION");
    let (code, out, err) = run(&[]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!("rds-ping version {version}\nMissing destination address\n{USAGE}")
    );
    // Two destinations are the several-destination form (tests/multi.rs), which refuses the
    // same one twice with its exit status for errors, 2.
    let (code, out, err) = run(&["127.0.0.21", "127.0.0.21"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", "Duplicate destination <127.0.0.21>\n")
    );
    let cases: &[(&[&str], &str)] = &[
        (&["-c", "abc", "127.6.0.1"], "Bad packet count <abc>\n"),
        (&["-c", "-3", "127.6.0.1"], "Bad packet count <-3>\n"),
        (&["-i", "2sec", "127.6.0.1"], "Bad wait time <2sec>\n"),
        (&["-i", "x", "127.6.0.1"], "Bad wait time <x>\n"),
        (&["-Q", "300", "127.6.0.1"], "Bad tos <300>\n"),
        (&["-n", "0", "127.6.0.1"], "Invalid number of sockets <0>\n"),
        (
            &["-n", "40", "127.6.0.1"],
            "Invalid number of sockets <40>\n",
        ),
        (
            &["-I", "not an address", "127.6.0.1"],
            "Unknown source address <not an address>\n",
        ),
        (
            &["300.1.2.3 x"],
            "Cannot parse destination address <300.1.2.3 x>\n",
        ),
        (
            &["-I", "::1", "127.6.0.1"],
            "Source and destination address family are not the same\n",
        ),
        (&["-w", "0", "127.6.0.1"], "Bad deadline <0>\n"),
        (&["-W", "soon", "127.6.0.1"], "Bad timeout <soon>\n"),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", *want),
            "{args:?}"
        );
    }
    // An unknown option: clap's message, exit 1.
    let (code, out, err) = run(&["-x", "127.6.0.1"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with("rds-ping: unexpected argument '-x' found\n"),
        "{err}"
    );
    // Help and version go to stdout with exit 0.
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("-W <SECONDS>"), "{out}");
    for v in ["-V", "--version"] {
        let (code, out, _) = run(&[v]);
        assert_eq!((code, out), (0, format!("rds-ping {version}\n")));
    }
}

/// Checks the reply lines `1..=n` (in order) and the summary; returns the stdout lines.
fn check_output(out: &str, dest: &str, n: u64) {
    let lines: Vec<&str> = out.lines().collect();
    let reply = Regex::new(r"^ {1,3}(\d+): (\d+) usec$").unwrap();
    for (i, l) in lines[..n as usize].iter().enumerate() {
        let c = reply.captures(l).unwrap_or_else(|| panic!("line {l:?}"));
        assert_eq!(c[1].parse::<u64>().unwrap(), i as u64 + 1, "{out}");
        assert_eq!(
            l.find(':'),
            Some(4),
            "seq right-aligned in 3 columns: {l:?}"
        );
    }
    let rest = &lines[n as usize..];
    assert_eq!(rest.len(), 4, "{out}");
    assert_eq!(rest[0], "");
    assert_eq!(rest[1], format!("--- {dest} rds-ping statistics ---"));
    let totals = Regex::new(&format!(
        r"^{n} packets transmitted, {n} received, 0% packet loss, time \d+ms$"
    ))
    .unwrap();
    assert!(totals.is_match(rest[2]), "{}", rest[2]);
    let rtt = Regex::new(r"^rtt min/avg/max/mdev = (\d+)/(\d+\.\d)/(\d+)/(\d+\.\d) usec$").unwrap();
    let c = rtt
        .captures(rest[3])
        .unwrap_or_else(|| panic!("{}", rest[3]));
    let min: f64 = c[1].parse().unwrap();
    let avg: f64 = c[2].parse().unwrap();
    let max: f64 = c[3].parse().unwrap();
    assert!(min <= avg && avg <= max, "{}", rest[3]);
}

#[test]
fn pings_a_node_and_summarises() {
    let peer = responder("127.6.1.2");
    let (code, out, err) = run(&["-I", "127.6.1.1", "-c", "3", "-i", "0.1", "127.6.1.2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "");
    check_output(&out, "127.6.1.2", 3);
    // The peer's stack counted every ping (plus the multipath probe, itself a ping to port 0,
    // that opens each new connection; each rds-ping run is a new node, so a new connection).
    assert_eq!(peer.counter(Counter::RecvPing), 3 + 1);

    // More pings than sockets: the sockets take turns; numbers stay in order.
    let (code, out, _) = run(&[
        "-I",
        "127.6.1.1",
        "-c",
        "12",
        "-n",
        "2",
        "-i",
        "20ms",
        "127.6.1.2",
    ]);
    assert_eq!(code, 0);
    check_output(&out, "127.6.1.2", 12);
    assert_eq!(peer.counter(Counter::RecvPing), 4 + 12 + 1);
}

#[test]
fn default_source_is_the_route_source_and_ipv6_works() {
    // 127.0.0.1 routes from 127.0.0.1 itself: the pings go through our own node's loopback.
    let (code, out, _) = run(&["-c", "2", "-i", "0.05", "--json", "::1"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "::1");
    assert_eq!(v["address"], "::1");
    assert_eq!(v["transmitted"], 2);
    assert_eq!(v["received"], 2);
    assert_eq!(v["loss_percent"], 0.0);
    assert_eq!(v["stopped"], serde_json::Value::Null);
    let replies = v["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 2);
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r["seq"], i as u64 + 1);
        assert!(r["rtt_us"].is_u64());
        assert_eq!(r["dup"], false);
        assert_eq!(r["error"], serde_json::Value::Null);
    }
    let rtt = &v["rtt_us"];
    assert!(rtt["min"].as_u64().unwrap() <= rtt["max"].as_u64().unwrap());
    // The field names rds-ping(1) documents.
    let keys = |o: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "address",
            "destination",
            "duplicates",
            "errors",
            "loss_percent",
            "received",
            "replies",
            "rtt_us",
            "source",
            "stopped",
            "time_ms",
            "timed_out",
            "transmitted"
        ]
    );
    assert_eq!(keys(rtt), ["avg", "max", "mdev", "min"]);
    assert_eq!(keys(&replies[0]), ["dup", "error", "from", "rtt_us", "seq"]);

    // -v names the embedded node the pings went through.
    let (code, out, err) = run(&["-c", "1", "-v", "::1"]);
    assert_eq!(code, 0, "{out}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("rds-ping: embedded RDS node embedded-") && first.contains("::1"),
        "{err}"
    );
}

#[test]
fn a_peer_without_ping_enable_gets_counted_as_loss() {
    let peer = responder("127.6.2.2");
    let mut t = peer.tunables();
    t.ping_enable = false;
    peer.set_tunables(t);
    let (code, out, _) = run(&[
        "-I",
        "127.6.2.1",
        "-c",
        "2",
        "-i",
        "0.1",
        "-W",
        "0.5",
        "127.6.2.2",
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        out.lines().collect::<Vec<_>>()[..3],
        [
            "",
            "--- 127.6.2.2 rds-ping statistics ---",
            out.lines().nth(2).unwrap()
        ]
    );
    assert!(
        out.lines()
            .nth(2)
            .unwrap()
            .starts_with("2 packets transmitted, 0 received, 100% packet loss, time "),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3, "no rtt line: {out}");
    // Pings (the probe included) are neither counted nor answered, as in the kernel.
    assert_eq!(peer.counter(Counter::RecvPing), 0);
}

#[test]
fn a_refused_connection_is_named() {
    // Nothing listens on 127.6.3.9: the first refused connection ends the run, well before
    // the 10 s reply timeout.
    let t = Instant::now();
    let (code, out, err) = run(&["-I", "127.6.3.1", "127.6.3.9"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "rds-ping: connection to 127.6.3.9:16385 refused: no RDS node there\n"
    );
    assert!(
        out.starts_with("\n--- 127.6.3.9 rds-ping statistics ---\n"),
        "{out}"
    );
    assert!(out.contains(" received, 100% packet loss"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    let (code, out, err) = run(&["-I", "127.6.3.1", "--json", "127.6.3.9"]);
    assert_eq!(code, 1);
    assert!(err.contains("refused: no RDS node there"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stopped"], "refused");
    assert_eq!(v["received"], 0);
}

#[test]
fn gives_up_when_nothing_answers() {
    // 127.6.3.8 accepts the connection but does not answer pings.
    let peer = responder("127.6.3.8");
    let mut tun = peer.tunables();
    tun.ping_enable = false;
    peer.set_tunables(tun);
    let t = Instant::now();
    let (code, out, err) = run(&["-I", "127.6.3.1", "-i", "50ms", "-W", "0.3", "127.6.3.8"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "rds-ping: no reply from 127.6.3.8: 3 pings unanswered after 0.300 s each, giving up\n"
    );
    assert!(out.contains(" received, 100% packet loss"), "{out}");
    // Bounded: it did not run on (the test's own bound, not a timing assertion of the tool).
    assert!(t.elapsed() < Duration::from_secs(30));

    // A deadline ends a run that would go on forever.
    let (code, out, _) = run(&[
        "-I",
        "127.6.3.1",
        "-i",
        "0.1",
        "-w",
        "0.5",
        "--json",
        "127.6.3.8",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stopped"], "deadline");
    assert_eq!(v["received"], 0);
    assert_eq!(v["loss_percent"], 100.0);
    assert!(v["transmitted"].as_u64().unwrap() >= 1);
}

#[test]
fn ctrl_c_prints_the_summary() {
    let _peer = responder("127.6.4.2");
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_NO_DAEMON", "1")
        .args(["-I", "127.6.4.1", "-i", "0.1", "127.6.4.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first reply line, then interrupt.
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"usec\n") {
        assert_eq!(stdout.read(&mut byte).unwrap(), 1, "rds-ping ended early");
        buf.push(byte[0]);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    stdout.read_to_end(&mut buf).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let out = String::from_utf8(buf).unwrap();
    assert!(
        out.contains("\n--- 127.6.4.2 rds-ping statistics ---\n"),
        "{out}"
    );
}

// ---- two network namespaces ----------------------------------------------------------------

const RESPONDER_ENV: &str = "RDS_PING_TEST_RESPONDER";

/// Run by the netns test in the peer namespace (this test binary, re-executed with
/// `--ignored`): a node on the address in the environment, until stdin closes (at most 60 s);
/// does nothing elsewhere.
#[test]
#[ignore = "the responder of between_two_network_namespaces"]
fn netns_responder_process() {
    let Ok(addr) = std::env::var(RESPONDER_ENV) else {
        return;
    };
    let _n = responder(&addr);
    println!("ready");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(60));
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = StdCommand::new("ip").args(["netns", "delete", n]).status();
        }
    }
}

fn sh(args: &[&str]) {
    let s = StdCommand::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(s.success(), "{args:?}");
}

#[test]
fn between_two_network_namespaces() {
    rds_tests::users::require_root("ip netns add, veth");
    let id = std::process::id();
    let (a, b) = (format!("rdsping-a-{id}"), format!("rdsping-b-{id}"));
    sh(&["ip", "netns", "add", &a]);
    let _g = Netns(vec![a.clone(), b.clone()]);
    sh(&["ip", "netns", "add", &b]);
    let (va, vb) = (
        format!("rpa{}", id % 100_000),
        format!("rpb{}", id % 100_000),
    );
    sh(&[
        "ip", "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
    ]);
    for (ns, dev, addr) in [(&a, &va, "10.201.0.1/24"), (&b, &vb, "10.201.0.2/24")] {
        sh(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    let exe = std::env::current_exe().unwrap();
    let mut resp = StdCommand::new("ip")
        .args(["netns", "exec", &b])
        .arg(&exe)
        .args([
            "--ignored",
            "--exact",
            "netns_responder_process",
            "--nocapture",
        ])
        .env(RESPONDER_ENV, "10.201.0.2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = resp.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("ready\n") {
        assert_eq!(out.read(&mut byte).unwrap(), 1, "responder ended early");
        seen.push(byte[0]);
    }
    // No -I: the source comes from the route lookup inside namespace a (10.201.0.1).
    let o = StdCommand::new("ip")
        .args(["netns", "exec", &a])
        .arg(assert_cmd::cargo::cargo_bin("rds-ping"))
        .args(["-c", "3", "-i", "0.1", "--json", "10.201.0.2"])
        .env("RDS_NO_DAEMON", "1")
        .output()
        .unwrap();
    drop(resp.stdin.take());
    let _ = resp.wait();
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["source"], "10.201.0.1");
    assert_eq!(v["received"], 3);
}

/// `-i`, `-w` and `-W` take the tools' one duration syntax (s and m suffixes too).
#[test]
fn durations_with_suffixes() {
    let _peer = responder("127.122.2.2");
    let (code, out, err) = run(&[
        "-I",
        "127.122.2.1",
        "-c",
        "1",
        "-i",
        "0.5s",
        "-W",
        "2s",
        "-w",
        "1m",
        "127.122.2.2",
    ]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.contains("1 packets transmitted, 1 received"), "{out}");
}

/// The embedded node's control socket leaves the runtime directory when rds-ping ends: after
/// its count, after a refused connection, and on Ctrl-C.
#[test]
fn no_socket_left_behind() {
    let _peer = responder("127.122.5.2");
    let socks = |d: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sock"))
            .collect()
    };
    for (args, want) in [
        (&["-I", "127.122.5.1", "-c", "1", "127.122.5.2"][..], 0),
        (&["-I", "127.122.5.1", "127.122.5.9"][..], 1),
    ] {
        let rt = tempfile::tempdir().unwrap();
        ping()
            .env("RDS_RUNTIME_DIR", rt.path())
            .args(args)
            .assert()
            .code(want);
        assert_eq!(socks(rt.path()), Vec::<String>::new(), "{args:?}");
    }
    let rt = tempfile::tempdir().unwrap();
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_NO_DAEMON", "1")
        .env("RDS_RUNTIME_DIR", rt.path())
        .args(["-I", "127.122.5.1", "-i", "0.1", "127.122.5.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while socks(rt.path()).is_empty() {
        assert!(Instant::now() < deadline, "no node socket appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert_eq!(socks(rt.path()), Vec::<String>::new());
}
