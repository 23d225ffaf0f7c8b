//! rds-ping with several destinations: the command line and its errors (exit 2), one summary
//! line per destination against nodes of ours on loopback addresses (some answering, one that
//! does not answer pings, one where no node listens), `-a`, `-u`, `-f FILE` and `-f -`,
//! `--json`, Ctrl-C and `-w`; then across network namespaces the test creates, with two
//! source addresses.
//!
//! Addresses: 127.66.x.y, one block per test; namespaces `rdspm-*-PID`, 10.203.x.y.

use std::io::{Read, Write};
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

/// A node of ours on `addr` that accepts the connection and never answers a ping.
fn silent(addr: &str) -> Node {
    let n = responder(addr);
    let mut t = n.tunables();
    t.ping_enable = false;
    n.set_tunables(t);
    n
}

fn ping() -> Command {
    let mut c = Command::cargo_bin("rds-ping").unwrap();
    c.env("RDS_NO_DAEMON", "1").timeout(Duration::from_secs(60));
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    run_in(args, None)
}

fn run_in(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut c = ping();
    c.args(args);
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// The line of a destination that answered every one of `n` pings: `name` padded to `width`,
/// the counts, and a round-trip range with min <= avg <= max.
fn check_answered(line: &str, name: &str, width: usize, n: u64) {
    let re = Regex::new(&format!(
        r"^{} : xmt/rcv/%loss = {n}/{n}/0%, min/avg/max = (\d+)/(\d+\.\d)/(\d+) usec$",
        regex::escape(&format!("{name:<width$}"))
    ))
    .unwrap();
    let c = re
        .captures(line)
        .unwrap_or_else(|| panic!("{line:?} is not {name} answering {n} of {n}"));
    let (min, avg, max): (f64, f64, f64) = (
        c[1].parse().unwrap(),
        c[2].parse().unwrap(),
        c[3].parse().unwrap(),
    );
    assert!(min <= avg && avg <= max, "{line}");
}

#[test]
fn command_line_errors_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["127.66.0.2", "127.66.0.3", "127.66.0.2"],
            "Duplicate destination <127.66.0.2>\n",
        ),
        (
            &["127.66.0.2", "::ffff:127.66.0.2"],
            "Duplicate destination <::ffff:127.66.0.2>: same address (127.66.0.2) as \
             <127.66.0.2>\n",
        ),
        (
            &["127.66.0.2", "no-such-host!"],
            "Cannot parse destination address <no-such-host!>\n",
        ),
        (
            &["-f", "/nonexistent/peers"],
            "Cannot read destination file </nonexistent/peers>, errno: 2 (No such file or \
             directory)\n",
        ),
        (
            &["-f", "/"],
            "Cannot read destination file </>, errno: 21 (Is a directory)\n",
        ),
        (
            &["-I", "::1", "127.66.0.2", "127.66.0.3"],
            "Source and destination address family are not the same\n",
        ),
        (
            &["-c", "x", "127.66.0.2", "127.66.0.3"],
            "Bad packet count <x>\n",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, "", *want),
            "{args:?}"
        );
    }
    // -a and -u together, an unknown option: clap's message, exit 2 in this form (1 with one
    // destination, as the original; tests/cli.rs).
    let (code, out, err) = run(&["-a", "-u", "127.66.0.2"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("rds-ping: the argument '--alive' cannot be used with '--unreach'"),
        "{err}"
    );
    let (code, _, err) = run(&["-x", "127.66.0.2", "127.66.0.3"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("rds-ping: unexpected argument '-x' found\n"),
        "{err}"
    );
    let (code, _, err) = run(&["-x", "127.66.0.2"]);
    assert_eq!(code, 1, "{err}");

    // A file: its line in the message; an empty one; too many destinations.
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let bad = file("bad", "# rack 1\n127.66.0.2\n\n127.66.0.3 127.66.0.4\n");
    let (code, out, err) = run(&["-f", &bad]);
    assert_eq!(
        (code, out.as_str(), err),
        (
            2,
            "",
            format!("{bad}:4: one destination per line, not <127.66.0.3 127.66.0.4>\n")
        )
    );
    let unknown = file("unknown", "127.66.0.2\nbad!name # here\n");
    let (code, _, err) = run(&["-f", &unknown]);
    assert_eq!(
        (code, err),
        (
            2,
            format!("{unknown}:2: Cannot parse destination address <bad!name>\n")
        )
    );
    let dup = file("dup", "127.66.0.2\n127.66.0.3\n");
    let (code, _, err) = run(&["-f", &dup, "127.66.0.3"]);
    assert_eq!(
        (code, err),
        (2, format!("{dup}:2: Duplicate destination <127.66.0.3>\n"))
    );
    let empty = file("empty", "# nothing yet\n\n");
    let (code, _, err) = run(&["-f", &empty]);
    assert_eq!((code, err), (2, format!("No destination in <{empty}>\n")));
    let (code, _, err) = run_in(&["-f", "-"], Some(""));
    assert_eq!(
        (code, err.as_str()),
        (2, "No destination in <standard input>\n")
    );
    let many: Vec<String> = (0..257)
        .map(|i| format!("127.66.{}.{}", 100 + i / 200, i % 200 + 1))
        .collect();
    let list = file("many", &many.join("\n"));
    let (code, out, err) = run(&["-f", &list]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (2, "", "Too many destinations: 257 (at most 256)\n")
    );
    let args: Vec<&str> = many.iter().map(String::as_str).collect();
    let (code, _, err) = run(&args);
    assert_eq!(
        (code, err.as_str()),
        (2, "Too many destinations: 257 (at most 256)\n")
    );
}

#[test]
fn several_nodes_on_loopback() {
    let a = responder("127.66.1.2");
    let b = responder("127.66.1.3");
    let quiet = silent("127.66.1.4");
    // 127.66.1.9: no node; its connection is refused.
    let dests = ["127.66.1.2", "127.66.1.3", "127.66.1.4", "127.66.1.9"];
    let mut args = vec!["-I", "127.66.1.1", "-c", "3", "-i", "0.1", "-W", "0.5"];
    args.extend(dests);
    let t = Instant::now();
    let (code, out, err) = run(&args);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    check_answered(lines[0], "127.66.1.2", 10, 3);
    check_answered(lines[1], "127.66.1.3", 10, 3);
    // Three pings, each lost after 0.5 s: given up on.
    assert_eq!(lines[2], "127.66.1.4 : xmt/rcv/%loss = 3/0/100%");
    // Refused at once: the pings sent before the refusal came (one, as a rule).
    let refused = Regex::new(r"^127\.66\.1\.9 : xmt/rcv/%loss = ([123])/0/100%$").unwrap();
    assert!(refused.is_match(lines[3]), "{out}");
    assert_eq!(
        err,
        "rds-ping: connection to 127.66.1.9:16385 refused: no RDS node there\n\
         rds-ping: no reply from 127.66.1.4: 3 pings unanswered after 0.500 s each, giving up\n"
    );
    // The answering peers' stacks counted the pings (plus the probe opening the connection).
    assert_eq!(a.counter(Counter::RecvPing), 3 + 1);
    assert_eq!(b.counter(Counter::RecvPing), 3 + 1);
    assert_eq!(quiet.counter(Counter::RecvPing), 0);
    // In parallel: 3 pings 0.1 s apart and a 0.5 s timeout, not four runs one after another.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // -a and -u: the names only, in the order given; the exit status does not change.
    let mut alive = vec!["-a"];
    alive.extend(&args);
    let (code, out, _) = run(&alive);
    assert_eq!((code, out.as_str()), (1, "127.66.1.2\n127.66.1.3\n"));
    let mut unreach = vec!["-u"];
    unreach.extend(&args);
    let (code, out, _) = run(&unreach);
    assert_eq!((code, out.as_str()), (1, "127.66.1.4\n127.66.1.9\n"));

    // --json: an array, one object per destination, the fields rds-ping(1) documents.
    let mut json = vec!["--json"];
    json.extend(&args);
    let (code, out, _) = run(&json);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4);
    for (o, d) in list.iter().zip(dests) {
        assert_eq!(o["destination"], d);
        assert_eq!(o["address"], d);
        assert_eq!(o["source"], "127.66.1.1");
        let mut keys: Vec<&String> = o.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "address",
                "answered",
                "destination",
                "duplicates",
                "errors",
                "loss_percent",
                "received",
                "rtt_us",
                "source",
                "stopped",
                "time_ms",
                "timed_out",
                "transmitted"
            ]
        );
    }
    for o in &list[..2] {
        assert_eq!(
            (&o["transmitted"], &o["received"], &o["answered"]),
            (&3.into(), &3.into(), &true.into())
        );
        assert_eq!(o["loss_percent"], 0.0);
        assert_eq!(o["stopped"], serde_json::Value::Null);
        let r = &o["rtt_us"];
        assert!(r["min"].as_u64().unwrap() <= r["max"].as_u64().unwrap());
    }
    assert_eq!(list[2]["stopped"], "no reply");
    assert_eq!(list[2]["timed_out"], 3);
    assert_eq!(list[3]["stopped"], "refused");
    for o in &list[2..] {
        assert_eq!(
            (&o["received"], &o["answered"], &o["rtt_us"]),
            (&0.into(), &false.into(), &serde_json::Value::Null)
        );
        assert_eq!(o["loss_percent"], 100.0);
    }
    let mut ju = vec!["--json", "-u"];
    ju.extend(&args);
    let (_, out, _) = run(&ju);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["destination"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["127.66.1.4", "127.66.1.9"]);

    // Every destination answers: exit 0. From a file on standard input, with a comment and a
    // host name; more pings than sockets (-n 2), as with one destination.
    let (code, out, err) = run_in(
        &[
            "-I",
            "127.66.1.1",
            "-c",
            "5",
            "-n",
            "2",
            "-i",
            "20ms",
            "-f",
            "-",
        ],
        Some("# the answering ones\n127.66.1.2\n\n  127.66.1.3  # b\n"),
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    check_answered(lines[0], "127.66.1.2", 10, 5);
    check_answered(lines[1], "127.66.1.3", 10, 5);
    let (code, out, _) = run(&["-a", "-I", "127.66.1.1", "-c", "1", "127.66.1.2"]);
    assert_eq!((code, out.as_str()), (0, "127.66.1.2\n"));

    // A limit of open files that cannot be raised to what the list may need: said first.
    let o = StdCommand::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 300 && exec {} -I 127.66.1.1 -c 1 127.66.1.2 127.66.1.3 127.66.1.9",
            assert_cmd::cargo::cargo_bin("rds-ping").display()
        ))
        .env("RDS_NO_DAEMON", "1")
        .output()
        .unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(
        err.lines().next(),
        Some(
            "rds-ping: 3 destinations may need up to 304 open files, more than the limit of \
             300 (ulimit -n): some may not connect"
        ),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        out.lines().filter(|l| l.contains(" = 1/1/0%")).count(),
        2,
        "{out}"
    );
}

