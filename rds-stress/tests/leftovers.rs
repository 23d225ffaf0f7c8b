//! No control socket is left in the runtime directory when rds-stress ends: interrupted before
//! the start-up is over (the process exits from its signal thread), interrupted while measuring,
//! and both sides of a `-r`/`-s` run (sockets of the process's default node). Addresses: 127.122.6-8.x.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use common::*;

/// The names in `dir` that end in `.sock`.
fn sockets(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sock"))
        .collect()
}

/// Waits until `dir` holds a control socket (the nodes are up).
fn wait_for_socket(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while sockets(dir).is_empty() {
        assert!(Instant::now() < deadline, "no node socket appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn interrupted(args: &[&str], sig: Signal, after: Duration) {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(args);
    let child = spawn(c);
    wait_for_socket(rt.path());
    std::thread::sleep(after);
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(128 + sig as i32),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sockets(rt.path()), Vec::<String>::new(), "{args:?}");
}

#[test]
fn loopback_interrupted_in_the_start_up() {
    interrupted(
        &["--loopback", "-r", "127.122.6.1", "-s", "127.122.6.2"],
        Signal::SIGINT,
        Duration::ZERO,
    );
}

#[test]
fn loopback_interrupted_while_measuring() {
    interrupted(
        &["--loopback", "-r", "127.122.7.1", "-s", "127.122.7.2"],
        Signal::SIGINT,
        Duration::from_secs(5),
    );
}

#[test]
fn both_sides_of_a_run_interrupted() {
    let prt = tempfile::tempdir().unwrap();
    let mut pc = cmd(prt.path());
    pc.args(["-r", "127.122.8.2", "-p", "4500"]);
    let passive = spawn(pc);
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args([
        "-r",
        "127.122.8.1",
        "-s",
        "127.122.8.2",
        "-p",
        "4500",
        "--connect-retries",
        "10",
    ]);
    let active = spawn(c);
    wait_for_socket(rt.path());
    std::thread::sleep(Duration::from_millis(500));
    kill(Pid::from_raw(active.id() as i32), Signal::SIGINT).unwrap();
    let out = wait_output(active, Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sockets(rt.path()), Vec::<String>::new(), "active side");
    let _ = kill(Pid::from_raw(passive.id() as i32), Signal::SIGTERM);
    let _ = wait_output(passive, Duration::from_secs(30));
    assert_eq!(sockets(prt.path()), Vec::<String>::new(), "passive side");
}
