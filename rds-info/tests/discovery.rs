//! Which node `rds-info` asks: none running, the only one, several (ambiguous), `--node`,
//! `--list-nodes`; plus the command line (usage text and exit codes of the original).
//!
//! One test per file: the nodes serve their control sockets in `RDS_RUNTIME_DIR`, which this
//! process sets once for itself and passes to the `rds-info` it runs.

use std::net::IpAddr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;
use rds_core::{CtlMode, Node, NodeConfig};

fn rds_info(run: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("rds-info")
        .unwrap()
        .env("RDS_RUNTIME_DIR", run)
        .args(args)
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap()
}

fn node(addr: &str, name: &str) -> Node {
    let mut cfg = NodeConfig::new([addr.parse::<IpAddr>().unwrap()]);
    cfg.ctl = CtlMode::Named(name.into());
    Node::start(cfg).unwrap()
}

/// This process's program name, as the nodes' listings show it.
fn comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn discovery_and_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::env::set_var("RDS_RUNTIME_DIR", &run);

    // No node: a clear error, exit 1 (the original's "Unable to create socket" status).
    let out = rds_info(&run, &["-c"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).starts_with("rds-info: no RDS node is running"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(rds_info(&run, &["--list-nodes"]).status.code(), Some(1));

    // One node: it is used.
    let alpha = node("127.0.0.75", "alpha");
    let out = rds_info(&run, &["--json", "-c"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "alpha");
    assert!(v["counters"]["conn_reset"].is_u64(), "{}", v["counters"]);

    // Two nodes and no daemon: ambiguous, the error lists them.
    let beta = node("127.0.0.76", "beta");
    let out = rds_info(&run, &["-k"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert_eq!(
        e,
        "rds-info: several RDS nodes are running; choose one with --node NAME|ADDRESS|PID: \
         alpha (pid {pid} {prog}, 127.0.0.75), beta (pid {pid} {prog}, 127.0.0.76)\n"
            .replace("{pid}", &std::process::id().to_string())
            .replace("{prog}", &comm())
    );
    // By address, by pid (both nodes run in this process: ambiguous).
    let out = rds_info(&run, &["--node", "127.0.0.76", "--json", "-c"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "beta");
    let out = rds_info(&run, &["--node", &std::process::id().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(&format!(
            "rds-info: several RDS nodes match '{}'; choose one with --node NAME|ADDRESS|PID: alpha",
            std::process::id()
        )),
        "{}",
        text(&out.stderr)
    );
    let out = rds_info(&run, &["--node", "beta", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "beta");
    let out = rds_info(&run, &["--node", "gamma"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr)
        .starts_with("rds-info: no RDS node is named 'gamma'; running nodes: alpha (pid "));
    let out = rds_info(&run, &["--list-nodes"]);
    assert_eq!(out.status.code(), Some(0));
    let l = text(&out.stdout);
    assert!(l.contains("| alpha ") && l.contains("| beta "), "{l}");
    assert!(l.contains("127.0.0.76"), "{l}");
    assert!(l.contains("| Program "), "{l}");
    // --list-nodes --json: one document, the fields rds-info(1) documents.
    let out = rds_info(&run, &["--list-nodes", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let beta_json = &nodes[1];
    let keys: Vec<&String> = beta_json.as_object().unwrap().keys().collect();
    let mut want = vec![
        "name",
        "socket",
        "reachable",
        "pid",
        "program",
        "owner_uid",
        "addresses",
        "version",
        "rds_protocol",
    ];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(beta_json["name"], "beta");
    assert_eq!(beta_json["reachable"], true);
    assert_eq!(beta_json["pid"], std::process::id());
    assert_eq!(beta_json["program"], comm());
    assert_eq!(beta_json["addresses"], serde_json::json!(["127.0.0.76"]));
    assert_eq!(
        beta_json["socket"],
        run.join("beta.sock").display().to_string()
    );

    // A node named "daemon" is preferred.
    let daemon = node("127.0.0.77", "daemon");
    let out = rds_info(&run, &["--json", "-k"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "daemon");

    // The original's usage text: messages on stderr, option list on stdout, exit 1.
    let out = rds_info(&run, &["-x"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "rds-info: Invalid option '-x'\nrds-info version {}\nThe following options limit \
             output to the given sources:\n\n\nIf no options are given then all sources are used.\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        text(&out.stdout),
        "    -a include both IPv6 and IPv4 RDS connections\n\
         \x20   -c statistic counters\n\
         \x20   -n connections\n\
         \x20   -s send queue messages\n\
         \x20   -t retransmit queue messages\n\
         \x20   -r recv queue messages\n\
         \x20   -k sockets\n\
         \x20   -T TCP transport sockets\n\
         \x20   -I IB transport connections\n\
         \x20   -p paths\n"
    );
    assert_eq!(rds_info(&run, &["-+"]).status.code(), Some(1));
    assert_eq!(rds_info(&run, &["--bogus"]).status.code(), Some(1));
    let out = rds_info(&run, &["--node"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .starts_with("rds-info: a value is required for '--node <NAME|ADDRESS|PID>'"),
        "{}",
        text(&out.stderr)
    );
    let out = rds_info(&run, &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("statistic counters"));
    let out = rds_info(&run, &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("rds-info {}\n", env!("CARGO_PKG_VERSION"))
    );

    // A node going away is noticed: the stale socket is skipped.
    beta.shutdown();
    daemon.shutdown();
    let out = rds_info(&run, &["--json", "-k"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"], "alpha");
    alpha.shutdown();
}
