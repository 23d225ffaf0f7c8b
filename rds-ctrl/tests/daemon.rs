//! The host daemon through `rds-ctrl`: load/unload cycles leave nothing behind, tunables
//! round-trip, persist across unload/load and are range-checked, privileges are enforced,
//! stats/ras/version, SIGTERM, load failures, `kill -9` (clear client errors, the stale socket
//! file replaced), log lines for journald and for the log file. Each test has its own loopback
//! address (127.0.0.50–59, 127.31.8.1–2), runtime directory and config file.

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{pid_alive, rds_port_taken, status, text, wait_until, Daemon, Env};

#[test]
fn load_unload_cycles_leave_nothing_behind() {
    let env = Env::new();
    let ip: IpAddr = "127.0.0.50".parse().unwrap();
    let out = env.run(&["unload"]);
    status(&out, 1);
    assert!(text(&out.stderr).contains("no RDS daemon is loaded"));
    for _ in 0..3 {
        let mut d = Daemon::load(&env, "127.0.0.50");
        assert!(pid_alive(d.pid));
        assert!(env.sock().exists());
        assert!(rds_port_taken(ip), "the daemon listens on 16385");
        // Loading again is a negative result.
        let out = env.run(&["load", "--addr", "127.0.0.50"]);
        status(&out, 1);
        assert!(text(&out.stderr).contains("already loaded"));
        // The daemon answers.
        let out = env.run(&["version"]);
        let s = status(&out, 0);
        assert!(s.contains("node 'daemon'"), "{s}");
        assert!(s.contains(&format!("pid {}", d.pid)), "{s}");
        d.unload();
    }
    // Only the log is left in the runtime directory.
    let left: Vec<String> = std::fs::read_dir(&env.run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["daemon.log".to_string()]);
    let log = env.log();
    assert_eq!(
        log.matches("started: transport tcp on 127.0.0.50").count(),
        3
    );
    assert_eq!(log.matches("stopped by a shutdown request").count(), 3);
}

