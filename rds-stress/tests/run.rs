//! Whole runs over the real RDS/TCP transport: `--loopback` (both sides in one process, two
//! embedded nodes), the active and passive sides as two processes, and the two sides in two
//! network namespaces joined by a veth pair. Output lines are checked against the original's
//! formats; every run uses its own 127.50.3x.0/24.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn run(args: &[&str]) -> (String, String, Option<i32>) {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(args);
    let out = wait_output(spawn(c), Duration::from_secs(40));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

/// Checks the start-up lines, the per-second lines, the dashes and the average line of an
/// active side's output; returns (interval lines, average line).
fn check_report(text: &str, tasks: u32) -> (Vec<String>, String) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "Starting up....")
        .unwrap_or_else(|| panic!("no start-up line in:\n{text}"));
    assert_eq!(
        lines[start - 1],
        "negotiated options, tasks will start in 2 seconds"
    );
    assert_eq!(lines[start + 1], HEADER);
    let dashes = lines
        .iter()
        .position(|l| *l == "---------------------------------------------")
        .unwrap_or_else(|| panic!("no dashes in:\n{text}"));
    let re = interval_re();
    let intervals: Vec<String> = lines[start + 2..dashes]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(!intervals.is_empty(), "{text}");
    for l in &intervals {
        assert!(re.is_match(l), "bad interval line {l:?}");
        assert_eq!(field(l, 0) as u32, tasks);
    }
    let avg = lines[dashes + 1].to_string();
    assert!(average_re().is_match(&avg), "bad average line {avg:?}");
    assert_eq!(field(&avg, 0) as u32, tasks);
    (intervals, avg)
}

#[test]
fn loopback_verify_with_histogram() {
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.31.1",
        "-s",
        "127.50.31.2",
        "-T",
        "3",
        "-v",
        "-t",
        "2",
        "-d",
        "2",
        "--show-histogram",
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(err, "");
    assert!(
        loopback_line_re("127.50.31.1", "127.50.31.2")
            .is_match(out.lines().next().unwrap_or_default()),
        "{out}"
    );
    let (intervals, avg) = check_report(&out, 2);
    assert!((3..=4).contains(&intervals.len()), "{out}");
    for l in &intervals {
        assert!(
            field(l, 1) > 0.0 && field(l, 2) > 0.0,
            "two-way traffic: {l}"
        );
        assert!(field(l, 3) > 0.0 && field(l, 7) > 0.0, "{l}");
        // No -c: cpu is -1 scaled by the interval's length, as the original prints it.
        let cpu = field(l, 8);
        assert!((-1.2..=-0.8).contains(&cpu), "no -c: {l}");
    }
    assert!(field(&avg, 1) > 0.0 && field(&avg, 2) > 0.0);
    assert_eq!(field(&avg, 8), -1.0);
    let lines: Vec<&str> = out.lines().collect();
    let h = lines
        .iter()
        .position(|l| *l == "RTT histogram")
        .expect("histogram");
    assert_eq!(lines[h - 1], "");
    assert_eq!(lines[h + 1], "RTT (us)        \t\t    Count");
    let re = regex::Regex::new(r"^\[ *\d+ - +\d+\] \t\t +\d+ \t\t \(\d+\.\d\d%\)$").unwrap();
    let mut total = 0u64;
    for l in &lines[h + 2..h + 18] {
        assert!(re.is_match(l), "{l:?}");
        total += l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap();
    }
    assert!(total > 0);
    assert!(lines[h + 2].starts_with("[     1 -      2]"));
    assert!(percentile_re().is_match(lines[lines.len() - 1]), "{out}");
}

