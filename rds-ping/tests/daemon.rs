//! rds-ping through the host daemon: a node serving the daemon's control socket (in a
//! private runtime directory, set once for this process: one test per file).

use std::net::IpAddr;
use std::time::Duration;

use assert_cmd::Command;
use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig};
use regex::Regex;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn responder(addr: &str) -> Node {
    let mut cfg = NodeConfig::new([ip(addr)]);
    cfg.ctl = CtlMode::Off;
    Node::start(cfg).unwrap()
}

#[test]
fn through_a_daemon_node() {
    // A node serving the daemon's control socket in a private runtime directory owns
    // 127.6.5.1: rds-ping's sockets must go through it (an embedded node could not listen on
    // 127.6.5.1:16385, which the daemon holds).
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::env::set_var("RDS_RUNTIME_DIR", &run_dir);
    let mut cfg = NodeConfig::new([ip("127.6.5.1")]);
    cfg.client_sockets = Some(rds_core::socket::host::service());
    cfg.ctl = CtlMode::Named("daemon".into());
    let daemon = Node::start(cfg).unwrap();
    let peer = responder("127.6.5.2");
    let o = Command::cargo_bin("rds-ping")
        .unwrap()
        .env("RDS_RUNTIME_DIR", &run_dir)
        .env_remove("RDS_NO_DAEMON")
        .args(["-I", "127.6.5.1", "-c", "3", "-i", "0.1", "127.6.5.2"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{out}");
    check_output(&out, 3);
    // The pings and the probe of the daemon's one connection.
    assert_eq!(peer.counter(Counter::RecvPing), 3 + 1);
    // The daemon's node sent them.
    assert!(daemon.counter(Counter::SendQueued) >= 3);

    // Several destinations through the daemon's sockets too: one line each, exit 0.
    let other = responder("127.6.5.3");
    let sent = daemon.counter(Counter::SendQueued);
    let o = Command::cargo_bin("rds-ping")
        .unwrap()
        .env("RDS_RUNTIME_DIR", &run_dir)
        .env_remove("RDS_NO_DAEMON")
        .args([
            "-I",
            "127.6.5.1",
            "-c",
            "2",
            "-i",
            "0.1",
            "-v",
            "127.6.5.2",
            "127.6.5.3",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(
        (o.status.code(), err.as_str()),
        (Some(0), "rds-ping: through the RDS daemon\n"),
        "{out}"
    );
    let line = Regex::new(
        r"^127\.6\.5\.[23] : xmt/rcv/%loss = 2/2/0%, min/avg/max = \d+/\d+\.\d/\d+ usec$",
    )
    .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines.iter().all(|l| line.is_match(l)), "{out}");
    assert!(lines[0].starts_with("127.6.5.2 ") && lines[1].starts_with("127.6.5.3 "));
    assert_eq!(peer.counter(Counter::RecvPing), 3 + 1 + 2);
    assert_eq!(other.counter(Counter::RecvPing), 2 + 1);
    assert!(daemon.counter(Counter::SendQueued) >= sent + 4);

    // The daemon goes away under a run: the pings fail (exit 1), and the library says why
    // once, as an error line of the tool's log (the `log` facade, default level warn).
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_RUNTIME_DIR", &run_dir)
        .env_remove("RDS_NO_DAEMON")
        .env_remove("RDS_LOG")
        .args(["-I", "127.6.5.1", "-i", "0.05", "-w", "3", "127.6.5.2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // (-w 3 ends it whatever happens.)
    std::thread::sleep(Duration::from_millis(800));
    daemon.shutdown();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    let gone = format!(
        "rds-ping: the RDS daemon at {} went away (stopped or crashed)\n",
        run_dir.join("daemon.sock").display()
    );
    assert_eq!(err.matches(&gone).count(), 1, "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
}

fn check_output(out: &str, n: usize) {
    let lines: Vec<&str> = out.lines().collect();
    let reply = Regex::new(r"^   (\d): \d+ usec$").unwrap();
    for (i, l) in lines[..n].iter().enumerate() {
        let c = reply
            .captures(l)
            .unwrap_or_else(|| panic!("line {l:?} of:\n{out}"));
        assert_eq!(c[1].parse::<usize>().unwrap(), i + 1);
    }
    assert_eq!(lines[n + 1], "--- 127.6.5.2 rds-ping statistics ---");
    assert!(lines[n + 2].starts_with(&format!(
        "{n} packets transmitted, {n} received, 0% packet loss"
    )));
}
