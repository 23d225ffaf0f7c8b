//! The daemon under many clients at once and under a fuzzed control protocol (random bytes,
//! truncated frames, huge lengths, random JSON, random requests): it never crashes, keeps
//! answering, and unloads cleanly afterwards. The fuzz runs two fixed seeds and one from the
//! clock, each against a fresh daemon; a failure names its seed, and `RDS_FUZZ_SEED=<n>` runs
//! that seed alone.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{pid_alive, status, Daemon, Env};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{read_frame, Reply, Request};

#[test]
fn concurrent_clients() {
    let env = Env::new();
    let mut d = Daemon::load(&env, "127.0.0.55");
    let sock = env.sock();
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut c = CtlClient::connect(&sock).unwrap();
                for k in 0..100u64 {
                    c.info().unwrap();
                    c.stats().unwrap();
                    let v = c.tunables().unwrap();
                    assert_eq!(v.len(), rds_core::tunables::TUNABLES.len());
                    // Each thread owns one tunable value range; all are valid.
                    c.call_ok(&Request::TunableSet {
                        name: "max_unacked_packets".into(),
                        value: 1 + i * 1000 + k,
                    })
                    .unwrap();
                }
                // A client socket per thread, too.
                let tok = match c.call(&Request::SockOpen, &[]).unwrap().0 {
                    Reply::Sock { sock } => sock,
                    r => panic!("{r:?}"),
                };
                c.call(
                    &Request::SockBind {
                        sock: tok,
                        addr: format!("127.0.0.55:{}", 9000 + i).parse().unwrap(),
                        transport: None,
                    },
                    &[],
                )
                .unwrap();
            })
        })
        .collect();
    let procs: Vec<_> = (0..6)
        .map(|i| {
            let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("rds-ctrl"));
            c.env("RDS_RUNTIME_DIR", &env.run)
                .env("RDS_CONFIG", &env.conf)
                .args(if i % 2 == 0 { &["get"][..] } else { &["stats"] })
                .stdout(std::process::Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for mut p in procs {
        assert_eq!(p.wait().unwrap().code(), Some(0));
    }
    let s = status(&env.run(&["get", "max_unacked_packets"]), 0);
    let v: u64 = s.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1..=6000).contains(&v) && v % 1000 == 100, "{s}");
    // The sockets of the gone clients were closed with their connections.
    wait_until_sockets(&env, 0);
    d.unload();
}

fn wait_until_sockets(env: &Env, n: usize) {
    common::wait_until("client sockets to close", Duration::from_secs(10), || {
        CtlClient::connect(&env.sock())
            .and_then(|mut c| c.info())
            .is_ok_and(|i| i.sockets.len() == n)
    });
}

/// xorshift64*: a small deterministic generator for the fuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn some_bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max) as usize;
        self.bytes(n)
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len() as u64) as usize]
    }
}

fn json_value(r: &mut Rng, depth: u32) -> serde_json::Value {
    use serde_json::Value;
    match r.below(if depth > 3 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => Value::Bool(r.below(2) == 0),
        2 => Value::from(r.next() as i64),
        3 => Value::from(r.next()),
        4 => Value::String(String::from_utf8_lossy(&r.some_bytes(20)).into_owned()),
        5 => Value::Array((0..r.below(4)).map(|_| json_value(r, depth + 1)).collect()),
        _ => Value::Object(
            (0..r.below(4))
                .map(|_| (format!("k{}", r.below(5)), json_value(r, depth + 1)))
                .collect(),
        ),
    }
}

/// Every operation but `shutdown`, with fields of random types and values.
fn random_request(r: &mut Rng) -> serde_json::Value {
    let ops = [
        "hello",
        "info",
        "stats",
        "stats_reset",
        "tunables_get",
        "tunable_set",
        "tunable_default",
        "conn_restart",
        "conn_kill",
        "trace_start",
        "trace_stop",
        "sock_open",
        "sock_bind",
        "sock_connect",
        "sock_set",
        "sock_state",
        "sock_send",
        "sock_recv",
        "sock_cancel",
        "sock_wait",
        "sock_close",
        "ras_extract",
        "bogus",
    ];
    let fields = [
        "v",
        "name",
        "value",
        "laddr",
        "faddr",
        "snaplen",
        "peer",
        "port",
        "sock",
        "addr",
        "transport",
        "opt",
        "dest",
        "dontwait",
        "timeout_ms",
        "max",
        "peek",
        "rx",
        "tx",
    ];
    let mut m = serde_json::Map::new();
    m.insert("op".into(), r.pick(&ops).into());
    for _ in 0..r.below(6) {
        let f = r.pick(&fields);
        let v = match (f, r.below(3)) {
            ("laddr" | "faddr" | "peer", 0) => "127.0.0.56".into(),
            ("addr" | "dest", 0) => format!("127.0.0.56:{}", r.below(65536)).into(),
            ("sock", 0) => serde_json::Value::from(r.below(4)),
            ("name", 0) => r
                .pick(&[
                    "ping_enable",
                    "net.rds.tcp.rds_tcp_sndbuf",
                    "ras_level",
                    "x",
                ])
                .into(),
            ("timeout_ms", _) => serde_json::Value::from(r.below(50)),
            ("max", 0) => serde_json::Value::from(u64::MAX),
            ("opt", 0) => serde_json::json!({"name": "sndbuf", "value": r.below(1 << 20)}),
            _ => json_value(r, 0),
        };
        m.insert(f.into(), v);
    }
    serde_json::Value::Object(m)
}

