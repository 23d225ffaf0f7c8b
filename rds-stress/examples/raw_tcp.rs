//! Raw TCP baseline for scripts/bench-stress.sh: the rds-stress traffic pattern (requests of
//! `req` bytes answered by acks of `ack` bytes, `depth` outstanding per flow, both directions,
//! `tasks`² flows) over plain TCP sockets on loopback, without RDS.
//!
//! Usage: raw_tcp REQ ACK DEPTH TASKS SECONDS; prints `tx_per_sec=<f> kib_per_sec=<f>` where
//! tx_per_sec counts requests sent by one side and kib_per_sec both sides' bytes, as
//! rds-stress's tx/s and tx+rx K/s columns.
//!
//! Two hosts (tests/tests/bench_lab_smp.rs runs it between the lab's guests): the same
//! arguments then `--listen ADDR:PORT` on the passive host, which accepts the TASKS² flows,
//! serves them until the peer closes them and prints nothing; and `--connect ADDR:PORT` on
//! the active one, which opens them, measures as above and prints the same line (its side's
//! requests and bytes). The passive side gives up after 1 + SECONDS + 120 seconds.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const REQ: u8 = 1;
const ACK: u8 = 2;

#[derive(Default)]
struct Flow {
    state: Mutex<(u32, u32)>, // (pending requests, acks owed)
    cv: Condvar,
}

/// Fills `buf` from `r`, waiting through read timeouts until `stop` is set; `Ok(false)` when
/// stopped, an error at the end of the stream.
fn fill(r: &mut impl Read, buf: &mut [u8], stop: &AtomicBool) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Relaxed) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One end of a flow: a writer keeps `depth` requests outstanding and sends owed acks; a
/// reader answers requests and retires acks.
fn end(
    s: TcpStream,
    req: usize,
    ack: usize,
    depth: u32,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    bytes: Option<Arc<AtomicU64>>,
) {
    s.set_nodelay(true).unwrap();
    let f = Arc::new(Flow::default());
    let r = s.try_clone().unwrap();
    let (f2, stop2, bytes2) = (f.clone(), stop.clone(), bytes.clone());
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; req.max(ack)];
        r.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut r = std::io::BufReader::with_capacity(256 << 10, r);
        // The end of the stream (the peer closed it) or an error stops every flow.
        while let Ok(true) = fill(&mut r, &mut buf[..1], &stop2) {
            let n = if buf[0] == REQ { req } else { ack };
            let Ok(true) = fill(&mut r, &mut buf[1..n], &stop2) else {
                break;
            };
            if let Some(b) = &bytes2 {
                b.fetch_add(n as u64, Relaxed);
            }
            let mut st = f2.state.lock().unwrap();
            if buf[0] == REQ {
                st.1 += 1;
            } else {
                st.0 -= 1;
            }
            f2.cv.notify_one();
        }
        stop2.store(true, Relaxed);
        f2.cv.notify_one();
    });
    let mut w = s;
    let mut reqm = vec![0u8; req];
    reqm[0] = REQ;
    let mut ackm = vec![0u8; ack];
    ackm[0] = ACK;
    while !stop.load(Relaxed) {
        let (acks, reqs) = {
            let mut st = f.state.lock().unwrap();
            while st.1 == 0 && st.0 >= depth && !stop.load(Relaxed) {
                st = f.cv.wait_timeout(st, Duration::from_millis(100)).unwrap().0;
            }
            let acks = st.1;
            st.1 = 0;
            let reqs = depth - st.0;
            st.0 = depth;
            (acks, reqs)
        };
        // One write per batch, as a stack that coalesces queued messages would.
        let mut out = Vec::with_capacity(acks as usize * ack + reqs as usize * req);
        for _ in 0..acks {
            out.extend_from_slice(&ackm);
        }
        for _ in 0..reqs {
            out.extend_from_slice(&reqm);
        }
        if w.write_all(&out).is_err() {
            return;
        }
        if let Some(b) = &bytes {
            b.fetch_add(out.len() as u64, Relaxed);
        }
        sent.fetch_add(u64::from(reqs), Relaxed);
    }
    let _ = reader.join();
}

/// Where the flows run: both ends here (on 127.0.0.2), or one end here and one on a peer.
enum Mode {
    Local,
    Listen(SocketAddr),
    Connect(SocketAddr),
}