#[test]
fn tunables_round_trip_range_errors_and_persistence() {
    let env = Env::new();
    let mut d = Daemon::load(&env, "127.0.0.51");
    let get = |name: &str| status(&env.run(&["get", name]), 0);
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 8\n"
    );
    let all = status(&env.run(&["get"]), 0);
    assert_eq!(all.lines().count(), rds_core::tunables::TUNABLES.len());
    // Set and read back (full and short names, booleans).
    status(&env.run(&["set", "max_unacked_packets", "16"]), 0);
    status(&env.run(&["set", "net.rds.ping_enable", "off"]), 0);
    assert_eq!(
        get("net.rds.max_unacked_packets"),
        "net.rds.max_unacked_packets = 16\n"
    );
    assert_eq!(get("ping_enable"), "net.rds.ping_enable = 0\n");
    // Range and name errors change nothing.
    let out = env.run(&["set", "rds_tcp_sndbuf", "100"]);
    status(&out, 2);
    assert!(
        text(&out.stderr).contains("out of range (0 or 4608..2147483647)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(get("rds_tcp_sndbuf"), "net.rds.tcp.rds_tcp_sndbuf = 0\n");
    let out = env.run(&["set", "reconnect_min_delay_ms", "5000"]);
    status(&out, 2);
    assert!(text(&out.stderr).contains("must not exceed"));
    status(&env.run(&["set", "nope", "1"]), 2);
    status(&env.run(&["set", "max_unacked_packets", "many"]), 2);
    status(&env.run(&["set", "max_unacked_packets", "0"]), 2);
    status(&env.run(&["get", "nope"]), 2);
    // A TCP buffer change is accepted (it restarts the connections).
    status(&env.run(&["set", "rds_tcp_sndbuf", "65536"]), 0);
    // Defaults.
    status(&env.run(&["default", "max_unacked_packets"]), 0);
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 8\n"
    );
    status(&env.run(&["default"]), 0);
    assert_eq!(get("ping_enable"), "net.rds.ping_enable = 1\n");
    assert_eq!(get("rds_tcp_sndbuf"), "net.rds.tcp.rds_tcp_sndbuf = 0\n");

    // Persistence: set -p applies now and after a reload.
    std::fs::write(&env.conf, "# site settings\nmax_unacked_bytes = 65536\n").unwrap();
    let s = status(&env.run(&["set", "-p", "max_unacked_packets", "32"]), 0);
    assert!(s.contains("saved net.rds.max_unacked_packets = 32"), "{s}");
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 32\n"
    );
    assert_eq!(
        std::fs::read_to_string(&env.conf).unwrap(),
        "# site settings\nmax_unacked_bytes = 65536\nnet.rds.max_unacked_packets = 32\n".replace(
            "max_unacked_bytes = 65536",
            "net.rds.max_unacked_bytes = 65536"
        )
    );
    d.unload();
    let mut d = Daemon::load(&env, "127.0.0.51");
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 32\n"
    );
    assert_eq!(
        get("max_unacked_bytes"),
        "net.rds.max_unacked_bytes = 65536\n"
    );
    assert!(env.log().contains("applied 2 persistent tunable(s)"));
    // get -p shows the file's values over the defaults.
    assert_eq!(
        status(&env.run(&["get", "-p", "max_unacked_packets"]), 0),
        "net.rds.max_unacked_packets = 32\n"
    );
    // default -p: back to the default now and after a reload.
    status(&env.run(&["default", "-p", "max_unacked_packets"]), 0);
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 8\n"
    );
    d.unload();
    // Without a node, set -p only saves (after checking the range).
    status(&env.run(&["set", "-p", "rds_tcp_rcvbuf", "1"]), 2);
    status(&env.run(&["set", "-p", "rds_tcp_rcvbuf", "8192"]), 0);
    status(&env.run(&["get"]), 2);
    // A bad line in the file is logged and ignored by the daemon.
    let mut conf = std::fs::read_to_string(&env.conf).unwrap();
    conf.push_str("ping_enable = 7\n");
    std::fs::write(&env.conf, conf).unwrap();
    let mut d = Daemon::load(&env, "127.0.0.51");
    assert_eq!(
        get("max_unacked_packets"),
        "net.rds.max_unacked_packets = 8\n"
    );
    assert_eq!(get("rds_tcp_rcvbuf"), "net.rds.tcp.rds_tcp_rcvbuf = 8192\n");
    assert_eq!(get("ping_enable"), "net.rds.ping_enable = 1\n");
    assert!(
        env.log().contains("out of range (0..1) (ignored)"),
        "{}",
        env.log()
    );
    status(&env.run(&["default", "-p"]), 0);
    let left = std::fs::read_to_string(&env.conf).unwrap();
    assert_eq!(left, "# site settings\n");
    d.unload();
}

