//! Command-line behaviour: help and version, usage errors (exit 2), every option's value
//! validation with the original's messages (exit 1), -D on RDS/TCP, the async/TOS refusals, and the
//! control connect failure lines.

mod common;

use assert_cmd::Command;
use predicates::prelude::*;

fn rs() -> Command {
    let mut c = Command::cargo_bin("rds-stress").unwrap();
    c.env("RDS_NO_DAEMON", "1")
        .timeout(std::time::Duration::from_secs(20));
    c
}

/// Runs an active-side command line that must fail validation with exactly `msg`.
fn fails(args: &[&str], msg: &str) {
    rs().args(args)
        .assert()
        .code(1)
        .stdout("")
        .stderr(msg.to_string());
}

#[test]
fn help_lists_every_option_and_version() {
    let out = rs()
        .arg("--help")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let help = String::from_utf8(out).unwrap();
    for o in [
        "--recv-addr",
        "--port",
        "--send-addr",
        "--ack-bytes",
        "--req-bytes",
        "--one-way",
        "--depth",
        "--tasks",
        "--time",
        "--tos",
        "--connect-retries",
        "--use-cong-monitor",
        "--rdma-bytes",
        "--rdma-buffers",
        "--rdma-mode",
        "--rdma-use-once",
        "--rdma-use-get-mr",
        "--rdma-use-fence",
        "--rdma-use-notify",
        "--rdma-cache-mrs",
        "--rdma-alignment",
        "--rdma-key-o-meter",
        "--disable-inq",
        "--report-cpu",
        "--trace",
        "--report-summary",
        "--verify",
        "--rtprio",
        "--show-params",
        "--show-outliers",
        "--show-histogram",
        "--show-perfdata",
        "--reset",
        "--async",
        "--cancel-sent-to",
        "--abort-after",
        "--always-bursty",
        "--sync-always-bursty",
        "--loopback",
        "--json",
        "--version",
    ] {
        assert!(help.contains(o), "{o} missing from --help");
    }
    assert!(help.contains("Send & Recv Options"));
    assert!(help.contains("RDMA Specific Options"));
    rs().arg("-h").assert().success();
    rs().arg("--version").assert().success().stdout(format!(
        "rds-stress {} (protocol 2.0.7)\n",
        env!("CARGO_PKG_VERSION")
    ));
}

#[test]
fn usage_errors_exit_2() {
    rs().arg("--bogus")
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::starts_with(
            "rds-stress: unexpected argument '--bogus' found\n",
        ));
    rs().arg("-q").assert().code(2);
    rs().arg("-X").assert().code(2);
    rs().args(["-s", "127.50.9.1", "extra"]).assert().code(2);
}

#[test]
fn every_number_is_checked() {
    let cases: &[(&str, &str)] = &[
        ("-a", "abc"),
        ("-q", "12x"),
        ("-d", "4294967296"),
        ("-t", "65536"),
        ("-Q", "256"),
        ("-D", "0x"),
        ("-I", "513"),
        ("-M", "3"),
        ("--connect-retries", ""),
        ("--use-cong-monitor", "2"),
        ("--rdma-use-once", "2"),
        ("--rdma-use-get-mr", "2"),
        ("--rdma-use-fence", "2"),
        ("--rdma-use-notify", "2"),
        ("--rdma-cache-mrs", "2"),
        ("--rdma-alignment", "4097"),
        ("--show-outliers", "1kb"),
        ("--abort-after", "08"),
        ("--req", "abc"),
    ];
    for (opt, val) in cases {
        fails(
            &["-s", "127.50.9.1", opt, val],
            &format!("invalid number '{val}'\n"),
        );
    }
    for t in ["-1", "1.5x", "2h", "1e10"] {
        fails(
            &["-s", "127.50.9.1", "-T", t],
            &format!(
                "-T: invalid duration '{t}' (0 to 1e9 seconds, or a number with ms, s or m)\n"
            ),
        );
    }
    // The passive side checks the numbers too.
    fails(&["-p", "x"], "invalid number 'x'\n");
}