/// Starts one end of each flow over `socks` (bytes counted when `bytes` is given).
fn ends(
    socks: Vec<TcpStream>,
    (req, ack, depth): (usize, usize, u32),
    stop: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
    bytes: Option<&Arc<AtomicU64>>,
) -> Vec<std::thread::JoinHandle<()>> {
    socks
        .into_iter()
        .map(|sock| {
            let (stop, sent, bytes) = (stop.clone(), sent.clone(), bytes.cloned());
            std::thread::spawn(move || end(sock, req, ack, depth, stop, sent, bytes))
        })
        .collect()
}

/// Warms up one second, measures `secs`, stops the flows and prints the line.
fn measure(secs: u64, stop: &AtomicBool, sent: &AtomicU64, bytes: &AtomicU64) {
    std::thread::sleep(Duration::from_secs(1));
    let (s0, b0, t0) = (sent.load(Relaxed), bytes.load(Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (s1, b1, el) = (
        sent.load(Relaxed),
        bytes.load(Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Relaxed);
    println!(
        "tx_per_sec={:.1} kib_per_sec={:.1}",
        (s1 - s0) as f64 / el,
        (b1 - b0) as f64 / el / 1024.0
    );
}

fn usage() -> ! {
    eprintln!(
        "usage: raw_tcp REQ ACK DEPTH TASKS SECONDS [--listen ADDR:PORT | --connect ADDR:PORT]"
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 5 && args.len() != 7 {
        usage();
    }
    let a: Vec<u64> = args[..5]
        .iter()
        .map(|x| x.parse().unwrap_or_else(|_| usage()))
        .collect();
    let (req, ack, depth, tasks, secs) = (a[0] as usize, a[1] as usize, a[2] as u32, a[3], a[4]);
    if req == 0 || ack == 0 || depth == 0 || tasks == 0 {
        usage();
    }
    let mode = match args.get(5).map(String::as_str) {
        None => Mode::Local,
        Some(flag) => {
            let addr: SocketAddr = args[6].parse().unwrap_or_else(|_| usage());
            match flag {
                "--listen" => Mode::Listen(addr),
                "--connect" => Mode::Connect(addr),
                _ => usage(),
            }
        }
    };
    let msg = (req, ack, depth);
    let flows = (tasks * tasks) as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    match mode {
        Mode::Local => local(msg, flows, secs, &stop, &sent, &bytes),
        Mode::Listen(addr) => {
            let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
            // Bounded: a peer that never comes (or never closes) ends the run with an error.
            let limit = Duration::from_secs(1 + secs + 120);
            std::thread::spawn(move || {
                std::thread::sleep(limit);
                eprintln!("raw_tcp --listen {addr}: not done after {limit:?}");
                std::process::exit(1);
            });
            let socks = (0..flows)
                .map(|_| l.accept().unwrap_or_else(|e| panic!("accept: {e}")).0)
                .collect();
            for h in ends(socks, msg, &stop, &sent, None) {
                let _ = h.join();
            }
        }
        Mode::Connect(addr) => {
            let socks = (0..flows)
                .map(|_| {
                    TcpStream::connect_timeout(&addr, Duration::from_secs(10))
                        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
                })
                .collect();
            let _hs = ends(socks, msg, &stop, &sent, Some(&bytes));
            measure(secs, &stop, &sent, &bytes);
        }
    }
    std::process::exit(0);
}

/// Both ends of every flow in this process, over 127.0.0.2.
fn local(
    msg: (usize, usize, u32),
    flows: usize,
    secs: u64,
    stop: &Arc<AtomicBool>,
    sent_a: &Arc<AtomicU64>,
    bytes: &Arc<AtomicU64>,
) {
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sent_b = Arc::new(AtomicU64::new(0));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..flows {
        a.push(TcpStream::connect(addr).unwrap());
        b.push(l.accept().unwrap().0);
    }
    // Bytes are counted at the first end only (sent and received), as rds-stress's tx+rx
    // column counts one side.
    let _ha = ends(a, msg, stop, sent_a, Some(bytes));
    let _hb = ends(b, msg, stop, &sent_b, None);
    measure(secs, stop, sent_a, bytes);
}
