//! One-way throughput of raw TCP and of RDS between two nodes, over loopback, in one run
//! (issue 3 item 6).
//!
//! ```text
//! rds-bench [--seconds S] [--sizes 64,4096,65536,1048576]
//! ```
//!
//! For each message size: a raw TCP connection 127.3.8.1 -> 127.3.8.2 where every message is
//! one `write(2)` and a reader drains the bytes, then an RDS socket on a node for 127.3.8.1
//! sending to a socket on a node for 127.3.8.2 (RDS/TCP, 8 lanes, one sender and one receiver
//! thread). Each run lasts `S` seconds (default 2) after a short warm-up; the receiver's count
//! decides. Prints messages/s, GB/s (10^9 bytes of payload per second) and the RDS/raw ratio.
//! Targets (issue 3): ≥ 80% of raw TCP for large messages, ≥ 1 M messages/s for small ones.
//!
//! Not a test: timing depends on the machine. Run it with
//! `cargo run -p rds-tests --release --bin rds-bench`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

const DEFAULT_SIZES: [usize; 4] = [64, 4096, 65536, 1 << 20];
const WARMUP: Duration = Duration::from_millis(300);

struct Result {
    msgs: u64,
    secs: f64,
}

impl Result {
    fn rate(&self) -> f64 {
        self.msgs as f64 / self.secs
    }
    fn gbps(&self, size: usize) -> f64 {
        self.rate() * size as f64 / 1e9
    }
}

/// Counts messages (or bytes) the receiver took between the end of the warm-up and the end
/// of the run.
struct Window {
    start: Instant,
    warm_end: Instant,
    end: Instant,
}

impl Window {
    fn new(run: Duration) -> Window {
        let start = Instant::now();
        Window {
            start,
            warm_end: start + WARMUP,
            end: start + WARMUP + run,
        }
    }
}

fn raw_tcp(size: usize, run: Duration) -> std::io::Result<Result> {
    let l = TcpListener::bind("127.3.8.2:0")?;
    let to = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let msg = vec![0x5au8; size];
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let sock = socket2_connect(to)?;
        let mut s = sock;
        s.set_nodelay(true)?;
        while !stop2.load(Ordering::Relaxed) {
            if s.write_all(&msg).is_err() {
                break;
            }
        }
        Ok(())
    });
    let (mut r, _) = l.accept()?;
    let w = Window::new(run);
    let mut buf = vec![0u8; 1 << 20];
    let (mut warm_bytes, mut bytes) = (None, 0u64);
    let mut t_first = w.warm_end;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        let now = Instant::now();
        if warm_bytes.is_none() && now >= w.warm_end {
            warm_bytes = Some(bytes);
            t_first = now;
        }
        if now >= w.end {
            break;
        }
    }
    let secs = t_first.elapsed().as_secs_f64().max(1e-9);
    stop.store(true, Ordering::Relaxed);
    drop(r);
    let _ = writer.join();
    let counted = bytes - warm_bytes.unwrap_or(bytes);
    Ok(Result {
        msgs: counted / size as u64,
        secs,
    })
}

/// A TCP connection from 127.3.8.1 (so that both ends use the benchmark's addresses).
fn socket2_connect(to: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )?;
    let (SocketAddr::V4(to), Ok(SocketAddr::V4(from))) = (to, "127.3.8.1:0".parse()) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    bind(fd.as_raw_fd(), &SockaddrIn::from(from))?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