#[test]
fn sizes_and_limits() {
    fails(
        &["-s", "127.50.9.1", "-a", "62"],
        "ack size must be at least 63 bytes\n",
    );
    // 0 is not the default (rds-tools 2.0.7; 2.3 took 0 as "unset").
    fails(
        &["-s", "127.50.9.1", "-a", "0"],
        "ack size must be at least 63 bytes\n",
    );
    fails(
        &["--loopback", "-a", "0"],
        "ack size must be at least 63 bytes\n",
    );
    fails(
        &["-s", "::1", "-a", "0"],
        "ack size must be at least 96 bytes\n",
    );
    fails(
        &["-s", "127.50.9.1", "-q", "0x3e"],
        "req size must be at least 63 bytes\n",
    );
    fails(
        &["-s", "::1", "-q", "95"],
        "req size must be at least 96 bytes\n",
    );
    fails(
        &["-s", "::1", "-a", "63"],
        "ack size must be at least 96 bytes\n",
    );
    fails(
        &["-s", "127.50.9.1", "-d", "0"],
        "req depth must be at least 1\n",
    );
    fails(
        &["-s", "127.50.9.1", "-t", "0"],
        "number of tasks must be at least 1\n",
    );
    fails(
        &["-s", "127.50.9.1", "-q", "2m"],
        "req size 2097152 is larger than the largest RDS message (1048576 bytes)\n",
    );
    fails(
        &["-s", "127.50.9.1", "-p", "65530", "-t", "8"],
        "-p 65530 with -t 8: task ports 65531..65538 do not fit below 65536 (at most -p 65527)\n",
    );
    fails(
        &["-s", "127.50.9.1", "-p", "65535"],
        "-p: port 65535 out of range (0 to 65534: tasks use port+1 and up)\n",
    );
    fails(
        &["-p", "70000"],
        "-p: port 70000 out of range (0 to 65534: tasks use port+1 and up)\n",
    );
    fails(
        &["-r", "127.0.0.1", "-s", "::1"],
        "send and receive address family not matched\n",
    );
    fails(&["-s", ""], "invalid host name or address ''\n");
}

/// `-D` on a socket that runs over RDS/TCP fails as the original does on a kernel without
/// RDMA: its message, exit 1, before connecting when -r is given; then why (the address is not
/// on an RDMA device here). The other RDMA options without -D are accepted and unused, as in
/// the original.
#[test]
fn rdma_needs_the_ib_transport() {
    let first = "RDMA not supported by this kernel\n";
    let why = regex::Regex::new(
        r"^rds-stress: -D needs the RDS/IB transport; 127\.50\.9\.(20|22) is not on an RDMA device: .+\n$",
    )
    .unwrap();
    for args in [
        &["-r", "127.50.9.20", "-s", "127.50.9.21", "-D", "8192"][..],
        &[
            "-r",
            "127.50.9.20",
            "-s",
            "127.50.9.21",
            "-D",
            "4k",
            "--rdma-use-get-mr",
            "1",
            "-M",
            "2",
        ],
        &[
            "-r",
            "127.50.9.20",
            "-s",
            "127.50.9.21",
            "-D",
            "4096",
            "--transport",
            "tcp",
        ],
        &[
            "--loopback",
            "-r",
            "127.50.9.22",
            "-s",
            "127.50.9.23",
            "-D",
            "8192",
            "-T",
            "1",
        ],
    ] {
        let out = rs()
            .args(args)
            .assert()
            .code(1)
            .stdout("")
            .get_output()
            .clone();
        let err = String::from_utf8(out.stderr).unwrap();
        let (a, b) = err.split_at(first.len().min(err.len()));
        assert_eq!(a, first, "{args:?}: {err}");
        assert!(why.is_match(b), "{args:?}: second line: {b:?}");
    }
    for extra in [
        &["-I", "2"][..],
        &["-M", "1"],
        &["--rdma-use-once", "1"],
        &["--rdma-use-get-mr", "1"],
        &["--rdma-use-fence", "0"],
        &["--rdma-use-notify", "1"],
        &["--rdma-alignment", "8"],
        &["--rdma-key-o-meter"],
        &["-D", "0"],
    ] {
        let mut a = vec!["-r", "127.50.9.2", "-s", "127.50.9.1", "-p", "4997"];
        a.extend_from_slice(extra);
        rs().args(&a)
            .assert()
            .code(1)
            .stdout("connecting to 127.50.9.1:4997: Connection refused\n")
            .stderr("connect(127.50.9.1) failed\n");
    }
    fails(
        &["-s", "127.50.9.1", "-D", "512k", "-I", "3"],
        "RDMA size * vector = 1572864 is larger than the largest RDMA operation (1048576 bytes)\n",
    );
    fails(
        &["-s", "127.50.9.1", "--transport", "roce"],
        "invalid transport 'roce' (tcp or ib)\n",
    );
    let out = rs()
        .args([
            "-r",
            "127.50.9.20",
            "-s",
            "127.50.9.21",
            "--transport",
            "ib",
        ])
        .assert()
        .code(1)
        .stdout("")
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("--transport ib: 127.50.9.20 is not on an RDMA device: "),
        "{err}"
    );
}