/// A late pong (after its ping's timeout) is not taken for the answer to a later ping: the
/// destination's next pings go through other sockets. The peer is a node in another process,
/// stopped (SIGSTOP) for a while once it has answered: the pings sent meanwhile are lost
/// after 0.3 s, and answered late when it resumes.
#[test]
fn late_pongs_are_not_counted() {
    let _a = responder("127.66.2.2");
    let mut peer = Responder::start_here("127.66.2.3");
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_NO_DAEMON", "1")
        .args([
            "-I",
            "127.66.2.1",
            "-c",
            "12",
            "-n",
            "2",
            "-i",
            "0.1",
            "-W",
            "0.3",
            "--json",
            "127.66.2.2",
            "127.66.2.3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    peer.wait_line("answered");
    let pid = nix::unistd::Pid::from_raw(peer.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let pongs = peer.finish();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let q = &v[1];
    let n = |k: &str| q[k].as_u64().unwrap();
    assert_eq!(n("transmitted"), 12, "{out}");
    assert!(n("timed_out") >= 1 && n("received") >= 1, "{out}");
    assert_eq!(
        n("received") + n("timed_out"),
        12,
        "each ping answered or lost: {out}"
    );
    assert_eq!(
        n("duplicates"),
        0,
        "a late pong taken for a later ping's: {out}"
    );
    // The peer did answer the lost pings (late): more pongs than replies counted (the probe
    // that opened the connection has its pong too).
    assert!(pongs > n("received") + 1, "{pongs} pongs: {out}");
    assert_eq!(v[0]["received"], 12, "{out}");
    assert_eq!(o.status.code(), Some(0), "{out}");
}

#[test]
fn ctrl_c_and_deadline_print_the_lines_so_far() {
    let a = responder("127.66.3.2");
    let _quiet = silent("127.66.3.4");
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_NO_DAEMON", "1")
        .args([
            "-I",
            "127.66.3.1",
            "-i",
            "0.1",
            "-W",
            "30",
            "127.66.3.2",
            "127.66.3.4",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Nothing is printed while the pings run: wait until the answering node saw three.
    let end = Instant::now() + Duration::from_secs(20);
    while a.counter(Counter::RecvPing) < 4 {
        assert!(Instant::now() < end, "no pings reached 127.66.3.2");
        std::thread::sleep(Duration::from_millis(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    // 127.66.3.4 did not answer: 1.
    assert_eq!(status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let re = Regex::new(r"^127\.66\.3\.2 : xmt/rcv/%loss = (\d+)/(\d+)/[0-9.]+%, min/avg/max = ")
        .unwrap();
    let c = re.captures(lines[0]).unwrap_or_else(|| panic!("{out}"));
    assert!(c[2].parse::<u64>().unwrap() >= 3, "{out}");
    assert!(
        Regex::new(r"^127\.66\.3\.4 : xmt/rcv/%loss = \d+/0/100%$")
            .unwrap()
            .is_match(lines[1]),
        "{out}"
    );

    // -w ends every destination.
    let (code, out, _) = run(&[
        "-I",
        "127.66.3.1",
        "-i",
        "0.1",
        "-w",
        "0.5",
        "--json",
        "127.66.3.2",
        "127.66.3.4",
    ]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for o in v.as_array().unwrap() {
        assert_eq!(o["stopped"], "deadline", "{out}");
    }
    assert_eq!(v[0]["answered"], true);
    assert_eq!(v[1]["answered"], false);
}

// ---- network namespaces ------------------------------------------------------------------

const RESPONDER_ENV: &str = "RDS_PING_MULTI_RESPONDER";

/// Run in a peer process by the tests (this test binary, re-executed, in a namespace or not):
/// nodes on the addresses in the environment (comma-separated). Prints `ready`, then
/// `answered` once they sent 3 pongs, and at the end (stdin closed, at most 60 s) `pongs N`.
/// Run with `--ignored`; does nothing elsewhere.
#[test]
#[ignore = "the responder the tests start in a peer process"]
fn responder_process() {
    let Ok(addrs) = std::env::var(RESPONDER_ENV) else {
        return;
    };
    let nodes: Vec<Node> = addrs.split(',').map(responder).collect();
    let pongs =
        |nodes: &[Node]| -> u64 { nodes.iter().map(|n| n.counter(Counter::SendPong)).sum() };
    println!("ready");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        let _ = tx.send(());
    });
    let end = Instant::now() + Duration::from_secs(60);
    let mut told = false;
    while Instant::now() < end {
        if rx.recv_timeout(Duration::from_millis(5)).is_ok() {
            break;
        }
        if !told && pongs(&nodes) >= 3 {
            told = true;
            println!("answered");
        }
    }
    println!("pongs {}", pongs(&nodes));
}

/// A responder process (see [`responder_process`]); ended (stdin closed) on drop.
struct Responder(
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
);

impl Responder {
    fn start(ns: Option<&str>, addrs: &str) -> Responder {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = StdCommand::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => StdCommand::new(&exe),
        };
        let mut c = cmd
            .args(["--ignored", "--exact", "responder_process", "--nocapture"])
            .env(RESPONDER_ENV, addrs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut r = Responder(c, out);
        r.wait_line("ready");
        r
    }

    fn start_here(addrs: &str) -> Responder {
        Responder::start(None, addrs)
    }

    /// Reads its output up to the line `want` (bounded: the process ends within 60 s).
    fn wait_line(&mut self, want: &str) -> String {
        use std::io::BufRead;
        loop {
            let mut l = String::new();
            assert!(
                self.1.read_line(&mut l).unwrap() > 0,
                "the responder ended before {want:?}"
            );
            if l.trim_end().starts_with(want) {
                return l.trim_end().to_string();
            }
        }
    }

    /// Ends it and returns the pongs its nodes sent.
    fn finish(&mut self) -> u64 {
        if let Some(mut i) = self.0.stdin.take() {
            let _ = i.write_all(b"x");
        }
        let l = self.wait_line("pongs ");
        let _ = self.0.wait();
        l["pongs ".len()..].parse().unwrap()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(mut i) = self.0.stdin.take() {
            let _ = i.write_all(b"x");
        }
        let _ = self.0.wait();
    }
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
    let o = StdCommand::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The pinger in namespace `a`, joined by a veth pair to `b` (10.203.1.0/24) and another to
/// `c` (10.203.2.0/24): two source addresses, so two groups of sockets. Nodes answer on
/// 10.203.1.2 and 10.203.2.2; 10.203.1.3 is an address of `b` where no node listens (refused)
/// and 10.203.2.9 is no host at all (its pings are lost).
#[test]
fn across_network_namespaces() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "network namespaces need root (CI runs the tests as root)"
    );
    let id = std::process::id();
    let [a, b, c] = ["a", "b", "c"].map(|n| format!("rdspm-{n}-{id}"));
    let _g = Netns(vec![a.clone(), b.clone(), c.clone()]);
    for n in [&a, &b, &c] {
        sh(&["ip", "netns", "add", n]);
        sh(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    for (peer, net, tag) in [(&b, "10.203.1", "b"), (&c, "10.203.2", "c")] {
        let (va, vp) = (
            format!("pm{tag}a{}", id % 100_000),
            format!("pm{tag}p{}", id % 100_000),
        );
        sh(&[
            "ip", "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vp, "netns",
            peer,
        ]);
        sh(&[
            "ip",
            "-n",
            &a,
            "addr",
            "add",
            &format!("{net}.1/24"),
            "dev",
            &va,
        ]);
        sh(&["ip", "-n", &a, "link", "set", &va, "up"]);
        sh(&[
            "ip",
            "-n",
            peer,
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &vp,
        ]);
        sh(&["ip", "-n", peer, "link", "set", &vp, "up"]);
    }
    sh(&[
        "ip",
        "-n",
        &b,
        "addr",
        "add",
        "10.203.1.3/24",
        "dev",
        &format!("pmbp{}", id % 100_000),
    ]);
    let _rb = Responder::start(Some(&b), "10.203.1.2");
    let _rc = Responder::start(Some(&c), "10.203.2.2");
    let pinger = |args: &[&str]| {
        let o = StdCommand::new("ip")
            .args(["netns", "exec", &a])
            .arg(assert_cmd::cargo::cargo_bin("rds-ping"))
            .args(args)
            .env("RDS_NO_DAEMON", "1")
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    // No -I: each destination's source is that of its route in namespace a.
    let (code, out, err) = pinger(&["-c", "3", "-i", "0.2", "10.203.1.2", "10.203.2.2"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    check_answered(lines[0], "10.203.1.2", 10, 3);
    check_answered(lines[1], "10.203.2.2", 10, 3);

    let dests = ["10.203.1.2", "10.203.2.2", "10.203.1.3", "10.203.2.9"];
    let mut args = vec!["-c", "3", "-i", "0.2", "-W", "0.5", "--json"];
    args.extend(dests);
    let (code, out, err) = pinger(&args);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(String, String, u64, bool, serde_json::Value)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["destination"].as_str().unwrap().to_string(),
                o["source"].as_str().unwrap().to_string(),
                o["received"].as_u64().unwrap(),
                o["answered"].as_bool().unwrap(),
                o["stopped"].clone(),
            )
        })
        .collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        got,
        [
            (
                s(dests[0]),
                s("10.203.1.1"),
                3,
                true,
                serde_json::Value::Null
            ),
            (
                s(dests[1]),
                s("10.203.2.1"),
                3,
                true,
                serde_json::Value::Null
            ),
            (s(dests[2]), s("10.203.1.1"), 0, false, "refused".into()),
            (s(dests[3]), s("10.203.2.1"), 0, false, "no reply".into()),
        ],
        "{out}"
    );
    assert_eq!(
        err,
        "rds-ping: connection to 10.203.1.3:16385 refused: no RDS node there\n\
         rds-ping: no reply from 10.203.2.9: 3 pings unanswered after 0.500 s each, giving up\n"
    );
    let mut u = vec!["-u"];
    u.extend(&args[..6]);
    u.extend(dests);
    let (code, out, _) = pinger(&u);
    assert_eq!((code, out.as_str()), (1, "10.203.1.3\n10.203.2.9\n"));
}
