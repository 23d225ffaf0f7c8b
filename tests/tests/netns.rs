//! Two nodes in two network namespaces joined by a veth pair (issue 3, tests): each node runs
//! in its own process (`rds-test-peer`, started with `ip netns exec`) and owns an address that
//! exists only inside its namespace (10.99.0.1/24 and 10.99.0.2/24). Messages of 0 B to 1 MiB
//! go both ways (echoed), with length, content, order and sender address checked; then the
//! roles swap so that the larger address is the client. The namespaces are removed afterwards,
//! also when the test fails (a guard with `Drop`).
//!
//! Needs root and `ip` (iproute2); without either the test fails, naming what is missing.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const COUNT: u64 = 15;

fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).output().expect("running ip")
}

fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Netns {
    a: String,
    b: String,
}

impl Netns {
    fn create() -> Netns {
        let pid = std::process::id();
        let ns = Netns {
            a: format!("rdstest-a-{pid}"),
            b: format!("rdstest-b-{pid}"),
        };
        let (va, vb) = (format!("rva{pid}"), format!("rvb{pid}"));
        ip_ok(&["netns", "add", &ns.a]);
        ip_ok(&["netns", "add", &ns.b]);
        ip_ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip_ok(&["link", "set", &va, "netns", &ns.a]);
        ip_ok(&["link", "set", &vb, "netns", &ns.b]);
        for (n, v, addr) in [(&ns.a, &va, "10.99.0.1/24"), (&ns.b, &vb, "10.99.0.2/24")] {
            ip_ok(&["-n", n, "addr", "add", addr, "dev", v]);
            ip_ok(&["-n", n, "link", "set", v, "up"]);
            ip_ok(&["-n", n, "link", "set", "lo", "up"]);
        }
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the pair.
        for n in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// A child process with its stdout lines on a channel.
struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
    what: String,
}

impl Peer {
    fn spawn(ns: &str, args: &[&str]) -> Peer {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_rds-test-peer")])
            .args(args)
            .env("RDS_PEER_TIMEOUT", "30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning rds-test-peer");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Peer {
            child,
            lines,
            what: format!("{ns}: rds-test-peer {}", args.join(" ")),
        }
    }

    fn expect_line(&self, want: &str) {
        match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => assert_eq!(l, want, "{}", self.what),
            Err(e) => panic!("{}: no line {want:?}: {e}", self.what),
        }
    }

    /// Waits for a successful exit (with a deadline).
    fn finish(mut self) {
        let deadline = Instant::now() + Duration::from_secs(40);
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{}: did not exit", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        assert!(st.success(), "{}: {st}: {err}", self.what);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Fails the test, naming what is missing, unless this is root with `ip` (iproute2).
fn require_root_and_ip() {
    rds_tests::users::require_root("ip netns add, veth");
    let ok = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`ip` (iproute2) is not found: install iproute2 (.ci/deps.d/lab.sh does, as root)"
    );
}

/// The echo side in `echo_ns`, the client in `client_ns`; the client checks every echo.
fn exchange(echo_ns: &str, echo_addr: &str, client_ns: &str, client_addr: &str) {
    let n = COUNT.to_string();
    let echo = Peer::spawn(echo_ns, &["echo", echo_addr, &n, client_addr]);
    echo.expect_line(&format!("READY {echo_addr}"));
    let client = Peer::spawn(client_ns, &["client", client_addr, echo_addr, &n]);
    client.expect_line(&format!("OK {COUNT}"));
    echo.expect_line(&format!("ECHOED {COUNT}"));
    client.finish();
    echo.finish();
}

#[test]
fn two_nodes_in_two_namespaces_over_veth() {
    require_root_and_ip();
    let ns = Netns::create();
    // The addresses exist only inside the namespaces.
    let host = ip(&["-br", "addr"]);
    assert!(!String::from_utf8_lossy(&host.stdout).contains("10.99.0."));
    // The smaller address (10.99.0.1) is the client and initiates.
    exchange(&ns.b, "10.99.0.2:7000", &ns.a, "10.99.0.1:7001");
    // Roles swapped: the larger address is the client; its node has to make the smaller one
    // connect back. Fresh processes, so both nodes are new incarnations.
    exchange(&ns.a, "10.99.0.1:7100", &ns.b, "10.99.0.2:7101");
    let names = ns.a.clone();
    drop(ns);
    let list = ip(&["netns", "list"]);
    assert!(!String::from_utf8_lossy(&list.stdout).contains(&names));
}
