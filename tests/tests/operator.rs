//! An operator's session with the real binaries: `rds-ctrl load` the host daemon (owning
//! 127.9.1.1), tune it, run rds-stress through it against an embedded peer on 127.9.1.2 (both
//! roles, `-v`), ping it both ways with rds-ping, inspect it with rds-info and `rds-ctrl
//! stats`, and `rds-ctrl unload` it, leaving nothing behind.
//!
//! Uses the release binaries next to this test's executable (`cargo test --workspace
//! --release` builds them). Private runtime directory and config file.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rds_tests::workspace_bin as bin;

const DAEMON: &str = "127.9.1.1";
const PEER: &str = "127.9.1.2";

struct Env {
    _dir: tempfile::TempDir,
    run: PathBuf,
    conf: PathBuf,
}

impl Env {
    fn cmd(&self, tool: &str, args: &[&str]) -> Command {
        let mut c = Command::new(bin(tool));
        c.args(args)
            .env("RDS_RUNTIME_DIR", &self.run)
            .env("RDS_CONFIG", &self.conf)
            .env_remove("RDS_NO_DAEMON");
        c
    }

    /// Runs a tool to completion (bounded) and returns its output.
    fn run(&self, tool: &str, args: &[&str]) -> Output {
        let mut c = self.cmd(tool, args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        wait_bounded(c.spawn().unwrap(), Duration::from_secs(60), tool)
    }

    /// Like [`Env::run`], asserting exit 0; returns stdout.
    fn ok(&self, tool: &str, args: &[&str]) -> String {
        let o = self.run(tool, args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{tool} {args:?}:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    }
}

fn wait_bounded(mut child: std::process::Child, limit: Duration, what: &str) -> Output {
    let end = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish in {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unloads the daemon even when the test fails.
struct Loaded<'a>(&'a Env, bool);

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        if !self.1 {
            let _ = self.0.run("rds-ctrl", &["unload"]);
        }
    }
}

fn counters(env: &Env) -> serde_json::Value {
    serde_json::from_str(&env.ok("rds-ctrl", &["stats", "--json"])).unwrap()
}

/// The average line of an rds-stress run: (tx/s, rx/s).
fn average(out: &str) -> (f64, f64) {
    let l = out
        .lines()
        .find(|l| l.ends_with("(average)"))
        .unwrap_or_else(|| panic!("no average line in:\n{out}"));
    let f: Vec<f64> = l
        .split_whitespace()
        .skip(1)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    (f[0], f[1])
}

#[test]
fn load_traffic_inspect_tune_unload() {
    let dir = tempfile::tempdir().unwrap();
    let env = Env {
        run: dir.path().join("run"),
        conf: dir.path().join("rds.conf"),
        _dir: dir,
    };
    let out = env.ok("rds-ctrl", &["load", "tcp", "--addr", DAEMON]);
    assert!(out.starts_with("RDS daemon loaded (pid "), "{out}");
    let mut loaded = Loaded(&env, false);

    // Tune.
    env.ok("rds-ctrl", &["set", "max_unacked_packets", "16"]);
    assert_eq!(
        env.ok("rds-ctrl", &["get", "max_unacked_packets"]),
        "net.rds.max_unacked_packets = 16\n"
    );

    // rds-stress: passive through the daemon, active embedded (the daemon does not own PEER),
    // then the roles swapped; payloads verified.
    for (port, passive, active) in [("4710", DAEMON, PEER), ("4720", PEER, DAEMON)] {
        let p = env
            .cmd("rds-stress", &["-r", passive, "-p", port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let a = env
            .cmd(
                "rds-stress",
                &[
                    "-r",
                    active,
                    "-s",
                    passive,
                    "-p",
                    port,
                    "-T",
                    "2",
                    "-q",
                    "1024",
                    "-d",
                    "4",
                    "--connect-retries",
                    "10",
                    "-v",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ao = wait_bounded(a, Duration::from_secs(60), "active rds-stress");
        let po = wait_bounded(p, Duration::from_secs(60), "passive rds-stress");
        for (who, o) in [("active", &ao), ("passive", &po)] {
            let text = String::from_utf8_lossy(&o.stdout);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{who} ({passive} passive):\n{text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let (tx, rx) = average(&text);
            assert!(tx > 0.0 && rx > 0.0, "{who}: no traffic:\n{text}");
        }
    }

    // rds-ping: an embedded node pings the daemon (answered by the daemon's stack), and the
    // daemon's sockets ping the embedded... itself (loopback inside the daemon).
    let before = counters(&env)["recv_ping"].as_u64().unwrap();
    let o = env
        .cmd("rds-ping", &["-I", PEER, "-c", "3", "-i", "0.05", DAEMON])
        .env("RDS_NO_DAEMON", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{text}"
    );
    let out = env.ok("rds-ping", &["-I", DAEMON, "-c", "2", "-i", "0.05", DAEMON]);
    assert!(out.contains("2 packets transmitted, 2 received"), "{out}");
    // The daemon's stack counted the pings it received (3 from the peer, 2 from itself, plus
    // the probe of each new connection from a restarted embedded peer).
    let after = counters(&env)["recv_ping"].as_u64().unwrap();
    assert!(after >= before + 5, "recv_ping {before} -> {after}");

    // rds-info: the daemon's connection to the peer and its loopback connection.
    let info = env.ok("rds-info", &["-n"]);
    let lines: Vec<&str> = info.lines().collect();
    assert_eq!(lines[1], "RDS Connections:", "{info}");
    assert!(
        lines.iter().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 6 && f[0] == DAEMON && f[1] == PEER
        }),
        "{info}"
    );
    let c = counters(&env);
    assert!(c["recv_delivered"].as_u64().unwrap() > 0, "{c}");
    assert!(c["send_queued"].as_u64().unwrap() > 0, "{c}");

    // Unload: the daemon is gone and nothing is left in the runtime directory.
    let out = env.ok("rds-ctrl", &["unload"]);
    loaded.1 = true;
    assert!(out.starts_with("RDS daemon unloaded (pid "), "{out}");
    assert!(!env.run.join("daemon.sock").exists());
    let o = env.run("rds-info", &["-n"]);
    assert_ne!(o.status.code(), Some(0), "rds-info must fail with no node");
}
