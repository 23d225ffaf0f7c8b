//! The commands that run sibling tools: `trace start|stop|report` (rds-trace), `info`
//! (rds-info) and `ping` (rds-ping). A copy of `rds-ctrl` in a directory of its own, with
//! fake tools (shell scripts that record their arguments) next to it or none at all, shows
//! what is run, with which arguments, and the errors when a tool is missing.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{lone_ctrl, pid_alive, status, text, wait_until, Env};

fn fake_tool(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn run(env: &Env, ctrl: &Path, args: &[&str]) -> std::process::Output {
    let mut c = assert_cmd::Command::new(ctrl);
    env.apply(&mut c);
    output(c.env("PATH", "/nonexistent").args(args))
}

/// Runs a command, retrying while an executable written by a parallel test is still open for
/// writing in a child forked meanwhile (`ETXTBSY`).
fn output(c: &mut assert_cmd::Command) -> std::process::Output {
    for _ in 0..100 {
        match c.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r.unwrap(),
        }
    }
    panic!("executable stays busy");
}

#[test]
fn trace_front_end_drives_rds_trace() {
    let env = Env::new();
    let ctrl = lone_ctrl(env.dir.path());
    let bin = ctrl.parent().unwrap().to_path_buf();
    let args_file = env.dir.path().join("args");
    let ready_file = env.dir.path().join("ready");
    let pcap = env.dir.path().join("cap.pcap");

    // Missing rds-trace: a clear error.
    let out = run(
        &env,
        &ctrl,
        &["trace", "start", pcap.to_str().unwrap(), "96"],
    );
    status(&out, 2);
    let e = text(&out.stderr);
    assert!(
        e.contains("cannot find rds-trace") && e.contains(bin.to_str().unwrap()),
        "{e}"
    );
    status(&run(&env, &ctrl, &["trace", "report", "x.pcap"]), 2);

    // A fake rds-trace: records its arguments, runs until SIGINT, then says what it wrote.
    fake_tool(
        &bin,
        "rds-trace",
        &format!(
            "echo \"$@\" >> {args}\n\
             case \"$1\" in -r) echo \"report of $2\"; exit 0;; esac\n\
             trap 'echo \"3 frames written\"; exit 0' INT\n\
             echo ready > {ready}\n\
             while :; do /bin/sleep 0.05; done",
            args = args_file.display(),
            ready = ready_file.display()
        ),
    );
    // Started with SIGINT ignored, as from a shell's background job or `nohup`: the
    // detached rds-trace gets the signal's default disposition back, or `trace stop`'s SIGINT
    // would not reach the fake (a shell cannot trap a signal ignored on entry).
    let mut c = assert_cmd::Command::new("/bin/sh");
    env.apply(&mut c);
    let out = output(
        c.env("PATH", "/nonexistent")
            .arg("-c")
            .arg("trap '' INT; exec \"$0\" \"$@\"")
            .arg(&ctrl)
            .args(["--node", "n1", "trace", "start"])
            .arg(&pcap)
            .arg("96"),
    );
    let s = status(&out, 0);
    assert!(s.starts_with("trace started (rds-trace pid "), "{s}");
    let pid: u32 = std::fs::read_to_string(env.run.join("trace.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(pid));
    assert_eq!(
        std::fs::read_to_string(&args_file).unwrap(),
        format!("-w {} -s 96 --node n1\n", pcap.display())
    );
    // It runs in its own session.
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid as i32))).unwrap();
    assert_eq!(sid.as_raw(), pid as i32);
    // One trace at a time.
    let out = run(&env, &ctrl, &["trace", "start", "other.pcap", "64"]);
    status(&out, 1);
    assert!(text(&out.stderr).contains("already running"));
    // Stop: SIGINT, wait, report. (The fake must have installed its SIGINT trap first: on a
    // loaded machine the signal could otherwise come before the shell reached that line.)
    let ready_by = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready_file.exists() {
        assert!(
            std::time::Instant::now() < ready_by,
            "the fake rds-trace never got to its trap"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = status(&run(&env, &ctrl, &["trace", "stop"]), 0);
    assert_eq!(
        s,
        format!("trace stopped (rds-trace pid {pid})\n3 frames written\n")
    );
    wait_until("rds-trace to be gone", Duration::from_secs(5), || {
        !pid_alive(pid)
    });
    assert!(!env.run.join("trace.pid").exists());
    let out = run(&env, &ctrl, &["trace", "stop"]);
    status(&out, 1);
    assert!(text(&out.stderr).contains("no trace is running"));
    // Report runs rds-trace -r FILE.
    let s = status(&run(&env, &ctrl, &["trace", "report", "x.pcap"]), 0);
    assert_eq!(s, "report of x.pcap\n");

    // A capture that fails at once is reported with its output.
    fake_tool(
        &bin,
        "rds-trace",
        "echo 'rds-trace: no RDS node is running' >&2; exit 2",
    );
    let out = run(&env, &ctrl, &["trace", "start", "y.pcap", "64"]);
    status(&out, 2);
    assert!(
        text(&out.stderr).contains("rds-trace: no RDS node is running"),
        "{}",
        text(&out.stderr)
    );
    assert!(!env.run.join("trace.pid").exists());
}

#[test]
fn info_and_ping_run_the_sibling_tools() {
    let env = Env::new();
    let ctrl = lone_ctrl(env.dir.path());
    let bin = ctrl.parent().unwrap().to_path_buf();
    for tool in ["rds-info", "rds-ping"] {
        let out = run(&env, &ctrl, &[&tool[4..], "-c", "1"]);
        status(&out, 2);
        assert!(text(&out.stderr).contains(&format!("cannot find {tool}")));
    }
    fake_tool(&bin, "rds-info", "echo \"info $*\"; exit 0");
    fake_tool(&bin, "rds-ping", "echo \"ping $*\"; exit 1");
    let s = status(&run(&env, &ctrl, &["info", "-c", "-n", "--json"]), 0);
    assert_eq!(s, "info -c -n --json\n");
    let s = status(&run(&env, &ctrl, &["--node", "x", "info", "-k"]), 0);
    assert_eq!(s, "info --node x -k\n");
    // The tool's exit status is rds-ctrl's (rds-ping: 1 when no reply came).
    let s = status(&run(&env, &ctrl, &["ping", "-c", "3", "127.0.0.1"]), 1);
    assert_eq!(s, "ping -c 3 127.0.0.1\n");
    // Found in PATH when not next to rds-ctrl.
    let other = env.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::rename(bin.join("rds-ping"), other.join("rds-ping")).unwrap();
    let mut c = assert_cmd::Command::new(&ctrl);
    env.apply(&mut c);
    let out = output(c.env("PATH", &other).args(["ping", "127.0.0.2"]));
    assert_eq!(status(&out, 1), "ping 127.0.0.2\n");
}

#[test]
fn info_alias_runs_the_real_rds_info() {
    // The workspace's rds-info, built next to rds-ctrl.
    let real = assert_cmd::cargo::cargo_bin("rds-info");
    assert!(
        real.exists(),
        "{} is not built: cargo test --workspace builds it (or cargo build --release -p rds-info)",
        real.display()
    );
    let env = Env::new();
    let out = env.run(&["info", "-c"]);
    status(&out, 1);
    assert!(text(&out.stderr).contains("rds-info: no RDS node is running"));
    let mut d = common::Daemon::load(&env, "127.0.0.58");
    let s = status(&env.run(&["info", "-k", "-n"]), 0);
    assert!(s.starts_with("\nRDS Sockets:\n"), "{s}");
    d.unload();
}