#[test]
fn async_tos_and_rdma_conflicts_are_refused_clearly() {
    fails(
        &[
            "-s",
            "127.50.9.1",
            "--rdma-cache-mrs",
            "1",
            "--rdma-use-once",
            "1",
        ],
        "option --rdma-cache-mrs conflicts with --rdma-use-once\n",
    );
    fails(
        &["-s", "127.50.9.1", "--rdma-cache-mrs", "1"],
        "option --rdma-cache-mrs conflicts with --rdma-use-get-mr=0\n",
    );
    fails(
        &[
            "-s",
            "127.50.9.1",
            "--async",
            "-D",
            "4k",
            "--rdma-use-fence",
            "0",
        ],
        "option --async=1 with RDMA Rd require --rdma-use-fence=1\n",
    );
    fails(
        &["-s", "127.50.9.1", "--async"],
        "option --async needs UEK's RDS_CMSG_ASYNC_SEND, which this RDS stack does not have\n",
    );
}

#[test]
fn connect_refused_and_retries() {
    rs().args(["-r", "127.50.9.2", "-s", "127.50.9.1", "-p", "4999"])
        .assert()
        .code(1)
        .stdout("connecting to 127.50.9.1:4999: Connection refused\n")
        .stderr("connect(127.50.9.1) failed\n");
    rs().args([
        "-r", "127.50.9.2", "-s", "127.50.9.1", "-p", "4999", "--connect-retries", "2", "--show-params",
    ])
    .assert()
    .code(1)
    .stdout(
        "Options:\n  Tasks      1      \n  Req size   1024   \n  ACK size   63     \n  RDMA size  0      \n  RDMA opts  use_fence\n\nconnecting to 127.50.9.1:4999: Connection refused - retrying..\n",
    )
    .stderr("connect(127.50.9.1) failed\n");
}

#[test]
fn report_cpu_and_reset() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    rs().args(["-c", "-r", "127.50.9.2", "-s", "127.50.9.1", "-p", "4998"])
        .assert()
        .code(1)
        .stdout(format!(
            "started {n} cycle soaking processes\nconnecting to 127.50.9.1:4998: Connection refused\n"
        ));
    let rt = tempfile::tempdir().unwrap();
    rs().env("RDS_RUNTIME_DIR", rt.path())
        .args(["--reset", "-r", "127.50.9.2", "-s", "127.50.9.1"])
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with(
            "setsockopt RDS_CONN_RESET failed",
        ));
    rs().args(["--reset", "-s", "127.50.9.1"])
        .assert()
        .code(1)
        .stderr("--reset needs the local address (-r)\n");
}

/// `tests/lab/build-c-rds-stress.sh` (which builds the original for the ignored interop test)
/// has no machine-specific default for the oracle/rds-tools clone: unset or missing, it exits
/// 1 and says how to make one, before building anything.
#[test]
fn c_build_script_names_its_missing_sources() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/build-c-rds-stress.sh");
    let cache = tempfile::tempdir().unwrap();
    let how = "clone it (git clone --bare https://github.com/oracle/rds-tools rds-tools.git) \
               and set RDS_TOOLS_GIT=/path/to/rds-tools.git\n";
    let missing = cache.path().join("no-such-clone");
    let cases = [
        (
            None,
            format!(
                "build-c-rds-stress: RDS_TOOLS_GIT is not set: it names a git clone of \
                 oracle/rds-tools, whose C sources this builds; {how}"
            ),
        ),
        (
            Some(missing.clone()),
            format!(
                "build-c-rds-stress: RDS_TOOLS_GIT={} does not exist; {how}",
                missing.display()
            ),
        ),
    ];
    for (dir, want) in cases {
        let mut c = std::process::Command::new("bash");
        c.arg(&script).env("LAB_CACHE", cache.path());
        match &dir {
            Some(d) => c.env("RDS_TOOLS_GIT", d),
            None => c.env_remove("RDS_TOOLS_GIT"),
        };
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{dir:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(String::from_utf8_lossy(&out.stderr), want);
    }
    // A directory that is not a clone of it.
    let out = std::process::Command::new("bash")
        .arg(&script)
        .env("LAB_CACHE", cache.path())
        .env("RDS_TOOLS_GIT", cache.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a git clone of oracle/rds-tools holding commit ")
            && err.ends_with(how),
        "{err}"
    );
    // Nothing was built or cached.
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}
