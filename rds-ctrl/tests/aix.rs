//! The AIX `rdsctrl` command forms (issue 21): every spelling of `set` (several assignments
//! per command, `-p`), the AIX tunable names and the not-applicable one, `load ofed|aixib`,
//! `ras [-p] LEVEL`, `ras extract` with connection events from a daemon (127.24.0.1) and a
//! node in this process (127.24.0.2), and the tunable commands on a kernel-RDS host against a
//! fake `/proc/sys/net/rds` (`RDS_CTRL_ROOT`).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{status, text, wait_until, Daemon, Env};
use rds_core::{CtlMode, Node, NodeConfig, Socket};

const D: &str = "127.24.0.1";
const P: &str = "127.24.0.2";

fn stderr(out: &std::process::Output) -> String {
    text(&out.stderr)
}

#[test]
fn set_forms_aix_names_and_ras_on_the_daemon() {
    let env = Env::new();
    let mut d = Daemon::load(&env, D);
    // Every AIX form of one assignment.
    for (form, v) in [
        (&["max_unacked_packets=11"][..], 11),
        (&["max_unacked_packets=", "12"], 12),
        (&["max_unacked_packets", "=13"], 13),
        (&["max_unacked_packets", "=", "14"], 14),
        (&["max_unacked_packets", "15"], 15),
    ] {
        let mut args = vec!["set"];
        args.extend_from_slice(form);
        let s = status(&env.run(&args), 0);
        assert_eq!(
            s,
            format!("net.rds.max_unacked_packets = {v}\n"),
            "{form:?}"
        );
        assert_eq!(
            status(&env.run(&["get", "max_unacked_packets"]), 0),
            format!("net.rds.max_unacked_packets = {v}\n")
        );
    }
    // Several in one command, with the AIX names.
    let s = status(
        &env.run(&[
            "set",
            "max_unacked_packets=20",
            "rds_sendspace",
            "=",
            "65536",
            "rds_recvspace",
            "131072",
        ]),
        0,
    );
    assert_eq!(
        s,
        "net.rds.max_unacked_packets = 20\nnet.rds.sndbuf_default = 65536\n\
         net.rds.rcvbuf_default = 131072\n"
    );
    assert_eq!(
        status(&env.run(&["get", "rds_sendspace"]), 0),
        "rds_sendspace = 65536\n"
    );
    assert_eq!(
        status(&env.run(&["get", "net.rds.rcvbuf_default"]), 0),
        "net.rds.rcvbuf_default = 131072\n"
    );
    // Nothing changes when one assignment of several is bad.
    let out = env.run(&["set", "max_unacked_packets=30", "nope=1"]);
    status(&out, 2);
    assert_eq!(
        stderr(&out),
        "rds-ctrl: unknown tunable 'nope' (see 'rds-ctrl help' for the list)\n"
    );
    assert_eq!(
        status(&env.run(&["get", "max_unacked_packets"]), 0),
        "net.rds.max_unacked_packets = 20\n"
    );
    let out = env.run(&["set", "max_unacked_packets="]);
    status(&out, 2);
    assert_eq!(
        stderr(&out),
        "rds-ctrl: set: no value for 'max_unacked_packets' (expected NAME=VALUE or NAME VALUE)\n"
    );
    // The AIX name with no equivalent.
    let out = env.run(&["set", "rds_mclustsize=16384"]);
    status(&out, 2);
    let na = rds_core::tunables::AixTunable::find("rds_mclustsize")
        .unwrap()
        .not_applicable()
        .unwrap();
    assert_eq!(stderr(&out), format!("rds-ctrl: {na}\n"));
    assert!(na.starts_with("rds_mclustsize is not applicable on this stack, because "));
    // -p keeps it in the config file.
    let s = status(&env.run(&["set", "-p", "rds_recvspace=", "262144"]), 0);
    let conf = env.conf.display();
    assert_eq!(
        s,
        format!(
            "net.rds.rcvbuf_default = 262144\nsaved net.rds.rcvbuf_default = 262144 in {conf}\n"
        )
    );
    let file = std::fs::read_to_string(&env.conf).unwrap();
    assert!(file.contains("net.rds.rcvbuf_default = 262144\n"), "{file}");

    // ras: the level, setting it, saving it.
    assert_eq!(
        status(&env.run(&["ras"]), 0),
        "RAS level of node 'daemon': normal\n  set it: rds-ctrl ras [-p] \
         minimal|normal|detail|maximal; events: rds-ctrl ras extract; health report: rds-ctrl \
         health\n"
    );
    assert_eq!(
        status(&env.run(&["ras", "detail"]), 0),
        "RAS level of node 'daemon' set to detail\n"
    );
    assert_eq!(
        status(&env.run(&["get", "ras_level"]), 0),
        "net.rds.ras_level = 3\n"
    );
    let extract = || status(&env.run(&["ras", "extract"]), 0);
    wait_until(
        "the level change in the ring",
        Duration::from_secs(20),
        || extract().contains("  ras    level set to detail\n"),
    );
    let s = extract();
    let first = s.lines().next().unwrap();
    assert!(
        first.starts_with("RAS events of node 'daemon' (level detail, ")
            && first.ends_with(" event(s), ring of 1024, 0 overwritten):"),
        "{s}"
    );
    let second = s.lines().nth(1).unwrap();
    assert!(
        second.ends_with("  ras    event ring started at level normal"),
        "{s}"
    );
    // `YYYY-MM-DD HH:MM:SS.mmm  kind   text`
    let b = second.as_bytes();
    assert!(
        b.len() > 25 && b[4] == b'-' && b[10] == b' ' && b[19] == b'.' && b[23] == b' ',
        "{second}"
    );
    for bad in [
        &["ras", "-p", "extract"][..],
        &["ras", "-p"],
        &["ras", "loud"],
    ] {
        status(&env.run(bad), 2);
    }

    // Connection events: a node in this process connects, the connection is restarted.
    let mut cfg = NodeConfig::new([P.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    let peer = Node::start(cfg).unwrap();
    let s = Socket::with_node(&peer);
    s.bind(format!("{P}:7001").parse::<SocketAddr>().unwrap())
        .unwrap();
    s.send_to(b"hello", format!("{D}:7000").parse().unwrap())
        .unwrap();
    let path = format!("connection {D} -> {P} tcp path 0");
    wait_until(
        "the connection up in the ring",
        Duration::from_secs(20),
        || {
            let s = extract();
            s.contains(&format!("  conn   {path} appeared\n"))
                && s.contains(&format!("  up     {path} up\n"))
        },
    );
    status(&env.run(&["conn", "restart", D, P]), 0);
    wait_until("the restart in the ring", Duration::from_secs(20), || {
        let s = extract();
        s.contains(&format!("  down   {path} down\n")) && s.contains("  reset  conn_reset +")
    });
    drop(s);
    peer.shutdown();

    // -p saves the level for the next start.
    let s = status(&env.run(&["ras", "-p", "maximal"]), 0);
    assert_eq!(
        s,
        format!(
            "RAS level of node 'daemon' set to maximal\n\
             saved RAS level maximal (net.rds.ras_level = 4) in {conf}\n"
        )
    );
    let file = std::fs::read_to_string(&env.conf).unwrap();
    assert!(file.contains("net.rds.ras_level = 4\n"), "{file}");
    // The daemon logs what the ring keeps.
    wait_until(
        "ras lines in the daemon's log",
        Duration::from_secs(20),
        || env.log().contains(": ras up: "),
    );
    d.unload();
    // With no node, -p only saves.
    assert_eq!(
        status(&env.run(&["ras", "-p", "minimal"]), 0),
        format!("saved RAS level minimal (net.rds.ras_level = 1) in {conf}\n")
    );
    assert_eq!(
        status(
            &env.run(&["set", "-p", "rds_sendspace", "32768", "ping_enable=off"]),
            0
        ),
        format!(
            "saved net.rds.sndbuf_default = 32768 in {conf}\n\
             saved net.rds.ping_enable = 0 in {conf}\n"
        )
    );
    assert_eq!(
        status(&env.run(&["get", "-p", "rds_sendspace"]), 0),
        "rds_sendspace = 32768\n"
    );
}

#[test]
fn load_ofed_and_aixib() {
    let env = Env::new();
    match rds_core::ib::availability() {
        Err(why) => {
            for t in ["ofed", "aixib"] {
                let out = env.run(&["load", t, "--addr", "127.24.1.1"]);
                status(&out, 1);
                assert_eq!(
                    stderr(&out),
                    format!(
                        "rds-ctrl: cannot load {t}: the IB transport is unavailable: {why}; \
                         'rds-ctrl load all' runs TCP where IB is unavailable\n"
                    )
                );
                assert!(!env.sock().exists());
            }
        }
        Ok(_) => eprintln!("SKIP refusals of load ofed|aixib: the IB transport is available"),
    }
    status(&env.run(&["load", "roce"]), 2);
}

#[test]
fn help_lists_the_aix_names() {
    let env = Env::new();
    let s = status(&env.run(&["help"]), 0);
    // The paragraph is wrapped to the terminal.
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        s.contains(
            "AIX rdsctrl names: rds_sendspace = net.rds.sndbuf_default, rds_recvspace = \
             net.rds.rcvbuf_default; not applicable on this stack: rds_mclustsize"
        ),
        "{s}"
    );
    let s = status(&env.run(&["help", "rds_sendspace"]), 0);
    assert!(s.starts_with("net.rds.sndbuf_default\n"), "{s}");
    assert!(s.ends_with("  AIX rdsctrl name: rds_sendspace\n"), "{s}");
    let s = status(&env.run(&["help", "rds_mclustsize"]), 0);
    assert!(
        s.starts_with("rds_mclustsize is not applicable on this stack, because "),
        "{s}"
    );
}

/// A fake kernel: `root/proc/sys/net/rds` with rds_tcp's and rds_rdma's directories.
fn fake_kernel(root: &Path) {
    let d = root.join("proc/sys/net/rds");
    for (f, v) in [
        ("max_unacked_packets", "8"),
        ("max_unacked_bytes", "16777216"),
        ("ping_enable", "1"),
        ("reconnect_min_delay_ms", "1"),
        ("reconnect_max_delay_ms", "1000"),
        ("tcp/rds_tcp_sndbuf", "0"),
        ("tcp/rds_tcp_rcvbuf", "0"),
        ("ib/max_send_wr", "256"),
    ] {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{v}\n")).unwrap();
    }
}

#[test]
fn tunables_on_a_kernel_host() {
    let env = Env::new();
    let root = env.dir.path().join("root");
    fake_kernel(&root);
    let run = |args: &[&str]| {
        env.ctrl()
            .env("RDS_CTRL_ROOT", &root)
            .args(args)
            .output()
            .unwrap()
    };
    let sys = |f: &str| std::fs::read_to_string(root.join("proc/sys/net/rds").join(f)).unwrap();
    let dropin = root.join("etc/sysctl.d/90-rds.conf");
    assert_eq!(
        status(&run(&["get"]), 0),
        "net.rds.ib.max_send_wr = 256\nnet.rds.max_unacked_bytes = 16777216\n\
         net.rds.max_unacked_packets = 8\nnet.rds.ping_enable = 1\n\
         net.rds.reconnect_max_delay_ms = 1000\nnet.rds.reconnect_min_delay_ms = 1\n\
         net.rds.tcp.rds_tcp_rcvbuf = 0\nnet.rds.tcp.rds_tcp_sndbuf = 0\n"
    );
    assert_eq!(
        status(&run(&["get", "rds_tcp_sndbuf"]), 0),
        "net.rds.tcp.rds_tcp_sndbuf = 0\n"
    );
    // set: every form, several at once, written to /proc.
    assert_eq!(
        status(
            &run(&[
                "set",
                "max_unacked_packets=16",
                "max_send_wr",
                "512",
                "ping_enable",
                "=",
                "off"
            ]),
            0
        ),
        "net.rds.max_unacked_packets = 16\nnet.rds.ib.max_send_wr = 512\nnet.rds.ping_enable = 0\n"
    );
    assert_eq!(sys("max_unacked_packets"), "16\n");
    assert_eq!(sys("ib/max_send_wr"), "512\n");
    assert_eq!(sys("ping_enable"), "0\n");
    // -p: the sysctl.d file.
    assert_eq!(
        status(
            &run(&["set", "-p", "net.rds.tcp.rds_tcp_sndbuf=", "65536"]),
            0
        ),
        format!(
            "net.rds.tcp.rds_tcp_sndbuf = 65536\nsaved net.rds.tcp.rds_tcp_sndbuf = 65536 in {}\n",
            dropin.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&dropin).unwrap(),
        "# RDS sysctls kept by 'rds-ctrl set -p' (see rds-ctrl(8)).\n\
         net.rds.tcp.rds_tcp_sndbuf = 65536\n"
    );
    std::fs::write(root.join("proc/sys/net/rds/tcp/rds_tcp_sndbuf"), "0\n").unwrap();
    assert_eq!(
        status(&run(&["get", "-p", "rds_tcp_sndbuf"]), 0),
        "net.rds.tcp.rds_tcp_sndbuf = 65536\n"
    );
    // Refusals: range, this stack's own tunables, the AIX name with no equivalent, unknown.
    let out = run(&["set", "max_unacked_packets", "0"]);
    status(&out, 2);
    assert_eq!(
        stderr(&out),
        "rds-ctrl: net.rds.max_unacked_packets: value 0 out of range (1..1048576)\n"
    );
    let out = run(&["set", "rds_sendspace=65536"]);
    status(&out, 2);
    assert_eq!(
        stderr(&out),
        "rds-ctrl: net.rds.sndbuf_default is this stack's own tunable and does not apply to \
         the kernel's RDS, which runs here: the kernel's RDS sockets start with \
         net.core.wmem_default as their send buffer; set that with 'sysctl -w \
         net.core.wmem_default=BYTES'\n"
    );
    let out = run(&["set", "rds_mclustsize", "4096"]);
    status(&out, 2);
    assert!(stderr(&out).contains("rds_mclustsize is not applicable on this stack, because "));
    let out = run(&["get", "nope"]);
    status(&out, 2);
    assert!(stderr(&out).contains("unknown tunable 'nope': the kernel has no such sysctl under "));
    assert_eq!(sys("max_unacked_packets"), "16\n");
    // default: one, then all with -p.
    assert_eq!(
        status(&run(&["default", "max_unacked_packets"]), 0),
        "net.rds.max_unacked_packets = 8 (the default)\n"
    );
    assert_eq!(sys("max_unacked_packets"), "8\n");
    let out = run(&["default", "max_send_wr"]);
    status(&out, 2);
    assert!(stderr(&out).contains("its kernel default is not known here"));
    let s = status(&run(&["default", "-p"]), 0);
    assert!(s.contains("net.rds.ping_enable = 1 (the default)\n"), "{s}");
    assert!(
        s.ends_with(&format!(
            "removed every net.rds setting from {}\n",
            dropin.display()
        )),
        "{s}"
    );
    assert_eq!(sys("ping_enable"), "1\n");
    assert_eq!(sys("ib/max_send_wr"), "512\n");
    assert_eq!(
        std::fs::read_to_string(&dropin).unwrap(),
        "# RDS sysctls kept by 'rds-ctrl set -p' (see rds-ctrl(8)).\n"
    );
    // load and unload say what to do instead.
    let note = "the kernel's RDS is loaded on this host (rds, rds_tcp, rds_rdma); applications \
                and rds-tools use it. As root, 'modprobe rds_tcp' loads its TCP transport and \
                'modprobe rds_rdma' its InfiniBand/RoCE transport (ofed, aixib); 'modprobe -r \
                rds_tcp rds_rdma rds' unloads it, after which 'rds-ctrl load' can start this \
                stack's daemon";
    let out = run(&["load", "--addr", "127.24.2.1"]);
    status(&out, 1);
    assert_eq!(
        stderr(&out),
        format!("rds-ctrl: cannot load the RDS daemon: {note}\n")
    );
    assert!(!env.sock().exists());
    let out = run(&["unload"]);
    status(&out, 1);
    assert_eq!(
        stderr(&out),
        format!("rds-ctrl: no RDS daemon of this stack is loaded; {note}\n")
    );
}