/// Runs `rds-ctrl` (`ctrl`: a copy the user can reach, see [`reachable_ctrl`]) as nobody
/// (uid/gid 65534) with `setpriv`, from `/`.
fn run_as_nobody(env: &Env, ctrl: &Path, args: &[&str]) -> std::process::Output {
    let mut c = assert_cmd::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(ctrl)
        .args(args)
        .current_dir("/")
        .env("HOME", env.dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME");
    env.apply(&mut c);
    // Nobody's config file is its own.
    c.env("RDS_CONFIG", env.dir.path().join("nobody.conf"));
    c.output().unwrap()
}

/// A copy of `rds-ctrl` that uid 65534 can run: the build tree may sit below a directory only
/// root can enter (a clone in root's home or in `mktemp -d`, both 0700).
fn reachable_ctrl() -> (rds_tests::users::Reachable, PathBuf) {
    let r = rds_tests::users::Reachable::new();
    let copy = r.copy(&assert_cmd::cargo::cargo_bin("rds-ctrl"));
    (r, copy)
}

#[test]
fn privileged_commands_need_root_or_the_owner() {
    rds_tests::users::require_root("it runs rds-ctrl as uid 65534 with setpriv");
    let (_reach, ctrl) = reachable_ctrl();
    let as_nobody = |env: &Env, args: &[&str]| run_as_nobody(env, &ctrl, args);
    let env = Env::new();
    let mut d = Daemon::load(&env, "127.0.0.52");
    // Reading is open to everyone.
    let s = status(&as_nobody(&env, &["get", "ping_enable"]), 0);
    assert_eq!(s, "net.rds.ping_enable = 1\n");
    status(&as_nobody(&env, &["stats"]), 0);
    status(&as_nobody(&env, &["health"]), 0);
    status(&as_nobody(&env, &["ras"]), 0);
    status(&as_nobody(&env, &["ras", "extract"]), 0);
    // Changing is not.
    for args in [
        &["set", "ping_enable", "0"][..],
        &["set", "-p", "ping_enable", "0"],
        &["ras", "detail"],
        &["default"],
        &["stats", "reset"],
        &["conn", "restart", "127.0.0.52", "127.0.0.59"],
        &["conn", "kill", "127.0.0.52", "127.0.0.59"],
        &["unload"],
    ] {
        let out = as_nobody(&env, args);
        status(&out, 2);
        assert!(
            text(&out.stderr).contains("permission denied"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(!env.dir.path().join("nobody.conf").exists());
    assert_eq!(
        status(&env.run(&["get", "ping_enable"]), 0),
        "net.rds.ping_enable = 1\n"
    );
    assert!(pid_alive(d.pid));
    d.unload();
}

#[test]
fn stats_health_version_and_a_down_connection() {
    let env = Env::new();
    let mut d = Daemon::load(&env, "127.0.0.57");
    let s = status(&env.run(&["stats"]), 0);
    assert!(s.starts_with(
        "\nCounters:\n              CounterName            Value\n               conn_reset                0\n"
    ), "{s}");
    let v: serde_json::Value =
        serde_json::from_str(&status(&env.run(&["stats", "--json"]), 0)).unwrap();
    assert_eq!(v["conn_reset"], 0);
    assert_eq!(
        status(&env.run(&["stats", "reset"]), 0),
        "counters of node 'daemon' reset\n"
    );
    let s = status(&env.run(&["health"]), 0);
    assert!(
        s.starts_with("RDS OK - node 'daemon': 0 connection(s) up, 0 socket(s) | "),
        "{s}"
    );
    assert!(s.contains("verdict: healthy"), "{s}");
    assert!(s.contains("addresses:   127.0.0.57"), "{s}");
    let s = status(&env.run(&["version"]), 0);
    assert!(s.starts_with(&format!(
        "rds-ctrl (rds-tools) {}\nRDS protocol version 3.1\n",
        env!("CARGO_PKG_VERSION")
    )));
    // A message to a peer that refuses: the connection is not up with a message waiting,
    // health says so (CRITICAL, status 2).
    let mut c = rds_core::ctl::client::CtlClient::connect(&env.sock()).unwrap();
    let tok = match c.call(&rds_core::ctl::Request::SockOpen, &[]).unwrap().0 {
        rds_core::ctl::Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    c.call(
        &rds_core::ctl::Request::SockBind {
            sock: tok,
            addr: "127.0.0.57:4000".parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .unwrap();
    c.call(
        &rds_core::ctl::Request::SockSend {
            sock: tok,
            dest: Some("127.0.0.59:4000".parse().unwrap()),
            dontwait: true,
            timeout_ms: None,
        },
        b"lost",
    )
    .unwrap();
    let out = env.run(&["health"]);
    let s = status(&out, 2);
    assert!(
        s.starts_with("RDS CRITICAL - node 'daemon': connection 127.0.0.57 -> 127.0.0.59 is "),
        "{s}"
    );
    assert!(s.contains("connection 127.0.0.57 -> 127.0.0.59 is "), "{s}");
    assert!(s.contains("(1 message(s) waiting)"), "{s}");
    // Killing it drops the message and reports it.
    let s = status(&env.run(&["conn", "kill", "127.0.0.57", "127.0.0.59"]), 0);
    assert_eq!(
        s,
        "connection 127.0.0.57 -> 127.0.0.59 killed; 1 queued message(s) dropped\n"
    );
    let out = env.run(&["conn", "restart", "127.0.0.57", "127.0.0.58"]);
    status(&out, 2);
    assert!(text(&out.stderr).contains("no connection"));
    drop(c);
    d.unload();
}

#[test]
fn sigterm_stops_a_foreground_daemon() {
    let env = Env::new();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("rds-ctrl"));
    cmd.args(["daemon", "--addr", "127.0.0.58"])
        .env("RDS_RUNTIME_DIR", &env.run)
        .env("RDS_CONFIG", &env.conf)
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let guard = Daemon {
        env: &env,
        pid,
        addr: "127.0.0.58".parse().unwrap(),
    };
    wait_until("the daemon's socket", Duration::from_secs(20), || {
        rds_core::ctl::client::CtlClient::connect(&env.sock()).is_ok()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let log = text(&out.stderr);
    assert!(log.contains("SIGTERM received, stopping"), "{log}");
    guard.check_gone();
}

#[test]
fn load_failures_and_usage_errors() {
    let env = Env::new();
    // Why IB is unavailable on this host (a host with an RDMA device skips the IB checks).
    let ib_missing = rds_core::ib::availability().err().map(|e| e.to_string());
    if let Some(why) = &ib_missing {
        // `load ib`: nothing starts, status 1 and the reason.
        let out = env.run(&["load", "ib", "--addr", "127.8.3.1"]);
        assert_eq!(status(&out, 1), "");
        assert_eq!(
            text(&out.stderr),
            format!("rds-ctrl: cannot load ib: the IB transport is unavailable: {why}\n")
        );
        assert!(!env.sock().exists());
        // `daemon ib` likewise, in the foreground.
        let out = env.run(&["daemon", "ib", "--addr", "127.8.3.1"]);
        assert_eq!(status(&out, 1), "");
        assert_eq!(
            text(&out.stderr),
            format!("rds-ctrl: the IB transport is unavailable: {why}\n")
        );
        assert!(!env.sock().exists());
    }
    // An address this host does not have: the daemon fails and load says why.
    let out = env.run(&["load", "--addr", "192.0.2.1"]);
    status(&out, 2);
    let e = text(&out.stderr);
    assert!(e.contains("the daemon failed to start"), "{e}");
    assert!(e.contains("cannot start the node on 192.0.2.1"), "{e}");
    assert!(!env.sock().exists());
    // `all` loads TCP and warns in one line that IB is unavailable.
    let out = env.run(&["load", "all", "--addr", "127.8.3.1"]);
    let s = status(&out, 0);
    let pid: u32 = s
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    let mut d = Daemon {
        env: &env,
        pid,
        addr: "127.8.3.1".parse().unwrap(),
    };
    if let Some(why) = &ib_missing {
        assert!(
            s.starts_with("RDS daemon loaded (pid ")
                && s.contains("): transport tcp on 127.8.3.1;"),
            "{s}"
        );
        assert_eq!(
            text(&out.stderr),
            format!("rds-ctrl: warning: the IB transport is unavailable: {why}; loaded TCP only\n")
        );
        // health shows the transports and why IB is absent; the daemon logged the same.
        let r = text(&env.run(&["health"]).stdout);
        assert!(
            r.contains(&format!("  transports:  tcp (IB: unavailable: {why})\n")),
            "{r}"
        );
        let log = env.log();
        assert!(
            log.contains(&format!(
                "warning: the IB transport is unavailable: {why}; running TCP only\n"
            )),
            "{log}"
        );
        assert!(
            log.contains("started: transport tcp on 127.8.3.1 (port 16385), control socket "),
            "{log}"
        );
    }
    d.unload();
    // Usage errors.
    status(&env.run(&[]), 2);
    status(&env.run(&["bogus"]), 2);
    status(&env.run(&["conn", "restart", "1.2.3.4"]), 2);
    status(&env.run(&["conn", "kill", "x", "y"]), 2);
    status(&env.run(&["trace", "start", "f"]), 2);
    status(&env.run(&["load", "udp"]), 2);
    status(&env.run(&["--help"]), 0);
    status(&env.run(&["help", "nope"]), 2);
    // Commands that need a node say so.
    for args in [
        &["get"][..],
        &["stats"],
        &["ras"],
        &["ras", "extract"],
        &["ras", "detail"],
        &["conn", "kill", "1.1.1.1", "2.2.2.2"],
    ] {
        let out = env.run(args);
        status(&out, 2);
        assert!(
            text(&out.stderr).contains("no RDS node is running"),
            "{args:?}"
        );
    }
    // health is a monitoring plugin: no node is UNKNOWN (3), on stdout; so is a usage error.
    let out = env.run(&["health"]);
    let s = status(&out, 3);
    assert!(s.starts_with("RDS UNKNOWN - no RDS node is running"), "{s}");
    assert_eq!(s.lines().count(), 1, "{s}");
    assert!(!s.contains('|'), "{s}");
    assert_eq!(text(&out.stderr), "");
    status(&env.run(&["health", "--bogus"]), 3);
    status(&env.run(&["--node", "x", "health", "extra"]), 3);
}

#[test]
fn help_lists_every_tunable() {
    let env = Env::new();
    let s = status(&env.run(&["help"]), 0);
    for d in rds_core::tunables::TUNABLES {
        let row = s
            .lines()
            .find(|l| l.starts_with(&format!("| {} ", d.name)))
            .unwrap_or_else(|| panic!("{} not listed:\n{s}", d.name));
        assert!(row.contains(&format!("| {} ", d.default_value())), "{row}");
        assert!(row.contains(&d.range_text()), "{row}");
        assert!(row.contains(d.unit), "{row}");
        assert!(row.contains(d.desc), "{row}");
    }
    let s = status(&env.run(&["help", "rds_tcp_rcvbuf"]), 0);
    assert_eq!(
        s,
        "net.rds.tcp.rds_tcp_rcvbuf\n  TCP receive buffer of RDS/TCP connections, 0 = autotune; a change reconnects them\n  default: 0\n  range:   0 or 2304..2147483647\n  unit:    bytes\n  a Linux sysctl of the same name\n"
    );
    let s = status(&env.run(&["help", "conn"]), 0);
    assert!(s.contains("restart"), "{s}");
}

/// `kill -9` of the daemon: a client socket served by it fails its next calls with
/// `ECONNRESET` (never hangs), a control client says the daemon went away, and a new daemon
/// replaces the stale socket file the dead one left.
#[test]
fn a_killed_daemon_gives_clear_errors_and_is_replaced() {
    use rds_core::ctl::client::CtlClient;
    let env = Env::new();
    let d = Daemon::load(&env, "127.31.8.1");
    // This test alone reads RDS_RUNTIME_DIR in this process (the others pass it to children).
    std::env::set_var("RDS_RUNTIME_DIR", &env.run);
    let s = rds_core::Socket::new().unwrap();
    s.bind("127.31.8.1:7300".parse().unwrap()).unwrap();
    assert!(s.via_daemon());
    s.send_to(b"x", "127.31.8.1:7300".parse().unwrap()).unwrap();
    let mut buf = [0u8; 8];
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    assert_eq!(s.recv_from(&mut buf).unwrap().0, 1);
    let mut c = CtlClient::connect(&env.sock()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the daemon to die", Duration::from_secs(10), || {
        !pid_alive(d.pid)
    });
    // The control client first: its call ends when the daemon's descriptors are closed
    // (its main thread shows as a zombie while other threads may still hold them, and a send
    // the client socket posts to the ring has no result to wait for).
    let e = c.info().unwrap_err();
    assert_eq!(e.errno(), libc::ECONNRESET);
    assert_eq!(
        e.to_string(),
        format!(
            "the RDS daemon at {} went away (stopped or crashed)",
            env.sock().display()
        )
    );
    // The receive first: it waits until the socket sees the daemon gone (a send only posts
    // to the ring, and one made before that has no answer to fail with: it failed this test
    // once on a fully loaded machine). From then on every call says so: a send after it
    // used to post into the dead daemon's ring and succeed.
    let e = s.recv_from(&mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
    let e = s
        .send_to(b"x", "127.31.8.1:7300".parse().unwrap())
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
    drop(s);
    // The dead daemon's socket file is still there; a new daemon takes its place.
    assert!(env.sock().exists());
    let mut d2 = Daemon::load(&env, "127.31.8.1");
    let out = env.run(&["version"]);
    let v = status(&out, 0);
    assert!(v.contains(&format!("pid {}", d2.pid)), "{v}");
    d2.unload();
}

/// The daemon's log lines: under systemd (`INVOCATION_ID` set, as for a unit's processes)
/// each line is `<N>message`, N the journald priority, without a time or a name; in the log
/// file of `load` (which starts it without systemd's variables, wherever it runs) they keep
/// the time and `rds-ctrl daemon[PID]: `. `RDS_LOG=warn` leaves the warnings alone.
#[test]
fn daemon_lines_for_journald_and_for_the_log_file() {
    use std::process::Stdio;
    let env = Env::new();
    std::fs::write(&env.conf, "ping_enable = 7\n").unwrap();
    let err_path = env.dir.path().join("journal.txt");
    let run = |extra: &[(&str, &str)]| {
        let err = std::fs::File::create(&err_path).unwrap();
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rds-ctrl"));
        c.args(["daemon", "tcp", "--addr", "127.31.8.2"])
            .env("RDS_RUNTIME_DIR", &env.run)
            .env("RDS_CONFIG", &env.conf)
            .env("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
            .env_remove("JOURNAL_STREAM")
            .env_remove("RDS_LOG")
            .env_remove("RDS_NO_DAEMON")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        for (k, v) in extra {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        wait_until("the daemon's socket", Duration::from_secs(20), || {
            rds_core::ctl::client::CtlClient::connect(&env.sock()).is_ok()
        });
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let st = child.wait().unwrap();
        let lines = std::fs::read_to_string(&err_path).unwrap();
        assert!(st.success(), "{st}\n{lines}");
        lines
    };
    let lines = run(&[]);
    for l in lines.lines() {
        let p = l.get(..3).unwrap_or("");
        assert!(
            ["<3>", "<4>", "<6>", "<7>"].contains(&p) && !l.contains("rds-ctrl daemon["),
            "{l:?} in\n{lines}"
        );
    }
    let has = |prefix: &str| lines.lines().any(|l| l.starts_with(prefix));
    assert!(
        has("<6>started: transport tcp on 127.31.8.2 (port 16385), control socket "),
        "{lines}"
    );
    assert!(
        has("<4>"),
        "the config file's bad line is a warning:\n{lines}"
    );
    assert!(lines.contains("out of range (0..1) (ignored)\n"), "{lines}");
    assert!(has("<6>SIGTERM received, stopping"), "{lines}");
    assert!(lines.ends_with("<6>stopped\n"), "{lines}");
    // A level: the warnings only.
    let lines = run(&[("RDS_LOG", "warn")]);
    assert!(
        !lines.is_empty() && lines.lines().all(|l| l.starts_with("<4>")),
        "{lines}"
    );
    // `load` from within a unit: the log file keeps its times.
    let out = env
        .ctrl()
        .args(["load", "tcp", "--addr", "127.31.8.2"])
        .env("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
        .env("JOURNAL_STREAM", "8:12345")
        .output()
        .unwrap();
    let s = status(&out, 0);
    let pid: u32 = s
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {s:?}"));
    let mut d = Daemon {
        env: &env,
        pid,
        addr: "127.31.8.2".parse().unwrap(),
    };
    d.unload();
    let log = env.log();
    let started = log
        .lines()
        .find(|l| l.contains("started: transport tcp on 127.31.8.2"))
        .unwrap_or_else(|| panic!("{log}"));
    // "YYYY-MM-DD HH:MM:SS rds-ctrl daemon[PID]: started: ..."
    let b = started.as_bytes();
    assert!(
        b.len() > 20
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b' '
            && b[13] == b':'
            && b[16] == b':'
            && started[19..].starts_with(" rds-ctrl daemon["),
        "{log}"
    );
    assert!(started.contains("]: started: "), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("]: warning: ") && l.ends_with("out of range (0..1) (ignored)")),
        "{log}"
    );
    assert!(!log.contains("<6>") && !log.contains("<4>"), "{log}");
}