#[test]
fn loopback_one_way_summary_json() {
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.32.1",
        "-s",
        "127.50.32.2",
        "-T",
        "2",
        "-o",
        "-z",
        "--json",
        "-q",
        "64k",
        "-d",
        "4",
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert_eq!(v["tasks"], 1);
    assert_eq!(v["req_bytes"], 65536);
    assert_eq!(v["depth"], 4);
    assert_eq!(v["one_way"], true);
    assert!(v["tx_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(
        v["rx_per_sec"].as_f64().unwrap(),
        0.0,
        "one way: no requests back"
    );
    assert_eq!(v["requests_received"], 0);
    // The field names rds-stress(1) documents (sorted: serde_json's objects are maps).
    let keys = |o: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "ack_bytes",
            "cpu_percent",
            "depth",
            "intervals",
            "one_way",
            "rdma_in_kib_per_sec",
            "rdma_out_kib_per_sec",
            "req_bytes",
            "requests_received",
            "requests_sent",
            "rtt_us",
            "rx_per_sec",
            "seconds",
            "stopped",
            "tasks",
            "tx_per_sec",
            "tx_rx_kib_per_sec",
            "tx_us_per_call"
        ]
    );
    assert_eq!(
        keys(&v["rtt_us"]),
        ["avg", "count", "max", "p50", "p90", "p99", "p99_9"]
    );
    assert_eq!(
        keys(&v["intervals"][0]),
        ["rtt_us", "rx", "tx", "tx_rx_kib_per_sec"]
    );
    let p = &v["rtt_us"];
    assert!(p["avg"].as_f64().unwrap() > 0.0);
    assert!(p["count"].as_u64().unwrap() > 0);
    assert!(p["p50"].as_u64().unwrap() <= p["p99"].as_u64().unwrap());
    assert!(p["p99"].as_u64().unwrap() <= p["max"].as_u64().unwrap());
    assert!(v["intervals"].as_array().unwrap().len() >= 2);
    // -z: header and average only; human output on stderr.
    let lines: Vec<&str> = err.lines().collect();
    let h = lines.iter().position(|l| *l == HEADER).expect("header");
    assert!(average_re().is_match(lines[h + 1]), "{err}");
    assert!(!err.contains("-----"));
}

#[test]
fn loopback_perfdata() {
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.33.1",
        "-s",
        "127.50.33.2",
        "-T",
        "2",
        "--show-perfdata",
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let perf: Vec<&str> = out.lines().filter(|l| l.starts_with("::")).collect();
    assert!(perf.len() >= 3, "{out}");
    let head: Vec<&str> = perf[0][2..].split(',').collect();
    assert_eq!(
        &head[..6],
        &[
            "nr_tasks:count",
            "req_size:bytes",
            "ack_size:bytes",
            "rdma_size:bytes",
            "req_sent:count",
            "thruput:kB/s"
        ]
    );
    assert!(head.contains(&"conn_reset:count"), "{}", perf[0]);
    assert!(
        head.contains(&"send_queued_bytes:bytes") || head.iter().any(|h| h.ends_with(":bytes"))
    );
    assert_eq!(
        &head[head.len() - 5..],
        &[
            "user:percent",
            "system:percent",
            "idle:percent",
            "irq:percent",
            "intr:count"
        ]
    );
    for l in &perf[1..] {
        let f: Vec<&str> = l[2..].split(',').collect();
        assert_eq!(
            f.len(),
            head.len() + 1,
            "data has one more field than the header: {l}"
        );
        assert_eq!(&f[..4], &["1", "1024", "63", "0"]);
        assert!(f[4].parse::<u64>().unwrap() > 0);
        assert!(f[5].contains('.') && f[5].split('.').nth(1).unwrap().len() == 6);
    }
    assert!(
        !out.contains(HEADER),
        "no column header with --show-perfdata"
    );
}

#[test]
fn loopback_abort_after_with_cancel_sent_to() {
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.50.34.1",
        "-s",
        "127.50.34.2",
        "-T",
        "30",
        "-t",
        "2",
        "--abort-after",
        "1",
        "--cancel-sent-to",
    ]);
    assert_eq!(code, Some(142), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        err,
        "rds-stress: aborting after 1 seconds (--abort-after)\n"
    );
    let re = regex::Regex::new(
        r"^RDS_CANCEL_SENT_TO\((127\.50\.34\.[12]):(400[12])\)\[\d+\] took \d+ msec$",
    )
    .unwrap();
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("RDS_CANCEL"))
        .collect();
    // Two tasks on each side, each cancelling towards both remote tasks.
    assert_eq!(lines.len(), 8, "{out}");
    for l in lines {
        assert!(re.is_match(l), "{l:?}");
    }
}