fn frame(json: &[u8], data: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(json.len() as u32).to_be_bytes());
    f.extend_from_slice(&(data.len() as u32).to_be_bytes());
    f.extend_from_slice(json);
    f.extend_from_slice(data);
    f
}

/// Seeds every run fuzzes with; `RDS_FUZZ_SEED` replaces the whole set with its one seed.
const FIXED_SEEDS: [u64; 2] = [1, 0x5eed_c017_2026_0f0f];

/// Connections per seed.
const ITERATIONS: u32 = 2000;

/// The seeds of this run: `RDS_FUZZ_SEED` alone when set, else the fixed seeds and one from
/// the clock (which a failure message names, so the run can be replayed).
fn fuzz_seeds() -> Vec<u64> {
    if let Some(v) = std::env::var("RDS_FUZZ_SEED")
        .ok()
        .filter(|v| !v.is_empty())
    {
        let seed = v
            .parse()
            .unwrap_or_else(|e| panic!("RDS_FUZZ_SEED={v}: not a u64: {e}"));
        return vec![seed];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut seeds = FIXED_SEEDS.to_vec();
    seeds.push(clock);
    seeds
}

#[test]
fn fuzzed_control_protocol_never_hurts_the_daemon() {
    for seed in fuzz_seeds() {
        eprintln!("control-protocol fuzz: RDS_FUZZ_SEED={seed}");
        let run = std::panic::catch_unwind(|| fuzz_daemon(seed));
        if let Err(e) = run {
            let what = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("control-protocol fuzz failed; replay with RDS_FUZZ_SEED={seed}: {what}");
        }
    }
}

/// One fuzz run against a fresh daemon: everything it does follows from `seed`.
fn fuzz_daemon(seed: u64) {
    let ctx = format!("RDS_FUZZ_SEED={seed}");
    // splitmix64 of the seed: any seed (0 too) gives a well-mixed nonzero state.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let mut r = Rng((z ^ (z >> 31)) | 1);
    let env = Env::new();
    let mut d = Daemon::load(&env, "127.0.0.56");
    let path = env.sock();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answered = 0;
    for i in 0..ITERATIONS {
        assert!(
            Instant::now() < deadline,
            "{ctx}: fuzzing took too long (connection {i})"
        );
        let mut s = UnixStream::connect(&path)
            .unwrap_or_else(|e| panic!("{ctx}: connection {i}: connect: {e}"));
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let bytes = match i % 6 {
            // Garbage.
            0 => r.some_bytes(3000),
            // A truncated frame: the header promises more than comes.
            1 => {
                let mut f = frame(&r.bytes(200), &r.bytes(50));
                f.truncate(r.below(f.len() as u64) as usize);
                f
            }
            // Huge lengths.
            2 => {
                let mut f = Vec::new();
                f.extend_from_slice(&((1u32 << 20) + 1 + r.below(1 << 30) as u32).to_be_bytes());
                f.extend_from_slice(&(r.next() as u32).to_be_bytes());
                f
            }
            // Random JSON.
            3 => frame(
                json_value(&mut r, 0).to_string().as_bytes(),
                &r.some_bytes(100),
            ),
            // Random requests, several on one connection.
            _ => {
                let mut f = Vec::new();
                for _ in 0..1 + r.below(4) {
                    let req = random_request(&mut r).to_string();
                    f.extend(frame(req.as_bytes(), &r.some_bytes(64)));
                }
                f
            }
        };
        // Written in pieces, sometimes one byte at a time.
        let chunk = if r.below(10) == 0 { 1 } else { 4096 };
        for c in bytes.chunks(chunk) {
            if s.write_all(c).is_err() {
                break;
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
        // Replies, if any, must be well-formed frames.
        while let Ok((json, _)) = read_frame(&mut s) {
            let _: Reply = serde_json::from_slice(&json).unwrap_or_else(|e| {
                panic!(
                    "{ctx}: connection {i}: a reply the client cannot parse ({e}): {}",
                    String::from_utf8_lossy(&json)
                )
            });
            answered += 1;
        }
        drop(s);
        if i % 50 == 0 {
            let mut c = CtlClient::connect(&path)
                .unwrap_or_else(|e| panic!("{ctx}: after connection {i}: the daemon answers: {e}"));
            c.info()
                .unwrap_or_else(|e| panic!("{ctx}: after connection {i}: info: {e}"));
        }
    }
    assert!(answered > 100, "{ctx}: too few replies: {answered}");
    // Still alive and answering; a half-written frame left open does not block others.
    let mut half = UnixStream::connect(&path).unwrap();
    half.write_all(&[0, 0, 1, 0]).unwrap();
    let mut c =
        CtlClient::connect(&path).unwrap_or_else(|e| panic!("{ctx}: connect after fuzzing: {e}"));
    assert_eq!(c.hello.pid, d.pid, "{ctx}");
    c.info()
        .unwrap_or_else(|e| panic!("{ctx}: info after fuzzing: {e}"));
    assert!(pid_alive(d.pid), "{ctx}: the daemon died");
    let mut buf = [0u8; 1];
    half.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    assert!(
        half.read(&mut buf).is_err(),
        "{ctx}: no reply to half a frame"
    );
    drop(half);
    d.unload();
}