fn node(ip: &str) -> std::io::Result<Node> {
    let mut cfg = NodeConfig::new([ip.parse().expect("a literal address")]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("bench-{ip}");
    Node::start(cfg)
}

fn rds(a: &Node, b: &Node, size: usize, run: Duration, port: u16) -> std::io::Result<Result> {
    let tx = Socket::with_node(a);
    tx.set_send_buffer_size(64 << 20);
    tx.bind(SocketAddr::new(a.addrs()[0], port))?;
    let rx = Socket::with_node(b);
    rx.set_recv_buffer_size(64 << 20);
    let dst = rx.bind(SocketAddr::new(b.addrs()[0], port))?;
    rx.set_read_timeout(Some(Duration::from_secs(5)));
    tx.set_write_timeout(Some(Duration::from_secs(5)));
    a.reset_stats();
    b.reset_stats();
    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let (waits, waited_ns) = (AtomicU64::new(0), AtomicU64::new(0));
    let msg = Bytes::from(vec![0xa5u8; size]);
    std::thread::scope(|sc| {
        let sender = sc.spawn(|| -> std::io::Result<()> {
            while !stop.load(Ordering::Relaxed) {
                // Try without blocking first, to count how often the sender waits for room.
                match tx.send_bytes(msg.clone(), Some(dst), true) {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => {
                        let t = Instant::now();
                        tx.send_bytes(msg.clone(), Some(dst), false)?;
                        waits.fetch_add(1, Ordering::Relaxed);
                        waited_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    }
                    Err(e) => return Err(e),
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        let w = Window::new(run);
        let (mut warm, mut got) = (None, 0u64);
        let mut t_first = w.warm_end;
        let r = loop {
            match rx.recv_bytes(size, RecvFlags::default()) {
                Ok(_) => got += 1,
                Err(e) => break Err(e),
            }
            // Reading the clock per message would cost as much as a small message.
            if got % 64 == 0 || size >= 4096 {
                let now = Instant::now();
                if warm.is_none() && now >= w.warm_end {
                    warm = Some(got);
                    t_first = now;
                }
                if now >= w.end {
                    break Ok(());
                }
            }
        };
        let secs = t_first.elapsed().as_secs_f64().max(1e-9);
        stop.store(true, Ordering::Relaxed);
        // Drain what is in flight so that the sender is not blocked on a full buffer.
        let total_deadline = Instant::now() + Duration::from_secs(10);
        rx.set_read_timeout(Some(Duration::from_millis(200)));
        while Instant::now() < total_deadline && !sender.is_finished() {
            let _ = rx.recv_bytes(size, RecvFlags::default());
        }
        while rx
            .recv_bytes(
                size,
                RecvFlags {
                    dontwait: true,
                    ..Default::default()
                },
            )
            .is_ok()
        {}
        sender
            .join()
            .map_err(|_| std::io::Error::other("sender panicked"))??;
        r?;
        let _ = w.start;
        if verbose() {
            eprintln!(
                "  rds {size} B: sender waited for room {} times, {:.3} s in all; {} sent",
                waits.load(Ordering::Relaxed),
                waited_ns.load(Ordering::Relaxed) as f64 / 1e9,
                sent.load(Ordering::Relaxed)
            );
            let pick = |n: &Node, names: &[&str]| {
                n.stats()
                    .into_iter()
                    .filter(|(k, _)| names.contains(k))
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            eprintln!(
                "  sender node: {}\n  receiver node: {}",
                pick(
                    a,
                    &[
                        "tcp_sndbuf_full",
                        "tcp_write_space_calls",
                        "send_drop_acked"
                    ]
                ),
                pick(b, &["tcp_data_ready_calls", "recv_delivered"])
            );
        }
        Ok(Result {
            msgs: got - warm.unwrap_or(got),
            secs,
        })
    })
}

/// `RDS_BENCH_VERBOSE=1`: timing counters of the RDS runs on stderr.
fn verbose() -> bool {
    std::env::var_os("RDS_BENCH_VERBOSE").is_some()
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("rds-bench: {msg}\nusage: rds-bench [--seconds S] [--sizes N[,N...]]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut run = Duration::from_secs(2);
    let mut sizes = DEFAULT_SIZES.to_vec();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => match args.next().and_then(|v| v.parse::<f64>().ok()) {
                Some(s) if s > 0.0 && s <= 60.0 => run = Duration::from_secs_f64(s),
                _ => return usage("--seconds needs a number in (0, 60]"),
            },
            "--sizes" => {
                let Some(v) = args.next() else {
                    return usage("--sizes needs a list");
                };
                let parsed: Option<Vec<usize>> = v
                    .split(',')
                    .map(|x| x.parse().ok().filter(|&n| n > 0 && n <= 1 << 20))
                    .collect();
                match parsed {
                    Some(p) if !p.is_empty() => sizes = p,
                    _ => return usage("--sizes needs sizes in 1..=1048576, comma-separated"),
                }
            }
            "-h" | "--help" => {
                println!("usage: rds-bench [--seconds S] [--sizes N[,N...]]");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let (a, b) = match (node("127.3.8.1"), node("127.3.8.2")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("rds-bench: cannot start the nodes: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "{:>9}  {:>14} {:>8}  {:>14} {:>8}  {:>6}",
        "size", "raw TCP msg/s", "GB/s", "RDS msg/s", "GB/s", "ratio"
    );
    for (i, &size) in sizes.iter().enumerate() {
        let raw = match raw_tcp(size, run) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rds-bench: raw TCP, {size} B: {e}");
                return ExitCode::from(1);
            }
        };
        let r = match rds(&a, &b, size, run, 5000 + i as u16) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rds-bench: RDS, {size} B: {e}");
                return ExitCode::from(1);
            }
        };
        println!(
            "{:>9}  {:>14.0} {:>8.3}  {:>14.0} {:>8.3}  {:>5.0}%",
            size,
            raw.rate(),
            raw.gbps(size),
            r.rate(),
            r.gbps(size),
            100.0 * r.rate() / raw.rate()
        );
    }
    a.shutdown();
    b.shutdown();
    ExitCode::SUCCESS
}
