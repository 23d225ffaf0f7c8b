//! rds-ping when its embedded node cannot listen on the source address: the real errno
//! (98, "Address already in use") and a line naming who holds the address, either another
//! RDS node of ours (its pid and program) or another program.
//!
//! Addresses: 127.88.1.x (held by another rds-ping's node), 127.88.2.x (a plain listener).

use std::net::TcpListener;
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use assert_cmd::Command;
use rds_tests::proc::{wait_listening, KillOnDrop};

fn run_ping(rt: &std::path::Path, args: &[&str]) -> (i32, String) {
    let o = Command::cargo_bin("rds-ping")
        .unwrap()
        .env("RDS_NO_DAEMON", "1")
        .env("RDS_RUNTIME_DIR", rt)
        .timeout(Duration::from_secs(60))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.code().unwrap_or(-1), text)
}

#[test]
fn address_held_by_another_node_is_named() {
    let rt = tempfile::tempdir().unwrap();
    // The owner: an rds-ping pinging its own address keeps a node on 127.88.1.1.
    let owner = StdCommand::new(assert_cmd::cargo::cargo_bin("rds-ping"))
        .env("RDS_NO_DAEMON", "1")
        .env("RDS_RUNTIME_DIR", rt.path())
        .args(["-c", "120", "-i", "1", "-I", "127.88.1.1", "127.88.1.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let owner = KillOnDrop(owner);
    wait_listening("127.88.1.1:16385".parse().unwrap());
    let (code, text) = run_ping(rt.path(), &["-c", "1", "-I", "127.88.1.1", "127.88.1.2"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("bind() to 127.88.1.1 failed, errno: 98 (Address already in use)"),
        "{text}"
    );
    let pid = owner.0.id();
    assert!(
        text.contains(&format!(
            "127.88.1.1 is used by another RDS node (pid {pid}, rds-ping, node embedded-{pid}"
        )),
        "{text}"
    );
    assert!(
        text.contains("rds-ctrl load tcp --addr 127.88.1.1"),
        "{text}"
    );
    assert!(!text.contains("errno: 0"), "{text}");
}

#[test]
fn port_held_by_another_program() {
    let rt = tempfile::tempdir().unwrap();
    let _l = TcpListener::bind("127.88.2.1:16385").unwrap();
    let (code, text) = run_ping(rt.path(), &["-c", "1", "-I", "127.88.2.1", "127.88.2.2"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("bind() to 127.88.2.1 failed, errno: 98 (Address already in use)"),
        "{text}"
    );
    assert!(
        text.contains("port 16385 on 127.88.2.1 is held by another program"),
        "{text}"
    );
    assert!(!text.contains("errno: 0"), "{text}");
}
