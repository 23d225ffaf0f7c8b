//! `rds-ctrl --json` (issue 22 item 4): one JSON document per run for `get`, `get -p`,
//! `health`, `ras`, `ras extract`, `version` and `stats`, with the field names of the JSON
//! SCHEMA section of rds-ctrl(8), the flag before or after the command, and the exit
//! statuses of the text forms. Against a daemon on 127.26.0.1 (its peer that refuses:
//! 127.26.0.3) and a fake kernel `/proc/sys/net/rds` (`RDS_CTRL_ROOT`).

mod common;

use common::{status, text, Daemon, Env};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
use rds_core::tunables::TUNABLES;
use serde_json::{json, Value};

const D: &str = "127.26.0.1";
const REFUSES: &str = "127.26.0.3";

/// Runs `rds-ctrl args…`, checks the status and that stdout is one JSON document.
#[track_caller]
fn doc(env: &Env, args: &[&str], code: i32) -> Value {
    parse(&status(&env.run(args), code))
}

#[track_caller]
fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[test]
fn documents_of_a_daemon() {
    let env = Env::new();
    let mut d = Daemon::load(&env, D);

    // get: the flag before or after the command, numbers as numbers.
    let all = doc(&env, &["--json", "get"], 0);
    assert_eq!(all, doc(&env, &["get", "--json"], 0));
    let m = all.as_object().unwrap();
    assert_eq!(m.len(), TUNABLES.len());
    let def = |n: &str| {
        TUNABLES
            .iter()
            .find(|t| t.name == n)
            .unwrap()
            .default_value()
    };
    // The same values as the text form, as numbers.
    for line in status(&env.run(&["get"]), 0).lines() {
        let (n, v) = line.split_once(" = ").unwrap();
        assert_eq!(m[n], json!(v.parse::<u64>().unwrap()), "{n}");
    }
    assert_eq!(
        m["net.rds.max_unacked_packets"],
        json!(def("net.rds.max_unacked_packets"))
    );
    status(&env.run(&["set", "max_unacked_packets=21"]), 0);
    assert_eq!(
        status(&env.run(&["get", "max_unacked_packets", "--json"]), 0),
        "{\n  \"net.rds.max_unacked_packets\": 21\n}\n"
    );
    // Asked by its AIX name, a tunable keeps that name.
    assert_eq!(
        doc(&env, &["--json", "get", "rds_sendspace"], 0),
        json!({"rds_sendspace": def("net.rds.sndbuf_default")})
    );
    // get -p: the persistent set (no config file: the defaults).
    let p = doc(&env, &["get", "-p", "--json"], 0);
    assert_eq!(p.as_object().unwrap().len(), TUNABLES.len());
    assert_eq!(
        p["net.rds.max_unacked_packets"],
        json!(def("net.rds.max_unacked_packets"))
    );
    // An unknown tunable: the error on stderr, nothing on stdout, status 2.
    let out = env.run(&["--json", "get", "nope"]);
    assert_eq!(status(&out, 2), "");

    // ras: the level.
    assert_eq!(
        doc(&env, &["ras", "--json"], 0),
        json!({"node": "daemon", "level": "normal", "ras_level": 2})
    );
    // ras extract: the ring, oldest first.
    let r = doc(&env, &["--json", "ras", "extract"], 0);
    assert_eq!(r["node"], "daemon");
    assert_eq!(r["level"], "normal");
    assert_eq!(r["ring_capacity"], 1024);
    assert_eq!(r["overwritten"], 0);
    let e0 = &r["events"][0];
    assert_eq!(e0["kind"], "ras");
    assert_eq!(e0["text"], "event ring started at level normal");
    assert!(e0["wall_ns"].as_u64().unwrap() > 1_500_000_000_000_000_000);
    let time = e0["time"].as_str().unwrap();
    // `YYYY-MM-DD HH:MM:SS.mmm`, the text form's time.
    let b = time.as_bytes();
    assert!(
        b.len() == 23 && b[4] == b'-' && b[10] == b' ' && b[19] == b'.',
        "{time}"
    );
    assert_eq!(
        e0["time"].as_str().unwrap(),
        rds_core::ras::utc_ms(e0["wall_ns"].as_u64().unwrap())
    );
    // Setting a level acts: text, with or without --json.
    assert_eq!(
        status(&env.run(&["--json", "ras", "normal"]), 0),
        "RAS level of node 'daemon' set to normal\n"
    );

    // version: the tool and the node that answers.
    let v = doc(&env, &["version", "--json"], 0);
    assert_eq!(
        v,
        json!({
            "tool": "rds-ctrl",
            "version": env!("CARGO_PKG_VERSION"),
            "rds_protocol": "3.1",
            "node": {
                "name": "daemon",
                "version": env!("CARGO_PKG_VERSION"),
                "rds_protocol": "3.1",
                "pid": d.pid,
            },
        })
    );

    // stats: the counters object, both spellings.
    let s = doc(&env, &["stats", "--json"], 0);
    assert_eq!(s["conn_reset"], 0);
    assert_eq!(s, doc(&env, &["--json", "stats"], 0));

    // info: --json passed on to rds-info, before or after `info`.
    for args in [
        &["--node", "daemon", "--json", "info", "-c"][..],
        &["--node", "daemon", "info", "--json", "-c"],
    ] {
        assert_eq!(doc(&env, args, 0)["counters"]["conn_reset"], 0, "{args:?}");
    }

    // health: healthy, status 0.
    let h = doc(&env, &["--json", "health"], 0);
    assert_eq!(h["node"], "daemon");
    assert_eq!(h["pid"], d.pid);
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(h["rds_protocol"], "3.1");
    assert!(h["uptime_s"].is_u64(), "{h}");
    assert_eq!(h["addresses"], json!([D]));
    assert!(h["transports"].as_array().unwrap().contains(&json!("tcp")));
    assert_eq!(h["sockets"], json!({"bound": 0, "congested": 0}));
    assert_eq!(h["connections"], json!([]));
    assert_eq!(h["drops"]["conn_reset"], 0);
    for (k, n) in [
        ("drops", rds_ctrl::health::DROP_COUNTERS),
        ("bounds", rds_ctrl::health::BOUND_COUNTERS),
        ("congestion", rds_ctrl::health::CONG_COUNTERS),
    ] {
        let o = h[k].as_object().unwrap();
        assert!(o.keys().all(|c| n.contains(&c.as_str())), "{k}: {o:?}");
        assert!(o.values().all(Value::is_u64), "{k}: {o:?}");
    }
    assert_eq!(h["status"], "OK");
    assert_eq!(h["critical"], json!([]));
    assert_eq!(h["warnings"], json!([]));
    assert_eq!(h["healthy"], true);

    // A message to a peer that refuses: the connection is not up with a message waiting;
    // health says so, CRITICAL (status 2).
    let mut c = CtlClient::connect(&env.sock()).unwrap();
    let tok = match c.call(&Request::SockOpen, &[]).unwrap().0 {
        Reply::Sock { sock } => sock,
        r => panic!("{r:?}"),
    };
    c.call(
        &Request::SockBind {
            sock: tok,
            addr: format!("{D}:4000").parse().unwrap(),
            transport: None,
        },
        &[],
    )
    .unwrap();
    c.call(
        &Request::SockSend {
            sock: tok,
            dest: Some(format!("{REFUSES}:4000").parse().unwrap()),
            dontwait: true,
            timeout_ms: None,
        },
        b"lost",
    )
    .unwrap();
    let h = doc(&env, &["health", "--json"], 2);
    assert_eq!(h["status"], "CRITICAL");
    assert_eq!(h["healthy"], false);
    assert_eq!(h["sockets"], json!({"bound": 1, "congested": 0}));
    let conns = h["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{h}");
    let c0 = &conns[0];
    assert_eq!(c0["local"], D);
    assert_eq!(c0["peer"], REFUSES);
    assert_eq!(c0["transport"], "tcp");
    assert_ne!(c0["path0"], "UP");
    assert_eq!(
        c0["send_queued"].as_u64().unwrap() + c0["retrans_queued"].as_u64().unwrap(),
        1
    );
    for f in ["paths_up", "paths", "reconnects", "next_tx", "next_rx"] {
        assert!(c0[f].is_u64(), "{f}: {c0}");
    }
    assert_eq!(h["warnings"], json!([]));
    let w = h["critical"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{h}");
    let w0 = w[0].as_str().unwrap();
    assert!(
        w0.starts_with(&format!("connection {D} -> {REFUSES} is "))
            && w0.ends_with(" (1 message(s) waiting)"),
        "{w0}"
    );
    drop(c);
    d.unload();
}

#[test]
fn without_a_node() {
    let env = Env::new();
    // version: no node answers, so no "node" field.
    assert_eq!(
        doc(&env, &["--json", "version"], 0),
        json!({"tool": "rds-ctrl", "version": env!("CARGO_PKG_VERSION"), "rds_protocol": "3.1"})
    );
    // health: UNKNOWN (status 3), the error in the document.
    let out = env
        .ctrl()
        .env("RDS_CTRL_ROOT", env.dir.path().join("no-kernel"))
        .args(["--json", "health"])
        .output()
        .unwrap();
    let h = parse(&status(&out, 3));
    assert_eq!(h["status"], "UNKNOWN");
    assert!(
        h["error"]
            .as_str()
            .unwrap()
            .contains("no RDS node is running"),
        "{h}"
    );
    assert_eq!(h.as_object().unwrap().len(), 2, "{h}");
    // Commands that need a node: the error on stderr, stdout empty, status 2.
    for args in [
        &["ras", "--json"][..],
        &["ras", "extract", "--json"],
        &["get", "--json"],
    ] {
        let out = env
            .ctrl()
            .env("RDS_CTRL_ROOT", env.dir.path().join("no-kernel"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(status(&out, 2), "", "{args:?}");
        assert!(text(&out.stderr).starts_with("rds-ctrl: "), "{args:?}");
    }
}

#[test]
fn get_on_a_kernel_host() {
    let env = Env::new();
    let root = env.dir.path().join("root");
    let d = root.join("proc/sys/net/rds");
    for (f, v) in [
        ("max_unacked_packets", "8"),
        ("ping_enable", "1"),
        ("tcp/rds_tcp_sndbuf", "0"),
        ("ib/max_send_wr", "256"),
        ("ib/some_range", "4096\t65536"),
        ("some_signed", "-1"),
    ] {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{v}\n")).unwrap();
    }
    let run = |args: &[&str]| {
        env.ctrl()
            .env("RDS_CTRL_ROOT", &root)
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(
        parse(&status(&run(&["--json", "get"]), 0)),
        json!({
            "net.rds.ib.max_send_wr": 256,
            "net.rds.ib.some_range": "4096 65536",
            "net.rds.max_unacked_packets": 8,
            "net.rds.ping_enable": 1,
            "net.rds.some_signed": -1,
            "net.rds.tcp.rds_tcp_sndbuf": 0,
        })
    );
    assert_eq!(
        parse(&status(&run(&["get", "rds_tcp_sndbuf", "--json"]), 0)),
        json!({"net.rds.tcp.rds_tcp_sndbuf": 0})
    );
    // -p: the sysctl.d file's values over the current ones.
    let dropin = root.join("etc/sysctl.d/90-rds.conf");
    std::fs::create_dir_all(dropin.parent().unwrap()).unwrap();
    std::fs::write(&dropin, "net.rds.max_unacked_packets = 12\n").unwrap();
    let v = parse(&status(&run(&["get", "-p", "--json"]), 0));
    assert_eq!(v["net.rds.max_unacked_packets"], 12);
    assert_eq!(v["net.rds.ping_enable"], 1);
    // The text form is unchanged.
    assert_eq!(
        status(&run(&["get", "some_range"]), 0),
        "net.rds.ib.some_range = 4096 65536\n"
    );
}