#[test]
fn active_and_passive_processes() {
    let rt = tempfile::tempdir().unwrap();
    let mut p = cmd(rt.path());
    p.args(["-r", "127.50.35.2", "-p", "4400"]);
    let passive = spawn(p);
    let mut a = cmd(rt.path());
    a.args([
        "-r",
        "127.50.35.1",
        "-s",
        "127.50.35.2",
        "-p",
        "4400",
        "-T",
        "2",
        "-t",
        "2",
        "-d",
        "4",
        "-q",
        "8k",
        "-v",
        "--connect-retries",
        "10",
    ]);
    let active = spawn(a);
    let a = wait_output(active, Duration::from_secs(40));
    let p = wait_output(passive, Duration::from_secs(40));
    let (ao, po) = (
        String::from_utf8_lossy(&a.stdout).into_owned(),
        String::from_utf8_lossy(&p.stdout).into_owned(),
    );
    assert_eq!(
        a.status.code(),
        Some(0),
        "{ao}{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert_eq!(
        p.status.code(),
        Some(0),
        "{po}{}",
        String::from_utf8_lossy(&p.stderr)
    );
    assert!(ao.starts_with("connecting to 127.50.35.2:4400"));
    let (ai, aavg) = check_report(&ao, 2);
    let (_, pavg) = check_report(&po, 2);
    assert!(ai.iter().all(|l| field(l, 1) > 0.0));
    assert!(field(&aavg, 1) > 0.0 && field(&pavg, 1) > 0.0);
    let pl: Vec<&str> = po.lines().collect();
    assert_eq!(pl[0], "waiting for incoming connection on 127.50.35.2:4400");
    assert!(
        pl[1].starts_with("accepted connection from 127.50.35.1:"),
        "{po}"
    );
}

/// Removes the namespaces on drop.
struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "delete", n]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {args:?}");
}

#[test]
fn two_network_namespaces() {
    rds_tests::users::require_root("ip netns add, veth");
    let id = std::process::id() % 100_000;
    let (na, nb) = (format!("rsst-a-{id}"), format!("rsst-b-{id}"));
    let _guard = Netns(vec![na.clone(), nb.clone()]);
    ip(&["netns", "add", &na]);
    ip(&["netns", "add", &nb]);
    let (va, vb) = (format!("rsa{id}"), format!("rsb{id}"));
    ip(&[
        "link", "add", &va, "netns", &na, "type", "veth", "peer", "name", &vb, "netns", &nb,
    ]);
    ip(&["-n", &na, "addr", "add", "10.250.77.1/24", "dev", &va]);
    ip(&["-n", &nb, "addr", "add", "10.250.77.2/24", "dev", &vb]);
    for (n, v) in [(&na, &va), (&nb, &vb)] {
        ip(&["-n", n, "link", "set", v, "up"]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    let rt = tempfile::tempdir().unwrap();
    let netns_cmd = |ns: &str, args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(bin())
            .args(args)
            .env("RDS_RUNTIME_DIR", rt.path())
            .env("RDS_NO_DAEMON", "1");
        c
    };
    let passive = spawn(netns_cmd(&nb, &[]));
    let active = spawn(netns_cmd(
        &na,
        &[
            "-s",
            "10.250.77.2",
            "-T",
            "2",
            "-v",
            "-d",
            "2",
            "--connect-retries",
            "10",
        ],
    ));
    let a = wait_output(active, Duration::from_secs(40));
    let p = wait_output(passive, Duration::from_secs(40));
    let ao = String::from_utf8_lossy(&a.stdout).into_owned();
    let po = String::from_utf8_lossy(&p.stdout).into_owned();
    assert_eq!(
        a.status.code(),
        Some(0),
        "{ao}{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert_eq!(
        p.status.code(),
        Some(0),
        "{po}{}",
        String::from_utf8_lossy(&p.stderr)
    );
    let (ai, _) = check_report(&ao, 1);
    assert!(
        ai.iter().all(|l| field(l, 1) > 0.0 && field(l, 2) > 0.0),
        "{ao}"
    );
    check_report(&po, 1);
    let pl: Vec<&str> = po.lines().collect();
    assert_eq!(pl[0], "waiting for incoming connection on 0.0.0.0:4000");
    // Without -r the passive side learns its address from the control connection.
    assert!(
        pl[1].starts_with("accepted connection from 10.250.77.1:"),
        "{po}"
    );
    assert!(pl[1].ends_with(" on 10.250.77.2:4000"), "{po}");
}

/// `-Q` is accepted as rds-ping accepts it (RDS/TCP maps every type of service to 0), and `-T`
/// takes a fraction of a second.
#[test]
fn loopback_with_tos() {
    let (out, err, code) = run(&[
        "--loopback",
        "-r",
        "127.122.1.1",
        "-s",
        "127.122.1.2",
        "-T",
        "1.5",
        "-Q",
        "1",
        "-z",
        "--json",
    ]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert!(v["tx_per_sec"].as_f64().unwrap() > 0.0, "{out}");
    assert_eq!(v["intervals"].as_array().unwrap().len(), 2, "{out}");
}
