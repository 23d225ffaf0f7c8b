//! `rds-info -I` against a live node asked to run the IB transport: where IB is unavailable
//! (no rdma-core, no RDMA device, as on CI) it says so on stderr with the node's reason; where
//! it runs (the lab), the table is empty (loopback addresses are on no RDMA device).
//!
//! One test per file: the node serves its control socket in `RDS_RUNTIME_DIR`, which this
//! process sets once for itself and passes to the `rds-info` it runs.

use std::time::Duration;

use assert_cmd::Command;
use rds_core::{CtlMode, Node, NodeConfig, Transports};

#[test]
fn ib_table_or_the_reason_it_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::env::set_var("RDS_RUNTIME_DIR", &run);
    let mut cfg = NodeConfig::new(["127.8.4.1".parse().unwrap()]);
    cfg.ctl = CtlMode::Named("info-ib".into());
    cfg.transports = Transports {
        tcp: true,
        ib: true,
    };
    let node = Node::start(cfg).unwrap();
    let out = Command::cargo_bin("rds-info")
        .unwrap()
        .env("RDS_RUNTIME_DIR", &run)
        .arg("-I")
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    match node.ib_unavailable() {
        Some(why) => {
            assert_eq!(stdout, "");
            assert_eq!(
                stderr,
                format!(
                    "rds-info: IB transport connections: the IB transport is not available on \
                     this node (it runs: tcp): {why}\n"
                )
            );
            // The reason is rds_core::ib::availability()'s.
            let e = rds_core::ib::availability().unwrap_err().to_string();
            assert_eq!(why, e);
        }
        None => {
            assert_eq!(stderr, "");
            assert_eq!(
                stdout,
                "\nRDS IB Connections:\n      LocalAddr      RemoteAddr  Tos  SL                         \
                 LocalDev                        RemoteDev\n"
            );
        }
    }
    node.shutdown();
}
